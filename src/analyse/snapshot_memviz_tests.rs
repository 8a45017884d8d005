//! The replay counts as memory_viz's `annotate_snapshot` + `process_alloc_data` do, one case
//! per rule (the module docs of `snapshot` state them; tests/pytorch_snapshots.rs checks the
//! same cases against the viewer's own code).
use super::*;

const B: i64 = 1 << 40;

fn ev(action: &str, addr: Option<i64>, size: i64) -> Value {
    let mut items = vec![("action", Value::str(action)), ("size", Value::Int(size))];
    items.extend(addr.map(|a| ("addr", Value::Int(B + a))));
    Value::dict(items)
}

fn seg(device: Option<i64>, address: Option<i64>, blocks: Vec<Value>) -> Value {
    let total: i64 = blocks.iter().map(|b| b.get("size").and_then(Value::as_int).unwrap()).sum();
    let mut items = vec![("total_size", Value::Int(total)), ("blocks", Value::list(blocks))];
    items.extend(device.map(|d| ("device", Value::Int(d))));
    items.extend(address.map(|a| ("address", Value::Int(B + a))));
    Value::dict(items)
}

/// A block with `requested_size` (when Some) and `frames` (when `frames`), no `address`.
fn blk(size: i64, state: &str, requested: Option<i64>, frames: bool) -> Value {
    let mut items = vec![("size", Value::Int(size)), ("state", Value::str(state))];
    items.extend(requested.map(|r| ("requested_size", Value::Int(r))));
    if frames {
        items.push(("frames", Value::list(vec![])));
    }
    Value::dict(items)
}

fn snap(segments: Vec<Value>, traces: Vec<Vec<Value>>) -> Value {
    Value::dict(vec![("segments", Value::list(segments)), ("device_traces", Value::list(traces.into_iter().map(Value::list).collect()))])
}

fn peak(s: &Value) -> u64 {
    analyse(s, None, 100.0, 10).unwrap().peak_active_bytes
}

fn curve(s: &Value) -> (u64, Vec<u64>) {
    replay(s, None, &Budget::default()).unwrap().active_curve().unwrap()
}

/// A free is at `free_completed`: while it is only requested (another stream still uses the
/// block), the block stays active.
#[test]
fn free_requested_does_not_free() {
    let t = vec![ev("alloc", Some(0), 100), ev("free_requested", Some(0), 100), ev("alloc", Some(100), 50), ev("free_completed", Some(0), 100)];
    let s = snap(vec![], vec![t]);
    assert_eq!(curve(&s), (0, vec![100, 100, 150, 50]));
    assert_eq!(peak(&s), 150);
}

/// A back-to-back pair is one free at the request (memory_viz elides it).
#[test]
fn adjacent_pair_frees_at_the_request() {
    let t = vec![ev("alloc", Some(0), 100), ev("free_requested", Some(0), 100), ev("free_completed", Some(0), 100), ev("alloc", Some(100), 50)];
    let s = snap(vec![], vec![t]);
    assert_eq!(curve(&s), (0, vec![100, 0, 0, 50]));
    let r = replay(&s, None, &Budget::default()).unwrap();
    assert_eq!(r.allocs[0].free_at, Some(1));
    assert_eq!(r.entries[1].action, Action::Free);
    assert_eq!(r.entries[2].action, Action::FreeMerged);
}

/// An unmatched pair is a block live from the start, of the size its `free_requested` says.
#[test]
fn unmatched_pair_takes_the_requests_size() {
    let s = snap(vec![], vec![vec![ev("free_requested", Some(0), 10), ev("free_completed", Some(0), 20)]]);
    assert_eq!(curve(&s), (10, vec![0, 0]));
}

/// A free requested but never completed leaves the block active to the end.
#[test]
fn pending_free_at_the_end_stays_active() {
    let s = snap(
        vec![seg(Some(0), Some(0), vec![blk(128, "active_pending_free", Some(100), true)])],
        vec![vec![ev("alloc", Some(0), 100), ev("free_requested", Some(0), 100)]],
    );
    let r = replay(&s, None, &Budget::default()).unwrap();
    assert_eq!(r.allocs.len(), 1, "a pending block is no ghost");
    assert_eq!(r.allocs[0].free_at, None);
    assert_eq!(r.active_curve().unwrap(), (0, vec![100, 100]));
    assert_eq!(r.allocated_end, 128);
}

/// A trace of frees alone: each freed block was live from the start.
#[test]
fn only_free_completed_counts_from_the_start() {
    let s = snap(vec![], vec![vec![ev("free_completed", Some(0), 100), ev("free_completed", Some(200), 30)]]);
    assert_eq!(curve(&s), (130, vec![30, 0]));
    let r = analyse(&s, None, 100.0, 10).unwrap();
    assert_eq!((r.peak_active_bytes, r.peak_at), (130, None));
}

/// Entries without an address share one key: a free matches the latest address-less alloc,
/// the earlier one is never freed.
#[test]
fn entries_without_address_share_one_key() {
    let s = snap(vec![], vec![vec![ev("alloc", None, 10), ev("alloc", None, 20), ev("free_completed", None, 20)]]);
    assert_eq!(curve(&s), (0, vec![10, 30, 10]));
}

/// An alloc at an address still live replaces it: the earlier allocation is never freed.
#[test]
fn alloc_at_a_live_address_replaces_it() {
    let s = snap(vec![], vec![vec![ev("alloc", Some(0), 10), ev("alloc", Some(0), 20), ev("free_completed", Some(0), 20)]]);
    assert_eq!(curve(&s), (0, vec![10, 30, 10]));
}

