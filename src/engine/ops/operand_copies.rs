//! Contiguous copies a batched matmul kernel makes of an operand whose strides it cannot pass
//! to BLAS as they are: held until the op returns, never saved.
//!
//! CUDA (`aten/src/ATen/native/cuda/Blas.cpp`, `baddbmm_out_cuda_impl`, which bmm shares): the
//! result (G, M, N) is fresh and contiguous, so `transpose_result` holds unless N is 1; each
//! batch goes through `prepare_batch_matrix_for_cublas`, which passes it as is when one of its
//! two matrix dims has stride 1 and the other a leading dimension of at least the rows it
//! spans, or when it is contiguous, and otherwise clones it contiguous. peft's ParamWrapper fold
//! `baddbmm(W, lora_B (E, out, r), lora_A)` is such a case: lora_B's expert dim is the fastest
//! (`reshape(out, r, E).permute(2, 0, 1)`), so cuBLAS gets an E·out·r copy. Written from the
//! source, unmeasured on a card.
//!
//! CPU (what the fixture grids measure, `HfConfig::cpu_run`; `bmm_out_or_baddbmm_` in
//! LinearAlgebra.cpp): bf16 of more than 16³ multiply-adds goes to oneDNN (`mkldnn_matmul`, on
//! CPUs with AVX-512 BW/VL/DQ, as the grids' machines), which copies an operand that is neither
//! contiguous nor a transposed contiguous batch (`is_mkldnn_optimized_format`); below 400
//! multiply-adds per batch a plain loop copies nothing; fp32 batches of contiguous or transposed
//! matrices go to MKL's batched gemm whole; the rest is split by batch into `addmm_`, whose CPU
//! path clones a 2-D slice with neither stride 1, one slice at a time.
use crate::engine::dtype::DType;
use crate::engine::tensor::Tensor;

/// The copies CUDA's batched GEMM makes of `batch1` (G, M, K) and `batch2` (G, K, N).
fn cublas(batch1: &Tensor, batch2: &Tensor) -> [bool; 2] {
    let (m_rows, n_cols) = (batch1.dim(1), batch2.dim(2));
    let transpose_result = n_cols != 1;
    let (fast, lead) = if transpose_result { (2, 1) } else { (1, 2) };
    let sizes = [batch1.dim(0), m_rows, n_cols];
    let m = sizes[if transpose_result { 2 } else { 1 }];
    let n = sizes[lead];
    let (first, second) = if transpose_result { (batch2, batch1) } else { (batch1, batch2) };
    let k = first.dim(lead as isize);
    let copies = |t: &Tensor, m: usize, n: usize| {
        let s = &t.layout().strides;
        let passes = (s[fast] == 1 && s[lead] >= m.max(1)) || (s[lead] == 1 && s[fast] >= n.max(1));
        !passes && !(t.is_contiguous() && s[1] != 0 && s[2] != 0)
    };
    let (c_first, c_second) = (copies(first, m, k), copies(second, k, n));
    if transpose_result {
        [c_second, c_first]
    } else {
        [c_first, c_second]
    }
}

/// oneDNN's `is_mkldnn_optimized_format` of a 3-D operand.
fn mkldnn_takes(t: &Tensor) -> bool {
    let (s, d) = (&t.layout().strides, t.shape());
    t.is_contiguous() || (s[0] == d[1] * d[2] && s[1] == 1 && s[2] == d[1])
}

/// Whether CPU addmm reads a 2-D (rows, cols) slice with these strides in place.
fn cpu_addmm_takes(rows: usize, cols: usize, s0: usize, s1: usize) -> bool {
    (s1 == 1 && (rows == 1 || s0 >= cols.max(1))) || (s0 == 1 && (cols == 1 || s1 >= rows.max(1)))
}

/// Allocates (and frees, when the returned copies drop) what `baddbmm(self, batch1, batch2)`
/// copies of its batches once its result exists: on CUDA's kernels or on a CPU run.
pub(crate) fn baddbmm(batch1: &Tensor, batch2: &Tensor) -> Vec<Tensor> {
    let both = [batch1, batch2];
    if crate::engine::runtime::on_cuda_kernels() {
        let c = cublas(batch1, batch2);
        return both.iter().zip(c).filter(|(_, c)| *c).map(|(t, _)| t.operand_copy("clone")).collect();
    }
    let (g, m, k, n) = (batch1.dim(0), batch1.dim(1), batch1.dim(2), batch2.dim(2));
    // `use_mkldnn_bf16_matmul`: bf16 operands of more than 16³ multiply-adds in all.
    if batch1.dtype() == DType::BF16 && g * m * k * n > 16 * 16 * 16 {
        return both.iter().filter(|t| !mkldnn_takes(t)).map(|t| t.operand_copy("clone")).collect();
    }
    if k * m * n < 400 {
        return Vec::new();
    }
    // MKL's batched gemm takes fp32 batches whose matrices are contiguous or transposed.
    let gemm_takes = |t: &Tensor| {
        let s = &t.layout().strides;
        (s[2] == 1 && (t.dim(1) == 1 || s[1] >= t.dim(2))) || (s[1] == 1 && (t.dim(2) == 1 || s[2] >= t.dim(1)))
    };
    if batch1.dtype() == DType::F32 && gemm_takes(batch1) && gemm_takes(batch2) {
        return Vec::new();
    }
    let slice = |t: &Tensor| {
        let s = &t.layout().strides;
        (!cpu_addmm_takes(t.dim(1), t.dim(2), s[1], s[2])).then(|| [t.dim(1), t.dim(2)])
    };
    let (s1, s2) = (slice(batch1), slice(batch2));
    for _ in 0..g {
        let copies: Vec<Tensor> = [s1, s2].into_iter().flatten().map(|shape| Tensor::zeros_op(&shape, batch1.dtype(), batch1.device(), "clone")).collect();
        drop(copies);
    }
    Vec::new()
}

/// What CUDA's `bmm(batch1, batch2)` copies of its batches (a CPU run: none, as the grids
/// leave oneDNN's bf16 copies out as CPU-only scratch).
pub(crate) fn bmm(batch1: &Tensor, batch2: &Tensor) -> Vec<Tensor> {
    if !crate::engine::runtime::on_cuda_kernels() {
        return Vec::new();
    }
    let c = cublas(batch1, batch2);
    [batch1, batch2].iter().zip(c).filter(|(_, c)| *c).map(|(t, _)| t.operand_copy("clone")).collect()
}
