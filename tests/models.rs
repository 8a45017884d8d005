//! Model-level invariants: parameter counts, meta builds, cpu/meta event equality,
//! learning, and PyTorch-derived memory facts.
use std::time::Instant;
use vramscope::engine::{runtime, DType, Device, Tensor};
use vramscope::model::{presets, Flavour, Model};
use vramscope::record::{Category, EventKind, MemEvent, Phase};
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, DataKind, Optimizer, StepRunner};

#[test]
fn every_preset_matches_the_reference_parameter_count() {
    for p in presets::all() {
        assert_eq!(p.model.param_count(), p.expected_params, "closed form for {}", p.name);
        runtime::reset();
        let m = Model::new(&p.model, Device::Meta, 0).unwrap();
        assert_eq!(m.num_parameters(), p.expected_params, "built model for {}-{}", p.model.flavour, p.name);
        drop(m);
    }
}

#[test]
fn meta_build_of_2_7b_is_fast_and_allocates_no_host_data() {
    runtime::reset();
    let p = presets::find("2.7B", None).unwrap();
    let t0 = Instant::now();
    let m = Model::new(&p.model, Device::Meta, 0).unwrap();
    let dt = t0.elapsed();
    assert_eq!(m.num_parameters(), 3_406_809_600);
    assert!(dt.as_secs_f64() < 0.5, "meta build took {dt:?}");
    assert!(m.parameters().iter().all(|p| !p.tensor.storage().has_data()));
    // fp32 parameters: 12.69 GiB
    let gib = m.parameter_bytes() as f64 / (1u64 << 30) as f64;
    assert!((gib - 12.69).abs() < 0.005, "{gib}");
}

fn run_steps(flavour: &str, device: Device, steps: usize) -> (Vec<MemEvent>, Vec<Option<f64>>) {
    runtime::reset();
    let mut cfg = presets::find("walkthrough", None).unwrap().model;
    if flavour == "cs336" {
        cfg = presets::find("cs336-small", None).unwrap().model;
        cfg.d_model = 64;
        cfg.num_heads = 4;
        cfg.num_kv_heads = 4;
        cfg.d_ff = 96;
        cfg.num_layers = 2;
        cfg.vocab_size = 50;
        cfg.max_seq_len = 16;
    } else {
        cfg.d_model = 64;
        cfg.d_ff = 96;
        cfg.num_layers = 2;
        cfg.vocab_size = 50;
    }
    runtime::with(|rt| rt.log.start_recording());
    let model = Model::new(&cfg, device, 1).unwrap();
    let kind = if cfg.flavour == Flavour::Cs336 { OptimizerKind::AdamwCs336 } else { OptimizerKind::AdamwTorch };
    let opt = Optimizer::new(
        OptimConfig { kind, lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, momentum: 0.0, max_grad_norm: None },
        model.parameters().len(),
    );
    let mut runner = StepRunner::new(&model, opt);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 12, device, 3);
    let mut losses = Vec::new();
    for _ in 0..steps {
        let (x, y) = data.next_batch();
        losses.push(runner.step(&x, &y).loss);
    }
    runner.finish();
    drop(runner);
    drop(model);
    let ev = runtime::with(|rt| rt.log.stop_recording());
    (ev, losses)
}

fn assert_same_events(flavour: &str) {
    let (cpu, losses) = run_steps(flavour, Device::Cpu, 3);
    let (meta, meta_losses) = run_steps(flavour, Device::Meta, 3);
    assert!(losses.iter().all(|l| l.is_some_and(f64::is_finite)));
    assert!(meta_losses.iter().all(Option::is_none));
    assert_eq!(cpu.len(), meta.len(), "{flavour}: event counts differ");
    for (i, (a, b)) in cpu.iter().zip(&meta).enumerate() {
        assert!(
            a.kind == b.kind && a.id == b.id && a.bytes == b.bytes && a.scope == b.scope && a.op == b.op && a.phase == b.phase && a.category == b.category,
            "{flavour}: event {i} differs:\n cpu  {a:?}\n meta {b:?}"
        );
    }
    // Everything allocated is freed once the model and optimizer are gone.
    let allocs = cpu.iter().filter(|e| e.kind == EventKind::Alloc).count();
    let frees = cpu.iter().filter(|e| e.kind == EventKind::Free).count();
    assert_eq!(allocs, frees, "{flavour}: leaked storages");
}

#[test]
fn cpu_and_meta_record_identical_events_tinyllama() {
    assert_same_events("tinyllama");
}

#[test]
fn cpu_and_meta_record_identical_events_cs336() {
    assert_same_events("cs336");
}

