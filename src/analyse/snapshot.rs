//! Analysis of a memory snapshot read from disk (ours or PyTorch's): replay the trace,
//! find the peak of active memory and what was live there, the largest allocations,
//! fragmentation and out-of-memory events. Sizes follow memory_viz's Active Memory
//! Timeline: the requested bytes of each allocation.
//!
//! The replay is memory_viz's (`annotate_snapshot` in MemoryViz.js, then
//! `process_alloc_data` in process_alloc_data.js), rule for rule:
//! - a block is freed by `free_completed` (or the legacy `free`), never by `free_requested`:
//!   a `free_requested` directly followed by the `free_completed` of the same address is one
//!   free at the request, any other `free_requested` changes nothing (the block stays active
//!   until its `free_completed`, or to the end when none comes);
//! - a free whose address has no live alloc in the trace is a block live from the start;
//! - allocs and frees are matched by address, an absent (or None) address being one shared
//!   key, as JavaScript's `undefined`; an alloc at an address still live replaces it (the
//!   earlier one is never freed);
//! - `active_allocated` blocks of the final segments that no live alloc covers are live from
//!   the start; a block's address is its segment's `address` plus the sizes of the blocks
//!   before it (its own `address` field is not read), its size `requested_size`, or, when
//!   the block has no `frames` and `requested_size` is absent or 0, `history[0].real_size`
//!   or `size` (the legacy format);
//! - segments count for the device their `device` names (none: no device);
//! - `segment_*`, `oom` and `snapshot` entries, and actions memory_viz does not know
//!   (`free_deferred`, `realloc`, …), leave active memory alone; the unknown ones are
//!   counted and reported ([`Replay::unknown_actions`]);
//! - the device shown by default is the first with the longest trace among those with a
//!   trace or segments (a snapshot without `device_traces`: the first device with segments).
//!
//! A snapshot is untrusted input: every entry is read once into a compact [`Entry`]
//! (fields of a dict shared by many entries are looked up once), frames are interned by
//! address ([`FrameTable`]), each stage is linear or n log n in the entries, and numbers
//! are checked: a negative size or address, or a size, time or total beyond 2^53 (what the
//! HTML page's numbers hold exactly), is refused with the field named.
use super::budget::Budget;
use super::frames::{FrameTable, Frames, NO_FRAMES};
use crate::pickle::condense::{Condensed, TraceRecord};
use crate::pickle::Value;
use serde::Serialize;
use std::collections::HashMap;
use std::rc::Rc;

/// The top-level key under which vramscope's snapshots carry each block's category
/// (export::snapshot writes it; PyTorch's own snapshots have none).
pub const CATEGORIES_KEY: &str = "vramscope_categories";

/// Largest size, total or |time| accepted: JavaScript numbers are exact up to 2^53, and
/// no device has 8 PiB.
pub const EXACT: u64 = 1 << 53;

/// An allocation of a report, its frames formatted only when shown.
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
    pub frames: Frames,
    pub time_us: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct OomInfo {
    pub at: usize,
    pub requested_segment_bytes: u64,
    pub device_free_bytes: u64,
    pub active_bytes: u64,
    pub last_frames: Frames,
    /// The failing request's own frames (PyTorch records its context on the entry).
    pub frames: Frames,
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
    /// Trace actions memory_viz does not know, with their counts (both ignore them).
    pub unknown_actions: Vec<(String, usize)>,
}

/// What a trace entry does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Alloc,
    /// `free_completed`, `free`, or a `free_requested` directly followed by the
    /// `free_completed` of its address.
    Free,
    /// A `free_requested` whose `free_completed` comes later (or never): the block stays
    /// active.
    FreeRequested,
    /// A `free_completed` merged into the `free_requested` before it.
    FreeMerged,
    Oom,
    /// `segment_alloc` or `segment_map`: reserved memory grows by the size.
    SegmentGrow,
    /// `segment_free` or `segment_unmap`.
    SegmentShrink,
    Other,
}

/// One trace entry, read once.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub action: Action,
    /// The address (None: absent or not an int, one key for all such entries as in
    /// memory_viz).
    pub addr: Option<u64>,
    pub size: u64,
    pub time_us: Option<i64>,
    pub device_free: u64,
    /// Frame list id in the replay's [`FrameTable`].
    pub frames: u32,
    /// Category id in [`Replay::categories`].
    pub category: Option<u32>,
}

