//! transformers 5.23.0's `_beam_search` (generation/utils.py; `num_beams` > 1, beam search
//! or, with do_sample, beam sampling), op for op, after generate's setup has repeated the prompts `num_beams` times:
//! the static-shaped running/finished tensors (`running_sequences` and `sequences`
//! (B, beams, max_length) int64, `running_beam_indices` and `beam_indices` (B, beams,
//! max_new_tokens) int32, the (B, beams) scores and flags), per step the fp32 copy of the
//! last logits, its log_softmax, the processors, the scores added over the (B, beams × V)
//! candidates, `_get_top_k_continuations` (topk of 2 × beams (more with several eos ids),
//! `_gather_beams` = take_along_dim), the stopping criteria on the candidates,
//! `_get_running_beams_for_next_iteration`, `_update_finished_beams` (cats of the finished
//! and candidate beams, topk, gathers), the cache's `reorder_cache` (index_select of each
//! layer's keys then values, DynamicCache or StaticCache, the old tensors dying at the
//! rebinding) and `_check_early_stop_heuristic`; at the end the best num_return_sequences
//! beams, flattened (a copy when they are not all the beams of a batch of several).
//!
//! What Python's references keep alive between steps: `logits` (the fp32 copy) and
//! `log_probs` (the (B, beams × V) sums) until the next step's are made; the candidates
//! (`topk_*`) until the next step's; `flat_running_sequences`, a view, keeps the previous
//! `running_sequences` until the next step starts; `beam_idx`, a view, keeps the previous
//! `running_beam_indices` until the next reorder. Every step runs to max_new_tokens (a
//! finished beam could end the loop early only once no running beam can beat it; the worst
//! case is modelled). length_penalty 1.0 and early_stopping False (GenerationConfig's
//! defaults) change scores, not memory.
use super::generation_5_23::{process, Generated, Step};
use super::generation_config::{CacheImplementation, GenerateConfig};
use super::transformers_5_23::{forward_generate, static_generation_masks, GenerationInputs, KvCache, StaticMasks};
use crate::engine::{DType, Tensor};
use crate::model::Model;
use std::cell::RefCell;
use std::rc::Rc;

