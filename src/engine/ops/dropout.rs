//! `F.dropout(x, p, training=True)`, whose memory differs by device: CUDA's fused kernel
//! (`native_dropout`) returns the output and a bool mask, and autograd keeps the mask (1 B an
//! element); CPU's `_dropout_impl` draws an x-typed noise tensor (`empty_like(x).bernoulli_(1 -
//! p).div_(1 - p)`) and returns `x * noise`, whose MulBackward0 keeps the noise. vramscope
//! predicts CUDA; the CPU kernel is what the PyTorch grids measured on CPU ran.
use crate::engine::autograd::{attach, needs_grad, save};
use crate::engine::cpu;
use crate::engine::dtype::Real as _;
use crate::engine::storage::Buffer;
use crate::engine::tensor::Tensor;
use crate::with_real;
use serde::{Deserialize, Serialize};
use std::cell::Cell;

/// Which device's dropout kernel runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropoutKernel {
    /// `native_dropout` on CUDA: output + bool mask.
    #[default]
    Cuda,
    /// `_dropout_impl` on CPU: noise in x's dtype, then `x * noise`.
    Cpu,
}

thread_local! {
    /// The keep/drop draws of cpu runs (a fixed stream: values matter, not which ones).
    static DRAW: Cell<u64> = const { Cell::new(0x9E37_79B9_7F4A_7C15) };
}

/// `n` Bernoulli(keep) draws from a xorshift stream.
fn draws(n: usize, keep: f64) -> Vec<bool> {
    DRAW.with(|s| {
        let mut x = s.get();
        let v = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 11) as f64 / (1u64 << 53) as f64) < keep
            })
            .collect();
        s.set(x);
        v
    })
}

impl Tensor {
    /// `F.dropout(self, p, training=True)` with `kernel`'s allocations and saved tensors.
    #[track_caller]
    pub fn dropout(&self, p: f64, kernel: DropoutKernel) -> Tensor {
        assert!((0.0..1.0).contains(&p), "dropout p {p} outside [0, 1)");
        let (dtype, shape, device) = (self.dtype(), self.shape().to_vec(), self.device());
        let scale = 1.0 / (1.0 - p);
        match kernel {
            DropoutKernel::Cpu => {
                let noise = with_real!(dtype, R, {
                    Tensor::compute::<R>(device, dtype, &shape, "bernoulli_", &[], || {
                        draws(self.numel(), 1.0 - p).into_iter().map(|k| R::lit(if k { scale } else { 0.0 })).collect()
                    })
                });
                self.mul(&noise)
            }
            DropoutKernel::Cuda => {
                let mask = Tensor::build(device, crate::engine::DType::Bool, &shape, "native_dropout", &[self], || Buffer::Bool(draws(self.numel(), 1.0 - p)));
                let apply = move |x: &Tensor, m: &Tensor, op: &'static str| {
                    with_real!(x.dtype(), R, {
                        Tensor::compute::<R>(x.device(), x.dtype(), x.shape(), op, &[x, m], || {
                            let (v, k) = (cpu::read::<R>(&x.detach()), cpu::read_bool(&m.detach()));
                            v.into_iter().zip(k).map(|(v, k)| if k { v * R::lit(scale) } else { R::lit(0.0) }).collect()
                        })
                    })
                };
                let out = apply(self, &mask, "native_dropout");
                if needs_grad(&[self]) {
                    let m = save(&mask);
                    drop(mask);
                    return attach(out, "NativeDropoutBackward0", &[self], Box::new(move |g| vec![Some(apply(&g, &m.unpack(), "native_dropout_backward"))]));
                }
                out
            }
        }
    }
}
