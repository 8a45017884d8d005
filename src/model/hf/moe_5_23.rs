//! transformers 5.23.0's sparse MoE block, op for op: `MixtralSparseMoeBlock` /
//! `Qwen3MoeSparseMoeBlock` (the router `*TopKRouter` and the 3-D `*Experts`) and the three
//! experts implementations of `integrations/moe.py` (`grouped_mm_experts_forward`,
//! `batched_mm_experts_forward`, and the modeling file's own eager loop).
//!
//! Which tokens go where is `--routing`'s split ([`Routing::counts`]); PyTorch's run in
//! tools/pytorch/measure_moe.py is forced to the same split.
use super::moe::{ExpertsImplementation, MoeConfig, MoeFamily};
use super::router_aux_loss::RouterLogits;
use crate::engine::runtime::{self, py_frame, scope};
use crate::model::py::moe_frames;
use crate::engine::{DType, Tensor};
use crate::model::linear;
use crate::model::lora_params::{experts_wrapped, router_wrapped, Folded, ParamAdapters};

/// A sparse block's weights: the router (experts, hidden) and the experts' 3-D
/// `gate_up_proj` (experts, 2·I, hidden) and `down_proj` (experts, hidden, I).
pub struct MoeWeights<'a> {
    pub router: &'a Tensor,
    pub gate_up: &'a Tensor,
    pub down: &'a Tensor,
    /// Qwen2-MoE's shared expert (gate_proj, up_proj, down_proj, shared_expert_gate).
    pub shared: Option<&'a [Tensor; 4]>,
    /// peft's ParamWrapper adapters on the router and the experts (`--target-parameters`)
    /// and their scaling.
    pub lora: Option<(&'a ParamAdapters, f64)>,
    /// The shared expert's linears by slot (4-6: gate/up/down_proj, 7: shared_expert_gate),
    /// with peft's LoRA where adapted; None: plain.
    pub shared_proj: Option<SharedProj<'a>>,
    /// transformers' `moe_tp_experts` wraps the experts (`--tp-plan auto`): the weights are
    /// this rank's shards, the inputs pass through `_AllReduceBackward` (tp::all_reduce_backward).
    pub tp: bool,
}

/// A linear by its slot of `lora::SLOTS`: (slot, input, weight) → output.
pub type SharedProj<'a> = &'a dyn Fn(usize, &Tensor, &Tensor) -> Tensor;

/// `SparseMoeBlock.forward(hidden_states)` on (B, S, hidden); `record` is the
/// `output_router_logits` collector, handed the router's logits as it returns.
pub fn sparse_moe_block(m: &MoeConfig, w: &MoeWeights<'_>, x: &Tensor, record: Option<&RouterLogits>) -> Tensor {
    let (b, s, d) = (x.dim(0), x.dim(1), x.dim(2));
    let flat = x.view(&[b * s, d]);
    let (_, router_frame, _) = moe_frames::of(m.family);
    // Qwen2-MoE: `shared_expert_output = self.shared_expert(hidden_states)` first.
    let lin = |slot: usize, name: &str, x: &Tensor, wt: &Tensor| match w.shared_proj {
        Some(f) => f(slot, x, wt),
        None => linear(name, x, wt),
    };
    let shared_out = w.shared.map(|sw| {
        let _s = scope("shared_expert");
        let _f = py_frame(&moe_frames::QWEN2_MOE_MLP);
        // `act_fn(gate_proj(x)) * up_proj(x)`: gate_proj's output is freed once act_fn returns
        // (kept only if SiluBackward saves it), before up_proj runs.
        let act = {
            let gate = lin(4, "gate_proj", &flat, &sw[0]);
            gate.silu()
        };
        let prod = act.mul(&lin(5, "up_proj", &flat, &sw[1]));
        drop(act);
        lin(6, "down_proj", &prod, &sw[2])
    });
    // `_, top_k_weights, top_k_index = self.gate(...)`: the logits stay bound until forward returns.
    let (_logits, weights, index) = {
        let _f = py_frame(router_frame);
        let (adapter, scaling) = w.lora.map_or((None, 1.0), |(p, s)| (p.router.as_ref(), s));
        router_wrapped(adapter, scaling, w.router, |weight| router(m, weight, &flat))
    };
    if let Some(r) = record {
        r.record(&_logits);
    }
    let out = experts(m, w, &flat, &index, &weights);
    let (out, scaled) = match (w.shared, shared_out) {
        (Some(sw), Some(shared_out)) => {
            // shared_expert_output = sigmoid(shared_expert_gate(x)) * shared_expert_output;
            // expert_output = expert_output + shared_expert_output (a rebound name frees its
            // previous tensor; the scaled output lives until forward returns).
            let scaled = lin(7, "shared_expert_gate", &flat, &sw[3]).sigmoid().mul(&shared_out);
            drop(shared_out);
            (out.add(&scaled), Some(scaled))
        }
        _ => (out, None),
    };
    drop((flat, weights, index, scaled));
    out.reshape(&[b, s, d])
}

