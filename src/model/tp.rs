//! Tensor parallelism, two plans (`--tp-plan`). `torch`: the Megatron-style plan
//! `torch.distributed.tensor.parallel` runs on a LLaMA (the plan torchtitan writes):
//! q/k/v/gate/up `ColwiseParallel`, o/down `RowwiseParallel`, the embedding `RowwiseParallel`
//! (vocabulary-parallel) and the head `ColwiseParallel(output_layouts=Replicate())`. `auto`:
//! transformers 5.23's own plan (`from_pretrained(tp_plan="auto")`,
//! `transformers/distributed/tensor_parallel.py`): the config's `base_model_tp_plan`,
//! `embed_tokens: embedding_rowwise` and `lm_head: colwise_gather_output`, whose DTensor styles
//! allocate what torch's do in training; a projection whose output the model slices whole
//! (Phi-3's fused qkv and gate_up, OLMo-2's q/k/v under whole-projection norms) is
//! `colwise_gather_output` (its output all-gathered, the attention on every head) and the
//! projection after it `rowwise_split_input` (this rank's columns of a Replicate input copied
//! out). Mistral's and Qwen2's plans are Llama's (a colwise bias is Shard(0) like its weight:
//! the local q/k/v carry their rows of it); Qwen3's `replicated_with_grad_allreduce` q/k norms
//! (Gemma 3's too) normalise this rank's heads over their whole head_dim and all-reduce their
//! gradients in place. Under a reentrant checkpoint the layers' first forward runs under
//! no_grad, where colwise and rowwise take their local paths (rowwise all-reduces in place);
//! the recomputation in backward takes DTensor's. The model is built with this rank's shards
//! (local heads, intermediate columns, vocabulary rows) and computes on local tensors; these
//! functions are what DTensor adds around them. Collectives allocate what the functional
//! collectives allocate (`all_reduce` clones its input, `all_gather_into_tensor` fills a new
//! world-sized buffer); the bytes NCCL moves in place are not memory.
use crate::engine::autograd::{attach, needs_grad};
use crate::engine::{runtime, Tensor};
use crate::model::hf::Arch;
use serde::{Deserialize, Serialize};

/// This rank's place in the tensor-parallel group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorParallel {
    /// Ranks in the group (`--tp`).
    pub size: usize,
    /// This rank's index in it.
    pub rank: usize,
    /// Sequence parallelism (`--sequence-parallel`): the norms and the residual stream hold
    /// this rank's S / size positions; the hidden states are all-gathered before attention,
    /// the MLP and the head, and reduce-scattered after o/down and the embedding.
    #[serde(default)]
    pub sequence: bool,
    /// Whose plan (`--tp-plan`).
    #[serde(default)]
    pub plan: TpPlan,
}

/// `--tp-plan`: transformers' `tp_plan` name for the plan a run shards the model with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TpPlan {
    /// torch's Megatron-style plan (`parallelize_module`), Llama-style models only.
    #[default]
    Torch,
    /// transformers' own (`tp_plan="auto"`: the model's `base_model_tp_plan`).
    Auto,
}

impl TpPlan {
    pub const ALL: [TpPlan; 2] = [TpPlan::Auto, TpPlan::Torch];

    pub fn name(self) -> &'static str {
        match self {
            TpPlan::Torch => "torch",
            TpPlan::Auto => "auto",
        }
    }

    pub fn parse(s: &str) -> Option<TpPlan> {
        TpPlan::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(s))
    }

    /// The plan a model runs when none is named: transformers' for the families (torch's
    /// plan is written for Llama's separate projections), torch's for the Llama-style ones.
    pub fn default_for(arch: Arch) -> TpPlan {
        if arch.is_family() { TpPlan::Auto } else { TpPlan::Torch }
    }
}

