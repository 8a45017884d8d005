//! The mixture-of-experts options (`--experts-implementation`, `--routing`) and what an MoE
//! model is refused with: what vramscope does not model for one yet is an exit 2 naming the
//! flag, never a dense answer.
use super::usage;
use crate::engine::Device;
use crate::model::hf::moe::{ExpertsImplementation, Routing};
use crate::model::hf::HfConfig;
use crate::model::ModelConfig;

/// Set the experts implementation, the routing and the router's loss on an MoE model; any of
/// them on a dense model is refused, and so is the loss beside what aux_loss_lora.json does not
/// match (aux_loss_adapters).
pub fn apply(implementation: Option<&str>, routing: Option<&str>, output_router_logits: bool, hf: &mut HfConfig) -> anyhow::Result<()> {
    let Some(m) = hf.moe.as_mut() else {
        let given = [(implementation.is_some(), "--experts-implementation"), (routing.is_some(), "--routing"), (output_router_logits, "--output-router-logits")];
        if let Some(flag) = given.iter().find(|f| f.0).map(|f| f.1) {
            return Err(usage(flag, format!("applies to mixture-of-experts models (Mixtral, Qwen3-MoE, Qwen2-MoE, gpt-oss, DeepSeek-V3); this {} model is dense", hf.model_type.name())));
        }
        return Ok(());
    };
    if let Some(s) = implementation {
        m.implementation = ExpertsImplementation::parse(s).ok_or_else(|| usage("--experts-implementation", format!("'{s}' (expected grouped_mm, batched_mm or eager)")))?;
    }
    if let Some(s) = routing {
        m.routing = parse_routing(s)?;
    }
    if output_router_logits {
        if m.family == crate::model::hf::moe::MoeFamily::DeepseekV3 {
            return Err(usage(
                "--output-router-logits",
                "deepseek_v3 has no router auxiliary loss in transformers 5.23 (DeepseekV3ForCausalLM never calls load_balancing_loss_func); the flag would only keep the routers' fp32 logits in the output, which is not modelled",
            ));
        }
        // The coefficient stays the config's (or its class default).
        m.output_router_logits = true;
    }
    if m.family == crate::model::hf::moe::MoeFamily::GptOss {
        // GptOssPreTrainedModel: `_supports_sdpa = False` (transformers raises), and its flash
        // attention needs the sink-aware hub kernels.
        if hf.attn_implementation != crate::model::hf::AttnImplementation::Eager {
            return Err(usage("--attn-implementation", format!("{} on gpt_oss is not modelled: transformers 5.23 runs gpt-oss's attention sinks eagerly (sdpa is refused by the model, flash attention needs hub kernels); use eager", hf.attn_implementation.name())));
        }
    }
    if let Some(ds) = &m.deepseek {
        use crate::model::hf::{AttnImplementation, SdpaBackend};
        match hf.attn_implementation {
            // flash_attention_2 pads v to q's head size and crops the output: not modelled.
            AttnImplementation::FlashAttention2 => {
                return Err(usage("--attn-implementation", "flash_attention_2 on deepseek_v3 is not modelled (transformers pads v to the q/k head size for it); use sdpa or eager".to_string()))
            }
            // With v's head size unlike q's, CUDA's SDPA picks among kernels vramscope does not
            // model for unequal sizes; the CPU kernel choice (the math fallback) is measured.
            AttnImplementation::Sdpa if ds.v_head_dim != ds.qk_head_dim() && !matches!(hf.sdpa_backend, SdpaBackend::CpuFlash | SdpaBackend::Math) => {
                return Err(usage(
                    "--attn-implementation",
                    format!(
                        "sdpa on deepseek_v3 with v_head_dim {} unlike the q/k head size {} is modelled only for --sdpa-backend cpu_flash (PyTorch's CPU falls back to math) or math; CUDA's kernel choice for unequal sizes is not: use eager, or name one of those backends",
                        ds.v_head_dim,
                        ds.qk_head_dim()
                    ),
                ))
            }
            _ => {}
        }
    }
    if hf.moe.as_ref().is_some_and(|m| m.output_router_logits) {
        aux_loss_adapters(hf)?;
    }
    // LoRA's targets were resolved per family (lora_targets::resolve); what the MoE LoRA/QLoRA
    // grids did not measure is refused here.
    let (four, eight) = hf.bnb.as_ref().map_or((false, false), |q| (q.four_bit().is_some(), q.int8().is_some()));
    super::lora_targets::check_new_models(hf, four, eight)
}

