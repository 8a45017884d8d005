//! Streams in the allocator model: each test states the rule it checks and the function of
//! c10/cuda/CUDACachingAllocator.cpp (torch 2.15) it comes from (docs/allocator-streams.md).
use super::*;

const S0: StreamId = StreamId::DEFAULT;
const S1: StreamId = StreamId(1);
const S2: StreamId = StreamId(2);

fn fresh() -> CachingAllocator {
    CachingAllocator::new(AllocatorConfig::default(), 80 << 30)
}

fn on(a: &mut CachingAllocator, bytes: usize, s: StreamId) -> u64 {
    a.malloc_block_on(bytes, s).unwrap().0
}

fn actions(a: &CachingAllocator) -> Vec<(&'static str, StreamId, usize)> {
    a.trace().iter().map(|t| (t.action.name(), t.stream, t.size)).collect()
}

fn block(a: &CachingAllocator, addr: u64) -> &Block {
    a.block(addr)
}

/// Blocks tile their segments; every cached block is cached for its segment's stream and
/// nothing else is cached; a pending block is neither cached nor merged into a neighbour;
/// active = allocated + pending bytes.
fn check_invariants(a: &CachingAllocator) {
    let (mut cached, mut pending) = (0, 0);
    for seg in a.segments() {
        let mut at = seg.addr;
        for (&ba, b) in &seg.blocks {
            assert_eq!(ba, at);
            at += b.size as u64;
            let in_cache = a.free[seg.pool.idx()].of(seg.stream).is_some_and(|c| c.contains(&(b.size, ba)));
            assert_eq!(in_cache, b.is_free() && b.mapped, "block {ba:#x} cached iff free and mapped");
            cached += in_cache as usize;
            if b.is_pending_free() {
                pending += b.size;
            }
        }
        assert_eq!(at, seg.addr + seg.size as u64);
    }
    assert_eq!(cached, a.free[0].len() + a.free[1].len());
    assert_eq!(a.stats.active_bytes.current, a.stats.allocated_bytes.current + pending);
}

/// Rule: a cached block serves only requests on the stream that allocated it; a request on
/// another stream gets new memory, so reserved grows.
/// Source: `get_free_block` (the pool's set is ordered by stream first; a candidate on
/// another stream ends the search) and `alloc_block` (the new Block takes `p.stream()`).
#[test]
fn a_block_freed_on_one_stream_is_not_reused_by_another() {
    let mut a = fresh();
    let x = on(&mut a, 4 << 20, S1);
    a.free(x);
    assert_eq!(a.stats.reserved_bytes.current, 20 << 20, "stream 1's 20 MiB segment stays cached");
    let y = on(&mut a, 4 << 20, S0);
    assert_ne!(a.segment_of(x), a.segment_of(y), "stream 0 does not get stream 1's cached block");
    assert_eq!(a.stats.reserved_bytes.current, 40 << 20, "a second segment, for stream 0");
    assert_eq!(a.stats.segment.current, 2);
    let streams: Vec<StreamId> = a.segments().map(|s| s.stream).collect();
    assert_eq!(streams, vec![S1, S0]);
    assert_eq!(
        actions(&a),
        vec![
            ("segment_alloc", S1, 20 << 20),
            ("alloc", S1, 4 << 20),
            ("free_requested", S1, 4 << 20),
            ("free_completed", S1, 4 << 20),
            ("segment_alloc", S0, 20 << 20),
            ("alloc", S0, 4 << 20),
        ]
    );
    check_invariants(&a);
}

/// Rule: on its own stream a cached block is reused, best fit, as with one stream.
/// Source: `get_free_block` (lower_bound on (stream, size)).
#[test]
fn a_block_freed_on_a_stream_is_reused_by_the_same_stream() {
    let mut a = fresh();
    let x = on(&mut a, 4 << 20, S1);
    let _y = on(&mut a, 4 << 20, S1);
    a.free(x);
    let z = on(&mut a, 3 << 20, S1);
    assert_eq!(z, x, "best fit on stream 1: the freed 4 MiB hole");
    assert_eq!(a.stats.reserved_bytes.current, 20 << 20);
    check_invariants(&a);
}

