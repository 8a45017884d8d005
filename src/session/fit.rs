//! Searches over meta profiles where the allocator model's out-of-memory means "does not
//! fit": the largest batch size, longest context or (generate) most new tokens that fits a
//! device (exponential then binary search), and the fewest ranks of a GPU kind whose
//! heaviest rank fits, per layout.
use super::profile::{profile_one, ProfileOptions, ProfileType};
use super::text::size;
use crate::engine::{runtime, Device};
use crate::model::Model;
use crate::parallel::{heaviest_rank, Layout};
use crate::record::reserve;
use anyhow::Result;
use clap::ValueEnum;
use serde::Serialize;
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Find {
    /// The largest --batch-size at the given --context-length
    Batch,
    /// The longest --context-length at the given --batch-size
    Context,
    /// The fewest ranks (GPUs of --gpu's kind) that fit --batch-size per rank at
    /// --context-length, for --parallel's layout or for each of ddp, zero1, zero2 and fsdp
    #[value(name = "world-size")]
    #[serde(rename = "world-size")]
    WorldSize,
    /// The most --max-new-tokens generate() decodes after a --context-length prompt at
    /// --batch-size (--profile-type generate)
    #[value(name = "max-new-tokens")]
    #[serde(rename = "max-new-tokens")]
    MaxNewTokens,
}

/// One meta run of the search.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub value: usize,
    pub fits: bool,
    pub peak_allocated_bytes: usize,
    pub peak_reserved_bytes: usize,
    pub oom: Option<String>,
    /// A generate probe: where its peak happened and the cache it ended with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generate: Option<GenerateAt>,
}

/// A generate probe's peak step and op, and the DynamicCache's bytes once the last step ran.
#[derive(Clone, Debug, Serialize)]
pub struct GenerateAt {
    pub peak_step: Option<String>,
    pub peak_op: String,
    pub kv_cache_bytes: usize,
}

