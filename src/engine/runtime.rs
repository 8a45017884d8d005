//! The per-thread execution context: grad mode, the module scope stack, the phase, the
//! category override, and the memory log every storage reports to.
//!
//! PyTorch keeps the same things in thread-local state (grad mode, autocast, the
//! profiler's record-function stack); tensors are single-threaded handles, so one context
//! per thread is the faithful model. Kernels may use rayon internally but never create or
//! drop storages off the main thread.
use crate::record::allocator::StreamId;
use crate::record::compute::ComputeLog;
use crate::record::pyframe::{PyFn, PyNode};
use crate::record::{Category, MemoryLog, MemoryStats, Phase, PyStack};
use std::cell::RefCell;
use std::rc::Rc;

pub struct Runtime {
    pub grad_enabled: bool,
    scopes: Vec<Rc<str>>,
    root: Rc<str>,
    /// The reference implementation's Python functions now running (innermost first).
    py: PyStack,
    pub phase: Phase,
    categories: Vec<Category>,
    next_storage_id: u64,
    next_seq: u64,
    pub log: MemoryLog,
    /// Per-kernel FLOPs, bytes and times, and module spans, when a run asks for them.
    pub compute: Option<ComputeLog>,
    /// The autocast region's type and weight-cast cache.
    pub autocast: super::autocast::State,
    /// Storages created now hold no bytes (a model built on `meta` before sharding).
    deferring: bool,
    /// Storages created now live in host memory (offloaded state, an optimizer step on the
    /// CPU): counted in `host`, not on the device.
    on_host: bool,
    /// Ops created inside follow CUDA's kernels where they allocate differently from the CPU's
    /// ([`cuda_kernels`]).
    cuda_kernels: CudaKernels,
    /// Host memory held by such storages: (now, peak).
    host: (usize, usize),
    /// Storages created now live in CUDA unified memory (`cudaMallocManaged`: bitsandbytes'
    /// paged optimizer state), outside PyTorch's caching allocator.
    unified: bool,
    /// Unified memory held by such storages: (now, peak).
    unified_mem: (usize, usize),
    /// The current CUDA stream (`torch.cuda.current_stream()`): new storages are allocated
    /// on it.
    stream: StreamId,
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime {
            grad_enabled: true,
            scopes: Vec::new(),
            root: Rc::from(""),
            py: None,
            phase: Phase::Setup,
            categories: Vec::new(),
            next_storage_id: 0,
            next_seq: 0,
            log: MemoryLog::default(),
            compute: None,
            autocast: Default::default(),
            deferring: false,
            on_host: false,
            cuda_kernels: CudaKernels::default(),
            host: (0, 0),
            unified: false,
            unified_mem: (0, 0),
            stream: StreamId::DEFAULT,
        }
    }
}

thread_local! {
    static RT: RefCell<Runtime> = RefCell::new(Runtime::default());
}

/// Run `f` with the runtime borrowed. `f` must not create or drop tensors.
pub fn with<T>(f: impl FnOnce(&mut Runtime) -> T) -> T {
    RT.with(|rt| f(&mut rt.borrow_mut()))
}

/// Start from a clean context (tests and each CLI run). Live tensors from before must be gone.
pub fn reset() {
    // Anything the old context still holds is dropped unrecorded (inside the borrow).
    with(|rt| *rt = Runtime::default());
}

impl Runtime {
    pub fn scope(&self) -> &Rc<str> {
        self.scopes.last().unwrap_or(&self.root)
    }
    fn category(&self) -> Category {
        self.categories.last().copied().unwrap_or(Category::Temporary)
    }
}

/// The payload of the panic an out-of-memory allocation raises (as PyTorch raises
/// `torch.OutOfMemoryError`); runners catch it with `catch_unwind`.
#[derive(Debug, Clone)]
pub struct OomPanic(pub crate::record::allocator::OutOfMemory);

/// The payload of the panic a run unwinds with when its caller asked it to stop (Ctrl-C in
/// Python, see [`set_interrupt_check`]).
#[derive(Debug, Clone, Copy)]
pub struct Interrupted;

