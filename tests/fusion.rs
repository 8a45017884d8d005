//! The workshop's version-2 projection fusions (`--fusion all`, `--fused-qkv`,
//! `--fused-gate-up`): the unfused model's numbers when the fused weight is the
//! concatenation of the separate ones, one projection output instead of three (or two),
//! unchanged parameter counts, and cpu/meta event equality.
mod scratch;
use std::process::Command;
use vramscope::engine::{runtime, Device, Tensor};
use vramscope::model::{presets, Model, ModelConfig, Projection};
use vramscope::record::{EventKind, MemEvent, Phase};
use vramscope::train::optim::OptimConfig;
use vramscope::train::{Batcher, DataKind, Optimizer, StepRunner};

fn small(flavour: &str) -> ModelConfig {
    let mut cfg = presets::find(if flavour == "cs336" { "cs336-small" } else { "walkthrough" }, None).unwrap().model;
    cfg.d_model = 64;
    cfg.d_ff = 96;
    cfg.num_layers = 2;
    cfg.num_heads = 4;
    cfg.num_kv_heads = if flavour == "cs336" { 4 } else { 2 };
    cfg.vocab_size = 50;
    cfg.max_seq_len = 16;
    cfg
}

fn fused(mut cfg: ModelConfig) -> ModelConfig {
    cfg.fused_qkv = true;
    cfg.fused_gate_up = true;
    cfg
}

/// Overwrite a fused projection's weight with the rows of the separate ones.
fn load(dst: &Projection, src: &Projection) {
    let _g = runtime::no_grad();
    let Projection::Fused(_, w, _) = dst else { panic!("expected a fused projection") };
    let mut row = 0;
    for s in src.weights() {
        w.narrow(0, row, s.dim(0)).copy_(s);
        row += s.dim(0);
    }
}

/// Loss, and each separate weight's gradient next to the matching rows of the fused one.
#[test]
fn fused_projections_compute_the_unfused_model() {
    for flavour in ["tinyllama", "cs336"] {
        let cfg = small(flavour);
        let (x, y) = {
            runtime::reset();
            Batcher::new(DataKind::Random, cfg.vocab_size, 2, 12, Device::Cpu, 4).next_batch()
        };
        let a = Model::new(&cfg, Device::Cpu, 3).unwrap();
        let b = Model::new(&fused(cfg.clone()), Device::Cpu, 3).unwrap();
        {
            // Everything else is registered in the same order with the same draws only
            // where the layouts agree, so copy all weights over.
            let _g = runtime::no_grad();
            b.embedding.copy_(&a.embedding);
            b.final_norm.copy_(&a.final_norm);
            if !cfg.tied_embeddings {
                b.lm_head.copy_(&a.lm_head);
            }
            for (lb, la) in b.layers.iter().zip(&a.layers) {
                load(&lb.qkv, &la.qkv);
                load(&lb.gate_up, &la.gate_up);
                for (d, s) in [(&lb.attn_norm, &la.attn_norm), (&lb.o, &la.o), (&lb.ffn_norm, &la.ffn_norm), (&lb.down, &la.down)] {
                    d.copy_(s);
                }
            }
        }
        let (_, la) = a.forward_loss(&x, &y, &mut |_| {});
        let (_, lb) = b.forward_loss(&x, &y, &mut |_| {});
        la.backward();
        lb.backward();
        assert!((la.item() - lb.item()).abs() < 1e-5, "{flavour}: loss {} vs {}", la.item(), lb.item());
        let close = |what: &str, g: &Tensor, h: &Tensor| {
            for (p, q) in g.to_vec_f64().iter().zip(h.to_vec_f64()) {
                assert!((p - q).abs() <= 1e-5 * (1.0 + p.abs()), "{flavour} {what}: {p} vs {q}");
            }
        };
        for (i, (lb, la)) in b.layers.iter().zip(&a.layers).enumerate() {
            for (fp, sp) in [(&lb.qkv, &la.qkv), (&lb.gate_up, &la.gate_up)] {
                let gf = fp.weights()[0].grad().unwrap();
                let mut row = 0;
                for s in sp.weights() {
                    close(&format!("layer {i} rows {row}.."), &gf.narrow(0, row, s.dim(0)), &s.grad().unwrap());
                    row += s.dim(0);
                }
            }
            close(&format!("layer {i} down"), &lb.down.grad().unwrap(), &la.down.grad().unwrap());
        }
        close("embedding", &b.embedding.grad().unwrap(), &a.embedding.grad().unwrap());
    }
}

#[test]
fn fused_models_keep_the_parameter_count_and_take_v2_names() {
    for name in ["walkthrough", "tinyllama-small", "cs336-small", "2.7B"] {
        let p = presets::find(name, None).unwrap();
        runtime::reset();
        let m = Model::new(&fused(p.model.clone()), Device::Meta, 0).unwrap();
        assert_eq!(m.num_parameters(), p.expected_params, "{name}");
        let names: Vec<&str> = m.parameters().iter().map(|q| q.name.as_str()).collect();
        assert!(names.iter().any(|n| n.ends_with("qkv_proj.weight")), "{name}: {names:?}");
        assert!(names.iter().any(|n| n.ends_with("gate_up_proj.weight")), "{name}: {names:?}");
        assert!(!names.iter().any(|n| n.contains("q_proj.") && !n.contains("qkv") || n.contains("up_proj.") && !n.contains("gate_up")), "{name}: {names:?}");
    }
}

