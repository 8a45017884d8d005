//! The Trainer's own autocast against transformers 5.23 + accelerate 1.15: accelerate's
//! `prepare_model` wraps the forward in `convert_outputs_to_fp32(autocast(...))`, so the output
//! holds fp32 copies of its bf16/fp16 tensors (the logits, an MoE model's router logits) until
//! compute_loss drops it. Measured by tools/pytorch/make_accelerate_amp_grid.py
//! (tests/fixtures/hf_grid/accelerate_amp.json) over every dense family, LoRA and the MoE
//! models with and without the router's auxiliary loss; every phase matched byte for byte.
mod scratch;
mod grid_common;

use serde_json::Value;
use std::collections::BTreeSet;
use vramscope::model::ModelConfig;

/// Points where vramscope does not match PyTorch, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

fn points() -> Vec<Value> {
    let doc = grid_common::fixture("hf_grid/accelerate_amp.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    assert_eq!(doc["accelerate"], vramscope::model::hf::accelerate_amp::ACCELERATE_VERSION);
    doc["points"].as_array().unwrap().clone()
}

fn config(p: &Value) -> ModelConfig {
    if p.get("num_experts").is_some() || p["model_type"] == "deepseek_v3" {
        grid_common::moe::point_model(p)
    } else {
        grid_common::hf::config_of(p)
    }
}

#[test]
fn the_grid_covers_the_families() {
    let points = points();
    let set = |k: &str| points.iter().map(|q| q["point"][k].to_string().trim_matches('"').to_string()).collect::<BTreeSet<_>>();
    let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert!(points.iter().all(|q| q["point"]["amp"] == "accelerate"));
    let families = ["llama", "mistral", "qwen2", "qwen3", "phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"];
    assert_eq!(set("model_type"), strs(&families));
    assert_eq!(set("autocast"), strs(&["bf16", "fp16"]));
    assert_eq!(set("dtype"), strs(&["bf16", "fp32"]));
    assert_eq!(set("checkpoint"), strs(&["none", "non-reentrant", "reentrant"]));
    let kinds = points.iter().map(|q| q["profile_type"].as_str().unwrap()).collect::<BTreeSet<_>>();
    assert_eq!(kinds, ["forward-loss", "training"].into_iter().collect());
    assert!(points.iter().any(|q| q["point"]["lora_r"].is_u64()), "LoRA");
    let aux = points.iter().filter(|q| q["point"]["output_router_logits"] == true).count();
    assert!(aux >= 10, "{aux} points with the router's logits in the output");
}

#[test]
fn accelerate_amp_grid_matches_transformers() {
    let points = points();
    grid_common::check("accelerate_amp", &points, 61, KNOWN_FAILING, |point| grid_common::hf::run_config(point, config(&point["point"])));
}

/// The grid can tell the wrapper from a plain `torch.autocast`: without the conversion the
/// points whose routers' logits are in the output and outweigh the logits miss their loss
/// phase (the fp32 copies set its peak), so a rule that dropped the conversion would fail
/// above. A dense model's copy of the logits comes after the loss has freed its own fp32 copy
/// of them (ForCausalLMLoss upcasts first), so it never sets a peak there.
#[test]
fn the_conversion_sets_peaks_the_grid_pins() {
    let points = points();
    let mut missed = Vec::new();
    for point in &points {
        let mut torch = point.clone();
        torch["point"]["amp"] = "torch".into();
        let (before, events) = grid_common::hf::run_config(&torch, config(&point["point"]));
        let ours = grid_common::phase_peaks(&before, &events);
        let want = point["phases"]["loss"]["peak"].as_u64().unwrap();
        let got = ours.iter().find(|(n, _)| *n == "loss").map(|&(_, b)| b).unwrap();
        if got != want {
            assert_eq!(point["point"]["output_router_logits"], true, "{}: a dense point's loss peak moved", point["name"]);
            missed.push(point["name"].as_str().unwrap().to_string());
        }
    }
    println!("{} of {} points miss their loss phase without the conversion", missed.len(), points.len());
    assert!(missed.len() >= 10, "without the conversion only {} of {} points miss: {missed:#?}", missed.len(), points.len());
}

fn vramscope(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

/// `profile`'s allocator trace length on meta with `extra` (Qwen3-30B-A3B's widths at two
/// layers with the router's aux loss, bf16 autocast over fp32 weights).
fn trace_entries(extra: &[&str]) -> u64 {
    let out = scratch::dir().join(format!("vramscope-amp-{}-{}", std::process::id(), extra.join("_")));
    let _ = std::fs::remove_dir_all(&out);
    let mut args = vec!["profile", "--model", "Qwen3-30B-A3B", "--num-layers", "2", "--device", "meta", "--warmup-steps", "0", "--profile-type", "training",
        "--context-length", "256", "--batch-size", "2", "--dtype", "float32", "--precision", "bf16", "--output-router-logits", "--out-dir", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = vramscope(&args);
    assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    s["runs"][0]["trace_entries"].as_u64().unwrap()
}

/// On the command line: accelerate's wrapper is the default and `--autocast-by torch` drops it.
/// The wrapper's copies are the logits' and the two routers': each an fp32 allocation, the
/// free of the bf16 original, and the copy's own free (9 trace entries; at these widths they
/// set no peak, the grid's wide rows show where they do). The flag is refused where it means
/// nothing.
#[test]
fn the_flag_picks_the_wrapper_and_is_refused_where_it_means_nothing() {
    let trainer = trace_entries(&[]);
    assert_eq!(trainer, trace_entries(&["--autocast-by", "accelerate"]));
    assert_eq!(trainer, trace_entries(&["--autocast-by", "torch"]) + 3 * (1 + 2));
    for (args, needle) in [
        (vec!["--model", "Qwen3-8B", "--num-layers", "1", "--autocast-by", "torch"], "has none"),
        (vec!["--preset", "cs336-small", "--precision", "bf16", "--autocast-by", "accelerate"], "plain torch.autocast"),
    ] {
        let mut a = vec!["profile", "--device", "meta", "--warmup-steps", "0", "--context-length", "64", "--batch-size", "1"];
        a.extend_from_slice(&args);
        let o = vramscope(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("--autocast-by") && err.contains(needle), "{args:?}: {err}");
    }
}
