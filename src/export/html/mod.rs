//! The offline HTML report: one self-contained page (data, script and style inline, no
//! network) with the active memory timeline, phase bands, reserved and capacity lines,
//! a detail slider, tooltips, the breakdown at the peak and allocator stats — for one
//! snapshot, or two side by side on one scale.
//!
//! The replay is `analyse::snapshot`'s; this module only turns it into compact columns:
//! one row per allocation (start, lifetime, sizes, category, module, op, phase, frames,
//! times) as parallel arrays with string tables, which the page lays out and draws on a
//! canvas itself.
use crate::analyse::budget::Budget;
use crate::analyse::frames::FrameTable;
use crate::analyse::snapshot::{analyse_replay, replay, Replay};
use crate::pickle::Value;
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
struct Panel<'a> {
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
    settings: Option<Json<'a>>,
    stats: Option<serde_json::Value>,
}

/// What the frames of one trace entry or block say, computed once per frame list.
#[derive(Clone, Copy)]
struct FrameInfo {
    list: u32,
    module: u32,
    op: u32,
    phase: i32,
}

/// The page's string tables, filled from the replay's interned frames: each distinct frame
/// is formatted once and each distinct frame list looked at once.
struct Tables<'t> {
    ft: &'t FrameTable,
    strs: Vec<String>,
    str_ids: HashMap<String, u32>,
    frame_lists: Vec<Vec<u32>>,
    list_ids: HashMap<Vec<u32>, u32>,
    phases: Vec<String>,
    phase_ids: HashMap<String, i32>,
    /// Category names in order of first use, and the replay's category id → index.
    cats: Vec<String>,
    cat_ids: HashMap<u32, i32>,
    /// By the replay's frame list id, and by its frame id.
    by_list: HashMap<u32, FrameInfo>,
    frame_str: HashMap<u32, u32>,
    phased: bool,
}

impl<'t> Tables<'t> {
    fn new(ft: &'t FrameTable) -> Self {
        Tables {
            ft,
            strs: Vec::new(),
            str_ids: HashMap::new(),
            frame_lists: Vec::new(),
            list_ids: HashMap::new(),
            phases: Vec::new(),
            phase_ids: HashMap::new(),
            cats: Vec::new(),
            cat_ids: HashMap::new(),
            by_list: HashMap::new(),
            frame_str: HashMap::new(),
            phased: false,
        }
    }

    fn str_id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.str_ids.get(s) {
            return i;
        }
        let i = self.strs.len() as u32;
        self.strs.push(s.to_string());
        self.str_ids.insert(s.to_string(), i);
        i
    }

    fn phase_id(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.phase_ids.get(s) {
            return i;
        }
        self.phases.push(s.to_string());
        self.phase_ids.insert(s.to_string(), self.phases.len() as i32 - 1);
        self.phases.len() as i32 - 1
    }

    fn cat_id(&mut self, rp: &Replay, c: Option<u32>) -> i32 {
        let Some(c) = c else { return -1 };
        if let Some(&i) = self.cat_ids.get(&c) {
            return i;
        }
        self.cats.push(rp.categories[c as usize].to_string());
        self.cat_ids.insert(c, self.cats.len() as i32 - 1);
        self.cats.len() as i32 - 1
    }

    fn frames(&mut self, list: u32) -> FrameInfo {
        if let Some(&fi) = self.by_list.get(&list) {
            return fi;
        }
        let ft = self.ft;
        let frames = ft.list(list);
        let mut ids = Vec::with_capacity(frames.len());
        let mut phase = -1;
        for &f in frames {
            let fr = ft.frame_at(f);
            // vramscope's last frame names the phase: filename "vramscope", name PHASE.
            if ft.text(fr.file) == "vramscope" {
                phase = self.phase_id(ft.text(fr.name));
                self.phased = true;
            }
            let id = match self.frame_str.get(&f) {
                Some(&i) => i,
                None => {
                    let i = self.str_id(&ft.format(f));
                    self.frame_str.insert(f, i);
                    i
                }
            };
            ids.push(id);
        }
        let (module, op) = match (frames.first(), phase >= 0) {
            // Ours: the Python frames the op mirrors come first (files ending in .py), then
            // (module path, op).
            (Some(&first), true) => {
                let fr = frames.iter().map(|&f| ft.frame_at(f)).find(|fr| !ft.text(fr.file).ends_with(".py")).unwrap_or(ft.frame_at(first));
                (ft.text(fr.file).to_string(), ft.text(fr.name).to_string())
            }
            // PyTorch's: the innermost frame of user code (not torch, not C++) names the
            // group; its function is the op.
            (Some(&first), false) => {
                let user = frames.iter().map(|&f| ft.frame_at(f)).find(|fr| is_user_frame(ft.text(fr.file))).unwrap_or(ft.frame_at(first));
                (format!("{}:{}", ft.text(user.file), user.line), ft.text(user.name).to_string())
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
        self.by_list.insert(list, fi);
        fi
    }
}

fn is_user_frame(file: &str) -> bool {
    file.ends_with(".py") && !file.contains("/torch/") && !file.contains("site-packages") && !file.starts_with('<')
}

/// A pickle value serialised as JSON as it is written (allocator settings are small dicts
/// of scalars, but a hostile file can nest shared lists that unfold exponentially: the
/// page's output budget stops that while writing, before anything large is built).
struct Json<'a>(&'a Value);

