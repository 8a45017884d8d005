//! `profile`'s flags (also the vocabulary of what runs profiles: compare, sweep, fit,
//! run-all, and the Python package's `profile()`), and their resolution into the session's
//! [`ProfileOptions`].
use super::memory::MemoryFlags;
use super::model::ModelFlags;
use super::precision::PrecisionFlags;
use super::{usage, UsageError};
use crate::engine::Device;
use crate::model::Flavour;
use crate::record::allocator::AllocatorConfig;
use crate::record::gpu;
use crate::session::profile::{ProfileOptions, ProfileType, DEFAULT_MAX_ENTRIES};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    #[command(flatten)]
    pub model: ModelFlags,
    #[command(flatten)]
    pub precision: PrecisionFlags,
    #[command(flatten)]
    pub memory: MemoryFlags,
    #[command(flatten)]
    pub optim: super::optim::OptimFlags,
    #[command(flatten)]
    pub parallel: super::parallel::ParallelFlags,
    #[command(flatten)]
    pub generate: super::generate::GenerateFlags,
    /// Sequence length(s), comma separated (default: the preset's)
    #[arg(help_heading = super::heading::RUN, long)]
    pub context_length: Option<String>,
    /// Batch size B (default: the preset's)
    #[arg(help_heading = super::heading::RUN, long)]
    pub batch_size: Option<usize>,
    /// Steps run before recording (optimizer state exists after one training step)
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 1)]
    pub warmup_steps: usize,
    /// Steps recorded into the snapshot
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 1)]
    pub measure_steps: usize,
    /// Trace entries the snapshot keeps, as `_record_memory_history(max_entries=…)`
    ///
    /// A ring buffer that drops the oldest entries when full (default: CS336's
    /// profile_memory.py value).
    #[arg(help_heading = super::heading::OUTPUT, long, default_value_t = DEFAULT_MAX_ENTRIES)]
    pub max_entries: usize,
    /// What one step runs; a comma list runs each (a column per type in the peak table)
    ///
    /// forward: `model(x)` with autograd, no loss; forward-loss: the same plus the loss, no
    /// backward; inference: no_grad; training: the full step; generate (hf models): greedy
    /// `model.generate(input_ids, max_new_tokens=N, do_sample=False)`.
    #[arg(help_heading = super::heading::RUN, long, value_enum, value_delimiter = ',', default_value = "training")]
    pub profile_type: Vec<ProfileType>,
    /// GenerationConfig's max_new_tokens: the tokens `--profile-type generate` decodes
    ///
    /// The prompt is the context length; the prefill and each decode step are reported with
    /// their peaks.
    #[arg(help_heading = super::heading::RUN, long, value_name = "N")]
    pub max_new_tokens: Option<usize>,
    /// cpu (real numerics) or meta (shapes only; any model size)
    #[arg(help_heading = super::heading::RUN, long, default_value = "cpu")]
    pub device: String,
    /// GPU whose memory bounds the allocator (names are case-insensitive; a unique prefix
    /// such as h100 will do)
    #[arg(help_heading = super::heading::RUN, value_parser = super::values::gpus(), long)]
    pub gpu: Option<String>,
    /// Device memory instead of a --gpu preset (e.g. 24GiB, 80GB)
    #[arg(help_heading = super::heading::RUN, long)]
    pub memory_limit: Option<String>,
    /// torch.cuda.set_per_process_memory_fraction: the share of the device reserved memory
    /// may use
    ///
    /// Needs --gpu or --memory-limit; arms garbage_collection_threshold.
    #[arg(help_heading = super::heading::RUN, long)]
    pub memory_fraction: Option<f64>,
    /// PYTORCH_CUDA_ALLOC_CONF string (default: that environment variable)
    #[arg(help_heading = super::heading::RUN, long)]
    pub allocator_conf: Option<String>,
    /// Snapshot path (one context length and profile type only)
    ///
    /// Default: `<out-dir>/<model>_ctx<S>_<type>_snapshot.pickle`.
    #[arg(help_heading = super::heading::OUTPUT, long)]
    pub output: Option<PathBuf>,
    /// Folder the outputs are written to (created if missing)
    #[arg(help_heading = super::heading::OUTPUT, long, default_value = "vramscope-out/profile")]
    pub out_dir: PathBuf,
    /// CPU threads for the cpu device (default: all cores)
    #[arg(help_heading = super::heading::RUN, long)]
    pub threads: Option<usize>,
    /// Random seed for the weights and the synthetic data
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 42)]
    pub seed: u64,
    /// Training: N micro-batches per batch, gradients accumulated before one optimizer step
    ///
    /// `loss / N; loss.backward()` per micro-batch.
    #[arg(help_heading = super::heading::MEMORY, long, default_value_t = 1)]
    pub grad_accum_steps: usize,
    /// Count FLOPs, bytes moved and arithmetic intensity per op and module
    ///
    /// Over the measured steps (DeepSpeed's FLOPS profiler view); MFU on cpu, a roofline
    /// prediction with --gpu.
    #[arg(help_heading = super::heading::OUTPUT, long, alias = "enable-deepspeed-flops")]
    pub flops: bool,
    /// Module depth of the printed FLOP tree
    #[arg(help_heading = super::heading::OUTPUT, long, default_value_t = 3, requires = "flops")]
    pub flops_depth: usize,
    /// Compare the memory options given (or all) against the baseline in one table
    ///
    /// Runs the baseline (fp32, naive attention, no checkpointing, unfused, no accumulation)
    /// and each memory option given (--precision, --attention flash, --checkpoint, --fusion,
    /// --grad-accum-steps) alone and together — or, with none given, all of them — and print
    /// one table relative to the baseline
    #[arg(help_heading = super::heading::RUN, long)]
    pub compare: bool,
}

