//! vramscope's optimizers and clip_grad_norm_ against eager PyTorch, byte for byte.
//!
//! tests/fixtures/optim_grid.json comes from tools/pytorch/measure_optim.py --grid (see
//! tools/pytorch/README.md): for each point PyTorch 2.15 on CPU builds parameters of the given
//! shapes and dtypes with persistent random gradients, runs two warm-up steps of the
//! implementation (optionally after `clip_grad_norm_`, its result kept bound through the step)
//! and measures the third: the absolute level of requested bytes over blocks >= 512 B before
//! it, its peak and its end. Here the same parameters are built on meta and the same filter is
//! applied to vramscope's events; levels agree to 16 B per live tensor.
//!
//! One CUDA-only allocation is left out of vramscope's levels: `_foreach_norm`'s fp32
//! partial-sum scratch (the CPU slow path has none); its size is checked against the formula.
//! The fused AdamW's 0-d `step` tensors and clip's 0-d norms are 4 B on CPU, below the filter;
//! a unit test below pins them as device tensors.
use serde_json::Value;
use vramscope::engine::{runtime, DType, Device, Tensor};
use vramscope::model::Param;
use vramscope::record::{EventKind, MemEvent};
use vramscope::train::optim::clip::{foreach_norm_scratch_elems, FOREACH_NORM_SCRATCH_OP};
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::Optimizer;

const MIN_BLOCK: usize = 512;

fn dtype(s: &str) -> DType {
    match s {
        "fp32" => DType::F32,
        "bf16" => DType::BF16,
        o => panic!("dtype {o}"),
    }
}

fn shapes(p: &Value) -> Vec<(Vec<usize>, DType)> {
    let sh = p["shapes"].as_array().unwrap();
    let dt = p["dtypes"].as_array().unwrap();
    sh.iter().zip(dt).map(|(s, d)| (s.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect(), dtype(d.as_str().unwrap()))).collect()
}

fn params_on(shapes: &[(Vec<usize>, DType)], device: Device) -> Vec<Param> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, (s, d))| {
            let t = Tensor::zeros(s, *d, device).requires_grad_(true);
            t.set_grad(Some(Tensor::zeros(s, *d, device)));
            Param { name: format!("p{i}"), tensor: t }
        })
        .collect()
}

fn config(p: &Value) -> OptimConfig {
    let kind = OptimizerKind::parse(p["optimizer"].as_str().unwrap()).unwrap();
    let clip = p["max_grad_norm"].as_f64().unwrap();
    OptimConfig {
        kind,
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: p["weight_decay"].as_f64().unwrap(),
        momentum: p["momentum"].as_f64().unwrap(),
        max_grad_norm: (clip > 0.0).then_some(clip),
    }
}

struct Measured {
    start: u64,
    peak: u64,
    end: u64,
    /// `_foreach_norm` scratch blocks (requested bytes), CUDA-only.
    scratch: Vec<usize>,
}

fn measure(p: &Value) -> Measured {
    runtime::reset();
    let shapes = shapes(p);
    let params = params_on(&shapes, Device::Meta);
    let mut opt = Optimizer::new(config(p), params.len());
    opt.step(&params);
    opt.step(&params);
    let before = runtime::with(|rt| {
        let b = rt.log.live_as_events();
        rt.log.start_recording();
        b
    });
    opt.step(&params);
    let events: Vec<MemEvent> = runtime::with(|rt| rt.log.stop_recording());
    // Frees are named "free": the scratch is recognised by its storage id.
    let scratch_ids: std::collections::HashSet<u64> =
        events.iter().filter(|e| e.kind == EventKind::Alloc && e.op == FOREACH_NORM_SCRATCH_OP).map(|e| e.id).collect();
    let counted = |e: &MemEvent| e.bytes >= MIN_BLOCK && !scratch_ids.contains(&e.id);
    let start: u64 = before.iter().filter(|e| counted(e)).map(|e| e.bytes as u64).sum();
    let (mut level, mut peak) = (start, start);
    let mut scratch = Vec::new();
    for e in &events {
        if e.op == FOREACH_NORM_SCRATCH_OP && e.kind == EventKind::Alloc {
            scratch.push(e.bytes);
        }
        if !counted(e) {
            continue;
        }
        match e.kind {
            EventKind::Alloc => level += e.bytes as u64,
            EventKind::Free => level -= e.bytes as u64,
            EventKind::Oom => {}
        }
        peak = peak.max(level);
    }
    drop((opt, params));
    runtime::reset();
    Measured { start, peak, end: level, scratch }
}

