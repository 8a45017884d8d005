//! The parts of output file names that tell a run's variant from the reference run, so a
//! `--checkpoint blocks` or an eager-attention profile does not overwrite the baseline's files.
use crate::model::hf::{AttnImplementation, SdpaBackend};
use crate::model::{Checkpoint, ModelConfig};

/// The part of an output file name that tells a variant from the reference run, so a
/// `--checkpoint blocks` profile does not overwrite the baseline's snapshot: empty for the
/// reference, else `_flash`, `_checkpoint-blocks` / `_checkpoint-every-N`, `_fused-qkv`,
/// `_fused-gate-up` and `_accumN`, in that order.
pub fn file_tag(c: &ModelConfig, grad_accum_steps: usize) -> String {
    let mut tag = String::new();
    if c.attention == crate::model::Attention::Flash {
        tag.push_str("_flash");
    }
    match c.checkpoint {
        Checkpoint::None => {}
        Checkpoint::Every(1) => tag.push_str("_checkpoint-blocks"),
        Checkpoint::Every(n) => tag.push_str(&format!("_checkpoint-every-{n}")),
    }
    if c.checkpoint != Checkpoint::None && c.hf().is_some_and(|h| h.reentrant) {
        tag.push_str("-reentrant");
    }
    tag.push_str(&hf_tag(c));
    if c.fused_qkv {
        tag.push_str("_fused-qkv");
    }
    if c.fused_gate_up {
        tag.push_str("_fused-gate-up");
    }
    if grad_accum_steps > 1 {
        tag.push_str(&format!("_accum{grad_accum_steps}"));
    }
    tag
}

/// The part of an output file name that tells an hf run's non-default transformers options
/// apart (so an eager run does not overwrite the sdpa run's snapshot): `_eager`, `_fa2`,
/// `_sdpa-math`, `_no-cache`, `_keep-N`, `_mask-ones`, `_dora` (peft's use_dora), `-reentrant`
/// after the checkpoint tag, and bitsandbytes' weights: `_4bit`, `_8bit` (`_8bit-threshold-T`
/// for a threshold other than transformers' 6.0).
pub fn hf_tag(c: &ModelConfig) -> String {
    let Some(hf) = c.hf() else { return String::new() };
    let mut tag = String::new();
    match hf.attn_implementation {
        AttnImplementation::Eager => tag.push_str("_eager"),
        AttnImplementation::FlashAttention2 => tag.push_str("_fa2"),
        AttnImplementation::Sdpa if hf.sdpa_backend != SdpaBackend::Auto => tag.push_str(&format!("_sdpa-{}", hf.sdpa_backend)),
        AttnImplementation::Sdpa => {}
    }
    if !hf.use_cache {
        tag.push_str("_no-cache");
    }
    if hf.logits_to_keep > 0 {
        tag.push_str(&format!("_keep-{}", hf.logits_to_keep));
    }
    if hf.attention_mask {
        tag.push_str("_mask-ones");
    }
    if hf.lora.as_ref().is_some_and(|l| l.use_dora) {
        tag.push_str("_dora");
    }
    match hf.bnb.as_ref().map(|q| &q.quant) {
        None => {}
        Some(crate::model::bnb::Quant::FourBit(_)) => tag.push_str("_4bit"),
        Some(crate::model::bnb::Quant::Int8(i)) if i.threshold == 6.0 => tag.push_str("_8bit"),
        Some(crate::model::bnb::Quant::Int8(i)) => tag.push_str(&format!("_8bit-threshold-{}", i.threshold)),
    }
    tag
}
