//! `Gemma2ForCausalLM` and `Gemma3ForCausalLM` (transformers 5.23.0,
//! `models/gemma2/modeling_gemma2.py`, `models/gemma3/modeling_gemma3.py`): Llama's attention
//! and MLP with
//! - the embedding times `embed_scale` (a 0-d buffer of √hidden in the load dtype) cast to the weights' type;
//! - `GemmaRMSNorm`: the whole norm in fp32, `output * (1 + weight.float())`, cast back last;
//! - four norms per layer (input, post-attention, pre- and post-feedforward);
//! - gelu_pytorch_tanh in the MLP;
//! - two masks (`create_causal_mask`, `create_sliding_window_causal_mask`), each layer taking
//!   its type's;
//! - Gemma 2: tanh soft-capping of the eager scores (sdpa is refused by transformers itself);
//!   Gemma 3: q_norm/k_norm on the transposed heads after all three projections, and a cos/sin
//!   pair per layer type (two RoPE bases);
//! - tanh soft-capping of the logits after lm_head (`final_logit_softcapping`).
//!
//! The sliding layers' DynamicSlidingWindowLayer keeps `cat([empty, k])[..., -w+1:, :]`, a view
//! of the full copy: in one forward it holds what DynamicLayer holds.
use super::{causal_mask_sized, packed_sequence_check, rms_norm, rotary_with, Block};
use crate::engine::runtime::{self, py_frame, scope};
use crate::engine::{DType, Device, Tensor};
use crate::model::hf::gemma::GemmaConfig;
use crate::model::hf::HfConfig;
use crate::model::init::Init;
use crate::model::py::hf_frames::{self as py, HfFrames};
use crate::model::{Builder, Model};
use crate::record::Category;

/// Whether `fr` is a Gemma modeling file (its RMSNorm is `GemmaRMSNorm`).
pub(super) fn is_gemma_frames(fr: &'static HfFrames) -> bool {
    std::ptr::eq(fr, &py::GEMMA2) || std::ptr::eq(fr, &py::GEMMA3_TEXT)
}

/// `Gemma2RMSNorm.forward`: `output = self._norm(x.float())` (`x * rsqrt(x.pow(2).mean(-1,
/// keepdim=True) + eps)`, each temporary dead once used), `output = output * (1.0 +
/// self.weight.float())`, `output.type_as(x)`.
pub(super) fn gemma_rms_norm(fr: &'static HfFrames, x: &Tensor, w: &Tensor, eps: f64) -> Tensor {
    let input_dtype = x.dtype();
    let normed = {
        let xf = x.to_dtype(DType::F32);
        let r = {
            let m = xf.pow_scalar(2.0).mean_dim(-1, true);
            let a = m.add_scalar(eps);
            drop(m);
            a.rsqrt()
        };
        xf.mul(&r)
    };
    let scale = {
        let wf = w.to_dtype(DType::F32);
        wf.add_scalar(1.0)
    };
    let _ = fr;
    let out = normed.mul(&scale);
    drop((normed, scale));
    out.to_dtype(input_dtype)
}

/// The four norms of a decoder layer in registration order (`input_layernorm`,
/// `post_attention_layernorm`, `pre_feedforward_layernorm`, `post_feedforward_layernorm`),
/// zero-initialised (`1 + w`): (before attention, before the MLP, [after attention, after the MLP]).
pub(super) fn layer_norms(b: &mut Builder, p: &dyn Fn(&str) -> String, d: usize) -> (Tensor, Tensor, [Tensor; 2]) {
    let zero = Init::Normal { std: 0.0 };
    let input = b.param(p("input_layernorm.weight"), &[d], zero);
    let post_attn = b.param(p("post_attention_layernorm.weight"), &[d], zero);
    let pre_ffn = b.param(p("pre_feedforward_layernorm.weight"), &[d], zero);
    let post_ffn = b.param(p("post_feedforward_layernorm.weight"), &[d], zero);
    (input, pre_ffn, [post_attn, post_ffn])
}

