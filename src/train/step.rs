//! One training step: zero_grad → forward → loss → backward → optimizer, with the
//! lifetimes of the Python loop it models (the previous step's logits and loss stay bound
//! until the new ones replace them), per-phase times and per-phase peak memory.
use super::optim::Optimizer;
use super::{GradScaler, Precision};
use crate::engine::{autocast, runtime, Device, Tensor};
use crate::model::{Flavour, Model};
use crate::record::Phase;
use serde::Serialize;
use crate::parallel::RankLayout;
use std::rc::Rc;
use crate::clock::Instant;

#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseStat {
    pub phase: &'static str,
    pub seconds: f64,
    /// Highest allocated bytes during the phase.
    pub peak_allocated: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct StepResult {
    /// None on meta (no numerics).
    pub loss: Option<f64>,
    pub seconds: f64,
    pub phases: Vec<PhaseStat>,
    /// Highest allocated bytes during the step (reset at its start).
    pub peak_allocated: usize,
    /// Allocated bytes when the step ended.
    pub allocated_after: usize,
    /// fp16 loss scaling found an inf/NaN gradient and skipped the optimizer step.
    pub skipped_step: bool,
}

impl StepResult {
    pub fn phase(&self, p: Phase) -> &PhaseStat {
        self.phases.iter().find(|s| s.phase == p.name()).expect("phase recorded")
    }
}

pub struct StepRunner<'m> {
    pub model: &'m Model,
    /// The rank's parallel layout (None: one device).
    pub parallel: Option<Rc<dyn RankLayout>>,
    pub optimizer: Optimizer,
    pub precision: Precision,
    /// fp16 only: `torch.amp.GradScaler`.
    pub scaler: Option<GradScaler>,
    logits: Option<Tensor>,
    loss: Option<Tensor>,
}

fn timed<T>(phase: Phase, stats: &mut Vec<PhaseStat>, f: impl FnOnce() -> T) -> T {
    runtime::set_phase(phase);
    runtime::with(|rt| rt.log.reset_phase_peak());
    let t0 = Instant::now();
    let out = f();
    let seconds = t0.elapsed().as_secs_f64();
    stats.push(PhaseStat { phase: phase.name(), seconds, peak_allocated: runtime::stats().phase_peak });
    out
}

impl<'m> StepRunner<'m> {
    pub fn new(model: &'m Model, optimizer: Optimizer) -> Self {
        StepRunner { model, parallel: None, optimizer, precision: Precision::Fp32, scaler: None, logits: None, loss: None }
    }

    /// Run as one rank of a parallel layout (set before [`StepRunner::with_precision`]: FSDP's
    /// mixed precision builds the model in its param_dtype).
    pub fn with_parallel(mut self, layout: Rc<dyn RankLayout>) -> Self {
        self.parallel = Some(layout);
        self
    }

    /// Run forward and loss under `torch.autocast` (bf16/fp16, fp16 with loss scaling) or
    /// on a model built in that precision (pure bf16).
    pub fn with_precision(mut self, precision: Precision) -> Self {
        if self.parallel.is_none() {
            assert_eq!(self.model.dtype, precision.param_dtype(), "the model's parameters must be in the precision's type");
        }
        self.precision = precision;
        self.scaler = precision.loss_scaling().then(GradScaler::default);
        self
    }

    pub fn step(&mut self, inputs: &Tensor, labels: &Tensor) -> StepResult {
        self.step_accumulated(&[(inputs, labels)])
    }

    /// One step with the collator's attention_mask (hf).
    pub fn step_masked(&mut self, inputs: &Tensor, labels: &Tensor, attention_mask: Option<&Tensor>) -> StepResult {
        self.step_micro(&[(inputs, labels, attention_mask)])
    }

    /// One optimizer step over micro-batches (gradient accumulation), as the Python loop
    /// `zero_grad(); for x, y in micro: logits, loss = model(x, y); loss = loss / N;
    /// loss.backward(); optimizer.step()` runs it: gradients accumulate in place, the
    /// optimizer runs once. With one micro-batch there is no division (a plain step).
    pub fn step_accumulated(&mut self, micro: &[(&Tensor, &Tensor)]) -> StepResult {
        let micro: Vec<_> = micro.iter().map(|&(x, y)| (x, y, None)).collect();
        self.step_micro(&micro)
    }

