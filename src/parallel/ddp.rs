//! `DistributedDataParallel` (torch 2.15 defaults) on one rank, and ZeRO-1 as PyTorch runs it
//! (`ZeroRedundancyOptimizer` over DDP). What the rank holds beyond a single device:
//!
//! - the Reducer's flat gradient buckets (`bucket.gradients`, the parameters' dtype), for as
//!   long as the wrapper lives. With `find_unused_parameters=False` the first iteration uses
//!   one bucket of every parameter; the next forward rebuilds them in the order gradients
//!   became ready, 1 MiB for the first bucket and `bucket_cap_mb` (25 MiB) after
//!   (`_rebuild_buckets`, `compute_bucket_assignment_by_size`).
//! - Nothing else: with `gradient_as_bucket_view=False` each gradient is copied into its
//!   bucket view, the bucket is divided and all-reduced in place, and copied back.
//!
//! The Reducer knows only the parameters that require grad (`_build_params_for_reducer`), so
//! a LoRA or QLoRA model's buckets hold its adapters alone and its frozen (or 4-bit) weights
//! get no bucket space. The construction's `_sync_module_states` broadcast of every parameter
//! and buffer (flattened in 250 MiB buckets) is a setup transient, before the first step.
//!
//! ZeRO-1 keeps the same buckets and gradients; the optimizer steps only this rank's
//! partition (`_partition_parameters`: parameters by size, largest first, each to the rank
//! holding the fewest elements so far), then each parameter is broadcast in place.
use super::config::{Layout, ParallelConfig, FIRST_BUCKET_BYTES};
use super::RankLayout;
use crate::engine::autograd::set_grad_ready_hook;
use crate::engine::{runtime, DType, Tensor};
use crate::model::{Model, ModuleHooks, Param};
use crate::record::Category;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

pub struct Ddp {
    params: Vec<Param>,
    /// The parameters this rank's optimizer steps (all, except under ZeRO-1).
    stepped: Vec<usize>,
    buckets: RefCell<Vec<Tensor>>,
    bucket_cap: usize,
    /// Parameter indices in the order their gradients became ready (first backward).
    ready: Rc<RefCell<Vec<usize>>>,
    rebuilt: Cell<bool>,
}

/// `compute_bucket_assignment_by_size`: walk `order`, one open bucket per dtype, close a
/// bucket once it holds at least the current limit (the first limit once, then the last),
/// then order buckets by the first position they hold.
fn assign(params: &[Param], order: &[usize], limits: &[usize]) -> Vec<Vec<usize>> {
    let mut open: Vec<(DType, Vec<usize>, usize, usize)> = Vec::new(); // dtype, members, bytes, limit index
    let mut done: Vec<Vec<usize>> = Vec::new();
    for &i in order {
        let t = &params[i].tensor;
        let k = match open.iter().position(|b| b.0 == t.dtype()) {
            Some(k) => k,
            None => {
                open.push((t.dtype(), Vec::new(), 0, 0));
                open.len() - 1
            }
        };
        let b = &mut open[k];
        b.1.push(i);
        b.2 += t.nbytes();
        if b.2 >= limits[b.3] {
            done.push(std::mem::take(&mut b.1));
            b.2 = 0;
            b.3 = (b.3 + 1).min(limits.len() - 1);
        }
    }
    done.extend(open.into_iter().map(|b| b.1).filter(|m| !m.is_empty()));
    let pos = |i: usize| order.iter().position(|&o| o == i).unwrap_or(usize::MAX);
    done.sort_by_key(|m| m.iter().map(|&i| pos(i)).min());
    done
}

fn allocate(params: &[Param], buckets: &[Vec<usize>]) -> Vec<Tensor> {
    let _s = runtime::scope("DDP::reducer");
    let _c = runtime::category(Category::Communication);
    buckets
        .iter()
        .map(|m| {
            let t = &params[m[0]].tensor;
            let numel: usize = m.iter().map(|&i| params[i].tensor.numel()).sum();
            Tensor::zeros_op(&[numel], t.dtype(), t.device(), "bucket.gradients")
        })
        .collect()
}

