//! `vramscope fit`: the largest batch size, or the longest context, that fits a device — by
//! exponential then binary search over meta profile runs through the caching-allocator
//! model, where the model's out-of-memory counts as not fitting.
use super::model_flags::ModelFlags;
use super::profile::{self, ProfileArgs, ProfileType};
use super::{set_threads, usage};
use crate::export::gib;
use crate::model::Flavour;
use crate::record::reserve;
use anyhow::Result;
use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::json;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Find {
    /// The largest --batch-size at the given --context-length
    Batch,
    /// The longest --context-length at the given --batch-size
    Context,
    /// The fewest ranks (GPUs of --gpu's kind) that fit --batch-size per rank at
    /// --context-length, for --parallel's layout or for each of ddp, zero1, zero2 and fsdp
    #[value(name = "world-size")]
    WorldSize,
}

#[derive(Args, Debug, Clone)]
pub struct FitArgs {
    #[command(flatten)]
    pub model: ModelFlags,
    #[command(flatten)]
    pub precision: super::precision_flags::PrecisionFlags,
    #[command(flatten)]
    pub memory: super::memory_flags::MemoryFlags,
    #[command(flatten)]
    pub optim: super::optim_flags::OptimFlags,
    #[command(flatten)]
    pub parallel: super::parallel_flags::ParallelFlags,
    /// What to search for
    #[arg(long, value_enum, default_value = "batch")]
    pub find: Find,
    /// forward (`model(x)` with autograd, no loss), forward-loss (plus the loss, no backward),
    /// inference (no_grad) or training (one full step after warm-up)
    #[arg(long, value_enum, default_value = "training")]
    pub profile_type: ProfileType,
    /// Batch size held fixed when finding the context (default: the preset's)
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Context length held fixed when finding the batch size (default: the preset's)
    #[arg(long, alias = "seq-len")]
    pub context_length: Option<usize>,
    /// GPU whose memory bounds the allocator (as for `profile`)
    #[arg(long)]
    pub gpu: Option<String>,
    /// Device memory instead of a --gpu preset (e.g. 24GiB)
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// torch.cuda.set_per_process_memory_fraction share of the device
    #[arg(long)]
    pub memory_fraction: Option<f64>,
    /// PYTORCH_CUDA_ALLOC_CONF string (default: that environment variable)
    #[arg(long)]
    pub allocator_conf: Option<String>,
    /// Steps before the measured one (training: optimizer state exists after one)
    #[arg(long, default_value_t = 1)]
    pub warmup_steps: usize,
    /// Largest value tried (default: for --find context, the model's maximum sequence length
    /// when --max-seq-len or a config.json fixes one; else 1048576)
    #[arg(long)]
    pub max: Option<usize>,
    /// Write the answer as JSON to FILE; with no FILE or `-`, print it to stdout instead of
    /// the text (as `estimate --json`)
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
    /// Device memory kept free for what the allocator model does not hold: the CUDA context
    /// and the cuBLAS workspaces (default: 512 MiB context + 32 MiB per cuBLAS handle on
    /// H100/H200, 8.125 MiB elsewhere; two handles for training; see the README). 0 for none
    #[arg(long, value_name = "SIZE")]
    pub reserve: Option<String>,
}

/// One meta run of the search.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub value: usize,
    pub fits: bool,
    pub peak_allocated_bytes: usize,
    pub peak_reserved_bytes: usize,
    pub oom: Option<String>,
}

