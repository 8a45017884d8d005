//! `train`'s flags (the workshop's `tiny_llama_v1.py` and its guide's spellings), resolved
//! into the session's [`TrainPlan`].
use super::memory::MemoryFlags;
use super::model::ModelFlags;
use super::precision::PrecisionFlags;
use super::{usage, UsageError};
use crate::analyse::operators::SortKey;
use crate::engine::Device;
use crate::model::Flavour;
use crate::session::train::{ComputeWindow, TrainPlan};
use crate::train::optim::{OptimConfig, OptimizerKind};
use crate::train::DataKind;
use anyhow::Result;
use clap::Args;
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
    #[arg(help_heading = super::heading::RUN, long)]
    pub batch_size: Option<usize>,
    /// Sequence length S of each training sample (default: the preset's)
    #[arg(help_heading = super::heading::RUN, long)]
    pub seq_len: Option<usize>,
    /// Training steps, warm-up steps included (default: the preset's)
    #[arg(help_heading = super::heading::RUN, long)]
    pub num_steps: Option<usize>,
    /// Steps excluded from the averages (default 3, fewer when --num-steps leaves no measured step)
    #[arg(help_heading = super::heading::RUN, long)]
    pub warmup_steps: Option<usize>,
    /// Learning rate (default: 1e-3 cs336, 3e-4 tinyllama, 5e-5 hf as the Trainer's)
    #[arg(help_heading = super::heading::RUN, long)]
    pub learning_rate: Option<f64>,
    /// Weight decay: AdamW's decoupled decay, SGD's coupled one
    ///
    /// Default: the flavour's reference, 0.01 for cs336 and tinyllama, 0.0 for hf; 0 for sgd
    /// (torch.optim.SGD's).
    #[arg(help_heading = super::heading::RUN, long)]
    pub weight_decay: Option<f64>,
    #[command(flatten)]
    pub optim: super::optim::OptimFlags,
    /// SGD momentum (--optimizer sgd only)
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 0.0)]
    pub momentum: f64,
    /// Random seed for the weights and the synthetic data
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 42)]
    pub seed: u64,
    /// cpu (real numerics) or meta (shapes and memory only)
    #[arg(help_heading = super::heading::RUN, long, default_value = "cpu")]
    pub device: String,
    /// Worker threads for cpu kernels (default: all cores)
    #[arg(help_heading = super::heading::RUN, long)]
    pub threads: Option<usize>,
    /// Print every N-th step
    #[arg(help_heading = super::heading::OUTPUT, long, default_value_t = 1)]
    pub log_interval: usize,
    /// Folder for performance_summary.json, the trace and other outputs
    #[arg(help_heading = super::heading::OUTPUT, long, default_value = "vramscope-out/train")]
    pub output_dir: PathBuf,
    /// Training data (default: workshop for tinyllama, random otherwise)
    ///
    /// workshop: tiny_llama_v1.py's SimpleTextDataset, B distinct rows of a fixed pool of 1000
    /// uniform-id sequences; random: fresh uniform ids each batch, as CS336's benchmark;
    /// pattern: a learnable repeating sequence.
    #[arg(help_heading = super::heading::RUN, value_parser = super::values::data_kinds(), long)]
    pub data: Option<String>,
    /// N micro-batches per batch, gradients accumulated before one optimizer step
    ///
    /// `loss / N; loss.backward()` per micro-batch; also --gradient-accumulation-steps.
    #[arg(help_heading = super::heading::MEMORY, long, default_value_t = 1, alias = "gradient-accumulation-steps")]
    pub grad_accum_steps: usize,
    /// Count FLOPs, bytes moved and arithmetic intensity per op and module for one step
    ///
    /// With MFU against this machine's calibrated peaks (DeepSpeed's FLOPS profiler).
    #[arg(help_heading = super::heading::OUTPUT, long, alias = "enable-deepspeed-flops")]
    pub flops: bool,
    /// Which step --flops profiles (1-based; default: the first step after warm-up)
    #[arg(help_heading = super::heading::OUTPUT, long, requires = "flops", conflicts_with = "enable_pytorch_profiler")]
    pub flops_profile_step: Option<usize>,
    /// Module depth of the printed FLOP tree
    #[arg(help_heading = super::heading::OUTPUT, long, default_value_t = 3)]
    pub flops_depth: usize,
    /// Write a chrome trace of --profile-steps steps after warm-up
    ///
    /// For Perfetto, chrome://tracing or TensorBoard's profiler plugin; with --flops, the
    /// FLOPs cover the same steps.
    #[arg(help_heading = super::heading::OUTPUT, long)]
    pub enable_pytorch_profiler: bool,
    /// Where the trace and the operator table go (default ./profiles)
    ///
    /// The trace is named `<host>_<pid>.<time_ns>.pt.trace.json`.
    #[arg(help_heading = super::heading::OUTPUT, long)]
    pub profile_dir: Option<PathBuf>,
    /// Print the workshop's operator table (`prof.key_averages().table(sort_by=…)`)
    ///
    /// Per operator: calls, self cpu time, FLOPs, bytes moved and memory allocated (CUDA Mem / Self CUDA Mem,
    /// MiB) over the --profile-steps steps after warm-up;
    /// printed and written to <profile-dir>/operator_table.txt
    #[arg(help_heading = super::heading::OUTPUT, long)]
    pub profile_operators: bool,
    /// Order of the operator table (torch's sort keys)
    ///
    /// self_cpu_time_total (default on cpu), cpu_time_total, cpu_time (average), count, flops (default on meta),
    /// self_cuda_memory_usage or cuda_memory_usage (MiB allocated by the op itself / with the ops it called; the
    /// cpu_ spellings too); the CUDA time keys (cuda_time_total, …) fall back to self_cpu_time_total as the
    /// workshop's script does
    #[arg(help_heading = super::heading::OUTPUT, long, requires = "profile_operators", value_parser = super::values::sort_keys())]
    pub sort_by: Option<String>,
    /// tiny_llama_v1.py's deterministic mode (seeded, deterministic algorithms)
    ///
    /// Every run here is deterministic: kernels reduce in a fixed order whatever --threads is, data and
    /// weights come from --seed. The flag says so and records it in config.json
    #[arg(help_heading = super::heading::RUN, long)]
    pub deterministic: bool,
    /// Steps the trace covers (default 5, fewer when the run has fewer after warm-up)
    #[arg(help_heading = super::heading::OUTPUT, long)]
    pub profile_steps: Option<usize>,
    /// Add `[memory]` events to the trace
    ///
    /// Every allocation and free through the CUDA caching-allocator model, with allocated and
    /// reserved totals.
    #[arg(help_heading = super::heading::OUTPUT, long, requires = "enable_pytorch_profiler")]
    pub profile_memory: bool,
    /// GPU preset: a roofline prediction of the step with --flops, and the trace's device
    /// (names are case-insensitive; a unique prefix will do)
    #[arg(help_heading = super::heading::RUN, value_parser = super::values::gpus(), long)]
    pub gpu: Option<String>,
}

