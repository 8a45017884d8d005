//! What the generate() grids share: a measure_generate.py point's model and generate() options.
use serde_json::Value;
use vramscope::model::hf::generation_config::{CacheImplementation, GenerateConfig};
use vramscope::model::ModelConfig;

/// The point's model: measure_hf.py's config (generate's points leave the training options
/// out; an MoE point is measure_moe.py's, `super::moe::config_of`) with the config's eos and pad
/// tokens; `p` is the point's options (`point["point"]`, or a copy at another shape).
pub fn config_of(point: &Value, p: &Value) -> ModelConfig {
    let mut p = p.clone();
    for (k, v) in [("use_cache", Value::Bool(true)), ("logits_to_keep", 0.into()), ("checkpoint", "none".into()), ("attention_mask", "none".into())] {
        p[k] = v;
    }
    let mut cfg = match (p["model_type"].as_str(), p["experts"].is_string()) {
        // gpt-oss: its config.json read as a user's (measure_moe.py's GptOssConfig).
        // (with the point's adapters and 4-bit weights: generate_models_adapters.json)
        (Some("gpt_oss" | "deepseek_v3"), _) => super::moe::point_model(&p),
        // Qwen2-MoE's window: its config.json (use_sliding_window, max_window_layers) read as a user's.
        (Some("qwen2_moe"), _) if p["sliding_window"].as_u64().is_some() => {
            let mut cfg = super::moe::read_config_of(&p);
            super::hf::apply_peft(&p, cfg.hf.as_mut().unwrap());
            cfg
        }
        (_, true) => super::moe::config_of(&p),
        _ => super::hf::config_of(&p),
    };
    let hf = cfg.hf.as_mut().unwrap();
    hf.eos_token_id = point["info"]["eos_token_id"].as_i64().into_iter().collect();
    hf.pad_token_id = point["info"]["pad_token_id"].as_i64();
    cfg
}

/// The point's generate() options (measure_generate.gen_kwargs): greedy with a DynamicCache
/// unless it names a static cache, sampling (GenerationConfig's temperature 1.0 and top_k 50
/// unless named), min_new_tokens or num_return_sequences.
pub fn generate_config_of(p: &Value, n: usize) -> GenerateConfig {
    let mut gc = GenerateConfig::greedy(n);
    if p["cache"] == "static" {
        gc.cache = CacheImplementation::Static;
    }
    gc.do_sample = p["do_sample"] == true;
    if let Some(t) = p["temperature"].as_f64() {
        gc.temperature = t;
    }
    if let Some(k) = p["top_k"].as_u64() {
        gc.top_k = k as usize;
    }
    assert!(p["top_p"].is_null(), "top_p is not modelled");
    gc.min_new_tokens = p["min_new_tokens"].as_u64().unwrap_or(0) as usize;
    gc.num_return_sequences = p["num_return_sequences"].as_u64().unwrap_or(1) as usize;
    gc.num_beams = p["num_beams"].as_u64().unwrap_or(1) as usize;
    gc
}