impl Entry {
    /// How the entry changes reserved memory.
    pub fn segment_delta(&self) -> i128 {
        match self.action {
            Action::SegmentGrow => self.size as i128,
            Action::SegmentShrink => -(self.size as i128),
            _ => 0,
        }
    }
}

/// An allocation of the replay.
#[derive(Clone, Copy, Debug)]
pub struct Allocation {
    pub addr: u64,
    pub size: u64,
    /// Trace index of the alloc (None: allocated before the trace began).
    pub alloc_at: Option<usize>,
    /// Trace index of the free_requested (None: still live at the end).
    pub free_at: Option<usize>,
    pub category: Option<u32>,
    pub frames: u32,
    pub time_us: Option<i64>,
}

/// The trace of one device replayed into allocations: what `analyse` and the HTML report
/// both start from.
pub struct Replay {
    pub device: usize,
    pub entries: Vec<Entry>,
    /// This device's segments at the end of the trace.
    pub segments: usize,
    /// Every allocation: traced ones in trace order, then those freed in the trace but
    /// allocated before it, then blocks live at the end that the trace never mentions.
    pub allocs: Vec<Allocation>,
    /// Trace indices of `oom` entries.
    pub ooms_at: Vec<usize>,
    /// Reserved and allocated bytes of the final segments.
    pub reserved_end: u64,
    pub allocated_end: u64,
    pub frames: Rc<FrameTable>,
    pub categories: Vec<Rc<str>>,
    /// The allocator's rounding divisions from `allocator_settings` (none: all 0).
    pub divisions: [usize; 16],
    /// Actions memory_viz does not know and ignores, with their counts, in first-seen order.
    pub unknown_actions: Vec<(String, usize)>,
}

