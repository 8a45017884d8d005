//! Issue 30's dense families through the CLI: the Phi-3-mini, OLMo-2-7B, Gemma-2-9B and
//! Gemma-3-27B (text) presets are their
//! published config.json files (tests/fixtures/hf_models) with transformers' own parameter
//! counts (tests/fixtures/hf_grid/family_presets.json, tools/pytorch/family_presets.py: the
//! models built on meta), profile and training run them on meta, and what is not modelled for
//! them exits 2 naming the flag, with nothing written. Byte counts are tests/families_grid.rs's.
mod scratch;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use vramscope::engine::{DType, Device};
use vramscope::model::{hf, presets, Model};

fn vramscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-families-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn presets_are_their_config_json_and_count_what_transformers_builds() {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(root().join("tests/fixtures/hf_grid/family_presets.json")).unwrap()).unwrap();
    assert_eq!(doc["transformers"], hf::TRANSFORMERS_VERSION);
    let rows = doc["presets"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for row in rows {
        let (name, folder) = (row["preset"].as_str().unwrap(), row["folder"].as_str().unwrap());
        let p = presets::find(name, None).unwrap();
        let text = std::fs::read_to_string(root().join("tests/fixtures/hf_models").join(folder).join("config.json")).unwrap();
        let m = hf::parse(&text).unwrap();
        assert_eq!(m.config, p.model, "{name}: the preset and its config.json differ");
        let want = row["parameters"].as_u64().unwrap();
        assert_eq!(p.expected_params, want, "{name}: the preset's count");
        assert_eq!(p.model.param_count(), want, "{name}: the closed-form count");
        // The model vramscope builds: transformers' count and layer 0's parameter names and
        // shapes, in registration order (one layer suffices: they repeat).
        let mut one = p.model.clone();
        one.num_layers = 1;
        let built = Model::new_in(&one, Device::Meta, 0, DType::BF16).unwrap();
        assert_eq!(built.num_parameters(), one.param_count(), "{name}: one layer");
        let names: Vec<(String, Vec<usize>)> =
            built.parameters().iter().filter(|p| p.name.contains(".layers.0.")).map(|p| (p.name.clone(), p.tensor.shape().to_vec())).collect();
        let theirs: Vec<(String, Vec<usize>)> = row["layer0"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e[0].as_str().unwrap().to_string(), e[1].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()))
            .collect();
        assert_eq!(names, theirs, "{name}: layer 0's parameters");
    }
}

