//! `GptOssForCausalLM` (transformers 5.23.0, `models/gpt_oss/modeling_gpt_oss.py` and the biased
//! paths of `integrations/moe.py`), op for op, where it differs from the Llama layer of
//! `transformers_5_23.rs`: the layer's weights, the rotary tables (cos/sin of head_dim/2,
//! no concatenation) and `_apply_rotary_emb` (chunk, two products per half, cat), eager
//! attention with the sinks (`cat([weights, sinks])`, minus the row max, softmax, the sink
//! column dropped by a slice), the decoder layer (`hidden_states, _ = self.mlp(...)` frees
//! the attention weights when the MLP returns), `GptOssMLP` (router, experts) and the experts
//! implementations, all three of which run on CPU: the modeling file's eager loop,
//! `grouped_mm_experts_forward` (bias gathers, `out.add_(bias)` in place, the clamped SwiGLU)
//! and `batched_mm_experts_forward` (its bias added in place on a squeezed bmm output: a view,
//! so the backward runs AsStridedBackward0 and CopySlices).
use super::{frames, repeat_kv, Block};
use crate::engine::runtime::{self, py_frame, scope};
use crate::engine::{DType, Tensor};
use crate::model::hf::gpt_oss::{GptOssParts, GptOssWeights};
use crate::model::hf::moe::{ExpertsImplementation, MoeConfig};
use crate::model::init::Init;
use crate::model::lora_params::{experts_wrapped, router_wrapped, Folded};
use crate::model::py::{hf_frames::HfFrames, moe_frames};
use crate::model::{Builder, Layer, Model, Projection};
use crate::record::Category;
use std::rc::Rc;

/// One decoder layer's weights in registration order: q/k/v/o (weight, then bias when
/// `attention_bias`), `self_attn.sinks` (heads), `mlp.router` (weight (experts, hidden), bias),
/// `mlp.experts` (`gate_up_proj` (experts, hidden, 2·I), its bias, `down_proj` (experts, I,
/// hidden), its bias), then the two norms. `dims` is [q, kv, hidden, heads]. `lin` makes the
/// attention's nn.Linear modules (slot, name, rows, cols, bias): plain, or bitsandbytes' (the
/// only modules it quantizes here: the router and the experts are no nn.Linear).
/// `router_bias_trains`: peft's `bias` option leaves `mlp.router.bias` trainable
/// (`LoraConfig::trains_router_bias`).
pub(super) fn layer(b: &mut Builder, p: &dyn Fn(&str) -> String, m: &MoeConfig, bias: bool, dims: [usize; 4], router_bias_trains: bool, lin: &mut super::LinearMaker<'_>) -> Layer {
    let [q, kv, d, heads] = dims;
    let (e, i) = (m.experts, m.intermediate);
    let std = Init::Normal { std: 0.02 };
    let zero = Init::Normal { std: 0.0 };
    let (wq, bq) = lin(b, 0, "self_attn.q_proj", q, d, bias);
    let (wk, bk) = lin(b, 1, "self_attn.k_proj", kv, d, bias);
    let (wv, bv) = lin(b, 2, "self_attn.v_proj", kv, d, bias);
    let (wo, bo) = lin(b, 3, "self_attn.o_proj", d, q, bias);
    let sinks = b.param(p("self_attn.sinks"), &[heads], std);
    let router = b.param(p("mlp.router.weight"), &[e, d], std);
    let router_bias = {
        let frozen = b.frozen && !router_bias_trains;
        b.param_as(p("mlp.router.bias"), &[e], std, b.dtype, frozen)
    };
    let gate_up = b.param(p("mlp.experts.gate_up_proj"), &[e, d, 2 * i], std);
    let gate_up_bias = b.param(p("mlp.experts.gate_up_proj_bias"), &[e, 2 * i], zero);
    let down = b.param(p("mlp.experts.down_proj"), &[e, i, d], std);
    let down_bias = b.param(p("mlp.experts.down_proj_bias"), &[e, d], zero);
    let attn_norm = b.param(p("input_layernorm.weight"), &[d], Init::Ones);
    let ffn_norm = b.param(p("post_attention_layernorm.weight"), &[d], Init::Ones);
    let extra = super::HfLayer {
        qkv_bias: bq.map(|bq| [bq, bk.expect("k bias"), bv.expect("v bias")]),
        o_bias: bo,
        router: Some(router),
        gpt_oss: Some(GptOssWeights { sinks, router_bias, gate_up_bias, down_bias }),
        ..super::HfLayer::default()
    };
    Layer {
        attn_norm,
        qkv: Projection::Separate(vec![("q_proj", wq), ("k_proj", wk), ("v_proj", wv)]),
        o: wo,
        ffn_norm,
        gate_up: Projection::Fused("gate_up_proj", gate_up, vec![i, i]),
        down,
        hf: Some(Rc::new(extra)),
    }
}

