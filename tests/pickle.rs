//! The pickle reader and writer (`src/pickle.rs`): round trips with shared references,
//! CPython reading ours and us reading CPython's (protocols 0–5; the fixtures are committed so
//! this runs without python3), MemoryViz's opcode subset, and hostile inputs.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::time::{Duration, Instant};
use vramscope::pickle::{read, write, Limits, PickleError, Value};

fn s(v: &str) -> Value {
    Value::str(v)
}
fn i(v: i64) -> Value {
    Value::Int(v)
}
fn l(v: Vec<Value>) -> Value {
    Value::list(v)
}
fn t(v: Vec<Value>) -> Value {
    Value::tuple(v)
}
fn rd(b: &[u8]) -> Result<Value, PickleError> {
    read(b, &Limits::default())
}

fn have_python() -> bool {
    let ok = Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("note: python3 is not on PATH; skipping the CPython side of this test");
    }
    ok
}

fn python(args: &[&str]) -> String {
    let out = Command::new("python3").args(args).output().expect("running python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "python3 failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pickle")
}

/// Same container object (`Rc`)?
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::List(a), Value::List(b)) | (Value::Tuple(a), Value::Tuple(b)) => Rc::ptr_eq(a, b),
        (Value::Dict(a), Value::Dict(b)) => Rc::ptr_eq(a, b),
        _ => false,
    }
}

