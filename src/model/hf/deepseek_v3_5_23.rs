//! `DeepseekV3ForCausalLM` (transformers 5.23.0, `models/deepseek_v3/modeling_deepseek_v3.py`),
//! op for op, where it differs from the Llama layer of `transformers_5_23.rs`: the layer's
//! weights, multi-head latent attention (`DeepseekV3Attention.forward` and `expand_kv`, the
//! interleaved rope), and the sparse block (`DeepseekV3MoE`: the sigmoid router with
//! group-limited top-k, the experts of `moe_5_23.rs`, the shared MLP). The dense first layers
//! run Llama's MLP, the decoder layer Llama's.
//!
//! What 5.23's `DynamicCache` holds for a layer: the compressed latent after
//! `kv_a_layernorm` (B, 1, S, kv_lora_rank) and the roped `k_rot` (B, 1, S, qk_rope_head_dim),
//! not per-head keys and values; `kv_b_proj` expands the cached latent at every forward.
use super::{frames, rms_norm, Block};
use crate::engine::runtime::{self, py_frame, scope};
use crate::engine::{DType, Tensor};
use crate::model::hf::deepseek_v3::DeepseekParts;
use crate::model::hf::moe::MoeConfig;
use crate::model::init::Init;
use crate::model::py::moe_frames;
use crate::model::{linear, Builder, Layer, Projection};
use crate::record::Category;
use std::rc::Rc;

/// A DeepSeek-V3 layer's weights beyond what [`Layer`] names.
#[derive(Clone)]
pub struct DeepseekWeights {
    /// `q_a_proj` (weight, bias), `q_a_layernorm`, `q_b_proj` — or None for `q_proj`.
    pub q_lora: Option<(Tensor, Option<Tensor>, Tensor, Tensor)>,
    pub q_proj: Option<Tensor>,
    pub kv_a: Tensor,
    pub kv_a_bias: Option<Tensor>,
    pub kv_a_norm: Tensor,
    pub kv_b: Tensor,
    /// A sparse layer's shared MLP (gate_proj, up_proj, down_proj).
    pub shared: Option<[Tensor; 3]>,
    /// A sparse layer's `mlp.gate.e_score_correction_bias` buffer (experts).
    pub e_score_bias: Option<Tensor>,
}

