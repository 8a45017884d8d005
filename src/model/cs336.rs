//! The cs336 flavour (Stanford CS336 assignment 2), op for op as reference-models.md §1.
use super::init::Init;
use super::py::cs336 as py;
use super::{Weights, Attention, Builder, Layer, Model, ModelConfig, Projection};
use crate::engine::checkpoint::checkpoint;
use std::rc::Rc;
use crate::engine::runtime::{self, py_frame, scope};
use crate::engine::{DType, Device, Tensor};
use crate::record::Category;

pub(crate) fn build(cfg: &ModelConfig, device: Device, dtype: DType, rng: &mut super::init::Rng) -> Model {
    let (d, f, v) = (cfg.d_model, cfg.d_ff, cfg.vocab_size);
    let mut b = Builder { device, dtype, rng, params: Vec::new(), frozen: false };
    let lin_std = |din: usize, dout: usize| Init::TruncNormal { std: (2.0 / (din + dout) as f64).sqrt(), clip: 3.0 };
    let embedding = b.param("token_embeddings.weight".into(), &[v, d], Init::TruncNormal { std: 1.0, clip: 3.0 });
    let mut layers = Vec::with_capacity(cfg.num_layers);
    for i in 0..cfg.num_layers {
        let p = |n: &str| format!("layers.{i}.{n}.weight");
        let mut pending_down: Option<Tensor> = None;
        layers.push(Layer {
            attn_norm: b.param(p("ln1"), &[d], Init::Ones),
            qkv: if cfg.fused_qkv {
                // Each part keeps its own (d → d) initialisation scale.
                Projection::Fused("qkv_proj", b.param(p("attn.qkv_proj"), &[3 * d, d], lin_std(d, d)), vec![d, d, d])
            } else {
                Projection::Separate(vec![
                    ("q_proj", b.param(p("attn.q_proj"), &[d, d], lin_std(d, d))),
                    ("k_proj", b.param(p("attn.k_proj"), &[d, d], lin_std(d, d))),
                    ("v_proj", b.param(p("attn.v_proj"), &[d, d], lin_std(d, d))),
                ])
            },
            o: b.param(p("attn.output_proj"), &[d, d], lin_std(d, d)),
            ffn_norm: b.param(p("ln2"), &[d], Init::Ones),
            gate_up: if cfg.fused_gate_up {
                Projection::Fused("gate_up_proj", b.param(p("ffn.gate_up_proj"), &[2 * f, d], lin_std(d, f)), vec![f, f])
            } else {
                // Registration order w1, w2, w3 (the module's __init__ order).
                let w1 = b.param(p("ffn.w1"), &[f, d], lin_std(d, f));
                let w2 = b.param(p("ffn.w2"), &[d, f], lin_std(f, d));
                let w3 = b.param(p("ffn.w3"), &[f, d], lin_std(d, f));
                pending_down = Some(w2);
                Projection::Separate(vec![("w1", w1), ("w3", w3)])
            },
            down: pending_down.take().unwrap_or_else(|| b.param(p("ffn.w2"), &[d, f], lin_std(f, d))),
            hf: None,
        });
    }
    let final_norm = b.param("ln_final.weight".into(), &[d], Init::Ones);
    let lm_head = b.param("lm_head.weight".into(), &[v, d], lin_std(d, v));
    let rope_buffer = {
        let _c = runtime::category(Category::Buffer);
        let _s = scope("rope");
        Some(rope_tables(cfg, device, dtype))
    };
    b.finish(cfg, Weights { embedding, layers, final_norm, lm_head, rope_buffer, buffers: Vec::new() })
}

/// (2, max_seq_len, d_k/2): cos then sin of position × inverse frequency (values computed
/// on cpu only: on meta the table is a shape).
fn rope_tables(cfg: &ModelConfig, device: Device, dtype: DType) -> Tensor {
    let (s, half) = (cfg.max_seq_len, cfg.head_dim() / 2);
    let dk = cfg.head_dim() as f64;
    let theta = cfg.rope_theta;
    Tensor::from_f64_with(&[2, s, half], dtype, device, || {
        let mut vals = vec![0.0; 2 * s * half];
        for p in 0..s {
            for j in 0..half {
                let ang = p as f64 / theta.powf(2.0 * j as f64 / dk);
                vals[p * half + j] = ang.cos();
                vals[s * half + p * half + j] = ang.sin();
            }
        }
        vals
    })
}

