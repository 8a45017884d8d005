//! The train job: the workshop's training loop (`tiny_llama_v1.py`) on synthetic tokens, with
//! step times, memory and, over a window of steps, kernel records for FLOPs and the trace.
use crate::analyse::flops;
use crate::analyse::operators::{self, SortKey};
use crate::export::chrome_trace;
use crate::engine::{runtime, Device, Tensor};
use crate::model::Model;
use crate::record::allocator::{AllocatorConfig, CachingAllocator};
use crate::record::compute::ComputeLog;
use crate::record::gpu::Gpu;
use crate::record::Phase;
use crate::train::optim::OptimConfig;
use crate::train::{Batcher, CausalLmBatch, DataKind, Optimizer, Precision, StepResult, StepRunner};
use anyhow::Result;
use serde_json::json;
use crate::export::mib;

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
    /// Why the warm-up is shorter than the default, printed once.
    pub warmup_note: Option<String>,
    /// --profile-operators: the table's order, and why it is not the one asked for.
    pub operators: Option<(SortKey, Option<String>)>,
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

/// What a precision means for the run, in one line.
pub fn precision_note(p: Precision) -> &'static str {
    match p {
        Precision::Fp32 => "fp32",
        Precision::Bf16 => "bf16 autocast around forward and loss (matmuls in bf16, the fp32 op list in fp32, weight casts cached); fp32 parameters, gradients and optimizer state",
        Precision::Fp16 => "fp16 autocast around forward and loss with a dynamic loss scaler (GradScaler: init scale 65536, skip on inf/NaN); fp32 parameters, gradients and optimizer state",
        Precision::PureBf16 => "pure bf16: parameters, gradients and optimizer state in bf16, no autocast",
        Precision::PureFp16 => "pure fp16: parameters, gradients and optimizer state in fp16, no autocast",
        Precision::PureBf16Autocast => "bf16 parameters, gradients and optimizer state, forward and loss under bf16 autocast (the Trainer's bf16=True on bf16 weights)",
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

/// [`execute`], with each op's kernel time summed over the run when `op_times` (the
/// `VRAMSCOPE_OP_TIMES` diagnostic): (op, calls, seconds), the costliest first.
pub fn execute_timed(p: &TrainPlan, op_times: bool, on_step: &mut dyn FnMut(usize, &StepResult)) -> Result<(TrainOutcome, Vec<(&'static str, u64, f64)>)> {
    if op_times {
        runtime::enable_op_timing();
    }
    let out = execute(p, on_step)?;
    Ok((out, runtime::take_op_times()))
}

/// Run the plan's training loop; `on_step(i, result)` after each step (the caller prints).
pub fn execute(p: &TrainPlan, on_step: &mut dyn FnMut(usize, &StepResult)) -> Result<TrainOutcome> {
    // `--attention flash` picks SDPA's kernel for the GPU as PyTorch does (cuDNN on sm90).
    let cudnn = p.gpu.is_some_and(|g| g.sdpa_prefers_cudnn());
    crate::engine::ops::attention::with_cudnn_preferred(cudnn, || execute_here(p, on_step))
}

fn execute_here(p: &TrainPlan, on_step: &mut dyn FnMut(usize, &StepResult)) -> Result<TrainOutcome> {
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
    // hf: Hugging Face's collator (labels = a copy of input_ids; the model shifts them).
    let hf_mask = p.model.hf().map(|h| h.attention_mask);
    let mut causal: Vec<CausalLmBatch> = Vec::new();
    for i in 0..p.steps {
        let micro: Vec<(Tensor, Tensor, Option<Tensor>)> = match hf_mask {
            Some(mask) => {
                causal.resize_with(p.accum, CausalLmBatch::default);
                causal
                    .iter_mut()
                    .map(|b| {
                        batcher.next_causal_lm_batch(b, true, mask);
                        (b.input_ids.clone().expect("drawn"), b.labels.clone().expect("labeled"), b.attention_mask.clone())
                    })
                    .collect()
            }
            None => {
                // `tokens, labels = get_batch()`: the previous batch dies once the new one exists.
                let new: Vec<(Tensor, Tensor)> = (0..p.accum).map(|_| batcher.next_batch()).collect();
                batch.insert(new).iter().map(|(x, y)| (x.clone(), y.clone(), None)).collect()
            }
        };
        let micro: Vec<(&Tensor, &Tensor, Option<&Tensor>)> = micro.iter().map(|(x, y, m)| (x, y, m.as_ref())).collect();
        let window = p.compute.filter(|w| (w.first..w.first + w.count).contains(&i));
        if window.is_some_and(|w| w.first == i) {
            runtime::start_compute_log(window.is_some_and(|w| w.memory));
        }
        let start_us = runtime::with(|rt| rt.compute.as_ref().map(|c| c.now_us()));
        let r = runner.step_micro(&micro);
        if let Some(start) = start_us {
            runtime::with(|rt| rt.compute.as_mut().map(|c| c.step(i + 1, start)));
        }
        if window.is_some_and(|w| w.first + w.count == i + 1) {
            compute = runtime::take_compute_log();
        }
        on_step(i, &r);
        steps.push(r);
    }
    runner.finish();
    Ok(TrainOutcome { params: model.num_parameters(), steps, warmup: p.warmup, compute, param_sizes })
}


impl TrainOutcome {
    /// config.json's object: the model, the preset and how the run trains.
    pub fn config_json(&self, p: &TrainPlan, threads: usize) -> serde_json::Value {
    json!({
            "model": p.model,
            "preset": p.preset,
            "transformers": super::hf::settings_json(&p.model, p.precision, &[p.seq]),
            "training": {
                "batch_size": p.batch, "grad_accum_steps": p.accum, "micro_batch_size": p.batch / p.accum, "seq_len": p.seq, "num_steps": p.steps, "warmup_steps": p.warmup,
                "optimizer": p.optim, "seed": p.seed, "data": p.data, "precision": p.precision, "deterministic": true,
            },
            "device": p.device, "threads": threads,
        })
    }

    /// performance_summary.json's object (`flops`: the FLOP report's JSON, when counted;
    /// `run_id`: the output set the files belong to).
    pub fn summary_json(&self, p: &TrainPlan, threads: usize, flops_json: Option<serde_json::Value>, run_id: Option<&str>) -> serde_json::Value {
        let out = self;
        let config = self.config_json(p, threads);
        let cpu = p.device == Device::Cpu;
        let step_s = out.avg_step_s();
        let measured = &out.steps[p.warmup..];
        let avg_peak = measured.iter().map(|s| s.peak_allocated as f64).sum::<f64>() / measured.len() as f64;
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
    json!({
            "run_id": run_id,
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
        })
    }
}

impl TrainOutcome {
    /// `--flops`: the FLOP report of the recorded window, MFU against this machine's
    /// calibrated peaks on cpu, and the roofline on the plan's GPU preset.
    pub fn flops(&self, p: &TrainPlan, log: &ComputeLog, w: ComputeWindow) -> (flops::FlopReport, Option<flops::Achieved>, Option<flops::Roofline>) {
        let window_steps = &self.steps[w.first..w.first + w.count];
        let report = flops::report(&log.ops, w.count, &self.param_sizes);
        let achieved = (p.device == Device::Cpu).then(|| flops::Achieved {
            step_s: window_steps.iter().map(|s| s.seconds).sum::<f64>() / w.count as f64,
            peaks: crate::engine::calibrate::cpu_peaks(),
        });
        let roof = p.gpu.as_ref().map(|g| flops::roofline(&log.ops, w.count, g));
        (report, achieved, roof)
    }

    /// `--profile-operators`: the workshop's operator table over the recorded window.
    pub fn operator_table(&self, p: &TrainPlan, log: &ComputeLog, w: ComputeWindow) -> String {
        let sort = p.operators.as_ref().map_or(SortKey::CpuTimeTotal, |o| o.0);
        let rows = operators::rows(&log.ops, log.outside_ops, sort);
        format!(
            "Operator-level summary (sort_by={}) over steps {}..{}, {} on {}\n{}",
            sort.name(),
            w.first + 1,
            w.first + w.count,
            p.preset,
            p.device,
            operators::table(&rows, 50, p.device == Device::Cpu)
        )
    }
}

/// `--enable-pytorch-profiler`: the window's chrome trace and its file name, as
/// `tensorboard_trace_handler` names it for `worker`.
pub fn chrome_trace(p: &TrainPlan, log: &ComputeLog, worker: &str) -> (String, serde_json::Value) {
    let meta = chrome_trace::TraceMeta { worker, pid: std::process::id() as u64, gpu: p.gpu.as_ref() };
    (chrome_trace::file_name(worker, log.base_unix_us), chrome_trace::build(log, &meta))
}