/// One decoder layer in registration order: self_attn (`q_a_proj` [+bias], `q_a_layernorm`,
/// `q_b_proj` — or `q_proj` —, `kv_a_proj_with_mqa` [+bias], `kv_a_layernorm`, `kv_b_proj`,
/// `o_proj` [+bias]), the MLP (dense: gate, up, down; sparse: `experts.gate_up_proj`
/// (experts, 2·I, hidden), `experts.down_proj` (experts, hidden, I), `gate.weight` and its
/// `e_score_correction_bias` buffer, the shared MLP), then the two norms.
/// `dims` is [layer index, hidden, heads].
pub(super) fn layer(b: &mut Builder, p: &dyn Fn(&str) -> String, m: &MoeConfig, ds: &DeepseekParts, dims: [usize; 3], lin: &mut super::LinearMaker<'_>) -> Layer {
    let [i, d, heads] = dims;
    let std = Init::Normal { std: 0.02 };
    let zero = Init::Normal { std: 0.0 };
    let ab = ds.attention_bias;
    let qk = ds.qk_head_dim();
    // Each nn.Linear in its slot of lora::SLOTS (plain, or bitsandbytes' under a quantized load).
    let (q_lora, q_proj) = match ds.q_lora_rank {
        Some(r) => {
            let (w, wb) = lin(b, 0, "self_attn.q_a_proj", r, d, ab);
            let norm = b.param(p("self_attn.q_a_layernorm.weight"), &[r], Init::Ones);
            let qb = lin(b, 1, "self_attn.q_b_proj", heads * qk, r, false).0;
            (Some((w, wb, norm, qb)), None)
        }
        None => (None, Some(lin(b, 0, "self_attn.q_proj", heads * qk, d, false).0)),
    };
    let kv_a_rows = ds.kv_lora_rank + ds.qk_rope_head_dim;
    let (kv_a, kv_a_bias) = lin(b, 2, "self_attn.kv_a_proj_with_mqa", kv_a_rows, d, ab);
    let kv_a_norm = b.param(p("self_attn.kv_a_layernorm.weight"), &[ds.kv_lora_rank], Init::Ones);
    let kv_b = lin(b, 7, "self_attn.kv_b_proj", heads * (ds.qk_nope_head_dim + ds.v_head_dim), ds.kv_lora_rank, false).0;
    let (o, o_bias) = lin(b, 3, "self_attn.o_proj", d, heads * ds.v_head_dim, ab);
    let (gate_up, down, router, shared, e_score_bias) = if ds.is_sparse(i) {
        let (e, inter) = (m.experts, m.intermediate);
        let gate_up = b.param(p("mlp.experts.gate_up_proj"), &[e, 2 * inter, d], std);
        let down = b.param(p("mlp.experts.down_proj"), &[e, d, inter], std);
        let router = b.param(p("mlp.gate.weight"), &[e, d], std);
        let e_score_bias = {
            let _c = runtime::category(Category::Buffer);
            let _s = runtime::scope(&p("mlp.gate.e_score_correction_bias"));
            crate::model::init::make(&[e], b.dtype, b.device, zero, b.rng)
        };
        let s = m.shared_intermediate;
        let shared = [
            lin(b, 8, "mlp.shared_experts.gate_proj", s, d, false).0,
            lin(b, 9, "mlp.shared_experts.up_proj", s, d, false).0,
            lin(b, 10, "mlp.shared_experts.down_proj", d, s, false).0,
        ];
        (Projection::Fused("gate_up_proj", gate_up, vec![inter, inter]), down, Some(router), Some(shared), Some(e_score_bias))
    } else {
        let f = ds.dense_intermediate;
        let g = lin(b, 4, "mlp.gate_proj", f, d, false).0;
        let u = lin(b, 5, "mlp.up_proj", f, d, false).0;
        let dn = lin(b, 6, "mlp.down_proj", d, f, false).0;
        (Projection::Separate(vec![("gate_proj", g), ("up_proj", u)]), dn, None, None, None)
    };
    let attn_norm = b.param(p("input_layernorm.weight"), &[d], Init::Ones);
    let ffn_norm = b.param(p("post_attention_layernorm.weight"), &[d], Init::Ones);
    // Layer::weights lists every parameter: the latent attention's and the shared MLP's under
    // `qkv` (the router and o_proj's bias are HfLayer's, listed there).
    let mut listed: Vec<(&'static str, Tensor)> = Vec::new();
    if let Some((w, wb, n, qb)) = &q_lora {
        listed.extend([("q_a_proj", w.clone()), ("q_a_layernorm", n.clone()), ("q_b_proj", qb.clone())]);
        listed.extend(wb.iter().map(|t| ("q_a_proj.bias", t.clone())));
    }
    listed.extend(q_proj.iter().map(|t| ("q_proj", t.clone())));
    listed.extend([("kv_a_proj_with_mqa", kv_a.clone()), ("kv_a_layernorm", kv_a_norm.clone()), ("kv_b_proj", kv_b.clone())]);
    listed.extend(kv_a_bias.iter().map(|t| ("kv_a_proj_with_mqa.bias", t.clone())));
    if let Some(s) = &shared {
        listed.extend([("shared_experts.gate_proj", s[0].clone()), ("shared_experts.up_proj", s[1].clone()), ("shared_experts.down_proj", s[2].clone())]);
    }
    let extra = super::HfLayer {
        o_bias,
        router,
        deepseek: Some(DeepseekWeights { q_lora, q_proj, kv_a, kv_a_bias, kv_a_norm, kv_b, shared, e_score_bias }),
        ..super::HfLayer::default()
    };
    Layer { attn_norm, qkv: Projection::Separate(listed), o, ffn_norm, gate_up, down, hf: Some(Rc::new(extra)) }
}

fn parts(blk: &Block) -> (&MoeConfig, &DeepseekParts) {
    let m = blk.hf().moe.as_ref().expect("an MoE model");
    (m, m.deepseek.as_ref().expect("deepseek parts"))
}

fn weights(blk: &Block) -> &DeepseekWeights {
    blk.layer.hf.as_ref().and_then(|h| h.deepseek.as_ref()).expect("a deepseek_v3 layer")
}

/// `apply_rotary_pos_emb_interleave` on one tensor: cos/sin's first halves (views,
/// unsqueezed), the even and odd lanes (strided views), `cat([x1·cos − x2·sin, x2·cos +
/// x1·sin])`, each product dead once its sum exists.
fn rope_interleave(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let n = x.dim(-1);
    let x1 = x.slice(-1, 0, n, 2);
    let x2 = x.slice(-1, 1, n, 2);
    let a = {
        let p = x1.mul(cos);
        let q = x2.mul(sin);
        p.sub(&q)
    };
    let b = {
        let p = x2.mul(cos);
        let q = x1.mul(sin);
        p.add(&q)
    };
    Tensor::cat(&[a, b], -1)
}

impl Block {
    /// `DeepseekV3Attention.forward`: the output and eager's attention weights.
    pub(super) fn mla_attention(&self, x: &Tensor) -> (Tensor, Option<Tensor>) {
        let _s = scope("self_attn");
        let hf = self.hf();
        let fr = frames(hf);
        let _f = py_frame(&fr.attention);
        let (_, ds) = parts(self);
        let w = weights(self);
        let (b, s) = (x.dim(0), x.dim(1));
        let (nope, rope, rkv) = (ds.qk_nope_head_dim, ds.qk_rope_head_dim, ds.kv_lora_rank);
        // q_b_proj(q_a_layernorm(q_a_proj(x))): each argument dies when its call returns. Each
        // projection is `proj`'s slot of lora::MLA_Q_LORA / MLA_Q_PROJ (peft's LoRA when adapted).
        let q_states = match &w.q_lora {
            Some((qa, qa_bias, norm, qb)) => {
                let a = self.proj(0, x, qa, qa_bias.as_ref());
                let n = rms_norm(fr, "q_a_layernorm", &a, norm, 1e-6);
                drop(a);
                self.proj(1, &n, qb, None)
            }
            None => self.proj(0, x, w.q_proj.as_ref().expect("q_proj"), None),
        };
        let q_states = q_states.view(&[b, s, usize::MAX, ds.qk_head_dim()]).transpose(1, 2);
        let q_parts = q_states.split_with_sizes(&[nope, rope], -1);
        let (q_pass, q_rot) = (q_parts[0].clone(), q_parts[1].clone());
        drop(q_parts);
        // compressed_kv is a local until forward returns; its split views keep it alive anyway.
        let compressed_kv = self.proj(2, x, &w.kv_a, w.kv_a_bias.as_ref());
        let c_parts = compressed_kv.split_with_sizes(&[rkv, rope], -1);
        let kv_nope = rms_norm(fr, "kv_a_layernorm", &c_parts[0], &w.kv_a_norm, 1e-6).unsqueeze(1);
        let k_rot = c_parts[1].unsqueeze(1);
        drop(c_parts);
        let (q_rot, k_rot) = {
            let _s = scope("rotary");
            if ds.rope_interleave {
                let _f = py_frame(&moe_frames::DEEPSEEK_V3_ROPE_INTERLEAVE);
                let half = rope / 2;
                let cos = self.cos.slice(-1, 0, half, 1).unsqueeze(1);
                let sin = self.sin.slice(-1, 0, half, 1).unsqueeze(1);
                let q = rope_interleave(&q_rot, &cos, &sin);
                let k = rope_interleave(&k_rot, &cos, &sin);
                (q, k)
            } else {
                let (cos, sin) = (self.cos.unsqueeze(1), self.sin.unsqueeze(1));
                (super::apply_rope(fr, &q_rot, &cos, &sin), super::apply_rope(fr, &k_rot, &cos, &sin))
            }
        };
        // DynamicLayer.update(kv_nope, k_rot): the cache's copies replace both names. A
        // StaticLayer's update returns its own (B, 1, max_cache_len, ·) tensors, keys of
        // kv_lora_rank and values of qk_rope_head_dim (lazy_initialization reads each one's
        // last size).
        let (kv_nope, k_rot) = match &self.cache {
            Some(cache) => {
                let _s = scope("past_key_values");
                let _c = runtime::category(Category::Activation);
                let mut c = cache.borrow_mut();
                let i = 2 * self.layer_idx;
                if let Some((max_len, past)) = self.static_cache {
                    // lazy_initialization: zeros of max_cache_len positions (keys, then values) at the
                    // first update; cumulative_length.to(device) as the dense layer's (8 B on CPU).
                    if c.len() <= i {
                        let shape = |t: &Tensor| [t.dim(0), t.dim(1), max_len, t.dim(3)];
                        let kc = Tensor::zeros(&shape(&kv_nope), kv_nope.dtype(), kv_nope.device());
                        let vc = Tensor::zeros(&shape(&k_rot), k_rot.dtype(), k_rot.device());
                        c.extend([kc, vc]);
                        if let Some(w) = &self.windows {
                            w.borrow_mut().push(Tensor::from_i64_with(&[], kv_nope.device(), || vec![0]));
                        }
                    }
                    // cache_position = arange(S) + cumulative_length, then index_copy_ in place.
                    let cache_position = super::arange_plus(s, kv_nope.device());
                    c[i].narrow(2, past, s).copy_(&kv_nope);
                    c[i + 1].narrow(2, past, s).copy_(&k_rot);
                    drop(cache_position);
                } else if c.len() > i {
                    c[i] = Tensor::cat(&[c[i].clone(), kv_nope.clone()], -2);
                    c[i + 1] = Tensor::cat(&[c[i + 1].clone(), k_rot.clone()], -2);
                } else {
                    let kc = Tensor::cat(std::slice::from_ref(&kv_nope), -2);
                    let vc = Tensor::cat(std::slice::from_ref(&k_rot), -2);
                    c.extend([kc, vc]);
                }
                let out = (c[i].clone(), c[i + 1].clone());
                drop(c);
                drop((kv_nope, k_rot));
                out
            }
            None => (kv_nope, k_rot),
        };
        let query_states = Tensor::cat(&[q_pass.clone(), q_rot.clone()], -1);
        let (key_states, value_states) = self.expand_kv(&kv_nope, &k_rot);
        let (out, attn_weights) = match hf.attn_implementation {
            super::AttnImplementation::Eager => self.eager(&query_states, &key_states, &value_states),
            super::AttnImplementation::Sdpa => (self.mla_sdpa(&query_states, &key_states, &value_states), None),
            super::AttnImplementation::FlashAttention2 => unreachable!("the options refuse flash_attention_2 for deepseek_v3"),
        };
        let out = out.reshape(&[b, s, usize::MAX]).contiguous();
        let o = self.proj(3, &out, &self.layer.o, self.layer.hf.as_ref().and_then(|h| h.o_bias.as_ref()));
        drop((out, query_states, key_states, value_states, kv_nope, k_rot, compressed_kv, q_states, q_pass, q_rot));
        (o, attn_weights)
    }

    /// `expand_kv`: `kv_b_proj` on the latent, viewed (B, S, h, nope + v) and transposed, split
    /// into k_nope and the values (views), `k_rot` expanded over the heads, and the keys built
    /// by `new_empty` and two `copy_` into its slices.
    fn expand_kv(&self, kv_nope: &Tensor, k_rot: &Tensor) -> (Tensor, Tensor) {
        let _f = py_frame(&moe_frames::DEEPSEEK_V3_EXPAND_KV);
        let (_, ds) = parts(self);
        let w = weights(self);
        let (b, s) = (kv_nope.dim(0), kv_nope.dim(2));
        let (nope, rope, v) = (ds.qk_nope_head_dim, ds.qk_rope_head_dim, ds.v_head_dim);
        let kv = self.proj(7, kv_nope, &w.kv_b, None).view(&[b, s, usize::MAX, nope + v]).transpose(1, 2);
        let h = kv.dim(1);
        let parts = kv.split_with_sizes(&[nope, v], -1);
        let (k_nope, value_states) = (parts[0].clone(), parts[1].clone());
        drop(parts);
        let k_rot = k_rot.expand(&[b, h, s, rope]);
        let key = Tensor::zeros_op(&[b, h, s, nope + rope], kv.dtype(), kv.device(), "empty");
        let key = key.copy_into_last_(0, nope, &k_nope);
        let key = key.copy_into_last_(nope, rope, &k_rot);
        drop((kv, k_nope, k_rot));
        (key, value_states)
    }

    /// `sdpa_attention_forward` for MLA: no GQA (every head has its keys). On CPU,
    /// `F.scaled_dot_product_attention` runs the flash kernel only when v's head size equals
    /// q's; otherwise the math fallback. (The options refuse CUDA backends for unequal sizes.)
    ///
    /// A StaticCache's forwards: a prefill whose mask was skipped slices the keys and values to
    /// the queries' length (`key[:, :, :q_length]`, views: is_causal over an empty cache), and a
    /// masked one passes the boolean mask, which SDPA turns into an additive one for the fused
    /// kernels (on CUDA the flash kernel takes no mask: the memory-efficient one, or math).
    fn mla_sdpa(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
        let _s = scope("attention");
        let _f = py_frame(&crate::model::py::hf_frames::SDPA_ATTENTION_FORWARD);
        let (_, ds) = parts(self);
        let causal = self.mask.is_none() && q.dim(2) > 1;
        let sq = q.dim(2);
        let (k, v) = if causal && k.dim(2) > sq { (&k.narrow(2, 0, sq), &v.narrow(2, 0, sq)) } else { (k, v) };
        let half = matches!(q.dtype(), DType::BF16 | DType::F16);
        let out = if let (Some(mask), true) = (&self.mask, v.dim(-1) == q.dim(-1)) {
            match self.hf().sdpa_backend.resolve(half, true, false, q.dim(-1), self.hf().cudnn_sdpa, k.dim(2)) {
                backend @ (super::SdpaBackend::CpuFlash | super::SdpaBackend::Efficient) => {
                    let bias = super::sdpa_float_mask(mask, q.dtype(), backend == super::SdpaBackend::CpuFlash);
                    Tensor::masked_fused_attention(backend == super::SdpaBackend::CpuFlash, q, k, v, &bias, ds.scaling)
                }
                // As the dense static path's masked prefill (transformers_5_23.rs).
                super::SdpaBackend::Cudnn => {
                    let bias = super::sdpa_float_mask(mask, q.dtype(), true);
                    Tensor::cudnn_attention(q, k, v, Some(&bias), false, ds.scaling)
                }
                // Only a forced --sdpa-backend flash gets here (auto never picks it with a mask):
                // as the dense static path, the kernel's own bytes.
                super::SdpaBackend::Flash | super::SdpaBackend::Auto => Tensor::flash_attention(q, k, v, false, ds.scaling),
                super::SdpaBackend::Math => super::math_attention(q, k, v, Some(mask), false, ds.scaling),
            }
        } else if v.dim(-1) == q.dim(-1) {
            match self.hf().sdpa_kernel(self.cfg.num_heads, self.cfg.num_kv_heads, half, k.dim(2)) {
                super::SdpaBackend::CpuFlash => Tensor::cpu_flash_attention(q, k, v, causal, ds.scaling),
                super::SdpaBackend::Flash | super::SdpaBackend::Auto => Tensor::flash_attention(q, k, v, causal, ds.scaling),
                super::SdpaBackend::Efficient => Tensor::efficient_attention(q, k, v, causal, ds.scaling),
                super::SdpaBackend::Cudnn => {
                    let bias = self.mask.as_ref().map(|m| Tensor::zeros(&[], q.dtype(), q.device()).where_scalar(m, f64::NEG_INFINITY));
                    Tensor::cudnn_attention(q, k, v, bias.as_ref(), causal, ds.scaling)
                }
                super::SdpaBackend::Math => super::math_attention(q, k, v, self.mask.as_ref(), causal, ds.scaling),
            }
        } else {
            math_sdpa(q, k, v, self.mask.as_ref(), causal, ds.scaling)
        };
        out.transpose(1, 2).contiguous()
    }

    /// `DeepseekV3MoE.forward`: the router (its logits bound to `_` until forward returns), the
    /// experts on the (T, hidden) view, then `+ shared_experts(residuals)`.
    pub(super) fn deepseek_moe(&self, x: &Tensor) -> Tensor {
        let _f = py_frame(&moe_frames::DEEPSEEK_V3_MOE);
        let (m, ds) = parts(self);
        let w = weights(self);
        let (b, s, d) = (x.dim(0), x.dim(1), x.dim(2));
        let router = self.layer.hf.as_ref().and_then(|h| h.router.as_ref()).expect("router weight");
        // peft's ParamWrapper adapters (`--target-parameters`) and their scaling.
        let lora = self.layer.hf.as_ref().and_then(|h| h.param_lora.as_ref()).zip(self.hf().lora.as_ref().map(|l| l.scaling()));
        let (logits, topk_weights, topk_indices) = {
            let _s = scope("gate");
            let _f = py_frame(&moe_frames::DEEPSEEK_V3_ROUTER);
            let (adapter, scaling) = lora.map_or((None, 1.0), |(p, s)| (p.router.as_ref(), s));
            crate::model::lora_params::router_wrapped(adapter, scaling, router, |weight| router_forward(m, ds, weight, w.e_score_bias.as_ref().expect("e_score_correction_bias"), x))
        };
        let flat = x.view(&[b * s, d]);
        let gate_up = self.layer.gate_up.weights()[0];
        let mw = crate::model::hf::moe_5_23::MoeWeights { router, gate_up, down: &self.layer.down, shared: None, lora, shared_proj: None, tp: self.tp.is_some() };
        let experts = crate::model::hf::moe_5_23::experts(m, &mw, &flat, &topk_indices, &topk_weights).view(&[b, s, d]);
        drop(flat);
        let shared = {
            let _s = scope("shared_experts");
            let _f = py_frame(&frames(self.hf()).mlp);
            let sw = w.shared.as_ref().expect("shared experts");
            // Slots 8-10: bitsandbytes' layers under a quantized load; colwise gate/up and
            // rowwise down under transformers' tp plan.
            let prod = self.proj(8, &self.colwise(x), &sw[0], None).silu().mul(&self.proj(9, &self.colwise(x), &sw[1], None));
            self.rowwise(self.proj(10, &prod, &sw[2], None))
        };
        let out = experts.add(&shared);
        drop((experts, shared, logits, topk_weights, topk_indices));
        out
    }
}

/// `_scaled_dot_product_attention_math` (torch 2.15), where a CPU run falls back for v's head
/// size unlike q's: q, k, v cast to fp32 if half; `q · √scale`; a causal mask from
/// `ones(L, S, bool).tril()` and `where`; `q · (kᵀ · √scale)` (the scaled kᵀ a temporary);
/// the mask added in place; `_safe_softmax` (the scores die at the rebinding);
/// `attn.to(origin)` (a copy if half, evaluated before the matmul, discarded by the caller);
/// the matmul with v and its cast back.
fn math_sdpa(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, causal: bool, scale: f64) -> Tensor {
    // scaled_dot_product_attention is on autocast's lower-precision list: q, k and v are cast
    // right to left (value first, autocast::lower_pair), then the composite runs below the
    // autocast key on the cast tensors (its own fp32 upcasts included).
    if crate::engine::autocast::active().is_some() {
        let lv = crate::engine::autocast::lower(v);
        let lk = crate::engine::autocast::lower(k);
        let lq = crate::engine::autocast::lower(q);
        let _plain = crate::engine::autocast::suspend();
        return math_sdpa(&lq, &lk, &lv, mask, causal, scale);
    }
    let origin = q.dtype();
    let half = matches!(q.dtype(), DType::BF16 | DType::F16);
    let up = |t: &Tensor| if half { t.to_dtype(DType::F32) } else { t.clone() };
    // v is expand_kv's strided view, (B, S, h, nope + v) transposed: `_to_copy` gives dense
    // strides in the input's order (`infer_dense_strides`), a transposed (B, S, h, v) that
    // the matmul then copies contiguous.
    let (q, k) = (up(q), up(k));
    let v = if half { v.transpose(1, 2).to_dtype(DType::F32).transpose(1, 2) } else { v.clone() };
    let sf = scale.sqrt();
    let (sq, sk, device) = (q.dim(2), k.dim(2), q.device());
    let qs = q.mul_scalar(sf);
    let float_mask = match mask {
        Some(m) if m.dtype() == DType::Bool => Some(Tensor::zeros(&[], q.dtype(), device).where_scalar(m, f64::NEG_INFINITY)),
        Some(m) => Some(m.clone()),
        None if causal => {
            let ones = Tensor::zeros_op(&[sq, sk], DType::Bool, device, "ones");
            let tril = Tensor::zeros_op(&[sq, sk], DType::Bool, device, "tril");
            drop(ones);
            let m = Tensor::zeros(&[], q.dtype(), device).where_scalar(&tril, f64::NEG_INFINITY);
            drop(tril);
            Some(m)
        }
        None => None,
    };
    let mut attn = {
        let kt = k.transpose(-2, -1).mul_scalar(sf);
        qs.matmul(&kt)
    };
    if let Some(m) = &float_mask {
        attn = attn.add_inplace_(m);
    }
    let soft = attn.safe_softmax_last();
    drop(attn);
    let weights = soft.to_dtype(origin);
    let out = soft.matmul(&v).to_dtype(origin);
    drop((weights, soft, float_mask, qs));
    out
}

/// `DeepseekV3TopkRouter.forward` on (B, S, hidden): the fp32 linear (casts of the input and
/// the weight, copies unless fp32), sigmoid, the bias-corrected scores, the top-2 sum per
/// group, the top groups scattered into a mask, the masked scores' top-k, the gather of the
/// sigmoid scores, the renormalisation (`/=` in place in PyTorch: out of place here, the same
/// bytes under autograd, in the weights' type: under autocast the sum is fp32) and the routed
/// scaling.
fn router_forward(m: &MoeConfig, ds: &DeepseekParts, weight: &Tensor, bias: &Tensor, x: &Tensor) -> (Tensor, Tensor, Tensor) {
    let d = x.dim(-1);
    let flat = x.view(&[usize::MAX, d]);
    let t = flat.dim(0);
    let (e, g) = (m.experts, ds.n_group);
    let logits = {
        let xf = flat.to_dtype(DType::F32);
        let wf = weight.to_dtype(DType::F32);
        linear("gate", &xf, &wf)
    };
    let scores = logits.sigmoid();
    let choice = scores.add(bias);
    let group_scores = {
        let (top2, idx) = choice.view(&[t, g, e / g]).topk_last(2);
        drop(idx);
        top2.sum_dim(-1, false)
    };
    let group_idx = {
        let (vals, idx) = group_scores.topk_last(ds.topk_group);
        drop(vals);
        idx
    };
    let group_mask = Tensor::zeros_op(group_scores.shape(), group_scores.dtype(), group_scores.device(), "zeros_like");
    let score_mask = group_mask.unsqueeze(-1).expand(&[t, g, e / g]).reshape(&[t, e]);
    // `scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), -inf)`: the
    // rebinding frees the unmasked scores.
    let masked = {
        let not = score_mask.to_dtype(DType::Bool).logical_not();
        choice.masked_fill_grad(&not, f64::NEG_INFINITY)
    };
    drop(choice);
    let choice = masked;
    let topk_indices = {
        let (vals, idx) = choice.topk_last(m.top_k);
        drop(vals);
        idx
    };
    let mut topk_weights = scores.gather(1, &topk_indices);
    // `denominator` is a local until the router returns.
    let mut denominator = None;
    if m.norm_topk_prob {
        let den = topk_weights.sum_dim(-1, true).add_scalar(1e-20);
        topk_weights = topk_weights.div_keeping_dtype(&den);
        denominator = Some(den);
    }
    topk_weights = topk_weights.mul_scalar(ds.routed_scaling_factor);
    drop((flat, scores, choice, group_scores, group_idx, group_mask, score_mask, denominator));
    (logits, topk_weights, topk_indices)
}
