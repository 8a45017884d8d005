//! One training step: zero_grad → forward → loss → backward → optimizer, with the
//! lifetimes of the Python loop it models (the previous step's logits and loss stay bound
//! until the new ones replace them), per-phase times and per-phase peak memory.
use super::optim::Optimizer;
use crate::engine::{runtime, Device, Tensor};
use crate::model::{Flavour, Model};
use crate::record::Phase;
use serde::Serialize;
use std::time::Instant;

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
}

impl StepResult {
    pub fn phase(&self, p: Phase) -> &PhaseStat {
        self.phases.iter().find(|s| s.phase == p.name()).expect("phase recorded")
    }
}

pub struct StepRunner<'m> {
    pub model: &'m Model,
    pub optimizer: Optimizer,
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
        StepRunner { model, optimizer, logits: None, loss: None }
    }

    pub fn step(&mut self, inputs: &Tensor, labels: &Tensor) -> StepResult {
        self.step_accumulated(&[(inputs, labels)])
    }

    /// One optimizer step over micro-batches (gradient accumulation), as the Python loop
    /// `zero_grad(); for x, y in micro: logits, loss = model(x, y); loss = loss / N;
    /// loss.backward(); optimizer.step()` runs it: gradients accumulate in place, the
    /// optimizer runs once. With one micro-batch there is no division (a plain step).
    pub fn step_accumulated(&mut self, micro: &[(&Tensor, &Tensor)]) -> StepResult {
        let n = micro.len();
        assert!(n > 0, "a step needs a batch");
        let mut phases = Vec::with_capacity(5);
        let t0 = Instant::now();
        let model = self.model;
        timed(Phase::ZeroGrad, &mut phases, || model.zero_grad());
        // Forward, loss and backward repeat per micro-batch: times add up, peaks take the max.
        let mut fwd = PhaseStat { phase: Phase::Forward.name(), ..Default::default() };
        let mut loss_stat = PhaseStat { phase: Phase::Loss.name(), ..Default::default() };
        let mut bwd = PhaseStat { phase: Phase::Backward.name(), ..Default::default() };
        let mut value = (micro[0].0.device() == Device::Cpu).then_some(0.0);
        for &(inputs, labels) in micro {
            // Forward, then loss: the loss phase starts when the logits exist.
            let rebind_after_forward = model.config.flavour == Flavour::Cs336;
            runtime::set_phase(Phase::Forward);
            runtime::with(|rt| rt.log.reset_phase_peak());
            let mut mark = Instant::now();
            let prev_logits = &mut self.logits;
            let (logits, loss) = model.forward_loss(inputs, labels, &mut |logits| {
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
            // `_, loss = model(tokens, labels)` / `loss = cross_entropy(...)`: rebinding frees
            // the previous step's tensors only now.
            self.logits = Some(logits);
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
            timed(Phase::Backward, &mut one, || loss.backward());
            bwd.seconds += one[0].seconds;
            bwd.peak_allocated = bwd.peak_allocated.max(one[0].peak_allocated);
            if let Some(v) = value.as_mut() {
                *v += loss.item();
            }
            drop(loss);
        }
        phases.extend([fwd, loss_stat, bwd]);
        let opt = &mut self.optimizer;
        timed(Phase::Optimizer, &mut phases, || opt.step(model.parameters()));
        runtime::set_phase(Phase::Setup);
        let seconds = t0.elapsed().as_secs_f64();
        StepResult {
            loss: value,
            seconds,
            peak_allocated: phases.iter().map(|p| p.peak_allocated).max().unwrap_or(0),
            allocated_after: runtime::stats().allocated,
            phases,
        }
    }

    /// Drop the tensors the loop still holds (end of training).
    pub fn finish(&mut self) {
        self.logits = None;
        self.loss = None;
    }
}
