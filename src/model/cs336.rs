//! The cs336 flavour (Stanford CS336 assignment 2), op for op as reference-models.md §1.
use super::init::Init;
use super::{Weights, linear_einsum as linear, Attention, Builder, Layer, Model, ModelConfig};
use crate::engine::runtime::{self, scope};
use crate::engine::{DType, Device, Tensor};
use crate::record::Category;

pub(crate) fn build(cfg: &ModelConfig, device: Device, dtype: DType, rng: &mut super::init::Rng) -> Model {
    let (d, f, v) = (cfg.d_model, cfg.d_ff, cfg.vocab_size);
    let mut b = Builder { device, dtype, rng, params: Vec::new() };
    let lin_std = |din: usize, dout: usize| Init::TruncNormal { std: (2.0 / (din + dout) as f64).sqrt(), clip: 3.0 };
    let embedding = b.param("token_embeddings.weight".into(), &[v, d], Init::TruncNormal { std: 1.0, clip: 3.0 });
    let mut layers = Vec::with_capacity(cfg.num_layers);
    for i in 0..cfg.num_layers {
        let p = |n: &str| format!("layers.{i}.{n}.weight");
        layers.push(Layer {
            attn_norm: b.param(p("ln1"), &[d], Init::Ones),
            q: b.param(p("attn.q_proj"), &[d, d], lin_std(d, d)),
            k: b.param(p("attn.k_proj"), &[d, d], lin_std(d, d)),
            v: b.param(p("attn.v_proj"), &[d, d], lin_std(d, d)),
            o: b.param(p("attn.output_proj"), &[d, d], lin_std(d, d)),
            ffn_norm: b.param(p("ln2"), &[d], Init::Ones),
            gate: b.param(p("ffn.w1"), &[f, d], lin_std(d, f)),
            down: b.param(p("ffn.w2"), &[d, f], lin_std(f, d)),
            up: b.param(p("ffn.w3"), &[f, d], lin_std(d, f)),
        });
    }
    let final_norm = b.param("ln_final.weight".into(), &[d], Init::Ones);
    let lm_head = b.param("lm_head.weight".into(), &[v, d], lin_std(d, v));
    let rope_buffer = {
        let _c = runtime::category(Category::Buffer);
        let _s = scope("rope");
        Some(rope_tables(cfg, device, dtype))
    };
    b.finish(cfg, Weights { embedding, layers, final_norm, lm_head, rope_buffer: rope_buffer })
}

/// (2, max_seq_len, d_k/2): cos then sin of position × inverse frequency.
fn rope_tables(cfg: &ModelConfig, device: Device, dtype: DType) -> Tensor {
    let (s, half) = (cfg.max_seq_len, cfg.head_dim() / 2);
    let dk = cfg.head_dim() as f64;
    let mut vals = vec![0.0; 2 * s * half];
    if device == Device::Cpu {
        for p in 0..s {
            for j in 0..half {
                let ang = p as f64 / cfg.rope_theta.powf(2.0 * j as f64 / dk);
                vals[p * half + j] = ang.cos();
                vals[s * half + p * half + j] = ang.sin();
            }
        }
    }
    Tensor::from_f64(&vals, &[2, s, half], dtype, device)
}

/// RMSNorm with fp32 upcast; each step is its own tensor.
///
/// Lifetimes here and below follow the Python the reference runs: an unnamed intermediate
/// dies right after the op that consumes it, a named local at the end of its function or
/// when rebound. So chains stay at most two ops long and rebinding is assignment, never
/// shadowing (a shadowed binding would live on).
fn rms_norm(name: &str, x: &Tensor, w: &Tensor, eps: f64) -> Tensor {
    let _s = scope(name);
    let in_dtype = x.dtype();
    let x = x.to_dtype(DType::F32);
    let ms = x.pow_scalar(2.0).mean_dim(-1, true);
    let r = ms.add_scalar(eps).rsqrt();
    drop(ms);
    let out = w.mul(&x.mul(&r));
    out.to_dtype(in_dtype)
}

