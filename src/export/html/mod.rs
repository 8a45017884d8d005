//! The offline HTML report: one self-contained page (data, script and style inline, no
//! network) with the active memory timeline, phase bands, reserved and capacity lines,
//! a detail slider, tooltips, the breakdown at the peak and allocator stats — for one
//! snapshot, or two side by side on one scale.
//!
//! The replay is `analyse::snapshot`'s; this module only turns it into compact columns:
//! one row per allocation (start, lifetime, sizes, category, module, op, phase, frames,
//! times) as parallel arrays with string tables, which the page lays out and draws on a
//! canvas itself.
use crate::analyse::snapshot::{analyse_replay, replay, segment_delta, Replay};
use crate::export::pickle::Value;
use crate::record::allocator::round_size;
use serde::Serialize;
use std::collections::HashMap;

const SCRIPT: &str = include_str!("report.js");
const STYLE: &str = include_str!("report.css");

/// One snapshot to show.
pub struct Source<'a> {
    /// Shown as the panel's title (usually the file name).
    pub name: String,
    pub snapshot: &'a Value,
    /// Device whose trace to show (None: the one with the most events).
    pub device: Option<usize>,
    /// Allocator statistics the writer knows beyond the snapshot (vramscope profile's
    /// `torch.cuda.memory_stats()` equivalent), shown as a table.
    pub stats: Option<serde_json::Value>,
}

/// The device memory to draw as a line.
#[derive(Clone, Debug, Serialize)]
pub struct Capacity {
    pub label: String,
    pub bytes: u64,
}

#[derive(Serialize)]
struct Peak {
    bytes: u64,
    /// Trace index (-1: before the first entry).
    at: i64,
    reserved_bytes: u64,
    by_category: Vec<(String, u64)>,
}

#[derive(Serialize)]
struct Oom {
    at: usize,
    /// The `oom` entry's size: the rounded request.
    requested_segment_bytes: u64,
    device_free_bytes: u64,
    /// The failing request's context from the entry's frames (ids into `strs`; phase id
    /// into `phases`, -1: none) and category (None: the entry carries none).
    module: u32,
    op: u32,
    phase: i32,
    frames: u32,
    category: Option<String>,
    /// Requested bytes live just before it, in total and per category and module.
    live_bytes: u64,
    live_by_category: Vec<(String, u64)>,
    live_by_module: Vec<(String, u64)>,
}

/// One snapshot's data as the page reads it (see report.js `decode`).
#[derive(Serialize)]
struct Panel {
    name: String,
    device: usize,
    events: usize,
    /// Whether the allocations carry categories (ours do, from `vramscope_categories`; PyTorch's do not).
    categorised: bool,
    /// Whether frames carry vramscope's phase frame.
    phased: bool,
    cats: Vec<String>,
    phases: Vec<String>,
    /// String table for modules, ops and frames.
    strs: Vec<String>,
    /// Frame lists, innermost first, as ids into `strs`.
    frame_lists: Vec<Vec<u32>>,
    /// Allocations sorted by start (memory_viz's stacking order). `s`: start trace index,
    /// delta-coded from the previous row (-1 = allocated before the trace); `d`: end − start
    /// (end = events when still live); `z`: requested bytes; `r`: rounded − requested;
    /// `c`: category id (-1: none); `m`, `o`: module and op ids into `strs`; `p`: phase id
    /// (-1: none); `f`: frame list id; `t`: alloc time_us delta-coded from the previous
    /// known alloc time (null: unknown); `u`: free time_us − (alloc time, else `t_ref`).
    s: Vec<i64>,
    d: Vec<i64>,
    z: Vec<u64>,
    r: Vec<u64>,
    c: Vec<i32>,
    m: Vec<u32>,
    o: Vec<u32>,
    p: Vec<i32>,
    f: Vec<u32>,
    t: Vec<Option<i64>>,
    u: Vec<Option<i64>>,
    t_ref: Option<i64>,
    /// (first trace index, end index, phase id) runs.
    bands: Vec<(usize, usize, usize)>,
    /// Reserved bytes from trace index on: (index, bytes); the first is (-1, at the start).
    reserved: Vec<(i64, u64)>,
    peak: Peak,
    reserved_end: u64,
    allocated_end: u64,
    segments_end: usize,
    ooms: Vec<Oom>,
    settings: Option<serde_json::Value>,
    stats: Option<serde_json::Value>,
}

