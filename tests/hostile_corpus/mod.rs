//! Hostile snapshot pickles, one per class of issue #15: shared-reference bombs that
//! unfold to gigabytes, quadratic-work triggers, numbers at the edges of i64, and reader
//! bombs written as raw opcodes. Small files live in tests/fixtures/hostile/ (seeds for
//! the property tests too); big ones are generated when a test needs them.
use vramscope::pickle::{write, Value};

/// A pickle written opcode by opcode (what `pickle::write` never emits: DUP, huge
/// declared lengths, bad nesting).
pub struct Raw(pub Vec<u8>);

impl Raw {
    pub fn new() -> Raw {
        Raw(vec![0x80, 4])
    }
    pub fn op(&mut self, b: &[u8]) -> &mut Raw {
        self.0.extend_from_slice(b);
        self
    }
    pub fn repeat(&mut self, b: &[u8], n: usize) -> &mut Raw {
        for _ in 0..n {
            self.0.extend_from_slice(b);
        }
        self
    }
    /// SHORT_BINUNICODE.
    pub fn s(&mut self, x: &str) -> &mut Raw {
        self.0.extend([0x8c, x.len() as u8]);
        self.op(x.as_bytes())
    }
    /// LONG1 of 8 bytes.
    pub fn int(&mut self, i: i64) -> &mut Raw {
        self.0.extend([0x8a, 8]);
        self.op(&i.to_le_bytes())
    }
    pub fn done(&mut self) -> Vec<u8> {
        self.0.push(b'.');
        std::mem::take(&mut self.0)
    }
}

/// `{"segments": [], "device_traces": [[TRACE…]]}` where `trace` pushes the entries
/// (after a MARK) onto the stack.
fn raw_snapshot(trace: impl FnOnce(&mut Raw)) -> Vec<u8> {
    let mut r = Raw::new();
    r.op(b"}(").s("segments").op(b"]").s("device_traces").op(b"](](");
    trace(&mut r);
    r.op(b"eeu").done()
}

/// An alloc entry dict `{"action": "alloc", "addr": A, "size": S, "frames": FRAMES}` where
/// `frames` pushes the frames value.
fn raw_entry(r: &mut Raw, addr: i64, size: i64, frames: impl FnOnce(&mut Raw)) {
    r.op(b"}(").s("action").s("alloc").s("addr").int(addr).s("size").int(size).s("frames");
    frames(r);
    r.op(b"u");
}

fn raw_frame(r: &mut Raw) {
    r.op(b"}(").s("name").s("forward").s("filename").s("model.py").s("line").op(b"K\x07u");
}

/// `n` trace entries that are one dict (DUP), whose frames are one list of `m` frames
/// that are one dict: stored in ~n + m bytes, unfolded n·m frames.
pub fn shared_frames(n: usize, m: usize) -> Vec<u8> {
    raw_snapshot(|r| {
        raw_entry(r, 1 << 20, 512, |r| {
            r.op(b"](");
            raw_frame(r);
            r.repeat(b"2", m - 1).op(b"e");
        });
        r.repeat(b"2", n - 1);
    })
}

fn entry(action: &str, addr: i64, size: i64, more: Vec<(&str, Value)>) -> Value {
    let mut d = vec![("action", Value::str(action)), ("addr", Value::Int(addr)), ("size", Value::Int(size))];
    d.extend(more);
    Value::dict(d)
}

fn snapshot(segments: Vec<Value>, trace: Vec<Value>, extra: Vec<(&str, Value)>) -> Vec<u8> {
    let mut d = vec![("segments", Value::list(segments)), ("device_traces", Value::list(vec![Value::list(trace)]))];
    d.extend(extra);
    write(&Value::dict(d))
}

fn plain(trace: Vec<Value>) -> Vec<u8> {
    snapshot(vec![], trace, vec![])
}

