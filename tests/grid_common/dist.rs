//! One rank of a data-parallel job over an hf-flavour grid point (tools/pytorch/measure_dist.py
//! --families / --moe / --lora-models): measure_hf.py's loop of the point's profile type, on meta, with the
//! point's layout applied after the model is built (fully_shard or the DDP wrapper), as the
//! script applies it before the optimizer exists.
use super::hf::num;
use serde_json::{json, Value};
use vramscope::engine::{runtime, DType, Device};
use vramscope::model::{Flavour, Model, ModelConfig};
use vramscope::parallel::{apply, Layout, ParallelConfig};
use vramscope::record::{MemEvent, Phase};
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, CausalLmBatch, DataKind, Optimizer, Precision, StepRunner};

/// The point's layout, world and rank, and FSDP2's options where it names them
/// (measure_dist.py's fsdp_kwargs and lora_wrapper): MixedPrecisionPolicy's `param_dtype` and
/// `reduce_dtype`, `unit` (consecutive decoder layers per fully_shard group; 0: the root alone)
/// and hsdp's `shard` (ranks a parameter is sharded over).
pub fn parallel_of(point: &Value) -> ParallelConfig {
    let layout = Layout::parse(point["layout"].as_str().unwrap()).expect("a layout vramscope names");
    let mut pc = ParallelConfig::new(layout, num(point, "world_size"));
    pc.rank = num(point, "rank");
    let dtype = |k: &str| point[k].as_str().map(|d| match d {
        "bf16" => DType::BF16,
        "fp32" => DType::F32,
        other => panic!("{k} {other}"),
    });
    (pc.param_dtype, pc.reduce_dtype) = (dtype("param_dtype"), dtype("reduce_dtype"));
    if let Some(u) = point["unit"].as_u64() {
        pc.blocks_per_unit = (u > 0).then_some(u as usize);
    }
    if let Some(s) = point["shard"].as_u64() {
        pc.gpus_per_node = s as usize;
    }
    pc.validate().unwrap();
    pc
}

/// Every parameter registered under `[base_model.model.]model.layers.{i}.` is one of layer i's weights (FSDP2's
/// unit of that decoder layer shards it), and no other parameter is.
pub fn assert_layers_own_their_parameters(model: &Model) {
    for p in model.parameters() {
        // (peft's PeftModel names them base_model.model.model.layers.{i}.)
        let block = p.name.split_once("model.layers.").and_then(|(_, r)| r.split('.').next()).and_then(|i| i.parse::<usize>().ok());
        let owner = model.layers.iter().position(|l| l.weights().iter().any(|w| w.same_storage(&p.tensor)));
        assert_eq!(owner, block, "{}: the layer that owns it", p.name);
    }
}

pub fn run_rank(point: &Value, mut cfg: ModelConfig) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let p = &point["hf"];
    let kind = point["profile_type"].as_str().unwrap();
    let pc = parallel_of(point);
    // (as `profile`: under MixedPrecisionPolicy peft's adapters compute in its param_dtype)
    cfg = pc.model_config(&cfg);
    // The parameters' type: the load dtype, or fp32 for a 4-bit model's unquantized ones after
    // prepare_model_for_kbit_training (peft's adapters are fp32 either way).
    let load = if p["dtype"] == "bf16" { DType::BF16 } else { DType::F32 };
    let weights = cfg.hf.as_ref().and_then(|h| h.bnb.as_ref()).map_or(load, |q| q.unquantized_dtype());
    let precision = super::hf::point_precision(p, weights, &mut cfg);
    runtime::reset();
    let model = {
        let _d = pc.shards_params().then(runtime::defer_allocation);
        // (as `profile`: the model computes in MixedPrecisionPolicy's param_dtype)
        Model::new_in(&cfg, Device::Meta, 42, pc.param_dtype.unwrap_or(precision.param_dtype())).unwrap()
    };
    assert_eq!(model.num_parameters(), point["info"]["parameters"].as_u64().unwrap(), "parameter count");
    assert_layers_own_their_parameters(&model);
    let layout = apply(&model, &pc, precision.param_dtype()).expect("a data-parallel layout");
    let mut oc = OptimConfig::reference(Flavour::Hf);
    oc.kind = OptimizerKind::parse(p["optimizer"].as_str().unwrap()).expect("optimizer name");
    oc.lr = 1e-3;
    let norm = p["max_grad_norm"].as_f64().unwrap();
    oc.max_grad_norm = (norm > 0.0).then_some(norm);
    let opt = Optimizer::new(oc, model.parameters().len());
    // (the layout first: under MixedPrecisionPolicy the model is in its param_dtype, not the weights')
    let runner = StepRunner::new(&model, opt).with_parallel(layout).with_precision(precision);
    record_steps(&model, runner, cfg.vocab_size, p, kind, precision)
}

