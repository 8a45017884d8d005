//! A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, native
//! backend), following `shared/docs/formats.md` §4: 512-byte rounding (with optional
//! power-of-two divisions), small (≤ 1 MiB) and large pools, 2 MiB / 20 MiB / 2 MiB-rounded
//! segments, best-fit reuse on one stream, splitting and merging, `max_split_size`,
//! expandable segments (`expandable.rs`), the per-process memory fraction with
//! `garbage_collection_threshold`, `empty_cache`, and the out-of-memory path
//! (release oversize blocks, then the whole cache, then retry once).
//! Every segment and block belongs to a CUDA stream (`streams.rs`): cached blocks serve only
//! requests on their stream, and `record_stream` makes a free wait for the other streams
//! (pending free) until the simulation synchronises them (docs/allocator-streams.md).
//! It turns the engine's requested bytes into the allocated/reserved numbers and the trace
//! a memory snapshot contains.
mod config;
mod expandable;
#[cfg(test)]
mod limit_tests;
mod streams;
#[cfg(test)]
mod streams_tests;
#[cfg(test)]
mod tests;

pub use config::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use streams::FreeBlocks;
pub use streams::StreamId;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pool {
    Small,
    Large,
}

impl Pool {
    fn of(rounded: usize) -> Pool {
        if rounded <= SMALL_SIZE {
            Pool::Small
        } else {
            Pool::Large
        }
    }
    fn idx(self) -> usize {
        self as usize
    }
    #[cfg(test)]
    fn of_segment(seg: &Segment) -> Pool {
        seg.pool
    }
}

#[derive(Clone, Debug)]
pub struct Block {
    pub addr: u64,
    pub size: usize,
    /// Bytes asked for when last handed out (0 when free).
    pub requested: usize,
    pub allocated: bool,
    /// Backed by physical pages; false only for the unmapped ranges of expandable segments.
    pub mapped: bool,
    /// The pool's `get_free_block` call count when the block was last cached (GC age).
    gc_base: u64,
    /// Streams other than the segment's that used the block (`record_stream`), while allocated.
    stream_uses: BTreeSet<StreamId>,
    /// Outstanding end-of-use events of a freed block (`event_count`): it is pending free,
    /// still active, until they complete.
    events: u32,
}

impl Block {
    /// A free (or unmapped) block with no history.
    fn empty(addr: u64, size: usize, mapped: bool) -> Block {
        Block { addr, size, requested: 0, allocated: false, mapped, gc_base: 0, stream_uses: BTreeSet::new(), events: 0 }
    }
    /// Free and reusable: neither handed out nor waiting for other streams.
    pub fn is_free(&self) -> bool {
        !self.allocated && self.events == 0
    }
    /// Freed by its user but waiting for other streams' events (`active_pending_free`).
    pub fn is_pending_free(&self) -> bool {
        !self.allocated && self.events > 0
    }
}

#[derive(Clone, Debug)]
pub struct Segment {
    pub addr: u64,
    /// Bytes of the segment; for an expandable segment its whole virtual range.
    pub size: usize,
    pub pool: Pool,
    /// The stream that allocated it; all its blocks serve that stream only.
    pub stream: StreamId,
    pub expandable: bool,
    /// Blocks in address order (tile the segment).
    pub blocks: BTreeMap<u64, Block>,
}

/// What a snapshot lists as one segment: a cudaMalloc'd segment, or one contiguous mapped
/// range of an expandable segment (formats.md §1.3).
pub struct SegmentView<'a> {
    pub addr: u64,
    pub size: usize,
    pub pool: Pool,
    pub stream: StreamId,
    pub expandable: bool,
    pub blocks: Vec<&'a Block>,
}

/// A trace action of the snapshot format (§1.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Alloc,
    FreeRequested,
    FreeCompleted,
    Oom,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::Oom => "oom",
        }
    }
}

/// One allocator action: `addr` (or `device_free` for OOM) and `size` with §1.5 semantics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trace {
    pub action: Action,
    /// The stream of the block or segment (the requesting stream for `oom`).
    pub stream: StreamId,
    pub addr: u64,
    pub size: usize,
}

