//! The profile job: one (context length, profile type) of a model run under the caching
//! allocator's model, from [`ProfileOptions`] to a [`Run`] (peaks, breakdowns, allocator
//! statistics, the OOM if any). Its snapshot and report are written only when the caller
//! asks (`Run::save_snapshot`, `save_report`, `save_files`).
use crate::model::hf::generation_config::GenerateConfig;
use crate::analyse::flops::{self, Achieved, FlopReport, Roofline};
use crate::analyse::{self, PeakReport};
use crate::engine::runtime::{self, OomPanic};
use crate::engine::{autocast, Device, Tensor};
use crate::export::html::{self, Capacity, Source};
use crate::export::{snapshot, write_atomic};
use crate::pickle;
use crate::model::{Model, ModelConfig};
use crate::record::allocator::{AllocatorConfig, AllocatorStats, CachingAllocator};
use crate::record::gpu::Gpu;
use crate::record::{MemEvent, Phase, Recording};
use crate::train::optim::OptimConfig;
use crate::train::{Batcher, CausalLmBatch, DataKind, Optimizer, Precision, StepRunner};
use anyhow::Result;
use clap::ValueEnum;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use crate::clock::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileType {
    /// `model(x)` with autograd on and no loss (CS336's forward rows): the saved tensors are
    /// kept until the unbound output is dropped
    Forward,
    /// `logits = model(x); loss = cross_entropy(logits, y)` with autograd on, no backward
    /// (phases forward and loss)
    #[value(name = "forward-loss")]
    #[serde(rename = "forward-loss")]
    ForwardLoss,
    /// `model(x)` under no_grad
    Inference,
    /// zero_grad → forward → loss → backward → optimizer step
    Training,
    /// transformers' greedy `model.generate(input_ids, max_new_tokens=N, do_sample=False)`
    /// with its DynamicCache (hf flavour; phases prefill and decode)
    Generate,
}

impl ProfileType {
    /// The name the command line and the output files use.
    pub fn name(self) -> &'static str {
        match self {
            ProfileType::Forward => "forward",
            ProfileType::ForwardLoss => "forward-loss",
            ProfileType::Inference => "inference",
            ProfileType::Training => "training",
            ProfileType::Generate => "generate",
        }
    }
}

/// `--max-entries`' default: the `_record_memory_history(max_entries=1000000)` of CS336's
/// profile_memory.py (PyTorch's own default is unbounded).
pub const DEFAULT_MAX_ENTRIES: usize = 1_000_000;

/// What a profile runs: a validated configuration (the command line's `profile` flags
/// resolve to one; `sweep`, `fit` and `compare` run one per point).
#[derive(Clone)]
pub struct ProfileOptions {
    pub model: ModelConfig,
    pub model_name: String,
    pub batch: usize,
    pub contexts: Vec<usize>,
    pub device: Device,
    pub capacity: usize,
    pub gpu_name: Option<String>,
    /// The GPU whose capacity bounds the allocator (and prices the roofline with `flops`).
    pub gpu: Option<Gpu>,
    /// PYTORCH_CUDA_ALLOC_CONF, parsed.
    pub conf: AllocatorConfig,
    /// `torch.cuda.set_per_process_memory_fraction`.
    pub fraction: Option<f64>,
    pub precision: Precision,
    /// The training step's optimizer and gradient clipping (the flavour's reference unless
    /// --optimizer / --max-grad-norm say otherwise).
    pub optim: OptimConfig,
    /// Keep each run's trace so that its snapshot and report can be written
    /// ([`Run::save_snapshot`]); `sweep` and `fit` turn this off.
    pub keep_trace: bool,
    /// The model source's note (a config.json's torch_dtype), printed once by the caller.
    pub note: Option<String>,
    /// One rank of a data-parallel job (None: one device).
    pub parallel: Option<crate::parallel::ParallelConfig>,
    /// Steps run before recording (optimizer state exists after one training step).
    pub warmup_steps: usize,
    /// Steps recorded.
    pub measure_steps: usize,
    /// Trace entries the snapshot keeps (`_record_memory_history(max_entries=…)`).
    pub max_entries: usize,
    /// Seed of the weights and the synthetic data.
    pub seed: u64,
    /// Training: micro-batches per optimizer step.
    pub grad_accum_steps: usize,
    /// Count FLOPs over the measured steps.
    pub flops: bool,
    /// `generate(max_new_tokens=N)` of `--profile-type generate` (None: no generate run asked).
    pub max_new_tokens: Option<usize>,
    /// The rest of generate()'s options (cache, sampling, min_new_tokens) when it runs.
    pub generation: Option<crate::model::hf::generation_config::GenerateConfig>,
}

