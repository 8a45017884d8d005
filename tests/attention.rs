//! Flash attention (`--attention flash`): the primitive against the naive composition
//! (values and all three gradients), its allocations, and what it does to whole models:
//! no (B, h, S, S) tensor on a meta 2.7B step, identical cpu/meta events, and learning.
mod scratch;
use std::process::Command;
use vramscope::engine::{runtime, DType, Device, Tensor};
use vramscope::model::{presets, Attention, Flavour, Model, ModelConfig};
use vramscope::record::{Category, EventKind, MemEvent};
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, DataKind, Optimizer, StepRunner};

fn rand_vals(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// softmax(q·kᵀ·scale + mask)·v from primitives, with the additive causal mask.
fn naive(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool, scale: f64) -> Tensor {
    let mut scores = q.matmul(&k.transpose(-2, -1)).mul_scalar(scale);
    if causal {
        let (sq, sk) = (q.dim(2), k.dim(2));
        assert_eq!(sq, sk);
        let mask = Tensor::full(&[sq, sk], f64::NEG_INFINITY, q.dtype(), q.device()).triu(1).view(&[1, 1, sq, sk]);
        scores = scores.add(&mask);
    }
    scores.softmax(-1).matmul(v)
}

/// Max |a − b| relative to the largest |b| (at least 1e-3: a gradient that is exactly zero,
/// as dq with one key, is compared absolutely).
fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-3);
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Output and (dq, dk, dv) of `f` for loss = sum(out ∘ w).
fn run(
    dtype: DType,
    (b, h, sq, sk, d): (usize, usize, usize, usize, usize),
    q_transposed: bool,
    f: impl Fn(&Tensor, &Tensor, &Tensor) -> Tensor,
) -> Vec<Vec<f64>> {
    let mk = |n: usize, seed: u64| rand_vals(n, seed).iter().map(|x| x * 2.0).collect::<Vec<_>>();
    let q = if q_transposed {
        // (B, S, h, d) memory seen as (B, h, S, d), as the models' heads are.
        Tensor::from_f64(&mk(b * h * sq * d, 1), &[b, sq, h, d], dtype, Device::Cpu).requires_grad_(true)
    } else {
        Tensor::from_f64(&mk(b * h * sq * d, 1), &[b, h, sq, d], dtype, Device::Cpu).requires_grad_(true)
    };
    let qv = if q_transposed { q.transpose(1, 2) } else { q.clone() };
    let k = Tensor::from_f64(&mk(b * h * sk * d, 2), &[b, h, sk, d], dtype, Device::Cpu).requires_grad_(true);
    let v = Tensor::from_f64(&mk(b * h * sk * d, 3), &[b, h, sk, d], dtype, Device::Cpu).requires_grad_(true);
    let out = f(&qv, &k, &v);
    let w = Tensor::from_f64(&rand_vals(out.numel(), 4), out.shape(), dtype, Device::Cpu);
    out.mul(&w).sum_all().backward();
    vec![out.to_vec_f64(), q.grad().unwrap().to_vec_f64(), k.grad().unwrap().to_vec_f64(), v.grad().unwrap().to_vec_f64()]
}

#[test]
fn flash_matches_naive_values_and_gradients() {
    // S not a multiple of the 128-query × 256-key tile, one and several tiles, several head
    // sizes, B·h > 1.
    let shapes = [(2, 3, 77, 8), (1, 2, 130, 32), (2, 2, 65, 64), (1, 1, 1, 16), (1, 2, 300, 64), (1, 1, 530, 32)];
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::F64, 1e-10)] {
        for &(b, h, s, d) in &shapes {
            for causal in [true, false] {
                for q_transposed in [false, true] {
                    runtime::reset();
                    let scale = 1.0 / (d as f64).sqrt();
                    let dims = (b, h, s, s, d);
                    let flash = run(dtype, dims, q_transposed, |q, k, v| Tensor::flash_attention(q, k, v, causal, scale));
                    let reference = run(dtype, dims, q_transposed, |q, k, v| naive(q, k, v, causal, scale));
                    for (i, what) in ["output", "grad q", "grad k", "grad v"].iter().enumerate() {
                        let e = rel_err(&flash[i], &reference[i]);
                        assert!(e < tol, "{dtype} {:?} causal={causal} q_transposed={q_transposed}: {what} differs by {e:e}", (b, h, s, d));
                    }
                }
            }
        }
    }
}

