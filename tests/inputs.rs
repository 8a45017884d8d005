//! Inputs nobody tried before issue 29: absurd rank and thread counts, shapes whose products
//! overflow, config files that are no regular file (a FIFO, a device, a dangling link), output
//! names a FIFO was planted at, two runs racing into one folder. Each gets a clear refusal
//! naming its flag (exit 2), or the right answer, promptly, never a hang or a panic.
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `args` run with a deadline: a hang fails the test instead of stalling it.
fn within(secs: u64, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            panic!("vramscope {args:?} still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn refused(o: &Output, flag: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "expected exit 2 naming {flag}: {err}");
    assert!(err.contains(flag), "the error should name {flag}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

const SMALL: [&str; 10] = ["--model", "cs336-small", "--device", "meta", "--context-length", "32", "--batch-size", "2", "--num-layers", "1"];

fn profile(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["profile"].iter().chain(SMALL.iter()).map(|s| s.to_string()).collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn run(args: &[String], secs: u64) -> Output {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    within(secs, &a)
}

#[test]
fn huge_world_sizes_are_refused_at_once_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let out = out.to_str().unwrap();
    for layout in ["fsdp", "zero1", "zero2", "ddp", "hsdp"] {
        for n in ["1099511627776", "36028797018963968", "16777217"] {
            let o = run(&profile(&["--parallel", layout, "--world-size", n, "--rank", "0", "--out-dir", out]), 30);
            let e = refused(&o, "--world-size");
            assert!(e.contains("16777216"), "{e}");
        }
    }
    let o = run(&profile(&["--parallel", "fsdp", "--world-size", "1099511627776", "--tp", "1099511627776", "--out-dir", out]), 30);
    refused(&o, "--world-size");
    assert!(!Path::new(out).exists(), "nothing written");
}

#[test]
fn the_largest_world_size_is_planned_without_per_rank_work() {
    // 2^24 ranks: FSDP's trailing ranks hold nothing of most parameters; the distinct ranks
    // are found from the parameters' chunk boundaries, not by visiting every rank.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let o = run(&profile(&["--parallel", "zero1", "--world-size", "16777216", "--rank", "0", "--out-dir", out.to_str().unwrap()]), 120);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn thread_counts_past_the_limit_are_refused() {
    let o = run(&profile(&["--threads", "3000"]), 30);
    let e = refused(&o, "--threads");
    assert!(e.contains("1024"), "{e}");
}

fn write_config(dir: &Path, body: &str) -> String {
    let p = dir.join("config.json");
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn head_products_that_overflow_are_refused_before_any_tensor() {
    let dir = tempfile::tempdir().unwrap();
    // 2^20 heads × head_dim 2^30 × hidden 64: each factor and the RoPE table pass, the q/k/v
    // weights' product does not.
    let c = write_config(
        dir.path(),
        r#"{"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 1048576, "num_key_value_heads": 1048576, "head_dim": 1073741824, "vocab_size": 100, "max_position_embeddings": 64}"#,
    );
    for args in [&["estimate"][..], &["profile", "--device", "meta"]] {
        let o = within(30, &[args, &["--config", &c, "--context-length", "16", "--batch-size", "1"]].concat());
        let e = refused(&o, "--num-heads");
        assert!(e.contains("head_dim"), "{e}");
    }
}

#[test]
fn configs_that_are_no_regular_file_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.json");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for target in [dir.path().to_str().unwrap(), fifo.to_str().unwrap(), "/dev/zero"] {
        let o = within(30, &["profile", "--config", target, "--device", "meta", "--out-dir", dir.path().join("o").to_str().unwrap()]);
        let e = refused(&o, "--config");
        assert!(e.contains("not a regular file"), "{e}");
    }
    std::fs::remove_file(&fifo).unwrap();
    std::os::unix::fs::symlink(dir.path().join("nowhere.json"), &fifo).unwrap();
    let o = within(30, &["estimate", "--config", dir.path().to_str().unwrap()]);
    assert!(refused(&o, "--config").contains("does not exist"));
    // A multimodal config names what it is.
    std::fs::remove_file(&fifo).unwrap();
    let c = write_config(dir.path(), r#"{"model_type": "llava", "text_config": {"hidden_size": 64}}"#);
    let o = within(30, &["estimate", "--config", &c]);
    assert!(refused(&o, "--config").contains("multimodal"));
}

#[test]
fn a_fifo_planted_at_an_output_name_is_replaced_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    std::fs::create_dir(&out).unwrap();
    let planted = out.join("summary.json");
    assert!(Command::new("mkfifo").arg(&planted).status().unwrap().success());
    let o = run(&profile(&["--out-dir", out.to_str().unwrap()]), 120);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::symlink_metadata(&planted).unwrap().is_file(), "summary.json is a file now");
}

#[test]
fn config_names_become_safe_output_names() {
    let dir = tempfile::tempdir().unwrap();
    let shape = r#""hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100"#;
    for (name, want) in [(".".to_string(), "models"), ("x".repeat(300), &*"x".repeat(100))] {
        let models = dir.path().join("models");
        std::fs::create_dir_all(&models).unwrap();
        let c = write_config(&models, &format!(r#"{{{shape}, "_name_or_path": "{name}"}}"#));
        let out = dir.path().join(format!("o{}", name.len()));
        let o = within(120, &["profile", "--config", &c, "--device", "meta", "--context-length", "16", "--batch-size", "1", "--out-dir", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let files: Vec<String> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(files.iter().any(|f| f.starts_with(want)), "{files:?}");
        assert!(files.iter().all(|f| !f.starts_with('.')), "no hidden outputs: {files:?}");
    }
}

/// The run id every output of the folder carries (summary.json's field, the reports' comment).
fn run_ids(dir: &Path) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let Ok(text) = std::fs::read_to_string(&p) else { continue };
        for marker in ["\"run_id\": \"", "\"run_id\":\"", "vramscope run_id: "] {
            if let Some(i) = text.find(marker) {
                ids.insert(text[i + marker.len()..].chars().take(16).collect());
            }
        }
    }
    ids
}

#[test]
fn two_profiles_racing_into_one_folder_never_mix_their_sets() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let out_s = out.to_str().unwrap().to_string();
    let rounds = if std::env::var_os("VRAMSCOPE_RACE_ROUNDS").is_some() { std::env::var("VRAMSCOPE_RACE_ROUNDS").unwrap().parse().unwrap() } else { 60 };
    for round in 0..rounds {
        let spawn = |layers: &str| {
            let mut a = profile(&["--out-dir", &out_s]);
            let i = a.iter().position(|w| w == "--num-layers").unwrap();
            a[i + 1] = layers.to_string();
            Command::new(env!("CARGO_BIN_EXE_vramscope")).args(&a).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
        };
        let (a, b) = (spawn("1"), spawn("2"));
        for c in [a, b] {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        let ids = run_ids(&out);
        assert_eq!(ids.len(), 1, "round {round}: outputs of two runs mixed in one folder: {ids:?}");
        let staging: Vec<_> = std::fs::read_dir(&out).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().contains("staging")).collect();
        assert!(staging.is_empty());
    }
}