/// Reads fields of dicts in one pass; a dict that several places share is read once.
struct Picker<'a, const N: usize> {
    keys: [&'static str; N],
    cache: HashMap<usize, [Option<&'a Value>; N]>,
}

impl<'a, const N: usize> Picker<'a, N> {
    fn new(keys: [&'static str; N]) -> Self {
        Picker { keys, cache: HashMap::new() }
    }

    /// The values under `keys` (the last of repeated keys, as in a Python dict).
    fn pick(&mut self, v: &'a Value) -> [Option<&'a Value>; N] {
        let Value::Dict(d) = v else { return [None; N] };
        let (ptr, shared) = (Rc::as_ptr(d) as usize, Rc::strong_count(d) > 1);
        if shared {
            if let Some(r) = self.cache.get(&ptr) {
                return *r;
            }
        }
        let mut out = [None; N];
        for (k, x) in d.iter() {
            if let Some(j) = k.as_str().and_then(|k| self.keys.iter().position(|q| *q == k)) {
                out[j] = Some(x);
            }
        }
        if shared {
            self.cache.insert(ptr, out);
        }
        out
    }
}

/// A byte count or size: missing or not an int reads as 0 (as before); negative or
/// beyond [`EXACT`] is refused.
fn bytes(v: Option<&Value>, path: &dyn Fn() -> String) -> Result<u64, String> {
    int_bytes(v.and_then(Value::as_int), path)
}

/// [`bytes`] of a value already known to be an int (Some) or not (None).
fn int_bytes(v: Option<i64>, path: &dyn Fn() -> String) -> Result<u64, String> {
    match v {
        Some(i) if i < 0 => Err(format!("{}: {i} is negative", path())),
        Some(i) if i as u64 > EXACT => Err(format!("{}: {i} is beyond 2^53 (8 PiB), more than any device holds or the report can show exactly", path())),
        Some(i) => Ok(i as u64),
        None => Ok(0),
    }
}

/// An address; absent or not an int is None (memory_viz's `undefined`).
fn address(v: Option<&Value>, path: &dyn Fn() -> String) -> Result<Option<u64>, String> {
    int_address(v.and_then(Value::as_int), path)
}

fn int_address(v: Option<i64>, path: &dyn Fn() -> String) -> Result<Option<u64>, String> {
    match v {
        Some(i) if i < 0 => Err(format!("{}: {i} is negative", path())),
        Some(i) => Ok(Some(i as u64)),
        None => Ok(None),
    }
}

/// The actions memory_viz knows (`annotate_snapshot`, `process_alloc_data`, the segment
/// view's replay).
const KNOWN_ACTIONS: [&str; 10] =
    ["alloc", "free", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "snapshot", "oom"];

/// The device memory_viz shows first: among the devices of `device_traces` with a trace or
/// segments, the first with the longest trace (none: 0, where the viewer shows nothing);
/// without `device_traces` (`traces` None), the first device with segments.
fn default_device(traces: Option<&[usize]>, segment_devices: &[i64]) -> usize {
    let Some(traces) = traces else {
        return segment_devices.iter().filter_map(|&d| usize::try_from(d).ok()).min().unwrap_or(0);
    };
    let mut best: Option<(usize, usize)> = None;
    for (d, &len) in traces.iter().enumerate() {
        if (len > 0 || segment_devices.contains(&(d as i64))) && best.is_none_or(|(_, l)| len > l) {
            best = Some((d, len));
        }
    }
    best.map_or(0, |b| b.0)
}

fn time(v: Option<i64>, path: &dyn Fn() -> String) -> Result<Option<i64>, String> {
    match v {
        Some(t) if t.unsigned_abs() > EXACT => Err(format!("{}: {t} is beyond ±2^53 µs, more than the report can show exactly", path())),
        t => Ok(t),
    }
}

/// A total as u64, refused beyond [`EXACT`].
fn exact(v: i128, what: &dyn Fn() -> String) -> Result<u64, String> {
    if v > EXACT as i128 {
        return Err(format!("{} is {v} bytes, beyond 2^53 (8 PiB): sizes in the snapshot are out of range", what()));
    }
    Ok(v.max(0) as u64)
}

/// Category strings, interned by address, then by text.
#[derive(Default)]
struct Categories {
    names: Vec<Rc<str>>,
    by_ptr: HashMap<usize, u32>,
    by_text: HashMap<Rc<str>, u32>,
}

impl Categories {
    fn id(&mut self, v: Option<&Value>) -> Option<u32> {
        let Some(Value::Str(s)) = v else { return None };
        let ptr = Rc::as_ptr(s) as *const u8 as usize;
        if let Some(&i) = self.by_ptr.get(&ptr) {
            return Some(i);
        }
        let i = match self.by_text.get(s) {
            Some(&i) => i,
            None => {
                self.names.push(s.clone());
                self.by_text.insert(s.clone(), self.names.len() as u32 - 1);
                self.names.len() as u32 - 1
            }
        };
        self.by_ptr.insert(ptr, i);
        Some(i)
    }
}

/// The parts of a snapshot a replay reads.
struct Parts<'a> {
    segments: &'a [Value],
    /// The trace of `device`.
    trace: &'a [Value],
    device: usize,
}

/// The snapshot's segments and the trace of `device` (None: memory_viz's default).
fn parts(snap: &Value, device: Option<usize>) -> Result<Parts<'_>, String> {
    parts_counted(snap, device, &|_, t| t.as_list().map_or(0, <[Value]>::len))
}

/// [`parts`], with the length of each trace (its index, its value) from `len`.
fn parts_counted<'a>(snap: &'a Value, device: Option<usize>, len: &dyn Fn(usize, &Value) -> usize) -> Result<Parts<'a>, String> {
    // A bare list is the legacy segments-only form.
    let (segments, traces) = match snap {
        Value::List(_) => (snap.as_list().unwrap_or(&[]), None),
        _ => (
            snap.get("segments").and_then(Value::as_list).ok_or("no 'segments' list: not a memory snapshot")?,
            snap.get("device_traces").and_then(Value::as_list),
        ),
    };
    let device = match device {
        Some(d) => d,
        None => {
            let devs: Vec<i64> = segments.iter().filter_map(|s| s.get("device").and_then(Value::as_int)).collect();
            let lens: Option<Vec<usize>> = traces.map(|t| t.iter().enumerate().map(|(d, v)| len(d, v)).collect());
            default_device(lens.as_deref(), &devs)
        }
    };
    let trace = traces.and_then(|t| t.get(device)).and_then(Value::as_list).unwrap_or(&[]);
    Ok(Parts { segments, trace, device })
}

