//! LoRA over LLM.int8() (bitsandbytes' 8-bit `Linear8bitLt`) on the hf flavour against
//! transformers 5.23.0 + peft 0.21.2 + bitsandbytes 0.50.2.
//!
//! tests/fixtures/hf_grid/int8.json comes from `tools/pytorch/make_lora_grid.py --int8`: a random
//! model saved and reloaded by `from_pretrained(quantization_config=BitsAndBytesConfig(
//! load_in_8bit=True, llm_int8_threshold=...))`, `prepare_model_for_kbit_training`,
//! `get_peft_model` (or no LoRA, for inference), run as the Trainer runs it (measure_hf.py) on
//! CPU, mode-free under torch.profiler(profile_memory=True); per phase, the peak of requested
//! bytes over blocks >= 512 B. The CPU run takes CUDA's `MatMul8bitLt` also in training (the
//! measurement patches `bnb.matmul`), and the default int8 kernels' working tensors are left
//! out (CPU-only scratch rule 8): here the same loop runs on meta with the kernels' outputs
//! only. Every point recorded no outlier column (vramscope's rule).
mod grid_common;

/// Points where vramscope does not match, each with the reason (checked on every run: the
/// test fails once one of them matches).
const KNOWN_FAILING: &[(&str, &str)] = &[];

#[test]
fn int8_grid_matches_bitsandbytes_and_peft() {
    let doc = grid_common::fixture("hf_grid/int8.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let points = doc["points"].as_array().unwrap();
    for p in points {
        assert_eq!(p["info"]["int8_outlier_columns"], 0, "{}: vramscope counts no outlier column", p["name"]);
    }
    grid_common::check("int8", points, 28, KNOWN_FAILING, grid_common::hf::run_vramscope);
}
