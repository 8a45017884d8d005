//! QLoRA over the hf flavour against transformers 5.23.0 + peft 0.21.2 + bitsandbytes 0.50.2.
//!
//! tests/fixtures/hf_grid/qlora.json comes from `tools/pytorch/make_lora_grid.py --qlora`: a random
//! model saved and reloaded by `from_pretrained(quantization_config=BitsAndBytesConfig(
//! load_in_4bit=True, ...))`, `prepare_model_for_kbit_training`, `get_peft_model`, run as the
//! Trainer runs it (measure_hf.py) on CPU, mode-free under torch.profiler(profile_memory=True);
//! per phase, the peak of requested bytes over blocks >= 512 B. Here the same loop runs on meta
//! with bitsandbytes' CPU kernels (`gemm_4bit`'s default implementation, CPU dropout).
mod grid_common;

/// Points where vramscope does not match, each with the reason (checked on every run: the
/// test fails once one of them matches).
const KNOWN_FAILING: &[(&str, &str)] = &[];

#[test]
fn qlora_grid_matches_bitsandbytes_and_peft() {
    let doc = grid_common::fixture("hf_grid/qlora.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("qlora", points, 59, KNOWN_FAILING, grid_common::hf::run_vramscope);
}

/// `bnb_4bit_quant_storage` bf16/fp16/fp32 on one device (tests/fixtures/hf_grid/qlora_storage.json,
/// `make_lora_grid.py --quant-storage`): the same packed bytes viewed as a float type.
#[test]
fn qlora_quant_storage_matches_bitsandbytes() {
    let doc = grid_common::fixture("hf_grid/qlora_storage.json");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("qlora_storage", points, 5, &[], grid_common::hf::run_vramscope);
}
