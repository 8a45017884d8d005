//! The event log and running statistics of one run.
use super::allocator::{round_size, Action, CachingAllocator, OutOfMemory, StreamId, Trace};
use super::{Category, Phase, PyStack};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Alloc,
    Free,
    /// An allocation the allocator refused: nothing became live. Recorded last, so that
    /// the history of a failed step ends with what was asked for, by whom.
    Oom,
}

/// One allocation or free of a storage.
#[derive(Clone, Debug, Serialize)]
pub struct MemEvent {
    pub kind: EventKind,
    /// Storage id, unique within a run (allocation order).
    pub id: u64,
    /// Device address from the caching-allocator model (0 without one).
    pub addr: u64,
    /// Requested bytes.
    pub bytes: usize,
    /// Bytes the allocator counts for the block (rounded, or the whole unsplit block);
    /// equal to `bytes` without an allocator model.
    pub block: usize,
    /// Microseconds since the Unix epoch.
    pub time_us: u64,
    /// Module path on the scope stack when the storage was allocated (or freed).
    pub scope: Rc<str>,
    pub op: &'static str,
    pub phase: Phase,
    /// Category at the time of the event (frees carry the final category).
    pub category: Category,
    /// The Rust code that allocated the storage: the first caller outside the engine's
    /// ops (a model or optimizer line), or the op's backward for gradients.
    #[serde(serialize_with = "ser_loc")]
    pub location: &'static std::panic::Location<'static>,
    /// The reference implementation's Python functions running then, innermost first
    /// (backward: those of the forward op whose backward ran).
    #[serde(serialize_with = "ser_py")]
    pub py: PyStack,
}

fn ser_py<S: serde::Serializer>(p: &PyStack, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(super::pyframe::frames(p).map(|f| format!("{}:{}:{}", f.file, f.line, f.name)))
}

