//! `torch.autocast` (CUDA rules, reference-models.md §1): inside a region, matmul-class ops
//! run in the low type, the fp32 op list runs in fp32, everything else follows normal type
//! promotion. Casts of fp32 leaf weights that require grad are cached for the region's
//! lifetime (PyTorch's `cached_cast`), so each weight is cast once per forward; those copies
//! are the `autocast_cache` category. The cache is cleared when the outermost region exits,
//! but a copy that backward saved lives on until that backward has run.
use super::runtime::{self, Guard};
use super::{DType, Tensor};
use crate::record::Category;

/// The region's state, kept in the thread's runtime (PyTorch keeps it thread-local too).
#[derive(Default)]
pub struct State {
    dtype: Option<DType>,
    /// (storage id of the fp32 weight, its low-precision copy).
    cache: Vec<(u64, Tensor)>,
}

/// Enter an autocast region casting to `dtype` (bf16 or f16) until the guard drops.
pub fn enable(dtype: DType) -> Guard {
    assert!(matches!(dtype, DType::BF16 | DType::F16), "autocast casts to bf16 or f16, not {dtype}");
    let prev = runtime::with(|rt| rt.autocast.dtype.replace(dtype));
    Guard::new(move || {
        let cache = runtime::with(|rt| {
            rt.autocast.dtype = prev;
            // Leaving the outermost region clears the cache (torch.clear_autocast_cache()).
            if prev.is_none() { std::mem::take(&mut rt.autocast.cache) } else { Vec::new() }
        });
        // Dropped outside the runtime borrow so the frees are recorded.
        drop(cache);
    })
}

/// Leave the region until the guard drops, keeping its cast cache (the dispatcher excludes
/// autocast inside an op it already handled: a composite such as SDPA's math backend runs
/// its inner ops on the cast inputs without casting again).
pub fn suspend() -> Guard {
    let prev = runtime::with(|rt| rt.autocast.dtype.take());
    Guard::new(move || runtime::with(|rt| rt.autocast.dtype = prev))
}

/// End the region here, before its caller's guard drops: its cast cache is cleared (as at
/// the outermost region's exit) and ops run without autocast until this guard drops. For
/// accelerate's `convert_outputs_to_fp32(autocast(forward))`, whose region returns before
/// the output is converted.
pub fn end_here() -> Guard {
    let (prev, cache) = runtime::with(|rt| (rt.autocast.dtype.take(), std::mem::take(&mut rt.autocast.cache)));
    // Dropped outside the runtime borrow so the frees are recorded.
    drop(cache);
    Guard::new(move || runtime::with(|rt| rt.autocast.dtype = prev))
}

/// The low type of the active region, if any.
pub fn active() -> Option<DType> {
    runtime::with(|rt| rt.autocast.dtype)
}

/// Types autocast casts (floating, not f64).
fn eligible(dtype: DType) -> bool {
    dtype.is_float() && dtype != DType::F64
}

/// An input of a lower-precision op (mm, bmm, matmul, linear, einsum, attention).
#[track_caller]
pub fn lower(t: &Tensor) -> Tensor {
    let Some(low) = active() else { return t.clone() };
    if !eligible(t.dtype()) || t.dtype() == low {
        return t.clone();
    }
    let cacheable = t.dtype() == DType::F32 && t.requires_grad() && t.is_leaf() && !t.is_view();
    if !cacheable {
        return t.to_dtype(low);
    }
    let id = t.storage().id;
    if let Some(hit) = runtime::with(|rt| rt.autocast.cache.iter().find(|(k, _)| *k == id).map(|(_, c)| c.clone())) {
        return hit;
    }
    let copy = {
        let _c = runtime::category(Category::AutocastCache);
        t.to_dtype(low)
    };
    runtime::with(|rt| rt.autocast.cache.push((id, copy.clone())));
    copy
}

/// Output type of a reduction on the `fp32_set_opt_dtype` list (sum): fp32 under autocast
/// for a low-precision input, computed without a cast copy of the input.
pub fn reduce_dtype(input: DType) -> DType {
    match active() {
        Some(_) if eligible(input) && input != DType::F32 => DType::F32,
        _ => input,
    }
}

/// `lower` for a two-input op: `Some` only when a cast happened (the op then reruns on the
/// cast inputs, where this returns `None`). The second operand is cast first: WrapFunction_
/// casts its arguments in a pack expansion, which GCC-built PyTorch evaluates right to left,
/// so the first operand's ToCopyBackward0 has the higher sequence number and its gradient is
/// cast back first in backward (measured: tests/moe_grid.rs, autocast.json).
#[track_caller]
pub fn lower_pair(a: &Tensor, b: &Tensor) -> Option<(Tensor, Tensor)> {
    let low = active()?;
    let needs = |t: &Tensor| eligible(t.dtype()) && t.dtype() != low;
    (needs(a) || needs(b)).then(|| {
        let b = lower(b);
        (lower(a), b)
    })
}

/// The input of an fp32-list op (exp, log, pow, rsqrt, reciprocal, softmax, log_softmax,
/// nll_loss): `Some` fp32 copy of a low-precision input under autocast (the op then reruns
/// on it), `None` when it runs as it is.
#[track_caller]
pub fn fp32_input(t: &Tensor) -> Option<Tensor> {
    active()?;
    (eligible(t.dtype()) && t.dtype() != DType::F32).then(|| t.to_dtype(DType::F32))
}
