//! One rank of transformers 5.23's own tensor parallelism (`--tp-plan auto`) on Mixtral,
//! Qwen3-MoE, Qwen2-MoE and DeepSeek-V3: their attention's colwise/rowwise plan (Qwen3-MoE's
//! q/k norms replicated_with_grad_allreduce, Qwen2-MoE's Shard(0) q/k/v biases; DeepSeek-V3's
//! latent attention is not in its plan: replicated) and the experts' `packed_colwise` gate_up,
//! `rowwise` down under `moe_tp_experts` (local tensors, `_AllReduceBackward` inputs, an
//! in-place all-reduced output), the router and Qwen2-MoE's shared expert replicated,
//! DeepSeek-V3's dense MLPs and shared_experts colwise/rowwise, routing forced; against PyTorch itself:
//! tests/fixtures/dist_grid/tp_hf_moe.json (tools/pytorch/measure_tp_hf.py --moe), per phase,
//! requested bytes of blocks >= 512 B, the third iteration, 16 B per live tensor.
mod grid_common;

use serde_json::{json, Value};
use vramscope::engine::{runtime, Device};
use vramscope::model::tp::TpPlan;
use vramscope::model::{Flavour, Model};
use vramscope::parallel::{apply, Layout, ParallelConfig};
use vramscope::record::MemEvent;
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Optimizer, Precision, StepRunner};

/// Points where vramscope does not match PyTorch, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

fn num(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}")) as usize
}

/// The point as a measure_moe.py point (grid_common::moe::config_of reads it): the config,
/// no cache, no mask, the point's checkpointing (none unless it names one).
fn moe_point(p: &Value) -> Value {
    let mut h = p["config"].clone();
    let o = h.as_object_mut().unwrap();
    for k in ["attn", "dtype", "seq", "batch"] {
        o.insert(k.into(), p[k].clone());
    }
    o.insert("use_cache".into(), json!(false));
    o.insert("logits_to_keep".into(), json!(0));
    o.insert("checkpoint".into(), json!(p["checkpoint"].as_str().unwrap_or("none")));
    o.insert("attention_mask".into(), json!("none"));
    h
}

fn run(p: &Value) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let kind = p["kind"].as_str().unwrap();
    let mut pc = ParallelConfig::new(Layout::Tp, num(p, "tp"));
    pc.rank = num(p, "rank");
    pc.validate().unwrap();
    // No --tp-plan: an MoE model runs transformers' plan.
    let point = moe_point(p);
    let model = if p["config"]["model_type"] == "deepseek_v3" { grid_common::moe::read_config_of(&point) } else { grid_common::moe::config_of(&point) };
    let cfg = pc.model_config(&model);
    assert_eq!(cfg.tp.unwrap().plan, TpPlan::Auto, "{}", p["name"]);
    cfg.validate().unwrap();
    let precision = if p["dtype"] == "bf16" { Precision::PureBf16 } else { Precision::Fp32 };
    runtime::reset();
    let model = Model::new_in(&cfg, Device::Meta, 42, precision.param_dtype()).unwrap();
    let layout = apply(&model, &pc, precision.param_dtype());
    let mut oc = OptimConfig::reference(Flavour::Hf);
    oc.kind = OptimizerKind::parse(p["optimizer"].as_str().unwrap()).expect("optimizer name");
    oc.lr = 1e-3;
    oc.max_grad_norm = None;
    let opt = Optimizer::new(oc, model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_precision(precision);
    if let Some(l) = layout {
        runner = runner.with_parallel(l);
    }
    grid_common::dist::record_steps(&model, runner, cfg.vocab_size, p, kind, precision)
}

#[test]
fn transformers_moe_tp_plan_ranks_match_pytorch() {
    let doc = grid_common::fixture("dist_grid/tp_hf_moe.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("dist_grid/tp_hf_moe.json", points, 12, KNOWN_FAILING, run);
}
