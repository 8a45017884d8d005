//! `vramscope profile` end to end: snapshots Python's pickle loads and memory_viz's replay
//! accepts, summaries whose numbers follow from the model, the cs336 2.7B facts on meta,
//! OOM reporting, and flag errors.
mod scratch;
use std::path::Path;
use std::process::Command;

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = scratch::dir().join(format!("vramscope-profile-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn python_check(snapshot: &Path) -> Option<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/check_snapshot.py");
    let o = Command::new("python3").arg(script).arg(snapshot).output().ok()?;
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "python check failed for {}: {out}{}", snapshot.display(), String::from_utf8_lossy(&o.stderr));
    Some(serde_json::from_str(out.trim()).unwrap())
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn cpu_profile_writes_consistent_snapshots_for_each_context_length() {
    let out = tmp("cpu");
    let o = vramscope(&["profile", "--num-layers", "2", "--context-length", "32,64", "--threads", "2", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("| context length | training peak allocated (GiB) | training peak reserved (GiB) |"), "{stdout}");
    let s = summary(&out);
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let (a, b) = (runs[0]["peak_allocated_bytes"].as_u64().unwrap(), runs[1]["peak_allocated_bytes"].as_u64().unwrap());
    assert!(b > a, "longer context needs more memory: {a} vs {b}");
    for r in runs {
        assert!(r["peak_reserved_bytes"].as_u64().unwrap() >= r["peak_allocated_bytes"].as_u64().unwrap());
        let snap = Path::new(r["snapshot"].as_str().unwrap());
        assert!(snap.exists());
        if let Some(check) = python_check(snap) {
            assert!(check["events"].as_u64().unwrap() > 100, "{check}");
            let cats: Vec<&str> = check["categories"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
            for c in ["activation", "gradient", "temporary"] {
                assert!(cats.contains(&c), "{c} missing from {cats:?}");
            }
            assert!(check["distinct_frame_lists"].as_u64().unwrap() < check["events"].as_u64().unwrap(), "frames are shared");
        }
    }
}

#[test]
fn meta_profile_of_the_2_7b_training_step_follows_the_reference_facts() {
    let out = tmp("meta27");
    let t0 = std::time::Instant::now();
    let o = vramscope(&["profile", "--model", "2.7B", "--context-length", "512", "--device", "meta", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(t0.elapsed().as_secs() < 60, "took {:?}", t0.elapsed());
    let s = summary(&out);
    let r = &s["runs"][0];
    let params: u64 = 3_406_809_600 * 4;
    let cats: std::collections::HashMap<String, u64> =
        r["peak"]["by_category_requested"].as_array().unwrap().iter().map(|c| (c[0].as_str().unwrap().to_string(), c[1].as_u64().unwrap())).collect();
    assert_eq!(cats["parameter"], params, "parameters exactly (12.69 GiB)");
    assert_eq!(cats["optimizer_state"], 2 * params, "m and v exactly");
    let largest = &r["peak"]["largest"][0];
    assert_eq!(largest["block_bytes"], 134_217_728, "(B, h, S, S) fp32 at S = 512 is 128 MiB: {largest}");
    assert!(largest["scope"].as_str().unwrap().contains(".attn"), "{largest}");
    // The Rust line that allocated it is the model's attention code, not the engine's.
    assert!(largest["location"].as_str().unwrap().starts_with("src/model/cs336.rs:"), "{largest}");
    // Parameters + gradients + m + v alone are 50.77 GiB.
    assert!(r["peak_allocated_gib"].as_f64().unwrap() > 50.77);
}

#[test]
fn running_out_of_memory_is_reported_like_pytorch_and_still_writes_the_snapshot() {
    let out = tmp("oom");
    // Parameters and gradients alone (25.4 GiB) exceed a 24 GiB card; no warm-up so the
    // failing step is recorded.
    let o = vramscope(&["profile", "--model", "2.7B", "--context-length", "128", "--device", "meta", "--gpu", "RTX4090", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "an OOM run answers \"does not fit\"");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("OUT OF MEMORY in measured step 1 of 1: CUDA out of memory. Tried to allocate"), "{stdout}");
    let s = summary(&out);
    let r = &s["runs"][0];
    assert!(r["oom"].as_str().unwrap().contains(" (at "), "{r}");
    assert_eq!(r["allocator_stats"]["num_ooms"], 1);
    let snap = Path::new(r["snapshot"].as_str().unwrap());
    if let Some(check) = python_check(snap) {
        assert_eq!(check["actions"]["oom"], 1, "{check}");
    }
}

#[test]
fn profile_flag_errors_exit_2_and_write_nothing() {
    for (args, flag) in [
        (vec!["--context-length", "12,x"], "--context-length"),
        (vec!["--max-seq-len", "128", "--context-length", "4096"], "--context-length"),
        (vec!["--gpu", "V100"], "--gpu"),
        (vec!["--memory-limit", "lots"], "--memory-limit"),
        (vec!["--allocator-conf", "max_split_size_mb:3"], "--allocator-conf"),
        (vec!["--model", "3B"], "--preset"),
        (vec!["--context-length", "32,64", "--output", "x.pickle"], "--output"),
        (vec!["--memory-fraction", "1.5", "--gpu", "H100"], "--memory-fraction"),
        (vec!["--memory-fraction", "0.5"], "--memory-fraction"),
        (vec!["--allocator-conf", "expandable_segments:maybe"], "--allocator-conf"),
    ] {
        let out = tmp("bad");
        let mut a = vec!["profile", "--out-dir", out.to_str().unwrap()];
        a.extend(args.iter().copied());
        let o = vramscope(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} should name {flag}: {err}");
        assert!(!out.exists());
    }
}

/// The published H100 measurement reference-models.md quotes for the cs336 2.7B model at
/// S = 128 with the course AdamW: forward under no_grad ≈ 12.9 GiB, a full training step
/// ≈ 51.4 GiB (max_memory_allocated).
#[test]
fn meta_2_7b_at_128_matches_the_published_h100_numbers() {
    for (kind, want) in [("inference", 12.9), ("training", 51.4)] {
        let out = tmp(kind);
        let o = vramscope(&["profile", "--model", "2.7B", "--context-length", "128", "--device", "meta", "--profile-type", kind, "--out-dir", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = summary(&out)["runs"][0]["peak_allocated_gib"].as_f64().unwrap();
        assert!((got - want).abs() < 0.15, "{kind}: {got:.3} GiB vs published {want} GiB");
    }
}

#[test]
fn analyze_reads_our_snapshots_and_pytorch_style_pickles_and_rejects_garbage() {
    let out = tmp("analyze");
    let o = vramscope(&["profile", "--num-layers", "1", "--context-length", "16", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let snap = out.join("walkthrough_ctx16_training_snapshot.pickle");
    let o = vramscope(&["analyze", snap.to_str().unwrap(), "--json", "--detail", "10"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["peak_active_bytes"].as_u64().unwrap() > 0);
    assert!(r["largest"].as_array().unwrap().len() <= (r["allocations"].as_u64().unwrap() as usize).div_ceil(10) + 64);
    let cats: Vec<&str> = r["live_at_peak_by_category"].as_array().unwrap().iter().map(|c| c[0].as_str().unwrap()).collect();
    // gradient and temporary from the trace's entries, parameter from blocks allocated before it.
    assert!(cats.contains(&"gradient") && cats.contains(&"temporary") && cats.contains(&"parameter"), "{cats:?}");

    // A PyTorch-style snapshot written by CPython's pickle, protocol 5, frames shared by reference.
    let py = out.join("torch_like.pickle");
    let script = r#"
import pickle, sys
fr = [{"filename": "model.py", "line": 10, "name": "forward"}]
tr = [
  {"action": "segment_alloc", "addr": 2**40, "size": 20971520, "stream": 0, "time_us": 1, "frames": fr},
  {"action": "alloc", "addr": 2**40, "size": 3000000, "stream": 0, "time_us": 2, "frames": fr},
  {"action": "alloc", "addr": 2**40 + 3000320, "size": 1000, "stream": 0, "time_us": 3, "frames": fr},
  {"action": "free_requested", "addr": 2**40, "size": 3000000, "stream": 0, "time_us": 4, "frames": fr},
  {"action": "free_completed", "addr": 2**40, "size": 3000000, "stream": 0, "time_us": 4, "frames": fr},
  {"action": "oom", "device_free": 1024, "size": 20971520, "stream": 0, "time_us": 5, "frames": fr},
]
seg = {"device": 0, "address": 2**40, "total_size": 20971520, "allocated_size": 1024, "active_size": 1024,
       "requested_size": 1000, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
       "frames": [], "blocks": [
         {"address": 2**40, "size": 3000320, "requested_size": 0, "state": "inactive", "frames": []},
         {"address": 2**40 + 3000320, "size": 1024, "requested_size": 1000, "state": "active_allocated", "frames": fr},
         {"address": 2**40 + 3001344, "size": 20971520 - 3001344, "requested_size": 0, "state": "inactive", "frames": []}]}
pickle.dump({"segments": [seg], "device_traces": [tr]}, open(sys.argv[1], "wb"), protocol=5)
"#;
    let made = Command::new("python3").arg("-c").arg(script).arg(&py).status().map(|s| s.success()).unwrap_or(false);
    if made {
        let o = vramscope(&["analyze", py.to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["peak_active_bytes"], 3_001_000);
        assert_eq!(r["ooms"][0]["requested_segment_bytes"], 20_971_520);
        assert_eq!(r["largest"][0]["frames"][0], "forward model.py:10");
        assert_eq!(r["reserved_bytes_end"], 20_971_520);
    }
    // Garbage and truncation: exit 2 with a byte offset, no panic.
    let bad = out.join("bad.pickle");
    let data = std::fs::read(&snap).unwrap();
    std::fs::write(&bad, &data[..data.len() / 2]).unwrap();
    let o = vramscope(&["analyze", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("byte offset"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = vramscope(&["analyze", "/nonexistent/snapshot.pickle"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn several_profile_types_give_seed_001_part_b_table() {
    let out = tmp("partb");
    let o = vramscope(&["profile", "--model", "2.7B", "--device", "meta", "--context-length", "128,256", "--profile-type", "forward,training", "--warmup-steps", "1", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("| context length | forward peak allocated (GiB) | forward peak reserved (GiB) | training peak allocated (GiB) | training peak reserved (GiB) |"), "{stdout}");
    let s = summary(&out);
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    for ctx in [128, 256] {
        let get = |kind: &str| runs.iter().find(|r| r["context_length"] == ctx && r["profile_type"] == kind).unwrap()["peak_allocated_bytes"].as_u64().unwrap();
        assert!(get("training") > get("forward"), "training needs gradients and optimizer state");
    }
    assert!(out.join("2.7B_ctx256_forward_snapshot.pickle").exists());
}

/// `expandable_segments:True` on the 2.7B step at S = 512: the trace maps pages instead of
/// cudaMalloc'ing segments, the snapshot lists one expandable segment per pool's mapped
/// range, nothing is inactive_split, and less is reserved than with the default segments.
#[test]
fn expandable_segments_map_pages_and_reserve_less() {
    let mut reserved = Vec::new();
    for conf in ["", "expandable_segments:True"] {
        let out = tmp(if conf.is_empty() { "plain" } else { "expandable" });
        let o = vramscope(&["profile", "--model", "2.7B", "--context-length", "512", "--device", "meta", "--gpu", "H100", "--allocator-conf", conf, "--out-dir", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s = summary(&out);
        let r = &s["runs"][0];
        reserved.push(r["peak_reserved_bytes"].as_u64().unwrap());
        if conf.is_empty() {
            continue;
        }
        assert_eq!(r["allocator_stats"]["inactive_split_bytes"]["peak"], 0);
        assert_eq!(r["allocator_stats"]["segment"]["peak"], 0, "mapped pages are not segments");
        let snap = Path::new(r["snapshot"].as_str().unwrap());
        if let Some(check) = python_check(snap) {
            assert_eq!(check["segments"], 2, "one mapped range per pool: {check}");
            assert!(check["actions"]["segment_map"].as_u64().unwrap() > 0, "{check}");
            assert!(check["actions"].get("segment_alloc").is_none(), "{check}");
        }
    }
    assert!(reserved[1] < reserved[0], "expandable {} B vs default {} B", reserved[1], reserved[0]);
}

/// A snapshot whose trace unmaps pages (empty_cache on an expandable segment) and maps a
/// hole again replays in Python against its final mapped ranges.
#[test]
fn expandable_snapshot_with_unmapped_pages_replays_in_python() {
    use vramscope::record::allocator::{AllocatorConfig, CachingAllocator};
    let mut a = CachingAllocator::new(AllocatorConfig::parse("expandable_segments:True").unwrap(), 80 << 30);
    let x = a.malloc(30 << 20).unwrap();
    let y = a.malloc(30 << 20).unwrap();
    let small = a.malloc(1000).unwrap();
    a.free(x);
    a.free(small);
    a.empty_cache();
    let z = a.malloc(15 << 20).unwrap();
    a.free(y);
    let actions: Vec<_> = a.trace().iter().map(|t| (*t, None)).collect();
    let snap = vramscope::export::snapshot::build(&a, &[], &[], &actions);
    let dir = tmp("unmap");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("snapshot.pickle");
    std::fs::write(&path, vramscope::pickle::write(&snap)).unwrap();
    let names: Vec<&str> = a.trace().iter().map(|t| t.action.name()).collect();
    assert!(names.contains(&"segment_unmap"), "{names:?}");
    if let Some(check) = python_check(&path) {
        assert_eq!(check["actions"]["segment_unmap"], 2, "{check}");
    }
    a.free(z);
}
