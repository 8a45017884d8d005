//! `vramscope train`: the workshop's `tiny_llama_v1.py` — trains on synthetic tokens and
//! reports loss, step times, throughput and memory, then writes `config.json` and
//! `performance_summary.json`.
use super::model_flags::ModelFlags;
use super::precision_flags::PrecisionFlags;
use super::memory_flags::MemoryFlags;
use super::{set_threads, usage};
use crate::engine::{runtime, Device, Tensor};
use crate::export::{mib, write_json};
use crate::model::{Flavour, Model};
use crate::analyse::flops;
use crate::export::chrome_trace;
use crate::record::allocator::{AllocatorConfig, CachingAllocator};
use crate::record::compute::ComputeLog;
use crate::record::gpu::Gpu;
use crate::record::Phase;
use crate::train::optim::{OptimConfig, OptimizerKind};
use crate::train::{Batcher, DataKind, Optimizer, Precision, StepResult, StepRunner};
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
    #[arg(long)]
    pub batch_size: Option<usize>,
    #[arg(long)]
    pub seq_len: Option<usize>,
    #[arg(long)]
    pub num_steps: Option<usize>,
    /// Steps excluded from the averages
    #[arg(long, default_value_t = 3)]
    pub warmup_steps: usize,
    /// Default: 1e-3 (cs336) or 3e-4 (tinyllama)
    #[arg(long)]
    pub learning_rate: Option<f64>,
    #[arg(long, default_value_t = 0.01)]
    pub weight_decay: f64,
    /// adamw (the flavour's reference AdamW), adamw-cs336, adamw-torch, or sgd
    #[arg(long, default_value = "adamw")]
    pub optimizer: String,
    /// SGD momentum
    #[arg(long, default_value_t = 0.0)]
    pub momentum: f64,
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
    #[arg(long, default_value = "vramscope-out/train")]
    pub output_dir: PathBuf,
    /// random (uniform ids, as the benchmarks) or pattern (a learnable repeating sequence)
    #[arg(long, default_value = "random")]
    pub data: String,
    /// Split each batch into N micro-batches whose gradients accumulate before one optimizer
    /// step (`loss / N; loss.backward()` per micro-batch)
    #[arg(long, default_value_t = 1)]
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
    /// Where the trace goes (`<host>_<pid>.<time_ns>.pt.trace.json`)
    #[arg(long, default_value = "./profiles", requires = "enable_pytorch_profiler")]
    pub profile_dir: PathBuf,
    /// Steps the trace covers
    #[arg(long, default_value_t = 5, requires = "enable_pytorch_profiler")]
    pub profile_steps: usize,
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

/// Everything a run needs, validated before anything is computed or written.
pub struct TrainPlan {
    pub model: crate::model::ModelConfig,
    pub preset: String,
    pub batch: usize,
    /// Micro-batches per optimizer step (`batch` is split evenly among them).
    pub accum: usize,
    pub seq: usize,
    pub steps: usize,
    pub warmup: usize,
    pub device: Device,
    pub data: DataKind,
    pub optim: OptimConfig,
    pub seed: u64,
    pub log_interval: usize,
    /// Steps whose kernels are recorded (FLOPs, trace), if any.
    pub compute: Option<ComputeWindow>,
    pub gpu: Option<Gpu>,
    pub precision: Precision,
}

/// Steps `first..first + count` (0-based) record kernels; `memory` adds `[memory]` points.
#[derive(Clone, Copy, Debug)]
pub struct ComputeWindow {
    pub first: usize,
    pub count: usize,
    pub memory: bool,
}

