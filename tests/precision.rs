//! Mixed precision: autocast (bf16, fp16 with loss scaling) and pure bf16 — gradients agree
//! with fp32 within the types' tolerances, and memory follows the mechanics: matmul outputs
//! halve, the cs336 softmax tensors stay fp32, and the weight-cast cache appears.
use vramscope::engine::{autocast, runtime, DType, Device, Tensor};
use vramscope::model::{Attention, Model, ModelConfig};
use vramscope::record::{Category, EventKind, MemEvent, Phase};
use vramscope::train::optim::OptimConfig;
use vramscope::train::{Batcher, DataKind, GradScaler, Optimizer, Precision, StepRunner};

mod common;
use common::small;


/// Loss and parameter gradients of one forward + backward in `precision` (same weights).
fn grads(flavour: &str, precision: Precision) -> (f64, Vec<Vec<f64>>) {
    runtime::reset();
    let cfg = small(flavour);
    let model = Model::new(&cfg, Device::Cpu, 5).unwrap();
    let (x, y) = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 16, Device::Cpu, 7).next_batch();
    let region = precision.autocast().map(autocast::enable);
    let (_, loss) = model.forward_loss(&x, &y, &mut |_| {});
    drop(region);
    loss.backward();
    let g = model.parameters().iter().map(|p| p.tensor.grad().expect("every parameter gets a gradient").to_vec_f64()).collect();
    (loss.item(), g)
}

fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum::<f64>().sqrt();
    let den: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    num / den.max(1e-12)
}

#[test]
fn autocast_gradients_match_fp32_within_the_types_precision() {
    for flavour in ["tinyllama", "cs336"] {
        let (l32, g32) = grads(flavour, Precision::Fp32);
        for (prec, tol) in [(Precision::Bf16, 5e-2), (Precision::Fp16, 1e-2)] {
            let (l, g) = grads(flavour, prec);
            assert!((l - l32).abs() < 2.0 * tol * l32.abs(), "{flavour} {prec}: loss {l} vs fp32 {l32}");
            for (i, (a, b)) in g32.iter().zip(&g).enumerate() {
                let e = rel_err(a, b);
                assert!(e < tol, "{flavour} {prec}: gradient of parameter {i} off by {e:.3e} (relative L2)");
            }
        }
    }
}

/// Events of one forward with autograd on (outputs kept until the end), under `precision`.
fn forward_events(cfg: &ModelConfig, precision: Precision, device: Device) -> Vec<MemEvent> {
    runtime::reset();
    let model = Model::new(cfg, device, 1).unwrap();
    let (x, _) = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 16, device, 3).next_batch();
    runtime::with(|rt| rt.log.start_recording());
    runtime::set_phase(Phase::Forward);
    let region = precision.autocast().map(autocast::enable);
    let logits = model.forward(&x);
    drop(region);
    drop(logits);
    runtime::with(|rt| rt.log.stop_recording())
}

fn alloc_bytes(ev: &[MemEvent], scope_ends: &str, op: &str) -> Vec<usize> {
    ev.iter().filter(|e| e.kind == EventKind::Alloc && e.scope.ends_with(scope_ends) && e.op == op).map(|e| e.bytes).collect()
}

#[test]
fn bf16_halves_matmul_outputs_keeps_cs336_softmax_fp32_and_caches_weights() {
    let cfg = small("cs336");
    let f32_ev = forward_events(&cfg, Precision::Fp32, Device::Meta);
    let bf_ev = forward_events(&cfg, Precision::Bf16, Device::Meta);
    // Matmul outputs (the q projection's bmm) halve.
    let (q32, q16) = (alloc_bytes(&f32_ev, "layers.0.attn.q_proj", "bmm"), alloc_bytes(&bf_ev, "layers.0.attn.q_proj", "bmm"));
    assert_eq!(q32, vec![2 * 16 * 64 * 4]);
    assert_eq!(q16, vec![2 * 16 * 64 * 2]);
    // The hand-written softmax's exp runs in fp32 (its bf16 input is cast up first).
    let s = 2 * 4 * 16 * 16;
    assert_eq!(alloc_bytes(&f32_ev, "layers.0.attn", "exp"), vec![s * 4]);
    assert_eq!(alloc_bytes(&bf_ev, "layers.0.attn", "exp"), vec![s * 4]);
    assert!(alloc_bytes(&bf_ev, "layers.0.attn", "_to_copy").contains(&(s * 4)), "the bf16 scores are cast up for exp");
    // The cache: one bf16 copy of every linear weight (all 2-D parameters but the embedding).
    let cache: usize = bf_ev.iter().filter(|e| e.kind == EventKind::Alloc && e.category == Category::AutocastCache).map(|e| e.bytes).sum();
    let (d, f, v, l) = (cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.num_layers);
    assert_eq!(cache, 2 * (l * (4 * d * d + 3 * d * f) + v * d));
    assert!(f32_ev.iter().all(|e| e.category != Category::AutocastCache));
    // Cached once: as many cast copies as weights, however often they are used.
    let copies = bf_ev.iter().filter(|e| e.kind == EventKind::Alloc && e.category == Category::AutocastCache).count();
    assert_eq!(copies, l * 7 + 1);
}