/// The sharing topology: each container replaced by the order in which its `Rc` was first seen.
fn sharing(v: &Value) -> Vec<usize> {
    fn walk(v: &Value, seen: &mut Vec<*const ()>, out: &mut Vec<usize>) {
        let (ptr, kids): (*const (), Vec<&Value>) = match v {
            Value::List(x) | Value::Tuple(x) => (Rc::as_ptr(x).cast(), x.iter().collect()),
            Value::Dict(x) => (Rc::as_ptr(x).cast(), x.iter().flat_map(|(k, v)| [k, v]).collect()),
            _ => return,
        };
        match seen.iter().position(|&p| p == ptr) {
            Some(k) => out.push(k),
            None => {
                out.push(seen.len());
                seen.push(ptr);
                kids.into_iter().for_each(|k| walk(k, seen, out));
            }
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// A copy with no container shared.
fn unshare(v: &Value) -> Value {
    match v {
        Value::List(x) => l(x.iter().map(unshare).collect()),
        Value::Tuple(x) => t(x.iter().map(unshare).collect()),
        Value::Dict(x) => Value::Dict(Rc::new(x.iter().map(|(k, v)| (unshare(k), unshare(v))).collect())),
        _ => v.clone(),
    }
}

/// Walks a pickle our writer made, as MemoryViz.js's stack machine would, and checks that it
/// uses only the opcodes that reader knows (PROTO 4, no FRAME/MEMOIZE, LONG1 ≤ 8 bytes),
/// batches of ≤ 1000 items, one value at STOP. Returns the opcodes.
fn memoryviz_ops(b: &[u8]) -> Vec<u8> {
    assert_eq!(b[..2], [0x80, 4], "PROTO 4");
    let (mut p, mut height, mut marks, mut ops) = (2, 0usize, Vec::new(), vec![0x80]);
    let u32_at = |p: usize| u32::from_le_bytes(b[p..p + 4].try_into().unwrap()) as usize;
    loop {
        let op = b[p];
        p += 1;
        ops.push(op);
        let (arg, push) = match op {
            b'N' | 0x88 | 0x89 | b'}' | b']' | b')' => (0, true),
            b'K' => (1, true),
            b'M' => (2, true),
            b'J' => (4, true),
            b'G' => (8, true),
            0x8a => {
                assert!(b[p] <= 8, "LONG1 of {} bytes", b[p]);
                (1 + b[p] as usize, true)
            }
            0x8c => (1 + b[p] as usize, true),
            b'X' => (4 + u32_at(p), true),
            b'h' => (1, true),
            b'j' => (4, true),
            b'q' => (1, false),
            b'r' => (4, false),
            b'(' => {
                marks.push(height);
                (0, false)
            }
            b'e' | b'u' | b't' => {
                let m = marks.pop().expect("MARK");
                // Tuples are not batched (nor are they by CPython); lists and dicts are.
                let most = [1000, 2000, usize::MAX][usize::from(op == b'u') + 2 * usize::from(op == b't')];
                assert!(height - m <= most, "batch of {} stack items", height - m);
                height = m + usize::from(op == b't');
                (0, false)
            }
            0x85..=0x87 => {
                height -= usize::from(op - 0x85);
                (0, false)
            }
            b'.' => {
                assert_eq!((p, height, marks.len()), (b.len(), 1, 0), "one value at STOP, at the end");
                return ops;
            }
            _ => panic!("opcode {op:#04x} at byte {} is outside MemoryViz's subset", p - 1),
        };
        height += usize::from(push);
        p += arg;
    }
}

// ---------------------------------------------------------------------------------------
// Round trips

#[test]
fn round_trip_of_every_kind_of_value() {
    let v = Value::dict(vec![
        ("none", Value::None),
        ("bools", l(vec![Value::Bool(true), Value::Bool(false)])),
        (
            "ints",
            l([0, 1, -1, 255, 256, 65535, 65536, i32::MAX as i64, i32::MIN as i64, 1 << 47, -(1 << 47), i64::MAX, i64::MIN]
                .map(i)
                .to_vec()),
        ),
        ("floats", l([0.0, -0.0, 1.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MIN_POSITIVE, 1e300].map(Value::Float).to_vec())),
        ("strs", l(vec![s(""), s("ünïcödé 日本語 🦀"), s(&"long".repeat(100)), s(&"x".repeat(70_000))])),
        ("bytes", l(vec![Value::Bytes(vec![]), Value::Bytes(vec![0, 255]), Value::Bytes(vec![7; 300])])),
        ("tuples", l(vec![t(vec![]), t(vec![i(1)]), t(vec![i(1), i(2)]), t(vec![i(1), i(2), i(3)]), t((0..5).map(i).collect())])),
        ("big", l((0..2500).map(|k| i(k * 1000)).collect())),
        ("bigdict", Value::Dict(Rc::new((0..2100).map(|k| (i(k), s(&k.to_string()))).collect()))),
        ("nested", l(vec![l(vec![l(vec![Value::dict(vec![("k", t(vec![Value::None]))])])])])),
    ]);
    let out = write(&v);
    assert_eq!(rd(&out).unwrap(), v);
    assert_eq!(v.get("ints").and_then(|x| x.as_list()).map(|x| x.len()), Some(13));
}

#[test]
fn shared_lists_are_written_once_and_read_back_shared() {
    let frames = l(vec![Value::dict(vec![("filename", s("a.py")), ("line", i(3)), ("name", s("f"))])]);
    let entries: Vec<Value> = (0..50).map(|n| Value::dict(vec![("size", i(n)), ("frames", frames.clone())])).collect();
    let v = Value::dict(vec![("device_traces", l(vec![l(entries)]))]);
    let shared = write(&v);
    let copied = write(&unshare(&v));
    let lists = |b: &[u8]| memoryviz_ops(b).iter().filter(|&&op| op == b']').count();
    assert_eq!((lists(&shared), lists(&copied)), (3, 52), "the frames list is written once");
    assert!(shared.len() < copied.len(), "{} vs {}", shared.len(), copied.len());
    for out in [&shared, &copied] {
        assert_eq!(rd(out).unwrap(), v);
    }
    let back = rd(&shared).unwrap();
    let trace = back.get("device_traces").unwrap().as_list().unwrap()[0].as_list().unwrap();
    assert!(trace.windows(2).all(|w| same(w[0].get("frames").unwrap(), w[1].get("frames").unwrap())));
    assert_eq!(sharing(&back), sharing(&v));
}

#[test]
fn memo_slots_past_255_use_long_binput_and_long_binget() {
    let lists: Vec<Value> = (0..600).map(|k| l(vec![i(k)])).collect();
    let v = l(lists.iter().chain(lists.iter()).cloned().collect());
    let out = write(&v);
    let ops = memoryviz_ops(&out);
    assert_eq!(ops.iter().filter(|&&op| op == b'r').count(), 600 - 256);
    assert_eq!(ops.iter().filter(|&&op| op == b'j').count(), 600 - 256);
    let back = rd(&out).unwrap();
    assert_eq!(back, v);
    assert_eq!(sharing(&back), sharing(&v));
}

/// Deterministic pseudo-random numbers (Knuth's MMIX LCG).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 16
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random tree of bounded depth; containers already made are reused (shared) at times.
fn random_value(r: &mut Lcg, depth: usize, bytes: bool, pool: &mut Vec<Value>) -> Value {
    const EDGES: [i64; 12] = [0, 255, 256, 65535, 65536, -1, -129, i32::MAX as i64 + 1, i32::MIN as i64 - 1, 1 << 47, i64::MAX, i64::MIN];
    if depth == 0 || r.below(3) == 0 {
        return match r.below(9) {
            0 => Value::None,
            1 => Value::Bool(r.below(2) == 0),
            2 => i(r.below(70_000) as i64 - 1000),
            3 => i(((r.next() << 32) ^ r.next()) as i64),
            4 => i(EDGES[r.below(12) as usize]),
            5 => Value::Float(f64::from_bits((r.next() << 32) ^ r.next())),
            6 => {
                let chars = ['a', 'z', 'é', '日', '🦀', '"', '\n', '\0'];
                let n = if r.below(10) == 0 { 300 } else { r.below(8) };
                Value::Str((0..n).map(|_| chars[r.below(8) as usize]).collect::<String>().into())
            }
            7 if bytes => Value::Bytes((0..r.below(300)).map(|k| k as u8).collect()),
            _ if !pool.is_empty() => pool[r.below(pool.len() as u64) as usize].clone(),
            _ => Value::None,
        };
    }
    // Now and then a container big enough for several MARK…APPENDS batches, at the leaves.
    let n = if depth == 1 && r.below(20) == 0 { 1000 + r.below(1100) as usize } else { r.below(6) as usize };
    let kind = r.below(3);
    let items: Vec<Value> = (0..n).map(|_| random_value(r, depth - 1, bytes, pool)).collect();
    let v = match kind {
        0 => l(items),
        1 => t(items),
        _ => Value::Dict(Rc::new(items.into_iter().map(|k| (k, random_value(r, depth - 1, bytes, pool))).collect())),
    };
    pool.push(v.clone());
    v
}

#[test]
fn random_trees_round_trip_with_their_sharing() {
    let mut r = Lcg(42);
    for case in 0..2000 {
        let bytes = case % 2 == 1;
        let v = random_value(&mut r, 1 + case % 5, bytes, &mut Vec::new());
        let out = write(&v);
        if !bytes {
            memoryviz_ops(&out);
        }
        let back = rd(&out).unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_eq!(back, v, "case {case}");
        assert_eq!(sharing(&back), sharing(&v), "case {case}");
    }
}

#[test]
fn nesting_up_to_max_depth_reads_and_one_more_is_refused() {
    let nest = |d: usize| (0..d).fold(Value::None, |acc, _| l(vec![acc]));
    assert_eq!(rd(&write(&nest(256))).unwrap(), nest(256));
    let e = rd(&write(&nest(257))).unwrap_err();
    assert!(e.message.contains("than 256") && e.message.contains("Limits::max_depth"), "{e}");
    let limits = Limits { max_depth: 3, ..Limits::default() };
    assert!(read(&write(&nest(3)), &limits).is_ok());
    assert!(read(&write(&nest(4)), &limits).is_err());
}

// ---------------------------------------------------------------------------------------
// CPython reads ours

/// A snapshot-shaped structure (formats.md §1); `SNAPSHOT_PY` builds the same in Python.
fn snapshot_like() -> Value {
    let frame_lists: Vec<Value> = (0..7i64)
        .map(|k| {
            l((0..=k % 3)
                .map(|j| {
                    let name = if j == 0 { "forward" } else { "ünïcode_fn" };
                    Value::dict(vec![("filename", s(&format!("model/layer{k}.py"))), ("line", i(10 * k + j)), ("name", s(name))])
                })
                .collect())
        })
        .collect();
    let pool = t(vec![i(0), i(0)]);
    let base = (1i64 << 47) + 0x1234_0000;
    let segments = (0..3i64).map(|k| {
        let block = Value::dict(vec![
            ("address", i(base + k * (1 << 21))),
            ("size", i(1 << 21)),
            ("requested_size", i(0)),
            ("state", s("inactive")),
            ("frames", l(vec![])),
        ]);
        Value::dict(vec![
            ("device", i(0)),
            ("address", i(base + k * (1 << 21))),
            ("total_size", i(1 << 21)),
            ("allocated_size", i(512 * k)),
            ("requested_size", i(500 * k)),
            ("stream", i(0)),
            ("segment_type", s("large")),
            ("segment_pool_id", pool.clone()),
            ("is_expandable", Value::Bool(false)),
            ("frames", frame_lists[k as usize].clone()),
            ("blocks", l(vec![block])),
        ])
    });
    let actions = ["alloc", "free_requested", "free_completed", "segment_alloc"];
    let trace = (0..3000i64).map(|n| {
        Value::dict(vec![
            ("action", s(actions[n as usize % 4])),
            ("addr", i(base + 512 * n)),
            ("size", i(512 * (n % 100) + 1)),
            ("stream", i(0)),
            ("time_us", i(1_700_000_000_000_000 + n)),
            ("compile_context", s("N/A")),
            ("user_metadata", s("")),
            ("frames", frame_lists[n as usize % 7].clone()),
        ])
    });
    Value::dict(vec![
        ("segments", l(segments.collect())),
        ("device_traces", l(vec![l(trace.collect()), l(vec![])])),
        (
            "allocator_settings",
            Value::dict(vec![
                ("PYTORCH_CUDA_ALLOC_CONF", s("")),
                ("max_split_size", i(-1)),
                ("garbage_collection_threshold", Value::Float(0.0)),
                ("expandable_segments", Value::Bool(false)),
                ("neg", i(-(1 << 40))),
                ("ratio", Value::Float(-1.25e-7)),
                ("none", Value::None),
            ]),
        ),
    ])
}

const SNAPSHOT_PY: &str = r#"
import pickle, pickletools, sys
data = open(sys.argv[1], "rb").read()
snap = pickle.loads(data)
frame_lists = [[{"filename": f"model/layer{k}.py", "line": 10 * k + j, "name": "forward" if j == 0 else "ünïcode_fn"}
                for j in range(k % 3 + 1)] for k in range(7)]
base = 2**47 + 0x12340000
segments = [{"device": 0, "address": base + k * 2**21, "total_size": 2**21, "allocated_size": 512 * k,
             "requested_size": 500 * k, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
             "is_expandable": False, "frames": frame_lists[k],
             "blocks": [{"address": base + k * 2**21, "size": 2**21, "requested_size": 0, "state": "inactive", "frames": []}]}
            for k in range(3)]
actions = ["alloc", "free_requested", "free_completed", "segment_alloc"]
trace = [{"action": actions[n % 4], "addr": base + 512 * n, "size": 512 * (n % 100) + 1, "stream": 0,
          "time_us": 1_700_000_000_000_000 + n, "compile_context": "N/A", "user_metadata": "", "frames": frame_lists[n % 7]}
         for n in range(3000)]
expected = {"segments": segments, "device_traces": [trace, []],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                                   "expandable_segments": False, "neg": -2**40, "ratio": -1.25e-7, "none": None}}
assert snap == expected, "structure differs"
assert [list(d) for d in snap["segments"]] == [list(d) for d in segments], "key order"
t = snap["device_traces"][0]
assert all(t[n]["frames"] is t[n % 7]["frames"] for n in range(3000)), "frames not shared"
assert snap["segments"][1]["frames"] is t[1]["frames"]
assert snap["segments"][0]["segment_pool_id"] is snap["segments"][2]["segment_pool_id"]
assert type(snap["allocator_settings"]["ratio"]) is float and type(snap["segments"][0]["address"]) is int
allowed = {"PROTO", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "MARK", "SETITEMS", "APPENDS", "TUPLE", "TUPLE1",
           "TUPLE2", "TUPLE3", "NONE", "NEWTRUE", "NEWFALSE", "BININT1", "BININT2", "BININT", "LONG1", "BINFLOAT",
           "SHORT_BINUNICODE", "BINUNICODE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "STOP"}
ops = {op.name for op, _, _ in pickletools.genops(data)}
assert ops <= allowed, ops - allowed
print("OK")
"#;

#[test]
fn python_reads_our_snapshot_with_shared_frames() {
    let v = snapshot_like();
    let out = write(&v);
    memoryviz_ops(&out);
    let back = rd(&out).unwrap();
    assert_eq!(back, v);
    assert_eq!(sharing(&back), sharing(&v));
    assert!(out.len() < write(&unshare(&v)).len());
    if !have_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.pickle");
    std::fs::write(&path, &out).unwrap();
    assert_eq!(python(&["-c", SNAPSHOT_PY, path.to_str().unwrap()]).trim(), "OK");
}

// ---------------------------------------------------------------------------------------
// We read CPython's

/// What `tests/fixtures/pickle/generate.py` pickles with protocol `proto`.
fn python_structure(proto: u8) -> Value {
    let shared = l(vec![i(1), i(2), i(3)]);
    let frames = l(vec![Value::dict(vec![("filename", s("train.py")), ("line", i(42)), ("name", s("forward"))])]);
    let pool = t(vec![i(0), i(0)]);
    let ints =
        [0, 1, 255, 256, 65535, 65536, -1, -128, -129, -(1 << 31), (1 << 31) - 1, 1 << 31, (1 << 47) + 5, -(1 << 47), i64::MAX, i64::MIN];
    let strs = ["", "ascii", "ünïcödé", "日本語", "🦀", "back\\slash\nnew'line\"", &"x".repeat(300)];
    let nested = Value::Dict(Rc::new(vec![
        (s("a"), Value::dict(vec![("b", t(vec![i(1), t(vec![i(2), i(3)]), l(vec![i(4), Value::dict(vec![("c", Value::None)])])]))])),
        (s("t0"), t(vec![])),
        (s("t1"), t(vec![Value::Bool(true)])),
        (s("t4"), t((1..=4).map(i).collect())),
        (i(7), s("int key")),
    ]));
    let mut d = vec![
        ("ints", l(ints.map(i).to_vec())),
        ("floats", l([0.0, -0.0, 1.5, -2.25e-300, 1e300, f64::INFINITY].map(Value::Float).to_vec())),
        ("strs", l(strs.map(s).to_vec())),
        ("nested", nested),
        ("shared1", shared.clone()),
        ("shared2", shared),
        ("frames_a", frames.clone()),
        ("frames_b", l(vec![frames.clone(), frames])),
        ("pools", l(vec![pool.clone(), pool])),
        ("consts", l(vec![Value::Bool(true), Value::Bool(false), Value::None])),
        ("long", l((0..1100).map(i).collect())),
    ];
    if proto >= 3 {
        d.push(("bytes", Value::Bytes(b"\x00\x01abc".to_vec())));
        d.push(("bytes_long", Value::Bytes(vec![b'z'; 300])));
    }
    if proto >= 4 {
        d.push(("set", l(vec![i(1), i(2), i(3)])));
        d.push(("frozenset", l(vec![i(7)])));
    }
    if proto >= 5 {
        d.push(("bytearray", Value::Bytes(b"\x00\xffba".to_vec())));
    }
    Value::dict(d)
}

fn check_python_pickle(path: &Path, proto: u8) {
    let data = std::fs::read(path).unwrap();
    let v = rd(&data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(v, python_structure(proto), "{}", path.display());
    let get = |k: &str| v.get(k).unwrap();
    assert!(same(get("shared1"), get("shared2")), "shared list, protocol {proto}");
    let fb = get("frames_b").as_list().unwrap();
    assert!(same(get("frames_a"), &fb[0]) && same(&fb[0], &fb[1]), "shared frames, protocol {proto}");
    let pools = get("pools").as_list().unwrap();
    assert!(same(&pools[0], &pools[1]), "shared tuple, protocol {proto}");
}

#[test]
fn we_read_the_committed_cpython_pickles_of_protocols_0_to_5() {
    for proto in 0..=5 {
        check_python_pickle(&fixtures().join(format!("proto{proto}.pickle")), proto);
    }
}

#[test]
fn we_read_what_this_machines_python_writes() {
    if !have_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = fixtures().join("generate.py");
    python(&[script.to_str().unwrap(), dir.path().to_str().unwrap()]);
    for proto in 0..=5 {
        check_python_pickle(&dir.path().join(format!("proto{proto}.pickle")), proto);
    }
}

/// Opcodes CPython 3 no longer writes for plain data but older picklers did (Python 2's str,
/// LONG4, the 8-byte-length forms, POP/DUP/POP_MARK, text PUT/GET, DICT/LIST/SETITEM).
#[test]
fn hand_written_opcode_forms() {
    let text = b"(lp0\nI-5\naL-9223372036854775808L\naF-0.25\naS'a\\'b\\x41\\n'\naV\\u00e9\\U0001f980x\naI01\naI00\na.";
    let want = l(vec![i(-5), i(i64::MIN), Value::Float(-0.25), s("a'bA\n"), s("é🦀x"), Value::Bool(true), Value::Bool(false)]);
    assert_eq!(rd(text).unwrap(), want);
    assert_eq!(rd(b"(dp0\nVk\np1\nI1\nsVj\nI2\nsg1\nI3\ns.").unwrap(), Value::dict(vec![("k", i(1)), ("j", i(2)), ("k", i(3))]));
    assert_eq!(rd(b"(Vx\nI1\nd.").unwrap().get("x"), Some(&i(1)));
    assert_eq!(rd(b"(I1\nI2\nl.").unwrap(), l(vec![i(1), i(2)]));
    assert_eq!(rd(b"\x80\x02N(0.").unwrap(), Value::None, "POP on an empty mark pops the mark");

    let mut body = Vec::new();
    body.extend(b"(");
    body.extend(b"T\x03\x00\x00\x00abc");
    body.extend(b"U\x02hi");
    body.extend(b"\x8b\x03\x00\x00\x00\x01\x00\x80"); // LONG4: -8388607
    body.extend(b"\x8d\x02\x00\x00\x00\x00\x00\x00\x00ok");
    body.extend(b"\x8e\x02\x00\x00\x00\x00\x00\x00\x00\xff\x00");
    body.extend(b"\x8f\x94(K\x01K\x02\x90"); // EMPTY_SET MEMOIZE MARK 1 2 ADDITEMS
    body.extend(b"(K\x09\x91"); // FROZENSET
    body.extend(b"h\x00"); // the set again
    body.extend(b"N20"); // NONE DUP POP
    body.extend(b"(K\x05K\x061"); // MARK 5 6 POP_MARK
    body.extend(b"t.");
    let mut data = vec![0x80, 5, 0x95];
    data.extend((body.len() as u64).to_le_bytes());
    data.extend(&body);
    let v = rd(&data).unwrap();
    let set = l(vec![i(1), i(2)]);
    assert_eq!(
        v,
        t(vec![s("abc"), s("hi"), i(-8388607), s("ok"), Value::Bytes(vec![255, 0]), set.clone(), l(vec![i(9)]), set, Value::None])
    );
    let items = v.as_list().unwrap();
    assert!(same(&items[5], &items[7]));

    // Memo keys out of order, MEMOIZE numbering by the count of keys (as CPython), overwrites.
    let memo = b"\x80\x04(K\x07q\x05K\x08\x94K\x09\x94h\x05h\x01h\x02K\x0aq\x05h\x05K\x0bq\x00h\x00t.";
    assert_eq!(rd(memo).unwrap(), t([7, 8, 9, 7, 8, 9, 10, 10, 11, 11].map(i).to_vec()));

    // A 9-byte LONG1 whose value fits in 64 bits is fine; 2^63 is not.
    assert_eq!(rd(b"\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\x00.").unwrap(), i(i64::MAX));
    assert_eq!(rd(b"\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\xff.").unwrap(), i(i64::MIN));
    assert_eq!(rd(b"\x80\x02\x8a\x00.").unwrap(), i(0));
    let e = rd(b"\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00.").unwrap_err();
    assert_eq!(e.offset, 2);
    assert!(e.message.contains("does not fit in 64 bits"), "{e}");

    // memory_viz pads with NULs; anything else after STOP is an error.
    let mut padded = write(&i(5));
    padded.extend([0, 0]);
    assert_eq!(rd(&padded).unwrap(), i(5));
    padded.push(b'N');
    assert_eq!(rd(&padded).unwrap_err().offset, padded.len() - 1);
}

// ---------------------------------------------------------------------------------------
// Hostile inputs: an error with an offset inside the input, never a panic, quickly.

fn must_fail(data: &[u8], what: &str) -> PickleError {
    let t0 = Instant::now();
    let e = rd(data).expect_err(what);
    assert!(e.offset <= data.len(), "{what}: offset {} past the end ({})", e.offset, data.len());
    assert!(t0.elapsed() < Duration::from_secs(1), "{what} took {:?}", t0.elapsed());
    assert!(e.to_string().starts_with(&format!("byte offset {}: ", e.offset)));
    e
}

fn valid_pickles() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (0..=5).map(|p| std::fs::read(fixtures().join(format!("proto{p}.pickle"))).unwrap()).collect();
    let small = l((0..3).map(|n| Value::dict(vec![("n", i(n)), ("neg", i(-n - (1 << 40))), ("f", Value::Float(0.5))])).collect());
    v.push(write(&small));
    v
}

#[test]
fn every_truncation_is_an_error() {
    for data in valid_pickles() {
        assert!(rd(&data).is_ok());
        for n in 0..data.len() {
            let e = must_fail(&data[..n], "truncated pickle");
            assert!(e.offset <= n);
        }
    }
}

#[test]
fn random_byte_flips_never_panic() {
    let mut r = Lcg(7);
    let t0 = Instant::now();
    let mut errors = 0;
    for data in valid_pickles() {
        for _ in 0..700 {
            let mut d = data.clone();
            for _ in 0..1 + r.below(3) {
                let at = r.below(d.len() as u64) as usize;
                d[at] = match r.below(3) {
                    0 => d[at] ^ (1 << r.below(8)),
                    1 => r.below(256) as u8,
                    _ => [b'(', b'.', b'h', b'a', b'e', b'u', b't', 0x8a, 0x94][r.below(9) as usize],
                };
            }
            if let Err(e) = rd(&d) {
                assert!(e.offset <= d.len());
                errors += 1;
            }
        }
    }
    assert!(errors > 1000, "only {errors} of the flipped pickles were rejected");
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
}

#[test]
fn deep_nesting_is_refused_without_recursion() {
    // 100k EMPTY_LISTs, then 100k APPENDs: each list inside the one before.
    let mut d = vec![0x80, 4];
    d.extend(std::iter::repeat_n(b']', 100_000));
    d.extend(std::iter::repeat_n(b'a', 99_999));
    d.push(b'.');
    assert!(must_fail(&d, "100k nested lists").message.contains("nesting deeper"));

    // Constant stack height: list k+1 appended to list k, then fetched back from the memo.
    let mut d = vec![0x80, 4, b']', b'r', 0, 0, 0, 0];
    for k in 0u32..100_000 {
        d.push(b'j');
        d.extend(k.to_le_bytes());
        d.extend([b']', b'r']);
        d.extend((k + 1).to_le_bytes());
        d.extend([b'a', b'0']);
    }
    d.push(b'.');
    assert!(must_fail(&d, "memo chain").message.contains("nesting deeper"));

    // A million MARKs.
    let mut d = vec![0x80, 4];
    d.extend(std::iter::repeat_n(b'(', 1_000_000));
    d.extend(b"N.");
    assert!(must_fail(&d, "1M MARKs").message.contains("MARK"));
}

#[test]
fn code_execution_opcodes_are_refused() {
    let e = must_fail(b"\x80\x02c__builtin__\neval\n(S'1'\ntR.", "GLOBAL");
    assert_eq!(e.offset, 2);
    assert!(e.message.contains("GLOBAL") && e.message.contains("would execute code"), "{e}");
    for (op, name) in [
        (0x93, "STACK_GLOBAL"),
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (0x81, "NEWOBJ"),
        (0x92, "NEWOBJ_EX"),
        (b'i', "INST"),
        (b'o', "OBJ"),
        (0x82, "EXT1"),
        (0x83, "EXT2"),
        (0x84, "EXT4"),
        (b'P', "PERSID"),
        (b'Q', "BINPERSID"),
    ] {
        let e = must_fail(&[0x80, 4, b'N', b'N', op, b'.'], name);
        assert_eq!(e.offset, 4);
        assert!(e.message.contains(name) && e.message.contains("would execute code"), "{e}");
    }
    for op in [0x97, 0x98] {
        assert!(must_fail(&[0x80, 5, b']', op, b'.'], "buffer").message.contains("BUFFER"));
    }
    assert!(must_fail(b"\x80\x04\xff.", "unknown").message.contains("unknown opcode"));
}

#[test]
fn huge_declared_lengths_fail_before_allocating() {
    let cases: [&[u8]; 9] = [
        b"\x80\x04X\x00\x00\x00\x80abc.",
        b"\x80\x04X\xff\xff\xff\xffabc.",
        b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xffabc.",
        b"\x80\x04\x8e\x00\x00\x00\x00\x00\x00\x00\x80abc.",
        b"\x80\x05\x96\xff\xff\xff\xff\xff\xff\xff\x7fabc.",
        b"\x80\x04\x8b\xff\xff\xff\x7fabc.",
        b"\x80\x04\x8b\xff\xff\xff\xffabc.",
        b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\xffN.",
        b"\x80\x02T\x00\x00\x00\x80abc.",
    ];
    for (k, d) in cases.iter().enumerate() {
        let e = must_fail(d, &format!("case {k}"));
        assert_eq!(e.offset, 2, "case {k}: {e}");
    }
}

#[test]
fn malformed_streams_are_errors_with_offsets() {
    let cases: &[(&[u8], usize, &str)] = &[
        (b"", 0, "end of data"),
        (b"\x80\x04", 2, "missing STOP"),
        (b"\x80\x04.", 2, "0 values"),
        (b"\x80\x04NN.", 4, "2 values"),
        (b"\x80\x04(N.", 4, "unclosed MARK"),
        (b"\x80\x06N.", 0, "protocol 6"),
        (b"\x80\x04h\x05.", 2, "memo key 5"),
        (b"\x80\x04j\x05\x00\x00\x00.", 2, "memo key 5"),
        (b"g7\n.", 0, "memo key 7"),
        (b"\x80\x04a.", 2, "underflow"),
        (b"\x80\x04(N\x86.", 4, "underflow"),
        (b"\x80\x04}N\x85a.", 5, "not a list"),
        (b"\x80\x04](NNNu.", 7, "odd number"),
        (b"\x80\x04]NN(s.", 6, "underflow"),
        (b"\x80\x04e.", 2, "no MARK"),
        (b"\x80\x04\x8c\x02\xc3\x28.", 2, "UTF-8"),
        (b"\x80\x04](K\x01\x90.", 6, "not a set"),
        (b"\x80\x04]q\x00h\x00a.", 2, "recursive"),
        (b"\x80\x04]q\x00h\x00\x85a.", 2, "recursive"),
        (b"I12x\n.", 0, "64-bit"),
        (b"L99999999999999999999L\n.", 0, "64-bit"),
        (b"Fnope\n.", 0, "float"),
        (b"S'abc\n.", 0, "quoted"),
        (b"I5", 0, "newline"),
    ];
    for &(d, offset, msg) in cases {
        let e = must_fail(d, msg);
        assert!(e.message.contains(msg), "{:?}: {e}", String::from_utf8_lossy(d));
        assert_eq!(e.offset, offset, "{:?}: {e}", String::from_utf8_lossy(d));
    }
}

#[test]
fn item_and_byte_limits_hold_against_memo_amplification() {
    // 1000 bytes, fetched from the memo 2000 times: 2 MB from a 5 kB pickle.
    let mut d = vec![0x80, 4, b']', b'(', b'B'];
    d.extend(1000u32.to_le_bytes());
    d.extend([7; 1000]);
    d.extend([b'q', 0]);
    for _ in 0..2000 {
        d.extend([b'h', 0]);
    }
    d.extend([b'e', b'.']);
    assert_eq!(rd(&d).unwrap().as_list().unwrap().len(), 2001);
    let e = read(&d, &Limits { max_bytes: 1 << 20, ..Limits::default() }).unwrap_err();
    assert!(e.message.contains("max_bytes"), "{e}");
    let e = read(&d, &Limits { max_items: 2000, ..Limits::default() }).unwrap_err();
    assert!(e.message.contains("max_items") && e.offset == d.len() - 2, "{e}");
}
