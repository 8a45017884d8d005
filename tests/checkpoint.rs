//! Activation checkpointing (`--checkpoint`, torch.utils.checkpoint with use_reentrant=False):
//! the same gradients, only block inputs kept through the forward, recomputation in the
//! backward under the block's module path, and cpu/meta event equality.
mod scratch;
use std::collections::HashMap;
use std::process::Command;
use vramscope::engine::checkpoint::checkpoint;
use vramscope::engine::{runtime, DType, Device, Tensor};
use vramscope::model::{presets, Checkpoint, Flavour, Model, ModelConfig};
use vramscope::record::{EventKind, MemEvent, Phase};
use vramscope::train::optim::OptimConfig;
use vramscope::train::{Batcher, DataKind, Optimizer, StepRunner};

fn small(flavour: &str, layers: usize) -> ModelConfig {
    let mut cfg = presets::find(if flavour == "cs336" { "cs336-small" } else { "walkthrough" }, None).unwrap().model;
    cfg.d_model = 64;
    cfg.d_ff = 96;
    cfg.num_layers = layers;
    cfg.num_heads = 4;
    cfg.num_kv_heads = if flavour == "cs336" { 4 } else { 2 };
    cfg.vocab_size = 50;
    cfg.max_seq_len = 16;
    cfg
}

/// Loss and every parameter's gradient after one forward/backward on cpu.
fn grads(cfg: &ModelConfig) -> (f64, Vec<Vec<f64>>) {
    runtime::reset();
    let model = Model::new(cfg, Device::Cpu, 5).unwrap();
    let (x, y) = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 12, Device::Cpu, 2).next_batch();
    let (_, loss) = model.forward_loss(&x, &y, &mut |_| {});
    loss.backward();
    let l = loss.item();
    (l, model.parameters().iter().map(|p| p.tensor.grad().expect("every parameter gets a gradient").to_vec_f64()).collect())
}

#[test]
fn checkpointed_gradients_equal_the_baseline() {
    for flavour in ["tinyllama", "cs336"] {
        for attention in ["naive", "flash"] {
            for fused in [false, true] {
                let mut base = small(flavour, 3);
                base.attention = vramscope::model::Attention::parse(attention).unwrap();
                base.fused_qkv = fused;
                base.fused_gate_up = fused;
                let (l0, g0) = grads(&base);
                for ck in [Checkpoint::Every(1), Checkpoint::Every(2)] {
                    let mut cfg = base.clone();
                    cfg.checkpoint = ck;
                    let (l1, g1) = grads(&cfg);
                    assert_eq!(l0, l1, "{flavour} {attention} fused={fused} {ck}: loss");
                    for (i, (a, b)) in g0.iter().zip(&g1).enumerate() {
                        for (x, y) in a.iter().zip(b) {
                            assert!((x - y).abs() <= 1e-6 * (1.0 + x.abs()), "{flavour} {attention} fused={fused} {ck}: param {i}: {x} vs {y}");
                        }
                    }
                }
            }
        }
    }
}

/// Events of one recorded training step (after a warm-up step) and its peak.
fn step_events(cfg: &ModelConfig, device: Device, b: usize, s: usize) -> (Vec<MemEvent>, usize, usize) {
    runtime::reset();
    let model = Model::new(cfg, device, 1).unwrap();
    let opt = Optimizer::new(OptimConfig::reference(cfg.flavour), model.parameters().len());
    let mut runner = StepRunner::new(&model, opt);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, b, s, device, 3);
    let (x, y) = data.next_batch();
    runner.step(&x, &y);
    runner.finish();
    let before = runtime::stats().allocated;
    runtime::with(|rt| rt.log.start_recording());
    let (x, y) = data.next_batch();
    let r = runner.step(&x, &y);
    let ev = runtime::with(|rt| rt.log.stop_recording());
    (ev, r.peak_allocated, before)
}

fn block_prefix(flavour: Flavour) -> &'static str {
    if flavour == Flavour::Cs336 { "layers" } else { "blocks" }
}

/// Block index of a module path inside a decoder block.
fn block_of(scope: &str, prefix: &str) -> Option<usize> {
    scope.strip_prefix(prefix)?.strip_prefix('.')?.split('.').next()?.parse().ok()
}

/// Storages allocated in the forward phase that are still live when it ends, per block.
fn kept_after_forward(ev: &[MemEvent], prefix: &str) -> HashMap<usize, Vec<usize>> {
    let end = ev.iter().position(|e| e.phase != Phase::Forward && e.phase != Phase::ZeroGrad && e.phase != Phase::Setup).unwrap();
    let mut live: HashMap<u64, &MemEvent> = HashMap::new();
    for e in &ev[..end] {
        match e.kind {
            EventKind::Alloc if e.phase == Phase::Forward => {
                live.insert(e.id, e);
            }
            EventKind::Free => {
                live.remove(&e.id);
            }
            _ => {}
        }
    }
    let mut per: HashMap<usize, Vec<usize>> = HashMap::new();
    for e in live.values() {
        if let Some(i) = block_of(&e.scope, prefix) {
            per.entry(i).or_default().push(e.bytes);
        }
    }
    per.values_mut().for_each(|v| v.sort_unstable());
    per
}

