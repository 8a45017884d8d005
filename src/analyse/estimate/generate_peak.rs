//! The peak of transformers 5.23's greedy `generate()` with a DynamicCache in closed form,
//! from the op sequence of src/model/hf/generation_5_23.rs over transformers_5_23.rs's
//! forward (no_grad): the live set at each moment that can hold the peak, the largest
//! (the first reached on a tie) taken.
//!
//! Covered: bf16 weights, sdpa attention on its flash kernel (no mask: the cache never passes
//! a sliding window: past one the session states the lower bound instead, generate::past_window) or eager attention (its mask and softmax, and the
//! attention weights the decoder layer holds through its MLP), greedy or sampling (temperature, top-k,
//! num_return_sequences), min_new_tokens. Other runs are stated by [`covers`], and the
//! caller shows the simulated peak, labelled, for them.
//!
//! Notation: B0 prompts, B = B0 × num_return_sequences rows, S prompt tokens, N new tokens, X = B × S (the prefill's tokens), D
//! hidden, F intermediate, H heads, K kv heads, d head_dim, L layers, V vocab, e = 2 (bf16),
//! ids and positions int64 (8 bytes). The decode step that can hold the peak is the last
//! one (N − 1): its cache, ids and positions are the largest, every other term the same.
use crate::engine::DType;
use crate::model::hf::generation_config::{CacheImplementation, GenerateConfig};
use crate::model::hf::moe::ExpertsImplementation;
use crate::model::hf::{Arch, AttnImplementation, SdpaBackend};
use crate::model::ModelConfig;
use serde::Serialize;

/// Where the peak is and what it holds.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct GeneratePeak {
    /// Bytes requested at the peak: the weights, the prompt's ids and every live tensor.
    pub bytes: u64,
    /// "prefill" or "decode step k".
    pub step: String,
    /// The module scope and the op of the allocation that reaches it.
    pub scope: String,
    pub op: String,
    /// The moments compared, with their live bytes (the printout's derivation).
    pub candidates: Vec<(String, u64)>,
}

/// Why the closed form does not cover this run (None: it does).
pub fn covers(cfg: &ModelConfig, dtype: DType, gc: &GenerateConfig) -> Option<String> {
    let hf = cfg.hf()?;
    if dtype != DType::BF16 {
        return Some(format!("{} weights (the closed form derives bf16; fp32's sdpa runs the math or memory-efficient kernel)", dtype.name()));
    }
    if hf.attn_implementation == AttnImplementation::FlashAttention2 {
        return Some("attn_implementation flash_attention_2 (the closed form derives sdpa and eager)".into());
    }
    if hf.attn_implementation == AttnImplementation::Sdpa && hf.sdpa_kernel(cfg.num_heads, cfg.num_kv_heads, true, 1) != SdpaBackend::Flash {
        return Some("an sdpa kernel other than flash (head_dim above 256 or not a multiple of 8, or a forced backend)".into());
    }
    if !matches!(hf.model_type, Arch::Llama | Arch::Mistral | Arch::Qwen2 | Arch::Qwen3) || hf.moe.is_some() || hf.lora.is_some() || hf.bnb.is_some() {
        return Some("a model other than a dense llama, mistral, qwen2 or qwen3 without adapters".into());
    }
    if hf.mlp_bias || hf.o_bias {
        return Some("mlp or o_proj biases".into());
    }
    if gc.cache != CacheImplementation::Dynamic {
        return Some(format!("{} (the closed form derives greedy and sampling with a DynamicCache)", gc.describe()));
    }
    None
}

/// The sizes the terms read, in u64.
struct Dims {
    b0: u64,
    b: u64,
    s: u64,
    n: u64,
    d: u64,
    f: u64,
    h: u64,
    k: u64,
    hd: u64,
    l: u64,
    v: u64,
    e: u64,
    eos: u64,
    pad_tensor: bool,
    /// The config's bos ids (a device tensor generate keeps), and whether a batch of more
    /// than one row with a pad token keeps generate's right-padding check (a 0-d bool).
    bos: u64,
    right_padding: bool,
    qk_norm: bool,
    /// do_sample, and its warpers: temperature != 1, top_k (clamped to V; 0: none).
    sample: bool,
    temperature: bool,
    top_k: u64,
    /// min_new_tokens where the config has an eos token (0: no processor).
    min_new: u64,
    /// attn_implementation eager (else sdpa's flash kernel).
    eager: bool,
}

