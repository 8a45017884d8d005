//! `fit`'s flags, resolved into the session's search plans: the largest batch or longest
//! context (`--find batch|context`), the most new tokens of a generate run (`--find
//! max-new-tokens`), or the fewest ranks per layout (`--find world-size`), each probe a meta
//! profile planned by profile's own code.
use super::model::ModelFlags;
use super::profile::{self, ProfileArgs};
use super::usage;
use crate::model::Flavour;
use crate::parallel::Layout;
use crate::record::reserve;
use crate::session::fit::{Budget, Find, FitPlan, WorldPlan};
use crate::session::profile::{ProfileOptions, ProfileType, DEFAULT_MAX_ENTRIES};
use crate::session::text::size;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct FitArgs {
    #[command(flatten)]
    pub model: ModelFlags,
    #[command(flatten)]
    pub precision: super::precision::PrecisionFlags,
    #[command(flatten)]
    pub memory: super::memory::MemoryFlags,
    #[command(flatten)]
    pub optim: super::optim::OptimFlags,
    #[command(flatten)]
    pub parallel: super::parallel::ParallelFlags,
    /// What to search for
    #[arg(help_heading = super::heading::RUN, long, value_enum, default_value = "batch")]
    pub find: Find,
    /// What the step runs
    ///
    /// forward: `model(x)` with autograd, no loss; forward-loss: plus the loss, no backward;
    /// inference: no_grad (one forward of the whole prompt, the prefill); training: one full
    /// step after warm-up; generate (hf models): greedy `model.generate(input_ids,
    /// max_new_tokens=N, do_sample=False)`, its prefill and every decode step.
    #[arg(help_heading = super::heading::RUN, long, value_enum, default_value = "training")]
    pub profile_type: ProfileType,
    /// GenerationConfig's max_new_tokens held fixed with --profile-type generate (what
    /// --find max-new-tokens searches for)
    #[arg(help_heading = super::heading::RUN, long)]
    pub max_new_tokens: Option<usize>,
    /// Batch size held fixed when finding the context (default: the preset's)
    #[arg(help_heading = super::heading::RUN, long)]
    pub batch_size: Option<usize>,
    /// Context length held fixed when finding the batch size (default: the preset's)
    #[arg(help_heading = super::heading::RUN, long, alias = "seq-len")]
    pub context_length: Option<usize>,
    /// GPU whose memory bounds the allocator (as for `profile`)
    #[arg(help_heading = super::heading::RUN, value_parser = super::values::gpus(), long)]
    pub gpu: Option<String>,
    /// Device memory instead of a --gpu preset (e.g. 24GiB)
    #[arg(help_heading = super::heading::RUN, long)]
    pub memory_limit: Option<String>,
    /// torch.cuda.set_per_process_memory_fraction share of the device
    #[arg(help_heading = super::heading::RUN, long)]
    pub memory_fraction: Option<f64>,
    /// PYTORCH_CUDA_ALLOC_CONF string (default: that environment variable)
    #[arg(help_heading = super::heading::RUN, long)]
    pub allocator_conf: Option<String>,
    /// Steps before the measured one (training: optimizer state exists after one)
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 1)]
    pub warmup_steps: usize,
    /// Largest value tried
    ///
    /// Default: for --find context, the model's maximum sequence length when --max-seq-len or
    /// a config.json fixes one; else 1048576.
    #[arg(help_heading = super::heading::RUN, long)]
    pub max: Option<usize>,
    /// Write the answer as JSON to FILE (no FILE or `-`: to stdout instead of the text)
    #[arg(help_heading = super::heading::OUTPUT, long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
    /// Device memory kept free for what the allocator model does not hold
    ///
    /// The CUDA context and the cuBLAS workspaces (default: the CUDA context, 757 MiB measured on H100/H200 and 512 MiB
    /// elsewhere, + 32 MiB per cuBLAS handle on H100/H200, 8.125 MiB elsewhere; two handles for training; see the README). 0 for none
    #[arg(help_heading = super::heading::RUN, long, value_name = "SIZE")]
    pub reserve: Option<String>,
}


fn args_for(a: &FitArgs, batch: usize, ctx: usize, max_new_tokens: Option<usize>) -> ProfileArgs {
    ProfileArgs {
        max_new_tokens,
        generate: Default::default(),
        model: model_flags(a),
        precision: a.precision.clone(),
        memory: a.memory.clone(),
        optim: a.optim.clone(),
        parallel: a.parallel.clone(),
        context_length: Some(ctx.to_string()),
        batch_size: Some(batch),
        warmup_steps: a.warmup_steps,
        measure_steps: 1,
        max_entries: DEFAULT_MAX_ENTRIES,
        profile_type: vec![a.profile_type],
        device: "meta".into(),
        gpu: a.gpu.clone(),
        memory_limit: a.memory_limit.clone(),
        memory_fraction: a.memory_fraction,
        allocator_conf: a.allocator_conf.clone(),
        output: None,
        out_dir: PathBuf::from("."),
        threads: None,
        seed: 42,
        grad_accum_steps: 1,
        flops: false,
        flops_depth: 3,
        compare: false,
    }
}

