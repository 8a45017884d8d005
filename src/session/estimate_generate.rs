//! `estimate --profile-type generate`: the closed form of `analyse::estimate::generate` and,
//! beside it, a meta run of transformers' greedy `generate()` (src/model/hf/generation_5_23.rs)
//! measured where the closed form speaks: the peak of requested bytes, the step it is in, and
//! the DynamicCache at the end.
use crate::analyse::estimate::generate::GenerateEstimate;
use crate::analyse::estimate::generate_peak::{self, GeneratePeak};
use crate::engine::{runtime, DType, Device};
use crate::model::hf::generation_5_23::{generate, Step};
use crate::model::hf::generation_config::GenerateConfig;
use crate::model::{Model, ModelConfig};
use crate::train::{Batcher, CausalLmBatch, DataKind};
use anyhow::Result;
use serde::Serialize;

/// What a meta `generate()` allocated (requested bytes: the tensors' own, no allocator rounding).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SimulatedGenerate {
    pub parameter_bytes: u64,
    /// The live set's peak over the call, the weights and the prompt's ids included.
    pub peak_bytes: u64,
    /// Where it is: "prefill" or "decode step k" (the first step that reaches it).
    pub peak_step: String,
    /// The scope and op of the allocation that reached it.
    pub peak_scope: String,
    pub peak_op: String,
    /// The DynamicCache's keys and values once the last step ran.
    pub kv_cache_bytes: u64,
    /// The most the cache's tensors (DynamicLayer.update's cats) held at once.
    pub kv_cache_peak_bytes: u64,
}

/// `model.generate(input_ids, **gc)` on meta, weights in `dtype`, from a live set of the
/// weights and the (B, S) prompt. The caller checks the sizes first.
pub fn simulate(cfg: &ModelConfig, dtype: DType, b: usize, s: usize, gc: &GenerateConfig) -> Result<SimulatedGenerate> {
    runtime::reset();
    let res = (|| -> Result<SimulatedGenerate> {
        let model = Model::new_in(cfg, Device::Meta, 0, dtype)?;
        model.training.set(false);
        let parameter_bytes = model.parameters().iter().map(|p| p.tensor.nbytes() as u64).sum();
        let mut batcher = Batcher::new(DataKind::Random, cfg.vocab_size, b, s, Device::Meta, 0);
        let mut batch = CausalLmBatch::default();
        batcher.next_causal_lm_batch(&mut batch, false, false);
        let ids = batch.input_ids.clone().expect("drawn above");
        runtime::with(|rt| {
            rt.log.reset_peak();
            rt.log.start_recording();
        });
        let mut marks: Vec<(Step, usize)> = Vec::new();
        let out = generate(&model, &ids, gc, &mut |step| marks.push((step, runtime::with(|rt| rt.log.events().map_or(0, <[_]>::len)))));
        let kv_cache_bytes = out.kv_cache_bytes as u64;
        drop(out);
        let (events, peak) = runtime::with(|rt| (rt.log.stop_recording(), rt.log.stats.peak_allocated));
        // The first allocation that reaches the peak, replayed from the level before the call.
        let mut level = runtime::with(|rt| rt.log.stats.allocated);
        for e in events.iter().rev() {
            level = match e.kind {
                crate::record::EventKind::Alloc => level - e.bytes,
                crate::record::EventKind::Free => level + e.bytes,
                crate::record::EventKind::Oom => level,
            };
        }
        let mut at = None;
        for (i, e) in events.iter().enumerate() {
            match e.kind {
                crate::record::EventKind::Alloc => level += e.bytes,
                crate::record::EventKind::Free => level -= e.bytes,
                crate::record::EventKind::Oom => {}
            }
            if level == peak {
                at = Some(i);
                break;
            }
        }
        let i = at.expect("the peak is reached by an allocation of the call");
        // The cache's tensors: what DynamicLayer.update's cats allocate.
        let (mut cache_ids, mut cache_level, mut kv_cache_peak_bytes) = (std::collections::HashSet::new(), 0u64, 0u64);
        for e in &events {
            match e.kind {
                crate::record::EventKind::Alloc if e.scope.ends_with(".past_key_values") => {
                    cache_ids.insert(e.id);
                    cache_level += e.bytes as u64;
                    kv_cache_peak_bytes = kv_cache_peak_bytes.max(cache_level);
                }
                crate::record::EventKind::Free if cache_ids.remove(&e.id) => cache_level -= e.bytes as u64,
                _ => {}
            }
        }
        let step = marks.iter().rev().find(|m| m.1 <= i).map_or(Step::Prefill, |m| m.0);
        if std::env::var_os("VRAMSCOPE_ESTIMATE_DEBUG").is_some() {
            debug_live_at(&events, i);
        }
        Ok(SimulatedGenerate { parameter_bytes, peak_bytes: peak as u64, peak_step: step.to_string(), peak_scope: events[i].scope.to_string(), peak_op: events[i].op.to_string(), kv_cache_bytes, kv_cache_peak_bytes })
    })();
    runtime::reset();
    res
}

