//! Gradient accumulation (`--grad-accum-steps`): the same update as one full batch, and
//! about N-fold less activation memory with parameter, gradient and optimizer bytes unchanged.
use vramscope::engine::{runtime, Device, Tensor};
use vramscope::model::{presets, Model};
use vramscope::record::{Category, Phase};
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, DataKind, Optimizer, StepRunner};

mod common;
use common::small;


fn sgd(n: usize) -> Optimizer {
    Optimizer::new(OptimConfig { kind: OptimizerKind::Sgd, lr: 0.5, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0, momentum: 0.0, max_grad_norm: None }, n)
}

/// Parameters after one SGD step over `micro` micro-batches of the same 4 sequences.
fn params_after(flavour: &str, micro: usize) -> Vec<Vec<f64>> {
    runtime::reset();
    let cfg = small(flavour);
    let model = Model::new(&cfg, Device::Cpu, 3).unwrap();
    let mut runner = StepRunner::new(&model, sgd(model.parameters().len()));
    let (x, y) = Batcher::new(DataKind::Random, cfg.vocab_size, 4, 16, Device::Cpu, 9).next_batch();
    let per = 4 / micro;
    let parts: Vec<(Tensor, Tensor)> = (0..micro).map(|i| (x.narrow(0, i * per, per), y.narrow(0, i * per, per))).collect();
    let refs: Vec<(&Tensor, &Tensor)> = parts.iter().map(|(a, b)| (a, b)).collect();
    runner.step_accumulated(&refs);
    model.parameters().iter().map(|p| p.tensor.to_vec_f64()).collect()
}

#[test]
fn accumulated_micro_batches_give_the_full_batch_update() {
    for flavour in ["tinyllama", "cs336"] {
        let full = params_after(flavour, 1);
        for n in [2, 4] {
            let acc = params_after(flavour, n);
            for (i, (a, b)) in full.iter().zip(&acc).enumerate() {
                for (x, y) in a.iter().zip(b) {
                    assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{flavour} N={n} param {i}: {x} vs {y}");
                }
            }
        }
    }
}

/// Bytes live by category after a step, and the step's activation peak above what was live
/// before it (meta, a config large enough that activations dominate).
fn meta_step(micro: usize) -> (Vec<(Category, usize)>, usize) {
    runtime::reset();
    let mut cfg = presets::find("walkthrough", None).unwrap().model;
    cfg.max_seq_len = 256;
    let model = Model::new(&cfg, Device::Meta, 1).unwrap();
    let mut runner = StepRunner::new(&model, Optimizer::new(OptimConfig::reference(cfg.flavour), model.parameters().len()));
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, 16 / micro, 256, Device::Meta, 1);
    let mut step = |runner: &mut StepRunner| {
        let parts: Vec<(Tensor, Tensor)> = (0..micro).map(|_| data.next_batch()).collect();
        let refs: Vec<(&Tensor, &Tensor)> = parts.iter().map(|(a, b)| (a, b)).collect();
        runner.step_accumulated(&refs)
    };
    step(&mut runner); // optimizer state exists from here on
    runner.finish();
    let before = runtime::stats().allocated;
    let r = step(&mut runner);
    let peak = r.phase(Phase::Forward).peak_allocated.max(r.phase(Phase::Backward).peak_allocated);
    runner.finish();
    let live = runtime::with(|rt| rt.log.live_by_category());
    (live, peak - before)
}

#[test]
fn accumulation_divides_activation_memory_and_keeps_state_bytes() {
    let (live1, act1) = meta_step(1);
    let (live4, act4) = meta_step(4);
    for cat in [Category::Parameter, Category::Gradient, Category::OptimizerState] {
        let get = |l: &[(Category, usize)]| l.iter().find(|(c, _)| *c == cat).map_or(0, |x| x.1);
        assert_eq!(get(&live1), get(&live4), "{cat:?} bytes change with accumulation");
        assert!(get(&live1) > 0);
    }
    let ratio = act1 as f64 / act4 as f64;
    assert!((3.0..=4.5).contains(&ratio), "activation peak {act1} B vs {act4} B: ratio {ratio:.2}");
}