impl ProfileArgs {
    /// Parse profile flags given as words (without the subcommand name), for subcommands
    /// that run profiles: the error is clap's first line, without its `error: ` prefix.
    pub fn parse_words(words: &[String]) -> std::result::Result<ProfileArgs, String> {
        super::parse_words("profile", words)
    }
}

/// The profile `a` asks for, every flag checked before anything runs.
pub fn options(a: &ProfileArgs) -> Result<ProfileOptions> {
    let r = a.model.resolve("walkthrough", super::model::Names::Cs336)?;
    let mut cfg = r.config;
    if a.profile_type.contains(&ProfileType::Generate) && (a.model.hf.load_in_4bit || a.model.hf.load_in_8bit) && a.model.hf.prepare_model_for_kbit_training.is_none() {
        // generate's default is the unprepared model, the other profile types' the prepared one.
        if a.profile_type.iter().any(|&k| k != ProfileType::Generate) {
            return Err(usage("--prepare-model-for-kbit-training", "generate() runs the 4-bit or 8-bit model unprepared by default, the other profile types prepared: give true or false to profile them together"));
        }
        a.model.hf.unprepared_for_generate(&mut cfg);
    }
    a.memory.apply(&mut cfg)?;
    let device = super::parse_device(&a.device)?;
    let contexts = match &a.context_length {
        Some(s) => super::parse_list("--context-length", s)?,
        None => vec![r.preset.seq_len.min(cfg.max_seq_len)],
    };
    a.model.follow_seq_len(&mut cfg, *contexts.iter().max().unwrap());
    for &c in &contexts {
        cfg.check_seq_len(c, "--context-length").map_err(UsageError::from)?;
        if a.profile_type.iter().any(|&k| !matches!(k, ProfileType::Inference | ProfileType::Generate)) {
            super::hf::check_with_labels(&cfg, c)?;
        }
        if cfg.flavour == Flavour::Tinyllama && c < 2 {
            return Err(usage("--context-length", "tinyllama shifts logits and labels by one: needs at least 2"));
        }
    }
    if a.output.is_some() && contexts.len() * a.profile_type.len() > 1 {
        return Err(usage("--output", "names one snapshot; with several context lengths or profile types use --out-dir"));
    }
    let batch = a.batch_size.unwrap_or(r.preset.batch_size);
    if batch == 0 {
        return Err(usage("--batch-size", "must be at least 1"));
    }
    for &c in &contexts {
        cfg.check_sizes(batch, c, "--context-length").map_err(UsageError::from)?;
    }
    if a.measure_steps == 0 {
        return Err(usage("--measure-steps", "must be at least 1"));
    }
    if a.max_entries == 0 {
        return Err(usage("--max-entries", "must be at least 1 (the snapshot keeps this many trace entries)"));
    }
    crate::session::host_memory::check_bookkeeping(cfg.num_layers, a.max_entries)?;
    let gpu = a.gpu.as_deref().map(gpu::find).transpose().map_err(|e| usage("--gpu", e))?;
    let capacity = match (&a.memory_limit, gpu) {
        (Some(m), _) => gpu::parse_size(m).map_err(|e| usage("--memory-limit", e))?,
        (None, Some(g)) => g.memory_bytes,
        (None, None) => usize::MAX / 4,
    };
    let gpu_name = gpu.map(|g| g.name.to_string());
    if a.grad_accum_steps == 0 {
        return Err(usage("--grad-accum-steps", "must be at least 1"));
    }
    if a.grad_accum_steps > 1 {
        if !a.profile_type.iter().all(|&k| k == ProfileType::Training) {
            return Err(usage("--grad-accum-steps", "accumulates gradients: needs --profile-type training"));
        }
        if !batch.is_multiple_of(a.grad_accum_steps) {
            return Err(usage("--grad-accum-steps", format!("{} does not divide --batch-size {batch}", a.grad_accum_steps)));
        }
    }
    let conf_str = a.allocator_conf.clone().or_else(|| std::env::var("PYTORCH_CUDA_ALLOC_CONF").ok()).unwrap_or_default();
    let conf = AllocatorConfig::parse(&conf_str).map_err(|e| usage("--allocator-conf", e))?;
    if let Some(f) = a.memory_fraction {
        if !(f > 0.0 && f <= 1.0) {
            return Err(usage("--memory-fraction", format!("{f} (expected a share in (0, 1])")));
        }
        if a.gpu.is_none() && a.memory_limit.is_none() {
            return Err(usage("--memory-fraction", "is a share of device memory: give --gpu or --memory-limit"));
        }
    }
    let precision = a.precision.resolve_for(&mut cfg)?;
    // SDPA's kernel follows the GPU: torch 2.11 tries cuDNN attention first on sm90.
    if let Some(h) = cfg.hf.as_mut() {
        h.cudnn_sdpa = gpu.is_some_and(|g| g.sdpa_prefers_cudnn());
        h.cutlass_sms = gpu.as_ref().and_then(|g| g.grouped_mm_cutlass_sms());
    }
    if let Some(q) = cfg.hf.as_mut().and_then(|h| h.bnb.as_mut()) {
        if let crate::model::bnb::Quant::FourBit(f) = &mut q.quant {
            f.kernel = crate::model::bnb::kernel_for(gpu.as_ref());
        }
        let (flag, bits) = (q.flag(), q.bits());
        if device == Device::Cpu {
            return Err(usage(flag, format!("{bits} numerics are not computed on cpu: profile the {bits} model with --device meta")));
        }
        if a.profile_type.contains(&ProfileType::Training) && cfg.hf().is_some_and(|h| h.lora.is_none()) {
            return Err(usage(flag, format!("a {bits} model has no trainable parameters (the optimizer would get an empty parameter list): add --lora-r for (Q)LoRA, or --profile-type inference")));
        }
    }
    for &c in &contexts {
        super::hf::check_kernel(&cfg, precision, c)?;
    }
    let mut optim = a.optim.resolve(cfg.flavour, a.profile_type.contains(&ProfileType::Training))?;
    if optim.kind.is_bitsandbytes() && device == Device::Cpu {
        return Err(usage("--optimizer", format!("{}: bitsandbytes' 8-bit and paged state numerics are not computed on cpu; profile with --device meta", optim.kind)));
    }
    let mut parallel = a.parallel.resolve()?;
    if let Some(pc) = parallel.as_mut() {
        pc.resolve_tp_plan(cfg.hf());
    }
    if let Some((flag, why)) = parallel.as_ref().zip(cfg.hf()).and_then(|(pc, h)| super::parallel_models::refusal(pc, h)) {
        return Err(usage(flag, why));
    }
    if let Some((flag, why)) = parallel.as_ref().and_then(|pc| super::parallel_models::bias_dtype_refusal(pc, &cfg, precision.param_dtype())) {
        return Err(usage(flag, why));
    }
    // GradScaler.unscale_ under tensor parallelism: PyTorch stops (measured under
    // transformers' plan, measure_tp_hf.py --autocast; torch's plan also mixes sharded DTensor
    // weights with plain-tensor norms).
    if parallel.as_ref().is_some_and(|pc| pc.tp > 1) && precision.loss_scaling() {
        return Err(usage("--precision", "fp16 (GradScaler) under tensor parallelism stops in PyTorch itself: unscale_'s _amp_foreach_non_finite_check_and_unscale_ gets DTensor and plain-tensor gradients together (\"got mixed torch.Tensor and DTensor\"); use --precision bf16".to_string()));
    }
    // dist_grid/tp_hf_autocast.json: bf16 autocast under transformers' plan and torch's
    // matches in training, forward and inference; tp_hf_moe_autocast.json: under the MoE plans.
    if let Some(pc) = parallel.as_ref().filter(|pc| pc.tp > 1 && precision.autocast().is_some()) {
        if pc.sequence_parallel {
            return Err(usage("--precision", format!("{precision} autocast with --sequence-parallel is not measured (dist_grid/tp_hf_autocast.json runs the plans without it); drop one of them")));
        }
        if pc.layout != crate::parallel::Layout::Tp {
            return Err(usage("--precision", format!("{precision} autocast under --parallel {} with --tp (FSDP2 x TP) is not measured (dist_grid/tp_hf_autocast.json runs tensor parallelism alone); use --parallel tp, or drop the autocast precision", pc.layout.name())));
        }
    }
    // dist_grid/autocast.json: autocast under the data-parallel layouts matches in training,
    // forward and inference (ddp, zero1, zero2, fsdp); forward-loss is not measured under them.
    if let Some(pc) = parallel.as_ref().filter(|pc| pc.tp <= 1 && precision.autocast().is_some() && cfg.hf().is_some()) {
        if let Some(k) = a.profile_type.iter().find(|&&k| k == ProfileType::ForwardLoss) {
            return Err(usage("--precision", format!("{precision} autocast under --parallel {} with --profile-type {} is not measured (dist_grid/autocast.json measures training, forward and inference under every layout); profile one of those, or drop the autocast precision", pc.layout.name(), k.name())));
        }
    }
    // dist_grid/cs336_autocast.json: the course models under CS336's bf16 autocast match in
    // training, forward-only and inference steps under every data-parallel layout; fp16
    // (GradScaler) and forward-loss are not measured under a layout.
    if let Some(pc) = parallel.as_ref().filter(|pc| pc.tp <= 1 && precision.autocast().is_some() && cfg.hf().is_none()) {
        if precision.loss_scaling() {
            return Err(usage("--precision", format!("fp16 autocast with loss scaling of the {} model under --parallel {} is not measured (dist_grid/cs336_autocast.json runs bf16); use --precision bf16", cfg.flavour, pc.layout.name())));
        }
        if let Some(k) = a.profile_type.iter().find(|&&k| !matches!(k, ProfileType::Training | ProfileType::Forward | ProfileType::Inference)) {
            return Err(usage("--precision", format!("{precision} autocast of the {} model under --parallel {} with --profile-type {} is not measured (dist_grid/cs336_autocast.json measures training, forward and inference); drop the autocast precision or profile one of those", cfg.flavour, pc.layout.name(), k.name())));
        }
    }
    super::families::check_run(cfg.hf(), a.profile_type.contains(&ProfileType::Generate))?;
    if let Some(h) = cfg.hf() {
        super::lora_targets::check_new_models_autocast(h, precision)?;
        super::moe::check_aux_autocast(h, precision)?;
    }
    let static_generate = a.profile_type.iter().all(|&k| k == ProfileType::Generate) && a.generate.cache_implementation.as_deref() == Some("static");
    let kinds = a.profile_type.iter().map(|k| k.name()).collect::<Vec<_>>().join(",");
    super::generate::check_static_only_window(cfg.hf(), static_generate, true, if a.profile_type.contains(&ProfileType::Generate) { "--cache-implementation" } else { "--profile-type" }, &format!("--profile-type {kinds}"))?;
    super::moe::check_profile(&cfg, device, a.profile_type.contains(&ProfileType::Generate), batch, &contexts)?;
    let generation = check_generate(a, &cfg, &contexts, precision, parallel.is_some())?;
    let max_new_tokens = generation.as_ref().map(|g| g.max_new_tokens);
    if let (Some(pc), Some(h)) = (&parallel, cfg.hf()) {
        if let Some((flag, why)) = super::parallel::adapters_refusal(pc, super::parallel::Adapted::of(h)) {
            return Err(usage(flag, why));
        }
        if let Some((flag, why)) = super::parallel::mixed_precision_adapters_refusal(pc, h, precision) {
            return Err(usage(flag, why));
        }
        if let Some((flag, why)) = super::parallel::adapter_extras_layout_refusal(pc, h) {
            return Err(usage(flag, why));
        }
        if let Some((flag, why)) = super::parallel::qlora_layout_refusal(pc, h) {
            return Err(usage(flag, why));
        }
    }
    if let Some(pc) = parallel.as_ref().filter(|c| optim.kind == crate::train::optim::OptimizerKind::Adafactor && !matches!(c.layout, crate::parallel::Layout::Ddp | crate::parallel::Layout::Zero1)) {
        // Adafactor builds its state from the gradient's (global) shape with plain
        // torch.zeros(...).to(grad): over FSDP2's or TP's DTensor gradients, not modelled.
        return Err(usage("--optimizer", format!("adafactor under --parallel {}: transformers' Adafactor over DTensor (sharded) parameters is not modelled; use --parallel ddp or zero1, or one GPU", pc.layout.name())));
    }
    if let Some(pc) = parallel.as_ref().filter(|c| c.tp > 1) {
        pc.model_config(&cfg).validate().map_err(|e| usage(e.flag, e.message))?;
        if a.profile_type.contains(&ProfileType::Training) {
            // Only a training step has an optimizer (a forward or inference run refuses the flag).
            tp_optimizer(pc, &a.optim, &mut optim)?;
        }
        if pc.sequence_parallel {
            if let Some(c) = contexts.iter().find(|&&c| c % pc.tp != 0) {
                return Err(usage("--context-length", format!("{c} positions do not divide among {} sequence-parallel ranks (uneven Shard(1) is not modelled)", pc.tp)));
            }
        }
    }
    let mut note = r.note.clone();
    let device = if parallel.is_some() && device == Device::Cpu {
        let n = "--parallel simulates one rank on meta (shapes only; a sharded rank's cpu numerics are not modelled)";
        note = Some(note.map_or(n.to_string(), |o| format!("{o}; {n}")));
        Device::Meta
    } else {
        device
    };
    Ok(ProfileOptions {
        model: cfg,
        model_name: r.preset.name.to_string(),
        batch,
        contexts,
        device,
        capacity,
        gpu_name,
        gpu,
        conf,
        fraction: a.memory_fraction,
        precision,
        optim,
        note,
        keep_trace: true,
        parallel,
        warmup_steps: a.warmup_steps,
        measure_steps: a.measure_steps,
        max_entries: a.max_entries,
        seed: a.seed,
        grad_accum_steps: a.grad_accum_steps,
        flops: a.flops,
        max_new_tokens,
        generation,
    })
}

