//! `estimate --profile-type generate`'s flags, resolved into the session's [`GeneratePlan`]:
//! an hf model run as `profile --profile-type generate` models it (greedy or sampling with
//! GenerationConfig's options, DynamicCache, one device, no autocast; peft's LoRA (its bias,
//! DoRA and modules_to_save over unquantized weights), 4-bit and 8-bit weights, on issue 30's
//! models without peft's ParamWrapper): every hf model type, the MoE
//! ones under --routing balanced or worst.
use super::estimate::EstimateArgs;
use super::{usage, UsageError};
use crate::session::estimate_generate::GeneratePlan;
use anyhow::Result;

pub fn plan(a: &EstimateArgs, note: impl FnOnce(&str)) -> Result<GeneratePlan> {
    let n = match a.max_new_tokens {
        None => return Err(usage("--max-new-tokens", "is required with --profile-type generate (how many tokens generate() decodes)")),
        Some(0) => return Err(usage("--max-new-tokens", "must be at least 1")),
        Some(n) => n,
    };
    let r = a.model.resolve("walkthrough", super::model::Names::Cs336)?;
    // (Qwen2-MoE's window is derived: generate.rs's DynamicSlidingWindowLayer, checked against
    // the simulation of generate_qwen2_moe_sliding.json's points.)
    super::generate::check_static_only_window(r.config.hf(), false, true, "--config", "estimate --profile-type generate")?;
    if let Some(n) = &r.note {
        note(n);
    }
    let mut cfg = r.config;
    // generate() runs a 4-bit model as from_pretrained loads it unless
    // --prepare-model-for-kbit-training says otherwise (as profile).
    a.model.hf.unprepared_for_generate(&mut cfg);
    super::families::check_run(cfg.hf(), true)?;
    let (batch, seq) = super::estimate::batch_and_context(a, &r.preset, &mut cfg)?;
    let precision = a.precision.resolve_for(&mut cfg)?;
    let Some(hf) = cfg.hf() else {
        return Err(usage("--profile-type", format!("generate runs Hugging Face transformers' generate(): it needs an hf model (an hf preset such as Llama-3.2-1B, or --config config.json), not the {} flavour", cfg.flavour)));
    };
    // peft's unmerged LoRA and bitsandbytes' 4-bit weights are measured with generate on the
    // dense llama, mistral, qwen2 and qwen3 (generate_qlora.json) and on issue 30's models
    // (generate_models_adapters.json; what families::generate_adapters refuses aside, checked
    // above); peft's bias, DoRA and modules_to_save over unquantized weights
    // (generate_models_extras.json, generate_dense_extras.json) and LLM.int8() weights with plain
    // LoRA or none (generate_models_int8.json, generate_dense_extras.json): their cache is the
    // model's (in the unquantized parameters' type), the weights the simulation's, the
    // adapters', the weight norms' and dequantization's transients above the stated lower bound.
    // DoRA and modules_to_save over 4-bit or 8-bit weights are not measured (as profile).
    if let (Some(l), Some(q)) = (hf.lora.as_ref(), hf.bnb.as_ref()) {
        let flag = if l.use_dora {
            Some("--use-dora")
        } else if !l.modules_to_save.is_empty() {
            Some("--modules-to-save")
        } else {
            None
        };
        if let Some(flag) = flag {
            return Err(usage(flag, format!("over {} weights with generate is not measured (over unquantized weights it is: generate_models_extras.json, generate_dense_extras.json); drop one", q.bits())));
        }
    }
    if !hf.use_cache {
        return Err(usage("--use-cache", "false: generate() without a cache is not modelled"));
    }
    if hf.attention_mask {
        return Err(usage("--attention-mask", "an attention_mask passed to generate() is not modelled"));
    }
    if hf.logits_to_keep > 0 {
        return Err(usage("--logits-to-keep", "generate() sets logits_to_keep=1 itself: leave the flag out with --profile-type generate"));
    }
    if precision.autocast().is_some() {
        return Err(usage("--precision", format!("{precision}: generate() runs the weights' dtype (no autocast around it is modelled); give fp32 or pure-bf16")));
    }
    // What profile refuses of an MoE model's generate (the aux loss, a file's routing), and
    // Phi-3's cache drop past original_max_position_embeddings.
    super::moe::check_profile(&cfg, crate::engine::Device::Meta, true, batch, &[seq])?;
    super::families::check_generate(hf, seq, n)?;
    if seq + n > cfg.max_seq_len {
        return Err(usage("--max-new-tokens", format!("{n} new tokens after a {seq}-token prompt pass the model's {} positions (max_position_embeddings)", cfg.max_seq_len)));
    }
    crate::analyse::estimate::generate::check(&cfg, seq, n).map_err(UsageError::from)?;
    let window = crate::analyse::estimate::generate::window(&cfg);
    let generation = a.generate.resolve(n, window, super::generate::static_sliding_measured(hf))?;
    // The cache's closed form is the DynamicCache's (cache_utils.py's DynamicLayer).
    if generation.cache != crate::model::hf::generation_config::CacheImplementation::Dynamic {
        return Err(usage("--cache-implementation", "static: estimate's closed form derives the DynamicCache; `vramscope profile --profile-type generate --cache-implementation static --disable-compile` runs the StaticCache op for op"));
    }
    // Beam search keeps beams × rows, reorders the cache every step and holds its own
    // running/finished tensors: profile models it op for op; the closed form does not.
    if generation.num_beams > 1 {
        return Err(usage("--num-beams", format!("{}: estimate's closed form derives greedy search and sampling; `vramscope profile --profile-type generate --num-beams {}` runs beam search op for op", generation.num_beams, generation.num_beams)));
    }
    let rows = batch.checked_mul(generation.num_return_sequences).ok_or_else(|| usage("--num-return-sequences", "times --batch-size overflows"))?;
    // The closed form's products hold in 64 bits where the tensors' sizes do.
    cfg.check_sizes(rows, seq + n, "--context-length").map_err(UsageError::from)?;
    if !a.no_simulate {
        crate::session::host_memory::check_bookkeeping(cfg.num_layers, 0)?;
    }
    // A 4-bit model's unquantized parameters (its cache's type): fp32 once prepared, else the load type.
    let dtype = hf.bnb.as_ref().map_or(precision.param_dtype(), |q| q.unquantized_dtype());
    Ok(GeneratePlan { model: cfg, dtype, batch, seq, max_new_tokens: n, generation, simulate: !a.no_simulate })
}
