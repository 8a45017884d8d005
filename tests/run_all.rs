//! `vramscope run-all` (seed 001's run_all.sh): every file it writes, checked for its
//! contents against separate `profile` runs of the same configurations.
mod scratch;
use std::path::{Path, PathBuf};
use std::process::Command;

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-runall-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn read(dir: &Path, f: &str) -> String {
    std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"))
}

/// Peak allocated GiB (2 decimals, as the tables print them) of separate profile runs.
fn profile_peaks(extra: &[&str]) -> Vec<(u64, String, String)> {
    let dir = tmp(&format!("profile-{}", extra.join("").replace('-', "")));
    let d = dir.to_str().unwrap();
    let mut args = vec!["profile", "--model", "2.7B", "--device", "meta", "--context-length", "128,256,512", "--profile-type", "forward,training", "--out-dir", d];
    args.extend_from_slice(extra);
    let o = vramscope(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    s["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["context_length"].as_u64().unwrap(),
                r["profile_type"].as_str().unwrap().to_string(),
                format!("{:.2}", r["peak_allocated_bytes"].as_u64().unwrap() as f64 / (1u64 << 30) as f64),
            )
        })
        .collect()
}

#[test]
fn run_all_writes_seed_001s_files_with_numbers_consistent_with_profile() {
    let dir = tmp("all");
    let t0 = std::time::Instant::now();
    let o = vramscope(&["run-all", "--out-dir", dir.to_str().unwrap()]);
    eprintln!("run-all took {:.1} s", t0.elapsed().as_secs_f64());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The snapshots seed 001 lists, each a pickle memory_viz's replay accepts.
    for ctx in [128, 256, 512] {
        for kind in ["forward", "training"] {
            assert!(dir.join(format!("2.7B_ctx{ctx}_{kind}_snapshot.pickle")).is_file());
        }
    }
    for kind in ["forward", "training"] {
        for prec in ["fp32", "bf16"] {
            assert!(dir.join(format!("2.7B_ctx512_{kind}_{prec}_snapshot.pickle")).is_file());
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/check_snapshot.py");
    if let Ok(c) = Command::new("python3").arg(&script).arg(dir.join("2.7B_ctx512_training_bf16_snapshot.pickle")).output() {
        assert!(c.status.success(), "python replay: {}{}", String::from_utf8_lossy(&c.stdout), String::from_utf8_lossy(&c.stderr));
    }

    // Part (b): the table has profile's numbers.
    let peaks = read(&dir, "peak_memory_summary.txt");
    let fp32 = profile_peaks(&[]);
    for ctx in [128u64, 256, 512] {
        let f = &fp32.iter().find(|r| r.0 == ctx && r.1 == "forward").unwrap().2;
        let t = &fp32.iter().find(|r| r.0 == ctx && r.1 == "training").unwrap().2;
        assert!(peaks.contains(&format!("| {ctx} | {f} | {t} |")), "row for {ctx} ({f}, {t}) missing:\n{peaks}");
    }

    // Part (c): fp32 and bf16 rows with profile's numbers; bf16 carries the weight cache.
    let mp = read(&dir, "mixed_precision_memory_summary.txt");
    let bf16 = profile_peaks(&["--precision", "bf16"]);
    for (kind, prec, table) in [("forward", "fp32", &fp32), ("training", "fp32", &fp32), ("forward", "bf16", &bf16), ("training", "bf16", &bf16)] {
        let v = &table.iter().find(|r| r.0 == 512 && r.1 == kind).unwrap().2;
        assert!(mp.contains(&format!("| {kind} {prec} | {v} |")), "{kind} {prec} row ({v}) missing:\n{mp}");
    }
    let cache_col = |row: &str| -> f64 { mp.lines().find(|l| l.starts_with(row)).unwrap().split('|').nth(8).unwrap().trim().parse().unwrap() };
    assert_eq!(cache_col("| forward fp32"), 0.0);
    assert!(cache_col("| forward bf16") > 6.0, "a bf16 copy of 3.4 B weights is about 6.3 GiB");
    assert!(mp.contains("Discussion"));

    // Part (d): B·S·d·4 for each context, 20 MiB at 512.
    let act = read(&dir, "activation_size_analysis.txt");
    assert!(act.contains("S = 128: 4 × 128 × 2560 × 4 B = 5242880 B = 5.00 MiB"), "{act}");
    assert!(act.contains("Answer (S = 512): 20.00 MiB"), "{act}");
    assert!(!act.contains("allocates 0 tensors"), "the simulation makes residual-stream tensors of that size");

    // Part (e): the 128 MiB (B, h, S, S) tensors of the attention at S = 512, read from the
    // forward snapshot, named by the model code they come from (cs336_basics' functions).
    let big = read(&dir, "largest_allocations.txt");
    assert!(big.lines().next().unwrap().contains("2.7B_ctx512_forward_snapshot.pickle"), "{big}");
    let first = big.lines().find(|l| l.starts_with("| 128.00 |")).expect("a 128 MiB row");
    assert!(first.contains("cs336_basics/"), "{first}");
    assert!(big.contains("B·h·S·S·4 bytes (4·32·512·512·4)"), "{big}");
    assert!(big.contains("scaled_dot_product_attention cs336_basics/model.py:94"), "the scores come from the attention:\n{big}");
    assert!(big.contains("softmax cs336_basics/nn_utils.py:88"), "the softmax is among the sites:\n{big}");
}

#[test]
fn run_all_rejects_bad_flags_before_running() {
    let dir = tmp("bad");
    for (args, flag) in [
        (vec!["--dtype", "fp8"], "--dtype"),
        (vec!["--context-length", "128,x"], "--context-length"),
        (vec!["--batch-size", "0"], "--batch-size"),
        (vec!["--model", "nope"], "--preset"),
    ] {
        let mut all = vec!["run-all", "--out-dir", dir.to_str().unwrap()];
        all.extend(args.iter().copied());
        let o = vramscope(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(!dir.exists(), "{args:?}: nothing may be written");
    }
}
