//! The CS336 course AdamW: `m = state.get("m", torch.zeros_like(grad))` (the default is built
//! every step), out-of-place moment updates, then the update and the decay.
use super::{keep_as_state, Live, OptimConfig, ParamState};
use crate::engine::runtime;

pub(super) fn step(c: &OptimConfig, state: &mut [Option<ParamState>], steps: u64, live: &Live<'_>) {
    let _f = crate::engine::runtime::py_frame(&crate::model::py::cs336::ADAMW_STEP);
    let t = steps as f64;
    for (i, p, grad) in live {
        let i = *i;
        let _s = runtime::scope(&p.name);
        // m = state.get("m", torch.zeros_like(grad)): the default is built every step.
        let default_m = grad.zeros_like();
        let m = match &state[i] {
            Some(s) => s.m.clone(),
            None => default_m.clone(),
        };
        drop(default_m);
        let default_v = grad.zeros_like();
        let v = match &state[i] {
            Some(ParamState { v: Some(v), .. }) => v.clone(),
            _ => default_v.clone(),
        };
        drop(default_v);
        // Python frees each unnamed intermediate as soon as the op consuming it returns;
        // Rust would keep a statement's temporaries to its end, so chains longer than
        // two ops are split: `beta2 * v + (1 - beta2) * grad**2` has grad**2 gone
        // before the add, `alpha_t * m / (torch.sqrt(v) + eps)` the sqrt before the div.
        let m_new = m.mul_scalar(c.beta1).add(&grad.mul_scalar(1.0 - c.beta1));
        let v_new = {
            let decayed = v.mul_scalar(c.beta2);
            let sq = grad.pow_scalar(2.0).mul_scalar(1.0 - c.beta2);
            decayed.add(&sq)
        };
        drop((m, v));
        let alpha_t = c.lr * (1.0 - c.beta2.powf(t)).sqrt() / (1.0 - c.beta1.powf(t));
        let upd = {
            let num = m_new.mul_scalar(alpha_t);
            let den = v_new.sqrt().add_scalar(c.eps);
            num.div(&den)
        };
        p.tensor.sub_(&upd);
        drop(upd);
        let decay = p.tensor.mul_scalar(c.lr * c.weight_decay);
        p.tensor.sub_(&decay);
        drop(decay);
        keep_as_state(&m_new);
        keep_as_state(&v_new);
        state[i] = Some(ParamState { m: m_new, v: Some(v_new), step: None, extra: Vec::new() });
    }
}
