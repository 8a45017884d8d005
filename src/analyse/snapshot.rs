//! Analysis of a memory snapshot read from disk (ours or PyTorch's): replay the trace,
//! find the peak of active memory and what was live there, the largest allocations,
//! fragmentation and out-of-memory events. Sizes follow memory_viz's Active Memory
//! Timeline: the requested bytes of each allocation.
use crate::export::pickle::Value;
use crate::export::snapshot::CATEGORIES_KEY;
use serde::Serialize;
use std::collections::HashMap;

#[derive(Clone, Debug, Serialize)]
pub struct Alloc {
    pub addr: u64,
    pub size: u64,
    /// Trace index of the alloc (None: allocated before the trace began).
    pub alloc_at: Option<usize>,
    /// Trace index of the free_requested (None: still live at the end).
    pub free_at: Option<usize>,
    pub category: Option<String>,
    /// "name file:line", innermost first.
    pub frames: Vec<String>,
    pub time_us: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct OomInfo {
    pub at: usize,
    pub requested_segment_bytes: u64,
    pub device_free_bytes: u64,
    pub active_bytes: u64,
    pub last_frames: Vec<String>,
    /// The failing request's own frames (PyTorch records its context on the entry).
    pub frames: Vec<String>,
    pub category: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SnapshotReport {
    pub device: usize,
    pub events: usize,
    pub allocations: usize,
    pub peak_active_bytes: u64,
    /// Trace index at which the peak was reached (None: at the start).
    pub peak_at: Option<usize>,
    pub peak_time_us: Option<i64>,
    pub live_at_peak_by_frame: Vec<(String, u64)>,
    pub live_at_peak_by_category: Vec<(String, u64)>,
    pub largest: Vec<Alloc>,
    pub detail_percent: f64,
    pub reserved_bytes_end: u64,
    pub allocated_bytes_end: u64,
    pub peak_reserved_bytes: u64,
    pub ooms: Vec<OomInfo>,
}

fn frames_of(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_list)
        .map(|fs| {
            fs.iter()
                .map(|f| {
                    let name = f.get("name").and_then(Value::as_str).unwrap_or("?");
                    let file = f.get("filename").and_then(Value::as_str).unwrap_or("?");
                    let line = f.get("line").and_then(Value::as_int).unwrap_or(0);
                    format!("{name} {file}:{line}")
                })
                .collect()
        })
        .unwrap_or_default()
}

fn uint(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_int).map_or(0, |i| i.max(0) as u64)
}

/// The trace of one device replayed into allocations: what `analyse` and the HTML report
/// both start from.
pub struct Replay<'a> {
    pub device: usize,
    pub trace: &'a [Value],
    /// This device's segments (the state at the end of the trace).
    pub segments: Vec<&'a Value>,
    /// Every allocation: traced ones in trace order, then those freed in the trace but
    /// allocated before it, then blocks live at the end that the trace never mentions.
    pub allocs: Vec<Alloc>,
    /// Trace indices of `oom` entries.
    pub ooms_at: Vec<(usize, Option<String>)>,
    /// Reserved and allocated bytes of the final segments.
    pub reserved_end: u64,
    pub allocated_end: u64,
}

impl Replay<'_> {
    /// Active (requested) bytes after each trace entry, and before the first one.
    pub fn active_curve(&self) -> (u64, Vec<u64>) {
        let start: u64 = self.allocs.iter().filter(|a| a.alloc_at.is_none()).map(|a| a.size).sum();
        let mut delta: Vec<i128> = vec![0; self.trace.len()];
        for a in &self.allocs {
            if let Some(i) = a.alloc_at {
                delta[i] += a.size as i128;
            }
            if let Some(i) = a.free_at {
                delta[i] -= a.size as i128;
            }
        }
        let mut cur = start as i128;
        let curve = delta
            .iter()
            .map(|d| {
                cur += d;
                cur.max(0) as u64
            })
            .collect();
        (start, curve)
    }

    /// Reserved bytes before the first trace entry, from the end state backwards.
    pub fn reserved_start(&self) -> u64 {
        let mut reserved = self.reserved_end as i128;
        for e in self.trace.iter().rev() {
            reserved -= segment_delta(e) as i128;
        }
        reserved.max(0) as u64
    }
}

