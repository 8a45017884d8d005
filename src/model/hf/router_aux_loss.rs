//! The router's auxiliary loss (`output_router_logits`) of transformers 5.23's Mixtral,
//! Qwen3-MoE, Qwen2-MoE and gpt-oss: `capture_outputs`' hooks keep index 0 of every router's
//! output (its logits, (tokens, experts) in the model's dtype) until the model's output dies,
//! and `*ForCausalLM.forward` runs `load_balancing_loss_func` on them whenever the flag is on,
//! labels or not, adding `router_aux_loss_coef * aux_loss` to the loss (in place) only when
//! labels are given. The function is the same in the four modeling files. DeepSeek-V3 has no
//! such loss (its ForCausalLM never calls it).
//! The measured ground truth is tests/fixtures/moe_grid/aux_loss.json.
use std::cell::{Cell, RefCell};

use crate::engine::runtime::{py_frame, scope};
use super::moe::MoeFamily;
use crate::engine::{DType, Tensor};
use crate::model::py::moe_frames;

/// `capture_outputs`' collector for `router_logits`: on while the decoder's forward runs
/// (`_active_collector` is reset when it returns, so a checkpoint's recomputation in
/// backward records nothing).
#[derive(Default)]
pub struct RouterLogits {
    active: Cell<bool>,
    logits: RefCell<Vec<Tensor>>,
}

impl RouterLogits {
    pub fn open() -> RouterLogits {
        RouterLogits { active: Cell::new(true), logits: RefCell::new(Vec::new()) }
    }

    /// The forward hook on a router: a reference to its logits (nothing new).
    pub fn record(&self, logits: &Tensor) {
        if self.active.get() {
            self.logits.borrow_mut().push(logits.clone());
        }
    }

    /// The model's forward returned: the output's `router_logits` tuple.
    pub fn close(&self) -> Vec<Tensor> {
        self.active.set(false);
        std::mem::take(&mut *self.logits.borrow_mut())
    }
}

/// `total_rows`: a Python float without a mask, a 0-d tensor with one.
enum Rows {
    Float(f64),
    Tensor(Tensor),
}

/// `load_balancing_loss_func(gate_logits, num_experts, top_k, attention_mask)`: per layer a
/// softmax in the logits' dtype (saved for backward), its top-k, the expert counts (`histc` of
/// the ids as floats on CPU, int32 on CUDA: 4 bytes either way; with a mask, `scatter_add_`
/// of the mask repeated top-k times) and the probabilities summed over tokens in fp32, each
/// accumulated into an (experts,) fp32 sum; then the means and their dot product times
/// `num_experts`. A rebound local frees its previous tensor once the new one exists.
pub fn load_balancing_loss(family: MoeFamily, gate_logits: &[Tensor], experts: usize, top_k: usize, attention_mask: Option<&Tensor>) -> Tensor {
    let _s = scope("load_balancing_loss_func");
    let _f = py_frame(moe_frames::load_balancing_loss_func(family));
    let device = gate_logits[0].device();
    let mut tokens_sum = Tensor::zeros(&[experts], DType::F32, device);
    let mut prob_sum = Tensor::zeros(&[experts], DType::F32, device);
    let mut total_rows = Rows::Float(0.0);
    let flat_mask = attention_mask.map(|m| m.reshape(&[m.numel()]).to_dtype(DType::F32));
    let (mut routing_weights, mut top_values, mut selected): (Option<Tensor>, Option<Tensor>, Option<Tensor>) = (None, None, None);
    for layer_gate in gate_logits {
        // `softmax(layer_gate, dim=-1)`: under autocast CUDA's fp32_set_opt_dtype policy makes it
        // softmax(dtype=float32), which converts bf16 logits first and runs fp16 ones through
        // `_softmax(half_to_float=True)` with no copy (measured: aux_loss_autocast.json).
        routing_weights = Some(match crate::engine::autocast::active() {
            Some(_) if layer_gate.dtype() != DType::F32 => layer_gate.softmax_as(-1, DType::F32),
            _ => layer_gate.softmax(-1),
        });
        let rw = routing_weights.as_ref().expect("set above");
        let (values, index) = rw.topk_last(top_k);
        // `_, selected_experts = topk(...)`: the old `_` dies first, then the old indices.
        top_values = Some(values);
        selected = Some(index);
        let ids = selected.as_ref().expect("set above");
        let pairs = ids.numel();
        match &flat_mask {
            None => {
                let counts = {
                    let as_float = ids.reshape(&[pairs]).to_dtype(DType::F32);
                    as_float.histc(experts)
                };
                tokens_sum = accumulate(tokens_sum, counts);
                let per_expert = rw.to_dtype(DType::F32).sum_dim(0, false);
                prob_sum = accumulate(prob_sum, per_expert);
                total_rows = match total_rows {
                    Rows::Float(n) => Rows::Float(n + rw.dim(0) as f64),
                    Rows::Tensor(_) => unreachable!("a float without a mask"),
                };
            }
            Some(mask) => {
                let counts = Tensor::zeros(&[experts], DType::F32, device);
                {
                    let weights = mask.repeat_interleave(top_k, 0);
                    counts.scatter_add_1d_(&ids.reshape(&[pairs]), &weights);
                }
                tokens_sum = accumulate(tokens_sum, counts);
                let per_expert = {
                    let masked = rw.to_dtype(DType::F32).mul(&mask.unsqueeze(-1));
                    masked.sum_dim(0, false)
                };
                prob_sum = accumulate(prob_sum, per_expert);
                let n = mask.sum_all();
                total_rows = Rows::Tensor(match &total_rows {
                    // `0.0 + tensor`: a new 0-d tensor.
                    Rows::Float(x) => n.add_scalar(*x),
                    Rows::Tensor(t) => t.add(&n),
                });
            }
        }
    }
    let (tokens_per_expert, prob_per_expert) = match &total_rows {
        Rows::Float(n) => (tokens_sum.div_scalar(*n), prob_sum.div_scalar(*n)),
        Rows::Tensor(n) => (tokens_sum.div(n), prob_sum.div(n)),
    };
    let overall = tokens_per_expert.mul(&prob_per_expert.unsqueeze(0)).sum_all();
    let loss = overall.mul_scalar(experts as f64);
    drop((tokens_sum, prob_sum, total_rows, flat_mask, routing_weights, top_values, selected, tokens_per_expert, prob_per_expert, overall));
    loss
}

/// `sum = sum + term`: the term (a temporary) dies once the new sum exists, then the old sum.
fn accumulate(sum: Tensor, term: Tensor) -> Tensor {
    let new = sum.add(&term);
    drop(term);
    new
}

/// `loss += self.router_aux_loss_coef * aux_loss.to(loss.device)`: the product is a temporary,
/// the add in place.
pub fn add_to_loss(loss: Tensor, aux_loss: &Tensor, coef: f64) -> Tensor {
    let scaled = aux_loss.mul_scalar(coef);
    loss.add_same_(&scaled)
}
