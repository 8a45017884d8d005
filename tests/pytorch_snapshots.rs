//! PyTorch-format snapshots (tests/fixtures/pytorch_snapshots/, written by
//! tools/pytorch/make_snapshot_corpus.py: hand-built per PyTorch's format, and real ones from
//! `torch.cuda.memory._profile_to_snapshot` on CPU) counted as memory_viz counts them.
//!
//! Each file's figures are pinned below, and, where node and the viewer are at hand
//! (`shared/tools/memviz/viewer` beside the repository or `$VRAMSCOPE_SHARED`), checked
//! against the viewer's own code: tests/memviz_replay.mjs runs MemoryViz.js's unpickle and
//! annotate_snapshot, process_alloc_data.js's `process_alloc_data` and the Allocator State
//! History's replay on each file. `analyze`'s peak active bytes must equal the Active Memory
//! Timeline's peak, and its reserved bytes at the end and at the peak the State History's,
//! for the default device and for every device the viewer lists. Skips the viewer half with
//! a printed NOTICE when the viewer or node is missing.
mod memviz_viewer;
use memviz_viewer::viewer;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch_snapshots")
}

/// (file stem, default device, peak active bytes, reserved at the end, peak reserved,
/// unknown actions) as memory_viz shows them (pinned from tests/memviz_replay.mjs).
type Pin = (&'static str, u64, u64, u64, u64, &'static [(&'static str, u64)]);
const MIB: u64 = 1 << 20;
const PINS: &[Pin] = &[
    // A (4 MiB - 100) is freed at its free_completed, so it is live beside C (2 MiB - 512)
    // and D (5 MiB); freeing at free_requested would give 7 MiB - 100.
    ("multi_stream_frees", 0, 4 * MIB - 100 + 2 * MIB - 512 + 5 * MIB, 20 * MIB, 20 * MIB, &[]),
    // p (1 MiB - 8) is only requested free when r comes: p + q + r.
    ("pending_frees_at_end", 0, 3 * MIB - 8, 4 * MIB, 4 * MIB, &[]),
    ("only_free_completed", 0, 3 * MIB + 700 * 1024, 4 * MIB, 4 * MIB, &[]),
    ("adjacent_pairs", 0, 3 * MIB, 4 * MIB, 4 * MIB, &[]),
    ("no_address", 0, 3452924, 4 * MIB, 4 * MIB, &[]),
    ("no_requested_size", 0, 4284416, 5 * MIB, 5 * MIB, &[]),
    ("no_frames", 0, 2 * MIB, 4 * MIB, 4 * MIB, &[]),
    ("segments_only", 0, 8 * MIB - 16 + MIB - MIB, 16 * MIB, 16 * MIB, &[]),
    ("no_device_traces", 0, 2 * MIB, 4 * MIB, 4 * MIB, &[]),
    ("legacy_segment_list", 0, MIB - 1, 2 * MIB, 2 * MIB, &[]),
    ("several_devices", 0, 3 * MIB, 4 * MIB, 4 * MIB, &[]),
    ("several_devices_longest_last", 2, 6 * MIB + 6, 0, 0, &[]),
    ("expandable_segments", 0, 6 * MIB - 64, 4 * MIB, 6 * MIB, &[]),
    ("unknown_actions", 0, 3 * MIB, 4 * MIB, 4 * MIB, &[("realloc", 1), ("free_deferred", 2)]),
    ("oom_snapshot_realias", 0, 4 * MIB, 2 * MIB, 4 * MIB, &[]),
    ("profile_mlp_sgd", 0, 42584, 143831424, 143831424, &[]),
    ("profile_mlp_adam", 0, 239808, 143507140, 143507140, &[]),
];

fn analyze(file: &Path, device: Option<u64>) -> (Value, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramscope"));
    cmd.arg("analyze").arg(file).arg("--json");
    if let Some(d) = device {
        cmd.arg("--device").arg(d.to_string());
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "analyze {} failed: {stderr}", file.display());
    (serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("analyze {} --json: {e}", file.display())), stderr)
}

fn unknown(r: &Value) -> Vec<(String, u64)> {
    r["unknown_actions"].as_array().unwrap().iter().map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_u64().unwrap())).collect()
}