#[test]
fn flash_handles_more_keys_than_queries_without_a_mask() {
    for dtype in [DType::F32, DType::F64] {
        runtime::reset();
        let dims = (2, 2, 37, 300, 32);
        let flash = run(dtype, dims, false, |q, k, v| Tensor::flash_attention(q, k, v, false, 0.3));
        let reference = run(dtype, dims, false, |q, k, v| naive(q, k, v, false, 0.3));
        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-10 };
        for i in 0..4 {
            assert!(rel_err(&flash[i], &reference[i]) < tol, "{dtype}: tensor {i}");
        }
    }
}

/// Allocations of the flash ops: (op, bytes, category).
fn flash_allocs(ev: &[MemEvent]) -> Vec<(&'static str, usize, Category)> {
    ev.iter().filter(|e| e.kind == EventKind::Alloc && e.op.starts_with("_scaled_dot_product_flash")).map(|e| (e.op, e.bytes, e.category)).collect()
}

/// Forward: output and fp32 logsumexp only; backward: the three gradients plus the per-row
/// D and the fp32 dQ accumulator (workspace, freed before it returns). With q, k, v and dO
/// laid out (B, S, h, d), as the models make them, nothing is copied.
#[test]
fn flash_allocates_only_output_logsumexp_and_gradients() {
    let (b, h, s, d) = (2, 4, 100, 24);
    for device in [Device::Cpu, Device::Meta] {
        runtime::reset();
        runtime::with(|rt| rt.log.start_recording());
        let mk = |seed| Tensor::from_f64(&rand_vals(b * h * s * d, seed), &[b, s, h, d], DType::F32, device).requires_grad_(true);
        let (q, k, v) = (mk(1), mk(2), mk(3));
        let before = runtime::stats().num_allocs;
        let out = Tensor::flash_attention(&q.transpose(1, 2), &k.transpose(1, 2), &v.transpose(1, 2), true, 0.2);
        assert_eq!(runtime::stats().num_allocs - before, 2, "{device}: output and logsumexp");
        let g = Tensor::from_f64(&rand_vals(b * h * s * d, 4), &[b, s, h, d], DType::F32, device).transpose(1, 2);
        let before = runtime::stats().num_allocs;
        out.backward_with(g);
        assert_eq!(runtime::stats().num_allocs - before, 5, "{device}: dq, dk, dv, D, dq_accum");
        let ev = runtime::with(|rt| rt.log.stop_recording());
        let (qkv, lse) = (b * h * s * d * 4, b * h * s * 4);
        let (fwd, bwd) = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward");
        // The gradients are stolen into the leaves' .grad (category as it ends up).
        let (act, grad, ws) = (Category::Activation, Category::Gradient, Category::Workspace);
        assert_eq!(
            flash_allocs(&ev),
            vec![(fwd, qkv, act), (fwd, lse, act), (bwd, qkv, grad), (bwd, qkv, grad), (bwd, qkv, grad), (bwd, b * h * 128 * 4, ws), (bwd, b * 128 * h * 32 * 4, ws)],
            "{device}"
        );
        assert!(ev.iter().all(|e| e.bytes < b * h * s * s * 4), "{device}: no (B, h, S, S) tensor");
        drop(out);
        assert_eq!(runtime::stats().allocated, 6 * qkv, "{device}: only q, k, v and their gradients remain");
    }
}

/// With (B, h, S, d)-contiguous q and dO the backward copies dO and O to (B, S, h, d)
/// first, as `_flash_attention_backward` does.
#[test]
fn flash_backward_copies_do_and_o_when_not_bshd() {
    runtime::reset();
    let (b, h, s, d) = (1, 2, 9, 8);
    let mk = |seed| Tensor::from_f64(&rand_vals(b * h * s * d, seed), &[b, h, s, d], DType::F32, Device::Cpu).requires_grad_(true);
    let (q, k, v) = (mk(1), mk(2), mk(3));
    let out = Tensor::flash_attention(&q, &k, &v, false, 0.3);
    assert!(out.is_contiguous(), "empty_like(q)");
    let g = Tensor::from_f64(&rand_vals(b * h * s * d, 4), &[b, h, s, d], DType::F32, Device::Cpu);
    let before = runtime::stats().num_allocs;
    out.backward_with(g);
    assert_eq!(runtime::stats().num_allocs - before, 2 + 5);
}

