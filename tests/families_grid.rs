//! The dense families of issue 30 (Phi-3, OLMo-2, Gemma 2, Gemma 3 text) against Hugging Face
//! transformers itself.
//!
//! tests/fixtures/hf_grid/<family>.json come from tools/pytorch/make_family_grid.py:
//! transformers 5.23.0's own modeling code built from a config with random weights on CPU and
//! run as the Trainer runs it (measure_hf.py), mode-free under
//! torch.profiler(profile_memory=True); per phase, the peak of requested bytes over blocks of
//! 512 B or more. Here the same loop runs on meta (tests/grid_common/hf.rs, as
//! tests/hf_grid.rs) and a phase passes when the two peaks agree to 16 B per live tensor.
mod grid_common;

fn family(name: &str, min_points: usize) {
    let doc = grid_common::fixture(&format!("hf_grid/{name}.json"));
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    assert!(points.iter().all(|p| p["point"]["model_type"] == name), "{name}.json holds only {name} points");
    grid_common::check(name, points, min_points, &[], grid_common::hf::run_vramscope);
}

#[test]
fn phi3_grid_matches_transformers() {
    family("phi3", 42);
}

#[test]
fn olmo2_grid_matches_transformers() {
    family("olmo2", 36);
}

#[test]
fn gemma2_grid_matches_transformers() {
    family("gemma2", 42);
}

#[test]
fn gemma3_text_grid_matches_transformers() {
    family("gemma3_text", 45);
}

/// Mistral's sliding window below, at and above S (make_family_grid.py --family sliding_window):
/// at S, sdpa builds the mask (transformers skips it only while the keys are fewer than the window).
#[test]
fn mistral_sliding_window_edges_match_transformers() {
    let doc = grid_common::fixture("hf_grid/sliding_window.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    assert!(points.iter().all(|p| p["point"]["model_type"] == "mistral" && p["point"]["sliding_window"].is_u64()));
    grid_common::check("sliding_window", points, 36, &[], grid_common::hf::run_vramscope);
}