/// measure_hf.py's loop of `kind` (training, forward or inference under no_grad) over random
/// batches of the point's shape, the third iteration recorded.
pub fn record_steps(model: &Model, mut runner: StepRunner<'_>, vocab: usize, p: &Value, kind: &str, precision: Precision) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let (batch, seq) = (num(p, "batch"), num(p, "seq"));
    let mut data = Batcher::new(DataKind::Random, vocab, batch, seq, Device::Meta, 42);
    let mut bound = CausalLmBatch::default();
    let recorded = super::record_last(3, |_| {
        // (the collator's all-ones attention_mask where the point passes one)
        data.next_causal_lm_batch(&mut bound, kind == "training", p["attention_mask"] == "ones");
        let x = bound.input_ids.as_ref().unwrap();
        let m = bound.attention_mask.as_ref();
        match kind {
            "training" => {
                runner.step_masked(x, bound.labels.as_ref().unwrap(), m);
            }
            "inference" | "forward" => {
                let _g = (kind == "inference").then(runtime::no_grad);
                runtime::set_phase(Phase::Forward);
                let region = precision.autocast().map(vramscope::engine::autocast::enable);
                drop(model.forward_masked(x, m));
                drop(region);
                runtime::set_phase(Phase::Setup);
            }
            other => panic!("profile type {other}"),
        }
    });
    runner.finish();
    recorded
}

/// A measure_tp_hf.py point as a measure_hf.py / measure_moe.py point (its config, no cache,
/// no mask, the point's checkpointing: none unless it names one).
#[allow(dead_code)] // (only the tensor-parallel grids read these points)
pub fn tp_model_point(p: &Value) -> Value {
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

/// One rank of a measure_tp_hf.py point: `pc` (tensor parallelism alone, the point's rank and
/// plan) over the model `base` builds, measure_tp_hf.py's optimizer (the point's, no clipping),
/// measure_hf.py's loop.
#[allow(dead_code)]
pub fn run_tp_rank(p: &Value, pc: &ParallelConfig, base: &ModelConfig) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let kind = p["kind"].as_str().unwrap();
    let mut cfg = pc.model_config(base);
    cfg.validate().unwrap();
    let weights = if p["dtype"] == "bf16" { DType::BF16 } else { DType::F32 };
    let precision = super::hf::point_precision(p, weights, &mut cfg);
    runtime::reset();
    let model = Model::new_in(&cfg, Device::Meta, 42, precision.param_dtype()).unwrap();
    let layout = apply(&model, pc, precision.param_dtype());
    let mut oc = OptimConfig::reference(Flavour::Hf);
    oc.kind = OptimizerKind::parse(p["optimizer"].as_str().unwrap()).expect("optimizer name");
    oc.lr = 1e-3;
    oc.max_grad_norm = None;
    let opt = Optimizer::new(oc, model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_precision(precision);
    if let Some(l) = layout {
        runner = runner.with_parallel(l);
    }
    record_steps(&model, runner, cfg.vocab_size, p, kind, precision)
}
