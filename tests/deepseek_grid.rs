//! DeepSeek-V3 (`model_type` deepseek_v3) against transformers 5.23 (issue 30).
//!
//! What is exact so far: the config reading and the parameter counts (total and active per
//! token) equal transformers' meta build of DeepSeek-V3 (671B; its config.json as the Hub gives
//! it is tests/fixtures/hf_models/DeepSeek-V3) and of small configs
//! (tests/fixtures/moe_grid/deepseek_v3_meta_params.json, tools/pytorch/moe_meta_params.py
//! --deepseek). The forward (multi-head latent attention, the sigmoid group-limited router) is
//! not modelled: a deepseek_v3 config exits 2, naming the model type and its counts, and writes
//! nothing.
use serde_json::Value;
use std::process::Command;
use vramscope::model::hf::deepseek_v3::DeepseekV3Shape;
use vramscope::model::hf::moe::MoeCounts;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(rel: &str) -> Value {
    let path = root().join("tests/fixtures").join(rel);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

#[test]
fn parameter_counts_equal_transformers_meta_build() {
    let doc = fixture("moe_grid/deepseek_v3_meta_params.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let models = doc["models"].as_object().unwrap();
    assert!(models.len() >= 5);
    for (name, m) in models {
        let want = MoeCounts { total: m["total"].as_u64().unwrap(), active: m["active"].as_u64().unwrap() };
        assert_eq!(DeepseekV3Shape::read(m["config"].as_object().unwrap()).unwrap().counts().unwrap(), want, "{name}");
    }
    // The published model: 671B in all, 37.6B active per token (the MTP layer is not built).
    assert_eq!(models["DeepSeek-V3"]["total"], 671_026_404_352u64);
    assert_eq!(models["DeepSeek-V3"]["active"], 37_552_282_624u64);
    // The Hub's file, as written (its fp8 quantization_config does not change the shapes).
    let hub = fixture("hf_models/DeepSeek-V3/config.json");
    assert_eq!(DeepseekV3Shape::read(hub.as_object().unwrap()).unwrap().counts().unwrap().total, 671_026_404_352);
}

#[test]
fn a_deepseek_v3_config_is_refused_naming_what_is_not_modelled() {
    let dir = std::env::temp_dir().join(format!("vramscope-deepseek-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.join("out");
    let config = root().join("tests/fixtures/hf_models/DeepSeek-V3/config.json");
    let o = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["profile", "--config", config.to_str().unwrap(), "--device", "meta", "--context-length", "32", "--out-dir", out.to_str().unwrap()])
        .output()
        .expect("run vramscope");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for needle in ["deepseek_v3", "multi-head latent attention", "671026404352", "37552282624", "mixtral"] {
        assert!(err.contains(needle), "should say {needle}: {err}");
    }
    assert!(!out.exists(), "wrote {}", out.display());
    let _ = std::fs::remove_dir_all(&dir);
}
