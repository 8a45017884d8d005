//! What the `serve` grids share: reading a fixture written by `tools/vllm/serve_grid.py`, a
//! point's ServeConfig as `serve --config` builds it, and the KV cache plan's checks against
//! vLLM 0.33.0's own numbers (block bytes, per-request bytes, the error, blocks, tokens,
//! concurrency, auto-fit).
use serde_json::Value;
use vramscope::model::vllm_0_33::{self as vllm, ServeConfig, ServePlan};

/// The fixture's points, after the checks every serve grid makes: vLLM 0.33.0's release, at
/// least `min` points, at least `n` distinct values of each `(key, n)`, and both outcomes (plans
/// that fit and vLLM's error).
pub fn grid_points<'a>(doc: &'a Value, min: usize, spread: &[(&str, usize)]) -> &'a [Value] {
    assert_eq!(doc["vllm_version"], vllm::VLLM_VERSION);
    let pts = doc["points"].as_array().unwrap();
    assert!(pts.len() >= min, "{} points", pts.len());
    let distinct = |k: &str| pts.iter().map(|p| p[k].to_string()).collect::<std::collections::BTreeSet<_>>().len();
    for &(k, n) in spread {
        assert!(distinct(k) >= n, "{k}: only {} values", distinct(k));
    }
    assert!(pts.iter().any(|p| p["error"].is_null()) && pts.iter().any(|p| p["error"].is_string()));
    pts
}

pub fn fixture(file: &str) -> Value {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("read the fixture")).expect("parse the fixture")
}

/// The point's model (its config under `configs`, a dense/sparse MoE mix split off before the
/// parse as `serve --config` does) and its engine arguments.
#[allow(dead_code)] // tests/serve_gpt_oss_grid.rs builds its points from the presets
pub fn config(doc: &Value, p: &Value) -> ServeConfig {
    let name = p["model"].as_str().unwrap();
    let (text, dense) = vramscope::options::serve::split_dense_layers(&doc["configs"][name].to_string()).unwrap();
    let mut model = vramscope::model::hf::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}")).config;
    if let Some(moe) = model.hf.as_mut().and_then(|h| h.moe.as_mut()) {
        moe.dense_layers = dense;
    }
    serve_config(model, p)
}

/// `model` under the point's engine arguments (bf16 weights, the cache dtype, lengths, token
/// budget, block and TP sizes; vLLM's defaults for the rest).
pub fn serve_config(model: vramscope::model::ModelConfig, p: &Value) -> ServeConfig {
    ServeConfig {
        model,
        weight_bytes: 2,
        kv_bytes: if p["kv_cache_dtype"] == "fp8" { 1 } else { 2 },
        total_memory: 0,
        gpu_memory_utilization: 0.92,
        max_model_len: p["max_model_len"].as_u64().unwrap() as usize,
        max_num_seqs: 256,
        max_num_batched_tokens: p["max_num_batched_tokens"].as_u64().unwrap() as usize,
        block_size: p["block_size"].as_u64().unwrap() as usize,
        tensor_parallel_size: p["tensor_parallel_size"].as_u64().unwrap() as usize,
    }
}

/// vLLM's sharding of the point's model at its tensor-parallel size: the size is allowed, and
/// each rank's weight elements and KV heads are vLLM's.
#[allow(dead_code)] // the MLA and gpt-oss grids check weight bytes instead
pub fn check_sharding(c: &ServeConfig, p: &Value, at: &str) {
    let tp = c.tensor_parallel_size;
    vllm::check_tensor_parallel(&c.model, tp).unwrap_or_else(|e| panic!("{at}: {e}"));
    assert_eq!(vllm::weight_elements_per_rank(&c.model, tp), p["weight_elements_per_rank"].as_u64().unwrap(), "weights {at}");
    assert_eq!(vllm::kv_heads_per_rank(&c.model, tp) as u64, p["num_kv_heads_per_rank"].as_u64().unwrap(), "kv heads {at}");
}

/// The plan at the point's available memory, every number and message checked against
/// vLLM's (a hybrid model's page list holds its one page size).
pub fn check_plan(c: &ServeConfig, p: &Value, at: &str) -> ServePlan {
    let plan = vllm::plan_kv_cache(c, p["available_memory"].as_u64().unwrap() as i128);
    let pages: Vec<u64> = match p["page_bytes_per_layer"].as_array() {
        Some(list) => list.iter().map(|x| x.as_u64().unwrap()).collect(),
        None => vec![p["page_bytes_per_layer"].as_u64().unwrap()],
    };
    assert_eq!(vec![plan.page_bytes_per_layer], pages, "page {at}");
    assert_eq!(plan.bytes_per_block, p["bytes_per_block"].as_u64().unwrap(), "block {at}");
    // max_memory_usage_bytes: the layers' pages for one request of max_model_len.
    assert_eq!(plan.blocks_per_request * plan.bytes_per_block, p["max_memory_usage_bytes"].as_u64().unwrap(), "per request {at}");
    let err = vllm::does_not_fit(c, &plan);
    assert_eq!(err.as_deref(), p["error"].as_str(), "error {at}");
    if err.is_none() {
        assert_eq!(plan.num_blocks, p["num_blocks"].as_u64().unwrap(), "blocks {at}");
        assert_eq!(plan.kv_cache_tokens, p["kv_cache_tokens"].as_u64().unwrap(), "tokens {at}");
        // Python's repr, parsed exactly (serde_json's float parse can be a bit off).
        let exact: f64 = p["max_concurrency_repr"].as_str().unwrap().parse().unwrap();
        assert_eq!(plan.max_concurrency, exact, "concurrency {at}");
    }
    match vllm::auto_fit_max_model_len(c, &plan) {
        Ok(n) => assert_eq!(Some(n), p["auto_fit_max_model_len"].as_u64(), "auto-fit {at}"),
        Err(e) => assert_eq!(Some(e.as_str()), p["auto_fit_error"].as_str(), "auto-fit {at}"),
    }
    plan
}

/// A hybrid model's KV cache groups against vLLM's: their count, each one's window and layers in
/// its order, every spec at --block-size.
#[allow(dead_code)] // only the hybrid grids (Gemma, gpt-oss) have groups
pub fn check_groups(c: &ServeConfig, p: &Value, at: &str) {
    let groups = vramscope::model::vllm_hybrid::kv_cache_groups(&c.model);
    let theirs = p["groups"].as_array().unwrap();
    assert_eq!(groups.len() as u64, p["num_groups"].as_u64().unwrap(), "groups {at}");
    for (g, t) in groups.iter().zip(theirs) {
        assert_eq!(g.window.map(|w| w as u64), t["sliding_window"].as_u64(), "group window {at}");
        let layers: Vec<usize> = t["layers"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        assert_eq!(g.layers, layers, "group layers {at}");
        assert_eq!(t["block_size"].as_u64().unwrap(), c.block_size as u64, "group block size {at}");
    }
}
