//! The Trainer's `adafactor`: `transformers.optimization.Adafactor(params, lr=lr,
//! scale_parameter=False, relative_step=False)` (transformers 5.23), so the defaults
//! eps (1e-30, 1e-3), clip_threshold 1.0, decay_rate -0.8, beta1 None (no `exp_avg`). Its
//! `step` loops over the parameters one at a time:
//! - `grad = p.grad`, then `grad = grad.float()` for bf16/fp16 (an fp32 copy);
//! - first step: the state in fp32 (`torch.zeros(...).to(grad)`): `exp_avg_sq_row` (shape[:-1])
//!   and `exp_avg_sq_col` (shape[:-2] + shape[-1:]) for ≥ 2-D parameters, else `exp_avg_sq`;
//! - `p_data_fp32 = p`, `.float()` for bf16/fp16 (an fp32 copy);
//! - `state["RMS"] = norm(p_data_fp32) / sqrt(numel)`: a 0-d fp32 tensor kept as state (a 512 B
//!   block on CUDA), replacing the previous step's;
//! - `update = grad**2 + eps0` (the square dies once the sum exists);
//! - factored: `row.mul_(β₂ₜ).add_(update.mean(-1))`, the same for `col` with `mean(-2)` (each
//!   mean dies after its add_), then `update = _approx_sq_grad(row, col)`:
//!   `(row / row.mean(-1, keepdim)).rsqrt_()` (the mean dies after the division),
//!   `col.unsqueeze(-2).rsqrt()`, their product (full size); both factors die on return, then
//!   the previous `update` as it is rebound; `update.mul_(grad)`.
//!   1-D: `exp_avg_sq.mul_(β₂ₜ).add_(update)`, `update = exp_avg_sq.rsqrt().mul_(grad)`;
//! - `update.div_((rms(update) / clip_threshold).clamp_(min=1))` (0-d temporaries),
//!   `update.mul_(lr)`, weight decay in place, `p_data_fp32.add_(-update)` (the negation a
//!   full-size temporary), `p.copy_(p_data_fp32)` for bf16/fp16.
//!
//! `grad`, `p_data_fp32` and `update` are Python locals: each stays bound into the next
//! parameter's iteration until rebound there (`grad` first, `p_data_fp32` after the state,
//! `update` once the next `grad**2 + eps0` exists), and the last ones die when `step` returns.
use super::{keep_as_state, Live, OptimConfig, ParamState};
use crate::engine::{runtime, DType, Tensor};
use crate::record::Category;

/// `eps[0]`, added to the squared gradient.
const EPS0: f64 = 1e-30;
const CLIP_THRESHOLD: f64 = 1.0;
const DECAY_RATE: f64 = -0.8;

fn half(d: DType) -> bool {
    matches!(d, DType::BF16 | DType::F16)
}

/// `_rms(t)`: `t.norm(2) / numel ** 0.5`, the norm dying once the quotient exists.
fn rms(t: &Tensor) -> Tensor {
    let n = t.vector_norm();
    n.div_scalar((t.numel() as f64).sqrt())
}

/// `_approx_sq_grad(row, col)`: rsqrt(row / mean(row)) ⊗ rsqrt(col), full size.
fn approx_sq_grad(row: &Tensor, col: &Tensor) -> Tensor {
    let r = {
        let mean = row.mean_dim(-1, true);
        row.div(&mean)
    };
    r.rsqrt_();
    let r = r.unsqueeze(-1);
    let c = col.unsqueeze(-2).rsqrt();
    r.mul(&c)
}

/// `steps`: the step count every live parameter's `state["step"]` holds (all of them have a
/// gradient at every step here).
pub(super) fn step(c: &OptimConfig, state: &mut [Option<ParamState>], steps: u64, live: &Live<'_>) {
    let beta2t = 1.0 - (steps as f64).powf(DECAY_RATE);
    let mut grad: Option<Tensor> = None;
    let mut p_data_fp32: Option<Tensor> = None;
    let mut update: Option<Tensor> = None;
    for (i, p, g) in live {
        let _s = runtime::scope(&p.name);
        grad = Some(g.clone());
        if half(g.dtype()) {
            grad = Some(g.to_dtype(DType::F32));
        }
        let gr = grad.as_ref().expect("bound above");
        let shape = gr.shape().to_vec();
        let factored = shape.len() >= 2;
        if state[*i].is_none() {
            let _c = runtime::category(Category::OptimizerState);
            let (m, v) = if factored {
                let r = shape.len();
                let col: Vec<usize> = shape[..r - 2].iter().chain(&shape[r - 1..]).copied().collect();
                (Tensor::zeros(&shape[..r - 1], DType::F32, gr.device()), Some(Tensor::zeros(&col, DType::F32, gr.device())))
            } else {
                (gr.zeros_like(), None)
            };
            state[*i] = Some(ParamState { m, v, step: None, extra: Vec::new() });
        }
        let st = state[*i].as_mut().expect("initialised above");
        p_data_fp32 = Some(p.tensor.clone());
        if half(p.tensor.dtype()) {
            p_data_fp32 = Some(p.tensor.to_dtype(DType::F32));
        }
        let pf = p_data_fp32.as_ref().expect("bound above");
        let r = rms(pf);
        keep_as_state(&r);
        st.extra = vec![r];
        let u = {
            let sq = gr.pow_scalar(2.0);
            sq.add_scalar(EPS0)
        };
        update = Some(u);
        let u = update.as_ref().expect("bound above");
        let new = if factored {
            let (row, col) = (&st.m, st.v.as_ref().expect("factored state has a column"));
            for (avg, dim) in [(row, -1), (col, -2)] {
                let mean = u.mean_dim(dim, false);
                avg.mul_scalar_(beta2t);
                avg.add_scaled_(&mean, 1.0 - beta2t);
            }
            approx_sq_grad(row, col)
        } else {
            st.m.mul_scalar_(beta2t);
            st.m.add_scaled_(u, 1.0 - beta2t);
            st.m.rsqrt()
        };
        new.mul_(gr);
        update = Some(new);
        let u = update.as_ref().expect("bound above");
        let denom = rms(u).div_scalar(CLIP_THRESHOLD);
        denom.clamp_min_(1.0);
        u.div_(&denom);
        drop(denom);
        u.mul_scalar_(c.lr);
        if c.weight_decay != 0.0 {
            // p_data_fp32.add_(p_data_fp32, alpha=-wd·lr)
            pf.mul_scalar_(1.0 - c.weight_decay * c.lr);
        }
        {
            let neg = u.neg();
            pf.add_(&neg);
        }
        if half(p.tensor.dtype()) {
            p.tensor.copy_(pf);
        }
    }
    drop((grad, p_data_fp32, update));
}
