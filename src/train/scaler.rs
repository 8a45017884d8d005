//! `torch.amp.GradScaler` for fp16 training: the loss is multiplied by a scale before
//! backward; before the optimizer step the gradients are unscaled in place and checked for
//! inf/NaN; a step with non-finite gradients is skipped and the scale backs off, otherwise
//! it grows after `growth_interval` clean steps. Its tensors are PyTorch's: a 0-d fp32 scale
//! and an int32 growth tracker made at the first `scale()`, a 0-d `found_inf` and the
//! inverse scale per step.
use crate::engine::{DType, Device, Tensor};
use crate::model::Param;

pub struct GradScaler {
    scale: Option<Tensor>,
    growth_tracker: Option<Tensor>,
    /// Host copies of the two (the device tensors hold no values on meta).
    scale_value: f64,
    clean_steps: u64,
    pub init_scale: f64,
    pub growth_factor: f64,
    pub backoff_factor: f64,
    pub growth_interval: u64,
    /// Steps skipped because a gradient was inf or NaN.
    pub skipped_steps: u64,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler {
            scale: None,
            growth_tracker: None,
            scale_value: 65536.0,
            clean_steps: 0,
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            skipped_steps: 0,
        }
    }
}

impl GradScaler {
    /// A scaler with PyTorch's defaults but its own growth interval.
    pub fn with_growth_interval(growth_interval: u64) -> GradScaler {
        GradScaler { growth_interval, ..GradScaler::default() }
    }

    pub fn scale_value(&self) -> f64 {
        self.scale_value
    }

    /// `scaler.scale(loss)`: a new tensor `loss * scale` (the scale made lazily on first use).
    #[track_caller]
    pub fn scale(&mut self, loss: &Tensor) -> Tensor {
        if self.scale.is_none() {
            self.scale = Some(Tensor::full(&[], self.init_scale, DType::F32, loss.device()));
            // `torch.full((), 0, dtype=torch.int32)`: 4 requested bytes (measured on an H200).
            self.growth_tracker = Some(Tensor::zeros_op(&[], DType::I32, loss.device(), "full"));
            self.scale_value = self.init_scale;
        }
        loss.mul(self.scale.as_ref().unwrap())
    }

    /// `scaler.step(optimizer)` then `scaler.update()`: unscale the gradients in place, and
    /// run `optimizer_step` only if they are all finite. Returns whether the step ran.
    pub fn step_and_update(&mut self, params: &[Param], optimizer_step: impl FnOnce()) -> bool {
        let device = params.first().map_or(Device::Meta, |p| p.tensor.device());
        // inv_scale = self._scale.double().reciprocal().float(); found_inf = full((), 0.0)
        let inv_scale = {
            let s = self.scale.as_ref().expect("scale() ran before step()");
            let d = s.to_dtype(DType::F64);
            let r = d.reciprocal();
            drop(d);
            r.to_dtype(DType::F32)
        };
        let found_inf = Tensor::full(&[], 0.0, DType::F32, device);
        // _amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        let mut non_finite = false;
        for p in params {
            if let Some(g) = p.tensor.grad() {
                if device == Device::Cpu {
                    non_finite |= crate::engine::cpu::with_slice::<f32, _>(&g, |v| v.iter().any(|x| !x.is_finite()));
                }
                g.mul_scalar_(1.0 / self.scale_value);
            }
        }
        drop(inv_scale);
        let ran = if non_finite {
            self.skipped_steps += 1;
            false
        } else {
            optimizer_step();
            true
        };
        // _amp_update_scale_(scale, growth_tracker, found_inf, …) works in place.
        if non_finite {
            self.scale_value *= self.backoff_factor;
            self.clean_steps = 0;
        } else {
            self.clean_steps += 1;
            if self.clean_steps == self.growth_interval {
                self.scale_value *= self.growth_factor;
                self.clean_steps = 0;
            }
        }
        if let Some(s) = &self.scale {
            s.fill_(self.scale_value);
        }
        // The growth tracker's count is kept on the host (clean_steps).
        drop(found_inf);
        ran
    }
}