#[test]
fn optimizer_steps_match_pytorch() {
    let path = format!("{}/tests/fixtures/optim_grid.json", env!("CARGO_MANIFEST_DIR"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let points = doc["points"].as_array().unwrap();
    assert!(points.len() >= 100, "{} points", points.len());
    let mut bad = Vec::new();
    for p in points {
        let name = p["name"].as_str().unwrap();
        let m = measure(p);
        let tol = 16 * p["live_at_peak"].as_u64().unwrap();
        for (what, ours, torch) in [("start", m.start, &p["start"]), ("peak", m.peak, &p["peak"]), ("end", m.end, &p["end"])] {
            let torch = torch.as_u64().unwrap();
            if ours.abs_diff(torch) > tol {
                bad.push(format!("{name:<56} {what:<5} PyTorch {torch:>10} B  vramscope {ours:>10} B"));
            }
        }
        // The CUDA scratch: one per dtype group, len(group) x max chunks fp32 values.
        if p["max_grad_norm"].as_f64().unwrap() > 0.0 {
            let shapes = shapes(p);
            let mut want = Vec::new();
            let mut seen: Vec<DType> = Vec::new();
            for (_, d) in &shapes {
                if !seen.contains(d) {
                    seen.push(*d);
                    let numels: Vec<usize> = shapes.iter().filter(|(_, e)| e == d).map(|(s, _)| s.iter().product()).collect();
                    want.push(4 * foreach_norm_scratch_elems(&numels));
                }
            }
            assert_eq!(m.scratch, want, "{name}: _foreach_norm scratch per dtype group");
        } else {
            assert!(m.scratch.is_empty(), "{name}: no clip, no _foreach_norm");
        }
    }
    assert!(bad.is_empty(), "{} of {} phases differ from PyTorch:\n{}", bad.len(), 3 * points.len(), bad.join("\n"));
}

/// What the CPU fixture cannot see, as a CUDA run has it: the fused AdamW's `step` is a 0-d
/// fp32 device tensor per parameter (made before its moments, kept as state), and
/// clip_grad_norm_ makes a 0-d norm per gradient, the scratch, the stacked norms, the total,
/// the coefficient and its clamp.
#[test]
fn small_device_tensors_of_fused_adamw_and_clip() {
    runtime::reset();
    let shapes = vec![(vec![300, 70_000], DType::BF16), (vec![64], DType::F32), (vec![64, 64], DType::BF16)];
    let params = params_on(&shapes, Device::Meta);
    let mut cfg = OptimConfig::reference(vramscope::model::Flavour::Hf);
    assert_eq!(cfg.kind, OptimizerKind::AdamwTorchFused);
    cfg.max_grad_norm = Some(1.0);
    let mut opt = Optimizer::new(cfg, params.len());
    runtime::with(|rt| rt.log.start_recording());
    opt.step(&params);
    let events = runtime::with(|rt| rt.log.stop_recording());
    let allocs: Vec<(&str, usize)> = events.iter().filter(|e| e.kind == EventKind::Alloc).map(|e| (e.op, e.bytes)).collect();
    // clip: per dtype group (bf16: p0, p2; fp32: p1) the scratch then the norms.
    let chunks = 21_000_000usize.div_ceil(65_536); // p0's 21M elements
    let clip = vec![
        (FOREACH_NORM_SCRATCH_OP, 2 * chunks * 4),
        ("linalg_vector_norm", 2),
        ("linalg_vector_norm", 2),
        (FOREACH_NORM_SCRATCH_OP, 4),
        ("linalg_vector_norm", 4),
        ("cat", 3 * 4), // torch.stack promotes bf16 and fp32 norms to fp32
        ("linalg_vector_norm", 4),
        ("add", 4),
        ("div", 4),
        ("clamp", 4),
    ];
    assert_eq!(&allocs[..clip.len()], &clip[..], "{allocs:?}");
    // Fused AdamW's first step: per parameter its device step, then exp_avg and exp_avg_sq.
    let state: Vec<(&str, usize)> = allocs[clip.len()..].to_vec();
    let want: Vec<(&str, usize)> = shapes
        .iter()
        .flat_map(|(s, d)| {
            let b = s.iter().product::<usize>() * d.size();
            [("zeros", 4), ("zeros", b), ("zeros", b)]
        })
        .collect();
    assert_eq!(state, want);
    // Step tensors are optimizer state: 4 B requested, a 512 B block each on CUDA.
    let bytes: usize = shapes.iter().map(|(s, d)| 2 * s.iter().product::<usize>() * d.size() + 4).sum();
    assert_eq!(opt.state_bytes(), bytes as u64);
    // A later step allocates nothing but clip's tensors.
    runtime::with(|rt| rt.log.start_recording());
    opt.step(&params);
    let events = runtime::with(|rt| rt.log.stop_recording());
    assert_eq!(events.iter().filter(|e| e.kind == EventKind::Alloc).count(), clip.len());
    drop((opt, params));
    runtime::reset();
}

/// Adafactor's state as a CUDA run keeps it: fp32 whatever the parameters' dtype, factored
/// (row and column) for ≥ 2-D parameters, whole for 1-D, plus each parameter's 0-d fp32 `RMS`
/// (4 B requested, a 512 B block on CUDA; below the CPU fixture's filter), replaced each step.
/// The first step's allocations for a bf16 matrix: its gradient's fp32 copy, then row and
/// column, then the parameter's fp32 copy, the norm and the RMS.
#[test]
fn adafactor_state_is_fp32_factored_with_a_device_rms() {
    runtime::reset();
    let shapes = vec![(vec![300, 70], DType::BF16), (vec![64], DType::BF16), (vec![5, 7, 9], DType::F32)];
    let params = params_on(&shapes, Device::Meta);
    let mut cfg = OptimConfig::reference(vramscope::model::Flavour::Hf);
    cfg.kind = OptimizerKind::Adafactor;
    cfg.max_grad_norm = None;
    let mut opt = Optimizer::new(cfg, params.len());
    runtime::with(|rt| rt.log.start_recording());
    opt.step(&params);
    let events = runtime::with(|rt| rt.log.stop_recording());
    let allocs: Vec<(&str, usize)> = events.iter().filter(|e| e.kind == EventKind::Alloc).map(|e| (e.op, e.bytes)).collect();
    assert_eq!(
        &allocs[..6],
        &[("_to_copy", 300 * 70 * 4), ("zeros", 300 * 4), ("zeros", 70 * 4), ("_to_copy", 300 * 70 * 4), ("linalg_vector_norm", 4), ("div", 4)],
        "{allocs:?}"
    );
    // row + column + RMS; the whole 1-D second moment + RMS; (5·7 + 5·9) + RMS.
    let want = (300 + 70) * 4 + 4 + 64 * 4 + 4 + (35 + 45) * 4 + 4;
    assert_eq!(opt.state_bytes(), want as u64);
    // Later steps replace the RMS (same bytes) and keep the moments.
    opt.step(&params);
    assert_eq!(opt.state_bytes(), want as u64);
    // Nothing but the state outlives a step.
    let live: usize = runtime::with(|rt| rt.log.live_as_events()).iter().map(|e| e.bytes).sum();
    let params_and_grads: usize = shapes.iter().map(|(s, d)| 2 * s.iter().product::<usize>() * d.size()).sum();
    assert_eq!(live, params_and_grads + want);
    drop((opt, params));
    runtime::reset();
}
