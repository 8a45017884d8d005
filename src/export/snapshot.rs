//! The memory snapshot `torch.cuda.memory._dump_snapshot` writes (formats.md §1), built
//! from a recording: final `segments` from the allocator model, the `device_traces` of
//! allocator actions with frames, and `allocator_settings`. The trace replays backwards to
//! the segments exactly.
//!
//! Streams are numbered as memory_viz renumbers them (formats.md §2.3): 0 stays 0, the others
//! 1, 2, … in order of first appearance, trace entries first, then segments.
//!
//! Categories are not on the trace entries: memory_viz colours by a `category` key there,
//! but appending its `"unknown"` legend entry goes through a misspelt field
//! (`snapshot.categores`, formats.md §2.3), so the page crashes on load unless some entry
//! is already `"unknown"`. They travel instead in the top-level [`CATEGORIES_KEY`], which
//! memory_viz never reads and vramscope's `analyze` and `view` do.
use crate::pickle::Value;
use crate::record::allocator::{Action, CachingAllocator, Pool, StreamId, Trace};
use crate::record::{EventKind, MemEvent};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// One `Rc<str>` per distinct string: the snapshot repeats a handful of keys and names on
/// every trace entry and block, and building each anew dominated the tree's host memory
/// (the pickle is the same; its writer memoises strings by content).
#[derive(Default)]
struct Strings(RefCell<HashMap<String, Rc<str>>>);

impl Strings {
    fn s(&self, v: &str) -> Value {
        let mut m = self.0.borrow_mut();
        if let Some(rc) = m.get(v) {
            return Value::Str(rc.clone());
        }
        let rc: Rc<str> = Rc::from(v);
        m.insert(v.to_string(), rc.clone());
        Value::Str(rc)
    }
    fn dict(&self, items: Vec<(&str, Value)>) -> Value {
        Value::Dict(Rc::new(items.into_iter().map(|(k, v)| (self.s(k), v)).collect()))
    }
}

/// Snapshot sizes and addresses are below 2^62 and 2^63 (the allocator keeps them there).
fn int(v: impl TryInto<i64>) -> Value {
    Value::Int(v.try_into().unwrap_or(i64::MAX))
}
fn list(items: Vec<Value>) -> Value {
    Value::List(Rc::new(items))
}

/// Top-level key of vramscope's categories: `{"device_traces": [[category or None per trace
/// entry] per device], "segments": [[category or None per block] per segment]}`, parallel
/// to the snapshot's own lists.
pub use crate::analyse::snapshot::CATEGORIES_KEY;