/// A PyTorch stat: current and peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stat {
    pub current: usize,
    pub peak: usize,
}

impl Stat {
    fn add(&mut self, n: usize) {
        self.current += n;
        self.peak = self.peak.max(self.current);
    }
    fn sub(&mut self, n: usize) {
        self.current -= n;
    }
    fn reset_peak(&mut self) {
        self.peak = self.current;
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AllocatorStats {
    pub allocated_bytes: Stat,
    pub reserved_bytes: Stat,
    pub active_bytes: Stat,
    pub requested_bytes: Stat,
    pub inactive_split_bytes: Stat,
    pub allocation: Stat,
    /// cudaMalloc'd segments (expandable mappings are not counted, as in PyTorch).
    pub segment: Stat,
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    /// cudaMalloc calls and page mappings.
    pub num_device_alloc: u64,
    /// cudaFree calls and page unmappings.
    pub num_device_free: u64,
}

/// Why an allocation failed, in PyTorch's words.
#[derive(Clone, Debug, PartialEq)]
pub struct OutOfMemory {
    pub requested: usize,
    /// The segment size that could not be obtained (PyTorch's "Tried to allocate").
    pub alloc_size: usize,
    pub capacity: usize,
    pub reserved: usize,
    pub allocated: usize,
}

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = |b: usize| b as f64 / MIB as f64;
        write!(
            f,
            "CUDA out of memory. Tried to allocate {:.2} MiB. GPU capacity {:.2} GiB, of which {:.2} MiB is free. \
             {:.2} MiB is allocated by PyTorch, and {:.2} MiB is reserved by PyTorch but unallocated.",
            m(self.alloc_size),
            self.capacity as f64 / (1u64 << 30) as f64,
            m(self.capacity.saturating_sub(self.reserved)),
            m(self.allocated),
            m(self.reserved - self.allocated)
        )
    }
}

/// The allocator of one device and stream.
#[derive(Clone)]
pub struct CachingAllocator {
    pub config: AllocatorConfig,
    /// Device memory (cudaMemGetInfo's total).
    pub capacity: usize,
    /// `torch.cuda.set_per_process_memory_fraction`: reserved memory may not exceed
    /// this share of `capacity`; it also arms `garbage_collection_threshold`.
    fraction: Option<f64>,
    segments: BTreeMap<u64, Segment>,
    /// Cached (free, mapped) blocks per pool and stream, best fit first: (size, addr).
    free: [FreeBlocks; 2],
    /// Outstanding end-of-use events per using stream, in record order: (block address,
    /// completed). `synchronize_stream` completes them; `process_events` frees their blocks.
    events: BTreeMap<StreamId, VecDeque<(u64, bool)>>,
    /// `get_free_block` calls per pool, counted only while GC is armed (block ages).
    free_block_calls: [u64; 2],
    next_addr: u64,
    pub stats: AllocatorStats,
    trace: Vec<Trace>,
}

/// The most device memory the model represents (2^62 bytes, 4 EiB): a larger capacity is
/// clamped to it and a larger request is an OOM, so no size or sum of sizes can overflow.
pub const MAX_DEVICE_BYTES: usize = 1 << 62;

/// Base of the fake device address space (CUDA pointers look like 0x7f…).
const BASE_ADDR: u64 = 0x7f00_0000_0000;

impl CachingAllocator {
    pub fn new(config: AllocatorConfig, capacity: usize) -> Self {
        CachingAllocator {
            config,
            // Sizes stay below 2^62 so that every sum of them (reserved + a new segment, the
            // stats, the snapshot's int64 fields) is exact.
            capacity: capacity.min(MAX_DEVICE_BYTES),
            fraction: None,
            segments: BTreeMap::new(),
            free: [FreeBlocks::default(), FreeBlocks::default()],
            events: BTreeMap::new(),
            free_block_calls: [0; 2],
            next_addr: BASE_ADDR,
            stats: AllocatorStats::default(),
            trace: Vec::new(),
        }
    }