fn mul(xs: &[u64]) -> u64 {
    xs.iter().try_fold(1u64, |a, &x| a.checked_mul(x)).expect("sizes checked before the estimate")
}

fn sum(xs: &[u64]) -> u64 {
    xs.iter().try_fold(0u64, |a, &x| a.checked_add(x)).expect("sizes checked before the estimate")
}

impl Dims {
    // ---- held for the whole call ----

    /// LlamaRotaryEmbedding's `inv_freq` and `original_inv_freq` buffers (d/2 fp32 each).
    fn rope_buffers(&self) -> u64 {
        mul(&[2, self.hd / 2, 4])
    }
    /// The caller's prompt, `input_ids` (B0, S) int64 (generate's `input_ids` is the same
    /// tensor), and with num_return_sequences its repeat_interleave (B, S), generate's own.
    fn prompt(&self) -> u64 {
        sum(&[mul(&[self.b0, self.s, 8]), if self.b != self.b0 { mul(&[self.b, self.s, 8]) } else { 0 }])
    }
    /// `_prepare_special_tokens`: bos_token_tensor and eos_token_tensor; a pad_token_id of
    /// the config's own is a tensor too (else the pad is eos[0], a view). Then generate's
    /// `has_right_padding` (a 0-d bool) of a batch without an attention mask.
    fn special_tokens(&self) -> u64 {
        sum(&[mul(&[self.bos, 8]), mul(&[self.eos, 8]), if self.pad_tensor { 8 } else { 0 }, u64::from(self.right_padding)])
    }
    /// `_prepare_position_ids_for_generation`: the masked_fill result (repeat_interleave'd to
    /// B rows with num_return_sequences), kept by generate's model_kwargs until it returns.
    fn position_ids(&self) -> u64 {
        mul(&[self.b, self.s, 8])
    }
    /// `_sample`'s `unfinished_sequences` (B,) int64, rebound to a same-sized product each step.
    fn unfinished(&self) -> u64 {
        mul(&[self.b, 8])
    }
    fn fixed(&self, weights: u64) -> u64 {
        sum(&[weights, self.rope_buffers(), self.prompt(), self.special_tokens(), self.position_ids(), self.unfinished()])
    }

    // ---- the forward's own tensors, for `x` query tokens after `past` cached positions ----