/// `self.experts(hidden_states, top_k_index, top_k_weights)` on (T, hidden): the
/// experts_implementation dispatches to integrations/moe.py's function, or to the modeling
/// file's own forward for eager.
pub fn experts(m: &MoeConfig, w: &MoeWeights<'_>, flat: &Tensor, index: &Tensor, weights: &Tensor) -> Tensor {
    let _s = scope("experts");
    let (_, _, experts_frame) = moe_frames::of(m.family);
    let _f = py_frame(match m.implementation_now() {
        ExpertsImplementation::GroupedMm => &moe_frames::GROUPED_MM_EXPERTS_FORWARD,
        ExpertsImplementation::BatchedMm => &moe_frames::BATCHED_MM_EXPERTS_FORWARD,
        ExpertsImplementation::Eager => experts_frame,
    });
    let (adapters, scaling) = w.lora.map_or((None, 1.0), |(p, s)| (Some(p), s));
    let (flat, weights) = if w.tp {
        (&crate::model::tp::all_reduce_backward(flat), &crate::model::tp::all_reduce_backward(weights))
    } else {
        (flat, weights)
    };
    experts_wrapped(adapters, scaling, false, w.gate_up, w.down, |gu, dn| match m.implementation_now() {
        ExpertsImplementation::GroupedMm => grouped_mm_experts(m, gu, dn, flat, index, weights),
        ExpertsImplementation::BatchedMm => batched_mm_experts(m, gu, dn, flat, index, weights),
        ExpertsImplementation::Eager => eager_experts(m, gu, dn, flat, index, weights),
    })
}

/// `*TopKRouter.forward`: logits (T, E) in the model's dtype, softmax in fp32, top-k, the
/// renormalisation (`/=` the sum: in place in PyTorch; out of place here, the same bytes
/// under autograd, which saves the original values either way), Qwen3's cast back.
fn router(m: &MoeConfig, weight: &Tensor, x: &Tensor) -> (Tensor, Tensor, Tensor) {
    let _s = scope("gate");
    let logits = linear("gate", x, weight);
    let probs = logits.softmax_as(-1, DType::F32);
    let (mut values, index) = probs.topk_last(m.top_k);
    drop(probs);
    if m.family == MoeFamily::Mixtral || m.norm_topk_prob {
        let sum = values.sum_dim(-1, true);
        values = values.div(&sum);
    }
    if m.family != MoeFamily::Mixtral {
        values = values.to_dtype(logits.dtype());
    }
    (logits, values, index)
}

/// `_default_apply_gate`: `gate, up = x.chunk(2, -1)`; `act_fn(gate) * up`.
fn apply_gate(x: &Tensor) -> Tensor {
    let i = x.dim(-1) / 2;
    let parts = x.split_with_sizes(&[i, i], -1);
    parts[0].silu().mul(&parts[1])
}

fn tokens_per_expert(m: &MoeConfig, tokens: usize) -> Vec<usize> {
    m.routing.counts(tokens, m.top_k, m.experts).expect("the options checked the routing")
}

/// `grouped_mm_experts_forward`: sort the (token, expert) pairs by expert, gather the
/// hidden states, two grouped matmuls over every expert's rows, weight, unpermute, sum the
/// top-k rows of each token. Python's locals (`selected_hidden_states_g`, the last
/// `proj_out`, `histc_input` …) live until the function returns; a rebound name frees its
/// previous tensor once the new one exists.
fn grouped_mm_experts(m: &MoeConfig, gu: &Folded<'_>, dn: &Folded<'_>, x: &Tensor, index: &Tensor, weights: &Tensor) -> Tensor {
    let (t, k, d) = (x.dim(0), m.top_k, x.dim(1));
    let pairs = t * k;
    let sample_weights = weights.reshape(&[pairs]);
    let expert_ids = index.reshape(&[pairs]);
    let (expert_ids_g, perm) = expert_ids.sort_1d();
    let selected = {
        let token = perm.floor_div_int(k as i64);
        x.index_along(0, &token)
    };
    let sample_weights_g = sample_weights.index_along(0, &perm);
    // histc over the ids as floats on CPU (ints on CUDA), then int32 offsets.
    let histc_input = expert_ids_g.to_dtype(DType::F32);
    let tokens_per_expert = histc_input.histc(m.experts);
    let offsets = tokens_per_expert.cumsum_i32();
    // `selected_weights = self.gate_up_proj` (a wrapped parameter folds here), then the matmul.
    let gate_up = gu.get();
    let up = selected.to_dtype(gate_up.dtype()).grouped_mm(&gate_up.transpose(-2, -1), &offsets);
    let act = apply_gate(&up);
    drop(up);
    let down_w = dn.get();
    let down = act.to_dtype(down_w.dtype()).grouped_mm(&down_w.transpose(-2, -1), &offsets);
    drop(act);
    let weighted = down.mul(&sample_weights_g.unsqueeze(-1));
    // inv_perm = empty_like(perm); inv_perm[perm] = arange(S)
    let inv_perm = perm.empty_like();
    inv_perm.index_put_int_(&perm, &Tensor::arange(pairs, x.device()));
    let unpermuted = weighted.index_along(0, &inv_perm);
    drop(weighted);
    let out = unpermuted.view(&[t, k, d]).sum_dim(1, false).to_dtype(x.dtype());
    drop((sample_weights, expert_ids, expert_ids_g, perm, selected, sample_weights_g, histc_input, tokens_per_expert, offsets, down, inv_perm, unpermuted));
    out
}