/// Rule: splitting keeps the remainder on the block's stream (a small request on stream 0
/// does not land in the rest of stream 1's 2 MiB small segment), and a stream's free blocks
/// merge only within its own segments.
/// Source: `alloc_found_block` (the remainder keeps the pool and stream of the block it was
/// split from), `try_merge_blocks` (neighbours within one segment).
#[test]
fn split_remainders_stay_on_their_stream() {
    let mut a = fresh();
    let x = on(&mut a, 1000, S1);
    let y = on(&mut a, 1000, S0);
    assert_ne!(a.segment_of(x), a.segment_of(y));
    assert_eq!(a.stats.reserved_bytes.current, 2 * (2 << 20), "two small segments, one per stream");
    let x2 = on(&mut a, 1000, S1);
    assert_eq!(x2, x + 1024, "stream 1's next small block comes from its own remainder");
    a.free(x);
    a.free(x2);
    let seg = &a.segments[&a.segment_of(x)];
    assert_eq!(seg.blocks.len(), 1, "stream 1's blocks merged back into one");
    check_invariants(&a);
}

/// Rule: a block used on another stream (`record_stream`) is, when freed, `free_requested`
/// at once (allocated bytes drop) but stays active (state `active_pending_free`, in active
/// and requested bytes, not reusable) until that stream's event completes; in the
/// simulation that is when the stream is synchronised, and the allocator notices at its
/// next malloc, which emits `free_completed` before serving the request.
/// Sources: `recordStream` (adds to `stream_uses`), `free` (`insert_events` instead of
/// `free_block`), `process_events` (called first in `malloc`), `free_block`.
#[test]
fn record_stream_makes_the_free_pending_until_the_stream_is_synchronised() {
    let mut a = fresh();
    let x = on(&mut a, 4 << 20, S0);
    let rounded = 4 << 20;
    a.record_stream(x, S1);
    a.free(x);
    assert!(block(&a, x).is_pending_free());
    assert_eq!(a.stats.allocated_bytes.current, 0, "allocated drops at free_requested");
    assert_eq!(a.stats.active_bytes.current, rounded, "active keeps the pending block");
    assert_eq!(a.stats.requested_bytes.current, 4 << 20, "requested drops only at free_completed");
    assert_eq!(a.outstanding_events(), 1);
    assert_eq!(actions(&a).last(), Some(&("free_requested", S0, 4 << 20)));
    check_invariants(&a);

    // Not reusable while pending: the same request takes the segment's tail instead.
    let y = on(&mut a, 4 << 20, S0);
    assert_ne!(y, x);
    assert!(block(&a, x).is_pending_free());
    // Another stream's sync does not complete stream 1's event.
    a.synchronize_stream(S2);
    let z = on(&mut a, 1 << 20 | 512, S0);
    assert!(block(&a, x).is_pending_free(), "stream 2's sync leaves stream 1's event outstanding");
    // Stream 1 catches up; the block waits for the allocator's next malloc to notice.
    a.synchronize_stream(S1);
    assert!(block(&a, x).is_pending_free(), "events are processed lazily, at the next malloc");
    let n = a.trace().len();
    let w = on(&mut a, 4 << 20, S0);
    assert_eq!(w, x, "completed at the start of this malloc, then reused by it");
    assert_eq!(
        actions(&a)[n..],
        [("free_completed", S0, 4 << 20), ("alloc", S0, 4 << 20)],
        "the trace entries carry the block's (allocation) stream"
    );
    assert_eq!(a.outstanding_events(), 0);
    for p in [y, z, w] {
        a.free(p);
    }
    assert_eq!(a.stats.active_bytes.current, 0);
    check_invariants(&a);
}

/// Rule: a use on the block's own stream needs no event; a block used on two other streams
/// completes only when both have caught up; an event recorded after a sync is not
/// completed by it.
/// Sources: `recordStream` ("ignore uses on the allocation stream"), `insert_events` (one
/// event per used stream, `event_count`), `process_events`.
#[test]
fn pending_frees_wait_for_every_using_stream() {
    let mut a = fresh();
    let x = on(&mut a, 4 << 20, S1);
    a.record_stream(x, S1);
    a.free(x);
    assert!(block(&a, x).is_free(), "a use on its own stream is ignored");

    let x = on(&mut a, 4 << 20, S0);
    a.record_stream(x, S1);
    a.record_stream(x, S2);
    a.synchronize(); // before the free: the events do not exist yet
    a.free(x);
    assert_eq!(a.outstanding_events(), 2);
    a.synchronize_stream(S1);
    let _ = on(&mut a, 1000, S0);
    assert!(block(&a, x).is_pending_free(), "stream 2 has not caught up");
    assert_eq!(a.outstanding_events(), 1);
    a.synchronize_stream(S2);
    let _ = on(&mut a, 1000, S0);
    assert!(block(&a, x).is_free());
    assert_eq!(a.outstanding_events(), 0);
    check_invariants(&a);
}

