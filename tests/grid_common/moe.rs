//! An MoE grid point's model (tools/pytorch/measure_moe.py's config): the dense family the MoE one
//! extends (Mixtral's attention is Mistral's, Qwen3-MoE's Qwen3's, Qwen2-MoE's Qwen2's) with the
//! point's experts, routing and experts implementation.
use serde_json::{json, Map, Value};
use vramscope::model::hf::moe::{ExpertsImplementation, MoeConfig, MoeFamily, Routing};
use vramscope::model::ModelConfig;

pub fn config_of(p: &Value) -> ModelConfig {
    let (qwen, qwen2) = (p["model_type"] == "qwen3_moe", p["model_type"] == "qwen2_moe");
    let mut dense = p.clone();
    dense["model_type"] = json!(if qwen { "qwen3" } else if qwen2 { "qwen2" } else { "mistral" });
    // peft's options once the experts are set (its conversion and target_parameters are per family).
    dense["lora_r"] = Value::Null;
    let mut cfg = super::hf::config_of(&dense);
    let hf = cfg.hf.as_mut().unwrap();
    hf.moe = Some(MoeConfig {
        family: if qwen { MoeFamily::Qwen3Moe } else if qwen2 { MoeFamily::Qwen2Moe } else { MoeFamily::Mixtral },
        experts: super::hf::num(p, "num_experts"),
        top_k: super::hf::num(p, "top_k"),
        intermediate: super::hf::num(p, "intermediate_size"),
        // measure_moe.py: Qwen3-MoE with norm_topk_prob true, Qwen2-MoE with its default false.
        norm_topk_prob: !qwen2,
        implementation: ExpertsImplementation::parse(p["experts"].as_str().unwrap()).unwrap(),
        routing: if p["routing"] == "worst" { Routing::Worst } else { Routing::Balanced },
        shared_intermediate: p["shared_intermediate_size"].as_u64().unwrap_or(0) as usize,
        gpt_oss: None,
        // make_aux_loss_grid.py's points: output_router_logits with their coefficient.
        output_router_logits: p["output_router_logits"] == true,
        router_aux_loss_coef: p["router_aux_loss_coef"].as_f64().unwrap_or(vramscope::model::hf::moe::ROUTER_AUX_LOSS_COEF),
        dense_layers: None,
        deepseek: None,
    });
    super::hf::apply_peft(p, hf);
    cfg
}

/// measure_moe.py's GptOssConfig of a grid point, as config.json fields.
pub fn gpt_oss_point_config(p: &Value) -> Map<String, Value> {
    let c = json!({
        "model_type": "gpt_oss", "hidden_size": p["hidden_size"], "intermediate_size": p["intermediate_size"],
        "num_hidden_layers": p["num_layers"], "num_attention_heads": p["num_heads"], "num_key_value_heads": p["num_kv_heads"],
        "head_dim": p["head_dim"], "vocab_size": p["vocab_size"], "tie_word_embeddings": p["tied"],
        "num_local_experts": p["num_experts"], "num_experts_per_tok": p["top_k"], "sliding_window": p["sliding_window"],
        "max_position_embeddings": p["max_position_embeddings"], "rms_norm_eps": 1e-6, "use_cache": p["use_cache"],
        "output_router_logits": p["output_router_logits"], "router_aux_loss_coef": p["router_aux_loss_coef"],
    });
    c.as_object().unwrap().clone()
}

