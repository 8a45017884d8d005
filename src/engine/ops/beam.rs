//! The ops of transformers' beam search (no autograd: generate runs under no_grad), for any
//! element type (int64 sequences, int32 beam indices, fp32 scores, bool flags):
//! `torch.take_along_dim`, `index_select(0, …)`, `%`, `torch.min(dim, keepdim)`,
//! `all`/`any` over the last dim, the elementwise comparisons and selections of
//! `_check_early_stop_heuristic`.
use crate::engine::cpu;
use crate::engine::dtype::DType;
use crate::engine::layout::broadcast_shapes;
use crate::engine::storage::Buffer;
use crate::engine::tensor::Tensor;

/// A new tensor of `shape` and `dtype` whose values `f` computes (in f64) on cpu runs.
#[track_caller]
fn built(device_of: &Tensor, dtype: DType, shape: &[usize], op: &'static str, inputs: &[&Tensor], f: impl FnOnce() -> Vec<f64>) -> Tensor {
    Tensor::build(device_of.device(), dtype, shape, op, inputs, || cpu::to_buffer::<f64>(f(), dtype))
}

/// Rows of the last dim (a rank-0 tensor is one row of one).
fn rows(t: &Tensor) -> Vec<Vec<f64>> {
    let n = t.shape().last().copied().unwrap_or(1).max(1);
    t.to_vec_f64().chunks(n).map(<[f64]>::to_vec).collect()
}

impl Tensor {
    /// `self % n` of an integer tensor (int64 out, Python's sign rule).
    #[track_caller]
    pub fn remainder_int(&self, n: i64) -> Tensor {
        Tensor::build(self.device(), DType::I64, self.shape(), "remainder", &[self], || Buffer::I64(cpu::read_i64(self).into_iter().map(|x| x.rem_euclid(n)).collect()))
    }

    /// `torch.take_along_dim(self, indices, dim)` with the indices unsqueezed at the end up to
    /// self's rank (transformers' `_gather_beams`): ATen broadcasts the indices to self's
    /// shape (the indices' size at `dim`), wraps them by `remainder(self.size(dim))` into that
    /// materialized int64 shape, gathers, and frees the wrapped indices.
    #[track_caller]
    pub fn take_along_dim(&self, indices: &Tensor, dim: isize) -> Tensor {
        let d = crate::engine::layout::dim_index(dim, self.rank());
        let mut ix = indices.clone();
        while ix.rank() < self.rank() {
            ix = ix.unsqueeze(-1);
        }
        let mut want = self.shape().to_vec();
        want[d] = ix.dim(d as isize);
        let shape = broadcast_shapes(&want, ix.shape());
        let wrapped = ix.expand(&shape).remainder_int(self.dim(d as isize) as i64);
        let out = self.gather_any(d, &wrapped);
        drop(wrapped);
        out
    }

