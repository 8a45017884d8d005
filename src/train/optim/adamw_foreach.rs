//! `torch.optim.AdamW()` on CUDA: `_multi_tensor_adamw`, per (device, dtype) group: in-place
//! foreach updates, then `exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)`, one temporary
//! per parameter, all alive until the update is done. The name stays bound after a group's
//! iteration, so with several dtype groups the previous group's list dies only when the next
//! group's has been built. `step` counters are host tensors (`torch.tensor(0.0)` on the CPU).
use super::{bias_corrections, group_by_dtype, init_adamw_state, moments, Live, OptimConfig, ParamState};
use crate::engine::{runtime, Tensor};

pub(super) fn step(c: &OptimConfig, state: &mut [Option<ParamState>], steps: u64, live: &Live<'_>) {
    // _init_group: exp_avg and exp_avg_sq zeros at the first step, per parameter.
    init_adamw_state(state, live, false);
    let all = moments(state, live);
    let (bc2_sqrt, step_size) = bias_corrections(c, steps);
    let mut exp_avg_sq_sqrt: Vec<Tensor> = Vec::new();
    for group in group_by_dtype(live.iter().map(|(_, p, _)| p.tensor.dtype())) {
        let params: Vec<&Tensor> = group.iter().map(|&j| &live[j].1.tensor).collect();
        let grads: Vec<&Tensor> = group.iter().map(|&j| &live[j].2).collect();
        let states: Vec<&(Tensor, Tensor)> = group.iter().map(|&j| &all[j]).collect();
        if c.weight_decay != 0.0 {
            for p in &params {
                p.mul_scalar_(1.0 - c.lr * c.weight_decay);
            }
        }
        for ((m, _), g) in states.iter().map(|s| (&s.0, &s.1)).zip(&grads) {
            m.lerp_(g, 1.0 - c.beta1);
        }
        for (v, g) in states.iter().map(|s| &s.1).zip(&grads) {
            v.mul_scalar_(c.beta2);
            v.addcmul_(g, g, 1.0 - c.beta2);
        }
        let sqrt: Vec<Tensor> = states
            .iter()
            .zip(&group)
            .map(|(s, &j)| {
                let _s = runtime::scope(&live[j].1.name);
                s.1.sqrt()
            })
            .collect();
        for s in &sqrt {
            s.div_scalar_(bc2_sqrt);
            s.add_scalar_(c.eps);
        }
        for ((m, s), p) in states.iter().map(|s| &s.0).zip(&sqrt).zip(&params) {
            p.addcdiv_(m, s, -step_size);
        }
        // `exp_avg_sq_sqrt = ...` rebinds only now: the previous group's list dies here.
        exp_avg_sq_sqrt = sqrt;
    }
    drop(exp_avg_sq_sqrt);
}