/// Blocks without `address` (`_profile_to_snapshot`'s) sit at the segment's address plus the
/// sizes before them: one a live alloc covers is not counted twice, the others are live
/// from the start.
#[test]
fn block_addresses_run_from_the_segment() {
    let blocks = vec![blk(64, "inactive", None, false), blk(100, "active_allocated", Some(100), true), blk(300, "active_allocated", Some(250), true)];
    let s = snap(vec![seg(Some(0), Some(0), blocks)], vec![vec![ev("alloc", Some(64), 100)]]);
    let r = replay(&s, None, &Budget::default()).unwrap();
    assert_eq!(r.allocs.len(), 2);
    assert_eq!((r.allocs[1].addr, r.allocs[1].size, r.allocs[1].alloc_at), ((B + 164) as u64, 250, None));
    assert_eq!(r.active_curve().unwrap(), (250, vec![350]));
}

/// A segment without `address`: its first block has the address-less key, the rest none.
#[test]
fn blocks_of_a_segment_without_address() {
    let blocks = vec![blk(10, "active_allocated", Some(10), true), blk(20, "active_allocated", Some(20), true)];
    let s = snap(vec![seg(Some(0), None, blocks)], vec![vec![ev("alloc", None, 10)]]);
    assert_eq!(curve(&s), (20, vec![30]));
}

/// The legacy format's sizes: without frames, an absent or 0 `requested_size` is
/// `history[0].real_size`, else `size`; with frames, `requested_size` as it is.
#[test]
fn requested_size_fallbacks() {
    let history = Value::dict(vec![
        ("size", Value::Int(100)),
        ("state", Value::str("active_allocated")),
        ("history", Value::list(vec![Value::dict(vec![("real_size", Value::Int(70))])])),
    ]);
    let blocks = vec![
        blk(1000, "active_allocated", None, false),
        blk(500, "active_allocated", Some(0), false),
        history,
        blk(40, "active_allocated", Some(0), true),
        blk(30, "active_allocated", Some(25), false),
    ];
    let s = snap(vec![seg(Some(0), Some(0), blocks)], vec![vec![]]);
    let sizes: Vec<u64> = replay(&s, None, &Budget::default()).unwrap().allocs.iter().map(|a| a.size).collect();
    assert_eq!(sizes, vec![1000, 500, 70, 0, 25]);
}

/// A segments-only snapshot's peak is its active blocks' requested bytes, not 0.
#[test]
fn segments_only_peak_is_the_active_blocks() {
    let blocks = vec![blk(4096, "active_allocated", Some(4000), true), blk(1024, "active_pending_free", Some(1024), true), blk(2048, "inactive", None, false)];
    for s in [snap(vec![seg(Some(0), Some(0), blocks.clone())], vec![vec![]]), Value::dict(vec![("segments", Value::list(vec![seg(Some(0), Some(0), blocks.clone())]))]), Value::list(vec![seg(Some(0), Some(0), blocks)])] {
        let r = analyse(&s, None, 100.0, 10).unwrap();
        assert_eq!((r.peak_active_bytes, r.allocated_bytes_end, r.reserved_bytes_end), (4000, 5120, 7168));
    }
}

/// Segments count for the device they name; one without `device` for none.
#[test]
fn segments_without_device_count_nowhere() {
    let s = snap(vec![seg(None, Some(0), vec![blk(10, "active_allocated", Some(10), true)]), seg(Some(1), Some(64), vec![blk(20, "active_allocated", Some(20), true)])], vec![vec![], vec![]]);
    let r = analyse(&s, None, 100.0, 10).unwrap();
    assert_eq!((r.device, r.peak_active_bytes, r.reserved_bytes_end), (1, 20, 20));
    assert_eq!(analyse(&s, Some(0), 100.0, 10).unwrap().reserved_bytes_end, 0);
}

/// The default device: the first with the longest trace among the devices of
/// `device_traces` with a trace or segments; without `device_traces`, the first device with
/// segments.
#[test]
fn default_device_is_memory_vizs() {
    let t = |n: usize| (0..n).map(|i| ev("alloc", Some(i as i64 * 8), 1)).collect::<Vec<_>>();
    assert_eq!(analyse(&snap(vec![], vec![t(2), t(1), t(2)]), None, 100.0, 10).unwrap().device, 0);
    assert_eq!(analyse(&snap(vec![], vec![t(1), t(0), t(3)]), None, 100.0, 10).unwrap().device, 2);
    let segs = vec![seg(Some(3), Some(0), vec![blk(8, "active_allocated", Some(8), true)]), seg(Some(2), Some(64), vec![blk(8, "inactive", None, false)])];
    let no_traces = Value::dict(vec![("segments", Value::list(segs))]);
    assert_eq!(analyse(&no_traces, None, 100.0, 10).unwrap().device, 2);
    // With traces, only their devices are listed (the viewer lists none here: 0).
    let beyond = snap(vec![seg(Some(1), Some(0), vec![blk(8, "active_allocated", Some(8), true)])], vec![vec![]]);
    assert_eq!(analyse(&beyond, None, 100.0, 10).unwrap().device, 0);
}

/// Actions memory_viz does not know change nothing and are counted, by name.
#[test]
fn unknown_actions_are_ignored_and_counted() {
    let t = vec![ev("alloc", Some(0), 100), ev("realloc", Some(0), 300), ev("free_deferred", Some(0), 100), ev("free_deferred", Some(0), 100), ev("snapshot", None, 0), ev("oom", None, 1 << 20)];
    let r = analyse(&snap(vec![], vec![t]), None, 100.0, 10).unwrap();
    assert_eq!(r.peak_active_bytes, 100);
    assert_eq!(r.unknown_actions, vec![("realloc".to_string(), 1), ("free_deferred".to_string(), 2)]);
    assert_eq!(r.ooms.len(), 1);
}