/// What the call's allocations left live at event `i` (the weights and the prompt not listed).
fn debug_live_at(events: &[crate::record::MemEvent], i: usize) {
    let mut live: Vec<&crate::record::MemEvent> = Vec::new();
    for e in &events[..=i] {
        match e.kind {
            crate::record::EventKind::Alloc => live.push(e),
            crate::record::EventKind::Free => live.retain(|l| l.id != e.id),
            crate::record::EventKind::Oom => {}
        }
    }
    for e in live {
        eprintln!("{:>12} {:<50} {}", e.bytes, e.scope, e.op);
    }
}

/// An estimate of a generate run: the configuration, the shape and whether to simulate beside it.
pub struct GeneratePlan {
    pub model: ModelConfig,
    pub dtype: DType,
    pub batch: usize,
    pub seq: usize,
    pub max_new_tokens: usize,
    /// The GenerationConfig (its max_new_tokens is `max_new_tokens`).
    pub generation: GenerateConfig,
    pub simulate: bool,
}

pub struct GenerateResult {
    pub estimate: GenerateEstimate,
    /// The peak in closed form, where it covers the run (else why not).
    pub peak: Result<GeneratePeak, String>,
    /// Where it does not: the closed form's lower bound (`generate_peak::lower_bound`).
    pub peak_lower_bound: Option<GeneratePeak>,
    pub simulated: Option<SimulatedGenerate>,
}

/// The parameters' bytes of `cfg` in `dtype` (what the meta model holds), without building it.
fn parameter_bytes(cfg: &ModelConfig, dtype: DType) -> Result<u64> {
    runtime::reset();
    let bytes = Model::new_in(cfg, Device::Meta, 0, dtype).map(|m| m.parameters().iter().map(|p| p.tensor.nbytes() as u64).sum());
    runtime::reset();
    Ok(bytes?)
}

impl GeneratePlan {
    pub fn run(&self) -> Result<GenerateResult> {
        let estimate = crate::analyse::estimate::generate::estimate(&self.model, self.dtype.size() as u64, self.batch * self.generation.num_return_sequences, self.seq, self.max_new_tokens);
        let weights = parameter_bytes(&self.model, self.dtype)?;
        // Past a sliding window the forward's masks and attention read the window: the peak
        // is the lower bound's (its cache the sliding layers' windows).
        let past = crate::analyse::estimate::generate::past_window(&self.model, self.seq, self.max_new_tokens)
            .then(|| "a sliding window the prompt and new tokens pass (the closed form derives the cache there, not the forward's windowed masks)".to_string());
        let (peak, peak_lower_bound) = match past.or_else(|| generate_peak::covers(&self.model, self.dtype, &self.generation)) {
            Some(why) => (Err(why), Some(generate_peak::lower_bound(&self.model, self.dtype, weights, self.batch, self.seq, &self.generation))),
            None => (Ok(generate_peak::peak(&self.model, weights, self.batch, self.seq, &self.generation)), None),
        };
        let simulated = if self.simulate { Some(simulate(&self.model, self.dtype, self.batch, self.seq, &self.generation)?) } else { None };
        Ok(GenerateResult { estimate, peak, peak_lower_bound, simulated })
    }