/// The trace actions of `device` (None: memory_viz's default) that memory_viz does not
/// know, with their counts in first-seen order: both it and the replay ignore them, and
/// `analyze` and `view` say so.
pub fn unknown_actions(snap: &Value, device: Option<usize>) -> Result<Vec<(String, usize)>, String> {
    let trace = parts(snap, device)?.trace;
    let mut out: Vec<(String, usize)> = Vec::new();
    for e in trace {
        if let Some(name) = e.get("action").and_then(Value::as_str).filter(|a| !KNOWN_ACTIONS.contains(a)) {
            match out.iter_mut().find(|(n, _)| n == name) {
                Some((_, c)) => *c += 1,
                None => out.push((name.to_string(), 1)),
            }
        }
    }
    Ok(out)
}

/// The device memory_viz shows first (0 for what is no snapshot).
pub fn default_device_of(snap: &Value) -> usize {
    parts(snap, None).map_or(0, |p| p.device)
}

/// Replay device `device` (None: the one memory_viz shows first) into allocations.
pub fn replay(snap: &Value, device: Option<usize>, budget: &Budget) -> Result<Replay, String> {
    replay_from(snap, device, budget, None)
}

/// [`replay`] of a snapshot the streaming reader condensed: the same replay, its trace
/// entries taken from the records (each chunk let go once read).
pub fn replay_condensed(c: Condensed, device: Option<usize>, budget: &Budget) -> Result<Replay, String> {
    let Condensed { rest, traces, frames, actions, categories, .. } = c;
    replay_from(&rest, device, budget, Some(Records { traces, frames, actions, categories }))
}

/// The trace entries of a condensed snapshot.
struct Records {
    traces: Vec<Option<Vec<Vec<TraceRecord>>>>,
    frames: FrameTable,
    actions: Vec<Rc<str>>,
    categories: Vec<Rc<str>>,
}

/// The fields of a trace entry the replay reads: numbers as an int (Some) or anything else.
struct Fields<'a> {
    action: Option<&'a str>,
    addr: Option<i64>,
    size: Option<i64>,
    time_us: Option<i64>,
    device_free: Option<i64>,
}

/// Append trace entry `i` of `device` to `entries` (checking its fields in the order the
/// replay always has), counting actions memory_viz does not know in `unknown`.
fn add_entry(
    entries: &mut Vec<Entry>,
    unknown: &mut Vec<(String, usize)>,
    device: usize,
    i: usize,
    f: Fields<'_>,
    frames: &mut dyn FnMut() -> Result<u32, String>,
    category: &mut dyn FnMut() -> Option<u32>,
) -> Result<(), String> {
    let at = |f: &'static str| move || format!("device_traces[{device}][{i}].{f}");
    let addr = int_address(f.addr, &at("addr"))?;
    let name = f.action.ok_or_else(|| format!("trace entry {i} has no action"))?;
    let action = match name {
        "alloc" => Action::Alloc,
        "free" => Action::Free,
        "free_requested" => Action::FreeRequested,
        "free_completed" => match entries.last_mut() {
            // memory_viz elides the pair into one free at the request.
            Some(prev) if prev.action == Action::FreeRequested && prev.addr == addr => {
                prev.action = Action::Free;
                Action::FreeMerged
            }
            _ => Action::Free,
        },
        "oom" => Action::Oom,
        "segment_alloc" | "segment_map" => Action::SegmentGrow,
        "segment_free" | "segment_unmap" => Action::SegmentShrink,
        _ => Action::Other,
    };
    if !KNOWN_ACTIONS.contains(&name) {
        match unknown.iter_mut().find(|(n, _)| n == name) {
            Some((_, c)) => *c += 1,
            None => unknown.push((name.to_string(), 1)),
        }
    }
    entries.push(Entry {
        action,
        addr,
        size: int_bytes(f.size, &at("size"))?,
        time_us: time(f.time_us, &at("time_us"))?,
        device_free: int_bytes(f.device_free, &at("device_free"))?,
        frames: frames().map_err(|m| format!("device_traces[{device}][{i}].frames: {m}"))?,
        category: category(),
    });
    Ok(())
}

