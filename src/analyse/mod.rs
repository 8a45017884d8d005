//! Pure functions over recorded memory events: the peak and what is live at it, per-phase
//! peaks, breakdowns by category and module, the largest allocations.
pub mod estimate;
pub mod fit;
pub mod flops;
pub mod operators;
pub mod snapshot;

use crate::record::{Category, EventKind, MemEvent, Phase};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// One allocation live at some moment.
#[derive(Clone, Debug, Serialize)]
pub struct LiveAlloc {
    pub id: u64,
    pub addr: u64,
    pub requested_bytes: usize,
    pub block_bytes: usize,
    pub category: Category,
    pub scope: String,
    pub op: &'static str,
    pub phase: Phase,
    /// Rust `file:line` that allocated it.
    pub location: String,
}

impl LiveAlloc {
    fn of(e: &MemEvent) -> LiveAlloc {
        LiveAlloc {
            id: e.id,
            addr: e.addr,
            requested_bytes: e.bytes,
            block_bytes: e.block,
            category: e.category,
            scope: e.scope.to_string(),
            op: e.op,
            phase: e.phase,
            location: format!("{}:{}", e.location.file(), e.location.line()),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PeakReport {
    /// Highest allocated bytes (allocator blocks) over the recording.
    pub peak_allocated: usize,
    /// Index into the events of the alloc that reached the peak (None: before recording).
    pub peak_event: Option<usize>,
    pub peak_phase: Option<Phase>,
    pub peak_scope: String,
    pub peak_op: String,
    /// Highest allocated bytes within each phase.
    pub phase_peaks: BTreeMap<Phase, usize>,
    /// Live bytes (allocator blocks) at the peak per category, largest first.
    pub by_category: Vec<(Category, usize)>,
    /// The same in requested bytes (what the tensors themselves hold).
    pub by_category_requested: Vec<(Category, usize)>,
    /// Live bytes at the peak per module path, largest first.
    pub by_module: Vec<(String, usize)>,
    /// Activation bytes (allocator blocks) live at the peak per op that made them, largest
    /// first: which ops' saved tensors fill the activation memory.
    pub activations_by_op: Vec<(String, usize)>,
    /// The largest allocations made during the recording (block bytes), largest first.
    pub largest: Vec<LiveAlloc>,
    pub live_at_peak: usize,
}

impl PeakReport {
    /// Block bytes of one category live at the peak (0 when none).
    pub fn category_bytes(&self, c: Category) -> usize {
        self.by_category.iter().find(|(k, _)| *k == c).map_or(0, |x| x.1)
    }
}

/// Replay `before` (storages alive when recording started) then `events`.
pub fn peak(before: &[MemEvent], events: &[MemEvent], top: usize) -> PeakReport {
    let mut current: usize = before.iter().map(|e| e.block).sum();
    let (mut best, mut best_at) = (current, None);
    let mut phase_peaks: BTreeMap<Phase, usize> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        match e.kind {
            EventKind::Alloc => {
                current += e.block;
                if current > best {
                    best = current;
                    best_at = Some(i);
                }
            }
            EventKind::Free => current -= e.block,
        }
        let p = phase_peaks.entry(e.phase).or_default();
        *p = (*p).max(current);
    }
    // Second pass: the live set at the peak.
    let mut live: HashMap<u64, &MemEvent> = before.iter().map(|e| (e.id, e)).collect();
    if let Some(at) = best_at {
        for e in &events[..=at] {
            match e.kind {
                EventKind::Alloc => {
                    live.insert(e.id, e);
                }
                EventKind::Free => {
                    live.remove(&e.id);
                }
            }
        }
    }
    let mut cat: HashMap<Category, usize> = HashMap::new();
    let mut cat_req: HashMap<Category, usize> = HashMap::new();
    let mut module: HashMap<String, usize> = HashMap::new();
    let mut act_op: HashMap<String, usize> = HashMap::new();
    for e in live.values() {
        if e.category == Category::Activation {
            *act_op.entry(e.op.to_string()).or_default() += e.block;
        }
        *cat.entry(e.category).or_default() += e.block;
        *cat_req.entry(e.category).or_default() += e.bytes;
        *module.entry(if e.scope.is_empty() { "<top level>".into() } else { e.scope.to_string() }).or_default() += e.block;
    }
    fn sorted<K: Ord>(m: HashMap<K, usize>) -> Vec<(K, usize)> {
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
    let mut largest: Vec<LiveAlloc> = events.iter().filter(|e| e.kind == EventKind::Alloc).map(LiveAlloc::of).collect();
    largest.sort_by(|a, b| b.block_bytes.cmp(&a.block_bytes).then(a.id.cmp(&b.id)));
    largest.truncate(top);
    let at = best_at.map(|i| &events[i]);
    PeakReport {
        peak_allocated: best,
        peak_event: best_at,
        peak_phase: at.map(|e| e.phase),
        peak_scope: at.map_or(String::new(), |e| e.scope.to_string()),
        peak_op: at.map_or(String::new(), |e| e.op.to_string()),
        phase_peaks,
        by_category: sorted(cat),
        by_category_requested: sorted(cat_req),
        by_module: sorted(module),
        activations_by_op: sorted(act_op),
        largest,
        live_at_peak: live.len(),
    }
}
