//! peft 0.21.2's conversion of a LoraConfig for transformers 5's fused experts
//! (`convert_peft_config_for_transformers`) on Mixtral, Qwen3-MoE and DeepSeek-V3: `all-linear`
//! (the attention's nn.Linear modules plus target_parameters on the experts' gate_up_proj, at
//! twice the rank and alpha, down_proj and the router's gate.weight) and the transformers-4
//! names (mixtral's w1/w2/w3/gate, qwen2_moe's gate_proj/up_proj/down_proj/gate) mapped to those
//! parameters, against tests/fixtures/moe_grid/lora_converted.json (`make_lora_grid.py
//! --converted`, routing forced as in moe.json), every phase byte for byte, parameter and
//! trainable counts equal to peft's; and the CLI's conversion and refusals.
mod scratch;
mod grid_common;

use serde_json::Value;
use std::collections::BTreeSet;

/// Points where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

fn run(point: &Value) -> (Vec<vramscope::record::MemEvent>, Vec<vramscope::record::MemEvent>) {
    let p = &point["point"];
    grid_common::hf::run_config(point, grid_common::moe::point_model(p))
}

#[test]
fn converted_targets_grid_matches_peft() {
    let path = format!("{}/tests/fixtures/moe_grid/lora_converted.json", env!("CARGO_MANIFEST_DIR"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    assert_eq!(doc["peft"], "0.21.2");
    let points = doc["points"].as_array().unwrap();
    for family in ["mixtral", "qwen3_moe", "deepseek_v3"] {
        let ps: Vec<&Value> = points.iter().filter(|q| q["point"]["model_type"] == family).collect();
        let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
        assert!(ps.len() >= 12, "{family}: {} points", ps.len());
        assert_eq!(set("experts").len(), 3, "{family}: every experts implementation");
        assert_eq!(set("routing").len(), 2, "{family}: balanced and worst");
        assert_eq!(set("dtype").len(), 2, "{family}: fp32 and bf16");
        assert_eq!(set("checkpoint").len(), 3, "{family}: checkpointing off, non-reentrant, reentrant");
        assert_eq!(set("lora_r"), BTreeSet::from(["4".to_string(), "8".into(), "16".into()]), "{family}");
        assert_eq!(ps.iter().map(|q| q["profile_type"].to_string()).collect::<BTreeSet<_>>().len(), 3, "{family}: training, forward, inference");
        assert!(ps.iter().filter(|q| q["point"]["target_modules"] == "all-linear").count() >= 6, "{family}: all-linear");
        assert!(set("target_modules").len() >= 5, "{family}: names converted: {:?}", set("target_modules"));
    }
    grid_common::check("moe_lora_converted", points, 36, KNOWN_FAILING, run);
}

#[test]
fn converted_targets_run_and_refuse_what_peft_refuses() {
    let dir = scratch::dir().join(format!("vramscope-conv-{}", std::process::id()));
    let run = |extra: &[&str]| grid_common::moe::meta_profile(&dir, extra);
    for extra in [
        &["--preset", "Mixtral-8x7B", "--profile-type", "training", "--lora-r", "8", "--target-modules", "all-linear"][..],
        &["--preset", "Qwen3-30B-A3B", "--profile-type", "training", "--lora-r", "8", "--target-modules", "q_proj,gate_proj,up_proj"][..],
        &["--preset", "DeepSeek-V3", "--profile-type", "training", "--lora-r", "8", "--target-modules", "all-linear", "--attn-implementation", "eager"][..],
        &["--preset", "gpt-oss-20b", "--profile-type", "training", "--lora-r", "8", "--target-parameters", "mlp.router.weight,gate_up_proj,down_proj"][..],
        &["--preset", "DeepSeek-V3", "--profile-type", "training", "--lora-r", "8", "--target-parameters", "mlp.experts.gate_up_proj", "--target-modules", "kv_b_proj", "--attn-implementation", "eager"][..],
    ] {
        let o = run(extra);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let _ = std::fs::remove_dir_all(&dir);
    }
    let bad = |extra: &[&str], flag: &str, needle: &str| {
        let o = run(extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag) && err.contains(needle), "{extra:?} should name {flag} and say {needle}: {err}");
        assert!(!dir.join("summary.json").exists(), "nothing written");
    };
    // One half of the fused gate_up_proj: peft raises.
    bad(&["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-modules", "w1"], "--target-modules", "without also targeting w3");
    bad(&["--preset", "Qwen3-30B-A3B", "--lora-r", "8", "--target-modules", "q_proj,up_proj"], "--target-modules", "without also targeting gate_proj");
    // The converted ParamWrapper refuses dropout (peft raises) and a bitsandbytes load (not measured).
    bad(&["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-modules", "all-linear", "--lora-dropout", "0.05"], "--lora-dropout", "lora_dropout != 0");
    bad(&["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-modules", "all-linear", "--load-in-4bit"], "--load-in-4bit", "not measured");
    bad(&["--preset", "DeepSeek-V3", "--attn-implementation", "eager", "--lora-r", "8", "--target-modules", "all-linear", "--load-in-4bit"], "--load-in-4bit", "not measured");
    // gpt-oss's biases and 1-D parameters are no target here; its router is mlp.router.
    bad(&["--preset", "gpt-oss-20b", "--lora-r", "8", "--target-parameters", "mlp.gate.weight"], "--target-parameters", "mlp.router.weight");
    bad(&["--preset", "gpt-oss-20b", "--lora-r", "8", "--target-modules", "router"], "--target-modules", "--target-parameters mlp.router.weight");
    // DeepSeek-V3's shared experts take no LoRA from a name.
    bad(&["--preset", "DeepSeek-V3", "--attn-implementation", "eager", "--lora-r", "8", "--target-modules", "shared_experts"], "--target-modules", "shared experts");
}