    /// `torch.gather(self, d, index)` for any element type (index: int64 of the output's shape).
    #[track_caller]
    pub fn gather_any(&self, d: usize, index: &Tensor) -> Tensor {
        let shape = index.shape().to_vec();
        built(self, self.dtype(), &shape, "gather", &[self, index], || {
            let x = self.to_vec_f64();
            let xs = crate::engine::layout::contiguous_strides(self.shape());
            let is = index.shape().to_vec();
            let mut pos = vec![0usize; is.len()];
            let mut out = Vec::with_capacity(index.numel());
            for k in cpu::read_i64(index) {
                let off: usize = pos.iter().enumerate().map(|(dd, &p)| if dd == d { k as usize } else { p } * xs[dd]).sum();
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
    }

    /// `self.index_select(0, index)` (any element type, int32 or int64 index): the output,
    /// then ATen's contiguous copy of a strided index (freed on return).
    #[track_caller]
    pub fn index_select0(&self, index: &Tensor) -> Tensor {
        let mut shape = self.shape().to_vec();
        shape[0] = index.numel();
        let row = self.numel() / self.dim(0).max(1);
        let out = built(self, self.dtype(), &shape, "index_select", &[self, index], || {
            let x = self.to_vec_f64();
            index.to_vec_f64().into_iter().flat_map(|i| x[i as usize * row..(i as usize + 1) * row].to_vec()).collect()
        });
        if !index.is_contiguous() {
            drop(index.clone_contiguous());
        }
        out
    }

    /// `torch.min(self, dim=-1, keepdim=True)`: (values, int64 indices), both allocated first.
    #[track_caller]
    pub fn min_last_keepdim(&self) -> (Tensor, Tensor) {
        let mut shape = self.shape().to_vec();
        *shape.last_mut().expect("rank >= 1") = 1;
        let values = built(self, self.dtype(), &shape, "min", &[self], || rows(self).iter().map(|r| r.iter().copied().fold(f64::INFINITY, f64::min)).collect());
        let indices = built(self, DType::I64, &shape, "min", &[self], || {
            rows(self).iter().map(|r| r.iter().enumerate().fold((0, f64::INFINITY), |b, (i, &x)| if x < b.1 { (i, x) } else { b }).0 as f64).collect()
        });
        (values, indices)
    }

    /// `torch.all(self, dim=-1, keepdim=True)` / `torch.any(…)` (`any` false): bool.
    #[track_caller]
    pub fn all_any_last_keepdim(&self, all: bool) -> Tensor {
        let mut shape = self.shape().to_vec();
        *shape.last_mut().expect("rank >= 1") = 1;
        built(self, DType::Bool, &shape, if all { "all" } else { "any" }, &[self], || {
            rows(self).iter().map(|r| if all { r.iter().all(|&x| x != 0.0) } else { r.iter().any(|&x| x != 0.0) } as u8 as f64).collect()
        })
    }

    /// `self > other` (bool, broadcast), any element types.
    #[track_caller]
    pub fn gt_any(&self, o: &Tensor) -> Tensor {
        let shape = broadcast_shapes(self.shape(), o.shape());
        built(self, DType::Bool, &shape, "gt", &[self, o], || {
            let (a, b) = (self.expand(&shape).to_vec_f64(), o.expand(&shape).to_vec_f64());
            a.into_iter().zip(b).map(|(a, b)| (a > b) as u8 as f64).collect()
        })
    }

    /// `torch.where(cond, self, value)`: self where cond holds, else the scalar (wrapped as
    /// a 0-d tensor, as where.ScalarOther does), broadcast.
    #[track_caller]
    pub fn where_else_scalar(&self, cond: &Tensor, value: f64) -> Tensor {
        let shape = broadcast_shapes(self.shape(), cond.shape());
        let scalar = Tensor::full(&[], value, self.dtype(), self.device());
        let out = built(self, self.dtype(), &shape, "where", &[self, cond], || {
            let (x, c) = (self.expand(&shape).to_vec_f64(), cond.expand(&shape).to_vec_f64());
            x.into_iter().zip(c).map(|(x, c)| if c != 0.0 { x } else { value }).collect()
        });
        drop(scalar);
        out
    }

    /// `self + n` of an int32 or int64 tensor (its own type).
    #[track_caller]
    pub fn add_int_same(&self, n: i64) -> Tensor {
        built(self, self.dtype(), self.shape(), "add", &[self], || self.to_vec_f64().into_iter().map(|x| x + n as f64).collect())
    }

    /// `self.sum(dim=-1)` of a bool/int tensor: int64.
    #[track_caller]
    pub fn count_last(&self) -> Tensor {
        let shape = &self.shape()[..self.rank() - 1];
        built(self, DType::I64, shape, "sum", &[self], || rows(self).iter().map(|r| r.iter().filter(|&&x| x != 0.0).count() as f64).collect())
    }

    /// `self.max()` of an int tensor: a 0-d tensor of its type.
    #[track_caller]
    pub fn max_all_int(&self) -> Tensor {
        built(self, self.dtype(), &[], "max", &[self], || vec![self.to_vec_f64().into_iter().fold(f64::NEG_INFINITY, f64::max)])
    }

    /// `self.to(torch.bool)` of an int tensor.
    #[track_caller]
    pub fn to_bool(&self) -> Tensor {
        built(self, DType::Bool, self.shape(), "_to_copy", &[self], || self.to_vec_f64().into_iter().map(|x| (x != 0.0) as u8 as f64).collect())
    }
}

impl Tensor {
    /// `torch.multinomial(probs, n, replacement=False)` over the last dim of (rows, V), n > 1:
    /// ATen's device-generic no-replacement path draws `q = empty_like(probs).exponential_()`,
    /// divides probs by it into q, then `topk_out(vals, result, q, n)` with `vals` an empty
    /// (rows, n) of probs' type; vals then q die on return.
    #[track_caller]
    pub fn multinomial_without_replacement(&self, n: usize) -> Tensor {
        assert_eq!(self.rank(), 2, "multinomial over (rows, V)");
        let (r, v) = (self.dim(0), self.dim(1));
        assert!(n >= 1 && n <= v, "multinomial: {n} samples of {v}");
        let q = built(self, self.dtype(), self.shape(), "exponential_", &[self], || {
            self.to_vec_f64().into_iter().map(|p| p / -super::sampling::uniform().ln()).collect()
        });
        let vals = Tensor::build(self.device(), self.dtype(), &[r, n], "empty", &[], || Buffer::zeros(self.dtype(), r * n));
        let result = built(self, DType::I64, &[r, n], "topk", &[&q], || {
            rows(&q).into_iter().flat_map(|r| {
                let mut ix: Vec<(usize, f64)> = r.into_iter().enumerate().collect();
                ix.sort_by(|a, b| b.1.total_cmp(&a.1));
                ix.into_iter().take(n).map(|(i, _)| i as f64).collect::<Vec<_>>()
            }).collect()
        });
        drop(vals);
        drop(q);
        result
    }
}
