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
    pub edges: Vec<Option<Edge>>,
    backward: RefCell<Option<BackwardFn>>,
}

impl Node {
    /// True once the backward ran and released what it saved.
    pub fn is_released(&self) -> bool {
        self.backward.borrow().is_none()
    }
    /// Drop saved tensors without running (e.g. a graph that will never be backpropagated).
    pub fn release(&self) {
        self.backward.borrow_mut().take();
    }
}

/// Does an op on these inputs need a graph node?
pub fn needs_grad(inputs: &[&Tensor]) -> bool {
    inputs.iter().any(|t| t.requires_grad()) && runtime::is_grad_enabled()
}

/// What a node keeps for backward: an alias of the same storage without the graph link
/// (PyTorch's SavedVariable). The storage becomes an activation if it was a temporary.
pub fn save(t: &Tensor) -> Tensor {
    runtime::promote_category(t.storage().id, Category::Activation);
    t.detach()
}

/// Attach a backward node to a freshly computed output.
pub fn attach(out: Tensor, name: &'static str, inputs: &[&Tensor], f: BackwardFn) -> Tensor {
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
        edges,
        backward: RefCell::new(Some(f)),
    });
    out.with_grad_fn(node)
}

struct Ready(Rc<Node>);
impl PartialEq for Ready {
    fn eq(&self, o: &Self) -> bool {
        self.0.seq == o.0.seq
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
        self.0.seq.cmp(&o.0.seq)
    }
}

fn key(n: &Rc<Node>) -> *const Node {
    Rc::as_ptr(n)
}

/// A gradient we may update in place: we hold the only handle to it and its storage, and it
/// is dense.
fn exclusively_owned(t: &Tensor) -> bool {
    t.is_unique() && t.is_dense()
}

/// InputBuffer::accumulate.
fn accumulate_into(slot: &mut Option<Tensor>, g: Tensor) {
    match slot.take() {
        None => *slot = Some(g),
        Some(old) => {
            if exclusively_owned(&old) && old.dtype() == g.dtype() {
                old.add_(&g);
                *slot = Some(old);
            } else if exclusively_owned(&g) && old.shape() == g.shape() && old.dtype() == g.dtype() {
                g.add_(&old);
                drop(old);
                *slot = Some(g);
            } else {
                *slot = Some(old.add(&g));
            }
        }
    }
}

/// AccumulateGrad: move the first gradient into `.grad`, add later ones in place.
pub fn accumulate_grad(leaf: &Tensor, g: Tensor) {
    let g = if g.dtype() != leaf.dtype() { g.to_dtype(leaf.dtype()) } else { g };
    let mut slot = leaf.grad_slot().borrow_mut();
    match slot.as_ref() {
        None => {
            let g = if exclusively_owned(&g) && g.shape() == leaf.shape() {
                g
            } else {
                let _c = runtime::category(Category::Gradient);
                g.expand(leaf.shape()).clone_contiguous()
            };
            runtime::set_category(g.storage().id, Category::Gradient);
            *slot = Some(g);
        }
        Some(existing) => existing.add_(&g),
    }
}

/// Backpropagate from `root` (with `grad`, or ones for a scalar).
pub fn backward(root: &Tensor, grad: Option<Tensor>) {
    assert!(root.requires_grad(), "backward on a tensor that does not require grad");
    let _ng = no_grad();
    let g = grad.unwrap_or_else(|| root.ones_like());
    let Some(root_node) = root.grad_fn().cloned() else {
        accumulate_grad(root, g);
        return;
    };
    // Dependency counts over the graph reachable from the root.
    let mut deps: HashMap<*const Node, usize> = HashMap::new();
    let mut stack = vec![root_node.clone()];
    let mut seen: HashMap<*const Node, ()> = HashMap::new();
    seen.insert(key(&root_node), ());
    while let Some(n) = stack.pop() {
        for e in n.edges.iter().flatten() {
            if let Edge::Node(c) = e {
                *deps.entry(key(c)).or_default() += 1;
                if seen.insert(key(c), ()).is_none() {
                    stack.push(c.clone());
                }
            }
        }
    }
    let mut buffers: HashMap<*const Node, Option<Tensor>> = HashMap::new();
    buffers.insert(key(&root_node), Some(g));
    let mut ready = BinaryHeap::new();
    ready.push(Ready(root_node));
    while let Some(Ready(node)) = ready.pop() {
        let grad = buffers.remove(&key(&node)).flatten();
        let f = node.backward.borrow_mut().take();
        let grads: Vec<Option<Tensor>> = match (f, grad) {
            (Some(f), Some(g)) => {
                let _s = runtime::enter_scope_path(node.scope.clone());
                f(g)
            }
            (None, Some(_)) => panic!(
                "trying to backward through the graph a second time (node {} already released its saved tensors)",
                node.name
            ),
            (_, None) => vec![None; node.edges.len()],
        };
        debug_assert_eq!(grads.len(), node.edges.len(), "{} returned the wrong number of gradients", node.name);
        for (edge, gi) in node.edges.iter().zip(grads) {
            match edge {
                None => {}
                Some(Edge::Leaf(t)) => {
                    if let Some(gi) = gi {
                        let _s = runtime::enter_scope_path(node.scope.clone());
                        accumulate_grad(t, gi);
                    }
                }
                Some(Edge::Node(c)) => {
                    let slot = buffers.entry(key(c)).or_insert(None);
                    if let Some(gi) = gi {
                        let _s = runtime::enter_scope_path(node.scope.clone());
                        accumulate_into(slot, gi);
                    }
                    let d = deps.get_mut(&key(c)).expect("dependency counted");
                    *d -= 1;
                    if *d == 0 {
                        ready.push(Ready(c.clone()));
                    }
                }
            }
        }
    }
}
