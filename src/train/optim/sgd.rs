//! `torch.optim.SGD()` on CUDA: `_multi_tensor_sgd` per (device, dtype) group. Weight decay
//! (coupled) makes `device_grads = _foreach_add(grads, params, alpha=wd)`, a new tensor per
//! parameter; with momentum the first step clones them into the buffers (state) and later
//! steps update the buffers in place, and `device_grads = bufs` drops the decayed copies;
//! then `_foreach_add_(params, device_grads, alpha=-lr)`. A group's decayed copies stay bound
//! until the next group's iteration rebinds `device_grads` (or `step` returns).
use super::{group_by_dtype, Live, OptimConfig, ParamState};
use crate::engine::{runtime, Tensor};
use crate::record::Category;

pub(super) fn step(c: &OptimConfig, state: &mut [Option<ParamState>], live: &Live<'_>) {
    let mut device_grads: Vec<Tensor> = Vec::new();
    for group in group_by_dtype(live.iter().map(|(_, p, _)| p.tensor.dtype())) {
        // `device_grads = cast(list[Tensor], device_grads_)`: the previous group's list goes.
        device_grads = group.iter().map(|&j| live[j].2.clone()).collect();
        if c.weight_decay != 0.0 {
            device_grads = group
                .iter()
                .zip(&device_grads)
                .map(|(&j, g)| {
                    let _s = runtime::scope(&live[j].1.name);
                    let d = g.clone_contiguous();
                    d.add_scaled_(&live[j].1.tensor, c.weight_decay);
                    d
                })
                .collect();
        }
        if c.momentum != 0.0 {
            let bufs: Vec<Tensor> = group
                .iter()
                .zip(&device_grads)
                .map(|(&j, g)| {
                    let (i, p, _) = &live[j];
                    match &state[*i] {
                        Some(s) => {
                            s.m.mul_scalar_(c.momentum);
                            s.m.add_(g);
                            s.m.clone()
                        }
                        None => {
                            let _s = runtime::scope(&p.name);
                            let _c = runtime::category(Category::OptimizerState);
                            let b = g.clone_contiguous();
                            state[*i] = Some(ParamState { m: b.clone(), v: None, step: None, extra: Vec::new() });
                            b
                        }
                    }
                })
                .collect();
            device_grads = bufs;
        }
        for (&j, g) in group.iter().zip(&device_grads) {
            live[j].1.tensor.add_scaled_(g, -c.lr);
        }
    }
    drop(device_grads);
}
