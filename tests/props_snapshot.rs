//! Properties of read + analyse + HTML report on generated snapshots (the `snapshot_report`
//! fuzz target's, on stable): random traces of alloc/free/oom/segment actions with shared
//! frame lists, random categories and allocator settings never panic; analysis and report
//! agree on whether a snapshot is usable; a usable one gives a peak that no prefix of the
//! trace, recomputed here independently, exceeds — exactly the highest one when nothing
//! predates the trace. `analyze`'s streaming reader gives the same report or error.
mod props_common;

use props_common::*;
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::rc::Rc;
use vramscope::pickle::{write, Value};

const ACTIONS: [&str; 10] =
    ["alloc", "free_requested", "free_completed", "oom", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "snapshot", "workspace_snapshot"];
const BASE: i64 = 0x7f00_0000_0000;

/// How far from plausible the numbers may go.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ints {
    /// Sizes, addresses and times as a real snapshot has them (non-negative, below 2^40).
    Plausible,
    /// Also i64::MIN/MAX, negative sizes, values next to the i32/u32/i64 edges.
    Extreme,
}

fn int(mode: Ints, plausible: impl Strategy<Value = i64> + 'static) -> BoxedStrategy<i64> {
    match mode {
        Ints::Plausible => plausible.boxed(),
        Ints::Extreme => prop_oneof![
            3 => plausible,
            1 => prop::sample::select(vec![i64::MIN, i64::MIN + 1, -1, 0, i64::MAX, i64::MAX - 1, 1 << 62, -(1 << 62), u32::MAX as i64 + 1]),
            1 => any::<i64>(),
        ]
        .boxed(),
    }
}

#[derive(Clone, Debug)]
struct Entry {
    /// Index into ACTIONS; None: the entry has no action (a malformed snapshot).
    action: Option<usize>,
    /// Index into a pool of addresses (so frees meet their allocs), or a raw address.
    addr: Result<usize, i64>,
    size: i64,
    /// Index into the pool of shared frame lists (None: no frames).
    frames: Option<usize>,
    category: Option<usize>,
    time_us: Option<i64>,
}

#[derive(Clone, Debug)]
struct Block {
    addr: Result<usize, i64>,
    size: i64,
    requested: i64,
    state: usize,
    category: Option<usize>,
}

#[derive(Clone, Debug)]
struct Snap {
    traces: Vec<Vec<Entry>>,
    /// (device, total_size, blocks)
    segments: Vec<(i64, i64, Vec<Block>)>,
    categories: Vec<String>,
    /// Categories in vramscope's top-level table instead of on the entries.
    table: bool,
    frame_lines: Vec<Vec<i64>>,
    divisions: Vec<(String, i64)>,
}

fn entry(mode: Ints) -> impl Strategy<Value = Entry> {
    (
        prop_oneof![80 => (0usize..ACTIONS.len()).prop_map(Some), 1 => Just(None)],
        prop_oneof![6 => (0usize..6).prop_map(Ok), 1 => int(mode, 0i64..1 << 40).prop_map(Err)],
        int(mode, prop_oneof![0i64..4096, 0i64..1 << 32]),
        prop::option::of(0usize..4),
        prop::option::of(0usize..5),
        prop::option::of(int(mode, 0i64..1 << 40)),
    )
        .prop_map(|(action, addr, size, frames, category, time_us)| Entry { action, addr, size, frames, category, time_us })
}

fn block(mode: Ints) -> impl Strategy<Value = Block> {
    (
        prop_oneof![(0usize..6).prop_map(Ok), int(mode, 0i64..1 << 40).prop_map(Err)],
        int(mode, 0i64..1 << 30),
        int(mode, 0i64..1 << 30),
        0usize..4,
        prop::option::of(0usize..5),
    )
        .prop_map(|(addr, size, requested, state, category)| Block { addr, size, requested, state, category })
}

fn snap(mode: Ints, max_entries: usize) -> impl Strategy<Value = Snap> {
    (
        prop::collection::vec(prop::collection::vec(entry(mode), 0..max_entries), 1..3),
        prop::collection::vec((int(mode, 0i64..2), int(mode, 0i64..1 << 32), prop::collection::vec(block(mode), 0..4)), 0..3),
        prop::collection::vec("[a-z<>&\"' ]{0,6}", 1..5),
        any::<bool>(),
        prop::collection::vec(prop::collection::vec(int(mode, 0i64..5000), 0..4), 4),
        prop::collection::vec((prop::sample::select(vec!["1", "2", "64", "32768", "65536", "0", "3", "-4", "x"]).prop_map(String::from), int(mode, prop::sample::select(vec![0i64, 1, 2, 4, 8, 16]))), 0..4),
    )
        .prop_map(|(traces, segments, categories, table, frame_lines, divisions)| Snap { traces, segments, categories, table, frame_lines, divisions })
}

