//! DoRA as peft 0.21.2 runs it (`LoraConfig(use_dora=True)`: `variants.DoraLinearVariant` and
//! `tuners/lora/dora.py`'s `DoraLinearLayer`), over a dense `nn.Linear` or bitsandbytes'
//! `Linear4bit`.
//!
//! Per adapted projection a trainable magnitude vector (`lora_magnitude_vector`, out features,
//! in the adapters' dtype: `autocast_adapter_dtype` casts it to fp32 with them). Every forward
//! rebuilds the adapter's dense update and the weight's column norm:
//! - `lora_weight = lora_B(lora_A(eye(in))).T` (in × in identity, in × r, in × out; with
//!   autograd on, the eye and the A output stay saved by the graph until the layer returns);
//! - `weight = dequantize_module_weight(base_layer).to(x.dtype)` (a dense weight's cast copy;
//!   a 4-bit weight is dequantized to its load dtype, then cast);
//! - `weight_norm = linalg.norm(weight + scaling * lora_weight.detach(), dim=1).detach()`;
//! - `mag_norm_scale = (magnitude / weight_norm).view(1, -1)`;
//! - `lora_result = lora_B(lora_A(x))`;
//! - the base result reused (minus the bias) when dropout is the identity or in eval mode,
//!   else `F.linear(dropout(x), weight)` recomputed (which saves the cast weight);
//! - `(mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling`.
use crate::engine::ops::quant::Packed4bit;
use crate::engine::{runtime, Tensor};
use crate::model::lora::{Adapter, LoraConfig};

/// The base layer as `dequantize_module_weight` sees it.
#[derive(Clone, Copy)]
pub enum BaseWeight<'a> {
    /// An `nn.Linear`'s weight (returned as is).
    Dense(&'a Tensor),
    /// A `Linear4bit`'s storage (`bnb.functional.dequantize_4bit` per forward).
    Packed(&'a Packed4bit),
}

impl BaseWeight<'_> {
    fn dequantize(self) -> Tensor {
        match self {
            BaseWeight::Dense(w) => w.clone(),
            BaseWeight::Packed(p) => p.dequantize_4bit(),
        }
    }
}

/// `DoraLinearVariant.forward`: `result + DoraLinearLayer(dropout(x) or x, base_result)`, with
/// `x` already cast to the adapters' dtype. Returns the sum (not yet cast back).
pub fn variant_forward(cfg: &LoraConfig, adapter: &Adapter, x: &Tensor, result: &Tensor, training: bool, base: BaseWeight, bias: Option<&Tensor>) -> Tensor {
    let magnitude = adapter.magnitude.as_ref().expect("a DoRA adapter has its magnitude vector");
    let _s = runtime::scope("lora_magnitude_vector");
    // `isinstance(dropout, nn.Identity) or not module.training`: the base result is reused;
    // otherwise x is rebound to the dropout's output (a local of the variant) and the base
    // linear is recomputed on it.
    let (x, base_result) = if training && cfg.dropout > 0.0 { (x.dropout(cfg.dropout, cfg.dropout_kernel), None) } else { (x.clone(), Some(result.clone())) };
    let dora = layer_forward(cfg, adapter, magnitude, &x, base, bias, base_result);
    let sum = result.add(&dora);
    drop(dora);
    drop(x);
    sum
}

