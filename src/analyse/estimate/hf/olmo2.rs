//! OLMo-2's decoder layer (transformers 5.23, `Olmo2DecoderLayer`): no norm before attention
//! or the MLP, so the projections read the residual stream itself; q_norm and k_norm over the
//! whole (B, S, h·d_h) projections; a norm after attention and after the MLP, each before its
//! residual add. `Olmo2RMSNorm` multiplies by the weight before casting back, so the weight's
//! gradient keeps the fp32 x·r whatever the input's type; the fp32 RoPE tables promote the
//! rotated Q and K, which `apply_rotary_pos_emb` casts back to the projections' type.
use super::{attention, rms_norm, types, AttnGrad, Kernel, NormGrad};
use crate::analyse::estimate::{Ctx, Mode, Term, Unit};
use crate::model::hf::HfConfig;
use crate::model::ModelConfig;

/// OLMo-2's norm: input (or its fp32 copy) and r for the input's gradient, the fp32 x·r for
/// the weight's (frozen under peft); nothing keeps the output (the add, or RoPE's muls, which
/// keep cos/sin).
fn norm(c: &Ctx, t: &mut Vec<Term>, name: &str, unit: Unit, elem: u64, rows: (&str, u64), input: bool, weight: bool) {
    rms_norm(c, t, name, unit, elem, rows, &[], NormGrad { input, weight, output: false, product_fp32: true });
}

/// What a matmul reading the residual-stream tensor `what` keeps of it: the tensor itself, or
/// under autocast one low copy per linear (only weights' casts are cached).
fn kept_input(c: &Ctx, t: &mut Vec<Term>, what: &str, op: &'static str, readers: &[&str], elem: u64) {
    match c.mode {
        Mode::Autocast => {
            for r in readers {
                t.push(c.term(format!("{what} cast to {} for {r}", c.low_name), "_to_copy", Unit::A, 2));
            }
        }
        _ => t.push(c.term(format!("{what} ({} keep it)", readers.join("/")), op, Unit::A, elem)),
    }
}

/// One layer without checkpointing, in forward order; `x_grad`: whether its input needs a
/// gradient (always in full fine-tuning; under peft, not layer 0's: the embedding is frozen).
/// Under peft every weight but the adapters is frozen: a frozen linear keeps none of its input
/// (under autocast its weight's uncached cast instead), a frozen norm no x·r, and a tensor is
/// kept only where a gradient flows (hf.rs's layer).
pub(super) fn layer(c: &Ctx, cfg: &ModelConfig, hf: &HfConfig, kernel: Kernel, cache: bool, x_grad: bool) -> Vec<Term> {
    let ty = types(c, hf);
    let mut t = Vec::new();
    let lora = hf.lora.as_ref();
    let weights = lora.is_none();
    let adapted = |p: &str| lora.is_some_and(|l| l.targets(p));
    // A projection trains under peft through its adapter or its bias (attention_bias).
    let trains = |p: &str| adapted(p) || super::bias_trains(hf, p);
    // lora_A keeps the projection's input itself with fp32 weights and no dropout.
    let a_keeps_input = |p: &str| lora.is_some_and(|l| l.targets(p) && l.dropout == 0.0 && c.mode == Mode::Fp32);
    let x = weights || x_grad;
    // LLM.int8()'s MatMul8bitLt keeps its input for the input's gradient (hf.rs's layer).
    let int8 = hf.bnb.as_ref().is_some_and(|q| q.int8().is_some());
    let rows = ("B·S", c.b * c.s);
    let qkv = ["q_proj", "k_proj", "v_proj"];
    // The layer's input: layer 0's is the embedding output, the others the previous layer's.
    if weights {
        kept_input(c, &mut t, "layer input (layer 0's is the embedding output)", "add", &qkv, ty.model);
    } else if qkv.iter().any(|p| a_keeps_input(p)) || (int8 && x) {
        t.push(c.term("layer input (layer 0's is the embedding output; lora_A or MatMul8bitLt keeps it)", "add", Unit::A, ty.model));
    }
    let (qw, kvw) = (c.h * c.dk * c.d, c.kvh * c.dk * c.d);
    if !weights && x {
        super::frozen_cast(c, &mut t, "q_proj", "h·d_h·d", qw);
        super::frozen_cast(c, &mut t, "k_proj", "h_kv·d_h·d", kvw);
        super::frozen_cast(c, &mut t, "v_proj", "h_kv·d_h·d", kvw);
    }
    if let Some(lc) = lora {
        for p in qkv.into_iter().filter(|p| adapted(p)) {
            super::adapter(c, &mut t, lc, p, Unit::A, x);
        }
    }
    let (q, k, v) = (x || trains("q_proj"), x || trains("k_proj"), x || trains("v_proj"));
    let (qu, kvu) = (super::heads_unit(c, c.h), super::heads_unit(c, c.kvh));
    norm(c, &mut t, "q_norm", qu, ty.lo, rows, q, weights);
    norm(c, &mut t, "k_norm", kvu, ty.lo, rows, k, weights);
    attention(c, &mut t, cfg, hf, kernel, cache, AttnGrad { q, k, v, o_input: weights || a_keeps_input("o_proj") || (int8 && (q || k || v)) });
    if !weights && (q || k || v) {
        super::frozen_cast(c, &mut t, "o_proj", "d·h·d_h", qw);
    }
    if let Some(lc) = lora.filter(|_| adapted("o_proj")) {
        super::adapter(c, &mut t, lc, "o_proj", qu, q || k || v);
    }
    let o = q || k || v || trains("o_proj");
    norm(c, &mut t, "post_attention_layernorm", Unit::A, ty.lo, rows, o, weights);
    let h = x || o;
    let gate_up = ["gate_proj", "up_proj"];
    if weights {
        kept_input(c, &mut t, "h = x + post_attention_layernorm(attention)", "add", &gate_up, ty.model);
    } else if gate_up.iter().any(|p| a_keeps_input(p)) || (int8 && h) {
        t.push(c.term("h = x + post_attention_layernorm(attention) (lora_A or MatMul8bitLt keeps it)", "add", Unit::A, ty.model));
    }
    if !weights && h {
        super::frozen_cast(c, &mut t, "gate_proj", "F·d", c.f * c.d);
        super::frozen_cast(c, &mut t, "up_proj", "F·d", c.f * c.d);
    }
    if let Some(lc) = lora {
        for p in gate_up.into_iter().filter(|p| adapted(p)) {
            super::adapter(c, &mut t, lc, p, Unit::A, h);
        }
    }
    let (gate, up) = (h || trains("gate_proj"), h || trains("up_proj"));
    super::gated_mlp_factors(c, &mut t, gate, up, ("silu", "silu"), ty.lo);
    if weights || a_keeps_input("down_proj") || (int8 && (gate || up)) {
        t.push(c.term("silu·up (input of down_proj)", "mul", Unit::F, ty.lo));
    }
    if !weights && (gate || up) {
        super::frozen_cast(c, &mut t, "down_proj", "d·F", c.d * c.f);
    }
    if let Some(lc) = lora.filter(|_| adapted("down_proj")) {
        super::adapter(c, &mut t, lc, "down_proj", Unit::F, gate || up);
    }
    norm(c, &mut t, "post_feedforward_layernorm", Unit::A, ty.lo, rows, gate || up || trains("down_proj"), weights);
    t
}