/// Frames for an event: innermost first, as PyTorch lists them. The reference
/// implementation's Python functions come first (the file, `def` line and function the
/// model code mirrors), then the module path standing in for a file with the op as the
/// function, then the Rust line that allocated, then the phase; identical lists are
/// pickled once.
struct Frames {
    cache: HashMap<(String, &'static str, &'static str, &'static str, u32, usize), Value>,
    /// Each distinct frame once: a deep model has a frame list per module path and op, but
    /// its Python, Rust-line and phase frames repeat across layers (shared, they are pickled
    /// once).
    frame: HashMap<(String, u32, String), Value>,
}

impl Frames {
    fn of(&mut self, e: &MemEvent, st: &Strings) -> Value {
        let scope = crate::record::scope_name(&e.scope, e.phase).into_owned();
        let key = (scope, e.op, e.phase.name(), e.location.file(), e.location.line(), crate::record::pyframe::stack_id(&e.py));
        if let Some(v) = self.cache.get(&key) {
            return v.clone();
        }
        let mut frame = |file: &str, line: u32, name: &str| {
            self.frame
                .entry((file.to_string(), line, name.to_string()))
                .or_insert_with(|| st.dict(vec![("filename", st.s(file)), ("line", int(line)), ("name", st.s(name))]))
                .clone()
        };
        let mut v: Vec<Value> = crate::record::pyframe::frames(&e.py).map(|f| frame(f.file, f.line, f.name)).collect();
        v.extend([frame(&key.0, 0, key.1), frame(key.3, key.4, "rust"), frame("vramscope", 0, key.2)]);
        let v = list(v);
        self.cache.insert(key, v.clone());
        v
    }
}

/// Build the snapshot. `events` and `actions` come from one recording (`actions[i].1` is
/// the index of the event that caused action i); `before` are the storages alive when it
/// started (their frames describe the blocks they still hold).
pub fn build(allocator: &CachingAllocator, before: &[MemEvent], events: &[MemEvent], actions: &[(Trace, Option<usize>)]) -> Value {
    let mut frames = Frames { cache: HashMap::new(), frame: HashMap::new() };
    let st = Strings::default();
    let s = |v: &str| st.s(v);
    let dict = |items: Vec<(&str, Value)>| st.dict(items);
    // Context of the live block at each address: the last alloc there. A block pending free
    // keeps the context of its last allocation, as PyTorch's does until `free_completed`.
    let mut owner: HashMap<u64, &MemEvent> = before.iter().map(|e| (e.addr, e)).collect();
    let mut last_alloc = owner.clone();
    for e in events {
        match e.kind {
            EventKind::Alloc => {
                owner.insert(e.addr, e);
                last_alloc.insert(e.addr, e);
            }
            EventKind::Free => {
                owner.remove(&e.addr);
            }
            // A refused request holds no block; its context goes on the `oom` entry.
            EventKind::Oom => {}
        }
    }
    let mut stream_numbers: HashMap<StreamId, i64> = HashMap::from([(StreamId::DEFAULT, 0)]);
    let mut stream_no = |s: StreamId| {
        let next = stream_numbers.len() as i64;
        *stream_numbers.entry(s).or_insert(next)
    };
    let trace_streams: Vec<i64> = actions.iter().map(|(t, _)| stream_no(t.stream)).collect();
    let mut segments = Vec::new();
    let mut segment_cats = Vec::new();
    for seg in allocator.snapshot_segments() {
        let mut blocks = Vec::new();
        let mut block_cats = Vec::new();
        let (mut alloc_sz, mut active_sz, mut req_sz) = (0usize, 0usize, 0usize);
        for b in &seg.blocks {
            let owner_event = if b.allocated {
                owner.get(&b.addr).copied()
            } else if b.is_pending_free() {
                last_alloc.get(&b.addr).copied()
            } else {
                None
            };
            if b.allocated {
                alloc_sz += b.size;
            }
            let (state, fr) = if b.allocated || b.is_pending_free() {
                active_sz += b.size;
                req_sz += b.requested;
                let state = if b.allocated { "active_allocated" } else { "active_pending_free" };
                (state, owner_event.map_or(list(vec![]), |e| frames.of(e, &st)))
            } else {
                ("inactive", list(vec![]))
            };
            blocks.push(dict(vec![
                ("address", int(b.addr)),
                ("size", int(b.size)),
                ("requested_size", int(b.requested)),
                ("state", s(state)),
                ("frames", fr),
            ]));
            // Blocks allocated before the trace began (parameters) have no trace entry
            // that could name their category.
            block_cats.push(owner_event.map_or(Value::None, |e| s(e.category.name())));
        }
        segment_cats.push(list(block_cats));
        segments.push(dict(vec![
            ("device", int(0)),
            ("address", int(seg.addr)),
            ("total_size", int(seg.size)),
            ("allocated_size", int(alloc_sz)),
            ("active_size", int(active_sz)),
            ("requested_size", int(req_sz)),
            ("stream", int(stream_no(seg.stream))),
            ("segment_type", s(if seg.pool == Pool::Small { "small" } else { "large" })),
            ("segment_pool_id", Value::Tuple(Rc::new(vec![int(0), int(0)]))),
            ("is_expandable", Value::Bool(seg.expandable)),
            ("frames", list(vec![])),
            ("blocks", list(blocks)),
        ]));
    }
    let na = s("N/A");
    let empty = s("");
    let mut trace = Vec::with_capacity(actions.len());
    let mut trace_cats = Vec::with_capacity(actions.len());
    for ((t, cause), stream) in actions.iter().zip(trace_streams) {
        let ev = cause.map(|i| &events[i]);
        let time = ev.map_or(0, |e| e.time_us);
        let mut items = vec![("action", s(t.action.name()))];
        if t.action == Action::Oom {
            items.push(("device_free", int(t.addr)));
        } else {
            items.push(("addr", int(t.addr)));
        }
        items.extend([
            ("size", int(t.size)),
            ("stream", int(stream)),
            ("time_us", int(time)),
            ("compile_context", na.clone()),
            ("user_metadata", empty.clone()),
        ]);
        if let Some(e) = ev {
            items.push(("frames", frames.of(e, &st)));
        }
        trace.push(dict(items));
        trace_cats.push(ev.map_or(Value::None, |e| s(e.category.name())));
    }
    let c = &allocator.config;
    let divisions: Vec<(Value, Value)> = c
        .roundup_power2_divisions
        .iter()
        .enumerate()
        .map(|(i, &d)| (s(&(1usize << i).to_string()), int(d)))
        .collect();
    dict(vec![
        ("segments", list(segments)),
        ("device_traces", list(vec![list(trace)])),
        (
            "allocator_settings",
            dict(vec![
                ("PYTORCH_CUDA_ALLOC_CONF", s(&c.raw)),
                ("max_split_size", int(c.max_split_size.map_or(-1, |v| v as i64))),
                ("garbage_collection_threshold", Value::Float(c.garbage_collection_threshold.unwrap_or(0.0))),
                ("expandable_segments", Value::Bool(c.expandable_segments)),
                ("roundup_power2_divisions", Value::Dict(Rc::new(divisions))),
            ]),
        ),
        ("external_annotations", list(vec![])),
        (CATEGORIES_KEY, dict(vec![("device_traces", list(vec![list(trace_cats)])), ("segments", list(segment_cats))])),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::allocator::AllocatorConfig;

    /// Streams are numbered in first-seen order, trace first (0 stays 0), as memory_viz
    /// renumbers them; a pending block is `active_pending_free`, counted in `active_size`
    /// and `requested_size` but not in `allocated_size`.
    #[test]
    fn streams_are_renumbered_and_pending_blocks_are_active() {
        let mut a = CachingAllocator::new(AllocatorConfig::default(), 1 << 30);
        let x = a.malloc_block_on(4 << 20, StreamId(7)).unwrap().0;
        a.malloc_block_on(1000, StreamId::DEFAULT).unwrap();
        a.malloc_block_on(4 << 20, StreamId(3)).unwrap();
        a.record_stream(x, StreamId::DEFAULT);
        a.free(x);
        let actions: Vec<(Trace, Option<usize>)> = a.take_trace().into_iter().map(|t| (t, None)).collect();
        let snap = build(&a, &[], &[], &actions);
        let int_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_int).unwrap();
        let trace = snap.get("device_traces").and_then(|d| d.as_list()?.first()?.as_list()).unwrap();
        let streams: Vec<i64> = trace.iter().map(|t| int_of(t, "stream")).collect();
        assert_eq!(streams, vec![1, 1, 0, 0, 2, 2, 1]);
        let segs = snap.get("segments").and_then(Value::as_list).unwrap();
        let seg = segs.iter().find(|s| int_of(s, "stream") == 1).unwrap();
        assert_eq!((int_of(seg, "allocated_size"), int_of(seg, "active_size"), int_of(seg, "requested_size")), (0, 4 << 20, 4 << 20));
        let block = &seg.get("blocks").and_then(Value::as_list).unwrap()[0];
        assert_eq!(block.get("state").and_then(Value::as_str), Some("active_pending_free"));
    }
}
