//! DeepSeek-V3 (`model_type` deepseek_v3) against transformers 5.23 (issue 30).
//!
//! The measured ground truth is tests/fixtures/moe_grid/deepseek_v3.json
//! (tools/pytorch/make_deepseek_grid.py: DeepseekV3ForCausalLM on CPU, the router forced to
//! balanced or worst routing); every phase of every point matches except the zero-width shared
//! experts (n_shared_experts 0), which the reader refuses. Parameter counts (total and active
//! per token) equal transformers' meta build of DeepSeek-V3 (671B; its config.json as the Hub
//! gives it is tests/fixtures/hf_models/DeepSeek-V3) and of small configs
//! (tests/fixtures/moe_grid/deepseek_v3_meta_params.json, tools/pytorch/moe_meta_params.py
//! --deepseek).
mod scratch;
use serde_json::Value;
use std::process::Command;
use vramscope::model::hf::deepseek_v3::DeepseekV3Shape;
use vramscope::model::hf::moe::MoeCounts;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(rel: &str) -> Value {
    let path = root().join("tests/fixtures").join(rel);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

#[test]
fn parameter_counts_equal_transformers_meta_build() {
    let doc = fixture("moe_grid/deepseek_v3_meta_params.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let models = doc["models"].as_object().unwrap();
    assert!(models.len() >= 5);
    for (name, m) in models {
        let want = MoeCounts { total: m["total"].as_u64().unwrap(), active: m["active"].as_u64().unwrap() };
        assert_eq!(DeepseekV3Shape::read(m["config"].as_object().unwrap()).unwrap().counts().unwrap(), want, "{name}");
        let read = vramscope::model::hf::deepseek_v3::parse(m["config"].as_object().unwrap()).unwrap().config;
        assert_eq!(read.param_count(), want.total, "{name}: closed form");
        assert_eq!(vramscope::session::hf::active_parameters(&read), want.active, "{name}: active");
        if want.total < 1_000_000 {
            vramscope::engine::runtime::reset();
            let built = vramscope::model::Model::new(&read, vramscope::engine::Device::Meta, 0).unwrap();
            assert_eq!(built.num_parameters(), want.total, "{name}: built");
        }
        if let Ok(p) = vramscope::model::presets::find(name, None) {
            assert_eq!((p.model.param_count(), p.expected_params), (want.total, want.total), "{name}: preset");
            let (r, q) = (read.hf.as_ref().unwrap(), p.model.hf.as_ref().unwrap());
            assert_eq!((&r.moe, r.head_dim, read.num_layers, read.d_model), (&q.moe, q.head_dim, p.model.num_layers, p.model.d_model), "{name}");
        }
    }
    assert!(vramscope::model::presets::find("DeepSeek-V3", None).is_ok());
    // The published model: 671B in all, 37.6B active per token (the MTP layer is not built).
    assert_eq!(models["DeepSeek-V3"]["total"], 671_026_404_352u64);
    assert_eq!(models["DeepSeek-V3"]["active"], 37_552_282_624u64);
    // The Hub's file, as written (its fp8 quantization_config does not change the shapes).
    let hub = fixture("hf_models/DeepSeek-V3/config.json");
    assert_eq!(DeepseekV3Shape::read(hub.as_object().unwrap()).unwrap().counts().unwrap().total, 671_026_404_352);
}

#[test]
fn the_hub_checkpoint_is_refused_for_its_fp8_weights_and_the_bf16_load_runs() {
    let dir = scratch::dir().join(format!("vramscope-deepseek-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("out");
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope");
    let hub = root().join("tests/fixtures/hf_models/DeepSeek-V3/config.json");
    let o = run(&["profile", "--config", hub.to_str().unwrap(), "--device", "meta", "--context-length", "32", "--out-dir", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for needle in ["'quantization_config'", "fp8", "bf16"] {
        assert!(err.contains(needle), "should say {needle}: {err}");
    }
    assert!(!out.exists(), "wrote {}", out.display());
    // A small config runs; what is not modelled is refused naming the flag.
    let small = dir.join("config.json");
    std::fs::write(&small, fixture("moe_grid/deepseek_v3_meta_params.json")["models"]["deepseek_v3-small"]["config"].to_string()).unwrap();
    let cfg = small.to_str().unwrap();
    let base = ["profile", "--config", cfg, "--device", "meta", "--context-length", "32", "--batch-size", "1", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap()];
    let o = run(&[&base[..], &["--profile-type", "training", "--routing", "worst", "--attn-implementation", "eager"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&out);
    for (extra, flag) in [(&["--attn-implementation", "flash_attention_2"][..], "--attn-implementation"), (&["--attn-implementation", "sdpa"][..], "--attn-implementation"), (&["--lora-r", "8", "--attn-implementation", "eager"][..], "--target-modules")] {
        let o = run(&[&base[..], extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?}: {err}");
        assert!(!out.exists(), "{extra:?} wrote {}", out.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The measured ground truth of the forward (tools/pytorch/make_deepseek_grid.py) covers what
/// issue 30 asks of a family, and its models count as vramscope counts them.
#[test]
fn the_measured_grid_covers_the_issue_and_counts_as_vramscope_counts() {
    use std::collections::BTreeSet;
    let doc = fixture("moe_grid/deepseek_v3.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let ps: Vec<&Value> = doc["points"].as_array().unwrap().iter().collect();
    assert!(ps.len() >= 36, "{} points", ps.len());
    assert!(ps.iter().all(|q| q.get("error").is_none()), "a point failed to measure");
    let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
    let strs = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(set("experts"), strs(&["\"batched_mm\"", "\"eager\"", "\"grouped_mm\""]));
    assert_eq!(set("routing"), strs(&["\"balanced\"", "\"worst\""]));
    assert_eq!(set("attn"), strs(&["\"eager\"", "\"sdpa\""]));
    assert_eq!(set("dtype"), strs(&["\"bf16\"", "\"fp32\""]));
    assert_eq!(set("rope_interleave"), strs(&["false", "true"]));
    assert_eq!(set("top_k"), (1..=4).map(|k| k.to_string()).collect());
    assert_eq!(set("n_shared_experts"), strs(&["0", "1", "2"]));
    assert!(set("q_lora_rank").contains("null") && set("q_lora_rank").len() > 2, "q_lora_rank set and null");
    assert!(ps.iter().any(|q| q["point"]["first_k_dense_replace"] == 0), "every layer sparse");
    assert!(ps.iter().any(|q| q["point"]["first_k_dense_replace"].as_u64() >= q["point"]["num_layers"].as_u64()), "every layer dense");
    assert!(ps.iter().any(|q| q["point"]["yarn_factor"].as_f64() > Some(0.0)), "a YaRN point");
    let kinds = ps.iter().map(|q| q["profile_type"].as_str().unwrap()).collect::<BTreeSet<_>>();
    assert_eq!(kinds, BTreeSet::from(["forward", "inference", "training"]));
    assert_eq!(set("checkpoint"), strs(&["\"non-reentrant\"", "\"none\"", "\"reentrant\""]));
    let experts: Vec<u64> = ps.iter().map(|q| q["point"]["num_experts"].as_u64().unwrap()).collect();
    assert!(experts.iter().all(|e| (4..=16).contains(e)) && experts.contains(&4) && experts.contains(&16), "{experts:?}");
    for q in ps {
        let (p, name) = (&q["point"], q["name"].as_str().unwrap());
        // measure_moe.py's DeepseekV3Config, as config.json fields.
        let config = serde_json::json!({
            "hidden_size": p["hidden_size"], "intermediate_size": p["dense_intermediate_size"],
            "moe_intermediate_size": p["intermediate_size"], "num_hidden_layers": p["num_layers"],
            "num_attention_heads": p["num_heads"], "vocab_size": p["vocab_size"], "tie_word_embeddings": p["tied"],
            "n_routed_experts": p["num_experts"], "num_experts_per_tok": p["top_k"], "n_group": p["n_group"],
            "topk_group": p["topk_group"], "first_k_dense_replace": p["first_k_dense_replace"],
            "n_shared_experts": p["n_shared_experts"], "q_lora_rank": p["q_lora_rank"], "kv_lora_rank": p["kv_lora_rank"],
            "qk_nope_head_dim": p["qk_nope_head_dim"], "qk_rope_head_dim": p["qk_rope_head_dim"], "v_head_dim": p["v_head_dim"],
        });
        let c = DeepseekV3Shape::read(config.as_object().unwrap()).unwrap().counts().unwrap();
        assert_eq!(c.total, q["info"]["parameters"].as_u64().unwrap(), "{name}: parameters");
        assert_eq!(q["info"]["attn_implementation"], p["attn"], "{name}");
        // sdpa on CPU: the flash kernel when v's head size equals q's and k's, else the math fallback.
        if p["attn"] == "sdpa" {
            let same = p["v_head_dim"].as_u64().unwrap() == p["qk_nope_head_dim"].as_u64().unwrap() + p["qk_rope_head_dim"].as_u64().unwrap();
            let kernel = if same { "aten::_scaled_dot_product_flash_attention_for_cpu" } else { "aten::_scaled_dot_product_attention_math" };
            assert!(q["info"]["sdpa_backends"].as_array().unwrap().iter().any(|b| b == kernel), "{name}: {}", q["info"]["sdpa_backends"]);
        }
        let (t, k, e) = (p["batch"].as_u64().unwrap() * p["seq"].as_u64().unwrap(), p["top_k"].as_u64().unwrap(), p["num_experts"].as_u64().unwrap());
        let per: Vec<u64> = q["info"]["tokens_per_expert"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(per.iter().sum::<u64>(), t * k, "{name}");
        match p["routing"].as_str().unwrap() {
            "worst" => assert!(per.iter().enumerate().all(|(i, &n)| n == if (i as u64) < k { t } else { 0 }), "{name}: {per:?}"),
            _ => assert!(per.iter().all(|&n| n == t * k / e || n == t * k / e + 1), "{name}: {per:?}"),
        }
    }
}

#[path = "grid_common/mod.rs"]
mod grid_common;

#[test]
fn deepseek_v3_grid_matches_transformers() {
    let doc = fixture("moe_grid/deepseek_v3.json");
    let only = std::env::var("DS_ONLY").ok();
    let points: Vec<Value> = doc["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["point"]["n_shared_experts"] != 0)
        .filter(|q| only.as_ref().is_none_or(|o| q["name"].as_str().unwrap().contains(o.as_str())))
        .cloned()
        .collect();
    grid_common::check("deepseek_v3", &points, 1, &[], |point| grid_common::hf::run_config(point, grid_common::moe::read_config_of(&point["point"])));
}