/// `DoraLinearLayer.forward`.
fn layer_forward(cfg: &LoraConfig, adapter: &Adapter, magnitude: &Tensor, x: &Tensor, base: BaseWeight, bias: Option<&Tensor>, base_result: Option<Tensor>) -> Tensor {
    let _f = runtime::py_frame(&crate::model::py::lib_frames::PEFT_DORA_LINEAR);
    let scaling = cfg.scaling();
    // get_lora_weight: through the modules (FSDP-safe), not `B @ A`.
    let lora_weight = {
        let eye = Tensor::eye(adapter.a.dim(1), adapter.a.dtype(), adapter.a.device());
        let ae = crate::model::linear("lora_A", &eye, &adapter.a);
        let be = crate::model::linear("lora_B", &ae, &adapter.b);
        drop(ae);
        drop(eye);
        be.t()
    };
    let lora_weight = if lora_weight.dtype() == x.dtype() { lora_weight } else { lora_weight.to_dtype(x.dtype()) };
    // `weight = weight.to(x.dtype)`: a 4-bit weight's dequantized tensor dies once its cast
    // exists.
    let weight = {
        let w = base.dequantize();
        if w.dtype() == x.dtype() { w } else { w.to_dtype(x.dtype()) }
    };
    // get_weight_norm: `weight + scaling * lora_weight` (the product a temporary, the sum a
    // local until it returns), its row norms.
    let weight_norm = {
        let scaled = lora_weight.detach().mul_scalar(scaling);
        let sum = weight.add(&scaled);
        drop(scaled);
        let n = sum.vector_norm_dim(1);
        drop(sum);
        n
    };
    let weight_norm = weight_norm.detach();
    let out_features = weight_norm.numel();
    let mag_norm_scale = magnitude.div(&weight_norm).view(&[1, out_features]);
    let lora_result = {
        let a = crate::model::linear("lora_A", x, &adapter.a);
        let r = crate::model::linear("lora_B", &a, &adapter.b);
        drop(a);
        r
    };
    let base_result = match (base_result, bias) {
        (Some(r), Some(b)) => r.sub(b),
        (Some(r), None) => r,
        // `F.linear(x, weight)`, bias-less: it saves the cast weight for x's gradient.
        (None, _) => crate::model::linear("weight", x, &weight),
    };
    // `(mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling`, each
    // intermediate freed once consumed (`- 1` is sub(Tensor, Scalar): nothing saved).
    let out = {
        let t1 = mag_norm_scale.add_scalar(-1.0);
        let t2 = t1.mul(&base_result);
        drop(t1);
        let t3 = mag_norm_scale.mul(&lora_result);
        let t4 = t3.mul_scalar(scaling);
        drop(t3);
        let out = t2.add(&t4);
        drop((t2, t4));
        out
    };
    // The locals die at return, in the order they were bound (the lora weight takes its
    // graph, and with it the eye and the A output, along).
    drop(lora_weight);
    drop(weight);
    drop(weight_norm);
    drop(mag_norm_scale);
    drop(lora_result);
    drop(base_result);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{DType, Device};

    fn t(v: &[f64], shape: &[usize]) -> Tensor {
        Tensor::from_f64(v, shape, DType::F32, Device::Cpu)
    }

    /// With lora_B zero the DoRA term is `(magnitude / ‖W‖ - 1) · base`: nothing at peft's init
    /// (magnitude = the row norms), the base output again for a doubled magnitude. Checks the
    /// eye, the dense update and the row norms on cpu, the base reused and recomputed.
    #[test]
    fn the_dora_term_scales_the_base_output_by_magnitude_over_the_row_norm() {
        let w = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        let adapter = Adapter { a: t(&[0.5, -1.0, 2.0], &[1, 3]), b: t(&[0.0, 0.0], &[2, 1]), magnitude: None };
        let x = t(&[1.0, 0.0, -1.0, 2.0, 1.0, 0.0], &[2, 3]);
        let result = x.matmul(&w.t());
        let base = result.to_vec_f64();
        let norms = [14f64.sqrt(), 77f64.sqrt()];
        let cfg = LoraConfig { r: 1, alpha: 2.0, dropout: 0.0, targets: vec![], target_parameters: vec![], gate_up_doubled: false, dropout_kernel: Default::default(), bias: Default::default(), use_dora: true, modules_to_save: Vec::new(), compute_dtype: None };
        for (scale, want) in [(1.0, 1.0), (2.0, 2.0)] {
            let m = t(&[scale * norms[0], scale * norms[1]], &[2]);
            let adapter = Adapter { magnitude: Some(m.clone()), ..adapter.clone() };
            let out = variant_forward(&cfg, &adapter, &x, &result, false, BaseWeight::Dense(&w), None).to_vec_f64();
            // The dropout path's recomputed `F.linear(x, weight)` (here on the undropped x).
            let term = layer_forward(&cfg, &adapter, &m, &x, BaseWeight::Dense(&w), None, None).to_vec_f64();
            for ((o, b), d) in out.iter().zip(&base).zip(&term) {
                assert!((o - want * b).abs() < 1e-5, "{out:?} vs {want} × {base:?}");
                assert!((b + d - want * b).abs() < 1e-5, "{term:?}");
            }
        }
    }
}