/// RMSNorm with fp32 upcast; each step is its own tensor.
///
/// Lifetimes here and below follow the staff Python line by line (quoted in the comments):
/// an unnamed intermediate dies right after the op that consumes it, a named local when it
/// is rebound or when its function returns (locals go in the order Python created them).
/// Rust keeps a statement's temporaries to the statement's end, so chains stay at most two
/// ops long, and rebinding is assignment, never shadowing (a shadowed binding would live on).
fn rms_norm(name: &str, x: &Tensor, w: &Tensor, eps: f64) -> Tensor {
    let _s = scope(name);
    let _f = py_frame(&py::RMSNORM);
    // in_dtype = x.dtype; x = x.to(torch.float32)
    let in_dtype = x.dtype();
    let mut x = x.to_dtype(DType::F32);
    // rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
    let rms = {
        let mean = x.pow_scalar(2.0).mean_dim(-1, true);
        let shifted = mean.add_scalar(eps);
        drop(mean);
        shifted.rsqrt()
    };
    // x = x * rms
    x = x.mul(&rms);
    // return (self.weight * x).to(in_dtype)
    let out = w.mul(&x).to_dtype(in_dtype);
    drop(x);
    drop(rms);
    out
}

/// RotaryEmbedding.forward(x, pos_ids) on (B, h, S, d_k): interleaved (even, odd) pairs.
fn rope(buf: &Tensor, x: &Tensor, pos_ids: &Tensor) -> Tensor {
    let _s = scope("rope");
    let _f = py_frame(&py::ROPE);
    // x1, x2 = rearrange(x, '... (half_d xy) -> xy ... half_d', xy=2): strided views
    let dk = x.dim(-1);
    let (x1, x2) = (x.slice(-1, 0, dk, 2), x.slice(-1, 1, dk, 2));
    // cos, sin = einx.get_at('cos_sin [pos] half_dim, ... -> cos_sin ... half_dim', cache, pos_ids):
    // the gather by position copies; autograd saves the copy (through `cos * x1`, ...).
    let (cos, sin) = {
        let cos_sin = buf.index_along(1, pos_ids);
        (cos_sin.select(0, 0), cos_sin.select(0, 1))
    };
    // x1_rot = cos * x1 - sin * x2; x2_rot = sin * x1 + cos * x2
    let x1_rot = cos.mul(&x1).sub(&sin.mul(&x2));
    let x2_rot = sin.mul(&x1).add(&cos.mul(&x2));
    // result = rearrange('... x_half, ... x_half -> ... (x_half (1 + 1))', x1_rot, x2_rot).contiguous()
    let result = Tensor::stack(&[x1_rot.clone(), x2_rot.clone()], -1).reshape(x.shape()).contiguous();
    drop((x1, x2, cos, sin, x1_rot, x2_rot));
    result
}

/// The staff softmax (nn_utils.softmax): `x - max` and `exp` are named, so both live until
/// it returns.
fn softmax(x: &Tensor) -> Tensor {
    let _f = py_frame(&py::SOFTMAX);
    // rescaled_input = x - torch.max(x, dim=dim, keepdim=True)[0]
    let rescaled_input = {
        let (max, _) = x.max_dim(-1, true);
        x.sub(&max)
    };
    // exponentiated_rescaled_input = torch.exp(rescaled_input)
    let exponentiated_rescaled_input = rescaled_input.exp();
    // return exponentiated_rescaled_input / torch.sum(exponentiated_rescaled_input, dim=dim, keepdim=True)
    let out = exponentiated_rescaled_input.div(&exponentiated_rescaled_input.sum_dim(-1, true));
    drop(rescaled_input);
    drop(exponentiated_rescaled_input);
    out
}

/// One block with everything it reads, owned: a checkpoint keeps it to recompute.
struct Block {
    cfg: Rc<ModelConfig>,
    layer: Layer,
    rope: Tensor,
}

