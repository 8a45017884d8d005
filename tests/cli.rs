//! The binary end to end: a short cpu and meta run write their files; bad configuration is
//! a clear error naming the flag, exit code 2, nothing written.
mod scratch;
use std::path::Path;
use std::process::Command;

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = scratch::dir().join(format!("vramscope-cli-{}-{name}", std::process::id()));
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
        (&["--preset", "cs336-small", "--flavour", "tinyllama"], "--flavour"),
        (&["--max-seq-len", "128", "--seq-len", "129"], "--seq-len"),
        (&["--device", "tpu"], "--device"),
        (&["--device", "cuda"], "no CUDA backend yet"),
        (&["--warmup-steps", "5", "--num-steps", "5"], "--warmup-steps"),
        (&["--warmup-steps", "3", "--num-steps", "3"], "--warmup-steps"),
        (&["--profile-steps", "2"], "--profile-steps"),
        (&["--profile-operators", "--sort-by", "bogus"], "--sort-by"),
        (&["--learning-rate", "-1"], "--learning-rate"),
        (&["--threads", "0"], "--threads"),
        (&["--optimizer", "adam"], "--optimizer"),
        (&["--max-grad-norm", "-1"], "--max-grad-norm"),
        (&["--max-grad-norm", "inf"], "--max-grad-norm"),
        (&["--momentum", "0.9"], "--momentum"),
        (&["--optimizer", "adamw_torch_fused", "--momentum", "0.9"], "--momentum"),
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

/// `--optimizer` / `--max-grad-norm`: refused where no optimizer step runs (exit 2, nothing
/// written), recorded in summary.json where one does.
#[test]
fn optimizer_flags_are_refused_without_a_step_and_recorded_with_one() {
    for (args, flag) in [
        (vec!["--profile-type", "forward", "--optimizer", "sgd"], "--optimizer"),
        (vec!["--profile-type", "inference,forward", "--max-grad-norm", "1"], "--max-grad-norm"),
        (vec!["--optimizer", "lion"], "--optimizer"),
    ] {
        let out = tmp("optim-bad");
        let mut a = vec!["profile", "--device", "meta", "--model", "cs336-small", "--num-layers", "1", "--out-dir", out.to_str().unwrap()];
        a.extend(args.iter().copied());
        let o = vramscope(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} should name {flag}: {err}");
        assert!(!Path::new(&out).exists(), "{args:?} wrote {}", out.display());
    }
    let out = tmp("optim-ok");
    let o = vramscope(&[
        "profile", "--device", "meta", "--model", "cs336-small", "--num-layers", "1", "--context-length", "32", "--batch-size", "1",
        "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0.5", "--out-dir", out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("optimizer: adamw_torch_forloop") && stdout.contains("clip_grad_norm_ max_norm 0.5"), "{stdout}");
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["optimizer"]["kind"], "adamw_torch_forloop");
    assert_eq!(s["optimizer"]["max_grad_norm"], 0.5);
}

#[test]
fn config_json_builds_the_model_shape_flags_override_it_and_errors_name_the_field() {
    let dir = tmp("hfconfig");
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/llama3_8b_config.json");
    let bad_json = dir.join("bad.json");
    std::fs::write(&bad_json, "{ not json").unwrap();
    let missing = dir.join("missing.json");
    std::fs::write(&missing, r#"{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}"#).unwrap();
    let wrong = dir.join("wrong.json");
    std::fs::write(&wrong, r#"{"hidden_size": 64, "intermediate_size": "128", "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}"#).unwrap();
    let heads = dir.join("heads.json");
    std::fs::write(&heads, r#"{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 6, "vocab_size": 100}"#).unwrap();
    let nofile = dir.join("nope.json");
    let cases: Vec<(std::path::PathBuf, &str)> = vec![
        (nofile, "cannot read"),
        (bad_json, "not valid JSON"),
        (missing, "'intermediate_size' is missing"),
        (wrong, "'intermediate_size' must be a positive integer"),
        (heads, "num_attention_heads 6 does not divide hidden_size 64"),
    ];
    for (file, what) in cases {
        let out = dir.join("out");
        let o = vramscope(&["profile", "--device", "meta", "--config", file.to_str().unwrap(), "--out-dir", out.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{file:?}: {err}");
        assert!(err.contains("--config") && err.contains(what), "{file:?}: {err}");
        assert!(!out.exists());
    }
    // Explicit shape flags override the file: 2 layers of Llama-3-8B.
    let out = dir.join("est.json");
    let o = vramscope(&["estimate", "--config", fixture, "--num-layers", "2", "--no-simulate", "--context-length", "64", "--json", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // from_pretrained(dtype="auto") loads the file's torch_dtype, and the estimate says so.
    assert!(String::from_utf8_lossy(&o.stdout).contains("weights bfloat16 (dtype=\"auto\": the config's torch_dtype bfloat16)"), "{}", String::from_utf8_lossy(&o.stdout));
    let text = std::fs::read_to_string(&out).unwrap();
    let per_layer: u64 = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096;
    let params = 2 * per_layer + 2 * 128_256 * 4096 + 4096;
    assert!(text.contains(&params.to_string()), "{params} not in {text}");
}

/// The precision spellings reach the run (config.json, lower peak than fp32), and
/// contradictory ones are refused before anything is written.
#[test]
fn train_precision_flags_reach_the_run_and_conflicts_exit_2() {
    let peak = |extra: &[&str], name: &str| -> (u64, serde_json::Value) {
        let out = tmp(name);
        let mut a = vec!["train", "--device", "meta", "--num-steps", "2", "--warmup-steps", "1", "--output-dir", out.to_str().unwrap()];
        a.extend_from_slice(extra);
        let o = vramscope(&a);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("performance_summary.json")).unwrap()).unwrap();
        let c: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
        (s["summary"]["peak_allocated_bytes"].as_u64().unwrap(), c["training"]["precision"].clone())
    };
    let (fp32, p) = peak(&[], "prec-fp32");
    assert_eq!(p, "fp32");
    for (flags, name) in [(vec!["--use-amp"], "fp16"), (vec!["--use-mixed-precision"], "bf16"), (vec!["--use-mixed-precision", "--dtype", "fp16"], "fp16"), (vec!["--pure-bf16", "--attention", "flash"], "pure-bf16")] {
        let (b, p) = peak(&flags, &format!("prec-{name}"));
        assert_eq!(p, name, "{flags:?}");
        assert!(b < fp32, "{flags:?}: peak {b} not below fp32 {fp32}");
    }
    for (args, flag) in [
        (vec!["--precision", "bf16", "--use-amp"], "--use-amp"),
        (vec!["--precision", "fp8"], "--precision"),
        (vec!["--use-mixed-precision", "--dtype", "int8"], "--dtype"),
        (vec!["--pure-bf16"], "--pure-bf16"),
    ] {
        let out = tmp("prec-bad");
        let mut a = vec!["train", "--num-steps", "2", "--warmup-steps", "1", "--output-dir", out.to_str().unwrap()];
        a.extend(args.iter().copied());
        let o = vramscope(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?}: nothing written");
    }
}
