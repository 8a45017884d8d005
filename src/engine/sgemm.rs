//! f32 matrix multiply with an AVX-512 micro-kernel.
//!
//! Written by hand because the `gemm` crate only reaches its AVX-512 kernels with its
//! `nightly` feature; on stable it runs the AVX2/FMA kernel at about half of what this
//! machine (and MKL) does, which would make matmul-bound training slower than PyTorch.
//! AVX-512 intrinsics are stable since Rust 1.89. Machines without AVX-512 fall back to
//! `gemm`. Classic BLIS blocking: B packed in KC×NC blocks shared by all threads, A packed
//! per thread in MC×KC blocks, a 12×32 register tile.
use rayon::prelude::*;
use std::cell::RefCell;

const MR: usize = 12;
const NR: usize = 32;
const KC: usize = 256;
const MC: usize = 192;
const NC: usize = 3072;

/// A strided read-only matrix: element (i, j) at `ptr + i*rs + j*cs`.
#[derive(Clone, Copy)]
pub struct MatRef {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}
unsafe impl Send for MatRef {}
unsafe impl Sync for MatRef {}

impl MatRef {
    #[inline(always)]
    unsafe fn at(&self, i: usize, j: usize) -> f32 {
        *self.ptr.offset(i as isize * self.rs + j as isize * self.cs)
    }
}

pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

