//! One rank of transformers 5.23's own tensor parallelism (`--tp-plan auto`) on Mixtral,
//! Qwen3-MoE, Qwen2-MoE and DeepSeek-V3: their attention's colwise/rowwise plan (Qwen3-MoE's
//! q/k norms replicated_with_grad_allreduce, Qwen2-MoE's Shard(0) q/k/v biases; DeepSeek-V3's
//! latent attention is not in its plan: replicated) and the experts' `packed_colwise` gate_up,
//! `rowwise` down under `moe_tp_experts` (local tensors, `_AllReduceBackward` inputs, an
//! in-place all-reduced output), the router and Qwen2-MoE's shared expert replicated,
//! DeepSeek-V3's dense MLPs and shared_experts colwise/rowwise, routing forced; against PyTorch itself:
//! tests/fixtures/dist_grid/tp_hf_moe.json (tools/pytorch/measure_tp_hf.py --moe), per phase,
//! requested bytes of blocks >= 512 B, the third iteration, 16 B per live tensor; the router's
//! auxiliary loss (dist_grid/tp_hf_aux_loss.json, `--aux-loss`) and bf16 autocast
//! (dist_grid/tp_hf_moe_autocast.json, `--moe-autocast`) under the same plans.
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
    pc.validate().unwrap();
    // No --tp-plan: an MoE model runs transformers' plan.
    let point = grid_common::dist::tp_model_point(p);
    // DeepSeek-V3 and Qwen2-MoE's window (use_sliding_window, max_window_layers) through
    // vramscope's config reader.
    let read = p["config"]["model_type"] == "deepseek_v3" || p["config"]["sliding_window"].is_u64();
    let model = if read { grid_common::moe::read_config_of(&point) } else { grid_common::moe::config_of(&point) };
    assert_eq!(pc.model_config(&model).tp.unwrap().plan, TpPlan::Auto, "{}", p["name"]);
    grid_common::dist::run_tp_rank(p, &pc, &model)
}

#[test]
fn transformers_moe_tp_plan_ranks_match_pytorch() {
    let doc = grid_common::fixture("dist_grid/tp_hf_moe.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("dist_grid/tp_hf_moe.json", points, 12, KNOWN_FAILING, run);
}

/// dist_grid/tp_hf_aux_loss.json (`measure_tp_hf.py --aux-loss`): output_router_logits on
/// Mixtral, Qwen3-MoE and Qwen2-MoE under their plans (DeepSeek-V3 has no such loss). The
/// router is replicated, so each rank's logits are the whole (tokens, experts) and the loss
/// runs on plain tensors with no collective: the one-GPU rule, per rank.
#[test]
fn router_aux_loss_under_the_moe_plans_matches_pytorch() {
    let doc = grid_common::fixture("dist_grid/tp_hf_aux_loss.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    assert!(points.iter().all(|p| p["config"]["output_router_logits"] == true));
    for family in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        assert!(points.iter().any(|p| p["config"]["model_type"] == family && p["kind"] == "training"), "tp_hf_aux_loss.json: no {family} training point");
    }
    grid_common::check("dist_grid/tp_hf_aux_loss.json", points, 6, &[], run);
}

/// dist_grid/tp_hf_moe_autocast.json (`measure_tp_hf.py --moe-autocast`): the Trainer's
/// bf16=True (accelerate's prepared forward) under Mixtral's, Qwen3-MoE's, Qwen2-MoE's and
/// DeepSeek-V3's plans, over fp32 and bf16 weights, training, forward and inference; and with
/// the router's auxiliary loss (`MOE_AUTOCAST_AUX_LOSS`: Mixtral, Qwen3-MoE, Qwen2-MoE,
/// training and forward), whose softmaxes run on each rank's full bf16 logits as on one GPU.
#[test]
fn moe_plans_under_autocast_match_pytorch() {
    let doc = grid_common::fixture("dist_grid/tp_hf_moe_autocast.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    assert!(points.iter().all(|p| p["autocast"] == "bf16" && p["amp"] == "accelerate"));
    for family in ["mixtral", "qwen3_moe", "qwen2_moe", "deepseek_v3"] {
        assert!(points.iter().any(|p| p["config"]["model_type"] == family && p["kind"] == "training"), "tp_hf_moe_autocast.json: no {family} training point");
    }
    for family in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        for kind in ["training", "forward"] {
            assert!(points.iter().any(|p| p["config"]["model_type"] == family && p["kind"] == kind && p["config"]["output_router_logits"] == true),
                "tp_hf_moe_autocast.json: no {family} {kind} point with the router's loss");
        }
    }
    // Inference (no_grad): the plan's nn.Linear modules run on their local shards, whose casts
    // autocast does not cache; the ones it leaves out (Qwen2-MoE's shared expert, DeepSeek-V3's
    // latent attention, the routers) keep cached casts (tp::in_plan).
    for family in ["mixtral", "qwen3_moe", "qwen2_moe", "deepseek_v3"] {
        assert!(points.iter().any(|p| p["config"]["model_type"] == family && p["kind"] == "inference"), "tp_hf_moe_autocast.json: no {family} inference point");
    }
    grid_common::check("dist_grid/tp_hf_moe_autocast.json", points, 20, &[], run);
}

/// The router's loss and bf16 autocast run under the MoE plans, alone and together, and
/// autocast in inference.
#[test]
fn aux_loss_and_autocast_under_the_moe_plans_run() {
    for extra in [
        &["--output-router-logits"][..],
        &["--precision", "bf16"][..],
        &["--output-router-logits", "--precision", "bf16"][..],
        &["--precision", "bf16", "--profile-type", "inference"][..],
    ] {
        let dir = scratch::dir().join(format!("vramscope-tp-hf-moe-{}-{}", std::process::id(), extra.join("-")));
        let mut args = vec!["profile", "--preset", "Mixtral-8x7B", "--num-layers", "1", "--dtype", "float32", "--device", "meta", "--warmup-steps", "0",
            "--context-length", "64", "--batch-size", "1", "--parallel", "tp", "--world-size", "2", "--out-dir", dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        if !extra.contains(&"--profile-type") {
            args.extend_from_slice(&["--profile-type", "training", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0"]);
        }
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(&args).output().unwrap();
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