/// What the frames of one trace entry or block say, computed once per shared list.
#[derive(Clone, Copy)]
struct FrameInfo {
    list: u32,
    module: u32,
    op: u32,
    phase: i32,
}

struct Tables {
    strs: Vec<String>,
    str_ids: HashMap<String, u32>,
    frame_lists: Vec<Vec<u32>>,
    list_ids: HashMap<Vec<u32>, u32>,
    phases: Vec<String>,
    cats: Vec<String>,
    /// Frame lists are shared through the pickle memo: key by the list's address.
    by_ptr: HashMap<*const Vec<Value>, FrameInfo>,
    phased: bool,
}

impl Tables {
    fn str_id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.str_ids.get(s) {
            return i;
        }
        let i = self.strs.len() as u32;
        self.strs.push(s.to_string());
        self.str_ids.insert(s.to_string(), i);
        i
    }

    fn name_id(table: &mut Vec<String>, s: &str) -> i32 {
        match table.iter().position(|x| x == s) {
            Some(i) => i as i32,
            None => {
                table.push(s.to_string());
                table.len() as i32 - 1
            }
        }
    }

    fn frames(&mut self, v: Option<&Value>) -> FrameInfo {
        // No list (or not a list): one shared key, the null pointer.
        let (ptr, list): (*const Vec<Value>, &[Value]) = match v {
            Some(Value::List(l)) => (std::rc::Rc::as_ptr(l), &l[..]),
            _ => (std::ptr::null(), &[]),
        };
        if let Some(&fi) = self.by_ptr.get(&ptr) {
            return fi;
        }
        let field = |f: &Value, k: &str| f.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
        let mut ids = Vec::with_capacity(list.len());
        let mut phase = -1;
        for f in list {
            let (name, file) = (field(f, "name"), field(f, "filename"));
            let line = f.get("line").and_then(Value::as_int).unwrap_or(0);
            // vramscope's last frame names the phase: filename "vramscope", name PHASE.
            if file == "vramscope" {
                phase = Self::name_id(&mut self.phases, &name);
                self.phased = true;
            }
            ids.push(self.str_id(&format!("{name} {file}:{line}")));
        }
        let (module, op) = match (list.first(), phase >= 0) {
            // Ours: the first frame is (module path, op).
            (Some(f), true) => (field(f, "filename"), field(f, "name")),
            // PyTorch's: the innermost frame of user code (not torch, not C++) names the
            // group; its function is the op.
            (Some(_), false) => {
                let user = list.iter().find(|f| is_user_frame(&field(f, "filename"))).unwrap_or(&list[0]);
                let line = user.get("line").and_then(Value::as_int).unwrap_or(0);
                (format!("{}:{line}", field(user, "filename")), field(user, "name"))
            }
            (None, _) => ("<no frames>".to_string(), "?".to_string()),
        };
        let list_id = match self.list_ids.get(&ids) {
            Some(&i) => i,
            None => {
                let i = self.frame_lists.len() as u32;
                self.frame_lists.push(ids.clone());
                self.list_ids.insert(ids, i);
                i
            }
        };
        let fi = FrameInfo { list: list_id, module: self.str_id(&module), op: self.str_id(&op), phase };
        self.by_ptr.insert(ptr, fi);
        fi
    }
}

fn is_user_frame(file: &str) -> bool {
    file.ends_with(".py") && !file.contains("/torch/") && !file.contains("site-packages") && !file.starts_with('<')
}

/// A pickle value as JSON (allocator settings are small dicts of scalars).
fn to_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::None => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(i) => J::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        Value::Str(s) => J::String(s.to_string()),
        Value::Bytes(b) => J::String(format!("<{} bytes>", b.len())),
        Value::List(l) | Value::Tuple(l) => J::Array(l.iter().map(to_json).collect()),
        Value::Dict(d) => J::Object(
            d.iter()
                .map(|(k, v)| (k.as_str().map_or_else(|| format!("{:?}", to_json(k)), str::to_string), to_json(v)))
                .collect(),
        ),
    }
}

