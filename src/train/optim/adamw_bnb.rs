//! bitsandbytes 0.50.2's AdamW (`bnb.optim.AdamW`): the Trainer's `adamw_bnb_8bit` (=
//! `adamw_8bit`), `paged_adamw_8bit` and `paged_adamw_32bit`. Per parameter, at its first step
//! (`init_state`, just before its first update):
//! - 8-bit, for parameters of at least `min_8bit_size` (4096) elements: `state1` and `state2`
//!   one byte an element, `absmax1` and `absmax2` one fp32 scale per block of 256; the first
//!   such parameter also moves the two 256-entry quantization maps (`dynamic`, `udynamic`,
//!   fp32) to the device, shared by every parameter;
//! - otherwise (32-bit, or a small parameter) `state1` and `state2` in fp32, whatever the
//!   parameter's type.
//! Paged (`is_paged`): state buffers of at least 10⁵ elements come from `cudaMallocManaged`
//! (`F.get_paged`), CUDA unified memory outside PyTorch's caching allocator — resident on the
//! GPU while used (nvidia-smi counts it), absent from `max_memory_allocated`. The updates
//! (`optimizer_update_8bit_blockwise` / `optimizer_update_32bit`) work in place: no
//! temporaries. `step` is a Python int.
use super::{Live, ParamState};
use crate::engine::{runtime, DType, Tensor};
use crate::record::Category;

/// `min_8bit_size`: smaller parameters keep fp32 state.
pub const MIN_8BIT_SIZE: usize = 4096;
/// Elements from which a paged optimizer's buffer is paged (`p.numel() < 1e5` is not).
pub const PAGED_MIN: usize = 100_000;
/// Block size of the 8-bit state's scales.
pub const BLOCK: usize = 256;

pub(super) fn step(state: &mut [Option<ParamState>], shared: &mut Vec<Tensor>, live: &Live<'_>, bits8: bool, paged: bool) {
    for (i, p, _) in live {
        if state[*i].is_some() {
            continue;
        }
        let _s = runtime::scope(&p.name);
        let _c = runtime::category(Category::OptimizerState);
        let n = p.tensor.numel();
        let eight = bits8 && n >= MIN_8BIT_SIZE;
        let device = p.tensor.device();
        if eight && shared.is_empty() {
            // fill_qmap() then `.to(p.device)`: the signed and unsigned dynamic maps.
            shared.push(Tensor::zeros(&[256], DType::F32, device));
            shared.push(Tensor::zeros(&[256], DType::F32, device));
        }
        let buffer = |dtype: DType| {
            let _u = (paged && n >= PAGED_MIN).then(runtime::in_unified_memory);
            Tensor::zeros(p.tensor.shape(), dtype, device)
        };
        let dtype = if eight { DType::U8 } else { DType::F32 };
        let m = buffer(dtype);
        let v = buffer(dtype);
        let scales = if eight {
            let blocks = n.div_ceil(BLOCK);
            vec![Tensor::zeros(&[blocks], DType::F32, device), Tensor::zeros(&[blocks], DType::F32, device)]
        } else {
            Vec::new()
        };
        state[*i] = Some(ParamState { m, v: Some(v), step: None, extra: scales });
        // update_step: the kernel updates the parameter and both states in place.
    }
}