fn replay_from(snap: &Value, device: Option<usize>, budget: &Budget, records: Option<Records>) -> Result<Replay, String> {
    let Parts { segments, trace, device } = match &records {
        None => parts(snap, device)?,
        Some(r) => parts_counted(snap, device, &|d, v| match r.traces.get(d) {
            Some(Some(chunks)) => chunks.iter().map(Vec::len).sum(),
            _ => v.as_list().map_or(0, <[Value]>::len),
        })?,
    };
    let (mut records, mut frames) = match records {
        Some(r) => (Some((r.traces.into_iter().nth(device).flatten(), r.actions, r.categories)), r.frames),
        None => (None, FrameTable::new(budget.frames)),
    };
    let mut seen = match &records {
        Some((Some(chunks), ..)) => chunks.iter().map(Vec::len).sum(),
        _ => trace.len(),
    };
    let over = |n: usize| -> Result<(), String> {
        if n > budget.trace_entries {
            return Err(format!(
                "device {device}: more than {} trace entries and segment blocks (budget --max-trace-entries)",
                budget.trace_entries
            ));
        }
        Ok(())
    };
    over(seen)?;
    // A key present (`pick` gives Some) decides even when its value is no string.
    // Categories: vramscope's top-level table (parallel to the trace and to each segment's
    // blocks), or a `category` on the entry itself (`_profile_to_snapshot`'s snapshots,
    // and vramscope's before the table).
    let table = snap.get(CATEGORIES_KEY);
    let list_at = |key: &str| table.and_then(|c| c.get(key)).and_then(Value::as_list).unwrap_or(&[]);
    let trace_cats: &[Value] = list_at("device_traces").get(device).and_then(Value::as_list).unwrap_or(&[]);
    let segment_cats = list_at("segments");
    let mut cats = Categories::default();
    let mut category = |own: Option<Option<&Value>>, table: &[Value], i: usize| match own {
        Some(c) => cats.id(c),
        None => cats.id(table.get(i)),
    };
    let mut entries: Vec<Entry> = Vec::with_capacity(seen);
    let mut unknown: Vec<(String, usize)> = Vec::new();
    if let Some((chunks, actions, names)) = records.take() {
        let mut i = 0;
        for chunk in chunks.into_iter().flatten() {
            for r in chunk {
                use crate::pickle::condense::{ADDR, CATEGORY_NOT_STR, DEVICE_FREE, NO_ACTION, NO_CATEGORY_KEY, SIZE, TIME};
                let f = Fields {
                    action: (r.action != NO_ACTION).then(|| &*actions[r.action as usize]),
                    addr: r.int(ADDR, r.addr),
                    size: r.int(SIZE, r.size),
                    time_us: r.int(TIME, r.time_us),
                    device_free: r.int(DEVICE_FREE, r.device_free),
                };
                let own = match r.category {
                    NO_CATEGORY_KEY => None,
                    CATEGORY_NOT_STR => Some(None),
                    c => Some(Some(Value::Str(names[c as usize].clone()))),
                };
                add_entry(&mut entries, &mut unknown, device, i, f, &mut || Ok(r.frames), &mut || category(own.as_ref().map(Option::as_ref), trace_cats, i))?;
                i += 1;
            }
        }
    }
    let mut pick = Picker::new(["action", "addr", "size", "time_us", "device_free", "frames", "category"]);
    for (i, e) in trace.iter().enumerate() {
        let [action, addr, size, time_us, device_free, fr, cat] = pick.pick(e);
        let f = Fields {
            action: action.and_then(Value::as_str),
            addr: addr.and_then(Value::as_int),
            size: size.and_then(Value::as_int),
            time_us: time_us.and_then(Value::as_int),
            device_free: device_free.and_then(Value::as_int),
        };
        add_entry(&mut entries, &mut unknown, device, i, f, &mut || frames.list_id(fr), &mut || category(cat.map(Some), trace_cats, i))?;
    }

    // Allocations, including those made before the trace began.
    let mut allocs: Vec<Allocation> = Vec::new();
    let mut live: super::fast_hash::HashMap<Option<u64>, usize> = super::fast_hash::map();
    let mut ooms_at = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let a = Allocation { addr: e.addr.unwrap_or(0), size: e.size, alloc_at: None, free_at: None, category: e.category, frames: e.frames, time_us: None };
        match e.action {
            Action::Alloc => {
                live.insert(e.addr, allocs.len());
                allocs.push(Allocation { alloc_at: Some(i), time_us: e.time_us, ..a });
            }
            Action::Free => match live.remove(&e.addr) {
                Some(k) => allocs[k].free_at = Some(i),
                None => allocs.push(Allocation { free_at: Some(i), ..a }),
            },
            Action::Oom => ooms_at.push(i),
            _ => {}
        }
    }
    let mut seg = Picker::new(["device", "total_size", "blocks", "address"]);
    let mut blk = Picker::new(["state", "size", "requested_size", "frames", "category", "history"]);
    let (mut reserved_end, mut allocated_end, mut my_segments) = (0i128, 0i128, 0);
    for (si, s) in segments.iter().enumerate() {
        let [dev, total, blocks, seg_addr] = seg.pick(s);
        if dev.and_then(Value::as_int).and_then(|d| usize::try_from(d).ok()) != Some(device) {
            continue;
        }
        my_segments += 1;
        reserved_end += bytes(total, &|| format!("segments[{si}].total_size"))? as i128;
        let block_cats = segment_cats.get(si).and_then(Value::as_list).unwrap_or(&[]);
        let blocks = blocks.and_then(Value::as_list).unwrap_or(&[]);
        seen = seen.saturating_add(blocks.len());
        over(seen)?;
        // memory_viz's block address: the segment's, plus the sizes of the blocks before
        // (None inside: absent, shared with address-less allocs; None outside: NaN, no key).
        let mut run: Option<Option<u64>> = Some(address(seg_addr, &|| format!("segments[{si}].address"))?);
        for (bi, b) in blocks.iter().enumerate() {
            let [state, size, requested, fr, cat, history] = blk.pick(b);
            let state = state.and_then(Value::as_str).unwrap_or("");
            let at = |f: &'static str| move || format!("segments[{si}].blocks[{bi}].{f}");
            let key = run;
            run = match (run, size) {
                (Some(Some(a)), Some(Value::Int(n))) if *n >= 0 => (*n as u64).checked_add(a).map(Some),
                _ => None,
            };
            if state == "active_allocated" || state == "active_pending_free" {
                allocated_end += bytes(size, &at("size"))? as i128;
                if state == "active_allocated" && !key.is_some_and(|k| live.contains_key(&k)) {
                    let first = history.and_then(Value::as_list).and_then(<[Value]>::first);
                    let (size, fr) = match (fr, requested) {
                        // The legacy format's fallbacks, when the block has no frames.
                        (None, Some(Value::Int(0)) | None) => match first {
                            Some(h) => (h.get("real_size").or(size), h.get("frames")),
                            None => (size, None),
                        },
                        (None, r) => (r, first.and_then(|h| h.get("frames"))),
                        // memory_viz would add `undefined` (NaN) for an absent
                        // requested_size; the block's size is the nearest meaning.
                        (Some(f), r) => (r.or(size), Some(f)),
                    };
                    allocs.push(Allocation {
                        addr: key.flatten().unwrap_or(0),
                        size: bytes(size, &at("requested_size"))?,
                        alloc_at: None,
                        free_at: None,
                        category: category(cat.map(Some), block_cats, bi),
                        frames: frames.list_id(fr).map_err(|m| format!("segments[{si}].blocks[{bi}].frames: {m}"))?,
                        time_us: None,
                    });
                }
            }
        }
    }
    Ok(Replay {
        device,
        entries,
        segments: my_segments,
        allocs,
        ooms_at,
        reserved_end: exact(reserved_end, &|| "reserved memory at the end (sum of the segments' total_size)".into())?,
        allocated_end: exact(allocated_end, &|| "allocated memory at the end (sum of the active blocks' size)".into())?,
        frames: Rc::new(frames),
        categories: cats.names,
        divisions: match snap {
            Value::Dict(_) => divisions(snap.get("allocator_settings"))?,
            _ => [0; 16],
        },
        unknown_actions: unknown,
    })
}