    /// [`StepRunner::step_accumulated`] with each micro-batch's attention_mask (hf).
    pub fn step_micro(&mut self, micro: &[(&Tensor, &Tensor, Option<&Tensor>)]) -> StepResult {
        let n = micro.len();
        assert!(n > 0, "a step needs a batch");
        let mut phases = Vec::with_capacity(5);
        let t0 = Instant::now();
        let model = self.model;
        // `model.train()` (transformers checkpoints its layers only in training mode).
        model.training.set(true);
        // The Trainer's step: `loss = compute_loss(model, inputs)` returns only the loss (the
        // output with its logits dies before backward), `training_step` returns it detached
        // and the loop drops it after the step; the reference scripts keep both bound until
        // the next step rebinds them.
        let hf = model.config.flavour == Flavour::Hf;
        let parallel = self.parallel.clone();
        timed(Phase::ZeroGrad, &mut phases, || {
            model.zero_grad();
            if let Some(p) = &parallel {
                p.zero_grad();
            }
        });
        // Forward, loss and backward repeat per micro-batch: times add up, peaks take the max.
        let mut fwd = PhaseStat { phase: Phase::Forward.name(), ..Default::default() };
        let mut loss_stat = PhaseStat { phase: Phase::Loss.name(), ..Default::default() };
        let mut bwd = PhaseStat { phase: Phase::Backward.name(), ..Default::default() };
        let mut value = (micro[0].0.device() == Device::Cpu).then_some(0.0);
        for &(inputs, labels, mask) in micro {
            // Forward, then loss: the loss phase starts when the logits exist.
            let rebind_after_forward = model.config.flavour == Flavour::Cs336;
            runtime::set_phase(Phase::Forward);
            runtime::with(|rt| rt.log.reset_phase_peak());
            let mut mark = Instant::now();
            let prev_logits = &mut self.logits;
            // `with torch.autocast(...)`: forward and loss; backward runs outside.
            let region = self.precision.autocast().map(autocast::enable);
            let (logits, loss) = model.forward_loss_masked(inputs, labels, mask, &mut |logits| {
                fwd.seconds += mark.elapsed().as_secs_f64();
                fwd.peak_allocated = fwd.peak_allocated.max(runtime::stats().phase_peak);
                if rebind_after_forward {
                    // `logits = model(x)`: the previous logits die once the new ones exist.
                    *prev_logits = Some(logits.clone());
                }
                runtime::set_phase(Phase::Loss);
                runtime::with(|rt| rt.log.reset_phase_peak());
                mark = Instant::now();
            });
            drop(region);
            // `_, loss = model(tokens, labels)` / `loss = cross_entropy(...)`: rebinding frees
            // the previous step's tensors only now. The Trainer's `del out` frees the logits.
            if hf {
                drop(logits);
            } else {
                self.logits = Some(logits);
            }
            let loss = if n > 1 {
                // `loss = loss / N`: the unscaled loss dies with the rebinding.
                self.loss = Some(loss);
                let scaled = self.loss.as_ref().unwrap().div_scalar(n as f64);
                self.loss.insert(scaled).clone()
            } else {
                self.loss.insert(loss).clone()
            };
            loss_stat.seconds += mark.elapsed().as_secs_f64();
            loss_stat.peak_allocated = loss_stat.peak_allocated.max(runtime::stats().phase_peak);
            let mut one = Vec::with_capacity(1);
            // `scaler.scale(loss).backward()`: the scaled loss lives through backward.
            let scaler = &mut self.scaler;
            timed(Phase::Backward, &mut one, || {
                match scaler {
                    Some(s) => s.scale(&loss).backward(),
                    None => loss.backward(),
                }
                // The callback the layout queued on autograd's engine runs as backward ends.
                if let Some(p) = &parallel {
                    p.after_backward();
                }
            });
            bwd.seconds += one[0].seconds;
            bwd.peak_allocated = bwd.peak_allocated.max(one[0].peak_allocated);
            if let Some(v) = value.as_mut() {
                *v += loss.item();
            }
            drop(loss);
            if hf {
                // `training_step` returns `loss.detach()`: the graph (and what a reentrant
                // checkpoint's ctx holds) dies with backward; the value's storage lives on.
                self.loss = self.loss.take().map(|l| l.detach());
            }
        }
        phases.extend([fwd, loss_stat, bwd]);
        let (opt, scaler) = (&mut self.optimizer, &mut self.scaler);
        let stepped: Option<Vec<crate::model::Param>> = parallel.as_ref().map(|p| p.optimizer_params());
        let params = stepped.as_deref().unwrap_or(model.parameters());
        // CPU offload: the step runs on the host, its state is host memory.
        let host = parallel.as_ref().is_some_and(|p| p.optimizer_on_host()).then(runtime::on_host);
        let ran = timed(Phase::Optimizer, &mut phases, || match scaler {
            Some(s) => s.step_and_update(params, || opt.step(params)),
            None => {
                opt.step(params);
                true
            }
        });
        drop(host);
        drop(stepped);
        if hf {
            self.loss = None;
        }
        model.training.set(false);
        runtime::set_phase(Phase::Setup);
        let seconds = t0.elapsed().as_secs_f64();
        StepResult {
            loss: value,
            seconds,
            peak_allocated: phases.iter().map(|p| p.peak_allocated).max().unwrap_or(0),
            allocated_after: runtime::stats().allocated,
            skipped_step: !ran,
            phases,
        }
    }

    /// Drop the tensors the loop still holds (end of training).
    pub fn finish(&mut self) {
        self.logits = None;
        self.loss = None;
    }
}
