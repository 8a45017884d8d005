//! Qwen2-MoE with a sliding window (`use_sliding_window`, `sliding_window`, `max_window_layers`)
//! against transformers 5.23 (issue 30): tools/pytorch/make_qwen2_moe_sliding_grid.py
//! (tests/fixtures/moe_grid/qwen2_moe_sliding.json), the model read by vramscope's config reader
//! (layers 0, 2, ... below max_window_layers slide), every phase matched byte for byte; the
//! runs it does not measure refused on the command line.
mod scratch;
mod grid_common;

use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Points where vramscope does not match transformers, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

fn points() -> Vec<Value> {
    let doc = grid_common::fixture("moe_grid/qwen2_moe_sliding.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    doc["points"].as_array().unwrap().clone()
}

fn config_of(p: &Value) -> vramscope::model::ModelConfig {
    let mut cfg = grid_common::moe::read_config_of(p);
    grid_common::hf::apply_peft(p, cfg.hf.as_mut().unwrap());
    cfg
}

#[test]
fn the_grid_covers_the_window() {
    let points = points();
    let set = |k: &str| points.iter().map(|q| q["point"][k].to_string().trim_matches('"').to_string()).collect::<BTreeSet<_>>();
    let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert!(points.iter().all(|q| q["point"]["model_type"] == "qwen2_moe" && q["point"]["sliding_window"].as_u64() > Some(0)));
    assert_eq!(set("attn"), strs(&["eager", "sdpa"]));
    assert_eq!(set("experts"), strs(&["batched_mm", "eager", "grouped_mm"]));
    assert_eq!(set("routing"), strs(&["balanced", "worst"]));
    assert_eq!(set("dtype"), strs(&["bf16", "fp32"]));
    assert_eq!(set("checkpoint"), strs(&["none", "non-reentrant", "reentrant"]));
    assert_eq!(set("attention_mask"), strs(&["none", "ones"]));
    let kinds = points.iter().map(|q| q["profile_type"].as_str().unwrap()).collect::<BTreeSet<_>>();
    assert_eq!(kinds, BTreeSet::from(["forward", "inference", "training"]));
    let (w, s, l, mwl) = (|q: &Value| q["point"]["sliding_window"].as_u64().unwrap(), |q: &Value| q["point"]["seq"].as_u64().unwrap(), |q: &Value| q["point"]["num_layers"].as_u64().unwrap(), |q: &Value| q["point"]["max_window_layers"].as_u64().unwrap());
    assert!(points.iter().any(|q| w(q) < s(q)) && points.iter().any(|q| w(q) == s(q)) && points.iter().any(|q| w(q) > s(q)), "windows shorter than, equal to and longer than the context");
    assert!(points.iter().any(|q| mwl(q) > 0 && mwl(q) < l(q)), "max_window_layers cutting the stack");
    assert!(points.iter().any(|q| mwl(q) == 0), "no layer sliding");
    assert!(points.iter().any(|q| l(q) == 1 && mwl(q) > 0), "every layer sliding");
    assert!(points.iter().any(|q| q["point"]["lora_r"].as_u64().is_some()), "LoRA");
    // The reader's layer types: layers 0, 2, ... below max_window_layers.
    for q in &points {
        let cfg = config_of(&q["point"]);
        let hf = cfg.hf.as_ref().unwrap();
        let want: Vec<bool> = (0..l(q)).map(|i| i % 2 == 0 && i < mwl(q)).collect();
        assert_eq!((hf.sliding_window, hf.sliding_layers.clone()), (Some(w(q) as usize), Some(want)), "{}", q["name"]);
    }
}

#[test]
fn qwen2_moe_sliding_grid_matches_transformers() {
    let points = points();
    grid_common::check("qwen2_moe_sliding", &points, 12, KNOWN_FAILING, |point| grid_common::hf::run_config(point, config_of(&point["point"])));
}

fn vramscope(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

/// A small Qwen2-MoE config.json with `extra` fields, in a fresh folder.
fn config(name: &str, extra: Value) -> std::path::PathBuf {
    let dir = scratch::dir().join(format!("vramscope-qwen2-moe-sliding-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = json!({
        "model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 1000, "num_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    let f = dir.join("config.json");
    std::fs::write(&f, c.to_string()).unwrap();
    f
}

/// The window runs profile's inference, forward, training and generate, and under ddp, fsdp and tp;
/// estimate states its closed form; adapters under a parallel layout exit 2 naming the flag; a null window with use_sliding_window is refused as
/// transformers raises.
#[test]
fn the_window_runs_where_measured_and_is_refused_elsewhere() {
    let window = json!({"use_sliding_window": true, "sliding_window": 16, "max_window_layers": 2});
    let cfg = config("run", window.clone());
    let out = cfg.parent().unwrap().join("out");
    // (sdpa's default GPU kernel given the window's mask is refused as for Mistral's window.)
    let base = ["--config", cfg.to_str().unwrap(), "--context-length", "32", "--batch-size", "1", "--attn-implementation", "eager"];
    let profile = |extra: &[&str]| {
        let mut args = vec!["profile", "--device", "meta", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap()];
        args.extend_from_slice(&base);
        args.extend_from_slice(extra);
        vramscope(&args)
    };
    // generate past the window: the DynamicCache and a StaticCache (generate_qwen2_moe_sliding.json).
    let runs: &[&[&str]] = &[
        &["--profile-type", "training"],
        &["--profile-type", "inference,forward"],
        &["--profile-type", "generate", "--max-new-tokens", "4"],
        &["--profile-type", "generate", "--max-new-tokens", "4", "--cache-implementation", "static", "--disable-compile"],
        // The parallel layouts (dist_grid/qwen2_moe_sliding.json).
        &["--profile-type", "training", "--parallel", "ddp", "--world-size", "2"],
        &["--profile-type", "training", "--parallel", "fsdp", "--world-size", "3"],
        // transformers' tensor-parallel plan (dist_grid/tp_hf_moe.json's windowed points).
        &["--profile-type", "training", "--parallel", "tp", "--world-size", "2", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0"],
        &["--profile-type", "inference", "--parallel", "tp", "--world-size", "2"],
    ];
    for extra in runs {
        let o = profile(extra);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let refused: &[(&[&str], &[&str])] = &[
        (&["--parallel", "ddp", "--world-size", "2", "--lora-r", "8", "--target-modules", "q_proj,v_proj"], &["--lora-r", "sliding window", "not measured"]),
    ];
    for (extra, needles) in refused {
        let o = profile(extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(needles.iter().all(|n| err.contains(n)), "{extra:?}: {err}");
    }
    // The closed form (tests/estimate_moe.rs's Qwen2-MoE window grid): its activations equal
    // the simulated ones.
    let json_out = cfg.parent().unwrap().join("estimate.json");
    let mut args = vec!["estimate", "--json", json_out.to_str().unwrap()];
    args.extend_from_slice(&base);
    let o = vramscope(&args);
    assert!(o.status.success(), "estimate: {}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("sliding layers' block"), "estimate: {}", String::from_utf8_lossy(&o.stdout));
    let v: Value = serde_json::from_slice(&std::fs::read(&json_out).unwrap()).unwrap();
    let e = &v["estimate"];
    let bytes = |t: &Value| t.as_array().unwrap().iter().map(|t| t["elements"].as_u64().unwrap() * t["elem"].as_u64().unwrap()).sum::<u64>();
    let sliding = e["sliding_block"]["layers"].as_array().unwrap().len() as u64;
    let blocks = (e["layers"].as_u64().unwrap() - sliding) * bytes(&e["block"]) + sliding * bytes(&e["sliding_block"]["block"]);
    assert_eq!(blocks + bytes(&e["outside"]), v["simulated"]["activation_bytes"].as_u64().unwrap(), "estimate");
    let null = config("null", json!({"use_sliding_window": true, "sliding_window": null}));
    let o = vramscope(&["profile", "--device", "meta", "--config", null.to_str().unwrap(), "--context-length", "32", "--batch-size", "1", "--out-dir", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("sliding_window") && err.contains("transformers raises"), "{err}");
    let _ = std::fs::remove_dir_all(cfg.parent().unwrap());
    let _ = std::fs::remove_dir_all(null.parent().unwrap());
}