fn addr_of(a: &Result<usize, i64>) -> i64 {
    match a {
        Ok(k) => BASE + 512 * *k as i64,
        Err(raw) => *raw,
    }
}

const STATES: [&str; 4] = ["active_allocated", "active_pending_free", "inactive", "weird"];

/// The snapshot as PyTorch's `_snapshot()` lays it out; frame lists are shared `Rc`s, as
/// the pickle memo shares them.
fn to_value(s: &Snap) -> Value {
    let frame_lists: Vec<Value> = s
        .frame_lines
        .iter()
        .map(|lines| {
            Value::list(
                lines
                    .iter()
                    .map(|&l| Value::dict(vec![("filename", Value::str("m.py")), ("line", Value::Int(l)), ("name", Value::str("## forward ##"))]))
                    .collect(),
            )
        })
        .collect();
    let cat = |c: &Option<usize>| c.map_or(Value::None, |c| Value::str(&s.categories[c % s.categories.len()]));
    let mut trace_cats = Vec::new();
    let traces: Vec<Value> = s
        .traces
        .iter()
        .map(|t| {
            trace_cats.push(Value::list(t.iter().map(|e| cat(&e.category)).collect()));
            Value::list(
                t.iter()
                    .map(|e| {
                        let mut items: Vec<(&str, Value)> = Vec::new();
                        if let Some(a) = e.action {
                            items.push(("action", Value::str(ACTIONS[a])));
                        }
                        items.push(("addr", Value::Int(addr_of(&e.addr))));
                        items.push(("size", Value::Int(e.size)));
                        items.push(("stream", Value::Int(0)));
                        if let Some(t) = e.time_us {
                            items.push(("time_us", Value::Int(t)));
                        }
                        if ACTIONS[e.action.unwrap_or(0)] == "oom" {
                            items.push(("device_free", Value::Int(e.size / 3)));
                        }
                        items.push(("frames", e.frames.map_or_else(|| Value::list(vec![]), |f| frame_lists[f].clone())));
                        if !s.table && e.category.is_some() {
                            items.push(("category", cat(&e.category)));
                        }
                        Value::dict(items)
                    })
                    .collect(),
            )
        })
        .collect();
    let mut segment_cats = Vec::new();
    let segments: Vec<Value> = s
        .segments
        .iter()
        .map(|(device, total, blocks)| {
            segment_cats.push(Value::list(blocks.iter().map(|b| cat(&b.category)).collect()));
            let blocks = blocks
                .iter()
                .map(|b| {
                    let mut items = vec![
                        ("address", Value::Int(addr_of(&b.addr))),
                        ("size", Value::Int(b.size)),
                        ("requested_size", Value::Int(b.requested)),
                        ("state", Value::str(STATES[b.state])),
                        ("frames", frame_lists[b.state % frame_lists.len()].clone()),
                    ];
                    if !s.table && b.category.is_some() {
                        items.push(("category", cat(&b.category)));
                    }
                    Value::dict(items)
                })
                .collect();
            Value::dict(vec![
                ("device", Value::Int(*device)),
                ("address", Value::Int(BASE)),
                ("total_size", Value::Int(*total)),
                ("allocated_size", Value::Int(0)),
                ("segment_type", Value::str("large")),
                ("blocks", Value::list(blocks)),
            ])
        })
        .collect();
    let divisions = Value::Dict(Rc::new(s.divisions.iter().map(|(k, v)| (Value::str(k), Value::Int(*v))).collect()));
    let mut top = vec![
        ("segments", Value::list(segments)),
        ("device_traces", Value::list(traces)),
        ("allocator_settings", Value::dict(vec![("PYTORCH_CUDA_ALLOC_CONF", Value::str("")), ("roundup_power2_divisions", divisions)])),
    ];
    if s.table {
        top.push((
            "vramscope_categories",
            Value::dict(vec![("device_traces", Value::list(trace_cats)), ("segments", Value::list(segment_cats))]),
        ));
    }
    Value::dict(top)
}

