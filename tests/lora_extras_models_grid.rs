//! peft 0.21.2's `modules_to_save`, `bias` and `use_dora` on issue 30's models (the families
//! Phi-3, OLMo-2, Gemma 2 and Gemma 3 text; Mixtral, Qwen3-MoE, Qwen2-MoE, gpt-oss and
//! DeepSeek-V3, routing forced) against transformers 5.23.0 + peft themselves, every phase
//! byte for byte, parameter and trainable counts equal to peft's.
//!
//! tests/fixtures/hf_grid/lora_extras_models.json (`make_lora_grid.py --extras`) and
//! dora_models.json (`--models-dora`): measure_hf.py's loop on CPU, mode-free under
//! torch.profiler(profile_memory=True); per phase, the peak of requested bytes over blocks
//! >= 512 B.
mod scratch;
mod grid_common;

use serde_json::Value;
use std::collections::BTreeSet;

/// Points where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

const MODELS: [&str; 9] = ["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"];

fn run(point: &Value) -> (Vec<vramscope::record::MemEvent>, Vec<vramscope::record::MemEvent>) {
    let p = &point["point"];
    let cfg = if p.get("experts").is_some() { grid_common::moe::point_model(p) } else { grid_common::hf::config_of(p) };
    let trainable = {
        vramscope::engine::runtime::reset();
        let dtype = if p["dtype"] == "bf16" { vramscope::engine::DType::BF16 } else { vramscope::engine::DType::F32 };
        vramscope::model::Model::new_in(&cfg, vramscope::engine::Device::Meta, 42, dtype).unwrap().num_trainable_parameters()
    };
    assert_eq!(Some(trainable), point["info"]["trainable_parameters"].as_u64(), "{}: peft's trainable parameters", point["name"]);
    grid_common::hf::run_config(point, cfg)
}

fn values(points: &[Value], key: &str) -> BTreeSet<String> {
    points.iter().map(|q| q["point"][key].to_string()).collect()
}

/// What a grid claims to cover: fp32 and bf16, eager and sdpa, checkpointing off,
/// non-reentrant and reentrant, training (and forward and inference somewhere).
fn covers(what: &str, ps: &[&Value], min: usize) {
    let ps: Vec<Value> = ps.iter().map(|q| (*q).clone()).collect();
    assert!(ps.len() >= min, "{what}: {} points", ps.len());
    assert_eq!(values(&ps, "dtype").len(), 2, "{what}: fp32 and bf16");
    assert_eq!(values(&ps, "attn").len(), 2, "{what}: eager and sdpa");
    assert_eq!(values(&ps, "checkpoint").len(), 3, "{what}: checkpointing off, non-reentrant, reentrant");
    assert!(ps.iter().any(|q| q["profile_type"] == "training"), "{what}: training");
}