thread_local! {
    static INTERRUPT: std::cell::Cell<(Option<fn() -> bool>, u32)> = const { std::cell::Cell::new((None, 0)) };
}

/// Have allocations on this thread ask `check` every 256 allocations whether to stop (None:
/// never); a true answer unwinds the run with [`Interrupted`]. The Python package checks for
/// Ctrl-C this way: the GIL is held for the whole run, so only the run can look.
pub fn set_interrupt_check(check: Option<fn() -> bool>) {
    INTERRUPT.with(|c| c.set((check, 0)));
}

fn poll_interrupt() {
    let stop = INTERRUPT.with(|c| {
        let (check, n) = c.get();
        let Some(check) = check else { return false };
        c.set((Some(check), n.wrapping_add(1)));
        n % 256 == 0 && check()
    });
    if stop {
        std::panic::panic_any(Interrupted);
    }
}

#[track_caller]
pub(crate) fn alloc_storage(bytes: usize, op: &'static str) -> u64 {
    let id = new_storage_id();
    realloc_storage(id, bytes, op);
    id
}

/// A storage id for a storage that allocates nothing yet.
pub(crate) fn new_storage_id() -> u64 {
    with(|rt| {
        rt.next_storage_id += 1;
        rt.next_storage_id - 1
    })
}

/// Allocate `bytes` for storage `id` on the current stream (a new storage, or one given
/// back by `resize_(0)`). An OOM panics with [`OomPanic`], outside the runtime borrow so
/// unwinding can free storages.
#[track_caller]
pub(crate) fn realloc_storage(id: u64, bytes: usize, op: &'static str) {
    poll_interrupt();
    let loc = std::panic::Location::caller();
    let r = with(|rt| {
        let (scope, phase, cat) = (rt.scope().clone(), rt.phase, rt.category());
        let r = rt.log.on_alloc_on(rt.stream, id, bytes, &scope, op, phase, cat, loc, rt.py.clone());
        if let (Ok(_), Some(c)) = (&r, rt.compute.as_mut()) {
            if let Some((addr, block)) = rt.log.block_of(id) {
                c.memory_point(addr, block as i64, rt.log.allocated_now(), rt.log.reserved_now());
            }
        }
        r
    });
    if let Err(e) = r {
        std::panic::panic_any(OomPanic(e));
    }
}

/// Memory outside the caching allocator that storages can live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outside {
    /// Host memory (CPU offload).
    Host,
    /// CUDA unified memory (bitsandbytes' paged optimizer state).
    Unified,
}

/// Where storages created now live when not on the device (unified memory inside host).
pub(crate) fn allocating_outside() -> Option<Outside> {
    with(|rt| if rt.unified { Some(Outside::Unified) } else { rt.on_host.then_some(Outside::Host) })
}

fn account(rt: &mut Runtime, kind: Outside) -> &mut (usize, usize) {
    match kind {
        Outside::Host => &mut rt.host,
        Outside::Unified => &mut rt.unified_mem,
    }
}

pub(crate) fn outside_alloc(kind: Outside, bytes: usize) {
    with(|rt| {
        let a = account(rt, kind);
        a.0 += bytes;
        a.1 = a.1.max(a.0);
    });
}

pub(crate) fn outside_free(kind: Outside, bytes: usize) {
    let _ = RT.try_with(|rt| {
        if let Ok(mut rt) = rt.try_borrow_mut() {
            let a = account(&mut rt, kind);
            a.0 = a.0.saturating_sub(bytes);
        }
    });
}

/// Storages created inside live in host memory (CPU offload): not on the device, counted by
/// [`host_memory`].
pub fn on_host() -> Guard {
    let prev = with(|rt| std::mem::replace(&mut rt.on_host, true));
    Guard::new(move || with(|rt| rt.on_host = prev))
}