/// The allocator's rounding divisions from `allocator_settings` (keys "1", "2", … "32768"),
/// each 0 or a power of two as PyTorch requires.
pub fn divisions(settings: Option<&Value>) -> Result<[usize; 16], String> {
    let mut d = [0usize; 16];
    if let Some(Value::Dict(items)) = settings.and_then(|s| s.get("roundup_power2_divisions")) {
        for (k, v) in items.iter() {
            let key: Option<u64> = k.as_str().and_then(|s| s.parse().ok()).or(k.as_int().and_then(|i| u64::try_from(i).ok()));
            if let (Some(key), Some(v)) = (key, v.as_int()) {
                if key.is_power_of_two() && key.trailing_zeros() < 16 {
                    if v < 0 || (v != 0 && !(v as u64).is_power_of_two()) {
                        return Err(format!("allocator_settings.roundup_power2_divisions[{k}]: {v} is not 0 or a power of two"));
                    }
                    d[key.trailing_zeros() as usize] = usize::try_from(v).unwrap_or(usize::MAX);
                }
            }
        }
    }
    Ok(d)
}


impl Replay {
    /// Active (requested) bytes after each trace entry, and before the first one.
    pub fn active_curve(&self) -> Result<(u64, Vec<u64>), String> {
        let start: i128 = self.allocs.iter().filter(|a| a.alloc_at.is_none()).map(|a| a.size as i128).sum();
        let start = exact(start, &|| "active memory before the trace".into())?;
        let mut delta: Vec<i128> = vec![0; self.entries.len()];
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
            .enumerate()
            .map(|(i, d)| {
                cur += d;
                exact(cur, &|| format!("active memory after device_traces[{}][{i}]", self.device))
            })
            .collect::<Result<_, _>>()?;
        Ok((start, curve))
    }

