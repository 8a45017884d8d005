//! One rank of a data-parallel LoRA or QLoRA job over issue 30's models against PyTorch,
//! transformers, peft and bitsandbytes themselves: tests/fixtures/dist_grid/lora_models.json
//! (`tools/pytorch/measure_dist.py --lora-models`): peft's adapters on Phi-3 (its fused qkv_proj
//! and gate_up_proj), OLMo-2, Gemma 2 and Gemma 3 text, and on the attention of Mixtral,
//! Qwen3-MoE, gpt-oss and DeepSeek-V3 (routing forced), under DistributedDataParallel over gloo
//! processes (LoRA, and bitsandbytes 4-bit QLoRA), FSDP2 `fully_shard` per decoder layer then
//! the PeftModel and ZeRO-2 (LoRA) under the fake process group; measure_hf.py's loop of the
//! point's profile type; per phase, requested bytes of blocks >= 512 B, the third iteration.
mod grid_common;

use serde_json::Value;
use std::collections::BTreeSet;
use vramscope::model::ModelConfig;

/// Points where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

const DENSE: [&str; 4] = ["phi3", "olmo2", "gemma2", "gemma3_text"];
const MOE: [&str; 4] = ["mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3"];

/// The point's model with its adapters and bitsandbytes load, as the one-GPU grids read it.
fn config_of(p: &Value) -> ModelConfig {
    match p["model_type"].as_str().unwrap() {
        "mixtral" | "qwen3_moe" => grid_common::moe::config_of(p),
        "gpt_oss" | "deepseek_v3" => {
            let mut cfg = grid_common::moe::read_config_of(p);
            grid_common::hf::apply_peft(p, cfg.hf.as_mut().unwrap());
            cfg
        }
        _ => grid_common::hf::config_of(p),
    }
}

fn run(point: &Value) -> (Vec<vramscope::record::MemEvent>, Vec<vramscope::record::MemEvent>) {
    let cfg = config_of(&point["hf"]);
    let trainable = {
        vramscope::engine::runtime::reset();
        vramscope::model::Model::new_in(&cfg, vramscope::engine::Device::Meta, 42, vramscope::engine::DType::F32).unwrap().num_trainable_parameters()
    };
    assert_eq!(Some(trainable), point["info"]["trainable_parameters"].as_u64(), "{}: peft's trainable parameters", point["name"]);
    grid_common::dist::run_rank(point, cfg)
}

fn values(points: &[Value], key: impl Fn(&Value) -> String) -> BTreeSet<String> {
    points.iter().map(key).collect()
}

/// What the grid claims to cover, for the points of `models`.
fn covers(points: &[Value], models: &[&str]) {
    let ps: Vec<Value> = points.iter().filter(|q| models.contains(&q["hf"]["model_type"].as_str().unwrap())).cloned().collect();
    assert!(ps.len() >= 12, "{models:?}: {} points", ps.len());
    for m in models {
        assert!(ps.iter().filter(|q| q["hf"]["model_type"] == *m).count() >= 2, "{m}: at least two points");
    }
    let four = |q: &Value| q["hf"]["load_in_4bit"] == true;
    let lora: Vec<Value> = ps.iter().filter(|q| !four(q)).cloned().collect();
    let qlora: Vec<Value> = ps.iter().filter(|q| four(q)).cloned().collect();
    assert_eq!(values(&lora, |q| q["layout"].to_string()), BTreeSet::from(["\"ddp\"".to_string(), "\"fsdp\"".into(), "\"zero2\"".into()]), "{models:?}: LoRA under ddp, fsdp, zero2");
    assert!(!qlora.is_empty() && qlora.iter().all(|q| q["layout"] == "ddp"), "{models:?}: QLoRA under ddp");
    assert_eq!(values(&ps, |q| q["hf"]["lora_r"].to_string()), BTreeSet::from(["4".to_string(), "8".into(), "16".into()]), "{models:?}: r");
    assert_eq!(values(&ps, |q| q["hf"]["dtype"].to_string()).len(), 2, "{models:?}: fp32 and bf16");
    assert_eq!(values(&ps, |q| q["hf"]["checkpoint"].to_string()).len(), 3, "{models:?}: checkpointing off, non-reentrant, reentrant");
    assert!(values(&ps, |q| q["hf"]["target_modules"].to_string()).len() >= 5, "{models:?}: target sets");
    assert!(values(&ps, |q| q["world_size"].to_string()).len() >= 3, "{models:?}: worlds");
    assert!(ps.iter().any(|q| q["rank"] == 0) && ps.iter().any(|q| q["rank"].as_u64().unwrap() + 1 == q["world_size"].as_u64().unwrap() && q["rank"] != 0), "{models:?}: rank 0 and a last rank");
    assert!(ps.iter().any(|q| q["world_size"] == 8), "{models:?}: 8 ranks");
}

fn points() -> Vec<Value> {
    let doc = grid_common::fixture("dist_grid/lora_models.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    doc["points"].as_array().unwrap().to_vec()
}

#[test]
fn family_lora_ranks_match_peft() {
    let all = points();
    covers(&all, &DENSE);
    let ps: Vec<Value> = all.into_iter().filter(|q| DENSE.contains(&q["hf"]["model_type"].as_str().unwrap())).collect();
    assert!(ps.iter().any(|q| q["hf"]["model_type"] == "phi3" && q["hf"]["target_modules"].as_str().is_some_and(|t| t.contains("qkv_proj"))), "phi3's fused qkv_proj");
    assert!(ps.iter().any(|q| q["hf"]["model_type"] == "phi3" && q["hf"]["target_modules"].as_str().is_some_and(|t| t.contains("gate_up_proj"))), "phi3's fused gate_up_proj");
    grid_common::check("dist_grid/lora_models.json (dense)", &ps, 12, KNOWN_FAILING, run);
}

#[test]
fn moe_lora_ranks_match_peft() {
    let all = points();
    covers(&all, &MOE);
    let ps: Vec<Value> = all.into_iter().filter(|q| MOE.contains(&q["hf"]["model_type"].as_str().unwrap())).collect();
    for q in &ps {
        // The forced routing reached the run: tokens per expert as the routing says.
        let p = &q["hf"];
        let (t, k, e) = (p["batch"].as_u64().unwrap() * p["seq"].as_u64().unwrap(), p["top_k"].as_u64().unwrap(), p["num_experts"].as_u64().unwrap());
        let per: Vec<u64> = q["info"]["tokens_per_expert"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(per.iter().sum::<u64>(), t * k, "{}", q["name"]);
        match p["routing"].as_str().unwrap() {
            "worst" => assert!(per.iter().enumerate().all(|(i, &n)| n == if (i as u64) < k { t } else { 0 }), "{}: {per:?}", q["name"]),
            _ => assert!(per.iter().all(|&n| n == t * k / e || n == t * k / e + 1), "{}: {per:?}", q["name"]),
        }
    }
    assert_eq!(values(&ps, |q| q["hf"]["experts"].to_string()).len(), 3, "every experts implementation");
    assert_eq!(values(&ps, |q| q["hf"]["routing"].to_string()).len(), 2, "balanced and worst");
    grid_common::check("dist_grid/lora_models.json (moe)", &ps, 12, KNOWN_FAILING, run);
}