/// Rule: `empty_cache` first synchronises every stream and frees the pending blocks, then
/// releases every unsplit cached segment, whatever its stream.
/// Sources: `emptyCache` → `release_cached_blocks` → `synchronize_and_free_events`, then
/// `release_blocks` over the whole pool (all streams).
#[test]
fn empty_cache_synchronises_and_releases_every_stream() {
    let mut a = fresh();
    let x = on(&mut a, 30 << 20, S0);
    let y = on(&mut a, 30 << 20, S1);
    a.record_stream(x, S1);
    a.free(x);
    a.free(y);
    assert!(block(&a, x).is_pending_free());
    let n = a.trace().len();
    assert_eq!(a.empty_cache(), 60 << 20);
    assert_eq!(a.stats.reserved_bytes.current, 0);
    assert_eq!(a.stats.active_bytes.current, 0);
    assert_eq!(
        actions(&a)[n..],
        [("free_completed", S0, 30 << 20), ("segment_free", S0, 30 << 20), ("segment_free", S1, 30 << 20)]
    );
    check_invariants(&a);
}

/// Rule: when new memory cannot be had, the OOM path synchronises every stream (pending
/// frees complete), releases the cache and retries once; the request succeeds if that
/// made room.
/// Source: `malloc` → `release_cached_blocks` (→ `synchronize_and_free_events`) →
/// `alloc_block(isRetry = true)`.
#[test]
fn the_oom_path_synchronises_pending_frees_and_retries() {
    let mut a = CachingAllocator::new(AllocatorConfig::default(), 100 << 20);
    let x = on(&mut a, 60 << 20, S0);
    a.record_stream(x, S1);
    a.free(x);
    // Pending: not reusable, and 60 + 60 MiB does not fit in 100 MiB.
    let n = a.trace().len();
    let y = on(&mut a, 60 << 20, S0);
    assert_eq!(a.stats.num_alloc_retries, 1);
    assert_eq!(a.stats.num_ooms, 0);
    assert_eq!(a.stats.reserved_bytes.current, 60 << 20);
    assert_eq!(
        actions(&a)[n..],
        [("free_completed", S0, 60 << 20), ("segment_free", S0, 60 << 20), ("segment_alloc", S0, 60 << 20), ("alloc", S0, 60 << 20)]
    );
    assert_eq!(y, a.segments().next().unwrap().addr);
    // The refused request is traced on its own stream.
    let e = a.malloc_block_on(50 << 20, S1).unwrap_err();
    assert_eq!(e.alloc_size, 50 << 20);
    assert_eq!(actions(&a).last(), Some(&("oom", S1, 50 << 20)));
    check_invariants(&a);
}

