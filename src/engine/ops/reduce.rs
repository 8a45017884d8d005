//! Reductions: sum, mean, max with indices, and summing a broadcast gradient back.
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
#[allow(unused_imports)]
use crate::engine::dtype::Real as _;
use crate::engine::autograd::{attach, needs_grad, save};
use crate::engine::cpu::{self, CReal};
use crate::engine::dtype::{DType, Real};
use crate::engine::layout::{dim_index, Layout};
use crate::engine::storage::Buffer;
use crate::engine::tensor::Tensor;
use crate::with_real;
use rayon::prelude::*;

fn reduced_shape(shape: &[usize], d: usize, keepdim: bool) -> Vec<usize> {
    let mut s = shape.to_vec();
    if keepdim {
        s[d] = 1;
    } else {
        s.remove(d);
    }
    s
}

/// The tensor's values with `d` moved last, as contiguous rows.
fn rows_along<R: CReal>(t: &Tensor, d: usize) -> Vec<R> {
    if d + 1 == t.rank() {
        return cpu::read::<R>(t);
    }
    let mut perm: Vec<usize> = (0..t.rank()).filter(|&i| i != d).collect();
    perm.push(d);
    cpu::read::<R>(&t.detach().permute(&perm))
}

/// Sum over dim `d` of the tensor's values (row-major, any layout), as `R`.
fn sum_over<R: CReal>(t: &Tensor, d: usize) -> Vec<R> {
    let n = t.shape()[d];
    if d + 1 == t.rank() {
        return cpu::with_slice::<R, _>(t, |x| cpu::rows(x, n, 1, |r, o| o[0] = cpu::lsum(r)));
    }
    // Middle dim: accumulate contiguous inner vectors (vectorises, no transposed copy).
    let inner: usize = t.shape()[d + 1..].iter().product();
    cpu::with_slice::<R, _>(t, |x| {
        let outer = x.len() / (n * inner).max(1);
        let mut out = vec![R::zero(); outer * inner];
        out.par_chunks_mut(inner.max(1)).enumerate().for_each(|(o, acc)| {
            for j in 0..n {
                let src = &x[(o * n + j) * inner..(o * n + j + 1) * inner];
                for (a, &v) in acc.iter_mut().zip(src) {
                    *a += v;
                }
            }
        });
        out
    })
}

/// Undo `keepdim=false` so a gradient broadcasts against the input.
fn keep(g: &Tensor, d: usize, keepdim: bool) -> Tensor {
    if keepdim {
        g.clone()
    } else {
        g.unsqueeze(d as isize)
    }
}

