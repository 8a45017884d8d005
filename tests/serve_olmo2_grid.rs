//! `serve` for OLMo-2 against vLLM 0.33.0's own code: `tests/fixtures/vllm_serve_olmo2.json`,
//! made by `tools/vllm/serve_grid.py --olmo2`, which builds vLLM's Transformers modeling backend
//! (`TransformersForCausalLM`, the class vLLM's registry gives Olmo2ForCausalLM) on the meta
//! device at each tensor-parallel size and plans the KV cache over the Attention layers it makes.
//! Three shapes (OLMo-2-1124-7B's config.json, a 32B shape with grouped KV heads, a small one with
//! tied embeddings and a padded vocabulary) × TP × block size × kv-cache dtype × max_model_len ×
//! available memory; every number and message must match exactly.
mod serve_common;

use serde_json::Value;

fn fixture() -> Value {
    serve_common::fixture("vllm_serve_olmo2.json")
}

#[test]
fn fixture_is_vllm_0_33_and_a_grid() {
    let doc = fixture();
    let pts = serve_common::grid_points(&doc, 20, &[("model", 3), ("tensor_parallel_size", 4), ("block_size", 2), ("kv_cache_dtype", 2), ("max_model_len", 4)]);
    for p in pts {
        assert_eq!(doc["configs"][p["model"].as_str().unwrap()]["model_type"], "olmo2");
        // The backend fused q/k/v and gate/up into vLLM's parallel layers, and kept q/k norms whole.
        let l = &p["layer0_shapes"];
        assert!(l["self_attn.qkv_proj.weight"].is_array() && l["mlp.gate_up_proj.weight"].is_array(), "{l}");
    }
}

#[test]
fn every_point_matches_vllm() {
    let doc = fixture();
    for p in doc["points"].as_array().unwrap() {
        let c = serve_common::config(&doc, p);
        let at = format!("{} tp {} block {} {} len {}", p["model"], p["tensor_parallel_size"], p["block_size"], p["kv_cache_dtype"], p["max_model_len"]);
        assert_eq!(c.model.head_dim() as u64, p["head_size"].as_u64().unwrap(), "head size {at}");
        serve_common::check_sharding(&c, p, &at);
        assert_eq!(p["num_groups"], 1, "{at}");
        serve_common::check_plan(&c, p, &at);
    }
}