/// What one profiled (context length, profile type) produced.
pub struct Run {
    pub context: usize,
    pub kind: ProfileType,
    /// The simulated rank (None: one device).
    pub rank: Option<usize>,
    /// FSDP units (root first) and the bytes each holds while unsharded.
    pub units: Vec<(String, u64)>,
    /// CPU offload: the host memory the offloaded state reached (bytes).
    pub host_peak: Option<usize>,
    /// bitsandbytes' paged optimizer state: the CUDA unified memory it reached (bytes), outside
    /// the caching allocator's peaks.
    pub unified_peak: Option<usize>,
    pub report: PeakReport,
    pub stats: AllocatorStats,
    pub oom: Option<String>,
    /// Where the OOM happened: model construction, a warm-up step or a measured step.
    pub oom_stage: Option<String>,
    /// The phase whose allocation the OOM refused.
    pub oom_phase: Option<crate::record::Phase>,
    /// Trace entries the ring buffer dropped (`--max-entries`).
    pub trace_dropped: usize,
    /// Where [`Run::save_snapshot`] and [`Run::save_report`] wrote (None until then).
    pub snapshot: Option<PathBuf>,
    pub report_html: Option<PathBuf>,
    /// The recorded trace, kept when the options ask for it, for the snapshot.
    pub trace: Option<Recorded>,
    pub events: usize,
    pub compute: Option<ComputeOut>,
    /// Wall time per measured step (meaningful on cpu only); None after an OOM.
    pub step_seconds: Option<f64>,
    /// A generate run's steps (prefill, decode 1 ..) with their peaks and the KV cache.
    pub generate: Option<GenerateReport>,
}

/// What a `generate` run adds: each step's peak (allocated, the caching allocator's blocks,
/// as the run's peak), the step and op of the run's peak, and the DynamicCache at the end.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GenerateReport {
    pub max_new_tokens: usize,
    /// generate()'s options (cache_implementation, sampling, min_new_tokens).
    pub config: GenerateConfig,
    /// (step, peak allocated bytes in it), in order: "prefill", "decode 1", ...
    pub steps: Vec<(String, usize)>,
    /// The step the run's peak happened in (None: before the first step, or an OOM first).
    pub peak_step: Option<String>,
    pub peak_op: String,
    /// Requested bytes of the cache's keys and values when the last step ran.
    pub kv_cache_bytes: usize,
}

/// Where each measured generate step started (its first event) and the cache it ended with.
#[derive(Default)]
struct GenerateTrace {
    marks: Vec<(crate::model::hf::generation_5_23::Step, usize)>,
    kv_cache_bytes: usize,
}

impl GenerateTrace {
    /// Per-step peaks of `events` (allocator blocks, from `before`'s level), the step of the
    /// run's peak event.
    fn report(&self, config: &GenerateConfig, before: &[MemEvent], events: &[MemEvent], report: &PeakReport) -> GenerateReport {
        use crate::record::EventKind;
        let mut level: usize = before.iter().map(|e| e.block).sum();
        let mut steps: Vec<(String, usize)> = Vec::new();
        let mut at = 0;
        let mut peak_step = None;
        // (after an OOM the events stop early: the later marks are clamped to them)
        for (i, (step, start)) in self.marks.iter().enumerate() {
            let start = (*start).min(events.len()).max(at);
            for e in &events[at..start] {
                level = apply(level, e.kind, e.block);
            }
            let end = self.marks.get(i + 1).map_or(events.len(), |m| m.1.min(events.len())).max(start);
            let mut peak = level;
            for e in &events[start..end] {
                level = apply(level, e.kind, e.block);
                peak = peak.max(level);
            }
            at = end;
            let name = step.to_string();
            if report.peak_event.is_some_and(|p| p >= start && p < end) {
                peak_step = Some(name.clone());
            }
            match steps.iter_mut().find(|s| s.0 == name) {
                // several measured steps: the largest of each
                Some(s) => s.1 = s.1.max(peak),
                None => steps.push((name, peak)),
            }
        }
        fn apply(level: usize, kind: EventKind, block: usize) -> usize {
            match kind {
                EventKind::Alloc => level + block,
                EventKind::Free => level - block,
                EventKind::Oom => level,
            }
        }
        GenerateReport { max_new_tokens: config.max_new_tokens, config: config.clone(), steps, peak_step, peak_op: report.peak_op.clone(), kv_cache_bytes: self.kv_cache_bytes }
    }
}

