//! transformers 5.23.0's `generate()` with `num_beams=1` (greedy, or sampling with the
//! temperature/top-k warpers and `num_return_sequences`), `min_new_tokens`, and the
//! `DynamicCache` or a `StaticCache` ([`GenerateConfig`]), op for op: `GenerationMixin.generate`
//! and `_sample` in
//! `generation/utils.py` (`_prepare_attention_mask_for_generation`,
//! `_prepare_position_ids_for_generation`, `_prefill`, `prepare_inputs_for_generation`,
//! `_update_model_kwargs_for_generation`), the stopping criteria of
//! `generation/stopping_criteria.py` and `StopCheck` (CPU and CUDA; the deferred check is
//! mps-only). The forwards are [`transformers_5_23`](super::transformers_5_23)'s with the
//! cache kept between them.
//!
//! What the loop keeps alive, as Python's references do: generate's own `model_kwargs` holds
//! the prompt's `position_ids` until it returns; `_sample`'s copy grows by one column per
//! step (`torch.cat`, the old one dying at the rebinding); the all-ones attention mask is built
//! (for the position ids) and dropped before the prefill; `next_token_logits` is an fp32 copy
//! of the last position's logits that lives until the next step's copy exists; the step's
//! `model_inputs` (one-column clones of input_ids and position_ids) live until the next
//! step's; with sampling, the processed scores and the probabilities are rebound the same way.
//! A StaticCache (max_length - 1 positions) is allocated by each layer's first update in the
//! prefill and written in place (a sliding layer's StaticSlidingWindowLayer: at most its window,
//! rolled once full); its 4-D masks (one per layer type) are among the step's model_inputs
//! (built by prepare_inputs_for_generation). Every step runs to `max_new_tokens`: a row meeting eos is
//! padded, and the loop would end early only when every row has met it (not predicted: the
//! worst case is modelled).
use super::generation_config::{CacheImplementation, GenerateConfig};
use super::transformers_5_23::{forward_generate, static_generation_masks, GenerationInputs, KvCache, StaticMasks};
use crate::engine::runtime::{self, scope};
use crate::engine::{DType, Device, Tensor};
use crate::model::Model;
use std::cell::RefCell;
use std::rc::Rc;

/// Where the loop is: the prefill (generate's setup, the prompt's forward, the first token) or
/// decode step k (1 .. max_new_tokens - 1), from its `prepare_inputs_for_generation` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Prefill,
    Decode(usize),
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Prefill => f.write_str("prefill"),
            Step::Decode(k) => write!(f, "decode step {k}"),
        }
    }
}

/// What `generate()` returns (the sequences) and what its cache held at the end.
pub struct Generated {
    /// (B, S + max_new_tokens) int64.
    pub sequences: Tensor,
    /// The DynamicCache's keys and values once the last step ran (requested bytes).
    pub kv_cache_bytes: usize,
}