/// `GptOssRotaryEmbedding.forward` (no_grad): `freqs = position_ids[..., None].float() *
/// inv_freq`, `cos = freqs.cos() * attention_scaling` (likewise sin), each cast to the
/// activations' dtype: (1, S, head_dim/2).
pub(super) fn rotary(m: &Model, position_ids: &Tensor, dtype: DType) -> (Tensor, Tensor) {
    let _s = scope("rotary_emb");
    let _f = py_frame(&moe_frames::GPT_OSS.rotary);
    let _g = runtime::no_grad();
    let (pb, s) = (position_ids.dim(0), position_ids.dim(1));
    let inv_freq = m.rope_buffer.as_ref().expect("inv_freq buffer");
    let half = inv_freq.dim(0);
    let freqs = {
        let pos = position_ids.view(&[pb, s, 1]).to_dtype(DType::F32);
        pos.mul(&inv_freq.view(&[1, 1, half]))
    };
    // YaRN's attention_scaling (1 for the default rope): the product is a new tensor either way.
    let cos = freqs.cos().mul_scalar(1.0);
    let sin = freqs.sin().mul_scalar(1.0);
    let out = {
        let _c = runtime::category(Category::Activation);
        (cos.to_dtype(dtype), sin.to_dtype(dtype))
    };
    drop((freqs, cos, sin));
    out
}

/// `_apply_rotary_emb(x, cos, sin)` with cos/sin (1, 1, S, d/2): `first, second = chunk(x, 2)`,
/// `first_ = first * cos - second * sin`, `second_ = second * cos + first * sin`, each product
/// dead once its sum exists, then `cat((first_, second_), -1)`.
pub(super) fn apply_rope(fr: &'static HfFrames, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let _f = py_frame(&fr.rotate_half);
    let h = x.dim(-1) / 2;
    let parts = x.split_with_sizes(&[h, h], -1);
    let (first, second) = (&parts[0], &parts[1]);
    let a = {
        let p = first.mul(cos);
        let q = second.mul(sin);
        p.sub(&q)
    };
    let b = {
        let p = second.mul(cos);
        let q = first.mul(sin);
        p.add(&q)
    };
    let out = Tensor::cat(&[a, b], -1);
    drop(parts);
    out
}

fn weights(blk: &Block) -> &GptOssWeights {
    blk.layer.hf.as_ref().and_then(|h| h.gpt_oss.as_ref()).expect("a gpt_oss layer")
}

fn parts(blk: &Block) -> (&MoeConfig, &GptOssParts) {
    let m = blk.hf().moe.as_ref().expect("an MoE model");
    (m, m.gpt_oss.as_ref().expect("gpt_oss parts"))
}

