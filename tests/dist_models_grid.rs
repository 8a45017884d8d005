//! One rank of a data-parallel job over issue 30's models against PyTorch and transformers
//! themselves: tests/fixtures/dist_grid/families.json (Phi-3, OLMo-2, Gemma 2, Gemma 3 text),
//! moe.json (Mixtral, Qwen3-MoE, Qwen2-MoE), qwen2_moe_sliding.json (Qwen2-MoE with its window)
//! and gpt_oss_deepseek.json (gpt-oss, DeepSeek-V3),
//! the MoE ones with forced routing, from `tools/pytorch/measure_dist.py --families / --moe /
//! --gpt-oss-deepseek`: DistributedDataParallel and ZeRO-1 over
//! gloo processes, FSDP2 `fully_shard` per decoder layer then the model (and ZeRO-2, the same
//! without resharding after forward) under the fake process group; measure_hf.py's loop of the
//! point's profile type; per phase, requested bytes of blocks >= 512 B, the third iteration.
mod scratch;
mod grid_common;

use serde_json::Value;
use std::collections::BTreeSet;

/// Points where vramscope does not match, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

/// Each of `values` appears among the points' `key` (the grid covers what it claims).
fn covers(points: &[Value], key: impl Fn(&Value) -> String, values: &[&str], file: &str) {
    let seen: BTreeSet<String> = points.iter().map(key).collect();
    for v in values {
        assert!(seen.contains(*v), "{file}: no point with {v} ({seen:?})");
    }
}

fn check(file: &str, min: usize, families: &[&str], cfg: fn(&Value) -> vramscope::model::ModelConfig) {
    let doc = grid_common::fixture(&format!("dist_grid/{file}"));
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    covers(points, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), families, file);
    covers(points, |p| p["layout"].as_str().unwrap().to_string(), &["ddp", "zero1", "zero2", "fsdp"], file);
    covers(points, |p| p["profile_type"].as_str().unwrap().to_string(), &["inference", "forward", "training"], file);
    covers(points, |p| p["world_size"].to_string(), &["2", "3", "4"], file);
    covers(points, |p| p["hf"]["checkpoint"].as_str().unwrap().to_string(), &["none", "non-reentrant"], file);
    grid_common::check(&format!("dist_grid/{file}"), points, min, KNOWN_FAILING, |point| grid_common::dist::run_rank(point, cfg(&point["hf"])));
}

#[test]
fn family_ranks_match_transformers() {
    check("families.json", 12, &["phi3", "olmo2", "gemma2", "gemma3_text"], grid_common::hf::config_of);
}

