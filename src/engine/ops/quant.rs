//! bitsandbytes 0.50.2's 4-bit linear (`bnb.matmul_4bit`), with the memory of the kernel that
//! runs it. The weight is stored packed (two 4-bit codes a byte) with one scale per block of
//! 64 (fp32, or, with double quantization, a byte per block plus one fp32 scale per 256
//! blocks and an fp32 offset). `MatMul4Bit` saves no activation (the weight is frozen): its
//! backward dequantizes the weight again for `grad @ W`.
//!
//! `gemm_4bit` by device (`backends/cuda/ops.py`, `backends/default/ops.py`):
//! - CUDA, fused (`_gemm_4bit_kernel_impl`): `A.contiguous()` and the output only. Chosen by
//!   `_gemm_4bit_use_custom_cuda` for M = rows of A ≤ 1536, per architecture ([`use_fused`]).
//! - CUDA, fallback (`_dequant_linear_fallback`): with double quantization the fp32 block
//!   scales (`absmax_dq`) and their sum with the offset, both locals until it returns; the
//!   dequantized weight (N × K in A's dtype); `F.linear`.
//! - CPU (`_gemm_4bit_default_impl`): as the fallback, but the scales before the offset is
//!   added die at once (an expression temporary).
use crate::engine::autograd::{attach, needs_grad};
use crate::engine::runtime;
use crate::engine::storage::Buffer;
use crate::engine::{DType, Tensor};
use serde::{Deserialize, Serialize};

/// bitsandbytes' 4-bit block size (`Params4bit(blocksize=64)`).
pub const BLOCKSIZE: usize = 64;
/// Blocks per fp32 scale of double quantization (`state2.blocksize`).
pub const NESTED_BLOCKSIZE: usize = 256;

/// Where `gemm_4bit` runs, which decides its temporaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gemm4bitKernel {
    /// A CUDA GPU: its SM count and compute capability choose fused or fallback.
    Cuda { sms: u32, major: u32, minor: u32 },
    /// An AMD CDNA GPU (gfx9): `_gemm_4bit_use_custom_rocm` runs the fused kernel for
    /// M ≤ 4 (≤ 2 in fp32).
    RocmCdna,
    /// The CPU default implementation (what the grids measured).
    Cpu,
}

/// Double quantization's `state2` and offset.
#[derive(Clone)]
pub struct Nested {
    /// fp32 scale per 256 blocks.
    pub scales: Tensor,
    /// The 256-entry dynamic map, one copy per quant_state.
    pub code: Tensor,
    /// `absmax.mean()`, 0-d fp32.
    pub offset: Tensor,
}

/// One `Linear4bit`'s storage: `weight` (uint8, ⌈N·K/2⌉ × 1) and its `quant_state`.
#[derive(Clone)]
pub struct Packed4bit {
    pub weight: Tensor,
    /// fp32 per block, or uint8 per block when nested.
    pub absmax: Tensor,
    /// Double quantization's second level.
    pub nested: Option<Nested>,
    /// The nf4/fp4 quant map (16 fp32).
    pub code: Tensor,
    /// (out_features N, in_features K).
    pub shape: (usize, usize),
    /// `quant_state.dtype`: the type the weight was loaded in (what dequantize returns).
    pub dtype: DType,
}

impl Packed4bit {
    pub fn blocks(n: usize, k: usize) -> usize {
        (n * k).div_ceil(BLOCKSIZE)
    }

    /// The block scales as fp32 for a dequantization: the stored ones, or (nested)
    /// `dequantize_blockwise(absmax) + offset`. `keep_first`: the pre-offset tensor is a local
    /// that lives as long as the result (CUDA's fallback) rather than a temporary.
    fn scales(&self, keep_first: bool) -> (Tensor, Option<Tensor>) {
        let Some(Nested { offset, .. }) = &self.nested else { return (self.absmax.clone(), None) };
        let n = self.absmax.numel();
        let dq = Tensor::build(self.absmax.device(), DType::F32, &[n], "dequantize_blockwise", &[&self.absmax], || Buffer::F32(vec![0.0; n]));
        let sum = dq.add(offset);
        if keep_first { (sum, Some(dq)) } else { (sum, None) }
    }

    /// `dequantize_4bit`: the weight as N × K in `dtype`.
    fn dequantize(&self, scales: &Tensor, dtype: DType) -> Tensor {
        let (n, k) = self.shape;
        Tensor::build(self.weight.device(), dtype, &[n, k], "dequantize_4bit", &[&self.weight, scales], || Buffer::zeros(dtype, n * k))
    }

    /// `bnb.functional.dequantize_4bit(weight, quant_state)` (what peft's
    /// `dequantize_module_weight` runs for DoRA): the weight as N × K in its load dtype.
    pub fn dequantize_4bit(&self) -> Tensor {
        self.dequantize_for_backward()
    }

