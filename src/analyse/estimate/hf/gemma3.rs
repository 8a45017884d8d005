//! Gemma 3's text model (transformers 5.23, `Gemma3DecoderLayer`): Gemma 2's layer (four
//! `GemmaRMSNorm`s, gelu_tanh; gemma.rs) without the score soft-cap, plus `q_norm` and `k_norm`
//! (`GemmaRMSNorm`s over d_h on the transposed heads, after all three projections, before
//! RoPE), a cos/sin pair per layer type present (the sliding layers' base
//! `rope_local_base_freq`), and two masks. Under sdpa the full layers get none
//! (`_ignore_causal_mask_sdpa`) and the sliding layers the window's boolean one once the window
//! is not longer than the keys: their kernel then sees a mask (no enable_gqa, so repeat_kv;
//! PyTorch's pick is the memory-efficient kernel, which keeps the additive mask
//! `convert_boolean_attn_mask` makes, its keys padded to 16), so the layer types keep
//! different tensors.
use super::{rms_norm, Kernel, NormGrad};
use crate::analyse::estimate::{Ctx, Term};
use crate::model::hf::gemma::GemmaConfig;
use crate::model::hf::{AttnImplementation, HfConfig};
use crate::model::{ConfigError, ModelConfig};
use crate::train::Precision;

/// Whether a layer's sdpa call gets the sliding mask: a sliding layer under sdpa whose keys
/// (S, in one forward) reach the window (`create_sliding_window_causal_mask` returns None below it).
pub(super) fn masked(hf: &HfConfig, g: &GemmaConfig, sliding: bool, s: usize) -> bool {
    hf.attn_implementation == AttnImplementation::Sdpa && sliding && s >= g.sliding_window
}

/// The config a layer's attention is derived from: a masked layer's carries a window, as the
/// simulation's `masked_layer` does, so the kernel choice, repeat_kv and the float mask follow.
pub(super) fn layer_hf(hf: &HfConfig, masked: bool) -> HfConfig {
    let mut h = hf.clone();
    if masked {
        h.sliding_window = Some(0);
    }
    h
}

/// The kernel of each layer type present, (sliding, kernel), full layers first.
pub(super) fn kernels(cfg: &ModelConfig, hf: &HfConfig, g: &GemmaConfig, precision: Precision, s: usize) -> Vec<(bool, Kernel)> {
    g.types().into_iter().map(|sliding| (sliding, super::kernel(cfg, &layer_hf(hf, masked(hf, g, sliding, s)), precision, s))).collect()
}

/// What the closed form derives of Gemma 3: eager, and sdpa with each layer type's kernel as
/// [`super::check_kernel`] allows (the memory-efficient kernel with the sliding mask included).
pub(super) fn check(cfg: &ModelConfig, hf: &HfConfig, precision: Precision, s: usize) -> Result<(), ConfigError> {
    let g = hf.gemma.as_ref().expect("Gemma 3's fields");
    if hf.attn_implementation == AttnImplementation::FlashAttention2 {
        return Err(ConfigError::new("--attn-implementation", "flash_attention_2 on gemma3_text (its window argument) is not derived in closed form; `profile` refuses it too: use eager or sdpa"));
    }
    for sliding in g.types() {
        super::check_kernel(cfg, &layer_hf(hf, masked(hf, g, sliding, s)), precision, s, true)?;
    }
    Ok(())
}

/// `q_norm` and `k_norm`, each where Q or K needs a gradient (`grads`): the projection's
/// output (or its fp32 copy), r and `1 + weight.float()` (d_h), kept by pow, x·r and the
/// product, and the fp32 x·r where the weight trains (not under peft); RoPE's muls keep
/// cos/sin, not the normed output.
pub(super) fn qk_norms(c: &Ctx, t: &mut Vec<Term>, hf: &HfConfig, elem: u64, grads: (bool, bool)) {
    let heads = [("q_norm", c.h, "B·S·h", grads.0), ("k_norm", c.kvh, "B·S·h_kv", grads.1)];
    for (name, n, rows, input) in heads.into_iter().filter(|h| h.3) {
        let unit = super::heads_unit(c, n);
        let g = NormGrad { input, weight: hf.lora.is_none(), output: false, product_fp32: true };
        rms_norm(c, t, name, unit, elem, (rows, c.b * c.s * n), &[], g);
        t.push(c.small(&format!("{name} 1 + weight.float() (the product keeps it)"), "add", "d_h", c.dk, 4));
    }
}