#[test]
fn tiny_model_learns_a_repeating_pattern() {
    for flavour in ["tinyllama", "cs336"] {
        runtime::reset();
        let mut cfg = presets::find("walkthrough", None).unwrap().model;
        if flavour == "cs336" {
            cfg = presets::find("cs336-small", None).unwrap().model;
            cfg.num_heads = 4;
            cfg.num_kv_heads = 4;
            cfg.max_seq_len = 64;
        }
        cfg.d_model = 64;
        cfg.d_ff = 128;
        cfg.num_layers = 2;
        cfg.vocab_size = 64;
        let model = Model::new(&cfg, Device::Cpu, 7).unwrap();
        let kind = if flavour == "cs336" { OptimizerKind::AdamwCs336 } else { OptimizerKind::AdamwTorch };
        let opt = Optimizer::new(
            OptimConfig { kind, lr: 3e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0, momentum: 0.0, max_grad_norm: None },
            model.parameters().len(),
        );
        let mut runner = StepRunner::new(&model, opt);
        let mut data = Batcher::new(DataKind::Pattern, cfg.vocab_size, 8, 32, Device::Cpu, 5);
        let mut losses = Vec::new();
        for _ in 0..40 {
            let (x, y) = data.next_batch();
            losses.push(runner.step(&x, &y).loss.unwrap());
        }
        let (first, last) = (losses[0], *losses.last().unwrap());
        assert!(first > 3.0, "{flavour}: initial loss {first} should be near ln(64)");
        assert!(last < first / 10.0, "{flavour}: loss fell only from {first} to {last}: {losses:?}");
    }
}

/// PyTorch facts measured with torch 2.15 (see the closing notes): which storages a
/// training step creates and keeps.
#[test]
fn saved_tensors_and_gradients_follow_pytorch() {
    runtime::reset();
    let w = Tensor::from_f64(&[0.1; 20], &[5, 4], DType::F32, Device::Cpu).requires_grad_(true);
    let x = Tensor::from_f64(&[0.2; 24], &[2, 3, 4], DType::F32, Device::Cpu).requires_grad_(true);
    // F.linear: the weight gradient arrives contiguous and is stolen (no copy).
    let before = runtime::stats().num_allocs;
    let y = x.matmul(&w.t());
    assert_eq!(runtime::stats().num_allocs - before, 1, "linear allocates only its output");
    y.sum_all().backward();
    assert!(w.grad().unwrap().is_contiguous());
    assert_eq!(runtime::stats().num_allocs - before, 1 + 1 + 1 + 2, "out, sum, ones, dW, dx: no AccumulateGrad copy");
    // A second backward adds in place.
    let y = x.matmul(&w.t());
    let g0 = w.grad().unwrap().storage().id;
    y.sum_all().backward();
    assert_eq!(w.grad().unwrap().storage().id, g0);
    // zero_grad(set_to_none) frees.
    let live = runtime::stats().allocated;
    w.clear_grad();
    assert_eq!(runtime::stats().allocated, live - 80);
}

#[test]
fn training_step_categories_cover_params_grads_and_optimizer_state() {
    runtime::reset();
    let mut cfg = presets::find("walkthrough", None).unwrap().model;
    cfg.num_layers = 1;
    let model = Model::new(&cfg, Device::Meta, 0).unwrap();
    let opt = Optimizer::new(
        OptimConfig { kind: OptimizerKind::AdamwTorch, lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0, momentum: 0.0, max_grad_norm: None },
        model.parameters().len(),
    );
    let mut runner = StepRunner::new(&model, opt);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 16, Device::Meta, 0);
    let (x, y) = data.next_batch();
    runner.step(&x, &y);
    let by = runtime::with(|rt| rt.log.live_by_category());
    let get = |c: Category| by.iter().find(|(k, _)| *k == c).map_or(0, |(_, b)| *b) as u64;
    let pb = model.parameter_bytes();
    assert_eq!(get(Category::Parameter), pb);
    assert_eq!(get(Category::Gradient), pb, "every parameter has a gradient after the step");
    assert_eq!(get(Category::OptimizerState), 2 * pb, "AdamW keeps m and v");
    assert_eq!(runtime::phase(), Phase::Setup);
}

