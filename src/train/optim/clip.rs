//! `torch.nn.utils.clip_grad_norm_(params, max_norm)` as torch 2.15 runs it on CUDA (foreach,
//! L2): `_get_total_norm` then `_clip_grads_with_norm_`, each small tensor a real device
//! allocation (a 512 B block on CUDA):
//! 1. per (device, dtype) group, `torch._foreach_norm(grads)`: CUDA's kernel first zeroes an
//!    fp32 scratch of `len(grads) × max_chunks` partial sums (`max_chunks` = the largest
//!    gradient's elements / 65,536, rounded up), then makes one 0-d norm per gradient (the
//!    gradients' dtype), and frees the scratch when it returns;
//! 2. `total_norm = linalg.vector_norm(torch.stack(norms))`: the stacked (n,) vector dies once
//!    the 0-d total exists; the norms die when `_get_total_norm` returns;
//! 3. `clip_coef = max_norm / (total_norm + 1e-6)` (the sum dies after the division),
//!    `clip_coef_clamped = torch.clamp(clip_coef, max=1.0)`;
//! 4. `torch._foreach_mul_(grads, clip_coef_clamped)` in place; both coefficients die on return.
//!
//! The total norm is returned (the Trainer keeps it as `_grad_norm` through the optimizer step).
use super::group_by_dtype;
use crate::engine::{runtime, DType, Tensor};
use crate::model::Param;
use crate::record::Category;

/// `multi_tensor_apply`'s chunk: elements per block of `_foreach_norm`'s first kernel.
pub const FOREACH_CHUNK: usize = 65_536;
/// Op name of `_foreach_norm`'s CUDA scratch (tests and analyses find it by this name).
pub const FOREACH_NORM_SCRATCH_OP: &str = "_foreach_norm";

/// Elements of `_foreach_norm`'s fp32 partial-sum scratch for gradients of these sizes.
pub fn foreach_norm_scratch_elems(numels: &[usize]) -> usize {
    let max_chunks = numels.iter().map(|&n| n.div_ceil(FOREACH_CHUNK)).max().unwrap_or(0);
    numels.len() * max_chunks
}

/// `torch._foreach_norm(tensors)` (L2) as the CUDA fast path allocates: the partial-sum
/// scratch, then a 0-d norm per tensor; the scratch dies on return.
pub fn foreach_norm(tensors: &[Tensor]) -> Vec<Tensor> {
    let Some(first) = tensors.first() else { return Vec::new() };
    let numels: Vec<usize> = tensors.iter().map(Tensor::numel).collect();
    let scratch = {
        let _c = runtime::category(Category::Workspace);
        Tensor::zeros_op(&[foreach_norm_scratch_elems(&numels)], DType::F32, first.device(), FOREACH_NORM_SCRATCH_OP)
    };
    let norms = tensors.iter().map(Tensor::vector_norm).collect();
    drop(scratch);
    norms
}

/// `clip_grad_norm_(params, max_norm)`; None when no parameter has a gradient.
pub fn clip_grad_norm_(params: &[Param], max_norm: f64) -> Option<Tensor> {
    let grads: Vec<Tensor> = params.iter().filter_map(|p| p.tensor.grad()).collect();
    if grads.is_empty() {
        return None;
    }
    let _g = runtime::no_grad();
    let _s = runtime::scope("clip_grad_norm_");
    let groups = group_by_dtype(grads.iter().map(Tensor::dtype));
    let total_norm = {
        let mut norms: Vec<Tensor> = Vec::with_capacity(grads.len());
        for g in &groups {
            let ts: Vec<Tensor> = g.iter().map(|&i| grads[i].clone()).collect();
            norms.extend(foreach_norm(&ts));
        }
        let stacked = Tensor::stack(&norms, 0);
        stacked.vector_norm()
    };
    let clip_coef = total_norm.add_scalar(1e-6).rdiv_scalar(max_norm);
    let clamped = clip_coef.clamp_max(1.0);
    for g in &groups {
        for &i in g {
            grads[i].mul_(&clamped);
        }
    }
    drop((clamped, clip_coef));
    Some(total_norm)
}
