//! LoRA through peft 0.21.2's `target_parameters` (its ParamWrapper) on gpt-oss's experts
//! (`is_transposed`: gate_up_proj (E, hidden, 2·I), down_proj (E, I, hidden)) and router
//! (`mlp.router.weight`), and on DeepSeek-V3's routed experts and router (`mlp.gate.weight`,
//! sparse layers only), against tests/fixtures/moe_grid/lora_params_gpt_oss.json and
//! lora_params_deepseek_v3.json (`make_lora_grid.py --gpt-oss-params` / `--deepseek-params`,
//! routing forced as in moe.json), every phase byte for byte, parameter and trainable counts
//! equal to peft's.
mod grid_common;

use serde_json::Value;
use std::collections::BTreeSet;

/// Points where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

fn fixture(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/fixtures/moe_grid/{name}", env!("CARGO_MANIFEST_DIR"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    assert_eq!(doc["peft"], "0.21.2");
    doc["points"].as_array().unwrap().to_vec()
}

/// The grid's coverage: ≥ 12 points, every experts implementation, both routings, fp32 and
/// bf16, r 4–16, top-k 1–4, checkpointing off/non-reentrant/reentrant, training/forward/
/// inference, experts / router / one expert parameter / with attention adapters.
fn covers(family: &str, ps: &[Value]) {
    let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
    assert!(ps.len() >= 12, "{family}: {} points", ps.len());
    assert_eq!(set("experts").len(), 3, "{family}: every experts implementation");
    assert_eq!(set("routing").len(), 2, "{family}: balanced and worst");
    assert_eq!(set("dtype").len(), 2, "{family}: fp32 and bf16");
    assert_eq!(set("checkpoint").len(), 3, "{family}: checkpointing off, non-reentrant, reentrant");
    assert_eq!(set("lora_r"), BTreeSet::from(["4".to_string(), "8".into(), "16".into()]), "{family}");
    assert_eq!(set("top_k"), BTreeSet::from(["1".to_string(), "2".into(), "3".into(), "4".into()]), "{family}: top-k 1-4");
    assert_eq!(ps.iter().map(|q| q["profile_type"].to_string()).collect::<BTreeSet<_>>().len(), 3, "{family}: training, forward, inference");
    assert!(set("target_parameters").len() >= 4, "{family}: {:?}", set("target_parameters"));
    assert!(ps.iter().any(|q| q["point"]["target_modules"] != ""), "{family}: with attention adapters too");
}

fn run(point: &Value) -> (Vec<vramscope::record::MemEvent>, Vec<vramscope::record::MemEvent>) {
    let mut cfg = grid_common::moe::read_config_of(&point["point"]);
    grid_common::hf::apply_peft(&point["point"], cfg.hf.as_mut().unwrap());
    grid_common::hf::run_config(point, cfg)
}

#[test]
fn gpt_oss_target_parameters_grid_matches_peft() {
    let points = fixture("lora_params_gpt_oss.json");
    covers("gpt_oss", &points);
    assert!(points.iter().any(|q| q["point"]["target_parameters"].as_str().unwrap().contains("mlp.router.weight")), "the router");
    grid_common::check("moe_lora_params_gpt_oss", &points, 13, KNOWN_FAILING, run);
}

#[test]
fn deepseek_v3_target_parameters_grid_matches_peft() {
    let points = fixture("lora_params_deepseek_v3.json");
    covers("deepseek_v3", &points);
    // eager and sdpa; dense layers before the sparse ones (first_k_dense_replace 0-2).
    assert_eq!(points.iter().map(|q| q["point"]["attn"].to_string()).collect::<BTreeSet<_>>().len(), 2);
    assert!(points.iter().map(|q| q["point"]["first_k_dense_replace"].to_string()).collect::<BTreeSet<_>>().len() >= 3);
    grid_common::check("moe_lora_params_deepseek_v3", &points, 13, KNOWN_FAILING, run);
}
