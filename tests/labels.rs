//! What a user reads: figures say their kind (allocated, requested), modules have real names
//! in reading order, outputs of variants and config.json models do not overwrite each other,
//! and `view` never replaces its own input.
mod scratch;
use std::path::{Path, PathBuf};
use std::process::Command;

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-labels-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const SMALL: [&str; 10] = ["--num-layers", "2", "--context-length", "16", "--batch-size", "2", "--device", "meta", "--warmup-steps", "1"];

fn profile(out: &Path, extra: &[&str]) -> String {
    let mut args = vec!["profile", "--out-dir", out.to_str().unwrap()];
    args.extend(SMALL);
    args.extend(extra);
    ok(&vramscope(&args))
}

#[test]
fn console_figures_name_their_kind_and_modules_have_names() {
    let out = tmp("console");
    let s = profile(&out, &[]);
    assert!(s.contains("peak allocated by phase (GiB)"), "{s}");
    assert!(s.contains("live at the peak by category (GiB allocated)"), "{s}");
    assert!(s.contains("peak requested"), "{s}");
    assert!(s.contains("largest allocations (MiB allocated"), "{s}");
    assert!(!s.contains("<top level>"), "{s}");
    // Allocations outside every module are named after whose code ran.
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let modules: Vec<String> =
        summary["runs"][0]["peak"]["by_module"].as_array().unwrap().iter().map(|m| m[0].as_str().unwrap().to_string()).collect();
    assert!(modules.iter().all(|m| !m.is_empty() && m != "<top level>"), "{modules:?}");
}

#[test]
fn variants_and_config_models_get_their_own_files() {
    let out = tmp("variants");
    profile(&out, &[]);
    profile(&out, &["--checkpoint", "blocks"]);
    profile(&out, &["--attention", "flash", "--fusion", "all"]);
    for f in [
        "walkthrough_ctx16_training_snapshot.pickle",
        "walkthrough_ctx16_training_checkpoint-blocks_snapshot.pickle",
        "walkthrough_ctx16_training_flash_fused-qkv_fused-gate-up_snapshot.pickle",
        "walkthrough_ctx16_training_checkpoint-blocks_report.html",
    ] {
        assert!(out.join(f).is_file(), "{f} missing in {:?}", std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect::<Vec<_>>());
    }
    // A downloaded model's config.json is named after its folder, or its _name_or_path.
    let shape = r#""hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100"#;
    let folder = out.join("Llama-Mini");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("config.json"), format!("{{{shape}}}")).unwrap();
    let hub = out.join("hub");
    std::fs::create_dir_all(&hub).unwrap();
    std::fs::write(hub.join("config.json"), format!(r#"{{{shape}, "_name_or_path": "meta-llama/Llama-3.2-1B"}}"#)).unwrap();
    for (cfg, name) in [(folder.join("config.json"), "Llama-Mini"), (hub.join("config.json"), "Llama-3.2-1B")] {
        ok(&vramscope(&[
            "profile", "--config", cfg.to_str().unwrap(), "--context-length", "16", "--batch-size", "1", "--device", "meta",
            "--warmup-steps", "0", "--out-dir", out.to_str().unwrap(),
        ]));
        assert!(out.join(format!("{name}_ctx16_training_snapshot.pickle")).is_file(), "{name}");
    }
}

#[test]
fn view_refuses_to_overwrite_its_input() {
    let out = tmp("view");
    profile(&out, &[]);
    let snap = out.join("walkthrough_ctx16_training_snapshot.pickle");
    let before = std::fs::read(&snap).unwrap();
    // The same file by another spelling is refused too.
    let other = out.join(".").join("walkthrough_ctx16_training_snapshot.pickle");
    for target in [&snap, &other] {
        let o = vramscope(&["view", snap.to_str().unwrap(), "--output", target.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&o.stderr).contains("--output"), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(std::fs::read(&snap).unwrap(), before);
}
