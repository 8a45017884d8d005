//! The tinyllama flavour (AMD's Tiny LLaMA workshop, `shared/bench/pytorch_tinyllama.py`).
use super::init::Init;
use super::{Weights, linear, Attention, Builder, Layer, Model, ModelConfig, Projection, RopeCache};
use crate::engine::checkpoint::checkpoint;
use std::rc::Rc;
use crate::engine::runtime::{self, py_frame, scope};
use crate::model::py::hf_frames::{NN_EMBEDDING, NN_LINEAR};
use crate::model::py::lib_frames::TORCH_CROSS_ENTROPY;
use crate::model::py::tinyllama as py;
use crate::engine::{DType, Device, Tensor};
use crate::record::Category;

pub(crate) fn build(cfg: &ModelConfig, device: Device, dtype: DType, rng: &mut super::init::Rng) -> Model {
    let (d, f, v) = (cfg.d_model, cfg.d_ff, cfg.vocab_size);
    let kv = cfg.num_kv_heads * cfg.head_dim();
    let std = Init::Normal { std: 0.02 };
    let mut b = Builder { device, dtype, rng, params: Vec::new(), frozen: false };
    let embedding = b.param("token_embedding.weight".into(), &[v, d], std);
    let mut layers = Vec::with_capacity(cfg.num_layers);
    for i in 0..cfg.num_layers {
        let p = |n: &str| format!("blocks.{i}.{n}.weight");
        layers.push(Layer {
            attn_norm: b.param(p("attention_norm"), &[d], Init::Ones),
            qkv: if cfg.fused_qkv {
                Projection::Fused("qkv_proj", b.param(p("attention.qkv_proj"), &[d + 2 * kv, d], std), vec![d, kv, kv])
            } else {
                Projection::Separate(vec![
                    ("q_proj", b.param(p("attention.q_proj"), &[d, d], std)),
                    ("k_proj", b.param(p("attention.k_proj"), &[kv, d], std)),
                    ("v_proj", b.param(p("attention.v_proj"), &[kv, d], std)),
                ])
            },
            o: b.param(p("attention.o_proj"), &[d, d], std),
            ffn_norm: b.param(p("ffn_norm"), &[d], Init::Ones),
            gate_up: if cfg.fused_gate_up {
                Projection::Fused("gate_up_proj", b.param(p("feed_forward.gate_up_proj"), &[2 * f, d], std), vec![f, f])
            } else {
                Projection::Separate(vec![
                    ("gate_proj", b.param(p("feed_forward.gate_proj"), &[f, d], std)),
                    ("up_proj", b.param(p("feed_forward.up_proj"), &[f, d], std)),
                ])
            },
            down: b.param(p("feed_forward.down_proj"), &[d, f], std),
            hf: None,
        });
    }
    let final_norm = b.param("norm.weight".into(), &[d], Init::Ones);
    let lm_head = if cfg.tied_embeddings {
        // nn.Linear allocates and initialises its own weight before the tie replaces it.
        let own = super::init::make(&[v, d], dtype, device, std, b.rng);
        drop(own);
        embedding.clone()
    } else {
        b.param("output_proj.weight".into(), &[v, d], std)
    };
    b.finish(cfg, Weights { embedding, layers, final_norm, lm_head, rope_buffer: None, buffers: Vec::new() })
}

/// `nn.Linear.forward` (frames name torch's module as PyTorch's snapshot would).
fn nn_linear(name: &str, x: &Tensor, w: &Tensor) -> Tensor {
    let _f = py_frame(&NN_LINEAR);
    linear(name, x, w)
}

/// RMSNorm in the input dtype: x / sqrt(mean(x²) + eps) * w.
fn rms_norm(name: &str, x: &Tensor, w: &Tensor, eps: f64) -> Tensor {
    let _f = py_frame(&py::RMSNORM);
    let _s = scope(name);
    let denom = {
        let ms = x.pow_scalar(2.0).mean_dim(-1, true);
        ms.add_scalar(eps).sqrt()
    };
    x.div(&denom).mul(w)
}

