mod grid_common;
use vramscope::engine::{runtime, DType, Device, Tensor};
use vramscope::model::{presets, Model};
use vramscope::parallel::{Layout, ParallelConfig};
use vramscope::record::MemEvent;
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, DataKind, Optimizer, StepRunner};

fn run(world: usize, rank: usize, mp: bool) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let mut cfg = presets::find("cs336-small", None).unwrap().model;
    (cfg.vocab_size, cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.d_ff, cfg.max_seq_len) = (env("V", 1000), 64, 2, 4, 4, env("F", 172), 32);
    runtime::reset();
    let compute = if mp { DType::BF16 } else { DType::F32 };
    let model = {
        let _d = pc_shards(&std::env::var("L").unwrap_or("fsdp".into())).then(runtime::defer_allocation);
        Model::new_in(&cfg, Device::Meta, 42, compute).unwrap()
    };
    let layout = Layout::parse(&std::env::var("L").unwrap_or("fsdp".into())).unwrap();
    let mut pc = ParallelConfig::new(layout, world);
    pc.rank = rank;
    if std::env::var("ROOTONLY").is_ok() {
        pc.blocks_per_unit = None;
    }
    if mp {
        pc.param_dtype = Some(DType::BF16);
        pc.reduce_dtype = Some(DType::F32);
    }
    let layout = vramscope::parallel::apply(&model, &pc, DType::F32);
    let mut oc = OptimConfig::reference(cfg.flavour);
    oc.kind = OptimizerKind::AdamwTorch;
    let opt = Optimizer::new(oc, model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_parallel(layout);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 32, Device::Meta, 42);
    let mut bound: Option<(Tensor, Tensor)> = None;
    let mut before = Vec::new();
    for i in 0..3 {
        if i == 2 {
            runtime::with(|rt| {
                before = rt.log.live_as_events();
                rt.log.start_recording();
            });
        }
        let (x, y) = &*bound.insert(data.next_batch());
        runner.step(x, y);
    }
    let events = runtime::with(|rt| rt.log.stop_recording());
    runner.finish();
    (before, events)
}

#[test]
fn fsdp_quick() {
    let w: usize = std::env::var("W").map(|s| s.parse().unwrap()).unwrap_or(2);
    let mp = std::env::var("MP").is_ok();
    let (before, events) = run(w, env("RANK", 0), mp);
    for (p, v) in grid_common::phase_peaks(&before, &events) {
        println!("{p:10} {v:>12}");
    }
    if std::env::var("TRACE").is_ok() {
        grid_common::trace(&before, &events);
    }
}

fn env(k: &str, d: usize) -> usize {
    std::env::var(k).map(|s| s.parse().unwrap()).unwrap_or(d)
}

fn pc_shards(l: &str) -> bool {
    l == "fsdp" || l == "hsdp"
}
