//! FSDP2 (`fully_shard`, torch 2.15) on one rank: each decoder block is a unit, then the root
//! (embedding, final norm, head) is one. Its memory, unit by unit, as
//! `torch/distributed/fsdp/_fully_shard/` runs it (`docs/distributed-pytorch.md` has the rules):
//!
//! - at rest each parameter is a padded dim-0 shard (`_sharded_param_data`);
//! - before a unit runs, an all-gather fills one flat output (world × the padded shards),
//!   which the copy-out splits into one unsharded storage per parameter; in forward the flat
//!   output is kept until the next unit's copy-out (`AllGatherState`), in backward it is
//!   freed at once;
//! - after forward a block frees its unsharded storages (`reshard_after_forward`; the root
//!   keeps its own, as backward needs them first) while autograd still saves the tensors;
//! - in backward a unit all-gathers again before its gradients are computed and prefetches
//!   the unit before it; once its gradients exist they are copied into one flat
//!   reduce-scatter input (freed when the next unit's reduce-scatter starts,
//!   `reduce_scatter_states`), the unsharded gradients die, and the reduce-scatter output
//!   becomes the sharded gradients (views of it).
//!
//! Frozen and trainable parameters may share a unit (LoRA: bf16 base weights, fp32 adapters):
//! each keeps its own dtype, a unit whose shards differ in dtype all-gathers them as bytes
//! (`_get_all_gather_input_metadatas`: uint8), frozen parameters get no gradient and so no
//! reduce-scatter space, and the reduce dtype is the trainable parameters' (`_init_mp_dtypes`).
//! Under a MixedPrecisionPolicy each parameter is cast only when its own dtype differs from
//! param_dtype (`FSDPParam.init_dtype_attrs`): over bf16 weights only the fp32 adapters go
//! through the flat foreach copy-in (`_get_param_all_gather_inputs`), the frozen bf16 shards are
//! all-gather inputs as they are, and the unit all-gathers one uniform bf16 buffer.
use super::config::ParallelConfig;
use super::nodes::on_backward;
use super::shard::{local_rows, padded_rows};
use super::RankLayout;
use crate::engine::{runtime, DType, Tensor};
use crate::record::allocator::StreamId;
use crate::model::{lora, Model, ModuleHooks, Param};
use crate::record::Category;
use std::cell::RefCell;
use std::rc::{Rc, Weak};

/// One parameter of a unit: the tensor the module computes with, and this rank's shard.
struct FsdpParam {
    /// The module's parameter (`_unsharded_param`): autograd saves it; its storage holds the
    /// padded full size (world × padded shard) while unsharded and nothing while sharded.
    unsharded: Tensor,
    /// This rank's rows of the shard (`sharded_param`'s local tensor), a view of the padded
    /// shard storage: what the optimizer steps.
    sharded: Tensor,
    /// Elements of the padded shard (⌈rows / world⌉ × the other dims).
    padded_numel: usize,
    /// The parameter's original dtype (its shard's, its gradient's).
    dtype: DType,
    /// MixedPrecisionPolicy's param_dtype where it differs from `dtype` (the shard is cast
    /// before the all-gather), else None.
    cast: Option<DType>,
}

impl FsdpParam {
    /// `alloc_storage`: the unsharded storage is world × the padded shard, more than the
    /// parameter's own elements when its rows do not divide.
    fn resize_unsharded(&self, world: usize, dtype: DType) {
        self.unsharded.storage().resize_back_bytes("split_with_sizes_copy", self.padded_numel * world * dtype.size());
    }

