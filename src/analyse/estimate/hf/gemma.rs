//! Gemma 2's decoder layer (transformers 5.23, `Gemma2DecoderLayer`, eager attention as the
//! model requires): four norms (input, post-attention, pre- and post-feedforward), each a
//! `Gemma2RMSNorm` that computes in fp32 and scales by `1 + weight.float()` (a (d,) fp32
//! tensor the product keeps, with the fp32 x·r), cast back to the input's type last; the
//! attention scores soft-capped (`/ c`, tanh, `· c`: tanh keeps its output); gelu_tanh in the
//! MLP (it keeps its input, as silu does).
use super::{adapter, attention, frozen_cast, rms_norm, types, AttnGrad, Kernel, NormGrad, FULL};
use crate::analyse::estimate::{Ctx, Mode, Term, Unit};
use crate::model::hf::gemma::GemmaConfig;
use crate::model::hf::{Arch, AttnImplementation, HfConfig};
use crate::model::ModelConfig;

/// `Gemma2RMSNorm` keeping what `g` asks: with every gradient the input (or its fp32 copy), r,
/// the fp32 x·r and `1 + weight` (both kept by their product), and the output as `readers`
/// keep it; under peft the weight is frozen, so `1 + weight` needs no gradient: the product
/// keeps it (for the input's gradient) but not the fp32 x·r.
pub(super) fn norm_with(c: &Ctx, t: &mut Vec<Term>, name: &str, elem: u64, readers: &[&str], g: NormGrad) {
    rms_norm(c, t, name, Unit::A, elem, ("B·S", c.b * c.s), readers, NormGrad { product_fp32: true, ..g });
    if g.input {
        t.push(c.small(&format!("{name} 1 + weight.float() (the product keeps it)"), "add", "d", c.d, 4));
    }
}

/// One layer without checkpointing, in forward order (Gemma 3's with its q/k norms; `hf` the
/// layer's, [`super::gemma3::layer_hf`]); `x_grad`: whether its input needs a gradient (under
/// peft not layer 0's: the embedding is frozen). Under peft a tensor is kept only where a
/// gradient flows: a projection's output needs one when its input does or its adapter trains;
/// the norms' weights are frozen (Gemma's `1 + weight` is kept, x·r is not).
pub(super) fn layer(c: &Ctx, cfg: &ModelConfig, hf: &HfConfig, kernel: Kernel, cache: bool, x_grad: bool) -> Vec<Term> {
    let ty = types(c, hf);
    let mut t = Vec::new();
    let lora = hf.lora.as_ref();
    // Under peft a projection trains through its adapter or its bias (attention_bias).
    let trains = |p: &str| lora.is_none_or(|l| l.targets(p)) || super::bias_trains(hf, p);
    let adapted = |p: &str| lora.is_some_and(|l| l.targets(p));
    // With fp32 weights and no dropout lora_A keeps the projection's input itself.
    let a_keeps_input = |p: &str| lora.is_none_or(|l| l.targets(p) && l.dropout == 0.0 && c.mode == Mode::Fp32);
    // LLM.int8()'s MatMul8bitLt keeps its input for the input's gradient (hf.rs's layer).
    let int8 = hf.bnb.as_ref().is_some_and(|q| q.int8().is_some());
    let frozen = |input: bool, readers: &[&str]| match lora {
        None => FULL,
        Some(_) => NormGrad { input, weight: false, output: (int8 && input && !readers.is_empty()) || readers.iter().any(|r| a_keeps_input(r)), product_fp32: true },
    };
    let xg = lora.is_none() || x_grad;
    let qkv = ["q_proj", "k_proj", "v_proj"];
    norm_with(c, &mut t, "input_layernorm", ty.model, &qkv, frozen(xg, &qkv));
    let (qw, kvw) = (c.h * c.dk * c.d, c.kvh * c.dk * c.d);
    if lora.is_some() && xg {
        frozen_cast(c, &mut t, "q_proj", "h·d_h·d", qw);
        frozen_cast(c, &mut t, "k_proj", "h_kv·d_h·d", kvw);
        frozen_cast(c, &mut t, "v_proj", "h_kv·d_h·d", kvw);
    }
    if let Some(lc) = lora {
        for p in qkv.into_iter().filter(|p| adapted(p)) {
            adapter(c, &mut t, lc, p, Unit::A, xg);
        }
    }
    let (q, k, v) = (xg || trains("q_proj"), xg || trains("k_proj"), xg || trains("v_proj"));
    if hf.model_type == Arch::Gemma3Text {
        super::gemma3::qk_norms(c, &mut t, hf, ty.lo, (q, k));
    }
    attention(c, &mut t, cfg, hf, kernel, cache, AttnGrad { q, k, v, o_input: a_keeps_input("o_proj") || (int8 && (q || k || v)) });
    if hf.gemma.as_ref().is_some_and(|g| g.attn_logit_softcapping.is_some()) && (q || k) {
        // The scores (the matmul's type) over the soft cap: tanh keeps its output.
        t.push(c.term("tanh(scores / attn_logit_softcapping) (tanh keeps its output)", "tanh", Unit::S, ty.lo));
    }
    let o = q || k || v || trains("o_proj");
    if lora.is_some() && (q || k || v) {
        frozen_cast(c, &mut t, "o_proj", "d·h·d_h", qw);
    }
    if let Some(lc) = lora.filter(|_| adapted("o_proj")) {
        adapter(c, &mut t, lc, "o_proj", super::heads_unit(c, c.h), q || k || v);
    }
    // The o_proj output is the post-norm's input (new: counted here).
    norm_with(c, &mut t, "post_attention_layernorm", ty.lo, &[], frozen(o, &[]));
    let h = xg || o;
    if c.mode != Mode::Pure && h {
        // In pure bf16 the norm keeps its own fp32 copy of h instead.
        t.push(c.term("h = x + post_attention_layernorm(attention) (pre_feedforward_layernorm keeps it)", "add", Unit::A, 4));
    }
    let gate_up = ["gate_proj", "up_proj"];
    norm_with(c, &mut t, "pre_feedforward_layernorm", ty.model, &gate_up, frozen(h, &gate_up));
    if lora.is_some() && h {
        frozen_cast(c, &mut t, "gate_proj", "F·d", c.f * c.d);
        frozen_cast(c, &mut t, "up_proj", "F·d", c.f * c.d);
    }
    if let Some(lc) = lora {
        for p in gate_up.into_iter().filter(|p| adapted(p)) {
            adapter(c, &mut t, lc, p, Unit::A, h);
        }
    }
    let (gate, up) = (h || trains("gate_proj"), h || trains("up_proj"));
    super::gated_mlp_factors(c, &mut t, gate, up, ("gelu_tanh", "gelu"), ty.lo);
    if a_keeps_input("down_proj") || (int8 && (gate || up)) {
        t.push(c.term("gelu·up (input of down_proj)", "mul", Unit::F, ty.lo));
    }
    if lora.is_some() && (gate || up) {
        frozen_cast(c, &mut t, "down_proj", "d·F", c.d * c.f);
    }
    if let Some(lc) = lora.filter(|_| adapted("down_proj")) {
        adapter(c, &mut t, lc, "down_proj", Unit::F, gate || up);
    }
    let m = gate || up || trains("down_proj");
    norm_with(c, &mut t, "post_feedforward_layernorm", ty.lo, &[], frozen(m, &[]));
    if c.mode != Mode::Pure && (h || m) {
        t.push(c.term("layer output = h + post_feedforward_layernorm(mlp) (the next norm keeps it)", "add", Unit::A, 4));
    }
    t
}