/// cos/sin tables (S, d_k/2) for `seq` positions, cached per (length, dtype) like the
/// reference's `Rotary._cache` (so they persist across steps, and a checkpointed block's
/// recomputation finds them).
fn rope_tables(cfg: &ModelConfig, cache: &RopeCache, layer: usize, seq: usize, dtype: DType, device: Device) -> (Tensor, Tensor) {
    if let Some((.., c, s)) = cache.borrow().iter().find(|(l, n, dt, ..)| *l == layer && *n == seq && *dt == dtype) {
        return (c.clone(), s.clone());
    }
    let _f = py_frame(&py::ROTARY_TABLES);
    let half = cfg.head_dim() / 2;
    let hd = cfg.head_dim() as f64;
    let theta = cfg.rope_theta;
    let _g = runtime::no_grad();
    // Host values exist on cpu only: on meta these are shapes (no O(S) host memory).
    let inv_freq = Tensor::from_f64_with(&[1, half], DType::F32, device, || (0..half).map(|j| 1.0 / theta.powf(j as f64 * 2.0 / hd)).collect());
    let pos = Tensor::from_f64_with(&[seq, 1], DType::F32, device, || (0..seq).map(|p| p as f64).collect());
    let ang = pos.mul(&inv_freq);
    let (cos, sin) = {
        let _c = runtime::category(Category::Buffer);
        (ang.cos().to_dtype(dtype), ang.sin().to_dtype(dtype))
    };
    cache.borrow_mut().push((layer, seq, dtype, cos.clone(), sin.clone()));
    (cos, sin)
}

/// One decoder block with everything it reads, owned: a checkpoint keeps it to recompute.
struct Block {
    cfg: Rc<ModelConfig>,
    layer: Layer,
    index: usize,
    rope: RopeCache,
    /// The additive causal mask (naive attention), an argument of every block.
    mask: Option<Tensor>,
}

impl Block {
    /// x = x + attention(norm(x)); x = x + feed_forward(norm(x)).
    fn forward(&self, x: Tensor) -> Tensor {
        let _f = py_frame(&py::BLOCK);
        let (l, eps) = (&self.layer, self.cfg.norm_eps);
        // Rebinding is assignment (the old value dies, as in Python), never shadowing.
        let mut x = x;
        x = x.add(&self.attention(&rms_norm("attention_norm", &x, &l.attn_norm, eps)));
        x = x.add(&feed_forward(l, &rms_norm("ffn_norm", &x, &l.ffn_norm, eps)));
        x
    }

    /// Rotary embedding on (B, S, H, d_k) via a reshape to pairs and a stack.
    fn rope(&self, x: &Tensor) -> Tensor {
        let _f = py_frame(&py::ROTARY_APPLY);
        let _s = scope("rope");
        let (b, s, h, d) = (x.dim(0), x.dim(1), x.dim(2), x.dim(3));
        let (cos, sin) = rope_tables(&self.cfg, &self.rope, self.index, s, x.dtype(), x.device());
        let cos = cos.reshape(&[1, s, 1, d / 2]);
        let sin = sin.reshape(&[1, s, 1, d / 2]);
        let pairs = x.reshape(&[b, s, h, d / 2, 2]);
        let (even, odd) = (pairs.select(-1, 0), pairs.select(-1, 1));
        let r_even = even.mul(&cos).sub(&odd.mul(&sin));
        let r_odd = even.mul(&sin).add(&odd.mul(&cos));
        Tensor::stack(&[r_even, r_odd], -1).reshape(&[b, s, h, d])
    }

    fn attention(&self, x: &Tensor) -> Tensor {
        let l = &self.layer;
        let _f = py_frame(&py::ATTENTION);
        let _s = scope("attention");
        let cfg = &self.cfg;
        let (b, s) = (x.dim(0), x.dim(1));
        let (h, kvh, hd) = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim());
        // Separate: q_proj(x).view(…) one after the other; fused (version 2):
        // `qkv = self.qkv_proj(x); q, k, v = qkv.split(…, dim=-1)` and a view of each part
        // (strided views into the one (B, S, (h + 2·h_kv)·d_k) output). `qkv` is a local:
        // the product lives until the function returns even after q, k, v are rebound
        // (visible when nothing saves it, i.e. under activation checkpointing).
        let heads = [h, kvh, kvh];
        let (_qkv_local, qkv) = l.qkv.apply_bound(x, nn_linear, |i, t| t.view(&[b, s, heads[i], hd]));
        let [q, k, v]: [Tensor; 3] = qkv.try_into().unwrap_or_else(|_| unreachable!("three projections"));
        let (mut q, mut k, mut v) = (q, k, v);
        q = self.rope(&q).transpose(1, 2);
        k = self.rope(&k).transpose(1, 2);
        v = v.transpose(1, 2);
        if h / kvh > 1 {
            k = k.repeat_interleave(h / kvh, 1);
            v = v.repeat_interleave(h / kvh, 1);
        }
        if cfg.attention == Attention::Flash {
            // F.scaled_dot_product_attention(q, k, v, is_causal=True): the mask is not read.
            let mut out = Tensor::sdpa_causal(&q, &k, &v, (hd as f64).powf(-0.5));
            out = out.transpose(1, 2).contiguous().view(&[b, s, h * hd]);
            return nn_linear("o_proj", &out, &l.o);
        }
        let mut scores = q.matmul(&k.transpose(-2, -1)).mul_scalar((hd as f64).powf(-0.5));
        scores = scores.add(self.mask.as_ref().expect("naive attention has a mask"));
        let probs = scores.softmax(-1);
        let mut out = probs.matmul(&v);
        out = out.transpose(1, 2).contiguous().view(&[b, s, h * hd]);
        // `scores`, `probs`, `q`, `k`, `v` are Python locals: alive until the function returns.
        nn_linear("o_proj", &out, &l.o)
    }
}