/// allocator_settings holding lists nested `depth` deep, each level two references to the
/// one below: ~60 bytes per level stored, 2^depth unfolded.
pub fn shared_settings(depth: usize) -> Vec<u8> {
    let mut l = Value::list(vec![Value::Int(1)]);
    for _ in 0..depth {
        l = Value::list(vec![l.clone(), l]);
    }
    snapshot(vec![], vec![entry("alloc", 1 << 20, 512, vec![])], vec![("allocator_settings", Value::dict(vec![("nested", l)]))])
}

/// `n` allocations, each followed by an OOM entry.
pub fn many_ooms(n: usize) -> Vec<u8> {
    let mut t = Vec::new();
    for i in 0..n as i64 {
        t.push(entry("alloc", (1 << 30) + 512 * i, 512, vec![]));
        t.push(entry("oom", 0, 1 << 30, vec![("device_free", Value::Int(0))]));
    }
    plain(t)
}

/// `n` allocations of `n` distinct categories.
pub fn categories(n: usize) -> Vec<u8> {
    plain((0..n as i64).map(|i| entry("alloc", (1 << 30) + 512 * i, 512, vec![("category", Value::str(&format!("c{i}")))])).collect())
}

/// roundup_power2_divisions: every interval `div`, and an allocation (freed at once) in each
/// interval.
pub fn divisions(div: i64) -> Vec<u8> {
    let keys: Vec<String> = (0..16).map(|i| (1u64 << i).to_string()).collect();
    let divs = Value::dict(keys.iter().map(|k| (k.as_str(), Value::Int(div))).collect());
    let mut trace = Vec::new();
    for i in 0..40 {
        let (addr, size) = ((1i64 << 58) + (i << 52), (1i64 << (i + 14).min(52)) + 1);
        trace.push(entry("alloc", addr, size, vec![]));
        trace.push(entry("free_requested", addr, size, vec![]));
        trace.push(entry("free_completed", addr, size, vec![]));
    }
    snapshot(vec![], trace, vec![("allocator_settings", Value::dict(vec![("roundup_power2_divisions", divs)]))])
}

/// A segment with one active block, and a trace alloc + free, with `field` of the one
/// named place set to `v`.
pub fn number(place: &str, v: i64) -> Vec<u8> {
    let f = |p: &str, d: i64| Value::Int(if p == place { v } else { d });
    let block = Value::dict(vec![
        ("address", f("block.address", 1 << 30)),
        ("size", f("block.size", 1 << 20)),
        ("requested_size", f("block.requested_size", 1 << 20)),
        ("state", Value::str("active_allocated")),
    ]);
    let seg = Value::dict(vec![
        ("device", Value::Int(0)),
        ("address", Value::Int(1 << 30)),
        ("total_size", f("total_size", 2 << 20)),
        ("blocks", Value::list(vec![block])),
    ]);
    let trace = vec![
        entry("segment_alloc", 1 << 30, 2 << 20, vec![("time_us", f("time_a", 1000))]),
        entry("alloc", f("addr", (1 << 30) + (1 << 20)).as_int().unwrap(), f("size", 4096).as_int().unwrap(), vec![("time_us", f("time_b", 2000))]),
        entry("free_requested", (1 << 30) + (1 << 20), 4096, vec![("time_us", f("time_c", 3000))]),
        entry("oom", 0, f("oom.size", 1 << 40).as_int().unwrap(), vec![("device_free", f("device_free", 0))]),
    ];
    snapshot(vec![seg], trace, vec![])
}

/// Two allocations of 2^53 bytes live at once: each size is representable, their sum not.
pub fn sum_beyond_2p53() -> Vec<u8> {
    plain(vec![entry("alloc", 1 << 40, 1 << 53, vec![]), entry("alloc", 1 << 41, 1 << 53, vec![])])
}

/// `n` DUPs of None: the unpickler stack grows by one value per input byte.
pub fn dup_bomb(n: usize) -> Vec<u8> {
    Raw::new().op(b"N").repeat(b"2", n).done()
}

