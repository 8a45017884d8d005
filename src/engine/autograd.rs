//! Reverse-mode autograd with PyTorch's lifetime rules.
//!
//! A node owns exactly what its derivative formula needs (the op decides what to save) and
//! drops it the moment its backward has run. The engine runs ready nodes highest sequence
//! number first (PyTorch's ready-queue order on one device), accumulates a node's incoming
//! gradients in place when it holds the only reference (InputBuffer), and leaf gradients are
//! moved into `.grad` the first time and added in place afterwards (AccumulateGrad).
use super::runtime::{self, no_grad};
use super::tensor::Tensor;
use crate::record::Category;
use std::cell::RefCell;
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;

pub type BackwardFn = Box<dyn FnOnce(Tensor) -> Vec<Option<Tensor>>>;

pub enum Edge {
    Node(Rc<Node>),
    /// A leaf that requires grad: its gradient goes into `.grad`.
    Leaf(Tensor),
}

pub struct Node {
    pub name: &'static str,
    pub seq: u64,
    /// Module path of the forward op; backward allocations are attributed to it.
    pub scope: Rc<str>,
    /// The forward op's Python stack; backward allocations carry it.
    pub py: crate::record::PyStack,
    pub edges: Vec<Option<Edge>>,
    backward: RefCell<Option<BackwardFn>>,
    /// What a custom autograd Function keeps on its `ctx` besides saved tensors (reentrant
    /// checkpointing's `ctx.run_function` and the kwargs it captured): alive as long as the
    /// node, i.e. until the graph is freed, after backward too.
    _ctx: Option<Box<dyn std::any::Any>>,
}

/// Does an op on these inputs need a graph node?
pub fn needs_grad(inputs: &[&Tensor]) -> bool {
    inputs.iter().any(|t| t.requires_grad()) && runtime::is_grad_enabled()
}

pub use super::checkpoint::{save, Saved};

/// Attach a backward node to a freshly computed output.
pub fn attach(out: Tensor, name: &'static str, inputs: &[&Tensor], f: BackwardFn) -> Tensor {
    attach_with_ctx(out, name, inputs, f, None)
}

/// [`attach`] for a custom Function whose node also keeps `ctx` until the graph dies.
pub fn attach_with_ctx(out: Tensor, name: &'static str, inputs: &[&Tensor], f: BackwardFn, ctx: Option<Box<dyn std::any::Any>>) -> Tensor {
    let edges = inputs
        .iter()
        .map(|t| {
            if !t.requires_grad() {
                None
            } else if let Some(n) = t.grad_fn() {
                Some(Edge::Node(n.clone()))
            } else {
                Some(Edge::Leaf((*t).clone()))
            }
        })
        .collect();
    let node = Rc::new(Node {
        name,
        seq: runtime::next_seq(),
        scope: runtime::current_scope(),
        py: runtime::current_py(),
        edges,
        backward: RefCell::new(Some(f)),
        _ctx: ctx,
    });
    out.with_grad_fn(node)
}

/// A unit of backward work: a node, or AccumulateGrad for a leaf (which runs first
/// whenever it is ready, as its sequence number is the maximum).
enum Task {
    Node(Rc<Node>),
    Leaf(Tensor),
}

