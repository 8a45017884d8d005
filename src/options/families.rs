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
    // peft's ParamWrapper on the experts (and, converted from all-linear, the router) is
    // measured with generate too (generate_models_adapters.json: the five MoE models, bf16 and
    // fp32, grouped_mm and batched_mm; its fold's baddbmm copies lora_B's permuted factor,
    // ops::operand_copies), alone: not with the extras, measured without it.
    if let Some(l) = hf.lora.as_ref().filter(|l| !l.target_parameters.is_empty()) {
        let extras = [(l.bias != crate::model::lora::LoraBias::None, "--lora-bias"), (l.use_dora, "--use-dora"), (!l.modules_to_save.is_empty(), "--modules-to-save")];
        if let Some((_, flag)) = extras.iter().find(|e| e.0) {
            return Err(usage(flag, format!("with peft's ParamWrapper (--target-parameters, or --target-modules names peft converts into them) and generate on {name} is not measured (each is alone: generate_models_adapters.json, generate_models_extras.json): drop one")));
        }
    }
    // 8-bit weights (LLM.int8(), where lora_targets::check_new_models lets them load) and
    // prepare_model_for_kbit_training over 4-bit and 8-bit weights: generate_models_int8.json.
    Ok(())
}