fn profile(out: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["profile", "--device", "meta", "--batch-size", "1", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = vramscope(&args);
    assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn presets_profile_and_train_on_meta() {
    for (name, file) in [
        ("Phi-3-mini", "transformers/models/phi3/modeling_phi3.py"),
        ("OLMo-2-7B", "transformers/models/olmo2/modeling_olmo2.py"),
        ("Gemma-2-9B", "transformers/models/gemma2/modeling_gemma2.py"),
        ("Gemma-3-27B", "transformers/models/gemma3/modeling_gemma3.py"),
    ] {
        // (OLMo-2-7B is saved in float32: fp32 weights unless --dtype says otherwise.)
        // Inference at the preset's depth; training (checkpointed, SGD) at two layers, above
        // Phi-3-mini's 2047-token window so sdpa gets its mask.
        let s = profile(&tmp(&format!("{name}-inf")), &["--model", name, "--context-length", "512", "--profile-type", "inference"]);
        assert_eq!(s["model"]["flavour"], "hf");
        assert!(s["runs"][0]["peak_allocated_bytes"].as_u64().unwrap() > 0, "{name}");
        let out = tmp(&format!("{name}-train"));
        let s = profile(&out, &["--model", name, "--num-layers", "2", "--context-length", "2304", "--profile-type", "training", "--gradient-checkpointing", "non-reentrant", "--optimizer", "sgd", "--attn-implementation", "eager"]);
        assert_eq!(s["transformers"]["gradient_checkpointing"], "non-reentrant", "{name}: {}", s["transformers"]);
        // Snapshot frames name the family's modeling file.
        let snap = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|e| e == "pickle")).unwrap();
        let o = vramscope(&["analyze", "--json", "--top", "100000", snap.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains(file), "{name}: no frame in {file}");
    }
}

/// Exit code 2, the flag named, nothing written.
fn refused(cmd: &str, extra: &[&str], needles: &[&str]) {
    let out = tmp("refused");
    let mut args = vec![cmd, "--out-dir", out.to_str().unwrap()];
    if cmd == "estimate" {
        args.truncate(1);
    } else {
        args.extend(["--device", "meta", "--context-length", "128"]);
    }
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

/// LoRA, QLoRA and 8-bit LoRA on each family's preset (one layer), with peft's targets for the
/// model: the adapters are those of the layer's linears (Phi-3's fused ones), the trainable count
/// r·(in + out) per adapted linear.
#[test]
fn lora_and_qlora_run_on_the_family_presets() {
    for (m, targets, per_layer) in [
        // Phi-3-mini: qkv_proj 3072 → 9216, gate_up_proj 3072 → 16384.
        ("Phi-3-mini", "qkv_proj,gate_up_proj", 8 * (3072 + 9216) + 8 * (3072 + 16384)),
        // Gemma-2-9B: peft's default q_proj (3584 → 4096) and v_proj (3584 → 2048).
        ("Gemma-2-9B", "", 8 * (3584 + 4096) + 8 * (3584 + 2048)),
    ] {
        for quant in [&[][..], &["--load-in-4bit", "--bnb-4bit-quant-type", "nf4"][..], &["--load-in-8bit"][..]] {
            let out = tmp("lora");
            let mut args = vec!["--model", m, "--num-layers", "1", "--context-length", "32", "--profile-type", "training", "--lora-r", "8"];
            if !targets.is_empty() {
                args.extend(["--target-modules", targets]);
            }
            args.extend_from_slice(quant);
            let s = profile(&out, &args);
            assert_eq!(s["parameters"]["trainable"].as_u64(), Some(per_layer), "{m} {quant:?}: {}", s["parameters"]);
            let _ = std::fs::remove_dir_all(&out);
        }
    }
}

#[test]
fn the_families_run_transformers_tensor_parallel_plan() {
    for m in ["Phi-3-mini", "OLMo-2-7B", "Gemma-2-9B", "Gemma-3-27B"] {
        let out = tmp("tp");
        let s = profile(&out, &["--model", m, "--num-layers", "1", "--context-length", "32", "--profile-type", "training", "--parallel", "tp", "--world-size", "2", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0"]);
        assert_eq!(s["parallel"]["tp_plan"], "auto", "{m}");
        let _ = std::fs::remove_dir_all(&out);
        // With activation checkpointing too (tests/tp_hf_grid.rs's checkpointed points).
        let out = tmp("tp_ck");
        let s = profile(&out, &["--model", m, "--num-layers", "1", "--context-length", "32", "--profile-type", "training", "--parallel", "tp", "--world-size", "2", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0", "--gradient-checkpointing", "reentrant"]);
        assert_eq!(s["parallel"]["tp_plan"], "auto", "{m}");
        let _ = std::fs::remove_dir_all(&out);
    }
}

#[test]
fn what_is_not_modelled_for_the_families_is_refused_naming_the_flag() {
    for m in ["Phi-3-mini", "OLMo-2-7B", "Gemma-2-9B", "Gemma-3-27B"] {
        // LoRA and bitsandbytes run (tests/lora_grid.rs); the peft options their grid did not
        // measure are refused.
        // DoRA runs over fp32 and bf16 weights (dora_models.json), not over 4-bit ones.
        refused("profile", &["--model", m, "--lora-r", "8", "--target-modules", "all-linear", "--use-dora", "--load-in-4bit"], &["--use-dora", "not measured"]);
        // modules_to_save and bias run over fp32 and bf16 weights (lora_extras_models_grid.rs),
        // not over bitsandbytes weights or under autocast.
        refused("profile", &["--model", m, "--lora-r", "8", "--target-modules", "all-linear", "--modules-to-save", "lm_head", "--load-in-4bit"], &["--modules-to-save", "not measured"]);
        refused("profile", &["--model", m, "--lora-r", "8", "--target-modules", "all-linear", "--lora-bias", "all", "--dtype", "float32", "--precision", "bf16"], &["--lora-bias", "autocast", "not measured"]);
        if m != "Gemma-3-27B" {
            // (estimate of Gemma 3 is refused before its adapters.) Trained biases are derived in
            // closed form (tests/estimate_lora.rs), in the weights' dtype as measured.
            let o = vramscope(&["estimate", "--model", m, "--lora-r", "8", "--target-modules", "all-linear", "--lora-bias", "all", "--attn-implementation", "eager", "--context-length", "256", "--no-simulate"]);
            assert!(o.status.success(), "{m} estimate --lora-bias all: {}", String::from_utf8_lossy(&o.stderr));
            refused("estimate", &["--model", m, "--lora-r", "8", "--target-modules", "all-linear", "--lora-bias", "all", "--dtype", "float32", "--precision", "bf16", "--no-simulate"], &["--lora-bias", "autocast", "not measured"]);
        }
        // ddp, zero1, zero2, fsdp, hsdp and other FSDP2 units run (tests/dist_models_grid.rs),
        // each alone; the rest is refused.
        refused("profile", &["--model", m, "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2", "--fsdp-unit", "root"], &["--fsdp-unit", "not measured"]);
        // transformers' own tensor-parallel plan runs alone (tests/tp_hf_grid.rs); torch's
        // Megatron-style plan, the 2-D mesh, sequence parallelism and adapters under it do not.
        let tp = ["--model", m, "--parallel", "tp", "--tp", "2", "--world-size", "2", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0"];
        let with = |extra: &[&'static str]| tp.iter().copied().chain(extra.iter().copied()).collect::<Vec<_>>();
        refused("profile", &with(&["--tp-plan", "torch"]), &["--tp-plan", "base_model_tp_plan"]);
        refused("profile", &with(&["--sequence-parallel"]), &["--sequence-parallel", "not measured"]);
        refused("profile", &with(&["--lora-r", "8", "--target-modules", "all-linear"]), &["--lora-r", "not measured"]);
        refused("profile", &["--model", m, "--parallel", "fsdp", "--tp", "2", "--world-size", "4"], &["--tp", "not measured"]);
        // estimate's closed form covers the four (tests/estimate_families.rs,
        // estimate_gemma3.rs), not PyTorch's flash kernel given Gemma 3's sliding mask.
        if m == "Gemma-3-27B" {
            refused("estimate", &["--model", m, "--context-length", "2048", "--pure-bf16", "--sdpa-backend", "flash", "--no-simulate"], &["--sdpa-backend", "flash kernel does not take"]);
        }
        // estimate's generate runs (tests/estimate_generate_families.rs); beam search is not derived.
        refused("estimate", &["--model", m, "--context-length", "128", "--profile-type", "generate", "--max-new-tokens", "4", "--num-beams", "2"], &["--num-beams", "greedy search"]);
    }
    // generate() runs for Gemma with the DynamicCache (tests/generate_grid.rs,
    // generate_gemma.json) and a StaticCache (generate_static_sliding.json); Phi-3's window
    // under a StaticCache too (generate_static_families.json: static_cache_runs_on_windowed_families_and_deepseek).
    // peft 0.21.2 has no default target_modules for phi3 and olmo2; Phi-3's projections are fused.
    for m in ["Phi-3-mini", "OLMo-2-7B"] {
        refused("profile", &["--model", m, "--lora-r", "8"], &["--target-modules", "no default target_modules"]);
    }
    refused("profile", &["--model", "Phi-3-mini", "--lora-r", "8", "--target-modules", "q_proj,v_proj"], &["--target-modules", "fused qkv_proj"]);
    refused("profile", &["--model", "Phi-3-mini", "--lora-r", "8", "--target-modules", "gate_proj"], &["--target-modules", "fused gate_up_proj"]);
    // transformers 5.23 refuses sdpa for gemma2 itself; flash_attention_2 and a padding mask
    // over Gemma's two masks are not measured.
    refused("profile", &["--model", "Gemma-2-9B", "--attn-implementation", "sdpa"], &["--attn-implementation", "_supports_sdpa"]);
    for m in ["Gemma-2-9B", "Gemma-3-27B"] {
        refused("profile", &["--model", m, "--attn-implementation", "flash_attention_2", "--dtype", "bfloat16"], &["--attn-implementation", "not modelled"]);
        refused("profile", &["--model", m, "--attention-mask", "ones"], &["--attention-mask", "not modelled"]);
    }
}

#[test]
fn config_json_of_each_family_reads_and_an_unknown_type_lists_them() {
    let dir = tmp("gemma");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"model_type": "falcon", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100}"#).unwrap();
    let o = vramscope(&["profile", "--device", "meta", "--config", dir.to_str().unwrap(), "--out-dir", dir.join("out").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("model_type 'falcon'") && err.contains("llama, mistral, qwen2, qwen3, phi3, olmo2, gemma2, gemma3_text"), "{err}");
    // Phi3Config's defaults: no window, eps 1e-5, kv heads = heads; a partial rotary factor or
    // residual dropout is refused.
    let base = r#""model_type": "phi3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100"#;
    let m = hf::parse(&format!("{{{base}}}")).unwrap().config;
    let h = m.hf.as_ref().unwrap();
    assert_eq!((h.sliding_window, m.norm_eps, m.num_kv_heads, m.max_seq_len), (None, 1e-5, 4, 4096));
    assert!(hf::parse(&format!(r#"{{{base}, "partial_rotary_factor": 0.5}}"#)).unwrap_err().contains("partial_rotary_factor"));
    assert!(hf::parse(&format!(r#"{{{base}, "resid_pdrop": 0.1}}"#)).unwrap_err().contains("resid_pdrop"));
    assert!(hf::parse(&format!(r#"{{{base}, "rope_scaling": {{"rope_type": "linear", "factor": 2.0}}}}"#)).unwrap_err().contains("rope_type 'linear'"));
    let olmo = r#"{"model_type": "olmo2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100, "attention_bias": true}"#;
    let m = hf::parse(olmo).unwrap().config;
    let h = m.hf.as_ref().unwrap();
    assert_eq!((h.qkv_bias, h.o_bias, m.norm_eps, m.max_seq_len), (true, true, 1e-5, 2048));
    // Gemma2Config's and Gemma3TextConfig's defaults: head_dim 256, 4 kv heads, a tied head, a
    // 4096 window on alternating layers (Gemma 3: five of six), soft-capping on Gemma 2 only,
    // eager for gemma2 (no sdpa) and sdpa for gemma3_text.
    let g = r#""hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4, "vocab_size": 100"#;
    let m = hf::parse(&format!(r#"{{"model_type": "gemma2", {g}}}"#)).unwrap().config;
    let h = m.hf.as_ref().unwrap();
    let gm = h.gemma.as_ref().unwrap();
    assert_eq!((h.head_dim, m.num_kv_heads, m.tied_embeddings, m.max_seq_len, gm.sliding_window), (256, 4, true, 8192, 4096));
    assert_eq!(gm.sliding, vec![true, false, true, false, true, false]);
    assert_eq!((gm.attn_logit_softcapping, gm.final_logit_softcapping, gm.query_pre_attn_scalar), (Some(50.0), Some(30.0), 256.0));
    assert_eq!(h.attn_implementation, hf::AttnImplementation::Eager);
    let m = hf::parse(&format!(r#"{{"model_type": "gemma3_text", {g}, "rope_local_base_freq": 5000.0}}"#)).unwrap().config;
    let h = m.hf.as_ref().unwrap();
    let gm = h.gemma.as_ref().unwrap();
    assert_eq!(gm.sliding, vec![true, true, true, true, true, false]);
    assert_eq!((gm.attn_logit_softcapping, gm.final_logit_softcapping, gm.rope_local_base_freq, m.rope_theta), (None, None, 5000.0, 1_000_000.0));
    assert_eq!(h.attn_implementation, hf::AttnImplementation::Sdpa);
    for (extra, needle) in [
        (r#""hidden_activation": "gelu""#, "hidden_activation"),
        (r#""use_bidirectional_attention": true"#, "use_bidirectional_attention"),
        (r#""sliding_window": null"#, "sliding_window"),
        (r#""layer_types": ["full_attention"]"#, "layer_types"),
    ] {
        let err = hf::parse(&format!(r#"{{"model_type": "gemma3_text", {g}, {extra}}}"#)).unwrap_err();
        assert!(err.contains(needle), "{extra}: {err}");
    }
}

#[test]
fn fit_finds_a_batch_for_each_family() {
    // (Gemma's 256k-row tables, with their fp32 AdamW states, take a larger card.)
    for (m, limit) in [("Phi-3-mini", "24GiB"), ("OLMo-2-7B", "24GiB"), ("Gemma-2-9B", "80GiB"), ("Gemma-3-27B", "80GiB")] {
        let o = vramscope(&["fit", "--model", m, "--num-layers", "2", "--find", "batch", "--context-length", "1024", "--memory-limit", limit, "--profile-type", "training", "--gradient-checkpointing", "non-reentrant", "--json"]);
        assert!(o.status.success(), "{m}: {}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let answer = v["answer"].as_u64().unwrap_or(0);
        assert!(answer >= 1 && v["first_not_fitting"].as_u64() == Some(answer + 1), "{m}: {v}");
        let want = match m {
            "Phi-3-mini" => "phi3",
            "OLMo-2-7B" => "olmo2",
            "Gemma-2-9B" => "gemma2",
            _ => "gemma3_text",
        };
        assert_eq!(v["config"]["hf"]["model_type"], want);
    }
}

/// generate() of the Gemma presets on meta (measured: generate_gemma.json): greedy and beams
/// run, the cache at the end is the DynamicCache's, a sliding layer keeping its window's last
/// positions; `fit --find batch` searches a generate run.
#[test]
fn gemma_presets_generate_on_meta_and_fit_a_batch() {
    for name in ["Gemma-2-9B", "Gemma-3-27B"] {
        for beams in ["1", "2"] {
            let s = profile(&tmp(&format!("{name}-gen{beams}")), &["--model", name, "--num-layers", "2", "--context-length", "64", "--profile-type", "generate", "--max-new-tokens", "3", "--num-beams", beams]);
            let g = &s["runs"][0]["generate"];
            assert_eq!(g["steps"].as_array().unwrap().len(), 3, "{name}: {g}");
            assert!(g["kv_cache_bytes"].as_u64().unwrap() > 0, "{name}: {g}");
        }
    }
    // A window of 8 below the 64-token prompt: the sliding layer (layer 0) keeps 7 positions,
    // the full one all 64 + 3 - 1.
    let dir = tmp("gemma3-window");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    std::fs::write(&cfg, r#"{"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 4096, "torch_dtype": "float32"}"#).unwrap();
    let s = profile(&dir.join("out"), &["--config", cfg.to_str().unwrap(), "--context-length", "64", "--profile-type", "generate", "--max-new-tokens", "3", "--precision", "fp32"]);
    let kv = s["runs"][0]["generate"]["kv_cache_bytes"].as_u64().unwrap();
    assert_eq!(kv, 2 * 2 * 16 * 4 * (7 + 66), "{}", s["runs"][0]["generate"]);
    let _ = std::fs::remove_dir_all(&dir);
    let o = vramscope(&["fit", "--model", "Gemma-2-9B", "--num-layers", "2", "--profile-type", "generate", "--find", "batch", "--context-length", "64", "--max-new-tokens", "4", "--memory-limit", "24GiB", "--warmup-steps", "0"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("largest batch size that fits") && text.contains("the DynamicCache holds"), "{text}");
}

/// generate() of the Phi-3 and OLMo-2 presets on meta (measured: tests/generate_grid.rs's
/// generate_families.json): the summary gives the step of the peak and the cache at the end.
/// Phi-3 past its original_max_position_embeddings (where transformers drops the cache and
/// re-runs the sequence) is refused, naming the flag.
#[test]
fn phi3_and_olmo2_presets_generate_on_meta() {
    for name in ["Phi-3-mini", "OLMo-2-7B"] {
        let s = profile(&tmp(&format!("{name}-gen")), &["--model", name, "--num-layers", "2", "--context-length", "64", "--profile-type", "generate", "--max-new-tokens", "3", "--num-beams", "2"]);
        let g = &s["runs"][0]["generate"];
        assert_eq!(g["steps"].as_array().unwrap().len(), 3, "{name}: {g}");
        assert!(g["kv_cache_bytes"].as_u64().unwrap() > 0, "{name}: {g}");
    }
    let dir = tmp("phi3-original");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    std::fs::write(&cfg, r#"{"model_type": "phi3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 1000, "pad_token_id": 0, "max_position_embeddings": 4096, "original_max_position_embeddings": 100}"#).unwrap();
    let c = cfg.to_str().unwrap();
    // context 128 (refused's): 128 + 4 - 1 positions pass 100.
    refused("profile", &["--config", c, "--profile-type", "generate", "--max-new-tokens", "4"], &["--max-new-tokens", "original_max_position_embeddings (100)"]);
    let s = profile(&tmp("phi3-original-ok"), &["--config", c, "--context-length", "96", "--profile-type", "generate", "--max-new-tokens", "5"]);
    assert_eq!(s["runs"][0]["generate"]["steps"].as_array().unwrap().len(), 5);
    let _ = std::fs::remove_dir_all(&dir);
}

/// LoRA and bitsandbytes are measured on these models (lora_families.json / moe_grid/lora.json),
/// with generate() (generate_models_adapters.json: LoRA on nn.Linear modules, 4-bit weights
/// unprepared), and under the data-parallel layouts as dist_lora_models_grid.rs measures them
/// (LoRA under ddp, zero2 and fsdp; 4-bit QLoRA under ddp): the other combinations are refused,
/// naming the flag.
#[test]
fn unmeasured_combinations_are_refused() {
    for (preset, lora) in [("Phi-3-mini", "qkv_proj"), ("OLMo-2-7B", "q_proj,v_proj"), ("Qwen3-30B-A3B", "q_proj,v_proj")] {
        let with_lora = ["--preset", preset, "--num-layers", "2", "--lora-r", "8", "--target-modules", lora];
        refused("profile", &[&with_lora[..], &["--parallel", "zero1", "--world-size", "2"]].concat(), &["--parallel", "zero1", "not modelled"]);
        let s = profile(&tmp(&format!("{preset}-lora-generate")), &[&with_lora[..], &["--context-length", "16", "--profile-type", "generate", "--max-new-tokens", "2"]].concat());
        assert_eq!(s["runs"][0]["generate"]["steps"].as_array().unwrap().len(), 2, "{preset}");
        let four_bit = ["--preset", preset, "--num-layers", "2", "--load-in-4bit", "--profile-type", "inference"];
        refused("profile", &[&four_bit[..], &["--parallel", "fsdp", "--world-size", "2"]].concat(), &["--load-in-4bit", "parallel layout"]);
    }
    let generate = ["--profile-type", "generate", "--max-new-tokens", "2"];
    let s = profile(&tmp("mixtral-4bit-generate"), &[&["--preset", "Mixtral-8x7B", "--num-layers", "2", "--context-length", "16", "--load-in-4bit", "--lora-r", "8", "--target-modules", "q_proj,v_proj"][..], &generate].concat());
    assert_eq!(s["runs"][0]["generate"]["steps"].as_array().unwrap().len(), 2);
    // peft's ParamWrapper (named, or converted from all-linear) runs with generate
    // (generate_models_adapters.json), not beside the extras measured without it.
    let mixtral = ["--preset", "Mixtral-8x7B", "--num-layers", "2", "--context-length", "16", "--lora-r", "8"];
    for (n, targets) in [["--target-parameters", "mlp.experts.gate_up_proj"], ["--target-modules", "all-linear"]].iter().enumerate() {
        let s = profile(&tmp(&format!("mixtral-params-generate-{n}")), &[&mixtral[..], &targets[..], &generate].concat());
        assert_eq!(s["runs"][0]["generate"]["steps"].as_array().unwrap().len(), 2, "{targets:?}");
    }
    refused("profile", &[&["--preset", "Mixtral-8x7B", "--num-layers", "2", "--lora-r", "8", "--target-parameters", "mlp.experts.gate_up_proj", "--lora-bias", "all"][..], &generate].concat(), &["--lora-bias", "ParamWrapper", "generate", "not measured"]);
    // A prepared 4-bit model and 8-bit weights run with generate (generate_models_int8.json);
    // DeepSeek-V3's (and Qwen2-MoE's) 8-bit load stays refused, as in training.
    for (preset, extra) in [
        ("Gemma-2-9B", &["--load-in-4bit", "--prepare-model-for-kbit-training", "true"][..]),
        ("Phi-3-mini", &["--load-in-8bit", "--lora-r", "8", "--target-modules", "qkv_proj"][..]),
        ("Mixtral-8x7B", &["--load-in-8bit", "--prepare-model-for-kbit-training", "true"][..]),
    ] {
        let s = profile(&tmp(&format!("{preset}-kbit-generate")), &[&["--preset", preset, "--num-layers", "2", "--context-length", "16"][..], extra, &generate].concat());
        assert_eq!(s["runs"][0]["generate"]["steps"].as_array().unwrap().len(), 2, "{preset}");
    }
    refused("profile", &[&["--preset", "DeepSeek-V3", "--num-layers", "2", "--attn-implementation", "eager", "--load-in-8bit"][..], &generate].concat(), &["--load-in-8bit", "deepseek_v3"]);
    // peft's bias, DoRA and modules_to_save run with generate (generate_models_extras.json);
    // DoRA and modules_to_save over 4-bit weights stay refused, as in training.
    for (preset, extra) in [
        ("OLMo-2-7B", &["--lora-bias", "all"][..]),
        ("Gemma-2-9B", &["--use-dora"][..]),
        ("Qwen3-30B-A3B", &["--modules-to-save", "lm_head", "--lora-bias", "lora_only"][..]),
    ] {
        let run = [&["--preset", preset, "--num-layers", "2", "--context-length", "16", "--lora-r", "8", "--target-modules", "q_proj,v_proj"][..], extra, &generate].concat();
        let s = profile(&tmp(&format!("{preset}-extras-generate")), &run);
        assert_eq!(s["runs"][0]["generate"]["steps"].as_array().unwrap().len(), 2, "{preset}");
    }
    refused("profile", &[&["--preset", "Gemma-2-9B", "--num-layers", "2", "--load-in-4bit", "--lora-r", "8", "--use-dora"][..], &generate].concat(), &["--use-dora", "4-bit"]);
}

/// Gemma 3 under sdpa: the header names each layer type's CUDA kernel once the window masks
/// the sliding layers (the full layers get none), and one kernel below the window.
#[test]
fn gemma3_header_names_each_layer_types_kernel() {
    let header = |s: &str| {
        let out = tmp(&format!("gemma3-header-{s}"));
        let o = vramscope(&["profile", "--preset", "Gemma-3-27B", "--device", "meta", "--num-layers", "2", "--profile-type", "inference", "--context-length", s, "--out-dir", out.to_str().unwrap()]);
        let _ = std::fs::remove_dir_all(&out);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let long = header("2048");
    assert!(long.contains("the flash kernel on the full layers, the efficient kernel on the sliding layers"), "{long}");
    let short = header("256");
    assert!(short.contains("sdpa (on CUDA PyTorch picks the flash kernel)"), "{short}");
}

/// A StaticCache (`--cache-implementation static --disable-compile`) on the models
/// generate_static_families.json measures (tests/generate_grid.rs): Phi-3, Qwen3 and Mixtral
/// whose every layer slides hold a StaticSlidingWindowLayer of min(window, max_length - 1)
/// positions per layer, DeepSeek-V3 a StaticLayer of its latent and k_rot.
#[test]
fn static_cache_runs_on_windowed_families_and_deepseek() {
    let dir = tmp("static-windowed");
    std::fs::create_dir_all(&dir).unwrap();
    // (eager: sdpa's CUDA kernel under a window's mask is refused, as for the DynamicCache)
    let static_args = ["--profile-type", "generate", "--max-new-tokens", "4", "--cache-implementation", "static", "--disable-compile", "--context-length", "64", "--attn-implementation", "eager"];
    // One fp32 layer of 4 heads of 16 (kv heads = heads), window 16 below the prompt: keys and
    // values of 16 positions each (a DynamicCache would keep 15), 2 × 4 × 16 × 16 × 4 B.
    for (ty, extra) in [
        ("phi3", r#", "pad_token_id": 0"#),
        ("qwen3", r#", "head_dim": 16, "use_sliding_window": true, "max_window_layers": 0"#),
        ("mixtral", r#", "num_local_experts": 4, "num_experts_per_tok": 2"#),
        ("qwen3_moe", r#", "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "use_sliding_window": true"#),
    ] {
        let cfg = dir.join(format!("{ty}.json"));
        std::fs::write(&cfg, format!(r#"{{"model_type": "{ty}", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 4096, "sliding_window": 16{extra}}}"#)).unwrap();
        let s = profile(&tmp(&format!("{ty}-static")), &[&["--config", cfg.to_str().unwrap()][..], &static_args[..]].concat());
        let g = &s["runs"][0]["generate"];
        assert_eq!(g["steps"].as_array().unwrap().len(), 4, "{ty}: {g}");
        assert_eq!(g["kv_cache_bytes"].as_u64(), Some(2 * 4 * 16 * 16 * 4), "{ty}: {g}");
    }
    // Qwen2 with max_window_layers 1 of 2: layer 0 full (67 positions), layer 1 sliding (16);
    // the mix is measured with a StaticCache only, anything else refused naming the flag.
    let cfg = dir.join("qwen2-mixed.json");
    std::fs::write(&cfg, r#"{"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 4096, "use_sliding_window": true, "sliding_window": 16, "max_window_layers": 1}"#).unwrap();
    let c = cfg.to_str().unwrap();
    let s = profile(&tmp("qwen2-mixed-static"), &[&["--config", c][..], &static_args[..]].concat());
    assert_eq!(s["runs"][0]["generate"]["kv_cache_bytes"].as_u64(), Some(2 * 4 * (67 + 16) * 16 * 4));
    refused("profile", &["--config", c, "--profile-type", "generate", "--max-new-tokens", "4", "--attn-implementation", "eager"], &["--cache-implementation", "1 of 2 layers"]);
    refused("profile", &["--config", c, "--profile-type", "inference", "--attn-implementation", "eager"], &["--profile-type", "mix of sliding and full layers"]);
    refused("estimate", &["--config", c], &["--config", "mix of sliding and full layers"]);
    // Qwen3-MoE's window: the same (its other runs build the sliding mask in the model).
    let moe = dir.join("qwen3_moe.json");
    refused("profile", &["--config", moe.to_str().unwrap(), "--profile-type", "inference", "--attn-implementation", "eager"], &["--profile-type", "Qwen3-MoE's sliding window"]);
    // DeepSeek-V3 (4 layers: its first 3 are dense): the latent (512) and k_rot (64) of 67
    // positions per layer in bf16.
    let s = profile(&tmp("deepseek-static"), &[&["--preset", "DeepSeek-V3", "--num-layers", "4"][..], &static_args[..]].concat());
    let g = &s["runs"][0]["generate"];
    assert_eq!(g["steps"].as_array().unwrap().len(), 4, "{g}");
    assert_eq!(g["kv_cache_bytes"].as_u64(), Some(4 * 67 * (512 + 64) * 2), "{g}");
    let _ = std::fs::remove_dir_all(&dir);
}
