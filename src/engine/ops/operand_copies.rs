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
//! A CPU run (`HfConfig::cpu_run`, what the fixture grids measure) makes none: CPU baddbmm's
//! copies depend on the ISA (oneDNN copies a bf16 operand whole on AVX-512 CPUs, addmm_ clones
//! one expert's slice at a time elsewhere and in fp32), so the grids leave every block it frees
//! inside out as CPU kernel scratch (tools/pytorch/measure_cs336.py), as they leave out CPU
//! bmm's oneDNN copies.
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

/// What CUDA's `baddbmm(self, batch1, batch2)` copies of its batches once its result exists
/// (a CPU run: none).
pub(crate) fn baddbmm(batch1: &Tensor, batch2: &Tensor) -> Vec<Tensor> {
    bmm(batch1, batch2)
}

/// What CUDA's `bmm(batch1, batch2)` copies of its batches (a CPU run: none).
pub(crate) fn bmm(batch1: &Tensor, batch2: &Tensor) -> Vec<Tensor> {
    if !crate::engine::runtime::on_cuda_kernels() {
        return Vec::new();
    }
    let c = cublas(batch1, batch2);
    [batch1, batch2].iter().zip(c).filter(|(_, c)| *c).map(|(t, _)| t.operand_copy("clone")).collect()
}