#[test]
fn modules_to_save_and_bias_match_peft_on_issue_30_models() {
    let doc = grid_common::fixture("hf_grid/lora_extras_models.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!(doc["peft"].as_str(), Some("0.21.2"), "the fixture's peft release");
    let points = doc["points"].as_array().unwrap();
    let saves = |q: &&Value| q["point"]["modules_to_save"].as_str().is_some_and(|m| !m.is_empty());
    let bias = |q: &&Value| q["point"]["lora_bias"].as_str().is_some_and(|b| b != "none");
    let saved: Vec<&Value> = points.iter().filter(saves).collect();
    let biased: Vec<&Value> = points.iter().filter(bias).collect();
    assert_eq!(saved.len() + biased.len(), points.len(), "each point one of the two");
    covers("modules_to_save", &saved, 12);
    covers("bias", &biased, 12);
    let kept: BTreeSet<&str> = saved.iter().filter_map(|q| q["point"]["modules_to_save"].as_str()).collect();
    assert_eq!(kept, BTreeSet::from(["embed_tokens", "lm_head", "embed_tokens,lm_head"]));
    assert!(saved.iter().any(|q| q["point"]["tied"] == true), "a tied head (Gemma's): the copy unties it");
    let kinds: BTreeSet<&str> = biased.iter().filter_map(|q| q["point"]["lora_bias"].as_str()).collect();
    assert_eq!(kinds, BTreeSet::from(["all", "lora_only"]));
    for m in MODELS {
        assert!(points.iter().any(|q| q["point"]["model_type"] == m), "{m}");
    }
    // The models with biases: gpt-oss's attention and router, Qwen2-MoE's q/k/v.
    for m in ["gpt_oss", "qwen2_moe"] {
        assert!(biased.iter().any(|q| q["point"]["model_type"] == m && q["point"]["lora_bias"] == "all"), "{m}: bias all");
        assert!(biased.iter().any(|q| q["point"]["model_type"] == m && q["point"]["lora_bias"] == "lora_only"), "{m}: lora_only");
    }
    grid_common::check("hf_grid/lora_extras_models.json", points, 32, KNOWN_FAILING, run);
}

/// peft's `bias` on the families whose configs take attention_bias (OLMo-2, Gemma 2, Gemma 3
/// text: q/k/v/o biases, left off in lora_extras_models.json), against transformers + peft:
/// hf_grid/lora_bias_families.json (`make_lora_grid.py --families-bias`), every phase byte for
/// byte, peft's trainable count (adapters and biases) equal.
#[test]
fn bias_on_the_families_attention_biases_matches_peft() {
    let doc = grid_common::fixture("hf_grid/lora_bias_families.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!(doc["peft"].as_str(), Some("0.21.2"), "the fixture's peft release");
    let points = doc["points"].as_array().unwrap();
    for m in ["olmo2", "gemma2", "gemma3_text"] {
        for b in ["all", "lora_only"] {
            assert!(points.iter().any(|q| q["point"]["model_type"] == m && q["point"]["lora_bias"] == b), "{m}: bias {b}");
        }
    }
    assert!(points.iter().all(|q| q["point"]["attention_bias"] == true), "every point has the biases");
    assert_eq!(values(points, "dtype").len(), 2, "fp32 and bf16");
    assert_eq!(values(points, "checkpoint").len(), 3, "checkpointing off, non-reentrant, reentrant");
    grid_common::check("hf_grid/lora_bias_families.json", points, 8, KNOWN_FAILING, run);
}

#[test]
fn dora_matches_peft_on_issue_30_models() {
    let doc = grid_common::fixture("hf_grid/dora_models.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!(doc["peft"].as_str(), Some("0.21.2"), "the fixture's peft release");
    let points = doc["points"].as_array().unwrap();
    assert!(points.iter().all(|q| q["point"]["use_dora"] == true), "every point is DoRA");
    let all: Vec<&Value> = points.iter().collect();
    covers("use_dora", &all, 20);
    for m in MODELS {
        assert!(points.iter().any(|q| q["point"]["model_type"] == m), "{m}");
    }
    // peft's ParamWrapper raises on use_dora: the MoE models' points adapt nn.Linear modules only.
    assert!(points.iter().all(|q| q["point"]["target_parameters"].is_null()));
    assert!(values(&all.iter().map(|q| (*q).clone()).collect::<Vec<_>>(), "lora_dropout").len() == 2, "dropout 0 and 0.05");
    for kind in ["training", "forward", "inference"] {
        assert!(points.iter().any(|q| q["profile_type"] == kind), "{kind}");
    }
    grid_common::check("hf_grid/dora_models.json", points, 20, KNOWN_FAILING, run);
}

/// `profile` runs the three options on these models (one GPU, the weights in their dtype).
#[test]
fn profile_runs_dora_modules_to_save_and_bias_on_issue_30_models() {
    let dir = scratch::dir().join(format!("vramscope-lemg-{}", std::process::id()));
    for (preset, targets) in [("Phi-3-mini", "qkv_proj"), ("Gemma-2-9B", "q_proj,v_proj"), ("gpt-oss-20b", "q_proj,v_proj"), ("Mixtral-8x7B", "q_proj,v_proj")] {
        for extra in [&["--use-dora"][..], &["--modules-to-save", "embed_tokens,lm_head"], &["--lora-bias", "all"], &["--lora-bias", "lora_only"]] {
            let mut args = vec!["--preset", preset, "--num-layers", "1", "--profile-type", "training", "--lora-r", "8", "--target-modules", targets];
            args.extend_from_slice(extra);
            let o = grid_common::moe::meta_profile(&dir, &args);
            assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