/// How one projection is split (transformers' style names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Weight Shard(0), output this rank's columns (`colwise`).
    Colwise,
    /// Weight Shard(1), input this rank's columns, output all-reduced (`rowwise`).
    Rowwise,
    /// `colwise_gather_output`: colwise, the output all-gathered to Replicate.
    ColwiseGather,
    /// `rowwise_split_input`: a Replicate input split to this rank's columns, then rowwise.
    RowwiseSplit,
}

impl Style {
    /// The projection's output is whole (its module sees every head or column).
    pub fn gathers(self) -> bool {
        self == Style::ColwiseGather
    }
}

impl TensorParallel {
    /// The style of the projection in slot `slot` of `lora::SLOTS` (q, k, v, o, gate, up,
    /// down; Phi-3's fused qkv in q's slot, gate_up in gate's) under this plan.
    pub fn style(&self, arch: Arch, slot: usize) -> Style {
        let gathered_attention = self.plan == TpPlan::Auto && matches!(arch, Arch::Phi3 | Arch::Olmo2);
        let gathered_mlp = self.plan == TpPlan::Auto && arch == Arch::Phi3;
        let gathered = if slot < 4 { gathered_attention } else { gathered_mlp };
        match (slot, gathered) {
            (3 | 6, false) => Style::Rowwise,
            (3 | 6, true) => Style::RowwiseSplit,
            (_, false) => Style::Colwise,
            (_, true) => Style::ColwiseGather,
        }
    }
}

/// transformers' ColwiseParallel / RowwiseParallel run an `nn.Linear` on local tensors when
/// grad is off (`should_use_local_tensors`: `isinstance(module, nn.Linear) and not
/// torch.is_grad_enabled()`); torch's styles always run on DTensors.
pub fn local_linear(t: TensorParallel) -> bool {
    t.plan == TpPlan::Auto && !runtime::is_grad_enabled()
}

/// `_use_local_dtensor_params` swaps each DTensor parameter for `param.to_local()`, which
/// without grad is the DTensor's `_local_tensor`: the nn.Parameter wrapping detached it, so it
/// does not require grad, and autocast's `cached_cast` (aten/src/ATen/autocast_mode.cpp:
/// `arg.requires_grad() && arg.is_leaf() && !arg.is_view()`) does not cache its cast. Each
/// linear casts its weight again and the copy dies when the op returns.
pub fn local_param(w: &Tensor) -> Tensor {
    w.detach()
}

/// Whether transformers' plan shards (colwise / rowwise) the nn.Linear in `Block::proj`'s slot
/// `slot`. A dense model's plan shards every projection; Mixtral's, Qwen3-MoE's and
/// Qwen2-MoE's their attention's (slots 0-3), not Qwen2-MoE's shared expert and
/// `shared_expert_gate` (4-7); DeepSeek-V3's its dense layers' MLP (4-6) and `shared_experts`
/// (8-10), not its latent attention (0-3, 7). Only a sharded Linear takes the local path
/// without grad (`should_use_local_tensors`); the others are plain parameters.
pub fn in_plan(hf: &crate::model::hf::HfConfig, slot: usize) -> bool {
    match &hf.moe {
        None => true,
        Some(m) if m.deepseek.is_some() => matches!(slot, 4..=6 | 8..=10),
        Some(_) => slot < 4,
    }
}

impl TensorParallel {
    /// Rows `[first, first + rows)` of `n` this rank holds under Shard(0) (the callers
    /// require `n` to divide).
    pub fn rows(&self, n: usize) -> (usize, usize) {
        let rows = n / self.size;
        (self.rank * rows, rows)
    }
}

/// `ColwiseParallel`'s input: `DTensor.from_local(x, [Replicate()])` is a view. In backward
/// the input gradient is Partial and is all-reduced into a new tensor
/// (`_FromTorchTensorBackward`); the partial one dies when the node returns.
pub fn colwise_input(x: &Tensor) -> Tensor {
    if !needs_grad(&[x]) {
        return x.clone();
    }
    attach(
        x.detach(),
        "_FromTorchTensorBackward",
        &[x],
        Box::new(|g| {
            let reduced = {
                let _s = runtime::scope("all_reduce");
                g.clone_contiguous()
            };
            drop(g);
            vec![Some(reduced)]
        }),
    )
}

