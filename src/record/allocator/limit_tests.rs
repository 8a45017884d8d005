//! Sizes at the edge of what the model represents: requests and capacities near usize::MAX,
//! exabyte segments, and addresses near 2^63 never overflow, wrap or panic.
use super::*;

#[test]
fn requests_beyond_every_capacity_are_an_oom_not_an_overflow() {
    for conf in ["", "expandable_segments:True", "roundup_power2_divisions:4", "max_split_size_mb:100"] {
        let mut a = CachingAllocator::new(AllocatorConfig::parse(conf).unwrap(), usize::MAX);
        assert_eq!(a.capacity, MAX_DEVICE_BYTES, "capacity clamped to 2^62");
        for req in [usize::MAX, usize::MAX - 511, (1 << 63) + 1, MAX_DEVICE_BYTES + 1] {
            let e = a.malloc(req).unwrap_err();
            assert_eq!(e.requested, req, "{conf}");
            assert!(e.alloc_size >= req);
            assert!(e.to_string().contains("out of memory"));
        }
        assert_eq!(a.stats.num_ooms, 4);
        assert_eq!(a.stats.reserved_bytes.current, 0);
        assert_eq!(a.trace().last().unwrap().action, Action::Oom);
    }
}

#[test]
fn exabyte_blocks_are_counted_exactly() {
    let mut a = CachingAllocator::new(AllocatorConfig::default(), usize::MAX / 4);
    let big = 1usize << 60;
    let p = a.malloc(big + 1).unwrap();
    let q = a.malloc(big).unwrap();
    let (rounded_p, rounded_q) = (big + 512, big);
    assert_eq!(a.stats.allocated_bytes.current, rounded_p + rounded_q);
    assert_eq!(a.stats.requested_bytes.current, 2 * big + 1);
    // Both segments are 2 MiB multiples; the whole stays below 2^62 and the addresses below 2^63.
    assert!(a.stats.reserved_bytes.current <= MAX_DEVICE_BYTES);
    assert!(a.segments().all(|s| s.addr + s.size as u64 <= i64::MAX as u64));
    // A third one does not fit the 2^62-byte device: an OOM with exact figures.
    let e = a.malloc(3 * big).unwrap_err();
    assert_eq!(e.reserved, a.stats.reserved_bytes.current);
    a.free(p);
    a.free(q);
    assert_eq!(a.stats.allocated_bytes.current, 0);
    a.empty_cache();
    assert_eq!(a.stats.reserved_bytes.current, 0);
}

#[test]
fn addresses_stay_below_2_pow_63_after_exabytes_come_and_go() {
    let mut a = CachingAllocator::new(AllocatorConfig::default(), usize::MAX / 4);
    let big = 1usize << 61;
    let keep = a.malloc(1 << 20).unwrap();
    // Each round reserves a fresh 2^61-byte segment and releases it: the monotone address
    // counter would pass 2^63 after a few rounds; the allocator reuses the freed range.
    let mut seen = Vec::new();
    for _ in 0..12 {
        let p = a.malloc(big).unwrap();
        assert!(p + big as u64 <= i64::MAX as u64, "address {p:#x}");
        seen.push(p);
        a.free(p);
        a.empty_cache();
    }
    assert!(seen.windows(2).any(|w| w[1] <= w[0]), "a freed range was reused: {seen:x?}");
    a.free(keep);
    // The expandable path asks for its virtual range the same way.
    let mut e = CachingAllocator::new(AllocatorConfig::parse("expandable_segments:True").unwrap(), usize::MAX);
    let p = e.malloc(big).unwrap();
    assert!(p < i64::MAX as u64);
    e.free(p);
}

#[test]
fn round_size_near_the_limit() {
    let none = [0usize; 16];
    assert_eq!(round_size(MAX_DEVICE_BYTES - 1, &none), MAX_DEVICE_BYTES);
    let mut four = [0usize; 16];
    four[15] = 4;
    let r = round_size(MAX_DEVICE_BYTES - 1, &four);
    assert!(r >= MAX_DEVICE_BYTES - 1 && r <= MAX_DEVICE_BYTES);
    assert_eq!(allocation_size(MAX_DEVICE_BYTES), MAX_DEVICE_BYTES);
}
