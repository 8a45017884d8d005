//! The ops gpt-oss's experts add to the MoE ones (transformers 5.23's `GptOssExperts` and the
//! biased paths of integrations/moe.py): the clamps of its SwiGLU, with their backward, and
//! the in-place bias add on a grouped matmul's output. Meta only, as the other MoE ops.
use crate::engine::autograd::{attach, needs_grad, save};
use crate::engine::dtype::DType;
use crate::engine::storage::Buffer;
use crate::engine::tensor::Tensor;

fn meta_only(op: &str) -> Buffer {
    panic!("{op}: mixture-of-experts ops run on meta only (the options refuse --device cpu for them)")
}

impl Tensor {
    /// `self.clamp(min=…, max=…)` (at least one bound): a new tensor (contiguous for a strided
    /// slice). ClampBackward1 saves the input; its backward is `where(self <= max, grad, 0)`
    /// for one bound (a bool mask, then the result) and `where((self >= min).logical_and_(self
    /// <= max), grad, 0)` for both (two masks, the second dying after the in-place and).
    #[track_caller]
    pub fn clamp_bounds(&self, min: Option<f64>, max: Option<f64>) -> Tensor {
        assert!(min.is_some() || max.is_some(), "clamp needs a bound");
        let out = Tensor::build(self.device(), self.dtype(), self.shape(), "clamp", &[self], || meta_only("clamp"));
        if needs_grad(&[self]) {
            let x = save(self);
            let both = min.is_some() && max.is_some();
            return attach(out, "ClampBackward1", &[self], Box::new(move |g| {
                let x = x.unpack();
                let mask = Tensor::build(g.device(), DType::Bool, x.shape(), "ge", &[&x], || meta_only("clamp backward"));
                if both {
                    drop(Tensor::build(g.device(), DType::Bool, x.shape(), "le", &[&x], || meta_only("clamp backward")));
                }
                let gi = Tensor::build(g.device(), g.dtype(), g.shape(), "where", &[&g, &mask], || meta_only("clamp backward"));
                drop(mask);
                vec![Some(gi)]
            }));
        }
        out
    }

    /// `self.add_(other)` of a same-shaped tensor, in place, under autograd: nothing new; the
    /// returned handle carries AddBackward0 (no saved tensors: the gradient passes unchanged to
    /// both, the same tensor).
    #[track_caller]
    pub fn add_same_(&self, other: &Tensor) -> Tensor {
        assert_eq!(self.shape(), other.shape(), "add_same_: shapes");
        assert_eq!(self.device(), crate::engine::storage::Device::Meta, "add_same_: mixture-of-experts ops run on meta only");
        let out = Tensor::from_parts(self.storage().clone(), self.layout().clone());
        if needs_grad(&[self, other]) {
            let (a, b, other_dt) = (self.requires_grad(), other.requires_grad(), other.dtype());
            // validate_outputs casts `other`'s gradient to its type where the two differ.
            return attach(out, "AddBackward0", &[self, other], Box::new(move |g| vec![a.then(|| g.clone()), b.then(|| g.to_dtype(other_dt))]));
        }
        out
    }
}

impl Tensor {
    /// `view.add_(other)` in place on `view`, a view of `base` (`torch.bmm(...).squeeze(1)` in
    /// `_batched_linear`), under autograd: nothing new in the forward. The view's history is
    /// rewritten as PyTorch does for an in-place op on a view of a CPU/CUDA tensor: the view's
    /// node becomes AsStridedBackward0 (its backward: zeros of the base's size, the gradient
    /// copied in) over the base's CopySlices (its backward: `result = empty_strided(base)` with
    /// the gradient copied in, then a contiguous clone of the view's slice that AddBackward0
    /// passes on unchanged: the clone is `other`'s gradient, `result` the base's).
    #[track_caller]
    pub fn add_on_view_(&self, base: &Tensor, other: &Tensor) -> Tensor {
        assert_eq!(self.shape(), other.shape(), "add_on_view_: shapes");
        assert!(self.same_storage(base), "add_on_view_: a view of the base");
        assert_eq!(self.device(), crate::engine::storage::Device::Meta, "add_on_view_: mixture-of-experts ops run on meta only");
        let view = Tensor::from_parts(self.storage().clone(), self.layout().clone());
        if !needs_grad(&[base, other]) {
            return view;
        }
        let (base_shape, view_shape, dt) = (base.shape().to_vec(), self.shape().to_vec(), base.dtype());
        let (need_other, other_dt) = (other.requires_grad(), other.dtype());
        let copy_slices = {
            let (base_shape, view_shape) = (base_shape.clone(), view_shape.clone());
            let b = Tensor::from_parts(base.storage().clone(), base.layout().clone());
            attach(b, "CopySlices", &[base, other], Box::new(move |g| {
                let result = Tensor::build(g.device(), dt, &base_shape, "empty_strided", &[&g], || meta_only("CopySlices"));
                let clone = Tensor::build(g.device(), dt, &view_shape, "clone", &[&g], || meta_only("CopySlices"));
                // validate_outputs casts `other`'s gradient to its type (an fp32 bias added
                // to the bf16 bmm output under autocast).
                let grads = vec![Some(result), need_other.then(|| clone.to_dtype(other_dt))];
                drop(clone);
                grads
            }))
        };
        attach(view, "AsStridedBackward0", &[&copy_slices], Box::new(move |g| {
            let storage = Tensor::build(g.device(), dt, &base_shape, "zeros", &[&g], || meta_only("as_strided backward"));
            vec![Some(storage)]
        }))
    }
}
