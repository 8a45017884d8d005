//! `serve` for gpt-oss (its MXFP4 checkpoints on H100/H200) against vLLM 0.33.0's own code:
//! `tests/fixtures/vllm_serve_gpt_oss.json`, made by `tools/vllm/serve_grid.py --gpt-oss`.
//! The weights per rank: the bf16 layers as gpt_oss.py builds them from vLLM's parallel
//! layers, and the experts as vLLM's `convert_gpt_oss_weight_to_mxfp4_moe_kernel_format` leaves
//! them for the OAI Triton backend SM 9.0 picks (the vendored triton_kernels' Hopper layouts,
//! run on the meta device: derived from that source, not measured on a card). The KV cache:
//! sliding (window 128) and full layers in vLLM's groups, planned by its own code
//! (`get_kv_cache_configs`, `get_kv_cache_capacity`, the ValueError, auto-fit) over both
//! models x TP 1/2/4/8 x block size x kv-cache dtype x max_model_len x available memory.
//! Every number and message must match exactly.
mod serve_common;

use serde_json::Value;
use vramscope::model::vllm_0_33::{self as vllm, ServeConfig};
use vramscope::model::{presets, vllm_gpt_oss as gpt_oss, vllm_hybrid as hybrid, Flavour};

fn fixture() -> Value {
    serve_common::fixture("vllm_serve_gpt_oss.json")
}

/// The point's model is the preset of its name (checked against the fixture's config: the
/// serve flags take gpt-oss by preset only), with the point's engine arguments.
fn config(doc: &Value, p: &Value) -> ServeConfig {
    let name = p["model"].as_str().unwrap();
    let model = presets::find(name, Some(Flavour::Hf)).unwrap().model;
    let cfg = &doc["configs"][name];
    let (moe, parts) = gpt_oss::parts(&model).expect("a gpt-oss preset");
    let theirs = |k: &str| cfg[k].as_u64().unwrap() as usize;
    assert_eq!(
        (model.d_model, moe.intermediate, model.num_layers, model.num_heads, model.num_kv_heads, model.head_dim(), model.vocab_size, moe.experts, moe.top_k, parts.window, model.max_seq_len),
        (
            theirs("hidden_size"),
            theirs("intermediate_size"),
            theirs("num_hidden_layers"),
            theirs("num_attention_heads"),
            theirs("num_key_value_heads"),
            theirs("head_dim"),
            theirs("vocab_size"),
            theirs("num_local_experts"),
            theirs("num_experts_per_tok"),
            theirs("sliding_window"),
            theirs("max_position_embeddings")
        ),
        "{name}: the preset's shape is not the fixture's"
    );
    assert_eq!(cfg["quantization_config"]["quant_method"], "mxfp4");
    assert!(!model.tied_embeddings);
    serve_common::serve_config(model, p)
}

#[test]
fn fixture_is_vllm_0_33_and_a_grid() {
    let doc = fixture();
    let pts = serve_common::grid_points(&doc, 30, &[("model", 2), ("tensor_parallel_size", 4), ("block_size", 3), ("kv_cache_dtype", 2), ("max_model_len", 4), ("max_num_batched_tokens", 3), ("available_memory", 5)]);
    assert!(doc["notes"].as_str().unwrap().contains("not measured on a card"));
    // Lengths below the window and past it; sliding and full groups everywhere.
    assert!(pts.iter().any(|p| p["max_model_len"].as_u64().unwrap() < 128) && pts.iter().any(|p| p["max_model_len"].as_u64().unwrap() > 128));
    assert!(pts.iter().all(|p| p["num_groups"].as_u64().unwrap() == 2));
}

#[test]
fn every_point_matches_vllm() {
    let doc = fixture();
    for p in doc["points"].as_array().unwrap() {
        let c = config(&doc, p);
        let at = format!("{} tp {} block {} kv {} len {} batched {} mem {}", p["model"], p["tensor_parallel_size"], p["block_size"], p["kv_cache_dtype"], p["max_model_len"], p["max_num_batched_tokens"], p["available_memory"]);
        let tp = c.tensor_parallel_size;
        let (moe, _) = gpt_oss::parts(&c.model).unwrap();
        assert!(hybrid::is_hybrid(&c.model), "{at}");
        vllm::check_tensor_parallel(&c.model, tp).unwrap_or_else(|e| panic!("{at}: {e}"));
        // The weights, and the parts they are made of.
        let parts = &p["weight_parts"];
        assert_eq!(gpt_oss::intermediate_per_rank(moe, tp), parts["intermediate_size_per_partition"].as_u64().unwrap(), "intermediate {at}");
        let e = gpt_oss::experts_bytes_per_rank(&c.model, moe, tp);
        let ex = &parts["experts"];
        let b = |k: &str| ex[k]["bytes"].as_u64().unwrap();
        assert_eq!(
            (e.w13_weight, e.w2_weight, e.w13_weight_scale, e.w2_weight_scale, e.w13_bias, e.w2_bias),
            (b("w13_weight"), b("w2_weight"), b("w13_weight_scale"), b("w2_weight_scale"), b("w13_bias"), b("w2_bias")),
            "experts {at}"
        );
        assert_eq!(gpt_oss::bf16_layer_elements(&c.model, moe, tp), parts["bf16_elements_per_layer"].as_u64().unwrap(), "bf16 layer {at}");
        assert_eq!(vllm::weight_bytes_per_rank(&c.model, 2, tp), p["weight_bytes_per_rank"].as_u64().unwrap(), "weights {at}");
        assert_eq!(vllm::kv_heads_per_rank(&c.model, tp) as u64, p["num_kv_heads_per_rank"].as_u64().unwrap(), "kv heads {at}");
        serve_common::check_groups(&c, p, &at);
        serve_common::check_plan(&c, p, &at);
    }
}
