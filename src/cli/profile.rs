//! `vramscope profile`: the CS336 `profile_memory.py` without a GPU — runs forward,
//! inference or training steps through the caching-allocator model and writes a
//! memory_viz snapshot, `summary.json` and a printed summary (peak, phases, what is live
//! at the peak, the largest allocations), plus a peak table over context lengths.
use super::model_flags::ModelFlags;
use super::precision_flags::PrecisionFlags;
use super::memory_flags::MemoryFlags;
use super::{set_threads, usage};
use crate::engine::Device;
use crate::export::{gib, mib, write_json};
use crate::model::Flavour;
use crate::record::allocator::AllocatorConfig;
use crate::record::gpu;
use crate::train::Precision;
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
    pub optim: super::optim_flags::OptimFlags,
    #[command(flatten)]
    pub parallel: super::parallel_flags::ParallelFlags,
    /// Sequence length(s), comma separated (default: the preset's)
    #[arg(long)]
    pub context_length: Option<String>,
    /// Batch size B (default: the preset's)
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Steps run before recording (optimizer state exists after one training step)
    #[arg(long, default_value_t = 1)]
    pub warmup_steps: usize,
    /// Steps recorded into the snapshot
    #[arg(long, default_value_t = 1)]
    pub measure_steps: usize,
    /// Trace entries the snapshot keeps, as `_record_memory_history(max_entries=…)`: a ring
    /// buffer that drops the oldest entries when full (default: CS336's profile_memory.py value)
    #[arg(long, default_value_t = DEFAULT_MAX_ENTRIES)]
    pub max_entries: usize,
    /// forward (`model(x)` with autograd, no loss), forward-loss (the same plus the loss, no
    /// backward), inference (no_grad) or training; a comma list runs each (the peak table gets
    /// a column per type)
    #[arg(long, value_enum, value_delimiter = ',', default_value = "training")]
    pub profile_type: Vec<ProfileType>,
    /// cpu (real numerics) or meta (shapes only; any model size)
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// GPU whose memory bounds the allocator: H100-80GB, H200-141GB, A100-40GB, A100-80GB,
    /// MI250X-64GB (one GCD), MI300X-192GB, RTX4090-24GB
    #[arg(long)]
    pub gpu: Option<String>,
    /// Device memory instead of a --gpu preset (e.g. 24GiB, 80GB)
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// torch.cuda.set_per_process_memory_fraction: reserved memory may not exceed this share
    /// of the device (needs --gpu or --memory-limit; arms garbage_collection_threshold)
    #[arg(long)]
    pub memory_fraction: Option<f64>,
    /// PYTORCH_CUDA_ALLOC_CONF string (default: that environment variable)
    #[arg(long)]
    pub allocator_conf: Option<String>,
    /// Snapshot path (one context length only; default: <out-dir>/<model>_ctx<S>_<type>_snapshot.pickle)
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Folder the outputs are written to (created if missing)
    #[arg(long, default_value = "vramscope-out/profile")]
    pub out_dir: PathBuf,
    /// CPU threads for the cpu device (default: all cores)
    #[arg(long)]
    pub threads: Option<usize>,
    /// Random seed for the weights and the synthetic data
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Training: split each batch into N micro-batches whose gradients accumulate before one
    /// optimizer step (`loss / N; loss.backward()` per micro-batch)
    #[arg(long, default_value_t = 1)]
    pub grad_accum_steps: usize,
    /// Count FLOPs, bytes moved and arithmetic intensity per op and module over the measured
    /// steps (DeepSpeed's FLOPS profiler view); MFU on cpu, a roofline prediction with --gpu
    #[arg(long, alias = "enable-deepspeed-flops")]
    pub flops: bool,
    /// Module depth of the printed FLOP tree
    #[arg(long, default_value_t = 3, requires = "flops")]
    pub flops_depth: usize,
    /// Run the baseline (fp32, naive attention, no checkpointing, unfused, no accumulation)
    /// and each memory option given (--precision, --attention flash, --checkpoint, --fusion,
    /// --grad-accum-steps) alone and together — or, with none given, all of them — and print
    /// one table relative to the baseline
    #[arg(long)]
    pub compare: bool,
}