    /// Bytes of the padded shard in `dtype`.
    fn padded_bytes(&self, dtype: DType) -> usize {
        self.padded_numel * dtype.size()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Idle,
    Forward,
    PreBackward,
    PostBackward,
}

struct Unit {
    params: Vec<FsdpParam>,
    unsharded: bool,
    /// An all-gather issued and not yet copied out (`_all_gather_result`).
    gathered: Option<Gathered>,
    state: State,
    reshard_after_forward: bool,
    /// Where this unit sits in `post_forward_order`, one entry per forward.
    post_forward_indices: Vec<usize>,
    /// HSDP: the reduce-scatter output all-reduced over the replicas, held until backward
    /// ends (`FSDPParamGroup._all_reduce_state`, released by `finalize_backward`): more than
    /// the sharded gradients when they are a cast of it (reduce dtype not the parameters').
    all_reduce_state: Option<Tensor>,
}

/// An issued all-gather: its flat output (None when one rank gathers nothing).
struct Gathered(Option<Tensor>);

#[derive(Default)]
struct Comm {
    /// The last forward all-gather output, kept until the next copy-out (`AllGatherState`).
    all_gather_state: Option<Tensor>,
    /// Reduce-scatter inputs kept until the next unit's reduce-scatter (at most one).
    reduce_scatter_states: Vec<Tensor>,
    post_forward_order: Vec<usize>,
}

pub struct Fsdp {
    /// CPUOffloadPolicy: shards and sharded gradients in host memory.
    offload: bool,
    /// HSDP (a 2-D mesh): each reduce-scatter output is then all-reduced over the replicas.
    hsdp: bool,
    world: usize,
    /// MixedPrecisionPolicy's param_dtype as given (cast_forward_inputs casts to it even where
    /// no parameter needs a cast).
    param_dtype: Option<DType>,
    reduce_dtype: Option<DType>,
    /// Units: 0 is the root, then one per group of blocks.
    units: RefCell<Vec<Unit>>,
    /// Each block's unit (None: its parameters are the root's), and whether it is the first
    /// and the last block of that unit (where the unit's hooks fire).
    block_unit: Vec<Option<(usize, bool, bool)>>,
    comm: RefCell<Comm>,
    /// What the optimizer sees, in registration order.
    sharded: Vec<Param>,
    me: RefCell<Weak<Fsdp>>,
}

const ROOT: usize = 0;

/// FSDP2's streams, in the order `FSDPCommContext.lazy_init` creates them (the default stream
/// is 0): the all-gather copy-in stream (the flat copy-in buffer and the all-gather output are
/// allocated on it) and the reduce-scatter stream (the reduce-scatter output, and its cast).
/// Blocks freed there are cached for those streams only.
const ALL_GATHER_COPY_IN_STREAM: StreamId = StreamId(1);
const REDUCE_SCATTER_STREAM: StreamId = StreamId(3);
/// HSDP's all-reduce stream (`all_reduce_stream`, created after the reduce-scatter stream).
const ALL_REDUCE_STREAM: StreamId = StreamId(4);

impl Fsdp {
    /// `fully_shard(block)` for every block, then `fully_shard(model)`: each parameter's
    /// padded shard is allocated (in registration order) and its full storage never exists.
    /// `orig_dtype` is the weights' own dtype under mixed precision (the model itself is
    /// built in `param_dtype` then; peft's adapters are in theirs, [`lora::adapter_dtype`] of
    /// it); without a policy each parameter keeps the dtype it was built in (a LoRA model's fp32
    /// adapters beside bf16 weights).
    pub fn shard(model: &Model, cfg: &ParallelConfig, orig_dtype: DType) -> Rc<Fsdp> {
        let (world, rank) = (cfg.shard_size(), cfg.shard_rank());
        let n = model.layers.len();
        let block_unit: Vec<Option<(usize, bool, bool)>> = (0..n)
            .map(|i| cfg.blocks_per_unit.map(|g| (1 + i / g, i % g == 0, i % g == g - 1 || i == n - 1)))
            .collect();
        let num_units = 1 + cfg.blocks_per_unit.map_or(0, |g| n.div_ceil(g));
        let mut owner: Vec<usize> = vec![ROOT; model.parameters().len()];
        for (i, layer) in model.layers.iter().enumerate() {
            for w in layer.weights() {
                if let (Some(k), Some((u, ..))) = (model.parameters().iter().position(|p| p.tensor.same_storage(w)), block_unit[i]) {
                    owner[k] = u;
                }
            }
        }
        let mut units: Vec<Unit> = (0..num_units)
            .map(|u| Unit { params: Vec::new(), unsharded: false, gathered: None, state: State::Idle, reshard_after_forward: u != ROOT && cfg.reshard_after_forward && cfg.layout != super::Layout::Zero2, post_forward_indices: Vec::new(), all_reduce_state: None })
            .collect();
        let mut sharded = Vec::with_capacity(model.parameters().len());
        for (p, &u) in model.parameters().iter().zip(&owner) {
            assert!(p.tensor.storage().is_released(), "fsdp: build the model under runtime::defer_allocation");
            let shape = p.tensor.shape().to_vec();
            let rows = shape.first().copied().unwrap_or(1);
            let rest: usize = shape.iter().skip(1).product();
            let padded_numel = padded_rows(rows, world) * rest;
            let local = local_rows(rows, world, rank);
            let dtype = match cfg.param_dtype {
                Some(_) if lora::is_adapter(&p.name) => lora::adapter_dtype(orig_dtype),
                Some(_) => orig_dtype,
                None => p.tensor.dtype(),
            };
            let padded = {
                let _s = runtime::scope(&p.name);
                let _c = runtime::category(Category::Parameter);
                let _h = cfg.offload_params.then(runtime::on_host);
                Tensor::zeros_op(&[padded_numel], dtype, p.tensor.device(), "fully_shard")
            };
            let mut local_shape = shape.clone();
            if let Some(r) = local_shape.first_mut() {
                *r = local;
            }
            // The sharded parameter keeps the module parameter's requires_grad (frozen weights
            // stay frozen, and the optimizer is given the trainable ones).
            let trainable = p.tensor.requires_grad();
            let local_view = padded.narrow(0, 0, local * rest).view(&local_shape).requires_grad_(trainable);
            if trainable {
                sharded.push(Param { name: p.name.clone(), tensor: local_view.clone() });
            }
            let cast = cfg.param_dtype.filter(|&d| d != dtype);
            units[u].params.push(FsdpParam { unsharded: p.tensor.clone(), sharded: local_view, padded_numel, dtype, cast });
        }
        let f = Rc::new(Fsdp {
            offload: cfg.offload_params,
            hsdp: cfg.layout == super::Layout::Hsdp,
            world,
            param_dtype: cfg.param_dtype,
            reduce_dtype: cfg.reduce_dtype,
            units: RefCell::new(units),
            block_unit,
            comm: RefCell::new(Comm::default()),
            sharded,
            me: RefCell::new(Weak::new()),
        });
        *f.me.borrow_mut() = Rc::downgrade(&f);
        f
    }