impl Block {
    /// TransformerBlock.forward: every sub-result is named, so `x_attn` lives through the FFN.
    fn forward(&self, x: Tensor) -> Tensor {
        let _f = py_frame(&py::BLOCK);
        let (l, eps) = (&self.layer, self.cfg.norm_eps);
        // x_attn = self.attn(self.ln1(x))
        let x_attn = self.attention(&rms_norm("ln1", &x, &l.attn_norm, eps));
        // attn_sublayer_output = x + x_attn
        let attn_sublayer_output = x.add(&x_attn);
        // x_ffn = self.ffn(self.ln2(attn_sublayer_output))
        let x_ffn = ffn(l, &rms_norm("ln2", &attn_sublayer_output, &l.ffn_norm, eps));
        // ffn_sublayer_output = attn_sublayer_output + x_ffn; return ffn_sublayer_output
        let ffn_sublayer_output = attn_sublayer_output.add(&x_ffn);
        drop((x_attn, attn_sublayer_output, x_ffn));
        // The caller's `x = layer(x)` releases the input last.
        drop(x);
        ffn_sublayer_output
    }

    /// CausalMultiHeadSelfAttention.forward: Q, K, V, the positions, the mask and the
    /// attention output are locals that live until it returns.
    fn attention(&self, x: &Tensor) -> Tensor {
        let l = &self.layer;
        let _s = scope("attn");
        let _f = py_frame(&py::ATTENTION);
        let cfg = &self.cfg;
        let (b, s) = (x.dim(0), x.dim(1));
        let (h, dk) = (cfg.num_heads, cfg.head_dim());
        // Q = self.q_proj(x); K = ...; V = ... (or one fused product chunked in three), then
        // Q, K, V = (rearrange(X, "... seq (heads d) -> ... heads seq d") for X in (Q, K, V))
        let heads = |_: usize, t: Tensor| t.reshape(&[b, s, h, dk]).transpose(1, 2);
        let qkv = l.qkv.apply(x, linear, heads);
        let [mut q, mut k, v]: [Tensor; 3] = qkv.try_into().unwrap_or_else(|_| unreachable!("three projections"));
        // token_positions = einx.rearrange("seq -> b... seq", torch.arange(sequence_length), b=[1]);
        // token_positions = rearrange(token_positions, "... seq -> ... 1 seq")
        let token_positions = {
            let _s = scope("positions");
            Tensor::arange(s, x.device()).reshape(&[1, 1, s])
        };
        // Q = self.positional_encoder(Q, token_positions); K = ...
        q = rope(&self.rope, &q, &token_positions);
        k = rope(&self.rope, &k, &token_positions);
        let (seq, causal_mask, mut attn_output) = if cfg.attention == Attention::Flash {
            (None, None, Tensor::sdpa_causal(&q, &k, &v, 1.0 / (dk as f64).sqrt()))
        } else {
            // seq = torch.arange(sequence_length); qi, kj = rearranged views; causal_mask = qi >= kj
            let (seq, mask) = {
                let _s = scope("mask");
                let seq = Tensor::arange(s, x.device());
                let mask = seq.reshape(&[1, 1, s, 1]).ge(&seq.reshape(&[1, 1, 1, s]));
                (seq, mask)
            };
            let out = sdpa(&k, &q, &v, &mask, dk);
            (Some(seq), Some(mask), out)
        };
        // attn_output = rearrange(attn_output, "batch heads seq d_v -> batch seq (heads d_v)").contiguous()
        attn_output = attn_output.transpose(1, 2).reshape(&[b, s, h * dk]).contiguous();
        // output = self.output_proj(attn_output); return output
        let output = linear("output_proj", &attn_output, &l.o);
        drop((token_positions, q, k, v, seq, causal_mask, attn_output));
        output
    }
}

/// scaled_dot_product_attention(K, Q, V, mask): scores = einsum(Q, K)/√d_k, masked with
/// -inf, the staff softmax, then einsum(weights, V).
fn sdpa(k: &Tensor, q: &Tensor, v: &Tensor, mask: &Tensor, dk: usize) -> Tensor {
    let _f = py_frame(&py::SDPA);
    // attention_scores = einsum(Q, K, "... query d_k, ... key d_k -> ... query key") / math.sqrt(d_k)
    let mut attention_scores = q.matmul(&k.transpose(-2, -1)).div_scalar((dk as f64).sqrt());
    // attention_scores = torch.where(mask, attention_scores, float("-inf"))
    attention_scores = attention_scores.where_scalar(mask, f64::NEG_INFINITY);
    // attention_weights = softmax(attention_scores, dim=-1)
    let attention_weights = softmax(&attention_scores);
    // return einsum(attention_weights, V, "... query key, ... key d_v -> ... query d_v")
    let out = attention_weights.matmul(v);
    drop(attention_scores);
    drop(attention_weights);
    out
}