/// How a trace entry changes reserved memory (segment and page actions).
pub fn segment_delta(e: &Value) -> i64 {
    let size = uint(e.get("size")) as i64;
    match e.get("action").and_then(Value::as_str) {
        Some("segment_alloc") | Some("segment_map") => size,
        Some("segment_free") | Some("segment_unmap") => -size,
        _ => 0,
    }
}

/// Replay device `device` (None: the one with the longest trace) into allocations.
pub fn replay(snap: &Value, device: Option<usize>) -> Result<Replay<'_>, String> {
    // A bare list is the legacy segments-only form.
    let (segments, traces) = match snap {
        Value::List(_) => (snap.as_list().unwrap_or(&[]), &[][..]),
        _ => (
            snap.get("segments").and_then(Value::as_list).ok_or("no 'segments' list: not a memory snapshot")?,
            snap.get("device_traces").and_then(Value::as_list).unwrap_or(&[]),
        ),
    };
    let device = match device {
        Some(d) => d,
        None => (0..traces.len()).max_by_key(|&d| traces[d].as_list().map_or(0, <[Value]>::len)).unwrap_or(0),
    };
    let trace: &[Value] = traces.get(device).and_then(Value::as_list).unwrap_or(&[]);
    let seg_dev = |s: &Value| s.get("device").and_then(Value::as_int).unwrap_or(0) as usize;
    let my_segments: Vec<&Value> = segments.iter().filter(|s| seg_dev(s) == device).collect();
    // Categories: vramscope's top-level table (parallel to the trace and to each segment's
    // blocks), or a `category` on the entry itself (`_profile_to_snapshot`'s snapshots,
    // and vramscope's before the table).
    let table = snap.get(CATEGORIES_KEY);
    let list_at = |key: &str| table.and_then(|c| c.get(key)).and_then(Value::as_list).unwrap_or(&[]);
    let trace_cats: &[Value] = list_at("device_traces").get(device).and_then(Value::as_list).unwrap_or(&[]);
    let segment_cats = list_at("segments");
    let category = |own: &Value, cats: &[Value], i: usize| {
        own.get("category").or_else(|| cats.get(i)).and_then(Value::as_str).map(str::to_string)
    };

    // Allocations, including those made before the trace began.
    let mut allocs: Vec<Alloc> = Vec::new();
    let mut live: HashMap<u64, usize> = HashMap::new();
    let mut ooms_at = Vec::new();
    for (i, e) in trace.iter().enumerate() {
        let action = e.get("action").and_then(Value::as_str).ok_or_else(|| format!("trace entry {i} has no action"))?;
        let addr = uint(e.get("addr"));
        let size = uint(e.get("size"));
        match action {
            "alloc" => {
                live.insert(addr, allocs.len());
                allocs.push(Alloc {
                    addr,
                    size,
                    alloc_at: Some(i),
                    free_at: None,
                    category: category(e, trace_cats, i),
                    frames: frames_of(e.get("frames")),
                    time_us: e.get("time_us").and_then(Value::as_int),
                });
            }
            "free_requested" | "free" => match live.remove(&addr) {
                Some(k) => allocs[k].free_at = Some(i),
                None => allocs.push(Alloc {
                    addr,
                    size,
                    alloc_at: None,
                    free_at: Some(i),
                    category: category(e, trace_cats, i),
                    frames: frames_of(e.get("frames")),
                    time_us: None,
                }),
            },
            "oom" => ooms_at.push((i, category(e, trace_cats, i))),
            _ => {}
        }
    }
    let traced: std::collections::HashSet<u64> = live.keys().copied().collect();
    let (mut reserved_end, mut allocated_end) = (0u64, 0u64);
    for (si, s) in segments.iter().enumerate().filter(|(_, s)| seg_dev(s) == device) {
        reserved_end += uint(s.get("total_size"));
        let block_cats = segment_cats.get(si).and_then(Value::as_list).unwrap_or(&[]);
        for (bi, b) in s.get("blocks").and_then(Value::as_list).unwrap_or(&[]).iter().enumerate() {
            let state = b.get("state").and_then(Value::as_str).unwrap_or("");
            if state == "active_allocated" || state == "active_pending_free" {
                allocated_end += uint(b.get("size"));
                let addr = uint(b.get("address"));
                if state == "active_allocated" && !traced.contains(&addr) && addr != 0 {
                    allocs.push(Alloc {
                        addr,
                        size: uint(b.get("requested_size")),
                        alloc_at: None,
                        free_at: None,
                        category: category(b, block_cats, bi),
                        frames: frames_of(b.get("frames")),
                        time_us: None,
                    });
                }
            }
        }
    }
    Ok(Replay { device, trace, segments: my_segments, allocs, ooms_at, reserved_end, allocated_end })
}

