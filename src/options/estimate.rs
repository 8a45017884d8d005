//! `estimate`'s flags, resolved into the session's [`EstimatePlan`].
use super::model::ModelFlags;
use super::precision::PrecisionFlags;
use super::{usage, UsageError};
use crate::model::Flavour;
use crate::session::estimate::EstimatePlan;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct EstimateArgs {
    #[command(flatten)]
    pub model: ModelFlags,
    #[command(flatten)]
    pub precision: PrecisionFlags,
    #[command(flatten)]
    pub optim: super::optim::OptimFlags,
    /// Batch size B (default: the preset's)
    #[arg(help_heading = super::heading::RUN, long)]
    pub batch_size: Option<usize>,
    /// Sequence length (default: the preset's)
    #[arg(help_heading = super::heading::RUN, long, alias = "seq-len")]
    pub context_length: Option<usize>,
    /// What the step runs: a training step, or generate's KV cache
    ///
    /// training (the default) is what the derivation covers; generate (hf models, with
    /// --max-new-tokens): the DynamicCache and the peak of generate() in closed form; forward,
    /// forward-loss and inference are refused with the command that answers them
    /// (`profile --profile-type`).
    #[arg(help_heading = super::heading::RUN, long, value_enum, default_value = "training")]
    pub profile_type: crate::session::profile::ProfileType,
    /// GenerationConfig's max_new_tokens, with --profile-type generate
    #[arg(help_heading = super::heading::RUN, long)]
    pub max_new_tokens: Option<usize>,
    #[command(flatten)]
    pub generate: super::generate::GenerateFlags,
    /// Print the closed form only (no simulated meta run beside it)
    #[arg(help_heading = super::heading::RUN, long)]
    pub no_simulate: bool,
    /// Write the derivation and the simulated numbers as JSON to FILE
    ///
    /// Beside the text; with no FILE or `-`, print the JSON to stdout instead of the text (as
    /// `fit --json`).
    #[arg(help_heading = super::heading::OUTPUT, long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
}

