//! `torch.optim.AdamW(foreach=False)`: `_single_tensor_adamw`, a parameter at a time:
//! `param.mul_(1 - lr*wd)` (when wd != 0), `exp_avg.lerp_(grad, 1-beta1)`,
//! `exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)`,
//! `denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)` (the sqrt temporary and the
//! quotient coexist, then the sqrt dies), `param.addcdiv_(exp_avg, denom, value=-step_size)`.
//! `denom` is rebound only once the next parameter's exists, so the previous one lives
//! through the next parameter's sqrt and division; the last dies when `step` returns.
use super::{bias_corrections, decay_and_update_moments, init_adamw_state, moments, Live, OptimConfig, ParamState};
use crate::engine::{runtime, Tensor};

pub(super) fn step(c: &OptimConfig, state: &mut [Option<ParamState>], steps: u64, live: &Live<'_>) {
    init_adamw_state(state, live, false);
    let all = moments(state, live);
    let (bc2_sqrt, step_size) = bias_corrections(c, steps);
    let mut denom: Option<Tensor> = None;
    for ((_, p, grad), (m, v)) in live.iter().zip(&all) {
        let _s = runtime::scope(&p.name);
        decay_and_update_moments(c, &p.tensor, m, v, grad);
        let d = {
            let sqrt = v.sqrt();
            sqrt.div_scalar(bc2_sqrt)
        };
        d.add_scalar_(c.eps);
        let d = denom.insert(d);
        p.tensor.addcdiv_(m, d, -step_size);
    }
    drop(denom);
}