/// What Gemma's model forward holds outside checkpointed layers: the mask of each layer type
/// present, which its checkpoints' closures capture (eager: the full and the sliding additive
/// masks, (B, 1, S, S) in the model's dtype; sdpa: the sliding layers' boolean mask, (1, 1, S,
/// S) expanded, once the window masks; a type no layer has is dropped when the model returns).
pub(super) fn checkpoint_masks(c: &Ctx, t: &mut Vec<Term>, hf: &HfConfig, g: &GemmaConfig, model_elem: u64) {
    for sliding in g.types() {
        let which = if sliding { "sliding-window" } else { "full" };
        if hf.attn_implementation == AttnImplementation::Eager {
            t.push(Term {
                what: format!("eager {which} mask (B, 1, S, S) in the model's dtype (the checkpoints' closures hold it)"),
                op: "where",
                formula: format!("B·S²·{model_elem}"),
                unit: Unit::Small,
                elements: c.b * c.s * c.s,
                elem: model_elem,
            });
        } else if super::gemma3::masked(hf, g, sliding, c.s as usize) {
            t.push(Term { what: "sdpa's boolean sliding-window mask (1, 1, S, S) expanded (the sliding checkpoints' closures hold it)".into(), op: "logical_and", formula: "S²·1".into(), unit: Unit::Small, elements: c.s * c.s, elem: 1 });
        }
    }
}

/// `hf` with Gemma's layer types cut to the model's `layers`: the model reads `sliding[i]` for
/// its layers only (a `--num-layers` below the config's keeps the longer list), so the layer
/// types present, the sliding layers' window tensors and RoPE pairs are those of the first
/// `layers`.
pub(super) fn trimmed(hf: &HfConfig, layers: usize) -> HfConfig {
    let mut h = hf.clone();
    if let Some(g) = h.gemma.as_mut() {
        g.sliding.truncate(layers);
    }
    h
}
