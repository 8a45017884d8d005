//! Fused neural-network primitives (softmax, log_softmax, cross-entropy, embedding, gather)
//! and the shape-building ops (cat, stack, repeat_interleave).
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
#[allow(unused_imports)]
use crate::engine::dtype::Real as _;
use crate::engine::autograd::{attach, needs_grad, save};
use crate::engine::cpu::{self, CReal};
use crate::engine::dtype::{DType, Real};
use crate::engine::layout::dim_index;
use crate::engine::tensor::Tensor;
use crate::with_real;

fn softmax_rows<R: Real>(r: &[R], o: &mut [R], log: bool) {
    let m = cpu::lmax(r);
    // Map first, reduce after: both loops vectorise.
    for (o, &v) in o.iter_mut().zip(r) {
        *o = (v - m).fexp();
    }
    let s = cpu::lsum(o);
    if log {
        let ls = s.ln();
        for (o, &v) in o.iter_mut().zip(r) {
            *o = v - m - ls;
        }
    } else {
        let inv = R::one() / s;
        o.iter_mut().for_each(|v| *v = *v * inv);
    }
}

fn last_dim(t: &Tensor, dim: isize, op: &str) -> usize {
    let d = dim_index(dim, t.rank());
    assert_eq!(d + 1, t.rank(), "{op} is implemented over the last dimension only");
    t.shape()[d]
}

/// Row-wise kernel over the last dim of two same-shaped tensors (backward of softmax-like ops).
/// CUDA's softmax backward (SoftMax.cu `softmax_backward_cuda_out`, torch 2.11) computes
/// `Tensor tmp = grad * output;` after its output exists and frees it on return: a temporary
/// of the gradient's shape and type the CPU kernel does not make (measured on an H200: 1 GiB
/// in DeepSeek-V3's eager attention backward, tests/gpu_grid.rs).
fn cuda_softmax_backward_scratch(g: &Tensor) {
    drop(Tensor::zeros_op(g.shape(), g.dtype(), g.device(), "mul"));
}

fn rows2<R: CReal>(a: &Tensor, b: &Tensor, n: usize, f: impl Fn(&[R], &[R], &mut [R]) + Sync + Send) -> Vec<R> {
    use rayon::prelude::*;
    cpu::with_slice::<R, _>(a, |sa| {
        cpu::with_slice::<R, _>(b, |sb| {
            let mut out = vec![R::zero(); sa.len()];
            out.par_chunks_mut(n).zip(sa.par_chunks(n)).zip(sb.par_chunks(n)).for_each(|((o, x), y)| f(x, y, o));
            out
        })
    })
}

