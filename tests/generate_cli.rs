//! `profile --profile-type generate --max-new-tokens N`: the flags' refusals (exit 2, the flag
//! named, nothing written) and what a run reports (each step's peak, the step of the peak, the
//! KV cache at the end). Byte counts are tests/generate_grid.rs's.
mod scratch;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn vramscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-generate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run(name: &str, extra: &[&str]) -> (Output, PathBuf) {
    let out = tmp(name);
    let mut args = vec!["profile", "--device", "meta", "--context-length", "16", "--batch-size", "1", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    (vramscope(&args), out)
}

#[test]
fn generate_and_max_new_tokens_go_together_on_hf_models() {
    for (extra, flag) in [
        (&["--model", "Llama-3.2-1B", "--profile-type", "generate"][..], "--max-new-tokens"),
        (&["--model", "Llama-3.2-1B", "--profile-type", "generate", "--max-new-tokens", "0"][..], "--max-new-tokens"),
        (&["--model", "Llama-3.2-1B", "--profile-type", "inference", "--max-new-tokens", "4"][..], "--max-new-tokens"),
        (&["--model", "Llama-3.2-1B", "--max-new-tokens", "4"][..], "--max-new-tokens"),
        (&["--model", "tiny", "--profile-type", "generate", "--max-new-tokens", "4"][..], "--profile-type"),
        (&["--model", "Llama-3.2-1B", "--profile-type", "generate", "--max-new-tokens", "4", "--use-cache", "false"][..], "--use-cache"),
        (&["--model", "Llama-3.2-1B", "--profile-type", "generate", "--max-new-tokens", "4", "--logits-to-keep", "1"][..], "--logits-to-keep"),
        (&["--model", "Llama-3.2-1B", "--profile-type", "generate", "--max-new-tokens", "4", "--lora-r", "8", "--precision", "bf16"][..], "--precision"),
        (&["--model", "Llama-3.2-1B", "--profile-type", "generate,training", "--max-new-tokens", "4", "--lora-r", "8", "--load-in-4bit"][..], "--prepare-model-for-kbit-training"),
        (&["--model", "Llama-3.2-1B", "--profile-type", "generate,training", "--max-new-tokens", "4", "--lora-r", "8", "--load-in-8bit"][..], "--prepare-model-for-kbit-training"),
        // DoRA and modules_to_save are measured with generate over unquantized weights only
        (&["--model", "Llama-3.2-1B", "--profile-type", "generate", "--max-new-tokens", "4", "--lora-r", "8", "--use-dora", "--load-in-4bit"][..], "--use-dora"),
        (&["--model", "Llama-3.2-1B", "--profile-type", "generate", "--max-new-tokens", "4", "--lora-r", "8", "--modules-to-save", "lm_head", "--load-in-8bit"][..], "--modules-to-save"),
    ] {
        let (o, out) = run("refused", extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?} should name {flag}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists(), "{extra:?} wrote {}", out.display());
    }
}

