//! One rank of a data-parallel LoRA or QLoRA job over issue 30's models against PyTorch,
//! transformers, peft and bitsandbytes themselves: tests/fixtures/dist_grid/lora_models.json
//! (`tools/pytorch/measure_dist.py --lora-models`): peft's adapters on Phi-3 (its fused qkv_proj
//! and gate_up_proj), OLMo-2, Gemma 2 and Gemma 3 text, on the attention of Mixtral, Qwen3-MoE,
//! gpt-oss and DeepSeek-V3, on Qwen2-MoE's attention and shared expert, and through peft's
//! ParamWrapper (target_parameters) on the MoE models' experts and routers (routing forced),
//! under DistributedDataParallel over gloo processes (LoRA, and bitsandbytes 4-bit QLoRA), FSDP2
//! `fully_shard` per decoder layer then the PeftModel and ZeRO-2 (LoRA) under the fake process
//! group, and (lora_layouts.json, `--lora-layouts`) hsdp, fully_shard on other units and
//! reentrant checkpointing under FSDP2, with FSDP2's MixedPrecisionPolicy under hsdp
//! (lora_mixed_precision_layouts.json), with peft's modules_to_save and bias
//! (lora_extras_layouts.json) and over 4-bit FSDP-QLoRA (fsdp_qlora_layouts.json);
//! measure_hf.py's loop of the point's profile type; per phase, requested bytes of blocks
//! >= 512 B, the third iteration.
mod scratch;
mod grid_common;

use serde_json::Value;
use std::collections::BTreeSet;
use vramscope::model::ModelConfig;

/// Points where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

const DENSE: [&str; 4] = ["phi3", "olmo2", "gemma2", "gemma3_text"];
const MOE: [&str; 5] = ["mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3", "qwen2_moe"];

/// The point's model with its adapters and bitsandbytes load, as the one-GPU grids read it.
fn config_of(p: &Value) -> ModelConfig {
    match p["model_type"].as_str().unwrap() {
        "mixtral" | "qwen3_moe" | "qwen2_moe" | "gpt_oss" | "deepseek_v3" => grid_common::moe::point_model(p),
        _ => grid_common::hf::config_of(p),
    }
}

fn run(point: &Value) -> (Vec<vramscope::record::MemEvent>, Vec<vramscope::record::MemEvent>) {
    let cfg = config_of(&point["hf"]);
    let trainable = {
        vramscope::engine::runtime::reset();
        vramscope::model::Model::new_in(&cfg, vramscope::engine::Device::Meta, 42, vramscope::engine::DType::F32).unwrap().num_trainable_parameters()
    };
    assert_eq!(Some(trainable), point["info"]["trainable_parameters"].as_u64(), "{}: peft's trainable parameters", point["name"]);
    grid_common::dist::run_rank(point, cfg)
}

fn values(points: &[Value], key: impl Fn(&Value) -> String) -> BTreeSet<String> {
    points.iter().map(key).collect()
}

/// What the grid claims to cover, for the points of `models`.
fn covers(points: &[Value], models: &[&str]) {
    let ps: Vec<Value> = points.iter().filter(|q| models.contains(&q["hf"]["model_type"].as_str().unwrap())).cloned().collect();
    assert!(ps.len() >= 12, "{models:?}: {} points", ps.len());
    for m in models {
        assert!(ps.iter().filter(|q| q["hf"]["model_type"] == *m).count() >= 2, "{m}: at least two points");
    }
    let four = |q: &Value| q["hf"]["load_in_4bit"] == true;
    let lora: Vec<Value> = ps.iter().filter(|q| !four(q)).cloned().collect();
    let qlora: Vec<Value> = ps.iter().filter(|q| four(q)).cloned().collect();
    assert_eq!(values(&lora, |q| q["layout"].to_string()), BTreeSet::from(["\"ddp\"".to_string(), "\"fsdp\"".into(), "\"zero2\"".into()]), "{models:?}: LoRA under ddp, fsdp, zero2");
    assert!(!qlora.is_empty() && qlora.iter().all(|q| q["layout"] == "ddp"), "{models:?}: QLoRA under ddp");
    assert_eq!(values(&ps, |q| q["hf"]["lora_r"].to_string()), BTreeSet::from(["4".to_string(), "8".into(), "16".into()]), "{models:?}: r");
    assert_eq!(values(&ps, |q| q["hf"]["dtype"].to_string()).len(), 2, "{models:?}: fp32 and bf16");
    assert_eq!(values(&ps, |q| q["hf"]["checkpoint"].to_string()).len(), 3, "{models:?}: checkpointing off, non-reentrant, reentrant");
    assert!(values(&ps, |q| q["hf"]["target_modules"].to_string()).len() >= 5, "{models:?}: target sets");
    assert!(values(&ps, |q| q["world_size"].to_string()).len() >= 3, "{models:?}: worlds");
    assert!(ps.iter().any(|q| q["rank"] == 0) && ps.iter().any(|q| q["rank"].as_u64().unwrap() + 1 == q["world_size"].as_u64().unwrap() && q["rank"] != 0), "{models:?}: rank 0 and a last rank");
    assert!(ps.iter().any(|q| q["world_size"] == 8), "{models:?}: 8 ranks");
    assert!(ps.iter().any(|q| q["hf"]["lora_dropout"].as_f64() > Some(0.0)), "{models:?}: lora_dropout");
}