/// Analyse device `device` (None: the one with the longest trace). `detail` keeps the
/// largest `detail` percent of allocations (by count) in `largest`, as memory_viz's slider.
pub fn analyse(snap: &Value, device: Option<usize>, detail: f64, top: usize) -> Result<SnapshotReport, String> {
    Ok(analyse_replay(&replay(snap, device)?, detail, top))
}

/// `analyse` of an existing replay.
pub fn analyse_replay(r: &Replay<'_>, detail: f64, top: usize) -> SnapshotReport {
    let Replay { device, trace, allocs, ooms_at, reserved_end, allocated_end, .. } = r;
    // The active-memory curve and its peak.
    let (start, active_at) = r.active_curve();
    let (mut peak, mut peak_at) = (start, None);
    for (i, &cur) in active_at.iter().enumerate() {
        if cur > peak {
            peak = cur;
            peak_at = Some(i);
        }
    }
    let live_at = |a: &Alloc, t: Option<usize>| -> bool {
        let born = match (a.alloc_at, t) {
            (None, _) => true,
            (Some(i), Some(t)) => i <= t,
            (Some(_), None) => false,
        };
        let dead = match (a.free_at, t) {
            (Some(f), Some(t)) => f <= t,
            _ => false,
        };
        born && !dead
    };
    let mut by_frame: HashMap<String, u64> = HashMap::new();
    let mut by_cat: HashMap<String, u64> = HashMap::new();
    for a in allocs.iter().filter(|a| live_at(a, peak_at)) {
        *by_frame.entry(a.frames.first().cloned().unwrap_or_else(|| "<no frames>".into())).or_default() += a.size;
        *by_cat.entry(a.category.clone().unwrap_or_else(|| "<uncategorised>".into())).or_default() += a.size;
    }
    let sorted = |m: HashMap<String, u64>| {
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| super::natural_cmp(&a.0, &b.0)));
        v
    };
    // Sort indices, not the allocations: only the kept ones are cloned.
    let mut order: Vec<usize> = (0..allocs.len()).collect();
    order.sort_by(|&a, &b| allocs[b].size.cmp(&allocs[a].size).then(allocs[a].alloc_at.cmp(&allocs[b].alloc_at)));
    let keep = ((allocs.len() as f64 * detail / 100.0).ceil() as usize).min(allocs.len());
    let largest: Vec<Alloc> = order.iter().take(keep.min(top)).map(|&i| allocs[i].clone()).collect();
    // Reserved memory over the trace, from the end state backwards.
    let mut reserved = *reserved_end as i128;
    let mut peak_reserved = reserved;
    for e in trace.iter().rev() {
        reserved -= segment_delta(e) as i128;
        peak_reserved = peak_reserved.max(reserved);
    }
    let ooms = ooms_at
        .iter()
        .map(|(i, category)| {
            let (i, e) = (*i, &trace[*i]);
            let last = allocs.iter().filter(|a| a.alloc_at.is_some_and(|k| k < i)).max_by_key(|a| a.alloc_at);
            OomInfo {
                at: i,
                requested_segment_bytes: uint(e.get("size")),
                device_free_bytes: uint(e.get("device_free")),
                active_bytes: if i > 0 { active_at[i - 1] } else { start },
                last_frames: last.map(|a| a.frames.clone()).unwrap_or_default(),
                frames: frames_of(e.get("frames")),
                category: category.clone(),
            }
        })
        .collect();
    SnapshotReport {
        device: *device,
        events: trace.len(),
        allocations: allocs.iter().filter(|a| a.alloc_at.is_some()).count(),
        peak_active_bytes: peak,
        peak_at,
        peak_time_us: peak_at.and_then(|i| trace[i].get("time_us").and_then(Value::as_int)),
        live_at_peak_by_frame: sorted(by_frame),
        live_at_peak_by_category: sorted(by_cat),
        largest,
        detail_percent: detail,
        reserved_bytes_end: *reserved_end,
        allocated_bytes_end: *allocated_end,
        peak_reserved_bytes: peak_reserved.max(0) as u64,
        ooms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: i64 = 1 << 40;

    fn entry(action: &str, offset: i64, size: i64, category: Option<&str>) -> Value {
        let mut items = vec![("action", Value::str(action)), ("addr", Value::Int(BASE + offset)), ("size", Value::Int(size))];
        items.extend(category.map(|c| ("category", Value::str(c))));
        Value::dict(items)
    }

    fn segment(blocks: Vec<Value>) -> Value {
        let total = Value::Int(1024 * blocks.len() as i64);
        Value::dict(vec![("device", Value::Int(0)), ("address", Value::Int(BASE)), ("total_size", total), ("blocks", Value::list(blocks))])
    }

    fn block(offset: i64, state: &str) -> Value {
        Value::dict(vec![("address", Value::Int(BASE + offset)), ("size", Value::Int(1024)), ("requested_size", Value::Int(1000)), ("state", Value::str(state))])
    }

    /// vramscope's table (parallel to the trace and to the blocks) names the categories of
    /// traced and pre-existing allocations alike.
    #[test]
    fn categories_come_from_the_top_level_table() {
        let snap = Value::dict(vec![
            ("segments", Value::list(vec![segment(vec![block(0, "active_allocated"), block(1024, "active_allocated"), block(2048, "inactive")])])),
            ("device_traces", Value::list(vec![Value::list(vec![entry("segment_alloc", 0, 3072, None), entry("alloc", 1024, 1000, None)])])),
            (
                CATEGORIES_KEY,
                Value::dict(vec![
                    ("device_traces", Value::list(vec![Value::list(vec![Value::None, Value::str("activation")])])),
                    ("segments", Value::list(vec![Value::list(vec![Value::str("parameter"), Value::str("activation"), Value::None])])),
                ]),
            ),
        ]);
        let r = analyse(&snap, None, 100.0, 10).unwrap();
        assert_eq!(r.live_at_peak_by_category, vec![("activation".to_string(), 1000), ("parameter".to_string(), 1000)]);
    }

    /// Without the table, a `category` on the entry itself counts (`_profile_to_snapshot`'s
    /// snapshots, vramscope's older ones); PyTorch's `_snapshot()` has neither.
    #[test]
    fn categories_on_the_entries_still_count() {
        let snap = Value::dict(vec![
            ("segments", Value::list(vec![segment(vec![block(0, "active_allocated"), block(1024, "inactive")])])),
            ("device_traces", Value::list(vec![Value::list(vec![entry("alloc", 0, 1000, Some("gradient"))])])),
        ]);
        assert_eq!(analyse(&snap, None, 100.0, 10).unwrap().live_at_peak_by_category, vec![("gradient".to_string(), 1000)]);
        let plain = Value::dict(vec![
            ("segments", Value::list(vec![segment(vec![block(0, "active_allocated"), block(1024, "inactive")])])),
            ("device_traces", Value::list(vec![Value::list(vec![entry("alloc", 0, 1000, None)])])),
        ]);
        assert_eq!(analyse(&plain, None, 100.0, 10).unwrap().live_at_peak_by_category, vec![("<uncategorised>".to_string(), 1000)]);
    }
}