fn ser_loc<S: serde::Serializer>(l: &&'static std::panic::Location<'static>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{}:{}", l.file(), l.line()))
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct MemoryStats {
    /// Bytes in live storages now.
    pub allocated: usize,
    /// Highest `allocated` since the last peak reset.
    pub peak_allocated: usize,
    pub num_allocs: u64,
    pub num_frees: u64,
    /// Highest allocated bytes (allocator blocks when modelled) since `reset_phase_peak`:
    /// per-phase peaks without disturbing the run's peak.
    pub phase_peak: usize,
}

#[derive(Clone, Debug)]
struct Live {
    location: &'static std::panic::Location<'static>,
    bytes: usize,
    block: usize,
    addr: u64,
    scope: Rc<str>,
    py: PyStack,
    op: &'static str,
    phase: Phase,
    category: Category,
    /// Index of its alloc event while recording.
    event: Option<usize>,
    /// The stream it was allocated on (the current stream then).
    stream: StreamId,
}

/// Running totals, live storages, the allocator model and (when enabled) the event list.
#[derive(Default)]
pub struct MemoryLog {
    pub stats: MemoryStats,
    live: HashMap<u64, Live>,
    events: Option<Vec<MemEvent>>,
    /// PyTorch's caching allocator, when the run models a GPU.
    pub allocator: Option<CachingAllocator>,
    /// Allocator actions while recording, each with the index of the event that caused it
    /// (None for actions no storage caused, e.g. `empty_cache`): the snapshot's trace.
    actions: VecDeque<(Trace, Option<usize>)>,
    /// `_record_memory_history(max_entries=…)`: the trace is a ring buffer of this many
    /// entries (None: unbounded); when full, the oldest entry is dropped. Events stay whole
    /// (the analysis replays them; they are one per storage, the trace is what grows).
    pub max_entries: Option<usize>,
    /// Trace entries the ring buffer dropped since recording started.
    dropped: usize,
    /// Blocks freed but pending (other streams used them): the cause of their
    /// `free_requested`, which their `free_completed` carries too when it comes later.
    pending_cause: HashMap<u64, Option<usize>>,
    /// The allocation the allocator refused, if any.
    pub oom: Option<(OutOfMemory, Rc<str>, Phase)>,
    /// The recording as it stood at the OOM (what unwinding frees afterwards is not part
    /// of it, as PyTorch's history ends at the exception).
    pub oom_capture: Option<Recording>,
}

/// A finished recording: events, allocator actions, and the allocator's state at the end.
pub struct Recording {
    pub events: Vec<MemEvent>,
    /// The last `max_entries` allocator actions (a suffix of the full trace, so it replays
    /// backwards from the allocator's state: frees whose allocs were dropped stand for
    /// blocks that existed before the trace, as in PyTorch).
    pub actions: Vec<(Trace, Option<usize>)>,
    /// Allocator actions the ring buffer dropped (oldest first).
    pub dropped: usize,
    pub allocator: Option<CachingAllocator>,
}

fn now_us() -> u64 {
    crate::clock::SystemTime::now().duration_since(crate::clock::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

impl MemoryLog {
    pub fn start_recording(&mut self) {
        self.events = Some(Vec::new());
        self.actions.clear();
        self.dropped = 0;
        self.pending_cause.clear();
        if let Some(a) = &mut self.allocator {
            a.take_trace();
        }
    }
    pub fn stop_recording(&mut self) -> Vec<MemEvent> {
        self.events.take().unwrap_or_default()
    }
    /// End the recording, keeping the allocator running: events, actions, allocator state.
    pub fn finish_recording(&mut self) -> Recording {
        Recording {
            events: self.stop_recording(),
            actions: Vec::from(std::mem::take(&mut self.actions)),
            dropped: std::mem::take(&mut self.dropped),
            allocator: self.allocator.clone(),
        }
    }
    /// Allocator actions since the last call (while recording).
    fn collect_actions(&mut self, cause: Option<usize>) {
        if let Some(a) = &mut self.allocator {
            let t = a.take_trace();
            if self.events.is_some() {
                let cap = self.max_entries.unwrap_or(usize::MAX);
                for t in t {
                    // A free completes when its events do: it is attributed to the free.
                    let cause = match t.action {
                        Action::FreeRequested => {
                            self.pending_cause.insert(t.addr, cause);
                            cause
                        }
                        Action::FreeCompleted => self.pending_cause.remove(&t.addr).unwrap_or(cause),
                        _ => cause,
                    };
                    if self.actions.len() >= cap {
                        self.actions.pop_front();
                        self.dropped += 1;
                    }
                    if cap > 0 {
                        self.actions.push_back((t, cause));
                    }
                }
            }
        }
    }
    /// `tensor.record_stream(stream)` on live storage `id`: its block may not be reused until
    /// `stream` catches up after it is freed. Nothing without an allocator model.
    pub fn record_stream(&mut self, id: u64, stream: StreamId) {
        if let (Some(a), Some(l)) = (&mut self.allocator, self.live.get(&id)) {
            if l.bytes > 0 {
                a.record_stream(l.addr, stream);
            }
        }
    }
    /// `stream` has caught up (its synchronize, or a `wait_stream` on it): pending frees
    /// waiting for it complete at the next allocation or `empty_cache`.
    pub fn synchronize_stream(&mut self, stream: StreamId) {
        if let Some(a) = &mut self.allocator {
            a.synchronize_stream(stream);
        }
    }
    /// `torch.cuda.synchronize()`: every stream has caught up.
    pub fn synchronize(&mut self) {
        if let Some(a) = &mut self.allocator {
            a.synchronize();
        }
    }
    /// The stream a live storage was allocated on.
    pub fn stream_of(&self, id: u64) -> Option<StreamId> {
        self.live.get(&id).map(|l| l.stream)
    }
    /// Release cached segments (`torch.cuda.empty_cache()`).
    pub fn empty_cache(&mut self) {
        if let Some(a) = &mut self.allocator {
            a.empty_cache();
        }
        self.collect_actions(None);
    }
    /// Every live storage as an alloc event (what existed before recording started).
    pub fn live_as_events(&self) -> Vec<MemEvent> {
        let mut v: Vec<MemEvent> = self
            .live
            .iter()
            .map(|(&id, l)| MemEvent {
                kind: EventKind::Alloc,
                id,
                addr: l.addr,
                bytes: l.bytes,
                block: l.block,
                time_us: 0,
                scope: l.scope.clone(),
                op: l.op,
                phase: l.phase,
                category: l.category,
                location: l.location,
                py: l.py.clone(),
            })
            .collect();
        v.sort_by_key(|e| e.id);
        v
    }
    pub fn events(&self) -> Option<&[MemEvent]> {
        self.events.as_deref()
    }
    /// Address and counted (block) bytes of a live storage.
    pub fn block_of(&self, id: u64) -> Option<(u64, usize)> {
        self.live.get(&id).map(|l| (l.addr, l.block))
    }
    /// Reserved bytes as the run reports them (allocated bytes without an allocator model).
    pub fn reserved_now(&self) -> usize {
        self.allocator.as_ref().map_or(self.stats.allocated, |a| a.stats.reserved_bytes.current)
    }
    /// Current allocated bytes as the run reports them (allocator blocks when modelled).
    pub fn allocated_now(&self) -> usize {
        self.allocator.as_ref().map_or(self.stats.allocated, |a| a.stats.allocated_bytes.current)
    }
    pub fn reset_phase_peak(&mut self) {
        self.stats.phase_peak = self.allocated_now();
    }
    pub fn reset_peak(&mut self) {
        self.stats.peak_allocated = self.stats.allocated;
        self.stats.phase_peak = self.allocated_now();
        if let Some(a) = &mut self.allocator {
            a.reset_peak();
        }
    }

    /// Account for a new storage on the default stream. With an allocator model, Err is the
    /// OOM PyTorch raises.
    #[allow(clippy::too_many_arguments)]
    pub fn on_alloc(
        &mut self,
        id: u64,
        bytes: usize,
        scope: &Rc<str>,
        op: &'static str,
        phase: Phase,
        category: Category,
        location: &'static std::panic::Location<'static>,
    ) -> Result<(), OutOfMemory> {
        self.on_alloc_on(StreamId::DEFAULT, id, bytes, scope, op, phase, category, location, None)
    }

    /// `on_alloc` for a storage allocated on `stream`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_alloc_on(
        &mut self,
        stream: StreamId,
        id: u64,
        bytes: usize,
        scope: &Rc<str>,
        op: &'static str,
        phase: Phase,
        category: Category,
        location: &'static std::panic::Location<'static>,
        py: PyStack,
    ) -> Result<(), OutOfMemory> {
        let (addr, block) = match &mut self.allocator {
            Some(a) if bytes > 0 => match a.malloc_block_on(bytes, stream) {
                Ok(ab) => ab,
                Err(e) => {
                    // PyTorch's OOM observer: the history ends with the `oom` entry, which
                    // carries the failing request's context; keep it as it stood (what
                    // unwinding frees afterwards is not part of it).
                    let block = round_size(bytes, &a.config.roundup_power2_divisions);
                    let event = self.events.as_ref().map(|e| e.len());
                    if let Some(ev) = &mut self.events {
                        ev.push(MemEvent { kind: EventKind::Oom, id, addr: 0, bytes, block, time_us: now_us(), scope: scope.clone(), op, phase, category, location, py });
                    }
                    self.collect_actions(event);
                    if self.oom.is_none() {
                        self.oom = Some((e.clone(), scope.clone(), phase));
                        self.oom_capture = Some(Recording {
                            events: self.events.clone().unwrap_or_default(),
                            actions: self.actions.iter().copied().collect(),
                            dropped: self.dropped,
                            allocator: self.allocator.clone(),
                        });
                    }
                    return Err(e);
                }
            },
            _ => (0, bytes),
        };
        self.stats.allocated += bytes;
        self.stats.num_allocs += 1;
        self.stats.peak_allocated = self.stats.peak_allocated.max(self.stats.allocated);
        self.stats.phase_peak = self.stats.phase_peak.max(self.allocated_now());
        let event = self.events.as_ref().map(|e| e.len());
        if let Some(ev) = &mut self.events {
            ev.push(MemEvent { kind: EventKind::Alloc, id, addr, bytes, block, time_us: now_us(), scope: scope.clone(), op, phase, category, location, py: py.clone() });
        }
        self.live.insert(id, Live { location, bytes, block, addr, scope: scope.clone(), py, op, phase, category, event, stream });
        self.collect_actions(event);
        Ok(())
    }

    /// A storage's free; like PyTorch's free entries, its event carries the Python stack at
    /// the free.
    pub fn on_free(&mut self, id: u64, scope: &Rc<str>, op: &'static str, phase: Phase, py: PyStack) {
        let Some(live) = self.live.remove(&id) else { return };
        self.stats.allocated -= live.bytes;
        self.stats.num_frees += 1;
        let event = self.events.as_ref().map(|e| e.len());
        if let Some(ev) = &mut self.events {
            ev.push(MemEvent {
                kind: EventKind::Free,
                id,
                addr: live.addr,
                bytes: live.bytes,
                block: live.block,
                time_us: now_us(),
                scope: scope.clone(),
                op,
                phase,
                category: live.category,
                location: live.location,
                py,
            });
        }
        if let Some(a) = &mut self.allocator {
            if live.bytes > 0 {
                a.free(live.addr);
            }
        }
        self.collect_actions(event);
    }

    /// Re-categorise a live storage (its role became known after allocation).
    pub fn set_category(&mut self, id: u64, category: Category) {
        if let Some(l) = self.live.get_mut(&id) {
            l.category = category;
            // The alloc event carries the role the storage ended up with.
            if let (Some(i), Some(ev)) = (l.event, &mut self.events) {
                ev[i].category = category;
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::allocator::{Action, AllocatorConfig};

    fn log(max_entries: Option<usize>) -> MemoryLog {
        let mut l = MemoryLog { allocator: Some(CachingAllocator::new(AllocatorConfig::parse("").unwrap(), 64 << 20)), max_entries, ..Default::default() };
        l.start_recording();
        l
    }

    fn step(l: &mut MemoryLog) -> Result<(), OutOfMemory> {
        let s: Rc<str> = Rc::from("m");
        let loc = std::panic::Location::caller();
        for id in 0..3 {
            l.on_alloc(id, 1 << 20, &s, "empty", Phase::Forward, Category::Temporary, loc)?;
        }
        l.on_free(1, &s, "del", Phase::Forward, None);
        l.on_alloc(9, 100 << 20, &s, "big", Phase::Backward, Category::Gradient, loc)
    }

    #[test]
    fn the_trace_is_a_ring_buffer_and_an_oom_ends_it_with_the_request() {
        let (mut full, mut ring) = (log(None), log(Some(4)));
        assert!(step(&mut full).is_err() && step(&mut ring).is_err());
        let (full, ring) = (full.oom_capture.take().unwrap(), ring.oom_capture.take().unwrap());
        // The ring keeps the newest 4 entries of the full trace, in order.
        assert_eq!(ring.actions.len(), 4);
        assert_eq!(ring.dropped, full.actions.len() - 4);
        assert_eq!(ring.actions[..], full.actions[full.actions.len() - 4..]);
        // It ends in the oom entry, caused by the refused request's event (the last one).
        let (oom, cause) = *ring.actions.last().unwrap();
        assert_eq!(oom.action, Action::Oom);
        assert_eq!(oom.size, 100 << 20);
        let e = &ring.events[cause.unwrap()];
        assert_eq!((e.kind, e.op, e.phase, e.category, e.bytes), (EventKind::Oom, "big", Phase::Backward, Category::Gradient, 100 << 20));
        // Events are whole: 3 allocs, 1 free, the refused request.
        assert_eq!(ring.events.len(), 5);
    }

    /// A storage used on another stream: its `free_completed` comes at a later malloc but is
    /// attributed to its own free event, and every entry carries the storage's stream.
    #[test]
    fn a_pending_free_completes_later_attributed_to_its_free() {
        let mut l = log(None);
        let s: Rc<str> = Rc::from("m");
        let loc = std::panic::Location::caller();
        let side = StreamId(1);
        l.on_alloc_on(side, 0, 1 << 20, &s, "all_gather", Phase::Forward, Category::Parameter, loc, None).unwrap();
        assert_eq!(l.stream_of(0), Some(side));
        l.record_stream(0, StreamId::DEFAULT);
        l.on_free(0, &s, "free", Phase::Forward, None);
        l.synchronize_stream(StreamId::DEFAULT);
        l.on_alloc(1, 1 << 20, &s, "empty", Phase::Forward, Category::Activation, loc).unwrap();
        let rec = l.finish_recording();
        let entries: Vec<(Action, StreamId, Option<usize>)> = rec.actions.iter().map(|(t, c)| (t.action, t.stream, *c)).collect();
        assert_eq!(
            entries,
            vec![
                (Action::SegmentAlloc, side, Some(0)),
                (Action::Alloc, side, Some(0)),
                (Action::FreeRequested, side, Some(1)),
                (Action::FreeCompleted, side, Some(1)),
                (Action::SegmentAlloc, StreamId::DEFAULT, Some(2)),
                (Action::Alloc, StreamId::DEFAULT, Some(2)),
            ]
        );
    }
}