    /// `torch.cuda.set_per_process_memory_fraction(fraction)`, 0 < fraction ≤ 1.
    pub fn set_memory_fraction(&mut self, fraction: f64) {
        assert!(fraction > 0.0 && fraction <= 1.0, "memory fraction {fraction} outside (0, 1]");
        self.fraction = Some(fraction);
    }

    /// The most the allocator may reserve (`allowed_memory_maximum`).
    pub fn allowed(&self) -> usize {
        self.fraction.map_or(self.capacity, |f| (f * self.capacity as f64) as usize)
    }

    pub fn trace(&self) -> &[Trace] {
        &self.trace
    }
    pub fn take_trace(&mut self) -> Vec<Trace> {
        std::mem::take(&mut self.trace)
    }
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.values()
    }

    /// Segments as `torch.cuda.memory._snapshot()` lists them: one per cudaMalloc'd segment
    /// and one per contiguous mapped range of an expandable segment.
    pub fn snapshot_segments(&self) -> Vec<SegmentView<'_>> {
        let mut out = Vec::new();
        for seg in self.segments.values() {
            let mut run: Option<SegmentView> = None;
            for b in seg.blocks.values() {
                if !b.mapped {
                    out.extend(run.take());
                    continue;
                }
                let v = run.get_or_insert_with(|| SegmentView { addr: b.addr, size: 0, pool: seg.pool, stream: seg.stream, expandable: seg.expandable, blocks: Vec::new() });
                v.size += b.size;
                v.blocks.push(b);
            }
            out.extend(run);
        }
        out
    }

    pub fn reset_peak(&mut self) {
        let s = &mut self.stats;
        for st in [&mut s.allocated_bytes, &mut s.reserved_bytes, &mut s.active_bytes, &mut s.requested_bytes, &mut s.inactive_split_bytes, &mut s.allocation, &mut s.segment] {
            st.reset_peak();
        }
    }

    fn segment_of(&self, addr: u64) -> u64 {
        *self.segments.range(..=addr).next_back().expect("address inside a segment").0
    }
    fn block(&self, addr: u64) -> &Block {
        &self.segments[&self.segment_of(addr)].blocks[&addr]
    }
    fn stream_at(&self, addr: u64) -> StreamId {
        self.segments[&self.segment_of(addr)].stream
    }
    fn push(&mut self, action: Action, stream: StreamId, addr: u64, size: usize) {
        self.trace.push(Trace { action, stream, addr, size });
    }
    /// Put a free block back in its pool's cache (`insert_into_blocks`: its GC age restarts).
    fn cache_block(&mut self, pool: Pool, addr: u64, size: usize) {
        let calls = self.free_block_calls[pool.idx()];
        let seg = self.segments.get_mut(&self.segment_of(addr)).unwrap();
        seg.blocks.get_mut(&addr).unwrap().gc_base = calls;
        let stream = seg.stream;
        self.free[pool.idx()].insert(stream, size, addr);
    }
    /// Take a block out of its pool's cache.
    fn uncache_block(&mut self, pool: Pool, size: usize, addr: u64) {
        let stream = self.stream_at(addr);
        self.free[pool.idx()].remove(stream, size, addr);
    }
    fn gc_armed(&self) -> bool {
        self.fraction.is_some() && self.config.garbage_collection_threshold.is_some()
    }

    /// Contribution of a segment to `inactive_split_bytes` (expandable memory excluded).
    fn inactive_split(seg: &Segment) -> usize {
        if seg.expandable || seg.blocks.len() <= 1 {
            0
        } else {
            seg.blocks.values().filter(|b| b.is_free()).map(|b| b.size).sum()
        }
    }
    fn update_inactive(&mut self, seg_addr: u64, before: usize) {
        let after = self.segments.get(&seg_addr).map_or(0, Self::inactive_split);
        if after > before {
            self.stats.inactive_split_bytes.add(after - before);
        } else {
            self.stats.inactive_split_bytes.sub(before - after);
        }
    }

    /// `get_free_block` (§4.4): best fit on the pool among the blocks of the requesting
    /// stream; a block of an expandable segment ranks by the size it could grow to;
    /// oversize rules apply.
    fn get_free_block(&mut self, pool: Pool, stream: StreamId, size: usize) -> Option<(usize, u64)> {
        if self.gc_armed() {
            self.free_block_calls[pool.idx()] += 1;
        }
        let mut it = self.free[pool.idx()].of(stream)?.range((size, 0)..);
        let mut pick = *it.next()?;
        if self.segments[&self.segment_of(pick.1)].expandable {
            let growable = |a: &Self, (bsize, addr): (usize, u64)| {
                let seg = &a.segments[&a.segment_of(addr)];
                bsize + seg.blocks.range(addr + 1..).next().filter(|(_, n)| !n.mapped).map_or(0, |(_, n)| n.size)
            };
            for &next in it {
                if growable(self, next) < growable(self, pick) {
                    pick = next;
                } else {
                    break;
                }
            }
        }
        let bsize = pick.0;
        if let Some(max_split) = self.config.max_split_size {
            if size < max_split && bsize >= max_split {
                return None;
            }
            if size >= max_split && bsize >= size + self.config.max_non_split_rounding {
                return None;
            }
        }
        self.free[pool.idx()].remove(stream, pick.0, pick.1);
        Some(pick)
    }

    fn should_split(&self, pool: Pool, block_size: usize, size: usize) -> bool {
        let remaining = block_size - size;
        if pool == Pool::Small || self.config.expandable_segments {
            remaining >= MIN_BLOCK
        } else {
            self.config.max_split_size.is_none_or(|m| size < m) && remaining > SMALL_SIZE
        }
    }

    /// Hand out a block for `requested` bytes on the default stream: its address, or the
    /// OOM PyTorch would raise.
    pub fn malloc(&mut self, requested: usize) -> Result<u64, OutOfMemory> {
        self.malloc_block(requested).map(|(addr, _)| addr)
    }

    /// Like `malloc`, also returning the block size counted in `allocated_bytes`.
    pub fn malloc_block(&mut self, requested: usize) -> Result<(u64, usize), OutOfMemory> {
        self.malloc_block_on(requested, StreamId::DEFAULT)
    }

    /// `malloc` on `stream`: the block is safe to use there (and, without `record_stream`,
    /// only there); returns the address and the block size counted in `allocated_bytes`.
    pub fn malloc_block_on(&mut self, requested: usize, stream: StreamId) -> Result<(u64, usize), OutOfMemory> {
        // `malloc` first returns the blocks whose cross-stream events completed.
        self.process_events();
        if requested > MAX_DEVICE_BYTES {
            // Beyond every capacity the model represents (and rounding it could overflow):
            // refused before any cache is touched. Runs never ask this much (their shapes are
            // checked up front); the allocator stays exact for any caller.
            return Err(self.out_of_memory(requested, requested, stream));
        }
        let size = round_size(requested, &self.config.roundup_power2_divisions);
        let pool = Pool::of(size);
        let found = match self.get_free_block(pool, stream, size) {
            Some(found) => Some(found),
            None => {
                if self.gc_armed() {
                    self.garbage_collect();
                }
                // §4.7: new memory; else release oversize cached blocks and retry; else
                // release the whole cache and retry once.
                let mut found = self.alloc_block(pool, stream, size, false);
                if found.is_none() && self.release_available(pool, stream, size) {
                    found = self.alloc_block(pool, stream, size, false);
                }
                if found.is_none() {
                    // `release_cached_blocks`: synchronise every stream, then flush.
                    self.empty_cache();
                    found = self.alloc_block(pool, stream, size, true);
                }
                found
            }
        };
        let Some((bsize, addr)) = found else {
            return Err(self.out_of_memory(requested, size, stream));
        };
        let seg_addr = self.segment_of(addr);
        let before = Self::inactive_split(&self.segments[&seg_addr]);
        let split = self.should_split(pool, bsize, size);
        let given = if split {
            let rest = Block::empty(addr + size as u64, bsize - size, true);
            self.segments.get_mut(&seg_addr).unwrap().blocks.insert(rest.addr, rest);
            self.cache_block(pool, addr + size as u64, bsize - size);
            size
        } else {
            bsize
        };
        let b = self.segments.get_mut(&seg_addr).unwrap().blocks.get_mut(&addr).unwrap();
        b.size = given;
        b.requested = requested;
        b.allocated = true;
        self.update_inactive(seg_addr, before);
        self.stats.allocated_bytes.add(given);
        self.stats.active_bytes.add(given);
        self.stats.requested_bytes.add(requested);
        self.stats.allocation.add(1);
        self.push(Action::Alloc, stream, addr, requested);
        Ok((addr, given))
    }

    /// Count and trace a refused request of `size` rounded bytes.
    fn out_of_memory(&mut self, requested: usize, size: usize, stream: StreamId) -> OutOfMemory {
        self.stats.num_ooms += 1;
        let device_free = self.capacity.saturating_sub(self.stats.reserved_bytes.current);
        self.push(Action::Oom, stream, device_free as u64, size);
        OutOfMemory {
            requested,
            alloc_size: if size > self.capacity { size } else { allocation_size(size) },
            capacity: self.capacity,
            reserved: self.stats.reserved_bytes.current,
            allocated: self.stats.allocated_bytes.current,
        }
    }

    /// `alloc_block`: new device memory for a rounded request (a cudaMalloc'd segment, or
    /// pages mapped into an expandable segment), taken out of the cache; None when the
    /// device or the memory fraction has no room. The new memory belongs to `stream`.
    fn alloc_block(&mut self, pool: Pool, stream: StreamId, size: usize, retry: bool) -> Option<(usize, u64)> {
        if retry {
            self.stats.num_alloc_retries += 1;
        }
        let alloc_size = allocation_size(size);
        if self.fraction.is_some() && self.stats.reserved_bytes.current + alloc_size > self.allowed() {
            return None;
        }
        if self.config.expandable_segments {
            return self.try_allocate_expandable(pool, stream, size);
        }
        if self.stats.reserved_bytes.current + alloc_size > self.capacity {
            return None;
        }
        let addr = self.address_range(alloc_size);
        let mut blocks = BTreeMap::new();
        blocks.insert(addr, Block::empty(addr, alloc_size, true));
        self.segments.insert(addr, Segment { addr, size: alloc_size, pool, stream, expandable: false, blocks });
        self.stats.reserved_bytes.add(alloc_size);
        self.stats.segment.add(1);
        self.stats.num_device_alloc += 1;
        self.push(Action::SegmentAlloc, stream, addr, alloc_size);
        Some((alloc_size, addr))
    }

    /// A fresh device address range for `len` bytes: 2 MiB aligned with a 2 MiB gap, like
    /// cudaMalloc's, above every earlier one. Addresses stay below 2^63 (the snapshot stores
    /// them as int64): when the next range would cross it (only after exabytes of segments
    /// came and went), the lowest free gap between live segments is used instead; one
    /// exists because live segments total at most the 2^62-byte capacity.
    pub(super) fn address_range(&mut self, len: usize) -> u64 {
        let span = (len.div_ceil(ROUND_LARGE) * ROUND_LARGE + ROUND_LARGE) as u64;
        if let Some(end) = self.next_addr.checked_add(span).filter(|&e| e <= i64::MAX as u64) {
            let addr = self.next_addr;
            self.next_addr = end;
            return addr;
        }
        let mut at = BASE_ADDR;
        for seg in self.segments.values() {
            if seg.addr >= at + span {
                break;
            }
            let seg_end = seg.addr + (seg.size.div_ceil(ROUND_LARGE) * ROUND_LARGE + ROUND_LARGE) as u64;
            at = at.max(seg_end);
        }
        assert!(at.checked_add(span).is_some_and(|e| e <= i64::MAX as u64), "no device address range of {len} bytes below 2^63");
        at
    }

    /// `release_block`: cudaFree a cached segment that is one free block.
    fn release_segment(&mut self, addr: u64) {
        let seg = self.segments.remove(&addr).unwrap();
        debug_assert!(seg.blocks.len() == 1 && !seg.expandable);
        self.free[seg.pool.idx()].remove(seg.stream, seg.size, addr);
        self.stats.reserved_bytes.sub(seg.size);
        self.stats.segment.sub(1);
        self.stats.num_device_free += 1;
        self.push(Action::SegmentFree, seg.stream, addr, seg.size);
    }
    fn is_whole_free_segment(&self, addr: u64) -> bool {
        let seg = &self.segments[&self.segment_of(addr)];
        !seg.expandable && seg.blocks.len() == 1
    }

    /// `release_available_cached_blocks` (§4.7 5b, only with max_split_size): free the
    /// smallest cached oversize segment of the requesting stream that covers the request,
    /// else that stream's oversize ones from the largest down until enough is freed. True
    /// when it freed enough.
    fn release_available(&mut self, pool: Pool, stream: StreamId, size: usize) -> bool {
        let Some(max_split) = self.config.max_split_size else { return false };
        let Some(cached) = self.free[pool.idx()].of(stream) else { return false };
        let key = size.max(max_split);
        let hit = cached.range((key, 0)..).next().copied();
        let largest: Vec<(usize, u64)> = cached.iter().rev().copied().collect();
        if let Some((_, addr)) = hit.filter(|&(_, a)| self.is_whole_free_segment(a)) {
            self.release_segment(addr);
            return true;
        }
        let mut released = 0;
        for (bsize, addr) in largest {
            if released >= key || bsize < max_split {
                break;
            }
            if self.is_whole_free_segment(addr) {
                self.release_segment(addr);
                released += bsize;
            }
        }
        released >= key
    }

    /// `garbage_collect_cached_blocks` (§4.7 step 3): when reserved memory is above
    /// `garbage_collection_threshold` × the allowed memory, cudaFree whole cached large
    /// segments whose age (get_free_block calls since they were cached) is at least the
    /// average, repeating until enough is reclaimed or nothing more can be freed.
    fn garbage_collect(&mut self) {
        let Some(threshold) = self.config.garbage_collection_threshold else { return };
        let gc_threshold = (threshold * self.allowed() as f64) as usize;
        let reserved = self.stats.reserved_bytes.current;
        if reserved <= gc_threshold {
            return;
        }
        let target = reserved - gc_threshold;
        let calls = self.free_block_calls[Pool::Large.idx()];
        let age = |a: &Self, addr: u64| calls - a.block(addr).gc_base;
        let unsplit = |a: &Self, addr: u64| a.segments[&a.segment_of(addr)].blocks.len() == 1;
        let (mut total_age, mut count) = (0u64, 0u64);
        for (_, _, addr) in self.free[Pool::Large.idx()].all() {
            if unsplit(self, addr) {
                total_age += age(self, addr);
                count += 1;
            }
        }
        let (mut reclaimed, mut freed_any) = (0usize, true);
        while reclaimed < target && freed_any && count > 0 {
            let age_threshold = total_age as f64 / count as f64;
            freed_any = false;
            let cached: Vec<(StreamId, usize, u64)> = self.free[Pool::Large.idx()].all().collect();
            for (_, bsize, addr) in cached {
                if self.is_whole_free_segment(addr) && age(self, addr) as f64 >= age_threshold {
                    freed_any = true;
                    reclaimed += bsize;
                    total_age -= age(self, addr);
                    count -= 1;
                    self.release_segment(addr);
                }
            }
        }
    }

    /// `torch.cuda.empty_cache()` (and the OOM path's `release_cached_blocks`): synchronise
    /// every stream and free the pending blocks (`synchronize_and_free_events`), then cudaFree
    /// every cached segment that is one free block and unmap the whole free pages of
    /// expandable segments, large pool first, every stream. Returns the bytes released.
    pub fn empty_cache(&mut self) -> usize {
        self.synchronize_and_free_events();
        let before = self.stats.reserved_bytes.current;
        for pool in [Pool::Large, Pool::Small] {
            let cached: Vec<(StreamId, usize, u64)> = self.free[pool.idx()].all().collect();
            let mut to_unmap = Vec::new();
            for (_, _, addr) in cached {
                if self.segments[&self.segment_of(addr)].expandable {
                    to_unmap.push(addr);
                } else if self.is_whole_free_segment(addr) {
                    self.release_segment(self.segment_of(addr));
                }
            }
            for addr in to_unmap {
                self.unmap_block(pool, addr);
            }
        }
        before - self.stats.reserved_bytes.current
    }

    /// Return a block: `free_requested`; then, unless other streams used it
    /// (`record_stream`), `free_completed` with neighbour merging. A block other streams
    /// used gets one event per such stream (`insert_events`) and stays active, pending
    /// free, until they complete.
    pub fn free(&mut self, addr: u64) {
        let seg_addr = self.segment_of(addr);
        let seg = self.segments.get_mut(&seg_addr).unwrap();
        let stream = seg.stream;
        let b = seg.blocks.get_mut(&addr).expect("freeing a live block");
        assert!(b.allocated, "double free at {addr:#x}");
        let (size, requested) = (b.size, b.requested);
        b.allocated = false;
        let uses = std::mem::take(&mut b.stream_uses);
        b.events = uses.len() as u32;
        self.stats.allocated_bytes.sub(size);
        self.stats.allocation.sub(1);
        self.push(Action::FreeRequested, stream, addr, requested);
        if uses.is_empty() {
            self.free_block(addr);
        } else {
            for s in uses {
                self.events.entry(s).or_default().push_back((addr, false));
            }
        }
    }

    /// `free_block`: a freed block with no outstanding events goes back to the cache:
    /// `free_completed`, merged with free neighbours; active and requested bytes drop.
    fn free_block(&mut self, addr: u64) {
        let seg_addr = self.segment_of(addr);
        let seg = self.segments.get_mut(&seg_addr).unwrap();
        let (pool, stream) = (seg.pool, seg.stream);
        let b = seg.blocks.get_mut(&addr).unwrap();
        debug_assert!(b.is_free());
        let (size, requested) = (b.size, b.requested);
        b.requested = 0;
        // Split-inactive bytes as they were before this block became free.
        let seg = &self.segments[&seg_addr];
        let counted = !seg.expandable && seg.blocks.len() > 1;
        let before = Self::inactive_split(seg) - if counted { size } else { 0 };
        let (start, total) = self.merge_free_neighbours(pool, seg_addr, addr);
        self.cache_block(pool, start, total);
        self.stats.active_bytes.sub(size);
        self.stats.requested_bytes.sub(requested);
        self.update_inactive(seg_addr, before);
        self.push(Action::FreeCompleted, stream, addr, requested);
    }

    /// `try_merge_blocks` with both neighbours of the block at `addr`: absorb each one that is
    /// free and has the same mapped-ness (taking cached ones out of the cache). Returns the
    /// merged block's start and size.
    fn merge_free_neighbours(&mut self, pool: Pool, seg_addr: u64, addr: u64) -> (u64, usize) {
        let seg = self.segments.get_mut(&seg_addr).unwrap();
        let mapped = seg.blocks[&addr].mapped;
        let mut start = addr;
        let mut total = seg.blocks[&addr].size;
        let stream = seg.stream;
        if let Some((&pa, p)) = seg.blocks.range(..addr).next_back() {
            if p.is_free() && p.mapped == mapped {
                if mapped {
                    self.free[pool.idx()].remove(stream, p.size, pa);
                }
                start = pa;
                total += p.size;
            }
        }
        if let Some((&na, n)) = seg.blocks.range(addr + 1..).next() {
            if n.is_free() && n.mapped == mapped {
                if mapped {
                    self.free[pool.idx()].remove(stream, n.size, na);
                }
                total += n.size;
                seg.blocks.remove(&na);
            }
        }
        if start != addr {
            seg.blocks.remove(&addr);
        }
        seg.blocks.get_mut(&start).unwrap().size = total;
        (start, total)
    }
}
