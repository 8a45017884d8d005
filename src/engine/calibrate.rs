//! A short calibration of this machine's cpu peaks, for MFU and bandwidth utilisation:
//! the best of a few f32 matmuls (2048², all worker threads) and of a few large copies.
use super::{runtime, DType, Device, Tensor};
use crate::clock::Instant;

#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct CpuPeaks {
    /// f32 matmul FLOP/s.
    pub matmul_flops: f64,
    /// Copy bandwidth, bytes read + written per second.
    pub copy_bytes_per_s: f64,
}

pub fn cpu_peaks() -> CpuPeaks {
    // Outside any recording: the calibration's storages must not show up in a run's log.
    let saved_compute = runtime::take_compute_log();
    let n = 2048;
    let a = Tensor::full(&[n, n], 0.5, DType::F32, Device::Cpu);
    let b = Tensor::full(&[n, n], 0.25, DType::F32, Device::Cpu);
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        drop(a.mm(&b));
        best = best.min(t.elapsed().as_secs_f64());
    }
    let matmul_flops = 2.0 * (n * n * n) as f64 / best;
    let len = 16 << 20; // 64 MiB of f32, well past the caches
    let src = vec![1.0f32; len];
    let mut dst = vec![0.0f32; len];
    let mut best_copy = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        use rayon::prelude::*;
        dst.par_chunks_mut(1 << 16).zip(src.par_chunks(1 << 16)).for_each(|(d, s)| d.copy_from_slice(s));
        best_copy = best_copy.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    if let Some(c) = saved_compute {
        runtime::with(|rt| rt.compute = Some(c));
    }
    CpuPeaks { matmul_flops, copy_bytes_per_s: (2 * len * 4) as f64 / best_copy }
}
