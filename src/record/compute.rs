//! Compute records: one per kernel with its module path, phase, FLOPs, bytes moved and
//! (on cpu) wall time, plus module spans — what FLOP trees, arithmetic intensity, MFU,
//! roofline predictions and the chrome trace are built from. Off unless a run asks for it.
use super::Phase;
use serde::Serialize;
use std::rc::Rc;
use crate::clock::Instant;

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
    /// Bytes allocated minus bytes freed (allocator blocks) while the op ran, including the
    /// ops it called: torch's `cuda_memory_usage` of the op's event.
    pub alloc_bytes: i64,
    /// The same made by the op itself, its called ops' excluded (each allocation and free is
    /// charged to the innermost op running): torch's `self_cuda_memory_usage`.
    pub self_alloc_bytes: i64,
}

/// An op running now: what it allocated itself and what the ops it called allocated.
#[derive(Clone, Copy, Debug, Default)]
struct OpenOp {
    self_bytes: i64,
    children_bytes: i64,
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
    /// Allocations and frees made while no op ran (a saved tensor released between ops, the
    /// optimizer's bookkeeping): (events, bytes allocated minus freed) — torch's `[memory]` row.
    pub outside_ops: (u64, i64),
    open_modules: Vec<(Rc<str>, Phase, f64)>,
    open_ops: Vec<OpenOp>,
}

impl Default for ComputeLog {
    fn default() -> Self {
        let base_unix_us = crate::clock::SystemTime::now().duration_since(crate::clock::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        ComputeLog { epoch: Instant::now(), ops: Vec::new(), modules: Vec::new(), steps: Vec::new(), memory: None, base_unix_us, outside_ops: (0, 0), open_modules: Vec::new(), open_ops: Vec::new() }
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
    /// An op starts: allocations and frees from now on are charged to it (its own) until it
    /// ends or calls another op. Returns the depth to give [`ComputeLog::close_op`].
    pub fn open_op(&mut self) -> usize {
        self.open_ops.push(OpenOp::default());
        self.open_ops.len() - 1
    }
    /// The op opened at `depth` ends: (bytes allocated minus freed including the ops it called,
    /// the same by itself). Its total counts as a child's in the op that called it. Frames left
    /// above it by an op that unwound (an out-of-memory panic) are folded into it.
    pub fn close_op(&mut self, depth: usize) -> (i64, i64) {
        while self.open_ops.len() > depth + 1 {
            let f = self.open_ops.pop().unwrap_or_default();
            if let Some(top) = self.open_ops.last_mut() {
                top.children_bytes += f.self_bytes + f.children_bytes;
            }
        }
        if self.open_ops.len() != depth + 1 {
            return (0, 0);
        }
        let f = self.open_ops.pop().unwrap_or_default();
        let total = f.self_bytes + f.children_bytes;
        if let Some(parent) = self.open_ops.last_mut() {
            parent.children_bytes += total;
        }
        (total, f.self_bytes)
    }
    /// Charge an allocation (+) or free (−) to the innermost op running, or to `outside_ops`.
    fn charge(&mut self, bytes: i64) {
        match self.open_ops.last_mut() {
            Some(f) => f.self_bytes += bytes,
            None => {
                self.outside_ops.0 += 1;
                self.outside_ops.1 += bytes;
            }
        }
    }
    pub fn memory_point(&mut self, addr: u64, bytes: i64, total_allocated: usize, total_reserved: usize) {
        self.charge(bytes);
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