pub(crate) fn args_for(a: &FitArgs, batch: usize, ctx: usize) -> ProfileArgs {
    ProfileArgs {
        model: a.model.clone(),
        precision: a.precision.clone(),
        memory: a.memory.clone(),
        optim: a.optim.clone(),
        parallel: a.parallel.clone(),
        context_length: Some(ctx.to_string()),
        batch_size: Some(batch),
        warmup_steps: a.warmup_steps,
        measure_steps: 1,
        max_entries: super::profile::DEFAULT_MAX_ENTRIES,
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

/// What every probe runs against: the device (or its memory-fraction share) less the reserve.
pub(crate) struct Budget {
    pub capacity: usize,
    pub reserve_parts: Vec<reserve::Part>,
    pub reserve: usize,
    /// `--memory-limit` for the probes (device − reserve).
    pub limit: String,
    /// `--memory-fraction` for the probes, rescaled to the limit.
    pub fraction: Option<f64>,
}

pub(crate) fn budget(a: &FitArgs, base: &profile::Plan) -> Result<Budget> {
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

/// GiB (1024³) for a GiB or more, else MiB (1024²): small limits stay readable.
pub(crate) fn size(bytes: i64) -> String {
    let b = bytes.unsigned_abs();
    let sign = if bytes < 0 { "-" } else { "" };
    if b >= 1 << 30 {
        format!("{sign}{:.3} GiB", gib(b))
    } else {
        format!("{sign}{:.2} MiB", crate::export::mib(b))
    }
}

pub fn run(a: FitArgs) -> Result<()> {
    super::json_out::check(a.json.as_deref())?;
    if a.gpu.is_none() && a.memory_limit.is_none() {
        return Err(usage("--gpu", "fit needs a device capacity: give --gpu NAME or --memory-limit SIZE"));
    }
    if a.max == Some(0) {
        return Err(usage("--max", "must be at least 1"));
    }
    if a.parallel.world_size.is_some() && a.parallel.parallel.is_none() {
        return Err(usage("--world-size", "sets up a data-parallel job: give --parallel too (or --find world-size to search for it)"));
    }
    let r = a.model.resolve("walkthrough", super::model_flags::Names::Cs336)?;
    r.print_note();
    let batch = a.batch_size.unwrap_or(r.preset.batch_size);
    let ctx = a.context_length.unwrap_or(r.preset.seq_len.min(r.config.max_seq_len));
    if batch == 0 {
        return Err(usage("--batch-size", "must be at least 1"));
    }
    match a.find {
        Find::Batch if a.batch_size.is_some() => return Err(usage("--batch-size", "is what --find batch searches for: leave it out")),
        Find::Context if a.context_length.is_some() => return Err(usage("--context-length", "is what --find context searches for: leave it out")),
        _ => {}
    }
    // The model's maximum follows the run's length (as both seeds do) unless --max-seq-len or a
    // config.json's max_position_embeddings fixes it: then the search stops there.
    let model_max = (a.find == Find::Context && !a.model.max_follows_run(&r.config)).then_some(r.config.max_seq_len);
    if let (Some(m), Some(limit)) = (a.max, model_max) {
        if m > limit {
            return Err(usage("--max", format!("{m} exceeds the model's maximum sequence length {limit}: raise --max-seq-len too")));
        }
    }
    let cap = a.max.or(model_max).unwrap_or(1 << 20);
    let start = if a.find == Find::Context && r.config.flavour == Flavour::Tinyllama { 2 } else { 1 };
    let point = |n: usize| match a.find {
        Find::Batch | Find::WorldSize => (n, ctx),
        Find::Context => (batch, n),
    };
    // Validate the configuration once (bad flags are usage errors, exit 2) and get the device.
    let base = profile::plan(&args_for(&a, point(start).0, point(start).1))?;
    let Budget { capacity, reserve_parts, reserve, limit, fraction } = budget(&a, &base)?;
    let args_for = |a: &FitArgs, b: usize, c: usize| ProfileArgs { memory_limit: Some(limit.clone()), memory_fraction: fraction, ..args_for(a, b, c) };
    set_threads(None)?;
    super::quiet_oom_panics();
    let mut probes: Vec<Probe> = Vec::new();
    let mut probe = |n: usize| -> Result<Probe> {
        if let Some(p) = probes.iter().find(|p| p.value == n) {
            return Ok(p.clone());
        }
        let (b, c) = point(n);
        let args = args_for(&a, b, c);
        let mut plan = profile::plan(&args)?;
        plan.keep_trace = false;
        let run = profile::profile_one(&plan, &args, c, a.profile_type)?;
        let p = Probe {
            value: n,
            fits: run.oom.is_none(),
            peak_allocated_bytes: run.stats.allocated_bytes.peak,
            peak_reserved_bytes: run.stats.reserved_bytes.peak,
            oom: run.oom,
        };
        probes.push(p.clone());
        Ok(p)
    };
    let what = match a.find {
        Find::Batch | Find::WorldSize => "batch size",
        Find::Context => "context length",
    };
    let (lo, hi) = crate::analyse::search::largest(start, cap, |n| probe(n).map(|p| p.fits))?;
    let answer = lo.map(&mut probe).transpose()?;
    let first_fail = hi.map(&mut probe).transpose()?;
    probes.sort_by_key(|p| p.value);
    let device = base.gpu_name.clone().unwrap_or_else(|| "memory limit".into());
    // Free at the answer: what the process may use, less the reserve, less the peak the
    // caching allocator reserved (its segments) — or, looser, less the tensors' blocks.
    let margin = answer.as_ref().map(|p| capacity as i64 - reserve as i64 - p.peak_reserved_bytes as i64);
    let margin_allocated = answer.as_ref().map(|p| capacity as i64 - reserve as i64 - p.peak_allocated_bytes as i64);
    let fixed = match a.find {
        Find::Batch | Find::WorldSize => json!({"context_length": ctx}),
        Find::Context => json!({"batch_size": batch}),
    };
    if let Some(path) = &a.json {
        let out = json!({
            "find": a.find,
            "model": base.model_name,
            "config": base.model,
            "profile_type": a.profile_type,
            "optimizer": (a.profile_type == ProfileType::Training).then_some(&base.optim),
            "fixed": fixed,
            "device": device,
            "capacity_bytes": capacity,
            "reserve_bytes": reserve,
            "reserve": reserve_parts,
            "answer": answer.as_ref().map(|p| p.value),
            "peak_allocated_bytes": answer.as_ref().map(|p| p.peak_allocated_bytes),
            "peak_reserved_bytes": answer.as_ref().map(|p| p.peak_reserved_bytes),
            "margin_bytes": margin,
            "margin_gib": margin.map(|m| m as f64 / (1u64 << 30) as f64),
            "margin_percent": margin.map(|m| 100.0 * m as f64 / capacity as f64),
            "margin_over_allocated_bytes": margin_allocated,
            "margin_note": "margin = capacity − reserve − peak reserved (max_memory_reserved); margin_over_allocated uses peak allocated (max_memory_allocated)",
            "first_not_fitting": first_fail.as_ref().map(|p| p.value),
            "oom": first_fail.as_ref().and_then(|p| p.oom.clone()),
            "search_limit": cap,
            "units": "bytes; GiB are 1024³ bytes",
            "probes": probes,
        });
        if super::json_out::write(path, &out)? {
            return Ok(());
        }
    }
    let fixed_txt = match a.find {
        Find::Batch | Find::WorldSize => format!("context length {ctx}"),
        Find::Context => format!("batch size {batch}"),
    };
    println!(
        "vramscope fit | {} ({}) {:?}, {fixed_txt}, on meta against {device} ({}{}) | GiB/MiB are 1024-based",
        base.model_name,
        base.model.flavour,
        a.profile_type,
        size(capacity as i64),
        a.memory_fraction.map_or(String::new(), |f| format!(", memory fraction {f}"))
    );
    if a.profile_type == ProfileType::Training {
        println!("optimizer: {}", base.optim.summary());
    }
    let tried: Vec<String> = probes.iter().map(|p| format!("{}{}", p.value, if p.fits { "" } else { "✗" })).collect();
    let parts: Vec<String> = reserve_parts.iter().map(|p| format!("{} = {}", p.what, size(p.bytes as i64))).collect();
    println!(
        "reserve {}{} kept free for what the allocator model does not hold{}; probes run against {}",
        size(reserve as i64),
        if a.reserve.is_none() { " (default; --reserve SIZE to change)" } else { " (--reserve)" },
        if a.reserve.is_none() { format!(": {}", parts.join(" + ")) } else { String::new() },
        size(capacity as i64 - reserve as i64)
    );
    println!("probes ({} meta runs; ✗ = out of memory): {}", probes.len(), tried.join(" "));
    match &answer {
        None => println!("nothing fits: {what} {start} already runs out of memory ({})", first_fail.and_then(|p| p.oom).unwrap_or_default()),
        Some(p) => {
            let (m, ma) = (margin.unwrap(), margin_allocated.unwrap());
            println!("largest {what} that fits: {}", p.value);
            println!("at {}: peak allocated {} (max_memory_allocated), peak reserved {} (max_memory_reserved)", p.value, size(p.peak_allocated_bytes as i64), size(p.peak_reserved_bytes as i64));
            println!(
                "margin left at {}: {} capacity − {} reserve − {} peak reserved = {} ({:.1} % of capacity); over peak allocated: {}",
                p.value,
                size(capacity as i64),
                size(reserve as i64),
                size(p.peak_reserved_bytes as i64),
                size(m),
                100.0 * m as f64 / capacity as f64,
                size(ma)
            );
            match &first_fail {
                Some(f) => println!("{what} {} does not fit: {}", f.value, f.oom.as_deref().unwrap_or("")),
                None if model_max == Some(cap) => {
                    println!("(the search stopped at the model's maximum sequence length {cap}: raise --max-seq-len to look further)")
                }
                None => println!("(the search stopped at its limit {cap}: raise --max to look further)"),
            }
        }
    }
    Ok(())
}
