//! LoRA through peft 0.21.2's `target_parameters` (its ParamWrapper) on Mixtral's, Qwen3-MoE's
//! and Qwen2-MoE's experts (3-D `gate_up_proj`, `down_proj`) and router weight, against
//! tests/fixtures/moe_grid/lora_params.json (`make_lora_grid.py --target-parameters`, routing
//! forced as in moe.json), every phase byte for byte; and what stays refused exits 2 naming the
//! flag.
mod scratch;
mod grid_common;

use serde_json::Value;
use std::collections::BTreeSet;

/// Points of lora_params.json where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

#[test]
fn target_parameters_grid_matches_peft() {
    let path = format!("{}/tests/fixtures/moe_grid/lora_params.json", env!("CARGO_MANIFEST_DIR"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    assert_eq!(doc["peft"], "0.21.2");
    let points = doc["points"].as_array().unwrap();
    for family in ["mixtral", "qwen3_moe"] {
        let ps: Vec<&Value> = points.iter().filter(|q| q["point"]["model_type"] == family).collect();
        let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
        assert!(ps.len() >= 12, "{family}: {} points", ps.len());
        assert_eq!(set("experts").len(), 3, "{family}: every experts implementation");
        assert_eq!(set("routing").len(), 2, "{family}: balanced and worst");
        assert_eq!(set("dtype").len(), 2, "{family}: fp32 and bf16");
        assert_eq!(set("checkpoint").len(), 3, "{family}: checkpointing off, non-reentrant, reentrant");
        assert_eq!(ps.iter().map(|q| q["profile_type"].to_string()).collect::<BTreeSet<_>>().len(), 3, "{family}: training, forward, inference");
        // experts only, router only, one expert parameter, experts + router + attention
        assert!(set("target_parameters").len() >= 4, "{family}: {:?}", set("target_parameters"));
        assert!(ps.iter().any(|q| q["point"]["target_modules"] != ""), "{family}: with attention adapters too");
    }
    grid_common::check("moe_lora_params", points, 27, KNOWN_FAILING, |point| grid_common::hf::run_config(point, grid_common::moe::config_of(&point["point"])));
}

#[test]
fn target_parameters_runs_and_refuses_what_peft_or_the_grid_does_not_cover() {
    let dir = scratch::dir().join(format!("vramscope-tp-{}", std::process::id()));
    let run = |extra: &[&str]| grid_common::moe::meta_profile(&dir, extra);
    let o = run(&["--preset", "Qwen3-30B-A3B", "--profile-type", "training", "--lora-r", "8", "--target-parameters", "gate_up_proj,mlp.experts.down_proj,mlp.gate.weight", "--target-modules", "q_proj,v_proj"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    let bad = |extra: &[&str], flag: &str, needle: &str| {
        let o = run(extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag) && err.contains(needle), "{extra:?} should name {flag} and say {needle}: {err}");
        assert!(!dir.join("summary.json").exists(), "nothing written");
    };
    // peft's ParamWrapper raises on dropout and DoRA.
    bad(&["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-parameters", "gate_up_proj", "--lora-dropout", "0.05"], "--lora-dropout", "lora_dropout != 0");
    bad(&["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-parameters", "gate_up_proj", "--use-dora"], "--use-dora", "use_dora");
    // A bare `weight` would reach every nn.Linear; unknown names are named.
    bad(&["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-parameters", "weight"], "--target-parameters", "'weight'");
    bad(&["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-parameters", "w1"], "--target-parameters", "'w1'");
    // Not measured: a bitsandbytes load with ParamWrapper; dense models have no such parameter.
    bad(&["--preset", "Qwen3-30B-A3B", "--lora-r", "8", "--target-parameters", "down_proj", "--load-in-4bit"], "--load-in-4bit", "not measured");
    bad(&["--preset", "Llama-3.2-1B", "--lora-r", "8", "--target-parameters", "down_proj"], "--target-parameters", "--target-modules");
}
