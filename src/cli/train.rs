//! `vramscope train`: the workshop's `tiny_llama_v1.py` — trains on synthetic tokens and
//! reports loss, step times, throughput and memory, then writes `config.json` and
//! `performance_summary.json`.
use super::model_flags::ModelFlags;
use super::precision_flags::PrecisionFlags;
use super::memory_flags::MemoryFlags;
use super::{set_threads, usage};
use crate::engine::{runtime, Device};
use crate::export::{mib, write_json};
use crate::model::Flavour;
use crate::analyse::flops;
use crate::analyse::operators::{self, SortKey};
use crate::export::chrome_trace;
use crate::record::Phase;
use crate::train::optim::{OptimConfig, OptimizerKind};
use crate::train::{DataKind, Precision, StepResult};
pub use crate::session::train::{execute, precision_note, ComputeWindow, TrainOutcome, TrainPlan};
use anyhow::Result;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    #[command(flatten)]
    pub model: ModelFlags,
    #[command(flatten)]
    pub precision: PrecisionFlags,
    #[command(flatten)]
    pub memory: MemoryFlags,
    /// Batch size B (default: the preset's)
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Sequence length S of each training sample (default: the preset's)
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// Training steps, warm-up steps included (default: the preset's)
    #[arg(long)]
    pub num_steps: Option<usize>,
    /// Steps excluded from the averages (default 3, fewer when --num-steps leaves no measured step)
    #[arg(long)]
    pub warmup_steps: Option<usize>,
    /// Default: 1e-3 (cs336), 3e-4 (tinyllama) or 5e-5 (hf, the Trainer's)
    #[arg(long)]
    pub learning_rate: Option<f64>,
    /// Weight decay: AdamW's decoupled decay, SGD's coupled one (default: the flavour's
    /// reference, 0.01 for cs336 and tinyllama, 0.0 for hf; 0 for sgd, torch.optim.SGD's)
    #[arg(long)]
    pub weight_decay: Option<f64>,
    #[command(flatten)]
    pub optim: super::optim_flags::OptimFlags,
    /// SGD momentum (--optimizer sgd only)
    #[arg(long, default_value_t = 0.0)]
    pub momentum: f64,
    /// Random seed for the weights and the synthetic data
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// cpu (real numerics) or meta (shapes and memory only)
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Worker threads for cpu kernels (default: all cores)
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print every N-th step
    #[arg(long, default_value_t = 1)]
    pub log_interval: usize,
    /// Folder for performance_summary.json, the trace and other outputs
    #[arg(long, default_value = "vramscope-out/train")]
    pub output_dir: PathBuf,
    /// workshop (tiny_llama_v1.py's SimpleTextDataset: B distinct rows of a fixed pool of 1000
    /// uniform-id sequences; default for tinyllama), random (fresh uniform ids each batch, as
    /// CS336's benchmark; default for cs336) or pattern (a learnable repeating sequence)
    #[arg(long)]
    pub data: Option<String>,
    /// Split each batch into N micro-batches whose gradients accumulate before one optimizer
    /// step (`loss / N; loss.backward()` per micro-batch); also --gradient-accumulation-steps
    #[arg(long, default_value_t = 1, alias = "gradient-accumulation-steps")]
    pub grad_accum_steps: usize,
    /// Count FLOPs, bytes moved and arithmetic intensity per op and module for one step, with
    /// MFU against this machine's calibrated peaks (DeepSpeed's FLOPS profiler)
    #[arg(long, alias = "enable-deepspeed-flops")]
    pub flops: bool,
    /// Which step --flops profiles (1-based; default: the first step after warm-up)
    #[arg(long, requires = "flops", conflicts_with = "enable_pytorch_profiler")]
    pub flops_profile_step: Option<usize>,
    /// Module depth of the printed FLOP tree
    #[arg(long, default_value_t = 3)]
    pub flops_depth: usize,
    /// Write a chrome trace of --profile-steps steps after warm-up (Perfetto,
    /// chrome://tracing, TensorBoard's profiler plugin); with --flops, the FLOPs cover them
    #[arg(long)]
    pub enable_pytorch_profiler: bool,
    /// Where the trace and the operator table go (default ./profiles; the trace is named
    /// `<host>_<pid>.<time_ns>.pt.trace.json`)
    #[arg(long)]
    pub profile_dir: Option<PathBuf>,
    /// The workshop's operator table (`prof.key_averages().table(sort_by=…)`): per operator,
    /// calls, self cpu time, FLOPs and bytes over the --profile-steps steps after warm-up;
    /// printed and written to <profile-dir>/operator_table.txt
    #[arg(long)]
    pub profile_operators: bool,
    /// Order of the operator table: self_cpu_time_total (default on cpu), cpu_time_total,
    /// cpu_time (average), count or flops (default on meta); the CUDA keys
    /// (cuda_time_total, …) fall back to self_cpu_time_total as the workshop's script does
    #[arg(long, requires = "profile_operators")]
    pub sort_by: Option<String>,
    /// tiny_llama_v1.py's deterministic mode (seeded, deterministic algorithms). Every run here
    /// is deterministic: kernels reduce in a fixed order whatever --threads is, data and
    /// weights come from --seed. The flag says so and records it in config.json
    #[arg(long)]
    pub deterministic: bool,
    /// Steps the trace covers (default 5, fewer when the run has fewer after warm-up)
    #[arg(long)]
    pub profile_steps: Option<usize>,
    /// Add `[memory]` events to the trace: every allocation and free through the CUDA
    /// caching-allocator model, with allocated and reserved totals
    #[arg(long, requires = "enable_pytorch_profiler")]
    pub profile_memory: bool,
    /// GPU preset: a roofline prediction of the step with --flops, and the trace's device
    #[arg(long)]
    pub gpu: Option<String>,
}

