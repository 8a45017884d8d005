//! Integer and boolean ops (no autograd): the index arithmetic transformers' mask code runs
//! on every forward (`arange + offset`, comparisons, `&`, `cumsum`), whose outputs are device
//! tensors like any other.
use crate::engine::cpu;
use crate::engine::dtype::DType;
use crate::engine::layout::broadcast_shapes;
use crate::engine::storage::Buffer;
use crate::engine::tensor::Tensor;

/// Both operands' values broadcast to `shape`, read as i64 (bools as 0/1).
fn broadcast_i64(a: &Tensor, b: &Tensor, shape: &[usize]) -> (Vec<i64>, Vec<i64>) {
    (cpu::read_i64(&a.detach().expand(shape)), cpu::read_i64(&b.detach().expand(shape)))
}

impl Tensor {
    /// `self + n` for an int64 tensor (a new int64 tensor, as PyTorch keeps the type).
    #[track_caller]
    pub fn add_int(&self, n: i64) -> Tensor {
        assert_eq!(self.dtype(), DType::I64, "add_int on {}", self.dtype());
        Tensor::build(self.device(), DType::I64, self.shape(), "add", &[self], || Buffer::I64(cpu::read_i64(self).into_iter().map(|x| x + n).collect()))
    }

    /// `self - other` for int64 tensors (broadcast).
    #[track_caller]
    pub fn sub_int(&self, o: &Tensor) -> Tensor {
        let shape = broadcast_shapes(self.shape(), o.shape());
        Tensor::build(self.device(), DType::I64, &shape, "sub", &[self, o], || {
            let (a, b) = broadcast_i64(self, o, &shape);
            Buffer::I64(a.into_iter().zip(b).map(|(a, b)| a - b).collect())
        })
    }

    /// `self & other` for bool tensors (broadcast).
    #[track_caller]
    pub fn logical_and(&self, o: &Tensor) -> Tensor {
        let shape = broadcast_shapes(self.shape(), o.shape());
        Tensor::build(self.device(), DType::Bool, &shape, "bitwise_and", &[self, o], || {
            let (a, b) = broadcast_i64(self, o, &shape);
            Buffer::Bool(a.into_iter().zip(b).map(|(a, b)| a != 0 && b != 0).collect())
        })
    }

    /// `self < n` (bool) for an integer tensor.
    #[track_caller]
    pub fn lt_int(&self, n: i64) -> Tensor {
        Tensor::build(self.device(), DType::Bool, self.shape(), "lt", &[self], || Buffer::Bool(cpu::read_i64(self).into_iter().map(|x| x < n).collect()))
    }

    /// `self >= n` (bool) for an integer tensor.
    #[track_caller]
    pub fn ge_int(&self, n: i64) -> Tensor {
        Tensor::build(self.device(), DType::Bool, self.shape(), "ge", &[self], || Buffer::Bool(cpu::read_i64(self).into_iter().map(|x| x >= n).collect()))
    }

    /// `self | other` for bool tensors (broadcast).
    #[track_caller]
    pub fn logical_or(&self, o: &Tensor) -> Tensor {
        let shape = broadcast_shapes(self.shape(), o.shape());
        Tensor::build(self.device(), DType::Bool, &shape, "bitwise_or", &[self, o], || {
            let (a, b) = broadcast_i64(self, o, &shape);
            Buffer::Bool(a.into_iter().zip(b).map(|(a, b)| a != 0 || b != 0).collect())
        })
    }

    /// `masked = ids - offset; masked[mask] = 0` for ids outside `[offset, offset + rows)`:
    /// one new int64 tensor (the subtraction's; the masked fill is in place).
    #[track_caller]
    pub fn shard_ids(&self, offset: i64, rows: i64) -> Tensor {
        Tensor::build(self.device(), DType::I64, self.shape(), "sub", &[self], || {
            Buffer::I64(cpu::read_i64(self).into_iter().map(|x| if x < offset || x >= offset + rows { 0 } else { x - offset }).collect())
        })
    }

    /// `self == n` (bool) for an integer tensor.
    #[track_caller]
    pub fn eq_int(&self, n: i64) -> Tensor {
        Tensor::build(self.device(), DType::Bool, self.shape(), "eq", &[self], || Buffer::Bool(cpu::read_i64(self).into_iter().map(|x| x == n).collect()))
    }

    /// `self != n` (bool) for an integer tensor.
    #[track_caller]
    pub fn ne_int(&self, n: i64) -> Tensor {
        Tensor::build(self.device(), DType::Bool, self.shape(), "ne", &[self], || Buffer::Bool(cpu::read_i64(self).into_iter().map(|x| x != n).collect()))
    }

    /// `self.cumsum(-1)` of an integer or bool tensor: int64, as PyTorch promotes.
    #[track_caller]
    pub fn cumsum_last(&self) -> Tensor {
        let n = self.dim(-1);
        Tensor::build(self.device(), DType::I64, self.shape(), "cumsum", &[self], || {
            let v = cpu::read_i64(self);
            let mut out = Vec::with_capacity(v.len());
            for row in v.chunks(n.max(1)) {
                let mut acc = 0;
                out.extend(row.iter().map(|&x| {
                    acc += x;
                    acc
                }));
            }
            Buffer::I64(out)
        })
    }
}

