//! Issue 30's dense families (`model_type` phi3, olmo2, gemma2, gemma3_text): profile, training, gradient
//! checkpointing, the optimizers and fit run them (measured: tests/families_grid.rs), and generate()
//! (tests/generate_grid.rs), with LoRA and 4-bit weights too. What is not modelled for them yet is refused here,
//! naming the flag, before anything runs.
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

/// Run options not modelled for the families. generate() of Phi-3 and OLMo-2 is modelled
/// (tests/generate_grid.rs, generate_families.json; with adapters and 4-bit weights
/// generate_models_adapters.json, [`generate_adapters`]), within Phi-3's original positions
/// ([`check_generate`]); Gemma 2 and Gemma 3's with the DynamicCache (generate_gemma.json: its
/// DynamicSlidingWindowLayers and per-step sliding masks) and a StaticCache
/// (generate_static_sliding.json: StaticSlidingWindowLayers). Their parallel layouts are checked by
/// [`super::parallel_models::refusal`].
pub fn check_run(hf: Option<&HfConfig>, generate: bool) -> Result<()> {
    let Some(hf) = hf.filter(|h| h.model_type.is_family()) else { return Ok(()) };
    let name = hf.model_type.name();
    if generate {
        generate_adapters(hf, name)?;
    }
    Ok(())
}

/// Phi-3's `prepare_inputs_for_generation` drops the cache (and re-runs the whole sequence)
/// once the ids reach `original_max_position_embeddings` + 1 with a cache no longer than that:
/// not modelled, so a prompt and new tokens that get there are refused. The last forward's ids
/// are prompt + new tokens - 1 long.
pub fn check_generate(hf: &HfConfig, prompt: usize, max_new_tokens: usize) -> Result<()> {
    let Some(orig) = hf.original_max_position_embeddings.filter(|_| hf.model_type == crate::model::hf::Arch::Phi3) else { return Ok(()) };
    let longest = prompt.saturating_add(max_new_tokens) - 1;
    if longest > orig {
        return Err(usage(
            "--max-new-tokens",
            format!("a {prompt}-token prompt and {max_new_tokens} new tokens reach {longest} positions, past Phi-3's original_max_position_embeddings ({orig}): transformers 5.23's Phi3ForCausalLM.prepare_inputs_for_generation then drops the cache and re-runs the whole sequence, which is not modelled"),
        ));
    }
    Ok(())
}

/// generate() of issue 30's models with peft's unmerged LoRA on their nn.Linear modules and
/// bitsandbytes 4-bit weights, unprepared, is measured (generate_models_adapters.json: the nine
/// models, with and without adapters, the caches and windows of their own grids), and so are
/// peft's `bias` (all, lora_only), DoRA and modules_to_save over unquantized weights
/// (generate_models_extras.json; over 4-bit or 8-bit weights lora_targets::check_new_models
/// refuses the last two), and 8-bit weights and prepare_model_for_kbit_training
/// (generate_models_int8.json). What those points leave out is refused, naming the flag.
pub fn generate_adapters(hf: &HfConfig, name: &str) -> Result<()> {
    if let Some(l) = &hf.lora {
        if !l.target_parameters.is_empty() {
            // (peft converts mixtral's, qwen3_moe's and deepseek_v3's expert and router names,
            // all-linear included, into target_parameters.)
            return Err(usage(
                "--target-parameters",
                format!("(or --target-modules names peft converts into them, all-linear on mixtral, qwen3_moe and deepseek_v3) with generate on {name} is not modelled yet: peft's ParamWrapper folds each targeted expert weight with baddbmm at every forward, and 3 of the 6 measured points (generate_models_adapters.json) miss by 128 B to 3.5 KiB in the decode steps, where PyTorch's CPU baddbmm allocates scratch (oneDNN's packing of bf16 operands, a per-expert addmm_ temporary in fp32) the measurement has not separated from what CUDA allocates; LoRA on the attention's (and Qwen2-MoE's shared expert's) nn.Linear modules is measured"),
            ));
        }
    }
    // 8-bit weights (LLM.int8(), where lora_targets::check_new_models lets them load) and
    // prepare_model_for_kbit_training over 4-bit and 8-bit weights: generate_models_int8.json.
    Ok(())
}