/// `RowwiseParallel`'s output (Partial → Replicate): all-reduced into a new tensor, the
/// partial sums dying at once. Backward passes the Replicate gradient through (DTensor
/// keeps a gradient of a Partial placement Replicate: no collective).
pub fn rowwise_output(y: Tensor) -> Tensor {
    let reduced = {
        let _g = runtime::no_grad();
        let _s = runtime::scope("all_reduce");
        y.clone_contiguous()
    };
    if !needs_grad(&[&y]) {
        return reduced;
    }
    let out = attach(reduced, "RedistributeBackward", &[&y], Box::new(|g| vec![Some(g)]));
    drop(y);
    out
}

/// `RowwiseParallel` on `nn.Embedding` (weight Shard(0), ids Replicate): `_MaskPartial`
/// masks the ids outside this rank's rows (`ids < first | ids >= first + rows`, bool),
/// shifts a clone of the ids into the shard, looks them up, zeroes the masked rows and
/// all-reduces the (B, S, d) result. The weight's gradient is the whole (V, d) table (see
/// [`Tensor::embedding_rows`]).
pub fn vocab_parallel_embedding(weight: &Tensor, ids: &Tensor, tp: TensorParallel, vocab: usize) -> Tensor {
    // Under sequence parallelism the partial lookup is reduce-scattered to Shard(1) instead.
    let (first, rows) = tp.rows(vocab);
    let mask = {
        let below = ids.lt_int(first as i64);
        let above = ids.ge_int((first + rows) as i64);
        below.logical_or(&above)
    };
    // `masked_tensor = tensor.clone() - offset` (the clone dies with the expression), then
    // `masked_tensor[mask] = 0` in place.
    let local_ids = {
        let c = ids.clone_contiguous();
        c.shard_ids(first as i64, rows as i64)
    };
    let partial = weight.embedding_rows(&local_ids, ids, first, vocab);
    drop(local_ids);
    // The mask buffer goes when the Partial placement is reduced.
    drop(mask);
    if tp.sequence {
        seq_scatter(partial, tp)
    } else {
        rowwise_output(partial)
    }
}

/// `ColwiseParallel(output_layouts=Replicate())` on the head: the local logits (B, S, V/tp)
/// are all-gathered into one (tp·B·S·V/tp) buffer and concatenated on the last dimension
/// into the (B, S, V) logits; the buffer, then the local logits, die. Backward takes this
/// rank's columns of the gradient as a new tensor (Replicate → Shard(-1): chunk, clone).
pub fn gather_logits(local: Tensor, tp: TensorParallel) -> Tensor {
    let mut shape = local.shape().to_vec();
    let cols = *shape.last().expect("logits have a last dimension");
    *shape.last_mut().expect("logits") = cols * tp.size;
    let full = {
        let _g = runtime::no_grad();
        all_gather_cat(&local, tp, -1)
    };
    if !needs_grad(&[&local]) {
        return full;
    }
    let rank = tp.rank;
    let out = attach(full, "RedistributeBackward", &[&local], Box::new(move |g| {
        let last = g.rank() as isize - 1;
        let shard = g.narrow(last, rank * cols, cols).clone_contiguous();
        drop(g);
        vec![Some(shard)]
    }));
    drop(local);
    out
}

/// `rowwise_split_input`'s input: `from_local(x, [Replicate()])` (a view), redistributed to
/// Shard(-1): this rank's columns copied out contiguous. Backward all-gathers the Shard(-1)
/// gradient back to Replicate (Shard → Replicate: the buffer, then the concatenation).
pub fn split_input(x: &Tensor, tp: TensorParallel) -> Tensor {
    let last = x.rank() as isize - 1;
    let cols = x.dim(last) / tp.size;
    let local = {
        let _g = runtime::no_grad();
        let _s = runtime::scope("split");
        x.narrow(last, tp.rank * cols, cols).clone_contiguous()
    };
    if !needs_grad(&[x]) {
        return local;
    }
    attach(local, "RedistributeBackward", &[x], Box::new(move |g| {
        let full = all_gather_cat(&g, tp, -1);
        drop(g);
        vec![Some(full)]
    }))
}