/// Rotary embedding on (B, h, S, d_k): interleaved (even, odd) pairs.
fn rope(m: &Model, x: &Tensor, seq: usize) -> Tensor {
    let _s = scope("rope");
    let buf = m.rope_buffer.as_ref().expect("cs336 model has a rope buffer");
    let cos = buf.select(0, 0).narrow(0, 0, seq);
    let sin = buf.select(0, 1).narrow(0, 0, seq);
    let dk = x.dim(-1);
    let even = x.slice(-1, 0, dk, 2);
    let odd = x.slice(-1, 1, dk, 2);
    let r_even = even.mul(&cos).sub(&odd.mul(&sin));
    let r_odd = even.mul(&sin).add(&odd.mul(&cos));
    let shape = x.shape().to_vec();
    Tensor::stack(&[r_even, r_odd], -1).reshape(&shape).contiguous()
}

/// The hand-written softmax: max (values + indices), subtract, exp, sum, divide.
fn softmax(x: &Tensor) -> Tensor {
    let (m, _) = x.max_dim(-1, true);
    let e = x.sub(&m).exp();
    e.div(&e.sum_dim(-1, true))
}

fn attention(m: &Model, l: &Layer, x: &Tensor) -> Tensor {
    let _s = scope("attn");
    let cfg = &m.config;
    let (b, s) = (x.dim(0), x.dim(1));
    let (h, dk) = (cfg.num_heads, cfg.head_dim());
    let heads = |t: Tensor| t.reshape(&[b, s, h, dk]).transpose(1, 2);
    let mut q = heads(linear("q_proj", x, &l.q));
    let mut k = heads(linear("k_proj", x, &l.k));
    let v = heads(linear("v_proj", x, &l.v));
    q = rope(m, &q, s);
    k = rope(m, &k, s);
    if cfg.attention == Attention::Flash {
        let out = Tensor::flash_attention(&q, &k, &v, true, 1.0 / (dk as f64).sqrt());
        drop((q, k, v));
        let out = out.transpose(1, 2).reshape(&[b, s, h * dk]).contiguous();
        return linear("output_proj", &out, &l.o);
    }
    let mask = {
        let _s = scope("mask");
        let qi = Tensor::arange(s, x.device());
        let ki = Tensor::arange(s, x.device());
        qi.reshape(&[s, 1]).ge(&ki.reshape(&[1, s])).reshape(&[1, 1, s, s])
    };
    let out = sdpa(&q, &k, &v, &mask, dk);
    drop((q, k, v));
    let out = out.transpose(1, 2).reshape(&[b, s, h * dk]).contiguous();
    linear("output_proj", &out, &l.o)
}

/// scores = QKᵀ/√d_k, masked with -inf, the hand-written softmax, then weights·V.
fn sdpa(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, dk: usize) -> Tensor {
    let mut scores = q.matmul(&k.transpose(-2, -1)).div_scalar((dk as f64).sqrt());
    scores = scores.where_scalar(mask, f64::NEG_INFINITY);
    let w = softmax(&scores);
    w.matmul(v)
}

fn ffn(l: &Layer, x: &Tensor) -> Tensor {
    let _s = scope("ffn");
    let silu = {
        let a = linear("w1", x, &l.gate);
        a.mul(&a.sigmoid())
    };
    let g = silu.mul(&linear("w3", x, &l.up));
    drop(silu);
    linear("w2", &g, &l.down)
}

pub(crate) fn forward(m: &Model, ids: &Tensor) -> Tensor {
    let cfg = &m.config;
    let mut x = {
        let _s = scope("token_embeddings");
        m.embedding.embedding(ids)
    };
    for (i, l) in m.layers.iter().enumerate() {
        let _s = scope(&format!("layers.{i}"));
        let h = x.add(&attention(m, l, &rms_norm("ln1", &x, &l.attn_norm, cfg.norm_eps)));
        x = h.add(&ffn(l, &rms_norm("ln2", &h, &l.ffn_norm, cfg.norm_eps)));
    }
    let x = rms_norm("ln_final", &x, &m.final_norm, cfg.norm_eps);
    linear("lm_head", &x, &m.lm_head)
}

/// The course's cross-entropy: mean of −log_softmax at the targets, log_softmax written
/// out as x − max − log(sum(exp(x − max))) in separate (B, S, V) steps.
pub(crate) fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Tensor {
    let (m, _) = logits.max_dim(-1, true);
    let shifted = logits.sub(&m);
    let sum_exp = shifted.exp().sum_dim(-1, true);
    let lse = sum_exp.log();
    drop(sum_exp);
    let logp = shifted.sub(&lse);
    let picked = logp.gather(-1, &targets.unsqueeze(-1));
    picked.neg().mean_all()
}