impl Block {
    /// `GptOssDecoderLayer.forward`: Llama's, except that the MLP returns the router scores
    /// into `_`, which frees the attention weights `_` held.
    pub(super) fn gpt_oss_layer(&self, x: Tensor) -> Tensor {
        let fr = frames(self.hf());
        let _f = py_frame(&fr.decoder_layer);
        let (l, eps) = (&self.layer, self.cfg.norm_eps);
        let residual = x;
        let h = super::rms_norm(fr, "input_layernorm", &residual, &l.attn_norm, eps);
        let (a, attn_weights) = self.attention(&h);
        drop(h);
        let h = residual.add(&a);
        drop(a);
        let residual = h;
        let h = super::rms_norm(fr, "post_attention_layernorm", &residual, &l.ffn_norm, eps);
        let (out, scores) = self.gpt_oss_mlp(&h);
        // `hidden_states, _ = self.mlp(hidden_states)`: the norm's output, then the attention
        // weights, die at the rebinding.
        drop(h);
        drop(attn_weights);
        let y = residual.add(&out);
        drop((out, scores, residual));
        y
    }

    /// `eager_attention_forward` with `s_aux` (the sinks): weights = q·kᵀ·scale + mask (bound to
    /// `attn_weights` until the dropout line rebinds it), `cat([weights, sinks])` (B, h, S,
    /// kv + 1), minus its row max (its indices die with the namedtuple; `combined_logits` is a local until the
    /// function returns), softmax in the same dtype, `probs[..., :-1]` (a view; dropout p=0
    /// and `.to` of the same dtype return it), its matmul with the values.
    pub(super) fn gpt_oss_eager(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> (Tensor, Option<Tensor>) {
        let _s = scope("attention");
        let fr = frames(self.hf());
        let _f = py_frame(&fr.eager_attention_forward);
        let scaling = (self.hf().head_dim as f64).powf(-0.5);
        let n_rep = self.cfg.num_heads / self.cfg.num_kv_heads;
        let ks = repeat_kv(fr, k, n_rep);
        let vs = repeat_kv(fr, v, n_rep);
        let mut w = q.matmul(&ks.transpose(2, 3)).mul_scalar(scaling);
        if let Some(m) = &self.mask {
            w = w.add(m);
        }
        let (b, h, s, kv) = (w.dim(0), w.dim(1), w.dim(2), w.dim(3));
        let sinks = weights(self).sinks.reshape(&[1, h, 1, 1]).expand(&[b, h, s, 1]);
        let cat = Tensor::cat(&[w.clone(), sinks], -1);
        let combined = {
            // `.max(dim=-1, keepdim=True).values`: the namedtuple, and with it the indices
            // (unless MaxBackward0 saved them), dies before the subtraction.
            let (max, indices) = cat.max_dim(-1, true);
            drop(indices);
            let c = cat.sub(&max);
            drop(max);
            c
        };
        drop(cat);
        // `softmax(..., dtype=combined_logits.dtype)`: autocast leaves it in that type.
        let probs = combined.softmax_as(-1, combined.dtype());
        let sliced = probs.slice(-1, 0, kv, 1);
        drop(probs);
        // `.to(value_states.dtype)`: the slice itself, unless autocast made the values bf16
        // while the weights are fp32 (the mask's type): then a copy, the slice (and `probs`)
        // still bound until the function returns.
        let scores = sliced.to_dtype(vs.dtype());
        drop(w);
        let out = scores.matmul(&vs);
        let out = out.transpose(1, 2).contiguous();
        drop((ks, vs, combined, sliced));
        (out, Some(scores))
    }

    /// `GptOssMLP.forward`: the (T, hidden) view, the router (its logits bound to `_` and the
    /// indices until the function returns), the experts; returns the output and the scores.
    fn gpt_oss_mlp(&self, x: &Tensor) -> (Tensor, Tensor) {
        let _s = scope("mlp");
        let fr = frames(self.hf());
        let _f = py_frame(&fr.mlp);
        let (m, g) = parts(self);
        let w = weights(self);
        let (b, s, d) = (x.dim(0), x.dim(1), x.dim(2));
        let flat = x.reshape(&[b * s, d]);
        let router = self.layer.hf.as_ref().and_then(|h| h.router.as_ref()).expect("router weight");
        // peft's ParamWrapper adapters (`--target-parameters`) and their scaling.
        let lora = self.layer.hf.as_ref().and_then(|h| h.param_lora.as_ref()).zip(self.hf().lora.as_ref().map(|l| l.scaling()));
        let (logits, scores, index) = {
            let _s = scope("router");
            let _f = py_frame(&moe_frames::GPT_OSS_ROUTER);
            let (adapter, scaling) = lora.map_or((None, 1.0), |(p, s)| (p.router.as_ref(), s));
            // F.linear(x, weight, bias); topk of the logits; softmax over the top-k values in
            // their own dtype (the values die when the router returns).
            router_wrapped(adapter, scaling, router, |weight| {
                let logits = flat.linear_bias(weight, &w.router_bias);
                let (values, index) = logits.topk_last(m.top_k);
                let scores = values.softmax_as(-1, values.dtype());
                drop(values);
                (logits, scores, index)
            })
        };
        if let Some(r) = &self.router_logits {
            r.record(&logits);
        }
        let out = {
            let _s = scope("experts");
            let _f = py_frame(match m.implementation_now() {
                ExpertsImplementation::GroupedMm => &moe_frames::GROUPED_MM_EXPERTS_FORWARD,
                ExpertsImplementation::BatchedMm => &moe_frames::BATCHED_MM_EXPERTS_FORWARD,
                ExpertsImplementation::Eager => &moe_frames::GPT_OSS_EXPERTS,
            });
            let (adapters, scaling) = lora.map_or((None, 1.0), |(p, s)| (Some(p), s));
            // GptOssExperts is `is_transposed`: (E, in, out).
            experts_wrapped(adapters, scaling, true, self.layer.gate_up.weights()[0], &self.layer.down, |gate_up, down| {
                let ex = Experts { m, g, w, gate_up, down };
                match m.implementation_now() {
                    ExpertsImplementation::GroupedMm => ex.grouped_mm(&flat, &index, &scores),
                    ExpertsImplementation::Eager => ex.eager(&flat, &index, &scores),
                    ExpertsImplementation::BatchedMm => ex.batched_mm(&flat, &index, &scores),
                }
            })
        };
        drop(flat);
        let out = out.reshape(&[b, s, d]);
        drop((logits, index));
        (out, scores)
    }
}

/// The experts' weights and options.
struct Experts<'a> {
    m: &'a MoeConfig,
    g: &'a GptOssParts,
    w: &'a GptOssWeights,
    /// (experts, hidden, 2·I) and (experts, I, hidden), as the module reads them (a wrapped
    /// parameter folds its LoRA at the first read).
    gate_up: &'a Folded<'a>,
    down: &'a Folded<'a>,
}

