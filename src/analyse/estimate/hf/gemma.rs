//! Gemma 2's decoder layer (transformers 5.23, `Gemma2DecoderLayer`, eager attention as the
//! model requires): four norms (input, post-attention, pre- and post-feedforward), each a
//! `Gemma2RMSNorm` that computes in fp32 and scales by `1 + weight.float()` (a (d,) fp32
//! tensor the product keeps, with the fp32 x·r), cast back to the input's type last; the
//! attention scores soft-capped (`/ c`, tanh, `· c`: tanh keeps its output); gelu_tanh in the
//! MLP (it keeps its input, as silu does).
use super::{attention, rms_norm, types, AttnGrad, Kernel, NormGrad, FULL};
use crate::analyse::estimate::{Ctx, Mode, Term, Unit};
use crate::model::hf::gemma::GemmaConfig;
use crate::model::hf::{Arch, AttnImplementation, HfConfig};
use crate::model::ModelConfig;

/// `Gemma2RMSNorm` with every gradient: input (or its fp32 copy), r, the fp32 x·r and
/// `1 + weight` (both kept by their product), and the output as `readers` keep it.
pub(super) fn norm(c: &Ctx, t: &mut Vec<Term>, name: &str, elem: u64, readers: &[&str]) {
    rms_norm(c, t, name, Unit::A, elem, ("B·S", c.b * c.s), readers, NormGrad { product_fp32: true, ..FULL });
    t.push(c.small(&format!("{name} 1 + weight.float() (the product keeps it)"), "add", "d", c.d, 4));
}

/// One layer without checkpointing, in forward order (Gemma 3's with its q/k norms; `hf` the
/// layer's, [`super::gemma3::layer_hf`]).
pub(super) fn layer(c: &Ctx, cfg: &ModelConfig, hf: &HfConfig, kernel: Kernel, cache: bool) -> Vec<Term> {
    let ty = types(c, hf);
    let mut t = Vec::new();
    norm(c, &mut t, "input_layernorm", ty.model, &["q_proj", "k_proj", "v_proj"]);
    if hf.model_type == Arch::Gemma3Text {
        super::gemma3::qk_norms(c, &mut t, ty.lo);
    }
    attention(c, &mut t, cfg, hf, kernel, cache, AttnGrad { q: true, k: true, v: true, o_input: true });
    if hf.gemma.as_ref().is_some_and(|g| g.attn_logit_softcapping.is_some()) {
        // The scores (the matmul's type) over the soft cap: tanh keeps its output.
        t.push(c.term("tanh(scores / attn_logit_softcapping) (tanh keeps its output)", "tanh", Unit::S, ty.lo));
    }
    // The o_proj output is the post-norm's input (new: counted here).
    norm(c, &mut t, "post_attention_layernorm", ty.lo, &[]);
    if c.mode != Mode::Pure {
        // In pure bf16 the norm keeps its own fp32 copy of h instead.
        t.push(c.term("h = x + post_attention_layernorm(attention) (pre_feedforward_layernorm keeps it)", "add", Unit::A, 4));
    }
    norm(c, &mut t, "pre_feedforward_layernorm", ty.model, &["gate_proj", "up_proj"]);
    t.push(c.term("gate_proj output (gelu_tanh keeps its input)", "mm", Unit::F, ty.lo));
    t.push(c.term("gelu_tanh(gate)", "gelu", Unit::F, ty.lo));
    t.push(c.term("up_proj output", "mm", Unit::F, ty.lo));
    t.push(c.term("gelu·up (input of down_proj)", "mul", Unit::F, ty.lo));
    norm(c, &mut t, "post_feedforward_layernorm", ty.lo, &[]);
    if c.mode != Mode::Pure {
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