/// The active-memory curve of a trace as this test understands PyTorch's viewer: an alloc
/// adds its size, a free (`free_completed` or `free`; `free_requested` frees nothing) takes
/// back the live alloc at its address; an alloc over a live address leaves the older one
/// live for good. Returns the curve's highest point (0 before
/// the trace) and whether every free met an alloc.
fn prefix_peak(trace: &[Entry]) -> (u128, bool) {
    let (mut live, mut leaked, mut cur, mut peak, mut matched) = (HashMap::new(), 0u128, 0u128, 0u128, true);
    for e in trace {
        let size = e.size.max(0) as u128;
        let addr = addr_of(&e.addr).max(0);
        match ACTIONS[e.action.expect("checked by the caller")] {
            "alloc" => {
                if let Some(old) = live.insert(addr, size) {
                    leaked += old;
                    cur -= old;
                }
                cur += size;
            }
            "free_completed" | "free" => match live.remove(&addr) {
                Some(s) => cur -= s,
                None => matched = false,
            },
            _ => {}
        }
        peak = peak.max(cur + leaked);
    }
    (peak, matched)
}

/// Cases that got an analysis, and cases whose peak was checked for equality.
static ANALYSED: AtomicUsize = AtomicUsize::new(0);
static EXACT: AtomicUsize = AtomicUsize::new(0);

fn check(mode: Ints, s: &Snap, v: &Value) -> Result<(), TestCaseError> {
    let analysed = analyse_snapshot(v);
    let page = html_report(v);
    prop_assert_eq!(analysed.is_ok(), page.is_ok(), "analyse {:?} vs report {:?}", analysed.as_ref().err(), page.as_ref().err());
    let (r, page) = match (analysed, page) {
        (Ok(r), Ok(p)) => (r, p),
        (Err(e), _) => {
            // A refusal names what it refuses: an entry without an action, or a field whose
            // value is out of range (negative, beyond 2^53, not a power of two, a sum that
            // overflows); plausible snapshots are refused only for the missing action.
            let names_field = ["device_traces[", "segments[", "allocator_settings."].iter().any(|f| e.contains(f)) || e.contains("sum of");
            let plausible_reason = e.contains("trace entry") && e.contains("no action");
            prop_assert!(plausible_reason || (matches!(mode, Ints::Extreme) && names_field), "unexpected refusal: {e}");
            return Ok(());
        }
        _ => unreachable!(),
    };
    ANALYSED.fetch_add(1, Ordering::Relaxed);
    let trace = &s.traces[r.device];
    prop_assert!(s.traces.iter().all(|t| t.len() <= trace.len()), "device {} is not the one with the longest trace", r.device);
    prop_assert!(trace.iter().all(|e| e.action.is_some()), "a trace without actions was accepted");
    prop_assert_eq!(r.events, trace.len());
    prop_assert!(r.peak_at.is_none_or(|i| i < r.events));
    prop_assert!(r.ooms.iter().all(|o| o.at < r.events && ACTIONS[trace[o.at].action.unwrap()] == "oom"));
    prop_assert_eq!(r.ooms.len(), trace.iter().filter(|e| e.action == Some(3)).count());
    let by_cat: u128 = r.live_at_peak_by_category.iter().map(|(_, b)| *b as u128).sum();
    prop_assert_eq!(by_cat, r.peak_active_bytes as u128, "live at the peak by category does not add up to the peak");
    let (lower, matched) = prefix_peak(trace);
    prop_assert!(r.peak_active_bytes as u128 >= lower, "peak {} below a prefix sum {lower}", r.peak_active_bytes);
    let predates = s.segments.iter().any(|(d, _, b)| *d == r.device as i64 && !b.is_empty());
    if matched && !predates {
        EXACT.fetch_add(1, Ordering::Relaxed);
        prop_assert_eq!(r.peak_active_bytes as u128, lower, "nothing predates the trace, so the peak is the highest prefix");
    }
    // The page carries the same analysis.
    let json = page.split("id=\"vramscope-data\">").nth(1).and_then(|t| t.split("</script>").next()).expect("data element");
    let data: serde_json::Value = serde_json::from_str(&json.replace("<\\/", "</")).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let panel = &data["panels"][0];
    prop_assert_eq!(panel["events"].as_u64(), Some(r.events as u64));
    prop_assert_eq!(panel["peak"]["bytes"].as_u64(), Some(r.peak_active_bytes));
    Ok(())
}

/// `analyze`'s streaming reader on the same bytes gives the tree's report, or the same
/// refusal (it may hand a shape back to the tree reader, which `analyze` then uses).
fn streaming_agrees(bytes: &[u8], tree: &Value) -> Result<(), TestCaseError> {
    use vramscope::analyse::budget::Budget;
    use vramscope::analyse::snapshot::{analyse_replay, analyse_within, replay_condensed};
    use vramscope::pickle::condense::{read_condensed, Refused};
    let b = Budget::default();
    let streamed = match read_condensed(bytes, &b.pickle_limits(), b.trace_entries, b.frames) {
        Ok(c) => replay_condensed(c, None, &b).and_then(|rp| analyse_replay(&rp, 100.0, 20)),
        Err(Refused::Bail) => return Ok(()),
        Err(Refused::File(e)) => return Err(TestCaseError::fail(format!("the streaming reader refuses what the tree reads: {e}"))),
    };
    let json = |r: &vramscope::analyse::snapshot::SnapshotReport| serde_json::to_string(r).unwrap();
    match (analyse_within(tree, None, 100.0, 20, &b), streamed) {
        (Ok(a), Ok(s)) => prop_assert_eq!(json(&a), json(&s)),
        (Err(a), Err(s)) => prop_assert_eq!(a, s),
        (a, s) => return Err(TestCaseError::fail(format!("tree {:?}, streaming {:?}", a.err(), s.err()))),
    }
    Ok(())
}

