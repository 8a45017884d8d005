//! peft's LoRA on the mixture-of-experts models under autocast (the Trainer's bf16=True /
//! fp16=True) against tests/fixtures/moe_grid/lora_autocast.json
//! (`make_moe_lora_autocast_grid.py`, CUDA's autocast policies on CPU, routing forced as in
//! moe.json), every phase byte for byte.
mod grid_common;

use std::collections::BTreeSet;

/// Points where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

#[test]
fn moe_lora_autocast_grid_matches_peft() {
    let doc = grid_common::fixture("moe_grid/lora_autocast.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let points = doc["points"].as_array().unwrap();
    let set = |k: &str| points.iter().map(|q| q["point"][k].to_string().trim_matches('"').to_string()).collect::<BTreeSet<_>>();
    let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(set("model_type"), strs(&["deepseek_v3", "gpt_oss", "mixtral", "qwen2_moe", "qwen3_moe"]));
    assert_eq!(set("autocast"), strs(&["bf16", "fp16"]));
    assert_eq!(set("dtype"), strs(&["bf16", "fp32"]));
    assert_eq!(set("experts"), strs(&["batched_mm", "eager", "grouped_mm"]));
    assert_eq!(set("routing"), strs(&["balanced", "worst"]));
    assert_eq!(set("checkpoint"), strs(&["non-reentrant", "none", "reentrant"]));
    assert_eq!(points.iter().map(|q| q["profile_type"].as_str().unwrap()).collect::<BTreeSet<_>>(), BTreeSet::from(["forward", "inference", "training"]));
    // fp16 autocast only over fp32 weights (the Trainer's fp16=True stops in GradScaler otherwise).
    assert!(points.iter().filter(|q| q["point"]["autocast"] == "fp16").all(|q| q["point"]["dtype"] == "fp32"));
    grid_common::check("moe_lora_autocast", points, 12, KNOWN_FAILING, |point| {
        let p = &point["point"];
        grid_common::hf::run_config(point, grid_common::moe::point_model(p))
    });
}
