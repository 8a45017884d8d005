//! The ops of transformers' logits warpers and sampling (no autograd: generate runs under
//! no_grad): `torch.topk`, `scores < threshold`, `masked_fill`, `torch.where(mask, value,
//! scores)`, `torch.multinomial(probs, 1)`.
use crate::engine::cpu;
use crate::engine::dtype::DType;
use crate::engine::layout::broadcast_shapes;
use crate::engine::storage::Buffer;
use crate::engine::tensor::Tensor;
use std::cell::Cell;

thread_local! {
    /// The draws of cpu runs' multinomial (a fixed xorshift stream: the values are random,
    /// the memory is not).
    static DRAW: Cell<u64> = const { Cell::new(0x2545_F491_4F6C_DD1D) };
}

pub(super) fn uniform() -> f64 {
    DRAW.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    })
}

impl Tensor {
    /// `torch.topk(self, k)` along the last dim: (values, indices), allocated in that order.
    /// TopkBackward0 saves the indices; its backward (`value_selecting_reduction_backward`)
    /// scatters the gradient into zeros of the input's shape (the MoE router's; meta only).
    #[track_caller]
    pub fn topk_last(&self, k: usize) -> (Tensor, Tensor) {
        let n = self.dim(-1);
        assert!(k >= 1 && k <= n, "topk: k {k} of {n}");
        let mut shape = self.shape().to_vec();
        *shape.last_mut().expect("rank >= 1") = k;
        let rows = || -> Vec<Vec<(usize, f64)>> {
            self.to_vec_f64()
                .chunks(n)
                .map(|r| {
                    let mut ix: Vec<(usize, f64)> = r.iter().copied().enumerate().collect();
                    ix.sort_by(|a, b| b.1.total_cmp(&a.1));
                    ix.truncate(k);
                    ix
                })
                .collect()
        };
        let values = Tensor::build(self.device(), self.dtype(), &shape, "topk", &[self], || {
            cpu::to_buffer::<f64>(rows().into_iter().flatten().map(|(_, v)| v).collect(), self.dtype())
        });
        let indices = Tensor::build(self.device(), DType::I64, &shape, "topk", &[self], || {
            Buffer::I64(rows().into_iter().flatten().map(|(i, _)| i as i64).collect())
        });
        if crate::engine::autograd::needs_grad(&[self]) {
            let ix = crate::engine::autograd::save(&indices);
            let (in_shape, dt, dev) = (self.shape().to_vec(), self.dtype(), self.device());
            let values = crate::engine::autograd::attach(values, "TopkBackward0", &[self], Box::new(move |g| {
                let ix = ix.unpack();
                let gi = Tensor::build(dev, dt, &in_shape, "empty", &[&g, &ix], || panic!("topk's backward runs on meta only (its users, the MoE router, are refused on cpu)"));
                vec![Some(gi)]
            }));
            return (values, indices);
        }
        (values, indices)
    }

    /// `self < other` (bool, broadcast) for float tensors.
    #[track_caller]
    pub fn lt(&self, o: &Tensor) -> Tensor {
        let shape = broadcast_shapes(self.shape(), o.shape());
        Tensor::build(self.device(), DType::Bool, &shape, "lt", &[self, o], || {
            let a = self.detach().expand(&shape).to_vec_f64();
            let b = o.detach().expand(&shape).to_vec_f64();
            Buffer::Bool(a.into_iter().zip(b).map(|(a, b)| a < b).collect())
        })
    }

    /// `self.masked_fill(mask, value)`: a new tensor of self's shape and type.
    #[track_caller]
    pub fn masked_fill_scalar(&self, mask: &Tensor, value: f64) -> Tensor {
        let shape = self.shape().to_vec();
        Tensor::build(self.device(), self.dtype(), &shape, "masked_fill", &[self, mask], || {
            let m = cpu::read_bool(&mask.detach().expand(&shape));
            let x = self.to_vec_f64();
            cpu::to_buffer::<f64>(x.into_iter().zip(m).map(|(x, m)| if m { value } else { x }).collect(), self.dtype())
        })
    }

    /// `torch.where(cond, value, self)` (the scalar where cond holds), broadcast; the scalar
    /// is wrapped as a 0-d tensor as where.Scalar does.
    #[track_caller]
    pub fn where_scalar_true(&self, cond: &Tensor, value: f64) -> Tensor {
        let shape = broadcast_shapes(self.shape(), cond.shape());
        let scalar = Tensor::full(&[], value, self.dtype(), self.device());
        let out = Tensor::build(self.device(), self.dtype(), &shape, "where", &[self, cond], || {
            let c = cpu::read_bool(&cond.detach().expand(&shape));
            let x = self.detach().expand(&shape).to_vec_f64();
            cpu::to_buffer::<f64>(x.into_iter().zip(c).map(|(x, c)| if c { value } else { x }).collect(), self.dtype())
        });
        drop(scalar);
        out
    }

    /// `torch.multinomial(probs, 1)` over the last dim of a (rows, V) tensor: ATen's one-sample
    /// path (device-generic) draws `q = empty_like(probs).exponential_()`, divides probs by it
    /// in place and takes the argmax into the (rows, 1) int64 result; q dies on return.
    #[track_caller]
    pub fn multinomial_one(&self) -> Tensor {
        assert_eq!(self.rank(), 2, "multinomial over (rows, V)");
        let (rows, n) = (self.dim(0), self.dim(1));
        let q = Tensor::build(self.device(), self.dtype(), self.shape(), "exponential_", &[self], || {
            let p = self.to_vec_f64();
            cpu::to_buffer::<f64>(p.into_iter().map(|p| p / -uniform().ln()).collect(), self.dtype())
        });
        let out = Tensor::build(self.device(), DType::I64, &[rows, 1], "multinomial", &[&q], || {
            Buffer::I64(
                q.to_vec_f64()
                    .chunks(n)
                    .map(|r| r.iter().enumerate().fold((0usize, f64::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as i64)
                    .collect(),
            )
        });
        drop(q);
        out
    }
}