/// The rotary buffers and `embed_scale`: `model.embed_tokens.embed_scale` (0-d, in `load`) and, per
/// layer type present (full first, as `sorted(set(layer_types))`), `inv_freq` and
/// `original_inv_freq` (Gemma 2: one pair). Returns the first type's inv_freq and the other
/// buffers as [`Model::buffers`] keeps them: [first original, embed_scale, (second inv_freq,
/// second original)].
pub(super) fn buffers(g: &GemmaConfig, gemma3: bool, full_theta: f64, d: usize, hd: usize, load: DType, device: Device) -> (Tensor, Vec<Tensor>) {
    let _c = runtime::category(Category::Buffer);
    // `torch.tensor(embed_scale)` takes the default dtype, which from_config/from_pretrained
    // set to the load dtype while the model is built (measured: bf16 in a bf16 load), so the
    // forward's `.to(weight.dtype)` copies only once the weights have been cast away from it
    // (prepare_model_for_kbit_training casts parameters, not buffers).
    let embed_scale = Tensor::from_f64_with(&[], load, device, || vec![(d as f64).sqrt()]);
    let half = hd / 2;
    let pair = |theta: f64| {
        let inv = || (0..half).map(|j| 1.0 / theta.powf((2 * j) as f64 / hd as f64)).collect::<Vec<_>>();
        (Tensor::from_f64_with(&[half], DType::F32, device, inv), Tensor::from_f64_with(&[half], DType::F32, device, inv))
    };
    let thetas: Vec<f64> = if gemma3 { g.types().into_iter().map(|s| if s { g.rope_local_base_freq } else { full_theta }).collect() } else { vec![full_theta] };
    let (inv, original) = pair(thetas[0]);
    let mut rest = vec![original, embed_scale];
    if let Some(&t) = thetas.get(1) {
        let (i2, o2) = pair(t);
        rest.extend([i2, o2]);
    }
    (inv, rest)
}

/// `Gemma2TextScaledWordEmbedding.forward`: `super().forward(ids) * embed_scale.to(weight.dtype)`;
/// the lookup dies once the product exists (the product saves only the scale).
pub(super) fn scale_embedding(m: &Model, embeds: Tensor) -> Tensor {
    let scale = m.buffers[1].to_dtype(m.embedding.dtype());
    let out = embeds.mul(&scale);
    drop((embeds, scale));
    out
}

/// The masks Gemma's model forward builds, both held until it returns: `create_causal_mask`
/// (None for sdpa: `_ignore_causal_mask_sdpa`) then `create_sliding_window_causal_mask`, for
/// `s` queries after `past` cached positions (generate's decode steps). Each first runs
/// `find_packed_sequence_indices` when there is neither a cache nor a mask.
#[allow(clippy::too_many_arguments)]
pub(super) fn masks(hf: &HfConfig, g: &GemmaConfig, position_ids: &Tensor, check_packed: bool, b: usize, s: usize, past: usize, dtype: DType, device: Device) -> (Option<Tensor>, Option<Tensor>) {
    if check_packed {
        packed_sequence_check(position_ids, b);
    }
    let full_cfg = HfConfig { sliding_window: None, ..hf.clone() };
    let full = causal_mask_sized(&full_cfg, b, s, past, past + s, dtype, device, None, true);
    if check_packed {
        packed_sequence_check(position_ids, b);
    }
    let sliding = sliding_mask(hf, g.sliding_window, b, s, past, dtype, device);
    (full, sliding)
}

/// `DynamicSlidingWindowLayer.get_mask_sizes(s)` after `past` positions: (kv_length,
/// kv_offset). Once the window is reached the layer holds its last `window - 1` positions.
pub(super) fn sliding_mask_sizes(window: usize, past: usize, s: usize) -> (usize, usize) {
    let offset = (past + 1).saturating_sub(window);
    let kv = if past >= window { window - 1 + s } else { past + s };
    (kv, offset)
}