#[test]
fn autocast_cache_outlives_the_region_only_through_what_backward_saved() {
    runtime::reset();
    let cfg = small("tinyllama");
    let model = Model::new(&cfg, Device::Meta, 1).unwrap();
    let (x, _) = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 16, Device::Meta, 3).next_batch();
    let live_cache = || runtime::with(|rt| rt.log.live_by_category()).iter().find(|(c, _)| *c == Category::AutocastCache).map_or(0, |x| x.1);
    {
        let _g = runtime::no_grad();
        let region = autocast::enable(DType::BF16);
        let out = model.forward(&x);
        assert!(live_cache() > 0, "the cache holds the casts inside the region");
        drop(region);
        assert_eq!(live_cache(), 0, "no_grad: nothing saved, so leaving the region frees every cast");
        drop(out);
    }
    let region = autocast::enable(DType::BF16);
    let out = model.forward(&x);
    let inside = live_cache();
    drop(region);
    assert_eq!(live_cache(), inside, "with autograd every cast weight is saved for backward");
    drop(out);
    assert_eq!(live_cache(), 0);
}

/// One recorded training step in `precision`, events without cpu-only workspace.
fn step_events(flavour: &str, precision: Precision, device: Device) -> Vec<MemEvent> {
    runtime::reset();
    let mut cfg = small(flavour);
    cfg.attention = Attention::Naive;
    runtime::with(|rt| rt.log.start_recording());
    let model = Model::new_in(&cfg, device, 1, precision.param_dtype()).unwrap();
    let opt = Optimizer::new(OptimConfig::reference(cfg.flavour), model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_precision(precision);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 12, device, 3);
    for _ in 0..2 {
        let (x, y) = data.next_batch();
        runner.step(&x, &y);
    }
    runner.finish();
    drop(runner);
    drop(model);
    let ev = runtime::with(|rt| rt.log.stop_recording());
    ev.into_iter().filter(|e| e.category != Category::Workspace).collect()
}

#[test]
fn cpu_and_meta_agree_under_every_precision() {
    for (flavour, prec) in [("cs336", Precision::Bf16), ("tinyllama", Precision::Fp16), ("cs336", Precision::PureBf16)] {
        let cpu = step_events(flavour, prec, Device::Cpu);
        let meta = step_events(flavour, prec, Device::Meta);
        assert_eq!(cpu.len(), meta.len(), "{flavour} {prec}: event counts differ");
        for (i, (a, b)) in cpu.iter().zip(&meta).enumerate() {
            assert!(
                a.kind == b.kind && a.bytes == b.bytes && a.scope == b.scope && a.op == b.op && a.phase == b.phase && a.category == b.category,
                "{flavour} {prec}: event {i} differs:\n cpu  {a:?}\n meta {b:?}"
            );
        }
        let allocs = cpu.iter().filter(|e| e.kind == EventKind::Alloc).count();
        assert_eq!(allocs, cpu.iter().filter(|e| e.kind == EventKind::Free).count(), "{flavour} {prec}: leaked storages");
    }
}

#[test]
fn grad_scaler_skips_non_finite_steps_backs_off_and_grows() {
    runtime::reset();
    let p = Tensor::from_f64(&[1.0, 2.0], &[2], DType::F32, Device::Cpu).requires_grad_(true);
    let params = vec![vocab_param(&p)];
    let mut s = GradScaler::with_growth_interval(2);
    let loss = p.mul(&p).sum_all();
    s.scale(&loss).backward();
    let g = p.grad().unwrap().to_vec_f64();
    assert_eq!(g, vec![2.0 * 65536.0, 4.0 * 65536.0], "backward saw the scaled loss");
    let mut ran = false;
    assert!(s.step_and_update(&params, || ran = true));
    assert!(ran);
    assert_eq!(p.grad().unwrap().to_vec_f64(), vec![2.0, 4.0], "gradients are unscaled before the step");
    // A non-finite gradient skips the step and halves the scale.
    p.set_grad(Some(Tensor::from_f64(&[f64::INFINITY, 0.0], &[2], DType::F32, Device::Cpu)));
    let mut ran = false;
    assert!(!s.step_and_update(&params, || ran = true));
    assert!(!ran);
    assert_eq!(s.scale_value(), 32768.0);
    assert_eq!(s.skipped_steps, 1);
    // growth_interval clean steps double it.
    for _ in 0..2 {
        p.set_grad(Some(Tensor::from_f64(&[1.0, 1.0], &[2], DType::F32, Device::Cpu)));
        assert!(s.step_and_update(&params, || {}));
    }
    assert_eq!(s.scale_value(), 65536.0);
}