    /// One layer's keys (or values): (B, K, positions, d).
    fn cache_half(&self, positions: u64) -> u64 {
        mul(&[self.b, self.k, positions, self.hd, self.e])
    }
    /// `embed_tokens` (held as `inputs_embeds` until the model returns), and the layer input
    /// the loop's `hidden_states` holds (the same tensor when L = 1).
    fn embeds_and_input(&self, x: u64) -> u64 {
        mul(&[if self.l >= 2 { 2 } else { 1 }, x, self.d, self.e])
    }
    /// `rotary_emb`: cos and sin (B, q, d) in the weights' dtype.
    fn cos_sin(&self, x: u64) -> u64 {
        mul(&[2, x, self.hd, self.e])
    }
    /// One (x, D) activation: a residual, a norm's output, a projection's.
    fn act(&self, x: u64) -> u64 {
        mul(&[x, self.d, self.e])
    }
    /// LlamaRMSNorm's fp32 upcast `hidden_states.to(float32)` beside `hs * rsqrt(...)`, and
    /// the variance and its rsqrt (x, 1) fp32: the norm's high point, at the product.
    fn rms_norm_transient(&self, x: u64, width: u64) -> u64 {
        sum(&[mul(&[2, x, width, 4]), mul(&[2, x, 4])])
    }
    /// LlamaMLP: act_fn(gate_proj(x)), up_proj(x) and their product, (x, F) each.
    fn mlp_transient(&self, x: u64) -> u64 {
        mul(&[3, x, self.f, self.e])
    }
    /// apply_rotary_pos_emb on the queries, at `rotate_half(q) * sin`: the q, k, v projections
    /// and `q * cos`, `rotate_half(q)` and the product (x, H·d) each.
    fn rope_q_transient(&self, x: u64) -> u64 {
        sum(&[mul(&[4, x, self.h, self.hd, self.e]), mul(&[2, x, self.k, self.hd, self.e])])
    }
    /// Qwen3's q_norm on the query projection (x, H, d): the projection beside the norm's
    /// fp32 transients.
    fn q_norm_transient(&self, x: u64) -> u64 {
        sum(&[mul(&[x, self.h, self.hd, self.e]), self.rms_norm_transient(mul(&[x, self.h]), self.hd)])
    }
    /// The last position's logits (B, 1, V) from lm_head (logits_to_keep=1).
    fn logits(&self) -> u64 {
        mul(&[self.b, self.v, self.e])
    }
    /// `outputs.logits[:, -1].to(copy=True, dtype=float32)`.
    fn next_token_logits(&self) -> u64 {
        mul(&[self.b, self.v, 4])
    }
    /// `_prefill`'s `input_ids.clone()` (model_inputs), dead when `_prefill` returns.
    fn prefill_ids_clone(&self) -> u64 {
        mul(&[self.b, self.s, 8])
    }

    // ---- eager attention, `q` queries per row over `kv` keys ----

    /// create_causal_mask's eager mask, `torch.where(mask, 0, finfo.min)`: (B, 1, q, kv),
    /// held until the model returns (sdpa: none, is_causal).
    fn mask(&self, q: u64, kv: u64) -> u64 {
        if self.eager { mul(&[self.b, q, kv, self.e]) } else { 0 }
    }
    /// repeat_kv's copies of the keys and values (B, H, kv, d) with grouped-query heads:
    /// `expand(...).reshape(...)` copies unless one kv head makes it a view.
    fn repeated_kv(&self, kv: u64) -> u64 {
        if self.eager && self.k > 1 && self.k < self.h { mul(&[2, self.b, self.h, kv, self.hd, self.e]) } else { 0 }
    }
    /// eager_attention_forward's weights (B, H, q, kv) in the weights' dtype, returned and
    /// held by the decoder layer until it returns (through its MLP).
    fn attn_weights(&self, q: u64, kv: u64) -> u64 {
        if self.eager { mul(&[self.b, self.h, q, kv, self.e]) } else { 0 }
    }
    /// The softmax's high point: the masked scores beside their fp32 copy
    /// (`softmax(dim=-1, dtype=float32)`'s `_to_copy`) and the fp32 softmax.
    fn softmax_transient(&self, q: u64, kv: u64) -> u64 {
        mul(&[self.b, self.h, q, kv, self.e + 8])
    }

    // ---- the decode loop's tensors at step k ----