impl TrainArgs {
    /// Defaults plus the given flags (`bench`'s training step).
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

/// `--sort-by` keys (torch's `key_averages().table(sort_by=…)` names): (name, what it orders by).
pub const SORT_KEYS: [(&str, &str); 16] = [
    ("self_cpu_time_total", "the default on cpu"),
    ("cpu_time_total", "with the ops it called"),
    ("cpu_time", "average per call"),
    ("count", "calls"),
    ("flops", "the default on meta"),
    ("self_cuda_memory_usage", "MiB the op itself allocated"),
    ("cuda_memory_usage", "MiB allocated with the ops it called"),
    ("self_cpu_memory_usage", "= self_cuda_memory_usage"),
    ("cpu_memory_usage", "= cuda_memory_usage"),
    ("self_device_memory_usage", "= self_cuda_memory_usage"),
    ("device_memory_usage", "= cuda_memory_usage"),
    ("cuda_time", "no CUDA times here: self_cpu_time_total"),
    ("cuda_time_total", "no CUDA times here: self_cpu_time_total"),
    ("self_cuda_time_total", "no CUDA times here: self_cpu_time_total"),
    ("device_time_total", "no CUDA times here: self_cpu_time_total"),
    ("self_device_time_total", "no CUDA times here: self_cpu_time_total"),
];

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
        // Memory is the caching-allocator model's (the CUDA device's) on every device.
        Some("self_cuda_memory_usage" | "self_cpu_memory_usage" | "self_device_memory_usage") => (SortKey::SelfMemory, None),
        Some("cuda_memory_usage" | "cpu_memory_usage" | "device_memory_usage") => (SortKey::Memory, None),
        Some(k @ ("cuda_time" | "cuda_time_total" | "self_cuda_time_total" | "device_time_total" | "self_device_time_total")) => {
            let to = if timed { SortKey::CpuTimeTotal } else { SortKey::Flops };
            (to, Some(format!("--sort-by {k}: there is no CUDA device here, so no CUDA times; sorting by {}", to.name())))
        }
        Some(k) => {
            return Err(usage(
                "--sort-by",
                format!("'{k}' (expected {})", SORT_KEYS.map(|(n, _)| n).join(", ")),
            ))
        }
    })
}