pub use crate::session::profile::{ComputeOut, ProfileOptions as Plan, ProfileType, Run, DEFAULT_MAX_ENTRIES};

/// One run of `p` as the command line makes it: the library's session, then its files.
pub(crate) fn profile_one(p: &Plan, a: &ProfileArgs, ctx: usize, kind: ProfileType) -> Result<Run> {
    let mut r = crate::session::profile_one(p, ctx, kind)?;
    write_files(p, a, &mut r)?;
    Ok(r)
}

/// When the plan keeps traces: the run's snapshot and report, written where `a` says (seed
/// 001's names by default), the trace then dropped.
fn write_files(p: &Plan, a: &ProfileArgs, r: &mut Run) -> Result<()> {
    if !p.keep_trace {
        return Ok(());
    }
    let path = a.output.clone().unwrap_or_else(|| {
        // Seed 001's names: fp32 has no suffix, mixed precision adds it (`_bf16_`).
        let prec = if p.precision == Precision::Fp32 { String::new() } else { format!("_{}", p.precision) };
        let variant = super::memory_flags::file_tag(&p.model, a.grad_accum_steps);
        let rank = p.parallel.as_ref().map_or(String::new(), |c| format!("_{}{}_rank{}", c.layout.name(), c.world_size, c.rank));
        a.out_dir.join(format!("{}_ctx{}_{}{prec}{variant}{rank}_snapshot.pickle", p.model_name, r.context, r.kind.name()))
    });
    r.save_snapshot(&path)?;
    let name = path.file_name().map_or_else(|| "snapshot".into(), |n| n.to_string_lossy().into_owned());
    r.save_report(&super::view::default_output(&path, None), &name, p.capacity_line())?;
    r.trace = None;
    Ok(())
}

impl ProfileArgs {
    /// Parse profile flags given as words (without the subcommand name), for subcommands
    /// that run profiles: the error is clap's first line, without its `error: ` prefix.
    pub(crate) fn parse_words(words: &[String]) -> std::result::Result<ProfileArgs, String> {
        use clap::Parser;
        #[derive(Parser)]
        #[command(name = "profile")]
        struct W {
            #[command(flatten)]
            a: ProfileArgs,
        }
        W::try_parse_from(std::iter::once("profile").chain(words.iter().map(String::as_str))).map(|w| w.a).map_err(|e| {
            e.to_string().lines().next().unwrap_or("").trim_start_matches("error: ").to_string()
        })
    }
}

/// `--context-length`'s list syntax, for subcommands that run profiles.
pub(crate) fn parse_context_list(s: &str) -> Result<Vec<usize>> {
    parse_list("--context-length", s)
}

fn parse_list(flag: &'static str, s: &str) -> Result<Vec<usize>> {
    let v: Result<Vec<usize>, _> = s.split(',').map(|x| x.trim().parse::<usize>()).collect();
    match v {
        Ok(v) if !v.is_empty() && v.iter().all(|&x| x > 0) => Ok(v),
        _ => Err(usage(flag, format!("'{s}' (expected positive whole numbers separated by commas)"))),
    }
}

