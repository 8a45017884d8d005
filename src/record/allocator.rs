//! A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, native
//! backend), following `shared/docs/formats.md` §4: 512-byte rounding (with optional
//! power-of-two divisions), small (≤ 1 MiB) and large pools, 2 MiB / 20 MiB / 2 MiB-rounded
//! segments, best-fit reuse on one stream, splitting and merging, `max_split_size`,
//! `empty_cache`, and the free-the-cache-and-retry path before an out-of-memory error.
//! It turns the engine's requested bytes into the allocated/reserved numbers and the trace
//! a memory snapshot contains. (Expandable segments are not modelled yet.)
use std::collections::{BTreeMap, BTreeSet};

pub const MIN_BLOCK: usize = 512;
pub const SMALL_SIZE: usize = 1 << 20;
pub const SMALL_BUFFER: usize = 2 << 20;
pub const LARGE_BUFFER: usize = 20 << 20;
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
pub const ROUND_LARGE: usize = 2 << 20;
const MIB: usize = 1 << 20;

/// `PYTORCH_CUDA_ALLOC_CONF` settings the model honours.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorConfig {
    /// Blocks at least this large are never split (None = unlimited).
    pub max_split_size: Option<usize>,
    pub max_non_split_rounding: usize,
    /// Divisions per power-of-two interval [1 MiB·2^i, 1 MiB·2^(i+1)), i = 0..16.
    pub roundup_power2_divisions: [usize; 16],
    pub garbage_collection_threshold: Option<f64>,
    pub expandable_segments: bool,
    /// The string it was parsed from.
    pub raw: String,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: None,
            max_non_split_rounding: LARGE_BUFFER,
            roundup_power2_divisions: [0; 16],
            garbage_collection_threshold: None,
            expandable_segments: false,
            raw: String::new(),
        }
    }
}

impl AllocatorConfig {
    /// Parse a `PYTORCH_CUDA_ALLOC_CONF` string (`key:value,key2:[a:b,>:c]`).
    pub fn parse(s: &str) -> Result<AllocatorConfig, String> {
        let mut c = AllocatorConfig { raw: s.to_string(), ..Default::default() };
        let mut rest = s.trim();
        while !rest.is_empty() {
            let (key, after) = rest.split_once(':').ok_or_else(|| format!("'{rest}': expected key:value"))?;
            let key = key.trim();
            let (value, next) = if after.trim_start().starts_with('[') {
                let end = after.find(']').ok_or_else(|| format!("{key}: unclosed '['"))?;
                (&after[..=end], after[end + 1..].trim_start_matches([',', ' ']))
            } else {
                match after.split_once(',') {
                    Some((v, n)) => (v, n),
                    None => (after, ""),
                }
            };
            let value = value.trim();
            let mib_value = |v: &str| -> Result<usize, String> { v.parse::<usize>().map_err(|_| format!("{key}: '{v}' is not a whole number of MiB")) };
            match key {
                "max_split_size_mb" => {
                    let v = mib_value(value)?;
                    if v <= LARGE_BUFFER / MIB {
                        return Err(format!("max_split_size_mb: {v} must be larger than {} MiB", LARGE_BUFFER / MIB));
                    }
                    c.max_split_size = Some(v * MIB);
                }
                "max_non_split_rounding_mb" => {
                    let v = mib_value(value)?;
                    if v < LARGE_BUFFER / MIB {
                        return Err(format!("max_non_split_rounding_mb: {v} must be at least {} MiB", LARGE_BUFFER / MIB));
                    }
                    c.max_non_split_rounding = v * MIB;
                }
                "roundup_power2_divisions" => c.roundup_power2_divisions = parse_divisions(value)?,
                "garbage_collection_threshold" => {
                    let v: f64 = value.parse().map_err(|_| format!("garbage_collection_threshold: '{value}' is not a number"))?;
                    if !(v > 0.0 && v < 1.0) {
                        return Err(format!("garbage_collection_threshold: {v} must be in (0, 1)"));
                    }
                    c.garbage_collection_threshold = Some(v);
                }
                "expandable_segments" => {
                    c.expandable_segments = match value {
                        "True" | "true" => true,
                        "False" | "false" => false,
                        v => return Err(format!("expandable_segments: '{v}' (expected True or False)")),
                    };
                    if c.expandable_segments {
                        return Err("expandable_segments:True is not modelled yet".into());
                    }
                }
                "backend" => {
                    if value != "native" {
                        return Err(format!("backend: '{value}': only the native caching allocator is modelled"));
                    }
                }
                "release_lock_on_cudamalloc" | "pinned_use_cuda_host_register" | "pinned_num_register_threads" | "pinned_use_background_threads" => {}
                k => return Err(format!("unknown setting '{k}'")),
            }
            rest = next.trim();
        }
        Ok(c)
    }
}