/// What every probe runs against: the device (or its memory-fraction share) less the reserve.
pub struct Budget {
    pub capacity: usize,
    pub reserve_parts: Vec<reserve::Part>,
    pub reserve: usize,
    /// `--memory-limit` for the probes (device − reserve).
    pub limit: String,
    /// `--memory-fraction` for the probes, rescaled to the limit.
    pub fraction: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WorldProbe {
    pub world_size: usize,
    pub rank: usize,
    pub fits: bool,
    pub peak_allocated_bytes: usize,
    pub peak_reserved_bytes: usize,
    pub oom: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Answer {
    pub layout: Layout,
    /// None: no world size up to the limit fits.
    pub world_size: Option<usize>,
    pub probes: Vec<WorldProbe>,
}


/// A batch or context search: the fixed shape, the search's range and what it runs against.
pub struct FitPlan {
    pub find: Find,
    pub kind: ProfileType,
    /// The configuration at the search's start (validated; names the model and the device).
    pub base: ProfileOptions,
    pub batch: usize,
    pub ctx: usize,
    /// generate's max_new_tokens held fixed (None: not a generate search, or
    /// `--find max-new-tokens`).
    pub new_tokens: Option<usize>,
    /// The first value tried, and the largest.
    pub start: usize,
    pub cap: usize,
    /// The model's maximum sequence length when it bounds a context search (generate: the
    /// prompt and the new tokens together).
    pub model_max: Option<usize>,
    /// For generate, what sets `model_max` and the flag that looks further (max_position_embeddings,
    /// a sliding window, Phi-3's original positions).
    pub model_max_why: &'static str,
    pub budget: Budget,
    /// Whether the reserve is the default one (no --reserve).
    pub reserve_default: bool,
    pub memory_fraction: Option<f64>,
}

/// The search's outcome: every probe (by value), the answer and the first value that did not fit.
pub struct Fit {
    pub probes: Vec<Probe>,
    pub answer: Option<Probe>,
    pub first_fail: Option<Probe>,
}

impl FitPlan {
    /// The (batch, context, generate's new tokens) of a probe at `n`.
    pub fn point(&self, n: usize) -> (usize, usize, Option<usize>) {
        match self.find {
            Find::Batch | Find::WorldSize => (n, self.ctx, self.new_tokens),
            Find::Context => (self.batch, n, self.new_tokens),
            Find::MaxNewTokens => (self.batch, self.ctx, Some(n)),
        }
    }

    /// Search, `build` giving the probe's options at each value tried (each probed once).
    pub fn search(&self, mut build: impl FnMut(usize) -> Result<ProfileOptions>) -> Result<Fit> {
        let mut probes: Vec<Probe> = Vec::new();
        let mut probe = |n: usize| -> Result<Probe> {
            if let Some(p) = probes.iter().find(|p| p.value == n) {
                return Ok(p.clone());
            }
            let plan = build(n)?;
            let run = profile_one(&plan, plan.contexts[0], self.kind)?;
            // Paged optimizer state sits in the same GPU memory while resident: it counts
            // against what the allocator's segments may use.
            let paged = run.unified_peak.unwrap_or(0);
            let room = self.budget.capacity.saturating_sub(self.budget.reserve);
            let fits = run.oom.is_none() && run.stats.reserved_bytes.peak.saturating_add(paged) <= room;
            let oom = run.oom.or_else(|| (!fits).then(|| format!("peak reserved {} B + paged optimizer state {paged} B in unified memory exceed {room} B", run.stats.reserved_bytes.peak)));
            let generate = run.generate.as_ref().map(|g| GenerateAt { peak_step: g.peak_step.clone(), peak_op: g.peak_op.clone(), kv_cache_bytes: g.kv_cache_bytes });
            let p = Probe { value: n, fits, peak_allocated_bytes: run.stats.allocated_bytes.peak, peak_reserved_bytes: run.stats.reserved_bytes.peak, oom, generate };
            probes.push(p.clone());
            Ok(p)
        };
        let (lo, hi) = crate::analyse::search::largest(self.start, self.cap, |n| probe(n).map(|p| p.fits))?;
        let answer = lo.map(&mut probe).transpose()?;
        let first_fail = hi.map(&mut probe).transpose()?;
        probes.sort_by_key(|p| p.value);
        Ok(Fit { probes, answer, first_fail })
    }

    /// Free at the answer: what the process may use, less the reserve, less the peak the
    /// caching allocator reserved (its segments) — or, looser, less the tensors' blocks.
    fn margins(&self, fit: &Fit) -> (Option<i64>, Option<i64>) {
        let free = self.budget.capacity as i64 - self.budget.reserve as i64;
        (fit.answer.as_ref().map(|p| free - p.peak_reserved_bytes as i64), fit.answer.as_ref().map(|p| free - p.peak_allocated_bytes as i64))
    }

    /// `fit --json`'s object.
    pub fn json(&self, fit: &Fit) -> Value {
        let (margin, margin_allocated) = self.margins(fit);
        let device = self.base.device_label();
        let mut fixed = match self.find {
            Find::Batch | Find::WorldSize => json!({"context_length": self.ctx}),
            Find::Context => json!({"batch_size": self.batch}),
            Find::MaxNewTokens => json!({"batch_size": self.batch, "context_length": self.ctx}),
        };
        if let Some(n) = self.new_tokens {
            fixed["max_new_tokens"] = n.into();
        }
        json!({
            "find": self.find,
            "model": self.base.model_name,
            "config": self.base.model,
            "profile_type": self.kind,
            "optimizer": (self.kind == ProfileType::Training).then_some(&self.base.optim),
            "fixed": fixed,
            "device": device,
            "capacity_bytes": self.budget.capacity,
            "reserve_bytes": self.budget.reserve,
            "reserve": self.budget.reserve_parts,
            "answer": fit.answer.as_ref().map(|p| p.value),
            "peak_allocated_bytes": fit.answer.as_ref().map(|p| p.peak_allocated_bytes),
            "peak_reserved_bytes": fit.answer.as_ref().map(|p| p.peak_reserved_bytes),
            "margin_bytes": margin,
            "margin_gib": margin.map(|m| m as f64 / (1u64 << 30) as f64),
            "margin_percent": margin.map(|m| 100.0 * m as f64 / self.budget.capacity as f64),
            "margin_over_allocated_bytes": margin_allocated,
            "margin_note": "margin = capacity − reserve − peak reserved (max_memory_reserved); margin_over_allocated uses peak allocated (max_memory_allocated)",
            "first_not_fitting": fit.first_fail.as_ref().map(|p| p.value),
            "oom": fit.first_fail.as_ref().and_then(|p| p.oom.clone()),
            "search_limit": self.cap,
            "units": "bytes; GiB are 1024³ bytes",
            "probes": fit.probes,
            "generate_at_answer": fit.answer.as_ref().and_then(|p| p.generate.as_ref()),
            "note": self.note(),
        })
    }

    /// What a probe runs, where the answer is easily misread: an inference probe is one
    /// prefill, not generation or serving.
    fn note(&self) -> Option<String> {
        match self.kind {
            ProfileType::Inference | ProfileType::Forward => Some(format!(
                "each probe is ONE forward pass ({}) of the whole prompt at once, the prefill: not generate()'s decode steps (`vramscope fit --profile-type generate --max-new-tokens N`, or `--find max-new-tokens`), and not how many sequences a serving engine holds (its KV cache: `vramscope serve`)",
                if self.kind == ProfileType::Inference { "under no_grad" } else { "with autograd" }
            )),
            ProfileType::Generate => Some(
                "each probe is transformers' greedy generate() with its DynamicCache (prefill and every decode step, the worst case: no row stops early at eos), one sequence per row; a serving engine's capacity is `vramscope serve`'s".into(),
            ),
            _ => None,
        }
    }

    /// What the command line prints.
    pub fn text(&self, fit: &Fit) -> String {
        let mut s = String::new();
        let (margin, margin_allocated) = self.margins(fit);
        let device = self.base.device_label();
        let what = match self.find {
            Find::Batch | Find::WorldSize => "batch size",
            Find::Context if self.kind == ProfileType::Generate => "prompt length",
            Find::Context => "context length",
            Find::MaxNewTokens => "max_new_tokens",
        };
        let mut fixed_txt = match self.find {
            Find::Batch | Find::WorldSize => format!("context length {}", self.ctx),
            Find::Context => format!("batch size {}", self.batch),
            Find::MaxNewTokens => format!("batch size {}, prompt length {}", self.batch, self.ctx),
        };
        if let Some(n) = self.new_tokens {
            fixed_txt += &format!(", max_new_tokens {n}");
        }
        out!(s,
            "vramscope fit | {} ({}) {:?}, {fixed_txt}, on meta against {device} ({}{}) | GiB/MiB are 1024-based",
            self.base.model_name,
            self.base.model.flavour,
            self.kind,
            size(self.budget.capacity as i64),
            self.memory_fraction.map_or(String::new(), |f| format!(", memory fraction {f}"))
        );
        if self.kind == ProfileType::Training {
            out!(s, "optimizer: {}", self.base.optim.summary());
        }
        if let Some(note) = self.note() {
            // The answer is easily read as serving capacity, which it is not.
            out!(s, "note: {note}");
        }
        let tried: Vec<String> = fit.probes.iter().map(|p| format!("{}{}", p.value, if p.fits { "" } else { "✗" })).collect();
        let parts: Vec<String> = self.budget.reserve_parts.iter().map(|p| format!("{} = {}", p.what, size(p.bytes as i64))).collect();
        out!(s,
            "reserve {}{} kept free for what the allocator model does not hold{}; probes run against {}",
            size(self.budget.reserve as i64),
            if self.reserve_default { " (default; --reserve SIZE to change)" } else { " (--reserve)" },
            if self.reserve_default { format!(": {}", parts.join(" + ")) } else { String::new() },
            size(self.budget.capacity as i64 - self.budget.reserve as i64)
        );
        out!(s, "probes ({} meta runs; ✗ = out of memory): {}", fit.probes.len(), tried.join(" "));
        match &fit.answer {
            None => out!(s, "nothing fits: {what} {} already runs out of memory ({})", self.start, fit.first_fail.as_ref().and_then(|p| p.oom.clone()).unwrap_or_default()),
            Some(p) => {
                let (m, ma) = (margin.unwrap(), margin_allocated.unwrap());
                out!(s, "largest {what} that fits: {}", p.value);
                out!(s, "at {}: peak allocated {} (max_memory_allocated), peak reserved {} (max_memory_reserved)", p.value, size(p.peak_allocated_bytes as i64), size(p.peak_reserved_bytes as i64));
                if let Some(g) = &p.generate {
                    out!(s,
                        "at {}: the peak is in the {} ({}); the DynamicCache holds {} ({} B) once the last step ran",
                        p.value,
                        g.peak_step.as_deref().unwrap_or("setup"),
                        g.peak_op,
                        size(g.kv_cache_bytes as i64),
                        g.kv_cache_bytes
                    );
                }
                out!(s,
                    "margin left at {}: {} capacity − {} reserve − {} peak reserved = {} ({:.1} % of capacity); over peak allocated: {}",
                    p.value,
                    size(self.budget.capacity as i64),
                    size(self.budget.reserve as i64),
                    size(p.peak_reserved_bytes as i64),
                    size(m),
                    100.0 * m as f64 / self.budget.capacity as f64,
                    size(ma)
                );
                match &fit.first_fail {
                    Some(f) => out!(s, "{what} {} does not fit: {}", f.value, f.oom.as_deref().unwrap_or("")),
                    None if self.model_max.is_some() && self.kind == ProfileType::Generate => out!(s,
                        "(the search stopped at {}: the prompt and the new tokens reach the model's {} positions ({}))",
                        self.cap,
                        self.model_max.unwrap_or(0),
                        self.model_max_why
                    ),
                    None if self.model_max == Some(self.cap) => {
                        out!(s, "(the search stopped at the model's maximum sequence length {}: raise --max-seq-len to look further)", self.cap)
                    }
                    None => out!(s, "(the search stopped at its limit {}: raise --max to look further)", self.cap),
                }
            }
        }
        s
    }
}

/// A world-size search: the layouts, the per-rank shape and what each rank runs against.
pub struct WorldPlan {
    pub layouts: Vec<Layout>,
    pub kind: ProfileType,
    /// The configuration at one rank of the first layout (validated; names model and device).
    pub base: ProfileOptions,
    pub batch: usize,
    pub ctx: usize,
    pub cap: usize,
    pub budget: Budget,
}

impl WorldPlan {
    /// Per layout, the fewest ranks whose heaviest rank fits; `build` gives the probe's
    /// options at (layout, n) ranks, None when that world size cannot be formed.
    pub fn search(&self, mut build: impl FnMut(Layout, usize) -> Result<Option<ProfileOptions>>) -> Result<Vec<Answer>> {
        let shapes: Vec<Vec<usize>> = {
            let _d = runtime::defer_allocation();
            let m = Model::new_in(&self.base.model, Device::Meta, 42, self.base.precision.param_dtype())?;
            m.parameters().iter().map(|q| q.tensor.shape().to_vec()).collect()
        };
        runtime::reset();
        let mut answers = Vec::new();
        for &layout in &self.layouts {
            let mut probes: Vec<WorldProbe> = Vec::new();
            let mut probe = |n: usize| -> Result<bool> {
                if let Some(p) = probes.iter().find(|p| p.world_size == n) {
                    return Ok(p.fits);
                }
                let Some(mut plan) = build(layout, n)? else { return Ok(false) };
                let rank = plan.parallel.as_ref().map_or(0, |c| heaviest_rank(&shapes, c));
                if let Some(c) = plan.parallel.as_mut() {
                    c.rank = rank;
                }
                let run = profile_one(&plan, self.ctx, self.kind)?;
                let fits = run.oom.is_none();
                probes.push(WorldProbe { world_size: n, rank, fits, peak_allocated_bytes: run.stats.allocated_bytes.peak, peak_reserved_bytes: run.stats.reserved_bytes.peak, oom: run.oom });
                Ok(fits)
            };
            // DDP replicates everything: what one rank holds does not fall as ranks are added.
            let cap = if layout == Layout::Ddp { 1 } else { self.cap };
            let hi = crate::analyse::search::smallest(cap, &mut probe)?;
            probes.sort_by_key(|p| p.world_size);
            answers.push(Answer { layout, world_size: hi, probes });
        }
        Ok(answers)
    }

    /// `fit --find world-size --json`'s object.
    pub fn json(&self, answers: &[Answer]) -> Value {
        let device = self.base.device_label();
        json!({
            "find": "world-size",
            "model": self.base.model_name,
            "config": self.base.model,
            "profile_type": self.kind,
            "optimizer": (self.kind == ProfileType::Training).then_some(&self.base.optim),
            "batch_size_per_rank": self.batch,
            "context_length": self.ctx,
            "device": device,
            "capacity_bytes": self.budget.capacity,
            "reserve_bytes": self.budget.reserve,
            "search_limit": self.cap,
            "layouts": answers,
            "units": "bytes; GiB are 1024³ bytes; each probe profiles the rank holding the most",
        })
    }

    /// What the command line prints: a row per layout.
    pub fn text(&self, answers: &[Answer]) -> String {
        let mut s = String::new();
        let device = self.base.device_label();
        out!(s,
            "vramscope fit --find world-size | {} ({}) {:?}, batch {} per rank, context {}, on meta against {device} ({} less a {} reserve) | GiB are 1024-based",
            self.base.model_name,
            self.base.model.flavour,
            self.kind,
            self.batch,
            self.ctx,
            size(self.budget.capacity as i64),
            size(self.budget.reserve as i64)
        );
        out!(s, "\n| layout | fewest ranks | peak allocated per rank | peak reserved per rank | probes (✗ = out of memory) |\n|---|---:|---:|---:|---|");
        for ans in answers {
            let at = ans.world_size.and_then(|n| ans.probes.iter().find(|p| p.world_size == n));
            let tried: Vec<String> = ans.probes.iter().map(|p| format!("{}{}", p.world_size, if p.fits { "" } else { "✗" })).collect();
            out!(s,
                "| {} | {} | {} | {} | {} |",
                ans.layout.name(),
                ans.world_size.map_or_else(
                    || if ans.layout == Layout::Ddp { "none (replicated: the same on any number of ranks)".to_string() } else { format!("none up to {}", self.cap) },
                    |n| n.to_string()
                ),
                at.map_or("-".into(), |p| size(p.peak_allocated_bytes as i64)),
                at.map_or("-".into(), |p| size(p.peak_reserved_bytes as i64)),
                tried.join(" ")
            );
        }
        s
    }
}
