//! `--use-dora` (peft's `LoraConfig(use_dora=True)`): what it needs, where it is refused (exit
//! 2 naming it, nothing written), and what it adds to a LoRA run: one trainable magnitude per
//! output feature of each adapted projection, as `print_trainable_parameters()` counts them.
//! Byte counts are tests/dora_grid.rs's.
mod scratch;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn vramscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-dora-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `profile` on meta of Llama-3.1-8B, LoRA r 16 on all linears, plus `extra`.
fn run(name: &str, extra: &[&str]) -> (String, Value) {
    let out = tmp(name);
    let mut args = vec!["profile", "--device", "meta", "--model", "Llama-3.1-8B", "--context-length", "128", "--batch-size", "1", "--out-dir", out.to_str().unwrap()];
    args.extend(["--lora-r", "16", "--lora-alpha", "32", "--target-modules", "all-linear"]);
    args.extend_from_slice(extra);
    let o = vramscope(&args);
    assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    let s = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    (String::from_utf8_lossy(&o.stdout).into_owned(), s)
}

#[test]
fn use_dora_without_lora_r_and_where_lora_is_refused_exit_2_naming_it() {
    let out = tmp("refused");
    let o = out.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["profile", "--device", "meta", "--model", "Llama-3.2-1B", "--use-dora", "--out-dir", o],
        vec!["sweep", "--device", "meta", "--model", "Llama-3.2-1B", "--use-dora", "--context-length", "16,32", "--out-dir", o],
        vec!["profile", "--device", "meta", "--model", "Llama-3.2-1B", "--lora-r", "8", "--use-dora", "--load-in-4bit", "--profile-type", "generate", "--max-new-tokens", "2", "--out-dir", o],
        // (estimate derives DoRA without dropout on the llama family: tests/estimate_lora.rs.)
        vec!["estimate", "--model", "Llama-3.2-1B", "--lora-r", "8", "--use-dora", "--lora-dropout", "0.1", "--json", o],
        vec!["profile", "--device", "meta", "--model", "Llama-3.2-1B", "--lora-r", "8", "--use-dora", "--parallel", "fsdp", "--world-size", "2", "--out-dir", o],
        vec!["profile", "--device", "meta", "--model", "2.7B", "--num-layers", "1", "--lora-r", "8", "--use-dora", "--out-dir", o],
    ];
    for args in cases {
        let r = vramscope(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
        // (the flavour refusal names the first transformers flag, --lora-r)
        let named = err.contains("--use-dora") || (args.contains(&"2.7B") && err.contains("--lora-r"));
        assert!(named, "{args:?} should name --use-dora: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
    // Without --lora-r, clap names what --use-dora requires.
    let r = vramscope(&["profile", "--device", "meta", "--model", "Llama-3.2-1B", "--use-dora", "--out-dir", o]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("--lora-r"));
}

#[test]
fn dora_trains_the_magnitude_vectors_beside_the_adapters() {
    let (lora_text, lora) = run("lora", &[]);
    let (text, dora) = run("dora", &["--use-dora"]);
    // One magnitude per output feature of q, k, v, o, gate, up and down, in each of 32 layers.
    let (d, kv, f, layers) = (4096u64, 1024u64, 14336u64, 32u64);
    let magnitudes = layers * (d + kv + kv + d + f + f + d);
    let count = |s: &Value, k: &str| s["parameters"][k].as_u64().unwrap();
    assert_eq!(count(&lora, "trainable"), 41_943_040);
    assert_eq!(count(&dora, "trainable"), count(&lora, "trainable") + magnitudes);
    assert_eq!(count(&dora, "total"), count(&lora, "total") + magnitudes);
    // peft 0.21.2 prints this for meta-llama/Llama-3.1-8B with r=16, use_dora=True on all
    // linear layers.
    assert!(text.contains("trainable params: 43,319,296 || all params: 8,073,580,544 || trainable%: 0.5366"), "{text}");
    assert!(lora_text.contains("trainable params: 41,943,040"), "{lora_text}");
    // The run says what it loaded, and its files are told apart from the LoRA run's.
    assert!(text.contains("peft 0.21.2 DoRA (use_dora) r 16") && !lora_text.contains("DoRA"), "{text}");
    assert_eq!((dora["model"]["hf"]["lora"]["use_dora"].as_bool(), dora["transformers"]["use_dora"].as_bool()), (Some(true), Some(true)));
    assert_eq!(lora["transformers"]["use_dora"].as_bool(), Some(false));
    let snap = |s: &Value| s["runs"][0]["snapshot"].as_str().unwrap().to_string();
    assert!(snap(&dora).contains("_dora") && !snap(&lora).contains("_dora"), "{} {}", snap(&dora), snap(&lora));
    // fp32 magnitudes: two more fp32 AdamW moments per element, a step per tensor.
    let state = |s: &Value| {
        let cats = s["runs"][0]["peak"]["by_category_requested"].as_array().unwrap().clone();
        cats.iter().find(|c| c[0] == "optimizer_state").and_then(|c| c[1].as_u64()).unwrap()
    };
    assert_eq!(state(&dora) - state(&lora), 2 * 4 * magnitudes + 4 * layers * 7);
    // And the step holds more than LoRA's: the per-forward eye, dense update and weight norms.
    let peak = |s: &Value| s["runs"][0]["peak"]["peak_allocated"].as_u64().unwrap();
    assert!(peak(&dora) > peak(&lora));
}

#[test]
fn compare_and_sweep_carry_use_dora() {
    let out = tmp("compare");
    let o = vramscope(&[
        "profile", "--device", "meta", "--model", "Llama-3.2-1B", "--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--lora-r", "16", "--use-dora", "--compare", "--out-dir",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap();
    for label in ["full fine-tune, no checkpointing", "DoRA, non-reentrant checkpointing", "4-bit DoRA, reentrant checkpointing"] {
        assert!(md.contains(label), "{label}: {md}");
    }
    assert!(!md.contains("QLoRA"), "{md}");
    // A sweep's switch: every point is DoRA (more trainable parameters than the same LoRA).
    let state = |dora: bool| {
        let out = tmp(if dora { "sweep-dora" } else { "sweep-lora" });
        let mut args = vec!["sweep", "--device", "meta", "--model", "Llama-3.2-1B", "--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--lora-r", "8,16", "--out-dir", out.to_str().unwrap()];
        if dora {
            args.push("--use-dora");
        }
        let o = vramscope(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s: Value = serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
        s["points"].as_array().unwrap().iter().map(|p| p["at_peak_requested_by_category"]["optimizer_state"].as_u64().unwrap()).collect::<Vec<_>>()
    };
    // The magnitudes' AdamW state (at the peak of each point, as the sweep records it).
    let (lora, dora) = (state(false), state(true));
    assert_eq!(lora.len(), 2);
    for (l, d) in lora.into_iter().zip(dora) {
        assert!(d > l, "{d} <= {l}");
    }
}
