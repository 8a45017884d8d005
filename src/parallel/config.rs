//! `--parallel`, `--world-size` and the options of each layout, checked once.
use crate::engine::DType;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// `DistributedDataParallel`: parameters, gradients and optimizer state replicated;
    /// gradients all-reduced through flat buckets.
    Ddp,
    /// DDP with `ZeroRedundancyOptimizer`: optimizer state for this rank's partition only.
    Zero1,
    /// PyTorch's ZeRO-2: FSDP2 with `reshard_after_forward=False` (gradients and optimizer
    /// state sharded; each block's parameters gathered once per step and kept from forward
    /// to backward, sharded between steps).
    Zero2,
    /// FSDP2 `fully_shard` per decoder block plus the root (ZeRO-3).
    Fsdp,
    /// FSDP2 on a 2-D mesh: sharded within `--gpus-per-node`, replicated across nodes.
    Hsdp,
    /// Tensor parallelism alone (`parallelize_module` with the Megatron-style plan over every
    /// rank, `--tp` = `--world-size`): no data parallelism.
    Tp,
}

impl Layout {
    /// What the layout is, in a few words (`--parallel`'s help).
    pub fn describe(self) -> &'static str {
        match self {
            Layout::Ddp => "DistributedDataParallel",
            Layout::Zero1 => "DDP + ZeroRedundancyOptimizer",
            Layout::Zero2 => "FSDP2 with reshard_after_forward=False: gradients and optimizer state sharded, parameters kept from forward to backward",
            Layout::Fsdp => "FSDP2 fully_shard per decoder block + the root (ZeRO-3)",
            Layout::Hsdp => "FSDP2 sharded within --gpus-per-node, replicated across nodes",
            Layout::Tp => "tensor parallelism alone (--tp = --world-size; hf flavour)",
        }
    }
    pub const ALL: [Layout; 6] = [Layout::Ddp, Layout::Zero1, Layout::Zero2, Layout::Fsdp, Layout::Hsdp, Layout::Tp];
    pub fn parse(s: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == s.to_ascii_lowercase())
    }
    pub fn name(self) -> &'static str {
        match self {
            Layout::Ddp => "ddp",
            Layout::Zero1 => "zero1",
            Layout::Zero2 => "zero2",
            Layout::Fsdp => "fsdp",
            Layout::Hsdp => "hsdp",
            Layout::Tp => "tp",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ParallelConfig {
    pub layout: Layout,
    /// Ranks in the job.
    pub world_size: usize,
    /// The rank simulated (shard sizes differ by rank when a dimension does not divide).
    pub rank: usize,
    /// HSDP's shard group: ranks per node.
    pub gpus_per_node: usize,
    /// FSDP2's `reshard_after_forward` for the blocks (the root never reshards after forward).
    pub reshard_after_forward: bool,
    /// `MixedPrecisionPolicy(param_dtype=...)`: the dtype parameters are all-gathered and
    /// computed in (None: the parameters' own).
    pub param_dtype: Option<DType>,
    /// `MixedPrecisionPolicy(reduce_dtype=...)` (None: the gradients' accumulation dtype).
    pub reduce_dtype: Option<DType>,
    /// DDP's `bucket_cap_mb` in bytes (25 MiB).
    pub bucket_cap: usize,
    /// FSDP units: `fully_shard` on every N consecutive decoder blocks (1: each block), or
    /// only on the root (None: `fully_shard(model)` alone, every parameter one unit).
    pub blocks_per_unit: Option<usize>,
    /// FSDP2's `CPUOffloadPolicy`: sharded parameters, their gradients and the optimizer step
    /// live on the host; each all-gather copies the shards to the device first.
    pub offload_params: bool,
    /// Tensor-parallel ranks (`--tp`; 1: none). The mesh is (world / tp, tp) as
    /// `init_device_mesh` lays it out: rank = data-parallel index · tp + tensor-parallel index.
    pub tp: usize,
    /// `--sequence-parallel`: torch's SequenceParallel plan with the tensor-parallel one.
    pub sequence_parallel: bool,
    /// `--tp-plan` (None: the model's default, [`crate::model::tp::TpPlan::default_for`]).
    pub tp_plan: Option<crate::model::tp::TpPlan>,
}

/// DDP's `_DEFAULT_FIRST_BUCKET_BYTES` (torch/distributed/constants.py... dist._DEFAULT_FIRST_BUCKET_BYTES).
pub const FIRST_BUCKET_BYTES: usize = 1024 * 1024;

/// The most ranks `--world-size`, `--tp` and `--gpus-per-node` take: 2^24, a hundred times
/// today's largest clusters, and small enough that a rank's all-gather of one padded row per
/// rank stays countable.
pub const MAX_RANKS: usize = 1 << 24;

impl ParallelConfig {
    pub fn new(layout: Layout, world_size: usize) -> ParallelConfig {
        ParallelConfig {
            layout,
            world_size,
            rank: 0,
            gpus_per_node: world_size,
            reshard_after_forward: true,
            param_dtype: None,
            reduce_dtype: None,
            bucket_cap: 25 * 1024 * 1024,
            blocks_per_unit: Some(1),
            offload_params: false,
            tp: if layout == Layout::Tp { world_size } else { 1 },
            sequence_parallel: false,
            tp_plan: None,
        }
    }

    /// Ranks a parameter is sharded over (FSDP: all; HSDP: one node's).
    pub fn shard_size(&self) -> usize {
        match self.layout {
            Layout::Hsdp => self.gpus_per_node,
            _ => self.world_size / self.tp.max(1),
        }
    }

    /// This rank's index in its shard group.
    pub fn shard_rank(&self) -> usize {
        (self.rank / self.tp.max(1)) % self.shard_size().max(1)
    }

    /// This rank's place in its tensor-parallel group (None without tensor parallelism).
    pub fn tensor_parallel(&self) -> Option<crate::model::tp::TensorParallel> {
        (self.tp > 1).then(|| crate::model::tp::TensorParallel { size: self.tp, rank: self.rank % self.tp, sequence: self.sequence_parallel, plan: self.tp_plan.unwrap_or_default() })
    }

    /// The model as this rank builds it: its tensor-parallel shards when `--tp` is on, under
    /// the plan named or the model's default; under FSDP2's MixedPrecisionPolicy peft's adapters
    /// compute in its param_dtype like every other parameter (the model is built in it).
    pub fn model_config(&self, cfg: &crate::model::ModelConfig) -> crate::model::ModelConfig {
        let plan = self.tp_plan_for(cfg.hf());
        let tp = self.tensor_parallel().map(|t| crate::model::tp::TensorParallel { plan: plan.unwrap_or_default(), ..t });
        let mut out = crate::model::ModelConfig { tp, ..cfg.clone() };
        if let (true, Some(d), Some(lora)) = (self.shards_params(), self.param_dtype, out.hf.as_mut().and_then(|h| h.lora.as_mut())) {
            lora.compute_dtype = Some(d);
        }
        out
    }

    /// The plan named, else the model's default.
    fn tp_plan_for(&self, hf: Option<&crate::model::hf::HfConfig>) -> Option<crate::model::tp::TpPlan> {
        // An MoE model's experts have transformers' style only (moe_tp_experts).
        self.tp_plan.or_else(|| hf.map(|h| if h.moe.is_some() { crate::model::tp::TpPlan::Auto } else { crate::model::tp::TpPlan::default_for(h.model_type) }))
    }

    /// `--tp-plan` resolved for the model (its default when none is named).
    pub fn resolve_tp_plan(&mut self, hf: Option<&crate::model::hf::HfConfig>) {
        if self.tp > 1 {
            self.tp_plan = self.tp_plan_for(hf);
        }
    }

    /// Is this layout sharding parameters (FSDP2)?
    pub fn shards_params(&self) -> bool {
        matches!(self.layout, Layout::Zero2 | Layout::Fsdp | Layout::Hsdp)
    }

    /// The first problem with these settings, naming the flag.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.world_size == 0 {
            return Err(("--world-size", "must be at least 1".into()));
        }
        // Checked first, so that no later message or loop sees an absurd size.
        for (flag, n) in [("--world-size", self.world_size), ("--tp", self.tp), ("--gpus-per-node", self.gpus_per_node)] {
            if n > MAX_RANKS {
                return Err((flag, format!("{n} is above the limit of {MAX_RANKS} ranks (2^24)")));
            }
        }
        if self.rank >= self.world_size {
            return Err(("--rank", format!("{} is not a rank of --world-size {}", self.rank, self.world_size)));
        }
        if self.tp == 0 || !self.world_size.is_multiple_of(self.tp) {
            return Err(("--tp", format!("{} does not divide --world-size {}", self.tp, self.world_size)));
        }
        if self.layout == Layout::Tp && self.tp != self.world_size {
            return Err(("--tp", format!("--parallel tp runs tensor parallelism alone over every rank: --tp {} must equal --world-size {} (for a 2-D mesh use --parallel fsdp or zero2 with --tp)", self.tp, self.world_size)));
        }
        if self.tp > 1 && !matches!(self.layout, Layout::Tp | Layout::Fsdp | Layout::Zero2) {
            return Err(("--tp", format!("composes with --parallel fsdp or zero2 (a (world / tp, tp) mesh) or runs alone (--parallel tp), not with {}", self.layout.name())));
        }
        if self.tp_plan.is_some() && self.tp < 2 {
            return Err(("--tp-plan", "names the tensor-parallel plan: needs --tp 2 or more (or --parallel tp)".into()));
        }
        if self.tp_plan == Some(crate::model::tp::TpPlan::Auto) && self.layout != Layout::Tp {
            return Err(("--tp-plan", format!("transformers' plan (auto) under FSDP2 on a 2-D mesh (--parallel {}) is not measured: use --parallel tp", self.layout.name())));
        }
        if self.sequence_parallel && (self.tp < 2 || self.layout != Layout::Tp) {
            return Err(("--sequence-parallel", "shards the sequence within a tensor-parallel group: needs --parallel tp over 2 or more ranks (with FSDP2 on a 2-D mesh it is not modelled)".into()));
        }
        if self.layout == Layout::Hsdp && (self.gpus_per_node == 0 || !self.world_size.is_multiple_of(self.gpus_per_node)) {
            return Err(("--gpus-per-node", format!("{} does not divide --world-size {}", self.gpus_per_node, self.world_size)));
        }
        if self.blocks_per_unit == Some(0) {
            return Err(("--fsdp-unit", "every-0 groups no blocks (expected block, every-N with N ≥ 1, or root)".into()));
        }
        if !self.shards_params() && self.blocks_per_unit != Some(1) {
            return Err(("--fsdp-unit", format!("chooses FSDP2's units: needs --parallel zero2, fsdp or hsdp, not {}", self.layout.name())));
        }
        if self.offload_params && !self.shards_params() {
            return Err(("--offload", format!("params is FSDP2's CPUOffloadPolicy: needs --parallel zero2, fsdp or hsdp, not {}", self.layout.name())));
        }
        if !self.shards_params() && (self.param_dtype.is_some() || self.reduce_dtype.is_some()) {
            return Err(("--fsdp-param-dtype", format!("is FSDP2's MixedPrecisionPolicy: needs --parallel zero2, fsdp or hsdp, not {}", self.layout.name())));
        }
        if !matches!(self.layout, Layout::Fsdp | Layout::Hsdp) && !self.reshard_after_forward {
            return Err(("--no-reshard-after-forward", format!("is FSDP2's option: needs --parallel fsdp or hsdp (zero2 is fsdp with it), not {}", self.layout.name())));
        }
        Ok(())
    }
}
