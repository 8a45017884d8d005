//! The hf flavour against Hugging Face transformers itself.
//!
//! tests/fixtures/hf_grid/hf.json comes from tools/pytorch/make_hf_grid.py: transformers
//! 5.23.0's own modeling code (llama, mistral, qwen2, qwen3) built from a config with random
//! weights on CPU and run as the Trainer runs it (measure_hf.py), mode-free under
//! torch.profiler(profile_memory=True); per phase, the peak of requested bytes over blocks
//! >= 512 B. Here the same loop runs on meta and a phase passes when the two peaks agree to
//! 16 B per live tensor (tests/grid_common).
mod grid_common;

/// Points where vramscope does not match transformers, each with the reason (printed with
/// the table on every run; the test fails once one of them matches).
const KNOWN_FAILING: &[(&str, &str)] = &[];

#[test]
fn hf_grid_matches_transformers() {
    let doc = grid_common::fixture("hf_grid/hf.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("hf", points, 137, KNOWN_FAILING, grid_common::hf::run_vramscope);
}
