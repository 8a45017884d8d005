//! Allocator unit tests: formats.md §4.11's worked examples, reuse, splitting and merging,
//! the OOM paths, expandable segments and garbage collection.
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
    a.free(small); // a 20 MiB segment stays cached
    let big = a.malloc(200 << 20).unwrap();
    a.free(big); // a 200 MiB oversize block cached
    // 150 MiB may not take the 200 MiB block (more than 20 MiB larger) and does not fit
    // beside it; releasing that one oversize block suffices: no full flush.
    a.malloc(150 << 20).unwrap();
    assert_eq!(a.stats.num_alloc_retries, 0);
    assert_eq!(a.stats.reserved_bytes.current, (150 << 20) + (20 << 20));
    // Two cached 100 MiB blocks cover a 150 MiB request together, largest first.
    let mut b = CachingAllocator::new(AllocatorConfig::parse("max_split_size_mb:64").unwrap(), 250 << 20);
    let (x, y) = (b.malloc(100 << 20).unwrap(), b.malloc(100 << 20).unwrap());
    b.free(x);
    b.free(y);
    b.malloc(150 << 20).unwrap();
    assert_eq!(b.stats.num_alloc_retries, 0);
    assert_eq!(b.stats.reserved_bytes.current, 150 << 20);
    // When the oversize blocks are not enough, the whole cache goes and the retry counts.
    let mut c = CachingAllocator::new(AllocatorConfig::parse("max_split_size_mb:64").unwrap(), 300 << 20);
    let small = c.malloc(4 << 20).unwrap();
    c.free(small);
    let big = c.malloc(200 << 20).unwrap();
    c.free(big);
    c.malloc(290 << 20).unwrap();
    assert_eq!(c.stats.num_alloc_retries, 1);
    assert_eq!(c.stats.reserved_bytes.current, 290 << 20);
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

/// Every segment is tiled by its blocks, no two free blocks of the same mapped-ness touch,
/// the cache holds exactly the free mapped blocks, and reserved = mapped bytes.
fn check_invariants(a: &CachingAllocator) {
    let mut mapped = 0;
    let mut cached = 0;
    for seg in a.segments() {
        let sum: usize = seg.blocks.values().map(|b| b.size).sum();
        assert_eq!(sum, seg.size);
        let mut at = seg.addr;
        let mut prev: Option<&Block> = None;
        for (&ba, b) in &seg.blocks {
            assert_eq!(ba, at);
            at += b.size as u64;
            if b.mapped {
                mapped += b.size;
            }
            if !b.allocated && b.mapped {
                cached += 1;
                assert!(a.free[Pool::of_segment(seg).idx()].contains(&(b.size, ba)), "free block {ba:#x} not cached");
            }
            if let Some(p) = prev {
                assert!(p.allocated || b.allocated || p.mapped != b.mapped, "unmerged free neighbours at {ba:#x}");
            }
            prev = Some(b);
        }
    }
    assert_eq!(cached, a.free[0].len() + a.free[1].len());
    assert_eq!(mapped, a.stats.reserved_bytes.current);
    for v in a.snapshot_segments() {
        assert_eq!(v.blocks.iter().map(|b| b.size).sum::<usize>(), v.size);
        assert!(v.blocks.iter().all(|b| b.mapped));
    }
}

fn random_workload(mut a: CachingAllocator) {
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
        if i % 500 == 250 {
            a.empty_cache();
        }
        check_invariants(&a);
    }
    for p in live {
        a.free(p);
    }
    check_invariants(&a);
    assert_eq!(a.stats.allocated_bytes.current, 0);
    assert_eq!(a.stats.active_bytes.current, 0);
    assert_eq!(a.stats.requested_bytes.current, 0);
    assert_eq!(a.stats.inactive_split_bytes.current, 0);
    a.empty_cache();
    assert_eq!(a.stats.reserved_bytes.current, 0);
}

#[test]
fn stats_return_to_zero_and_blocks_tile_segments() {
    random_workload(fresh());
    random_workload(expandable(80 << 30));
}