/// Every corpus file is pinned, every pin has its file: the corpus cannot shrink unseen.
#[test]
fn every_file_is_pinned() {
    let mut files: Vec<String> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pickle"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut pinned: Vec<String> = PINS.iter().map(|p| p.0.to_string()).collect();
    pinned.sort();
    assert_eq!(files, pinned);
    for f in &files {
        let len = std::fs::metadata(corpus_dir().join(format!("{f}.pickle"))).unwrap().len();
        assert!(len < 64 << 10, "{f}.pickle is {len} bytes: keep the corpus small");
    }
}

/// `analyze` gives the pinned figures, and names the unknown actions on stderr.
#[test]
fn analyze_gives_the_pinned_figures() {
    for &(name, device, peak, reserved_end, peak_reserved, unknown_actions) in PINS {
        let file = corpus_dir().join(format!("{name}.pickle"));
        let (r, stderr) = analyze(&file, None);
        assert_eq!(r["device"].as_u64(), Some(device), "{name}: default device");
        assert_eq!(r["peak_active_bytes"].as_u64(), Some(peak), "{name}: peak active bytes");
        assert_eq!(r["reserved_bytes_end"].as_u64(), Some(reserved_end), "{name}: reserved at the end");
        assert_eq!(r["peak_reserved_bytes"].as_u64(), Some(peak_reserved), "{name}: peak reserved");
        let want: Vec<(String, u64)> = unknown_actions.iter().map(|&(a, n)| (a.to_string(), n)).collect();
        assert_eq!(unknown(&r), want, "{name}: unknown actions");
        for (a, n) in &want {
            assert!(stderr.contains(&format!("{n} trace entries with action '{a}'")), "{name}: no warning for {a}: {stderr}");
        }
        if want.is_empty() {
            assert!(!stderr.contains("warning"), "{name}: unexpected warning: {stderr}");
        }
    }
}

/// `view` reads the same replay: every file renders, and the unknown actions are named.
#[test]
fn view_opens_every_file() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pytorch_snapshots_view");
    std::fs::create_dir_all(&dir).unwrap();
    for &(name, _, _, _, _, unknown_actions) in PINS {
        let out = dir.join(format!("{name}.html"));
        let o = Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .arg("view")
            .arg(corpus_dir().join(format!("{name}.pickle")))
            .arg("--output")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "view {name}: {stderr}");
        assert!(std::fs::metadata(&out).unwrap().len() > 0);
        for (a, n) in unknown_actions {
            assert!(stderr.contains(&format!("{n} trace entries with action '{a}'")), "view {name}: no warning for {a}: {stderr}");
        }
    }
}

/// Each file's figures equal those the viewer's own code computes, on every device it lists.
#[test]
fn figures_equal_memory_viz() {
    let Some(viewer) = viewer() else { return };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/memviz_replay.mjs");
    for &(name, ..) in PINS {
        let file = corpus_dir().join(format!("{name}.pickle"));
        let o = Command::new("node").arg(&script).arg(&viewer).arg(&file).output().unwrap();
        assert!(o.status.success(), "memviz_replay {name}: {}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let (ours, _) = analyze(&file, None);
        assert_eq!(ours["device"], v["default_device"], "{name}: default device");
        let devices = v["devices"].as_array().unwrap();
        assert!(!devices.is_empty(), "{name}: the viewer lists no device");
        for d in devices {
            let dev = d["device"].as_u64().unwrap();
            let (r, _) = analyze(&file, Some(dev));
            let at = format!("{name} device {dev} (viewer notes: {})", v["notes"]);
            assert_eq!(r["peak_active_bytes"], d["active_peak"], "{at}: peak active (Active Memory Timeline)");
            assert!(d.get("state_error").is_none(), "{at}: the State History replay failed: {}", d["state_error"]);
            assert_eq!(r["reserved_bytes_end"], d["state_reserved_end"], "{at}: reserved at the end (Allocator State History)");
            assert_eq!(r["peak_reserved_bytes"], d["state_reserved_peak"], "{at}: peak reserved (Allocator State History)");
            if dev == v["default_device"].as_u64().unwrap() {
                let pin = PINS.iter().find(|p| p.0 == name).unwrap();
                assert_eq!(d["active_peak"].as_u64(), Some(pin.2), "{at}: the pin is the viewer's peak");
            }
        }
    }
}