/// `--profile-type generate` and `--max-new-tokens` go together, on an hf model run as
/// transformers' greedy generate() is modelled: one device (peft's unmerged LoRA adapters with
/// their bias, DoRA and modules_to_save, bitsandbytes 4-bit and 8-bit weights included), the config's cache on, no autocast, no
/// attention_mask or logits_to_keep of the user's.
fn check_generate(a: &ProfileArgs, cfg: &crate::model::ModelConfig, contexts: &[usize], precision: crate::train::Precision, parallel: bool) -> Result<Option<crate::model::hf::generation_config::GenerateConfig>> {
    let generate = a.profile_type.contains(&ProfileType::Generate);
    if let Some(flag) = a.generate.first_given().filter(|_| !generate) {
        return Err(usage(flag, "is an option of generate(): it needs --profile-type generate"));
    }
    let n = match (generate, a.max_new_tokens) {
        (false, None) => return Ok(None),
        (false, Some(_)) => return Err(usage("--max-new-tokens", "sets generate()'s length: it needs --profile-type generate")),
        (true, None) => return Err(usage("--max-new-tokens", "is required with --profile-type generate (how many tokens generate() decodes)")),
        (true, Some(0)) => return Err(usage("--max-new-tokens", "must be at least 1")),
        (true, Some(n)) => n,
    };
    let Some(hf) = cfg.hf() else {
        return Err(usage("--profile-type", format!("generate runs Hugging Face transformers' generate(): it needs an hf model (an hf preset such as Llama-3.2-1B, or --config config.json), not the {} flavour", cfg.flavour)));
    };
    let refuse = |flag: &str, why: &str| Err(usage(flag, format!("{why} with --profile-type generate (not modelled yet)")));
    if parallel {
        return refuse("--parallel", "data or tensor parallelism");
    }
    // peft's bias, DoRA and modules_to_save with generate are measured over unquantized weights
    // (generate_models_extras.json, generate_dense_extras.json), LLM.int8() weights with plain
    // LoRA or none (generate_models_int8.json, generate_dense_extras.json). DoRA and
    // modules_to_save over 4-bit or 8-bit weights are not (issue 30's models refuse them for
    // every profile type: lora_targets::check_new_models).
    if let (Some(l), Some(q)) = (hf.lora.as_ref(), hf.bnb.as_ref()) {
        let over = format!("over {} weights (measured with generate over unquantized weights: generate_models_extras.json, generate_dense_extras.json)", q.bits());
        if l.use_dora {
            return refuse("--use-dora", &format!("DoRA adapters {over}"));
        }
        if !l.modules_to_save.is_empty() {
            return refuse("--modules-to-save", &format!("peft's modules_to_save copies {over}"));
        }
    }
    if !hf.use_cache {
        return refuse("--use-cache", "use_cache false (generate() without a cache)");
    }
    if hf.attention_mask {
        return refuse("--attention-mask", "an attention_mask passed to generate()");
    }
    if hf.logits_to_keep > 0 {
        return Err(usage("--logits-to-keep", "generate() sets logits_to_keep=1 itself: leave the flag out with --profile-type generate"));
    }
    if precision.autocast().is_some() {
        return refuse("--precision", format!("{precision} (autocast around generate())").as_str());
    }
    for &c in contexts {
        super::families::check_generate(hf, c, n)?;
        if c + n > cfg.max_seq_len {
            return Err(usage("--max-new-tokens", format!("{n} new tokens after a {c}-token prompt pass the model's {} positions (max_position_embeddings)", cfg.max_seq_len)));
        }
        // Past the window the DynamicCache keeps a DynamicSlidingWindowLayer per (sliding) layer
        // (the last window − 1 positions): measured on Mistral, Mixtral (Arch::Mistral with
        // experts) and Phi-3 (generate_sliding.json) and Qwen2-MoE's sliding layers
        // (generate_qwen2_moe_sliding.json); a StaticCache keeps a StaticSlidingWindowLayer,
        // measured where static_sliding_measured says.
        let static_cache = a.generate.cache_implementation.as_deref() == Some("static");
        let qwen2_moe = hf.moe.as_ref().is_some_and(|m| m.family == crate::model::hf::moe::MoeFamily::Qwen2Moe);
        let dynamic_measured = qwen2_moe || matches!(hf.model_type, crate::model::hf::Arch::Mistral | crate::model::hf::Arch::Phi3);
        if let Some(w) = hf.sliding_window.filter(|&w| c + n > w && !(if static_cache { super::generate::static_sliding_measured(hf) } else { dynamic_measured })) {
            return Err(usage(
                "--max-new-tokens",
                format!("the prompt and the new tokens ({}) pass the model's sliding window ({w}): transformers 5.23's DynamicCache then keeps a DynamicSlidingWindowLayer (the last {} positions), measured on mistral, mixtral, phi3 and qwen2_moe, not yet on {}", c + n, w - 1, hf.model_type.name()),
            ));
        }
    }
    // Gemma's and gpt-oss's sliding layers' window (HfConfig::gemma, MoeConfig::gpt_oss) makes
    // a StaticCache's layers StaticSlidingWindowLayers too.
    let window = hf.sliding_window.or(hf.gemma.as_ref().map(|g| g.sliding_window)).or(hf.moe.as_ref().and_then(|m| m.gpt_oss.as_ref()).map(|g| g.window));
    a.generate.resolve(n, window, super::generate::static_sliding_measured(hf)).map(Some)
}

