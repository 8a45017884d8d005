//! The ops DeepSeek-V3 adds (transformers 5.23's `DeepseekV3TopkRouter` and
//! `DeepseekV3Attention.expand_kv`): a float `masked_fill` under autograd and `copy_` of a
//! tensor into a slice of a fresh one. Meta only, as the other MoE ops.
use crate::engine::autograd::{attach, needs_grad, save};
use crate::engine::storage::Buffer;
use crate::engine::tensor::Tensor;

fn meta_only(op: &str) -> Buffer {
    panic!("{op}: mixture-of-experts ops run on meta only (the options refuse --device cpu for them)")
}

impl Tensor {
    /// `self.masked_fill(mask, value)` with a bool mask of self's shape: a new tensor;
    /// MaskedFillBackward0 saves the mask, its backward `grad.masked_fill(mask, 0)` is new.
    #[track_caller]
    pub fn masked_fill_grad(&self, mask: &Tensor, value: f64) -> Tensor {
        let _ = value;
        let out = Tensor::build(self.device(), self.dtype(), self.shape(), "masked_fill", &[self, mask], || meta_only("masked_fill"));
        if !needs_grad(&[self]) {
            return out;
        }
        let m = save(mask);
        let (shape, dt) = (self.shape().to_vec(), self.dtype());
        attach(out, "MaskedFillBackward0", &[self], Box::new(move |g| {
            let m = m.unpack();
            vec![Some(Tensor::build(g.device(), dt, &shape, "masked_fill", &[&g, &m], || meta_only("masked_fill backward")))]
        }))
    }

    /// `base[..., start:start + len].copy_(src)` (along the last dim; `src` broadcast to the
    /// slice): nothing new in the forward; the returned handle of `base` carries CopySlices
    /// when `src` or `base` needs a gradient. Its backward (`CopySlices::apply`): `result =
    /// grad.new_empty_strided(base)` with the gradient copied in, a contiguous clone of the
    /// slice handed to CopyBackwards, whose self gradient is `zeros_like(slice)` when `base`
    /// needs one (then copied into result's slice) and whose src gradient is the clone itself;
    /// `result` is base's gradient.
    #[track_caller]
    pub fn copy_into_last_(&self, start: usize, len: usize, src: &Tensor) -> Tensor {
        assert_eq!(self.device(), crate::engine::storage::Device::Meta, "copy_into_last_: mixture-of-experts ops run on meta only");
        let out = Tensor::from_parts(self.storage().clone(), self.layout().clone());
        if !needs_grad(&[self, src]) {
            return out;
        }
        let mut view_shape = self.shape().to_vec();
        *view_shape.last_mut().expect("rank >= 1") = len;
        let _ = start;
        let (base_shape, dt, need_base, need_src) = (self.shape().to_vec(), self.dtype(), self.requires_grad(), src.requires_grad());
        assert_eq!(src.shape(), view_shape.as_slice(), "copy_into_last_: src has the slice's shape (expand it first)");
        let inputs: Vec<&Tensor> = [(need_base, self), (need_src, src)].into_iter().filter(|(n, _)| *n).map(|(_, t)| t).collect();
        attach(out, "CopySlices", &inputs, Box::new(move |g| {
            let result = Tensor::build(g.device(), dt, &base_shape, "empty_strided", &[&g], || meta_only("CopySlices"));
            let clone = Tensor::build(g.device(), dt, &view_shape, "clone", &[&g], || meta_only("CopySlices"));
            if need_base {
                drop(Tensor::build(g.device(), dt, &view_shape, "zeros_like", &[&g], || meta_only("CopyBackwards")));
            }
            let mut grads = Vec::new();
            if need_base {
                grads.push(Some(result));
            } else {
                drop(result);
            }
            if need_src {
                grads.push(Some(clone));
            }
            grads
        }))
    }
}

impl Tensor {
    /// `attn.add_(mask)` in place (the math SDPA's mask, which needs no gradient): nothing
    /// new; AddBackward0 passes the gradient on unchanged.
    #[track_caller]
    pub fn add_inplace_(&self, other: &Tensor) -> Tensor {
        assert!(!other.requires_grad(), "add_inplace_: the added tensor needs no gradient");
        let out = Tensor::from_parts(self.storage().clone(), self.layout().clone());
        if !needs_grad(&[self]) {
            return out;
        }
        attach(out, "AddBackward0", &[self], Box::new(move |g| vec![Some(g)]))
    }

    /// `at::_safe_softmax(self, -1)`: the softmax (its node saves the output), then the rows
    /// that are all -inf found by `isneginf` (bool, self's shape) and `all(-1, keepdim)`, a
    /// 0-d zero, and those rows zeroed in place; the temporaries die on return.
    #[track_caller]
    pub fn safe_softmax_last(&self) -> Tensor {
        let out = self.softmax(-1);
        let neg = Tensor::build(self.device(), crate::engine::dtype::DType::Bool, self.shape(), "isneginf", &[self], || meta_only("isneginf"));
        let mut rows = self.shape().to_vec();
        *rows.last_mut().expect("rank >= 1") = 1;
        let all = Tensor::build(self.device(), crate::engine::dtype::DType::Bool, &rows, "all", &[&neg], || meta_only("all"));
        let zero = Tensor::build(self.device(), out.dtype(), &[], "scalar_tensor", &[], || meta_only("scalar_tensor"));
        drop((zero, all, neg));
        out
    }
}