    /// `input_ids` (B, S + k) and `_sample`'s `position_ids` (B, S + k), grown by a cat a step.
    fn ids_and_positions(&self, k: u64) -> u64 {
        mul(&[2, self.b, self.s + k, 8])
    }
    /// The step's model_inputs (input_ids[:, -1:] and position_ids[..., -1:] clones) and
    /// what the previous step left bound: [`Dims::previous_scores`].
    fn decode_carried(&self) -> u64 {
        sum(&[mul(&[2, self.b, 8]), self.previous_scores()])
    }
    /// Whether a logits processor makes the scores a tensor of their own.
    fn processed(&self) -> bool {
        self.min_new > 0 || self.sample && (self.temperature || self.top_k > 0)
    }
    /// `next_token_logits`, `next_token_scores` (a tensor of its own once a warper ran),
    /// `probs` (sampling) and `next_tokens` (B,) of the previous step: bound until rebound.
    fn previous_scores(&self) -> u64 {
        let copies = 1 + u64::from(self.processed()) + u64::from(self.sample);
        sum(&[mul(&[copies, self.next_token_logits()]), mul(&[self.b, 8])])
    }
    /// The moments after the logits' fp32 copy, over `common` (what the step holds besides
    /// the scores), `old` the previous step's [`Dims::previous_scores`] (0 in the prefill).
    /// `_to_copy`: the new copy beside the old scores. With top-k (TopKLogitsWarper:
    /// `scores < topk(scores, k)[0][..., -1, None]`, `masked_fill`): the topk values and
    /// indices, then the (B, V) bool mask beside the filled scores, over the new copy and the
    /// temperature's quotient (the old logits dead by then: the old scores keep theirs). The
    /// sampling's `multinomial`: probs, its exponential draws and the (B, 1) result, beside
    /// the scores and the old next_tokens. With min_new_tokens, first MinLengthLogitsProcessor
    /// and MinNewTokensLengthLogitsProcessor: each `arange(V)`, `isin(…, eos)` (V bool) and
    /// `scores.clone()`, and while the step is `early` (fewer new tokens than the minimum)
    /// `torch.where(eos_mask, -inf, scores)` with its 0-d fp32 scalar; the second beside the
    /// first's output.
    fn after_logits(&self, common: u64, old: u64, early: bool) -> Vec<(&'static str, u64)> {
        let bv4 = self.next_token_logits();
        let old_tokens = if old > 0 { mul(&[self.b, 8]) } else { 0 };
        let old_after_copy = if self.processed() && old > 0 { old - bv4 } else { old };
        // The scores the warpers start from when a processor made them a tensor of their own.
        let quotient = if self.temperature && self.sample || self.min_new > 0 { bv4 } else { 0 };
        let mut c = vec![("_to_copy", sum(&[common, old, bv4]))];
        if self.min_new > 0 {
            let vocab = sum(&[mul(&[self.v, 8]), self.v]);
            let base = sum(&[common, old_after_copy, bv4, vocab]);
            if early {
                c.push(("where", sum(&[base, bv4, 4, bv4])));
                c.push(("where", sum(&[base, bv4, bv4, 4, bv4])));
            } else {
                c.push(("isin", sum(&[base, bv4])));
                c.push(("isin", sum(&[base, bv4, bv4])));
            }
        }
        if !self.sample {
            return c;
        }
        if self.top_k > 0 {
            c.push(("topk", sum(&[common, old_after_copy, bv4, quotient, mul(&[self.b, self.top_k, 12])])));
            c.push(("masked_fill", sum(&[common, old_after_copy, bv4, quotient, mul(&[self.b, self.v]), bv4])));
        }
        let scores = if self.processed() { bv4 } else { 0 };
        c.push(("multinomial", sum(&[common, old_tokens, bv4, scores, mul(&[2, bv4]), mul(&[self.b, 8])])));
        c
    }
}

/// The sizes of a run of `generate()` with `e`-byte weights.
fn dims(cfg: &ModelConfig, e: u64, b: usize, s: usize, gc: &GenerateConfig) -> Dims {
    let n = gc.max_new_tokens;
    let rows = b.checked_mul(gc.num_return_sequences).expect("sizes checked before the estimate");
    let hf = cfg.hf().expect("checked: an hf model");
    Dims {
        b0: b as u64,
        b: rows as u64,
        s: s as u64,
        n: n as u64,
        d: cfg.d_model as u64,
        f: cfg.d_ff as u64,
        h: cfg.num_heads as u64,
        k: cfg.num_kv_heads as u64,
        hd: hf.head_dim as u64,
        l: cfg.num_layers as u64,
        v: cfg.vocab_size as u64,
        e,
        eos: hf.eos_token_id.len() as u64,
        pad_tensor: hf.pad_token_id.is_some(),
        bos: hf.bos_token_id.len() as u64,
        right_padding: b > 1 && (hf.pad_token_id.is_some() || !hf.eos_token_id.is_empty()),
        qk_norm: hf.model_type == Arch::Qwen3,
        sample: gc.do_sample,
        temperature: gc.temperature != 1.0,
        top_k: gc.top_k.min(cfg.vocab_size) as u64,
        min_new: if hf.eos_token_id.is_empty() { 0 } else { gc.min_new_tokens as u64 },
        eager: hf.attn_implementation == AttnImplementation::Eager,
    }
}