/// The batches a profile's loop keeps bound between steps.
#[derive(Default)]
struct Bound {
    /// The reference scripts' `x, y = get_batch()`.
    shifted: Option<Vec<(Tensor, Tensor)>>,
    /// Hugging Face's collator output (hf flavour), one per micro-batch.
    causal: Vec<CausalLmBatch>,
}

#[allow(clippy::too_many_arguments)]
fn one_step(kind: ProfileType, model: &Model, runner: &mut StepRunner, batcher: &mut Batcher, batch: &mut Bound, accum: usize, precision: Precision, gen: (&GenerateConfig, &mut GenerateTrace)) {
    let n = if kind == ProfileType::Training { accum } else { 1 };
    if kind == ProfileType::Generate {
        return generate_step(model, batcher, &mut batch.causal, gen.0, gen.1);
    }
    if let Some(hf) = model.config.hf() {
        return hf_step(kind, model, runner, batcher, &mut batch.causal, n, hf.attention_mask, precision);
    }
    let batch = &mut batch.shifted;
    // `x, y = get_batch()`: the previous batch dies once the new one exists.
    let new: Vec<(Tensor, Tensor)> = (0..n).map(|_| batcher.next_batch()).collect();
    let micro = batch.insert(new);
    match kind {
        ProfileType::Training => {
            let refs: Vec<(&Tensor, &Tensor)> = micro.iter().map(|(x, y)| (x, y)).collect();
            runner.step_accumulated(&refs);
        }
        ProfileType::ForwardLoss => {
            runtime::set_phase(Phase::Forward);
            let region = precision.autocast().map(autocast::enable);
            // `logits = model(x); loss = cross_entropy(logits, y)`; both die before the next step.
            let (logits, loss) = model.forward_loss(&micro[0].0, &micro[0].1, &mut |_| runtime::set_phase(Phase::Loss));
            drop(region);
            drop(loss);
            drop(logits);
            runtime::set_phase(Phase::Setup);
        }
        ProfileType::Forward | ProfileType::Inference => {
            let _g = (kind == ProfileType::Inference).then(runtime::no_grad);
            runtime::set_phase(Phase::Forward);
            let region = precision.autocast().map(autocast::enable);
            // `model(x)` with the result unbound: output and graph die right after.
            drop(model.forward(&micro[0].0));
            drop(region);
            runtime::set_phase(Phase::Setup);
        }
        ProfileType::Generate => unreachable!("generate runs in generate_step"),
    }
}

/// tools/pytorch/measure_generate.py's step: `input_ids = randint(...)` (the previous batch
/// dying once the new one exists), `out = model.generate(input_ids, max_new_tokens=N,
/// do_sample=False)`, `del out`; each generate step its phase (prefill, decode).
fn generate_step(model: &Model, batcher: &mut Batcher, bound: &mut Vec<CausalLmBatch>, gc: &GenerateConfig, trace: &mut GenerateTrace) {
    use crate::model::hf::generation_5_23::{generate, Step};
    bound.truncate(1);
    bound.resize_with(1, CausalLmBatch::default);
    batcher.next_causal_lm_batch(&mut bound[0], false, false);
    let ids = bound[0].input_ids.clone().expect("drawn above");
    // The script's model.eval(): no LoRA dropout, no checkpointing.
    model.training.set(false);
    let out = generate(model, &ids, gc, &mut |step| {
        runtime::set_phase(if step == Step::Prefill { Phase::Prefill } else { Phase::Decode });
        let at = runtime::with(|rt| rt.log.events().map_or(0, |e| e.len()));
        trace.marks.push((step, at));
    });
    runtime::set_phase(Phase::Setup);
    trace.kv_cache_bytes = out.kv_cache_bytes;
    drop(out);
}

