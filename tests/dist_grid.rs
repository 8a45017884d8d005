//! One rank of a data-parallel job against PyTorch itself: tests/fixtures/dist_grid/dist.json
//! (tools/pytorch/measure_dist.py: FSDP2 under the fake process group, DDP and ZeRO-1 over
//! gloo processes; the cs336 and tinyllama reference models, torch.optim.AdamW foreach),
//! per phase, requested bytes of blocks >= 512 B, the third iteration, 16 B per live tensor.
mod scratch;
mod grid_common;

use serde_json::Value;
use vramscope::engine::{autocast, runtime, DType, Device, Tensor};
use vramscope::model::{presets, Model, ModelConfig};
use vramscope::parallel::{apply, Layout, ParallelConfig};
use vramscope::record::{MemEvent, Phase};
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, DataKind, Optimizer, Precision, StepRunner};

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
    // CS336's `with torch.autocast(device, dtype=torch.bfloat16)` around forward and loss.
    match p["autocast"].as_str() {
        Some("bf16") => runner = runner.with_precision(Precision::Bf16),
        None => {}
        Some(other) => panic!("autocast {other}"),
    }
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, batch, seq, Device::Meta, 42);
    let mut bound: Option<(Tensor, Tensor)> = None;
    let kind = p["profile_type"].as_str().unwrap_or("training");
    let recorded = grid_common::record_last(num(p, "iterations"), |_| {
        let (x, y) = &*bound.insert(data.next_batch());
        match kind {
            "training" => drop(runner.step(x, y)),
            // `model(x)`, the output dropped (under no_grad for inference), inside the autocast.
            "forward" | "inference" => {
                let _g = (kind == "inference").then(runtime::no_grad);
                runtime::set_phase(Phase::Forward);
                let region = p["autocast"].is_string().then(|| autocast::enable(DType::BF16));
                drop(model.forward(x));
                drop(region);
                runtime::set_phase(Phase::Setup);
            }
            other => panic!("profile type {other}"),
        }
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

/// CS336's bf16 autocast over fp32 parameters under every data-parallel layout
/// (measure_dist.py --cs336-autocast: CUDA's autocast policies registered on CPU).
#[test]
fn data_parallel_ranks_under_autocast_match_pytorch() {
    let doc = grid_common::fixture("dist_grid/cs336_autocast.json");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("dist_grid/cs336_autocast.json", points, 20, &[], run);
}


/// Points that still differ, with why (checked and printed, not skipped).
const KNOWN_FAILING: &[(&str, &str)] = &[];

/// What cs336_autocast.json does not measure (fp16, forward-loss) under a layout is refused,
/// naming --precision; training, forward and inference run.
#[test]
fn course_autocast_under_a_layout_is_refused_where_it_is_not_matched() {
    let base = ["profile", "--model", "small", "--num-layers", "2", "--device", "meta", "--context-length", "64", "--batch-size", "1", "--world-size", "2"];
    for (extra, ok) in [
        (&["--parallel", "ddp", "--precision", "bf16", "--profile-type", "training"][..], true),
        (&["--parallel", "fsdp", "--precision", "bf16", "--profile-type", "forward"][..], true),
        (&["--parallel", "zero1", "--precision", "bf16", "--profile-type", "inference"][..], true),
        (&["--parallel", "ddp", "--precision", "bf16", "--profile-type", "forward-loss"][..], false),
        (&["--parallel", "fsdp", "--precision", "fp16", "--profile-type", "training"][..], false),
    ] {
        let dir = scratch::dir().join(format!("vramscope-dist-grid-{}-{}", std::process::id(), extra.join("-")));
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--out-dir", dir.to_str().unwrap()]);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        if ok {
            assert!(o.status.success(), "{extra:?}: {err}");
        } else {
            assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
            assert!(err.contains("--precision") && err.contains("cs336_autocast.json"), "{extra:?}: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
