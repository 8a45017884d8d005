//! Device memory a real run uses that vramscope's allocator model does not hold, and that
//! `fit` keeps free by default (`--reserve` overrides the total):
//!
//! - The **CUDA context** (driver state, loaded kernels, the device heap) lives outside
//!   PyTorch's caching allocator: `nvidia-smi` shows it, `max_memory_allocated()` and
//!   `max_memory_reserved()` never do. PyTorch's maintainers put it at about 300 MB since
//!   CUDA 11.7 loads kernels lazily, and over 1000 MB before
//!   (<https://github.com/pytorch/pytorch/issues/107667>); users saw 200–700 MB on older
//!   stacks (<https://github.com/pytorch/pytorch/issues/28113>). It grows with the SM count:
//!   `cudaMemGetInfo` cost 555 MiB on a 188-SM RTX PRO 6000 Blackwell and 107 MiB on a 34-SM
//!   RTX 4060 Ti (<https://github.com/ggml-org/llama.cpp/pull/23604>), about 3 MiB per SM,
//!   so about 400 MiB for an H100 SXM's 132 SMs. Measured on an H200 (132 SMs; torch 2.11,
//!   CUDA 13.0, driver 580; tests/fixtures/gpu/card.json): 526.8 MiB right after
//!   `torch.cuda.init()`, 756.8 MiB once the allocator, the cuBLAS handles and the first
//!   kernels are loaded and the caching allocator is emptied again. Hopper (H100, H200) keeps
//!   that measurement, 757 MiB; other cards keep 512 MiB, the larger published figures with
//!   room (unmeasured here).
//! - The **cuBLAS workspace**: PyTorch allocates one per (cuBLAS handle, stream) through its
//!   caching allocator (`aten/src/ATen/cuda/CublasHandlePool.cpp`), so a real run counts it
//!   in `memory_allocated`, but vramscope's meta/cpu run calls no cuBLAS and so predicts
//!   without it. Its default size is `CUBLAS_WORKSPACE_CONFIG=:4096:2:16:8`, 2 × 4 MiB + 8 ×
//!   16 KiB = 8.125 MiB, and 32 MiB on Hopper (sm90: H100, H200). Handles are per thread:
//!   the forward runs on the Python thread and backward on autograd's device thread, so a
//!   training step holds two workspaces, forward or inference one. cuBLASLt shares the
//!   cuBLAS workspace by default (`TORCH_CUBLASLT_UNIFIED_WORKSPACE`), so it adds nothing.
//!   On ROCm the hipBLAS workspace is 32 MiB (128 MiB on gfx94x: MI300X) and hipBLASLt keeps
//!   its own 76 MiB pool per handle (same file).
//! - **NCCL** buffers: none, `fit` models one GPU.
use super::gpu::Gpu;
use serde::Serialize;

const MIB: usize = 1 << 20;

/// One part of the reserve.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Part {
    pub what: String,
    pub bytes: usize,
}

/// The CUDA context kept free on a device without a measurement (see the module comment).
pub const CUDA_CONTEXT_BYTES: usize = 512 * MIB;
/// The CUDA context measured on an H200 (tests/gpu_grid.rs holds it to tests/fixtures/gpu/card.json).
pub const HOPPER_CONTEXT_BYTES: usize = 757 * MIB;

/// The default reserve for `gpu` (None: a bare `--memory-limit`, treated as a CUDA GPU
/// other than Hopper) when a step runs backward (`training`) or not.
pub fn default_parts(gpu: Option<&Gpu>, training: bool) -> Vec<Part> {
    let name = gpu.map_or("", |g| g.name);
    let handles = if training { 2 } else { 1 };
    let per = if training { "2 (forward and backward threads)" } else { "1 (one thread)" };
    let hopper = name.starts_with("H100") || name.starts_with("H200");
    let context = if hopper { HOPPER_CONTEXT_BYTES } else { CUDA_CONTEXT_BYTES };
    let mut parts = vec![Part { what: "CUDA context".into(), bytes: context }];
    if name.starts_with("MI") {
        let blas = if name.starts_with("MI300") { 128 * MIB } else { 32 * MIB };
        parts.push(Part { what: format!("hipBLAS workspace {} MiB × {per}", blas / MIB), bytes: blas * handles });
        parts.push(Part { what: format!("hipBLASLt workspace 76 MiB × {per}"), bytes: 76 * MIB * handles });
    } else {
        let (ws, label) = if hopper { (32 * MIB, "32 MiB (Hopper)") } else { (8 * MIB + 8 * 16 * 1024, "8.125 MiB") };
        parts.push(Part { what: format!("cuBLAS workspace {label} × {per}"), bytes: ws * handles });
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::gpu;

    #[test]
    fn hopper_training_keeps_the_context_and_two_32_mib_workspaces() {
        let h100 = gpu::find("H100").unwrap();
        let p = default_parts(Some(&h100), true);
        assert_eq!(p.iter().map(|x| x.bytes).sum::<usize>(), 757 * MIB + 64 * MIB);
        let a100 = gpu::find("A100-80GB").unwrap();
        assert_eq!(default_parts(Some(&a100), false).iter().map(|x| x.bytes).sum::<usize>(), 512 * MIB + 8 * MIB + 128 * 1024);
        let mi300 = gpu::find("MI300X").unwrap();
        assert_eq!(default_parts(Some(&mi300), true).iter().map(|x| x.bytes).sum::<usize>(), 512 * MIB + 2 * (128 + 76) * MIB);
    }
}