#[test]
fn flash_output_and_gradients_take_their_inputs_layout() {
    runtime::reset();
    let (b, h, s, d) = (1, 2, 5, 4);
    // q as the models make it: (B, S, h, d) memory viewed as (B, h, S, d).
    let q = Tensor::from_f64(&rand_vals(b * h * s * d, 1), &[b, s, h, d], DType::F32, Device::Cpu).requires_grad_(true);
    let k = Tensor::from_f64(&rand_vals(b * h * s * d, 2), &[b, h, s, d], DType::F32, Device::Cpu).requires_grad_(true);
    let out = Tensor::flash_attention(&q.transpose(1, 2), &k, &k, true, 0.5);
    assert_eq!(out.shape(), &[b, h, s, d]);
    assert!(out.transpose(1, 2).is_contiguous(), "empty_like(q): (B, S, h, d) memory");
    out.sum_all().backward();
    assert!(q.grad().unwrap().is_contiguous());
}

// ------------------------------------------------------------------- whole models

fn small_cfg(flavour: &str, attention: Attention) -> ModelConfig {
    let mut cfg = presets::find("walkthrough", None).unwrap().model;
    if flavour == "cs336" {
        cfg = presets::find("cs336-small", None).unwrap().model;
        cfg.num_heads = 4;
        cfg.num_kv_heads = 4;
        cfg.max_seq_len = 80;
    }
    cfg.d_model = 64;
    cfg.d_ff = 96;
    cfg.num_layers = 2;
    cfg.vocab_size = 50;
    cfg.attention = attention;
    cfg
}

fn optimizer(model: &Model, lr: f64, weight_decay: f64) -> Optimizer {
    let kind = if model.config.flavour == Flavour::Cs336 { OptimizerKind::AdamwCs336 } else { OptimizerKind::AdamwTorch };
    Optimizer::new(OptimConfig { kind, lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay, momentum: 0.0, max_grad_norm: None }, model.parameters().len())
}

fn run_steps(cfg: &ModelConfig, device: Device, seq: usize, steps: usize) -> (Vec<MemEvent>, Vec<Option<f64>>) {
    runtime::reset();
    runtime::with(|rt| rt.log.start_recording());
    let model = Model::new(cfg, device, 1).unwrap();
    let mut runner = StepRunner::new(&model, optimizer(&model, 1e-3, 0.01));
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, 2, seq, device, 3);
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

#[test]
fn cpu_and_meta_record_identical_events_with_flash() {
    for flavour in ["tinyllama", "cs336"] {
        // 70 positions: one partial tile (tile edges are covered by the tests above).
        let cfg = small_cfg(flavour, Attention::Flash);
        let (cpu, losses) = run_steps(&cfg, Device::Cpu, 70, 3);
        let (meta, _) = run_steps(&cfg, Device::Meta, 70, 3);
        assert!(losses.iter().all(|l| l.is_some_and(f64::is_finite)), "{flavour}: {losses:?}");
        assert_eq!(cpu.len(), meta.len(), "{flavour}: event counts differ");
        for (i, (a, b)) in cpu.iter().zip(&meta).enumerate() {
            assert!(
                a.kind == b.kind && a.id == b.id && a.bytes == b.bytes && a.scope == b.scope && a.op == b.op && a.phase == b.phase && a.category == b.category,
                "{flavour}: event {i} differs:\n cpu  {a:?}\n meta {b:?}"
            );
        }
        // `F.scaled_dot_product_attention` on fp32: CUDA runs the memory-efficient kernel
        // (flash has no fp32 kernel; measured on an H200, tests/gpu_grid.rs).
        assert!(cpu.iter().any(|e| e.op == "_scaled_dot_product_efficient_attention"), "{flavour}: the memory-efficient kernel was used");
        let allocs = cpu.iter().filter(|e| e.kind == EventKind::Alloc).count();
        assert_eq!(allocs, cpu.iter().filter(|e| e.kind == EventKind::Free).count(), "{flavour}: leaked storages");
    }
}

