//! The streaming snapshot reader (`pickle::condense`, what `analyze` reads with) against the
//! tree reader (`pickle::read_file`, what it read with before): on every committed snapshot
//! and pickle (PyTorch's own format, vramscope's, the hostile corpus, the fuzz seeds) and on
//! generated PyTorch-format snapshots, the report is the same byte for byte, or both refuse.
//! The streaming reader may hand a file back to the tree reader (`Refused::Bail`), which
//! `analyze` then reads as before; real snapshots must not need that.
use std::path::{Path, PathBuf};
use vramscope::analyse::budget::Budget;
use vramscope::analyse::snapshot::{analyse_replay, analyse_within, replay_condensed};
use vramscope::pickle::condense::{read_file_condensed, Refused};
use vramscope::pickle::read_file;

fn tree(path: &Path, budget: &Budget) -> Result<String, String> {
    let snap = read_file(path, &budget.pickle_limits()).map_err(|e| e.to_string())?;
    let r = analyse_within(&snap, None, 100.0, 50, budget)?;
    Ok(serde_json::to_string_pretty(&r).unwrap())
}

/// None: handed back to the tree reader.
fn streamed(path: &Path, budget: &Budget) -> Option<Result<String, String>> {
    let c = match read_file_condensed(path, &budget.pickle_limits(), budget.trace_entries, budget.frames) {
        Ok(c) => c,
        Err(Refused::Bail) => return None,
        Err(Refused::File(e)) => return Some(Err(e.to_string())),
    };
    Some(replay_condensed(c, None, budget).and_then(|rp| analyse_replay(&rp, 100.0, 50)).map(|r| serde_json::to_string_pretty(&r).unwrap()))
}

fn files(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
    v.sort();
    v
}

/// Compare both readers on `path`; returns whether the streaming reader took the file.
fn same(path: &Path, budget: &Budget) -> bool {
    let old = tree(path, budget);
    match streamed(path, budget) {
        None => false,
        Some(new) => {
            match (&old, &new) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{}: reports differ", path.display()),
                (Err(_), Err(_)) => {}
                // The streaming reader counts the items and containers it holds, not those it
                // let go, so it passes budgets the tree refuses; with room, the tree agrees.
                (Err(e), Ok(b)) if e.contains("(budget --max-items") || e.contains("(budget --max-containers") || e.contains("(budget --max-memo") => {
                    if let Ok(a) = tree(path, &Budget { items: usize::MAX, containers: usize::MAX, memo: usize::MAX, ..budget.clone() }) {
                        assert_eq!(&a, b, "{}: reports differ", path.display());
                    }
                }
                _ => panic!("{}: tree reader {:?}, streaming reader {:?}", path.display(), old.as_ref().map(|_| "ok"), new.as_ref().map(|_| "ok")),
            }
            true
        }
    }
}

/// Bounded budgets, as the fuzz targets use, so that budget refusals are compared too.
fn small() -> Budget {
    Budget { depth: 64, items: 1 << 14, containers: 1 << 12, memo: 1 << 10, frames: 1 << 10, trace_entries: 1 << 12, ..Budget::default() }
}

#[test]
fn pytorch_format_corpus_streams_and_agrees() {
    let all = files("tests/fixtures/pytorch_snapshots");
    assert!(all.len() >= 15);
    let mut streamed = 0;
    for f in &all {
        if same(f, &Budget::default()) {
            streamed += 1;
        }
        same(f, &small());
    }
    // Every one of them except the legacy list of segments (no trace to condense; it is still
    // read, as a tree that holds no entries) goes through the streaming reader.
    assert!(streamed >= all.len() - 1, "only {streamed} of {} streamed", all.len());
}

#[test]
fn hostile_corpus_and_fuzz_seeds_agree() {
    for dir in ["tests/fixtures/hostile", "tests/fixtures/pickle", "fuzz/corpus/pickle_read", "fuzz/corpus/snapshot_report"] {
        for f in files(dir) {
            same(&f, &Budget::default());
            same(&f, &small());
        }
    }
}

/// PyTorch-format snapshots as `bench analyze` writes them (CPython's pickler: FRAMEs,
/// MEMOIZE after every container, shared frame dicts), over a grid of sizes: each is read by
/// the streaming reader and agrees with the tree reader, and the peak is the generated one.
#[test]
fn generated_pytorch_snapshots_agree() {
    let dir = tempfile::tempdir().unwrap();
    for events in [1u64, 2, 999, 1000, 1001, 5_000, 40_000] {
        let path = dir.path().join(format!("t{events}.pickle"));
        let w = vramscope::bench::torch_snapshot::write(std::io::BufWriter::new(std::fs::File::create(&path).unwrap()), events).unwrap();
        assert!(same(&path, &Budget::default()), "{events} events: handed back to the tree reader");
        let r: serde_json::Value = serde_json::from_str(&streamed(&path, &Budget::default()).unwrap().unwrap()).unwrap();
        assert_eq!(r["peak_active_bytes"].as_u64(), Some(w.peak_active), "{events} events");
        assert_eq!(r["events"].as_u64(), Some(w.events), "{events} events");
    }
}

/// vramscope's own snapshots (explicit BINPUT slots, frame lists shared by Rc) stream too.
#[test]
fn own_snapshots_agree() {
    use vramscope::pickle::{write, Value};
    let dir = tempfile::tempdir().unwrap();
    let frames = Value::list(vec![Value::dict(vec![("name", Value::str("f")), ("filename", Value::str("a.py")), ("line", Value::Int(3))])]);
    let mut trace = Vec::new();
    for i in 0..3000i64 {
        let e = |a: &str| Value::dict(vec![("action", Value::str(a)), ("addr", Value::Int(4096 * (i % 7))), ("size", Value::Int(512 + i)), ("frames", frames.clone())]);
        trace.push(e("alloc"));
        if i % 3 != 0 {
            trace.push(e("free_requested"));
            trace.push(e("free_completed"));
        }
    }
    let snap = Value::dict(vec![("segments", Value::list(vec![])), ("device_traces", Value::list(vec![Value::list(trace)]))]);
    let path = dir.path().join("own.pickle");
    std::fs::write(&path, write(&snap)).unwrap();
    assert!(same(&path, &Budget::default()));
}

/// What the streaming reader cannot condense without changing the result goes back to the
/// tree reader: here an entry dict that the memo holds, changed through it after it was
/// appended.
#[test]
fn shapes_it_does_not_take_are_handed_back() {
    let dir = tempfile::tempdir().unwrap();
    // {"segments": [], "device_traces": [[e]]}, then e["size"] = 7 through the memo.
    let mut p: Vec<u8> = vec![0x80, 4, b'}', b'(', 0x8c, 8];
    p.extend(b"segments");
    p.extend([b']', 0x8c, 13]);
    p.extend(b"device_traces");
    p.extend([b']', b']', b'}', 0x94]); // e, memo 0
    p.extend([0x8c, 6]);
    p.extend(b"action");
    p.extend([0x8c, 5]);
    p.extend(b"alloc");
    p.extend([b's', b'a', b'a', b'u']); // e["action"]="alloc"; [[e]]; root items
    p.extend([b'h', 0, 0x8c, 4]);
    p.extend(b"size");
    p.extend([b'K', 7, b's', b'0', b'.']);
    let path = dir.path().join("changed.pickle");
    std::fs::write(&path, &p).unwrap();
    assert!(tree(&path, &Budget::default()).unwrap().contains("\"events\": 1"));
    assert!(streamed(&path, &Budget::default()).is_none(), "an entry dict the memo holds must be handed back");
}
