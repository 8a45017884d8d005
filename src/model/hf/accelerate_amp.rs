//! accelerate's mixed-precision forward: what the Trainer's `bf16=True`/`fp16=True` (or
//! `Accelerator(mixed_precision=...)`) makes of the model it prepares. `prepare_model`
//! (accelerate 1.15, under `if self.native_amp:`) replaces the model's forward by
//! `convert_outputs_to_fp32(autocast(forward))`, so the autocast region is the forward itself
//! and the output comes back with its fp16/bf16 tensors copied to fp32. The copies live as long
//! as the output: until compute_loss drops it (`loss = outputs["loss"]`; returned alone).
//! `--autocast-by torch` is a loop's own `with torch.autocast(...)`, without the conversion.
//! The measured ground truth is tests/fixtures/hf_grid/accelerate_amp.json.
use super::modeling::Output;
use crate::engine::runtime::{py_frame, scope};
use crate::engine::{DType, Tensor};
use crate::model::py::lib_frames;

/// The accelerate release whose `convert_to_fp32` this follows.
pub const ACCELERATE_VERSION: &str = "1.15.0";

/// `convert_to_fp32(output)`: `recursively_apply` walks the ModelOutput in its field order
/// (loss, aux_loss, logits, past_key_values, hidden_states, attentions, router_logits) and
/// builds a new output with `.float()` of every fp16/bf16 tensor (a copy with a ToCopyBackward
/// node); the cache is passed through as it is. The old output dies once the new one exists,
/// and with it the low-precision tensors nothing else holds (autograd saves neither the logits
/// nor the routers' logits: the loss and the aux loss read fp32 copies of them).
pub fn convert_outputs_to_fp32(out: Output) -> Output {
    let _s = scope("convert_outputs_to_fp32");
    let _f = py_frame(&lib_frames::ACCELERATE_CONVERT_TO_FP32);
    let float = |t: &Tensor| if matches!(t.dtype(), DType::BF16 | DType::F16) { t.to_dtype(DType::F32) } else { t.clone() };
    let Output { logits, loss, cache, router_logits, aux_loss } = out;
    // The new output's fields, in the walk's order; the cache is passed through.
    let (loss_f, aux_f, logits_f) = (loss.as_ref().map(float), aux_loss.as_ref().map(float), float(&logits));
    let router_f: Vec<Tensor> = router_logits.iter().map(float).collect();
    // The old output's references go in its field order.
    drop((loss, aux_loss, logits, router_logits));
    Output { logits: logits_f, loss: loss_f, cache, router_logits: router_f, aux_loss: aux_f }
}