fn points() -> Vec<Value> {
    let doc = grid_common::fixture("dist_grid/lora_models.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    doc["points"].as_array().unwrap().to_vec()
}

#[test]
fn family_lora_ranks_match_peft() {
    let all = points();
    covers(&all, &DENSE);
    let ps: Vec<Value> = all.into_iter().filter(|q| DENSE.contains(&q["hf"]["model_type"].as_str().unwrap())).collect();
    assert!(ps.iter().any(|q| q["hf"]["model_type"] == "phi3" && q["hf"]["target_modules"].as_str().is_some_and(|t| t.contains("qkv_proj"))), "phi3's fused qkv_proj");
    assert!(ps.iter().any(|q| q["hf"]["model_type"] == "phi3" && q["hf"]["target_modules"].as_str().is_some_and(|t| t.contains("gate_up_proj"))), "phi3's fused gate_up_proj");
    grid_common::check("dist_grid/lora_models.json (dense)", &ps, 12, KNOWN_FAILING, run);
}

/// Whether the point adapts through peft's ParamWrapper (target_parameters).
fn param_wrapped(q: &Value) -> bool {
    q["hf"]["target_parameters"].as_str().is_some_and(|t| !t.is_empty())
}

/// The forced routing reached the run: tokens per expert as the routing says.
fn routed_as_forced(ps: &[Value]) {
    for q in ps {
        let p = &q["hf"];
        let (t, k, e) = (p["batch"].as_u64().unwrap() * p["seq"].as_u64().unwrap(), p["top_k"].as_u64().unwrap(), p["num_experts"].as_u64().unwrap());
        let per: Vec<u64> = q["info"]["tokens_per_expert"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(per.iter().sum::<u64>(), t * k, "{}", q["name"]);
        match p["routing"].as_str().unwrap() {
            "worst" => assert!(per.iter().enumerate().all(|(i, &n)| n == if (i as u64) < k { t } else { 0 }), "{}: {per:?}", q["name"]),
            _ => assert!(per.iter().all(|&n| n == t * k / e || n == t * k / e + 1), "{}: {per:?}", q["name"]),
        }
    }
}

#[test]
fn moe_lora_ranks_match_peft() {
    let all: Vec<Value> = points().into_iter().filter(|q| !param_wrapped(q)).collect();
    covers(&all, &MOE);
    let ps: Vec<Value> = all.into_iter().filter(|q| MOE.contains(&q["hf"]["model_type"].as_str().unwrap())).collect();
    routed_as_forced(&ps);
    assert_eq!(values(&ps, |q| q["hf"]["experts"].to_string()).len(), 3, "every experts implementation");
    assert_eq!(values(&ps, |q| q["hf"]["routing"].to_string()).len(), 2, "balanced and worst");
    // Qwen2-MoE: LoRA under each layout and QLoRA under ddp, its shared expert's nn.Linear
    // modules adapted (named, or through all-linear) and not.
    let q2: Vec<&Value> = ps.iter().filter(|q| q["hf"]["model_type"] == "qwen2_moe").collect();
    let shared = |q: &Value| q["hf"]["target_modules"].as_str().is_some_and(|t| t == "all-linear" || ["gate_proj", "up_proj", "down_proj", "shared_expert_gate"].iter().any(|m| t.split(',').any(|x| x == *m)));
    for layout in ["ddp", "fsdp", "zero2"] {
        assert!(q2.iter().any(|q| q["layout"] == layout && q["hf"]["load_in_4bit"] != true && shared(q)), "qwen2_moe: the shared expert adapted under {layout}");
    }
    assert!(q2.iter().any(|q| q["layout"] == "ddp" && q["hf"]["load_in_4bit"] == true), "qwen2_moe: QLoRA under ddp");
    assert!(q2.iter().any(|q| !shared(q)), "qwen2_moe: the attention alone");
    grid_common::check("dist_grid/lora_models.json (moe)", &ps, 12, KNOWN_FAILING, run);
}

/// peft's ParamWrapper (`--target-parameters`: the experts' 3-D gate_up_proj/down_proj, the
/// router's weight) of every MoE model under ddp, fsdp and zero2.
#[test]
fn param_wrapper_ranks_match_peft() {
    let ps: Vec<Value> = points().into_iter().filter(param_wrapped).collect();
    let set = |k: &str| values(&ps, |q| q["hf"][k].to_string());
    assert_eq!(values(&ps, |q| q["layout"].to_string()), BTreeSet::from(["\"ddp\"".to_string(), "\"fsdp\"".into(), "\"zero2\"".into()]), "ddp, fsdp, zero2");
    for m in MOE {
        assert!(ps.iter().filter(|q| q["hf"]["model_type"] == m).count() >= 2, "{m}: at least two points");
    }
    for m in ["mixtral", "qwen3_moe", "gpt_oss", "qwen2_moe"] {
        let of: Vec<Value> = ps.iter().filter(|q| q["hf"]["model_type"] == m).cloned().collect();
        assert_eq!(values(&of, |q| q["layout"].to_string()).len(), 3, "{m}: ddp, fsdp and zero2");
    }
    assert_eq!(set("experts").len(), 3, "every experts implementation");
    assert_eq!(set("routing").len(), 2, "balanced and worst");
    assert_eq!(set("dtype").len(), 2, "fp32 and bf16");
    assert_eq!(set("checkpoint").len(), 3, "checkpointing off, non-reentrant, reentrant");
    let params = set("target_parameters");
    assert!(params.iter().any(|t| t.contains("gate_up_proj")) && params.iter().any(|t| t.contains("down_proj")) && params.iter().any(|t| t.contains("gate.weight") || t.contains("router.weight")), "{params:?}");
    assert!(ps.iter().any(|q| q["hf"]["target_modules"] != ""), "with the attention's adapters too");
    assert!(values(&ps, |q| q["world_size"].to_string()).len() >= 3, "worlds");
    routed_as_forced(&ps);
    grid_common::check("dist_grid/lora_models.json (ParamWrapper)", &ps, 12, KNOWN_FAILING, run);
}

/// dist_grid/lora_extras.json (`measure_dist.py --lora-extras`): peft's modules_to_save (the
/// ModulesToSaveWrapper's trainable copies of lm_head and/or embed_tokens, root parameters under
/// FSDP2) and peft's bias all / lora_only (the base biases named `*.bias` train: gpt-oss's
/// attention and router, Qwen2-MoE's q/k/v) under ddp, zero2 and fsdp, on the families and the
/// MoE models.
#[test]
fn modules_to_save_and_lora_bias_ranks_match_peft() {
    let doc = grid_common::fixture("dist_grid/lora_extras.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!(doc["peft"].as_str(), Some("0.21.2"), "the fixture's peft release");
    let ps = doc["points"].as_array().unwrap().to_vec();
    let saves = |q: &Value| q["hf"]["modules_to_save"].as_str().is_some_and(|m| !m.is_empty());
    let bias = |q: &Value| q["hf"]["lora_bias"].as_str().is_some_and(|b| b != "none");
    assert!(ps.iter().all(|q| saves(q) != bias(q)), "each point one of the two");
    for layout in ["ddp", "fsdp", "zero2"] {
        for (what, f) in [("modules_to_save", &saves as &dyn Fn(&Value) -> bool), ("lora_bias", &bias)] {
            assert!(ps.iter().any(|q| q["layout"] == layout && f(q)), "{what} under {layout}");
        }
    }
    for m in ["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"] {
        assert!(ps.iter().any(|q| q["hf"]["model_type"] == m), "{m}");
    }
    // The models whose biases peft's option reaches (gpt-oss's attention and router, Qwen2-MoE's
    // q/k/v), under DDP and FSDP2, all and lora_only.
    for m in ["gpt_oss", "qwen2_moe"] {
        let of: Vec<Value> = ps.iter().filter(|q| q["hf"]["model_type"] == m && bias(q)).cloned().collect();
        assert!(of.iter().any(|q| q["layout"] == "ddp") && of.iter().any(|q| q["layout"] != "ddp"), "{m}: bias under ddp and FSDP2");
        assert_eq!(values(&of, |q| q["hf"]["lora_bias"].to_string()).len(), 2, "{m}: all and lora_only");
    }
    let saved = values(&ps, |q| q["hf"]["modules_to_save"].as_str().unwrap_or("").to_string());
    assert!(saved.contains("lm_head") && saved.contains("embed_tokens,lm_head"), "{saved:?}");
    assert!(ps.iter().any(|q| q["rank"] == 0) && ps.iter().any(|q| q["rank"] != 0 && q["rank"].as_u64().unwrap() + 1 == q["world_size"].as_u64().unwrap()), "rank 0 and a last rank");
    grid_common::check("dist_grid/lora_extras.json", &ps, 15, KNOWN_FAILING, run);
}

/// dist_grid/lora_layouts.json (`measure_dist.py --lora-layouts`): peft's LoRA of issue 30's
/// models (and the llama family's) under FSDP2's other options: hsdp (a (world /
/// shard, shard) mesh), fully_shard on every 2 decoder layers or the root alone, and reentrant
/// checkpointing under fsdp and hsdp.
#[test]
fn lora_under_hsdp_units_and_reentrant_ranks_match_peft() {
    let doc = grid_common::fixture("dist_grid/lora_layouts.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let ps = doc["points"].as_array().unwrap().to_vec();
    let reentrant = |q: &Value| q["hf"]["checkpoint"] == "reentrant";
    let unit = |q: &Value| q["unit"].as_u64();
    let of = |f: &dyn Fn(&Value) -> bool| -> Vec<Value> { ps.iter().filter(|q| f(q)).cloned().collect() };
    let hsdp = of(&|q| q["layout"] == "hsdp" && !reentrant(q));
    let units = of(&|q| unit(q).is_some());
    let re = of(&|q| reentrant(q) && q["layout"] != "zero2");
    for m in DENSE.iter().chain(&MOE) {
        assert!(ps.iter().any(|q| q["hf"]["model_type"] == *m), "{m}");
    }
    for (what, set, min) in [("hsdp", &hsdp, 6), ("other units", &units, 6), ("reentrant", &re, 8)] {
        let models = values(set, |q| q["hf"]["model_type"].to_string());
        assert!(models.len() >= min, "{what}: {models:?}");
        assert!(set.iter().any(|q| DENSE.contains(&q["hf"]["model_type"].as_str().unwrap())) && set.iter().any(|q| MOE.contains(&q["hf"]["model_type"].as_str().unwrap())), "{what}: families and MoE models");
    }
    assert_eq!(values(&units, |q| unit(q).unwrap().to_string()), BTreeSet::from(["0".to_string(), "2".into()]), "every 2 layers and the root");
    assert!(units.iter().any(|q| unit(q) == Some(2) && q["hf"]["num_layers"].as_u64() == Some(3)), "a group of 2 and one left over");
    assert_eq!(values(&re, |q| q["layout"].to_string()), BTreeSet::from(["\"fsdp\"".to_string(), "\"hsdp\"".into()]), "reentrant under fsdp and hsdp");
    assert!(values(&ps, |q| q["shard"].to_string()).len() >= 3, "hsdp shards 2 and 3");
    assert!([&hsdp, &units, &re].iter().all(|set| set.iter().any(param_wrapped)), "ParamWrapper under each");
    let llama_family = |q: &Value| ["llama", "mistral", "qwen2", "qwen3"].contains(&q["hf"]["model_type"].as_str().unwrap());
    assert!(of(&|q| llama_family(q) && q["layout"] == "hsdp").len() >= 3, "the llama family under hsdp");
    // (the llama family ran these with adapters before any fixture measured them)
    assert_eq!(values(&units.iter().filter(|q| llama_family(q)).cloned().collect::<Vec<_>>(), |q| unit(q).unwrap().to_string()).len(), 2, "the llama family under both other units");
    assert!(re.iter().filter(|q| llama_family(q) && q["layout"] == "fsdp").count() >= 2, "the llama family's reentrant checkpointing under fsdp");
    assert_eq!(values(&ps, |q| q["hf"]["dtype"].to_string()).len(), 2, "fp32 and bf16");
    assert!(ps.iter().any(|q| q["rank"] == 0) && ps.iter().any(|q| q["rank"] != 0 && q["rank"].as_u64().unwrap() + 1 == q["world_size"].as_u64().unwrap()), "rank 0 and a last rank");
    assert!(ps.iter().any(|q| q["profile_type"] != "training"), "a forward");
    grid_common::check("dist_grid/lora_layouts.json", &ps, 33, KNOWN_FAILING, run);
}

fn vramscope(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = scratch::dir().join(format!("vramscope-dist-lora-models-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `profile --compare --world-size` and `fit --find world-size` of a LoRA run of these models
/// put the layouts it runs under side by side (ddp, zero2, fsdp; a 4-bit model: ddp), each
/// profiled per rank.
#[test]
fn compare_and_fit_offer_the_layouts_of_a_lora_run() {
    let out = tmp("compare");
    let o = vramscope(&[
        "profile", "--device", "meta", "--context-length", "64", "--batch-size", "1", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap(),
        "--model", "Phi-3-mini", "--num-layers", "2", "--lora-r", "8", "--target-modules", "qkv_proj,gate_up_proj", "--compare", "--world-size", "4",
    ]);
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap_or_default();
    assert!(o.status.success() && ["| one device", "| ddp ×4", "| zero2 ×4", "| fsdp ×4"].iter().all(|v| md.contains(v)) && !md.contains("zero1"), "{}\n{md}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&out);
    let fit = |extra: &[&str]| {
        let mut args = vec!["fit", "--find", "world-size", "--memory-limit", "24GiB", "--model", "Mixtral-8x7B", "--num-layers", "2", "--context-length", "64", "--batch-size", "1", "--lora-r", "8", "--target-modules", "q_proj,v_proj"];
        args.extend(extra);
        let o = vramscope(&args);
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(o.status.success(), "{extra:?}: {}\n{text}", String::from_utf8_lossy(&o.stderr));
        let rows: Vec<String> = text.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| layout")).map(|l| l.split('|').nth(1).unwrap().trim().to_string()).collect();
        rows
    };
    assert_eq!(fit(&[]), ["ddp", "zero2", "fsdp"]);
    assert_eq!(fit(&["--load-in-4bit", "--bnb-4bit-compute-dtype", "bfloat16"]), ["ddp", "zero2", "fsdp"]);
}

/// A layout refused for this model and these options (bf16 biases beside fp32 adapters in one
/// fully_shard unit: PyTorch raises) is left out of `fit --find world-size` and `--compare
/// --world-size`, and the note names it and why; the layouts that run still do.
#[test]
fn layouts_refused_for_the_options_are_left_out_with_a_note() {
    let model = ["--model", "gpt-oss-20b", "--num-layers", "1", "--context-length", "64", "--batch-size", "1", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--dtype", "bfloat16", "--lora-bias", "all"];
    let o = vramscope(&[&["fit", "--find", "world-size", "--memory-limit", "80GiB"][..], &model[..]].concat());
    let (text, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}\n{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| layout")).map(|l| l.split('|').nth(1).unwrap().trim()).collect();
    assert_eq!(rows, ["ddp"], "{text}");
    for l in ["zero2", "fsdp"] {
        assert!(err.contains(&format!("--parallel {l} left out of the search")) && err.contains("uniform original parameter dtype"), "{err}");
    }
    let out = tmp("compare-left-out");
    let o = vramscope(&[&["profile", "--device", "meta", "--warmup-steps", "0", "--compare", "--world-size", "2", "--out-dir", out.to_str().unwrap()][..], &model[..]].concat());
    let text = String::from_utf8_lossy(&o.stdout);
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap_or_default();
    assert!(o.status.success() && md.contains("| ddp ×2") && !md.contains("fsdp"), "{}\n{text}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("zero2 ×2 left out (invalid --lora-bias") && text.contains("fsdp ×2 left out"), "{text}");
    let _ = std::fs::remove_dir_all(&out);
}

/// What lora_layouts.json and lora_extras_layouts.json measure runs from the command line; peft's
/// modules_to_save and trained biases with two of those options (not measured) exit 2 naming the
/// flag.
#[test]
fn lora_under_hsdp_units_and_reentrant_run() {
    let hsdp = ["--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2"];
    let runs: &[&[&str]] = &[
        &["--preset", "Phi-3-mini", "--lora-r", "8", "--target-modules", "qkv_proj,gate_up_proj", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "every-2"],
        &["--preset", "Qwen3-30B-A3B", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "root"],
        &["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--parallel", "zero2", "--world-size", "2", "--fsdp-unit", "every-2"],
        &[&["--preset", "gpt-oss-20b", "--lora-r", "8", "--target-modules", "q_proj,v_proj"][..], &hsdp[..]].concat(),
        &[&["--preset", "Llama-3.2-1B", "--lora-r", "8"][..], &hsdp[..]].concat(),
        &[&["--preset", "Gemma-3-27B", "--lora-r", "8", "--gradient-checkpointing", "reentrant"][..], &hsdp[..]].concat(),
        &["--preset", "Qwen3-30B-A3B", "--experts-implementation", "grouped_mm", "--lora-r", "8", "--target-modules", "q_proj", "--target-parameters", "mlp.experts.gate_up_proj", "--parallel", "fsdp", "--world-size", "2", "--gradient-checkpointing", "reentrant"],
        // peft's modules_to_save and trained biases with them: lora_extras_layouts.json
        &[&["--preset", "OLMo-2-7B", "--lora-r", "8", "--target-modules", "q_proj", "--modules-to-save", "lm_head"][..], &hsdp[..]].concat(),
        &["--preset", "Llama-3.2-1B", "--lora-r", "8", "--lora-bias", "all", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "root"],
        &["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-modules", "q_proj", "--modules-to-save", "lm_head", "--parallel", "fsdp", "--world-size", "2", "--gradient-checkpointing", "reentrant"],
        &[&["--preset", "gpt-oss-20b", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--lora-bias", "all", "--dtype", "float32", "--gradient-checkpointing", "reentrant"][..], &hsdp[..]].concat(),
        &["--preset", "Llama-3.2-1B", "--lora-r", "8", "--modules-to-save", "lm_head", "--dtype", "float32", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "root"],
    ];
    for extra in runs {
        let out = tmp("layouts");
        let mut args = vec!["profile", "--device", "meta", "--context-length", "64", "--batch-size", "1", "--warmup-steps", "0", "--num-layers", "2", "--out-dir", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = vramscope(&args);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let _ = std::fs::remove_dir_all(&out);
    }
    let refused: &[(&[&str], &[&str])] = &[
        (&[&["--preset", "Llama-3.2-1B", "--lora-r", "8", "--modules-to-save", "lm_head", "--fsdp-unit", "every-2"][..], &hsdp[..]].concat(), &["--modules-to-save", "hsdp", "not measured"]),
        (&["--preset", "Llama-3.2-1B", "--lora-r", "8", "--modules-to-save", "lm_head", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "every-2", "--gradient-checkpointing", "reentrant"], &["--modules-to-save", "reentrant", "not measured"]),
        // bf16 copies beside the fp32 adapters in the root, the only unit: PyTorch raises
        (&["--preset", "Llama-3.2-1B", "--lora-r", "8", "--modules-to-save", "lm_head", "--dtype", "bfloat16", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "root"], &["--modules-to-save", "uniform original parameter dtype"]),
        // (4-bit under hsdp runs stored as the compute dtype: fsdp_qlora_layouts.json)
        (&[&["--preset", "Llama-3.2-1B", "--lora-r", "8", "--load-in-4bit"][..], &hsdp[..]].concat(), &["--bnb-4bit-quant-storage", "hsdp", "not measured"]),
        (&["--preset", "Phi-3-mini", "--lora-r", "8", "--target-modules", "qkv_proj", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "every-2", "--gradient-checkpointing", "reentrant"], &["--gradient-checkpointing", "units", "not measured"]),
    ];
    for (args, needles) in refused {
        let out = tmp("layouts-refused");
        let mut a = vec!["profile", "--device", "meta", "--context-length", "64", "--num-layers", "2", "--out-dir", out.to_str().unwrap()];
        a.extend_from_slice(args);
        let o = vramscope(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        for n in *needles {
            assert!(err.contains(n), "{args:?} should say {n}: {err}");
        }
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

/// What lora_models.json does not measure under a layout exits 2 naming the flag, nothing written.
#[test]
fn adapters_not_measured_under_a_layout_are_refused() {
    let mixtral = ["--preset", "Mixtral-8x7B", "--num-layers", "1", "--lora-r", "8", "--target-modules", "q_proj,v_proj"];
    let phi3 = ["--preset", "Phi-3-mini", "--num-layers", "1", "--lora-r", "8", "--target-modules", "qkv_proj"];
    let cases: &[(&[&str], &[&str], &[&str])] = &[
        // bf16 biases beside fp32 adapters in one fully_shard unit: PyTorch raises.
        (&["--preset", "gpt-oss-20b", "--num-layers", "1", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--dtype", "bfloat16"], &["--lora-bias", "all", "--parallel", "zero2"], &["--lora-bias", "uniform original parameter dtype"]),
        (&phi3, &["--load-in-4bit", "--prepare-model-for-kbit-training", "false", "--parallel", "ddp"], &["--prepare-model-for-kbit-training"]),
        (&["--preset", "DeepSeek-V3", "--attn-implementation", "eager", "--num-layers", "1", "--lora-r", "8", "--target-modules", "o_proj"], &["--load-in-4bit", "--bnb-4bit-quant-storage", "bfloat16", "--parallel", "fsdp"], &["--load-in-4bit", "deepseek_v3", "fsdp_qlora_models.json"]),
        (&mixtral, &["--load-in-8bit", "--parallel", "ddp"], &["--load-in-8bit"]),
        (&phi3, &["--use-dora", "--parallel", "ddp"], &["--use-dora"]),
        (&phi3, &["--parallel", "zero1"], &["--parallel", "zero1"]),
        (&["--preset", "OLMo-2-7B", "--num-layers", "1", "--load-in-4bit", "--profile-type", "inference"], &["--parallel", "ddp"], &["--load-in-4bit", "QLoRA"]),
    ];
    for (model, extra, needles) in cases {
        let out = tmp("refused");
        let mut args = vec!["profile", "--device", "meta", "--context-length", "64", "--world-size", "2", "--out-dir", out.to_str().unwrap()];
        args.extend_from_slice(model);
        args.extend_from_slice(extra);
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        for n in *needles {
            assert!(err.contains(n), "{extra:?} should say {n}: {err}");
        }
        assert!(!out.exists(), "{extra:?} wrote {}", out.display());
    }
}

/// FSDP-QLoRA of issue 30's models: 4-bit weights stored as bf16 (and three with bitsandbytes'
/// default uint8 storage) under fsdp and zero2 (tests/fixtures/dist_grid/fsdp_qlora_models.json,
/// `measure_dist.py --fsdp-qlora-models`).
#[test]
fn fsdp_qlora_ranks_match_bitsandbytes() {
    let doc = grid_common::fixture("dist_grid/fsdp_qlora_models.json");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let ps = doc["points"].as_array().unwrap().clone();
    assert_eq!(values(&ps, |q| q["hf"]["model_type"].as_str().unwrap().to_string()).len(), 8, "one point per model");
    assert!(ps.iter().all(|q| q["layout"] != "ddp"), "FSDP2 layouts");
    let storages = values(&ps, |q| q["hf"]["quant_storage"].as_str().unwrap_or("uint8").to_string());
    assert_eq!(storages.len(), 2, "bf16 and the default uint8 storage: {storages:?}");
    grid_common::check("dist_grid/fsdp_qlora_models.json", &ps, 11, &[], run);
}

/// The fixture's points, its releases checked.
fn layout_pairs(file: &str) -> Vec<Value> {
    let doc = grid_common::fixture(file);
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "{file}: the fixture's transformers release");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "{file}: the fixture's releases");
    doc["points"].as_array().unwrap().to_vec()
}

/// What a pairs grid claims: the llama family and issue 30's models, fp32 and bf16 weights, rank
/// 0 and a last rank.
fn covers_pairs(file: &str, ps: &[Value], models: usize) {
    let llama_family = |q: &Value| ["llama", "mistral", "qwen2", "qwen3"].contains(&q["hf"]["model_type"].as_str().unwrap());
    assert!(ps.iter().any(llama_family), "{file}: the llama family");
    let theirs = values(&ps.iter().filter(|q| !llama_family(q)).cloned().collect::<Vec<_>>(), |q| q["hf"]["model_type"].to_string());
    assert!(theirs.len() >= models, "{file}: issue 30's models {theirs:?}");
    assert!(ps.iter().any(|q| DENSE.contains(&q["hf"]["model_type"].as_str().unwrap())) && ps.iter().any(|q| MOE.contains(&q["hf"]["model_type"].as_str().unwrap())), "{file}: families and MoE models");
    assert!(ps.iter().any(|q| q["rank"] == 0) && ps.iter().any(|q| q["rank"] != 0 && q["rank"].as_u64().unwrap() + 1 == q["world_size"].as_u64().unwrap()), "{file}: rank 0 and a last rank");
    assert!(values(ps, |q| q["shard"].to_string()).len() >= 2 || ps.iter().all(|q| q["layout"] != "hsdp"), "{file}: hsdp shards 2 and 3");
}

/// dist_grid/lora_mixed_precision_layouts.json (`measure_dist.py --lora-mixed-precision-layouts`):
/// FSDP2's MixedPrecisionPolicy over peft's LoRA under hsdp, the llama family and issue 30's models.
#[test]
fn lora_mixed_precision_under_hsdp_ranks_match_peft() {
    let file = "dist_grid/lora_mixed_precision_layouts.json";
    let ps = layout_pairs(file);
    covers_pairs(file, &ps, 7);
    assert!(ps.iter().all(|q| q["layout"] == "hsdp"), "hsdp");
    let policy = values(&ps, |q| format!("{}/{}", q["param_dtype"], q["reduce_dtype"]));
    assert_eq!(policy.len(), 3, "bf16/fp32, bf16/- and -/fp32: {policy:?}");
    assert_eq!(values(&ps, |q| q["hf"]["dtype"].to_string()).len(), 2, "fp32 and bf16 weights");
    grid_common::check(file, &ps, 14, KNOWN_FAILING, run);
}

/// dist_grid/lora_extras_layouts.json (`measure_dist.py --lora-extras-layouts`): peft's
/// modules_to_save and trained biases under hsdp, other fully_shard units and reentrant
/// checkpointing.
#[test]
fn modules_to_save_and_lora_bias_under_hsdp_units_and_reentrant_ranks_match_peft() {
    let file = "dist_grid/lora_extras_layouts.json";
    let ps = layout_pairs(file);
    covers_pairs(file, &ps, 6);
    let saves = |q: &Value| q["hf"]["modules_to_save"].as_str().is_some_and(|m| !m.is_empty());
    let bias = |q: &Value| q["hf"]["lora_bias"].as_str().is_some_and(|b| b != "none");
    let option = |q: &Value| if q["hf"]["checkpoint"] == "reentrant" { "reentrant" } else if q["unit"].is_u64() { "units" } else { "hsdp" };
    for what in ["hsdp", "units", "reentrant"] {
        for (extra, f) in [("modules_to_save", &saves as &dyn Fn(&Value) -> bool), ("lora_bias", &bias)] {
            assert!(ps.iter().any(|q| option(q) == what && f(q)), "{extra} with {what}");
        }
    }
    assert_eq!(values(&ps, |q| q["unit"].to_string()), BTreeSet::from(["null".to_string(), "0".into(), "2".into()]), "every 2 layers and the root");
    assert_eq!(values(&ps, |q| q["hf"]["dtype"].to_string()).len(), 2, "fp32 and bf16 weights");
    grid_common::check(file, &ps, 14, KNOWN_FAILING, run);
}

/// dist_grid/fsdp_qlora_layouts.json (`measure_dist.py --fsdp-qlora-layouts`): FSDP-QLoRA
/// (4-bit stored as the compute dtype, bf16 or fp32) under hsdp, other fully_shard units and reentrant checkpointing under hsdp.
#[test]
fn fsdp_qlora_under_hsdp_units_and_reentrant_ranks_match_bitsandbytes() {
    let file = "dist_grid/fsdp_qlora_layouts.json";
    let ps = layout_pairs(file);
    covers_pairs(file, &ps, 7);
    assert!(ps.iter().all(|q| q["hf"]["load_in_4bit"] == true && q["hf"]["quant_storage"] == q["hf"]["compute_dtype"]), "4-bit stored as the compute dtype");
    assert!(ps.iter().any(|q| q["layout"] == "hsdp" && q["hf"]["checkpoint"] == "reentrant"), "reentrant under hsdp");
    assert_eq!(values(&ps, |q| q["unit"].to_string()), BTreeSet::from(["null".to_string(), "0".into(), "2".into()]), "every 2 layers and the root");
    assert_eq!(values(&ps, |q| q["hf"]["quant_type"].to_string()).len(), 2, "nf4 and fp4");
    assert!(ps.iter().any(|q| q["hf"]["compute_dtype"] == "fp32") && ps.iter().any(|q| q["hf"]["compute_dtype"] == "bf16"), "compute fp32 and bf16");
    grid_common::check(file, &ps, 16, KNOWN_FAILING, run);
}

/// What the pairs grids measure runs from the command line (each alone measured before:
/// lora_layouts.json, lora_mixed_precision*.json, lora_extras.json, fsdp_qlora*.json).
#[test]
fn adapters_under_measured_layout_pairs_run() {
    let hsdp = ["--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2"];
    let policy = ["--fsdp-param-dtype", "bfloat16", "--fsdp-reduce-dtype", "float32"];
    let qlora = ["--load-in-4bit", "--bnb-4bit-compute-dtype", "bfloat16", "--bnb-4bit-quant-storage", "bfloat16"];
    let runs: Vec<Vec<&str>> = vec![
        // FSDP2's MixedPrecisionPolicy over LoRA under hsdp (lora_mixed_precision_layouts.json)
        [&["--preset", "Llama-3.2-1B", "--lora-r", "8"][..], &hsdp, &policy].concat(),
        [&["--preset", "Gemma-2-9B", "--lora-r", "8", "--dtype", "bfloat16"][..], &hsdp, &policy].concat(),
        [&["--preset", "Qwen3-30B-A3B", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--fsdp-param-dtype", "bf16"][..], &hsdp].concat(),
        // FSDP-QLoRA under hsdp, other units and reentrant checkpointing under hsdp (fsdp_qlora_layouts.json)
        [&["--preset", "Llama-3.2-1B", "--lora-r", "8"][..], &hsdp, &qlora].concat(),
        [&["--preset", "Mixtral-8x7B", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--gradient-checkpointing", "reentrant"][..], &hsdp, &qlora].concat(),
        [&["--preset", "Gemma-3-27B", "--lora-r", "8", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "root", "--gradient-checkpointing", "non-reentrant"][..], &qlora].concat(),
        [&["--preset", "Qwen3-8B", "--lora-r", "8", "--parallel", "zero2", "--world-size", "3", "--fsdp-unit", "every-2", "--gradient-checkpointing", "none", "--load-in-4bit", "--bnb-4bit-compute-dtype", "float32", "--bnb-4bit-quant-storage", "float32"][..]].concat(),
    ];
    for extra in &runs {
        let out = tmp("pairs");
        let mut args = vec!["profile", "--device", "meta", "--context-length", "64", "--batch-size", "1", "--warmup-steps", "0", "--num-layers", "2", "--out-dir", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = vramscope(&args);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let _ = std::fs::remove_dir_all(&out);
    }
    let refused: Vec<(Vec<&str>, &[&str])> = vec![
        // the policy over adapters with reentrant checkpointing: no grid measures it
        ([&["--preset", "Llama-3.2-1B", "--lora-r", "8", "--gradient-checkpointing", "reentrant"][..], &hsdp, &policy].concat(), &["--gradient-checkpointing", "MixedPrecisionPolicy", "not measured"]),
        ([&["--preset", "Qwen3-8B", "--lora-r", "8", "--gradient-checkpointing", "reentrant", "--parallel", "fsdp", "--world-size", "2"][..], &policy].concat(), &["--gradient-checkpointing", "MixedPrecisionPolicy", "not measured"]),
        // FSDP-QLoRA under hsdp and other units: measured stored as the compute dtype, prepared, each alone
        ([&["--preset", "Llama-3.2-1B", "--lora-r", "8", "--fsdp-unit", "every-2", "--parallel", "fsdp", "--world-size", "2", "--gradient-checkpointing", "reentrant"][..], &qlora].concat(), &["--gradient-checkpointing", "fully_shard units", "not measured"]),
        ([&["--preset", "Llama-3.2-1B", "--lora-r", "8", "--prepare-model-for-kbit-training", "false"][..], &hsdp, &qlora].concat(), &["--prepare-model-for-kbit-training", "hsdp", "not measured"]),
        ([&["--preset", "Qwen3-8B", "--lora-r", "8", "--fsdp-unit", "root", "--gradient-checkpointing", "none", "--load-in-4bit", "--bnb-4bit-compute-dtype", "bfloat16", "--bnb-4bit-quant-storage", "float16", "--parallel", "zero2", "--world-size", "2"][..]].concat(), &["--bnb-4bit-quant-storage", "fsdp-unit", "not measured"]),
        ([&["--preset", "Phi-3-mini", "--lora-r", "8", "--target-modules", "qkv_proj", "--fsdp-unit", "every-2", "--parallel", "fsdp", "--world-size", "2", "--gradient-checkpointing", "reentrant"][..], &qlora].concat(), &["--gradient-checkpointing", "units", "not measured"]),
    ];
    for (args, needles) in &refused {
        let out = tmp("pairs-refused");
        let mut a = vec!["profile", "--device", "meta", "--context-length", "64", "--num-layers", "2", "--out-dir", out.to_str().unwrap()];
        a.extend_from_slice(args);
        let o = vramscope(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        for n in *needles {
            assert!(err.contains(n), "{args:?} should say {n}: {err}");
        }
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}