/// `model.generate(input_ids, **gc)` (no attention_mask passed), calling `on_step` where each
/// step starts (first: Prefill, before generate's setup).
pub fn generate(m: &Model, input_ids: &Tensor, gc: &GenerateConfig, on_step: &mut dyn FnMut(Step)) -> Generated {
    let max_new_tokens = gc.max_new_tokens;
    assert!(max_new_tokens >= 1, "max_new_tokens must be at least 1");
    let hf = m.config.hf.as_ref().expect("hf options");
    let _s = scope("generate");
    // generate() is decorated with torch.no_grad().
    let _g = runtime::no_grad();
    let device = input_ids.device();
    let (b0, s) = (input_ids.dim(0), input_ids.dim(1));
    let b = b0;
    on_step(Step::Prefill);
    // _prepare_special_tokens: bos and eos as device tensors (the generation config keeps
    // them to the end of generate()); the pad token defaults to eos[0].
    let _bos = (!hf.bos_token_id.is_empty()).then(|| {
        let ids = &hf.bos_token_id;
        let n = [ids.len()];
        Tensor::from_i64(ids, if ids.len() == 1 { &[] } else { &n }, device)
    });
    let eos_ids = hf.eos_token_id.clone();
    let eos = (!eos_ids.is_empty()).then(|| Tensor::from_i64(&eos_ids, &[eos_ids.len()], device));
    let pad_id = hf.pad_token_id.or(eos_ids.first().copied());
    let pad = pad_id.map(|p| match (&eos, hf.pad_token_id) {
        (Some(e), None) => e.select(0, 0),
        _ => Tensor::from_i64(&[p], &[], device),
    });
    // generate()'s right-padding check of a batch without an attention mask: its local
    // `has_right_padding = torch.sum(inputs_tensor[:, -1] == pad) > 0` lives to the end.
    let _has_right_padding = (pad_id.is_some() && b0 > 1).then(|| {
        let last = input_ids.select(1, s - 1).eq_int(pad_id.unwrap_or(0));
        let n = last.sum_int();
        drop(last);
        n.gt_int(0)
    });
    // _prepare_attention_mask_for_generation.
    let attention_mask = {
        let default = Tensor::ones(&[b, s], DType::I64, device);
        match pad_id {
            None => default,
            Some(p) => {
                let in_inputs = input_ids.isin_ids(&[p]).any();
                let not_eos = match &eos {
                    Some(e) => e.isin_ids(&[p]).any().logical_not(),
                    None => Tensor::ones(&[], DType::Bool, device),
                };
                let can_infer = in_inputs.mul_i64(&not_eos);
                drop((in_inputs, not_eos));
                let from_padding = input_ids.ne_int(p).to_dtype(DType::I64);
                let a = from_padding.mul_i64(&can_infer);
                let not_can = can_infer.logical_not();
                let bb = default.mul_i64(&not_can);
                let mask = a.add_i64(&bb);
                drop((bb, a, from_padding, not_can, can_infer, default));
                mask
            }
        }
    };
    // _prepare_position_ids_for_generation: attention_mask.long().cumsum(-1) - 1, masked_fill
    // (attention_mask == 0, 0).
    let position_ids = {
        let cs = attention_mask.cumsum_last();
        let one = Tensor::from_i64(&[1], &[], device);
        let sub = cs.sub_int(&one);
        drop((one, cs));
        let pad_pos = attention_mask.eq_int(0);
        let pos = sub.masked_fill_int(&pad_pos, 0);
        drop((pad_pos, sub));
        pos
    };
    // An all-ones mask is dropped (no padding): (attention_mask == 1).all().
    drop(attention_mask.eq_int(1).all());
    drop(attention_mask);
    // _expand_inputs_for_generation(expand_size=max(num_beams, num_return_sequences)):
    // input_ids and the position ids repeat_interleave'd over the batch; the prompt's
    // position ids die when it returns (its local), generate's model_kwargs keeps the
    // expanded ones.
    let n = gc.num_return_sequences.max(gc.num_beams);
    let prompt_ids = input_ids;
    let (input_ids, position_ids) = if n > 1 {
        let ids = input_ids.repeat_interleave(n, 0);
        let pos = position_ids.repeat_interleave(n, 0);
        drop(position_ids);
        (ids, pos)
    } else {
        (input_ids.clone(), position_ids)
    };
    let b = b0.checked_mul(n).expect("batch x num_return_sequences overflows");
    // _get_logits_processor checks the prompt's ids (inputs_tensor, not expanded) for
    // negative values.
    drop(prompt_ids.lt_int(0).any());
    if gc.num_beams > 1 {
        return super::beam_search_5_23::beam_search(m, &input_ids, position_ids, gc, b0, &eos_ids, pad_id, eos, pad, on_step);
    }
    // _sample: unfinished_sequences = ones(B).
    let mut unfinished = Tensor::ones(&[b], DType::I64, device);
    let cache: KvCache = Rc::new(RefCell::new(Vec::new()));
    // The DynamicCache's sliding layers' 0-d window tensors, kept as long as the cache.
    let windows: KvCache = Rc::new(RefCell::new(Vec::new()));
    // _sample's model_kwargs: the position ids it grows (generate's own dict keeps the prompt's).
    let mut step_pos = position_ids.clone();
    let mut ids = input_ids.clone();
    let max_length = s + max_new_tokens;
    // A StaticCache is max_length - 1 positions long (the last token is never fed back).
    let static_len = (gc.cache == CacheImplementation::Static).then_some(max_length - 1);
    let dtype = m.embedding.dtype();
    // prepare_inputs_for_generation with a compileable cache: the 4-D mask
    // (create_masks_for_generate), one of the step's model_inputs.
    let step_mask = |q: usize, past: usize| static_len.map_or((None, None), |l| static_generation_masks(m, b, q, past, l, dtype, device));
    let mut model_inputs: Option<(Tensor, Tensor, StaticMasks)> = None;
    let mut next_logits: Option<Tensor> = None;
    let mut next_scores: Option<Tensor> = None;
    let mut probs: Option<Tensor> = None;
    let mut next_tokens: Option<Tensor> = None;
    // _sample's decode loop runs under `_optimize_model_for_decode`: grouped_mm experts as
    // batched_mm off the CPU (the guard is set after the prefill, below).
    let switch = !hf.cpu_run && hf.moe.as_ref().is_some_and(|m| m.implementation == crate::model::hf::moe::ExpertsImplementation::GroupedMm);
    let mut decode_guard = None;
    for step in 0..max_new_tokens {
        let len = ids.dim(1);
        let logits = if step == 0 {
            // _prefill: prepare_inputs_for_generation clones input_ids; the clone (and a
            // static cache's mask) die when _prefill returns.
            let x = ids.clone_contiguous();
            let mask = step_mask(s, 0);
            forward_generate(m, &x, GenerationInputs { position_ids: &step_pos, cache: &cache, windows: &windows, static_len, past: 0, mask: mask.0.as_ref(), sliding_mask: mask.1.as_ref() })
        } else {
            on_step(Step::Decode(step));
            if switch && decode_guard.is_none() {
                decode_guard = Some(crate::model::hf::moe::decode_as_batched_mm());
            }
            // input_ids[:, -1:].clone(), position_ids[..., -1:].clone(): the previous step's
            // model_inputs die at the rebinding.
            let x = ids.narrow(1, len - 1, 1).clone_contiguous();
            let p = step_pos.narrow(1, len - 1, 1).clone_contiguous();
            let mask = step_mask(1, len - 1);
            let (x, p, mask) = model_inputs.insert((x, p, mask));
            forward_generate(m, x, GenerationInputs { position_ids: p, cache: &cache, windows: &windows, static_len, past: len - 1, mask: mask.0.as_ref(), sliding_mask: mask.1.as_ref() })
        };
        step_pos = grow_position_ids(&step_pos, len, device);
        // outputs.logits[:, -1].to(copy=True, dtype=float32); no logits processors by default.
        {
            let last = logits.select(1, logits.dim(1) - 1);
            next_logits = Some(if last.dtype() == DType::F32 { last.clone_contiguous() } else { last.to_dtype(DType::F32) });
        }
        // logits_processor(input_ids, next_token_logits): each processor's output replaces
        // the scores (the previous ones dying at the rebinding); none by default, and the
        // scores are then the logits themselves.
        next_scores = Some(process(gc, &ids, s, next_logits.as_ref().expect("set above"), &eos_ids));
        let scores = next_scores.as_ref().expect("set above");
        next_tokens = Some(if gc.do_sample {
            // probs = softmax(next_token_scores, -1); multinomial(probs, 1).squeeze(1).
            let p = probs.insert(scores.softmax(-1));
            p.multinomial_one().squeeze(1)
        } else {
            scores.argmax_last()
        });
        if let Some(pad) = &pad {
            // has_eos_stopping_criteria: next_tokens * unfinished + pad * (1 - unfinished).
            let t = next_tokens.as_ref().expect("set above");
            let a = t.mul_i64(&unfinished);
            let r = unfinished.rsub_int(1);
            let p = pad.mul_i64(&r);
            drop(r);
            let n = a.add_i64(&p);
            drop((p, a));
            next_tokens = Some(n);
        }
        let col = next_tokens.as_ref().expect("set above").unsqueeze(1);
        ids = Tensor::cat(&[ids.clone(), col], -1);
        // unfinished_sequences & ~stopping_criteria(input_ids, scores): MaxLengthCriteria's
        // full((B,), done), EosTokenCriteria's isin(input_ids[:, -1], eos), or-ed into a
        // full((B,), False).
        {
            let done0 = Tensor::full(&[b], 0.0, DType::Bool, device);
            let ml = Tensor::full(&[b], if ids.dim(1) >= max_length { 1.0 } else { 0.0 }, DType::Bool, device);
            let mut done = done0.logical_or(&ml);
            drop((done0, ml));
            if !eos_ids.is_empty() {
                let hit = ids.select(1, ids.dim(1) - 1).isin_ids(&eos_ids);
                let o = done.logical_or(&hit);
                drop(hit);
                done = o;
            }
            let not_done = done.logical_not();
            drop(done);
            unfinished = unfinished.mul_i64(&not_done);
            drop(not_done);
            // StopCheck: unfinished_sequences.max() == 0.
            drop(unfinished.eq_int(0).all());
        }
        // del outputs
        drop(logits);
    }
    drop(decode_guard);
    let kv_cache_bytes = cache.borrow().iter().map(|t| t.nbytes()).sum();
    drop((model_inputs, next_logits, next_scores, probs, next_tokens, step_pos, position_ids, unfinished, cache, windows, pad, eos));
    Generated { sequences: ids, kv_cache_bytes }
}