/// The peak of `model.generate(input_ids, max_new_tokens=n)` at (B, S, N) on a covered run
/// (see [`covers`]); `weights` are the parameters' bytes.
pub fn peak(cfg: &ModelConfig, weights: u64, b: usize, s: usize, gc: &GenerateConfig) -> GeneratePeak {
    let z = dims(cfg, 2, b, s, gc);
    let x = mul(&[z.b, z.s]);
    let all_layers = |positions: u64| mul(&[2, z.l, z.cache_half(positions)]);
    let fixed = z.fixed(weights);
    // The prefill forward: generate's tensors, the ids' clone, embeddings, cos/sin.
    let prefill_base = sum(&[fixed, z.prefill_ids_clone(), z.embeds_and_input(x), z.cos_sin(x), z.mask(z.s, z.s)]);
    let prefill_weights = z.attn_weights(z.s, z.s);
    let cache_before_last = mul(&[2, z.l - 1, z.cache_half(z.s)]);
    let mut c: Vec<(u64, &str, &str, u64)> = vec![
        // The last layer's attention: its input norm's output and the rotary products.
        (0, "self_attn.rotary", "mul", sum(&[prefill_base, cache_before_last, z.act(x), z.rope_q_transient(x)])),
        // The last layer's post_attention_layernorm over the residual, the cache complete.
        (0, "post_attention_layernorm", "mul", sum(&[prefill_base, all_layers(z.s), prefill_weights, z.act(x), z.rms_norm_transient(x, z.d)])),
        // The last layer's MLP: the residual, the norm's output, gate/up/product.
        (0, "mlp", "mul", sum(&[prefill_base, all_layers(z.s), prefill_weights, mul(&[2, z.act(x)]), z.mlp_transient(x)])),
        // lm_head on the final norm's output (the last position, a view of the whole).
        (0, "lm_head", "mm", sum(&[fixed, z.prefill_ids_clone(), all_layers(z.s), z.act(x), z.logits()])),
        // The stopping criteria's `unfinished_sequences & ~criteria` (mul) after the first
        // token: the fp32 logits (and scores, probs), next_tokens, input_ids and position_ids
        // grown by a column, `~is_done` (B,) bool beside the old and the new
        // unfinished_sequences.
        (0, "generate", "mul", sum(&[fixed, all_layers(z.s), z.logits(), z.ids_and_positions(1), z.previous_scores(), z.b, z.unfinished()])),
    ];
    // The first token's scores: position_ids grown by a column (input_ids is the prompt).
    let prefill_common = sum(&[fixed, all_layers(z.s), z.logits(), mul(&[z.b, z.s + 1, 8])]);
    let at = c.len() - 1;
    let first: Vec<_> = z.after_logits(prefill_common, 0, z.min_new > 0).into_iter().map(|(op, bytes)| (0, "generate", op, bytes)).collect();
    c.splice(at..at, first);
    if z.eager {
        // eager_attention_forward's softmax in the last layer: the input norm's output, the
        // rotated queries, repeat_kv's copies and the scores.
        let at = c.iter().position(|t| t.1 == "post_attention_layernorm").expect("pushed above");
        let held = sum(&[prefill_base, all_layers(z.s), z.act(x), mul(&[x, z.h, z.hd, z.e]), z.repeated_kv(z.s)]);
        c.insert(at, (0, "self_attn.attention", "softmax", sum(&[held, z.softmax_transient(z.s, z.s)])));
        // `attn_weights @ value_states` (B, H, S, d), then its `transpose(1, 2).contiguous()`
        // copy (none for one query: the transpose is contiguous already).
        let outputs = if z.s > 1 { ("clone", 2) } else { ("bmm", 1) };
        c.insert(at + 1, (0, "self_attn.attention", outputs.0, sum(&[held, prefill_weights, mul(&[outputs.1, x, z.h, z.hd, z.e])])));
    }
    if z.qk_norm {
        c.insert(0, (0, "self_attn.q_norm", "mul", sum(&[prefill_base, cache_before_last, z.act(x), z.q_norm_transient(x)])));
    }
    // The last step that still masks eos (k = min_new_tokens − 1), when it is not the last:
    // its processors' `where` copies may outweigh the one position more of the last step.
    if z.min_new >= 2 && z.min_new < z.n {
        let k = z.min_new - 1;
        let common = sum(&[fixed, z.ids_and_positions(k), mul(&[2, z.b, 8]), mul(&[z.b, 8]), all_layers(z.s + k), z.logits()]);
        for (op, bytes) in z.after_logits(common, z.previous_scores(), true) {
            c.push((k, "generate", op, bytes));
        }
    }
    if z.n >= 2 {
        // The last decode step, k = N − 1: past = S + N − 2 positions, one query per row.
        let k = z.n - 1;
        let past = z.s + z.n - 2;
        let end = all_layers(past + 1);
        let dec_fixed = sum(&[fixed, z.ids_and_positions(k), z.decode_carried()]);
        let dec_base = sum(&[dec_fixed, z.embeds_and_input(z.b), z.cos_sin(z.b), z.mask(1, past + 1)]);
        let dec_weights = z.attn_weights(1, past + 1);
        // The cache before the last layer's update: the others grown, the last one not.
        let before_last = sum(&[mul(&[2, z.l - 1, z.cache_half(past + 1)]), mul(&[2, z.cache_half(past)])]);
        c.extend([
            (k, "self_attn.rotary", "mul", sum(&[dec_base, before_last, z.act(z.b), z.rope_q_transient(z.b)])),
            // DynamicLayer.update's values cat in the last layer: the old values beside the
            // grown ones, with the rotated q and k and the v projection.
            (k, "self_attn.past_key_values", "cat", sum(&[dec_base, end, z.cache_half(past), z.act(z.b), mul(&[z.b, z.h + z.k, z.hd, z.e]), mul(&[z.b, z.k, z.hd, z.e])])),
            (k, "post_attention_layernorm", "mul", sum(&[dec_base, end, dec_weights, z.act(z.b), z.rms_norm_transient(z.b, z.d)])),
            (k, "mlp", "mul", sum(&[dec_base, end, dec_weights, mul(&[2, z.act(z.b)]), z.mlp_transient(z.b)])),
            (k, "lm_head", "mm", sum(&[dec_fixed, end, z.act(z.b), z.logits()])),
        ]);
        // The scores of the last token: the step's tensors with position_ids grown by a column.
        let common = sum(&[fixed, z.ids_and_positions(k), mul(&[2, z.b, 8]), mul(&[z.b, 8]), end, z.logits()]);
        for (op, bytes) in z.after_logits(common, z.previous_scores(), z.min_new >= z.n) {
            c.push((k, "generate", op, bytes));
        }
        if z.eager {
            let at = c.iter().position(|t| t.0 == k && t.1 == "post_attention_layernorm").expect("pushed above");
            let held = sum(&[dec_base, end, z.act(z.b), mul(&[z.b, z.h, z.hd, z.e]), z.repeated_kv(past + 1)]);
            c.insert(at, (k, "self_attn.attention", "softmax", sum(&[held, z.softmax_transient(1, past + 1)])));
            c.insert(at + 1, (k, "self_attn.attention", "bmm", sum(&[held, dec_weights, mul(&[z.b, z.h, z.hd, z.e])])));
        }
        if z.qk_norm {
            let at = c.iter().position(|t| t.0 == k).expect("pushed above");
            c.insert(at, (k, "self_attn.q_norm", "mul", sum(&[dec_base, before_last, z.act(z.b), z.q_norm_transient(z.b)])));
        }
    }
    pick(&c, z.l)
}