#[test]
fn checkpointed_blocks_keep_only_their_output_through_the_forward() {
    for flavour in ["tinyllama", "cs336"] {
        let mut cfg = small(flavour, 4);
        cfg.max_seq_len = 64;
        let (b, s) = (4, 64);
        let residual = b * s * cfg.d_model * 4;
        let prefix = block_prefix(cfg.flavour);
        let (base, ..) = step_events(&cfg, Device::Meta, b, s);
        let kept_base = kept_after_forward(&base, prefix);
        cfg.checkpoint = Checkpoint::Every(2);
        let (ev, ..) = step_events(&cfg, Device::Meta, b, s);
        let kept = kept_after_forward(&ev, prefix);
        for i in 0..4 {
            if i % 2 == 0 {
                // The block's output: the next block's input, which the next checkpoint keeps
                // (or the final norm saves). Nothing else made inside the block survives.
                assert_eq!(kept[&i], vec![residual], "{flavour} block {i} keeps {:?}", kept[&i]);
                // Kept for the recomputation of block i + 1: saved, so an activation.
                let out = ev.iter().rev().find(|e| e.kind == EventKind::Alloc && e.phase == Phase::Forward && e.bytes == residual && e.scope.as_ref() == format!("{prefix}.{i}")).unwrap();
                let freed = ev.iter().find(|e| e.kind == EventKind::Free && e.id == out.id).unwrap();
                assert_eq!(freed.category, vramscope::record::Category::Activation, "{flavour} block {i}");
            } else {
                assert_eq!(kept[&i], kept_base[&i], "{flavour}: unchecked block {i} changed");
                assert!(kept[&i].len() > 10, "{flavour} block {i}: {:?}", kept[&i]);
            }
        }
    }
}

#[test]
fn checkpointing_lowers_the_activation_peak() {
    let mut cfg = presets::find("walkthrough", None).unwrap().model;
    let (_, peak0, before0) = step_events(&cfg, Device::Meta, 8, 128);
    cfg.checkpoint = Checkpoint::Every(1);
    let (_, peak1, before1) = step_events(&cfg, Device::Meta, 8, 128);
    cfg.checkpoint = Checkpoint::Every(2);
    let (_, peak2, _) = step_events(&cfg, Device::Meta, 8, 128);
    assert_eq!(before0, before1);
    let mib = |v: usize| v as f64 / (1u64 << 20) as f64;
    eprintln!(
        "walkthrough B 8 S 128 training step (meta): peak {:.2} MiB, every-2 {:.2} MiB, blocks {:.2} MiB ({:.2} MiB live before the step)",
        mib(peak0),
        mib(peak2),
        mib(peak1),
        mib(before0)
    );
    assert!(peak1 < peak2 && peak2 < peak0);
    assert!((peak1 - before1) * 2 < peak0 - before0, "activations above the state: {} vs {}", peak1 - before1, peak0 - before0);
}

#[test]
fn cpu_and_meta_record_identical_events_with_checkpointing() {
    for flavour in ["tinyllama", "cs336"] {
        for ck in [Checkpoint::Every(1), Checkpoint::Every(2)] {
            let mut cfg = small(flavour, 3);
            cfg.checkpoint = ck;
            cfg.fused_qkv = ck == Checkpoint::Every(2);
            let (cpu, ..) = step_events(&cfg, Device::Cpu, 2, 12);
            let (meta, ..) = step_events(&cfg, Device::Meta, 2, 12);
            assert_eq!(cpu.len(), meta.len(), "{flavour} {ck}: event counts differ");
            for (i, (a, b)) in cpu.iter().zip(&meta).enumerate() {
                assert!(
                    a.kind == b.kind && a.id == b.id && a.bytes == b.bytes && a.scope == b.scope && a.op == b.op && a.phase == b.phase && a.category == b.category,
                    "{flavour} {ck}: event {i} differs:\n cpu  {a:?}\n meta {b:?}"
                );
            }
        }
    }
}

#[test]
fn recomputation_runs_in_the_backward_under_the_block_path() {
    let mut cfg = small("tinyllama", 3);
    cfg.checkpoint = Checkpoint::Every(2);
    let (ev, ..) = step_events(&cfg, Device::Meta, 2, 12);
    // `softmax` is a forward-only kernel: in the backward it can only be a recomputation.
    let soft: Vec<&MemEvent> = ev.iter().filter(|e| e.kind == EventKind::Alloc && e.op == "softmax").collect();
    let fwd: Vec<&str> = soft.iter().filter(|e| e.phase == Phase::Forward).map(|e| &*e.scope).collect();
    let bwd: Vec<&str> = soft.iter().filter(|e| e.phase == Phase::Backward).map(|e| &*e.scope).collect();
    assert_eq!(fwd, ["blocks.0.attention", "blocks.1.attention", "blocks.2.attention"]);
    // Backward runs the last block first.
    assert_eq!(bwd, ["blocks.2.attention", "blocks.0.attention"]);
    // Recomputed saved tensors are activations of the block, allocated in the backward.
    assert!(ev.iter().any(|e| e.kind == EventKind::Alloc
        && e.phase == Phase::Backward
        && e.scope.starts_with("blocks.2.feed_forward.gate_proj")
        && e.category == vramscope::record::Category::Activation));
    assert!(ev.iter().all(|e| e.scope.matches("blocks.").count() <= 1), "a recomputation nested its path");
}

