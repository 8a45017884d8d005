//! OLMo-2's decoder layer (transformers 5.23, `Olmo2DecoderLayer`): no norm before attention
//! or the MLP, so the projections read the residual stream itself; q_norm and k_norm over the
//! whole (B, S, h·d_h) projections; a norm after attention and after the MLP, each before its
//! residual add. `Olmo2RMSNorm` multiplies by the weight before casting back, so the weight's
//! gradient keeps the fp32 x·r whatever the input's type; the fp32 RoPE tables promote the
//! rotated Q and K, which `apply_rotary_pos_emb` casts back to the projections' type.
use super::{attention, rms_norm, types, AttnGrad, Kernel, NormGrad, FULL};
use crate::analyse::estimate::{Ctx, Mode, Term, Unit};
use crate::model::hf::HfConfig;
use crate::model::ModelConfig;

/// OLMo-2's norm with every gradient (full fine-tuning): input (or its fp32 copy), r, and the
/// fp32 x·r; nothing keeps the output (the add, or RoPE's muls, which keep cos/sin).
fn norm(c: &Ctx, t: &mut Vec<Term>, name: &str, unit: Unit, elem: u64, rows: (&str, u64)) {
    rms_norm(c, t, name, unit, elem, rows, &[], NormGrad { product_fp32: true, ..FULL });
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

/// One layer without checkpointing, in forward order.
pub(super) fn layer(c: &Ctx, cfg: &ModelConfig, hf: &HfConfig, kernel: Kernel, cache: bool) -> Vec<Term> {
    let ty = types(c, hf);
    let mut t = Vec::new();
    // The layer's input: layer 0's is the embedding output, the others the previous layer's.
    kept_input(c, &mut t, "layer input (layer 0's is the embedding output)", "add", &["q_proj", "k_proj", "v_proj"], ty.model);
    let (qu, kvu) = (super::heads_unit(c, c.h), super::heads_unit(c, c.kvh));
    norm(c, &mut t, "q_norm", qu, ty.lo, ("B·S", c.b * c.s));
    norm(c, &mut t, "k_norm", kvu, ty.lo, ("B·S", c.b * c.s));
    attention(c, &mut t, cfg, hf, kernel, cache, AttnGrad { q: true, k: true, v: true, o_input: true });
    norm(c, &mut t, "post_attention_layernorm", Unit::A, ty.lo, ("B·S", c.b * c.s));
    kept_input(c, &mut t, "h = x + post_attention_layernorm(attention)", "add", &["gate_proj", "up_proj"], ty.model);
    // silu keeps its input and the product each factor for the other's gradient.
    t.push(c.term("gate_proj output (silu keeps its input)", "mm", Unit::F, ty.lo));
    t.push(c.term("silu(gate)", "silu", Unit::F, ty.lo));
    t.push(c.term("up_proj output", "mm", Unit::F, ty.lo));
    t.push(c.term("silu·up (input of down_proj)", "mul", Unit::F, ty.lo));
    norm(c, &mut t, "post_feedforward_layernorm", Unit::A, ty.lo, ("B·S", c.b * c.s));
    t
}