/// `batched_mm_experts_forward`: every token repeated k times, each (token, expert) pair's
/// weights gathered (S, 2·I, hidden) and (S, hidden, I), bmm of each, weighted, summed.
/// `selected_weights` holds the gate_up gather until the down gather replaces it.
fn batched_mm_experts(m: &MoeConfig, gu: &Folded<'_>, dn: &Folded<'_>, x: &Tensor, index: &Tensor, weights: &Tensor) -> Tensor {
    let (t, k, d) = (x.dim(0), m.top_k, x.dim(1));
    let pairs = t * k;
    let selected = x.repeat_interleave(k, 0);
    let sample_weights = weights.reshape(&[pairs]);
    let expert_ids = index.reshape(&[pairs]);
    let up_weights = gu.get().index_along(0, &expert_ids);
    let up = up_weights.bmm(&selected.unsqueeze(-1)).squeeze(-1);
    let act = apply_gate(&up);
    drop(up);
    let down_weights = dn.get().index_along(0, &expert_ids);
    drop(up_weights);
    let down = down_weights.bmm(&act.unsqueeze(-1)).squeeze(-1);
    drop(act);
    let weighted = down.mul(&sample_weights.unsqueeze(-1));
    let out = weighted.view(&[t, k, d]).sum_dim(1, false).to_dtype(x.dtype());
    drop((selected, sample_weights, expert_ids, down_weights, down, weighted));
    out
}

/// What one pass of the eager loop binds: Python frees each when the next pass rebinds it
/// (or the function returns).
#[derive(Default)]
struct LoopLocals {
    top_k_pos: Option<Tensor>,
    token_idx: Option<Tensor>,
    current_state: Option<Tensor>,
    gate: Option<Tensor>,
    up: Option<Tensor>,
    current_hidden_states: Option<Tensor>,
}

/// The modeling file's eager `*Experts.forward`: zeros for the output, the one-hot expert
/// mask (T, k, E + 1) under no_grad, then for each expert that was hit: `torch.where` of its
/// mask row, the gather of its tokens, its two linears, the weighting and `index_add_`.
fn eager_experts(m: &MoeConfig, gu: &Folded<'_>, dn: &Folded<'_>, x: &Tensor, index: &Tensor, weights: &Tensor) -> Tensor {
    let (t, e) = (x.dim(0), m.experts);
    let counts = tokens_per_expert(m, t);
    let mut out = Tensor::zeros(x.shape(), x.dtype(), x.device());
    let (mask, hit) = {
        let _g = runtime::no_grad();
        let mask = index.one_hot(e + 1).permute(&[2, 1, 0]);
        let per = Tensor::zeros_op(&[e + 1], DType::I64, x.device(), "sum");
        let any = Tensor::zeros_op(&[e + 1], DType::Bool, x.device(), "gt");
        drop(per);
        let hit = any.nonzero_known(counts.iter().filter(|&&n| n > 0).count());
        (mask, hit)
    };
    let mut l = LoopLocals::default();
    for (expert, &n) in counts.iter().enumerate().filter(|(_, &n)| n > 0) {
        let _s = scope(&format!("experts.{expert}"));
        // top_k_pos, token_idx = torch.where(expert_mask[expert_idx]): nonzero (n, 2), unbound.
        let rows = mask.select(0, expert).nonzero_known(n);
        l.top_k_pos = Some(rows.select(1, 0));
        l.token_idx = Some(rows.select(1, 1));
        drop(rows);
        let token_idx = l.token_idx.clone().expect("set above");
        l.current_state = Some(x.index_along(0, &token_idx));
        let gate_up = linear("gate_up_proj", l.current_state.as_ref().expect("set above"), &gu.get().select(0, expert));
        let i = gate_up.dim(-1) / 2;
        let mut parts = gate_up.split_with_sizes(&[i, i], -1).into_iter();
        drop(gate_up);
        (l.gate, l.up) = (parts.next(), parts.next());
        let act = l.gate.as_ref().expect("chunk").silu().mul(l.up.as_ref().expect("chunk"));
        l.current_hidden_states = Some(act);
        let h = linear("down_proj", l.current_hidden_states.as_ref().expect("set above"), &dn.get().select(0, expert));
        l.current_hidden_states = Some(h);
        let scale = weights.index_2d(&token_idx, l.top_k_pos.as_ref().expect("set above")).unsqueeze(-1);
        let weighted = l.current_hidden_states.as_ref().expect("set above").mul(&scale);
        drop(scale);
        l.current_hidden_states = Some(weighted);
        let src = l.current_hidden_states.as_ref().expect("set above").to_dtype(out.dtype());
        out = out.index_add_0(&token_idx, &src);
        drop((src, token_idx));
    }
    drop((mask, hit, l));
    out
}