/// `_beam_search(input_ids, …)` on the expanded (B × beams, S) `input_ids` with generate's
/// expanded `position_ids`; `eos` and `pad` are generate's special-token tensors (dropped
/// where generate's locals die).
#[allow(clippy::too_many_arguments)]
pub(super) fn beam_search(m: &Model, input_ids: &Tensor, position_ids: Tensor, gc: &GenerateConfig, batch: usize, eos_ids: &[i64], pad_id: Option<i64>, eos: Option<Tensor>, pad: Option<Tensor>, on_step: &mut dyn FnMut(Step)) -> Generated {
    let device = input_ids.device();
    let beams = gc.num_beams;
    let n_new = gc.max_new_tokens;
    let (rows, s) = (input_ids.dim(0), input_ids.dim(1));
    assert_eq!(rows, batch * beams, "input_ids expanded by num_beams");
    let max_length = s + n_new;
    let nrs = gc.num_return_sequences;
    assert!(nrs <= beams, "num_return_sequences <= num_beams");
    // beams_to_keep = max(2, 1 + n_eos_tokens) * num_beams; top_num_beam_mask.
    let keep = 2usize.max(1 + eos_ids.len()).checked_mul(beams).expect("beams_to_keep overflows");
    let top_mask = {
        let a = Tensor::ones(&[beams], DType::Bool, device);
        let z = Tensor::zeros(&[keep - beams], DType::Bool, device);
        let c = Tensor::cat(&[a.clone(), z.clone()], 0);
        drop((a, z));
        c
    };
    // 3. the running tensors and static-shaped placeholders; output_fill_value = pad_token_id
    // or eos_token_id[0] (else -1).
    let fill = pad_id.or(eos_ids.first().copied()).unwrap_or(-1);
    let mut running_sequences = Tensor::full(&[batch, beams, max_length], fill as f64, DType::I64, device);
    running_sequences.narrow(2, 0, s).copy_(&input_ids.view(&[batch, beams, s]));
    let mut sequences = running_sequences.clone_contiguous();
    let mut running_beam_scores = Tensor::zeros(&[batch, beams], DType::F32, device);
    running_beam_scores.narrow(1, 1, beams - 1).fill_(-1e9);
    let mut beam_scores = Tensor::full(&[batch, beams], -1e9, DType::F32, device);
    let mut is_sent_finished = Tensor::zeros(&[batch, beams], DType::Bool, device);
    let mut early_unsatisfied = Tensor::ones(&[batch, 1], DType::Bool, device);
    let mut hits = Tensor::zeros(&[batch, beams], DType::Bool, device);
    let mut running_beam_indices = Tensor::full(&[batch, beams, n_new], -1.0, DType::I32, device);
    let mut beam_indices = running_beam_indices.clone_contiguous();
    let cache: KvCache = Rc::new(RefCell::new(Vec::new()));
    // The DynamicCache's sliding layers' 0-d window tensors, kept as long as the cache.
    let windows: KvCache = Rc::new(RefCell::new(Vec::new()));
    // _beam_search's model_kwargs: the position ids it grows (generate's own dict keeps
    // the prompt's).
    let mut step_pos = position_ids.clone();
    let static_len = (gc.cache == CacheImplementation::Static).then_some(max_length - 1);
    let dtype = m.embedding.dtype();
    let step_mask = |q: usize, past: usize| static_len.map_or((None, None), |l| static_generation_masks(m, rows, q, past, l, dtype, device));
    let mut flat_running = input_ids.clone();
    let mut model_inputs: Option<(Tensor, Tensor, StaticMasks)> = None;
    let mut logits_f32: Option<Tensor> = None;
    let mut log_probs: Option<Tensor> = None;
    let mut topk: Option<(Tensor, Tensor, Tensor)> = None;
    let mut beam_idx: Option<Tensor> = None;
    for step in 0..n_new {
        let cur_len = s + step;
        let logits = if step == 0 {
            // _prefill: the clone of input_ids (and a static cache's mask) die when it returns.
            let x = input_ids.clone_contiguous();
            let mask = step_mask(s, 0);
            forward_generate(m, &x, GenerationInputs { position_ids: &step_pos, cache: &cache, windows: &windows, static_len, past: 0, mask: mask.0.as_ref(), sliding_mask: mask.1.as_ref() })
        } else {
            // flat_running_sequences = running_sequences[:, :, :cur_len] flattened: a view
            // (the beam and batch dims stay mergeable); the previous one (a view of the
            // previous running_sequences) dies at the rebinding.
            flat_running = running_sequences.narrow(2, 0, cur_len).reshape(&[rows, cur_len]);
            on_step(Step::Decode(step));
            let x = flat_running.narrow(1, cur_len - 1, 1).clone_contiguous();
            let p = step_pos.narrow(1, cur_len - 1, 1).clone_contiguous();
            let mask = step_mask(1, cur_len - 1);
            let (x, p, mask) = model_inputs.insert((x, p, mask));
            forward_generate(m, x, GenerationInputs { position_ids: p, cache: &cache, windows: &windows, static_len, past: cur_len - 1, mask: mask.0.as_ref(), sliding_mask: mask.1.as_ref() })
        };
        // _update_model_kwargs_for_generation: the position ids grow by one column.
        step_pos = super::generation_5_23::grow_position_ids(&step_pos, cur_len, device);
        // logits = outputs.logits[:, -1, :].to(copy=True, dtype=float32); log_softmax; the
        // processors; `del model_outputs`.
        let vocab = logits.dim(-1);
        {
            let last = logits.select(1, logits.dim(1) - 1);
            logits_f32 = Some(if last.dtype() == DType::F32 { last.clone_contiguous() } else { last.to_dtype(DType::F32) });
        }
        log_probs = Some(logits_f32.as_ref().expect("set above").log_softmax(-1));
        let processed = process(gc, &flat_running, s, log_probs.as_ref().expect("set above"), eos_ids);
        log_probs = Some(processed);
        drop(logits);
        // log_probs.view(B, beams, V) + running_beam_scores[:, :, None], reshaped to
        // (B, beams × V).
        {
            let lp = log_probs.as_ref().expect("set above").view(&[batch, beams, vocab]);
            let summed = lp.add(&running_beam_scores.unsqueeze(2));
            drop(lp);
            log_probs = Some(summed.reshape(&[batch, beams * vocab]));
        }
        // c. _get_top_k_continuations: the old candidates die when the new ones are bound.
        let continuations = top_k_continuations(log_probs.as_ref().expect("set above"), &running_sequences, &running_beam_indices, cur_len, s, keep, beams, vocab, gc.do_sample);
        topk = Some(continuations);
        let (topk_log_probs, topk_sequences, topk_beam_indices) = topk.as_ref().expect("set above");
        // d. stopping_criteria on the candidates' first cur_len + 1 tokens (a view), unflattened.
        hits = stopping(&topk_sequences.narrow(2, 0, cur_len + 1).reshape(&[batch * keep, cur_len + 1]), max_length, eos_ids).view(&[batch, keep]);
        // e. _get_running_beams_for_next_iteration.
        {
            let f = hits.to_dtype(DType::F32);
            let penalty = f.mul_scalar(-1.0e9);
            drop(f);
            let running_log_probs = topk_log_probs.add(&penalty);
            drop(penalty);
            let (v, next) = running_log_probs.topk_last(beams);
            drop(v);
            let rs = topk_sequences.take_along_dim(&next, 1);
            let rbs = running_log_probs.take_along_dim(&next, 1);
            let rbi = topk_beam_indices.take_along_dim(&next, 1);
            drop((running_log_probs, next));
            running_sequences = rs;
            running_beam_scores = rbs;
            running_beam_indices = rbi;
        }
        // f. _update_finished_beams.
        {
            let did_finish = hits.logical_and(&top_mask.unsqueeze(0));
            // topk_log_probs / (cur_len + 1 - prompt) ** length_penalty (1.0)
            let scores = topk_log_probs.div_scalar((cur_len + 1 - s) as f64);
            // all(is_sent_finished, -1, keepdim) & (early_stopping is True): False.
            let full = {
                let a = is_sent_finished.all_any_last_keepdim(true);
                let f = Tensor::full(&[], 0.0, DType::Bool, device);
                let o = a.logical_and(&f);
                drop((a, f));
                o
            };
            for flag in [full.clone(), early_unsatisfied.logical_not()] {
                let f = flag.to_dtype(DType::F32);
                drop(flag);
                let p = f.mul_scalar(-1.0e9);
                drop(f);
                scores.add_(&p);
            }
            {
                let not_done = did_finish.logical_not();
                let f = not_done.to_dtype(DType::F32);
                let p = f.mul_scalar(-1.0e9);
                drop((f, not_done));
                scores.add_(&p);
            }
            let merged_sequences = Tensor::cat(&[sequences.clone(), topk_sequences.clone()], 1);
            let merged_scores = Tensor::cat(&[beam_scores.clone(), scores.clone()], 1);
            let merged_indices = Tensor::cat(&[beam_indices.clone(), topk_beam_indices.clone()], 1);
            let merged_finished = Tensor::cat(&[is_sent_finished.clone(), did_finish.clone()], 1);
            let (v, best) = merged_scores.topk_last(beams);
            drop(v);
            let new = (
                merged_sequences.take_along_dim(&best, 1),
                merged_scores.take_along_dim(&best, 1),
                merged_indices.take_along_dim(&best, 1),
                merged_finished.take_along_dim(&best, 1),
            );
            drop((scores, did_finish, full, merged_sequences, merged_scores, merged_indices, merged_finished, best));
            sequences = new.0;
            beam_scores = new.1;
            beam_indices = new.2;
            is_sent_finished = new.3;
        }
        // g. reorder_cache(beam_idx): beam_idx = running_beam_indices[..., cur_len - prompt]
        // flattened (a view); each layer's keys then values index_select'ed, the old ones
        // dying at the rebinding.
        beam_idx = Some(running_beam_indices.select(2, cur_len - s).reshape(&[rows]));
        {
            let idx = beam_idx.as_ref().expect("set above");
            let mut c = cache.borrow_mut();
            for t in c.iter_mut() {
                let r = t.index_select0(idx);
                *t = r;
            }
        }
        // _check_early_stop_heuristic at cur_len + 1, then _beam_search_has_unfinished_sequences.
        {
            let best = running_beam_scores.narrow(1, 0, 1).div_scalar((cur_len + 1 - s) as f64);
            let (min, ix) = beam_scores.min_last_keepdim();
            drop(ix);
            let worst = min.where_else_scalar(&is_sent_finished, -1.0e9);
            drop(min);
            let better = best.gt_any(&worst);
            let any = better.all_any_last_keepdim(false);
            drop(better);
            let next = early_unsatisfied.logical_and(&any);
            drop((any, best, worst));
            early_unsatisfied = next;
            let improvement = early_unsatisfied.any();
            let all_finished = is_sent_finished.all();
            let open = all_finished.logical_not();
            let all_hit = hits.all();
            let valid = all_hit.logical_not();
            drop((all_finished, all_hit));
            let a = improvement.logical_and(&open);
            drop(a.logical_and(&valid));
            drop((a, valid, open, improvement));
        }
    }
    // 5. the best num_return_sequences beams per prompt, flattened (a view when they are all
    // the beams, or one prompt; else a copy), cropped to the generated length
    // (((beam_indices + 1).bool()).sum(1).max(): views of the flattened tensors).
    // Each rebinding frees the old tensor (when the flattening copied it) before the next.
    let out_sequences = sequences.narrow(1, 0, nrs).reshape(&[batch * nrs, max_length]);
    drop(sequences);
    let out_scores = beam_scores.narrow(1, 0, nrs).reshape(&[batch * nrs]);
    drop(beam_scores);
    let out_indices = beam_indices.narrow(1, 0, nrs).reshape(&[batch * nrs, n_new]);
    drop(beam_indices);
    {
        let plus = out_indices.add_int_same(1);
        let b = plus.to_bool();
        drop(plus);
        let counts = b.count_last();
        drop(b);
        let max = counts.max_all_int();
        drop(counts);
        let len = max.add_int_same(s as i64);
        drop((len, max));
    }
    let kv_cache_bytes = cache.borrow().iter().map(|t| t.nbytes()).sum();
    drop((out_scores, out_indices, running_sequences, running_beam_scores, is_sent_finished, early_unsatisfied, hits, running_beam_indices));
    drop((flat_running, model_inputs, logits_f32, log_probs, topk, beam_idx, top_mask, step_pos, position_ids, cache, windows, pad, eos));
    Generated { sequences: out_sequences, kv_cache_bytes }
}