#[test]
fn recomputation_stops_after_the_last_saved_tensor() {
    runtime::reset();
    let w = Tensor::from_f64(&[0.5, -1.0, 2.0], &[3], DType::F32, Device::Cpu).requires_grad_(true);
    let x = Tensor::from_f64(&[1.0, 2.0, 3.0], &[3], DType::F32, Device::Cpu).requires_grad_(true);
    let f = {
        let w = w.clone();
        // exp saves its output (the last saved tensor); the `add` after it is never re-run.
        move |x: Tensor| x.mul(&w).exp().add_scalar(1.0)
    };
    let want = {
        let y = f(x.clone()).sum_all();
        y.backward();
        let g = (x.grad().unwrap().to_vec_f64(), w.grad().unwrap().to_vec_f64());
        x.clear_grad();
        w.clear_grad();
        g
    };
    runtime::set_phase(Phase::Forward);
    runtime::with(|rt| rt.log.start_recording());
    let y = checkpoint(x.clone(), f).sum_all();
    runtime::set_phase(Phase::Backward);
    y.backward();
    let ev = runtime::with(|rt| rt.log.stop_recording());
    assert_eq!((x.grad().unwrap().to_vec_f64(), w.grad().unwrap().to_vec_f64()), want);
    let ops = |phase: Phase| -> Vec<&str> { ev.iter().filter(|e| e.kind == EventKind::Alloc && e.phase == phase).map(|e| e.op).collect() };
    assert_eq!(ops(Phase::Forward), ["mul", "exp", "add", "sum"]);
    let bwd = ops(Phase::Backward);
    assert_eq!(bwd.iter().filter(|&&o| o == "exp").count(), 1, "{bwd:?}");
    assert_eq!(bwd.iter().filter(|&&o| o == "add").count(), 0, "{bwd:?}");
}

/// One recorded meta training step of cs336 2.7B at B 4, S 512: peak allocated.
fn meta_2_7b_peak(ck: Checkpoint) -> usize {
    let mut cfg = presets::find("2.7B", None).unwrap().model;
    cfg.checkpoint = ck;
    let (_, peak, _) = step_events(&cfg, Device::Meta, 4, 512);
    peak
}

#[test]
fn checkpointing_a_2_7b_step() {
    let base = meta_2_7b_peak(Checkpoint::None);
    let blocks = meta_2_7b_peak(Checkpoint::Every(1));
    let gib = |v: usize| v as f64 / (1u64 << 30) as f64;
    eprintln!("cs336 2.7B, B 4, S 512, training step on meta: peak {:.2} GiB, with --checkpoint blocks {:.2} GiB", gib(base), gib(blocks));
    assert!(blocks + (5 << 30) < base, "checkpointing {blocks} vs {base}");
    // Parameters, gradients, AdamW's m and v and its per-step temporaries stay.
    assert!(gib(blocks) > 50.0);
}

#[test]
fn checkpoint_flag_is_parsed_and_checked() {
    let bin = env!("CARGO_BIN_EXE_vramscope");
    for (flag, bad) in [("--checkpoint", "every-0"), ("--checkpoint", "some"), ("--fusion", "qkv")] {
        let dir = scratch::dir().join(format!("vramscope-ckflag-{}", std::process::id()));
        let o = Command::new(bin)
            .args(["train", "--num-layers", "1", "--device", "meta", "--num-steps", "1", "--warmup-steps", "0", flag, bad, "--output-dir", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&o.stderr).contains(flag), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(!dir.exists(), "nothing is written on a usage error");
    }
    let dir = scratch::dir().join(format!("vramscope-ck-{}", std::process::id()));
    let o = Command::new(bin)
        .args(["train", "--num-layers", "2", "--num-steps", "2", "--warmup-steps", "0", "--checkpoint", "blocks", "--threads", "2", "--output-dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The early stop of each recomputation is silent.
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"), "{}", String::from_utf8_lossy(&o.stderr));
    let c: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(c["model"]["checkpoint"], "blocks");
    let _ = std::fs::remove_dir_all(&dir);
    let o = Command::new(bin)
        .args(["profile", "--device", "meta", "--model", "2.7B", "--context-length", "128", "--profile-type", "training", "--checkpoint", "every-4", "--out-dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