/// Shard(1) → Replicate on the sequence dimension (`PrepareModuleInput` before attention and
/// the MLP, the head's `input_layouts=Shard(1)`): `all_gather_into_tensor` fills a
/// size × the local tensor buffer, concatenated on dimension 1 into the (B, S, d) input, the
/// buffer freed at once. Backward reduce-scatters the (Partial) gradient: a contiguous copy
/// arranged for the scatter, this rank's (B, S / size, d) output, the copy then the gradient
/// freed.
pub fn seq_gather(x: &Tensor, tp: TensorParallel) -> Tensor {
    let full = {
        let _g = runtime::no_grad();
        all_gather_cat(x, tp, 1)
    };
    if !needs_grad(&[x]) {
        return full;
    }
    attach(full, "RedistributeBackward", &[x], Box::new(move |g| vec![Some(reduce_scatter_seq(g, tp))]))
}

/// Partial → Shard(1): RowwiseParallel's output under sequence parallelism (o/down, the
/// embedding). Backward all-gathers the (Shard(1)) gradient into (B, S, d).
pub fn seq_scatter(partial: Tensor, tp: TensorParallel) -> Tensor {
    let out = {
        let _g = runtime::no_grad();
        reduce_scatter_seq(partial.detach(), tp)
    };
    if !needs_grad(&[&partial]) {
        return out;
    }
    let out = attach(out, "RedistributeBackward", &[&partial], Box::new(move |g| {
        let full = all_gather_cat(&g, tp, 1);
        drop(g);
        vec![Some(full)]
    }));
    drop(partial);
    out
}

/// `all_gather_into_tensor` into a size × `x` buffer, then the pieces concatenated on `dim`
/// (what DTensor's Shard → Replicate does); the buffer is freed once the result exists.
fn all_gather_cat(x: &Tensor, tp: TensorParallel, dim: isize) -> Tensor {
    let _s = runtime::scope("all_gather");
    let buffer = Tensor::zeros_op(&[tp.size * x.numel()], x.dtype(), x.device(), "all_gather_into_tensor");
    let parts: Vec<Tensor> = (0..tp.size).map(|_| x.detach()).collect();
    let full = Tensor::cat(&parts, dim);
    drop(buffer);
    full
}

/// `reduce_scatter_tensor` on dimension 1: the input copied into scatter order, this rank's
/// part allocated, the copy and then the input (the caller's last handle) freed.
fn reduce_scatter_seq(x: Tensor, tp: TensorParallel) -> Tensor {
    let _s = runtime::scope("reduce_scatter");
    let copy = x.clone_contiguous();
    let mut shape = x.shape().to_vec();
    shape[1] /= tp.size;
    let out = Tensor::zeros_op(&shape, x.dtype(), x.device(), "reduce_scatter_tensor");
    drop(copy);
    drop(x);
    out
}

/// `moe_tp_experts`' input (the hidden states, the routing weights): transformers'
/// `_AllReduceBackward`, the input itself in forward (a view, nothing new); backward makes
/// the gradient contiguous (a copy only when it is not) and all-reduces it in place. The
/// experts' output is `_AllReduceForward`'s in-place all_reduce: nothing new either.
pub fn all_reduce_backward(x: &Tensor) -> Tensor {
    if !needs_grad(&[x]) {
        return x.clone();
    }
    attach(x.detach(), "_AllReduceBackwardBackward", &[x], Box::new(|g| {
        let g = g.contiguous();
        vec![Some(g)]
    }))
}

