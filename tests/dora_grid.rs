//! DoRA (`LoraConfig(use_dora=True)`) over the hf flavour against transformers 5.23.0 +
//! peft 0.21.2 (+ bitsandbytes 0.50.2 for the 4-bit points).
//!
//! tests/fixtures/hf_grid/dora.json comes from `tools/pytorch/make_lora_grid.py --dora`: the
//! models of lora.json and qlora.json wrapped with `use_dora=True`, run as the Trainer runs them
//! (measure_hf.py) on CPU, mode-free under torch.profiler(profile_memory=True); per phase, the
//! peak of requested bytes over blocks >= 512 B. Here the same loop runs on meta with the CPU
//! dropout kernel and bitsandbytes' CPU `gemm_4bit` the measurement ran.
mod grid_common;

/// Points where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

#[test]
fn dora_grid_matches_peft() {
    let doc = grid_common::fixture("hf_grid/dora.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let points = doc["points"].as_array().unwrap();
    assert!(points.iter().all(|p| p["point"]["use_dora"] == true), "every point is DoRA");
    grid_common::check("dora", points, 32, KNOWN_FAILING, grid_common::hf::run_vramscope);
}

/// tests/fixtures/hf_grid/dora_fp32.json (`make_lora_grid.py --dora-fp32`): DoRA over fp32
/// weights on the llama family, which dora.json (bf16) leaves out: every phase byte for byte.
#[test]
fn dora_over_fp32_weights_matches_peft() {
    let doc = grid_common::fixture("hf_grid/dora_fp32.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    assert!(points.iter().all(|p| p["point"]["use_dora"] == true && p["point"]["dtype"] == "fp32"), "every point is fp32 DoRA");
    let of = |k: &str| points.iter().map(|p| p["point"][k].to_string()).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(of("model_type").len(), 4, "the llama family");
    assert_eq!(of("checkpoint").len(), 3, "checkpointing off, non-reentrant and reentrant");
    assert_eq!(of("lora_dropout").len(), 2, "dropout 0 and 0.05");
    grid_common::check("dora_fp32", points, 8, KNOWN_FAILING, grid_common::hf::run_vramscope);
}