/// The allocator's rounding divisions from `allocator_settings` (keys "1", "2", … "32768").
fn divisions(settings: Option<&Value>) -> [usize; 16] {
    let mut d = [0usize; 16];
    if let Some(Value::Dict(items)) = settings.and_then(|s| s.get("roundup_power2_divisions")) {
        for (k, v) in items.iter() {
            let key: Option<u64> = k.as_str().and_then(|s| s.parse().ok()).or(k.as_int().map(|i| i.max(0) as u64));
            if let (Some(key), Some(v)) = (key, v.as_int()) {
                if key.is_power_of_two() && key.trailing_zeros() < 16 {
                    d[key.trailing_zeros() as usize] = v.max(0) as usize;
                }
            }
        }
    }
    d
}

fn panel(src: &Source) -> Result<Panel, String> {
    let rp: Replay = replay(src.snapshot, src.device)?;
    let report = analyse_replay(&rp, 100.0, 0);
    let trace = rp.trace;
    let n = trace.len();
    let settings = match src.snapshot {
        Value::Dict(_) => src.snapshot.get("allocator_settings"),
        _ => None,
    };
    let divs = divisions(settings);
    let mut tb = Tables {
        strs: Vec::new(),
        str_ids: HashMap::new(),
        frame_lists: Vec::new(),
        list_ids: HashMap::new(),
        phases: Vec::new(),
        cats: Vec::new(),
        by_ptr: HashMap::new(),
        phased: false,
    };
    // Frames of blocks live at the end, for allocations the trace never mentions.
    let mut blocks: HashMap<u64, &Value> = HashMap::new();
    for s in &rp.segments {
        for b in s.get("blocks").and_then(Value::as_list).unwrap_or(&[]) {
            if b.get("state").and_then(Value::as_str) == Some("active_allocated") {
                blocks.insert(b.get("address").and_then(Value::as_int).unwrap_or(0).max(0) as u64, b);
            }
        }
    }
    // Stacking order: live-throughout blocks at the bottom, then allocations freed in the
    // trace but made before it (latest free lowest), then the trace's in allocation order.
    let mut order: Vec<usize> = (0..rp.allocs.len()).collect();
    let key = |i: usize| {
        let a = &rp.allocs[i];
        match (a.alloc_at, a.free_at) {
            (None, None) => (0u8, 0i64),
            (None, Some(f)) => (1, -(f as i64)),
            (Some(s), _) => (2, s as i64),
        }
    };
    order.sort_by_key(|&i| key(i));
    let time = |i: usize| trace[i].get("time_us").and_then(Value::as_int);
    let t_ref = trace.iter().find_map(|e| e.get("time_us").and_then(Value::as_int));
    let len = order.len();
    let mut p = Panel {
        name: src.name.clone(),
        device: rp.device,
        events: n,
        categorised: false,
        phased: false,
        cats: Vec::new(),
        phases: Vec::new(),
        strs: Vec::new(),
        frame_lists: Vec::new(),
        s: Vec::with_capacity(len),
        d: Vec::with_capacity(len),
        z: Vec::with_capacity(len),
        r: Vec::with_capacity(len),
        c: Vec::with_capacity(len),
        m: Vec::with_capacity(len),
        o: Vec::with_capacity(len),
        p: Vec::with_capacity(len),
        f: Vec::with_capacity(len),
        t: Vec::with_capacity(len),
        u: Vec::with_capacity(len),
        t_ref,
        bands: Vec::new(),
        reserved: Vec::new(),
        peak: Peak {
            bytes: report.peak_active_bytes,
            at: report.peak_at.map_or(-1, |i| i as i64),
            reserved_bytes: report.peak_reserved_bytes,
            by_category: report.live_at_peak_by_category.clone(),
        },
        reserved_end: rp.reserved_end,
        allocated_end: rp.allocated_end,
        segments_end: rp.segments.len(),
        ooms: Vec::new(),
        settings: settings.map(to_json),
        stats: src.stats.clone(),
    };
    let (mut prev_start, mut prev_time) = (-1i64, t_ref.unwrap_or(0));
    let mut module_of = vec![0u32; rp.allocs.len()];
    for &i in &order {
        let a = &rp.allocs[i];
        let start = a.alloc_at.map_or(-1, |s| s as i64);
        let end = a.free_at.unwrap_or(n) as i64;
        let frames = match (a.alloc_at, a.free_at) {
            (Some(k), _) | (None, Some(k)) => trace[k].get("frames"),
            (None, None) => blocks.get(&a.addr).and_then(|b| b.get("frames")),
        };
        let fi = tb.frames(frames);
        module_of[i] = fi.module;
        let cat = a.category.as_deref().map_or(-1, |c| Tables::name_id(&mut tb.cats, c));
        let t0 = a.alloc_at.and_then(time);
        let t1 = a.free_at.and_then(time);
        p.s.push(start - prev_start);
        prev_start = start;
        p.d.push(end - start);
        p.z.push(a.size);
        p.r.push(round_size(a.size as usize, &divs).saturating_sub(a.size as usize) as u64);
        p.c.push(cat);
        p.m.push(fi.module);
        p.o.push(fi.op);
        p.p.push(fi.phase);
        p.f.push(fi.list);
        p.t.push(t0.map(|t| {
            let d = t - prev_time;
            prev_time = t;
            d
        }));
        p.u.push(t1.map(|t| t - t0.or(t_ref).unwrap_or(0)));
    }
    // Each out-of-memory: who asked, and what was live just before.
    for o in &report.ooms {
        let fi = tb.frames(trace[o.at].get("frames"));
        let (mut by_cat, mut by_mod): (HashMap<String, u64>, HashMap<u32, u64>) = Default::default();
        let mut live_bytes = 0;
        for (i, a) in rp.allocs.iter().enumerate() {
            if a.alloc_at.is_none_or(|s| s < o.at) && a.free_at.is_none_or(|f| f > o.at) {
                live_bytes += a.size;
                *by_cat.entry(a.category.clone().unwrap_or_else(|| "<uncategorised>".into())).or_default() += a.size;
                *by_mod.entry(module_of[i]).or_default() += a.size;
            }
        }
        let sorted = |v: Vec<(String, u64)>| {
            let mut v = v;
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| crate::analyse::natural_cmp(&a.0, &b.0)));
            v
        };
        p.ooms.push(Oom {
            at: o.at,
            requested_segment_bytes: o.requested_segment_bytes,
            device_free_bytes: o.device_free_bytes,
            module: fi.module,
            op: fi.op,
            phase: fi.phase,
            frames: fi.list,
            category: o.category.clone(),
            live_bytes,
            live_by_category: sorted(by_cat.into_iter().collect()),
            live_by_module: sorted(by_mod.into_iter().map(|(m, b)| (tb.strs[m as usize].clone(), b)).collect()),
        });
    }
    // Phase bands: runs of entries in one phase; entries without a phase extend the run.
    let mut cur: Option<(usize, usize)> = None;
    let mut reserved = rp.reserved_start();
    p.reserved.push((-1, reserved));
    for (i, e) in trace.iter().enumerate() {
        let ph = tb.frames(e.get("frames")).phase;
        if ph >= 0 {
            match cur {
                Some((_, c)) if c == ph as usize => {}
                Some((s, c)) => {
                    p.bands.push((s, i, c));
                    cur = Some((i, ph as usize));
                }
                None => cur = Some((i, ph as usize)),
            }
        }
        let dr = segment_delta(e);
        if dr != 0 {
            reserved = (reserved as i64 + dr).max(0) as u64;
            p.reserved.push((i as i64, reserved));
        }
    }
    if let Some((s, c)) = cur {
        p.bands.push((s, n, c));
    }
    p.categorised = !tb.cats.is_empty();
    p.phased = tb.phased;
    p.cats = tb.cats;
    p.phases = tb.phases;
    p.strs = tb.strs;
    p.frame_lists = tb.frame_lists;
    Ok(p)
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The report page for one snapshot, or two shown side by side on one y scale.
pub fn report(sources: &[Source], capacity: Option<Capacity>) -> Result<String, String> {
    let panels: Vec<Panel> = sources.iter().map(|s| panel(s).map_err(|e| format!("{}: {e}", s.name))).collect::<Result<_, _>>()?;
    #[derive(Serialize)]
    struct Data<'a> {
        version: u32,
        generator: String,
        capacity: Option<Capacity>,
        panels: &'a [Panel],
    }
    let data = Data { version: 1, generator: format!("vramscope {}", env!("CARGO_PKG_VERSION")), capacity, panels: &panels };
    // Inside <script>, "</" could close the element: JSON allows "<\/".
    let json = serde_json::to_string(&data).map_err(|e| e.to_string())?.replace("</", "<\\/");
    let title = panels.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(" vs ");
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>vramscope — {title}</title>\n<style>\n{STYLE}</style></head>\n<body>\n\
         <script type=\"application/json\" id=\"vramscope-data\">{json}</script>\n\
         <script>\n{SCRIPT}</script>\n</body></html>\n",
        title = escape_html(&title)
    ))
}
