//! Pure functions over recorded memory events: the peak and what is live at it, per-phase
//! peaks, breakdowns by category and module, the largest allocations.
pub mod budget;
pub mod estimate;
pub mod fast_hash;
pub mod fit;
pub mod flops;
pub mod frames;
pub mod operators;
pub mod optimizer_estimate;
pub mod snapshot;
pub mod sweep;
pub mod search;

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
    /// The reference implementation's Python function it mirrors, innermost first
    /// (`file:line function`; empty outside the model's mirrored code).
    pub python: Vec<String>,
}

impl LiveAlloc {
    /// Where it was made, for a line of text: the innermost Python function, then the Rust
    /// line (`cs336_basics/model.py:34 Linear.forward (src/model/mod.rs:301)`).
    pub fn made_at(&self) -> String {
        match self.python.first() {
            Some(p) => format!("{p} ({})", self.location),
            None => self.location.clone(),
        }
    }
}

impl LiveAlloc {
    fn of(e: &MemEvent) -> LiveAlloc {
        LiveAlloc {
            id: e.id,
            addr: e.addr,
            requested_bytes: e.bytes,
            block_bytes: e.block,
            category: e.category,
            scope: crate::record::scope_name(&e.scope, e.phase).into_owned(),
            op: e.op,
            phase: e.phase,
            location: format!("{}:{}", e.location.file(), e.location.line()),
            python: crate::record::pyframe::frames(&e.py).map(|f| format!("{}:{} {}", f.file, f.line, f.name)).collect(),
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
    /// The allocation the allocator refused, when the recording ends in one.
    pub failed: Option<FailedAlloc>,
}

/// An out-of-memory: what was asked for, by whom, and what held the memory then.
#[derive(Clone, Debug, Serialize)]
pub struct FailedAlloc {
    /// The request (`requested_bytes`) and its rounded block size (`block_bytes`).
    #[serde(flatten)]
    pub request: LiveAlloc,
    /// Allocated bytes (allocator blocks) live when it failed.
    pub live_bytes: usize,
    /// The same per category and per module path, largest first.
    pub live_by_category: Vec<(Category, usize)>,
    pub live_by_module: Vec<(String, usize)>,
}

impl PeakReport {
    /// Block bytes of one category live at the peak (0 when none).
    pub fn category_bytes(&self, c: Category) -> usize {
        self.by_category.iter().find(|(k, _)| *k == c).map_or(0, |x| x.1)
    }
}

/// Orders names as people read them: runs of digits compare by value, so `layers.2` comes
/// before `layers.10`, and a path before its children (`blocks` < `blocks.0`).
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    // Equal numbers written differently (`2`, `02`) decide only if nothing else does.
    let mut tie = Ordering::Equal;
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let run = |s: &[u8], k: usize| k + s[k..].iter().take_while(|c| c.is_ascii_digit()).count();
            let (ie, je) = (run(a, i), run(b, j));
            // Compare the runs without leading zeros by length, then digit by digit.
            let trim = |s: &[u8], k: usize, e: usize| k + s[k..e].iter().take_while(|&&c| c == b'0').count().min(e - k - 1);
            let (x, y) = (&a[trim(a, i, ie)..ie], &b[trim(b, j, je)..je]);
            match x.len().cmp(&y.len()).then_with(|| x.cmp(y)) {
                Ordering::Equal => {
                    tie = tie.then((ie - i).cmp(&(je - j)));
                    (i, j) = (ie, je)
                }
                o => return o,
            }
        } else {
            match a[i].cmp(&b[j]) {
                Ordering::Equal => (i, j) = (i + 1, j + 1),
                o => return o,
            }
        }
    }
    (a.len() - i).cmp(&(b.len() - j)).then(tie)
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
            EventKind::Oom => {}
        }
        let p = phase_peaks.entry(e.phase).or_default();
        *p = (*p).max(current);
    }
    // Second pass: the live set at the peak.
    let live = live_after(before, best_at.map_or(&[][..], |at| &events[..=at]));
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
        *module.entry(module_name(e)).or_default() += e.block;
    }
    // The first refused allocation and what was live when it failed.
    let failed = events.iter().position(|e| e.kind == EventKind::Oom).map(|i| {
        let live = live_after(before, &events[..i]);
        let (mut by_cat, mut by_mod): (HashMap<Category, usize>, HashMap<String, usize>) = Default::default();
        for e in live.values() {
            *by_cat.entry(e.category).or_default() += e.block;
            *by_mod.entry(module_name(e)).or_default() += e.block;
        }
        FailedAlloc {
            request: LiveAlloc::of(&events[i]),
            live_bytes: live.values().map(|e| e.block).sum(),
            live_by_category: sorted(by_cat),
            live_by_module: sorted(by_mod),
        }
    });
    // The `top` largest by (block bytes desc, id asc), chosen before any is described: a deep
    // model has millions of allocations, and describing each cost host memory per layer.
    let mut picked: Vec<&MemEvent> = events.iter().filter(|e| e.kind == EventKind::Alloc).collect();
    let order = |a: &&MemEvent, b: &&MemEvent| b.block.cmp(&a.block).then(a.id.cmp(&b.id));
    if picked.len() > top && top > 0 {
        picked.select_nth_unstable_by(top - 1, order);
    }
    picked.truncate(top);
    picked.sort_by(order);
    let largest: Vec<LiveAlloc> = picked.into_iter().map(LiveAlloc::of).collect();
    let at = best_at.map(|i| &events[i]);
    PeakReport {
        peak_allocated: best,
        peak_event: best_at,
        peak_phase: at.map(|e| e.phase),
        peak_scope: at.map_or(String::new(), |e| crate::record::scope_name(&e.scope, e.phase).into_owned()),
        peak_op: at.map_or(String::new(), |e| e.op.to_string()),
        phase_peaks,
        by_category: sorted(cat),
        by_category_requested: sorted(cat_req),
        by_module: sorted(module),
        activations_by_op: sorted(act_op),
        largest,
        live_at_peak: live.len(),
        failed,
    }
}

fn sorted<K: Ord + AsRef<str>>(m: HashMap<K, usize>) -> Vec<(K, usize)> {
    let mut v: Vec<_> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| natural_cmp(a.0.as_ref(), b.0.as_ref())));
    v
}

fn module_name(e: &MemEvent) -> String {
    crate::record::scope_name(&e.scope, e.phase).into_owned()
}

/// Storages live after `before` and then `events`, by id.
fn live_after<'a>(before: &'a [MemEvent], events: &'a [MemEvent]) -> HashMap<u64, &'a MemEvent> {
    let mut live: HashMap<u64, &MemEvent> = before.iter().map(|e| (e.id, e)).collect();
    for e in events {
        match e.kind {
            EventKind::Alloc => {
                live.insert(e.id, e);
            }
            EventKind::Free => {
                live.remove(&e.id);
            }
            EventKind::Oom => {}
        }
    }
    live
}

#[cfg(test)]
mod tests {
    use super::natural_cmp;

    #[test]
    fn natural_order_reads_numbers_by_value() {
        let mut v = vec!["layers.10", "layers.2", "layers.2.attn", "layers", "layers.1", "layers.02", "loss", "(loss)"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["(loss)", "layers", "layers.1", "layers.2", "layers.02", "layers.2.attn", "layers.10", "loss"]);
        assert_eq!(natural_cmp("a9", "a10"), std::cmp::Ordering::Less);
        assert_eq!(natural_cmp("x", "x"), std::cmp::Ordering::Equal);
        assert_eq!(natural_cmp("18446744073709551616999", "9"), std::cmp::Ordering::Greater);
    }
}
