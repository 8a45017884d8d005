//! What `bench` times: our matmuls, attention forward + backward, and a training step with and
//! without recording through the allocator model (`bench::run` writes the ratios).
use crate::engine::{runtime, DType, Device, Tensor};
use anyhow::Result;
use std::time::Instant;

/// Median seconds per call of `f`, sampling for about `budget` seconds.
pub fn median_time(budget: f64, mut f: impl FnMut()) -> f64 {
    f();
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 5 || (start.elapsed().as_secs_f64() < budget && times.len() < 200) {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// GFLOP/s of our (m, k) × (k, n) matmul in `layout` (nn, tn or nt) and `dtype`.
pub fn our_matmul(m: usize, k: usize, n: usize, layout: &str, dtype: DType) -> f64 {
    runtime::reset();
    let _g = runtime::no_grad();
    let av: Vec<f64> = (0..m * k).map(|i| ((i % 17) as f64 - 8.0) / 8.0).collect();
    let bv: Vec<f64> = (0..k * n).map(|i| ((i % 13) as f64 - 6.0) / 6.0).collect();
    let a = match layout {
        "tn" => Tensor::from_f64(&av, &[k, m], dtype, Device::Cpu).t(),
        _ => Tensor::from_f64(&av, &[m, k], dtype, Device::Cpu),
    };
    let b = match layout {
        "nt" => Tensor::from_f64(&bv, &[n, k], dtype, Device::Cpu).t(),
        _ => Tensor::from_f64(&bv, &[k, n], dtype, Device::Cpu),
    };
    let s = median_time(0.4, || {
        let _ = a.mm(&b);
    });
    2.0 * (m * k * n) as f64 / s / 1e9
}

/// Median seconds of causal attention forward + backward at (1, 4, `s`, 64) f32, naive (scores,
/// mask, softmax, weights·V, as the tinyllama flavour composes it) or the flash primitive.
pub fn attention_time(s: usize, flash: bool) -> f64 {
    let (b, h, d) = (1, 4, 64);
    runtime::reset();
    let mk = |seed: usize| {
        let v: Vec<f64> = (0..b * h * s * d).map(|i| (((i * 7 + seed * 13) % 101) as f64 - 50.0) / 50.0).collect();
        Tensor::from_f64(&v, &[b, h, s, d], DType::F32, Device::Cpu).requires_grad_(true)
    };
    let (q, k, v) = (mk(1), mk(2), mk(3));
    let mask = Tensor::full(&[s, s], f64::NEG_INFINITY, DType::F32, Device::Cpu).triu(1).view(&[1, 1, s, s]);
    let g = Tensor::ones(&[b, h, s, d], DType::F32, Device::Cpu);
    let scale = 1.0 / (d as f64).sqrt();
    median_time(1.0, || {
        let out = if flash {
            Tensor::flash_attention(&q, &k, &v, true, scale)
        } else {
            q.matmul(&k.transpose(-2, -1)).mul_scalar(scale).add(&mask).softmax(-1).matmul(&v)
        };
        out.backward_with(g.clone());
        for t in [&q, &k, &v] {
            t.clear_grad();
        }
    })
}

/// Average seconds per training step (after 2 warm-up steps), with or without recording
/// every event through the caching-allocator model.
pub fn step_time(record: bool, steps: usize) -> Result<f64> {
    use crate::model::{presets, Model};
    use crate::train::optim::OptimConfig;
    use crate::train::{Batcher, DataKind, Optimizer, StepRunner};
    runtime::reset();
    if record {
        runtime::with(|rt| {
            rt.log.allocator = Some(crate::record::allocator::CachingAllocator::new(Default::default(), usize::MAX / 4));
            rt.log.start_recording();
        });
    }
    let cfg = presets::find("walkthrough", None).map_err(anyhow::Error::msg)?.model;
    let model = Model::new(&cfg, Device::Cpu, 1)?;
    let opt = Optimizer::new(OptimConfig::reference(cfg.flavour), model.parameters().len());
    let mut runner = StepRunner::new(&model, opt);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, 8, 128, Device::Cpu, 1);
    let mut total = 0.0;
    for i in 0..steps + 2 {
        let (x, y) = data.next_batch();
        let r = runner.step(&x, &y);
        if i >= 2 {
            total += r.seconds;
        }
    }
    runner.finish();
    let n = runtime::with(|rt| rt.log.events().map_or(0, |e| e.len()));
    if record && n == 0 {
        anyhow::bail!("recording produced no events");
    }
    runtime::reset();
    Ok(total / steps as f64)
}