thread_local! {
    static APACK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static BPACK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Pack rows `i0..i0+mc`, cols `k0..k0+kc` of A into MR-row panels (zero padded).
unsafe fn pack_a(a: MatRef, i0: usize, mc: usize, k0: usize, kc: usize, m: usize, out: &mut [f32]) {
    let panels = mc.div_ceil(MR);
    for p in 0..panels {
        let dst = &mut out[p * kc * MR..(p + 1) * kc * MR];
        let ib = i0 + p * MR;
        let h = MR.min(i0 + mc - ib).min(m - ib);
        if a.rs == 1 {
            // Column-major A (a transposed operand): each k holds MR contiguous rows.
            for kk in 0..kc {
                let src = a.ptr.offset(ib as isize + (k0 + kk) as isize * a.cs);
                let d = &mut dst[kk * MR..kk * MR + MR];
                for (r, v) in d.iter_mut().enumerate() {
                    *v = if r < h { *src.add(r) } else { 0.0 };
                }
            }
            continue;
        }
        for r in 0..MR {
            let i = i0 + p * MR + r;
            if i < m && i < i0 + mc {
                if a.cs == 1 {
                    let row = a.ptr.offset(i as isize * a.rs + k0 as isize);
                    for kk in 0..kc {
                        dst[kk * MR + r] = *row.add(kk);
                    }
                } else {
                    for kk in 0..kc {
                        dst[kk * MR + r] = a.at(i, k0 + kk);
                    }
                }
            } else {
                for kk in 0..kc {
                    dst[kk * MR + r] = 0.0;
                }
            }
        }
    }
}

/// Pack rows `k0..k0+kc`, cols `j0..j0+nc` of B into NR-column panels (zero padded).
unsafe fn pack_b(b: MatRef, k0: usize, kc: usize, j0: usize, nc: usize, out: &mut [f32]) {
    let panels = nc.div_ceil(NR);
    out.par_chunks_mut(kc * NR).take(panels).enumerate().for_each(|(q, dst)| {
        let jb = j0 + q * NR;
        let w = NR.min(j0 + nc - jb);
        for kk in 0..kc {
            let d = &mut dst[kk * NR..kk * NR + NR];
            if b.cs == 1 {
                let src = std::slice::from_raw_parts(b.ptr.offset((k0 + kk) as isize * b.rs + jb as isize), w);
                d[..w].copy_from_slice(src);
            } else {
                for (c, v) in d[..w].iter_mut().enumerate() {
                    *v = b.at(k0 + kk, jb + c);
                }
            }
            d[w..].fill(0.0);
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn kernel(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, first: bool, rows: usize, cols: usize) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for kk in 0..kc {
        let b0 = _mm512_loadu_ps(b.add(kk * NR));
        let b1 = _mm512_loadu_ps(b.add(kk * NR + 16));
        let ap = a.add(kk * MR);
        for r in 0..MR {
            let av = _mm512_set1_ps(*ap.add(r));
            acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
        }
    }
    if rows == MR && cols == NR {
        for (r, row) in acc.iter().enumerate() {
            let cp = c.add(r * ldc);
            if first {
                _mm512_storeu_ps(cp, row[0]);
                _mm512_storeu_ps(cp.add(16), row[1]);
            } else {
                _mm512_storeu_ps(cp, _mm512_add_ps(_mm512_loadu_ps(cp), row[0]));
                _mm512_storeu_ps(cp.add(16), _mm512_add_ps(_mm512_loadu_ps(cp.add(16)), row[1]));
            }
        }
    } else {
        let mut tmp = [0f32; MR * NR];
        for (r, row) in acc.iter().enumerate() {
            _mm512_storeu_ps(tmp.as_mut_ptr().add(r * NR), row[0]);
            _mm512_storeu_ps(tmp.as_mut_ptr().add(r * NR + 16), row[1]);
        }
        for r in 0..rows {
            for j in 0..cols {
                let d = c.add(r * ldc + j);
                *d = if first { tmp[r * NR + j] } else { *d + tmp[r * NR + j] };
            }
        }
    }
}

#[derive(Clone, Copy)]
struct CPtr(*mut f32);
unsafe impl Send for CPtr {}
unsafe impl Sync for CPtr {}

/// `c` (m×n, row-major, contiguous) = A·B. `parallel`: split row blocks over rayon.
///
/// # Safety
/// `a` and `b` must address valid m×k and k×n matrices; `c` must hold m·n floats.
/// Requires AVX-512F (check [`available`]).
pub unsafe fn sgemm(m: usize, n: usize, k: usize, a: MatRef, b: MatRef, c: &mut [f32], parallel: bool) {
    assert!(c.len() >= m * n);
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    let cp = CPtr(c.as_mut_ptr());
    // One contiguous band of rows per thread (MR-aligned, as equal as MR allows), walked in
    // MC-row blocks: equal work per thread and one fork-join per packed B block.
    let threads = if parallel { rayon::current_num_threads().max(1).min(m.div_ceil(MR)) } else { 1 };
    let panels = m.div_ceil(MR);
    let band = |t: usize| (t * panels / threads * MR).min(m);
    // Packing buffers are reused across calls (a fresh one would be zeroed and faulted in).
    let mut bpack = BPACK.with(|b| std::mem::take(&mut *b.borrow_mut()));
    let need = KC * NC.min(n.div_ceil(NR) * NR);
    if bpack.len() < need {
        bpack.resize(need, 0.0);
    }
    for j0 in (0..n).step_by(NC) {
        let nc = NC.min(n - j0);
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            pack_b(b, k0, kc, j0, nc, &mut bpack);
            let bp = &bpack;
            let first = k0 == 0;
            let cp = &cp;
            let block = |i0: usize, i_end: usize| {
                let mc = MC.min(i_end - i0);
                APACK.with(|ap| {
                    let mut ap = ap.borrow_mut();
                    let need = mc.div_ceil(MR) * MR * kc;
                    if ap.len() < need {
                        ap.resize(need, 0.0);
                    }
                    pack_a(a, i0, mc, k0, kc, m, &mut ap);
                    // The A micro-panel stays in L1 while B panels stream from L2.
                    for (p, ir) in (0..mc).step_by(MR).enumerate() {
                        let rows = MR.min(mc - ir);
                        for (q, jr) in (0..nc).step_by(NR).enumerate() {
                            let cols = NR.min(nc - jr);
                            let cptr = cp.0.add((i0 + ir) * n + j0 + jr);
                            #[cfg(target_arch = "x86_64")]
                            kernel(kc, ap.as_ptr().add(p * kc * MR), bp.as_ptr().add(q * kc * NR), cptr, n, first, rows, cols);
                        }
                    }
                });
            };
            let run_band = |t: usize| {
                let (lo, hi) = (band(t), band(t + 1));
                for i0 in (lo..hi).step_by(MC) {
                    block(i0, hi);
                }
            };
            if threads > 1 {
                (0..threads).into_par_iter().for_each(run_band);
            } else {
                run_band(0);
            }
        }
    }
    BPACK.with(|b| *b.borrow_mut() = bpack);
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn matches_naive_product_on_odd_shapes_and_strides() {
        if !available() {
            return;
        }
        for &(m, k, n) in &[(1, 1, 1), (13, 7, 33), (100, 300, 70), (97, 513, 129)] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 11) as f32 - 5.0) / 5.0).collect();
            let bt: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 13) as f32 - 6.0) / 6.0).collect();
            // b stored transposed (n×k), read through strides.
            let bref = MatRef { ptr: bt.as_ptr(), rs: 1, cs: k as isize };
            let aref = MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 };
            let mut c = vec![f32::NAN; m * n];
            unsafe { sgemm(m, n, k, aref, bref, &mut c, true) };
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|l| a[i * k + l] as f64 * bt[j * k + l] as f64).sum();
                    assert!((c[i * n + j] as f64 - want).abs() < 1e-3 * (1.0 + want.abs()), "({m},{k},{n}) at {i},{j}");
                }
            }
        }
    }
}

/// Peak of the micro-kernel alone on L1-resident panels (GFLOP/s, one thread).
pub fn kernel_peak_gflops() -> f64 {
    if !available() {
        return 0.0;
    }
    let kc = 128;
    let a = vec![1.0f32; kc * MR];
    let b = vec![0.5f32; kc * NR];
    let mut c = vec![0f32; MR * NR];
    let iters = 200_000;
    let t = crate::clock::Instant::now();
    for i in 0..iters {
        #[cfg(target_arch = "x86_64")]
        unsafe {
            kernel(kc, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), NR, i == 0, MR, NR)
        };
    }
    let s = t.elapsed().as_secs_f64();
    std::hint::black_box(&c);
    (2 * MR * NR * kc * iters) as f64 / s / 1e9
}