/// Warm-up steps excluded from the averages unless --warmup-steps says otherwise.
const DEFAULT_WARMUP: usize = 3;
/// Steps a trace covers unless --profile-steps says otherwise.
const DEFAULT_PROFILE_STEPS: usize = 5;

/// The training run `a` asks for, every flag checked before anything runs; `note` hears
/// the model's note as soon as it is known.
pub fn plan(a: &TrainArgs, note: impl FnOnce(&str)) -> Result<TrainPlan> {
    let r = a.model.resolve("walkthrough", super::model::Names::Workshop)?;
    super::moe::refuse(&r.config, &a.model, "train")?;
    super::generate::check_static_only_window(r.config.hf(), false, false, "--config", "train")?;
    if let Some(n) = &r.note {
        note(n);
    }
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
    cfg.check_seq_len(seq, "--seq-len").map_err(UsageError::from)?;
    super::hf::check_with_labels(&cfg, seq)?;
    cfg.check_sizes(batch, seq, "--seq-len").map_err(UsageError::from)?;
    crate::session::host_memory::check_bookkeeping(cfg.num_layers, 0)?;
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
    if kind.is_bitsandbytes() && device == Device::Cpu {
        return Err(usage("--optimizer", format!("{kind}: bitsandbytes' 8-bit and paged state numerics are not computed on cpu; use --device meta")));
    }
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
    // SDPA's kernel follows the GPU: torch 2.11 tries cuDNN attention first on sm90.
    if let Some(h) = cfg.hf.as_mut() {
        h.cudnn_sdpa = gpu.is_some_and(|g| g.sdpa_prefers_cudnn());
        h.cutlass_sms = gpu.as_ref().and_then(|g| g.grouped_mm_cutlass_sms());
    }
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
    let precision = a.precision.resolve_for(&mut cfg)?;
    if let Some(q) = cfg.hf().and_then(|h| h.bnb.as_ref()) {
        let (flag, bits) = (q.flag(), q.bits());
        if device == Device::Cpu {
            return Err(usage(flag, format!("{bits} numerics are not computed on cpu: use --device meta, or profile")));
        }
        if cfg.hf().is_some_and(|h| h.lora.is_none()) {
            return Err(usage(flag, format!("a {bits} model has no trainable parameters: add --lora-r for (Q)LoRA")));
        }
    }
    super::hf::check_kernel(&cfg, precision, seq)?;
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


#[cfg(test)]
mod sort_key_tests {
    /// Every key help lists sorts (on cpu and on meta); others are refused naming --sort-by.
    #[test]
    fn every_listed_sort_key_is_accepted() {
        for (k, _) in super::SORT_KEYS {
            for d in [crate::engine::Device::Cpu, crate::engine::Device::Meta] {
                super::operator_sort(Some(k), d).unwrap_or_else(|e| panic!("--sort-by {k}: {e}"));
            }
        }
        assert!(super::operator_sort(Some("nonsense"), crate::engine::Device::Cpu).unwrap_err().to_string().contains("--sort-by"));
    }
}