fn run(mode: Ints, cases: u32, max_entries: usize) {
    runner(cases)
        .run(&snap(mode, max_entries), |s| {
            let v = to_value(&s);
            // Through the pickle, as a file would come: the shared frame lists stay shared.
            let bytes = write(&v);
            let read = read_pickle(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(read == v);
            streaming_agrees(&bytes, &read)?;
            check(mode, &s, &read)
        })
        .unwrap();
}

#[test]
fn plausible_generated_snapshots_analyse_consistently() {
    run(Ints::Plausible, 512, 40);
    // Enough cases reach each check (counted over the shrink-free run).
    let (analysed, exact) = (ANALYSED.load(Ordering::Relaxed), EXACT.load(Ordering::Relaxed));
    eprintln!("{analysed} of 512 snapshots analysed, {exact} with the exact peak check");
    assert!(analysed >= 256 && exact >= 48, "{analysed} analysed, {exact} exact");
}

/// Extreme integers (i64::MIN/MAX, negative sizes and times) must give a result or a clear
/// error, never a panic or a wrapped number (sums of sizes near i64::MAX, time differences:
/// the analysis and the HTML code refuse what they cannot represent).
#[test]
fn extreme_generated_snapshots_never_panic() {
    run(Ints::Extreme, 256, 40);
}

/// Mutations of the real and bomb seeds (`fuzz/corpus/snapshot_report`, small bombs built
/// here, the hostile corpus when present) through read + analyse + report: no panic, and
/// analysis and report agree on whether the input is usable.
#[test]
fn mutated_seed_snapshots_never_panic() {
    let mut seeds: Vec<(String, Vec<u8>)> = fuzz_seeds("snapshot_report").into_iter().filter(|(n, _)| !n.contains("seed-bomb-")).collect();
    assert!(seeds.len() >= 4, "fuzz/corpus/snapshot_report seeds missing");
    seeds.extend(small_bombs().into_iter().map(|(n, v)| (n.to_string(), write(&v))));
    // Hostile files up to 64 KiB: bigger ones are the hostile corpus's own tests' business.
    seeds.extend(hostile_seeds().into_iter().filter(|(_, d)| d.len() <= 64 << 10));
    let n = seeds.len();
    let case = (0..n, prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4));
    runner(96)
        .run(&case, |(k, flips)| {
            let mut data = seeds[k].1.clone();
            if !data.is_empty() {
                for (at, b) in &flips {
                    let i = at.index(data.len());
                    data[i] = *b;
                }
            }
            let Ok(v) = read_pickle(&data) else { return Ok(()) };
            let (a, p) = (analyse_snapshot(&v), html_report(&v));
            prop_assert_eq!(a.is_ok(), p.is_ok(), "{}: analyse {:?} vs report {:?}", seeds[k].0, a.err(), p.err());
            Ok(())
        })
        .unwrap();
}

/// The findings kept in `fuzz/artifacts-kept/snapshot_report/` (see its README) give a
/// result or a clear error, never a panic.
#[test]
fn kept_fuzz_findings_never_panic() {
    let kept = files_in(&root().join("fuzz/artifacts-kept/snapshot_report"));
    assert!(kept.len() >= 6, "kept findings missing");
    let mut failed = Vec::new();
    for (name, data) in &kept {
        let Ok(v) = read_pickle(data) else { continue };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (analyse_snapshot(&v), html_report(&v).is_ok())));
        match outcome {
            Err(_) => failed.push(format!("{name}: panicked")),
            Ok((a, p)) if a.is_ok() != p => failed.push(format!("{name}: analyse {:?}, report ok {p}", a.err())),
            // Three allocations of i64::MAX bytes: the peak is after the third, not a wrapped sum.
            Ok((Ok(r), _)) if name.ends_with("analyse-live-sum-overflow.pickle") && r.peak_at != Some(2) => {
                failed.push(format!("{name}: peak {} at {:?}", r.peak_active_bytes, r.peak_at))
            }
            Ok(_) => {}
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
