//! `serve` for the hybrid-attention models (Gemma 2, Gemma 3 text) against vLLM 0.33.0's own
//! code: `tests/fixtures/vllm_serve_hybrid.json`, made by `tools/vllm/serve_grid.py --hybrid`
//! from vLLM's parallel layers (weights and KV heads per rank), `Attention.get_kv_cache_spec`'s
//! sliding block size for FlashAttention, and its KV cache planning (`get_kv_cache_groups`:
//! the sliding and full layers' groups; `get_kv_cache_configs`, `get_kv_cache_capacity`, the
//! ValueError, auto-fit) over five shapes × TP × block size × kv-cache dtype × max_model_len
//! (below the window, above it, the derived length) × available memory. Every number and
//! message must match exactly.
mod serve_common;

use serde_json::Value;
use vramscope::model::vllm_hybrid as hybrid;

fn fixture() -> Value {
    serve_common::fixture("vllm_serve_hybrid.json")
}

#[test]
fn fixture_is_vllm_0_33_and_a_grid() {
    let doc = fixture();
    let pts = serve_common::grid_points(&doc, 60, &[("model", 5), ("tensor_parallel_size", 4), ("block_size", 3), ("kv_cache_dtype", 2), ("max_model_len", 9), ("max_num_batched_tokens", 3)]);
    // Both families, with max_model_len below and above the window, and several groups.
    for ty in ["gemma2", "gemma3_text"] {
        let of: Vec<&Value> = pts.iter().filter(|p| doc["configs"][p["model"].as_str().unwrap()]["model_type"] == ty).collect();
        let window = |p: &Value| doc["configs"][p["model"].as_str().unwrap()]["sliding_window"].as_u64().unwrap();
        assert!(of.iter().any(|p| p["max_model_len"].as_u64().unwrap() < window(p)), "{ty}: no length below the window");
        assert!(of.iter().any(|p| p["max_model_len"].as_u64().unwrap() > window(p)), "{ty}: no length above the window");
        assert!(of.iter().all(|p| p["num_groups"].as_u64().unwrap() >= 2), "{ty}: a single group");
    }
}

#[test]
fn every_point_matches_vllm() {
    let doc = fixture();
    for p in doc["points"].as_array().unwrap() {
        let c = serve_common::config(&doc, p);
        let at = format!("{} tp {} block {} kv {} len {} batched {} mem {}", p["model"], p["tensor_parallel_size"], p["block_size"], p["kv_cache_dtype"], p["max_model_len"], p["max_num_batched_tokens"], p["available_memory"]);
        assert!(hybrid::is_hybrid(&c.model), "{at}");
        serve_common::check_sharding(&c, p, &at);
        serve_common::check_groups(&c, p, &at);
        serve_common::check_plan(&c, p, &at);
    }
}