fn parse_divisions(v: &str) -> Result<[usize; 16], String> {
    let check = |d: usize| -> Result<usize, String> {
        if d == 0 || d.is_power_of_two() {
            Ok(d)
        } else {
            Err(format!("roundup_power2_divisions: {d} is not 0 or a power of two"))
        }
    };
    let mut out = [0usize; 16];
    if !v.starts_with('[') {
        let d = check(v.parse().map_err(|_| format!("roundup_power2_divisions: '{v}' is not a number"))?)?;
        return Ok([d; 16]);
    }
    let inner = v.trim_start_matches('[').trim_end_matches(']');
    let mut last: Option<usize> = None;
    let mut first = true;
    for item in inner.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, d) = item.split_once(':').ok_or_else(|| format!("roundup_power2_divisions: '{item}' (expected SIZE_MB:DIVISIONS)"))?;
        let d = check(d.trim().parse().map_err(|_| format!("roundup_power2_divisions: '{d}' is not a number"))?)?;
        if k.trim() == ">" {
            let from = last.map_or(0, |l| l + 1);
            for slot in out.iter_mut().skip(from) {
                *slot = d;
            }
            continue;
        }
        let mb: usize = k.trim().parse().map_err(|_| format!("roundup_power2_divisions: '{k}' is not a size in MiB"))?;
        if !mb.is_power_of_two() {
            return Err(format!("roundup_power2_divisions: {mb} MiB is not a power of two"));
        }
        let idx = (mb.trailing_zeros() as usize).min(15);
        if first {
            for slot in out.iter_mut().take(idx) {
                *slot = d;
            }
            first = false;
        }
        out[idx] = d;
        last = Some(idx);
    }
    Ok(out)
}

/// `round_size` (§4.2).
pub fn round_size(size: usize, divisions: &[usize; 16]) -> usize {
    if size < MIN_BLOCK {
        return MIN_BLOCK;
    }
    let log2 = usize::BITS as usize - 1 - size.leading_zeros() as usize;
    let idx = log2.saturating_sub(20).min(15);
    let div = divisions[idx];
    if div > 1 && size > MIN_BLOCK * div {
        if size.is_power_of_two() {
            return size;
        }
        let step = (1usize << log2) / div;
        return size.div_ceil(step) * step;
    }
    size.div_ceil(MIN_BLOCK) * MIN_BLOCK
}

/// cudaMalloc size for a rounded request (§4.3).
pub fn allocation_size(size: usize) -> usize {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pool {
    Small,
    Large,
}

#[derive(Clone, Debug)]
pub struct Block {
    pub addr: u64,
    pub size: usize,
    /// Bytes asked for when last handed out (0 when free).
    pub requested: usize,
    pub allocated: bool,
    pub segment: u64,
}

#[derive(Clone, Debug)]
pub struct Segment {
    pub addr: u64,
    pub size: usize,
    pub pool: Pool,
    /// Blocks in address order (tile the segment).
    pub blocks: BTreeMap<u64, Block>,
}

/// A trace action of the snapshot format (§1.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    SegmentAlloc,
    SegmentFree,
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
    pub segment: Stat,
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
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
    /// Device memory the allocator may reserve.
    pub capacity: usize,
    segments: BTreeMap<u64, Segment>,
    /// Free blocks per pool, best fit first: (size, addr).
    free: BTreeMap<Pool, BTreeSet<(usize, u64)>>,
    next_addr: u64,
    pub stats: AllocatorStats,
    trace: Vec<Trace>,
}

/// Base of the fake device address space (CUDA pointers look like 0x7f…).
const BASE_ADDR: u64 = 0x7f00_0000_0000;