/// What one pass of the eager loop binds; Python frees each when the next pass rebinds it.
#[derive(Default)]
struct LoopLocals {
    top_k_pos: Option<Tensor>,
    token_idx: Option<Tensor>,
    current_state: Option<Tensor>,
    gate_up: Option<Tensor>,
    gated_output: Option<Tensor>,
    out: Option<Tensor>,
    weighted_output: Option<Tensor>,
}

impl Experts<'_> {
    /// `GptOssExperts._apply_gate`: `gate, up = x[..., ::2], x[..., 1::2]` (strided views),
    /// `gate.clamp(max=limit)`, `up.clamp(-limit, limit)`, `glu = gate * sigmoid(gate * alpha)`,
    /// `(up + 1) * glu`; the locals die when it returns.
    fn apply_gate(&self, x: &Tensor) -> Tensor {
        let _f = py_frame(&moe_frames::GPT_OSS_APPLY_GATE);
        let (n2, limit) = (x.dim(-1), self.g.swiglu_limit);
        let gate = x.slice(-1, 0, n2, 2).clamp_bounds(None, Some(limit));
        let up = x.slice(-1, 1, n2, 2).clamp_bounds(Some(-limit), Some(limit));
        let glu = {
            let s = {
                let scaled = gate.mul_scalar(self.g.swiglu_alpha);
                scaled.sigmoid()
            };
            gate.mul(&s)
        };
        let out = {
            let up1 = up.add_scalar(1.0);
            up1.mul(&glu)
        };
        drop((gate, up, glu));
        out
    }

    fn counts(&self, tokens: usize) -> Vec<usize> {
        self.m.routing.counts(tokens, self.m.top_k, self.m.experts).expect("the options checked the routing")
    }

    /// `GptOssExperts.forward` (eager): zeros for the output, the one-hot mask (T, k, E) under
    /// no_grad, then per expert that was hit: `torch.where` of its mask row, the gather of its
    /// tokens, `x @ gate_up_proj[e] + bias[e]`, the gate, `@ down_proj[e] + bias[e]`, the
    /// weighting by the scores and `index_add_`.
    fn eager(&self, x: &Tensor, index: &Tensor, scores: &Tensor) -> Tensor {
        let (t, e) = (x.dim(0), self.m.experts);
        let counts = self.counts(t);
        let mut next = Tensor::zeros(x.shape(), x.dtype(), x.device());
        let (mask, hit) = {
            let _g = runtime::no_grad();
            let mask = index.one_hot(e).permute(&[2, 1, 0]);
            let per = Tensor::zeros_op(&[e], DType::I64, x.device(), "sum");
            let any = Tensor::zeros_op(&[e], DType::Bool, x.device(), "gt");
            drop(per);
            let hit = any.nonzero_known(counts.iter().filter(|&&n| n > 0).count());
            (mask, hit)
        };
        let mut l = LoopLocals::default();
        for (expert, &n) in counts.iter().enumerate().filter(|(_, &n)| n > 0) {
            let _s = scope(&format!("experts.{expert}"));
            let rows = mask.select(0, expert).nonzero_known(n);
            l.top_k_pos = Some(rows.select(1, 0));
            l.token_idx = Some(rows.select(1, 1));
            drop(rows);
            let token_idx = l.token_idx.clone().expect("set above");
            l.current_state = Some(x.index_along(0, &token_idx));
            let gate_up = {
                let mm = l.current_state.as_ref().expect("set above").matmul(&self.gate_up.get().select(0, expert));
                mm.add(&self.w.gate_up_bias.select(0, expert))
            };
            l.gate_up = Some(gate_up);
            l.gated_output = Some(self.apply_gate(l.gate_up.as_ref().expect("set above")));
            let out = {
                let mm = l.gated_output.as_ref().expect("set above").matmul(&self.down.get().select(0, expert));
                mm.add(&self.w.down_bias.select(0, expert))
            };
            l.out = Some(out);
            let weighted = {
                let scale = scores.index_2d(&token_idx, l.top_k_pos.as_ref().expect("set above")).unsqueeze(-1);
                l.out.as_ref().expect("set above").mul(&scale)
            };
            l.weighted_output = Some(weighted);
            // `.to(hidden_states.dtype)`: the same dtype, the same tensor.
            next = next.index_add_0(&token_idx, l.weighted_output.as_ref().expect("set above"));
            drop(token_idx);
        }
        drop((mask, hit, l));
        next
    }

    /// `_batched_linear(x, w, bias, is_transposed=True)`: `bmm(x.unsqueeze(1), w).squeeze(1)`,
    /// then `out.add_(bias)` in place on that view.
    fn batched_linear(x: &Tensor, w: &Tensor, bias: &Tensor) -> Tensor {
        let base = x.unsqueeze(1).bmm(w);
        let out = base.squeeze(1);
        out.add_on_view_(&base, bias)
    }

    /// `batched_mm_experts_forward` with `is_transposed` and `has_bias`: every token repeated
    /// k times, each pair's weights and biases gathered (the up ones die when the down
    /// gathers rebind them), two batched linears, the gate, the weighting and the sum.
    fn batched_mm(&self, x: &Tensor, index: &Tensor, scores: &Tensor) -> Tensor {
        let (t, k, d) = (x.dim(0), self.m.top_k, x.dim(1));
        let pairs = t * k;
        let selected = x.repeat_interleave(k, 0);
        let sample_weights = scores.reshape(&[pairs]);
        let expert_ids = index.reshape(&[pairs]);
        let mut weights = self.gate_up.get().index_along(0, &expert_ids);
        let mut biases = self.w.gate_up_bias.index_along(0, &expert_ids);
        let up = Self::batched_linear(&selected, &weights, &biases);
        let act = self.apply_gate(&up);
        drop(up);
        weights = self.down.get().index_along(0, &expert_ids);
        biases = self.w.down_bias.index_along(0, &expert_ids);
        let down = Self::batched_linear(&act, &weights, &biases);
        drop(act);
        let weighted = down.mul(&sample_weights.unsqueeze(-1));
        let out = weighted.view(&[t, k, d]).sum_dim(1, false).to_dtype(x.dtype());
        drop((selected, sample_weights, expert_ids, weights, biases, down, weighted));
        out
    }

    /// `grouped_mm_experts_forward` with `is_transposed` and `has_bias`: the sort by expert,
    /// the gathers, `gate_up_proj_bias[expert_ids_g]` before the grouped matmul (the weights
    /// as stored, no transpose) and `out.add_(bias)` in place, the gate, the down bias gather
    /// (the up one dies at the rebinding), the second grouped matmul and its bias, the
    /// weighting, the unpermute and the sum over the top-k rows.
    fn grouped_mm(&self, x: &Tensor, index: &Tensor, scores: &Tensor) -> Tensor {
        let (t, k, d) = (x.dim(0), self.m.top_k, x.dim(1));
        let pairs = t * k;
        let sample_weights = scores.reshape(&[pairs]);
        let expert_ids = index.reshape(&[pairs]);
        let (expert_ids_g, perm) = expert_ids.sort_1d();
        let selected = {
            let token = perm.floor_div_int(k as i64);
            x.index_along(0, &token)
        };
        let sample_weights_g = sample_weights.index_along(0, &perm);
        let histc_input = expert_ids_g.to_dtype(DType::F32);
        let tokens_per_expert = histc_input.histc(self.m.experts);
        let offsets = tokens_per_expert.cumsum_i32();
        // `selected_weights = self.gate_up_proj` (a wrapped parameter folds here), then the bias gather.
        let gate_up = self.gate_up.get();
        let mut biases = self.w.gate_up_bias.index_along(0, &expert_ids_g);
        let up = selected.to_dtype(gate_up.dtype()).grouped_mm(gate_up, &offsets).add_same_(&biases);
        let act = self.apply_gate(&up);
        drop(up);
        let down_w = self.down.get();
        biases = self.w.down_bias.index_along(0, &expert_ids_g);
        let down = act.to_dtype(down_w.dtype()).grouped_mm(down_w, &offsets).add_same_(&biases);
        drop(act);
        let weighted = down.mul(&sample_weights_g.unsqueeze(-1));
        let inv_perm = perm.empty_like();
        inv_perm.index_put_int_(&perm, &Tensor::arange(pairs, x.device()));
        let unpermuted = weighted.index_along(0, &inv_perm);
        drop(weighted);
        let out = unpermuted.view(&[t, k, d]).sum_dim(1, false).to_dtype(x.dtype());
        drop((sample_weights, expert_ids, expert_ids_g, perm, selected, sample_weights_g, histc_input, tokens_per_expert, offsets, biases, down, inv_perm, unpermuted));
        out
    }
}
