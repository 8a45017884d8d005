//! Mixture-of-experts models against transformers 5.23 (issue 30).
//!
//! vramscope does not run MoE models yet. What is checked here: the measured ground truth
//! (tests/fixtures/moe_grid/moe.json, tools/pytorch/make_moe_grid.py) covers what the issue
//! asks of it; parameter counts (total and active per token) equal transformers' own builds
//! (its meta build of the published Mixtral-8x7B and Qwen3-30B-A3B configs,
//! tests/fixtures/moe_grid/meta_params.json, and the measured models of the grid); and a config
//! is never run as a dense model: an MoE `model_type` and a dense one carrying expert keys both
//! exit 2, naming what they refuse, with nothing written.
mod scratch;
mod grid_common;

use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::process::Command;
use vramscope::model::hf::moe::{MoeCounts, MoeShape};

fn fixture(rel: &str) -> Value {
    let path = format!("{}/tests/fixtures/moe_grid/{rel}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))).unwrap()
}

fn counts(config: &Map<String, Value>, model_type: &str) -> MoeCounts {
    MoeShape::read(config, model_type).expect("an MoE type vramscope reads").expect("a valid config").counts().unwrap()
}

#[test]
fn parameter_counts_equal_transformers_meta_build() {
    let doc = fixture("meta_params.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let models = doc["models"].as_object().unwrap();
    for name in ["Mixtral-8x7B", "Qwen3-30B-A3B"] {
        assert!(models.contains_key(name), "{name} is in the fixture");
    }
    for (name, m) in models {
        let cfg = m["config"].as_object().unwrap();
        let got = counts(cfg, cfg["model_type"].as_str().unwrap());
        let want = MoeCounts { total: m["total"].as_u64().unwrap(), active: m["active"].as_u64().unwrap() };
        assert_eq!(got, want, "{name}");
    }
}

/// measure_moe.py's config of a grid point, as config.json fields.
fn point_config(p: &Value) -> Map<String, Value> {
    let qwen = p["model_type"] == "qwen3_moe";
    let mut c = json!({
        "hidden_size": p["hidden_size"], "num_hidden_layers": p["num_layers"], "num_attention_heads": p["num_heads"],
        "num_key_value_heads": p["num_kv_heads"], "vocab_size": p["vocab_size"], "tie_word_embeddings": p["tied"],
        "num_experts_per_tok": p["top_k"],
    });
    let o = c.as_object_mut().unwrap();
    if p["model_type"] == "qwen2_moe" {
        o.insert("moe_intermediate_size".into(), p["intermediate_size"].clone());
        o.insert("num_experts".into(), p["num_experts"].clone());
        o.insert("shared_expert_intermediate_size".into(), p["shared_intermediate_size"].clone());
    } else if qwen {
        o.insert("moe_intermediate_size".into(), p["intermediate_size"].clone());
        o.insert("num_experts".into(), p["num_experts"].clone());
        o.insert("head_dim".into(), if p["head_dim"].is_null() { json!(128) } else { p["head_dim"].clone() });
    } else {
        o.insert("intermediate_size".into(), p["intermediate_size"].clone());
        o.insert("num_local_experts".into(), p["num_experts"].clone());
    }
    o.clone()
}

#[test]
fn the_grid_covers_the_issue_and_its_models_count_as_transformers_built_them() {
    let doc = fixture("moe.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let points = doc["points"].as_array().unwrap();
    for family in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        let ps: Vec<&Value> = points.iter().filter(|q| q["point"]["model_type"] == family).collect();
        assert!(ps.len() >= 12, "{family}: {} points", ps.len());
        let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
        assert_eq!(set("experts"), BTreeSet::from(["\"batched_mm\"".into(), "\"eager\"".into(), "\"grouped_mm\"".into()]), "{family}");
        assert_eq!(set("routing"), BTreeSet::from(["\"balanced\"".into(), "\"worst\"".into()]), "{family}");
        assert_eq!(set("attn"), BTreeSet::from(["\"eager\"".into(), "\"sdpa\"".into()]), "{family}");
        assert_eq!(set("dtype"), BTreeSet::from(["\"bf16\"".into(), "\"fp32\"".into()]), "{family}");
        assert_eq!(set("top_k"), (1..=4).map(|k| k.to_string()).collect(), "{family}");
        let experts: Vec<u64> = ps.iter().map(|q| q["point"]["num_experts"].as_u64().unwrap()).collect();
        assert!(experts.iter().all(|e| (4..=16).contains(e)) && experts.contains(&4) && experts.contains(&16), "{family}: {experts:?}");
        let kinds = ps.iter().map(|q| q["profile_type"].as_str().unwrap()).collect::<BTreeSet<_>>();
        assert_eq!(kinds, BTreeSet::from(["forward", "inference", "training"]), "{family}");
    }
    for q in points {
        let (p, name) = (&q["point"], q["name"].as_str().unwrap());
        let c = counts(&point_config(p), p["model_type"].as_str().unwrap());
        assert_eq!(c.total, q["info"]["parameters"].as_u64().unwrap(), "{name}: parameters");
        // The forced routing reached every layer: tokens per expert as the routing says.
        let (t, k, e) = (p["batch"].as_u64().unwrap() * p["seq"].as_u64().unwrap(), p["top_k"].as_u64().unwrap(), p["num_experts"].as_u64().unwrap());
        let per: Vec<u64> = q["info"]["tokens_per_expert"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(per.iter().sum::<u64>(), t * k, "{name}");
        match p["routing"].as_str().unwrap() {
            "worst" => assert!(per.iter().enumerate().all(|(i, &n)| n == if (i as u64) < k { t } else { 0 }), "{name}: {per:?}"),
            _ => assert!(per.iter().all(|&n| n == t * k / e || n == t * k / e + 1), "{name}: {per:?}"),
        }
        for phase in q["phases"].as_object().unwrap().values() {
            assert!(phase["peak"].as_u64().unwrap() > 0, "{name}");
        }
    }
}

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

/// `profile --config <file>` exits 2 with every needle in its message and writes nothing.
fn refused(config: &Value, needles: &[&str]) {
    let dir = scratch::dir().join(format!("vramscope-moe-{}-{}", std::process::id(), needles[0].replace(['\'', ' '], "")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let out = dir.join("out");
    let o = vramscope(&["profile", "--config", file.to_str().unwrap(), "--device", "meta", "--context-length", "64", "--out-dir", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for n in needles {
        assert!(err.contains(n), "should say {n}: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists(), "wrote {}", out.display());
    let _ = std::fs::remove_dir_all(&dir);
}

fn mixtral_8x7b() -> Value {
    let doc = fixture("meta_params.json");
    doc["models"]["Mixtral-8x7B"]["config"].clone()
}

#[test]
fn a_mixtral_config_labelled_mistral_is_refused_naming_the_expert_keys() {
    let mut c = mixtral_8x7b();
    c["model_type"] = json!("mistral");
    refused(&c, &["'num_local_experts', 'num_experts_per_tok'", "mistral", "--config"]);
    // Any dense type, any expert key (Qwen3-MoE's under qwen3).
    let qwen = json!({"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 4, "vocab_size": 100, "num_experts": 8, "moe_intermediate_size": 32});
    refused(&qwen, &["'num_experts', 'moe_intermediate_size'", "qwen3"]);
}

#[test]
fn an_moe_model_type_not_modelled_is_refused() {
    refused(&json!({"model_type": "deepseek_v2", "hidden_size": 5120}), &["'deepseek_v2' is a mixture-of-experts model, which vramscope does not model yet", "mixtral, qwen3_moe"]);
    // DeepSeek-V3 runs (tests/deepseek_grid.rs), but not its fp8 checkpoint.
    refused(&json!({"model_type": "deepseek_v3", "hidden_size": 7168, "quantization_config": {"quant_method": "fp8"}}), &["'quantization_config'", "fp8", "bf16"]);
    // gpt-oss runs (tests/gptoss_grid.rs), but not its MXFP4 checkpoints.
    refused(&json!({"model_type": "gpt_oss", "hidden_size": 2880, "quantization_config": {"quant_method": "mxfp4"}}), &["'quantization_config'", "mxfp4"]);
    // A Qwen3-MoE config with dense layers among the sparse ones.
    let mut c = fixture("meta_params.json")["models"]["qwen3_moe-small-dense-layers"]["config"].clone();
    c["vocab_size"] = json!(1000);
    refused(&c, &["mlp_only_layers"]);
}

/// Points where vramscope does not match transformers, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

#[test]
fn moe_grid_matches_transformers() {
    let doc = fixture("moe.json");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("moe", points, 57, KNOWN_FAILING, |point| grid_common::hf::run_config(point, grid_common::moe::config_of(&point["point"])));
}

/// Autocast (the Trainer's `bf16=True`: torch.autocast around forward and loss) over fp32 and
/// bf16 weights (`make_moe_autocast_grid.py`, CPU autocast, whose op lists agree with CUDA's on
/// every op these models run: tools/pytorch/README.md): every experts implementation, balanced
/// and worst routing, eager and sdpa, top-k 1-4, 4-16 experts, checkpointing off, non-reentrant
/// and reentrant, as inference, forward and training.
#[test]
fn moe_autocast_grid_matches_transformers() {
    let doc = fixture("autocast.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let points = doc["points"].as_array().unwrap();
    for family in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        let ps: Vec<&Value> = points.iter().filter(|q| q["point"]["model_type"] == family).collect();
        assert!(ps.len() >= 12, "{family}: {} points", ps.len());
        let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
        assert_eq!(set("autocast"), BTreeSet::from(["\"bf16\"".into()]), "{family}");
        for (k, n) in [("experts", 3), ("routing", 2), ("attn", 2), ("dtype", 2), ("top_k", 4), ("checkpoint", 3)] {
            assert_eq!(set(k).len(), n, "{family}: {k} {:?}", set(k));
        }
        let kinds = ps.iter().map(|q| q["profile_type"].as_str().unwrap()).collect::<BTreeSet<_>>();
        assert_eq!(kinds, BTreeSet::from(["forward", "inference", "training"]), "{family}");
    }
    grid_common::check("moe_autocast", points, 45, KNOWN_FAILING, |point| grid_common::hf::run_config(point, grid_common::moe::config_of(&point["point"])));
}

/// Autocast of gpt-oss and DeepSeek-V3 (`make_gptoss_deepseek_autocast_grid.py`, CUDA's autocast
/// policies on CPU): fp32 and bf16 weights, every experts implementation, balanced and worst
/// routing, top-k 1-4, 4-16 experts, checkpointing off, non-reentrant and reentrant, as
/// inference, forward and training; gpt-oss's sliding window shorter and longer than S,
/// DeepSeek-V3's q_lora_rank null and set, first_k_dense_replace 0 and 1, eager and sdpa.
#[test]
fn gpt_oss_deepseek_autocast_grid_matches_transformers() {
    let doc = fixture("autocast_gpt_oss_deepseek.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let points = doc["points"].as_array().unwrap();
    for family in ["gpt_oss", "deepseek_v3"] {
        let ps: Vec<&Value> = points.iter().filter(|q| q["point"]["model_type"] == family).collect();
        assert!(ps.len() >= 12, "{family}: {} points", ps.len());
        let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
        assert_eq!(set("autocast"), BTreeSet::from(["\"bf16\"".into()]), "{family}");
        for (k, n) in [("experts", 3), ("routing", 2), ("dtype", 2), ("top_k", 4), ("checkpoint", 3)] {
            assert_eq!(set(k).len(), n, "{family}: {k} {:?}", set(k));
        }
        let kinds = ps.iter().map(|q| q["profile_type"].as_str().unwrap()).collect::<BTreeSet<_>>();
        assert_eq!(kinds, BTreeSet::from(["forward", "inference", "training"]), "{family}");
        let (a, b) = match family {
            "gpt_oss" => ("sliding_window", "seq"),
            _ => ("q_lora_rank", "first_k_dense_replace"),
        };
        assert_eq!((set(a).len() > 1, set(b).len() > 1), (true, true), "{family}: {a} {:?}, {b} {:?}", set(a), set(b));
    }
    // gpt-oss's window both shorter and longer than S.
    let windows = points.iter().filter(|q| q["point"]["model_type"] == "gpt_oss").map(|q| q["point"]["sliding_window"].as_u64() < q["point"]["seq"].as_u64());
    assert_eq!(windows.collect::<BTreeSet<_>>().len(), 2);
    grid_common::check("moe_autocast_gpt_oss_deepseek", points, 30, KNOWN_FAILING, |point| grid_common::hf::run_config(point, grid_common::moe::read_config_of(&point["point"])));
}

/// fp16 autocast (the Trainer's `fp16=True`: torch.autocast around forward and loss, and
/// accelerate's GradScaler: the scaled loss's backward, unscale_ before clipping, the step and
/// update) over fp32 weights, every MoE family (`make_moe_fp16_autocast_grid.py`, CUDA's autocast
/// policies on CPU, no step skipped): every experts implementation, balanced and worst routing,
/// eager and sdpa, top-k 1-4, checkpointing off, non-reentrant and reentrant, as inference,
/// forward and training.
#[test]
fn moe_fp16_autocast_grid_matches_transformers() {
    let doc = fixture("autocast_fp16.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let points = doc["points"].as_array().unwrap();
    for family in ["mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"] {
        let ps: Vec<&Value> = points.iter().filter(|q| q["point"]["model_type"] == family).collect();
        assert!(ps.len() >= 9, "{family}: {} points", ps.len());
        let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
        assert_eq!((set("autocast"), set("dtype")), (BTreeSet::from(["\"fp16\"".into()]), BTreeSet::from(["\"fp32\"".into()])), "{family}");
        for (k, n) in [("experts", 3), ("routing", 2), ("checkpoint", 3)] {
            assert_eq!(set(k).len(), n, "{family}: {k} {:?}", set(k));
        }
        let kinds = ps.iter().map(|q| q["profile_type"].as_str().unwrap()).collect::<BTreeSet<_>>();
        assert_eq!(kinds, BTreeSet::from(["forward", "inference", "training"]), "{family}");
    }
    let attn = points.iter().map(|q| q["point"]["attn"].as_str().unwrap()).collect::<BTreeSet<_>>();
    assert_eq!(attn, BTreeSet::from(["eager", "sdpa"]));
    grid_common::check("moe_autocast_fp16", points, 47, KNOWN_FAILING, |point| {
        let p = &point["point"];
        grid_common::hf::run_config(point, grid_common::moe::point_model(p))
    });
}

/// DeepSeek-V3's sdpa under autocast with v's head size unlike q/k's: PyTorch's CPU (and
/// vramscope's `--sdpa-backend cpu_flash` / `math`) runs the math fallback on the autocast-cast
/// q, k, v (`make_deepseek_sdpa_autocast_grid.py`): bf16 over fp32 and bf16 weights, fp16 over
/// fp32, v larger and smaller than q, every experts implementation, both routings,
/// q_lora_rank null and set, checkpointing off, non-reentrant and reentrant.
#[test]
fn deepseek_sdpa_autocast_grid_matches_transformers() {
    let doc = fixture("deepseek_sdpa_autocast.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let points = doc["points"].as_array().unwrap();
    let set = |k: &str| points.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
    assert_eq!(set("attn"), BTreeSet::from(["\"sdpa\"".into()]));
    for (k, n) in [("autocast", 2), ("dtype", 2), ("experts", 3), ("routing", 2), ("checkpoint", 3), ("q_lora_rank", 3)] {
        assert_eq!(set(k).len(), n, "{k} {:?}", set(k));
    }
    let v_vs_qk = |q: &Value| q["point"]["v_head_dim"].as_u64().cmp(&q["point"]["qk_nope_head_dim"].as_u64().zip(q["point"]["qk_rope_head_dim"].as_u64()).map(|(n, r)| n + r));
    assert_eq!(points.iter().map(v_vs_qk).collect::<BTreeSet<_>>(), BTreeSet::from([std::cmp::Ordering::Less, std::cmp::Ordering::Greater]));
    let kinds = points.iter().map(|q| q["profile_type"].as_str().unwrap()).collect::<BTreeSet<_>>();
    assert_eq!(kinds, BTreeSet::from(["forward", "inference", "training"]));
    grid_common::check("deepseek_sdpa_autocast", points, 15, KNOWN_FAILING, |point| grid_common::hf::run_config(point, grid_common::moe::read_config_of(&point["point"])));
}

/// LoRA and QLoRA on Mixtral, Qwen3-MoE and Qwen2-MoE against peft 0.21.2 and bitsandbytes
/// 0.50.2 (`make_lora_grid.py --moe`, routing forced as in moe.json): the attention projections
/// (named lists: the experts and the router are no nn.Linear, and all-linear reaches them through
/// peft's target_parameters conversion, refused), every experts implementation, balanced and worst routing, checkpointing off,
/// non-reentrant and reentrant, 4-bit (nf4, fp4) and 8-bit loads that quantize only the
/// attention's linears, as training, forward and inference.
#[test]
fn moe_lora_grid_matches_peft() {
    let doc = fixture("lora.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let points = doc["points"].as_array().unwrap();
    for family in ["mixtral", "qwen3_moe"] {
        let ps: Vec<&Value> = points.iter().filter(|q| q["point"]["model_type"] == family).collect();
        let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
        assert_eq!(set("experts").len(), 3, "{family}: every experts implementation");
        assert_eq!(set("routing").len(), 2, "{family}: balanced and worst");
        assert!(ps.iter().any(|q| q["point"]["load_in_4bit"] == true) && ps.iter().any(|q| q["point"]["load_in_8bit"] == true), "{family}");
        assert!(ps.len() >= 10, "{family}: {}", ps.len());
    }
    grid_common::check("moe_lora", points, 25, KNOWN_FAILING, |point| grid_common::hf::run_config(point, grid_common::moe::config_of(&point["point"])));
}

/// summary.json of `profile` on meta with `extra`.
fn profile(name: &str, extra: &[&str]) -> Value {
    let out = scratch::dir().join(format!("vramscope-moe-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut args = vec!["profile", "--device", "meta", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = vramscope(&args);
    assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    let s = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    s
}

#[test]
fn qwen3_30b_a3b_trains_at_4096_with_worst_routing_and_says_so() {
    let s = profile("qwen3", &["--preset", "Qwen3-30B-A3B", "--profile-type", "training", "--context-length", "4096", "--batch-size", "1", "--routing", "worst"]);
    let moe = &s["transformers"]["moe"];
    assert_eq!(moe["routing"], "worst", "{moe}");
    assert_eq!(moe["experts_implementation"], "grouped_mm");
    assert_eq!(moe["active_parameters_per_token"].as_u64(), Some(3_353_032_704));
    assert_eq!(s["model"]["hf"]["moe"]["experts"].as_u64(), Some(128));
    let peak = &s["runs"][0]["peak"];
    assert!(!peak["peak_op"].as_str().unwrap().is_empty(), "{peak}");
    assert!(peak["peak_allocated"].as_u64().unwrap() > 30_532_122_624 * 2, "weights, grads and state of 30.5B bf16 parameters at least");
}

#[test]
fn routing_and_experts_flags_are_checked() {
    let dir = scratch::dir().join(format!("vramscope-moe-counts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let counts = dir.join("counts.txt");
    // Mixtral-8x7B, batch 1 × 64 tokens, top-2: 128 pairs over 8 experts.
    std::fs::write(&counts, "64 32 16 8 4 2 1 1\n").unwrap();
    let s = profile("counts", &["--preset", "Mixtral-8x7B", "--profile-type", "inference", "--context-length", "64", "--batch-size", "1", "--routing", counts.to_str().unwrap(), "--experts-implementation", "eager"]);
    assert_eq!(s["transformers"]["moe"]["experts_implementation"], "eager");
    std::fs::write(&counts, "64 32 16 8 4 2 1\n").unwrap();
    let bad = |extra: &[&str], needle: &str| {
        let mut args = vec!["profile", "--device", "meta", "--context-length", "64", "--batch-size", "1", "--out-dir", dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?} should say {needle}: {err}");
    };
    bad(&["--preset", "Mixtral-8x7B", "--routing", counts.to_str().unwrap()], "--routing");
    bad(&["--preset", "Mixtral-8x7B", "--experts-implementation", "sonic"], "--experts-implementation");
    bad(&["--preset", "Llama-3.2-1B", "--routing", "worst"], "--routing");
    // The experts (3-D parameters) and the router (no nn.Linear) are no LoRA modules: peft
    // reaches them through target_parameters, converting the transformers-4 names (w1/w3,
    // gate_proj/up_proj: both halves of gate_up_proj; tests/moe_lora_converted_grid.rs).
    bad(&["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-modules", "experts"], "target_parameters");
    bad(&["--preset", "gpt-oss-20b", "--lora-r", "8", "--target-modules", "router"], "not an nn.Linear");
    bad(&["--preset", "Qwen3-30B-A3B", "--lora-r", "8", "--target-modules", "up_proj"], "without also targeting gate_proj");
    // No default target_modules works on these under transformers 5 (mixtral's is converted away).
    bad(&["--preset", "Qwen3-30B-A3B", "--lora-r", "8"], "--target-modules");
    bad(&["--preset", "Mixtral-8x7B", "--lora-r", "8"], "NoMatchingPeftModuleError");
    // DoRA on an MoE model's attention runs over fp32 and bf16 weights (dora_models.json), not
    // over 4-bit ones.
    bad(&["--preset", "Qwen3-30B-A3B", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--use-dora", "--load-in-4bit"], "--use-dora");
    bad(&["--preset", "Mixtral-8x7B", "--device", "cpu"], "--device");
    // bf16 autocast runs for every MoE family (autocast.json, autocast_gpt_oss_deepseek.json),
    // fp16 over fp32 weights too (autocast_fp16.json; over bf16 weights it is refused as for
    // every model), with the aux loss, LoRA and DeepSeek-V3's sdpa math fallback.
    let s = profile("mixtral-fp16", &["--preset", "Mixtral-8x7B", "--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--dtype", "float32", "--precision", "fp16"]);
    assert_eq!((s["transformers"]["moe"]["model_type"].as_str(), s["precision"].as_str()), (Some("mixtral"), Some("fp16")));
    bad(&["--preset", "gpt-oss-20b", "--dtype", "bfloat16", "--precision", "fp16"], "--precision");
    let s = profile("gpt-oss-autocast", &["--preset", "gpt-oss-20b", "--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--precision", "bf16"]);
    assert_eq!((s["transformers"]["moe"]["model_type"].as_str(), s["precision"].as_str()), (Some("gpt_oss"), Some("pure-bf16-autocast")));
    let s = profile("deepseek-autocast", &["--preset", "DeepSeek-V3", "--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--dtype", "float32", "--precision", "bf16", "--attn-implementation", "eager"]);
    assert_eq!((s["transformers"]["moe"]["model_type"].as_str(), s["precision"].as_str()), (Some("deepseek_v3"), Some("bf16")));
    // DeepSeek-V3's sdpa math fallback (v 128 unlike q/k 192) under autocast runs
    // (deepseek_sdpa_autocast.json); CUDA's own kernel choice for unequal sizes stays refused.
    let s = profile("deepseek-sdpa-autocast", &["--preset", "DeepSeek-V3", "--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--dtype", "float32", "--precision", "fp16", "--attn-implementation", "sdpa", "--sdpa-backend", "math"]);
    assert_eq!((s["transformers"]["moe"]["model_type"].as_str(), s["precision"].as_str()), (Some("deepseek_v3"), Some("fp16")));
    bad(&["--preset", "DeepSeek-V3", "--num-layers", "2", "--precision", "bf16", "--attn-implementation", "sdpa"], "--sdpa-backend cpu_flash");
    // The aux loss under autocast runs (tests/aux_loss_grid.rs, aux_loss_autocast.json).
    let s = profile("mixtral-aux-autocast", &["--preset", "Mixtral-8x7B", "--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--dtype", "float32", "--precision", "bf16", "--output-router-logits"]);
    assert_eq!((s["model"]["hf"]["moe"]["output_router_logits"].as_bool(), s["precision"].as_str()), (Some(true), Some("bf16")));
    // LoRA under autocast runs (tests/moe_lora_autocast_grid.rs, lora_autocast.json).
    let s = profile("qwen3-lora-autocast", &["--preset", "Qwen3-30B-A3B", "--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--dtype", "float32", "--precision", "fp16", "--lora-r", "8", "--target-modules", "q_proj,v_proj"]);
    assert_eq!(s["precision"].as_str(), Some("fp16"));
    // generate() runs for Mixtral, Qwen3-MoE and Qwen2-MoE (tests/generate_grid.rs), with
    // balanced or worst routing only: a file's counts are one forward's.
    bad(&["--preset", "Mixtral-8x7B", "--profile-type", "generate", "--max-new-tokens", "2", "--routing", counts.to_str().unwrap()], "one forward's token count");
    // Data-parallel layouts run (tests/dist_models_grid.rs), and transformers' tensor-parallel
    // plan alone (tests/tp_hf_moe_grid.rs: the model's default plan is auto); FSDP2 x TP and
    // expert parallelism do not.
    bad(&["--preset", "Qwen3-30B-A3B", "--parallel", "fsdp", "--world-size", "4", "--tp", "2"], "no --ep");
    let s = profile("qwen3-tp", &["--preset", "Qwen3-30B-A3B", "--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--parallel", "tp", "--world-size", "2", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0"]);
    assert_eq!(s["parallel"]["tp_plan"].as_str(), Some("auto"), "{}", s["parallel"]);
    // The router's loss and bf16 autocast run under the plan, together too, and autocast in
    // inference (tests/tp_hf_moe_grid.rs).
    let tp = ["--preset", "Qwen3-30B-A3B", "--parallel", "tp", "--world-size", "2", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0", "--dtype", "float32"];
    let s = profile("qwen3-tp-aux-autocast", &[&tp[..], &["--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--precision", "bf16", "--output-router-logits"]].concat());
    assert_eq!((s["model"]["hf"]["moe"]["output_router_logits"].as_bool(), s["precision"].as_str()), (Some(true), Some("bf16")));
    let s = profile("qwen3-tp-autocast-inference", &[&tp[..6], &["--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--dtype", "float32", "--precision", "bf16", "--profile-type", "inference"]].concat());
    assert_eq!(s["precision"].as_str(), Some("bf16"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_published_configs_read_as_their_presets() {
    let doc = fixture("meta_params.json");
    for name in ["Mixtral-8x7B", "Qwen3-30B-A3B"] {
        let m = &doc["models"][name];
        let read = vramscope::model::hf::parse(&m["config"].to_string()).unwrap().config;
        let preset = vramscope::model::presets::find(name, None).unwrap().model;
        assert_eq!(read.param_count(), m["total"].as_u64().unwrap(), "{name}");
        assert_eq!(preset.param_count(), m["total"].as_u64().unwrap(), "{name}");
        let (r, p) = (read.hf.as_ref().unwrap(), preset.hf.as_ref().unwrap());
        assert_eq!((&r.moe, r.sliding_window, r.head_dim, read.d_ff, read.num_kv_heads), (&p.moe, p.sliding_window, p.head_dim, preset.d_ff, preset.num_kv_heads), "{name}");
    }
}

#[test]
fn every_config_vramscope_runs_builds_transformers_parameter_count() {
    let doc = fixture("meta_params.json");
    let mut n = 0;
    for (name, m) in doc["models"].as_object().unwrap() {
        let Ok(read) = vramscope::model::hf::parse(&m["config"].to_string()) else {
            assert!(name.contains("dense-layers"), "{name} is refused");
            continue;
        };
        let total = m["total"].as_u64().unwrap();
        assert_eq!(read.config.param_count(), total, "{name}: closed form");
        vramscope::engine::runtime::reset();
        let built = vramscope::model::Model::new(&read.config, vramscope::engine::Device::Meta, 0).unwrap();
        assert_eq!(built.num_parameters(), total, "{name}: built");
        assert_eq!(vramscope::session::hf::active_parameters(&read.config), m["active"].as_u64().unwrap(), "{name}: active");
        n += 1;
    }
    assert!(n >= 5, "{n}");
}

#[test]
fn fit_and_estimate_of_an_moe_model() {
    let dir = scratch::dir().join(format!("vramscope-moe-fit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    std::fs::write(&cfg, r#"{"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_local_experts": 4, "num_experts_per_tok": 2}"#).unwrap();
    let fit = |extra: &[&str]| {
        let mut args = vec!["fit", "--find", "batch", "--config", cfg.to_str().unwrap(), "--context-length", "32", "--memory-limit", "64MiB", "--reserve", "0", "--json"];
        args.extend_from_slice(extra);
        let o = vramscope(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    // fit assumes the worst routing unless told.
    let worst = fit(&[]);
    assert_eq!(worst["config"]["hf"]["moe"]["routing"], "worst", "{worst}");
    assert!(worst["answer"].as_u64().unwrap() >= 1);
    let balanced = fit(&["--routing", "balanced"]);
    assert_eq!(balanced["config"]["hf"]["moe"]["routing"], "balanced");
    // estimate's closed form covers Mixtral and gpt-oss (tests/estimate_moe.rs, tests/estimate_gpt_oss.rs).
    for preset in ["Mixtral-8x7B", "gpt-oss-20b"] {
        let o = vramscope(&["estimate", "--preset", preset, "--context-length", "128"]);
        assert!(o.status.success(), "{preset}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