impl TrainArgs {
    /// Defaults plus the given flags (used by other subcommands).
    pub fn parse_from_words(words: &[&str]) -> TrainArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct W {
            #[command(flatten)]
            a: TrainArgs,
        }
        W::parse_from(std::iter::once("train").chain(words.iter().copied())).a
    }
}

/// --sort-by for the operator table (torch's key names). CUDA keys have no times here and fall
/// back to self cpu time, as the workshop's script does; meta has no times at all.
fn operator_sort(s: Option<&str>, device: Device) -> Result<(SortKey, Option<String>)> {
    let timed = device == Device::Cpu;
    let untimed = |k: &str| (!timed).then(|| format!("--sort-by {k}: meta runs no kernels, so there are no times; sorting by flops"));
    Ok(match s {
        None if timed => (SortKey::CpuTimeTotal, None),
        None => (SortKey::Flops, None),
        Some(k @ ("self_cpu_time_total" | "cpu_time_total")) => untimed(k).map_or((SortKey::CpuTimeTotal, None), |n| (SortKey::Flops, Some(n))),
        Some("cpu_time") => untimed("cpu_time").map_or((SortKey::CpuTimeAvg, None), |n| (SortKey::Flops, Some(n))),
        Some("count") => (SortKey::Count, None),
        Some("flops") => (SortKey::Flops, None),
        Some(k @ ("cuda_time" | "cuda_time_total" | "self_cuda_time_total" | "device_time_total" | "self_device_time_total")) => {
            let to = if timed { SortKey::CpuTimeTotal } else { SortKey::Flops };
            (to, Some(format!("--sort-by {k}: there is no CUDA device here, so no CUDA times; sorting by {}", to.name())))
        }
        Some(k) => {
            return Err(usage(
                "--sort-by",
                format!("'{k}' (expected self_cpu_time_total, cpu_time_total, cpu_time, count, flops, or a CUDA key that falls back to self_cpu_time_total)"),
            ))
        }
    })
}

/// Warm-up steps excluded from the averages unless --warmup-steps says otherwise.
const DEFAULT_WARMUP: usize = 3;
/// Steps a trace covers unless --profile-steps says otherwise.
const DEFAULT_PROFILE_STEPS: usize = 5;