/// The tinyllama walkthrough step (B 8, S 128, fp32, foreach AdamW), third step, against
/// PyTorch 2.15 measured with `tools/pytorch/measure_step_memory.py` (torch.profiler
/// memory events, blocks ≥ 512 B; the few bytes of difference are 0-d scalars that
/// PyTorch's measurement filtered out).
/// The third walkthrough training step (AdamW foreach, random batches) of the tinyllama
/// walkthrough config with `edit` applied, on meta.
fn walkthrough_third_step(edit: impl FnOnce(&mut vramscope::model::ModelConfig)) -> vramscope::train::StepResult {
    runtime::reset();
    let p = presets::find("walkthrough", None).unwrap();
    let mut cfg = p.model.clone();
    edit(&mut cfg);
    let model = Model::new(&cfg, Device::Meta, 0).unwrap();
    let opt = Optimizer::new(
        OptimConfig { kind: OptimizerKind::AdamwTorch, lr: 3e-4, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, momentum: 0.0, max_grad_norm: None },
        model.parameters().len(),
    );
    let mut runner = StepRunner::new(&model, opt);
    let mut data = Batcher::new(DataKind::Random, 1000, 8, 128, Device::Meta, 0);
    let mut batch = None;
    let mut last = None;
    for _ in 0..3 {
        let new = data.next_batch();
        let (x, y) = batch.insert(new);
        last = Some(runner.step(x, y));
    }
    last.unwrap()
}

/// Per-phase peaks against PyTorch's (blocks >= 512 B, from tools/pytorch): vramscope
/// leaves out PyTorch's few-byte scalars, so it may be at most 16 B above.
fn assert_phase_peaks(r: &vramscope::train::StepResult, torch: [(Phase, u64); 4]) {
    for (phase, want) in torch {
        let got = r.phase(phase).peak_allocated as u64;
        assert!(got >= want && got - want <= 16, "{phase}: {got} vs PyTorch {want}");
    }
}

#[test]
fn tinyllama_step_phase_peaks_match_pytorch() {
    let r = walkthrough_third_step(|_| {});
    let torch = [(Phase::Forward, 135_207_936u64), (Phase::Loss, 143_344_064), (Phase::Backward, 143_238_400), (Phase::Optimizer, 56_529_920)];
    assert_phase_peaks(&r, torch);
    assert_eq!(r.peak_allocated as u64, 143_344_076);
}

/// `x = checkpoint(blk, x, mask, use_reentrant=False)` around every block (`--checkpoint
/// blocks`) and around blocks 0, 2 (`every-2`), measured with
/// tools/pytorch/measure_variants.py (torch 2.15.0, CPU). PyTorch's numbers leave out the
/// 5,056 B CPU RNG states that preserve_rng_state=True stashes per checkpointed call (host
/// memory on a GPU; with them the CPU totals are 5,056 B higher per live stash). Beyond the
/// peaks, the ordered sizes of every allocation >= 512 B of each phase agree.
#[test]
fn tinyllama_checkpointed_step_phase_peaks_match_pytorch() {
    use vramscope::model::Checkpoint;
    let r = walkthrough_third_step(|c| c.checkpoint = Checkpoint::Every(1));
    assert_phase_peaks(&r, [(Phase::Forward, 54_529_024), (Phase::Loss, 55_230_912), (Phase::Backward, 72_607_744), (Phase::Optimizer, 56_529_920)]);
    assert_eq!(r.peak_allocated as u64, 72_607_752);
    let r = walkthrough_third_step(|c| c.checkpoint = Checkpoint::Every(2));
    assert_phase_peaks(&r, [(Phase::Forward, 91_151_360), (Phase::Loss, 99_287_488), (Phase::Backward, 99_247_360), (Phase::Optimizer, 56_529_920)]);
    assert_eq!(r.peak_allocated as u64, 99_287_500);
}

/// The workshop's version 2 (`--fusion all`), written as `qkv = self.qkv_proj(x); q, k, v =
/// qkv.split([...], dim=-1)` + views and `gate, up = self.gate_up_proj(x).chunk(2, dim=-1)`,
/// alone and with every block checkpointed; tools/pytorch/measure_variants.py, torch 2.15.0,
/// CPU, RNG stashes left out as above. The local `qkv` keeps the fused product alive for the
/// whole attention call: invisible without checkpointing (the loss peak dominates), +2 MiB
/// on the checkpointed forward peak.
#[test]
fn tinyllama_fused_step_phase_peaks_match_pytorch() {
    use vramscope::model::Checkpoint;
    let r = walkthrough_third_step(|c| (c.fused_qkv, c.fused_gate_up) = (true, true));
    assert_phase_peaks(&r, [(Phase::Forward, 135_207_936), (Phase::Loss, 143_344_064), (Phase::Backward, 143_238_400), (Phase::Optimizer, 56_529_920)]);
    assert_eq!(r.peak_allocated as u64, 143_344_076);
    let r = walkthrough_third_step(|c| {
        (c.fused_qkv, c.fused_gate_up) = (true, true);
        c.checkpoint = Checkpoint::Every(1);
    });
    assert_phase_peaks(&r, [(Phase::Forward, 56_626_176), (Phase::Loss, 55_230_912), (Phase::Backward, 72_607_744), (Phase::Optimizer, 56_529_920)]);
    assert_eq!(r.peak_allocated as u64, 72_607_752);
}