/// One list of `n` Nones, appended 1000 at a time (~1 byte per item).
pub fn long_list(n: usize) -> Vec<u8> {
    let mut r = Raw::new();
    r.op(b"]");
    for k in (0..n).step_by(1000) {
        r.op(b"(N").repeat(b"2", (n - k).min(1000) - 1).op(b"e");
    }
    r.done()
}

/// Lists nested `n` deep: `]` n times, then APPEND each onto the one below.
pub fn deep_nesting(n: usize) -> Vec<u8> {
    Raw::new().repeat(b"]", n).repeat(b"a", n - 1).done()
}

/// `n` MARKs never closed.
pub fn deep_marks(n: usize) -> Vec<u8> {
    Raw::new().repeat(b"(", n).done()
}

/// `n` memo entries under descending keys (out of order: the sparse memo).
pub fn memo_bomb(n: usize) -> Vec<u8> {
    let mut r = Raw::new();
    r.op(b"N");
    for k in (0..n as u32).rev() {
        r.op(b"r").op(&k.to_le_bytes());
    }
    r.done()
}

/// `n` empty lists, appended 1000 at a time to one list.
pub fn many_containers(n: usize) -> Vec<u8> {
    let mut r = Raw::new();
    r.op(b"]");
    for k in (0..n).step_by(1000) {
        r.op(b"(").repeat(b"]", (n - k).min(1000)).op(b"e");
    }
    r.done()
}

/// A trace of `n` references to one alloc entry dict (memo slot 0), 1000 per APPENDS.
pub fn shared_entries(n: usize) -> Vec<u8> {
    raw_snapshot(|r| {
        raw_entry(r, 1 << 20, 512, |r| {
            r.op(b"N");
        });
        r.op(b"q\x00").repeat(b"2", n.min(1000) - 1);
        for k in (1000..n).step_by(1000) {
            r.op(b"e(").repeat(b"h\x00", (n - k).min(1000));
        }
    })
}

/// `n` segments that all share one list of `m` active blocks.
pub fn shared_blocks(n: usize, m: usize) -> Vec<u8> {
    let mut r = Raw::new();
    r.op(b"}(").s("segments").op(b"](");
    r.op(b"}(").s("device").op(b"K\x00").s("total_size").int(1 << 30).s("blocks").op(b"](");
    r.op(b"}(").s("state").s("active_allocated").s("address").int(1 << 30).s("size").int(512).s("requested_size").int(512).op(b"u");
    r.repeat(b"2", m - 1).op(b"eu");
    r.repeat(b"2", n - 1).op(b"e").s("device_traces").op(b"]u").done()
}

/// Trace entries that share one dict of `k` keys (read field by field per entry, that is
/// n·k work).
pub fn wide_shared_entry(n: usize, k: usize) -> Vec<u8> {
    raw_snapshot(|r| {
        r.op(b"}(");
        for i in 0..k {
            r.s(&format!("k{i}")).op(b"N");
        }
        r.s("action").s("alloc").s("addr").int(1 << 20).s("size").int(512).op(b"u");
        r.repeat(b"2", n - 1);
    })
}

/// A category string of `len` bytes shared (memo) by `n` entries.
pub fn shared_long_category(n: usize, len: usize) -> Vec<u8> {
    let c = Value::str(&"c".repeat(len));
    plain((0..n as i64).map(|i| entry("alloc", (1 << 30) + 512 * i, 512, vec![("category", c.clone())])).collect())
}

/// BINUNICODE8 declaring 2^62 bytes.
pub fn huge_declared_length() -> Vec<u8> {
    let mut r = Raw::new();
    r.op(&[0x8d]).op(&(1u64 << 62).to_le_bytes()).op(b"abc");
    r.0
}

/// A code-executing pickle: GLOBAL os.system + REDUCE.
pub fn executing() -> Vec<u8> {
    b"cos\nsystem\n(S'echo pwned'\ntR.".to_vec()
}

/// Deterministic garbage that starts like a pickle.
pub fn garbage(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut v = vec![0x80, 4];
    v.extend((0..n).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 24) as u8
    }));
    v
}