/// The first of the moments `c` (step, scope, op, bytes) that reaches the largest; `l` layers.
fn pick(c: &[(u64, &str, &str, u64)], l: u64) -> GeneratePeak {
    let top = c.iter().map(|t| t.3).max().expect("candidates");
    let (step, scope, op, bytes) = *c.iter().find(|t| t.3 == top).expect("the max is one of them");
    let label = |step: u64| if step == 0 { "prefill".to_string() } else { format!("decode step {step}") };
    let step = label(step);
    let layer = format!("generate.model.layers.{}.", l - 1);
    let scope = match scope {
        "generate" => "generate".to_string(),
        "lm_head" => "generate.lm_head".to_string(),
        "mlp" => format!("{layer}mlp"),
        other => format!("{layer}{other}"),
    };
    let candidates = c.iter().map(|t| (format!("{} {} {}", label(t.0), t.1, t.2), t.3)).collect();
    GeneratePeak { bytes, step, scope, op: op.to_string(), candidates }
}

/// A lower bound of the peak where [`covers`] does not derive it (issue 30's families, the
/// MoE models, DeepSeek-V3, gpt-oss, fp32 weights, biases): the largest of the moments whose
/// tensors every model type's `generate()` holds then, each counting only those (so each is
/// at most the live set, and the peak at least their largest). generate's own tensors are the
/// loop's of generation_5_23.rs, the same for every model; the cache is [`super::generate`]'s
/// layers; of the forward only what every decoder holds: in the prefill's last layer the
/// eager scores at the softmax (beside the layer's input, the queries, repeat_kv's copies and
/// the mask), the MLP's three (B·S, F) tensors or batched_mm's gathered expert weights, and
/// lm_head's input and output; batched_mm's gathered weights in the last decode step's last
/// layer (off the CPU grouped_mm decodes with it). What the bound leaves out is the family's own transients
/// (fused projections, norms, RoPE, sdpa's math kernel, grouped_mm's and the eager loop's
/// expert buffers), which the simulated run and `vramscope profile --profile-type generate`
/// give.
pub fn lower_bound(cfg: &ModelConfig, dtype: DType, weights: u64, b: usize, s: usize, gc: &GenerateConfig) -> GeneratePeak {
    let z = dims(cfg, dtype.size() as u64, b, s, gc);
    let hf = cfg.hf().expect("checked: an hf model");
    let moe = hf.moe.as_ref();
    let x = mul(&[z.b, z.s]);
    let layers = super::generate::layers(cfg);
    let w = super::generate::window(cfg);
    let windows = mul(&[layers.iter().filter(|l| l.sliding).count() as u64, 8]);
    // The cache at `positions` (S + the decode step: a sliding layer past its window holds
    // fewer, generate::layer_positions), with the sliding layers' window tensors.
    let cache = |positions: u64| {
        let step = positions - z.s;
        let kv = layers.iter().fold(0u64, |a, l| sum(&[a, mul(&[l.keys + l.values, z.b, z.e, super::generate::layer_positions(l, w, z.s, step)])]));
        sum(&[kv, windows])
    };
    // generate's tensors held for the whole call (the model's buffers left out).
    let fixed = sum(&[weights, z.prompt(), z.special_tokens(), z.position_ids(), z.unfinished()]);
    let mut c: Vec<(u64, &str, &str, u64)> = Vec::new();
    if z.eager {
        let deepseek = moe.is_some_and(|m| m.deepseek.is_some());
        let gpt_oss = moe.is_some_and(|m| m.gpt_oss.is_some());
        // The rotated queries and repeat_kv's copies (DeepSeek-V3's MLA expands its own keys
        // and values per head, counted as none).
        let (q, repeated) = if deepseek { (0, 0) } else { (mul(&[x, z.h, z.hd, z.e]), z.repeated_kv(z.s)) };
        // At the softmax: the masked scores beside its output, and bf16's fp32 copy before it
        // (eager_attention_forward's `softmax(dim=-1, dtype=float32)`); gpt-oss's sink
        // attention: the masked scores, the max-subtracted logits and their softmax.
        let per_score = if gpt_oss { 3 * z.e } else { z.e + 4 + if z.e == 4 { 0 } else { 4 } };
        let mask = if z.s >= 2 { z.mask(z.s, z.s) } else { 0 };
        let held = sum(&[fixed, z.prefill_ids_clone(), z.embeds_and_input(x), cache(z.s), q, repeated, mask]);
        c.push((0, "self_attn.attention", "softmax", sum(&[held, mul(&[z.b, z.h, z.s, z.s, per_score])])));
    }
    // The last layer's MLP in the prefill, its input (a norm's output, OLMo-2's residual)
    // beside the layer's input and the embeddings. A dense MLP: at its product, the gate's
    // activation, the up projection and the product, (B·S, F) each (Phi-3's fused gate_up is
    // wider still). Sparse experts under batched_mm: at the gather of the down projections,
    // the tokens repeated per pick, the gathered gate/up weights, the activation and the
    // gathered down weights, per (token, pick) pair (moe_5_23.rs's batched_mm_experts).
    let held = sum(&[fixed, z.prefill_ids_clone(), z.embeds_and_input(x), cache(z.s), z.act(x)]);
    let sparse_last = moe.filter(|m| m.deepseek.as_ref().is_none_or(|d| d.is_sparse(cfg.num_layers - 1)));
    // batched_mm's tensors for `tokens` tokens.
    let gathered = |m: &crate::model::hf::moe::MoeConfig, tokens: u64| {
        let (pairs, i) = (mul(&[tokens, m.top_k as u64]), m.intermediate as u64);
        mul(&[sum(&[mul(&[pairs, z.d]), mul(&[pairs, 2 * i, z.d]), mul(&[pairs, i]), mul(&[pairs, z.d, i])]), z.e])
    };
    match (moe, sparse_last) {
        (None, _) => c.push((0, "mlp", "mul", sum(&[held, mul(&[3, x, z.f, z.e])]))),
        (_, Some(m)) if m.implementation == ExpertsImplementation::BatchedMm => c.push((0, "mlp.experts", "index", sum(&[held, gathered(m, x)]))),
        _ => {}
    }
    // The last decode step's last layer under batched_mm: configured, or grouped_mm switched to
    // it for the decode off the CPU (`_optimize_model_for_decode`), one token per row.
    if let Some(m) = sparse_last.filter(|m| z.n >= 2 && (m.implementation == ExpertsImplementation::BatchedMm || m.implementation == ExpertsImplementation::GroupedMm && !hf.cpu_run)) {
        let k = z.n - 1;
        let held = sum(&[fixed, z.ids_and_positions(k), z.decode_carried(), z.embeds_and_input(z.b), cache(z.s + k), z.act(z.b)]);
        c.push((k, "mlp.experts", "index", sum(&[held, gathered(m, z.b)])));
    }
    // lm_head on the final norm's output (logits_to_keep=1: the last position).
    c.push((0, "lm_head", "mm", sum(&[fixed, z.prefill_ids_clone(), cache(z.s), z.act(x), z.logits()])));
    let prefill_common = sum(&[fixed, cache(z.s), z.logits(), mul(&[z.b, z.s + 1, 8])]);
    c.extend(z.after_logits(prefill_common, 0, z.min_new > 0).into_iter().map(|(op, bytes)| (0, "generate", op, bytes)));
    c.push((0, "generate", "mul", sum(&[fixed, cache(z.s), z.logits(), z.ids_and_positions(1), z.previous_scores(), z.b, z.unfinished()])));
    // The last step that masks eos, and the last step: their scores (the dense form's).
    let mut steps = vec![];
    if z.min_new >= 2 && z.min_new < z.n {
        steps.push((z.min_new - 1, true));
    }
    if z.n >= 2 {
        steps.push((z.n - 1, z.min_new >= z.n));
    }
    for (k, early) in steps {
        let common = sum(&[fixed, z.ids_and_positions(k), mul(&[2, z.b, 8]), mul(&[z.b, 8]), cache(z.s + k), z.logits()]);
        c.extend(z.after_logits(common, z.previous_scores(), early).into_iter().map(|(op, bytes)| (k, "generate", op, bytes)));
    }
    pick(&c, z.l)
}
