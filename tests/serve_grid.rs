//! `serve`'s GPU-free terms against vLLM 0.33.0's own code: `tests/fixtures/vllm_serve_grid.json`,
//! made by `tools/vllm/serve_grid.py` from vLLM's parallel layers (weights and KV heads per
//! tensor-parallel rank) and its KV cache planning (`get_kv_cache_groups`,
//! `get_kv_cache_configs`, `get_kv_cache_capacity`, the ValueError when max_model_len does not
//! fit, auto-fit) over models × TP × block size × kv-cache dtype × max_model_len × available
//! memory: the dense families (Llama, Mistral, Qwen2/3, Phi-3) and the mixture-of-experts ones
//! (Mixtral, Qwen3-MoE, Qwen2-MoE: FusedMoE's w13/w2 per rank, the replicated router, the
//! shared expert). Every number and message must match exactly.
mod serve_common;

use serde_json::Value;

fn fixture() -> Value {
    serve_common::fixture("vllm_serve_grid.json")
}

#[test]
fn fixture_is_vllm_0_33_and_a_grid() {
    let doc = fixture();
    let pts = serve_common::grid_points(&doc, 20, &[("model", 15), ("tensor_parallel_size", 4), ("block_size", 2), ("kv_cache_dtype", 2), ("max_model_len", 3)]);
    // Both outcomes are pinned: plans that fit and vLLM's error.
    assert!(pts.iter().any(|p| p["num_blocks"].is_u64() && p["model"].as_str().unwrap().ends_with("sliding")));
    // The families added with the MoE models: two shapes each, more than one TP size.
    for ty in ["phi3", "mixtral", "qwen3_moe", "qwen2_moe"] {
        let of: Vec<&Value> = pts.iter().filter(|p| doc["configs"][p["model"].as_str().unwrap()]["model_type"] == ty).collect();
        let shapes = of.iter().map(|p| p["model"].to_string()).collect::<std::collections::BTreeSet<_>>().len();
        let tps = of.iter().map(|p| p["tensor_parallel_size"].to_string()).collect::<std::collections::BTreeSet<_>>().len();
        assert!(shapes >= 2 && tps >= 2, "{ty}: {shapes} shapes, {tps} TP sizes");
    }
}

#[test]
fn every_point_matches_vllm() {
    let doc = fixture();
    for p in doc["points"].as_array().unwrap() {
        let c = serve_common::config(&doc, p);
        let at = format!("{p}");
        serve_common::check_sharding(&c, p, &at);
        assert_eq!(p["num_groups"], 1, "{at}");
        serve_common::check_plan(&c, p, &at);
    }
}
