//! The binary end to end: a short cpu and meta run write their files; bad configuration is
//! a clear error naming the flag, exit code 2, nothing written.
use std::path::Path;
use std::process::Command;

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("vramscope-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn train_writes_summary_and_config() {
    let out = tmp("cpu");
    let o = vramscope(&["train", "--num-steps", "3", "--warmup-steps", "1", "--num-layers", "1", "--threads", "2", "--output-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("step    3/3 | loss "), "{stdout}");
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("performance_summary.json")).unwrap()).unwrap();
    assert_eq!(s["summary"]["parameters"], 256 * 1000 + 256 + (256 * 256 * 2 + 256 * 128 * 2 + 3 * 256 * 512 + 512));
    assert!(s["summary"]["final_loss"].as_f64().unwrap() > 0.0);
    assert!(s["summary"]["avg_step_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(s["steps"].as_array().unwrap().len(), 3);
    let c: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(c["model"]["d_model"], 256);
    assert_eq!(c["training"]["batch_size"], 8);
}

#[test]
fn meta_train_reports_memory_but_no_loss_or_time() {
    let out = tmp("meta");
    let o = vramscope(&["train", "--preset", "2.7B", "--device", "meta", "--seq-len", "128", "--num-steps", "2", "--warmup-steps", "1", "--output-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("performance_summary.json")).unwrap()).unwrap();
    assert!(s["summary"]["final_loss"].is_null());
    assert!(s["summary"]["avg_step_ms"].is_null());
    // Parameters + gradients + two AdamW moments alone are 50.77 GiB.
    let peak = s["summary"]["peak_allocated_bytes"].as_u64().unwrap();
    assert!(peak > 4 * 3_406_809_600 * 4, "{peak}");
}

#[test]
fn bad_configuration_names_the_flag_exits_2_and_writes_nothing() {
    let cases: &[(&[&str], &str)] = &[
        (&["--num-heads", "7"], "--num-heads"),
        (&["--num-kv-heads", "3"], "--num-kv-heads"),
        (&["--hidden-dim", "0"], "--hidden-dim"),
        (&["--batch-size", "0"], "--batch-size"),
        (&["--preset", "nonsense"], "--preset"),
        (&["--preset", "small"], "--flavour"),
        (&["--seq-len", "129"], "--seq-len"),
        (&["--device", "tpu"], "--device"),
        (&["--warmup-steps", "5", "--num-steps", "5"], "--warmup-steps"),
        (&["--learning-rate", "-1"], "--learning-rate"),
        (&["--threads", "0"], "--threads"),
    ];
    for (args, flag) in cases {
        let out = tmp("bad");
        let mut a = vec!["train", "--output-dir", out.to_str().unwrap()];
        a.extend_from_slice(args);
        let o = vramscope(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} should name {flag}: {err}");
        assert!(!Path::new(&out).exists(), "{args:?} wrote {}", out.display());
    }
}
