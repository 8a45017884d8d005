//! transformers 5.23.0's `generate()` for greedy decoding (`do_sample=False, num_beams=1`) with
//! the default `DynamicCache`, op for op: `GenerationMixin.generate` and `_sample` in
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
//! step's. Every step runs to `max_new_tokens`: a row meeting eos is padded, and the loop
//! would end early only when every row has met it (not predicted: the worst case is modelled).
use super::transformers_5_23::{forward_generate, GenerationInputs, KvCache};
use crate::engine::runtime::{self, scope};
use crate::engine::{DType, Tensor};
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

/// `model.generate(input_ids, max_new_tokens=n, do_sample=False)` (no attention_mask passed),
/// calling `on_step` where each step starts (first: Prefill, before generate's setup).
pub fn generate(m: &Model, input_ids: &Tensor, max_new_tokens: usize, on_step: &mut dyn FnMut(Step)) -> Generated {
    assert!(max_new_tokens >= 1, "max_new_tokens must be at least 1");
    let hf = m.config.hf.as_ref().expect("hf options");
    let _s = scope("generate");
    // generate() is decorated with torch.no_grad().
    let _g = runtime::no_grad();
    let device = input_ids.device();
    let (b, s) = (input_ids.dim(0), input_ids.dim(1));
    on_step(Step::Prefill);
    // _prepare_special_tokens: eos as a device tensor; the pad token defaults to eos[0].
    let eos_ids = hf.eos_token_id.clone();
    let eos = (!eos_ids.is_empty()).then(|| Tensor::from_i64(&eos_ids, &[eos_ids.len()], device));
    let pad_id = hf.pad_token_id.or(eos_ids.first().copied());
    let pad = pad_id.map(|p| match (&eos, hf.pad_token_id) {
        (Some(e), None) => e.select(0, 0),
        _ => Tensor::from_i64(&[p], &[], device),
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
    // The prompt's ids are checked for negative values.
    drop(input_ids.lt_int(0).any());
    // _sample: unfinished_sequences = ones(B).
    let mut unfinished = Tensor::ones(&[b], DType::I64, device);
    let cache: KvCache = Rc::new(RefCell::new(Vec::new()));
    // _sample's model_kwargs: the position ids it grows (generate's own dict keeps the prompt's).
    let mut step_pos = position_ids.clone();
    let mut ids = input_ids.clone();
    let max_length = s + max_new_tokens;
    let mut model_inputs: Option<(Tensor, Tensor)> = None;
    let mut next_logits: Option<Tensor> = None;
    let mut next_tokens: Option<Tensor> = None;
    for step in 0..max_new_tokens {
        let len = ids.dim(1);
        let logits = if step == 0 {
            // _prefill: prepare_inputs_for_generation clones input_ids; the clone dies when
            // _prefill returns.
            let x = ids.clone_contiguous();
            forward_generate(m, &x, GenerationInputs { position_ids: &step_pos, cache: &cache })
        } else {
            on_step(Step::Decode(step));
            // input_ids[:, -1:].clone(), position_ids[..., -1:].clone(): the previous step's
            // model_inputs die at the rebinding.
            let x = ids.narrow(1, len - 1, 1).clone_contiguous();
            let p = step_pos.narrow(1, len - 1, 1).clone_contiguous();
            let (x, p) = model_inputs.insert((x, p));
            forward_generate(m, x, GenerationInputs { position_ids: p, cache: &cache })
        };
        // _update_model_kwargs_for_generation: arange(1) + position_ids[..., -1:] + 1, cat.
        {
            let ar = Tensor::arange(1, device).view(&[1, 1]);
            let t = ar.add_i64(&step_pos.narrow(1, len - 1, 1));
            drop(ar);
            let next = t.add_int(1);
            drop(t);
            let grown = Tensor::cat(&[step_pos.clone(), next.clone()], -1);
            drop(next);
            step_pos = grown;
        }
        // outputs.logits[:, -1].to(copy=True, dtype=float32); no logits processors by default.
        {
            let last = logits.select(1, logits.dim(1) - 1);
            next_logits = Some(if last.dtype() == DType::F32 { last.clone_contiguous() } else { last.to_dtype(DType::F32) });
        }
        next_tokens = Some(next_logits.as_ref().expect("set above").argmax_last());
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
    let kv_cache_bytes = cache.borrow().iter().map(|t| t.nbytes()).sum();
    drop((model_inputs, next_logits, next_tokens, step_pos, position_ids, unfinished, cache, pad, eos));
    Generated { sequences: ids, kv_cache_bytes }
}