/// The Trainer's step for the hf flavour: the collator's batch (input_ids, labels = a copy,
/// the attention_mask when asked), then the profile type's calls as measure_hf.py makes them.
#[allow(clippy::too_many_arguments)]
fn hf_step(kind: ProfileType, model: &Model, runner: &mut StepRunner, batcher: &mut Batcher, bound: &mut Vec<CausalLmBatch>, n: usize, mask: bool, precision: Precision) {
    let labeled = matches!(kind, ProfileType::Training | ProfileType::ForwardLoss);
    bound.truncate(n);
    bound.resize_with(n, CausalLmBatch::default);
    // Sequence parallelism: the batch carries position_ids and the model is given them.
    let positions = model.config.sequence_parallel();
    for b in bound.iter_mut() {
        batcher.next_causal_lm_batch(b, labeled, mask);
        if positions {
            batcher.next_position_ids(b);
        }
    }
    if positions {
        model.position_ids.replace(bound[0].position_ids.clone());
    }
    let ids = |b: &CausalLmBatch| b.input_ids.clone().expect("drawn above");
    match kind {
        ProfileType::Training => {
            let micro: Vec<(Tensor, Tensor, Option<Tensor>)> =
                bound.iter().map(|b| (ids(b), b.labels.clone().expect("labeled"), b.attention_mask.clone())).collect();
            let refs: Vec<(&Tensor, &Tensor, Option<&Tensor>)> = micro.iter().map(|(x, y, m)| (x, y, m.as_ref())).collect();
            runner.step_micro(&refs);
        }
        ProfileType::ForwardLoss => {
            let b = &bound[0];
            runtime::set_phase(Phase::Forward);
            let region = precision.autocast().map(autocast::enable);
            // `loss = model(input_ids, labels=labels).loss; del out`, then the loss dies.
            let (logits, loss) = model.forward_loss_masked(&ids(b), b.labels.as_ref().expect("labeled"), b.attention_mask.as_ref(), &mut |_| runtime::set_phase(Phase::Loss));
            drop(region);
            drop(logits);
            runtime::set_phase(Phase::Setup);
            drop(loss);
        }
        ProfileType::Forward | ProfileType::Inference => {
            let b = &bound[0];
            let _g = (kind == ProfileType::Inference).then(runtime::no_grad);
            runtime::set_phase(Phase::Forward);
            let region = precision.autocast().map(autocast::enable);
            drop(model.forward_masked(&ids(b), b.attention_mask.as_ref()));
            drop(region);
            runtime::set_phase(Phase::Setup);
        }
        ProfileType::Generate => unreachable!("generate runs in generate_step"),
    }
}

/// The compute side of the measured steps (`--flops`).
pub struct ComputeOut {
    pub report: FlopReport,
    pub achieved: Option<Achieved>,
    pub roofline: Option<Roofline>,
}

/// Profile one (context length, profile type) of `p` (its `parallel` rank, when set): build
/// the model under the caching-allocator model, run the warm-up steps, record the measured
/// ones. An out-of-memory stops the run and is reported in [`Run::oom`], with the history up to
/// the failing allocation.
pub fn profile_one(p: &ProfileOptions, ctx: usize, kind: ProfileType) -> Result<Run> {
    // `--attention flash` (cs336, tinyllama) picks SDPA's kernel for the GPU as PyTorch does.
    let cudnn = p.gpu.is_some_and(|g| g.sdpa_prefers_cudnn());
    crate::engine::ops::attention::with_cudnn_preferred(cudnn, || profile_one_here(p, ctx, kind))
}