/// Which of CUDA's kernels the ops created now follow ([`cuda_kernels`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaKernels {
    /// CUDA's kernels where those allocate what the CPU's do not (the softmax backward's
    /// `grad * output` temporary).
    pub on: bool,
    /// The SM count of an sm90 GPU, where a bf16 `_grouped_mm` runs CUTLASS's grouped GEMM
    /// (`bf16bf16_grouped_mm`) with its argument buffer and workspace; None elsewhere.
    pub cutlass_sms: Option<u32>,
}

/// Ops created inside run CUDA's kernels as `k` says: set around the hf flavour's forwards
/// unless the run is a CPU grid's (`HfConfig::cpu_run`). An op reads it when it is created,
/// so its backward follows the forward's device.
pub fn cuda_kernels(k: CudaKernels) -> Guard {
    let prev = with(|rt| std::mem::replace(&mut rt.cuda_kernels, k));
    Guard::new(move || with(|rt| rt.cuda_kernels = prev))
}

/// Whether [`cuda_kernels`] is in force.
pub fn on_cuda_kernels() -> bool {
    with(|rt| rt.cuda_kernels.on)
}

/// The [`cuda_kernels`] state now (a checkpoint's recomputation runs under its forward's).
pub fn cuda_kernels_now() -> CudaKernels {
    with(|rt| rt.cuda_kernels)
}

/// Storages created inside live in CUDA unified memory (paged optimizer state): resident on
/// the GPU while used, counted by [`unified_memory`], not by the caching allocator.
pub fn in_unified_memory() -> Guard {
    let prev = with(|rt| std::mem::replace(&mut rt.unified, true));
    Guard::new(move || with(|rt| rt.unified = prev))
}

/// Unified memory held by paged storages: (bytes now, peak bytes).
pub fn unified_memory() -> (usize, usize) {
    with(|rt| rt.unified_mem)
}

/// Host memory held by offloaded storages: (bytes now, peak bytes).
pub fn host_memory() -> (usize, usize) {
    with(|rt| rt.host)
}

pub(crate) fn deferring_allocation() -> bool {
    with(|rt| rt.deferring)
}

/// Storages created inside hold no bytes until resized (`with torch.device("meta")`, then
/// `fully_shard` and `to_empty`): only the shards are ever allocated.
pub fn defer_allocation() -> Guard {
    let prev = with(|rt| std::mem::replace(&mut rt.deferring, true));
    Guard::new(move || with(|rt| rt.deferring = prev))
}

/// Storages created inside hold their bytes even under [`defer_allocation`]: tensors the
/// model keeps that are no parameters (bitsandbytes' quant_state), which `fully_shard` does not
/// manage and every rank holds whole.
pub fn allocate_now() -> Guard {
    let prev = with(|rt| std::mem::replace(&mut rt.deferring, false));
    Guard::new(move || with(|rt| rt.deferring = prev))
}

pub(crate) fn free_storage(id: u64) {
    // A storage dropped during thread teardown has nobody to report to.
    let _ = RT.try_with(|rt| {
        if let Ok(mut guard) = rt.try_borrow_mut() {
            let rt = &mut *guard;
            let (scope, phase) = (rt.scope().clone(), rt.phase);
            let block = rt.log.block_of(id);
            rt.log.on_free(id, &scope, "free", phase, rt.py.clone());
            if let (Some((addr, block)), Some(c)) = (block, rt.compute.as_mut()) {
                c.memory_point(addr, -(block as i64), rt.log.allocated_now(), rt.log.reserved_now());
            }
        }
    });
}

pub(crate) fn next_seq() -> u64 {
    with(|rt| {
        rt.next_seq += 1;
        rt.next_seq
    })
}

pub fn set_category(storage_id: u64, cat: Category) {
    with(|rt| rt.log.set_category(storage_id, cat));
}

/// Upgrade a temporary to `cat`; parameters, inputs and other declared roles are kept.
pub fn promote_category(storage_id: u64, cat: Category) {
    with(|rt| {
        if rt.log.category(storage_id) == Some(Category::Temporary) {
            rt.log.set_category(storage_id, cat);
        }
    });
}

pub fn is_grad_enabled() -> bool {
    with(|rt| rt.grad_enabled)
}

