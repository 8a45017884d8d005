//! The cs336 flavour (Stanford CS336 assignment 2), op for op as reference-models.md §1.
use super::init::Init;
use super::{Weights, linear_einsum as linear, Attention, Builder, Layer, Model, ModelConfig, Projection};
use crate::engine::checkpoint::checkpoint;
use std::rc::Rc;
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
fn rope(buf: &Tensor, x: &Tensor, seq: usize) -> Tensor {
    let _s = scope("rope");
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

/// One block with everything it reads, owned: a checkpoint keeps it to recompute.
struct Block {
    cfg: Rc<ModelConfig>,
    layer: Layer,
    rope: Tensor,
}

impl Block {
    /// h = x + attn(ln1(x)); out = h + ffn(ln2(h)).
    fn forward(&self, x: Tensor) -> Tensor {
        let (l, eps) = (&self.layer, self.cfg.norm_eps);
        let h = x.add(&self.attention(&rms_norm("ln1", &x, &l.attn_norm, eps)));
        let out = h.add(&ffn(l, &rms_norm("ln2", &h, &l.ffn_norm, eps)));
        // The caller's `x = …` releases the input first, then `h` goes with the iteration.
        drop(x);
        drop(h);
        out
    }

    fn attention(&self, x: &Tensor) -> Tensor {
        let l = &self.layer;
        let _s = scope("attn");
        let cfg = &self.cfg;
        let (b, s) = (x.dim(0), x.dim(1));
        let (h, dk) = (cfg.num_heads, cfg.head_dim());
        let heads = |_: usize, t: Tensor| t.reshape(&[b, s, h, dk]).transpose(1, 2);
        let qkv = l.qkv.apply(x, linear, heads);
        let [q, k, v]: [Tensor; 3] = qkv.try_into().unwrap_or_else(|_| unreachable!("three projections"));
        let (mut q, mut k) = (q, k);
        q = rope(&self.rope, &q, s);
        k = rope(&self.rope, &k, s);
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
}

/// scores = QKᵀ/√d_k, masked with -inf, the hand-written softmax, then weights·V.
fn sdpa(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor, dk: usize) -> Tensor {
    let mut scores = q.matmul(&k.transpose(-2, -1)).div_scalar((dk as f64).sqrt());
    scores = scores.where_scalar(mask, f64::NEG_INFINITY);
    let w = softmax(&scores);
    w.matmul(v)
}

/// w2(silu(w1·x) ⊙ w3·x), silu written out; fused: `a, b = gate_up_proj(x).chunk(2, -1)`.
fn ffn(l: &Layer, x: &Tensor) -> Tensor {
    let _s = scope("ffn");
    let parts = l.gate_up.apply(x, linear, |i, a| if i == 0 { a.mul(&a.sigmoid()) } else { a });
    let [silu, up]: [Tensor; 2] = parts.try_into().unwrap_or_else(|_| unreachable!("two projections"));
    let g = silu.mul(&up);
    drop(up);
    drop(silu);
    linear("w2", &g, &l.down)
}

pub(crate) fn forward(m: &Model, ids: &Tensor) -> Tensor {
    let cfg = &m.config;
    let mut x = {
        let _s = scope("token_embeddings");
        m.embedding.embedding(ids)
    };
    let shared = Rc::new(cfg.clone());
    let rope = m.rope_buffer.clone().expect("cs336 model has a rope buffer");
    for (i, l) in m.layers.iter().enumerate() {
        let _s = scope(&format!("layers.{i}"));
        let block = Block { cfg: shared.clone(), layer: l.clone(), rope: rope.clone() };
        x = if cfg.checkpoint.covers(i) { checkpoint(x, move |x| block.forward(x)) } else { block.forward(x) };
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