    fn me(&self) -> Rc<Fsdp> {
        self.me.borrow().upgrade().expect("the layout outlives its hooks")
    }

    /// The dtype `p` is all-gathered and computed in.
    fn compute_dtype(&self, p: &FsdpParam) -> DType {
        p.cast.unwrap_or(p.dtype)
    }

    /// The flat all-gather buffer's dtype and elements per rank: the shards' common compute
    /// dtype, or bytes when they differ (`_get_all_gather_input_metadatas`).
    fn all_gather_layout(&self, params: &[FsdpParam]) -> Option<(DType, usize)> {
        let first = self.compute_dtype(params.first()?);
        if params.iter().all(|p| self.compute_dtype(p) == first) {
            return Some((first, params.iter().map(|p| p.padded_numel).sum()));
        }
        Some((DType::U8, params.iter().map(|p| p.padded_bytes(self.compute_dtype(p))).sum()))
    }

    /// `FSDPParamGroup.unshard`: issue the all-gather (copy-in, flat output).
    fn unshard(&self, u: usize) {
        let mut units = self.units.borrow_mut();
        let unit = &mut units[u];
        if unit.gathered.is_some() || unit.unsharded {
            return;
        }
        if self.world == 1 {
            unit.gathered = Some(Gathered(None));
            return;
        }
        let device = unit.params.first().map(|p| p.sharded.device());
        let (Some(device), Some((dtype, total))) = (device, self.all_gather_layout(&unit.params)) else {
            unit.gathered = Some(Gathered(None));
            return;
        };
        let _s = runtime::scope("FSDP::all_gather");
        let _c = runtime::category(Category::Communication);
        let _st = runtime::on_stream(ALL_GATHER_COPY_IN_STREAM);
        // Mixed precision: the shards to cast are cast into one flat buffer first (foreach
        // copy, in the first one's param_dtype), which dies when the copy-in returns; the others
        // are all-gather inputs as they are. Offloaded shards are copied to the device one by
        // one (then cast), and those copies die when the copy-in returns.
        let inputs: Vec<Tensor> = if self.offload {
            unit.params.iter().map(|p| self.device_copy(p)).collect()
        } else {
            let cast: usize = unit.params.iter().filter(|p| p.cast.is_some()).map(|p| p.padded_numel).sum();
            unit.params.iter().find_map(|p| p.cast).map(|d| Tensor::zeros_op(&[cast], d, device, "all_gather_copy_in")).into_iter().collect()
        };
        let output = Tensor::zeros_op(&[total * self.world], dtype, device, "all_gather_into_tensor");
        drop(inputs);
        unit.gathered = Some(Gathered(Some(output)));
    }