/// Allocated bytes now and at the peak: the caching-allocator model's `allocated_bytes`
/// (rounded blocks, as `torch.cuda.memory_allocated()`) when the run models a GPU,
/// otherwise the exact bytes of live storages.
pub fn stats() -> MemoryStats {
    with(|rt| {
        let mut s = rt.log.stats;
        s.phase_peak = s.phase_peak.max(rt.log.allocated_now());
        if let Some(a) = &rt.log.allocator {
            s.allocated = a.stats.allocated_bytes.current;
            s.peak_allocated = a.stats.allocated_bytes.peak;
        }
        s
    })
}

pub fn set_phase(p: Phase) {
    with(|rt| rt.phase = p);
}

pub fn phase() -> Phase {
    with(|rt| rt.phase)
}

/// Restores the previous state when dropped.
pub struct Guard(Option<Box<dyn FnOnce()>>);
impl Guard {
    /// A guard that runs `f` when dropped.
    pub fn new(f: impl FnOnce() + 'static) -> Guard {
        Guard(Some(Box::new(f)))
    }
}
impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f()
        }
    }
}

/// Make `stream` the current stream until the guard drops (`with torch.cuda.stream(s):`):
/// storages allocated meanwhile are allocated on it, and their blocks are cached for it.
pub fn on_stream(stream: StreamId) -> Guard {
    let prev = with(|rt| std::mem::replace(&mut rt.stream, stream));
    Guard(Some(Box::new(move || with(|rt| rt.stream = prev))))
}

/// The current stream (`torch.cuda.current_stream()`).
pub fn current_stream() -> StreamId {
    with(|rt| rt.stream)
}

/// `tensor.record_stream(stream)` for the live storage `storage_id`: when freed, its block
/// waits (pending free) until `stream` is synchronised.
pub fn record_stream(storage_id: u64, stream: StreamId) {
    with(|rt| rt.log.record_stream(storage_id, stream));
}

/// `stream` has caught up with the host (`stream.synchronize()`, or the program's
/// `wait_stream` on it): pending frees waiting for it complete at the next allocation.
pub fn synchronize_stream(stream: StreamId) {
    with(|rt| rt.log.synchronize_stream(stream));
}

/// `torch.cuda.synchronize()`: every stream has caught up.
pub fn synchronize() {
    with(|rt| rt.log.synchronize());
}

/// Disable autograd recording until the guard drops (`torch.no_grad()`).
pub fn no_grad() -> Guard {
    set_grad_enabled(false)
}

pub fn set_grad_enabled(on: bool) -> Guard {
    let prev = with(|rt| std::mem::replace(&mut rt.grad_enabled, on));
    Guard(Some(Box::new(move || with(|rt| rt.grad_enabled = prev))))
}

/// Push a module name onto the scope stack: `layers` then `3` then `attn` gives `layers.3.attn`.
pub fn scope(name: &str) -> Guard {
    with(|rt| {
        let parent = rt.scope();
        let path: Rc<str> = if parent.is_empty() { Rc::from(name) } else { Rc::from(format!("{parent}.{name}")) };
        if let Some(c) = rt.compute.as_mut() {
            c.enter_module(path.clone(), rt.phase);
        }
        rt.scopes.push(path);
    });
    Guard(Some(Box::new(|| with(|rt| {
        rt.scopes.pop();
        if let Some(c) = rt.compute.as_mut() {
            c.exit_module();
        }
    }))))
}

/// Start recording kernels and module spans (FLOPs, bytes, times) from now on, and with
/// `memory` every allocation and free with the totals after it.
pub fn start_compute_log(memory: bool) {
    with(|rt| {
        let mut c = ComputeLog::default();
        if memory {
            c.memory = Some(Vec::new());
        }
        rt.compute = Some(c)
    });
}

/// Stop recording kernels and hand over what was recorded.
pub fn take_compute_log() -> Option<ComputeLog> {
    with(|rt| rt.compute.take())
}

