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
