//! `serve`'s GPU-free terms for DeepSeek-V3 (multi-head latent attention) against vLLM 0.33.0's
//! own code: `tests/fixtures/vllm_serve_mla.json`, made by `tools/vllm/serve_grid.py --mla` from
//! vLLM's parallel layers as `deepseek_v2.py` composes them (weight bytes per tensor-parallel
//! rank: the latent attention's projections, the dense first_k_dense_replace layers, the router
//! and its fp32 e_score_correction_bias, the shared experts, FusedMoE's w13/w2) and its KV cache
//! planning over `MLAAttentionSpec` layers (one latent head, whole on every rank), over shapes ×
//! TP × block size × max_model_len × available memory. The same fixture holds Qwen2-MoE and
//! Qwen3-MoE configs with dense layers among the sparse ones (`mlp_only_layers`,
//! `decoder_sparse_step`): their weight elements per rank and FullAttentionSpec plans. Every
//! number and message must match.
mod serve_common;

use serde_json::Value;
use vramscope::model::vllm_0_33 as vllm;

fn fixture() -> Value {
    serve_common::fixture("vllm_serve_mla.json")
}

#[test]
fn fixture_is_vllm_0_33_and_a_grid() {
    let doc = fixture();
    serve_common::grid_points(&doc, 60, &[("model", 4), ("tensor_parallel_size", 5), ("block_size", 3), ("max_model_len", 3), ("available_memory", 3)]);
    // Shapes with and without the low-rank query and the noaux_tc bias, and both latent widths.
    let cfgs = doc["configs"].as_object().unwrap();
    assert!(cfgs.values().any(|c| c["q_lora_rank"].is_null()) && cfgs.values().any(|c| c["q_lora_rank"].is_u64()));
    assert!(cfgs.values().any(|c| c["topk_method"] == "noaux_tc") && cfgs.values().any(|c| c["topk_method"].is_null()));
    assert!(cfgs.values().any(|c| c["kv_lora_rank"] == 256) && cfgs.values().any(|c| c["kv_lora_rank"] == 512));
    // Dense layers among sparse ones: both families, by mlp_only_layers and by decoder_sparse_step.
    for ty in ["qwen2_moe", "qwen3_moe"] {
        let of: Vec<&Value> = cfgs.values().filter(|c| c["model_type"] == ty).collect();
        assert!(of.iter().any(|c| c["mlp_only_layers"].as_array().is_some_and(|a| !a.is_empty())), "{ty}");
        assert!(of.iter().any(|c| c["decoder_sparse_step"].as_u64().is_some_and(|s| s > 1)), "{ty}");
    }
}

#[test]
fn every_point_matches_vllm() {
    let doc = fixture();
    for p in doc["points"].as_array().unwrap() {
        let c = serve_common::config(&doc, p);
        let at = format!("{p}");
        let tp = c.tensor_parallel_size;
        vllm::check_tensor_parallel(&c.model, tp).unwrap_or_else(|e| panic!("{at}: {e}"));
        let mla = vramscope::model::vllm_mla::parts(&c.model).is_some();
        if mla {
            assert_eq!(vllm::weight_bytes_per_rank(&c.model, 2, tp), p["weight_bytes_per_rank"].as_u64().unwrap(), "weights {at}");
        } else {
            assert!(c.model.hf().unwrap().moe.as_ref().unwrap().dense_layers.is_some(), "{at}");
            assert_eq!(vllm::weight_elements_per_rank(&c.model, tp), p["weight_elements_per_rank"].as_u64().unwrap(), "weights {at}");
        }
        assert_eq!(vllm::kv_heads_per_rank(&c.model, tp) as u64, p["num_kv_heads_per_rank"].as_u64().unwrap(), "kv heads {at}");
        assert_eq!(p["num_groups"], 1, "{at}");
        let plan = serve_common::check_plan(&c, p, &at);
        assert_eq!(plan.kv_cache_spec, if mla { "MLAAttentionSpec" } else { "FullAttentionSpec" }, "spec {at}");
    }
}

/// At one rank the weights are transformers' parameter count (the vocabulary is already a
/// multiple of 64; no MTP layer in either), in bf16, plus the routers' fp32 bias.
#[test]
fn one_rank_is_transformers_count() {
    let pr = vramscope::model::presets::find("DeepSeek-V3", Some(vramscope::model::Flavour::Hf)).unwrap();
    let sparse = 61 - 3;
    assert_eq!(vllm::weight_bytes_per_rank(&pr.model, 2, 1), pr.expected_params * 2 + sparse * 256 * 4);
}