/// Replace the whole scope path (backward runs in the scope of the forward op).
pub fn enter_scope_path(path: Rc<str>) -> Guard {
    with(|rt| rt.scopes.push(path));
    Guard(Some(Box::new(|| with(|rt| {
        rt.scopes.pop();
    }))))
}

pub fn current_scope() -> Rc<str> {
    with(|rt| rt.scope().clone())
}

/// Run inside Python function `f` of the reference implementation until the guard drops.
pub fn py_frame(f: &'static PyFn) -> Guard {
    let prev = with(|rt| {
        let prev = rt.py.clone();
        rt.py = Some(Rc::new(PyNode { f, parent: prev.clone() }));
        prev
    });
    Guard::new(move || with(|rt| rt.py = prev))
}

/// The Python stack now (an autograd node keeps its forward op's).
pub fn current_py() -> PyStack {
    with(|rt| rt.py.clone())
}

/// Replace the Python stack until the guard drops (backward and recomputation run with the
/// forward op's).
pub fn enter_py(py: PyStack) -> Guard {
    let prev = with(|rt| std::mem::replace(&mut rt.py, py));
    Guard::new(move || with(|rt| rt.py = prev))
}

/// Allocations made until the guard drops get category `cat`.
pub fn category(cat: Category) -> Guard {
    with(|rt| rt.categories.push(cat));
    Guard(Some(Box::new(|| with(|rt| {
        rt.categories.pop();
    }))))
}

thread_local! {
    static OP_TIMES: RefCell<Option<std::collections::HashMap<&'static str, (u64, f64)>>> = const { RefCell::new(None) };
}

/// Start accumulating per-op kernel time (cpu), keyed by op name.
pub fn enable_op_timing() {
    OP_TIMES.with(|t| *t.borrow_mut() = Some(Default::default()));
}
pub fn op_timing_enabled() -> bool {
    OP_TIMES.with(|t| t.borrow().is_some())
}
pub(crate) fn record_op_time(op: &'static str, secs: f64) {
    OP_TIMES.with(|t| {
        if let Some(m) = t.borrow_mut().as_mut() {
            let e = m.entry(op).or_default();
            e.0 += 1;
            e.1 += secs;
        }
    });
}
/// (op, calls, seconds), slowest first.
pub fn take_op_times() -> Vec<(&'static str, u64, f64)> {
    let m = OP_TIMES.with(|t| t.borrow_mut().take()).unwrap_or_default();
    let mut v: Vec<_> = m.into_iter().map(|(k, (n, s))| (k, n, s)).collect();
    v.sort_by(|a, b| b.2.total_cmp(&a.2));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{DType, Device, Tensor};
    use crate::record::allocator::{AllocatorConfig, CachingAllocator};

    /// Storages allocated inside `on_stream` are allocated on that stream (`torch.cuda.stream`
    /// context); the previous stream is current again when the guard drops.
    #[test]
    fn on_stream_sets_the_stream_of_new_storages_until_the_guard_drops() {
        reset();
        with(|rt| rt.log.allocator = Some(CachingAllocator::new(AllocatorConfig::default(), 1 << 30)));
        let side = StreamId(3);
        let a = Tensor::zeros(&[1 << 18], DType::F32, Device::Meta);
        let b = {
            let _g = on_stream(side);
            assert_eq!(current_stream(), side);
            Tensor::zeros(&[1 << 18], DType::F32, Device::Meta)
        };
        assert_eq!(current_stream(), StreamId::DEFAULT);
        let c = Tensor::zeros(&[1 << 18], DType::F32, Device::Meta);
        let of = |t: &Tensor| with(|rt| rt.log.stream_of(t.storage().id));
        assert_eq!((of(&a), of(&b), of(&c)), (Some(StreamId::DEFAULT), Some(side), Some(StreamId::DEFAULT)));
        // One segment per stream: stream 0's 1 MiB blocks share a segment, stream 3's has its own.
        let streams: Vec<StreamId> = with(|rt| rt.log.allocator.as_ref().unwrap().segments().map(|s| s.stream).collect());
        assert_eq!(streams, vec![StreamId::DEFAULT, side]);
        drop((a, b, c));
        reset();
    }
}
