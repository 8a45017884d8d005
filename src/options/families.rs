//! Issue 30's dense families (`model_type` phi3, olmo2, gemma2, gemma3_text): profile, training, gradient
//! checkpointing, the optimizers and fit run them (measured: tests/families_grid.rs). What is not
//! modelled for them yet is refused here, naming the flag, before anything runs.
use super::usage;
use crate::model::hf::HfConfig;
use anyhow::Result;

/// The family's attention options (Gemma's), and what LoRA or bitsandbytes on it leaves
/// unmodelled (`lora_targets::check_new_models`; peft's targets are resolved per model by
/// `lora_targets::resolve`: Phi-3's fused `qkv_proj`/`gate_up_proj`).
pub fn check_flags(hf: &HfConfig, four_bit: bool, eight_bit: bool) -> Result<()> {
    if !hf.model_type.is_family() {
        return Ok(());
    }
    check_gemma(hf)?;
    super::lora_targets::check_new_models(hf, four_bit, eight_bit)
}

/// Gemma's attention options: transformers 5.23 itself refuses sdpa for gemma2
/// (`_supports_sdpa = False`: "does not support an attention implementation through
/// torch.nn.functional.scaled_dot_product_attention"); flash_attention_2 (with its softcap and
/// window arguments) and a padding mask composed with the sliding window are not measured.
fn check_gemma(hf: &HfConfig) -> Result<()> {
    use crate::model::hf::{Arch, AttnImplementation};
    if !hf.model_type.is_gemma() {
        return Ok(());
    }
    let name = hf.model_type.name();
    match hf.attn_implementation {
        AttnImplementation::Sdpa if hf.model_type == Arch::Gemma2 => {
            return Err(usage("--attn-implementation", "sdpa on model_type gemma2: transformers 5.23 refuses it (Gemma2 sets _supports_sdpa = False: sdpa has no score soft-capping); use eager, its default"));
        }
        AttnImplementation::FlashAttention2 => {
            return Err(usage("--attn-implementation", format!("flash_attention_2 on model_type {name} is not modelled yet (its soft-capping and window arguments); use eager or sdpa")));
        }
        _ => {}
    }
    if hf.attention_mask {
        return Err(usage("--attention-mask", format!("ones on model_type {name} is not modelled yet (the padding mask and-ed into both of Gemma's masks); leave it at none")));
    }
    Ok(())
}

/// Run options not modelled for the families: data or tensor parallelism (FSDP2/DTensor plans
/// of the fused projections) and generate().
pub fn check_run(hf: Option<&HfConfig>, parallel: Option<&crate::parallel::ParallelConfig>, generate: bool) -> Result<()> {
    let Some(hf) = hf.filter(|h| h.model_type.is_family()) else { return Ok(()) };
    let name = hf.model_type.name();
    if let Some(pc) = parallel {
        let flag = if pc.tp > 1 { "--tp" } else { "--parallel" };
        return Err(usage(flag, format!("model_type {name} under data or tensor parallelism is not modelled yet: profile one GPU (drop the parallel flags)")));
    }
    if generate {
        return Err(usage("--profile-type", format!("generate on model_type {name} is not modelled yet (these families' caches and masks in generate()); profile inference, forward or training")));
    }
    Ok(())
}
