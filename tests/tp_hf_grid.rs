//! One rank of transformers 5.23's own tensor parallelism (`--tp-plan auto`, what
//! `from_pretrained(tp_plan="auto")` applies) on phi3, olmo2, gemma2, gemma3_text, llama,
//! mistral, qwen2 and qwen3, with and without activation checkpointing, against PyTorch
//! itself: tests/fixtures/dist_grid/tp_hf.json
//! (tools/pytorch/measure_tp_hf.py:
//! the model's resolved plan through `apply_tensor_parallelism` on a fake process group, trained,
//! run forward or run under no_grad as measure_hf.py does), per phase, requested bytes of blocks >= 512 B, the
//! third iteration, 16 B per live tensor.
mod grid_common;

use serde_json::Value;
use vramscope::model::tp::TpPlan;
use vramscope::parallel::{Layout, ParallelConfig};
use vramscope::record::MemEvent;

/// Points where vramscope does not match PyTorch, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

fn num(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}")) as usize
}

fn run(p: &Value) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let mut pc = ParallelConfig::new(Layout::Tp, num(p, "tp"));
    pc.rank = num(p, "rank");
    pc.tp_plan = Some(TpPlan::Auto);
    pc.validate().unwrap();
    grid_common::dist::run_tp_rank(p, &pc, &grid_common::hf::config_of(&grid_common::dist::tp_model_point(p)))
}

#[test]
fn transformers_tp_plan_ranks_match_pytorch() {
    let doc = grid_common::fixture("dist_grid/tp_hf.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("dist_grid/tp_hf.json", points, 12, KNOWN_FAILING, run);
}

#[test]
fn the_plan_is_named_in_the_model() {
    let doc = grid_common::fixture("dist_grid/tp_hf.json");
    for p in doc["points"].as_array().unwrap() {
        let mut pc = ParallelConfig::new(Layout::Tp, num(p, "tp"));
        pc.rank = num(p, "rank");
        // No --tp-plan: the families run transformers' plan, the Llama-style models torch's.
        let cfg = pc.model_config(&grid_common::hf::config_of(&grid_common::dist::tp_model_point(p)));
        let llama_style = ["llama", "mistral", "qwen2", "qwen3"].contains(&p["config"]["model_type"].as_str().unwrap());
        let want = if llama_style { TpPlan::Torch } else { TpPlan::Auto };
        assert_eq!(cfg.tp.unwrap().plan, want, "{}", p["name"]);
    }
}