fn expandable(capacity: usize) -> CachingAllocator {
    CachingAllocator::new(AllocatorConfig::parse("expandable_segments:True").unwrap(), capacity)
}

fn actions(a: &CachingAllocator) -> Vec<(&'static str, u64, usize)> {
    a.trace().iter().map(|t| (t.action.name(), t.addr, t.size)).collect()
}

#[test]
fn expandable_segments_grow_by_pages_in_one_range() {
    let mut a = expandable(80 << 30);
    let x = a.malloc(3_000_000).unwrap();
    assert_eq!(a.stats.reserved_bytes.current, 20 << 20, "one 20 MiB page of the large pool");
    assert_eq!(a.stats.segment.current, 0, "mapped pages are not counted as segments");
    // 30 MiB: the free tail of the first page grows by one more page, in the same range.
    let y = a.malloc(30 << 20).unwrap();
    assert_eq!(y, x + 3_000_320);
    assert_eq!(a.stats.reserved_bytes.current, 40 << 20, "a cudaMalloc segment would make it 50 MiB");
    assert_eq!(a.stats.inactive_split_bytes.current, 0, "expandable memory is not inactive_split");
    assert_eq!(
        actions(&a),
        vec![
            ("segment_map", x, 20 << 20),
            ("alloc", x, 3_000_000),
            ("segment_map", x + (20 << 20), 20 << 20),
            ("alloc", y, 30 << 20),
        ]
    );
    let views = a.snapshot_segments();
    assert_eq!(views.len(), 1);
    assert!(views[0].expandable);
    assert_eq!((views[0].addr, views[0].size), (x, 40 << 20));
    // Small requests get their own range with 2 MiB pages.
    a.malloc(1000).unwrap();
    assert_eq!(a.stats.reserved_bytes.current, (40 << 20) + (2 << 20));
    a.free(x);
    a.free(y);
    assert_eq!(a.empty_cache(), 40 << 20);
    assert_eq!(a.trace().last().map(|t| (t.action, t.addr, t.size)), Some((Action::SegmentUnmap, x, 40 << 20)));
    check_invariants(&a);
}

#[test]
fn expandable_segments_unmap_whole_free_pages_and_refill_holes_first() {
    let mut a = expandable(80 << 30);
    let x = a.malloc(30 << 20).unwrap(); // maps two pages [0, 40)
    let y = a.malloc(30 << 20).unwrap(); // [30, 60): one more page
    assert_eq!(a.stats.reserved_bytes.current, 60 << 20);
    a.free(x);
    a.empty_cache();
    // Only the whole page [0, 20) is unmapped; [20, 30) stays mapped and free.
    assert_eq!(a.stats.reserved_bytes.current, 40 << 20);
    assert_eq!(a.trace().last().map(|t| (t.action, t.addr, t.size)), Some((Action::SegmentUnmap, x, 20 << 20)));
    let views = a.snapshot_segments();
    assert_eq!(views.len(), 1);
    assert_eq!((views[0].addr, views[0].size), (x + (20 << 20), 40 << 20));
    // 15 MiB fits in no cached block: the lowest hole is mapped again and merged with the
    // free [20, 30) behind it.
    let z = a.malloc(15 << 20).unwrap();
    assert_eq!(z, x);
    assert_eq!(a.stats.reserved_bytes.current, 60 << 20);
    assert_eq!(a.snapshot_segments().len(), 1);
    a.free(y);
    a.free(z);
    check_invariants(&a);
}

#[test]
fn expandable_segments_avoid_the_fragmentation_retry_but_still_oom() {
    // The same requests as `oom_frees_the_cache_and_retries_before_failing`: the cached
    // 60 MiB grows instead of being flushed.
    let mut a = expandable(100 << 20);
    let x = a.malloc(60 << 20).unwrap();
    a.free(x);
    a.malloc(70 << 20).unwrap();
    assert_eq!(a.stats.num_alloc_retries, 0);
    assert_eq!(a.stats.reserved_bytes.current, 80 << 20);
    let e = a.malloc(40 << 20).unwrap_err();
    assert_eq!(e.alloc_size, 40 << 20);
    assert_eq!((a.stats.num_alloc_retries, a.stats.num_ooms), (1, 1));
    assert_eq!(a.trace().last().unwrap().action, Action::Oom);
    check_invariants(&a);
}