    /// Reserved bytes before the first trace entry, from the end state backwards, and the
    /// largest reserved total over the trace.
    pub fn reserved_start_and_peak(&self) -> Result<(u64, u64), String> {
        let mut reserved = self.reserved_end as i128;
        let mut peak = reserved;
        for e in self.entries.iter().rev() {
            reserved -= e.segment_delta();
            peak = peak.max(reserved);
        }
        Ok((reserved.max(0) as u64, exact(peak, &|| "peak reserved memory".into())?))
    }

    pub fn category(&self, id: Option<u32>) -> Option<&str> {
        id.map(|c| &*self.categories[c as usize])
    }

    fn frames(&self, list: u32) -> Frames {
        Frames { table: self.frames.clone(), list }
    }

    fn report_alloc(&self, a: &Allocation) -> Alloc {
        Alloc {
            addr: a.addr,
            size: a.size,
            alloc_at: a.alloc_at,
            free_at: a.free_at,
            category: self.category(a.category).map(str::to_string),
            frames: self.frames(a.frames),
            time_us: a.time_us,
        }
    }
}

/// Analyse device `device` (None: the one with the longest trace) within the default
/// budget. `detail` keeps the largest `detail` percent of allocations (by count) in
/// `largest`, as memory_viz's slider.
pub fn analyse(snap: &Value, device: Option<usize>, detail: f64, top: usize) -> Result<SnapshotReport, String> {
    analyse_within(snap, device, detail, top, &Budget::default())
}

/// `analyse` within `budget`.
pub fn analyse_within(snap: &Value, device: Option<usize>, detail: f64, top: usize, budget: &Budget) -> Result<SnapshotReport, String> {
    analyse_replay(&replay(snap, device, budget)?, detail, top)
}

/// Whether allocation `a` is live after trace entry `t` (None: before the first).
fn live_at(a: &Allocation, t: Option<usize>) -> bool {
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
}