pub fn plan(a: &TrainArgs) -> Result<TrainPlan> {
    let r = a.model.resolve("walkthrough", super::model_flags::Names::Workshop)?;
    r.print_note();
    let mut cfg = r.config;
    a.memory.apply(&mut cfg)?;
    let device = super::parse_device(&a.device)?;
    let batch = a.batch_size.unwrap_or(r.preset.batch_size);
    if batch == 0 {
        return Err(usage("--batch-size", "must be at least 1"));
    }
    if a.grad_accum_steps == 0 || !batch.is_multiple_of(a.grad_accum_steps) {
        return Err(usage("--grad-accum-steps", format!("{} must be at least 1 and divide --batch-size {batch}", a.grad_accum_steps)));
    }
    let seq = a.seq_len.unwrap_or(r.preset.seq_len.min(cfg.max_seq_len));
    a.model.follow_seq_len(&mut cfg, seq);
    cfg.check_seq_len(seq, "--seq-len").map_err(super::UsageError::from)?;
    super::hf_flags::check_with_labels(&cfg, seq)?;
    cfg.check_sizes(batch, seq, "--seq-len").map_err(super::UsageError::from)?;
    super::host_memory::check_bookkeeping(cfg.num_layers, 0)?;
    if cfg.flavour == Flavour::Tinyllama && seq < 2 {
        return Err(usage("--seq-len", "tinyllama shifts logits and labels by one: needs at least 2"));
    }
    let steps = a.num_steps.unwrap_or(r.preset.num_steps);
    if steps == 0 {
        return Err(usage("--num-steps", "must be at least 1"));
    }
    // The default warm-up gives way to a short run; an explicit one that leaves nothing to
    // measure is the user's conflict.
    let (warmup, warmup_note) = match a.warmup_steps {
        Some(w) if w >= steps => {
            return Err(usage("--warmup-steps", format!("{w} leaves no measured step out of --num-steps {steps}")));
        }
        Some(w) => (w, None),
        None if DEFAULT_WARMUP < steps => (DEFAULT_WARMUP, None),
        None => {
            let w = steps - 1;
            (w, Some(format!("warm-up: {w} step{} (not the default {DEFAULT_WARMUP}) so that --num-steps {steps} leaves one measured step", if w == 1 { "" } else { "s" })))
        }
    };
    if a.log_interval == 0 {
        return Err(usage("--log-interval", "must be at least 1"));
    }
    // Each seed's own data unless --data says otherwise: the workshop's pool for tinyllama,
    // CS336's fresh uniform ids for cs336.
    let data = match a.data.as_deref() {
        None if cfg.flavour == Flavour::Tinyllama => DataKind::Workshop,
        None => DataKind::Random,
        Some(d) => DataKind::parse(d).ok_or_else(|| usage("--data", format!("'{d}' (expected workshop, random or pattern)")))?,
    };
    let reference: OptimConfig = a.optim.resolve(cfg.flavour, true)?;
    let kind = reference.kind;
    let lr = a.learning_rate.unwrap_or(reference.lr);
    if !(lr > 0.0 && lr.is_finite()) {
        return Err(usage("--learning-rate", "must be a positive number"));
    }
    let weight_decay = a.weight_decay.unwrap_or(reference.weight_decay);
    if !(weight_decay >= 0.0 && weight_decay.is_finite()) {
        return Err(usage("--weight-decay", "must be a non-negative number"));
    }
    if !(0.0..1.0).contains(&a.momentum) {
        return Err(usage("--momentum", "must be in [0, 1)"));
    }
    if a.momentum != 0.0 && kind != OptimizerKind::Sgd {
        return Err(usage("--momentum", format!("is SGD's; --optimizer is {kind} (use --optimizer sgd)")));
    }
    let optim = OptimConfig { kind, lr, weight_decay, momentum: a.momentum, ..reference };
    let gpu = a.gpu.as_deref().map(crate::record::gpu::find).transpose().map_err(|e| usage("--gpu", e))?;
    let window = a.enable_pytorch_profiler || a.profile_operators;
    if a.profile_steps.is_some() && !window {
        return Err(usage("--profile-steps", "sizes the profiled window: needs --enable-pytorch-profiler or --profile-operators"));
    }
    if a.profile_dir.is_some() && !window {
        return Err(usage("--profile-dir", "is where profiles go: needs --enable-pytorch-profiler or --profile-operators"));
    }
    if a.profile_operators && a.flops_profile_step.is_some() {
        return Err(usage("--flops-profile-step", "with --profile-operators the FLOPs cover the profiled steps: leave it out"));
    }
    let operators = a.profile_operators.then(|| operator_sort(a.sort_by.as_deref(), device)).transpose()?;
    let compute = if window {
        let count = match a.profile_steps {
            Some(0) => return Err(usage("--profile-steps", "must be at least 1")),
            Some(n) if warmup + n > steps => {
                return Err(usage("--profile-steps", format!("{n} after {warmup} warm-up steps exceeds --num-steps {steps}")));
            }
            Some(n) => n,
            None => DEFAULT_PROFILE_STEPS.min(steps - warmup),
        };
        Some(ComputeWindow { first: warmup, count, memory: a.profile_memory })
    } else if a.flops {
        let step = a.flops_profile_step.unwrap_or(warmup + 1);
        if step == 0 || step > steps {
            return Err(usage("--flops-profile-step", format!("{step} is not one of the run's steps 1..={steps}")));
        }
        Some(ComputeWindow { first: step - 1, count: 1, memory: false })
    } else {
        None
    };
    let precision = a.precision.resolve_for(&cfg)?;
    super::hf_flags::check_kernel(&cfg, precision, seq)?;
    Ok(TrainPlan {
        model: cfg,
        preset: format!("{}-{}", r.preset.model.flavour, r.preset.name),
        batch,
        accum: a.grad_accum_steps,
        seq,
        steps,
        warmup,
        warmup_note,
        operators,
        device,
        data,
        optim,
        seed: a.seed,
        log_interval: a.log_interval,
        compute,
        gpu,
        precision,
    })
}