/// The router's loss beside peft's LoRA or a 4-bit load, as moe_grid/aux_loss_lora.json measured
/// it (`make_aux_loss_grid.py --lora`): adapters on nn.Linear targets and on the router's weight,
/// nf4/fp4 loads with or without double quant, compute bf16 or fp32, prepared or not. What the
/// grid did not cover, or missed, is refused.
fn aux_loss_adapters(hf: &HfConfig) -> anyhow::Result<()> {
    const WHY: &str = "(or the config's output_router_logits)";
    if let Some(q) = &hf.bnb {
        let Some(four) = q.four_bit() else {
            return Err(usage("--output-router-logits", format!("{WHY} with {} is not measured yet (LoRA and 4-bit loads with the loss are: moe_grid/aux_loss_lora.json): drop one", q.flag())));
        };
        if four.quant_storage != crate::engine::DType::U8 {
            return Err(usage("--bnb-4bit-quant-storage", format!("{} with the router's auxiliary loss {WHY} is not measured (moe_grid/aux_loss_lora.json loads uint8 storage): drop one", four.quant_storage)));
        }
    }
    let Some(l) = &hf.lora else { return Ok(()) };
    let unmeasured = [(l.use_dora, "--use-dora", "DoRA"), (!l.modules_to_save.is_empty(), "--modules-to-save", "peft's modules_to_save"), (l.bias != crate::model::lora::LoraBias::None, "--lora-bias", "peft's bias"), (l.dropout != 0.0, "--lora-dropout", "LoRA dropout")];
    if let Some((_, flag, what)) = unmeasured.iter().find(|u| u.0) {
        return Err(usage(flag, format!("{what} with the router's auxiliary loss {WHY} is not measured (moe_grid/aux_loss_lora.json runs LoRA without it): drop one")));
    }
    Ok(())
}

/// The loss beside adapters or a 4-bit load is measured with the weights in their dtype, not
/// under autocast (aux_loss_autocast.json and lora_autocast.json measure each alone).
pub fn check_aux_autocast(hf: &HfConfig, precision: crate::train::Precision) -> anyhow::Result<()> {
    if precision.autocast().is_none() || !hf.moe.as_ref().is_some_and(|m| m.output_router_logits) || (hf.lora.is_none() && hf.bnb.is_none()) {
        return Ok(());
    }
    Err(usage("--output-router-logits", format!("(or the config's output_router_logits) with peft's adapters or a 4-bit load under {precision} autocast is not measured (moe_grid/aux_loss_lora.json runs the weights in their dtype; aux_loss_autocast.json and lora_autocast.json each alone): drop the autocast precision or one of them")))
}

/// `--routing`: balanced, worst, or a file of per-expert token counts.
pub fn parse_routing(s: &str) -> anyhow::Result<Routing> {
    match s {
        "balanced" => return Ok(Routing::Balanced),
        "worst" => return Ok(Routing::Worst),
        _ => {}
    }
    let text = std::fs::read_to_string(s).map_err(|e| usage("--routing", format!("'{s}' is neither balanced, worst nor a readable file of per-expert counts: {e}")))?;
    let counts = text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .map(|w| w.parse::<usize>().map_err(|_| usage("--routing", format!("{s}: '{w}' is not a token count"))))
        .collect::<anyhow::Result<Vec<usize>>>()?;
    if counts.is_empty() {
        return Err(usage("--routing", format!("{s} holds no counts")));
    }
    Ok(Routing::Counts(counts))
}