    /// `F.dequantize_4bit(B, state)` as backward calls it: nested scales are
    /// `dequantize_blockwise(...)` then `+= offset` in place, a local of the function.
    fn dequantize_for_backward(&self) -> Tensor {
        let scales = match &self.nested {
            Some(Nested { offset, .. }) => {
                let n = self.absmax.numel();
                let s = Tensor::build(self.absmax.device(), DType::F32, &[n], "dequantize_blockwise", &[&self.absmax], || Buffer::F32(vec![0.0; n]));
                s.add_(&offset.expand(&[n]));
                s
            }
            None => self.absmax.clone(),
        };
        let w = self.dequantize(&scales, self.dtype);
        drop(scales);
        w
    }
}

impl Tensor {
    /// `bnb.matmul_4bit(self, W.t(), quant_state=…)`: `MatMul4Bit.apply` when autograd needs
    /// the input's gradient, else `gemm_4bit` alone.
    #[track_caller]
    pub fn matmul_4bit(&self, q: &Packed4bit, bias: Option<&Tensor>, kernel: Gemm4bitKernel) -> Tensor {
        let out = {
            let _g = runtime::no_grad();
            gemm_4bit(self, q, bias, kernel)
        };
        if needs_grad(&[self]) {
            let q = q.clone();
            return attach(out, "MatMul4BitBackward", &[self], Box::new(move |g| {
                // `dequantize_4bit(B, state).to(grad.dtype)`: the dequantized temporary dies
                // once the cast exists.
                let w = {
                    let raw = q.dequantize_for_backward();
                    if raw.dtype() == g.dtype() { raw } else { raw.to_dtype(g.dtype()) }
                };
                let ga = g.matmul(&w);
                drop(w);
                vec![Some(ga)]
            }));
        }
        out
    }
}

/// `torch.ops.bitsandbytes.gemm_4bit` on `kernel`'s device.
fn gemm_4bit(a: &Tensor, q: &Packed4bit, bias: Option<&Tensor>, kernel: Gemm4bitKernel) -> Tensor {
    let (n, k) = q.shape;
    let m = a.numel() / a.dim(-1);
    let fused = match kernel {
        Gemm4bitKernel::Cpu => false,
        Gemm4bitKernel::Cuda { sms, major, minor } => m <= 1536 && k % BLOCKSIZE == 0 && use_fused(sms, major, minor, a.dtype(), m, n, k),
        Gemm4bitKernel::RocmCdna => m <= 256 && k % BLOCKSIZE == 0 && m <= if a.dtype() == DType::F32 { 2 } else { 4 },
    };
    if fused {
        let a = a.contiguous();
        let mut shape = a.shape().to_vec();
        *shape.last_mut().expect("a matrix") = n;
        return Tensor::build(a.device(), a.dtype(), &shape, "gemm_4bit", &[&a, &q.weight], || Buffer::zeros(a.dtype(), shape.iter().product()));
    }
    let (scales, first) = q.scales(kernel != Gemm4bitKernel::Cpu);
    let w = q.dequantize(&scales, a.dtype());
    let out = match bias {
        Some(b) => a.linear_bias(&w, b),
        None => a.matmul(&w.t()),
    };
    // The function's locals die in the order they were first bound: the scales (`absmax`,
    // a parameter), CUDA's `absmax_dq`, then the dequantized weight.
    drop(scales);
    drop(first);
    drop(w);
    out
}