/// `DTensor.from_local(x, [Shard(1)])` in front of a `SequenceParallel` norm: a view;
/// backward hands the local gradient back (`_FromTorchTensorBackward`).
pub fn from_local(x: &Tensor) -> Tensor {
    if !needs_grad(&[x]) {
        return x.clone();
    }
    attach(x.detach(), "_FromTorchTensorBackward", &[x], Box::new(|g| vec![Some(g)]))
}

/// The plan applies to this model as PyTorch would run it, or the flag to blame.
pub fn validate(cfg: &crate::model::ModelConfig, tp: &TensorParallel) -> Result<(), crate::model::ConfigError> {
    use crate::model::ConfigError;
    let err = |m: String| Err(ConfigError::new("--tp", m));
    if tp.size == 0 || tp.rank >= tp.size {
        return err(format!("rank {} of {} ranks", tp.rank, tp.size));
    }
    if tp.size == 1 {
        return Ok(());
    }
    let Some(hf) = cfg.hf() else {
        return err(format!(
            "tensor parallelism is modelled for the hf flavour (transformers' nn.Linear / nn.Embedding modules, which torch's ColwiseParallel / RowwiseParallel shard); the {} reference model {}",
            cfg.flavour.name(),
            if cfg.flavour == crate::model::Flavour::Cs336 { "uses its own Linear module, which those styles refuse" } else { "ties its head to the embedding" }
        ));
    };
    let deepseek = hf.moe.as_ref().and_then(|m| m.deepseek.as_ref().map(|ds| (ds.dense_intermediate, m.shared_intermediate)));
    let sharded: Vec<(&str, usize)> = match deepseek {
        // DeepSeek-V3's attention is not in its plan (tp_plan="auto"): its heads stay whole.
        Some((dense, shared)) if tp.plan == TpPlan::Auto => vec![("dense layers' intermediate size", dense), ("shared experts' intermediate size", shared), ("vocabulary", cfg.vocab_size)],
        _ => vec![("attention heads", cfg.num_heads), ("key/value heads", cfg.num_kv_heads), ("intermediate size", cfg.d_ff), ("vocabulary", cfg.vocab_size)],
    };
    for (what, n) in sharded {
        if n % tp.size != 0 {
            return err(format!("{} ranks do not divide the {what} ({n}); uneven tensor-parallel shards are not modelled", tp.size));
        }
    }
    if let Some(m) = &hf.moe {
        use crate::model::hf::moe::MoeFamily;
        // tests/tp_hf_moe_grid.rs measures Mixtral's, Qwen3-MoE's, Qwen2-MoE's (its shared
        // expert is not in the plan: replicated) and DeepSeek-V3's plans. transformers 5.23's
        // GptOssConfig has no base_model_tp_plan: tp_plan="auto" shards its head alone.
        if m.family == MoeFamily::GptOss {
            return Err(ConfigError::new("--tp-plan", "transformers 5.23's GptOssConfig has no base_model_tp_plan (tp_plan=\"auto\" shards only lm_head, colwise_gather_output): not measured"));
        }
        if tp.plan == TpPlan::Torch {
            return Err(ConfigError::new("--tp-plan", format!("torch's Megatron-style plan has no style for {}'s 3-D experts; use --tp-plan auto (transformers' moe_tp_experts)", m.family.model_type())));
        }
        if m.intermediate % tp.size != 0 {
            return err(format!("{} ranks do not divide the experts' intermediate size ({}); uneven tensor-parallel shards are not modelled", tp.size, m.intermediate));
        }
        // The router's auxiliary loss needs nothing of the plan: the router is not in it
        // (replicated), so every rank keeps the full logits and load_balancing_loss_func runs
        // on plain tensors, no collective (dist_grid/tp_hf_aux_loss.json).
    }
    if tp.plan == TpPlan::Torch && hf.model_type.is_family() {
        return Err(ConfigError::new("--tp-plan", format!("torch's Megatron-style plan is written for Llama's separate q/k/v/gate/up projections; {} runs transformers' own base_model_tp_plan: use --tp-plan auto", hf.model_type.name())));
    }
    if cfg.tied_embeddings && tp.plan == TpPlan::Torch {
        return err("a tied head and embedding: torch's plan shards them as two parameters (RowwiseParallel and ColwiseParallel), which breaks the tie".into());
    }
    if tp.sequence && tp.plan == TpPlan::Auto {
        return Err(ConfigError::new("--sequence-parallel", "transformers' plan (--tp-plan auto) with sequence parallelism (its sequence_parallel style) is not measured; use --tp-plan torch on a Llama-style model"));
    }
    if tp.sequence {
        if hf.attn_implementation != crate::model::hf::AttnImplementation::Sdpa {
            return Err(ConfigError::new("--sequence-parallel", format!("needs --attn-implementation sdpa: transformers builds {}'s mask from the local sequence shard", hf.attn_implementation.name())));
        }
        if hf.logits_to_keep > 0 {
            return Err(ConfigError::new("--sequence-parallel", "--logits-to-keep slices the sequence, which is sharded under sequence parallelism: not modelled"));
        }
        if cfg.checkpoint != crate::model::Checkpoint::None {
            return Err(ConfigError::new("--sequence-parallel", "activation checkpointing under sequence parallelism is not modelled"));
        }
    }
    if hf.o_bias || hf.mlp_bias {
        return err("a bias on o_proj or down_proj (RowwiseParallel's Partial output plus a Replicate bias) is not modelled".into());
    }
    Ok(())
}