/// SwiGLU.forward: `self.w2(silu(self.w1(x)) * self.w3(x))`, silu written out
/// (`x * torch.sigmoid(x)`); fused: `a, b = self.gate_up_proj(x).chunk(2, dim=-1)`, then
/// `self.w2(silu(a) * b)` with `a` and `b` bound until it returns.
fn ffn(l: &Layer, x: &Tensor) -> Tensor {
    let _s = scope("ffn");
    let _f = py_frame(&py::SWIGLU);
    let silu = |a: &Tensor| {
        let _f = py_frame(&py::SILU);
        a.mul(&a.sigmoid())
    };
    match &l.gate_up {
        Projection::Separate(_) => {
            let parts = l.gate_up.apply(x, linear, |i, a| if i == 0 { silu(&a) } else { a });
            let [gate, up]: [Tensor; 2] = parts.try_into().unwrap_or_else(|_| unreachable!("two projections"));
            let product = gate.mul(&up);
            drop(gate);
            drop(up);
            linear("w2", &product, &l.down)
        }
        Projection::Fused(..) => {
            let parts = l.gate_up.apply(x, linear, |_, t| t);
            let [a, b]: [Tensor; 2] = parts.try_into().unwrap_or_else(|_| unreachable!("two projections"));
            let product = silu(&a).mul(&b);
            let out = linear("w2", &product, &l.down);
            drop(product);
            drop((a, b));
            out
        }
    }
}

pub(crate) fn forward(m: &Model, ids: &Tensor) -> Tensor {
    let _f = py_frame(&py::LM);
    let cfg = &m.config;
    // x = self.token_embeddings(x): `self.weight[token_ids, :]` (aten::index)
    let mut x = {
        let _s = scope("token_embeddings");
        let _f = py_frame(&py::EMBEDDING);
        m.embedding.index_along(0, ids)
    };
    let shared = Rc::new(cfg.clone());
    let rope = m.rope_buffer.clone().expect("cs336 model has a rope buffer");
    let hooks = m.hooks.borrow().clone();
    for (i, l) in m.layers.iter().enumerate() {
        let _s = scope(&format!("layers.{i}"));
        let block = Block { cfg: shared.clone(), layer: l.clone(), rope: rope.clone() };
        let hooks = hooks.clone();
        let run = move |x| crate::model::hooked_block(&hooks, i, x, |x| block.forward(x));
        x = if cfg.checkpoint.covers(i) { checkpoint(x, run) } else { run(x) };
    }
    // x = self.ln_final(x); return self.lm_head(x)
    x = rms_norm("ln_final", &x, &m.final_norm, cfg.norm_eps);
    linear("lm_head", &x, &m.lm_head)
}

/// The course's cross-entropy (nn_utils.cross_entropy): the whole (B, S, V) log-softmax is
/// negated, then gathered at the targets and averaged. `log_softmax` rebinds `x` to
/// `x - x_max`, which lives until it returns.
pub(crate) fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Tensor {
    let _f = py_frame(&py::CROSS_ENTROPY);
    // negative_log_softmax_logits = -log_softmax(inputs)
    let negative_log_softmax_logits = log_softmax(logits).neg();
    // return torch.mean(torch.gather(negative_log_softmax_logits, -1, targets.unsqueeze(-1)))
    let picked = negative_log_softmax_logits.gather(-1, &targets.unsqueeze(-1));
    let out = picked.mean_all();
    drop(picked);
    drop(negative_log_softmax_logits);
    out
}

/// nn_utils.log_softmax: `x - x_max - log(sum(exp(x - x_max)))` in separate (B, S, V) steps.
fn log_softmax(x: &Tensor) -> Tensor {
    let _f = py_frame(&py::LOG_SOFTMAX);
    // x_max = torch.max(x, dim=dim, keepdim=True)[0]
    let (x_max, _) = x.max_dim(-1, true);
    // x = x - x_max
    let x = x.sub(&x_max);
    // return x - torch.log(torch.sum(torch.exp(x), dim=dim, keepdim=True))
    let lse = {
        let sum = x.exp().sum_dim(-1, true);
        sum.log()
    };
    let out = x.sub(&lse);
    drop(lse);
    drop(x);
    drop(x_max);
    out
}

/// `Linear.forward`: `einsum(x, self.weight, "... d_in, d_out d_in -> ... d_out")`.
fn linear(name: &str, x: &Tensor, w: &Tensor) -> Tensor {
    let _f = py_frame(&py::LINEAR);
    super::linear_einsum(name, x, w)
}