#[test]
fn fit_sweep_and_compare_refuse_generate_naming_the_flag() {
    let out = tmp("others");
    let o = out.to_str().unwrap();
    for (args, flag) in [
        // generate's length is required by sweep's points and by fit (unless it searches it)
        (vec!["sweep", "--model", "Llama-3.2-1B", "--device", "meta", "--profile-type", "generate", "--context-length", "16,32", "--out-dir", o], "--max-new-tokens"),
        (vec!["sweep", "--model", "Llama-3.2-1B", "--device", "meta", "--profile-type", "generate,inference", "--max-new-tokens", "2", "--out-dir", o], "--profile-type"),
        (vec!["fit", "--model", "Llama-3.2-1B", "--gpu", "h100", "--profile-type", "generate"], "--max-new-tokens"),
        (vec!["profile", "--model", "Llama-3.2-1B", "--device", "meta", "--compare", "--profile-type", "generate", "--max-new-tokens", "2", "--out-dir", o], "--compare"),
    ] {
        let r = vramscope(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag) && err.contains("generate"), "{args:?} should name {flag}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

#[test]
fn sweep_runs_generate_over_new_tokens_and_prompts() {
    let out = tmp("sweep");
    let args = ["sweep", "--model", "Llama-3.2-1B", "--num-layers", "2", "--device", "meta", "--profile-type", "generate", "--max-new-tokens", "2,5", "--context-length", "8,16", "--batch-size", "2", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap()];
    let r = vramscope(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    let points = s["points"].as_array().unwrap();
    assert_eq!(points.len(), 4);
    for p in points {
        let (ctx, n) = (p["context_length"].as_u64().unwrap(), p["values"]["max-new-tokens"].as_str().unwrap().parse::<u64>().unwrap());
        let g = &p["generate"];
        assert_eq!(g["max_new_tokens"], n, "{p}");
        assert_eq!(g["steps"].as_array().unwrap().len() as u64, n, "{p}");
        // Llama-3.2-1B's 8 kv heads of 64 in bf16, 2 layers here: keys and values × B 2 × (S + N − 1).
        assert_eq!(g["kv_cache_bytes"], 2 * 2 * 8 * 64 * 2 * 2 * (ctx + n - 1), "{p}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_generate_run_reports_its_steps_the_peak_step_and_the_kv_cache() {
    let (o, out) = run("llama", &["--model", "Llama-3.2-1B", "--profile-type", "generate", "--max-new-tokens", "3"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let r = &s["runs"][0];
    assert_eq!(r["profile_type"], "generate");
    let g = &r["generate"];
    let steps: Vec<&str> = g["steps"].as_array().unwrap().iter().map(|x| x[0].as_str().unwrap()).collect();
    assert_eq!(steps, ["prefill", "decode step 1", "decode step 2"]);
    // Llama-3.2-1B: 16 layers x keys and values x 8 kv heads x (16 + 3 - 1) positions x 64 x bf16.
    assert_eq!(g["kv_cache_bytes"], 16 * 2 * 8 * 18 * 64 * 2);
    // With a 16-token prompt the last decode step is the peak: the cache has grown, and the
    // previous step's fp32 copy of the logits lives until the new copy exists (one copy only
    // in the prefill), which outweighs the prefill's 16-position activations.
    assert_eq!(g["peak_step"], "decode step 2");
    let peak = r["peak_allocated_bytes"].as_u64().unwrap();
    assert_eq!(g["steps"].as_array().unwrap().iter().map(|x| x[1].as_u64().unwrap()).max(), Some(peak));
    assert!(r["peak"]["phase_peaks"]["prefill"].is_u64() && r["peak"]["phase_peaks"]["decode"].is_u64(), "{}", r["peak"]["phase_peaks"]);
    assert!(text.contains("the peak is in decode step 2") && text.contains("KV cache at the end 0.56 MiB (589824 B)"), "{text}");
    assert!(text.contains("peak allocated by step (MiB): prefill"), "{text}");
    assert!(text.contains("generate() passes logits_to_keep=1"), "{text}");
}

/// generate() over a 4-bit model with LoRA adapters: unprepared by default (an inference
/// script's model: bf16 hidden states, so a bf16 KV cache), fp32 once
/// --prepare-model-for-kbit-training true casts the unquantized parameters.
#[test]
fn a_qlora_generate_run_is_unprepared_unless_asked() {
    let base = ["--model", "Llama-3.2-1B", "--profile-type", "generate", "--max-new-tokens", "3", "--load-in-4bit", "--bnb-4bit-quant-type", "nf4", "--bnb-4bit-compute-dtype", "bfloat16", "--lora-r", "8"];
    let kv = |name: &str, extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let (o, out) = run(name, &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        let _ = std::fs::remove_dir_all(&out);
        s["runs"][0]["generate"]["kv_cache_bytes"].as_u64().unwrap()
    };
    // 16 layers x keys and values x 8 kv heads x (16 + 3 - 1) positions x 64.
    let cells = 16 * 2 * 8 * 18 * 64;
    assert_eq!(kv("qlora", &[]), cells * 2);
    assert_eq!(kv("qlora-prepared", &["--prepare-model-for-kbit-training", "true"]), cells * 4);
}

/// Past the sliding window (prompt 16, window 8) generate runs on Mistral and Phi-3, whose
/// DynamicSlidingWindowLayers generate_sliding.json measures, and exits 2 on Qwen2's window,
/// which it does not, naming `--max-new-tokens`.
#[test]
fn generate_past_the_sliding_window_runs_where_measured() {
    let dir = tmp("sliding-configs");
    std::fs::create_dir_all(&dir).unwrap();
    let shape = r#""hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "sliding_window": 8"#;
    for (mt, extra, ok) in [("mistral", "", true), ("phi3", r#", "pad_token_id": 0"#, true), ("qwen2", r#", "use_sliding_window": true, "max_window_layers": 0"#, false)] {
        let cfg = dir.join(format!("{mt}.json"));
        std::fs::write(&cfg, format!(r#"{{"model_type": "{mt}", {shape}{extra}}}"#)).unwrap();
        let (o, out) = run(&format!("sliding-{mt}"), &["--config", cfg.to_str().unwrap(), "--profile-type", "generate", "--max-new-tokens", "4", "--attn-implementation", "eager"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{err}");
        if ok {
            assert!(o.status.success(), "{mt}: {err}");
            assert!(String::from_utf8_lossy(&o.stdout).contains("KV cache at the end"), "{mt}");
        } else {
            assert_eq!(o.status.code(), Some(2), "{mt}: {err}");
            assert!(err.contains("--max-new-tokens") && err.contains("DynamicSlidingWindowLayer"), "{mt}: {err}");
            assert!(!out.exists(), "{mt} wrote {}", out.display());
        }
        let _ = std::fs::remove_dir_all(&out);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// peft's bias, DoRA and modules_to_save over unquantized weights and LLM.int8() weights run with
/// generate (generate_dense_extras.json); 8-bit is unprepared by default, as 4-bit: the KV cache
/// in the bf16 load type, fp32 once --prepare-model-for-kbit-training true.
#[test]
fn adapter_options_and_8bit_weights_run_with_generate() {
    let base = ["--model", "Llama-3.2-1B", "--num-layers", "2", "--profile-type", "generate", "--max-new-tokens", "2"];
    let kv = |name: &str, extra: &[&str]| {
        let (o, out) = run(name, &[&base[..], extra].concat());
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        let _ = std::fs::remove_dir_all(&out);
        assert_eq!(s["runs"][0]["generate"]["steps"].as_array().unwrap().len(), 2, "{extra:?}");
        s["runs"][0]["generate"]["kv_cache_bytes"].as_u64().unwrap()
    };
    // 2 layers x keys and values x 8 kv heads x (16 + 2 - 1) positions x 64, in bf16.
    let bf16 = 2 * 2 * 8 * 17 * 64 * 2;
    assert_eq!(kv("dora", &["--lora-r", "8", "--use-dora"]), bf16);
    assert_eq!(kv("save", &["--lora-r", "8", "--modules-to-save", "lm_head", "--lora-bias", "lora_only"]), bf16);
    assert_eq!(kv("int8", &["--load-in-8bit", "--lora-r", "8"]), bf16);
    assert_eq!(kv("int8-prepared", &["--load-in-8bit", "--prepare-model-for-kbit-training", "true"]), 2 * bf16);
}