/// measure_moe.py's DeepseekV3Config of a grid point, as config.json fields.
pub fn deepseek_point_config(p: &Value) -> Value {
    let mut c = json!({
        "model_type": "deepseek_v3", "hidden_size": p["hidden_size"], "intermediate_size": p["dense_intermediate_size"],
        "moe_intermediate_size": p["intermediate_size"], "num_hidden_layers": p["num_layers"],
        "num_attention_heads": p["num_heads"], "num_key_value_heads": p["num_heads"], "vocab_size": p["vocab_size"],
        "tie_word_embeddings": p["tied"], "n_routed_experts": p["num_experts"], "num_experts_per_tok": p["top_k"],
        "n_group": p["n_group"], "topk_group": p["topk_group"], "first_k_dense_replace": p["first_k_dense_replace"],
        "n_shared_experts": p["n_shared_experts"], "q_lora_rank": p["q_lora_rank"], "kv_lora_rank": p["kv_lora_rank"],
        "qk_nope_head_dim": p["qk_nope_head_dim"], "qk_rope_head_dim": p["qk_rope_head_dim"], "v_head_dim": p["v_head_dim"],
        "rope_interleave": p["rope_interleave"], "max_position_embeddings": p["max_position_embeddings"],
        "rms_norm_eps": 1e-6, "use_cache": p["use_cache"], "routed_scaling_factor": 2.5,
    });
    if p["yarn_factor"].as_f64() > Some(0.0) {
        c["rope_parameters"] = json!({"rope_type": "yarn", "rope_theta": 10000.0, "factor": p["yarn_factor"],
            "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 1024});
    }
    c
}

/// measure_moe.py's Qwen2MoeConfig of a grid point, as config.json fields (its window:
/// use_sliding_window with the point's sliding_window and max_window_layers).
pub fn qwen2_moe_point_config(p: &Value) -> Map<String, Value> {
    let mut c = json!({
        "model_type": "qwen2_moe", "hidden_size": p["hidden_size"], "intermediate_size": p["intermediate_size"],
        "moe_intermediate_size": p["intermediate_size"], "shared_expert_intermediate_size": p["shared_intermediate_size"],
        "num_hidden_layers": p["num_layers"], "num_attention_heads": p["num_heads"], "num_key_value_heads": p["num_kv_heads"],
        "vocab_size": p["vocab_size"], "tie_word_embeddings": p["tied"], "num_experts": p["num_experts"],
        "num_experts_per_tok": p["top_k"], "norm_topk_prob": false, "max_position_embeddings": p["max_position_embeddings"],
        "rms_norm_eps": 1e-6, "use_cache": p["use_cache"],
    });
    if p["sliding_window"].as_u64().is_some() {
        c["use_sliding_window"] = json!(true);
        c["sliding_window"] = p["sliding_window"].clone();
        c["max_window_layers"] = p["max_window_layers"].clone();
    }
    c.as_object().unwrap().clone()
}

/// A gpt_oss, deepseek_v3 or qwen2_moe point's model, read by vramscope's config reader, with
/// the point's checkpointing, attention, experts implementation, routing and adapters.
pub fn read_config_of(p: &Value) -> ModelConfig {
    let mut cfg = if p["model_type"] == "gpt_oss" {
        vramscope::model::hf::parse(&Value::Object(gpt_oss_point_config(p)).to_string()).unwrap().config
    } else if p["model_type"] == "qwen2_moe" {
        vramscope::model::hf::parse(&Value::Object(qwen2_moe_point_config(p)).to_string()).unwrap().config
    } else {
        vramscope::model::hf::deepseek_v3::parse(deepseek_point_config(p).as_object().unwrap()).unwrap().config
    };
    if p["checkpoint"] != "none" {
        cfg.checkpoint = vramscope::model::Checkpoint::Every(1);
    }
    let hf = cfg.hf.as_mut().unwrap();
    hf.reentrant = p["checkpoint"] == "reentrant";
    hf.attention_mask = p["attention_mask"] == "ones";
    hf.attn_implementation = vramscope::model::hf::AttnImplementation::parse(p["attn"].as_str().unwrap()).unwrap();
    hf.sdpa_backend = vramscope::model::hf::SdpaBackend::CpuFlash;
    hf.cpu_run = true;
    let m = hf.moe.as_mut().unwrap();
    m.implementation = ExpertsImplementation::parse(p["experts"].as_str().unwrap()).unwrap();
    m.routing = if p["routing"] == "worst" { Routing::Worst } else { Routing::Balanced };
    cfg
}

/// A point's model: gpt_oss and deepseek_v3 read by vramscope's config reader
/// ([`read_config_of`]) with the point's adapters (a no-op without `lora_r`), mixtral,
/// qwen3_moe and qwen2_moe built by [`config_of`].
#[allow(dead_code)] // (not every grid that includes grid_common has these models)
pub fn point_model(p: &Value) -> ModelConfig {
    if matches!(p["model_type"].as_str(), Some("gpt_oss" | "deepseek_v3")) {
        let mut cfg = read_config_of(p);
        super::hf::apply_peft(p, cfg.hf.as_mut().unwrap());
        cfg
    } else {
        config_of(p)
    }
}

/// `vramscope profile` on meta at B 1, S 64, no warm-up step, writing into `dir`, plus `extra`
/// (the MoE LoRA tests' CLI checks: a preset's adapters run or are refused).
#[allow(dead_code)] // (not every grid that includes grid_common runs the CLI)
pub fn meta_profile(dir: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["profile", "--device", "meta", "--context-length", "64", "--batch-size", "1", "--warmup-steps", "0", "--out-dir", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(&args).output().unwrap()
}