fn vocab_param(t: &Tensor) -> vramscope::model::Param {
    vramscope::model::Param { name: "w".into(), tensor: t.clone() }
}

/// Parameter, gradient and optimizer-state bytes after a training step (meta), and the
/// losses of a short cpu run on a learnable pattern.
fn state_bytes(precision: Precision) -> usize {
    runtime::reset();
    let mut cfg = small("tinyllama");
    cfg.attention = Attention::Flash;
    let model = Model::new_in(&cfg, Device::Meta, 1, precision.param_dtype()).unwrap();
    let opt = Optimizer::new(OptimConfig::reference(cfg.flavour), model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_precision(precision);
    let (x, y) = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 16, Device::Meta, 3).next_batch();
    runner.step(&x, &y);
    runner.finish();
    let live = runtime::with(|rt| rt.log.live_by_category());
    [Category::Parameter, Category::Gradient, Category::OptimizerState].iter().map(|c| live.iter().find(|(k, _)| k == c).map_or(0, |x| x.1)).sum()
}

#[test]
fn pure_bf16_halves_state_and_mixed_precision_training_learns() {
    assert_eq!(2 * state_bytes(Precision::PureBf16), state_bytes(Precision::Fp32));
    assert_eq!(state_bytes(Precision::Bf16), state_bytes(Precision::Fp32), "autocast keeps fp32 state");
    for prec in [Precision::Bf16, Precision::Fp16, Precision::PureBf16] {
        runtime::reset();
        let mut cfg = small("tinyllama");
        cfg.attention = Attention::Flash;
        let model = Model::new_in(&cfg, Device::Cpu, 1, prec.param_dtype()).unwrap();
        let mut oc = OptimConfig::reference(cfg.flavour);
        oc.lr = 1e-2;
        let mut runner = StepRunner::new(&model, Optimizer::new(oc, model.parameters().len())).with_precision(prec);
        let mut data = Batcher::new(DataKind::Pattern, cfg.vocab_size, 4, 16, Device::Cpu, 3);
        let mut losses = Vec::new();
        for _ in 0..40 {
            let (x, y) = data.next_batch();
            let r = runner.step(&x, &y);
            assert!(!r.skipped_step, "{prec}: no overflow on this data");
            losses.push(r.loss.unwrap());
        }
        assert!(losses[39] < losses[0] / 4.0, "{prec}: loss {:.3} -> {:.3}", losses[0], losses[39]);
    }
}

/// Gradients of one bf16 autocast step with checkpointed blocks, and the autocast-cache
/// bytes allocated during backward (the recomputation's fresh casts).
fn checkpointed_bf16(flavour: &str, ckpt: vramscope::model::Checkpoint, device: Device) -> (Vec<Vec<f64>>, usize) {
    runtime::reset();
    let mut cfg = small(flavour);
    cfg.checkpoint = ckpt;
    let model = Model::new(&cfg, device, 5).unwrap();
    let (x, y) = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 16, device, 7).next_batch();
    runtime::with(|rt| rt.log.start_recording());
    let region = autocast::enable(DType::BF16);
    let (_, loss) = model.forward_loss(&x, &y, &mut |_| {});
    drop(region);
    runtime::set_phase(Phase::Backward);
    loss.backward();
    let ev = runtime::with(|rt| rt.log.stop_recording());
    let recast = ev.iter().filter(|e| e.kind == EventKind::Alloc && e.phase == Phase::Backward && e.category == Category::AutocastCache).map(|e| e.bytes).sum();
    let g = if device == Device::Cpu { model.parameters().iter().map(|p| p.tensor.grad().unwrap().to_vec_f64()).collect() } else { Vec::new() };
    (g, recast)
}

#[test]
fn checkpoint_recomputes_under_the_forwards_autocast_state() {
    use vramscope::model::Checkpoint;
    for flavour in ["tinyllama", "cs336"] {
        let (base, none_recast) = checkpointed_bf16(flavour, Checkpoint::None, Device::Cpu);
        let (ck, _) = checkpointed_bf16(flavour, Checkpoint::Every(1), Device::Cpu);
        for (i, (a, b)) in base.iter().zip(&ck).enumerate() {
            assert!(rel_err(a, b) < 1e-6, "{flavour}: parameter {i} gradient differs with checkpointing under bf16");
        }
        assert_eq!(none_recast, 0);
        // The recomputation is a fresh autocast region: each block's weights are cast again.
        let (_, recast) = checkpointed_bf16(flavour, Checkpoint::Every(1), Device::Meta);
        let cfg = small(flavour);
        let kv = cfg.num_kv_heads * cfg.d_model / cfg.num_heads;
        let per_block = 2 * (2 * cfg.d_model * cfg.d_model + 2 * cfg.d_model * kv + 3 * cfg.d_model * cfg.d_ff);
        assert_eq!(recast, cfg.num_layers * per_block, "{flavour}");
    }
}