impl crate::model::ModelConfig {
    /// This rank's tensor-parallel group, when there is one to split over (two ranks or more).
    pub fn tp_group(&self) -> Option<TensorParallel> {
        self.tp.filter(|t| t.size > 1)
    }

    /// Sequence parallelism is on.
    pub fn sequence_parallel(&self) -> bool {
        self.tp_group().is_some_and(|t| t.sequence)
    }
}

/// The configuration of this rank's shards: local attention and key/value heads and
/// intermediate columns where their projections are colwise (a gathered projection's module
/// sees them all); the vocabulary stays whole: the head's logits are gathered.
pub fn local_config(cfg: &crate::model::ModelConfig) -> crate::model::ModelConfig {
    let mut c = cfg.clone();
    if let (Some(tp), Some(hf)) = (cfg.tp_group(), cfg.hf()) {
        // DeepSeek-V3's plan leaves its latent attention out: every head on every rank.
        let deepseek = hf.moe.as_ref().is_some_and(|m| m.deepseek.is_some());
        if !tp.style(hf.model_type, 0).gathers() && !deepseek {
            c.num_heads /= tp.size;
            c.num_kv_heads /= tp.size;
        }
        if !tp.style(hf.model_type, 4).gathers() {
            c.d_ff /= tp.size;
        }
        // moe_tp_experts: every expert's packed_colwise gate_up (E, 2·I/tp, d) and rowwise
        // down (E, d, I/tp); the router is not in the plan (whole on every rank).
        if let Some(m) = c.hf.as_mut().and_then(|h| h.moe.as_mut()) {
            m.intermediate /= tp.size;
            // DeepSeek-V3's dense first layers' MLP and its shared_experts MLP are colwise /
            // rowwise (Qwen2-MoE's shared expert is not in its plan: whole).
            if let Some(ds) = m.deepseek.as_mut() {
                ds.dense_intermediate /= tp.size;
                m.shared_intermediate /= tp.size;
            }
        }
    }
    c
}

/// The rows (colwise) or columns (rowwise) of slot `slot`'s weight this rank holds, of `n`
/// in the model's (local) configuration: a gathered or split projection is sharded although its
/// module sees the whole width.
pub fn weight_width(cfg: &crate::model::ModelConfig, slot: usize, n: usize) -> usize {
    match (cfg.tp_group(), cfg.hf()) {
        (Some(tp), Some(hf)) if matches!(tp.style(hf.model_type, slot), Style::ColwiseGather | Style::RowwiseSplit) => n / tp.size,
        _ => n,
    }
}