/// `create_sliding_window_causal_mask` for `s` queries after `past` positions, over the
/// sliding cache layer's keys ([`sliding_mask_sizes`]): sdpa skips it while the keys are
/// fewer than the window (`_ignore_causal_mask_sdpa`'s `kv_length >= local_attention_size`);
/// else `sliding_window_causal_mask_function` through `and_masks`: `ones(()) & (kv > q - w)`,
/// then `& (kv <= q)`, each (1, 1, S, kv) bool, expanded to B; eager turns it into
/// `where(mask, 0, finfo.min)`.
#[allow(clippy::too_many_arguments)]
fn sliding_mask(hf: &HfConfig, window: usize, b: usize, s: usize, past: usize, dtype: DType, device: Device) -> Option<Tensor> {
    sliding_mask_sized(hf, window, b, s, past, sliding_mask_sizes(window, past, s), true, dtype, device)
}

/// [`sliding_mask`] over `kv.0` keys from `kv.1` on (a cache layer's `get_mask_sizes`), with
/// sdpa's `allow_is_causal_skip` (off for a compileable cache's one-query steps).
#[allow(clippy::too_many_arguments)]
pub(super) fn sliding_mask_sized(hf: &HfConfig, window: usize, b: usize, s: usize, past: usize, (kv, kv_offset): (usize, usize), allow_skip: bool, dtype: DType, device: Device) -> Option<Tensor> {
    use crate::model::hf::AttnImplementation as A;
    let _s = scope("mask");
    let _f = py_frame(&py::CREATE_SLIDING_WINDOW_CAUSAL_MASK);
    match hf.attn_implementation {
        A::FlashAttention2 => return None,
        A::Sdpa if allow_skip && kv < window => return None,
        _ => {}
    }
    let batch_arange = Tensor::arange(b, device);
    let head_arange = Tensor::arange(1, device);
    let q_arange = Tensor::arange(s, device).add_int(past as i64);
    let kv_arange = Tensor::arange(kv, device).add_int(kv_offset as i64);
    let qi = q_arange.view(&[1, 1, s, 1]);
    let kj = kv_arange.view(&[1, 1, 1, kv]);
    let mask = {
        let one = Tensor::ones(&[], DType::Bool, device);
        let inside = {
            // `kv_idx > q_idx - sliding_window`: one (1, 1, S, 1) int64 difference, then the
            // comparison (kv > q - w  ⇔  kv >= q - w + 1 for integers).
            let shifted = qi.add_int(1 - window as i64);
            kj.ge(&shifted)
        };
        let first = one.logical_and(&inside);
        drop((inside, one));
        let causal = qi.ge(&kj);
        let both = first.logical_and(&causal);
        drop((causal, first));
        both
    };
    drop((batch_arange, head_arange, qi, kj, q_arange, kv_arange));
    let mask = mask.expand(&[b, 1, s, kv]);
    match hf.attn_implementation {
        A::Eager => {
            let zero = Tensor::zeros(&[], dtype, device);
            Some(zero.where_scalar(&mask, dtype.finfo_min()))
        }
        _ => Some(mask),
    }
}

/// `Gemma3RotaryEmbedding.forward` for each layer type present (`for layer_type in
/// set(layer_types)`; full first here, the two calls being the same size): (cos, sin) per
/// type, indexed by `sliding as usize`. Gemma 2: one pair for both.
pub(super) fn rotaries(m: &Model, g: &GemmaConfig, gemma3: bool, position_ids: &Tensor, dtype: DType) -> [Option<(Tensor, Tensor)>; 2] {
    let fr = if gemma3 { &py::GEMMA3_TEXT } else { &py::GEMMA2 };
    let first = m.rope_buffer.as_ref().expect("inv_freq buffer");
    if !gemma3 {
        let pair = rotary_with(fr, first, position_ids, dtype);
        return [Some(pair.clone()), Some(pair)];
    }
    let mut out = [None, None];
    for (k, sliding) in g.types().into_iter().enumerate() {
        let inv = if k == 0 { first } else { &m.buffers[2] };
        out[sliding as usize] = Some(rotary_with(fr, inv, position_ids, dtype));
    }
    out
}

/// The logits' soft-capping, `logits / c`, `tanh`, `* c`, each rebinding freeing the value
/// before it unless autograd saved it (tanh saves its output).
pub(super) fn softcap(x: Tensor, c: f64) -> Tensor {
    let d = x.div_scalar(c);
    drop(x);
    let t = d.tanh();
    drop(d);
    t.mul_scalar(c)
}