    /// `FSDPParamGroup.wait_for_unshard`: the copy-out into each parameter's storage.
    fn wait_for_unshard(&self, u: usize) {
        let mut units = self.units.borrow_mut();
        let state = units[u].state;
        let Some(Gathered(output)) = units[u].gathered.take() else { return };
        if state == State::Forward {
            // release_all_gather_state_for_comm_reuse: the previous unit's output dies now.
            let prev = self.comm.borrow_mut().all_gather_state.take();
            drop(prev);
        }
        let unit = &mut units[u];
        let _s = runtime::scope("FSDP::all_gather_copy_out");
        let _c = runtime::category(Category::Parameter);
        if self.world == 1 {
            // Each parameter's all-gather input is its shard (cast to param_dtype when mixed
            // precision: a new tensor, rebound per parameter), copied into its storage.
            let mut input: Option<Tensor> = None;
            for p in &unit.params {
                let copy = (self.offload || p.cast.is_some()).then(|| {
                    let _c = runtime::category(Category::Communication);
                    self.device_copy(p)
                });
                input = copy;
                p.resize_unsharded(self.world, self.compute_dtype(p));
            }
            drop(input);
        } else {
            for p in &unit.params {
                p.resize_unsharded(self.world, self.compute_dtype(p));
            }
        }
        unit.unsharded = true;
        if state == State::Forward && self.world > 1 {
            self.comm.borrow_mut().all_gather_state = output;
        } else {
            drop(output);
        }
    }

    /// `FSDPParam.all_gather_inputs`' tensor for one parameter, when it is a new one: the
    /// offloaded shard copied to the device (`.to(device)`), then cast to param_dtype (the
    /// copy dies once cast), or the on-device shard cast.
    fn device_copy(&self, p: &FsdpParam) -> Tensor {
        let device = p.sharded.device();
        let h2d = self.offload.then(|| Tensor::zeros_op(&[p.padded_numel], p.dtype, device, "_to_copy"));
        match p.cast {
            Some(d) => {
                let cast = Tensor::zeros_op(&[p.padded_numel], d, device, "_to_copy");
                drop(h2d);
                cast
            }
            None => h2d.expect("a copy exists when offloading or casting"),
        }
    }

    /// `FSDPParamGroup.reshard` (`to_sharded`): the unsharded storages are freed.
    fn reshard(&self, u: usize) {
        let mut units = self.units.borrow_mut();
        let unit = &mut units[u];
        if !unit.unsharded {
            return;
        }
        for p in &unit.params {
            p.unsharded.storage().resize_to_zero();
        }
        unit.unsharded = false;
    }

    fn pre_forward(&self, u: usize) {
        let state = self.units.borrow()[u].state;
        if state == State::PreBackward {
            // A checkpointed unit recomputing in backward: its parameters are already there.
            self.unshard(u);
            self.wait_for_unshard(u);
            return;
        }
        self.units.borrow_mut()[u].state = State::Forward;
        self.unshard(u);
        self.wait_for_unshard(u);
    }

    /// Returns whether the unit's output gets the pre-backward hook.
    fn post_forward(&self, u: usize) -> bool {
        if self.units.borrow()[u].state == State::PreBackward {
            return false;
        }
        let reshard = self.units.borrow()[u].reshard_after_forward;
        if reshard {
            self.reshard(u);
        }
        let mut comm = self.comm.borrow_mut();
        let index = comm.post_forward_order.len();
        comm.post_forward_order.push(u);
        drop(comm);
        let mut units = self.units.borrow_mut();
        units[u].post_forward_indices.push(index);
        units[u].state = State::Idle;
        true
    }

    /// `FSDPParamGroup.pre_backward`: all-gather again, then prefetch the unit that ran
    /// before this one in forward.
    fn pre_backward(&self, u: usize) {
        if self.units.borrow()[u].state == State::PreBackward {
            return;
        }
        self.units.borrow_mut()[u].state = State::PreBackward;
        self.unshard(u);
        self.wait_for_unshard(u);
        let index = self.units.borrow_mut()[u].post_forward_indices.pop();
        if let Some(i) = index.filter(|&i| i > 0) {
            let target = self.comm.borrow().post_forward_order[i - 1];
            self.unshard(target);
        }
    }

