//! `torch.optim.AdamW(fused=True)` (the Trainer's `adamw_torch_fused`): `_init_group` makes
//! each parameter's `step` a 0-d fp32 tensor on the parameter's device (4 B, which CUDA's
//! caching allocator rounds to a 512 B block), then `exp_avg` and `exp_avg_sq`. Per dtype
//! group, `_foreach_add_(state_steps, 1)` and one `_fused_adamw_` kernel update everything in
//! place: no temporaries on the device.
use super::{bias_corrections, decay_and_update_moments, group_by_dtype, init_adamw_state, moments, Live, OptimConfig, ParamState};
use crate::engine::{cpu, runtime, DType, Device, Tensor};

pub(super) fn step(c: &OptimConfig, state: &mut [Option<ParamState>], steps: u64, live: &Live<'_>) {
    init_adamw_state(state, live, true);
    let all = moments(state, live);
    let (bc2_sqrt, step_size) = bias_corrections(c, steps);
    for group in group_by_dtype(live.iter().map(|(_, p, _)| p.tensor.dtype())) {
        // torch._foreach_add_(device_state_steps, 1)
        for &j in &group {
            let s = state[live[j].0].as_ref().and_then(|s| s.step.as_ref()).expect("fused AdamW keeps a device step");
            s.add_scalar_(1.0);
        }
        // _fused_adamw_: the kernel's arithmetic, each tensor updated in place; the
        // denominator lives in the kernel's registers (host scratch here, no device bytes).
        for &j in &group {
            let (_, p, grad) = &live[j];
            let (m, v) = &all[j];
            let _s = runtime::scope(&p.name);
            decay_and_update_moments(c, &p.tensor, m, v, grad);
            let denom = register_denom(v, bc2_sqrt, c.eps);
            p.tensor.addcdiv_(m, &denom, -step_size);
        }
    }
}

/// `sqrt(exp_avg_sq) / bias_correction2_sqrt + eps`, computed where the kernel would keep it:
/// untracked host values on cpu, shape only on meta.
fn register_denom(v: &Tensor, bc2_sqrt: f64, eps: f64) -> Tensor {
    if v.device() != Device::Cpu {
        return Tensor::shape_only(v.shape(), DType::F32);
    }
    let vals: Vec<f32> = v.to_vec_f64().into_iter().map(|x| (x.sqrt() / bc2_sqrt + eps) as f32).collect();
    Tensor::host(cpu::to_buffer(vals, DType::F32), v.shape())
}
