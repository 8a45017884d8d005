//! The jobs' results as the text the command line prints (the Python package can show the
//! same lines); units are said in the text (GiB/MiB are 1024-based).
pub mod estimate;
pub mod profile;
pub mod train;

/// GiB (1024³) for a GiB or more, else MiB (1024²): small limits stay readable.
pub fn size(bytes: i64) -> String {
    let b = bytes.unsigned_abs();
    let sign = if bytes < 0 { "-" } else { "" };
    if b >= 1 << 30 {
        format!("{sign}{:.3} GiB", crate::export::gib(b))
    } else {
        format!("{sign}{:.2} MiB", crate::export::mib(b))
    }
}

use crate::engine::DType;
use crate::model::{Checkpoint, ModelConfig};
use crate::parallel::ParallelConfig;

/// One line naming the optimisations in effect, or None for the reference model.
pub fn memory_line(c: &ModelConfig) -> Option<String> {
    let mut parts = Vec::new();
    if c.checkpoint != Checkpoint::None {
        let kind = if c.hf().is_some_and(|h| h.reentrant) { "reentrant" } else { "non-reentrant" };
        parts.push(format!("activation checkpointing {} ({kind})", c.checkpoint));
    }
    if c.fused_qkv {
        parts.push("fused QKV projection".to_string());
    }
    if c.fused_gate_up {
        parts.push("fused gate/up projection".to_string());
    }
    (!parts.is_empty()).then(|| format!("memory optimisations: {}", parts.join(", ")))
}

/// `--tp-plan`'s value in words.
fn tp_plan_name(p: crate::model::tp::TpPlan) -> &'static str {
    match p {
        crate::model::tp::TpPlan::Auto => "transformers' tp_plan=\"auto\"",
        crate::model::tp::TpPlan::Torch => "torch's Megatron-style",
    }
}

/// One line saying what the rank runs.
pub fn parallel_line(c: &ParallelConfig) -> String {
    let mut s = format!("parallel: {} over {} ranks, rank {}", c.layout.name(), c.world_size, c.rank);
    if let Some(t) = c.tensor_parallel() {
        s += &if c.layout == crate::parallel::Layout::Tp {
            format!(" (tensor-parallel rank {}, {} plan{})", t.rank, tp_plan_name(t.plan), if t.sequence { ", sequence parallel" } else { "" })
        } else {
            format!(" on a ({} × {}) mesh: data-parallel rank {}, tensor-parallel rank {}, {} plan", c.world_size / c.tp, c.tp, c.shard_rank(), t.rank, tp_plan_name(t.plan))
        };
    }
    if c.layout == crate::parallel::Layout::Hsdp {
        s += &format!(" (sharded over {} ranks per node, replicated over {} nodes)", c.gpus_per_node, c.world_size / c.gpus_per_node);
    }
    if c.shards_params() {
        let keep = !c.reshard_after_forward || c.layout == crate::parallel::Layout::Zero2;
        s += if keep { "; blocks keep their parameters from forward to backward" } else { "; blocks reshard after forward" };
        s += &match c.blocks_per_unit {
            Some(1) => "; units: each block, then the root".to_string(),
            Some(n) => format!("; units: every {n} blocks, then the root"),
            None => "; units: the root alone (every parameter at once)".to_string(),
        };
        if c.offload_params {
            s += "; CPUOffloadPolicy: shards, sharded gradients and the optimizer step on the host";
        }
        let d = |x: Option<DType>| x.map_or("the parameters'".to_string(), |d| d.to_string());
        s += &format!("; param dtype {}, reduce dtype {}", d(c.param_dtype), d(c.reduce_dtype));
    }
    s
}