/// An MoE fixture: every experts implementation and both routings, which reached each run.
fn check_moe(file: &str, families: &[&str], cfg: fn(&Value) -> vramscope::model::ModelConfig) {
    let doc = grid_common::fixture(&format!("dist_grid/{file}"));
    let all = doc["points"].as_array().unwrap();
    for q in all {
        // The forced routing reached the run: tokens per expert as the routing says.
        let p = &q["hf"];
        let (t, k, e) = (p["batch"].as_u64().unwrap() * p["seq"].as_u64().unwrap(), p["top_k"].as_u64().unwrap(), p["num_experts"].as_u64().unwrap());
        let per: Vec<u64> = q["info"]["tokens_per_expert"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(per.iter().sum::<u64>(), t * k, "{}", q["name"]);
        match p["routing"].as_str().unwrap() {
            "worst" => assert!(per.iter().enumerate().all(|(i, &n)| n == if (i as u64) < k { t } else { 0 }), "{}: {per:?}", q["name"]),
            _ => assert!(per.iter().all(|&n| n == t * k / e || n == t * k / e + 1), "{}: {per:?}", q["name"]),
        }
    }
    covers(all, |p| p["hf"]["experts"].as_str().unwrap().to_string(), &["eager", "batched_mm", "grouped_mm"], file);
    covers(all, |p| p["hf"]["routing"].as_str().unwrap().to_string(), &["balanced", "worst"], file);
    check(file, 12, families, cfg);
}

#[test]
fn moe_ranks_match_transformers() {
    check_moe("moe.json", &["mixtral", "qwen3_moe", "qwen2_moe"], grid_common::moe::config_of);
}

/// dist_grid/qwen2_moe_sliding.json (`measure_dist.py --qwen2-moe-sliding`): Qwen2-MoE with
/// use_sliding_window (layers 0, 2, ... below max_window_layers slide: some, all or none of
/// them) under each layout, first and last ranks, its config.json read as a user's.
#[test]
fn qwen2_moe_sliding_ranks_match_transformers() {
    let file = "qwen2_moe_sliding.json";
    let doc = grid_common::fixture(&format!("dist_grid/{file}"));
    let points = doc["points"].as_array().unwrap();
    let u = |q: &Value, k: &str| q["hf"][k].as_u64().unwrap();
    assert!(points.iter().all(|q| q["hf"]["model_type"] == "qwen2_moe" && u(q, "sliding_window") > 0), "{file}: every point has the window");
    assert!(points.iter().any(|q| u(q, "sliding_window") < u(q, "seq")) && points.iter().any(|q| u(q, "sliding_window") > u(q, "seq")), "{file}: windows shorter and longer than the context");
    assert!(points.iter().any(|q| u(q, "max_window_layers") > 0 && u(q, "max_window_layers") < u(q, "num_layers")), "{file}: max_window_layers cutting the stack");
    assert!(points.iter().any(|q| u(q, "max_window_layers") == 0), "{file}: no layer sliding");
    for layout in ["ddp", "zero1", "zero2", "fsdp"] {
        let ranks: BTreeSet<bool> = points.iter().filter(|q| q["layout"] == layout && q["profile_type"] == "training").map(|q| q["rank"] == 0).collect();
        assert_eq!(ranks.len(), 2, "{file}: {layout} training at rank 0 and the last");
    }
    for q in points {
        let cfg = grid_common::moe::read_config_of(&q["hf"]);
        let want: Vec<bool> = (0..u(q, "num_layers")).map(|i| i % 2 == 0 && i < u(q, "max_window_layers")).collect();
        assert_eq!(cfg.hf.as_ref().unwrap().sliding_layers, Some(want), "{}", q["name"]);
    }
    check_moe(file, &["qwen2_moe"], grid_common::moe::read_config_of);
}

/// dist_grid/autocast.json (`measure_dist.py --autocast`): the Trainer's bf16=True / fp16=True
/// under each layout -- accelerate's prepared forward (its fp32 copy of the logits) patched
/// before DDP wraps the model, over fp32 and bf16 weights, fp16 with the GradScaler under DDP --
/// and one plain torch.autocast point, over dense models, a family and two MoE models.
#[test]
fn autocast_ranks_match_transformers() {
    let file = "autocast.json";
    let doc = grid_common::fixture(&format!("dist_grid/{file}"));
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    covers(points, |p| p["layout"].as_str().unwrap().to_string(), &["ddp", "zero1", "zero2", "fsdp"], file);
    covers(points, |p| p["hf"]["autocast"].as_str().unwrap().to_string(), &["bf16", "fp16"], file);
    covers(points, |p| p["hf"]["amp"].as_str().unwrap().to_string(), &["accelerate", "torch"], file);
    covers(points, |p| p["hf"]["dtype"].as_str().unwrap().to_string(), &["fp32", "bf16"], file);
    covers(points, |p| p["profile_type"].as_str().unwrap().to_string(), &["inference", "forward", "training"], file);
    covers(points, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["llama", "phi3", "gemma3_text", "mixtral", "qwen3_moe"], file);
    // DDP's forward-only step once started one parameter-sized block high (2,337,344 B: every
    // parameter and buffer, the construction's flattened broadcast, freed on gloo's worker
    // thread where the profiler does not see it); measure_dist.py's main_thread_broadcasts
    // frees it where it is seen. The inference points pinned that accelerate converts the
    // logits after its autocast region has returned: the cached weight casts are gone by then.
    for layout in ["ddp", "zero1", "zero2", "fsdp"] {
        for kind in ["training", "forward", "inference"] {
            assert!(points.iter().any(|p| p["layout"] == layout && p["profile_type"] == kind), "{file}: no {kind} point under {layout}");
        }
    }
    grid_common::check(&format!("dist_grid/{file}"), points, 24, KNOWN_FAILING, |point| {
        let cfg = if point["hf"].get("num_experts").is_some() { grid_common::moe::config_of(&point["hf"]) } else { grid_common::hf::config_of(&point["hf"]) };
        grid_common::dist::run_rank(point, cfg)
    });
}

/// What autocast.json does not match (or does not measure) under a layout is refused.
#[test]
fn autocast_under_a_layout_is_refused_where_it_is_not_matched() {
    let base = ["profile", "--model", "Llama-3.2-1B", "--num-layers", "1", "--dtype", "float32", "--precision", "bf16", "--device", "meta", "--warmup-steps", "0", "--context-length", "64", "--batch-size", "1", "--world-size", "2"];
    for (extra, ok) in [
        (&["--parallel", "ddp", "--profile-type", "training"][..], true),
        (&["--parallel", "fsdp", "--profile-type", "inference"][..], true),
        (&["--parallel", "ddp", "--profile-type", "forward"][..], true),
        (&["--parallel", "zero1", "--profile-type", "forward"][..], true),
        (&["--parallel", "zero2", "--profile-type", "forward"][..], true),
        (&["--parallel", "fsdp", "--profile-type", "forward"][..], true),
        (&["--parallel", "ddp", "--profile-type", "inference"][..], true),
        (&["--parallel", "zero1", "--profile-type", "inference"][..], true),
        (&["--parallel", "zero2", "--profile-type", "inference"][..], true),
        (&["--parallel", "ddp", "--profile-type", "forward-loss"][..], false),
        (&["--parallel", "fsdp", "--profile-type", "forward-loss"][..], false),
    ] {
        let dir = tmp(&format!("autocast-{}", extra.join("-")));
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--out-dir", dir.to_str().unwrap()]);
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        if ok {
            assert!(o.status.success(), "{extra:?}: {err}");
        } else {
            assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
            assert!(err.contains("--precision") && err.contains("autocast.json"), "{extra:?}: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn gpt_oss_and_deepseek_ranks_match_transformers() {
    check_moe("gpt_oss_deepseek.json", &["gpt_oss", "deepseek_v3"], grid_common::moe::read_config_of);
}

/// A fixture's points, measured under this transformers release.
fn points_of(file: &str) -> Vec<Value> {
    let doc = grid_common::fixture(&format!("dist_grid/{file}"));
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "{file}: the fixture's transformers release");
    doc["points"].as_array().unwrap().clone()
}

/// Each of `layouts` has a training point at rank 0 and one at the last rank.
fn first_and_last_ranks(points: &[Value], layouts: &[&str], file: &str) {
    for layout in layouts {
        let training = || points.iter().filter(|q| q["layout"] == *layout && q["profile_type"] == "training");
        assert!(training().any(|q| q["rank"] == 0), "{file}: {layout} training at rank 0");
        assert!(training().any(|q| q["rank"].as_u64().unwrap() + 1 == q["world_size"].as_u64().unwrap()), "{file}: {layout} training at the last rank");
    }
}

/// The families' and the MoE models' configs, as the one-GPU grids read them (peft's adapters
/// included where the point has them).
fn model_of(p: &Value) -> vramscope::model::ModelConfig {
    if p.get("num_experts").is_some() { grid_common::moe::point_model(p) } else { grid_common::hf::config_of(p) }
}

/// dist_grid/aux_loss.json (`measure_dist.py --aux-loss`): the router's auxiliary loss
/// (output_router_logits, make_aux_loss_grid.py's rows) under ddp, zero1, zero2 and fsdp. The
/// loss is the model's own (its captured router logits die with the output), so a layout changes
/// nothing of it but where the parameters, gradients and optimizer state live.
#[test]
fn aux_loss_ranks_match_transformers() {
    let file = "aux_loss.json";
    let points = points_of(file);
    assert!(points.iter().all(|q| q["hf"]["output_router_logits"] == true), "{file}: every point has the loss on");
    covers(&points, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss"], file);
    covers(&points, |p| p["layout"].as_str().unwrap().to_string(), &["ddp", "zero1", "zero2", "fsdp"], file);
    covers(&points, |p| p["profile_type"].as_str().unwrap().to_string(), &["inference", "forward", "training"], file);
    covers(&points, |p| p["hf"]["attention_mask"].as_str().unwrap().to_string(), &["none", "ones"], file);
    first_and_last_ranks(&points, &["ddp", "zero1", "zero2", "fsdp"], file);
    grid_common::check(&format!("dist_grid/{file}"), &points, 12, KNOWN_FAILING, |point| grid_common::dist::run_rank(point, model_of(&point["hf"])));
}

/// dist_grid/aux_loss_lora.json (`measure_dist.py --aux-loss-lora`): the router's loss beside
/// peft's LoRA (the attention, Qwen2-MoE's shared expert, the router through ParamWrapper) and
/// 4-bit QLoRA under ddp: DDP buckets only the adapters' gradients; the loss is the model's own.
#[test]
fn aux_loss_lora_ranks_match_peft() {
    let file = "aux_loss_lora.json";
    let points = points_of(file);
    assert!(points.iter().all(|q| q["hf"]["output_router_logits"] == true && q["hf"]["lora_r"].as_u64() > Some(0) && q["layout"] == "ddp"), "{file}: the loss and adapters on, under ddp");
    covers(&points, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss"], file);
    covers(&points, |p| p["hf"]["checkpoint"].as_str().unwrap().to_string(), &["none", "non-reentrant", "reentrant"], file);
    covers(&points, |p| (p["hf"]["load_in_4bit"] == true).to_string(), &["false", "true"], file);
    covers(&points, |p| p["hf"]["target_parameters"].is_string().to_string(), &["false", "true"], file);
    first_and_last_ranks(&points, &["ddp"], file);
    grid_common::check(&format!("dist_grid/{file}"), &points, 6, KNOWN_FAILING, |point| grid_common::dist::run_rank(point, model_of(&point["hf"])));
}

/// dist_grid/mixed_precision.json (`measure_dist.py --mixed-precision`): FSDP2's
/// MixedPrecisionPolicy (bf16 param_dtype over fp32 weights, reduce_dtype fp32 or unset, and
/// reduce_dtype alone over bf16 weights) under fsdp and zero2, checkpointing off and
/// non-reentrant.
#[test]
fn mixed_precision_ranks_match_transformers() {
    let file = "mixed_precision.json";
    let points = points_of(file);
    covers(&points, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"], file);
    covers(&points, |p| p["layout"].as_str().unwrap().to_string(), &["zero2", "fsdp"], file);
    covers(&points, |p| p["profile_type"].as_str().unwrap().to_string(), &["forward", "training"], file);
    covers(&points, |p| p["hf"]["checkpoint"].as_str().unwrap().to_string(), &["none", "non-reentrant"], file);
    covers(&points, |p| format!("{}/{}", p["param_dtype"].as_str().unwrap_or("-"), p["reduce_dtype"].as_str().unwrap_or("-")), &["bf16/fp32", "bf16/-", "-/fp32"], file);
    first_and_last_ranks(&points, &["zero2", "fsdp"], file);
    // OLMo-2's norms give fp32 gradients beside bf16 ones (grad_dtype None in backward): a
    // bf16 + fp32 reduce-scatter copy-in, whose CPU casts are left out as CPU-only (rule 11).
    assert!(points.iter().any(|q| q["hf"]["model_type"] == "olmo2" && q["reduce_dtype"] == "fp32" && q["hf"]["dtype"] == "bf16"), "{file}: an OLMo-2 point reducing bf16 and fp32 gradients in fp32");
    grid_common::check(&format!("dist_grid/{file}"), &points, 16, KNOWN_FAILING, |point| grid_common::dist::run_rank(point, model_of(&point["hf"])));
}

/// dist_grid/mixed_precision_pairs.json (`measure_dist.py --mixed-precision-pairs`): FSDP2's
/// MixedPrecisionPolicy together with hsdp (families and MoE models) and together with the
/// router's auxiliary loss (fsdp and zero2), the pairs mixed_precision.json, units.json and
/// aux_loss.json measure one at a time.
#[test]
fn mixed_precision_pairs_match_transformers() {
    let file = "mixed_precision_pairs.json";
    let points = points_of(file);
    let policy = |p: &Value| format!("{}/{}", p["param_dtype"].as_str().unwrap_or("-"), p["reduce_dtype"].as_str().unwrap_or("-"));
    assert!(points.iter().all(|q| policy(q) != "-/-"), "{file}: every point has a policy");
    let hsdp: Vec<Value> = points.iter().filter(|q| q["layout"] == "hsdp").cloned().collect();
    let aux: Vec<Value> = points.iter().filter(|q| q["hf"]["output_router_logits"] == true).cloned().collect();
    assert!(hsdp.len() >= 6 && aux.len() >= 6, "{file}: {} hsdp and {} router-loss points", hsdp.len(), aux.len());
    assert!(aux.iter().all(|q| q["layout"] != "hsdp"), "{file}: the pairs one at a time");
    for (set, name) in [(&hsdp, "hsdp"), (&aux, "aux")] {
        covers(set, policy, &["bf16/fp32", "bf16/-", "-/fp32"], &format!("{file} {name}"));
        covers(set, |p| p["hf"]["dtype"].as_str().unwrap().to_string(), &["fp32", "bf16"], &format!("{file} {name}"));
        assert!(set.iter().any(|q| q["rank"] == 0) && set.iter().any(|q| q["rank"].as_u64().unwrap() + 1 == q["world_size"].as_u64().unwrap()), "{file} {name}: rank 0 and a last rank");
    }
    covers(&hsdp, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3"], file);
    covers(&aux, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss"], file);
    covers(&aux, |p| p["layout"].as_str().unwrap().to_string(), &["fsdp", "zero2"], file);
    grid_common::check(&format!("dist_grid/{file}"), &points, 16, KNOWN_FAILING, |point| grid_common::dist::run_rank(point, model_of(&point["hf"])));
}

/// dist_grid/reentrant_mixed_precision.json (`measure_dist.py --reentrant-mixed-precision`):
/// reentrant checkpointing together with FSDP2's MixedPrecisionPolicy under fsdp per decoder
/// layer, full weights. The cast of a layer's inputs (cast_forward_inputs) runs in FSDP2's
/// pre-forward hook, outside transformers' checkpoint of the layer's forward, once.
#[test]
fn reentrant_with_mixed_precision_matches_transformers() {
    let file = "reentrant_mixed_precision.json";
    let points = points_of(file);
    assert!(points.iter().all(|q| q["hf"]["checkpoint"] == "reentrant" && q["layout"] == "fsdp"), "{file}: reentrant checkpointing under fsdp");
    covers(&points, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["phi3", "olmo2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss"], file);
    covers(&points, |p| format!("{}/{}", p["param_dtype"].as_str().unwrap_or("-"), p["reduce_dtype"].as_str().unwrap_or("-")), &["bf16/fp32", "bf16/-", "-/fp32"], file);
    first_and_last_ranks(&points, &["fsdp"], file);
    grid_common::check(&format!("dist_grid/{file}"), &points, 8, KNOWN_FAILING, |point| grid_common::dist::run_rank(point, model_of(&point["hf"])));
}

/// dist_grid/reentrant.json (`measure_dist.py --reentrant`): reentrant checkpointing under
/// FSDP2 resharding after forward, fsdp per decoder layer and hsdp, on the families and the MoE
/// models. transformers 5.23 checkpoints the layer's `forward`, so FSDP2's module hooks run
/// outside the checkpoint, once: the recomputation gathers nothing and reshards nothing.
#[test]
fn reentrant_ranks_match_transformers() {
    let file = "reentrant.json";
    let points = points_of(file);
    assert!(points.iter().all(|q| q["hf"]["checkpoint"] == "reentrant"), "{file}: every point checkpoints reentrantly");
    covers(&points, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"], file);
    covers(&points, |p| p["layout"].as_str().unwrap().to_string(), &["fsdp", "hsdp"], file);
    first_and_last_ranks(&points, &["fsdp", "hsdp"], file);
    grid_common::check(&format!("dist_grid/{file}"), &points, 9, KNOWN_FAILING, |point| grid_common::dist::run_rank(point, model_of(&point["hf"])));
}

/// dist_grid/units.json (`measure_dist.py --units`): fully_shard on every N consecutive decoder
/// layers as one group (`--fsdp-unit every-N`) or on the root alone (`root`) under fsdp and
/// zero2, and hsdp (a (world / 2, 2) mesh: `--gpus-per-node 2`).
#[test]
fn units_and_hsdp_ranks_match_transformers() {
    let file = "units.json";
    let points = points_of(file);
    covers(&points, |p| p["hf"]["model_type"].as_str().unwrap().to_string(), &["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3"], file);
    covers(&points, |p| p["layout"].as_str().unwrap().to_string(), &["zero2", "fsdp", "hsdp"], file);
    covers(&points, |p| p["unit"].to_string(), &["0", "2"], file);
    covers(&points, |p| p["profile_type"].as_str().unwrap().to_string(), &["inference", "training"], file);
    first_and_last_ranks(&points, &["zero2", "fsdp", "hsdp"], file);
    grid_common::check(&format!("dist_grid/{file}"), &points, 10, KNOWN_FAILING, |point| grid_common::dist::run_rank(point, model_of(&point["hf"])));
}

fn vramscope(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = scratch::dir().join(format!("vramscope-dist-models-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `profile --parallel fsdp` of a published family and MoE config: each distinct rank is
/// profiled, one FSDP unit per decoder layer plus the root, and a rank holds less than DDP's.
#[test]
fn published_models_profile_per_rank() {
    for (preset, extra) in [("Gemma-3-27B", vec![]), ("Qwen3-30B-A3B", vec!["--routing", "balanced"]), ("gpt-oss-20b", vec!["--routing", "worst"])] {
        let mut peaks = Vec::new();
        for layout in ["ddp", "fsdp"] {
            let out = tmp(&format!("{preset}-{layout}"));
            let mut args = vec!["profile", "--preset", preset, "--device", "meta", "--profile-type", "training", "--context-length", "256", "--batch-size", "1", "--warmup-steps", "1"];
            args.extend(["--parallel", layout, "--world-size", "8", "--out-dir", out.to_str().unwrap()]);
            args.extend(&extra);
            let o = vramscope(&args);
            assert!(o.status.success(), "{preset} {layout}: {}", String::from_utf8_lossy(&o.stderr));
            let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
            assert_eq!(s["parallel"]["layout"], layout);
            let r0 = &s["runs"][0];
            if layout == "fsdp" {
                let layers = vramscope::model::presets::find(preset, None).unwrap().model.num_layers;
                assert_eq!(r0["fsdp_units"].as_array().unwrap().len(), layers + 1, "{preset}: the root and one unit per decoder layer");
            }
            peaks.push(r0["peak_allocated_bytes"].as_u64().unwrap());
            let _ = std::fs::remove_dir_all(&out);
        }
        assert!(peaks[1] < peaks[0], "{preset}: an FSDP rank holds less than a DDP one: {peaks:?}");
    }
}

/// What aux_loss.json, units.json, mixed_precision.json, mixed_precision_pairs.json,
/// reentrant.json and reentrant_mixed_precision.json measure runs from the command line.
#[test]
fn measured_fsdp_options_and_the_router_loss_run() {
    for extra in [
        &["--preset", "Mixtral-8x7B", "--output-router-logits", "--parallel", "zero1", "--world-size", "2"][..],
        &["--preset", "gpt-oss-20b", "--output-router-logits", "--parallel", "fsdp", "--world-size", "4"][..],
        &["--preset", "Qwen3-30B-A3B", "--parallel", "zero2", "--world-size", "4", "--fsdp-unit", "root"][..],
        &["--preset", "OLMo-2-7B", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "every-2"][..],
        &["--preset", "Gemma-2-9B", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "root"][..],
        &["--preset", "Gemma-3-27B", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2"][..],
        // mixed_precision.json and reentrant.json
        &["--preset", "OLMo-2-7B", "--parallel", "fsdp", "--world-size", "2", "--fsdp-param-dtype", "bf16", "--fsdp-reduce-dtype", "fp32"][..],
        &["--preset", "Qwen3-30B-A3B", "--parallel", "zero2", "--world-size", "4", "--fsdp-reduce-dtype", "fp32", "--dtype", "bfloat16"][..],
        // mixed_precision_pairs.json
        &["--preset", "Gemma-2-9B", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2", "--fsdp-param-dtype", "bf16"][..],
        &["--preset", "DeepSeek-V3", "--attn-implementation", "eager", "--parallel", "hsdp", "--world-size", "8", "--gpus-per-node", "2", "--fsdp-reduce-dtype", "fp32", "--dtype", "bfloat16"][..],
        &["--preset", "Mixtral-8x7B", "--parallel", "fsdp", "--world-size", "2", "--output-router-logits", "--fsdp-param-dtype", "bf16", "--fsdp-reduce-dtype", "fp32"][..],
        &["--preset", "Mixtral-8x7B", "--parallel", "fsdp", "--world-size", "2", "--gradient-checkpointing", "reentrant"][..],
        &["--preset", "Mixtral-8x7B", "--parallel", "fsdp", "--world-size", "2", "--gradient-checkpointing", "reentrant", "--fsdp-param-dtype", "bf16"][..],
        &["--preset", "Gemma-3-27B", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2", "--gradient-checkpointing", "reentrant"][..],
    ] {
        let out = tmp("measured");
        let mut args = vec!["profile", "--device", "meta", "--context-length", "64", "--batch-size", "1", "--warmup-steps", "0", "--num-layers", "2", "--out-dir", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = vramscope(&args);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// What the grid does not cover exits 2 naming the flag, with nothing written.
#[test]
fn layouts_not_measured_for_these_models_are_refused() {
    let cases: &[(&[&str], &[&str])] = &[
        // hsdp, MixedPrecisionPolicy, other units and the router's loss are measured one at a
        // time, and the policy with hsdp or with the router's loss (mixed_precision_pairs.json).
        (&["--preset", "Mixtral-8x7B", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2", "--output-router-logits"], &["--parallel", "router", "aux_loss.json", "not measured"]),
        (&["--preset", "Mixtral-8x7B", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2", "--output-router-logits", "--fsdp-param-dtype", "bf16"], &["--parallel", "router", "MixedPrecisionPolicy", "mixed_precision_pairs.json", "not measured"]),
        // (over peft's LoRA the policy under hsdp runs: lora_mixed_precision_layouts.json; not over 4-bit weights)
        (&["--preset", "Gemma-2-9B", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2", "--fsdp-param-dtype", "bf16", "--lora-r", "8", "--load-in-4bit", "--bnb-4bit-quant-storage", "bfloat16", "--gradient-checkpointing", "non-reentrant"], &["--parallel", "hsdp", "bitsandbytes", "not measured"]),
        // The policy over peft's adapters on modules is measured (lora_mixed_precision_models.json); not through ParamWrapper.
        (&["--preset", "Qwen3-30B-A3B", "--experts-implementation", "grouped_mm", "--parallel", "fsdp", "--world-size", "2", "--fsdp-param-dtype", "bf16", "--lora-r", "8", "--target-parameters", "mlp.experts.gate_up_proj"], &["--target-parameters", "MixedPrecisionPolicy", "not measured"]),
        (&["--preset", "OLMo-2-7B", "--parallel", "fsdp", "--world-size", "2", "--fsdp-param-dtype", "bf16", "--fsdp-unit", "every-2", "--lora-r", "8", "--target-modules", "q_proj"], &["--fsdp-unit", "MixedPrecisionPolicy", "not measured"]),
        (&["--preset", "Phi-3-mini", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2", "--fsdp-unit", "every-2"], &["--fsdp-unit", "hsdp", "not measured"]),
        // Reentrant checkpointing under fsdp and hsdp is measured alone (reentrant.json).
        // (with the policy under fsdp too: reentrant_mixed_precision.json; not under hsdp)
        (&["--preset", "Mixtral-8x7B", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2", "--gradient-checkpointing", "reentrant", "--fsdp-param-dtype", "bf16"], &["--gradient-checkpointing", "reentrant", "MixedPrecisionPolicy", "not measured"]),
        (&["--preset", "Phi-3-mini", "--parallel", "fsdp", "--world-size", "2", "--gradient-checkpointing", "reentrant", "--fsdp-unit", "every-2"], &["--gradient-checkpointing", "reentrant", "units", "not measured"]),
        (&["--preset", "OLMo-2-7B", "--parallel", "fsdp", "--world-size", "2", "--offload", "params"], &["--offload", "not measured"]),
        (&["--preset", "Mixtral-8x7B", "--parallel", "zero2", "--world-size", "2", "--fsdp-unit", "root", "--output-router-logits"], &["--fsdp-unit", "not measured"]),
        // (peft's LoRA under other units, hsdp and reentrant runs: lora_layouts.json; 4-bit QLoRA
        // under other units and hsdp too, fsdp_qlora_layouts.json, but not under hsdp with other units)
        (&["--preset", "Phi-3-mini", "--parallel", "hsdp", "--world-size", "4", "--gpus-per-node", "2", "--fsdp-unit", "every-2", "--lora-r", "8", "--target-modules", "qkv_proj", "--load-in-4bit", "--bnb-4bit-quant-storage", "bfloat16", "--gradient-checkpointing", "none"], &["--fsdp-unit", "hsdp", "not measured"]),
        // Phi-3 runs transformers' own tensor-parallel plan (tests/tp_hf_grid.rs), not torch's.
        (&["--preset", "Phi-3-mini", "--parallel", "tp", "--world-size", "2", "--tp-plan", "torch", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0"], &["--tp-plan", "base_model_tp_plan"]),
        // Mixtral's, Qwen3-MoE's, Qwen2-MoE's and DeepSeek-V3's plans run (tests/tp_hf_moe_grid.rs);
        // gpt-oss has none (transformers 5.23's GptOssConfig names no base_model_tp_plan).
        (&["--preset", "gpt-oss-20b", "--parallel", "tp", "--world-size", "2", "--tp-plan", "auto"], &["--parallel", "base_model_tp_plan", "not measured", "no --ep"]),
        (&["--preset", "Mixtral-8x7B", "--parallel", "tp", "--world-size", "2", "--tp-plan", "torch"], &["--tp-plan", "3-D experts"]),
        (&["--preset", "Mixtral-8x7B", "--parallel", "fsdp", "--world-size", "4", "--tp", "2"], &["--tp", "expert-parallel", "no --ep"]),
        // (modules_to_save under hsdp runs: lora_extras_layouts.json; bf16 copies in the root unit beside the fp32 adapters raise in PyTorch)
        (&["--preset", "gpt-oss-20b", "--parallel", "fsdp", "--world-size", "2", "--fsdp-unit", "root", "--dtype", "bfloat16", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--modules-to-save", "lm_head"], &["--modules-to-save", "uniform original parameter dtype"]),
        (&["--preset", "DeepSeek-V3", "--attn-implementation", "eager", "--parallel", "hsdp", "--world-size", "8", "--gpus-per-node", "2", "--fsdp-reduce-dtype", "fp32", "--fsdp-unit", "every-2"], &["--fsdp-unit", "deepseek_v3", "not measured"]),
        (&["--preset", "DeepSeek-V3", "--attn-implementation", "eager", "--parallel", "fsdp", "--world-size", "4", "--tp", "2"], &["--tp", "no --ep"]),
    ];
    for (extra, needles) in cases {
        let out = tmp("refused");
        let mut args = vec!["profile", "--device", "meta", "--context-length", "64", "--out-dir", out.to_str().unwrap()];
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