/// `analyse` of an existing replay.
pub fn analyse_replay(r: &Replay, detail: f64, top: usize) -> Result<SnapshotReport, String> {
    let Replay { device, entries, allocs, ooms_at, reserved_end, allocated_end, .. } = r;
    // The active-memory curve and its peak.
    let (start, active_at) = r.active_curve()?;
    let (mut peak, mut peak_at) = (start, None);
    for (i, &cur) in active_at.iter().enumerate() {
        if cur > peak {
            peak = cur;
            peak_at = Some(i);
        }
    }
    // Group by first frame id and category id; format only the groups.
    let mut by_frame: HashMap<Option<u32>, u64> = HashMap::new();
    let mut by_cat: HashMap<Option<u32>, u64> = HashMap::new();
    for a in allocs.iter().filter(|a| live_at(a, peak_at)) {
        // Each sum is at most the peak (≤ 2^53): no overflow.
        *by_frame.entry(r.frames.list(a.frames).first().copied()).or_default() += a.size;
        *by_cat.entry(a.category).or_default() += a.size;
    }
    let sorted = |v: Vec<(String, u64)>| {
        let mut v = v;
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| super::natural_cmp(&a.0, &b.0)));
        v
    };
    // Frames equal in text are one group, whichever dict they come from.
    let mut by_text: HashMap<String, u64> = HashMap::new();
    for (f, b) in by_frame {
        // One line of model code is one group across its layers.
        let text = f.map_or_else(|| "<no frames>".into(), |f| super::frames::fold_layer_index(&r.frames.format(f)).into_owned());
        *by_text.entry(text).or_default() += b;
    }
    let by_frame = by_text.into_iter().collect();
    let by_cat = by_cat.into_iter().map(|(c, b)| (r.category(c).unwrap_or("<uncategorised>").to_string(), b)).collect();
    // Sort indices, not the allocations: only the kept ones are turned into report rows.
    // Largest first, earlier first among equals, then trace order (what a stable sort by the
    // first two keys gives): only the rows shown are selected and sorted.
    let keep = ((allocs.len() as f64 * detail / 100.0).ceil() as usize).min(allocs.len()).min(top);
    let by_size = |&a: &usize, &b: &usize| allocs[b].size.cmp(&allocs[a].size).then(allocs[a].alloc_at.cmp(&allocs[b].alloc_at)).then(a.cmp(&b));
    let mut order: Vec<usize> = (0..allocs.len()).collect();
    if keep < order.len() {
        if keep > 0 {
            order.select_nth_unstable_by(keep - 1, by_size);
        }
        order.truncate(keep);
    }
    order.sort_unstable_by(by_size);
    let largest: Vec<Alloc> = order.iter().map(|&i| r.report_alloc(&allocs[i])).collect();
    let (_, peak_reserved) = r.reserved_start_and_peak()?;
    // The allocation before each OOM: traced allocations are in trace order, so a binary
    // search finds it.
    let traced: Vec<(usize, usize)> = allocs.iter().enumerate().filter_map(|(k, a)| a.alloc_at.map(|i| (i, k))).collect();
    let ooms = ooms_at
        .iter()
        .map(|&i| {
            let e = &entries[i];
            let before = traced.partition_point(|&(at, _)| at < i);
            let last = before.checked_sub(1).map(|j| allocs[traced[j].1].frames).unwrap_or(NO_FRAMES);
            OomInfo {
                at: i,
                requested_segment_bytes: e.size,
                device_free_bytes: e.device_free,
                active_bytes: if i > 0 { active_at[i - 1] } else { start },
                last_frames: r.frames(last),
                frames: r.frames(e.frames),
                category: r.category(e.category).map(str::to_string),
            }
        })
        .collect();
    Ok(SnapshotReport {
        device: *device,
        events: entries.len(),
        allocations: allocs.iter().filter(|a| a.alloc_at.is_some()).count(),
        peak_active_bytes: peak,
        peak_at,
        peak_time_us: peak_at.and_then(|i| entries[i].time_us),
        live_at_peak_by_frame: sorted(by_frame),
        live_at_peak_by_category: sorted(by_cat),
        largest,
        detail_percent: detail,
        reserved_bytes_end: *reserved_end,
        allocated_bytes_end: *allocated_end,
        peak_reserved_bytes: peak_reserved,
        ooms,
        unknown_actions: r.unknown_actions.clone(),
    })
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

#[cfg(test)]
#[path = "snapshot_memviz_tests.rs"]
mod memviz_tests;