impl Serialize for Json<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self.0 {
            Value::None => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(i) => s.serialize_i64(*i),
            // serde_json writes non-finite floats as null.
            Value::Float(f) => s.serialize_f64(*f),
            Value::Str(x) => s.serialize_str(x),
            Value::Bytes(b) => s.serialize_str(&format!("<{} bytes>", b.len())),
            Value::List(l) | Value::Tuple(l) => s.collect_seq(l.iter().map(Json)),
            Value::Dict(d) => {
                // Keys sorted, the last of repeated keys kept: as serde_json's map wrote them.
                let mut keyed = std::collections::BTreeMap::new();
                for (k, v) in d.iter() {
                    let key = match k {
                        Value::Str(x) => x.to_string(),
                        Value::List(_) | Value::Tuple(_) | Value::Dict(_) => "<container>".to_string(),
                        scalar => scalar.to_string(),
                    };
                    keyed.insert(key, v);
                }
                let mut m = s.serialize_map(Some(keyed.len()))?;
                for (k, v) in keyed {
                    m.serialize_entry(&k, &Json(v))?;
                }
                m.end()
            }
        }
    }
}

fn panel<'a>(src: &Source<'a>, budget: &Budget, spent: &mut u64) -> Result<Panel<'a>, String> {
    let rp = replay(src.snapshot, src.device, budget)?;
    let report = analyse_replay(&rp, 100.0, 0)?;
    let n = rp.entries.len();
    let settings: Option<&'a Value> = match src.snapshot {
        Value::Dict(_) => src.snapshot.get("allocator_settings"),
        _ => None,
    };
    let divs = rp.divisions;
    let mut tb = Tables::new(&rp.frames);
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
    let time = |i: usize| rp.entries[i].time_us;
    let t_ref = rp.entries.iter().find_map(|e| e.time_us);
    let len = order.len();
    let (reserved_start, peak_reserved) = rp.reserved_start_and_peak()?;
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
            reserved_bytes: peak_reserved,
            by_category: report.live_at_peak_by_category.clone(),
        },
        reserved_end: rp.reserved_end,
        allocated_end: rp.allocated_end,
        segments_end: rp.segments,
        ooms: Vec::new(),
        settings: settings.map(Json),
        stats: src.stats.clone(),
    };
    // Times are within ±2^53 (checked by the replay), so differences fit an i64.
    let (mut prev_start, mut prev_time) = (-1i64, t_ref.unwrap_or(0));
    let mut module_of = vec![0u32; rp.allocs.len()];
    for &i in &order {
        let a = &rp.allocs[i];
        let start = a.alloc_at.map_or(-1, |s| s as i64);
        let end = a.free_at.unwrap_or(n) as i64;
        let fi = tb.frames(a.frames);
        module_of[i] = fi.module;
        let cat = tb.cat_id(&rp, a.category);
        let t0 = a.alloc_at.and_then(time);
        let t1 = a.free_at.and_then(time);
        p.s.push(start - prev_start);
        prev_start = start;
        p.d.push(end - start);
        p.z.push(a.size);
        // Sizes are at most 2^53 (checked by the replay): rounding cannot overflow.
        p.r.push((round_size(a.size as usize, &divs) - a.size as usize) as u64);
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
    // Each out-of-memory: who asked, and what was live just before. One sweep over the
    // allocations in start order and in end order serves every OOM (ascending trace index).
    let mut by_start: Vec<usize> = (0..rp.allocs.len()).collect();
    by_start.sort_by_key(|&i| rp.allocs[i].alloc_at.map_or(-1, |s| s as i64));
    let mut by_end: Vec<usize> = (0..rp.allocs.len()).filter(|&i| rp.allocs[i].free_at.is_some()).collect();
    by_end.sort_by_key(|&i| rp.allocs[i].free_at);
    let (mut si, mut ei) = (0, 0);
    let mut live_bytes: i128 = 0;
    // key → (live allocations, live bytes); a key leaves when its count drops to 0.
    let mut by_cat: HashMap<Option<u32>, (usize, i128)> = HashMap::new();
    let mut by_mod: HashMap<u32, (usize, i128)> = HashMap::new();
    fn shift<K: std::hash::Hash + Eq + Copy>(m: &mut HashMap<K, (usize, i128)>, k: K, n: isize, b: i128) {
        let e = m.entry(k).or_insert((0, 0));
        e.0 = e.0.wrapping_add_signed(n);
        e.1 += b;
        if e.0 == 0 {
            m.remove(&k);
        }
    }
    for o in &report.ooms {
        let at = o.at;
        while si < by_start.len() && rp.allocs[by_start[si]].alloc_at.is_none_or(|s| s < at) {
            let i = by_start[si];
            let a = &rp.allocs[i];
            live_bytes += a.size as i128;
            shift(&mut by_cat, a.category, 1, a.size as i128);
            shift(&mut by_mod, module_of[i], 1, a.size as i128);
            si += 1;
        }
        while ei < by_end.len() && rp.allocs[by_end[ei]].free_at.is_some_and(|f| f <= at) {
            let i = by_end[ei];
            let a = &rp.allocs[i];
            live_bytes -= a.size as i128;
            shift(&mut by_cat, a.category, -1, -(a.size as i128));
            shift(&mut by_mod, module_of[i], -1, -(a.size as i128));
            ei += 1;
        }
        let fi = tb.frames(rp.entries[at].frames);
        // The lists go into the page whole: charge them before building them.
        *spent = spent.saturating_add(64 + 32 * (by_cat.len() + by_mod.len()) as u64);
        if *spent > budget.output_bytes {
            return Err(format!("the report would pass {} bytes (budget --max-output-bytes) at its OOM at trace entry {at}", budget.output_bytes));
        }
        let sorted = |v: Vec<(String, u64)>| {
            let mut v = v;
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| crate::analyse::natural_cmp(&a.0, &b.0)));
            v
        };
        // Live sums are at most the active memory, which the replay checked (≤ 2^53).
        let live = |b: i128| b.clamp(0, u64::MAX as i128) as u64;
        let live_by_category = sorted(by_cat.iter().map(|(c, v)| (rp.category(*c).unwrap_or("<uncategorised>").to_string(), live(v.1))).collect());
        let live_by_module = sorted(by_mod.iter().map(|(m, v)| (tb.strs[*m as usize].clone(), live(v.1))).collect());
        p.ooms.push(Oom {
            at,
            requested_segment_bytes: o.requested_segment_bytes,
            device_free_bytes: o.device_free_bytes,
            module: fi.module,
            op: fi.op,
            phase: fi.phase,
            frames: fi.list,
            category: o.category.clone(),
            live_bytes: live(live_bytes),
            live_by_category,
            live_by_module,
        });
    }
    // Phase bands: runs of entries in one phase; entries without a phase extend the run.
    let mut cur: Option<(usize, usize)> = None;
    let mut reserved = reserved_start as i128;
    p.reserved.push((-1, reserved_start));
    for (i, e) in rp.entries.iter().enumerate() {
        let ph = tb.frames(e.frames).phase;
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
        let dr = e.segment_delta();
        if dr != 0 {
            // At most the peak reserved memory, which the replay checked (≤ 2^53).
            reserved = (reserved + dr).max(0);
            p.reserved.push((i as i64, reserved.min(u64::MAX as i128) as u64));
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

/// A buffer that refuses to grow past a budget, so an oversized report stops while it is
/// being serialised instead of after a huge string is built. With `escape_slash`, writes
/// "</" as "<\/" (valid in JSON, and it cannot close the page's <script> element).
pub struct Capped {
    pub out: Vec<u8>,
    cap: u64,
    escape_slash: bool,
    /// Set once a write was refused.
    pub over: bool,
}

impl Capped {
    pub fn new(cap: u64) -> Capped {
        Capped { out: Vec::new(), cap, escape_slash: false, over: false }
    }

    fn room(&mut self, n: usize) -> std::io::Result<()> {
        if (self.out.len() + n) as u64 > self.cap {
            self.over = true;
            return Err(std::io::Error::other(format!("output larger than {} bytes (budget --max-output-bytes)", self.cap)));
        }
        Ok(())
    }
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.escape_slash {
            self.room(buf.len())?;
            self.out.extend_from_slice(buf);
            return Ok(buf.len());
        }
        let mut rest = buf;
        while let Some(k) = rest.iter().position(|&b| b == b'/') {
            let escape = if k > 0 { rest[k - 1] == b'<' } else { self.out.last() == Some(&b'<') };
            self.room(k + 2)?;
            self.out.extend_from_slice(&rest[..k]);
            if escape {
                self.out.push(b'\\');
            }
            self.out.push(b'/');
            rest = &rest[k + 1..];
        }
        self.room(rest.len())?;
        self.out.extend_from_slice(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The report page for one snapshot, or two shown side by side on one y scale, within the
/// default budget.
pub fn report(sources: &[Source], capacity: Option<Capacity>) -> Result<Vec<u8>, String> {
    report_within(sources, capacity, &Budget::default())
}

/// `report` within `budget`: the replay's budgets, and `output_bytes` for the page.
pub fn report_within(sources: &[Source], capacity: Option<Capacity>, budget: &Budget) -> Result<Vec<u8>, String> {
    use std::io::Write;
    let mut spent = 0u64;
    let panels: Vec<Panel> = sources.iter().map(|s| panel(s, budget, &mut spent).map_err(|e| format!("{}: {e}", s.name))).collect::<Result<_, _>>()?;
    #[derive(Serialize)]
    struct Data<'a, 'b> {
        version: u32,
        generator: String,
        capacity: Option<Capacity>,
        panels: &'a [Panel<'b>],
    }
    let data = Data { version: 1, generator: format!("vramscope {}", env!("CARGO_PKG_VERSION")), capacity, panels: &panels };
    let title = panels.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(" vs ");
    let mut w = Capped::new(budget.output_bytes);
    let over = |e: std::io::Error| e.to_string();
    write!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>vramscope — {title}</title>\n<style>\n{STYLE}</style></head>\n<body>\n\
         <script type=\"application/json\" id=\"vramscope-data\">",
        title = escape_html(&title)
    )
    .map_err(over)?;
    w.escape_slash = true;
    // Buffered, so the cap and the escaping see large chunks, not serde's single tokens.
    let mut b = std::io::BufWriter::with_capacity(1 << 16, &mut w);
    let res = serde_json::to_writer(&mut b, &data).map_err(|e| e.to_string()).and_then(|()| b.flush().map_err(|e| e.to_string()));
    drop(b);
    if let Err(e) = res {
        return Err(if w.over { format!("output larger than {} bytes (budget --max-output-bytes)", budget.output_bytes) } else { e });
    }
    w.escape_slash = false;
    write!(w, "</script>\n<script>\n{SCRIPT}</script>\n</body></html>\n").map_err(over)?;
    Ok(w.out)
}

/// Where a snapshot's report goes: `x_snapshot.pickle` → `x_report.html`, anything else →
/// `<stem>_report.html`; two snapshots side by side → `x_vs_y_report.html`.
pub fn report_path(file: &std::path::Path, other: Option<&std::path::Path>) -> std::path::PathBuf {
    let stem = |p: &std::path::Path| {
        let s = p.file_stem().map_or_else(|| "snapshot".to_string(), |s| s.to_string_lossy().into_owned());
        s.strip_suffix("_snapshot").map(str::to_string).unwrap_or(s)
    };
    let name = match other {
        None => format!("{}_report.html", stem(file)),
        Some(o) => format!("{}_vs_{}_report.html", stem(file), stem(o)),
    };
    file.with_file_name(name)
}
