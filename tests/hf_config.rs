//! The hf flavour's way in: `--config` (a config.json or a downloaded-style model folder), the
//! named presets, and transformers' run options as flags. Success and refusal, and which
//! settings reach the run's summary — not byte counts (the op sequence has its own tests).
mod scratch;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use vramscope::model::{hf, presets, Checkpoint, Flavour};

const PRESETS: [&str; 5] = ["Llama-3.2-1B", "Llama-3.1-8B", "Mistral-7B", "Qwen2.5-7B", "Qwen3-8B"];

fn vramscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-hfcfg-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The committed copy of a model's config.json folder (Mistral-7B's is the v0.3 release).
fn folder(preset: &str) -> PathBuf {
    let dir = if preset == "Mistral-7B" { "Mistral-7B-v0.3" } else { preset };
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf_models").join(dir)
}

/// `profile` on meta at context 128, batch 1; returns summary.json.
fn profile(out: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["profile", "--device", "meta", "--context-length", "128", "--batch-size", "1", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = vramscope(&args);
    assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

/// Exit code 2, the flag (or field) named, nothing written.
fn refused(extra: &[&str], needles: &[&str]) {
    let out = tmp("refused");
    let mut args = vec!["profile", "--device", "meta", "--context-length", "128", "--batch-size", "1", "--out-dir", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = vramscope(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{extra:?} should say {n}: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists(), "{extra:?} wrote {}", out.display());
}

#[test]
fn each_preset_is_its_published_config_json() {
    for name in PRESETS {
        let p = presets::find(name, None).unwrap();
        let text = std::fs::read_to_string(folder(name).join("config.json")).unwrap();
        let m = hf::parse(&text).unwrap();
        assert_eq!(m.config, p.model, "{name}: the preset and its config.json differ");
        assert_eq!(m.config.param_count(), p.expected_params, "{name}");
        assert_eq!(m.torch_dtype.as_deref(), Some("bfloat16"), "{name}");
        assert_eq!(p.model.flavour, Flavour::Hf);
    }
    // The alias names the same model.
    assert_eq!(presets::find("Mistral-7B-v0.3", None).unwrap().model, presets::find("Mistral-7B", None).unwrap().model);
    assert_eq!(presets::find("hf-qwen3-8b", None).unwrap().name, "Qwen3-8B");
    let m = presets::find("Mistral-7B", None).unwrap().model;
    assert_eq!((m.vocab_size, m.hf.as_ref().unwrap().sliding_window), (32_768, None));
}

#[test]
fn every_preset_profiles_on_meta_through_the_cli_and_says_its_transformers_settings() {
    for name in PRESETS.iter().chain(&["Mistral-7B-v0.3"]) {
        let out = tmp(&format!("preset-{name}"));
        let s = profile(&out, &["--model", name]);
        let t = &s["transformers"];
        assert_eq!(t["transformers_version"], "5.23.0", "{name}");
        assert_eq!((t["attn_implementation"].as_str(), t["use_cache"].as_bool(), t["gradient_checkpointing"].as_str()), (Some("sdpa"), Some(true), Some("off")), "{name}");
        assert!(t["sdpa_backend_on_cuda_by_context"]["128"].is_string(), "{name}: {t}");
        assert_eq!(s["model"]["flavour"], "hf");
        assert!(s["runs"][0]["peak_allocated_bytes"].as_u64().unwrap() > 0);
    }
}

#[test]
fn config_takes_a_model_folder_with_extra_files_and_gives_the_preset_model() {
    let llama = folder("Llama-3.2-1B");
    for f in ["tokenizer_config.json", "generation_config.json", "model.safetensors.index.json"] {
        assert!(llama.join(f).is_file(), "the fixture folder should hold {f}");
    }
    for name in ["Llama-3.2-1B", "Qwen2.5-7B"] {
        let by_preset = profile(&tmp("by-preset"), &["--model", name, "--profile-type", "inference"]);
        let dir = folder(name);
        let by_folder = profile(&tmp("by-folder"), &["--config", dir.to_str().unwrap(), "--profile-type", "inference"]);
        let by_file = profile(&tmp("by-file"), &["--config", dir.join("config.json").to_str().unwrap(), "--profile-type", "inference"]);
        assert_eq!(by_preset["model"], by_folder["model"], "{name}");
        assert_eq!(by_preset["model"], by_file["model"], "{name}");
        assert_eq!(by_folder["preset"], name, "outputs are named after the folder");
    }
    // A folder without a config.json is refused.
    let empty = tmp("empty-folder");
    std::fs::create_dir_all(&empty).unwrap();
    refused(&["--config", empty.to_str().unwrap()], &["--config", "without a config.json"]);
}

#[test]
fn an_unsupported_model_type_exits_2_with_the_supported_list() {
    let dir = tmp("falcon");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"model_type": "falcon", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100}"#).unwrap();
    refused(&["--config", dir.to_str().unwrap()], &["--config", "model_type 'falcon'", "llama, mistral, qwen2, qwen3"]);
}

#[test]
fn bad_fields_exit_2_naming_the_field() {
    let dir = tmp("fields");
    std::fs::create_dir_all(&dir).unwrap();
    let shape = r#""model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100"#;
    let cases = [
        (r#", "use_cache": "yes""#, "'use_cache'"),
        (r#", "tie_word_embeddings": 0"#, "'tie_word_embeddings'"),
        (r#", "head_dim": 0"#, "'head_dim'"),
        (r#", "rope_scaling": {"rope_type": "longrope"}"#, "rope_scaling.rope_type"),
        (r#", "rope_parameters": "default""#, "'rope_parameters'"),
        (r#", "rope_theta": "1e4""#, "'rope_theta'"),
        (r#", "torch_dtype": 2"#, "'torch_dtype'"),
        (r#", "hidden_act": "relu""#, "hidden_act"),
        (r#", "num_key_value_heads": 3"#, "num_key_value_heads 3"),
        (r#", "attention_bias": false, "mlp_bias": "no""#, "'mlp_bias'"),
        (r#", "attention_bias": null"#, "'attention_bias' is null"),
    ];
    for (i, (extra, field)) in cases.iter().enumerate() {
        let f = dir.join(format!("c{i}.json"));
        std::fs::write(&f, format!("{{{shape}{extra}}}")).unwrap();
        refused(&["--config", f.to_str().unwrap()], &["--config", field]);
    }
    let qwen = dir.join("qwen.json");
    std::fs::write(&qwen, r#"{"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100, "use_sliding_window": true, "max_window_layers": 2}"#).unwrap();
    // Sliding and full layers: read, but modelled only for generate with a StaticCache.
    refused(&["--config", qwen.to_str().unwrap()], &["--profile-type", "2 of 4 layers", "max_window_layers"]);
}

#[test]
fn transformers_flags_on_other_flavours_exit_2_naming_the_flag() {
    for (flag, value) in [
        ("--attn-implementation", "eager"),
        ("--sdpa-backend", "math"),
        ("--use-cache", "false"),
        ("--logits-to-keep", "1"),
        ("--gradient-checkpointing", "reentrant"),
        ("--attention-mask", "ones"),
    ] {
        refused(&["--model", "2.7B", "--num-layers", "1", flag, value], &[flag, "hf flavour"]);
        refused(&[flag, value], &[flag, "tinyllama"]);
    }
    // And the tinyllama/cs336 options on hf.
    refused(&["--model", "Llama-3.2-1B", "--attention", "flash"], &["--attention", "--attn-implementation"]);
    refused(&["--model", "Llama-3.2-1B", "--fused-qkv"], &["--fused-qkv"]);
    // Bad values, and what PyTorch itself cannot run.
    refused(&["--model", "Llama-3.2-1B", "--attn-implementation", "xformers"], &["--attn-implementation", "flash_attention_2"]);
    refused(&["--model", "Llama-3.2-1B", "--sdpa-backend", "fa3"], &["--sdpa-backend", "cudnn"]);
    // cuDNN attention has no fp32 kernel (PyTorch finds none).
    refused(&["--model", "Llama-3.2-1B", "--dtype", "float32", "--sdpa-backend", "cudnn"], &["--sdpa-backend", "fp16/bf16"]);
    refused(&["--model", "Llama-3.2-1B", "--attn-implementation", "eager", "--sdpa-backend", "math"], &["--sdpa-backend", "eager"]);
    refused(&["--model", "Llama-3.2-1B", "--use-cache", "maybe"], &["--use-cache"]);
    refused(&["--model", "Llama-3.2-1B", "--gradient-checkpointing", "every-2"], &["--gradient-checkpointing"]);
    refused(&["--model", "Llama-3.2-1B", "--attention-mask", "padded"], &["--attention-mask"]);
    refused(&["--model", "Llama-3.2-1B", "--dtype", "float32", "--attn-implementation", "flash_attention_2"], &["--attn-implementation", "bf16"]);
    // from_pretrained's dtype and peft's LoraConfig: bad values and what is not modelled.
    refused(&["--model", "Llama-3.2-1B", "--dtype", "float8"], &["--dtype", "bfloat16"]);
    refused(&["--model", "2.7B", "--num-layers", "1", "--dtype", "bfloat16"], &["--dtype", "hf model"]);
    refused(&["--model", "Llama-3.2-1B", "--precision", "fp16"], &["--precision", "float32"]);
    refused(&["--model", "Llama-3.2-1B", "--dtype", "float16", "--precision", "fp16"], &["--precision", "unscale FP16"]);
    refused(&["--model", "Llama-3.2-1B", "--dtype", "float16", "--pure-bf16"], &["--dtype"]);
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "0"], &["--lora-r", "positive"]);
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--lora-dropout", "1"], &["--lora-dropout"]);
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--target-modules", "q_proj,w1"], &["--target-modules", "'w1'"]);
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--target-modules", "lm_head"], &["--target-modules", "not modelled"]);
    refused(&["--model", "Qwen2.5-7B", "--lora-r", "8", "--lora-bias", "some"], &["--lora-bias", "lora_only"]);
    refused(&["--model", "Qwen2.5-7B", "--lora-r", "8", "--lora-bias", "all", "--load-in-4bit"], &["--lora-bias", "4-bit"]);
    refused(&["--model", "2.7B", "--num-layers", "1", "--lora-r", "8"], &["--lora-r", "hf flavour"]);
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--modules-to-save", "lm_head,norm"], &["--modules-to-save", "'norm'", "embed_tokens and lm_head"]);
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--modules-to-save", ","], &["--modules-to-save", "names no module"]);
    refused(&["--model", "Llama-3.2-1B", "--modules-to-save", "lm_head"], &["--lora-r"]);
    refused(&["--model", "Llama-3.2-1B", "--optimizer", "adafactor", "--parallel", "fsdp", "--world-size", "2"], &["--optimizer", "adafactor", "--parallel fsdp"]);
    // bitsandbytes 4-bit: what PyTorch cannot run, and what is not modelled.
    refused(&["--model", "2.7B", "--num-layers", "1", "--load-in-4bit"], &["--load-in-4bit", "hf flavour"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-4bit"], &["--load-in-4bit", "--lora-r"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-4bit", "--lora-r", "8", "--bnb-4bit-quant-type", "int4"], &["--bnb-4bit-quant-type"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-4bit", "--lora-r", "8", "--bnb-4bit-quant-storage", "int8"], &["--bnb-4bit-quant-storage"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-4bit", "--lora-r", "8", "--precision", "bf16"], &["--precision", "4-bit"]);
    // (under hsdp 4-bit is measured stored as the compute dtype: dist_grid/fsdp_qlora_layouts.json)
    refused(&["--model", "Llama-3.2-1B", "--load-in-4bit", "--lora-r", "8", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2"], &["--bnb-4bit-quant-storage", "hsdp", "not measured"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-4bit", "--lora-r", "8", "--parallel", "zero1", "--world-size", "2"], &["--parallel", "zero1"]);
    // LoRA under data parallelism: ddp, zero2 and fsdp are modelled; the rest is refused.
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--parallel", "zero1", "--world-size", "2"], &["--parallel", "zero1", "ddp, zero2 and fsdp"]);
    // (hsdp runs: dist_grid/lora_layouts.json; with FSDP2's MixedPrecisionPolicy too,
    // lora_mixed_precision_layouts.json, but not on other fully_shard units)
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2", "--fsdp-param-dtype", "bf16", "--fsdp-unit", "root"], &["--fsdp-unit", "MixedPrecisionPolicy"]);
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--parallel", "tp", "--world-size", "2"], &["--parallel", "tensor parallelism"]);
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--parallel", "fsdp", "--world-size", "4", "--tp", "2"], &["--tp", "tensor parallelism"]);
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--parallel", "fsdp", "--world-size", "2", "--fsdp-param-dtype", "fp16"], &["--fsdp-param-dtype", "MixedPrecisionPolicy", "not measured"]);
    refused(&["--model", "Llama-3.2-1B", "--lora-r", "8", "--parallel", "fsdp", "--world-size", "2", "--offload", "params"], &["--offload", "CPUOffloadPolicy"]);
    // bitsandbytes 8-bit (LLM.int8()): the same refusals, naming its flag.
    refused(&["--model", "2.7B", "--num-layers", "1", "--load-in-8bit"], &["--load-in-8bit", "hf flavour"]);
    refused(&["--load-in-8bit"], &["--load-in-8bit", "tinyllama"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-8bit"], &["--load-in-8bit", "--lora-r"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-8bit", "--load-in-4bit", "--lora-r", "8"], &["--load-in-8bit", "--load-in-4bit"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-8bit", "--lora-r", "8", "--llm-int8-threshold=-1"], &["--llm-int8-threshold"]);
    refused(&["--model", "Qwen2.5-7B", "--lora-r", "8", "--lora-bias", "all", "--load-in-8bit"], &["--lora-bias", "8-bit"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-8bit", "--lora-r", "8", "--precision", "bf16"], &["--precision", "8-bit"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-8bit", "--lora-r", "8", "--parallel", "fsdp", "--world-size", "2"], &["--parallel", "8-bit"]);
    refused(&["--model", "Llama-3.2-1B", "--load-in-8bit", "--lora-r", "8", "--use-dora", "--profile-type", "generate", "--max-new-tokens", "4"], &["--use-dora", "8-bit"]);
    refused(&["--model", "Llama-3.2-1B", "--prepare-model-for-kbit-training", "false"], &["--prepare-model-for-kbit-training", "--load-in-8bit"]);
    refused(&["--model", "Llama-3.2-1B", "--logits-to-keep", "1"], &["--logits-to-keep", "inference"]);
    refused(&["--model", "Llama-3.2-1B", "--gradient-checkpointing", "reentrant", "--checkpoint", "blocks"], &["--checkpoint", "--gradient-checkpointing"]);
    refused(&["--config", folder("Qwen3-8B").to_str().unwrap(), "--flavour", "cs336"], &["--flavour", "q/k RMSNorm"]);
}

#[test]
fn the_flags_reach_the_model_and_the_summary_says_what_ran() {
    let out = tmp("flags");
    let s = profile(&out, &["--model", "Qwen3-8B", "--num-layers", "2", "--pure-bf16", "--gradient-checkpointing", "reentrant", "--use-cache", "false", "--attention-mask", "ones"]);
    let (m, t) = (&s["model"], &s["transformers"]);
    assert_eq!((m["checkpoint"].as_str(), m["hf"]["reentrant"].as_bool(), m["hf"]["use_cache"].as_bool()), (Some("blocks"), Some(true), Some(false)));
    assert_eq!((t["gradient_checkpointing"].as_str(), t["attention_mask"].as_str()), (Some("reentrant"), Some("ones")));
    // bf16 queries, no mask: PyTorch's flash kernel on CUDA.
    assert_eq!(t["sdpa_backend_on_cuda_by_context"]["128"], "flash");
    // On an H100/H200 torch 2.11 runs cuDNN attention for them instead; on an A100 flash.
    for (gpu, kernel) in [("H100-80GB", "cudnn"), ("H200-141GB", "cudnn"), ("A100-80GB", "flash")] {
        let s = profile(&tmp(&format!("flags-{gpu}")), &["--model", "Llama-3.2-1B", "--num-layers", "1", "--gpu", gpu]);
        assert_eq!(s["transformers"]["sdpa_backend_on_cuda_by_context"]["128"], kernel, "{gpu}");
    }
    // Snapshots of different settings get different names.
    let snap = s["runs"][0]["snapshot"].as_str().unwrap();
    assert!(snap.contains("checkpoint-blocks-reentrant") && snap.contains("no-cache") && snap.contains("mask-ones"), "{snap}");

    // --checkpoint means non-reentrant on hf, and the printed line says so.
    let out = tmp("flags2");
    let o = vramscope(&[
        "profile", "--device", "meta", "--model", "Llama-3.2-1B", "--num-layers", "1", "--context-length", "64", "--batch-size", "1",
        "--warmup-steps", "0", "--checkpoint", "blocks", "--attn-implementation", "eager", "--out-dir", out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("transformers 5.23.0: weights bfloat16 (dtype=\"auto\": the config's torch_dtype bfloat16); attn_implementation eager"), "{text}");
    assert!(text.contains("gradient checkpointing non-reentrant"), "{text}");
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!((s["model"]["checkpoint"].as_str(), s["model"]["hf"]["reentrant"].as_bool()), (Some("blocks"), Some(false)));
    assert!(s["transformers"]["sdpa_backend_on_cuda_by_context"].is_null(), "eager has no SDPA kernel");

    // logits_to_keep for inference; a forced SDPA backend is reported as given.
    let s = profile(&tmp("flags3"), &["--model", "Mistral-7B", "--num-layers", "1", "--profile-type", "inference", "--logits-to-keep", "1", "--sdpa-backend", "math"]);
    assert_eq!((s["transformers"]["logits_to_keep"].as_u64(), s["transformers"]["sdpa_backend_on_cuda_by_context"]["128"].as_str()), (Some(1), Some("math")));
    let checkpoint: Checkpoint = serde_json::from_value(s["model"]["checkpoint"].clone()).unwrap();
    assert_eq!(checkpoint, Checkpoint::None);
}

#[test]
fn a_config_mapped_onto_tinyllama_keeps_working() {
    let s = profile(&tmp("onto"), &["--config", folder("Llama-3.1-8B").to_str().unwrap(), "--flavour", "tinyllama", "--num-layers", "1"]);
    assert_eq!(s["model"]["flavour"], "tinyllama");
    assert!(s["model"]["hf"].is_null() && s["transformers"].is_null());
}

/// Kernels the hf model cannot run at the run's context are refused before any work: the
/// memory-efficient kernel has no grouped-query attention (PyTorch finds no kernel), and a
/// sliding window shorter than the context gives SDPA a mask the fused kernels' handling of
/// which is not modelled. The same model without the conflict runs.
#[test]
fn sdpa_kernels_the_model_cannot_run_exit_2_naming_the_flag() {
    refused(&["--model", "Llama-3.2-1B", "--sdpa-backend", "efficient"], &["--sdpa-backend", "grouped-query"]);
    let dir = tmp("window");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    std::fs::write(&cfg, r#"{"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256, "sliding_window": 64}"#).unwrap();
    let c = cfg.to_str().unwrap();
    refused(&["--config", c, "--sdpa-backend", "efficient"], &["--sdpa-backend", "sliding window"]);
    let ok = tmp("window-math");
    let o = vramscope(&["profile", "--config", c, "--sdpa-backend", "math", "--device", "meta", "--context-length", "128", "--batch-size", "1", "--out-dir", ok.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// from_pretrained's `dtype="auto"`: an hf preset loads bf16 weights and says so; --dtype
/// overrides it; a quantized checkpoint whose method is not modelled is refused by name.
#[test]
fn weights_load_as_from_pretrained_does_and_quantized_checkpoints_are_refused() {
    let s = profile(&tmp("auto"), &["--model", "Llama-3.2-1B", "--num-layers", "1", "--profile-type", "inference"]);
    assert_eq!((s["precision"].as_str(), s["transformers"]["weights_dtype"].as_str(), s["transformers"]["dtype"].as_str()), (Some("pure-bf16"), Some("bfloat16"), Some("auto")));
    let s = profile(&tmp("f32"), &["--model", "Llama-3.2-1B", "--num-layers", "1", "--profile-type", "inference", "--dtype", "float32"]);
    assert_eq!((s["precision"].as_str(), s["transformers"]["weights_dtype"].as_str()), (Some("fp32"), Some("float32")));
    // The Trainer's bf16=True on bf16 weights: bf16 parameters under autocast.
    let s = profile(&tmp("autocast"), &["--model", "Llama-3.2-1B", "--num-layers", "1", "--precision", "bf16"]);
    assert_eq!((s["precision"].as_str(), s["transformers"]["weights_dtype"].as_str()), (Some("pure-bf16-autocast"), Some("bfloat16")));
    for (method, extra, needle) in [("awq", r#""bits": 4"#, "'awq' quantization is not modelled"), ("bitsandbytes", r#""load_in_4bit": true"#, "bitsandbytes 4-bit")] {
        let dir = tmp(&format!("quant-{method}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cfg: Value = serde_json::from_slice(&std::fs::read(folder("Qwen2.5-7B").join("config.json")).unwrap()).unwrap();
        cfg["quantization_config"] = serde_json::from_str(&format!(r#"{{"quant_method": "{method}", {extra}}}"#)).unwrap();
        let path = dir.join("config.json");
        std::fs::write(&path, cfg.to_string()).unwrap();
        refused(&["--config", path.to_str().unwrap()], &["--config", "quantization_config", needle]);
    }
}

/// peft's LoRA: frozen base, fp32 adapters, the counts print_trainable_parameters() prints.
#[test]
fn lora_flags_train_only_the_adapters_and_count_them_as_peft_does() {
    let out = tmp("lora");
    let mut args = vec!["profile", "--device", "meta", "--model", "Llama-3.1-8B", "--context-length", "128", "--batch-size", "1", "--out-dir", out.to_str().unwrap()];
    args.extend(["--lora-r", "16", "--lora-alpha", "32", "--target-modules", "all-linear", "--gradient-checkpointing", "non-reentrant"]);
    let o = vramscope(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    // peft 0.21.2 prints this for meta-llama/Llama-3.1-8B with r=16 on all linear layers.
    assert!(text.contains("trainable params: 41,943,040 || all params: 8,072,204,288 || trainable%: 0.5196"), "{text}");
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!((s["parameters"]["trainable"].as_u64(), s["parameters"]["total"].as_u64()), (Some(41_943_040), Some(8_072_204_288)));
    assert_eq!(s["model"]["hf"]["lora"]["targets"].as_array().unwrap().len(), 7);
    // Frozen bf16 weights, fp32 adapters: fused AdamW's state is two fp32 moments per
    // adapter element and a 4 B step per adapter tensor (32 layers × 7 projections × A, B).
    let cats = s["runs"][0]["peak"]["by_category_requested"].as_array().unwrap();
    let state = cats.iter().find(|c| c[0] == "optimizer_state").and_then(|c| c[1].as_u64());
    assert_eq!(state, Some(2 * 4 * 41_943_040 + 4 * 32 * 7 * 2));
}

/// `--modules-to-save`: peft's trainable copies of the head and the embedding, counted as
/// print_trainable_parameters() counts them (Llama-3.2-1B ties them: each copy is a parameter
/// of its own, the shared original frozen), trained with gradients and optimizer state.
#[test]
fn modules_to_save_train_full_copies_and_count_them_as_peft_does() {
    let vd: u64 = 128_256 * 2048;
    // (modules, peft 0.21.2's line for a bf16 Llama-3.2-1B, r 8 on q_proj,v_proj)
    for (save, line) in [
        ("lm_head", "trainable params: 263,520,256 || all params: 1,499,334,656 || trainable%: 17.5758"),
        ("embed_tokens,lm_head", "trainable params: 526,188,544 || all params: 1,762,002,944 || trainable%: 29.8631"),
    ] {
        let out = tmp(&format!("mts-{}", save.replace(',', "-")));
        let args = [
            "profile", "--device", "meta", "--model", "Llama-3.2-1B", "--num-layers", "16", "--context-length", "64", "--batch-size", "1", "--out-dir", out.to_str().unwrap(),
            "--lora-r", "8", "--lora-alpha", "16", "--modules-to-save", save,
        ];
        let o = vramscope(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(line), "{text}");
        let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        let copies = save.split(',').count() as u64;
        assert_eq!(s["parameters"]["trainable"].as_u64(), Some(851_968 + copies * vd));
        // Fused AdamW: two moments per trainable element in its dtype (bf16 copies, fp32
        // adapters) and a 4 B step per trainable tensor (16 layers × q, v × A, B, the copies).
        let cats = s["runs"][0]["peak"]["by_category_requested"].as_array().unwrap();
        let state = cats.iter().find(|c| c[0] == "optimizer_state").and_then(|c| c[1].as_u64());
        assert_eq!(state, Some(2 * 4 * 851_968 + 2 * 2 * copies * vd + 4 * (16 * 2 * 2 + copies)));
    }
}

/// QLoRA as a recipe runs it: 4-bit nf4 weights with double quantization, bf16 compute,
/// prepare_model_for_kbit_training (fp32 embedding, norms and head; reentrant checkpointing).
#[test]
fn qlora_loads_4bit_prepares_the_model_and_says_so() {
    let out = tmp("qlora");
    let mut args = vec!["profile", "--device", "meta", "--model", "Llama-3.1-8B", "--context-length", "256", "--batch-size", "1", "--out-dir", out.to_str().unwrap()];
    args.extend(["--load-in-4bit", "--bnb-4bit-quant-type", "nf4", "--bnb-4bit-use-double-quant", "--bnb-4bit-compute-dtype", "bfloat16", "--lora-r", "16", "--target-modules", "all-linear"]);
    let o = vramscope(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("weights 4-bit nf4 with double quantization (bitsandbytes 0.50.2: loaded as bfloat16, computed in bfloat16"), "{text}");
    assert!(text.contains("gradient checkpointing reentrant"), "prepare_model_for_kbit_training's default: {text}");
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!((s["parameters"]["trainable"].as_u64(), s["parameters"]["total"].as_u64()), (Some(41_943_040), Some(8_072_204_288)));
    // The parameters at rest: 4-bit linears (half a byte per weight, a byte per 64 for the
    // block scales, fp32 per 256 blocks, a 1 KiB map each), fp32 embedding, head and norms,
    // fp32 adapters.
    let cats = s["runs"][0]["peak"]["by_category_requested"].as_array().unwrap();
    let params = cats.iter().find(|c| c[0] == "parameter").and_then(|c| c[1].as_u64()).unwrap();
    let (d, f, kv, l) = (4096u64, 14336u64, 1024u64, 32u64);
    let linear: u64 = [d * d, kv * d, kv * d, d * d, f * d, f * d, d * f].iter().map(|&n| n / 2 + n / 64 + (n / 64).div_ceil(256) * 4 + 1024 + 64 + 4).sum();
    let unquantized = (2 * 128_256 * d + (2 * l + 1) * d) * 4;
    let adapters = 41_943_040 * 4;
    assert_eq!(params, l * linear + unquantized + adapters, "{cats:?}");
}

/// LoRA over LLM.int8(): int8 linears with an fp32 scale per row, prepare_model_for_kbit_training
/// (fp32 embedding, norms and head; reentrant checkpointing); 8-bit inference without adapters.
#[test]
fn int8_loads_8bit_prepares_the_model_and_says_so() {
    let out = tmp("int8");
    let mut args = vec!["profile", "--device", "meta", "--model", "Llama-3.1-8B", "--context-length", "256", "--batch-size", "1", "--out-dir", out.to_str().unwrap()];
    args.extend(["--load-in-8bit", "--lora-r", "16", "--target-modules", "all-linear"]);
    let o = vramscope(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("weights 8-bit LLM.int8() (bitsandbytes 0.50.2: loaded as bfloat16, int8 with an fp32 scale per row; llm_int8_threshold 6"), "{text}");
    assert!(text.contains("trainable params: 41,943,040 || all params: 8,072,204,288 || trainable%: 0.5196"), "{text}");
    assert!(text.contains("gradient checkpointing reentrant"), "prepare_model_for_kbit_training's default: {text}");
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!((s["parameters"]["trainable"].as_u64(), s["parameters"]["total"].as_u64()), (Some(41_943_040), Some(8_072_204_288)));
    assert_eq!(s["model"]["hf"]["bnb"]["threshold"].as_f64(), Some(6.0));
    assert!(s["runs"][0]["snapshot"].as_str().unwrap().contains("_8bit"), "{s}");
    // The parameters at rest: a byte per weight and an fp32 scale per row of each linear, fp32
    // embedding, head and norms, fp32 adapters.
    let cats = s["runs"][0]["peak"]["by_category_requested"].as_array().unwrap();
    let params = cats.iter().find(|c| c[0] == "parameter").and_then(|c| c[1].as_u64()).unwrap();
    let (d, f, kv, l) = (4096u64, 14336u64, 1024u64, 32u64);
    let linear: u64 = [(d, d), (kv, d), (kv, d), (d, d), (f, d), (f, d), (d, f)].iter().map(|&(n, k)| n * k + 4 * n).sum();
    let unquantized = (2 * 128_256 * d + (2 * l + 1) * d) * 4;
    assert_eq!(params, l * linear + unquantized + 41_943_040 * 4, "{cats:?}");
    // Inference needs no adapters; training without them is refused (nothing to train).
    let o = vramscope(&["profile", "--device", "meta", "--model", "Llama-3.2-1B", "--num-layers", "1", "--context-length", "64", "--load-in-8bit", "--profile-type", "inference", "--out-dir", tmp("int8-inf").to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("trainable params: 0 ||"), "{}", String::from_utf8_lossy(&o.stdout));
}

/// bitsandbytes' optimizers: 8-bit state in the allocator's peaks, paged state in its own line
/// (CUDA unified memory) and summary field; refused on cpu, where their numerics are not run.
#[test]
fn bitsandbytes_optimizers_keep_8bit_state_and_page_to_unified_memory() {
    let run = |opt: &str| {
        let out = tmp(opt);
        let o = vramscope(&[
            "profile", "--device", "meta", "--model", "Llama-3.1-8B", "--num-layers", "2", "--context-length", "128", "--batch-size", "1",
            "--lora-r", "16", "--target-modules", "all-linear", "--optimizer", opt, "--out-dir", out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{opt}: {}", String::from_utf8_lossy(&o.stderr));
        let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        let cats = s["runs"][0]["peak"]["by_category_requested"].as_array().unwrap().clone();
        let state = cats.iter().find(|c| c[0] == "optimizer_state").and_then(|c| c[1].as_u64()).unwrap_or(0);
        (state, s["runs"][0]["paged_unified_bytes"].as_u64(), String::from_utf8_lossy(&o.stdout).to_string())
    };
    // 2 layers × 7 adapted projections × (A, B), every one >= 4096 elements: a byte per element
    // for each moment, an fp32 scale per 256, and the two shared 1 KiB maps.
    let sizes: Vec<u64> = [(4096, 4096), (4096, 1024), (4096, 1024), (4096, 4096), (4096, 14336), (4096, 14336), (14336, 4096)]
        .iter()
        .flat_map(|&(i, o)| [16 * i, 16 * o])
        .collect();
    let eight: u64 = 2 * sizes.iter().map(|&n| 2 * n + 2 * n.div_ceil(256) * 4).sum::<u64>() + 2 * 1024;
    let (state, paged, _) = run("adamw_8bit");
    assert_eq!((state, paged), (eight, None));
    // Paged 32-bit: buffers of >= 10⁵ elements go to unified memory, the rest stay fp32 state.
    let (state, paged, text) = run("paged_adamw_32bit");
    let (big, small): (Vec<u64>, Vec<u64>) = sizes.iter().partition(|&&n| n >= 100_000);
    assert_eq!((state, paged), (2 * small.iter().map(|n| 2 * 4 * n).sum::<u64>(), Some(2 * big.iter().map(|n| 2 * 4 * n).sum::<u64>())));
    assert!(text.contains("in CUDA unified memory"), "{text}");
    let out = tmp("bnb-cpu");
    let o = vramscope(&["profile", "--device", "cpu", "--model", "Llama-3.2-1B", "--num-layers", "1", "--lora-r", "8", "--optimizer", "paged_adamw_8bit", "--out-dir", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.contains("--optimizer") && err.contains("--device meta") && !out.exists(), "{err}");
}

/// LoRA and QLoRA reach `profile --compare` (full fine-tune vs LoRA vs QLoRA, checkpointing off
/// and on) and `sweep` (LoRA ranks and target sets as axes, 4-bit for every point).
#[test]
fn fine_tunes_compare_and_sweep() {
    let out = tmp("compare");
    let o = vramscope(&[
        "profile", "--device", "meta", "--model", "Llama-3.1-8B", "--num-layers", "2", "--context-length", "128", "--compare", "--lora-r", "16", "--out-dir",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c: Value = serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    let names: Vec<String> = c["runs"].as_array().unwrap().iter().map(|v| v["variant"].as_str().unwrap().to_string()).collect();
    assert_eq!(names.len(), 6, "{names:?}");
    assert!(names.contains(&"full fine-tune, no checkpointing".to_string()) && names.contains(&"QLoRA, reentrant checkpointing".to_string()), "{names:?}");
    // An hf preset's default batch is 1: the default comparison has no accumulation variant.
    let o = vramscope(&["profile", "--device", "meta", "--model", "Llama-3.2-1B", "--num-layers", "1", "--context-length", "64", "--compare", "--out-dir", tmp("compare-hf").to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = tmp("sweep");
    let o = vramscope(&[
        "sweep", "--model", "Llama-3.1-8B", "--num-layers", "2", "--context-length", "128", "--batch-size", "1", "--lora-r", "8,32", "--target-modules", "all-linear;q_proj,v_proj",
        "--load-in-4bit", "--bnb-4bit-use-double-quant", "--out-dir", out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(s["points"].as_array().map(Vec::len), Some(4), "{s}");
    // modules_to_save and adafactor are axes too (';' between modules_to_save values).
    let out = tmp("sweep-mts");
    let o = vramscope(&[
        "sweep", "--model", "Llama-3.2-1B", "--num-layers", "1", "--context-length", "64", "--batch-size", "1", "--lora-r", "8", "--modules-to-save", "lm_head;embed_tokens,lm_head",
        "--optimizer", "adamw_torch_fused,adafactor", "--out-dir", out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(s["points"].as_array().map(Vec::len), Some(4), "{s}");
    // 8-bit: compare adds LoRA over the 8-bit model; sweep takes thresholds as an axis.
    let out = tmp("compare-int8");
    let o = vramscope(&[
        "profile", "--device", "meta", "--model", "Llama-3.2-1B", "--num-layers", "1", "--context-length", "64", "--compare", "--lora-r", "8", "--load-in-8bit", "--out-dir",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c: Value = serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    let names: Vec<String> = c["runs"].as_array().unwrap().iter().map(|v| v["variant"].as_str().unwrap().to_string()).collect();
    assert_eq!(names.len(), 8, "{names:?}");
    assert!(names.contains(&"8-bit LoRA, reentrant checkpointing".to_string()) && names.contains(&"QLoRA, no checkpointing".to_string()), "{names:?}");
    let out = tmp("sweep-int8");
    let o = vramscope(&[
        "sweep", "--model", "Llama-3.2-1B", "--num-layers", "1", "--context-length", "64", "--batch-size", "1", "--lora-r", "8", "--load-in-8bit", "--llm-int8-threshold", "0,6",
        "--out-dir", out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(s["points"].as_array().map(Vec::len), Some(2), "{s}");
}

/// A cpu training step of an hf model computes transformers' loss, whose shifted labels end in
/// ignore_index (-100) (it panicked on them), and allocates what the meta run does.
#[test]
fn cpu_training_of_an_hf_model_runs_and_allocates_as_meta() {
    let dir = tmp("cpu-train");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    std::fs::write(&cfg, r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 256, "torch_dtype": "float32"}"#).unwrap();
    let peak = |device: &str, lora: &[&str]| {
        let out = dir.join(format!("{device}{}", lora.len()));
        let mut args = vec!["profile", "--config", cfg.to_str().unwrap(), "--device", device, "--profile-type", "training", "--context-length", "32", "--batch-size", "2", "--out-dir", out.to_str().unwrap()];
        args.extend_from_slice(lora);
        let o = vramscope(&args);
        assert!(o.status.success(), "{device} {lora:?}: {}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        v["runs"][0]["peak_allocated_bytes"].as_u64().unwrap()
    };
    for lora in [&[][..], &["--lora-r", "8", "--lora-dropout", "0.1"]] {
        assert_eq!(peak("cpu", lora), peak("meta", lora), "{lora:?}");
    }
}

/// DDP's Reducer buckets only the parameters that require grad: a LoRA rank holds one device's
/// memory plus bucket space for its fp32 adapters, not for the frozen weights.
#[test]
fn lora_and_qlora_run_under_ddp_with_buckets_of_the_adapters() {
    for extra in [&["--lora-r", "8"][..], &["--lora-r", "8", "--load-in-4bit"][..]] {
        let base = [&["--model", "Llama-3.2-1B", "--num-layers", "2", "--profile-type", "training"][..], extra].concat();
        let one = profile(&tmp("lora-one"), &base);
        let ddp = profile(&tmp("lora-ddp"), &[&base[..], &["--parallel", "ddp", "--world-size", "2"][..]].concat());
        assert_eq!(ddp["parallel"]["layout"], "ddp");
        let peak = |s: &Value| s["runs"][0]["peak_allocated_bytes"].as_u64().unwrap();
        let adapters = 4 * ddp["parameters"]["trainable"].as_u64().unwrap();
        assert!(peak(&ddp) > peak(&one) && peak(&ddp) - peak(&one) <= adapters, "{extra:?}: ddp {} vs one device {} (adapters {adapters} B)", peak(&ddp), peak(&one));
    }
    let out = tmp("lora-fsdp");
    let o = vramscope(&["profile", "--device", "meta", "--context-length", "128", "--batch-size", "1", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap(), "--model", "Llama-3.2-1B", "--num-layers", "2", "--profile-type", "training", "--lora-r", "8", "--parallel", "fsdp", "--world-size", "2"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.contains("parallel: fsdp over 2 ranks") && text.contains("trainable parameters' gradients are reduce-scattered"), "{text}");
    // --compare --world-size puts the layouts a LoRA model runs under side by side (not zero1).
    let out = tmp("lora-compare");
    let o = vramscope(&["profile", "--device", "meta", "--context-length", "128", "--batch-size", "1", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap(), "--model", "Llama-3.2-1B", "--num-layers", "2", "--lora-r", "8", "--compare", "--world-size", "2"]);
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap_or_default();
    assert!(o.status.success() && ["| ddp ×2", "| zero2 ×2", "| fsdp ×2"].iter().all(|v| md.contains(v)) && !md.contains("zero1"), "{}\n{md}", String::from_utf8_lossy(&o.stderr));
}