/// `_get_top_k_continuations`: topk (or, sampling, multinomial draws) over the (B, beams × V) sums, the candidates'
/// beams (`// V`) gathered from the running sequences and beam indices, their tokens
/// (`% V`) written at cur_len, the batch-offset beam indices written at cur_len - prompt.
/// Returns (topk_log_probs, topk_running_sequences, topk_running_beam_indices); the
/// locals die on return in their order (topk_indices, the beams, the ids, the offset, the
/// offset indices).
#[allow(clippy::too_many_arguments)]
fn top_k_continuations(log_probs: &Tensor, running_sequences: &Tensor, running_beam_indices: &Tensor, cur_len: usize, prompt: usize, keep: usize, beams: usize, vocab: usize, do_sample: bool) -> (Tensor, Tensor, Tensor) {
    let device = log_probs.device();
    let batch = log_probs.dim(0);
    // Greedy: topk of the sums; sampling: multinomial (no replacement) over their softmax
    // (dying once it returns), the sums gathered at the draws.
    let (values, indices) = if do_sample {
        let probs = log_probs.softmax(-1);
        let drawn = probs.multinomial_without_replacement(keep);
        drop(probs);
        (log_probs.gather_any(1, &drawn), drawn)
    } else {
        log_probs.topk_last(keep)
    };
    let beam_of = indices.floor_div_int(vocab as i64);
    let topk_beam_indices = running_beam_indices.take_along_dim(&beam_of, 1);
    let topk_sequences = running_sequences.take_along_dim(&beam_of, 1);
    let ids = indices.remainder_int(vocab as i64);
    topk_sequences.select(2, cur_len).copy_(&ids);
    let offset = {
        let a = Tensor::arange(batch, device).view(&[batch, 1]);
        let k = Tensor::from_i64(&[beams as i64], &[], device);
        let o = a.mul_i64(&k);
        drop((k, a));
        o
    };
    let with_offset = beam_of.add_i64(&offset);
    topk_beam_indices.select(2, cur_len - prompt).copy_(&with_offset);
    drop((indices, beam_of, ids, offset, with_offset));
    (values, topk_sequences, topk_beam_indices)
}

/// The StoppingCriteriaList on (rows, len) ids: full((rows,), False) or-ed with
/// MaxLengthCriteria's full((rows,), len >= max_length) and EosTokenCriteria's
/// isin(ids[:, -1], eos).
fn stopping(ids: &Tensor, max_length: usize, eos: &[i64]) -> Tensor {
    let (rows, len) = (ids.dim(0), ids.dim(1));
    let device = ids.device();
    let done0 = Tensor::full(&[rows], 0.0, DType::Bool, device);
    let ml = Tensor::full(&[rows], if len >= max_length { 1.0 } else { 0.0 }, DType::Bool, device);
    let mut done = done0.logical_or(&ml);
    drop((done0, ml));
    if !eos.is_empty() {
        let hit = ids.select(1, len - 1).isin_ids(eos);
        let o = done.logical_or(&hit);
        drop(hit);
        done = o;
    }
    done
}