/// The estimate `a` asks for, checked; `note` hears the model's note as soon as it is known.
pub fn plan(a: &EstimateArgs, note: impl FnOnce(&str)) -> Result<EstimatePlan> {
    if a.max_new_tokens.is_some() && a.profile_type != crate::session::profile::ProfileType::Generate {
        return Err(usage("--max-new-tokens", "sets generate()'s length: it needs --profile-type generate"));
    }
    if let Some(flag) = a.generate.first_given().filter(|_| a.profile_type != crate::session::profile::ProfileType::Generate) {
        return Err(usage(flag, "is an option of generate(): it needs --profile-type generate"));
    }
    if a.profile_type != crate::session::profile::ProfileType::Training {
        let t = a.profile_type.name();
        return Err(usage(
            "--profile-type",
            format!("estimate's closed form derives a training step only, not {t}; `vramscope profile --profile-type {t}` runs it op for op (on --device meta for any size)"),
        ));
    }
    let r = a.model.resolve("walkthrough", super::model::Names::Cs336)?;
    // (Qwen2-MoE's window is derived: analyse/estimate/hf.rs's terms, moe::window_layers.)
    super::generate::check_static_only_window(r.config.hf(), false, true, "--config", "estimate")?;
    // The closed form derives every MoE family's sparse blocks (analyse/estimate/hf/moe.rs,
    // gpt_oss.rs, deepseek.rs); what it does not derive of them is refused in its check.
    if let Some(n) = &r.note {
        note(n);
    }
    let mut cfg = r.config;
    let (batch, seq) = batch_and_context(a, &r.preset, &mut cfg)?;
    super::hf::check_with_labels(&cfg, seq)?;
    if cfg.flavour == Flavour::Tinyllama && seq < 2 {
        return Err(usage("--context-length", "tinyllama shifts logits and labels by one: needs at least 2"));
    }
    let precision = a.precision.resolve_for(&mut cfg)?;
    // bf16 autocast over bf16 weights (the Trainer's bf16=True on a bf16 checkpoint) and pure
    // fp16 weights (a float16 checkpoint, no autocast) are derived for every hf model type
    // (analyse/estimate.rs's Ctx::pure_autocast; pure fp16 keeps pure bf16's bytes); the cs336
    // and tinyllama forms are not written for them (their flags cannot ask for either).
    let refused = match precision {
        crate::train::Precision::PureFp16 | crate::train::Precision::PureBf16Autocast => cfg.hf().is_none(),
        _ => false,
    };
    if refused {
        return Err(usage(
            "--dtype",
            format!("the closed form derives fp32, autocast over fp32 weights and pure bf16 (and of the hf models bf16 autocast over bf16 weights and pure fp16); this run is {precision} (profile --device meta runs it op for op; --dtype float32 or bfloat16 for the closed form)"),
        ));
    }
    // An MoE model: what profile refuses, and a routing file must fit B·S tokens.
    super::moe::check_profile(&cfg, crate::engine::Device::Meta, false, batch, &[seq])?;
    // peft's bias on issue 30's models runs in profile (tests/lora_extras_models_grid.rs),
    // measured in the weights' dtype only (profile refuses it under autocast). The closed form
    // derives it on the dense families (OLMo-2's and Gemma's attention_bias, hf.rs's
    // bias_trains; Phi-3 has no biases), on Mixtral, Qwen3-MoE and Qwen2-MoE (only their
    // attention's biases, if any, can train), on gpt-oss (the attention's and the router's) and
    // on DeepSeek-V3 (attention_bias's q_a_proj, kv_a_proj_with_mqa and o_proj).
    if let Some(h) = cfg.hf() {
        super::lora_targets::check_new_models_autocast(h, precision)?;
        super::moe::check_aux_autocast(h, precision)?;
    }
    crate::analyse::estimate::hf::check(&cfg, precision, seq).map_err(UsageError::from)?;
    crate::analyse::estimate::check_range(&cfg, batch, seq).map_err(UsageError::from)?;
    let optim = a.optim.resolve(cfg.flavour, true)?;
    if cfg.hf().is_some_and(|h| h.lora.is_some()) {
        let params = cfg.hf().and_then(|h| h.lora.as_ref()).is_some_and(|l| !l.target_parameters.is_empty());
        let saves = cfg.modules_to_save_count() > 0 || cfg.hf().and_then(|h| h.lora.as_ref()).is_some_and(|l| l.use_dora);
        let ordered = cfg.lora_bias_count() == 0 && !params && !saves;
        if !crate::analyse::optimizer_estimate::derives_trainable(optim.kind, ordered) {
            let which = if ordered {
                "adamw_torch, adamw_torch_fused, adamw_torch_forloop, adafactor and sgd"
            } else if params {
                "adamw_torch, adamw_torch_fused and sgd (the for-loop and Adafactor follow the parameters' order, which the closed form does not derive with --target-parameters' adapters)"
            } else if saves {
                "adamw_torch, adamw_torch_fused and sgd (the for-loop and Adafactor follow the parameters' order, which the closed form does not derive with --modules-to-save's copies or DoRA's magnitude vectors)"
            } else {
                "adamw_torch, adamw_torch_fused and sgd (with --lora-bias trained biases interleave with the adapters)"
            };
            return Err(usage("--optimizer", format!("{}: over a LoRA model's trainable parameters the closed form derives {which}; the rest runs op for op in profile and fit (--device meta)", optim.kind)));
        }
    }
    if optim.kind.is_bitsandbytes() {
        return Err(usage("--optimizer", format!("{}: the closed form derives torch's optimizers; bitsandbytes' state runs op for op in profile and fit (--device meta)", optim.kind)));
    }
    if !a.no_simulate {
        cfg.check_sizes(batch, seq, "--context-length").map_err(UsageError::from)?;
        crate::session::host_memory::check_bookkeeping(cfg.num_layers, 0)?;
    }
    Ok(EstimatePlan { model: cfg, precision, batch, seq, optim, simulate: !a.no_simulate })
}

/// B and S of an estimate (the flags, else the preset's, S capped at the model's maximum),
/// each at least 1, with the model's sequence length following S as `profile`'s does.
pub(super) fn batch_and_context(a: &EstimateArgs, preset: &crate::model::presets::Preset, cfg: &mut crate::model::ModelConfig) -> Result<(usize, usize)> {
    let seq = a.context_length.unwrap_or(preset.seq_len.min(cfg.max_seq_len));
    let batch = a.batch_size.unwrap_or(preset.batch_size);
    if batch == 0 {
        return Err(usage("--batch-size", "must be at least 1"));
    }
    if seq == 0 {
        return Err(usage("--context-length", "must be at least 1"));
    }
    a.model.follow_seq_len(cfg, seq);
    cfg.check_seq_len(seq, "--context-length").map_err(UsageError::from)?;
    Ok((batch, seq))
}