/// The step line `train` prints every `--log-interval` steps.
pub fn step_printer(p: &TrainPlan) -> impl FnMut(usize, &StepResult) + '_ {
    move |i, r| {
            if (i + 1) % p.log_interval == 0 || i + 1 == p.steps {
                let loss = r.loss.map_or("n/a (meta: no numerics)".to_string(), |l| format!("{l:.4}"));
                let timing = if p.device == Device::Cpu {
                    format!(
                        " | step {:8.2} ms (fwd {:7.2} bwd {:7.2} opt {:6.2}) | {:7.1} samples/s",
                        r.seconds * 1e3,
                        r.phase(Phase::Forward).seconds * 1e3,
                        r.phase(Phase::Backward).seconds * 1e3,
                        r.phase(Phase::Optimizer).seconds * 1e3,
                        p.batch as f64 / r.seconds
                    )
                } else {
                    String::new()
                };
                println!(
                    "step {:4}/{} | loss {loss}{timing} | peak {:9.2} MiB | live {:9.2} MiB{}",
                    i + 1,
                    p.steps,
                    mib(r.peak_allocated as u64),
                    mib(r.allocated_after as u64),
                    if r.skipped_step { " | optimizer step skipped (inf/NaN gradients; loss scale backed off)" } else { "" }
                );
            }
    }
}

