//! Compute records: one per kernel with its module path, phase, FLOPs, bytes moved and
//! (on cpu) wall time, plus module spans — what FLOP trees, arithmetic intensity, MFU,
//! roofline predictions and the chrome trace are built from. Off unless a run asks for it.
use super::Phase;
use serde::Serialize;
use std::rc::Rc;
use std::time::Instant;

/// How an op's FLOPs are counted. Only `Matmul` FLOPs are what PyTorch's
/// `FlopCounterMode` and the DeepSpeed profiler call FLOPs; the others are labelled apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// 2·m·n·k per product (a multiply-add is 2 FLOP).
    Matmul,
    /// Arithmetic per output element (fused ops count each step; see `engine::cost`).
    Elementwise,
    /// One add/compare per input element.
    Reduction,
    /// Data movement only (copies, casts, gathers, cat, fills): 0 FLOP.
    Copy,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Matmul => "matmul",
            OpKind::Elementwise => "elementwise",
            OpKind::Reduction => "reduction",
            OpKind::Copy => "copy",
        }
    }
}

#[derive(Clone, Debug)]
pub struct OpRecord {
    pub name: &'static str,
    pub kind: OpKind,
    pub scope: Rc<str>,
    pub phase: Phase,
    pub flops: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Element size of the output (2 for bf16/f16): which device peak applies.
    pub elem_bytes: u8,
    /// Microseconds since the log started; `dur_us` is 0 on meta (no kernel runs).
    pub start_us: f64,
    pub dur_us: f64,
}

/// A module's forward call: `scope` entered at `start_us`, left at `end_us`.
#[derive(Clone, Debug)]
pub struct ModuleSpan {
    pub path: Rc<str>,
    pub phase: Phase,
    pub start_us: f64,
    pub end_us: f64,
}

/// An allocation (+bytes) or free (−bytes) with the totals after it: the chrome trace's
/// `[memory]` event (formats.md §5.2).
#[derive(Clone, Debug)]
pub struct MemPoint {
    pub t_us: f64,
    pub addr: u64,
    /// Block bytes (allocator-rounded when a caching allocator is modelled).
    pub bytes: i64,
    pub total_allocated: u64,
    pub total_reserved: u64,
}

/// A step of the run (`ProfilerStep#N` in the chrome trace).
#[derive(Clone, Debug)]
pub struct StepSpan {
    pub step: usize,
    pub start_us: f64,
    pub end_us: f64,
}

pub struct ComputeLog {
    epoch: Instant,
    pub ops: Vec<OpRecord>,
    pub modules: Vec<ModuleSpan>,
    pub steps: Vec<StepSpan>,
    /// Filled only when memory is profiled too.
    pub memory: Option<Vec<MemPoint>>,
    /// Wall-clock microseconds since the Unix epoch at `epoch` (the trace's base time).
    pub base_unix_us: u64,
    open_modules: Vec<(Rc<str>, Phase, f64)>,
}

impl Default for ComputeLog {
    fn default() -> Self {
        let base_unix_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        ComputeLog { epoch: Instant::now(), ops: Vec::new(), modules: Vec::new(), steps: Vec::new(), memory: None, base_unix_us, open_modules: Vec::new() }
    }
}

impl ComputeLog {
    /// Microseconds since the log started.
    pub fn now_us(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64() * 1e6
    }
    /// The log's start as an instant (memory events are placed on the same clock).
    pub fn epoch(&self) -> Instant {
        self.epoch
    }
    pub fn enter_module(&mut self, path: Rc<str>, phase: Phase) {
        let t = self.now_us();
        self.open_modules.push((path, phase, t));
    }
    pub fn exit_module(&mut self) {
        if let Some((path, phase, start_us)) = self.open_modules.pop() {
            let end_us = self.now_us();
            self.modules.push(ModuleSpan { path, phase, start_us, end_us });
        }
    }
    pub fn memory_point(&mut self, addr: u64, bytes: i64, total_allocated: usize, total_reserved: usize) {
        let t_us = self.now_us();
        if let Some(m) = self.memory.as_mut() {
            m.push(MemPoint { t_us, addr, bytes, total_allocated: total_allocated as u64, total_reserved: total_reserved as u64 });
        }
    }
    pub fn step(&mut self, step: usize, start_us: f64) {
        let end_us = self.now_us();
        self.steps.push(StepSpan { step, start_us, end_us });
    }
}
