//! `serve` for mixture-of-experts configs with a sliding window against vLLM 0.33.0:
//! `tests/fixtures/vllm_serve_moe_sliding.json`, made by `tools/vllm/serve_grid.py --moe-sliding`.
//! vLLM sets CacheConfig.sliding_window from transformers' config class only when it has no
//! layer_types or every layer slides (`engine/arg_utils.py:2288-2294`), and mixtral.py,
//! qwen3_moe.py and qwen2_moe.py pass no per-layer window: Mixtral's and Qwen3-MoE's window
//! slides every layer, Qwen2-MoE's mix of layer_types leaves every layer full, and its
//! layer_types all sliding slide every layer. Weights, KV heads and every cache term must match.
mod serve_common;

use serde_json::Value;
use vramscope::model::vllm_0_33::KvSpec;

fn fixture() -> Value {
    serve_common::fixture("vllm_serve_moe_sliding.json")
}

#[test]
fn fixture_is_vllm_0_33_and_a_grid() {
    let doc = fixture();
    let pts = serve_common::grid_points(&doc, 12, &[("model", 4), ("tensor_parallel_size", 3), ("block_size", 2), ("kv_cache_dtype", 2)]);
    // Both of vLLM's outcomes: a window on every layer, and none (Qwen2-MoE's mix).
    assert!(pts.iter().any(|p| p["cache_sliding_window"].is_u64()) && pts.iter().any(|p| p["cache_sliding_window"].is_null()));
}

#[test]
fn every_point_matches_vllm() {
    let doc = fixture();
    for p in doc["points"].as_array().unwrap() {
        let c = serve_common::config(&doc, p);
        let at = format!("{} tp {} block {} {} len {}", p["model"], p["tensor_parallel_size"], p["block_size"], p["kv_cache_dtype"], p["max_model_len"]);
        let want = match p["cache_sliding_window"].as_u64() {
            Some(w) => KvSpec::SlidingWindow { window: w as usize },
            None => KvSpec::Full,
        };
        assert_eq!(c.kv_spec(), want, "spec {at}");
        serve_common::check_sharding(&c, p, &at);
        assert_eq!(p["num_groups"], 1, "{at}");
        serve_common::check_plan(&c, p, &at);
    }
}
