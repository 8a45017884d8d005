//! Expandable segments (formats.md §4.8, `expandable_segments:True`): one virtual range per
//! (stream, pool), 9/8 of device memory, into which physical pages (2 MiB for the small pool, 20 MiB
//! for the large pool) are mapped at the lowest address that fits, growing a free block at
//! the end of the mapped memory when it can; whole free pages are unmapped on `empty_cache`
//! and the OOM path. Reserved memory is the mapped bytes; the trace has `segment_map` and
//! `segment_unmap` instead of `segment_alloc`/`segment_free`.
use super::{Action, Block, CachingAllocator, Pool, Segment, StreamId, LARGE_BUFFER, SMALL_BUFFER};
use std::collections::BTreeMap;

impl CachingAllocator {
    fn page_size(pool: Pool) -> usize {
        match pool {
            Pool::Small => SMALL_BUFFER,
            Pool::Large => LARGE_BUFFER,
        }
    }

    fn next_block(&self, seg_addr: u64, addr: u64) -> Option<&Block> {
        self.segments[&seg_addr].blocks.range(addr + 1..).next().map(|(_, b)| b)
    }

    /// `find_expandable_block`: the lowest unmapped range of the stream's ranges (or the free
    /// block just before it) from which `size` bytes of free or unmapped address space
    /// follow; a new virtual range for the stream when none has room.
    fn find_expandable_block(&mut self, pool: Pool, stream: StreamId, size: usize) -> u64 {
        for seg in self.segments.values().filter(|s| s.expandable && s.pool == pool && s.stream == stream) {
            for c in seg.blocks.values().filter(|b| !b.mapped) {
                let start = match seg.blocks.range(..c.addr).next_back() {
                    Some((&pa, p)) if p.is_free() => pa,
                    _ => c.addr,
                };
                let mut bytes = 0;
                for b in seg.blocks.range(start..).map(|(_, b)| b).take_while(|b| b.is_free()) {
                    bytes += b.size;
                    if bytes >= size {
                        return start;
                    }
                }
            }
        }
        let page = Self::page_size(pool);
        // 9/8 of device memory; an unbounded model device reserves 18 TiB, or the request
        // itself when it is larger (a meta run's exabyte tensor still gets its range).
        let total = self.capacity.min(16 << 40);
        let va = (total + total / 8).max(size).div_ceil(page).max(1) * page;
        let addr = self.address_range(va);
        let mut blocks = BTreeMap::new();
        blocks.insert(addr, Block::empty(addr, va, false));
        self.segments.insert(addr, Segment { addr, size: va, pool, stream, expandable: true, blocks });
        addr
    }

    /// `try_allocate_expandable_block`: map pages until a free block of at least `size`
    /// exists, and take it out of the cache. None when the device has no room for the pages
    /// (pages mapped by an earlier step of the same call stay mapped, as in PyTorch).
    pub(super) fn try_allocate_expandable(&mut self, pool: Pool, stream: StreamId, size: usize) -> Option<(usize, u64)> {
        let mut cand = self.find_expandable_block(pool, stream, size);
        if !self.block(cand).mapped {
            let bsize = self.block(cand).size;
            cand = self.map_block(pool, cand, bsize.min(size))?;
        }
        loop {
            let have = self.block(cand).size;
            if have >= size {
                break;
            }
            let seg = self.segment_of(cand);
            let next = self.next_block(seg, cand).expect("free space continues into unmapped space");
            debug_assert!(!next.mapped);
            let (naddr, nsize) = (next.addr, next.size);
            cand = self.map_block(pool, naddr, (size - have).min(nsize))?;
        }
        let bsize = self.block(cand).size;
        self.free[pool.idx()].remove(stream, bsize, cand);
        Some((bsize, cand))
    }

    /// `map_block`: back `size` bytes (rounded up to whole pages) at the start of the unmapped
    /// block at `addr` with physical memory and merge it with free neighbours. Returns the
    /// merged free block's address, or None when the device has no room.
    fn map_block(&mut self, pool: Pool, addr: u64, size: usize) -> Option<u64> {
        let seg_addr = self.segment_of(addr);
        let page = Self::page_size(pool);
        debug_assert_eq!((addr - seg_addr) % page as u64, 0, "unmapped blocks start on a page");
        let bytes = size.div_ceil(page) * page;
        if self.stats.reserved_bytes.current + bytes > self.capacity {
            return None;
        }
        let seg = self.segments.get_mut(&seg_addr).unwrap();
        let b = seg.blocks.get_mut(&addr).unwrap();
        debug_assert!(!b.mapped && bytes <= b.size);
        let rest = b.size - bytes;
        b.size = bytes;
        b.mapped = true;
        if rest > 0 {
            let r = addr + bytes as u64;
            seg.blocks.insert(r, Block::empty(r, rest, false));
        }
        let (start, total) = self.merge_free_neighbours(pool, seg_addr, addr);
        self.cache_block(pool, start, total);
        self.stats.reserved_bytes.add(bytes);
        self.stats.num_device_alloc += 1;
        let stream = self.segments[&seg_addr].stream;
        self.push(Action::SegmentMap, stream, addr, bytes);
        Some(start)
    }

    /// `unmap_block`: return the whole pages inside the cached block at `addr` to the device;
    /// the partial pages at either end stay mapped as free blocks.
    pub(super) fn unmap_block(&mut self, pool: Pool, addr: u64) {
        let seg_addr = self.segment_of(addr);
        let page = Self::page_size(pool) as u64;
        let size = self.block(addr).size;
        let off = addr - seg_addr;
        let begin = off.div_ceil(page) * page;
        let end = (off + size as u64) / page * page;
        if begin >= end {
            return;
        }
        self.uncache_block(pool, size, addr);
        let (ustart, ulen) = (seg_addr + begin, (end - begin) as usize);
        let before = (ustart - addr) as usize;
        let after = size - before - ulen;
        let seg = self.segments.get_mut(&seg_addr).unwrap();
        seg.blocks.remove(&addr);
        let stream = seg.stream;
        let free_block = |a: u64, s: usize| Block::empty(a, s, true);
        seg.blocks.insert(ustart, Block::empty(ustart, ulen, false));
        if before > 0 {
            seg.blocks.insert(addr, free_block(addr, before));
            self.cache_block(pool, addr, before);
        }
        if after > 0 {
            let a = ustart + ulen as u64;
            self.segments.get_mut(&seg_addr).unwrap().blocks.insert(a, free_block(a, after));
            self.cache_block(pool, a, after);
        }
        self.merge_free_neighbours(pool, seg_addr, ustart);
        self.stats.reserved_bytes.sub(ulen);
        self.stats.num_device_free += 1;
        self.push(Action::SegmentUnmap, stream, ustart, ulen);
    }
}