impl Task {
    fn priority(&self) -> u64 {
        match self {
            Task::Node(n) => n.seq,
            Task::Leaf(_) => u64::MAX,
        }
    }
    fn key(&self) -> Key {
        match self {
            Task::Node(n) => Key::Node(Rc::as_ptr(n)),
            Task::Leaf(t) => Key::Leaf(Rc::as_ptr(&t.0)),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Node(*const Node),
    Leaf(*const super::tensor::TensorImpl),
}

struct Ready(Task, u64);
impl PartialEq for Ready {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for Ready {}
impl PartialOrd for Ready {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ready {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Highest priority first; among AccumulateGrads, first ready first.
        self.0.priority().cmp(&o.0.priority()).then(o.1.cmp(&self.1))
    }
}

fn edge_task(e: &Edge) -> Task {
    match e {
        Edge::Node(n) => Task::Node(n.clone()),
        Edge::Leaf(t) => Task::Leaf(t.clone()),
    }
}

/// `InputBuffer::accumulate` (torch/csrc/autograd/input_buffer.cpp): with grad mode off (the
/// engine runs without create_graph), `old.add_(g)` when `can_accumulate_inplace(old)`: a
/// plain tensor, non-overlapping and dense (any dim order or offset), and the last reference
/// to both it and its storage (another holder, a view's base, or the caller of
/// `torch.autograd.backward` holding a root gradient, forces the copy); otherwise `old + g`.
/// The engine has already cast and shaped `g` to the input's metadata.
fn accumulate_into(slot: &mut Option<Tensor>, g: Tensor) {
    match slot.take() {
        None => *slot = Some(g),
        Some(old) => {
            if old.is_unique() && old.is_non_overlapping_and_dense() && old.dtype() == g.dtype() && old.shape() == g.shape() {
                old.add_(&g);
                drop(g);
                *slot = Some(old);
            } else {
                let sum = old.add(&g);
                drop((old, g));
                *slot = Some(sum);
            }
        }
    }
}

/// The rows `(first, rows)` of a row-sharded parameter (a Shard(0) DTensor whose gradients
/// may arrive whole: [`GradRedistribute::Rows`](super::storage::GradRedistribute)).
fn row_shard(leaf: &Tensor) -> Option<(usize, usize)> {
    match leaf.storage().grad_redistribute() {
        Some(super::storage::GradRedistribute::Rows { first, rows }) => Some((first, rows)),
        _ => None,
    }
}

/// Two gradients of one row-sharded DTensor parameter used twice (transformers' tied head and
/// embedding under its tp plan): DTensor's add, never in place on a tensor subclass
/// (`can_accumulate_inplace`), takes this rank's rows of a whole (Replicate) gradient (a
/// copy, `Shard._replicate_to_shard`) and adds them into a new Shard(0) tensor.
fn accumulate_rows(slot: &mut Option<Tensor>, g: Tensor, (first, rows): (usize, usize)) {
    let old = slot.take().expect("a gradient to add to");
    let local = |t: Tensor| if t.dim(0) == rows { t } else { t.narrow(0, first, rows).clone_contiguous() };
    let (old, g) = (local(old), local(g));
    let sum = old.add(&g);
    drop((old, g));
    *slot = Some(sum);
}

thread_local! {
    /// Called after each leaf's gradient is accumulated (DDP's Reducer autograd hook).
    static GRAD_READY: std::cell::RefCell<Option<Rc<dyn Fn(&Tensor)>>> = const { std::cell::RefCell::new(None) };
}

/// Install (or with None remove) the callback run after every AccumulateGrad, with the leaf.
pub fn set_grad_ready_hook(hook: Option<Rc<dyn Fn(&Tensor)>>) {
    GRAD_READY.with(|h| *h.borrow_mut() = hook);
}

/// AccumulateGrad: the first gradient is stolen into `.grad` when nobody else holds it and
/// it has the parameter's (contiguous) layout, else copied; later ones are added in place.
pub fn accumulate_grad(leaf: &Tensor, g: Tensor) {
    let g = if g.dtype() != leaf.dtype() { g.to_dtype(leaf.dtype()) } else { g };
    let mut slot = leaf.grad_slot().borrow_mut();
    match slot.as_ref() {
        None => {
            // A whole-tensor gradient of a row shard is kept as it arrives.
            let whole = matches!(leaf.storage().grad_redistribute(), Some(super::storage::GradRedistribute::Rows { .. }));
            let fits = g.shape() == leaf.shape() || whole;
            let g = if g.is_sole_handle() && g.is_contiguous() && fits {
                g
            } else {
                let _c = runtime::category(Category::Gradient);
                g.clone_contiguous()
            };
            runtime::set_category(g.storage().id, Category::Gradient);
            *slot = Some(g);
        }
        Some(existing) => existing.add_(&g),
    }
    drop(slot);
    let hook = GRAD_READY.with(|h| h.borrow().clone());
    if let Some(h) = hook {
        h(leaf);
    }
}

/// The gradient as the optimizer's op sees it, for a parameter marked with
/// [`Storage::set_grad_redistribute`](super::storage::Storage::set_grad_redistribute): DTensor
/// redistributes it to the parameter's placement on every use, a new tensor each time (a
/// Replicate gradient of a Shard(0) parameter: a copy of this rank's rows,
/// `Shard._replicate_to_shard`; a Partial one: its all-reduce); otherwise the gradient itself.
pub fn grad_as_placed(param: &Tensor, grad: &Tensor) -> Tensor {
    use super::storage::GradRedistribute;
    match param.storage().grad_redistribute() {
        Some(GradRedistribute::Rows { first, rows }) if grad.dim(0) != rows => {
            let _c = runtime::category(Category::Gradient);
            grad.narrow(0, first, rows).clone_contiguous()
        }
        Some(GradRedistribute::Partial) => {
            let _c = runtime::category(Category::Gradient);
            let _s = runtime::scope("all_reduce");
            grad.clone_contiguous()
        }
        _ => grad.clone(),
    }
}

/// Backpropagate from `root` (with `grad`, or ones for a scalar).
pub fn backward(root: &Tensor, grad: Option<Tensor>) {
    assert!(root.requires_grad(), "backward on a tensor that does not require grad");
    let _ng = no_grad();
    let g = grad.unwrap_or_else(|| root.ones_like());
    // torch.autograd.backward holds its `grad_tensors_` (the seed `_make_grads` made, or the
    // caller's) until the engine returns: alive for the whole backward, a 512 B block on CUDA.
    let _seed = g.clone();
    let root_task = match root.grad_fn() {
        Some(n) => Task::Node(n.clone()),
        None => Task::Leaf(root.clone()),
    };
    // Dependency counts over everything reachable from the root.
    let mut deps: HashMap<Key, usize> = HashMap::new();
    let mut stack = vec![root_task.key()];
    let mut nodes: HashMap<Key, Rc<Node>> = HashMap::new();
    if let Task::Node(n) = &root_task {
        nodes.insert(root_task.key(), n.clone());
    }
    while let Some(k) = stack.pop() {
        let Some(n) = nodes.get(&k).cloned() else { continue };
        for e in n.edges.iter().flatten() {
            let t = edge_task(e);
            let ck = t.key();
            let first = !deps.contains_key(&ck);
            *deps.entry(ck).or_default() += 1;
            if first {
                if let Task::Node(c) = t {
                    nodes.insert(ck, c);
                    stack.push(ck);
                }
            }
        }
    }
    drop(nodes);
    let mut buffers: HashMap<Key, Option<Tensor>> = HashMap::new();
    buffers.insert(root_task.key(), Some(g));
    let mut order = 0u64;
    let mut ready = BinaryHeap::new();
    ready.push(Ready(root_task, order));
    while let Some(Ready(task, _)) = ready.pop() {
        let grad = buffers.remove(&task.key()).flatten();
        let node = match task {
            Task::Leaf(t) => {
                if let Some(g) = grad {
                    accumulate_grad(&t, g);
                }
                continue;
            }
            Task::Node(n) => n,
        };
        let f = node.backward.borrow_mut().take();
        let _s = runtime::enter_scope_path(node.scope.clone());
        let _py = runtime::enter_py(node.py.clone());
        let grads: Vec<Option<Tensor>> = match (f, grad) {
            (Some(f), Some(g)) => f(g),
            (None, Some(_)) => panic!(
                "trying to backward through the graph a second time (node {} already released its saved tensors)",
                node.name
            ),
            (_, None) => vec![None; node.edges.len()],
        };
        debug_assert_eq!(grads.len(), node.edges.len(), "{} returned the wrong number of gradients", node.name);
        for (edge, gi) in node.edges.iter().zip(grads) {
            let Some(edge) = edge else { continue };
            let t = edge_task(edge);
            let k = t.key();
            let slot = buffers.entry(k).or_insert(None);
            if let Some(gi) = gi {
                match (&t, slot.is_some()) {
                    (Task::Leaf(leaf), true) if let Some(rows) = row_shard(leaf) => accumulate_rows(slot, gi, rows),
                    _ => accumulate_into(slot, gi),
                }
            }
            let d = deps.get_mut(&k).expect("dependency counted");
            *d -= 1;
            if *d == 0 {
                order += 1;
                ready.push(Ready(t, order));
            }
        }
    }
}

/// PyTorch's `deleteNode`: a node releases its saved tensors first, then the graph below it
/// is freed from an explicit stack (last edge first) instead of by recursion, so dropping the
/// graph of a 100k-layer model uses no stack depth. Releasing saved tensors first also keeps
/// this non-recursive: a saved input's node is still held by the edge at that moment.
impl Drop for Node {
    fn drop(&mut self) {
        drop(self.backward.get_mut().take());
        let mut stack = Vec::new();
        gather(&mut self.edges, &mut stack);
        while let Some(n) = stack.pop() {
            if let Ok(mut n) = Rc::try_unwrap(n) {
                drop(n.backward.get_mut().take());
                gather(&mut n.edges, &mut stack);
                // `n` drops here with nothing left below it.
            }
        }
    }
}

/// Move the child nodes only `edges` still holds onto `stack`; let go of the rest.
fn gather(edges: &mut Vec<Option<Edge>>, stack: &mut Vec<Rc<Node>>) {
    for e in edges.drain(..) {
        if let Some(Edge::Node(n)) = e {
            if Rc::strong_count(&n) == 1 {
                stack.push(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::{DType, Device, Tensor};

    /// A chain far deeper than any recursion could free (each op adds one node).
    #[test]
    fn a_very_deep_graph_drops_without_recursion() {
        crate::engine::runtime::reset();
        let x = Tensor::ones(&[4], DType::F32, Device::Meta).requires_grad_(true);
        let mut y = x.mul(&x);
        for _ in 0..100_000 {
            y = y.mul(&x);
        }
        drop(y);
        assert!(x.grad().is_none());
    }
}