/// `LogitsProcessorList` as `_get_logits_processor` builds it for `gc` (in its order), on the
/// fp32 last-position logits of a `len`-token `ids` whose prompt was `prompt` tokens: with an
/// eos token and min_new_tokens, MinLengthLogitsProcessor (min_length = prompt +
/// min_new_tokens) and MinNewTokensLengthLogitsProcessor; when sampling, the warpers
/// TemperatureLogitsWarper (temperature != 1) and TopKLogitsWarper (top_k != 0).
pub(super) fn process(gc: &GenerateConfig, ids: &Tensor, prompt: usize, logits: &Tensor, eos: &[i64]) -> Tensor {
    let device = logits.device();
    let vocab = logits.dim(-1);
    let mut scores = logits.clone();
    if gc.min_new_tokens > 0 && !eos.is_empty() {
        let early = ids.dim(1) - prompt < gc.min_new_tokens;
        // MinLength: arange(V), isin(eos), scores.clone(), where(eos_mask, -inf, scores).
        let next = {
            let v = Tensor::arange(vocab, device);
            let eos_mask = v.isin_ids(eos);
            let mut out = scores.clone_contiguous();
            if early {
                out = scores.where_scalar_true(&eos_mask, f64::NEG_INFINITY);
            }
            drop((v, eos_mask));
            out
        };
        scores = next;
        // MinNewTokens: scores.clone(), arange(V), isin(eos), where(...).
        let next = {
            let mut out = scores.clone_contiguous();
            let v = Tensor::arange(vocab, device);
            let eos_mask = v.isin_ids(eos);
            if early {
                out = scores.where_scalar_true(&eos_mask, f64::NEG_INFINITY);
            }
            drop((v, eos_mask));
            out
        };
        scores = next;
    }
    if gc.do_sample {
        if gc.temperature != 1.0 {
            scores = scores.div_scalar(gc.temperature);
        }
        if gc.top_k != 0 {
            // scores < topk(scores, k)[0][..., -1, None]: the indices die with the tuple, the
            // values once the comparison is made; then masked_fill(…, -inf).
            // top_k = max(top_k, min_tokens_to_keep): beam methods keep n_eos + 1 tokens
            // (2 without an eos), then at most the vocabulary.
            let min_keep = if gc.num_beams > 1 { (eos.len() + 1).max(2) } else { 1 };
            let k = gc.top_k.max(min_keep).min(vocab);
            let remove = {
                let (values, indices) = scores.topk_last(k);
                drop(indices);
                let threshold = values.narrow(-1, k - 1, 1);
                drop(values);
                scores.lt(&threshold)
            };
            let next = scores.masked_fill_scalar(&remove, f64::NEG_INFINITY);
            drop(remove);
            scores = next;
        }
    }
    scores
}

/// `_update_model_kwargs_for_generation`: `arange(1) + position_ids[..., -1:] + 1`, then cat'ed
/// onto the `len` position ids (the old tensor dies when the caller rebinds).
pub(super) fn grow_position_ids(step_pos: &Tensor, len: usize, device: Device) -> Tensor {
    let ar = Tensor::arange(1, device).view(&[1, 1]);
    let t = ar.add_i64(&step_pos.narrow(1, len - 1, 1));
    drop(ar);
    let next = t.add_int(1);
    drop(t);
    Tensor::cat(&[step_pos.clone(), next], -1)
}