fn profile_one_here(p: &ProfileOptions, ctx: usize, kind: ProfileType) -> Result<Run> {
    runtime::reset();
    let mut allocator = CachingAllocator::new(p.conf.clone(), p.capacity);
    if let Some(f) = p.fraction {
        allocator.set_memory_fraction(f);
    }
    // Record from the first allocation, so that an OOM anywhere (model construction,
    // warm-up) leaves its history; the measured steps restart the recording.
    runtime::with(|rt| {
        rt.log.allocator = Some(allocator);
        rt.log.max_entries = Some(p.max_entries);
        rt.log.start_recording();
    });
    let mut stage = "model construction".to_string();
    let mut before: Vec<MemEvent> = Vec::new();
    let mut recording: Option<Recording> = None;
    let mut compute: Option<ComputeOut> = None;
    let mut step_seconds: Option<f64> = None;
    let mut units: Vec<(String, u64)> = Vec::new();
    let mut gen_trace = GenerateTrace::default();
    let gen_cfg = p.generation.clone().unwrap_or_else(|| GenerateConfig::greedy(p.max_new_tokens.unwrap_or(0)));
    let bar = super::progress::steps(p.device, p.warmup_steps + p.measure_steps, &format!("{} context {ctx} {kind:?}", p.model_name));
    let res = catch_unwind(AssertUnwindSafe(|| -> Result<()> {
        let model_cfg = p.parallel.as_ref().map_or_else(|| p.model.clone(), |pc| pc.model_config(&p.model));
        let model = match &p.parallel {
            // `with torch.device("meta")`, `fully_shard`, `to_empty`: only shards are allocated,
            // and the model computes in the policy's param_dtype.
            Some(pc) if pc.shards_params() => {
                let _d = runtime::defer_allocation();
                Model::new_in(&model_cfg, p.device, p.seed, pc.param_dtype.unwrap_or(p.precision.param_dtype()))?
            }
            _ => Model::new_in(&model_cfg, p.device, p.seed, p.precision.param_dtype())?,
        };
        bar.set_message("warm-up");
        let opt = Optimizer::new(p.optim.clone(), model.parameters().len());
        let mut runner = StepRunner::new(&model, opt);
        if let Some(pc) = &p.parallel {
            if let Some(layout) = crate::parallel::apply(&model, pc, p.precision.param_dtype()) {
                units = layout.units();
                runner = runner.with_parallel(layout);
            }
        }
        let mut runner = runner.with_precision(p.precision);
        let accum = if kind == ProfileType::Training { p.grad_accum_steps } else { 1 };
        let mut batcher = Batcher::new(DataKind::Random, p.model.vocab_size, p.batch / accum, ctx, p.device, p.seed);
        let mut batch = Bound::default();
        for i in 0..p.warmup_steps {
            stage = format!("warm-up step {} of {}", i + 1, p.warmup_steps);
            one_step(kind, &model, &mut runner, &mut batcher, &mut batch, accum, p.precision, (&gen_cfg, &mut GenerateTrace::default()));
            bar.inc(1);
        }
        bar.set_message("recording");
        // torch.cuda.reset_peak_memory_stats(); _record_memory_history()
        runtime::with(|rt| {
            rt.log.reset_peak();
            before = rt.log.live_as_events();
            rt.log.start_recording();
        });
        if p.flops {
            runtime::start_compute_log(false);
        }
        let t0 = Instant::now();
        for i in 0..p.measure_steps {
            stage = format!("measured step {} of {}", i + 1, p.measure_steps);
            one_step(kind, &model, &mut runner, &mut batcher, &mut batch, accum, p.precision, (&gen_cfg, &mut gen_trace));
            bar.inc(1);
        }
        let step_s = t0.elapsed().as_secs_f64() / p.measure_steps as f64;
        step_seconds = Some(step_s);
        if let Some(log) = runtime::take_compute_log() {
            let params: Vec<(String, u64)> = model.parameters().iter().map(|q| (q.name.clone(), q.tensor.numel() as u64)).collect();
            compute = Some(ComputeOut {
                report: flops::report(&log.ops, p.measure_steps, &params),
                achieved: (p.device == Device::Cpu).then(|| Achieved { step_s, peaks: crate::engine::calibrate::cpu_peaks() }),
                roofline: p.gpu.as_ref().map(|g| flops::roofline(&log.ops, p.measure_steps, g)),
            });
        }
        // `_dump_snapshot` runs while the loop's tensors are still bound.
        recording = Some(runtime::with(|rt| rt.log.finish_recording()));
        runner.finish();
        drop(batch);
        drop(runner);
        drop(model);
        Ok(())
    }));
    bar.finish_and_clear();
    let oom = match res {
        Ok(r) => {
            r?;
            None
        }
        Err(payload) => match payload.downcast::<OomPanic>() {
            Ok(o) => Some(o.0.to_string()),
            Err(other) => std::panic::resume_unwind(other),
        },
    };
    let host_peak = runtime::host_memory().1;
    let unified_peak = Some(runtime::unified_memory().1).filter(|&b| b > 0);
    let (rec, oom_where) = runtime::with(|rt| {
        let w = rt.log.oom.take().map(|(_, scope, phase)| (scope.to_string(), phase));
        // After an OOM: the history up to the failing allocation.
        let rec = rt.log.oom_capture.take().or(recording.take()).unwrap_or_else(|| rt.log.finish_recording());
        (rec, w)
    });
    let Recording { events, actions, dropped, allocator } = rec;
    let alloc = allocator.expect("allocator installed");
    let oom_phase = oom.as_ref().and(oom_where.as_ref()).map(|(_, phase)| *phase);
    let oom = oom.map(|m| match oom_where {
        Some((scope, phase)) => format!("{m} (at {}, phase {phase})", crate::record::scope_name(&scope, phase)),
        None => m,
    });
    let report = analyse::peak(&before, &events, 20);
    let generate = (kind == ProfileType::Generate).then(|| gen_trace.report(&gen_cfg, &before, &events, &report));
    let stats = alloc.stats;
    let n_actions = actions.len();
    let trace = p.keep_trace.then_some(Recorded { allocator: alloc, before, events, actions, built: std::cell::OnceCell::new() });
    runtime::reset();
    let oom_stage = oom.is_some().then_some(stage);
    let rank = p.parallel.as_ref().map(|c| c.rank);
    let host_peak = p.parallel.as_ref().filter(|c| c.offload_params).map(|_| host_peak);
    Ok(Run { context: ctx, kind, rank, units, host_peak, unified_peak, report, stats, oom, oom_stage, oom_phase, trace_dropped: dropped, snapshot: None, report_html: None, events: n_actions, compute, step_seconds, trace, generate })
}

