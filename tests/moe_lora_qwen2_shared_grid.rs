//! LoRA on Qwen2-MoE's shared expert (its nn.Linear modules shared_expert.gate_proj, up_proj,
//! down_proj and shared_expert_gate; qwen2_moe has no transformers-5 conversion in peft 0.21.2,
//! so these names and all-linear reach them) against
//! tests/fixtures/moe_grid/lora_qwen2_moe_shared.json (`make_lora_grid.py --qwen2-moe-shared`,
//! routing forced as in moe.json), every phase byte for byte, parameter and trainable counts
//! equal to peft's; bitsandbytes 4-bit on qwen2_moe (qlora_qwen2_moe.json); and what stays refused.
mod scratch;
mod grid_common;

use serde_json::Value;
use std::collections::BTreeSet;

/// Points where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

#[test]
fn qwen2_moe_shared_expert_lora_grid_matches_peft() {
    let path = format!("{}/tests/fixtures/moe_grid/lora_qwen2_moe_shared.json", env!("CARGO_MANIFEST_DIR"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    assert_eq!(doc["peft"], "0.21.2");
    let ps = doc["points"].as_array().unwrap();
    let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
    assert_eq!(set("experts").len(), 3, "every experts implementation");
    assert_eq!(set("routing").len(), 2, "balanced and worst");
    assert_eq!(set("dtype").len(), 2, "fp32 and bf16");
    assert_eq!(set("checkpoint").len(), 3, "checkpointing off, non-reentrant, reentrant");
    assert_eq!(set("lora_r"), BTreeSet::from(["4".to_string(), "8".into(), "16".into()]));
    assert_eq!(ps.iter().map(|q| q["profile_type"].to_string()).collect::<BTreeSet<_>>().len(), 3, "training, forward, inference");
    assert!(ps.iter().any(|q| q["point"]["target_modules"] == "all-linear") && ps.iter().any(|q| q["point"]["target_modules"] == "shared_expert_gate"));
    grid_common::check("moe_lora_qwen2_moe_shared", ps, 12, KNOWN_FAILING, |point| grid_common::hf::run_config(point, grid_common::moe::config_of(&point["point"])));
}

/// bitsandbytes 4-bit on Qwen2-MoE: the attention's and the shared expert's nn.Linear modules
/// quantized (shared_expert_gate's (1, hidden) weight too), against
/// tests/fixtures/moe_grid/qlora_qwen2_moe.json (`make_lora_grid.py --qwen2-moe-4bit`).
#[test]
fn qwen2_moe_4bit_grid_matches_bitsandbytes() {
    let path = format!("{}/tests/fixtures/moe_grid/qlora_qwen2_moe.json", env!("CARGO_MANIFEST_DIR"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    assert_eq!(doc["bitsandbytes"], "0.50.2");
    let ps = doc["points"].as_array().unwrap();
    let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
    assert!(ps.iter().all(|q| q["point"]["load_in_4bit"] == true));
    assert_eq!(set("experts").len(), 3, "every experts implementation");
    assert_eq!(set("routing").len(), 2, "balanced and worst");
    assert_eq!(set("quant_type").len(), 2, "nf4 and fp4");
    assert_eq!(set("double_quant").len(), 2);
    assert_eq!(set("compute_dtype").len(), 2);
    assert_eq!(set("checkpoint").len(), 2, "prepare's reentrant and non-reentrant checkpointing");
    assert_eq!(ps.iter().map(|q| q["profile_type"].to_string()).collect::<BTreeSet<_>>().len(), 3, "training, forward, inference");
    grid_common::check("qlora_qwen2_moe", ps, 12, KNOWN_FAILING, |point| grid_common::hf::run_config(point, grid_common::moe::config_of(&point["point"])));
}

/// The CLI on a Qwen2-MoE config: all-linear (with the shared expert) runs, over 4-bit weights
/// too; LLM.int8() and the shared expert's MLP module as a target exit 2 naming the flag.
#[test]
fn qwen2_moe_shared_expert_targets_run_and_refuse_what_is_not_covered() {
    let dir = scratch::dir().join(format!("vramscope-q2s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 96,
            "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 1000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}"#,
    )
    .unwrap();
    let out = dir.join("out");
    let run = |extra: &[&str]| {
        let mut args = vec!["profile", "--config", config.to_str().unwrap(), "--device", "meta", "--context-length", "64", "--batch-size", "1", "--warmup-steps", "0", "--profile-type", "training", "--lora-r", "8", "--out-dir", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(&args).output().unwrap()
    };
    for extra in [&["--target-modules", "all-linear"][..], &["--target-modules", "all-linear", "--load-in-4bit"][..], &["--target-modules", "shared_expert_gate,down_proj"][..]] {
        let o = run(extra);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let _ = std::fs::remove_dir_all(&out);
    }
    for (extra, flag, needle) in [
        (&["--target-modules", "q_proj", "--load-in-8bit"][..], "--load-in-8bit", "not measured"),
        (&["--target-modules", "shared_expert"][..], "--target-modules", "not an nn.Linear"),
        (&["--target-modules", "all-linear", "--target-parameters", "mlp.experts.down_proj", "--load-in-4bit"][..], "--load-in-4bit", "not measured"),
    ] {
        let o = run(extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag) && err.contains(needle), "{extra:?} should name {flag} and say {needle}: {err}");
        assert!(!out.join("summary.json").exists(), "nothing written");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
