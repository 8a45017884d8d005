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
        let mut phases = Vec::with_capacity(5);
        let t0 = Instant::now();
        let model = self.model;
        timed(Phase::ZeroGrad, &mut phases, || model.zero_grad());
        // Forward, then loss: the loss phase starts when the logits exist.
        let rebind_after_forward = model.config.flavour == Flavour::Cs336;
        runtime::set_phase(Phase::Forward);
        runtime::with(|rt| rt.log.reset_phase_peak());
        let mut mark = Instant::now();
        let prev_logits = &mut self.logits;
        let (logits, loss) = model.forward_loss(inputs, labels, &mut |logits| {
            phases.push(PhaseStat { phase: Phase::Forward.name(), seconds: mark.elapsed().as_secs_f64(), peak_allocated: runtime::stats().phase_peak });
            if rebind_after_forward {
                // `logits = model(x)`: the previous step's logits die once the new ones exist.
                *prev_logits = Some(logits.clone());
            }
            runtime::set_phase(Phase::Loss);
            runtime::with(|rt| rt.log.reset_phase_peak());
            mark = Instant::now();
        });
        phases.push(PhaseStat { phase: Phase::Loss.name(), seconds: mark.elapsed().as_secs_f64(), peak_allocated: 0 });
        // `_, loss = model(tokens, labels)` / `loss = cross_entropy(...)`: rebinding frees
        // the previous step's tensors only now.
        self.logits = Some(logits);
        let loss = self.loss.insert(loss).clone();
        phases.last_mut().unwrap().peak_allocated = runtime::stats().phase_peak;
        timed(Phase::Backward, &mut phases, || loss.backward());
        let value = (inputs.device() == Device::Cpu).then(|| loss.item());
        drop(loss);
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
