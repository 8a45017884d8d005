//! peft's LoRA under FSDP2's MixedPrecisionPolicy against PyTorch, transformers and peft
//! themselves: tests/fixtures/dist_grid/lora_mixed_precision.json (`tools/pytorch/measure_dist.py
//! --lora-mixed-precision`: llama, mistral, qwen2 and qwen3), `fully_shard(mp_policy=...)` per
//! decoder layer then on the PeftModel (fsdp; zero2 without resharding the layers after forward)
//! under the fake process group, param_dtype bf16 over bf16 weights with fp32 adapters and over
//! fp32 weights, reduce_dtype fp32 or unset, and reduce_dtype fp32 alone; measure_hf.py's loop of
//! the point's profile type, per phase, requested bytes of blocks >= 512 B, the third iteration.
mod grid_common;
mod scratch;

use serde_json::Value;
use std::collections::BTreeSet;

/// Points where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

fn points_of(file: &str) -> Vec<Value> {
    let doc = grid_common::fixture(&format!("dist_grid/{file}"));
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "{file}: the fixture's transformers release");
    assert_eq!(doc["peft"].as_str(), Some("0.21.2"), "{file}: the fixture's peft release");
    doc["points"].as_array().unwrap().clone()
}

fn covers(points: &[Value], key: impl Fn(&Value) -> String, values: &[&str], file: &str) {
    let seen: BTreeSet<String> = points.iter().map(key).collect();
    for v in values {
        assert!(seen.contains(*v), "{file}: no point with {v} ({seen:?})");
    }
}

/// What every grid of adapters under the policy claims to cover: both layouts, the three
/// policies, fp32 and bf16 weights, checkpointing off and non-reentrant, worlds 2-4, and a
/// training point at rank 0 and at the last rank of each layout.
fn covers_policies(points: &[Value], file: &str) {
    assert!(points.iter().all(|q| q["hf"]["lora_r"].as_u64().is_some()), "{file}: every point has adapters");
    covers(points, |p| p["layout"].as_str().unwrap().to_string(), &["fsdp", "zero2"], file);
    covers(points, |p| format!("{}/{}", p["param_dtype"].as_str().unwrap_or("-"), p["reduce_dtype"].as_str().unwrap_or("-")), &["bf16/fp32", "bf16/-", "-/fp32"], file);
    covers(points, |p| p["hf"]["dtype"].as_str().unwrap().to_string(), &["fp32", "bf16"], file);
    covers(points, |p| p["hf"]["checkpoint"].as_str().unwrap().to_string(), &["none", "non-reentrant"], file);
    covers(points, |p| p["world_size"].to_string(), &["2", "3", "4"], file);
    // The point of the grid: bf16 weights beside fp32 adapters under a bf16 param_dtype.
    assert!(points.iter().any(|q| q["hf"]["dtype"] == "bf16" && q["param_dtype"] == "bf16"), "{file}: bf16 weights under param_dtype bf16");
    for layout in ["fsdp", "zero2"] {
        let training = || points.iter().filter(|q| q["layout"] == layout && q["profile_type"] == "training");
        assert!(training().any(|q| q["rank"] == 0), "{file}: {layout} training at rank 0");
        assert!(training().any(|q| q["rank"].as_u64().unwrap() + 1 == q["world_size"].as_u64().unwrap()), "{file}: {layout} training at the last rank");
    }
}

fn run(point: &Value, cfg: vramscope::model::ModelConfig) -> (Vec<vramscope::record::MemEvent>, Vec<vramscope::record::MemEvent>) {
    let trainable = {
        vramscope::engine::runtime::reset();
        vramscope::model::Model::new_in(&cfg, vramscope::engine::Device::Meta, 42, vramscope::engine::DType::F32).unwrap().num_trainable_parameters()
    };
    assert_eq!(Some(trainable), point["info"]["trainable_parameters"].as_u64(), "{}: peft's trainable parameters", point["name"]);
    grid_common::dist::run_rank(point, cfg)
}

#[test]
fn lora_under_mixed_precision_matches_peft() {
    let file = "lora_mixed_precision.json";
    let points = points_of(file);
    covers(&points, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["llama", "mistral", "qwen2", "qwen3"], file);
    covers_policies(&points, file);
    grid_common::check(&format!("dist_grid/{file}"), &points, 12, KNOWN_FAILING, |point| run(point, grid_common::hf::config_of(&point["hf"])));
}

