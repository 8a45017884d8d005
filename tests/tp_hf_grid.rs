//! One rank of transformers 5.23's own tensor parallelism (`--tp-plan auto`, what
//! `from_pretrained(tp_plan="auto")` applies) on phi3, olmo2, gemma2, gemma3_text, llama,
//! mistral, qwen2 and qwen3, with and without activation checkpointing, against PyTorch
//! itself: tests/fixtures/dist_grid/tp_hf.json
//! (tools/pytorch/measure_tp_hf.py:
//! the model's resolved plan through `apply_tensor_parallelism` on a fake process group, trained,
//! run forward or run under no_grad as measure_hf.py does), per phase, requested bytes of blocks >= 512 B, the
//! third iteration, 16 B per live tensor.
mod scratch;
mod grid_common;

use grid_common::hf::num;
use serde_json::Value;
use vramscope::model::tp::TpPlan;
use vramscope::parallel::{Layout, ParallelConfig};
use vramscope::record::MemEvent;

/// Points where vramscope does not match PyTorch, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

fn run(p: &Value) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let mut pc = ParallelConfig::new(Layout::Tp, num(p, "tp"));
    pc.rank = num(p, "rank");
    // transformers' plan, or torch's where the point names it (tp_hf_autocast.json).
    pc.tp_plan = Some(if p["tp_plan"] == "torch" { TpPlan::Torch } else { TpPlan::Auto });
    pc.validate().unwrap();
    grid_common::dist::run_tp_rank(p, &pc, &grid_common::hf::config_of(&grid_common::dist::tp_model_point(p)))
}

#[test]
fn transformers_tp_plan_ranks_match_pytorch() {
    let doc = grid_common::fixture("dist_grid/tp_hf.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("dist_grid/tp_hf.json", points, 12, KNOWN_FAILING, run);
}

/// dist_grid/tp_hf_autocast.json (`measure_tp_hf.py --autocast`): the Trainer's bf16=True under
/// the plan (accelerate's prepared forward), over fp32 and bf16 weights, training, forward and
/// inference. A forward converts its logits to fp32 with labels or without; without grad the
/// styles' local weights do not require grad, so autocast casts them in every linear and keeps
/// no copy. (fp16 with the GradScaler stops in PyTorch itself, and is refused.)
#[test]
fn transformers_tp_plan_under_autocast_matches_pytorch() {
    let doc = grid_common::fixture("dist_grid/tp_hf_autocast.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    assert!(points.iter().all(|p| p["autocast"] == "bf16" && p["amp"] == "accelerate"));
    for kind in ["training", "forward", "inference"] {
        for dtype in ["fp32", "bf16"] {
            assert!(points.iter().any(|p| p["kind"] == kind && p["dtype"] == dtype), "tp_hf_autocast.json: no {kind} point over {dtype} weights");
        }
    }
    for plan in ["auto", "torch"] {
        for kind in ["training", "forward", "inference"] {
            assert!(points.iter().any(|p| p["tp_plan"].as_str().unwrap_or("auto") == plan && p["kind"] == kind), "tp_hf_autocast.json: no {kind} point under the {plan} plan");
        }
    }
    grid_common::check("dist_grid/tp_hf_autocast.json", points, 23, KNOWN_FAILING, run);
}

/// fp16 under tensor parallelism stops in PyTorch itself; bf16 autocast with sequence
/// parallelism is not measured. bf16 under either plan runs every profile type.
#[test]
fn autocast_under_the_plan_is_refused_where_it_is_not_modelled() {
    for (extra, needle) in [
        (&["--precision", "fp16", "--profile-type", "training"][..], Some("GradScaler")),
        (&["--precision", "bf16", "--profile-type", "training", "--tp-plan", "torch", "--sequence-parallel"][..], Some("--sequence-parallel")),
        (&["--precision", "bf16", "--profile-type", "inference", "--tp-plan", "torch"][..], None),
        (&["--precision", "bf16", "--profile-type", "training", "--tp-plan", "torch", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0"][..], None),
        (&["--precision", "bf16", "--profile-type", "training", "--tp-plan", "auto", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0"][..], None),
        (&["--precision", "bf16", "--profile-type", "inference", "--tp-plan", "auto"][..], None),
        (&["--precision", "bf16", "--profile-type", "forward", "--tp-plan", "auto"][..], None),
    ] {
        // Llama-3.1-8B: an untied head (torch's plan refuses a tied one).
        let mut args = vec!["profile", "--model", "Llama-3.1-8B", "--num-layers", "1", "--dtype", "float32", "--device", "meta", "--warmup-steps", "0",
            "--context-length", "64", "--batch-size", "1", "--parallel", "tp", "--tp", "2", "--world-size", "2"];
        args.extend_from_slice(extra);
        let dir = scratch::dir().join(format!("vramscope-tp-hf-autocast-{}-{}", std::process::id(), extra.join("-")));
        args.extend_from_slice(&["--out-dir", dir.to_str().unwrap()]);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        match needle {
            Some(needle) => {
                assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
                assert!(err.contains("--precision") && err.contains(needle), "{extra:?}: {err}");
            }
            None => assert!(o.status.success(), "{extra:?}: {err}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn the_plan_is_named_in_the_model() {
    let doc = grid_common::fixture("dist_grid/tp_hf.json");
    for p in doc["points"].as_array().unwrap() {
        let mut pc = ParallelConfig::new(Layout::Tp, num(p, "tp"));
        pc.rank = num(p, "rank");
        // No --tp-plan: the families run transformers' plan, the Llama-style models torch's.
        let cfg = pc.model_config(&grid_common::hf::config_of(&grid_common::dist::tp_model_point(p)));
        let llama_style = ["llama", "mistral", "qwen2", "qwen3"].contains(&p["config"]["model_type"].as_str().unwrap());
        let want = if llama_style { TpPlan::Torch } else { TpPlan::Auto };
        assert_eq!(cfg.tp.unwrap().plan, want, "{}", p["name"]);
    }
}
