//! Activation checkpointing as `torch.utils.checkpoint(fn, x, use_reentrant=False)` runs it.
//!
//! While the checkpointed function runs forward, every tensor an op would save for backward
//! is replaced by a handle into a [`Frame`] (PyTorch's saved-tensor pack hook), so the
//! region keeps nothing but its input (held by the recompute closure) and the parameters.
//! The graph of that forward stays in place. At backward, the first unpack of any handle
//! re-runs the function with grad enabled under the region's module path; each tensor the
//! recomputation saves is stored (detached) under its index, and recomputation stops as
//! soon as the last one exists (PyTorch raises `_StopRecomputationError` from the hook; we
//! unwind with a private payload). Each unpack takes its tensor out of the frame, so it dies
//! with the node that used it.
use super::runtime;
use super::tensor::Tensor;
use crate::record::Category;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// What a backward closure keeps: the tensor itself, or a handle into a checkpoint frame.
pub enum Saved {
    Tensor(Tensor),
    Packed(Packed),
}

impl Saved {
    /// The saved tensor (`SavedVariable::unpack`); recomputes the region on a handle's
    /// first unpack.
    pub fn unpack(&self) -> Tensor {
        match self {
            Saved::Tensor(t) => t.clone(),
            Saved::Packed(p) => p.frame.take(p.idx),
        }
    }

    /// Unpack, giving up the saved reference (so the caller may drop the tensor early).
    pub fn into_tensor(self) -> Tensor {
        match self {
            Saved::Tensor(t) => t,
            Saved::Packed(p) => p.frame.take(p.idx),
        }
    }
}

/// A pack-hook handle. Dropping it (the node ran or was freed) frees whatever the frame
/// still holds for it, like the holder of PyTorch's weak-keyed `recomputed` dictionary.
pub struct Packed {
    frame: Rc<Frame>,
    idx: usize,
}

impl Drop for Packed {
    fn drop(&mut self) {
        let t = {
            let mut slots = self.frame.slots.borrow_mut();
            slots[self.idx].alive = false;
            slots[self.idx].tensor.take()
        };
        drop(t);
    }
}

#[derive(Default)]
struct Slot {
    alive: bool,
    tensor: Option<Tensor>,
}

/// One checkpointed call: how to recompute it and what the recomputation produced.
pub struct Frame {
    recompute: Box<dyn Fn()>,
    /// Module path the region ran under; recomputation allocates under it.
    scope: Rc<str>,
    /// The Python stack it ran under, for the recomputation's allocations.
    py: crate::record::PyStack,
    /// The autocast type of the forward: PyTorch recomputes under the same autocast
    /// state (a fresh region, so the weights are cast again).
    autocast: Option<crate::engine::DType>,
    /// The forward's [`runtime::cuda_kernels`] state, which the recomputation runs under too.
    cuda_kernels: runtime::CudaKernels,
    slots: RefCell<Vec<Slot>>,
    recomputed: Cell<bool>,
    counter: Cell<usize>,
}

impl Frame {
    fn take(self: &Rc<Self>, idx: usize) -> Tensor {
        if !self.recomputed.get() {
            self.recomputed.set(true);
            self.run_recompute();
        }
        let t = self.slots.borrow_mut()[idx].tensor.take();
        t.expect("checkpoint: a saved tensor was unpacked twice or not recomputed")
    }

    fn run_recompute(self: &Rc<Self>) {
        quiet_stop_panics();
        let _s = runtime::enter_scope_path(self.scope.clone());
        let _py = runtime::enter_py(self.py.clone());
        let _g = runtime::set_grad_enabled(true);
        let _ac = self.autocast.map(crate::engine::autocast::enable);
        let _k = runtime::cuda_kernels(self.cuda_kernels);
        let _h = push(Hook::Recompute(self.clone()));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.recompute)()));
        if let Err(payload) = r {
            if !payload.is::<StopRecomputation>() {
                std::panic::resume_unwind(payload);
            }
        }
        assert_eq!(
            self.counter.get(),
            self.slots.borrow().len(),
            "checkpoint: recomputation saved a different number of tensors than the forward"
        );
    }

    /// Store a recomputed saved tensor; true when it was the last one.
    fn store(&self, t: Tensor) -> bool {
        let i = self.counter.get();
        self.counter.set(i + 1);
        let mut slots = self.slots.borrow_mut();
        assert!(i < slots.len(), "checkpoint: recomputation saved more tensors than the forward");
        // A holder that died (its node was freed unused) gets nothing, as in PyTorch.
        let dead = if slots[i].alive { slots[i].tensor.replace(t) } else { Some(t) };
        let last = i + 1 == slots.len();
        drop(slots);
        drop(dead);
        last
    }
}

enum Hook {
    Pack(Rc<Frame>),
    Recompute(Rc<Frame>),
}

thread_local! {
    static HOOKS: RefCell<Vec<Hook>> = const { RefCell::new(Vec::new()) };
}

fn push(h: Hook) -> runtime::Guard {
    HOOKS.with(|s| s.borrow_mut().push(h));
    runtime::Guard::new(|| {
        let h = HOOKS.with(|s| s.borrow_mut().pop());
        drop(h);
    })
}