/// Events of one training step after a warm-up step.
fn step_events(cfg: &ModelConfig, device: Device, b: usize, s: usize) -> (Vec<MemEvent>, usize) {
    runtime::reset();
    let model = Model::new(cfg, device, 1).unwrap();
    let mut runner = StepRunner::new(&model, Optimizer::new(OptimConfig::reference(cfg.flavour), model.parameters().len()));
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, b, s, device, 3);
    let (x, y) = data.next_batch();
    runner.step(&x, &y);
    runner.finish();
    runtime::with(|rt| rt.log.start_recording());
    let (x, y) = data.next_batch();
    let r = runner.step(&x, &y);
    (runtime::with(|rt| rt.log.stop_recording()), r.peak_allocated)
}

fn forward_allocs<'a>(ev: &'a [MemEvent], suffix: &str) -> Vec<usize> {
    ev.iter().filter(|e| e.kind == EventKind::Alloc && e.phase == Phase::Forward && e.scope.ends_with(suffix)).map(|e| e.bytes).collect()
}

#[test]
fn one_projection_output_instead_of_three() {
    let cfg = presets::find("walkthrough", None).unwrap().model;
    let (b, s, d, f, l) = (8, 128, cfg.d_model, cfg.d_ff, cfg.num_layers);
    let kv = cfg.num_kv_heads * cfg.head_dim();
    let (base, peak0) = step_events(&cfg, Device::Meta, b, s);
    let (ev, peak1) = step_events(&fused(cfg.clone()), Device::Meta, b, s);
    assert_eq!(forward_allocs(&base, ".q_proj"), vec![b * s * d * 4; l]);
    assert_eq!(forward_allocs(&base, ".k_proj"), vec![b * s * kv * 4; l]);
    assert_eq!(forward_allocs(&ev, ".qkv_proj"), vec![b * s * (d + 2 * kv) * 4; l]);
    assert!(forward_allocs(&ev, ".q_proj").is_empty() && forward_allocs(&ev, ".up_proj").is_empty());
    assert_eq!(forward_allocs(&ev, ".gate_up_proj"), vec![b * s * 2 * f * 4; l]);
    // Backward: the three projection gradients are concatenated once into one (B, S, W)
    // gradient (SplitWithSizesBackward0) for the fused product's backward.
    let cat = ev.iter().filter(|e| e.kind == EventKind::Alloc && e.phase == Phase::Backward && e.op == "cat").map(|e| e.bytes).collect::<Vec<_>>();
    assert_eq!(cat.iter().filter(|&&n| n == b * s * (d + 2 * kv) * 4).count(), l, "{cat:?}");
    assert_eq!(cat.iter().filter(|&&n| n == b * s * 2 * f * 4).count(), l, "{cat:?}");
    let mib = |v: usize| v as f64 / (1u64 << 20) as f64;
    eprintln!("walkthrough B 8 S 128 training step (meta): peak {:.2} MiB unfused, {:.2} MiB with --fusion all", mib(peak0), mib(peak1));
    let n = |ev: &[MemEvent]| ev.iter().filter(|e| e.kind == EventKind::Alloc && e.phase == Phase::Forward).count();
    assert_eq!(n(&base) - n(&ev), 3 * l, "two fewer projection outputs per attention, one fewer per FFN");
}

#[test]
fn cpu_and_meta_record_identical_events_with_fusion() {
    for flavour in ["tinyllama", "cs336"] {
        let cfg = fused(small(flavour));
        let (cpu, _) = step_events(&cfg, Device::Cpu, 2, 12);
        let (meta, _) = step_events(&cfg, Device::Meta, 2, 12);
        assert_eq!(cpu.len(), meta.len(), "{flavour}: event counts differ");
        for (i, (a, b)) in cpu.iter().zip(&meta).enumerate() {
            assert!(
                a.kind == b.kind && a.id == b.id && a.bytes == b.bytes && a.scope == b.scope && a.op == b.op && a.phase == b.phase && a.category == b.category,
                "{flavour}: event {i} differs:\n cpu  {a:?}\n meta {b:?}"
            );
        }
    }
}

#[test]
fn fusion_flags_reach_the_model() {
    let bin = env!("CARGO_BIN_EXE_vramscope");
    let dir = scratch::dir().join(format!("vramscope-fusion-{}", std::process::id()));
    for (flags, qkv, gu) in [(vec!["--fusion", "all"], true, true), (vec!["--fused-gate-up"], false, true), (vec!["--fusion", "none", "--fused-qkv"], true, false)] {
        let mut args = vec!["train", "--num-layers", "1", "--num-steps", "1", "--warmup-steps", "0", "--device", "meta", "--output-dir", dir.to_str().unwrap()];
        args.extend(flags);
        let o = Command::new(bin).args(&args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let c: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
        assert_eq!((c["model"]["fused_qkv"].as_bool(), c["model"]["fused_gate_up"].as_bool()), (Some(qkv), Some(gu)));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
