//! `vramscope profile --compare`: the baseline and each memory option in one table whose
//! numbers are the same as separate `profile` runs of each variant.
mod scratch;
use std::path::PathBuf;
use std::process::Command;

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-compare-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

const SMALL: [&str; 12] = ["--model", "cs336-small", "--num-layers", "2", "--hidden-dim", "128", "--num-heads", "4", "--intermediate-dim", "256", "--vocab-size", "512"];

fn compare(extra: &[&str], name: &str) -> (PathBuf, serde_json::Value) {
    let dir = tmp(name);
    let mut args = vec!["profile", "--compare", "--device", "meta", "--context-length", "128", "--batch-size", "4", "--out-dir", dir.to_str().unwrap()];
    args.extend_from_slice(&SMALL);
    args.extend_from_slice(extra);
    let o = vramscope(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("compare.json")).unwrap()).unwrap();
    (dir, j)
}

fn row<'a>(j: &'a serde_json::Value, variant: &str) -> &'a serde_json::Value {
    j["runs"].as_array().unwrap().iter().find(|r| r["variant"] == variant).unwrap_or_else(|| panic!("no row {variant}: {j}"))
}

/// Peak allocated bytes of a separate profile run.
fn profile_peak(extra: &[&str]) -> u64 {
    let dir = tmp(&format!("single-{}", extra.join("").replace('-', "")));
    let mut args = vec!["profile", "--device", "meta", "--context-length", "128", "--batch-size", "4", "--out-dir", dir.to_str().unwrap()];
    args.extend_from_slice(&SMALL);
    args.extend_from_slice(extra);
    let o = vramscope(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    s["runs"][0]["peak_allocated_bytes"].as_u64().unwrap()
}

#[test]
fn compare_without_options_runs_every_optimisation_and_matches_single_profiles() {
    let (dir, j) = compare(&[], "all");
    let names: Vec<&str> = j["runs"].as_array().unwrap().iter().map(|r| r["variant"].as_str().unwrap()).collect();
    assert_eq!(names, ["baseline", "bf16 autocast", "flash attention", "checkpoint blocks", "fused projections", "grad accum 4", "all of the above"]);
    let peak = |v: &str| row(&j, v)["peak_allocated_bytes"].as_u64().unwrap();
    let live = |v: &str, c: &str| row(&j, v)["live_at_peak_bytes"][c].as_u64().unwrap();
    assert_eq!(peak("baseline"), profile_peak(&[]));
    assert_eq!(peak("bf16 autocast"), profile_peak(&["--precision", "bf16"]));
    assert_eq!(peak("flash attention"), profile_peak(&["--attention", "flash"]));
    assert_eq!(peak("checkpoint blocks"), profile_peak(&["--checkpoint", "blocks"]));
    assert_eq!(peak("grad accum 4"), profile_peak(&["--grad-accum-steps", "4"]));
    assert_eq!(peak("all of the above"), profile_peak(&["--precision", "bf16", "--attention", "flash", "--checkpoint", "blocks", "--fusion", "all", "--grad-accum-steps", "4"]));
    for v in ["flash attention", "checkpoint blocks", "grad accum 4"] {
        assert!(peak(v) < peak("baseline"), "{v} lowers the peak");
    }
    assert_eq!(live("baseline", "autocast_cache"), 0);
    assert!(live("bf16 autocast", "autocast_cache") > 0);
    // Two blocks: at the checkpointed peak (backward) at most one block's recomputed
    // activations are live.
    assert!(live("checkpoint blocks", "activation") < live("baseline", "activation") / 2);
    // One snapshot per variant, and the Markdown table.
    let md = std::fs::read_to_string(dir.join("compare.md")).unwrap();
    assert!(md.contains("| baseline |") && md.contains("| all of the above |"), "{md}");
    assert!(dir.join("small_ctx128_training_checkpoint-blocks_snapshot.pickle").is_file());
}

#[test]
fn compare_with_chosen_options_runs_each_alone_then_together_with_cpu_step_times() {
    let dir = tmp("chosen");
    let o = vramscope(&[
        "profile", "--compare", "--precision", "bf16", "--checkpoint", "blocks", "--num-layers", "2", "--hidden-dim", "64", "--intermediate-dim", "128",
        "--vocab-size", "128", "--batch-size", "2", "--context-length", "32", "--out-dir", dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("compare.json")).unwrap()).unwrap();
    let names: Vec<&str> = j["runs"].as_array().unwrap().iter().map(|r| r["variant"].as_str().unwrap()).collect();
    assert_eq!(names, ["baseline", "bf16 precision", "checkpoint blocks", "all of the above"]);
    assert!(j["runs"].as_array().unwrap().iter().all(|r| r["step_seconds"].as_f64().is_some_and(|t| t > 0.0)), "cpu rows have step times");
    let md = std::fs::read_to_string(dir.join("compare.md")).unwrap();
    assert!(md.contains("step time (ms)") && md.contains("MiB are 1024² bytes"), "{md}");
}

#[test]
fn compare_flag_errors_name_the_flag() {
    let dir = tmp("bad");
    for (extra, flag) in [(vec!["--output", "x.pickle"], "--output"), (vec!["--flops"], "--compare"), (vec!["--checkpoint", "sometimes"], "--checkpoint")] {
        let mut args = vec!["profile", "--compare", "--device", "meta", "--out-dir", dir.to_str().unwrap()];
        args.extend(extra.iter().copied());
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?}: {err}");
        assert!(!dir.exists(), "{extra:?}: nothing written");
    }
}