/// The model flags of each probe: a mixture-of-experts model is fitted for the worst routing
/// (every token to the same top-k experts) unless --routing says otherwise.
fn model_flags(a: &FitArgs) -> super::model::ModelFlags {
    let mut m = a.model.clone();
    if m.hf.routing.is_none() && a.model.resolve("walkthrough", super::model::Names::Cs336).is_ok_and(|r| r.config.hf().is_some_and(|h| h.moe.is_some())) {
        m.hf.routing = Some("worst".into());
    }
    m
}

fn budget(a: &FitArgs, base: &ProfileOptions) -> Result<Budget> {
    let capacity = match a.memory_fraction {
        Some(f) => (base.capacity as f64 * f) as usize,
        None => base.capacity,
    };
    // The reserve comes off the device and off the memory-fraction budget: every probe runs
    // against --memory-limit (device − reserve) with the fraction rescaled to match.
    let gpu = a.gpu.as_deref().map(crate::record::gpu::find).transpose().map_err(|e| usage("--gpu", e))?;
    let reserve_parts = match &a.reserve {
        // "0", "0MiB", "0GiB": no reserve (parse_size refuses sizes under a byte).
        Some(r) if r.trim().trim_end_matches(|c: char| c.is_ascii_alphabetic()).trim().parse::<f64>() == Ok(0.0) => Vec::new(),
        Some(r) => vec![reserve::Part { what: "--reserve".into(), bytes: crate::record::gpu::parse_size(r).map_err(|e| usage("--reserve", e))? }],
        None => reserve::default_parts(gpu.as_ref(), a.profile_type == ProfileType::Training),
    };
    let reserve: usize = reserve_parts.iter().map(|p| p.bytes).sum();
    if reserve >= capacity {
        return Err(usage("--reserve", format!("{} leaves nothing of the {} the process may use (--reserve 0 searches the bare limit)", size(reserve as i64), size(capacity as i64))));
    }
    let limit = (base.capacity - reserve).to_string();
    let fraction = a.memory_fraction.map(|_| (capacity - reserve) as f64 / (base.capacity - reserve) as f64);
    Ok(Budget { capacity, reserve_parts, reserve, limit, fraction })
}


/// Checks shared by the searches: a capacity to search against, and generate's length where
/// it is held fixed (and only there).
fn common(a: &FitArgs) -> Result<()> {
    if a.gpu.is_none() && a.memory_limit.is_none() {
        return Err(usage("--gpu", "fit needs a device capacity: give --gpu NAME or --memory-limit SIZE"));
    }
    let generate = a.profile_type == ProfileType::Generate;
    match (a.find, generate, a.max_new_tokens) {
        (Find::MaxNewTokens, false, _) => return Err(usage("--find", "max-new-tokens searches generate() runs: give --profile-type generate")),
        (Find::MaxNewTokens, true, Some(_)) => return Err(usage("--max-new-tokens", "is what --find max-new-tokens searches for: leave it out")),
        (Find::WorldSize, true, _) => return Err(usage("--find", "world-size searches data-parallel layouts; generate() is modelled on one device (use --find batch, context or max-new-tokens)")),
        (_, false, Some(_)) => return Err(usage("--max-new-tokens", "sets generate()'s length: it needs --profile-type generate")),
        (Find::Batch | Find::Context, true, None) => return Err(usage("--max-new-tokens", "is required with --profile-type generate (how many tokens generate() decodes), unless --find max-new-tokens searches for it")),
        (_, true, Some(0)) => return Err(usage("--max-new-tokens", "must be at least 1")),
        _ => {}
    }
    Ok(())
}

/// The model (its note heard by `note` at once) and the batch and context held fixed: the
/// flags', else the preset's.
fn shape(a: &FitArgs, note: impl FnOnce(&str)) -> Result<(super::model::Resolved, usize, usize)> {
    let r = a.model.resolve("walkthrough", super::model::Names::Cs336)?;
    if let Some(n) = &r.note {
        note(n);
    }
    let batch = a.batch_size.unwrap_or(r.preset.batch_size);
    let ctx = a.context_length.unwrap_or(r.preset.seq_len.min(r.config.max_seq_len));
    Ok((r, batch, ctx))
}