/// The same model, weights and data give the same loss with either attention.
#[test]
fn flash_and_naive_models_agree_on_the_loss() {
    for flavour in ["tinyllama", "cs336"] {
        let (_, naive) = run_steps(&small_cfg(flavour, Attention::Naive), Device::Cpu, 70, 3);
        let (_, flash) = run_steps(&small_cfg(flavour, Attention::Flash), Device::Cpu, 70, 3);
        for (a, b) in naive.iter().zip(&flash) {
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!((a - b).abs() < 1e-4 * a.abs(), "{flavour}: naive {a} vs flash {b}");
        }
    }
}

#[test]
fn tiny_model_learns_a_repeating_pattern_with_flash() {
    for flavour in ["tinyllama", "cs336"] {
        runtime::reset();
        let mut cfg = small_cfg(flavour, Attention::Flash);
        cfg.d_ff = 128;
        cfg.vocab_size = 64;
        let model = Model::new(&cfg, Device::Cpu, 7).unwrap();
        let mut runner = StepRunner::new(&model, optimizer(&model, 3e-3, 0.0));
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

/// One recorded meta training step of cs336 2.7B at B 4, S 512: (peak allocated, number of
/// allocations of (B, h, S, S) elements).
fn meta_2_7b_step(attention: Attention) -> (usize, usize) {
    runtime::reset();
    let mut cfg = presets::find("2.7B", None).unwrap().model;
    cfg.attention = attention;
    let (b, s, h) = (4, 512, cfg.num_heads);
    let model = Model::new(&cfg, Device::Meta, 0).unwrap();
    let mut runner = StepRunner::new(&model, optimizer(&model, 1e-3, 0.01));
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, b, s, Device::Meta, 0);
    let (x, y) = data.next_batch();
    runner.step(&x, &y);
    runtime::with(|rt| rt.log.start_recording());
    let (x, y) = data.next_batch();
    let r = runner.step(&x, &y);
    let ev = runtime::with(|rt| rt.log.stop_recording());
    let n = b * h * s * s;
    let big = ev.iter().filter(|e| e.kind == EventKind::Alloc && [1, 2, 4, 8].iter().any(|w| e.bytes == n * w)).count();
    (r.peak_allocated, big)
}

#[test]
fn flash_removes_every_bhss_allocation_from_a_2_7b_step() {
    let (naive_peak, naive_big) = meta_2_7b_step(Attention::Naive);
    let (flash_peak, flash_big) = meta_2_7b_step(Attention::Flash);
    let gib = |v: usize| v as f64 / (1u64 << 30) as f64;
    eprintln!(
        "cs336 2.7B, B 4, S 512, training step on meta: naive peak {:.2} GiB with {naive_big} (B, h, S, S) allocations of 128 MiB; flash peak {:.2} GiB with {flash_big}",
        gib(naive_peak),
        gib(flash_peak)
    );
    // Per layer: scores, scaled, masked, max-subtracted, exp, softmax in the forward and
    // their gradients in the backward.
    assert!(naive_big >= 32 * 5, "naive step has {naive_big} (B, h, S, S) allocations");
    assert_eq!(flash_big, 0);
    assert!(flash_peak + (1 << 30) < naive_peak, "flash {flash_peak} vs naive {naive_peak}");
}

#[test]
fn attention_flag_is_parsed_and_checked() {
    let bin = env!("CARGO_BIN_EXE_vramscope");
    let o = Command::new(bin).args(["profile", "--device", "meta", "--model", "2.7B", "--context-length", "128", "--attention", "fast"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--attention"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new(bin).args(["train", "--num-layers", "1", "--device", "meta", "--num-steps", "1", "--warmup-steps", "0", "--attention", "bogus"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let dir = scratch::dir().join(format!("vramscope-attn-{}", std::process::id()));
    let o = Command::new(bin)
        .args(["train", "--num-layers", "1", "--num-steps", "2", "--warmup-steps", "0", "--attention", "flash", "--threads", "2", "--output-dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(c["model"]["attention"], "flash");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Grouped-query attention in the fused kernels (`enable_gqa=True`): k and v with h_kv heads
/// give the values and gradients of the naive composition on k and v repeated per group
/// (the gradients of the repeats summed back), for flash, the CPU kernel and (no GQA) the
/// memory-efficient kernel on full heads.
#[test]
fn fused_kernels_match_naive_with_grouped_kv_heads() {
    let (b, h, hk, s, d) = (2, 6, 2, 37, 16);
    let mk = |n: usize, seed: u64| rand_vals(n, seed);
    type Kernel = fn(&Tensor, &Tensor, &Tensor, bool, f64) -> Tensor;
    let kernels: [(&str, Kernel, usize); 3] = [
        ("flash", Tensor::flash_attention, hk),
        ("cpu_flash", Tensor::cpu_flash_attention, hk),
        ("efficient", Tensor::efficient_attention, h),
    ];
    for (name, kernel, kv_heads) in kernels {
        for causal in [true, false] {
            runtime::reset();
            let grads = |use_kernel: bool| {
                let q = Tensor::from_f64(&mk(b * h * s * d, 1), &[b, h, s, d], DType::F64, Device::Cpu).requires_grad_(true);
                let k = Tensor::from_f64(&mk(b * kv_heads * s * d, 2), &[b, kv_heads, s, d], DType::F64, Device::Cpu).requires_grad_(true);
                let v = Tensor::from_f64(&mk(b * kv_heads * s * d, 3), &[b, kv_heads, s, d], DType::F64, Device::Cpu).requires_grad_(true);
                let out = if use_kernel {
                    kernel(&q, &k, &v, causal, 0.25)
                } else {
                    let r = h / kv_heads;
                    naive(&q, &k.repeat_interleave(r, 1), &v.repeat_interleave(r, 1), causal, 0.25)
                };
                let w = Tensor::from_f64(&rand_vals(out.numel(), 4), out.shape(), DType::F64, Device::Cpu);
                out.mul(&w).sum_all().backward();
                [out.to_vec_f64(), q.grad().unwrap().to_vec_f64(), k.grad().unwrap().to_vec_f64(), v.grad().unwrap().to_vec_f64()]
            };
            let (got, want) = (grads(true), grads(false));
            for (i, what) in ["output", "grad q", "grad k", "grad v"].iter().enumerate() {
                let e = rel_err(&got[i], &want[i]);
                assert!(e < 1e-10, "{name} causal={causal}: {what} differs by {e:e}");
            }
        }
    }
}

/// What each fused kernel allocates for a GQA training call on meta (bf16, B 1, h 8, h_kv 2,
/// S 100, d 64): flash (CUDA) the output, the logsumexp, dq/dk/dv, D over 128-row blocks, the
/// fp32 dQ accumulator and dK/dV per query head; the CPU kernel only the output, the
/// logsumexp and dq/dk/dv.
#[test]
fn fused_kernel_allocations_per_backend() {
    let (b, h, hk, s, d) = (1usize, 8usize, 2usize, 100usize, 64usize);
    for (name, kernel) in [("flash", Tensor::flash_attention as fn(&Tensor, &Tensor, &Tensor, bool, f64) -> Tensor), ("cpu_flash", Tensor::cpu_flash_attention)] {
        runtime::reset();
        runtime::with(|rt| rt.log.start_recording());
        let q = Tensor::zeros(&[b, s, h, d], DType::BF16, Device::Meta).requires_grad_(true);
        let k = Tensor::zeros(&[b, hk, s, d], DType::BF16, Device::Meta).requires_grad_(true);
        let v = Tensor::zeros(&[b, hk, s, d], DType::BF16, Device::Meta).requires_grad_(true);
        let out = kernel(&q.transpose(1, 2), &k, &v, true, 0.125);
        out.sum_all().backward();
        let ev = runtime::with(|rt| rt.log.stop_recording());
        let sizes: Vec<usize> = ev.iter().filter(|e| e.kind == EventKind::Alloc && e.op.contains("attention")).map(|e| e.bytes).collect();
        let (qb, kb, lse) = (b * h * s * d * 2, b * hk * s * d * 2, b * h * s * 4);
        let want = match name {
            "flash" => vec![qb, lse, qb, kb, kb, b * h * 128 * 4, b * 128 * h * 64 * 4, b * s * h * d * 2, b * s * h * d * 2],
            _ => vec![qb, lse, qb, kb, kb],
        };
        assert_eq!(sizes, want, "{name}");
    }
}