impl CachingAllocator {
    pub fn new(config: AllocatorConfig, capacity: usize) -> Self {
        let mut free = BTreeMap::new();
        free.insert(Pool::Small, BTreeSet::new());
        free.insert(Pool::Large, BTreeSet::new());
        CachingAllocator { config, capacity, segments: BTreeMap::new(), free, next_addr: BASE_ADDR, stats: AllocatorStats::default(), trace: Vec::new() }
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
    pub fn reset_peak(&mut self) {
        let s = &mut self.stats;
        for st in [&mut s.allocated_bytes, &mut s.reserved_bytes, &mut s.active_bytes, &mut s.requested_bytes, &mut s.inactive_split_bytes, &mut s.allocation, &mut s.segment] {
            st.reset_peak();
        }
    }

    fn is_split(seg: &Segment) -> bool {
        seg.blocks.len() > 1
    }
    fn free_bytes(seg: &Segment) -> usize {
        seg.blocks.values().filter(|b| !b.allocated).map(|b| b.size).sum()
    }
    /// Contribution of a segment to `inactive_split_bytes`.
    fn inactive_split(seg: &Segment) -> usize {
        if Self::is_split(seg) {
            Self::free_bytes(seg)
        } else {
            0
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

    /// Best-fit cached block for a rounded request, honouring the oversize rules (§4.4).
    fn find_free(&self, pool: Pool, size: usize) -> Option<(usize, u64)> {
        let &(bsize, addr) = self.free[&pool].range((size, 0)..).next()?;
        if let Some(max_split) = self.config.max_split_size {
            if size < max_split && bsize >= max_split {
                return None;
            }
            if size >= max_split && bsize >= size + self.config.max_non_split_rounding {
                return None;
            }
        }
        Some((bsize, addr))
    }

    fn should_split(&self, pool: Pool, block_size: usize, size: usize) -> bool {
        let remaining = block_size - size;
        match pool {
            Pool::Small => remaining >= MIN_BLOCK,
            Pool::Large => self.config.max_split_size.is_none_or(|m| size < m) && remaining > SMALL_SIZE,
        }
    }

    /// Release every cached segment that holds no live block (`empty_cache`, and the OOM
    /// retry path). Returns the bytes released.
    pub fn empty_cache(&mut self) -> usize {
        let releasable: Vec<u64> = self.segments.values().filter(|s| s.blocks.len() == 1 && !s.blocks.values().next().unwrap().allocated).map(|s| s.addr).collect();
        let mut released = 0;
        for addr in releasable {
            let seg = self.segments.remove(&addr).unwrap();
            self.free.get_mut(&seg.pool).unwrap().remove(&(seg.size, addr));
            self.stats.reserved_bytes.sub(seg.size);
            self.stats.segment.sub(1);
            self.trace.push(Trace { action: Action::SegmentFree, addr, size: seg.size });
            released += seg.size;
        }
        released
    }

    /// `release_available_cached_blocks`: free the smallest whole oversize cached segment that
    /// covers `size`, else oversize ones from the largest down until `size` bytes are freed.
    fn release_oversize(&mut self, size: usize) {
        let Some(max_split) = self.config.max_split_size else { return };
        let mut cands: Vec<(usize, u64)> = self
            .segments
            .values()
            .filter(|s| s.blocks.len() == 1 && !s.blocks.values().next().unwrap().allocated && s.size >= max_split)
            .map(|s| (s.size, s.addr))
            .collect();
        cands.sort();
        let pick: Vec<(usize, u64)> = match cands.iter().find(|(sz, _)| *sz >= size) {
            Some(&c) => vec![c],
            None => {
                let mut freed = 0;
                cands.iter().rev().take_while(|(sz, _)| {
                    let go = freed < size;
                    freed += sz;
                    go
                }).copied().collect()
            }
        };
        for (sz, addr) in pick {
            let seg = self.segments.remove(&addr).unwrap();
            self.free.get_mut(&seg.pool).unwrap().remove(&(sz, addr));
            self.stats.reserved_bytes.sub(sz);
            self.stats.segment.sub(1);
            self.trace.push(Trace { action: Action::SegmentFree, addr, size: sz });
        }
    }

    /// Hand out a block for `requested` bytes: its address, or the OOM PyTorch would raise.
    pub fn malloc(&mut self, requested: usize) -> Result<u64, OutOfMemory> {
        self.malloc_block(requested).map(|(addr, _)| addr)
    }

    /// Like `malloc`, also returning the block size counted in `allocated_bytes`.
    pub fn malloc_block(&mut self, requested: usize) -> Result<(u64, usize), OutOfMemory> {
        let size = round_size(requested, &self.config.roundup_power2_divisions);
        let pool = if size <= SMALL_SIZE { Pool::Small } else { Pool::Large };
        let (bsize, addr) = match self.find_free(pool, size) {
            Some(found) => found,
            None => {
                let alloc_size = allocation_size(size);
                if self.stats.reserved_bytes.current + alloc_size > self.capacity && self.config.max_split_size.is_some() {
                    // §4.7 step 5b: release oversize cached blocks first.
                    self.release_oversize(alloc_size);
                }
                if self.stats.reserved_bytes.current + alloc_size > self.capacity {
                    // Free the cache and retry once (§4.7 step 5c).
                    self.empty_cache();
                    self.stats.num_alloc_retries += 1;
                    if let Some(found) = self.find_free(pool, size) {
                        found
                    } else if self.stats.reserved_bytes.current + alloc_size > self.capacity {
                        self.stats.num_ooms += 1;
                        let device_free = self.capacity - self.stats.reserved_bytes.current;
                        self.trace.push(Trace { action: Action::Oom, addr: device_free as u64, size: alloc_size });
                        return Err(OutOfMemory {
                            requested,
                            alloc_size,
                            capacity: self.capacity,
                            reserved: self.stats.reserved_bytes.current,
                            allocated: self.stats.allocated_bytes.current,
                        });
                    } else {
                        self.new_segment(pool, alloc_size)
                    }
                } else {
                    self.new_segment(pool, alloc_size)
                }
            }
        };
        self.free.get_mut(&pool).unwrap().remove(&(bsize, addr));
        let seg_addr = self.segment_of(addr);
        let before = Self::inactive_split(&self.segments[&seg_addr]);
        let split = self.should_split(pool, bsize, size);
        let seg = self.segments.get_mut(&seg_addr).unwrap();
        let given = if split {
            let rest = Block { addr: addr + size as u64, size: bsize - size, requested: 0, allocated: false, segment: seg_addr };
            seg.blocks.insert(rest.addr, rest);
            self.free.get_mut(&pool).unwrap().insert((bsize - size, addr + size as u64));
            size
        } else {
            bsize
        };
        let b = seg.blocks.get_mut(&addr).unwrap();
        b.size = given;
        b.requested = requested;
        b.allocated = true;
        self.update_inactive(seg_addr, before);
        self.stats.allocated_bytes.add(given);
        self.stats.active_bytes.add(given);
        self.stats.requested_bytes.add(requested);
        self.stats.allocation.add(1);
        self.trace.push(Trace { action: Action::Alloc, addr, size: requested });
        Ok((addr, given))
    }

    fn new_segment(&mut self, pool: Pool, size: usize) -> (usize, u64) {
        let addr = self.next_addr;
        // Keep fake addresses 2 MiB aligned with a gap, like cudaMalloc's.
        self.next_addr += (size.div_ceil(ROUND_LARGE) * ROUND_LARGE + ROUND_LARGE) as u64;
        let mut blocks = BTreeMap::new();
        blocks.insert(addr, Block { addr, size, requested: 0, allocated: false, segment: addr });
        self.segments.insert(addr, Segment { addr, size, pool, blocks });
        self.free.get_mut(&pool).unwrap().insert((size, addr));
        self.stats.reserved_bytes.add(size);
        self.stats.segment.add(1);
        self.trace.push(Trace { action: Action::SegmentAlloc, addr, size });
        (size, addr)
    }

    fn segment_of(&self, addr: u64) -> u64 {
        *self.segments.range(..=addr).next_back().expect("address inside a segment").0
    }

    /// Return a block: `free_requested` then `free_completed` with neighbour merging.
    pub fn free(&mut self, addr: u64) {
        let seg_addr = self.segment_of(addr);
        let before = Self::inactive_split(&self.segments[&seg_addr]);
        let seg = self.segments.get_mut(&seg_addr).unwrap();
        let pool = seg.pool;
        let b = seg.blocks.get_mut(&addr).expect("freeing a live block");
        assert!(b.allocated, "double free at {addr:#x}");
        let (size, requested) = (b.size, b.requested);
        b.allocated = false;
        b.requested = 0;
        self.stats.allocated_bytes.sub(size);
        self.stats.allocation.sub(1);
        self.trace.push(Trace { action: Action::FreeRequested, addr, size: requested });
        // Merge with free neighbours in the same segment.
        let free_set = self.free.get_mut(&pool).unwrap();
        let mut start = addr;
        let mut total = size;
        if let Some((&pa, p)) = seg.blocks.range(..addr).next_back() {
            if !p.allocated {
                free_set.remove(&(p.size, pa));
                start = pa;
                total += p.size;
            }
        }
        if let Some((&na, n)) = seg.blocks.range(addr + 1..).next() {
            if !n.allocated {
                free_set.remove(&(n.size, na));
                total += n.size;
                seg.blocks.remove(&na);
            }
        }
        if start != addr {
            seg.blocks.remove(&addr);
        }
        let blk = seg.blocks.get_mut(&start).unwrap();
        blk.size = total;
        free_set.insert((total, start));
        self.stats.active_bytes.sub(size);
        self.stats.requested_bytes.sub(requested);
        self.update_inactive(seg_addr, before);
        self.trace.push(Trace { action: Action::FreeCompleted, addr, size: requested });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> CachingAllocator {
        CachingAllocator::new(AllocatorConfig::default(), 80 << 30)
    }

    /// formats.md §4.11, row by row, each on a fresh allocator.
    #[test]
    fn worked_examples() {
        let rows = [
            (100usize, 512usize, 2_097_152usize),
            (1_048_577, 1_049_088, 20_971_520),
            (3_000_000, 3_000_320, 20_971_520),
            (50_000_000, 50_331_648, 50_331_648),
            (314_572_800, 314_572_800, 314_572_800),
        ];
        for (req, allocated, reserved) in rows {
            let mut a = fresh();
            a.malloc(req).unwrap();
            assert_eq!(a.stats.allocated_bytes.current, allocated, "{req}");
            assert_eq!(a.stats.reserved_bytes.current, reserved, "{req}");
            assert_eq!(a.stats.requested_bytes.current, req);
        }
    }

    #[test]
    fn trace_of_the_3mb_case_and_empty_cache() {
        let mut a = fresh();
        let p = a.malloc(3_000_000).unwrap();
        assert!(a.stats.inactive_split_bytes.current > 0, "the 20 MiB segment is split");
        a.free(p);
        assert_eq!(a.stats.inactive_split_bytes.current, 0, "merged back");
        assert_eq!(a.stats.reserved_bytes.current, 20_971_520, "stays reserved");
        a.empty_cache();
        assert_eq!(a.stats.reserved_bytes.current, 0);
        let t: Vec<(&str, usize)> = a.trace().iter().map(|t| (t.action.name(), t.size)).collect();
        assert_eq!(
            t,
            vec![("segment_alloc", 20_971_520), ("alloc", 3_000_000), ("free_requested", 3_000_000), ("free_completed", 3_000_000), ("segment_free", 20_971_520)]
        );
    }

    #[test]
    fn cached_blocks_are_reused_best_fit_and_split() {
        let mut a = fresh();
        let x = a.malloc(4 << 20).unwrap();
        let y = a.malloc(4 << 20).unwrap();
        assert_eq!(y, x + (4 << 20), "second block split from the same 20 MiB segment");
        a.free(x);
        let z = a.malloc(3 << 20).unwrap();
        assert_eq!(z, x, "best fit reuses the freed 4 MiB hole, not the 12 MiB tail");
        assert_eq!(a.stats.reserved_bytes.current, 20 << 20);
        // Large remainder ≤ 1 MiB is absorbed, not split.
        let mut b = fresh();
        b.malloc(19 << 20 | 512).unwrap();
        assert_eq!(b.stats.allocated_bytes.current, 20 << 20);
    }

    #[test]
    fn small_pool_never_serves_large_requests() {
        let mut a = fresh();
        a.malloc(1000).unwrap();
        a.malloc(2 << 20).unwrap();
        assert_eq!(a.stats.reserved_bytes.current, (2 << 20) + (20 << 20));
    }

    #[test]
    fn oom_frees_the_cache_and_retries_before_failing() {
        let mut a = CachingAllocator::new(AllocatorConfig::default(), 100 << 20);
        let x = a.malloc(60 << 20).unwrap();
        a.free(x); // 60 MiB stays cached
        // 70 MiB does not fit next to the cached 60 MiB: release and retry succeeds.
        a.malloc(70 << 20).unwrap();
        assert_eq!(a.stats.num_alloc_retries, 1);
        assert_eq!(a.stats.num_ooms, 0);
        assert_eq!(a.stats.reserved_bytes.current, 70 << 20);
        let e = a.malloc(40 << 20).unwrap_err();
        assert_eq!(e.alloc_size, 40 << 20);
        assert_eq!(a.stats.num_ooms, 1);
        assert_eq!(a.trace().last().unwrap().action, Action::Oom);
        assert!(e.to_string().contains("Tried to allocate 40.00 MiB"));
    }

    #[test]
    fn max_split_size_keeps_big_blocks_whole() {
        let cfg = AllocatorConfig::parse("max_split_size_mb:64").unwrap();
        let mut a = CachingAllocator::new(cfg, 80 << 30);
        let big = a.malloc(100 << 20).unwrap();
        a.free(big);
        // A small-ish request may not take the oversize cached block.
        a.malloc(30 << 20).unwrap();
        assert_eq!(a.stats.reserved_bytes.current, (100 << 20) + (30 << 20));
        // An oversize request may reuse it if within max_non_split_rounding (20 MiB).
        a.malloc(90 << 20).unwrap();
        assert_eq!(a.stats.reserved_bytes.current, (100 << 20) + (30 << 20));
        assert_eq!(a.stats.allocated_bytes.current, (100 << 20) + (30 << 20), "not split: whole 100 MiB counted");
    }

    #[test]
    fn oversize_cached_blocks_are_released_before_the_full_flush() {
        let cfg = AllocatorConfig::parse("max_split_size_mb:64").unwrap();
        let mut a = CachingAllocator::new(cfg, 300 << 20);
        let small = a.malloc(4 << 20).unwrap();
        a.free(small); // a 20 MiB small-request segment stays cached
        let big = a.malloc(200 << 20).unwrap();
        a.free(big); // 200 MiB oversize block cached
        // 250 MiB cannot reuse the 200 MiB block; releasing the oversize one suffices,
        // so the 20 MiB segment survives and no full flush (retry) happens.
        a.malloc(250 << 20).unwrap();
        assert_eq!(a.stats.num_alloc_retries, 0);
        assert_eq!(a.stats.reserved_bytes.current, (250 << 20) + (20 << 20));
    }

    #[test]
    fn rounding_with_power2_divisions() {
        let mut d = [0usize; 16];
        assert_eq!(round_size(1200, &d), 1536);
        d = [4; 16];
        assert_eq!(round_size(1200, &d), 1536, "guard: ≤ 512·divisions uses 512 rounding");
        assert_eq!(round_size((300 << 20) + 12345, &d), 320 << 20);
        assert_eq!(round_size((5 << 20) + 1, &d), 6 << 20);
        assert_eq!(round_size(256 << 20, &d), 256 << 20);
        let cfg = AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,>:4]").unwrap();
        assert_eq!(cfg.roundup_power2_divisions[0], 1, "the first entry fills smaller intervals");
        assert_eq!(cfg.roundup_power2_divisions[8], 1);
        assert_eq!(cfg.roundup_power2_divisions[9], 2);
        assert_eq!(cfg.roundup_power2_divisions[10], 4);
        assert_eq!(cfg.roundup_power2_divisions[15], 4);
    }

    #[test]
    fn config_errors_name_the_setting() {
        for (s, word) in [
            ("max_split_size_mb:10", "max_split_size_mb"),
            ("roundup_power2_divisions:3", "power of two"),
            ("garbage_collection_threshold:1.5", "garbage_collection_threshold"),
            ("nonsense:1", "unknown setting"),
            ("max_split_size_mb", "expected key:value"),
        ] {
            let e = AllocatorConfig::parse(s).unwrap_err();
            assert!(e.contains(word), "{s}: {e}");
        }
        assert!(AllocatorConfig::parse("max_split_size_mb:512,garbage_collection_threshold:0.6").is_ok());
    }

    #[test]
    fn stats_return_to_zero_and_blocks_tile_segments() {
        let mut a = fresh();
        let mut live = Vec::new();
        let mut s = 12345u64;
        for i in 0..2000 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            let req = 1 + (s >> 33) as usize % (if i % 7 == 0 { 50 << 20 } else { 200_000 });
            live.push(a.malloc(req).unwrap());
            if s % 3 == 0 && !live.is_empty() {
                let k = (s >> 20) as usize % live.len();
                a.free(live.swap_remove(k));
            }
            for seg in a.segments() {
                let sum: usize = seg.blocks.values().map(|b| b.size).sum();
                assert_eq!(sum, seg.size);
                let mut at = seg.addr;
                for (&ba, b) in &seg.blocks {
                    assert_eq!(ba, at);
                    at += b.size as u64;
                }
            }
        }
        for p in live {
            a.free(p);
        }
        assert_eq!(a.stats.allocated_bytes.current, 0);
        assert_eq!(a.stats.active_bytes.current, 0);
        assert_eq!(a.stats.requested_bytes.current, 0);
        assert_eq!(a.stats.inactive_split_bytes.current, 0);
        a.empty_cache();
        assert_eq!(a.stats.reserved_bytes.current, 0);
    }
}
