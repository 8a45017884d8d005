//! Shared by the property tests (`tests/props_*.rs`): the one call site of each entry point
//! (adapt these when the stages gain budget parameters), the seed corpora, and the
//! shared-reference bombs, built with `pickle::write`, that also seed `fuzz/corpus/`.
#![allow(dead_code)]
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::path::{Path, PathBuf};
use vramscope::analyse::budget::Budget;
use vramscope::analyse::snapshot::{analyse_within, SnapshotReport};
use vramscope::export::html::{report_within, Source};
use vramscope::pickle::{read, Limits, PickleError, Value};

/// The budget of the properties: smaller than the defaults, so no case is slow.
pub fn budget() -> Budget {
    Budget { depth: 64, items: 1 << 20, bytes_objects: 16 << 20, ..Budget::default() }
}

/// Reader limits for the properties (the budget's).
pub fn limits() -> Limits {
    budget().pickle_limits()
}

pub fn read_pickle(data: &[u8]) -> Result<Value, PickleError> {
    read(data, &limits())
}

pub fn analyse_snapshot(snap: &Value) -> Result<SnapshotReport, String> {
    analyse_within(snap, None, 100.0, 10, &budget())
}

pub fn html_report(snap: &Value) -> Result<String, String> {
    let page = report_within(&[Source { name: "prop".into(), snapshot: snap, device: None, stats: None }], None, &budget())?;
    String::from_utf8(page).map_err(|e| format!("page is not UTF-8: {e}"))
}

/// A runner with a fixed case count and a fixed seed, so every run (and CI) tries the same
/// cases; failures are not persisted to files.
pub fn runner(cases: u32) -> TestRunner {
    let config = Config { cases, failure_persistence: None, max_shrink_iters: 2048, ..Config::default() };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[0x15; 32]))
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file in `dir` (sorted by name); none when the directory does not exist.
pub fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    paths.sort();
    paths.into_iter().map(|p| (p.display().to_string(), std::fs::read(&p).expect("reading a seed"))).collect()
}

/// The hostile snapshots of issue #15 (`tests/fixtures/hostile/`), when that corpus exists.
pub fn hostile_seeds() -> Vec<(String, Vec<u8>)> {
    let dir = root().join("tests/fixtures/hostile");
    let files = files_in(&dir);
    if files.is_empty() {
        eprintln!("note: {} is absent or empty; its files are not among the seeds", dir.display());
    }
    files
}

/// The committed seed corpus of one fuzz target (`fuzz/corpus/TARGET/seed-*`).
pub fn fuzz_seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    files_in(&root().join("fuzz/corpus").join(target))
        .into_iter()
        .filter(|(p, _)| Path::new(p).file_name().is_some_and(|n| n.to_string_lossy().starts_with("seed-")))
        .collect()
}

/// CPython's pickles of protocols 0–5 (`tests/fixtures/pickle`).
pub fn cpython_seeds() -> Vec<(String, Vec<u8>)> {
    files_in(&root().join("tests/fixtures/pickle")).into_iter().filter(|(p, _)| p.ends_with(".pickle")).collect()
}

// ---------------------------------------------------------------------------------------
// Shared-reference bombs: small pickles whose unfolded size is large. Each shares one
// container through the pickle's memo, as Python's pickler does with identical tracebacks.

fn frame(i: i64) -> Value {
    Value::dict(vec![("filename", Value::str("model.py")), ("line", Value::Int(i)), ("name", Value::str("forward"))])
}

fn segment(total: i64) -> Value {
    Value::dict(vec![
        ("device", Value::Int(0)),
        ("address", Value::Int(1 << 40)),
        ("total_size", Value::Int(total)),
        ("segment_type", Value::str("large")),
        ("blocks", Value::list(vec![])),
    ])
}

/// `entries` trace entries that are one shared alloc dict, whose frame list holds `frames`
/// references to one shared frame: `entries × frames` frames once unfolded.
pub fn shared_frames_bomb(entries: usize, frames: usize) -> Value {
    let frame_list = Value::list(vec![frame(1); frames]);
    let entry = Value::dict(vec![
        ("action", Value::str("alloc")),
        ("addr", Value::Int(1 << 40)),
        ("size", Value::Int(512)),
        ("stream", Value::Int(0)),
        ("time_us", Value::Int(1)),
        ("frames", frame_list),
    ]);
    Value::dict(vec![
        ("segments", Value::list(vec![segment(2 << 20)])),
        ("device_traces", Value::list(vec![Value::list(vec![entry; entries])])),
    ])
}