/// What a profile of an MoE model refuses: its values on cpu (the routing is an assumption,
/// not data), and a routing file that does not fit the batch (or any generate run: `--routing`
/// applies to each forward's token count). Its parallel layouts are checked by
/// [`super::parallel_models::refusal`]. Autocast (the Trainer's bf16=True / fp16=True) runs on
/// every family, measured by the grids of tests/moe_grid.rs (autocast.json,
/// autocast_gpt_oss_deepseek.json, autocast_fp16.json, deepseek_sdpa_autocast.json: the math
/// fallback of DeepSeek-V3's unequal head sizes), tests/aux_loss_grid.rs
/// (aux_loss_autocast.json) and tests/moe_lora_autocast_grid.rs (lora_autocast.json); fp16 over
/// bf16 weights is refused for every model by `Precision::on_weights`.
pub fn check_profile(c: &ModelConfig, device: Device, generate: bool, batch: usize, contexts: &[usize]) -> anyhow::Result<()> {
    let Some(m) = c.hf().and_then(|h| h.moe.as_ref()) else { return Ok(()) };
    let family = m.family.model_type();
    if device == Device::Cpu {
        return Err(usage("--device", format!("a mixture-of-experts model ({family}) runs on meta only: its routing is --routing's assumption, not data")));
    }
    // DeepSeek-V3 whose layers are all dense has no sparse block for target_parameters to match:
    // without module adapters peft adapts nothing.
    if let (Some(ds), Some(lc)) = (m.deepseek.as_ref(), c.hf().and_then(|h| h.lora.as_ref())) {
        if lc.targets.is_empty() && !lc.target_parameters.is_empty() && ds.first_k_dense >= c.num_layers {
            return Err(usage(
                "--target-parameters",
                format!("matches nothing on deepseek_v3 whose {} layers are all dense (first_k_dense_replace {}): without --target-modules peft 0.21.2 raises NoMatchingPeftModuleError (\"No `target_modules` passed but also no `target_parameters` found\")", c.num_layers, ds.first_k_dense),
            ));
        }
    }
    if generate {
        // Measured: tests/generate_grid.rs (generate_moe.json, generate_gpt_oss.json: gpt-oss's
        // sliding layers' DynamicSlidingWindowLayer; generate_deepseek.json: DeepSeek-V3's
        // DynamicCache of MLA latents; generate_static_families.json: its StaticCache, and
        // Mixtral's over a sliding window; generate_models_adapters.json: LoRA on the nn.Linear
        // modules and 4-bit weights, what generate_adapters refuses aside).
        if let Some(hf) = c.hf() {
            super::families::generate_adapters(hf, family)?;
        }
        // Each of generate()'s forwards would run the aux loss on its own logits: not measured.
        if m.output_router_logits {
            return Err(usage("--output-router-logits", format!("(or the config's output_router_logits) with generate on {family} is not modelled: generate() would run the router's auxiliary loss in every forward; leave it off for generate")));
        }
        // A file's counts are for one token count; generate's forwards have rows x prompt
        // tokens, then one per row.
        if matches!(m.routing, crate::model::hf::moe::Routing::Counts(_)) {
            return Err(usage("--routing", "a file of per-expert counts fixes one forward's token count; generate() runs the prompt's tokens, then one per row each decode step: give balanced or worst"));
        }
    }
    for &ctx in contexts {
        let tokens = batch.checked_mul(ctx).ok_or_else(|| usage("--batch-size", "batch × context overflows"))?;
        m.routing.counts(tokens, m.top_k, m.experts).map_err(|e| usage("--routing", e.trim_start_matches("--routing: ").to_string()))?;
    }
    Ok(())
}

/// The refusal of a command that has no MoE path yet, naming the flag that chose the model.
pub fn refuse(c: &ModelConfig, model: &super::model::ModelFlags, command: &str) -> anyhow::Result<()> {
    let flag = if model.config.is_some() { "--config" } else { "--preset" };
    match c.hf().and_then(|h| h.moe.as_ref()) {
        Some(m) => Err(usage(flag, format!("{command} of a mixture-of-experts model ({}) is not modelled yet: use profile", m.family.model_type()))),
        None => Ok(()),
    }
}