/// What a run recorded, for its snapshot.
pub struct Recorded {
    pub allocator: CachingAllocator,
    /// The live blocks when recording started.
    pub before: Vec<MemEvent>,
    pub events: Vec<MemEvent>,
    pub actions: Vec<(crate::record::allocator::Trace, Option<usize>)>,
    /// The snapshot, built on first use: the pickle and the report share it.
    built: std::cell::OnceCell<pickle::Value>,
}

impl Run {
    /// The memory_viz snapshot (`torch.cuda.memory._snapshot()`'s structure), when the trace
    /// was kept.
    pub fn snapshot_value(&self) -> Option<pickle::Value> {
        // A clone shares the built containers (pickle::Value keeps them behind Rc).
        self.trace.as_ref().map(|t| t.built.get_or_init(|| snapshot::build(&t.allocator, &t.before, &t.events, &t.actions)).clone())
    }

    /// Write the snapshot pickle to `path` (atomically), for pytorch.org/memory_viz.
    pub fn save_snapshot(&mut self, path: &Path) -> Result<()> {
        let snap = self.snapshot_value().ok_or_else(|| anyhow::anyhow!("this run kept no trace (ProfileOptions::keep_trace)"))?;
        write_atomic(path, &pickle::write(&snap))?;
        self.snapshot = Some(path.to_path_buf());
        Ok(())
    }

    /// Write the offline HTML report (timeline, breakdown at the peak, largest allocations)
    /// to `path`; `name` labels the snapshot in it, `capacity` draws the device's line.
    pub fn save_report(&mut self, path: &Path, name: &str, capacity: Option<Capacity>) -> Result<()> {
        let page = self.report_page(name, capacity)?;
        write_atomic(path, &page)?;
        self.report_html = Some(path.to_path_buf());
        Ok(())
    }

    /// The snapshot at `path` and its report beside it (`_snapshot.pickle` →
    /// `_report.html`), then the trace dropped: what `profile` writes per run.
    pub fn save_files(&mut self, p: &ProfileOptions, path: &Path) -> Result<()> {
        self.save_snapshot(path)?;
        let name = path.file_name().map_or_else(|| "snapshot".into(), |n| n.to_string_lossy().into_owned());
        self.save_report(&html::report_path(path, None), &name, p.capacity_line())?;
        self.trace = None;
        Ok(())
    }

