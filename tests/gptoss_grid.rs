//! gpt-oss (`model_type` gpt_oss) against transformers 5.23 (issue 30).
//!
//! The measured ground truth is tests/fixtures/moe_grid/gpt_oss.json
//! (tools/pytorch/make_gptoss_grid.py: GptOssForCausalLM on CPU, eager attention — the model
//! does not dispatch sdpa — with the router forced to balanced or worst routing); every phase
//! of every point matches, each experts implementation (eager, batched_mm, grouped_mm). Parameter
//! counts (total and active per token) equal transformers' meta build of gpt-oss-20b, -120b
//! and small configs (tests/fixtures/moe_grid/gpt_oss_meta_params.json).
mod scratch;
mod grid_common;

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::process::Command;
use vramscope::model::hf::gpt_oss::GptOssShape;
use vramscope::model::hf::moe::MoeCounts;

fn fixture(rel: &str) -> Value {
    let path = format!("{}/tests/fixtures/moe_grid/{rel}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))).unwrap()
}

#[test]
fn the_grid_covers_the_issue_and_its_models_count_as_transformers_built_them() {
    let doc = fixture("gpt_oss.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let ps: Vec<&Value> = doc["points"].as_array().unwrap().iter().collect();
    assert!(ps.len() >= 36, "{} points", ps.len());
    let set = |k: &str| ps.iter().map(|q| q["point"][k].to_string()).collect::<BTreeSet<_>>();
    assert_eq!(set("experts"), BTreeSet::from(["\"batched_mm\"".into(), "\"eager\"".into(), "\"grouped_mm\"".into()]));
    assert_eq!(set("routing"), BTreeSet::from(["\"balanced\"".into(), "\"worst\"".into()]));
    assert_eq!(set("attn"), BTreeSet::from(["\"eager\"".into()]), "gpt_oss runs eager attention only");
    assert_eq!(set("dtype"), BTreeSet::from(["\"bf16\"".into(), "\"fp32\"".into()]));
    assert_eq!(set("top_k"), (1..=4).map(|k| k.to_string()).collect());
    let experts: Vec<u64> = ps.iter().map(|q| q["point"]["num_experts"].as_u64().unwrap()).collect();
    assert!(experts.iter().all(|e| (4..=16).contains(e)) && experts.contains(&4) && experts.contains(&16), "{experts:?}");
    let kinds = ps.iter().map(|q| q["profile_type"].as_str().unwrap()).collect::<BTreeSet<_>>();
    assert_eq!(kinds, BTreeSet::from(["forward", "inference", "training"]));
    // Sequences above the window (the sliding layers mask), and one below it.
    assert!(ps.iter().any(|q| q["point"]["seq"].as_u64() > q["point"]["sliding_window"].as_u64()));
    assert!(ps.iter().any(|q| q["point"]["seq"].as_u64() < q["point"]["sliding_window"].as_u64()));
    for q in ps {
        let (p, name) = (&q["point"], q["name"].as_str().unwrap());
        let c = GptOssShape::read(&grid_common::moe::gpt_oss_point_config(p)).unwrap().counts().unwrap();
        assert_eq!(c.total, q["info"]["parameters"].as_u64().unwrap(), "{name}: parameters");
        assert_eq!(q["info"]["attn_implementation"], "eager", "{name}");
        let (t, k, e) = (p["batch"].as_u64().unwrap() * p["seq"].as_u64().unwrap(), p["top_k"].as_u64().unwrap(), p["num_experts"].as_u64().unwrap());
        let per: Vec<u64> = q["info"]["tokens_per_expert"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(per.iter().sum::<u64>(), t * k, "{name}");
        match p["routing"].as_str().unwrap() {
            "worst" => assert!(per.iter().enumerate().all(|(i, &n)| n == if (i as u64) < k { t } else { 0 }), "{name}: {per:?}"),
            _ => assert!(per.iter().all(|&n| n == t * k / e || n == t * k / e + 1), "{name}: {per:?}"),
        }
    }
}

/// Points where vramscope does not match transformers, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

#[test]
fn gpt_oss_grid_matches_transformers() {
    let doc = fixture("gpt_oss.json");
    let points: Vec<Value> = doc["points"].as_array().unwrap().to_vec();
    grid_common::check("gpt_oss", &points, 45, KNOWN_FAILING, |point| grid_common::hf::run_config(point, grid_common::moe::read_config_of(&point["point"])));
}

#[test]
fn parameter_counts_equal_transformers_meta_build() {
    let doc = fixture("gpt_oss_meta_params.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION);
    let models = doc["models"].as_object().unwrap();
    assert!(models.len() >= 4);
    for (name, m) in models {
        let cfg = m["config"].as_object().unwrap();
        let want = MoeCounts { total: m["total"].as_u64().unwrap(), active: m["active"].as_u64().unwrap() };
        assert_eq!(GptOssShape::read(cfg).unwrap().counts().unwrap(), want, "{name}");
        let read = vramscope::model::hf::parse(&m["config"].to_string()).unwrap().config;
        assert_eq!(read.param_count(), want.total, "{name}: closed form");
        assert_eq!(vramscope::session::hf::active_parameters(&read), want.active, "{name}: active");
        if want.total < 1_000_000 {
            vramscope::engine::runtime::reset();
            let built = vramscope::model::Model::new(&read, vramscope::engine::Device::Meta, 0).unwrap();
            assert_eq!(built.num_parameters(), want.total, "{name}: built");
        }
        if let Ok(p) = vramscope::model::presets::find(name, None) {
            assert_eq!(p.model.param_count(), want.total, "{name}: preset");
            assert_eq!(p.expected_params, want.total, "{name}: preset");
            let (r, q) = (read.hf.as_ref().unwrap(), p.model.hf.as_ref().unwrap());
            assert_eq!((&r.moe, r.head_dim, r.qkv_bias, read.num_layers), (&q.moe, q.head_dim, q.qkv_bias, p.model.num_layers), "{name}");
        }
    }
    assert!(vramscope::model::presets::find("gpt-oss-20b", None).is_ok() && vramscope::model::presets::find("gpt-oss-120b", None).is_ok());
}

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn temp(name: &str) -> std::path::PathBuf {
    let d = scratch::dir().join(format!("vramscope-gptoss-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn what_is_not_modelled_is_refused_naming_the_flag() {
    let dir = temp("refused");
    let small = dir.join("config.json");
    let mut c = fixture("gpt_oss_meta_params.json")["models"]["gpt_oss-small-no-bias-tied"]["config"].clone();
    std::fs::write(&small, c.to_string()).unwrap();
    let out = dir.join("out");
    let run = |extra: &[&str], needles: &[&str]| {
        let mut args = vec!["profile", "--device", "meta", "--context-length", "32", "--batch-size", "1", "--out-dir", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{extra:?} should say {n}: {err}");
        }
        assert!(!out.exists(), "wrote {}", out.display());
    };
    let cfg = small.to_str().unwrap();
    run(&["--config", cfg, "--experts-implementation", "sonic"], &["--experts-implementation"]);
    run(&["--config", cfg, "--attn-implementation", "sdpa"], &["--attn-implementation", "sdpa"]);
    run(&["--config", cfg, "--attn-implementation", "flash_attention_2", "--dtype", "bfloat16"], &["--attn-implementation"]);
    // peft has no default target_modules for gpt_oss (tests/moe_lora_gptoss_deepseek_grid.rs).
    run(&["--config", cfg, "--lora-r", "8"], &["--target-modules", "no default"]);
    run(&["--config", cfg, "--device", "cpu"], &["--device"]);
    // generate() runs with the DynamicCache (generate_gpt_oss.json) and a StaticCache
    // (generate_static_sliding.json, tests/generate_grid.rs).
    c["quantization_config"] = json!({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]});
    std::fs::write(&small, c.to_string()).unwrap();
    run(&["--config", cfg], &["'quantization_config'", "mxfp4", "bf16"]);
    c["quantization_config"] = Value::Null;
    // output_router_logits runs (tests/aux_loss_grid.rs); a value that is no bool is refused.
    c["output_router_logits"] = json!("yes");
    std::fs::write(&small, c.to_string()).unwrap();
    run(&["--config", cfg, "--profile-type", "training"], &["'output_router_logits'"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gpt_oss_20b_trains_at_4096_and_fit_finds_a_batch() {
    let dir = temp("20b");
    let out = dir.join("out");
    let o = vramscope(&["profile", "--preset", "gpt-oss-20b", "--device", "meta", "--warmup-steps", "0", "--profile-type", "training", "--context-length", "4096", "--batch-size", "1", "--routing", "worst", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let moe = &s["transformers"]["moe"];
    assert_eq!((moe["model_type"].as_str(), moe["routing"].as_str(), moe["experts_implementation"].as_str()), (Some("gpt_oss"), Some("worst"), Some("grouped_mm")), "{moe}");
    assert_eq!(moe["active_parameters_per_token"].as_u64(), Some(4_187_440_704));
    assert_eq!(s["transformers"]["attn_implementation"], "eager");
    let peak = &s["runs"][0]["peak"];
    assert!(!peak["peak_op"].as_str().unwrap().is_empty(), "{peak}");
    assert!(peak["peak_allocated"].as_u64().unwrap() > 20_914_757_184 * 2, "bf16 weights and gradients at least");
    // fit on a small config: worst routing unless told.
    let cfg = dir.join("config.json");
    std::fs::write(&cfg, fixture("gpt_oss_meta_params.json")["models"]["gpt_oss-small-full-layers"]["config"].to_string()).unwrap();
    let o = vramscope(&["fit", "--find", "batch", "--config", cfg.to_str().unwrap(), "--context-length", "32", "--memory-limit", "64MiB", "--reserve", "0", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let fit: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(fit["config"]["hf"]["moe"]["routing"], "worst", "{fit}");
    assert!(fit["answer"].as_u64().unwrap() >= 1, "{fit}");
    let _ = std::fs::remove_dir_all(&dir);
}
