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