/// What PyTorch's optimizer and clipping accept under tensor parallelism: AdamW's foreach
/// and fused kernels (and SGD's foreach) refuse a list that mixes DTensor and plain
/// parameters, as pure TP's replicated norms are; clipping DTensor gradients is not
/// modelled, so it must be off.
fn tp_optimizer(pc: &crate::parallel::ParallelConfig, flags: &super::optim::OptimFlags, optim: &mut crate::train::optim::OptimConfig) -> Result<()> {
    use crate::train::optim::OptimizerKind;
    if pc.layout == crate::parallel::Layout::Tp && optim.kind != OptimizerKind::AdamwTorchForloop {
        return Err(usage(
            "--optimizer",
            format!("{} under --parallel tp: PyTorch refuses its multi-tensor kernels over a mix of DTensor (sharded) and plain (replicated norm) parameters; give --optimizer adamw_torch_forloop, or --parallel fsdp --tp N (every parameter a DTensor)", optim.kind.name()),
        ));
    }
    match flags.max_grad_norm {
        Some(0.0) => optim.max_grad_norm = None,
        _ if optim.max_grad_norm.is_none() => {}
        _ => return Err(usage("--max-grad-norm", "clipping tensor-parallel (DTensor) gradients is not modelled: give --max-grad-norm 0 (no clipping) with --tp")),
    }
    Ok(())
}