/// The panic payload that ends a recomputation early (never escapes [`Frame::take`]).
struct StopRecomputation;

/// Keep the early stop silent: the default panic hook would print it although it is caught.
fn quiet_stop_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<StopRecomputation>() {
                prev(info)
            }
        }));
    });
}

/// What a node keeps for backward (PyTorch's SavedVariable): an alias of the same storage
/// without the graph link, whose storage becomes an activation if it was a temporary —
/// or, inside a checkpointed region, a handle.
pub fn save(t: &Tensor) -> Saved {
    let frame = HOOKS.with(|s| match s.borrow().last() {
        None => None,
        Some(Hook::Pack(f)) => Some((f.clone(), true)),
        Some(Hook::Recompute(f)) => Some((f.clone(), false)),
    });
    match frame {
        None => {
            runtime::promote_category(t.storage().id, Category::Activation);
            Saved::Tensor(t.detach())
        }
        Some((frame, true)) => {
            let idx = {
                let mut slots = frame.slots.borrow_mut();
                slots.push(Slot { alive: true, tensor: None });
                slots.len() - 1
            };
            Saved::Packed(Packed { frame, idx })
        }
        Some((frame, false)) => {
            runtime::promote_category(t.storage().id, Category::Activation);
            let d = t.detach();
            if frame.store(d.clone()) {
                drop((d, frame));
                std::panic::panic_any(StopRecomputation);
            }
            Saved::Tensor(d)
        }
    }
}

/// `torch.utils.checkpoint(f, x, use_reentrant=False)`: runs `f(x)` keeping only `x` (and
/// whatever `f` captured) for backward. Under no_grad it simply runs `f`.
pub fn checkpoint(x: Tensor, f: impl Fn(Tensor) -> Tensor + 'static) -> Tensor {
    if !runtime::is_grad_enabled() {
        return f(x);
    }
    // PyTorch saves the inputs for the recomputation (`_NoopSaveInputs`): an activation.
    runtime::promote_category(x.storage().id, Category::Activation);
    let f = Rc::new(f);
    let recompute: Box<dyn Fn()> = {
        let (f, x) = (f.clone(), x.clone());
        Box::new(move || drop(f(x.clone())))
    };
    let frame = Rc::new(Frame {
        recompute,
        scope: runtime::current_scope(),
        py: runtime::current_py(),
        autocast: crate::engine::autocast::active(),
        cuda_kernels: runtime::cuda_kernels_now(),
        slots: RefCell::new(Vec::new()),
        recomputed: Cell::new(false),
        counter: Cell::new(0),
    });
    let _h = push(Hook::Pack(frame));
    f(x)
}

/// `torch.utils.checkpoint(f, x, use_reentrant=True)` (`CheckpointFunction`): `f(x)` runs
/// under no_grad, so the region keeps only `x` (`ctx.save_for_backward`) and what `f`
/// captured, and its output becomes the output of one new node. At backward the input is
/// detached into a leaf that requires grad, `f` runs again with grad enabled, and
/// `torch.autograd.backward(outputs, grads)` runs on that graph alone: the parameters'
/// gradients accumulate there, the recomputed activations die as it proceeds, and the
/// leaf's `.grad` is the node's input gradient. The incoming gradient stays held (by
/// `args`) throughout, so nothing accumulates into it in place. The function (with what it captured) stays
/// on the node until the graph is freed.
pub fn checkpoint_reentrant(x: Tensor, f: impl Fn(Tensor) -> Tensor + 'static) -> Tensor {
    if !runtime::is_grad_enabled() {
        return f(x);
    }
    runtime::promote_category(x.storage().id, Category::Activation);
    let out = {
        let _g = runtime::no_grad();
        f(x.clone())
    };
    let scope = runtime::current_scope();
    let py = runtime::current_py();
    let autocast = crate::engine::autocast::active();
    let cuda_kernels = runtime::cuda_kernels_now();
    let saved = x.detach();
    // `ctx.run_function` (and the tensors it captured) lives as long as the graph does.
    let f = Rc::new(f);
    let ctx: Box<dyn std::any::Any> = Box::new(f.clone());
    crate::engine::autograd::attach_with_ctx(out, "CheckpointFunctionBackward", &[&x], Box::new(move |g| {
        let _s = runtime::enter_scope_path(scope.clone());
        let _py = runtime::enter_py(py.clone());
        let leaf = saved.detach().requires_grad_(true);
        let y = {
            let _g = runtime::set_grad_enabled(true);
            let _ac = autocast.map(crate::engine::autocast::enable);
            let _k = runtime::cuda_kernels(cuda_kernels);
            f(leaf.clone())
        };
        // `torch.autograd.backward(outputs, args)`: the incoming gradient stays referenced by
        // `args` until CheckpointFunction.backward returns, so the inner InputBuffer never
        // accumulates into it in place (it is not the last reference: an out-of-place add).
        y.backward_with(g.clone());
        drop(y);
        let grad = leaf.grad();
        drop(g);
        vec![grad]
    }), Some(ctx))
}