    /// `FSDPParamGroup.post_backward`: reshard, then reduce-scatter the gradients.
    fn post_backward(&self, u: usize) {
        self.units.borrow_mut()[u].state = State::PostBackward;
        // _take_unsharded_grads_to_reduce: the gradients leave the parameters first.
        let grads: Vec<(usize, Tensor)> = {
            let units = self.units.borrow();
            // A tensor-parallel parameter's whole (Replicate) gradient is redistributed to its
            // shard first (a copy of its rows), then dies.
            let take = |p: &FsdpParam| p.unsharded.grad_slot().borrow_mut().take().map(|g| crate::engine::autograd::grad_as_placed(&p.unsharded, &g));
            units[u].params.iter().enumerate().filter_map(|(k, p)| take(p).map(|g| (k, g))).collect()
        };
        self.reshard(u);
        // At most one reduce-scatter input in flight: the previous unit's dies now.
        let oldest = {
            let mut comm = self.comm.borrow_mut();
            (!comm.reduce_scatter_states.is_empty()).then(|| comm.reduce_scatter_states.remove(0))
        };
        drop(oldest);
        if grads.is_empty() {
            return;
        }
        let units = self.units.borrow();
        let params = &units[u].params;
        let device = grads[0].1.device();
        // The reduce dtype: the policy's, else the gradients' accumulation dtype (the
        // trainable parameters' original one, uniform within a unit; lower-precision
        // gradients are upcast by the copy-in).
        let grad_dtype = params[grads[0].0].dtype;
        let reduce_dtype = self.reduce_dtype.unwrap_or(grad_dtype);
        let total: usize = grads.iter().map(|(k, _)| params[*k].padded_numel).sum();
        let _s = runtime::scope("FSDP::post_backward_reduce");
        let input = {
            let _c = runtime::category(Category::Communication);
            Tensor::zeros_op(&[total * self.world], reduce_dtype, device, "chunk_cat")
        };
        // `unsharded_grads.clear()`: CPython drops a list's items last first.
        let (ks, mut gs): (Vec<usize>, Vec<Tensor>) = grads.into_iter().unzip();
        while let Some(g) = gs.pop() {
            drop(g);
        }
        let rs_stream = runtime::on_stream(REDUCE_SCATTER_STREAM);
        let output = {
            let _c = runtime::category(Category::Gradient);
            Tensor::zeros_op(&[total], reduce_dtype, device, "reduce_scatter_tensor")
        };
        // Sharded gradients are views of one flat buffer, cast first when the reduce dtype is
        // not the parameters' own. HSDP all-reduces the output over the replicas and holds it
        // (`all_reduce_input`) until backward ends; the cast then runs on the all-reduce stream
        // (foreach_reduce's post_reduce_stream).
        let mut all_reduce_state = None;
        let flat = if reduce_dtype != grad_dtype {
            let _c = runtime::category(Category::Gradient);
            let _ar = self.hsdp.then(|| runtime::on_stream(ALL_REDUCE_STREAM));
            let cast = Tensor::zeros_op(&[total], grad_dtype, device, "_to_copy");
            if self.hsdp {
                all_reduce_state = Some(output);
            } else {
                drop(output);
            }
            cast
        } else {
            all_reduce_state = self.hsdp.then(|| output.clone());
            output
        };
        drop(rs_stream);
        let mut offset = 0;
        // The views live as long as foreach_reduce's list of them: offloaded, each is copied
        // to the host (`.to("cpu")`) and the device buffer dies when the reduction returns.
        let mut views = Vec::with_capacity(ks.len());
        for k in ks {
            let p = &params[k];
            let view = flat.narrow(0, offset, p.sharded.numel()).view(p.sharded.shape());
            offset += p.padded_numel;
            let grad = if self.offload {
                let _h = runtime::on_host();
                let _c = runtime::category(Category::Gradient);
                Tensor::zeros_op(p.sharded.shape(), p.dtype, view.device(), "_to_copy")
            } else {
                view.clone()
            };
            let existing = p.sharded.grad();
            match existing {
                Some(g) => {
                    let _h = self.offload.then(runtime::on_host);
                    g.add_(&grad)
                }
                None => p.sharded.set_grad(Some(grad)),
            }
            views.push(view);
        }
        drop(views);
        drop(flat);
        drop(units);
        self.units.borrow_mut()[u].all_reduce_state = all_reduce_state;
        self.comm.borrow_mut().reduce_scatter_states.push(input);
    }
}

impl ModuleHooks for Fsdp {
    fn block_pre_forward(&self, block: usize, x: Tensor) -> Tensor {
        let Some((u, true, _)) = self.block_unit[block] else { return x };
        let recompute = self.units.borrow()[u].state == State::PreBackward;
        self.pre_forward(u);
        if recompute {
            return x;
        }
        let me = self.me();
        on_backward(x, "RegisterPostBackwardFunctionBackward", move || me.post_backward(u))
    }

