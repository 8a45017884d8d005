//! bitsandbytes 0.50.2's LLM.int8() linear (`bnb.matmul` → `MatMul8bitLt`), with the memory of
//! the CUDA kernels that run it (`autograd/_functions.py`, `backends/cuda/ops.py`,
//! `backends/default/ops.py`). The weight is int8 (N × K, row-major `CB`) with one fp32 scale
//! per row (`SCB`); a frozen weight (`has_fp16_weights=False`) is never requantized.
//!
//! Forward (`MatMul8bitLt.forward`, the weight needing no gradient):
//! 1. `A.reshape(-1, K)`, then `int8_vectorwise_quant(A.to(float16), threshold)`: the fp16 copy
//!    (a temporary of the call) → `CA` (int8 M × K) and `SCA` (fp32 M), locals until forward
//!    returns. With a threshold, CUDA's op also takes `A.abs() >= threshold` (an fp16 |A| that
//!    dies into a bool M × K mask, a local of the op) and `outliers.any()`.
//! 2. `int8_scaled_mm` (inside `int8_mixed_scaled_mm` with a threshold): `int8_linear_matmul`
//!    (cuBLASLt, int32 M × N; inner dimensions not a multiple of 4 go through fp32 copies of
//!    both operands) then `int8_mm_dequant` (fp16 M × N, the bias added in place unless it
//!    is fp16 — then fused — and `.to(A.dtype)`: a second M × N when A is not fp16).
//! 3. Outlier columns (threshold > 0, columns of A holding |a| ≥ threshold): vramscope
//!    assumes none (see [`outlier_column_bytes`] for what each would add).
//! 4. `ctx.tensors = (None, subA, A)`: plain attributes, not `save_for_backward`, so the 2-D
//!    view of the input stays alive as long as the node, until the graph is freed (after
//!    backward too); `subA` is empty without outliers.
//!
//! Backward (`grad_A` only): `CB.to(A.dtype, copy=True).mul_(SCB.unsqueeze(1).mul(1/127))`,
//! the dequantized weight (N × K, a local until backward returns), then `grad @ W`.
use crate::engine::autograd::{attach_with_ctx, needs_grad};
use crate::engine::runtime;
use crate::engine::storage::Buffer;
use crate::engine::{DType, Tensor};
use serde::{Deserialize, Serialize};

/// Where the int8 kernels run, which decides what they allocate inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Int8Kernel {
    /// CUDA (`backends/cuda/ops.py`): the kernels' outputs plus what they allocate inside (the
    /// threshold's |A| and mask, the fp16 dequant buffer, the fp32 fallback of K % 4 ≠ 0).
    Cuda,
    /// The CPU grid's count: each op's outputs only. bitsandbytes' default kernels compute
    /// through working tensors that die inside the op, which the grid leaves out
    /// (tools/pytorch/README.md, CPU-only scratch rule 8).
    CpuOutputsOnly,
}

/// One `Linear8bitLt`'s storage: `weight` (`Int8Params`, int8 N × K, the module's frozen
/// weight, which is also `state.CB`) and `SCB` (fp32 per row).
#[derive(Clone)]
pub struct Int8Weight {
    pub weight: Tensor,
    pub scb: Tensor,
}

impl Int8Weight {
    fn shape(&self) -> (usize, usize) {
        (self.weight.dim(0), self.weight.dim(1))
    }
}

/// What one outlier column would add to a forward of M rows through an N × K layer with inputs
/// of `dtype` (vramscope counts none): `subA = A[:, cols]` (M, saved for backward in
/// training), `CB[:, cols]` (N int8), its fp32 dequantization (N) and the cast to the input's
/// type (N), `outlier_cols` (8 B); with any outlier at all, `output.addmm(subA, subB)` also
/// makes a second M × N output before the first dies.
pub fn outlier_column_bytes(m: usize, n: usize, dtype: DType) -> usize {
    m * dtype.size() + n * (1 + 4 + dtype.size()) + 8
}