impl Block {
    /// `Gemma2DecoderLayer.forward` / `Gemma3DecoderLayer.forward`.
    pub(super) fn gemma_layer(&self, x: Tensor) -> Tensor {
        let fr = super::frames(self.hf());
        let _f = py_frame(&fr.decoder_layer);
        let (l, eps) = (&self.layer, self.cfg.norm_eps);
        let post = l.hf.as_ref().and_then(|h| h.post_norms.as_ref()).expect("Gemma's post norms");
        let residual = x;
        let h = rms_norm(fr, "input_layernorm", &residual, &l.attn_norm, eps);
        // `hidden_states, _ = self.self_attn(...)`: eager's weights live until the layer returns.
        let (a, _weights) = self.attention(&h);
        drop(h);
        let normed = rms_norm(fr, "post_attention_layernorm", &a, &post[0], eps);
        drop(a);
        let h = residual.add(&normed);
        drop((normed, residual));
        let residual = h;
        let normed = rms_norm(fr, "pre_feedforward_layernorm", &residual, &l.ffn_norm, eps);
        let m = self.mlp(&normed);
        drop(normed);
        let normed = rms_norm(fr, "post_feedforward_layernorm", &m, &post[1], eps);
        drop(m);
        residual.add(&normed)
    }

    /// Gemma 3's projections: q, k and v each `proj(x).view(B, S, -1, d).transpose(1, 2)`, then
    /// `q_norm(q)` and `k_norm(k)` (the unnormed ones die at the rebinding).
    pub(super) fn gemma3_qkv(&self, x: &Tensor, b: usize, s: usize) -> [Tensor; 3] {
        let fr = super::frames(self.hf());
        let extra = self.layer.hf.as_ref().expect("hf layer");
        let ws = self.layer.qkv.weights();
        let hd = self.hf().head_dim;
        let bias = |i: usize| extra.qkv_bias.as_ref().map(|bs| &bs[i]);
        let project = |i: usize| self.proj(i, &self.colwise(x), ws[i], bias(i)).view(&[b, s, usize::MAX, hd]).transpose(1, 2);
        let (q, k, v) = (project(0), project(1), project(2));
        let n = extra.qk_norm.as_ref().expect("Gemma 3's q_norm and k_norm");
        let q = rms_norm(fr, "q_norm", &q, &n[0], self.cfg.norm_eps);
        let k = rms_norm(fr, "k_norm", &k, &n[1], self.cfg.norm_eps);
        [q, k, v]
    }

    /// `eager_attention_forward` with `scaling = query_pre_attn_scalar ** -0.5` and Gemma 2's
    /// score soft-capping (`/ softcap`, tanh, `* softcap`) before the mask.
    pub(super) fn gemma_eager(&self, q: &Tensor, k: &Tensor, v: &Tensor, g: &GemmaConfig) -> (Tensor, Option<Tensor>) {
        let _s = scope("attention");
        let fr = super::frames(self.hf());
        let _f = py_frame(&fr.eager_attention_forward);
        let scaling = g.query_pre_attn_scalar.powf(-0.5);
        let n_rep = self.cfg.num_heads / self.cfg.num_kv_heads;
        let ks = super::repeat_kv(fr, k, n_rep);
        let vs = super::repeat_kv(fr, v, n_rep);
        let mut w = q.matmul(&ks.transpose(2, 3)).mul_scalar(scaling);
        if let Some(c) = g.attn_logit_softcapping {
            w = softcap(w, c);
        }
        if let Some(m) = &self.mask {
            w = w.add(m);
        }
        w = w.softmax_as(-1, DType::F32).to_dtype(q.dtype());
        let out = w.matmul(&vs);
        (out.transpose(1, 2).contiguous(), Some(w))
    }
}

/// `final_logit_softcapping` on the logits lm_head returned (None: the logits as they are).
pub(super) fn final_softcap(hf: &HfConfig, logits: Tensor) -> Tensor {
    match hf.gemma.as_ref().and_then(|g| g.final_logit_softcapping) {
        Some(c) => softcap(logits, c),
        None => logits,
    }
}