/// `ZeroRedundancyOptimizer._partition_parameters`: parameters by size, largest first (ties
/// in registration order), each to the rank holding the fewest elements so far (the lowest
/// such rank). Returns (parameter index, rank) in that order. `numels` are the parameters'
/// element counts in registration order.
///
/// O(P log P) whatever the world size: ranks given nothing yet all hold 0 elements, so the
/// lowest of them stands for all (a heap holds only the ranks given something).
pub fn zero_assignment(numels: &[usize], world: usize) -> Vec<(usize, usize)> {
    use std::cmp::Reverse;
    let mut by_size: Vec<usize> = (0..numels.len()).collect();
    by_size.sort_by_key(|&i| Reverse(numels[i]));
    let mut given: std::collections::BinaryHeap<Reverse<(usize, usize)>> = Default::default();
    let mut fresh = 0usize;
    by_size
        .into_iter()
        .map(|i| {
            // A given rank wins over the lowest fresh one only at an equal load of 0 (it has
            // the lower index) or when every rank has been given something.
            let (load, r) = match given.peek() {
                Some(&Reverse((l, r))) if l == 0 || fresh >= world.max(1) => {
                    given.pop();
                    (l, r)
                }
                _ => {
                    fresh += 1;
                    (0, fresh - 1)
                }
            };
            given.push(Reverse((load.saturating_add(numels[i]), r)));
            (i, r)
        })
        .collect()
}

/// The parameter indices ZeRO-1 gives rank `rank`, in the order it steps them.
pub fn zero_partition(numels: &[usize], world: usize, rank: usize) -> Vec<usize> {
    zero_assignment(numels, world).into_iter().filter(|&(_, r)| r == rank).map(|(i, _)| i).collect()
}

impl Ddp {
    /// `DistributedDataParallel(model)`: the first iteration's single bucket of the parameters
    /// that require grad is allocated now.
    pub fn wrap(model: &Model, cfg: &ParallelConfig) -> Rc<Ddp> {
        let params: Vec<Param> = model.parameters().iter().filter(|p| p.tensor.requires_grad()).cloned().collect();
        let all: Vec<usize> = (0..params.len()).collect();
        let buckets = allocate(&params, &assign(&params, &all, &[usize::MAX]));
        let stepped = match cfg.layout {
            Layout::Zero1 => {
                let numels: Vec<usize> = params.iter().map(|p| p.tensor.numel()).collect();
                zero_partition(&numels, cfg.world_size, cfg.rank)
            }
            _ => all,
        };
        let ready: Rc<RefCell<Vec<usize>>> = Rc::default();
        let d = Rc::new(Ddp { params, stepped, buckets: RefCell::new(buckets), bucket_cap: cfg.bucket_cap, ready: ready.clone(), rebuilt: Cell::new(false) });
        // The Reducer's autograd hooks record the order gradients become ready in.
        let tensors: Vec<Tensor> = d.params.iter().map(|p| p.tensor.clone()).collect();
        set_grad_ready_hook(Some(Rc::new(move |leaf: &Tensor| {
            if let Some(i) = tensors.iter().position(|t| t.same_storage(leaf)) {
                let mut r = ready.borrow_mut();
                if !r.contains(&i) {
                    r.push(i);
                }
            }
        })));
        d
    }

}

impl ModuleHooks for Ddp {
    fn block_pre_forward(&self, _block: usize, x: Tensor) -> Tensor {
        x
    }
    fn block_post_forward(&self, _block: usize, y: Tensor) -> Tensor {
        y
    }
    /// `_pre_forward`: after the first backward, `_rebuild_buckets` frees the single bucket
    /// and allocates buckets in gradient-ready order.
    fn root_pre_forward(&self) {
        if self.rebuilt.get() || !runtime::is_grad_enabled() {
            return;
        }
        let order = self.ready.borrow().clone();
        if order.len() < self.params.len() {
            return;
        }
        set_grad_ready_hook(None);
        self.rebuilt.set(true);
        let old = std::mem::take(&mut *self.buckets.borrow_mut());
        drop(old);
        let new = allocate(&self.params, &assign(&self.params, &order, &[FIRST_BUCKET_BYTES, self.bucket_cap]));
        *self.buckets.borrow_mut() = new;
    }
    fn root_post_forward(&self, _outputs: &mut [&mut Tensor]) {}
}

impl RankLayout for Ddp {
    fn optimizer_params(&self) -> Vec<Param> {
        self.stepped.iter().map(|&i| self.params[i].clone()).collect()
    }
    fn zero_grad(&self) {}
    fn after_backward(&self) {}
}

impl Drop for Ddp {
    fn drop(&mut self) {
        set_grad_ready_hook(None);
    }
}