/// `_gemm_4bit_use_custom_cuda(device, dtype, M, N, K)` of bitsandbytes 0.50.2 for
/// M in [1, 1536]: whether the fused kernel beats dequantize + `F.linear` on this GPU.
pub fn use_fused(num_sms: u32, major: u32, minor: u32, dtype: DType, m: usize, n: usize, k: usize) -> bool {
    let num_sms = num_sms as usize;
    if m <= 4 {
        return true;
    }
    let n_blocks = n.div_ceil(64);
    if dtype == DType::F32 || major < 7 {
        return m < 8;
    }
    if major == 7 && (minor < 5 || dtype != DType::F16) {
        return m < 8;
    }
    if (major == 8 && minor == 7) || major == 11 {
        return false;
    }
    if major == 10 {
        if n_blocks >= num_sms * 3 {
            return m <= 32;
        }
        if n_blocks >= num_sms {
            return if k >= n { false } else { m <= 8 };
        }
        return false;
    }
    let is_sm75 = major == 7 && minor == 5;
    let is_sm80 = major == 8 && minor == 0;
    let is_sm86 = major == 8 && minor == 6;
    let is_sm90 = major == 9;
    let is_sm120 = major == 12 && minor == 0;
    let is_sm121 = major == 12 && minor == 1;
    let is_hbm = is_sm80 || is_sm90;
    let tall_k_2xn = k > n * 2;
    if n * k < 4 * 1024 * 1024 {
        if k * 2 < n {
            if is_hbm {
                let low_wave = n_blocks * 3 < num_sms;
                if is_sm80 {
                    return m <= if low_wave { 1536 } else { 512 };
                }
                return m <= if low_wave { 512 } else { 320 };
            }
            if is_sm75 {
                if n_blocks >= num_sms * 3 {
                    return m <= 320;
                }
                if k >= 1024 {
                    return m <= 64;
                }
                if k >= 704 {
                    return m <= 96;
                }
                return m <= 320;
            }
            if n_blocks >= num_sms {
                return m <= 320;
            }
            return if n_blocks * k > num_sms * 320 { m <= 192 } else { m <= 320 };
        }
        let quarter_wave = n_blocks * 4 <= num_sms;
        if is_sm80 && quarter_wave {
            if k >= n {
                return m <= if n_blocks * 8 <= num_sms { 32 } else { 128 };
            }
            return m <= 384;
        }
        if is_sm75 && n_blocks < num_sms && m > 8 {
            return m <= 64;
        }
        if quarter_wave {
            return m <= if k < n || is_hbm { 32 } else { 23 };
        }
        if n_blocks * 2 <= num_sms {
            return m <= 16;
        }
        return false;
    }
    if m > 512 {
        return false;
    }
    if m < 8 {
        let hbm_m67_thresh = if is_sm90 { 36 } else { 48 };
        if is_hbm && m >= 6 && n_blocks >= hbm_m67_thresh {
            let lt_75pct_wave = n_blocks * 4 < num_sms * 3;
            let lt_60pct_wave = n_blocks * 5 < num_sms * 3;
            if k > n && lt_75pct_wave {
                return false;
            }
            if k == n {
                if is_sm80 && lt_60pct_wave {
                    return false;
                }
                if is_sm90 && lt_75pct_wave && !lt_60pct_wave {
                    return false;
                }
            }
        }
        return true;
    }
    if is_sm75 {
        if n_blocks >= num_sms * 3 {
            return m <= if k < n { 128 } else { 64 };
        }
        if n_blocks >= num_sms / 2 {
            return m <= 64;
        }
        return m <= 32;
    }
    if is_sm80 {
        if n_blocks >= num_sms * 3 {
            return m <= 128;
        }
        if n_blocks >= num_sms {
            return m <= if k < n { 64 } else { 32 };
        }
        if k >= n * 3 && n_blocks * 4 > num_sms {
            return false;
        }
        if k == n && n_blocks >= 48 && n_blocks * 5 < num_sms * 3 {
            return false;
        }
        if n_blocks * 2 < num_sms {
            if k <= n {
                return m <= 128;
            }
            if n_blocks * 3 >= num_sms {
                return false;
            }
        }
        if n_blocks >= num_sms / 2 && k < n {
            return m <= 128;
        }
        return m <= 16;
    }
    if is_sm86 {
        if n_blocks >= num_sms {
            return m <= 128;
        }
        if n_blocks >= num_sms / 2 {
            return m <= 64;
        }
        return m <= 16;
    }
    if is_sm90 {
        if n_blocks >= num_sms * 3 {
            return m <= 64;
        }
        if n_blocks >= num_sms * 2 {
            return m <= 48;
        }
        if n_blocks >= num_sms {
            return m <= 32;
        }
        if n_blocks >= num_sms / 2 {
            if k >= n && n_blocks * 4 < num_sms * 3 {
                return false;
            }
            return m <= 16;
        }
        return false;
    }
    if is_sm121 && n_blocks >= num_sms {
        return m <= 256;
    }
    if is_sm120 {
        if n_blocks >= num_sms * 3 {
            return m <= 256;
        }
        if n_blocks >= num_sms * 2 {
            return m <= 128;
        }
        if n_blocks * 5 >= num_sms * 4 {
            return m <= if k >= n { 96 } else { 64 };
        }
        if n_blocks >= num_sms {
            return m <= 64;
        }
        if n_blocks >= num_sms / 2 {
            return m <= if k * 2 >= n && n_blocks >= 128 { 64 } else { 8 };
        }
        if tall_k_2xn && n_blocks > 64 {
            return m <= 16;
        }
        return m <= 8;
    }
    if n_blocks >= num_sms * 3 {
        return m <= 256;
    }
    if n_blocks >= num_sms * 2 {
        return m <= 128;
    }
    if n_blocks * 5 >= num_sms * 4 {
        if tall_k_2xn || n_blocks >= 200 {
            return m <= 128;
        }
        if k >= n {
            return m <= if num_sms >= 60 { 128 } else { 32 };
        }
        return m <= 64;
    }
    if n_blocks >= num_sms / 2 {
        if tall_k_2xn {
            return m <= 64;
        }
        return m <= if n_blocks >= 64 { 8 } else { 32 };
    }
    if k > n && n_blocks <= 48 {
        return m <= if k >= n * 3 { 12 } else { 10 };
    }
    m <= if tall_k_2xn || n_blocks < 48 { 16 } else { 8 }
}