pub fn run(a: TrainArgs) -> Result<()> {
    let mut p = plan(&a)?;
    if p.device == Device::Cpu {
        if let Some(n) = super::host_memory::meta_instead(&p.model, p.precision, p.batch / p.accum, &[p.seq], true)? {
            println!("{n}");
            p.device = Device::Meta;
        }
    }
    let threads = set_threads(a.threads)?;
    // Output folders are checked before any step runs; the files appear together at the end.
    let set = super::outputs::begin_set("--output-dir", &a.output_dir)?;
    if a.enable_pytorch_profiler || p.operators.is_some() {
        super::outputs::check_dir("--profile-dir", a.profile_dir.as_deref().unwrap_or(std::path::Path::new("./profiles")))?;
    }
    let m = &p.model;
    println!(
        "vramscope train | {} ({}) on {} | {threads} threads | optimizer {}",
        p.preset,
        m.flavour,
        p.device,
        p.optim.kind.name()
    );
    println!(
        "config: vocab {} hidden {} layers {} heads {} kv_heads {} ffn {} | batch {} seq {} steps {} (warm-up {})",
        m.vocab_size, m.d_model, m.num_layers, m.num_heads, m.num_kv_heads, m.d_ff, p.batch, p.seq, p.steps, p.warmup
    );
    println!("optimizer: {}", p.optim.summary());
    if let Some(n) = &p.warmup_note {
        println!("{n}");
    }
    if a.deterministic {
        println!(
            "deterministic: yes — data and initial weights come from --seed {}, and every cpu kernel reduces in a fixed order whatever --threads is, so a repeated run gives bit-identical losses",
            p.seed
        );
    }
    if p.precision != Precision::Fp32 {
        println!("precision: {}", precision_note(p.precision));
    }
    if p.accum > 1 {
        println!("gradient accumulation: {} micro-batches of {} per optimizer step", p.accum, p.batch / p.accum);
    }
    if let Some(line) = super::memory_flags::describe(m) {
        println!("{line}");
    }
    if let Some(line) = super::hf_flags::describe(m, p.precision, p.seq) {
        println!("{line}");
    }
    println!(
        "params: {} ({:.2} MiB fp32){}",
        m.param_count(),
        mib(m.param_count() * 4),
        if m.tied_embeddings { format!("; the LM head is the embedding's weight, counted once ({} counting it twice, as the workshop guide does)", super::study::grouped(m.param_count_head_twice())) } else { String::new() }
    );
    if std::env::var_os("VRAMSCOPE_OP_TIMES").is_some() {
        runtime::enable_op_timing();
    }
    let out = execute(&p, &mut step_printer(&p))?;
    let times = runtime::take_op_times();
    if !times.is_empty() {
        println!("per-op kernel time over all steps (VRAMSCOPE_OP_TIMES):");
        for (op, n, s) in times.iter().take(25) {
            println!("  {op:<28} {n:6} calls {:9.2} ms", s * 1e3);
        }
    }
    let cpu = p.device == Device::Cpu;
    let measured = &out.steps[p.warmup..];
    let step_s = out.avg_step_s();
    let avg_peak = measured.iter().map(|s| s.peak_allocated as f64).sum::<f64>() / measured.len() as f64;
    println!("{}", "=".repeat(78));
    println!("parameters: {}", out.params);
    if cpu {
        println!(
            "average step (steps {}..{}): {:.2} ms | forward {:.2} ms | backward {:.2} ms | optimizer {:.2} ms",
            p.warmup + 1,
            p.steps,
            step_s * 1e3,
            out.avg_phase_s(Phase::Forward) * 1e3,
            out.avg_phase_s(Phase::Backward) * 1e3,
            out.avg_phase_s(Phase::Optimizer) * 1e3
        );
        println!(
            "throughput: {:.2} samples/s | {:.0} tokens/s",
            p.batch as f64 / step_s,
            (p.batch * p.seq) as f64 / step_s
        );
        println!(
            "loss: first {:.4} final {:.4}",
            out.steps[0].loss.unwrap_or(f64::NAN),
            out.steps.last().unwrap().loss.unwrap_or(f64::NAN)
        );
    } else {
        println!("timing and loss: not measured on meta (no numerics run); memory below is exact for the modelled ops");
    }
    println!(
        "memory (allocated bytes of this run's allocator, MiB = 1024² B): peak {:.2} MiB | average per-step peak {:.2} MiB | live at end {:.2} MiB",
        mib(out.peak_allocated() as u64),
        avg_peak / (1024.0 * 1024.0),
        mib(out.steps.last().unwrap().allocated_after as u64)
    );

    let mut flops_json = None;
    if let (Some(log), Some(w)) = (&out.compute, p.compute) {
        let window_steps = &out.steps[w.first..w.first + w.count];
        if a.flops {
            let report = flops::report(&log.ops, w.count, &out.param_sizes);
            let achieved = cpu.then(|| super::compute::Achieved {
                step_s: window_steps.iter().map(|s| s.seconds).sum::<f64>() / w.count as f64,
                peaks: crate::engine::calibrate::cpu_peaks(),
            });
            let roof = p.gpu.as_ref().map(|g| flops::roofline(&log.ops, w.count, g));
            super::compute::print(&report, a.flops_depth, achieved.as_ref(), roof.as_ref());
            flops_json = Some(super::compute::to_json(&report, achieved.as_ref(), roof.as_ref()));
        }
        let profile_dir = a.profile_dir.clone().unwrap_or_else(|| PathBuf::from("./profiles"));
        if let Some((sort, note)) = &p.operators {
            if let Some(n) = note {
                println!("note: {n}");
            }
            let rows = operators::rows(&log.ops, *sort);
            let text = format!(
                "Operator-level summary (sort_by={}) over steps {}..{}, {} on {}\n{}",
                sort.name(),
                w.first + 1,
                w.first + w.count,
                p.preset,
                p.device,
                operators::table(&rows, 50, cpu)
            );
            println!("{}\n{text}{}", "=".repeat(78), "=".repeat(78));
            let path = profile_dir.join("operator_table.txt");
            crate::export::write_atomic(&path, text.as_bytes())?;
            println!("operator table saved to {}", path.display());
        }
        if a.enable_pytorch_profiler {
            let worker = format!("{}_{}", hostname(), std::process::id());
            let meta = chrome_trace::TraceMeta { worker: &worker, pid: std::process::id() as u64, gpu: p.gpu.as_ref() };
            let trace = chrome_trace::build(log, &meta);
            let path = profile_dir.join(chrome_trace::file_name(&worker, log.base_unix_us));
            write_json(&path, &trace)?;
            println!(
                "wrote chrome trace {} ({} ops, {} module spans, {} memory events over steps {}..{}); open in https://ui.perfetto.dev, chrome://tracing or TensorBoard",
                path.display(),
                log.ops.len(),
                log.modules.len(),
                log.memory.as_ref().map_or(0, |m| m.len()),
                w.first + 1,
                w.first + w.count
            );
        }
    }

    let config = json!({
        "model": p.model,
        "preset": p.preset,
        "transformers": super::hf_flags::settings_json(&p.model, p.precision, &[p.seq]),
        "training": {
            "batch_size": p.batch, "grad_accum_steps": p.accum, "micro_batch_size": p.batch / p.accum, "seq_len": p.seq, "num_steps": p.steps, "warmup_steps": p.warmup,
            "optimizer": p.optim, "seed": p.seed, "data": p.data, "precision": p.precision, "deterministic": true,
        },
        "device": p.device, "threads": threads,
    });
    let steps: Vec<_> = out
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({
                "step": i + 1,
                "loss": s.loss,
                "step_ms": cpu.then_some(s.seconds * 1e3),
                "forward_ms": cpu.then_some(s.phase(Phase::Forward).seconds * 1e3),
                "backward_ms": cpu.then_some(s.phase(Phase::Backward).seconds * 1e3),
                "optimizer_ms": cpu.then_some(s.phase(Phase::Optimizer).seconds * 1e3),
                "peak_allocated_bytes": s.peak_allocated,
                "peak_allocated_mib": mib(s.peak_allocated as u64),
                "live_allocated_bytes": s.allocated_after,
                "phase_peak_allocated_bytes": s.phases.iter().map(|p| (p.phase, p.peak_allocated)).collect::<std::collections::BTreeMap<_, _>>(),
            })
        })
        .collect();
    let summary = json!({
        "run_id": set.run_id(),
        "config": config,
        "summary": {
            "parameters": out.params,
            "avg_step_ms": cpu.then_some(step_s * 1e3),
            "avg_forward_ms": cpu.then_some(out.avg_phase_s(Phase::Forward) * 1e3),
            "avg_backward_ms": cpu.then_some(out.avg_phase_s(Phase::Backward) * 1e3),
            "avg_optimizer_ms": cpu.then_some(out.avg_phase_s(Phase::Optimizer) * 1e3),
            "samples_per_s": cpu.then_some(p.batch as f64 / step_s),
            "tokens_per_s": cpu.then_some((p.batch * p.seq) as f64 / step_s),
            "first_loss": out.steps[0].loss,
            "final_loss": out.steps.last().unwrap().loss,
            "peak_allocated_bytes": out.peak_allocated(),
            "peak_allocated_mib": mib(out.peak_allocated() as u64),
            "avg_step_peak_allocated_mib": avg_peak / (1024.0 * 1024.0),
            "timing_excludes_warmup_steps": p.warmup,
            "memory_unit_note": "MiB = 1024*1024 bytes; allocated bytes as counted by this run's allocator",
        },
        "steps": steps,
        "flops": flops_json,
        "system": {
            "vramscope": env!("CARGO_PKG_VERSION"),
            "os": std::env::consts::OS,
            "arch": std::env::consts::ARCH,
            "threads": threads,
        },
    });
    let mut config_file = config;
    config_file["run_id"] = json!(set.run_id());
    write_json(&a.output_dir.join("config.json"), &config_file)?;
    write_json(&a.output_dir.join("performance_summary.json"), &summary)?;
    set.commit()?;
    println!("wrote {}/config.json and performance_summary.json", a.output_dir.display());
    Ok(())
}

/// The host name, as `tensorboard_trace_handler` names its worker.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}