impl Tensor {
    /// `F.pad(self, (0, n), value=v)` of an int64 (B, S) tensor: one new (B, S + n) tensor.
    #[track_caller]
    pub fn pad_last_int(&self, n: usize, v: i64) -> Tensor {
        assert_eq!(self.rank(), 2, "pad_last_int expects (B, S)");
        let (b, s) = (self.dim(0), self.dim(1));
        Tensor::build(self.device(), DType::I64, &[b, s + n], "constant_pad_nd", &[self], || {
            let x = cpu::read_i64(self);
            let mut out = Vec::with_capacity(b * (s + n));
            for row in x.chunks(s.max(1)).take(b) {
                out.extend_from_slice(row);
                out.extend(std::iter::repeat_n(v, n));
            }
            Buffer::I64(out)
        })
    }
}

/// The integer and boolean ops of `generate()`'s bookkeeping (attention mask, position ids,
/// the finished-rows arithmetic, stopping criteria): each one new device tensor.
impl Tensor {
    /// `self * o` of int64/bool tensors (int64, broadcast).
    #[track_caller]
    pub fn mul_i64(&self, o: &Tensor) -> Tensor {
        let shape = broadcast_shapes(self.shape(), o.shape());
        Tensor::build(self.device(), DType::I64, &shape, "mul", &[self, o], || {
            let (a, b) = broadcast_i64(self, o, &shape);
            Buffer::I64(a.into_iter().zip(b).map(|(a, b)| a * b).collect())
        })
    }

    /// `self + o` of int64/bool tensors (int64, broadcast).
    #[track_caller]
    pub fn add_i64(&self, o: &Tensor) -> Tensor {
        let shape = broadcast_shapes(self.shape(), o.shape());
        Tensor::build(self.device(), DType::I64, &shape, "add", &[self, o], || {
            let (a, b) = broadcast_i64(self, o, &shape);
            Buffer::I64(a.into_iter().zip(b).map(|(a, b)| a + b).collect())
        })
    }

    /// `n - self` of an int64 tensor (`1 - unfinished_sequences`).
    #[track_caller]
    pub fn rsub_int(&self, n: i64) -> Tensor {
        Tensor::build(self.device(), DType::I64, self.shape(), "rsub", &[self], || Buffer::I64(cpu::read_i64(self).into_iter().map(|x| n - x).collect()))
    }

    /// `self.masked_fill(mask, v)` of an int64 tensor: a new int64 tensor.
    #[track_caller]
    pub fn masked_fill_int(&self, mask: &Tensor, v: i64) -> Tensor {
        let shape = self.shape().to_vec();
        Tensor::build(self.device(), DType::I64, &shape, "masked_fill", &[self, mask], || {
            let (a, m) = broadcast_i64(self, mask, &shape);
            Buffer::I64(a.into_iter().zip(m).map(|(a, m)| if m != 0 { v } else { a }).collect())
        })
    }

    /// `~self` of a bool tensor.
    #[track_caller]
    pub fn logical_not(&self) -> Tensor {
        Tensor::build(self.device(), DType::Bool, self.shape(), "bitwise_not", &[self], || Buffer::Bool(cpu::read_i64(self).into_iter().map(|x| x == 0).collect()))
    }

    /// `self.any()`: a 0-d bool.
    #[track_caller]
    pub fn any(&self) -> Tensor {
        Tensor::build(self.device(), DType::Bool, &[], "any", &[self], || Buffer::Bool(vec![cpu::read_i64(self).into_iter().any(|x| x != 0)]))
    }

    /// `torch.sum(self)` of a bool or integer tensor: a 0-d int64, as PyTorch promotes.
    #[track_caller]
    pub fn sum_int(&self) -> Tensor {
        Tensor::build(self.device(), DType::I64, &[], "sum", &[self], || Buffer::I64(vec![cpu::read_i64(self).into_iter().sum()]))
    }

    /// `self > n` (bool) for an integer tensor.
    #[track_caller]
    pub fn gt_int(&self, n: i64) -> Tensor {
        Tensor::build(self.device(), DType::Bool, self.shape(), "gt", &[self], || Buffer::Bool(cpu::read_i64(self).into_iter().map(|x| x > n).collect()))
    }

    /// `self.all()`: a 0-d bool.
    #[track_caller]
    pub fn all(&self) -> Tensor {
        Tensor::build(self.device(), DType::Bool, &[], "all", &[self], || Buffer::Bool(vec![cpu::read_i64(self).into_iter().all(|x| x != 0)]))
    }

    /// `torch.argmax(self, dim=-1)` of a float tensor: int64 indices without the last dim
    /// (the first maximum, NaN counting as the largest, as ATen).
    #[track_caller]
    pub fn argmax_last(&self) -> Tensor {
        let shape = &self.shape()[..self.rank() - 1];
        let n = self.dim(-1);
        Tensor::build(self.device(), DType::I64, shape, "argmax", &[self], || {
            let v = self.to_vec_f64();
            Buffer::I64(
                v.chunks(n.max(1))
                    .map(|r| {
                        let (mut bi, mut bv) = (0usize, r[0]);
                        for (i, &x) in r.iter().enumerate() {
                            if x > bv || (x.is_nan() && !bv.is_nan()) {
                                (bi, bv) = (i, x);
                            }
                        }
                        bi as i64
                    })
                    .collect(),
            )
        })
    }
}

impl Tensor {
    /// `torch.isin(self, ids)` of an int64 tensor against a list of ids: bool of self's shape.
    #[track_caller]
    pub fn isin_ids(&self, ids: &[i64]) -> Tensor {
        let ids = ids.to_vec();
        Tensor::build(self.device(), DType::Bool, self.shape(), "isin", &[self], move || Buffer::Bool(cpu::read_i64(self).into_iter().map(|x| ids.contains(&x)).collect()))
    }
}