    fn block_input_dtype(&self, block: usize) -> Option<DType> {
        // `MixedPrecisionPolicy(cast_forward_inputs=True)`: in FSDPState._pre_forward, before
        // the unshard (torch 2.15 casts in a recomputation that runs the hooks again too). The
        // block's input itself is already in the param dtype; an fp32 argument beside it (an
        // additive mask, OLMo-2's cos and sin) is copied.
        let Some((_, true, _)) = self.block_unit[block] else { return None };
        self.param_dtype
    }

    fn block_post_forward(&self, block: usize, y: Tensor) -> Tensor {
        let Some((u, _, true)) = self.block_unit[block] else { return y };
        if !self.post_forward(u) {
            return y;
        }
        let me = self.me();
        on_backward(y, "FSDP::pre_backward", move || me.pre_backward(u))
    }

    fn root_pre_forward(&self) {
        // A forward without backward (inference) leaves its order behind; a new pass starts over.
        if self.units.borrow().iter().all(|u| u.state == State::Idle) {
            self.comm.borrow_mut().post_forward_order.clear();
            for u in self.units.borrow_mut().iter_mut() {
                u.post_forward_indices.clear();
            }
        }
        self.pre_forward(ROOT);
    }

    fn root_post_forward(&self, outputs: &mut [&mut Tensor]) {
        if !self.post_forward(ROOT) {
            return;
        }
        // The root's post-forward frees the last output kept for copy-out overlap.
        let last = self.comm.borrow_mut().all_gather_state.take();
        drop(last);
        for out in outputs.iter_mut() {
            let me = self.me();
            let t = std::mem::replace(&mut **out, Tensor::shape_only(&[], DType::F32));
            **out = on_backward(t, "FSDP::pre_backward", move || me.pre_backward(ROOT));
        }
    }
}

impl RankLayout for Fsdp {
    fn optimizer_params(&self) -> Vec<Param> {
        self.sharded.clone()
    }

    fn units(&self) -> Vec<(String, u64)> {
        self.unit_bytes()
    }

    fn optimizer_on_host(&self) -> bool {
        self.offload
    }

    fn zero_grad(&self) {
        for p in &self.sharded {
            p.tensor.clear_grad();
        }
        for u in self.units.borrow().iter() {
            for p in &u.params {
                p.unsharded.clear_grad();
            }
        }
    }

    /// `_root_post_backward_final_callback`: units whose inputs needed no gradient (the root)
    /// reduce now, then the iteration ends (held buffers released).
    fn after_backward(&self) {
        let n = self.units.borrow().len();
        for u in 0..n {
            if self.units.borrow()[u].state != State::PostBackward {
                self.post_backward(u);
            }
            self.units.borrow_mut()[u].state = State::Idle;
        }
        // finalize_backward, unit by unit (the root's first): HSDP's held all-reduce outputs die.
        for u in 0..n {
            let held = self.units.borrow_mut()[u].all_reduce_state.take();
            drop(held);
        }
        for u in self.units.borrow_mut().iter_mut() {
            u.gathered = None;
            u.post_forward_indices.clear();
        }
        let mut comm = self.comm.borrow_mut();
        let held = comm.all_gather_state.take();
        comm.post_forward_order.clear();
        let states = std::mem::take(&mut comm.reduce_scatter_states);
        drop(comm);
        drop(held);
        drop(states);
    }
}

impl Fsdp {
    /// The unit names, root first, with their padded unsharded bytes in the compute dtype.
    fn unit_bytes(&self) -> Vec<(String, u64)> {
        let units = self.units.borrow();
        units
            .iter()
            .enumerate()
            .map(|(u, unit)| {
                let blocks: Vec<usize> = (0..self.block_unit.len()).filter(|&b| self.block_unit[b].map(|x| x.0) == Some(u)).collect();
                let name = match (u, blocks.first(), blocks.last()) {
                    (ROOT, ..) => "root".to_string(),
                    (_, Some(a), Some(b)) if a == b => format!("block {a}"),
                    (_, Some(a), Some(b)) => format!("blocks {a}-{b}"),
                    _ => format!("unit {u}"),
                };
                let bytes = unit.params.iter().map(|p| (p.padded_bytes(self.compute_dtype(p)) * self.world) as u64).sum();
                (name, bytes)
            })
            .collect()
    }
}