/// Rule: with expandable segments each (stream, pool) has its own virtual range; pages
/// mapped for one stream never serve another, and `empty_cache` unmaps free pages of all.
/// Sources: `find_expandable_block` (searches `pool->unmapped` from the stream's key, and
/// creates an `ExpandableSegment` for the stream), `map_block`, `release_blocks`.
#[test]
fn expandable_segments_have_one_range_per_stream() {
    let mut a = CachingAllocator::new(AllocatorConfig::parse("expandable_segments:True").unwrap(), 1 << 30);
    let x = on(&mut a, 4 << 20, S0);
    let y = on(&mut a, 4 << 20, S1);
    let ranges: Vec<(StreamId, Pool, bool)> = a.segments().map(|s| (s.stream, s.pool, s.expandable)).collect();
    assert_eq!(ranges, vec![(S0, Pool::Large, true), (S1, Pool::Large, true)]);
    assert_eq!(a.stats.reserved_bytes.current, 40 << 20, "one 20 MiB page per stream");
    a.free(y);
    let z = on(&mut a, 4 << 20, S0);
    assert_eq!(a.segment_of(z), a.segment_of(x), "stream 0 grows within its own range");
    assert_eq!(a.stats.reserved_bytes.current, 40 << 20, "its first page had room");
    let w = on(&mut a, 16 << 20, S0);
    assert_eq!(a.segment_of(w), a.segment_of(x));
    assert_eq!(a.stats.reserved_bytes.current, 60 << 20, "stream 0 maps a page rather than take stream 1's free one");
    let maps: Vec<StreamId> = a.trace().iter().filter(|t| t.action == Action::SegmentMap).map(|t| t.stream).collect();
    assert_eq!(maps, vec![S0, S1, S0]);
    for p in [x, z, w] {
        a.free(p);
    }
    a.empty_cache();
    assert_eq!(a.stats.reserved_bytes.current, 0);
    let unmaps: Vec<StreamId> = a.trace().iter().filter(|t| t.action == Action::SegmentUnmap).map(|t| t.stream).collect();
    assert_eq!(unmaps, vec![S0, S1]);
    check_invariants(&a);
}

/// Rule: `release_available_cached_blocks` frees oversize cached blocks of the requesting
/// stream only.
/// Source: `release_available_cached_blocks` (lower_bound on the stream's key; the loop stops
/// at a block of another stream).
#[test]
fn oversize_release_takes_only_the_requesting_streams_blocks() {
    let mut a = CachingAllocator::new(AllocatorConfig::parse("max_split_size_mb:100").unwrap(), 500 << 20);
    let x = on(&mut a, 200 << 20, S1);
    a.free(x); // 200 MiB oversize block cached for stream 1
    let y = on(&mut a, 250 << 20, S0);
    a.free(y); // 250 MiB oversize block cached for stream 0
    // 200 MiB on stream 0: stream 1's block is not a candidate, and stream 0's is 20 MiB or
    // more too big (`get_free_block`). 450 + 200 > 500: release stream 0's oversize block,
    // not stream 1's exact fit, then cudaMalloc.
    let n = a.trace().len();
    on(&mut a, 200 << 20, S0);
    assert_eq!(a.stats.num_alloc_retries, 0, "no full flush was needed");
    assert_eq!(actions(&a)[n..], [("segment_free", S0, 250 << 20), ("segment_alloc", S0, 200 << 20), ("alloc", S0, 200 << 20)]);
    check_invariants(&a);
}

/// Rule: many streams, random record_stream and syncs: the invariants hold at every step and
/// everything returns to zero after `synchronize` and `empty_cache`.
/// Sources: all of the above.
#[test]
fn random_multi_stream_workload_keeps_the_invariants() {
    for config in ["", "expandable_segments:True"] {
        let mut a = CachingAllocator::new(AllocatorConfig::parse(config).unwrap(), 80 << 30);
        let mut live = Vec::new();
        let mut s = 99u64;
        for i in 0..1500 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            let stream = StreamId((s >> 40) as u32 % 3);
            let req = 1 + (s >> 33) as usize % (if i % 7 == 0 { 30 << 20 } else { 200_000 });
            let p = a.malloc_block_on(req, stream).unwrap().0;
            if s.is_multiple_of(5) {
                a.record_stream(p, StreamId((s >> 50) as u32 % 3));
            }
            live.push(p);
            if s.is_multiple_of(3) {
                let k = (s >> 20) as usize % live.len();
                a.free(live.swap_remove(k));
            }
            if i % 97 == 0 {
                a.synchronize_stream(StreamId((s >> 10) as u32 % 3));
            }
            if i % 500 == 250 {
                a.empty_cache();
            }
            check_invariants(&a);
        }
        for p in live {
            a.free(p);
        }
        a.synchronize();
        a.empty_cache();
        check_invariants(&a);
        assert_eq!(a.outstanding_events(), 0);
        let st = a.stats;
        assert_eq!((st.allocated_bytes.current, st.active_bytes.current, st.requested_bytes.current), (0, 0, 0), "{config}");
        assert_eq!(st.inactive_split_bytes.current, 0, "{config}");
        assert_eq!(st.reserved_bytes.current, 0, "{config}");
    }
}
