//! One rank of a data-parallel job: what it allocates when its parameters, gradients and
//! optimizer state are replicated or sharded (DDP, ZeRO-1, ZeRO-2, FSDP2 and HSDP), run
//! through the same engine and allocator as a single device. Tensor parallelism shards the
//! model itself ([`crate::model::tp`]); FSDP2 then shards those shards over the data-parallel
//! dimension of the (world / tp, tp) mesh.
//!
//! The layouts hook into the model's modules ([`crate::model::ModuleHooks`]) and into the
//! training step ([`RankLayout`]); collectives are modelled by what they allocate on the
//! rank (NCCL works in place on the buffers it is given). `docs/distributed-pytorch.md` lists the
//! rules with their PyTorch sources.
pub mod config;
pub mod ddp;
pub mod fsdp;
mod nodes;
pub mod shard;

pub use config::{Layout, ParallelConfig};

use crate::model::{Model, Param};
use std::rc::Rc;

/// What the training step asks of a parallel layout.
pub trait RankLayout {
    /// The parameters the optimizer steps on this rank (shards under FSDP, a partition under
    /// ZeRO), with their gradients.
    fn optimizer_params(&self) -> Vec<Param>;
    /// `optimizer.zero_grad(set_to_none=True)` over what this rank holds.
    fn zero_grad(&self);
    /// The callback autograd runs when `loss.backward()` finishes (FSDP's final
    /// reduce-scatters, DDP's bucket copy-back).
    fn after_backward(&self);
    /// Whether the optimizer steps on the host (CPU offload): its state is host memory.
    fn optimizer_on_host(&self) -> bool {
        false
    }
    /// FSDP units (root first) with the bytes each holds unsharded; empty for layouts that
    /// replicate parameters.
    fn units(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
}

/// Set `model` up as one rank of `cfg`: shard or replicate its parameters and install the
/// layout's hooks (None: tensor parallelism alone, which needs no step hooks). The model must have been built under
/// [`crate::engine::runtime::defer_allocation`] for the sharded layouts (only shards are ever
/// allocated), normally for the replicated ones.
pub fn apply(model: &Model, cfg: &ParallelConfig, orig_dtype: crate::engine::DType) -> Option<Rc<dyn RankLayout>> {
    // Buffers are not sharded: `to_empty` gives them their full storage (DeepSeek-V3's
    // per-layer `e_score_correction_bias` too).
    let layer_buffers: Vec<crate::engine::Tensor> = model.layers.iter().filter_map(|l| l.hf.as_ref()?.deepseek.as_ref()?.e_score_bias.clone()).collect();
    for b in model.rope_buffer.iter().chain(&model.buffers).chain(&layer_buffers) {
        let _c = crate::engine::runtime::category(crate::record::Category::Buffer);
        b.storage().resize_back("to_empty");
    }
    match cfg.layout {
        Layout::Zero2 | Layout::Fsdp | Layout::Hsdp => {
            let f = fsdp::Fsdp::shard(model, cfg, orig_dtype);
            *model.hooks.borrow_mut() = Some(f.clone());
            Some(f)
        }
        Layout::Ddp | Layout::Zero1 => {
            let d = ddp::Ddp::wrap(model, cfg);
            *model.hooks.borrow_mut() = Some(d.clone());
            Some(d)
        }
        // The model itself holds this rank's shards ([`ParallelConfig::model_config`]) and
        // steps them as one device does.
        Layout::Tp => None,
    }
}

/// The ranks whose memory can differ: rank 0, then the first rank of every other distinct
/// set of local shard sizes (FSDP's trailing ranks hold fewer rows when a dimension does not
/// divide). `shapes` are the model's parameter shapes in registration order.
pub fn distinct_ranks(shapes: &[Vec<usize>], cfg: &ParallelConfig) -> Vec<usize> {
    if cfg.layout == Layout::Zero1 {
        // Partitions differ by rank; the one with the most optimizer state besides rank 0.
        let h = heaviest_rank(shapes, cfg);
        return if h == 0 { vec![0] } else { vec![0, h] };
    }
    if !cfg.shards_params() {
        return vec![0];
    }
    let group = cfg.shard_size();
    // A rank's local rows change only where some parameter's chunking does (at ⌊rows / chunk⌋
    // and one past it), so the ranks at those breakpoints stand for every rank: the work is
    // O(parameters), never O(ranks).
    let mut starts: Vec<usize> = vec![0];
    for s in shapes {
        let rows = s.first().copied().unwrap_or(1);
        let chunk = shard::padded_rows(rows, group).max(1);
        starts.extend([rows / chunk, rows / chunk + 1].into_iter().filter(|&r| r < group));
    }
    starts.sort_unstable();
    starts.dedup();
    let mut seen: Vec<Vec<usize>> = Vec::new();
    let mut ranks = Vec::new();
    for r in starts {
        let sig: Vec<usize> = shapes.iter().map(|s| shard::local_rows(s.first().copied().unwrap_or(1), group, r)).collect();
        if !seen.contains(&sig) {
            seen.push(sig);
            // The first rank of that data-parallel index (tensor-parallel index 0).
            ranks.push(r * cfg.tp.max(1));
        }
    }
    ranks
}

/// The rank holding the most: FSDP's rank 0 (its chunks are the full ⌈rows / ranks⌉), ZeRO-1's
/// rank with the largest optimizer partition, any rank of DDP.
pub fn heaviest_rank(shapes: &[Vec<usize>], cfg: &ParallelConfig) -> usize {
    if cfg.layout != Layout::Zero1 {
        return 0;
    }
    let numels: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
    // Ranks given nothing hold 0 and come after every rank given something.
    let mut loads: Vec<usize> = Vec::new();
    for (i, r) in ddp::zero_assignment(&numels, cfg.world_size) {
        if loads.len() <= r {
            loads.resize(r + 1, 0);
        }
        loads[r] = loads[r].saturating_add(numels[i]);
    }
    (0..loads.len()).max_by_key(|&r| (loads[r], std::cmp::Reverse(r))).unwrap_or(0)
}