/// The small corpus committed under tests/fixtures/hostile/ (name → bytes).
pub fn small() -> Vec<(&'static str, Vec<u8>)> {
    let whole = many_ooms(50);
    vec![
        ("shared_frames_20k.pickle", shared_frames(20_000, 20_000)),
        ("shared_frames_1k.pickle", shared_frames(1100, 1100)),
        ("settings_shared_lists.pickle", shared_settings(40)),
        ("many_ooms_1k.pickle", many_ooms(1000)),
        ("categories_1k.pickle", categories(1000)),
        ("divisions_huge.pickle", divisions(1 << 62)),
        ("divisions_2p43.pickle", divisions(1 << 43)),
        ("divisions_not_power_of_two.pickle", divisions(3)),
        ("divisions_negative.pickle", divisions(-4)),
        ("size_i64_max.pickle", number("size", i64::MAX)),
        ("size_negative.pickle", number("size", -4096)),
        ("size_i64_min.pickle", number("size", i64::MIN)),
        ("addr_negative.pickle", number("addr", -1)),
        ("time_i64_max.pickle", number("time_b", i64::MAX)),
        ("time_i64_min.pickle", number("time_c", i64::MIN)),
        ("time_negative.pickle", number("time_a", -5_000_000)),
        ("total_size_i64_max.pickle", number("total_size", i64::MAX)),
        ("block_size_i64_max.pickle", number("block.size", i64::MAX)),
        ("requested_size_i64_max.pickle", number("block.requested_size", i64::MAX)),
        ("oom_size_i64_max.pickle", number("oom.size", i64::MAX)),
        ("device_free_negative.pickle", number("device_free", -1)),
        ("sizes_sum_beyond_2p53.pickle", sum_beyond_2p53()),
        ("dup_bomb_small.pickle", dup_bomb(1000)),
        ("long_list_small.pickle", long_list(5000)),
        ("deep_nesting.pickle", deep_nesting(10_000)),
        ("deep_marks.pickle", deep_marks(10_000)),
        ("memo_bomb_small.pickle", memo_bomb(1000)),
        ("shared_entries_small.pickle", shared_entries(1000)),
        ("shared_blocks_small.pickle", shared_blocks(100, 100)),
        ("wide_shared_entry_small.pickle", wide_shared_entry(1000, 1000)),
        ("shared_long_category.pickle", shared_long_category(2000, 10_000)),
        ("huge_declared_length.pickle", huge_declared_length()),
        ("executing.pickle", executing()),
        ("zeros.pickle", vec![0; 4096]),
        ("truncated.pickle", whole[..whole.len() / 2].to_vec()),
        ("garbage.pickle", garbage(4096)),
        ("empty.pickle", Vec::new()),
    ]
}

/// Big files, generated at test time (name → generator).
pub fn big() -> Vec<(&'static str, fn() -> Vec<u8>)> {
    vec![
        ("many_ooms_20k.pickle", || many_ooms(20_000)),
        ("categories_100k.pickle", || categories(100_000)),
        ("dup_bomb_100m.pickle", || dup_bomb(100_000_000)),
        ("long_list_50m.pickle", || long_list(50_000_000)),
        ("long_list_23m.pickle", || long_list(23_000_000)),
        ("memo_bomb_3m.pickle", || memo_bomb(3_000_000)),
        ("memo_bomb_1_9m.pickle", || memo_bomb(1_900_000)),
        ("many_containers_4m.pickle", || many_containers(4_000_000)),
        ("many_containers_2_9m.pickle", || many_containers(2_900_000)),
        // Beyond the default --max-trace-entries (10.5 M), refused before the replay.
        ("shared_entries_11m.pickle", || shared_entries(11_000_000)),
        ("shared_entries_1_9m.pickle", || shared_entries(1_900_000)),
        ("shared_blocks_3300.pickle", || shared_blocks(3300, 3300)),
        ("wide_shared_entry_20k.pickle", || wide_shared_entry(20_000, 20_000)),
        ("garbage_big.pickle", || garbage(8 << 20)),
    ]
}