impl Tensor {
    /// Fused softmax (`F.softmax`): saves its output.
    #[track_caller]
    pub fn softmax(&self, dim: isize) -> Tensor {
        if let Some(x) = crate::engine::autocast::fp32_input(self) {
            return x.softmax(dim);
        }
        let n = last_dim(self, dim, "softmax");
        let dtype = self.dtype();
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, self.shape(), "softmax", &[self], || {
                cpu::with_slice::<R, _>(self, |s| cpu::rows(s, n, n, |r, o| softmax_rows(r, o, false)))
            })
        });
        if needs_grad(&[self]) {
            let y = save(&out);
            let cuda = crate::engine::runtime::on_cuda_kernels();
            return attach(out, "SoftmaxBackward0", &[self], Box::new(move |g| {
                let y = y.unpack();
                let dt = g.dtype();
                let gi = with_real!(dt, R, {
                    Tensor::compute::<R>(g.device(), dt, g.shape(), "_softmax_backward_data", &[&g, &y], || {
                        rows2::<R>(&g, &y, n, |g, y, o| {
                            let dot = cpu::ldot(g, y);
                            for ((o, &gi), &yi) in o.iter_mut().zip(g).zip(y) {
                                *o = yi * (gi - dot);
                            }
                        })
                    })
                });
                if cuda {
                    cuda_softmax_backward_scratch(&g);
                }
                vec![Some(gi)]
            }));
        }
        out
    }

    /// `F.softmax(x, dim, dtype=dtype)` as CUDA runs it (SoftMax.cpp `softmax`): an fp16
    /// input asked for fp32 goes through `_softmax(x, dim, half_to_float=True)`, which writes
    /// the fp32 result directly and returns an fp16 gradient; every other case (bf16 included)
    /// converts the input first (`x.to(dtype)`, a copy that dies once the softmax exists).
    /// Same types: [`Tensor::softmax`].
    #[track_caller]
    pub fn softmax_as(&self, dim: isize, dtype: DType) -> Tensor {
        // A dtype given: autocast's fp32_set_opt_dtype policy leaves the call as it is (a bf16
        // softmax asked for bf16 stays bf16 under autocast).
        let _plain = crate::engine::autocast::suspend();
        let in_dt = self.dtype();
        if dtype == in_dt {
            return self.softmax(dim);
        }
        if !(in_dt == DType::F16 && dtype == DType::F32) {
            return self.to_dtype(dtype).softmax(dim);
        }
        let n = last_dim(self, dim, "softmax");
        let out = Tensor::compute::<f32>(self.device(), DType::F32, self.shape(), "_softmax", &[self], || {
            cpu::with_slice::<f32, _>(self, |s| cpu::rows(s, n, n, |r, o| softmax_rows(r, o, false)))
        });
        if needs_grad(&[self]) {
            let y = save(&out);
            let cuda = crate::engine::runtime::on_cuda_kernels();
            return attach(out, "SoftmaxBackward0", &[self], Box::new(move |g| {
                let y = y.unpack();
                let gi = with_real!(in_dt, R, {
                    Tensor::compute::<R>(g.device(), in_dt, g.shape(), "_softmax_backward_data", &[&g, &y], || {
                        rows2::<R>(&g, &y, n, |g, y, o| {
                            let dot = cpu::ldot(g, y);
                            for ((o, &gi), &yi) in o.iter_mut().zip(g).zip(y) {
                                *o = yi * (gi - dot);
                            }
                        })
                    })
                });
                if cuda {
                    cuda_softmax_backward_scratch(&g);
                }
                vec![Some(gi)]
            }));
        }
        out
    }

    /// Fused log_softmax: saves its output.
    #[track_caller]
    pub fn log_softmax(&self, dim: isize) -> Tensor {
        if let Some(x) = crate::engine::autocast::fp32_input(self) {
            return x.log_softmax(dim);
        }
        let n = last_dim(self, dim, "log_softmax");
        let dtype = self.dtype();
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, self.shape(), "log_softmax", &[self], || {
                cpu::with_slice::<R, _>(self, |s| cpu::rows(s, n, n, |r, o| softmax_rows(r, o, true)))
            })
        });
        if needs_grad(&[self]) {
            let y = save(&out);
            return attach(out, "LogSoftmaxBackward0", &[self], Box::new(move |g| {
                let y = y.unpack();
                let dt = g.dtype();
                let gi = with_real!(dt, R, {
                    Tensor::compute::<R>(g.device(), dt, g.shape(), "_log_softmax_backward_data", &[&g, &y], || {
                        rows2::<R>(&g, &y, n, |g, y, o| {
                            let s = cpu::lsum(g);
                            for ((o, &gi), &yi) in o.iter_mut().zip(g).zip(y) {
                                *o = gi - yi.fexp() * s;
                            }
                        })
                    })
                });
                vec![Some(gi)]
            }));
        }
        out
    }

    /// `nll_loss(logp (N, C), target (N,), reduction="mean")`. Like ATen it also produces
    /// `total_weight` (a 0-d tensor) and saves it with the target.
    #[track_caller]
    pub fn nll_loss(&self, target: &Tensor) -> Tensor {
        if let Some(x) = crate::engine::autocast::fp32_input(self) {
            return x.nll_loss(target);
        }
        assert_eq!(self.rank(), 2, "nll_loss expects (N, C) log-probabilities");
        assert_eq!(target.shape(), &self.shape()[..1], "nll_loss target shape");
        let (nrows, c) = (self.shape()[0], self.shape()[1]);
        let dtype = self.dtype();
        // Targets outside [0, C) are ignore_index (-100: transformers' shifted labels end in
        // it): they add nothing, and the mean is over the rest (`total_weight` counts them).
        let valid = move |k: i64| usize::try_from(k).ok().filter(|&k| k < c);
        let out = Tensor::compute::<f64>(self.device(), dtype, &[], "nll_loss", &[self, target], || {
            let t = cpu::read_i64(target);
            let lp = cpu::read::<f64>(self);
            let s: f64 = t.iter().enumerate().filter_map(|(i, &k)| valid(k).map(|k| -lp[i * c + k])).sum();
            let n = t.iter().filter(|&&k| valid(k).is_some()).count();
            vec![s / n as f64]
        });
        let total_weight = Tensor::compute::<f64>(self.device(), dtype, &[], "nll_loss", &[], || {
            vec![cpu::read_i64(target).iter().filter(|&&k| valid(k).is_some()).count() as f64]
        });
        if needs_grad(&[self]) {
            let tgt = save(target);
            let tw = save(&total_weight);
            drop(total_weight);
            return attach(out, "NllLossBackward0", &[self], Box::new(move |g| {
                let (tgt, tw) = (tgt.unpack(), tw.unpack());
                let dt = g.dtype();
                let gi = with_real!(dt, R, {
                    Tensor::compute::<R>(g.device(), dt, &[nrows, c], "nll_loss_backward", &[&g, &tgt, &tw], || {
                        let scale = R::lit(g.item() / tw.item());
                        let t = cpu::read_i64(&tgt);
                        let mut v = vec![R::zero(); nrows * c];
                        for (i, &k) in t.iter().enumerate() {
                            if let Some(k) = valid(k) {
                                v[i * c + k] = -scale;
                            }
                        }
                        v
                    })
                });
                vec![Some(gi)]
            }));
        }
        out
    }

    /// `F.cross_entropy(logits (N, C), target (N,))` = log_softmax then nll_loss, as in ATen
    /// (so the (N, C) log-probabilities exist and are saved).
    #[track_caller]
    pub fn cross_entropy(&self, target: &Tensor) -> Tensor {
        self.log_softmax(-1).nll_loss(target)
    }

    /// `F.embedding(ids, self)` with `self` the (V, d) weight: saves the ids.
    #[track_caller]
    pub fn embedding(&self, ids: &Tensor) -> Tensor {
        self.embedding_rows(ids, ids, 0, self.dim(0))
    }

    /// One rank's part of a vocabulary-parallel embedding (DTensor's `embedding` on a Shard(0)
    /// weight under `_MaskPartial`): `self` holds rows `[offset, offset + local)` of a
    /// `vocab`-row table and `local_ids` are the ids shifted into it (0 where masked); rows of
    /// ids outside the shard come out zero. Autograd saves the full `ids`, and the weight's
    /// gradient is the whole (vocab, d) table (`embedding_dense_backward` on Replicate
    /// operands), as PyTorch computes it.
    #[track_caller]
    pub fn embedding_rows(&self, local_ids: &Tensor, ids: &Tensor, offset: usize, vocab: usize) -> Tensor {
        assert_eq!(self.rank(), 2, "embedding weight must be (V, d)");
        assert_eq!(ids.dtype(), DType::I64, "embedding ids must be int64");
        let (v, d) = (self.shape()[0], self.shape()[1]);
        let mut shape = ids.shape().to_vec();
        shape.push(d);
        let dtype = self.dtype();
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, &shape, "embedding", &[self, local_ids], || {
                let ix = cpu::read_i64(local_ids);
                let full = cpu::read_i64(ids);
                cpu::with_slice::<R, _>(self, |w| {
                    let mut out = Vec::with_capacity(ix.len() * d);
                    for (&i, &g) in ix.iter().zip(&full) {
                        assert!((i as usize) < v, "token id {i} out of range for vocabulary {v}");
                        if (g as usize) < offset || g as usize >= offset + v {
                            out.extend(std::iter::repeat_n(R::zero(), d));
                        } else {
                            out.extend_from_slice(&w[i as usize * d..(i as usize + 1) * d]);
                        }
                    }
                    out
                })
            })
        });
        if needs_grad(&[self]) {
            let ix = save(ids);
            return attach(out, "EmbeddingBackward0", &[self], Box::new(move |g| {
                let ix = ix.unpack();
                let dt = g.dtype();
                let gw = with_real!(dt, R, {
                    Tensor::compute::<R>(g.device(), dt, &[vocab, d], "embedding_dense_backward", &[&g, &ix], || {
                        let ids = cpu::read_i64(&ix);
                        let gv = cpu::read::<R>(&g);
                        let mut w = vec![R::zero(); vocab * d];
                        for (row, &i) in ids.iter().enumerate() {
                            let dst = &mut w[i as usize * d..(i as usize + 1) * d];
                            for (a, &b) in dst.iter_mut().zip(&gv[row * d..(row + 1) * d]) {
                                *a += b;
                            }
                        }
                        w
                    })
                });
                vec![Some(gw)]
            }));
        }
        out
    }

    /// `self[:, …, index, …]`: advanced indexing with one int64 index tensor at dimension
    /// `dim` (`aten::index`). The result is a new tensor of shape
    /// `self.shape[..dim] + index.shape + self.shape[dim+1..]`; backward (IndexBackward0)
    /// keeps the index and accumulates the gradient into zeros of the input's shape.
    #[track_caller]
    pub fn index_along(&self, dim: isize, index: &Tensor) -> Tensor {
        let d = dim_index(dim, self.rank());
        assert_eq!(index.dtype(), DType::I64, "index must be int64");
        let in_shape = self.shape().to_vec();
        let (outer, n, inner) = (in_shape[..d].iter().product::<usize>(), in_shape[d], in_shape[d + 1..].iter().product::<usize>());
        let mut shape = in_shape[..d].to_vec();
        shape.extend_from_slice(index.shape());
        shape.extend_from_slice(&in_shape[d + 1..]);
        let dtype = self.dtype();
        // IndexBackward0 saves the index before the kernel runs (the autograd wrapper saves
        // inputs first): a checkpoint's recomputation that ends on it stops before the
        // gathered rows are allocated.
        let ix_saved = needs_grad(&[self]).then(|| save(index));
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, &shape, "index", &[self, index], || {
                let x = cpu::read::<R>(self);
                let ix = cpu::read_i64(index);
                let mut out = Vec::with_capacity(outer * ix.len() * inner);
                for o in 0..outer {
                    for &i in &ix {
                        assert!((i as usize) < n, "index {i} out of range for size {n}");
                        let at = (o * n + i as usize) * inner;
                        out.extend_from_slice(&x[at..at + inner]);
                    }
                }
                out
            })
        });
        if let Some(ix) = ix_saved {
            return attach(out, "IndexBackward0", &[self], Box::new(move |g| {
                let ix = ix.unpack();
                let dt = g.dtype();
                let gx = with_real!(dt, R, {
                    Tensor::compute::<R>(g.device(), dt, &in_shape, "index_put_", &[&g, &ix], || {
                        let ids = cpu::read_i64(&ix);
                        let gv = cpu::read::<R>(&g);
                        let mut w = vec![R::zero(); outer * n * inner];
                        for o in 0..outer {
                            for (k, &i) in ids.iter().enumerate() {
                                let src = &gv[(o * ids.len() + k) * inner..][..inner];
                                let dst = &mut w[(o * n + i as usize) * inner..][..inner];
                                dst.iter_mut().zip(src).for_each(|(a, &b)| *a += b);
                            }
                        }
                        w
                    })
                });
                vec![Some(gx)]
            }));
        }
        out
    }

    /// `torch.gather(self, dim, index)`: saves the index.
    #[track_caller]
    pub fn gather(&self, dim: isize, index: &Tensor) -> Tensor {
        let d = dim_index(dim, self.rank());
        assert_eq!(index.rank(), self.rank(), "gather index rank");
        let dtype = self.dtype();
        let in_shape = self.shape().to_vec();
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, index.shape(), "gather", &[self, index], || {
                let x = cpu::read::<R>(self);
                let ix = cpu::read_i64(index);
                let xs = crate::engine::layout::contiguous_strides(&in_shape);
                let is = index.shape().to_vec();
                let mut pos = vec![0usize; is.len()];
                let mut out = Vec::with_capacity(ix.len());
                for &k in &ix {
                    let mut off = 0;
                    for (dd, &p) in pos.iter().enumerate() {
                        off += if dd == d { k as usize } else { p } * xs[dd];
                    }
                    out.push(x[off]);
                    for dd in (0..pos.len()).rev() {
                        pos[dd] += 1;
                        if pos[dd] < is[dd] {
                            break;
                        }
                        pos[dd] = 0;
                    }
                }
                out
            })
        });
        if needs_grad(&[self]) {
            // PyTorch's GatherBackward0 keeps the index and the whole input.
            let ix = save(index);
            let x = save(self);
            return attach(out, "GatherBackward0", &[self], Box::new(move |g| {
                let gi = super::reduce::scatter_along(&g, &ix.unpack(), d, &in_shape);
                drop(x);
                vec![Some(gi)]
            }));
        }
        out
    }

    /// `repeat_interleave(repeats, dim)` with an integer count: one new tensor
    /// (expand + copy); backward sums each group.
    #[track_caller]
    pub fn repeat_interleave(&self, repeats: usize, dim: isize) -> Tensor {
        let d = dim_index(dim, self.rank());
        let mut ex = self.shape().to_vec();
        ex.insert(d + 1, repeats);
        let mut out_shape = self.shape().to_vec();
        out_shape[d] *= repeats;
        let x = self.detach().unsqueeze(d as isize + 1).expand(&ex);
        let out = x.clone_contiguous().reshape(&out_shape);
        if needs_grad(&[self]) {
            let in_shape = self.shape().to_vec();
            return attach(out, "RepeatInterleaveBackward0", &[self], Box::new(move |g| {
                vec![Some(g.reshape(&ex).sum_dim(d as isize + 1, false).reshape(&in_shape))]
            }));
        }
        out
    }

    /// `torch.cat(tensors, dim)`: backward hands out slices of the gradient (views).
    #[track_caller]
    pub fn cat(ts: &[Tensor], dim: isize) -> Tensor {
        assert!(!ts.is_empty(), "cat of nothing");
        let d = dim_index(dim, ts[0].rank());
        let mut shape = ts[0].shape().to_vec();
        shape[d] = ts.iter().map(|t| t.shape()[d]).sum();
        let dtype = ts.iter().map(|t| t.dtype()).reduce(DType::promote).unwrap();
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(ts[0].device(), dtype, &shape, "cat", &ts.iter().collect::<Vec<_>>(), || {
                let outer: usize = shape[..d].iter().product();
                let total: usize = shape[d..].iter().product();
                // Contiguous parts of the compute type are borrowed, others read once.
                let guards: Vec<_> = ts.iter().map(|t| t.storage().buffer()).collect();
                let parts: Vec<std::borrow::Cow<[R]>> = ts
                    .iter()
                    .zip(&guards)
                    .map(|(t, g)| match R::slice(g) {
                        Some(sl) if t.dtype() == dtype && t.layout().is_contiguous() => {
                            let o = t.layout().offset;
                            std::borrow::Cow::Borrowed(&sl[o..o + t.numel()])
                        }
                        _ => std::borrow::Cow::Owned(cpu::read::<R>(t)),
                    })
                    .collect();
                let inners: Vec<usize> = ts.iter().map(|t| t.shape()[d..].iter().product()).collect();
                cpu::fill_rows(outer, total, |r0, dst| {
                    for (k, row) in dst.chunks_mut(total).enumerate() {
                        let o = r0 + k;
                        let mut at = 0;
                        for (p, &n) in parts.iter().zip(&inners) {
                            for (d, &v) in row[at..at + n].iter_mut().zip(&p[o * n..(o + 1) * n]) {
                                d.write(v);
                            }
                            at += n;
                        }
                    }
                })
            })
        });
        let refs: Vec<&Tensor> = ts.iter().collect();
        if needs_grad(&refs) {
            let sizes: Vec<usize> = ts.iter().map(|t| t.shape()[d]).collect();
            let reqs: Vec<bool> = ts.iter().map(|t| t.requires_grad()).collect();
            let dtypes: Vec<DType> = ts.iter().map(|t| t.dtype()).collect();
            return attach(out, "CatBackward0", &refs, Box::new(move |g| {
                let mut start = 0;
                sizes
                    .iter()
                    .zip(&reqs)
                    .zip(&dtypes)
                    .map(|((&n, &r), &dt)| {
                        let s = start;
                        start += n;
                        // The engine's validate_outputs casts a gradient to its input's dtype
                        // (an input promoted by the cat gets its own type back).
                        r.then(|| g.narrow(d as isize, s, n).to_dtype(dt))
                    })
                    .collect()
            }));
        }
        out
    }

    /// `torch.stack(tensors, dim)` = cat of unsqueezed views.
    #[track_caller]
    pub fn stack(ts: &[Tensor], dim: isize) -> Tensor {
        let rank = ts[0].rank() + 1;
        let d = if dim < 0 { (dim + rank as isize) as usize } else { dim as usize };
        let us: Vec<Tensor> = ts.iter().map(|t| t.unsqueeze(d as isize)).collect();
        Tensor::cat(&us, d as isize)
    }
}
