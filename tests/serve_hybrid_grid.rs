//! `serve` for the hybrid-attention models (Gemma 2, Gemma 3 text) against vLLM 0.33.0's own
//! code: `tests/fixtures/vllm_serve_hybrid.json`, made by `tools/vllm/serve_grid.py --hybrid`
//! from vLLM's parallel layers (weights and KV heads per rank), `Attention.get_kv_cache_spec`'s
//! sliding block size for FlashAttention, and its KV cache planning (`get_kv_cache_groups`:
//! the sliding and full layers' groups; `get_kv_cache_configs`, `get_kv_cache_capacity`, the
//! ValueError, auto-fit) over five shapes × TP × block size × kv-cache dtype × max_model_len
//! (below the window, above it, the derived length) × available memory. Every number and
//! message must match exactly.
use serde_json::Value;
use vramscope::model::vllm_0_33::{self as vllm, ServeConfig};
use vramscope::model::vllm_hybrid as hybrid;

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/vllm_serve_hybrid.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read the fixture")).expect("parse the fixture")
}

fn config(doc: &Value, p: &Value) -> ServeConfig {
    let name = p["model"].as_str().unwrap();
    let text = doc["configs"][name].to_string();
    let model = vramscope::model::hf::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}")).config;
    let kv = if p["kv_cache_dtype"] == "fp8" { 1 } else { 2 };
    ServeConfig {
        model,
        weight_bytes: 2,
        kv_bytes: kv,
        total_memory: 0,
        gpu_memory_utilization: 0.92,
        max_model_len: p["max_model_len"].as_u64().unwrap() as usize,
        max_num_seqs: 256,
        max_num_batched_tokens: p["max_num_batched_tokens"].as_u64().unwrap() as usize,
        block_size: p["block_size"].as_u64().unwrap() as usize,
        tensor_parallel_size: p["tensor_parallel_size"].as_u64().unwrap() as usize,
    }
}

#[test]
fn fixture_is_vllm_0_33_and_a_grid() {
    let doc = fixture();
    assert_eq!(doc["vllm_version"], vllm::VLLM_VERSION);
    let pts = doc["points"].as_array().unwrap();
    assert!(pts.len() >= 60, "{} points", pts.len());
    let distinct = |k: &str| pts.iter().map(|p| p[k].to_string()).collect::<std::collections::BTreeSet<_>>().len();
    for (k, n) in [("model", 5), ("tensor_parallel_size", 4), ("block_size", 3), ("kv_cache_dtype", 2), ("max_model_len", 9), ("max_num_batched_tokens", 3)] {
        assert!(distinct(k) >= n, "{k}: only {} values", distinct(k));
    }
    assert!(pts.iter().any(|p| p["error"].is_null()) && pts.iter().any(|p| p["error"].is_string()));
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
        let c = config(&doc, p);
        let at = format!("{} tp {} block {} kv {} len {} batched {} mem {}", p["model"], p["tensor_parallel_size"], p["block_size"], p["kv_cache_dtype"], p["max_model_len"], p["max_num_batched_tokens"], p["available_memory"]);
        let tp = c.tensor_parallel_size;
        assert!(hybrid::is_hybrid(&c.model), "{at}");
        vllm::check_tensor_parallel(&c.model, tp).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(vllm::weight_elements_per_rank(&c.model, tp), p["weight_elements_per_rank"].as_u64().unwrap(), "weights {at}");
        assert_eq!(vllm::kv_heads_per_rank(&c.model, tp) as u64, p["num_kv_heads_per_rank"].as_u64().unwrap(), "kv heads {at}");
        // vLLM's groups: each one's window and layers, in its order; every spec at --block-size.
        let groups = hybrid::kv_cache_groups(&c.model);
        let theirs = p["groups"].as_array().unwrap();
        assert_eq!(groups.len() as u64, p["num_groups"].as_u64().unwrap(), "groups {at}");
        for (g, t) in groups.iter().zip(theirs) {
            assert_eq!(g.window.map(|w| w as u64), t["sliding_window"].as_u64(), "group window {at}");
            let layers: Vec<usize> = t["layers"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
            assert_eq!(g.layers, layers, "group layers {at}");
            assert_eq!(t["block_size"].as_u64().unwrap(), c.block_size as u64, "group block size {at}");
        }
        let available = p["available_memory"].as_u64().unwrap() as i128;
        let plan = vllm::plan_kv_cache(&c, available);
        assert_eq!(vec![plan.page_bytes_per_layer], p["page_bytes_per_layer"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect::<Vec<_>>(), "page {at}");
        assert_eq!(plan.bytes_per_block, p["bytes_per_block"].as_u64().unwrap(), "block {at}");
        assert_eq!(plan.blocks_per_request * plan.bytes_per_block, p["max_memory_usage_bytes"].as_u64().unwrap(), "per request {at}");
        let err = vllm::does_not_fit(&c, &plan);
        assert_eq!(err.as_deref(), p["error"].as_str(), "error {at}");
        if err.is_none() {
            assert_eq!(plan.num_blocks, p["num_blocks"].as_u64().unwrap(), "blocks {at}");
            assert_eq!(plan.kv_cache_tokens, p["kv_cache_tokens"].as_u64().unwrap(), "tokens {at}");
            let exact: f64 = p["max_concurrency_repr"].as_str().unwrap().parse().unwrap();
            assert_eq!(plan.max_concurrency, exact, "concurrency {at}");
        }
        match vllm::auto_fit_max_model_len(&c, &plan) {
            Ok(n) => assert_eq!(Some(n), p["auto_fit_max_model_len"].as_u64(), "auto-fit {at}"),
            Err(e) => assert_eq!(Some(e.as_str()), p["auto_fit_error"].as_str(), "auto-fit {at}"),
        }
    }
}