pub(crate) fn plan(a: &ProfileArgs) -> Result<Plan> {
    let r = a.model.resolve("walkthrough", super::model_flags::Names::Cs336)?;
    let mut cfg = r.config;
    a.memory.apply(&mut cfg)?;
    let device = super::parse_device(&a.device)?;
    let contexts = match &a.context_length {
        Some(s) => parse_list("--context-length", s)?,
        None => vec![r.preset.seq_len.min(cfg.max_seq_len)],
    };
    a.model.follow_seq_len(&mut cfg, *contexts.iter().max().unwrap());
    for &c in &contexts {
        cfg.check_seq_len(c, "--context-length").map_err(super::UsageError::from)?;
        if a.profile_type.iter().any(|&k| k != ProfileType::Inference) {
            super::hf_flags::check_with_labels(&cfg, c)?;
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
        cfg.check_sizes(batch, c, "--context-length").map_err(super::UsageError::from)?;
    }
    if a.measure_steps == 0 {
        return Err(usage("--measure-steps", "must be at least 1"));
    }
    if a.max_entries == 0 {
        return Err(usage("--max-entries", "must be at least 1 (the snapshot keeps this many trace entries)"));
    }
    super::host_memory::check_bookkeeping(cfg.num_layers, a.max_entries)?;
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
    let precision = a.precision.resolve_for(&cfg)?;
    for &c in &contexts {
        super::hf_flags::check_kernel(&cfg, precision, c)?;
    }
    let mut optim = a.optim.resolve(cfg.flavour, a.profile_type.contains(&ProfileType::Training))?;
    let parallel = a.parallel.resolve()?;
    if let Some(pc) = parallel.as_ref().filter(|c| c.tp > 1) {
        pc.model_config(&cfg).validate().map_err(|e| usage(e.flag, e.message))?;
        tp_optimizer(pc, &a.optim, &mut optim)?;
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
    Ok(Plan {
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
    })
}

/// What PyTorch's optimizer and clipping accept under tensor parallelism: AdamW's foreach
/// and fused kernels (and SGD's foreach) refuse a list that mixes DTensor and plain
/// parameters, as pure TP's replicated norms are; clipping DTensor gradients is not
/// modelled, so it must be off.
fn tp_optimizer(pc: &crate::parallel::ParallelConfig, flags: &super::optim_flags::OptimFlags, optim: &mut crate::train::optim::OptimConfig) -> Result<()> {
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

fn print_run(p: &Plan, r: &Run, depth: usize) {
    let g = |b: usize| gib(b as u64);
    println!(
        "\n== {} ({}) {} {}, context {}, batch {} on {} | {}",
        p.model_name,
        p.model.flavour,
        r.kind.name(),
        p.precision,
        r.context,
        p.batch,
        p.device,
        limit_label(p)
    );
    if let Some(line) = super::memory_flags::describe(&p.model) {
        println!("{line}");
    }
    if let Some(line) = super::hf_flags::describe(&p.model, p.precision, r.context) {
        println!("{line}");
    }
    if let Some(c) = &p.parallel {
        println!("{}", super::parallel_flags::describe(c));
    }
    if let Some(h) = r.host_peak {
        println!("host memory (CPU offload: shards, sharded gradients, optimizer state): peak {:.3} GiB ({h} B), not counted on the device", g(h));
    }
    if let Some((name, bytes)) = r.units.iter().max_by_key(|u| u.1) {
        let all: u64 = r.units.iter().map(|u| u.1).sum();
        println!("FSDP units: {} (root + blocks); the largest unsharded is {name}, {:.2} MiB allocated while gathered (all units: {:.2} MiB)", r.units.len(), mib(*bytes), mib(all));
    }
    if r.kind == ProfileType::Training {
        println!("optimizer: {}", p.optim.summary());
    }
    if let Some(o) = &r.oom {
        println!("OUT OF MEMORY in {}: {o}", r.oom_stage.as_deref().unwrap_or("the run"));
    }
    let rep = &r.report;
    if let Some(f) = &rep.failed {
        let q = &f.request;
        println!(
            "failed allocation: {:.2} MiB requested ({:.2} MiB block) by {} in {}, phase {}, category {}, at {}",
            mib(q.requested_bytes as u64),
            mib(q.block_bytes as u64),
            q.op,
            q.scope,
            q.phase,
            q.category,
            q.location
        );
        let cats: Vec<String> = f.live_by_category.iter().map(|(c, b)| format!("{c} {:.3}", g(*b))).collect();
        println!("live when it failed: {:.3} GiB allocated; by category (GiB): {}", g(f.live_bytes), cats.join(" | "));
        println!("live when it failed, top modules (MiB allocated):");
        for (m, b) in f.live_by_module.iter().take(8) {
            println!("  {:>10.2} MiB  {m}", mib(*b as u64));
        }
    }
    // After an OOM the figures below cover the history up to the failure.
    let so_far = if r.oom.is_some() { " so far" } else { "" };
    println!("(GiB/MiB are 1024-based; allocated = allocator block bytes = torch.cuda.max_memory_allocated(); requested = the tensors' own bytes, what memory_viz and `analyze` draw; reserved = max_memory_reserved())");
    println!(
        "peak allocated{so_far} {:.3} GiB ({} B) at {} [{}], phase {} | peak requested {:.3} GiB | peak reserved {:.3} GiB",
        g(r.stats.allocated_bytes.peak),
        r.stats.allocated_bytes.peak,
        rep.peak_scope,
        rep.peak_op,
        rep.peak_phase.map_or("-".into(), |p| p.to_string()),
        g(r.stats.requested_bytes.peak),
        g(r.stats.reserved_bytes.peak)
    );
    let phases: Vec<String> = rep.phase_peaks.iter().map(|(ph, b)| format!("{ph} {:.3}", g(*b))).collect();
    println!("peak allocated by phase (GiB): {}", phases.join(" | "));
    let cats: Vec<String> = rep.by_category.iter().map(|(c, b)| format!("{c} {:.3}", g(*b))).collect();
    println!("live at the peak by category (GiB allocated): {}", cats.join(" | "));
    println!("live at the peak, top modules (MiB allocated):");
    for (m, b) in rep.by_module.iter().take(8) {
        println!("  {:>10.2} MiB  {m}", mib(*b as u64));
    }
    println!("largest allocations (MiB allocated, i.e. the allocator block; requested tensor bytes in brackets when they differ):");
    for l in rep.largest.iter().take(8) {
        let requested = if l.requested_bytes == l.block_bytes { String::new() } else { format!(" [{:.2} requested]", mib(l.requested_bytes as u64)) };
        println!(
            "  {:>10.2} MiB{requested}  {} in {} ({}, {}) at {}",
            mib(l.block_bytes as u64),
            l.op,
            l.scope,
            l.phase,
            l.category,
            l.location
        );
    }
    println!(
        "fragmentation: reserved − allocated at the end {:.2} MiB; inactive split peak {:.2} MiB; alloc retries {}; OOMs {}",
        mib((r.stats.reserved_bytes.current - r.stats.allocated_bytes.current) as u64),
        mib(r.stats.inactive_split_bytes.peak as u64),
        r.stats.num_alloc_retries,
        r.stats.num_ooms
    );
    if let (Some(snap), Some(html)) = (&r.snapshot, &r.report_html) {
        let kept = if r.trace_dropped > 0 {
            format!(", the last of {}: --max-entries dropped the oldest {}", r.events + r.trace_dropped, r.trace_dropped)
        } else {
            String::new()
        };
        let upto = if r.oom.is_some() { "history up to the failing allocation, ending in its `oom` entry; " } else { "" };
        println!("snapshot: {} ({upto}{} trace entries{kept}; open it at pytorch.org/memory_viz)", snap.display(), r.events);
        println!("report: {} (offline HTML: timeline, breakdown at the peak, largest allocations)", html.display());
    }
    if let Some(c) = &r.compute {
        super::compute::print(&c.report, depth, c.achieved.as_ref(), c.roofline.as_ref());
    }
}

/// For a cpu plan that cannot fit in host memory: the note saying it runs on meta instead
/// (profile, each --compare variant and each sweep point ask this before they run).
pub(crate) fn meta_if_host_too_small(p: &Plan, kinds: &[ProfileType]) -> Result<Option<String>> {
    if p.device != Device::Cpu {
        return Ok(None);
    }
    let training = kinds.contains(&ProfileType::Training);
    super::host_memory::meta_instead(&p.model, p.precision, p.batch, &p.contexts, training)
}

pub fn run(a: ProfileArgs) -> Result<()> {
    let mut p = plan(&a)?;
    if let Some(n) = &p.note {
        eprintln!("note: {n}");
    }
    if let Some(n) = meta_if_host_too_small(&p, &a.profile_type)? {
        println!("{n}");
        p.device = Device::Meta;
    }

    set_threads(a.threads)?;
    // Output paths are checked before any step runs; the files appear together at the end.
    if let Some(o) = &a.output {
        super::outputs::check_file("--output", o)?;
    }
    let set = super::outputs::begin_set("--out-dir", &a.out_dir)?;
    super::quiet_oom_panics();
    let ranks = p.ranks(a.parallel.rank.is_some())?;
    let runs = crate::session::profile::profile_all(&mut p, &a.profile_type, &ranks, |p, r| {
        write_files(p, &a, r)?;
        print_run(p, r, a.flops_depth);
        Ok(())
    })?;
    if ranks.len() > 1 {
        println!("\n| rank | context | profile type | peak allocated (GiB) | peak reserved (GiB) |\n|---:|---:|---|---:|---:|");
        for r in &runs {
            println!("| {} | {} | {} | {:.3} | {:.3} |", r.rank.unwrap_or(0), r.context, r.kind.name(), gib(r.stats.allocated_bytes.peak as u64), gib(r.stats.reserved_bytes.peak as u64));
        }
    }
    if runs.len() > 1 && ranks.len() == 1 {
        // Seed 001 part (b): peak memory per context length, a column pair per profile type.
        let kinds: Vec<String> = a.profile_type.iter().map(|k| format!("{k:?}").to_lowercase()).collect();
        let head: Vec<String> = kinds.iter().map(|k| format!("{k} peak allocated (GiB) | {k} peak reserved (GiB)")).collect();
        println!("\n| context length | {} |\n|---:|{}", head.join(" | "), "---:|---:|".repeat(kinds.len()));
        for &ctx in &p.contexts {
            let cells: Vec<String> = runs
                .iter()
                .filter(|r| r.context == ctx)
                .map(|r| format!("{:.3} | {:.3}", gib(r.stats.allocated_bytes.peak as u64), gib(r.stats.reserved_bytes.peak as u64)))
                .collect();
            println!("| {ctx} | {} |", cells.join(" | "));
        }
    }
    let summary = crate::session::summary::profile(&p, &a.profile_type, &ranks, &runs, Some(set.run_id().to_string()));
    // summary.json describes this invocation and names its snapshots; those carry the variant
    // in their names, so only the summary is replaced by a later run, and it says so.
    let summary_path = a.out_dir.join("summary.json");
    let replaced = if summary_path.exists() { " (replacing the summary of an earlier run; its snapshots keep their names)" } else { "" };
    write_json(&summary_path, &summary)?;
    set.commit()?;
    println!("\nwrote {}{replaced}", summary_path.display());
    if let Some(r) = runs.iter().find(|r| r.oom.is_some()) {
        let snap = r.snapshot.as_ref().map_or(String::new(), |s| format!("; snapshot of the history up to the failing allocation: {}", s.display()));
        anyhow::bail!("out of memory in {}{snap}", r.oom_stage.as_deref().unwrap_or("the run"));
    }
    Ok(())
}

/// The device memory the allocator was bounded by, as the header prints it.
fn limit_label(p: &Plan) -> String {
    if p.capacity >= usize::MAX / 4 {
        return "no GPU memory limit (give --gpu or --memory-limit)".into();
    }
    let size = |b: usize| if b >= 1 << 30 { format!("{:.2} GiB", gib(b as u64)) } else { format!("{:.2} MiB", mib(b as u64)) };
    let mut s = match (&p.gpu_name, p.capacity != p.gpu.map_or(0, |g| g.memory_bytes)) {
        (Some(n), false) => format!("{n}, {}", size(p.capacity)),
        (Some(n), true) => format!("memory limit {} ({n}'s --memory-limit)", size(p.capacity)),
        (None, _) => format!("memory limit {}", size(p.capacity)),
    };
    if let Some(f) = p.fraction {
        s += &format!(", memory fraction {f} → {} usable", size((f * p.capacity as f64) as usize));
    }
    s
}