/// tests/fixtures/dist_grid/lora_mixed_precision_models.json (`measure_dist.py
/// --lora-mixed-precision-models`): the same on issue 30's models, peft's adapters on Phi-3's
/// fused projections, OLMo-2, Gemma 2 and Gemma 3 text, the attention of Mixtral, Qwen3-MoE,
/// gpt-oss and DeepSeek-V3 (its latent attention) and Qwen2-MoE's attention and shared expert
/// (routing forced as measure_moe.py forces it).
#[test]
fn lora_of_the_new_models_under_mixed_precision_matches_peft() {
    let file = "lora_mixed_precision_models.json";
    let points = points_of(file);
    covers(&points, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"], file);
    covers_policies(&points, file);
    let model_of = |p: &Value| if p.get("num_experts").is_some() { grid_common::moe::point_model(p) } else { grid_common::hf::config_of(p) };
    grid_common::check(&format!("dist_grid/{file}"), &points, 12, KNOWN_FAILING, |point| run(point, model_of(&point["hf"])));
}

fn vramscope(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = scratch::dir().join(format!("vramscope-lora-mp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn profile(name: &str, extra: &[&str]) -> (std::process::Output, std::path::PathBuf) {
    let out = tmp(name);
    let mut args = vec!["profile", "--device", "meta", "--context-length", "64", "--batch-size", "1", "--warmup-steps", "0", "--num-layers", "2", "--out-dir", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    (vramscope(&args), out)
}

/// What the two grids measure runs from the command line: LoRA under the policy over bf16 and
/// fp32 weights, fsdp and zero2, a llama-family model and issue 30's.
#[test]
fn measured_policies_over_adapters_run() {
    for extra in [
        &["--model", "Llama-3.2-1B", "--lora-r", "8", "--parallel", "fsdp", "--world-size", "2", "--fsdp-param-dtype", "bf16", "--fsdp-reduce-dtype", "fp32"][..],
        &["--model", "Llama-3.2-1B", "--lora-r", "16", "--parallel", "zero2", "--world-size", "4", "--fsdp-reduce-dtype", "fp32", "--gradient-checkpointing", "non-reentrant"][..],
        &["--model", "Llama-3.2-1B", "--dtype", "float32", "--lora-r", "8", "--parallel", "fsdp", "--world-size", "3", "--fsdp-param-dtype", "bf16"][..],
        &["--preset", "OLMo-2-7B", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--parallel", "fsdp", "--world-size", "2", "--fsdp-param-dtype", "bf16", "--fsdp-reduce-dtype", "fp32"][..],
        &["--preset", "Qwen3-30B-A3B", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--parallel", "zero2", "--world-size", "2", "--fsdp-param-dtype", "bf16"][..],
    ] {
        let (o, out) = profile("measured", extra);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// What the grids do not measure over peft's adapters exits 2 naming the flag, nothing written.
#[test]
fn unmeasured_policies_over_adapters_are_refused() {
    let lora: &[&str] = &["--model", "Llama-3.2-1B", "--lora-r", "8", "--parallel", "fsdp", "--world-size", "2"];
    let cases: &[(&[&str], &[&str])] = &[
        (&["--fsdp-param-dtype", "fp16"], &["--fsdp-param-dtype", "MixedPrecisionPolicy", "not measured", "lora_mixed_precision.json"]),
        (&["--fsdp-reduce-dtype", "bf16"], &["--fsdp-reduce-dtype", "MixedPrecisionPolicy", "not measured"]),
        (&["--fsdp-param-dtype", "bf16", "--precision", "bf16"], &["--precision", "autocast", "not measured"]),
        (&["--fsdp-param-dtype", "bf16", "--modules-to-save", "lm_head"], &["--modules-to-save", "MixedPrecisionPolicy", "not measured"]),
        (&["--fsdp-param-dtype", "bf16", "--fsdp-unit", "every-2"], &["--fsdp-unit", "MixedPrecisionPolicy", "not measured"]),
        (&["--fsdp-param-dtype", "bf16", "--offload", "params"], &["--offload", "CPUOffloadPolicy"]),
        // FSDP-QLoRA (fsdp_qlora.json) and the policy over LoRA are measured apart.
        (&["--fsdp-param-dtype", "bf16", "--load-in-4bit", "--bnb-4bit-quant-storage", "bfloat16"], &["--fsdp-param-dtype", "4-bit bitsandbytes weights", "not measured"]),
        (&["--fsdp-reduce-dtype", "fp32", "--load-in-4bit"], &["--fsdp-reduce-dtype", "4-bit bitsandbytes weights", "not measured"]),
    ];
    for (more, needles) in cases {
        let extra: Vec<&str> = lora.iter().chain(more.iter()).copied().collect();
        let (o, out) = profile("refused", &extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        for n in *needles {
            assert!(err.contains(n), "{extra:?} should say {n}: {err}");
        }
        assert!(!out.exists(), "{extra:?} wrote {}", out.display());
    }
}