#[test]
fn garbage_collection_frees_old_cached_segments_under_a_memory_fraction() {
    let run = |conf: &str| {
        let mut a = CachingAllocator::new(AllocatorConfig::parse(conf).unwrap(), 1000 << 20);
        a.set_memory_fraction(0.5);
        let blocks: Vec<u64> = (0..3).map(|_| a.malloc(100 << 20).unwrap()).collect();
        for b in blocks {
            a.free(b);
        }
        let d = a.malloc(150 << 20).unwrap();
        a.free(d);
        assert_eq!(a.stats.reserved_bytes.current, 450 << 20);
        a.malloc(160 << 20).unwrap();
        a
    };
    // Reserved 450 MiB is above 0.6 × 500 MiB: the three older 100 MiB segments go (their
    // age is above the average), the younger 150 MiB one stays; no flush-and-retry.
    let gc = run("garbage_collection_threshold:0.6");
    assert_eq!(gc.stats.num_alloc_retries, 0);
    assert_eq!(gc.stats.reserved_bytes.current, (150 << 20) + (160 << 20));
    // Without the threshold, 450 + 160 MiB exceeds the 500 MiB fraction: flush and retry.
    let plain = run("");
    assert_eq!(plain.stats.num_alloc_retries, 1);
    assert_eq!(plain.stats.reserved_bytes.current, 160 << 20);
    // The fraction bounds reserved memory.
    let mut a = CachingAllocator::new(AllocatorConfig::default(), 1000 << 20);
    a.set_memory_fraction(0.5);
    assert!(a.malloc(510 << 20).is_err());
}

/// Hostile settings (from a snapshot's allocator_settings, --allocator-conf or
/// PYTORCH_CUDA_ALLOC_CONF) are refused or rounded without a panic or a wrapped size.
#[test]
fn extreme_settings_neither_panic_nor_wrap() {
    let huge = 1usize << 62;
    let c = AllocatorConfig::parse(&format!("roundup_power2_divisions:{huge}")).unwrap();
    for size in [1usize, 511, 512, 4097, 3 << 20, (3 << 30) + 1, usize::MAX / 2] {
        let r = round_size(size, &c.roundup_power2_divisions);
        assert!(r >= size && r % MIN_BLOCK == 0, "{size} -> {r}");
    }
    let c = AllocatorConfig::parse(&format!("roundup_power2_divisions:[1:{huge},>:{huge}]")).unwrap();
    assert_eq!(round_size(5 << 20, &c.roundup_power2_divisions), 5 << 20);
    for bad in [format!("max_split_size_mb:{}", usize::MAX), format!("max_non_split_rounding_mb:{}", usize::MAX / 2)] {
        let e = AllocatorConfig::parse(&bad).unwrap_err();
        assert!(e.contains("more bytes than"), "{e}");
    }
}

/// Requests within a rounding step of usize::MAX have no rounded size: they saturate (and
/// so fail as out of memory) instead of wrapping to a small block.
#[test]
fn rounding_near_usize_max_saturates() {
    let d = AllocatorConfig::parse("roundup_power2_divisions:2").unwrap().roundup_power2_divisions;
    for size in [usize::MAX, usize::MAX - 1, usize::MAX - 510] {
        assert_eq!(round_size(size, &[0; 16]), usize::MAX, "{size}");
        assert_eq!(round_size(size, &d), usize::MAX, "{size}");
        assert_eq!(allocation_size(size), usize::MAX, "{size}");
    }
    assert_eq!(round_size(usize::MAX - 1024, &[0; 16]), usize::MAX - 1023);
    assert_eq!(round_size((3 << 61) + 1, &d), 1 << 63);
}