impl Tensor {
    /// `sum(dim, keepdim)`: saves nothing; backward is an expand (a view, no allocation).
    #[track_caller]
    pub fn sum_dim(&self, dim: isize, keepdim: bool) -> Tensor {
        let d = dim_index(dim, self.rank());
        let shape = reduced_shape(self.shape(), d, keepdim);
        // Under autocast a low-precision input sums into fp32 (sum(dtype=float32)).
        let dtype = crate::engine::autocast::reduce_dtype(self.dtype());
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, &shape, "sum", &[self], || sum_over::<R>(self, d))
        });
        if needs_grad(&[self]) {
            let in_shape = self.shape().to_vec();
            let src = self.dtype();
            // The engine casts a gradient to its input's dtype (validate_outputs).
            return attach(out, "SumBackward1", &[self], Box::new(move |g| vec![Some(keep(&g, d, keepdim).expand(&in_shape).to_dtype(src))]));
        }
        out
    }
    /// Sum of all elements (0-d result).
    #[track_caller]
    pub fn sum_all(&self) -> Tensor {
        let dtype = crate::engine::autocast::reduce_dtype(self.dtype());
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, &[], "sum", &[self], || {
                let v = cpu::read::<R>(self);
                vec![v.par_chunks(1 << 14).map(cpu::lsum).collect::<Vec<R>>().iter().copied().sum::<R>()]
            })
        });
        if needs_grad(&[self]) {
            let in_shape = self.shape().to_vec();
            let src = self.dtype();
            return attach(out, "SumBackward0", &[self], Box::new(move |g| vec![Some(g.expand(&in_shape).to_dtype(src))]));
        }
        out
    }
    /// `torch.linalg.vector_norm(self)` (L2 over all elements): a 0-d tensor of self's dtype,
    /// accumulated in f64. No autograd (clip_grad_norm_ runs under no_grad).
    #[track_caller]
    pub fn vector_norm(&self) -> Tensor {
        assert!(!needs_grad(&[self]), "vector_norm has no backward");
        let dtype = self.dtype();
        with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, &[], "linalg_vector_norm", &[self], || {
                let v = cpu::read::<R>(self);
                let ss: f64 = v.par_chunks(1 << 14).map(|c| c.iter().map(|&x| { let x = crate::engine::dtype::Elem::to_f64(x); x * x }).sum::<f64>()).sum();
                vec![R::lit(ss.sqrt())]
            })
        })
    }
    /// `torch.linalg.norm(self, dim=d)` (L2 along one dim, dropped) in self's dtype. No
    /// autograd: DoRA's weight norm is taken of a frozen weight plus a detached update.
    #[track_caller]
    pub fn vector_norm_dim(&self, dim: isize) -> Tensor {
        assert!(!needs_grad(&[self]), "vector_norm_dim has no backward");
        let d = dim_index(dim, self.rank());
        let shape = reduced_shape(self.shape(), d, false);
        let n = self.shape()[d];
        let dtype = self.dtype();
        with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, &shape, "linalg_vector_norm", &[self], || {
                let v = rows_along::<R>(self, d);
                v.chunks(n.max(1))
                    .map(|r| R::lit(r.iter().map(|&x| { let x = crate::engine::dtype::Elem::to_f64(x); x * x }).sum::<f64>().sqrt()))
                    .collect()
            })
        })
    }
    /// `mean(dim, keepdim)`: backward allocates `expand(grad) / n`.
    #[track_caller]
    pub fn mean_dim(&self, dim: isize, keepdim: bool) -> Tensor {
        let d = dim_index(dim, self.rank());
        let shape = reduced_shape(self.shape(), d, keepdim);
        let n = self.shape()[d];
        let dtype = self.dtype();
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, &shape, "mean", &[self], || {
                let inv = R::one() / R::lit(n as f64);
                let mut v = sum_over::<R>(self, d);
                v.iter_mut().for_each(|x| *x = *x * inv);
                v
            })
        });
        if needs_grad(&[self]) {
            let in_shape = self.shape().to_vec();
            return attach(out, "MeanBackward1", &[self], Box::new(move |g| {
                vec![Some(keep(&g, d, keepdim).expand(&in_shape).div_scalar(n as f64))]
            }));
        }
        out
    }
    /// Mean of all elements (0-d result).
    #[track_caller]
    pub fn mean_all(&self) -> Tensor {
        let dtype = self.dtype();
        let n = self.numel();
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, &[], "mean", &[self], || {
                let v = cpu::read::<R>(self);
                vec![v.par_chunks(1 << 14).map(cpu::lsum).collect::<Vec<R>>().iter().copied().sum::<R>() / R::lit(n as f64)]
            })
        });
        if needs_grad(&[self]) {
            let in_shape = self.shape().to_vec();
            return attach(out, "MeanBackward0", &[self], Box::new(move |g| vec![Some(g.expand(&in_shape).div_scalar(n as f64))]));
        }
        out
    }
    /// `torch.max(x, dim, keepdim)`: values and int64 indices. Backward keeps only the
    /// indices and scatters the gradient into a zero tensor of the input's size.
    #[track_caller]
    pub fn max_dim(&self, dim: isize, keepdim: bool) -> (Tensor, Tensor) {
        let d = dim_index(dim, self.rank());
        let shape = reduced_shape(self.shape(), d, keepdim);
        let n = self.shape()[d];
        let dtype = self.dtype();
        let dev = self.device();
        // Both outputs are allocated before the kernel runs, as in ATen.
        let values = crate::engine::storage::Storage::alloc(dev, dtype, shape.iter().product(), "max");
        let indices = crate::engine::storage::Storage::alloc(dev, DType::I64, shape.iter().product(), "max");
        if dev == crate::engine::storage::Device::Cpu {
            with_real!(dtype, R, {
                let rows = rows_along::<R>(self, d);
                let mut vals = Vec::with_capacity(rows.len() / n.max(1));
                let mut idx = Vec::with_capacity(rows.len() / n.max(1));
                for r in rows.chunks(n) {
                    let (mut bi, mut bv) = (0usize, r[0]);
                    for (i, &v) in r.iter().enumerate() {
                        if v > bv || v.is_nan() {
                            bv = v;
                            bi = i;
                        }
                    }
                    vals.push(bv);
                    idx.push(bi as i64);
                }
                values.set(cpu::to_buffer(vals, dtype));
                indices.set(Buffer::I64(idx));
            });
        }
        let values = Tensor::from_parts(values, Layout::contiguous(&shape));
        let indices = Tensor::from_parts(indices, Layout::contiguous(&shape));
        if needs_grad(&[self]) {
            let idx = save(&indices);
            let in_shape = self.shape().to_vec();
            let values = attach(values, "MaxBackward0", &[self], Box::new(move |g| {
                vec![Some(scatter_along(&keep(&g, d, keepdim), &keep(&idx.unpack(), d, keepdim), d, &in_shape))]
            }));
            return (values, indices);
        }
        (values, indices)
    }

    /// Sum a broadcast gradient back to `shape` (no autograd; one allocation when reducing).
    #[track_caller]
    pub fn sum_to_shape(&self, shape: &[usize]) -> Tensor {
        if self.shape() == shape {
            return self.clone();
        }
        let lead = self.rank() - shape.len();
        let dtype = self.dtype();
        let src_shape = self.shape().to_vec();
        with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, shape, "sum", &[self], || {
                cpu::with_slice::<R, _>(self, |x| {
                    let mut padded = vec![1usize; lead];
                    padded.extend_from_slice(shape);
                    let inner: usize = shape.iter().product();
                    // Fast path: target is the trailing dims, unbroadcast (e.g. a norm weight).
                    if padded[..lead].iter().all(|&p| p == 1) && src_shape[lead..] == *shape {
                        let parts: Vec<Vec<R>> = x
                            .par_chunks(inner.max(1) * 64)
                            .map(|c| {
                                let mut acc = vec![R::zero(); inner];
                                for row in c.chunks(inner) {
                                    for (a, &v) in acc.iter_mut().zip(row) {
                                        *a += v;
                                    }
                                }
                                acc
                            })
                            .collect();
                        let mut acc = vec![R::zero(); inner];
                        for p in parts {
                            for (a, v) in acc.iter_mut().zip(p) {
                                *a += v;
                            }
                        }
                        return acc;
                    }
                    // Fast path: only trailing dims are reduced (e.g. a (B, S, 1) factor).
                    let kept = padded.iter().rposition(|&p| p != 1).map_or(0, |i| i + 1);
                    if padded[..kept] == src_shape[..kept] {
                        let len: usize = src_shape[kept..].iter().product();
                        return cpu::rows(x, len, 1, |r, o| o[0] = cpu::lsum(r));
                    }
                    let lo = Layout::contiguous(&padded).expand(&src_shape);
                    let mut acc = vec![R::zero(); inner];
                    for (o, &v) in lo.offsets().zip(x) {
                        acc[o] += v;
                    }
                    acc
                })
            })
        })
    }
}

/// zeros(`shape`) with `src` written at `idx` along `d` (backward of max/gather-like ops).
#[track_caller]
pub(crate) fn scatter_along(src: &Tensor, idx: &Tensor, d: usize, shape: &[usize]) -> Tensor {
    let dtype = src.dtype();
    with_real!(dtype, R, {
        Tensor::compute::<R>(src.device(), dtype, shape, "scatter", &[src, idx], || {
            let mut out = vec![R::zero(); shape.iter().product()];
            let s = cpu::read::<R>(src);
            let ix = cpu::read_i64(idx);
            let lo = Layout::contiguous(shape);
            // Walk src/idx (same shape) and place each value at its index along d.
            let sl = Layout::contiguous(src.shape());
            let mut pos = vec![0usize; sl.rank()];
            for k in 0..s.len() {
                let mut off = 0;
                for (dd, &p) in pos.iter().enumerate() {
                    let p = if dd == d { ix[k] as usize } else { p };
                    off += p * lo.strides[dd];
                }
                out[off] += s[k];
                for dd in (0..pos.len()).rev() {
                    pos[dd] += 1;
                    if pos[dd] < sl.shape[dd] {
                        break;
                    }
                    pos[dd] = 0;
                }
            }
            out
        })
    })
}
