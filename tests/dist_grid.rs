//! One rank of a data-parallel job against PyTorch itself: tests/fixtures/dist_grid/dist.json
//! (tools/pytorch/measure_dist.py: FSDP2 under the fake process group, DDP and ZeRO-1 over
//! gloo processes; the cs336 and tinyllama reference models, torch.optim.AdamW foreach),
//! per phase, requested bytes of blocks >= 512 B, the third iteration, 16 B per live tensor.
mod grid_common;

use serde_json::Value;
use vramscope::engine::{runtime, DType, Device, Tensor};
use vramscope::model::{presets, Model, ModelConfig};
use vramscope::parallel::{apply, Layout, ParallelConfig};
use vramscope::record::MemEvent;
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, DataKind, Optimizer, StepRunner};

fn num(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}")) as usize
}

fn config_of(p: &Value) -> ModelConfig {
    let flavour = p["flavour"].as_str().unwrap();
    let preset = if flavour == "cs336" { "cs336-small" } else { "walkthrough" };
    let mut cfg = presets::find(preset, None).unwrap().model;
    let c = &p["config"];
    cfg.vocab_size = num(c, "vocab_size");
    cfg.d_model = num(c, "d_model");
    cfg.num_layers = num(c, "num_layers");
    cfg.num_heads = num(c, "num_heads");
    cfg.num_kv_heads = num(c, "num_kv_heads");
    cfg.d_ff = num(c, "d_ff");
    cfg.max_seq_len = num(c, "max_seq_len");
    cfg
}

/// The fixture's layout names as vramscope's configuration.
fn parallel_of(p: &Value) -> (ParallelConfig, DType) {
    let world = num(p, "world_size");
    let (layout, mp) = match p["layout"].as_str().unwrap() {
        "ddp" => (Layout::Ddp, false),
        "zero1" => (Layout::Zero1, false),
        "zero2" => (Layout::Zero2, false),
        "fsdp" | "fsdp_root" => (Layout::Fsdp, false),
        "fsdp_mp" => (Layout::Fsdp, true),
        "hsdp" => (Layout::Hsdp, false),
        other => panic!("layout {other}"),
    };
    let mut pc = ParallelConfig::new(layout, world);
    pc.rank = num(p, "rank");
    if layout == Layout::Hsdp {
        pc.gpus_per_node = 2;
    }
    if p["layout"] == "fsdp_root" {
        pc.blocks_per_unit = None;
    }
    if mp {
        (pc.param_dtype, pc.reduce_dtype) = (Some(DType::BF16), Some(DType::F32));
    }
    let compute = if mp { DType::BF16 } else { DType::F32 };
    (pc, compute)
}

fn run(p: &Value) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let cfg = config_of(p);
    let (pc, compute) = parallel_of(p);
    let (batch, seq) = (num(p, "batch"), num(p, "seq"));
    runtime::reset();
    let model = {
        let _d = pc.shards_params().then(runtime::defer_allocation);
        Model::new_in(&cfg, Device::Meta, 42, compute).unwrap()
    };
    let layout = apply(&model, &pc, DType::F32).expect("a data-parallel layout");
    let mut oc = OptimConfig::reference(cfg.flavour);
    oc.kind = OptimizerKind::AdamwTorch;
    let opt = Optimizer::new(oc, model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_parallel(layout);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, batch, seq, Device::Meta, 42);
    let mut bound: Option<(Tensor, Tensor)> = None;
    let recorded = grid_common::record_last(num(p, "iterations"), |_| {
        let (x, y) = &*bound.insert(data.next_batch());
        runner.step(x, y);
    });
    runner.finish();
    recorded
}

#[test]
fn data_parallel_ranks_match_pytorch() {
    let doc = grid_common::fixture("dist_grid/dist.json");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("dist_grid/dist.json", points, 24, KNOWN_FAILING, run);
}

/// Points that still differ, with why (checked and printed, not skipped).
const KNOWN_FAILING: &[(&str, &str)] = &[];
