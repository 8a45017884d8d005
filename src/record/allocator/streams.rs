//! CUDA streams in the allocator model (docs/allocator-streams.md): the per-stream cache of
//! free blocks, `record_stream`, and when a pending free completes. A deterministic
//! simulation has no GPU clock, so an event recorded on stream S completes when the program
//! says S has caught up (`synchronize_stream(S)`, `synchronize()`, or the sync every
//! `empty_cache` and the OOM path perform); as in PyTorch, the allocator only notices at its
//! next `malloc` (`process_events`) or at that sync (`synchronize_and_free_events`).
use super::CachingAllocator;
use std::collections::{BTreeMap, BTreeSet};

/// A CUDA stream of one device: 0 is the default stream; other numbers are side streams
/// (FSDP2's all-gather and reduce-scatter streams, a user's `torch.cuda.Stream()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct StreamId(pub u32);

impl StreamId {
    pub const DEFAULT: StreamId = StreamId(0);
    pub fn is_default(&self) -> bool {
        *self == StreamId::DEFAULT
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream {}", self.0)
    }
}

/// The cached blocks of one pool, per stream (PyTorch orders a pool's set by stream, then
/// size, then address, and only looks inside the requesting stream's range): (size, addr).
#[derive(Clone, Debug, Default)]
pub(super) struct FreeBlocks(BTreeMap<StreamId, BTreeSet<(usize, u64)>>);

impl FreeBlocks {
    pub fn insert(&mut self, stream: StreamId, size: usize, addr: u64) {
        self.0.entry(stream).or_default().insert((size, addr));
    }
    pub fn remove(&mut self, stream: StreamId, size: usize, addr: u64) -> bool {
        self.0.get_mut(&stream).is_some_and(|s| s.remove(&(size, addr)))
    }
    /// The blocks of one stream, best fit first.
    pub fn of(&self, stream: StreamId) -> Option<&BTreeSet<(usize, u64)>> {
        self.0.get(&stream)
    }
    /// Every cached block in PyTorch's pool order: stream, size, address.
    pub fn all(&self) -> impl Iterator<Item = (StreamId, usize, u64)> + '_ {
        self.0.iter().flat_map(|(&s, set)| set.iter().map(move |&(size, addr)| (s, size, addr)))
    }
    /// Whether a block of this size and address is cached, on any stream.
    #[cfg(test)]
    pub fn contains(&self, key: &(usize, u64)) -> bool {
        self.0.values().any(|s| s.contains(key))
    }
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeSet::len).sum()
    }
}

impl CachingAllocator {
    /// `recordStream`: the allocated block at `addr` is used on `stream` too, so its memory
    /// may not be reused until `stream`'s work queued so far completes. Uses on the block's
    /// own stream are ignored.
    pub fn record_stream(&mut self, addr: u64, stream: StreamId) {
        let seg = self.segments.get_mut(&self.segment_of(addr)).unwrap();
        let own = seg.stream;
        let b = seg.blocks.get_mut(&addr).expect("record_stream on a live block");
        assert!(b.allocated, "record_stream on a freed block at {addr:#x}");
        if stream != own {
            b.stream_uses.insert(stream);
        }
    }

    /// `stream` has caught up (`torch.cuda.current_stream().synchronize()` on it, or a
    /// `wait_stream` on it the program performs): every event recorded on it so far is
    /// complete. Their blocks return to the cache at the next `malloc`, as in PyTorch.
    pub fn synchronize_stream(&mut self, stream: StreamId) {
        if let Some(q) = self.events.get_mut(&stream) {
            for e in q.iter_mut() {
                e.1 = true;
            }
        }
    }

    /// `torch.cuda.synchronize()`: every stream has caught up.
    pub fn synchronize(&mut self) {
        for q in self.events.values_mut() {
            for e in q.iter_mut() {
                e.1 = true;
            }
        }
    }

    /// `process_events` (start of `malloc`): per stream, in record order, pop the completed
    /// events up to the first incomplete one; a block whose last event completes is freed.
    pub(super) fn process_events(&mut self) {
        if self.events.is_empty() {
            return;
        }
        let streams: Vec<_> = self.events.keys().copied().collect();
        for s in streams {
            while let Some(&(addr, true)) = self.events[&s].front() {
                self.events.get_mut(&s).unwrap().pop_front();
                self.complete_event(addr);
            }
            if self.events[&s].is_empty() {
                self.events.remove(&s);
            }
        }
    }

    /// `synchronize_and_free_events` (`empty_cache` and the OOM path): wait for every
    /// outstanding event, stream by stream, and free their blocks.
    pub(super) fn synchronize_and_free_events(&mut self) {
        for (_, q) in std::mem::take(&mut self.events) {
            for (addr, _) in q {
                self.complete_event(addr);
            }
        }
    }

    fn complete_event(&mut self, addr: u64) {
        let seg = self.segments.get_mut(&self.segment_of(addr)).unwrap();
        let b = seg.blocks.get_mut(&addr).unwrap();
        b.events -= 1;
        if b.events == 0 {
            self.free_block(addr);
        }
    }

    /// Outstanding events (each a freed block waiting for one stream).
    pub fn outstanding_events(&self) -> usize {
        self.events.values().map(|q| q.len()).sum()
    }
}