/// `down(silu(gate(x)) * up(x))`; fused (version 2):
/// `gate, up = gate_up_proj(x).chunk(2, -1); down(silu(gate) * up)`.
fn feed_forward(l: &Layer, x: &Tensor) -> Tensor {
    let _f = py_frame(&py::SWIGLU);
    let _s = scope("feed_forward");
    let gu = l.gate_up.apply(x, nn_linear, |i, t| if i == 0 { t.silu() } else { t });
    let [g, u]: [Tensor; 2] = gu.try_into().unwrap_or_else(|_| unreachable!("two projections"));
    let h = g.mul(&u);
    // silu(…) is a temporary of the expression, and so is up(x) unfused: they die once the
    // product exists (unless autograd saved them). Fused, `up` (and `gate`, a view of the
    // same product) are locals that live until the function returns.
    drop(g);
    let _up_local = match l.gate_up {
        Projection::Fused(..) => Some(u),
        Projection::Separate(_) => {
            drop(u);
            None
        }
    };
    // The product is an argument temporary: it dies after down_proj returns.
    nn_linear("down_proj", &h, &l.down)
}

/// `TinyLlama.forward(tokens, labels)`: logits, and the loss when labels are given.
pub(crate) fn forward(m: &Model, ids: &Tensor, labels: Option<&Tensor>, logits_ready: &mut dyn FnMut(&Tensor)) -> (Tensor, Option<Tensor>) {
    let _f = py_frame(&py::FORWARD);
    let cfg = &m.config;
    let s = ids.dim(1);
    // Additive causal mask, rebuilt every call as in V1; flash attention is told
    // is_causal instead and needs none.
    let mask = (cfg.attention == Attention::Naive).then(|| {
        let _s = scope("mask");
        Tensor::full(&[s, s], f64::NEG_INFINITY, DType::F32, ids.device()).triu(1).view(&[1, 1, s, s])
    });
    let mut x = {
        let _f = py_frame(&NN_EMBEDDING);
        let _s = scope("token_embedding");
        m.embedding.embedding(ids)
    };
    let shared = Rc::new(cfg.clone());
    let hooks = m.hooks.borrow().clone();
    for (i, l) in m.layers.iter().enumerate() {
        let _s = scope(&format!("blocks.{i}"));
        // FSDP2's mixed precision casts the fp32 mask argument to its param dtype at each
        // unit (a copy the block call holds until it returns).
        let cast = hooks.as_ref().and_then(|h| h.block_input_dtype(i));
        let block_mask = match (&mask, cast) {
            (Some(mk), Some(d)) if mk.dtype() != d => {
                let _s = scope("FSDP::cast_forward_inputs");
                Some(mk.to_dtype(d))
            }
            _ => mask.clone(),
        };
        let block = Block { cfg: shared.clone(), layer: l.clone(), index: i, rope: m.rope_cache.clone(), mask: block_mask };
        let hooks = hooks.clone();
        let run = move |x| crate::model::hooked_block(&hooks, i, x, |x| block.forward(x));
        // `h = blk(h, mask)`: the caller's `h` (the block input) stays alive until the block
        // returns and the name is rebound, so the block gets its own handle to it.
        x = if cfg.checkpoint.covers(i) { checkpoint(x.clone(), run) } else { run(x.clone()) };
    }
    // `logits = self.output_proj(self.norm(h))`: the norm's output is a temporary that dies
    // once the projection returns (under autocast the projection saves its bf16 copy, not it).
    let logits = nn_linear("output_proj", &rms_norm("norm", &x, &m.final_norm, cfg.norm_eps), &m.lm_head);
    logits_ready(&logits);
    let loss = labels.map(|labels| {
        let _s = scope("loss");
        let _f = py_frame(&TORCH_CROSS_ENTROPY);
        cross_entropy(&logits, labels)
    });
    // `mask` and `x` are locals of this function: they die only now.
    (logits, loss)
}

/// F.cross_entropy on logits[:, :-1] vs labels[:, 1:] (both made contiguous), as the V1
/// model shifts internally.
pub(crate) fn cross_entropy(logits: &Tensor, labels: &Tensor) -> Tensor {
    let (s, v) = (logits.dim(1), logits.dim(2));
    let lg = logits.narrow(1, 0, s - 1).contiguous();
    let lb = labels.narrow(1, 1, s - 1).contiguous();
    lg.view(&[usize::MAX, v]).cross_entropy(&lb.view(&[usize::MAX]))
}