pub fn plan(a: &TrainArgs) -> Result<TrainPlan> {
    let r = a.model.resolve("walkthrough")?;
    r.print_note();
    let mut cfg = r.config;
    a.memory.apply(&mut cfg)?;
    let device = Device::parse(&a.device).ok_or_else(|| usage("--device", format!("'{}' (expected cpu or meta)", a.device)))?;
    let batch = a.batch_size.unwrap_or(r.preset.batch_size);
    if batch == 0 {
        return Err(usage("--batch-size", "must be at least 1"));
    }
    if a.grad_accum_steps == 0 || batch % a.grad_accum_steps != 0 {
        return Err(usage("--grad-accum-steps", format!("{} must be at least 1 and divide --batch-size {batch}", a.grad_accum_steps)));
    }
    let seq = a.seq_len.unwrap_or(r.preset.seq_len.min(cfg.max_seq_len));
    cfg.check_seq_len(seq, "--seq-len").map_err(super::UsageError::from)?;
    if cfg.flavour == Flavour::Tinyllama && seq < 2 {
        return Err(usage("--seq-len", "tinyllama shifts logits and labels by one: needs at least 2"));
    }
    let steps = a.num_steps.unwrap_or(r.preset.num_steps);
    if steps == 0 {
        return Err(usage("--num-steps", "must be at least 1"));
    }
    if a.warmup_steps >= steps {
        return Err(usage("--warmup-steps", format!("{} leaves no measured step out of --num-steps {steps}", a.warmup_steps)));
    }
    if a.log_interval == 0 {
        return Err(usage("--log-interval", "must be at least 1"));
    }
    let data = DataKind::parse(&a.data).ok_or_else(|| usage("--data", format!("'{}' (expected random or pattern)", a.data)))?;
    let reference = OptimConfig::reference(cfg.flavour);
    let kind = match a.optimizer.as_str() {
        "adamw" => reference.kind,
        "adamw-cs336" => OptimizerKind::AdamwCs336,
        "adamw-torch" => OptimizerKind::AdamwTorch,
        "sgd" => OptimizerKind::Sgd,
        o => return Err(usage("--optimizer", format!("'{o}' (expected adamw, adamw-cs336, adamw-torch or sgd)"))),
    };
    let lr = a.learning_rate.unwrap_or(reference.lr);
    if !(lr > 0.0 && lr.is_finite()) {
        return Err(usage("--learning-rate", "must be a positive number"));
    }
    if !(a.weight_decay >= 0.0) {
        return Err(usage("--weight-decay", "must be non-negative"));
    }
    if !(0.0..1.0).contains(&a.momentum) {
        return Err(usage("--momentum", "must be in [0, 1)"));
    }
    let optim = OptimConfig { kind, lr, weight_decay: a.weight_decay, momentum: a.momentum, ..reference };
    let gpu = a.gpu.as_deref().map(crate::record::gpu::find).transpose().map_err(|e| usage("--gpu", e))?;
    let compute = if a.enable_pytorch_profiler {
        if a.profile_steps == 0 {
            return Err(usage("--profile-steps", "must be at least 1"));
        }
        if a.warmup_steps + a.profile_steps > steps {
            return Err(usage("--profile-steps", format!("{} after {} warm-up steps exceeds --num-steps {steps}", a.profile_steps, a.warmup_steps)));
        }
        Some(ComputeWindow { first: a.warmup_steps, count: a.profile_steps, memory: a.profile_memory })
    } else if a.flops {
        let step = a.flops_profile_step.unwrap_or(a.warmup_steps + 1);
        if step == 0 || step > steps {
            return Err(usage("--flops-profile-step", format!("{step} is not one of the run's steps 1..={steps}")));
        }
        Some(ComputeWindow { first: step - 1, count: 1, memory: false })
    } else {
        None
    };
    let precision = a.precision.resolve_for(&cfg)?;
    Ok(TrainPlan {
        model: cfg,
        preset: format!("{}-{}", r.preset.model.flavour, r.preset.name),
        batch,
        accum: a.grad_accum_steps,
        seq,
        steps,
        warmup: a.warmup_steps,
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

/// What a precision means for the run, in one line.
pub fn precision_note(p: Precision) -> &'static str {
    match p {
        Precision::Fp32 => "fp32",
        Precision::Bf16 => "bf16 autocast around forward and loss (matmuls in bf16, the fp32 op list in fp32, weight casts cached); fp32 parameters, gradients and optimizer state",
        Precision::Fp16 => "fp16 autocast around forward and loss with a dynamic loss scaler (GradScaler: init scale 65536, skip on inf/NaN); fp32 parameters, gradients and optimizer state",
        Precision::PureBf16 => "pure bf16: parameters, gradients and optimizer state in bf16, no autocast",
    }
}

/// The measured outcome of a training run.
pub struct TrainOutcome {
    pub params: u64,
    pub steps: Vec<StepResult>,
    pub warmup: usize,
    /// Kernel records of the plan's compute window.
    pub compute: Option<ComputeLog>,
    /// (parameter name, elements), for the FLOP tree.
    pub param_sizes: Vec<(String, u64)>,
}

impl TrainOutcome {
    fn measured(&self) -> &[StepResult] {
        &self.steps[self.warmup..]
    }
    pub fn avg_step_s(&self) -> f64 {
        let m = self.measured();
        m.iter().map(|s| s.seconds).sum::<f64>() / m.len() as f64
    }
    pub fn avg_phase_s(&self, p: Phase) -> f64 {
        let m = self.measured();
        m.iter().map(|s| s.phase(p).seconds).sum::<f64>() / m.len() as f64
    }
    pub fn peak_allocated(&self) -> usize {
        self.steps.iter().map(|s| s.peak_allocated).max().unwrap_or(0)
    }
}

/// Run the plan's training loop, printing a line every `log_interval` steps when `verbose`.
pub fn execute(p: &TrainPlan, verbose: bool) -> Result<TrainOutcome> {
    runtime::reset();
    if p.compute.is_some_and(|w| w.memory) {
        // `[memory]` events report what the CUDA caching allocator would hold.
        let capacity = p.gpu.map_or(usize::MAX / 4, |g| g.memory_bytes);
        runtime::with(|rt| rt.log.allocator = Some(CachingAllocator::new(AllocatorConfig::default(), capacity)));
    }
    let model = Model::new_in(&p.model, p.device, p.seed, p.precision.param_dtype())?;
    let param_sizes = model.parameters().iter().map(|q| (q.name.clone(), q.tensor.numel() as u64)).collect();
    let mut compute = None;
    let optimizer = Optimizer::new(p.optim.clone(), model.parameters().len());
    let mut runner = StepRunner::new(&model, optimizer).with_precision(p.precision);
    let mut batcher = Batcher::new(p.data, p.model.vocab_size, p.batch / p.accum, p.seq, p.device, p.seed);
    let mut steps = Vec::with_capacity(p.steps);
    let mut batch = None;
    for i in 0..p.steps {
        // `tokens, labels = get_batch()`: the previous batch dies once the new one exists.
        let new: Vec<(Tensor, Tensor)> = (0..p.accum).map(|_| batcher.next_batch()).collect();
        let micro: Vec<(&Tensor, &Tensor)> = batch.insert(new).iter().map(|(x, y)| (x, y)).collect();
        let window = p.compute.filter(|w| (w.first..w.first + w.count).contains(&i));
        if window.is_some_and(|w| w.first == i) {
            runtime::start_compute_log(window.is_some_and(|w| w.memory));
        }
        let start_us = runtime::with(|rt| rt.compute.as_ref().map(|c| c.now_us()));
        let r = runner.step_accumulated(&micro);
        if let Some(start) = start_us {
            runtime::with(|rt| rt.compute.as_mut().map(|c| c.step(i + 1, start)));
        }
        if window.is_some_and(|w| w.first + w.count == i + 1) {
            compute = runtime::take_compute_log();
        }
        if verbose && ((i + 1) % p.log_interval == 0 || i + 1 == p.steps) {
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
        steps.push(r);
    }
    runner.finish();
    Ok(TrainOutcome { params: model.num_parameters(), steps, warmup: p.warmup, compute, param_sizes })
}

pub fn run(a: TrainArgs) -> Result<()> {
    let p = plan(&a)?;
    let threads = set_threads(a.threads)?;
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
    if p.precision != Precision::Fp32 {
        println!("precision: {}", precision_note(p.precision));
    }
    if p.accum > 1 {
        println!("gradient accumulation: {} micro-batches of {} per optimizer step", p.accum, p.batch / p.accum);
    }
    if let Some(line) = super::memory_flags::describe(m) {
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
    let out = execute(&p, true)?;
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
        if a.enable_pytorch_profiler {
            let worker = format!("{}_{}", hostname(), std::process::id());
            let meta = chrome_trace::TraceMeta { worker: &worker, pid: std::process::id() as u64, gpu: p.gpu.as_ref() };
            let trace = chrome_trace::build(log, &meta);
            let path = a.profile_dir.join(chrome_trace::file_name(&worker, log.base_unix_us));
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
        "training": {
            "batch_size": p.batch, "grad_accum_steps": p.accum, "micro_batch_size": p.batch / p.accum, "seq_len": p.seq, "num_steps": p.steps, "warmup_steps": p.warmup,
            "optimizer": p.optim, "seed": p.seed, "data": p.data, "precision": p.precision,
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
    write_json(&a.output_dir.join("config.json"), &config)?;
    write_json(&a.output_dir.join("performance_summary.json"), &summary)?;
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