/// `allocator_settings` nested `depth` deep, each level a list holding `width` references
/// to the level below: `width^depth` leaves once unfolded (e.g. by a JSON conversion).
pub fn nested_settings_bomb(width: usize, depth: usize) -> Value {
    let mut v = Value::str("x");
    for _ in 0..depth {
        v = Value::list(vec![v; width]);
    }
    Value::dict(vec![
        ("segments", Value::list(vec![segment(2 << 20)])),
        ("device_traces", Value::list(vec![Value::list(vec![])])),
        ("allocator_settings", Value::dict(vec![("roundup_power2_divisions", Value::dict(vec![])), ("nested", v)])),
    ])
}

/// `entries` distinct `oom` entries (one shared frame list) after `allocs` live allocations:
/// work per OOM proportional to the allocations is `entries × allocs` in all.
pub fn oom_bomb(allocs: usize, entries: usize) -> Value {
    let frames = Value::list(vec![frame(7)]);
    let mut trace = Vec::with_capacity(allocs + entries);
    for i in 0..allocs {
        trace.push(Value::dict(vec![
            ("action", Value::str("alloc")),
            ("addr", Value::Int((1 << 40) + 512 * i as i64)),
            ("size", Value::Int(512)),
            ("frames", frames.clone()),
        ]));
    }
    let oom = Value::dict(vec![("action", Value::str("oom")), ("size", Value::Int(1 << 30)), ("device_free", Value::Int(0)), ("frames", frames)]);
    trace.extend(std::iter::repeat_n(oom, entries));
    Value::dict(vec![("segments", Value::list(vec![segment(1 << 30)])), ("device_traces", Value::list(vec![Value::list(trace)]))])
}

/// `n` allocations, each in its own category (string table of `n` entries).
pub fn categories_bomb(n: usize) -> Value {
    let frames = Value::list(vec![frame(3)]);
    let trace: Vec<Value> = (0..n)
        .map(|i| {
            Value::dict(vec![
                ("action", Value::str("alloc")),
                ("addr", Value::Int((1 << 40) + 512 * i as i64)),
                ("size", Value::Int(512)),
                ("category", Value::str(&format!("c{i}"))),
                ("frames", frames.clone()),
            ])
        })
        .collect();
    Value::dict(vec![("segments", Value::list(vec![segment(1 << 30)])), ("device_traces", Value::list(vec![Value::list(trace)]))])
}

/// A list that holds `width` references to the list below, `depth` times: a reader that
/// copied shared containers would build `width^depth` items.
pub fn nested_list_bomb(width: usize, depth: usize) -> Value {
    let mut v = Value::Int(0);
    for _ in 0..depth {
        v = Value::list(vec![v; width]);
    }
    v
}

/// The bombs committed as fuzz seeds (file name, value); each pickle stays under 64 KiB,
/// libFuzzer's input length in fuzz/README.md.
pub fn seed_bombs() -> Vec<(&'static str, Value)> {
    vec![
        ("seed-bomb-shared-frames.pickle", shared_frames_bomb(4000, 4000)),
        ("seed-bomb-nested-settings.pickle", nested_settings_bomb(4, 30)),
        ("seed-bomb-ooms.pickle", oom_bomb(1500, 1500)),
        ("seed-bomb-categories.pickle", categories_bomb(1500)),
        ("seed-bomb-nested-list.pickle", nested_list_bomb(2, 60)),
    ]
}

/// Small versions of the same shapes, cheap enough for today's stages in every property case.
pub fn small_bombs() -> Vec<(&'static str, Value)> {
    vec![
        ("shared-frames", shared_frames_bomb(64, 64)),
        ("nested-settings", nested_settings_bomb(2, 8)),
        ("ooms", oom_bomb(40, 40)),
        ("categories", categories_bomb(64)),
    ]
}
