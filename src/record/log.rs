//! The event log and running statistics of one run.
use super::{Category, Phase};
use serde::Serialize;
use std::collections::HashMap;
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Alloc,
    Free,
}

/// One allocation or free of a storage.
#[derive(Clone, Debug, Serialize)]
pub struct MemEvent {
    pub kind: EventKind,
    /// Storage id, unique within a run (allocation order).
    pub id: u64,
    pub bytes: usize,
    /// Module path on the scope stack when the storage was allocated (or freed).
    pub scope: Rc<str>,
    pub op: &'static str,
    pub phase: Phase,
    /// Category at the time of the event (frees carry the final category).
    pub category: Category,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct MemoryStats {
    /// Bytes in live storages now.
    pub allocated: usize,
    /// Highest `allocated` since the last peak reset.
    pub peak_allocated: usize,
    pub num_allocs: u64,
    pub num_frees: u64,
}

#[derive(Clone, Debug)]
struct Live {
    bytes: usize,
    category: Category,
}

/// Running totals, live storages and (when enabled) the full event list.
#[derive(Debug, Default)]
pub struct MemoryLog {
    pub stats: MemoryStats,
    live: HashMap<u64, Live>,
    events: Option<Vec<MemEvent>>,
}

impl MemoryLog {
    pub fn start_recording(&mut self) {
        self.events = Some(Vec::new());
    }
    pub fn stop_recording(&mut self) -> Vec<MemEvent> {
        self.events.take().unwrap_or_default()
    }
    pub fn is_recording(&self) -> bool {
        self.events.is_some()
    }
    pub fn reset_peak(&mut self) {
        self.stats.peak_allocated = self.stats.allocated;
    }

    pub fn on_alloc(&mut self, id: u64, bytes: usize, scope: &Rc<str>, op: &'static str, phase: Phase, category: Category) {
        self.stats.allocated += bytes;
        self.stats.num_allocs += 1;
        self.stats.peak_allocated = self.stats.peak_allocated.max(self.stats.allocated);
        self.live.insert(id, Live { bytes, category });
        if let Some(ev) = &mut self.events {
            ev.push(MemEvent { kind: EventKind::Alloc, id, bytes, scope: scope.clone(), op, phase, category });
        }
    }

    pub fn on_free(&mut self, id: u64, scope: &Rc<str>, op: &'static str, phase: Phase) {
        let Some(live) = self.live.remove(&id) else { return };
        self.stats.allocated -= live.bytes;
        self.stats.num_frees += 1;
        if let Some(ev) = &mut self.events {
            ev.push(MemEvent {
                kind: EventKind::Free,
                id,
                bytes: live.bytes,
                scope: scope.clone(),
                op,
                phase,
                category: live.category,
            });
        }
    }

    /// Re-categorise a live storage (its role became known after allocation).
    pub fn set_category(&mut self, id: u64, category: Category) {
        if let Some(l) = self.live.get_mut(&id) {
            l.category = category;
        }
    }
    pub fn category(&self, id: u64) -> Option<Category> {
        self.live.get(&id).map(|l| l.category)
    }

    /// Live bytes per category right now.
    pub fn live_by_category(&self) -> Vec<(Category, usize)> {
        let mut m: HashMap<Category, usize> = HashMap::new();
        for l in self.live.values() {
            *m.entry(l.category).or_default() += l.bytes;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort();
        v
    }
}
