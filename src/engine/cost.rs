//! What each kernel costs: FLOPs by kind and bytes moved, from its name, inputs and output.
//! Matmul FLOPs are exact (2·m·n·k, set by the product itself); the elementwise factors
//! below count each arithmetic step of a fused op once per element (exp counts 1).
use super::{runtime, DType, Device, Tensor};
use crate::record::compute::{OpKind, OpRecord};

/// FLOPs per output element of elementwise and fused ops (1 when not listed).
fn elementwise_factor(op: &str) -> u64 {
    match op {
        // max, subtract, exp, sum, scale (log_softmax: subtract the log-sum instead)
        "softmax" | "log_softmax" => 5,
        // dot(g, y) (multiply + add), subtract, multiply
        "_softmax_backward_data" | "_log_softmax_backward_data" => 4,
        // x · 1/(1 + exp(−x)): negate, exp, add, divide, multiply
        "silu" => 5,
        "silu_backward" => 8,
        "sigmoid" => 4,
        "sigmoid_backward" => 3,
        // x³, scale, add, scale, tanh, add, scale, multiply
        "gelu" => 8,
        "gelu_backward" => 14,
        "tanh" => 1,
        "tanh_backward" => 3,
        _ => 1,
    }
}

fn kind_of(op: &str) -> OpKind {
    match op {
        "sum" | "mean" | "max" | "nll_loss" | "embedding_dense_backward" => OpKind::Reduction,
        "clone" | "_to_copy" | "copy_" | "cat" | "stack" | "embedding" | "gather" | "scatter" | "repeat_interleave" | "tensor"
        | "arange" | "full" | "zeros" | "empty" | "triu" | "nll_loss_backward" | "matmul_widen" => OpKind::Copy,
        // Their exact FLOPs are recorded by the op itself (ops/attention.rs), as `product` does.
        "_scaled_dot_product_flash_attention" | "_scaled_dot_product_flash_attention_backward" => OpKind::Matmul,
        _ => OpKind::Elementwise,
    }
}

/// Bytes a kernel reads from a tensor: each distinct element once (broadcast dims, with
/// stride 0, are not re-read).
pub(crate) fn read_bytes(t: &Tensor) -> u64 {
    let l = t.layout();
    let distinct: usize = l.shape.iter().zip(&l.strides).filter(|(_, &s)| s != 0).map(|(&n, _)| n).product();
    (distinct * t.dtype().size()) as u64
}

/// The cost of an op that produced `out_numel` elements of `out_dtype` from `inputs`.
pub(crate) fn classify(op: &'static str, inputs: &[&Tensor], out_numel: usize, out_dtype: DType) -> (OpKind, u64, u64, u64) {
    let kind = kind_of(op);
    let read: u64 = inputs.iter().map(|t| read_bytes(t)).sum();
    let written = (out_numel * out_dtype.size()) as u64;
    let flops = match kind {
        OpKind::Elementwise => out_numel as u64 * elementwise_factor(op),
        OpKind::Reduction => match op {
            "nll_loss" => inputs.get(1).map_or(0, |t| t.numel() as u64),
            _ => inputs.first().map_or(0, |t| t.numel() as u64),
        },
        OpKind::Copy | OpKind::Matmul => 0,
    };
    (kind, flops, read, written)
}

/// An op being timed: opened before its output is allocated, so the allocation falls
/// inside the op's span in the chrome trace.
pub(crate) struct Span {
    start_us: Option<f64>,
    t0: Option<crate::clock::Instant>,
    /// The op's frame in the compute log (its memory is charged there while it runs).
    depth: usize,
}

pub(crate) fn begin() -> Span {
    let (start_us, depth) = runtime::with(|rt| rt.compute.as_mut().map(|c| (Some(c.now_us()), c.open_op())).unwrap_or((None, 0)));
    let t0 = (start_us.is_some() || runtime::op_timing_enabled()).then(crate::clock::Instant::now);
    Span { start_us, t0, depth }
}

/// Close a span: per-op timing, and when a compute log is on, the op's record. `cost` is
/// only evaluated when recording.
pub(crate) fn end(span: Span, device: Device, name: &'static str, cost: impl FnOnce() -> (OpKind, u64, u64, u64, u8)) {
    let dur = span.t0.map_or(0.0, |t| t.elapsed().as_secs_f64());
    if device == Device::Cpu && runtime::op_timing_enabled() {
        runtime::record_op_time(name, dur);
    }
    if let Some(start_us) = span.start_us {
        let (kind, flops, bytes_read, bytes_written, elem_bytes) = cost();
        runtime::with(|rt| {
            let scope = rt.scope().clone();
            let phase = rt.phase;
            if let Some(c) = rt.compute.as_mut() {
                // The log's own clock, so the op's memory events fall inside [start, end].
                let dur_us = if device == Device::Cpu { c.now_us() - start_us } else { 0.0 };
                let (alloc_bytes, self_alloc_bytes) = c.close_op(span.depth);
                c.ops.push(OpRecord { name, kind, scope, phase, flops, bytes_read, bytes_written, elem_bytes, start_us, dur_us, alloc_bytes, self_alloc_bytes });
            }
        });
    }
}

/// Run `kernel` (cpu only) inside a span.
pub(crate) fn timed<T>(device: Device, name: &'static str, cost: impl FnOnce() -> (OpKind, u64, u64, u64, u8), kernel: impl FnOnce() -> T) -> Option<T> {
    let span = begin();
    let out = (device == Device::Cpu).then(kernel);
    end(span, device, name, cost);
    out
}

#[cfg(test)]
mod tests {
    use super::super::{runtime, DType, Device, Tensor};
    use crate::record::compute::OpKind;

    /// Memory is charged as torch's profiler charges it: an op's total includes the ops it
    /// calls, its self memory only what it allocated and freed itself. A bf16 product on cpu
    /// calls `matmul_widen` three times (f32 copies of both operands and the f32 result) and
    /// frees those copies itself before it ends.
    #[test]
    fn an_ops_memory_includes_the_ops_it_calls_and_its_self_memory_leaves_them_out() {
        runtime::reset();
        let a = Tensor::full(&[64, 64], 1.0, DType::BF16, Device::Cpu);
        let b = Tensor::full(&[64, 64], 1.0, DType::BF16, Device::Cpu);
        runtime::start_compute_log(false);
        let c = a.matmul(&b);
        let log = runtime::take_compute_log().unwrap();
        let (out, wide) = (64 * 64 * 2, 64 * 64 * 4);
        let widen: Vec<_> = log.ops.iter().filter(|o| o.name == "matmul_widen").collect();
        assert_eq!(widen.len(), 3, "{:?}", log.ops.iter().map(|o| o.name).collect::<Vec<_>>());
        for w in &widen {
            assert_eq!((w.alloc_bytes, w.self_alloc_bytes), (wide, wide), "a leaf op: self = total");
        }
        let mm = log.ops.iter().find(|o| o.kind == OpKind::Matmul).unwrap();
        assert_eq!(mm.alloc_bytes, out, "with its children: only the output is left");
        assert_eq!(mm.self_alloc_bytes, out - 3 * wide, "itself: the output, less the three copies it freed");
        assert_eq!(log.outside_ops, (0, 0));
        // What runs outside any op goes to the [memory] row.
        runtime::start_compute_log(false);
        drop(c);
        let log = runtime::take_compute_log().unwrap();
        assert_eq!(log.outside_ops, (1, -out));
        assert!(log.ops.is_empty());
    }
}