    /// The offline HTML report as bytes (what [`Run::save_report`] writes).
    pub fn report_page(&self, name: &str, capacity: Option<Capacity>) -> Result<Vec<u8>> {
        let snap = self.snapshot_value().ok_or_else(|| anyhow::anyhow!("this run kept no trace (ProfileOptions::keep_trace)"))?;
        // Built in memory by vramscope itself, not read from a file: no budget applies.
        let budget = crate::analyse::budget::Budget::unlimited();
        let stats = serde_json::to_value(self.stats).ok();
        let page = html::report_within(&[Source { name: name.to_string(), snapshot: &snap, device: None, stats }], capacity, &budget).map_err(anyhow::Error::msg)?;
        Ok(crate::export::output_set::with_run_id_comment(page))
    }
}

/// Every run of `p`: each context length × profile type × rank (set in `p.parallel` in turn),
/// in that order; `each` sees every run as it is made (to write or print it).
pub fn profile_all(p: &mut ProfileOptions, kinds: &[ProfileType], ranks: &[usize], mut each: impl FnMut(&ProfileOptions, &mut Run) -> Result<()>) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    for ctx in p.contexts.clone() {
        for &kind in kinds {
            for &rank in ranks {
                if let Some(c) = p.parallel.as_mut() {
                    c.rank = rank;
                }
                let mut r = profile_one(p, ctx, kind)?;
                each(p, &mut r)?;
                runs.push(r);
            }
        }
    }
    Ok(runs)
}

impl ProfileOptions {
    /// The ranks a parallel plan profiles: its own rank when `given` (`--rank`), else rank 0
    /// and each rank whose shard sizes differ ([0] without a parallel layout).
    pub fn ranks(&self, given: bool) -> Result<Vec<usize>> {
        let Some(c) = &self.parallel else { return Ok(vec![0]) };
        if given {
            return Ok(vec![c.rank]);
        }
        let shapes: Vec<Vec<usize>> = {
            let _d = runtime::defer_allocation();
            let m = Model::new_in(&c.model_config(&self.model), Device::Meta, self.seed, self.precision.param_dtype())?;
            m.parameters().iter().map(|q| q.tensor.shape().to_vec()).collect()
        };
        runtime::reset();
        Ok(crate::parallel::distinct_ranks(&shapes, c))
    }

    /// For a cpu profile that cannot fit in host memory: the note saying it runs on meta
    /// instead (the caller moves it; profile, each compare variant and each sweep point ask).
    pub fn host_fallback(&self, kinds: &[ProfileType]) -> Result<Option<String>> {
        if self.device != Device::Cpu {
            return Ok(None);
        }
        let training = kinds.contains(&ProfileType::Training);
        super::host_memory::meta_instead(&self.model, self.precision, self.batch, &self.contexts, training)
    }

    /// Where `profile` puts run `r`'s snapshot unless told: seed 001's names (fp32 has no
    /// suffix, mixed precision adds it, `_bf16_`), then the memory options' and the rank's tags.
    pub fn snapshot_path(&self, out_dir: &Path, r: &Run) -> std::path::PathBuf {
        let prec = if self.precision == Precision::Fp32 { String::new() } else { format!("_{}", self.precision) };
        let variant = super::names::file_tag(&self.model, self.grad_accum_steps);
        let rank = self.parallel.as_ref().map_or(String::new(), |c| format!("_{}{}_rank{}", c.layout.name(), c.world_size, c.rank));
        out_dir.join(format!("{}_ctx{}_{}{prec}{variant}{rank}_snapshot.pickle", self.model_name, r.context, r.kind.name()))
    }

    /// What the device is called in tables and the report: the GPU preset's name, else
    /// "memory limit".
    pub fn device_label(&self) -> String {
        self.gpu_name.clone().unwrap_or_else(|| "memory limit".into())
    }

    /// The device capacity the report draws (None without a bound).
    pub fn capacity_line(&self) -> Option<Capacity> {
        (self.capacity < usize::MAX / 4).then(|| Capacity { label: self.device_label(), bytes: self.capacity as u64 })
    }
}
