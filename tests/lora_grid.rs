//! LoRA over the hf flavour against transformers 5.23.0 + peft 0.21.2 themselves.
//!
//! tests/fixtures/hf_grid/lora.json comes from tools/pytorch/make_lora_grid.py: transformers'
//! modeling code wrapped by `get_peft_model(model, LoraConfig(...))` (base weights frozen, fp32
//! adapters), run as the Trainer runs it (measure_hf.py) on CPU, mode-free under
//! torch.profiler(profile_memory=True); per phase, the peak of requested bytes over blocks
//! >= 512 B. Here the same loop runs on meta with the CPU dropout kernel the measurement ran.
mod grid_common;

/// Points where vramscope does not match peft, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

#[test]
fn lora_grid_matches_peft() {
    let doc = grid_common::fixture("hf_grid/lora.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!(doc["peft"], "0.21.2", "the fixture's peft release");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("lora", points, 81, KNOWN_FAILING, grid_common::hf::run_vramscope);
}