/// `--find batch|context`: the search's plan, the configuration validated once at its start
/// (bad flags are usage errors, exit 2); `note` hears the model's note as soon as it is known.
pub fn plan(a: &FitArgs, note: impl FnOnce(&str)) -> Result<FitPlan> {
    common(a)?;
    if a.max == Some(0) {
        return Err(usage("--max", "must be at least 1"));
    }
    if a.parallel.world_size.is_some() && a.parallel.parallel.is_none() {
        return Err(usage("--world-size", "sets up a data-parallel job: give --parallel too (or --find world-size to search for it)"));
    }
    let (r, batch, ctx) = shape(a, note)?;
    if batch == 0 {
        return Err(usage("--batch-size", "must be at least 1"));
    }
    match a.find {
        Find::Batch if a.batch_size.is_some() => return Err(usage("--batch-size", "is what --find batch searches for: leave it out")),
        Find::Context if a.context_length.is_some() => return Err(usage("--context-length", "is what --find context searches for: leave it out")),
        _ => {}
    }
    let mut model_max_why = "";
    let (cap, model_max) = if a.profile_type == ProfileType::Generate {
        let (cap, max, why) = generate_cap(a, &r.config, ctx)?;
        model_max_why = why;
        (cap, max)
    } else {
        // The model's maximum follows the run's length (as both seeds do) unless --max-seq-len
        // or a config.json's max_position_embeddings fixes it: then the search stops there.
        let model_max = (a.find == Find::Context && !a.model.max_follows_run(&r.config)).then_some(r.config.max_seq_len);
        if let (Some(m), Some(limit)) = (a.max, model_max) {
            if m > limit {
                return Err(usage("--max", format!("{m} exceeds the model's maximum sequence length {limit}: raise --max-seq-len too")));
            }
        }
        (a.max.or(model_max).unwrap_or(1 << 20), model_max)
    };
    let start = if a.find == Find::Context && r.config.flavour == Flavour::Tinyllama { 2 } else { 1 };
    let new_tokens = if a.find == Find::MaxNewTokens { None } else { a.max_new_tokens };
    let (b, c, n) = match a.find {
        Find::Context => (batch, start, new_tokens),
        Find::MaxNewTokens => (batch, ctx, Some(start)),
        Find::Batch | Find::WorldSize => (start, ctx, new_tokens),
    };
    let base = profile::options(&args_for(a, b, c, n))?;
    let budget = budget(a, &base)?;
    Ok(FitPlan { find: a.find, kind: a.profile_type, base, batch, ctx, new_tokens, start, cap, model_max, model_max_why, budget, reserve_default: a.reserve.is_none(), memory_fraction: a.memory_fraction })
}

/// A generate search's largest value, the model's positions when they set it, and what sets
/// them: the prompt and the new tokens together stay within max_position_embeddings, a
/// sliding window and Phi-3's original positions + 1 (profile refuses more), so a context
/// search ends at positions − max_new_tokens and a new-token search at positions − the prompt.
fn generate_cap(a: &FitArgs, cfg: &crate::model::ModelConfig, ctx: usize) -> Result<(usize, Option<usize>, &'static str)> {
    // Profile also refuses a prompt and new tokens past a sliding window (the
    // DynamicSlidingWindowLayer is not modelled) or, for Phi-3, ids past its
    // original_max_position_embeddings + 1 (the cache is dropped): the search stops there too.
    let hf = cfg.hf();
    let window = hf.and_then(|h| h.sliding_window);
    let phi3 = hf.filter(|h| h.model_type == crate::model::hf::Arch::Phi3).and_then(|h| h.original_max_position_embeddings).and_then(|o| o.checked_add(1));
    let (positions, what) = [(Some(cfg.max_seq_len), "max_position_embeddings: raise --max-seq-len to look further"), (window, "its sliding window, past which the DynamicSlidingWindowLayer is not modelled"), (phi3, "Phi-3's original_max_position_embeddings + 1, past which generate() drops the cache")]
        .into_iter()
        .filter_map(|(p, w)| p.map(|p| (p, w)))
        .min_by_key(|&(p, _)| p)
        .expect("max_position_embeddings is always there");
    let (fixed, flag) = match a.find {
        Find::Context => (a.max_new_tokens.unwrap_or(0), "--max-new-tokens"),
        Find::MaxNewTokens => (ctx, "--context-length"),
        Find::Batch | Find::WorldSize => return Ok((a.max.unwrap_or(1 << 20), None, what)),
    };
    let Some(limit) = positions.checked_sub(fixed).filter(|&l| l >= 1) else {
        return Err(usage(flag, format!("{fixed} leaves no room in the model's {positions} positions ({what})")));
    };
    match a.max {
        Some(m) if m > limit => Err(usage("--max", format!("{m}: the prompt and the new tokens would pass the model's {positions} positions ({what}); at most {limit} here"))),
        Some(m) => Ok((m, None, what)),
        None => Ok((limit, Some(positions), what)),
    }
}