#[test]
fn llama3_8b_from_its_config_json_has_8_03b_parameters_on_meta() {
    runtime::reset();
    let hf = vramscope::model::hf::parse(include_str!("fixtures/llama3_8b_config.json")).unwrap();
    assert_eq!(hf.config.flavour, Flavour::Hf);
    assert_eq!((hf.config.d_model, hf.config.d_ff, hf.config.num_layers), (4096, 14336, 32));
    assert_eq!((hf.config.num_heads, hf.config.num_kv_heads, hf.config.vocab_size), (32, 8, 128_256));
    assert_eq!(hf.config.rope_theta, 500_000.0);
    assert!(!hf.config.tied_embeddings);
    let m = Model::new(&hf.config, Device::Meta, 0).unwrap();
    assert_eq!(m.num_parameters(), 8_030_261_248);
    assert_eq!(hf.config.param_count(), 8_030_261_248);
}

/// One measured cs336 run on meta at the given shape: per-phase peaks (requested bytes, no
/// allocator model) of the last of `steps` iterations of the loop `x, y = get_batch()` then
/// `model(x)` (inference: under no_grad; forward: autograd on) or a training step.
fn cs336_phase_peaks(shape: [usize; 7], kind: &str) -> Vec<(Phase, u64)> {
    let [v, d, l, h, f, s, b] = shape;
    runtime::reset();
    let mut cfg = presets::find("cs336-small", None).unwrap().model;
    (cfg.vocab_size, cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.d_ff, cfg.max_seq_len) = (v, d, l, h, h, f, s);
    let model = Model::new(&cfg, Device::Meta, 0).unwrap();
    let opt = Optimizer::new(OptimConfig::reference(Flavour::Cs336), model.parameters().len());
    let mut runner = StepRunner::new(&model, opt);
    let mut data = Batcher::new(DataKind::Random, v, b, s, Device::Meta, 0);
    let mut batch = None;
    let mut out = Vec::new();
    for _ in 0..if kind == "training" { 3 } else { 2 } {
        let new = data.next_batch();
        let (x, y) = batch.insert(new);
        if kind == "training" {
            let r = runner.step(x, y);
            out = [Phase::Forward, Phase::Loss, Phase::Backward, Phase::Optimizer].map(|p| (p, r.phase(p).peak_allocated as u64)).to_vec();
        } else {
            let _g = (kind == "inference").then(runtime::no_grad);
            runtime::set_phase(Phase::Forward);
            runtime::with(|rt| rt.log.reset_phase_peak());
            drop(model.forward(x));
            out = vec![(Phase::Forward, runtime::stats().phase_peak as u64)];
            runtime::set_phase(Phase::Setup);
        }
    }
    out
}

/// The cs336 flavour against eager PyTorch 2.15 (CPU) running the staff model (cs336-basics
/// model.py / nn_utils.py / optimizer.py, einops calls as the torch ops they run), measured
/// mode-free under torch.profiler(profile_memory=True) from model construction on, every
/// block counted: PyTorch's figures include a few 0-d scalars (4–8 B each) that vramscope
/// does not model, so vramscope may be up to 16 B per live scalar below and never above.
/// Issue 13's points: before the staff lifetimes were followed, inference was 0.80 of
/// PyTorch here and 0.82 / 0.87 for small / medium.
#[test]
fn cs336_phase_peaks_match_pytorch() {
    let check = |shape: [usize; 7], kind: &str, torch: &[(Phase, u64)]| {
        let got = cs336_phase_peaks(shape, kind);
        for (&(phase, want), &(p, g)) in torch.iter().zip(&got) {
            assert_eq!(phase, p);
            assert!(g <= want && want - g <= 32, "{shape:?} {kind} {phase}: vramscope {g} vs PyTorch {want}");
        }
    };
    let p = [1000, 256, 2, 8, 1024, 512, 2];
    check(p, "inference", &[(Phase::Forward, 83_178_496)]);
    check(p, "forward", &[(Phase::Forward, 149_939_216)]);
    check(p, "training", &[(Phase::Forward, 174_918_676), (Phase::Loss, 181_984_276), (Phase::Backward, 213_947_416), (Phase::Optimizer, 51_187_728)]);
    // `small` and `medium` at S 1024, B 8, inference.
    check([10_000, 768, 12, 12, 3072, 1024, 8], "inference", &[(Phase::Forward, 2_252_794_880)]);
    check([10_000, 1024, 24, 16, 4096, 1024, 8], "inference", &[(Phase::Forward, 4_009_971_712)]);
}