fn scratch(like: &Tensor, dtype: DType, shape: &[usize], op: &'static str) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::build(like.device(), dtype, shape, op, &[like], || Buffer::zeros(dtype, n))
}

impl Tensor {
    /// `Linear8bitLt.forward` → `bnb.matmul(x, W, bias=bias, state=state)`: `MatMul8bitLt`
    /// (on CUDA also in training; bitsandbytes' CPU training path `MatMul8bitFp` is not
    /// modelled). The output has the input's type.
    #[track_caller]
    pub fn matmul_8bit(&self, w: &Int8Weight, bias: Option<&Tensor>, threshold: f64, kernel: Int8Kernel) -> Tensor {
        let (n, k) = w.shape();
        assert_eq!(self.dim(-1), k, "matmul_8bit: input features");
        let dtype = self.dtype();
        let (out, a) = {
            let _g = runtime::no_grad();
            let m = self.numel() / k;
            let a = self.reshape(&[m, k]);
            let (ca, sca) = {
                let a16 = a.to_dtype(DType::F16);
                vectorwise_quant(&a16, threshold, kernel)
            };
            let out = scaled_mm(&ca, w, &sca, bias, dtype, kernel);
            drop((ca, sca));
            let mut shape = self.shape().to_vec();
            *shape.last_mut().expect("a matrix") = n;
            (out.reshape(&shape), a)
        };
        if needs_grad(&[self]) {
            let w = w.clone();
            let in_shape = self.shape().to_vec();
            return attach_with_ctx(
                out,
                "MatMul8bitLtBackward",
                &[self],
                Box::new(move |g| {
                    let g2 = g.reshape(&[g.numel() / n, n]).contiguous();
                    let deq = {
                        let cb = scratch(&w.weight, dtype, &[n, k], "_to_copy");
                        // `SCB.unsqueeze(1).mul(1/127)`: a temporary of the in-place mul_.
                        drop(scratch(&w.scb, DType::F32, &[n, 1], "mul"));
                        cb
                    };
                    let ga = g2.to_dtype(dtype).matmul(&deq).reshape(&in_shape);
                    drop(deq);
                    vec![Some(ga)]
                }),
                Some(Box::new(a)),
            );
        }
        out
    }
}

/// `int8_vectorwise_quant(A, threshold)`: (CA int8, SCA fp32 per row), no outlier columns.
fn vectorwise_quant(a: &Tensor, threshold: f64, kernel: Int8Kernel) -> (Tensor, Tensor) {
    let (m, k) = (a.dim(0), a.dim(1));
    let row_stats = scratch(a, DType::F32, &[m], "int8_vectorwise_quant");
    let out_row = scratch(a, DType::I8, &[m, k], "int8_vectorwise_quant");
    if kernel == Int8Kernel::Cuda && threshold > 0.0 {
        // `outliers = A.abs() >= threshold`: |A| dies into the mask; `outliers.any()` (a 0-d
        // bool); the mask is a local until the op returns.
        let mask = {
            let abs = scratch(a, a.dtype(), &[m, k], "abs");
            scratch(&abs, DType::Bool, &[m, k], "ge")
        };
        drop(scratch(&mask, DType::Bool, &[], "any"));
        drop(mask);
    }
    (out_row, row_stats)
}