/// The probe of `plan` at `n` (a batch size or a context length): a meta profile against the
/// budget's limit, its trace not kept.
pub fn probe(a: &FitArgs, plan: &FitPlan, n: usize) -> Result<ProfileOptions> {
    let (b, c, new_tokens) = plan.point(n);
    let args = ProfileArgs { memory_limit: Some(plan.budget.limit.clone()), memory_fraction: plan.budget.fraction, ..args_for(a, b, c, new_tokens) };
    let mut p = profile::options(&args)?;
    p.keep_trace = false;
    Ok(p)
}

/// `--find world-size`: the layouts to search and their plan, validated once at 1 rank.
pub fn world_plan(a: &FitArgs, mut note: impl FnMut(&str)) -> Result<WorldPlan> {
    common(a)?;
    if a.parallel.world_size.is_some() || a.parallel.rank.is_some() {
        return Err(usage("--world-size", "is what --find world-size searches for: leave it (and --rank) out"));
    }
    if a.parallel.tp.is_some() || a.parallel.parallel.as_deref().is_some_and(|l| l.eq_ignore_ascii_case("tp")) {
        return Err(usage("--tp", "fit --find world-size searches data-parallel world sizes; profile or sweep a tensor-parallel layout (--parallel tp, or fsdp/zero2 with --tp) at the world sizes its heads divide"));
    }
    let cap = a.max.unwrap_or(1024);
    if cap == 0 {
        return Err(usage("--max", "must be at least 1"));
    }
    let (_, batch, ctx) = shape(a, &mut note)?;
    let layouts: Vec<Layout> = match &a.parallel.parallel {
        Some(name) => vec![Layout::parse(name).ok_or_else(|| usage("--parallel", format!("'{name}' (expected ddp, zero1, zero2, fsdp or hsdp)")))?],
        // A LoRA or 4-bit model: the layouts it runs under; then those this model and these
        // options are modelled under (a layout the profile refuses is left out, with its reason).
        None => {
            let mut kept = Vec::new();
            let mut first_refusal = None;
            for layout in super::parallel::default_layouts(super::parallel::Adapted::of_flags(&a.model.hf))? {
                match profile::options(&ProfileArgs { parallel: with_world(a, layout, 2), ..args_for(a, batch, ctx, None) }) {
                    Ok(_) => kept.push(layout),
                    Err(e) => {
                        note(&format!("--parallel {} left out of the search: {e:#}", layout.name()));
                        first_refusal.get_or_insert(e);
                    }
                }
            }
            match first_refusal {
                Some(e) if kept.is_empty() => return Err(e),
                _ => kept,
            }
        }
    };
    let base_args = ProfileArgs { parallel: with_world(a, layouts[0], 1), ..args_for(a, batch, ctx, None) };
    let base = profile::options(&base_args)?;
    let budget = budget(a, &base)?;
    Ok(WorldPlan { layouts, kind: a.profile_type, base, batch, ctx, cap, budget })
}

/// The parallel flags of `layout` at `n` ranks (hsdp: a node of up to 8).
fn with_world(a: &FitArgs, layout: Layout, n: usize) -> super::parallel::ParallelFlags {
    let mut f = a.parallel.clone();
    f.parallel = Some(layout.name().to_string());
    f.world_size = Some(n);
    if layout == Layout::Hsdp && f.gpus_per_node.is_none() {
        f.gpus_per_node = Some(8.min(n));
    }
    f
}

/// The probe of `layout` at `n` ranks (rank 0; the session picks the heaviest rank), or None
/// when hsdp's node does not divide `n`.
pub fn world_probe(a: &FitArgs, plan: &WorldPlan, layout: Layout, n: usize) -> Result<Option<ProfileOptions>> {
    let args = ProfileArgs { parallel: with_world(a, layout, n), memory_limit: Some(plan.budget.limit.clone()), memory_fraction: plan.budget.fraction, ..args_for(a, plan.batch, plan.ctx, None) };
    if layout == Layout::Hsdp && !n.is_multiple_of(args.parallel.gpus_per_node.unwrap_or(1)) {
        // A node's worth of ranks at a time.
        return Ok(None);
    }
    let mut p = profile::options(&args)?;
    p.keep_trace = false;
    Ok(Some(p))
}
