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

/// LoRA, QLoRA and LLM.int8() + LoRA on issue 30's dense families against peft 0.21.2 and
/// bitsandbytes 0.50.2 (`make_lora_grid.py --families`): per family, peft's default targets
/// (Gemma's q_proj,v_proj; a named list on phi3 and olmo2, which peft has no default for),
/// custom lists (Phi-3's fused qkv_proj and gate_up_proj), all-linear, bf16 and fp32 weights,
/// checkpointing off, non-reentrant and reentrant, nf4 and fp4, 8-bit, as training, forward and
/// inference.
#[test]
fn lora_families_grid_matches_peft() {
    let doc = grid_common::fixture("hf_grid/lora_families.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let points = doc["points"].as_array().unwrap();
    for family in ["phi3", "olmo2", "gemma2", "gemma3_text"] {
        let ps: Vec<_> = points.iter().filter(|q| q["point"]["model_type"] == family).collect();
        assert!(ps.len() >= 12, "{family}: {} points", ps.len());
        let has = |f: &dyn Fn(&serde_json::Value) -> bool| ps.iter().any(|q| f(&q["point"]));
        assert!(has(&|p| p["load_in_4bit"] == true) && has(&|p| p["load_in_8bit"] == true) && has(&|p| p["load_in_4bit"].is_null() && p["load_in_8bit"].is_null()), "{family}: bf16, 4-bit and 8-bit");
        assert!(has(&|p| p["target_modules"] == "all-linear") && has(&|p| p["checkpoint"] == "none") && has(&|p| p["checkpoint"] == "reentrant"), "{family}");
        for kind in ["training", "forward", "inference"] {
            assert!(ps.iter().any(|q| q["profile_type"] == kind), "{family}: {kind}");
        }
    }
    grid_common::check("lora_families", points, 51, KNOWN_FAILING, grid_common::hf::run_vramscope);
}