/// `int8_scaled_mm(CA, CB, SCA, SCB, bias, dtype)`: the int32 product, dequantized to `dtype`.
fn scaled_mm(ca: &Tensor, w: &Int8Weight, sca: &Tensor, bias: Option<&Tensor>, dtype: DType, kernel: Int8Kernel) -> Tensor {
    let (m, k) = (ca.dim(0), ca.dim(1));
    let n = w.weight.dim(0);
    let product = scratch(ca, DType::I32, &[m, n], "int8_linear_matmul");
    if kernel == Int8Kernel::Cuda && k % 4 != 0 {
        // cuBLASLt needs inner dimensions divisible by 4: `torch.matmul(CA.float(),
        // CB.float().t()).to(torch.int32)`, copied into the output.
        let a32 = scratch(ca, DType::F32, &[m, k], "_to_copy");
        let b32 = scratch(&w.weight, DType::F32, &[n, k], "_to_copy");
        let mm = scratch(&a32, DType::F32, &[m, n], "mm");
        drop(scratch(&mm, DType::I32, &[m, n], "_to_copy"));
        drop((mm, b32, a32));
    }
    let mut inputs = vec![&product, sca, &w.scb];
    inputs.extend(bias);
    let out = match kernel {
        // `out = empty_like(A, dtype=float16)`, the bias added in place, `.to(dtype)`.
        Int8Kernel::Cuda if dtype != DType::F16 => {
            let half = scratch(&product, DType::F16, &[m, n], "int8_mm_dequant");
            let out = Tensor::build(ca.device(), dtype, &[m, n], "_to_copy", &inputs, || Buffer::zeros(dtype, m * n));
            drop(half);
            out
        }
        _ => Tensor::build(ca.device(), dtype, &[m, n], "int8_mm_dequant", &inputs, || Buffer::zeros(dtype, m * n)),
    };
    drop(product);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{runtime, Device};

    /// Peak bytes above the start of one forward (no grad) of `(m, k)` fp32 inputs through an
    /// `n × k` layer.
    fn forward_peak(m: usize, k: usize, n: usize, threshold: f64, kernel: Int8Kernel) -> usize {
        runtime::reset();
        let w = Int8Weight { weight: Tensor::zeros(&[n, k], DType::I8, Device::Meta), scb: Tensor::zeros(&[n], DType::F32, Device::Meta) };
        let x = Tensor::zeros(&[1, m, k], DType::F32, Device::Meta);
        let base = runtime::stats().allocated;
        let _g = runtime::no_grad();
        let out = x.matmul_8bit(&w, None, threshold, kernel);
        assert_eq!((out.shape(), out.dtype()), (&[1, m, n][..], DType::F32));
        runtime::stats().peak_allocated - base
    }

    #[test]
    fn the_cuda_kernels_add_their_scratch_to_the_outputs() {
        let (m, k, n) = (64, 128, 96);
        // Kernel outputs only: the fp16 copy of A (2MK) dies after quantization, so the peak is
        // CA + SCA + int32 product + fp32 output at the dequantization.
        let outputs = m * k + 4 * m + 4 * m * n + 4 * m * n;
        assert_eq!(forward_peak(m, k, n, 0.0, Int8Kernel::CpuOutputsOnly), (2 * m * k + 4 * m + m * k).max(outputs));
        assert_eq!(forward_peak(m, k, n, 6.0, Int8Kernel::CpuOutputsOnly), (2 * m * k + 4 * m + m * k).max(outputs));
        // CUDA: int8_mm_dequant's fp16 buffer (2MN) beside the int32 product and the output.
        assert_eq!(forward_peak(m, k, n, 0.0, Int8Kernel::Cuda), outputs + 2 * m * n);
        // With a threshold: |A| (fp16) and the mask while quantizing, over A16 + SCA + CA.
        let quant = 2 * m * k + 4 * m + m * k + 2 * m * k + m * k;
        assert_eq!(forward_peak(m, k, n, 6.0, Int8Kernel::Cuda), quant.max(outputs + 2 * m * n));
        // An inner dimension not a multiple of 4: cuBLASLt's fp32 fallback.
        let k = 126;
        let fallback = m * k + 4 * m + 4 * m * n + 4 * m * k + 4 * n * k + 4 * m * n + 4 * m * n;
        assert_eq!(forward_peak(m, k, n, 0.0, Int8Kernel::Cuda), fallback);
    }

    #[test]
    fn one_outlier_column_costs_its_slices() {
        assert_eq!(outlier_column_bytes(512, 4096, DType::BF16), 512 * 2 + 4096 * 7 + 8);
    }
}