    /// `estimate --profile-type generate --json`'s object.
    pub fn json(&self, r: &GenerateResult) -> serde_json::Value {
        serde_json::json!({
            "model": self.model,
            "profile_type": "generate",
            "batch_size": self.batch,
            "context_length": self.seq,
            "max_new_tokens": self.max_new_tokens,
            "generation": self.generation,
            "weights_dtype": self.dtype.name(),
            "estimate": r.estimate,
            "peak": r.peak.as_ref().ok(),
            "peak_not_covered": r.peak.as_ref().err(),
            "peak_lower_bound": r.peak_lower_bound,
            "simulated": r.simulated,
            "units": "bytes (requested: the tensors' own, no allocator rounding)",
            "note": match &r.peak {
                Ok(_) => "the closed form gives the DynamicCache and the generate peak, exact against the simulated meta generate() (itself byte-exact against transformers: tests/generate_grid.rs)".to_string(),
                Err(why) => format!("the closed form gives the DynamicCache and a lower bound of the generate peak (peak_lower_bound); the peak itself is the simulated meta run's: the peak's closed form does not cover {why}"),
            },
        })
    }

    /// What `estimate --profile-type generate` prints.
    pub fn text(&self, r: &GenerateResult) -> String {
        use super::text::size;
        let mut s = String::new();
        let e = &r.estimate;
        out!(s,
            "vramscope estimate | generate (transformers 5.23, {}), weights {}, batch {}, prompt {}, max_new_tokens {} | bytes requested; GiB/MiB are 1024-based",
            self.generation.describe(),
            self.dtype.name(),
            self.batch,
            self.seq,
            self.max_new_tokens
        );
        out!(s, "\n| term | formula | closed form | simulated (meta generate()) |\n|---|---|---:|---:|");
        let sim = r.simulated.as_ref();
        for (what, formula, bytes) in &e.formulas {
            let simulated = sim.and_then(|m| match what.as_str() {
                "DynamicCache at the end" => Some(m.kv_cache_bytes),
                "DynamicCache high-water (last cat)" => Some(m.kv_cache_peak_bytes),
                _ => None,
            });
            out!(s, "| {what} | {formula} | {} ({bytes} B) | {} |", size(*bytes as i64), simulated.map_or("-".into(), |b| format!("{} ({b} B)", size(b as i64))));
        }
        match (&r.peak, sim) {
            (Ok(p), _) => {
                out!(s, "\n| peak candidate (step, module, op) | closed form |\n|---|---:|");
                for (what, bytes) in &p.candidates {
                    out!(s, "| {what} | {} ({bytes} B) |", size(*bytes as i64));
                }
                out!(
                    s,
                    "\ngenerate peak (closed form, exact against the simulated meta generate(), itself byte-exact against transformers): {} ({} B) in the {} at {} ({}), weights included{}",
                    size(p.bytes as i64),
                    p.bytes,
                    p.step,
                    p.scope,
                    p.op,
                    sim.map_or(String::new(), |m| format!("; simulated: {} B in the {} at {} ({})", m.peak_bytes, m.peak_step, m.peak_scope, m.peak_op))
                );
            }
            (Err(_), _) if r.peak_lower_bound.is_some() => {
                let lb = r.peak_lower_bound.as_ref().expect("matched");
                out!(s, "\n| lower-bound moment (step, module, op): what every model's generate() holds then | closed form |\n|---|---:|");
                for (what, bytes) in &lb.candidates {
                    out!(s, "| {what} | {} ({bytes} B) |", size(*bytes as i64));
                }
                out!(s, "\ngenerate peak lower bound (closed form: weights, generate's tensors, the cache, the logits; eager's scores, the MLP's or batched_mm's tensors; the family's own transients left out): {} ({} B) in the {} at {} ({})", size(lb.bytes as i64), lb.bytes, lb.step, lb.scope, lb.op);
            }
            _ => {}
        }
        match (&r.peak, sim) {
            (Ok(_), _) => {}
            (Err(why), Some(m)) => out!(s,
                "\ngenerate peak (simulated; the closed form does not cover {why}): {} ({} B) in the {} at {} ({}), weights {} included",
                size(m.peak_bytes as i64),
                m.peak_bytes,
                m.peak_step,
                m.peak_scope,
                m.peak_op,
                size(m.parameter_bytes as i64)
            ),
            (Err(why), None) => out!(s, "\n(--no-simulate: the peak's closed form does not cover {why}, so it states the lower bound above; the simulated run gives the peak, and `vramscope profile --profile-type generate` with the allocator's blocks)"),
        }
        s
    }
}
