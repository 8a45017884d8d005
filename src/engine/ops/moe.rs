//! The ops of transformers' mixture-of-experts blocks (integrations/moe.py and the models'
//! eager experts loop): the router's top-k, the sort and histogram that group tokens by
//! expert, grouped matmuls, and the in-place `index_add_`/`index_put_` that scatter back.
//!
//! Which token goes to which expert is data: on meta the routing is given by the caller
//! (`--routing`), and the ops whose output size depends on it (`nonzero`) take that size.
//! The runs that use these ops are meta-only (the options refuse an MoE model on cpu), so
//! only the shapes, dtypes, lifetimes and what autograd saves are modelled.
use crate::engine::autograd::{attach, needs_grad, save};
use crate::engine::dtype::DType;
use crate::engine::storage::{Buffer, Device};
use crate::engine::tensor::Tensor;

/// The values of these ops are data-dependent routing; only meta runs reach them.
fn meta_only(op: &str) -> Buffer {
    panic!("{op}: mixture-of-experts ops run on meta only (the options refuse --device cpu for them)")
}

impl Tensor {
    /// `torch.sort(self)` of a 1-D int64 tensor: sorted values and int64 indices. CPU's kernel
    /// also resizes a transient index buffer of the same size while it runs (measured).
    #[track_caller]
    pub fn sort_1d(&self) -> (Tensor, Tensor) {
        let shape = self.shape().to_vec();
        let values = Tensor::build(self.device(), self.dtype(), &shape, "sort", &[self], || meta_only("sort"));
        let indices = Tensor::build(self.device(), DType::I64, &shape, "sort", &[self], || meta_only("sort"));
        drop(Tensor::build(self.device(), DType::I64, &shape, "resize_", &[self], || meta_only("sort")));
        (values, indices)
    }

    /// `self // n` for an int64 tensor (a new int64 tensor).
    #[track_caller]
    pub fn floor_div_int(&self, n: i64) -> Tensor {
        Tensor::build(self.device(), DType::I64, self.shape(), "floor_divide", &[self], || {
            Buffer::I64(crate::engine::cpu::read_i64(self).into_iter().map(|x| x.div_euclid(n)).collect())
        })
    }

    /// `torch.histc(self, bins, min, max)` of a float tensor: (bins,) of its dtype.
    #[track_caller]
    pub fn histc(&self, bins: usize) -> Tensor {
        Tensor::build(self.device(), self.dtype(), &[bins], "histc", &[self], || meta_only("histc"))
    }

    /// `torch.cumsum(self, dim=0, dtype=torch.int32)` of a 1-D tensor.
    #[track_caller]
    pub fn cumsum_i32(&self) -> Tensor {
        Tensor::build(self.device(), DType::I32, self.shape(), "cumsum", &[self], || meta_only("cumsum"))
    }

    /// `torch.empty_like(self)`.
    #[track_caller]
    pub fn empty_like(&self) -> Tensor {
        Tensor::build(self.device(), self.dtype(), self.shape(), "empty_strided", &[self], || meta_only("empty_like"))
    }

    /// `self[index] = values` in place (int64, no autograd): nothing new.
    #[track_caller]
    pub fn index_put_int_(&self, _index: &Tensor, _values: &Tensor) {
        assert_eq!(self.device(), Device::Meta, "index_put_: mixture-of-experts ops run on meta only");
    }

    /// `self.scatter_add_(0, index, src)` of 1-D tensors without autograd (the aux loss's
    /// masked expert counts): nothing new.
    #[track_caller]
    pub fn scatter_add_1d_(&self, index: &Tensor, src: &Tensor) {
        assert_eq!(index.numel(), src.numel(), "scatter_add_: index and src sizes");
        assert_eq!(self.device(), Device::Meta, "scatter_add_: mixture-of-experts ops run on meta only");
    }

    /// `F.one_hot(self, num_classes)`: int64 (…, classes).
    #[track_caller]
    pub fn one_hot(&self, classes: usize) -> Tensor {
        let mut shape = self.shape().to_vec();
        shape.push(classes);
        Tensor::build(self.device(), DType::I64, &shape, "one_hot", &[self], || meta_only("one_hot"))
    }

    /// `torch.nonzero(self)` where the caller knows how many elements are set (`count`, from
    /// the routing): int64 (count, rank).
    #[track_caller]
    pub fn nonzero_known(&self, count: usize) -> Tensor {
        Tensor::build(self.device(), DType::I64, &[count, self.rank()], "nonzero", &[self], || meta_only("nonzero"))
    }

    /// `torch._grouped_mm(self, weight, offs)`: self (S, K) sorted by group, weight (G, K, N)
    /// (any strides: transformers passes a transposed view), offs (G,) int32 → (S, N) in
    /// self's dtype. GroupedMmBackward0 saves self for the weight's gradient and the weight for
    /// self's (each only when that gradient is needed); its backward allocates the
    /// input's gradient (S, K) and the weight's (G, K, N) laid out as the weight is, so the
    /// transpose view's gradient lands in the parameter's own layout.
    #[track_caller]
    pub fn grouped_mm(&self, weight: &Tensor, offs: &Tensor) -> Tensor {
        let (s, k) = (self.dim(0), self.dim(1));
        assert_eq!(weight.dim(1), k, "grouped_mm: inner sizes");
        let n = weight.dim(2);
        let out = Tensor::build(self.device(), self.dtype(), &[s, n], "empty_strided", &[self, weight, offs], || meta_only("grouped_mm"));
        let groups = offs.numel();
        let sms = crate::engine::runtime::cuda_kernels_now().cutlass_sms.filter(|_| self.dtype() == DType::BF16 && weight.dtype() == DType::BF16);
        cutlass_grouped_gemm_scratch(sms, groups, &out);
        if needs_grad(&[self, weight]) {
            // GroupedMmBackward0 saves self, mat2 and offs (Functions.h): the int32 offsets
            // (E × 4 B, one 512 B block on CUDA) live until backward. The CPU grid does not see
            // them (blocks under 512 B); the full-size MemTracker rows do (tests/hf_full.rs).
            // Each operand is saved only for the other's gradient (measured: `_saved_self` is
            // None when mat2 is frozen, as under LoRA; `_saved_mat2` when self needs none).
            let (need_x, need_w) = (self.requires_grad(), weight.requires_grad());
            let (x_shape, x_dtype) = (self.shape().to_vec(), self.dtype());
            let (w_strides, w_shape, w_dtype) = (weight.layout().strides.clone(), weight.shape().to_vec(), weight.dtype());
            let (x, w, offs_saved) = (need_w.then(|| save(self)), need_x.then(|| save(weight)), save(offs));
            return attach(out, "GroupedMmBackward0", &[self, weight], Box::new(move |g| {
                let (x, w) = (x.map(|x| x.unpack()), w.map(|w| w.unpack()));
                let _offs = offs_saved.unpack();
                let gx = w.as_ref().map(|w| {
                    let t = Tensor::build(g.device(), x_dtype, &x_shape, "empty_strided", &[&g, w], || meta_only("grouped_mm backward"));
                    cutlass_grouped_gemm_scratch(sms, groups, &t);
                    t
                });
                let gw = x.as_ref().map(|x| {
                    // The gradient has the weight view's strides, made dense.
                    let mut order: Vec<usize> = (0..3).collect();
                    order.sort_by(|&a, &b| w_strides[b].cmp(&w_strides[a]));
                    let dense: Vec<usize> = order.iter().map(|&d| w_shape[d]).collect();
                    let t = Tensor::build(g.device(), w_dtype, &dense, "empty_strided", &[&g, x], || meta_only("grouped_mm backward"));
                    cutlass_grouped_gemm_scratch(sms, groups, &t);
                    let mut inverse = vec![0; 3];
                    for (i, &d) in order.iter().enumerate() {
                        inverse[d] = i;
                    }
                    t.permute(&inverse)
                });
                vec![gx, gw]
            }));
        }
        out
    }

    /// `torch.baddbmm(self, batch1, batch2, alpha=alpha)` (beta 1): self (G, M, N) plus alpha ·
    /// batch1 (G, M, K) @ batch2 (G, K, N), a new (G, M, N) tensor in self's dtype (peft's
    /// `_LoraFactorsProxy` folding an expert stack's LoRA into its weight). BaddbmmBackward0
    /// saves both batches (each for the other's gradient) and computes, per batch that needs
    /// one, `grad.bmm(batch2ᵀ)` / `batch1ᵀ.bmm(grad)`, times alpha unless alpha is 1
    /// (`maybe_multiply`: the product is a temporary); `self`'s gradient is grad itself.
    #[track_caller]
    pub fn baddbmm(&self, batch1: &Tensor, batch2: &Tensor, alpha: f64) -> Tensor {
        assert!(self.rank() == 3 && batch1.rank() == 3 && batch2.rank() == 3, "baddbmm expects 3-D tensors");
        assert_eq!((batch1.dim(0), batch1.dim(1), batch2.dim(2)), (self.dim(0), self.dim(1), self.dim(2)), "baddbmm: shapes");
        assert_eq!(batch1.dim(2), batch2.dim(1), "baddbmm: inner sizes");
        let out = Tensor::build(self.device(), self.dtype(), self.shape(), "baddbmm", &[self, batch1, batch2], || meta_only("baddbmm"));
        // The kernel's copies of batches BLAS cannot read in place die inside the op.
        drop(super::operand_copies::baddbmm(batch1, batch2));
        if needs_grad(&[self, batch1, batch2]) {
            let (n1, n2) = (batch1.requires_grad(), batch2.requires_grad());
            let (b1, b2) = (n2.then(|| save(batch1)), n1.then(|| save(batch2)));
            return attach(out, "BaddbmmBackward0", &[self, batch1, batch2], Box::new(move |g| {
                let (b2, b1) = (b2.map(|s| s.unpack()), b1.map(|s| s.unpack()));
                let scale = |t: Tensor| if alpha == 1.0 { t } else { t.mul_scalar(alpha) };
                // batch2's gradient first, as BmmBackward0.
                let g2 = b1.as_ref().map(|b1| scale(b1.transpose(1, 2).bmm(&g)));
                let g1 = b2.as_ref().map(|b2| scale(g.bmm(&b2.transpose(1, 2))));
                let need_self = g1.is_some() || g2.is_some();
                vec![need_self.then(|| g.clone()), g1, g2]
            }));
        }
        out
    }

    /// `self.index_add_(0, index, source)` on `self` (no new memory); returns the handle that
    /// carries the result's autograd history. IndexAddBackward0 saves the index and the source
    /// (its formula's `expand_as(source)`; measured: the source outlives the loop pass that
    /// made it): the gradient passes to `self` as is and to the source as
    /// `grad.index_select(0, index)`.
    #[track_caller]
    pub fn index_add_0(&self, index: &Tensor, source: &Tensor) -> Tensor {
        let out = Tensor::from_parts(self.storage().clone(), self.layout().clone());
        if needs_grad(&[self, source]) {
            let ix = save(index);
            let src = save(source);
            let (need_self, need_src) = (self.requires_grad(), source.requires_grad());
            let src_dtype = source.dtype();
            return attach(out, "IndexAddBackward0", &[self, source], Box::new(move |g| {
                let (ix, src) = (ix.unpack(), src.unpack());
                let gs = need_src.then(|| {
                    let mut shape = g.shape().to_vec();
                    shape[0] = ix.dim(0);
                    Tensor::build(g.device(), src_dtype, &shape, "index_select", &[&g, &ix], || meta_only("index_add_ backward"))
                });
                drop(src);
                vec![need_self.then(|| g.clone()), gs]
            }));
        }
        out
    }
}

impl Tensor {
    /// `self[rows, cols]` of a 2-D tensor with two int64 index tensors of one length n: (n,).
    /// IndexBackward0 saves both indices; its backward accumulates into zeros of self's shape.
    #[track_caller]
    pub fn index_2d(&self, rows: &Tensor, cols: &Tensor) -> Tensor {
        let n = rows.dim(0);
        // The indices are saved before the kernel runs (see `index_along`).
        let saved = needs_grad(&[self]).then(|| (save(rows), save(cols)));
        let out = Tensor::build(self.device(), self.dtype(), &[n], "index", &[self, rows, cols], || meta_only("index"));
        if let Some((r, c)) = saved {
            let (in_shape, dt) = (self.shape().to_vec(), self.dtype());
            return attach(out, "IndexBackward0", &[self], Box::new(move |g| {
                let (r, c) = (r.unpack(), c.unpack());
                let gi = Tensor::build(g.device(), dt, &in_shape, "empty", &[&g, &r, &c], || meta_only("index backward"));
                vec![Some(gi)]
            }));
        }
        out
    }
}

/// What CUTLASS's sm90 grouped GEMM (GroupMM.cu, `bf16bf16_grouped_gemm_impl_sm90_sm100`)
/// allocates around its kernel after the output: the argument buffer (A, B and output
/// pointers for the groups rounded up to two, three 8-byte strides and a 12-byte problem shape
/// per group: 60 B a group), then `Gemm::get_workspace_size`, 512 B per SM (measured on an
/// H200: 67,584 B at 132 SMs, for every shape and tile its MoE grids ran); the workspace is
/// freed first. None (`sms`) off sm90 or off bf16, where PyTorch loops over matmuls instead.
fn cutlass_grouped_gemm_scratch(sms: Option<u32>, groups: usize, out: &Tensor) {
    let Some(sms) = sms else { return };
    let args = groups.div_ceil(2) * 2 * 3 * 8 + groups * 12 + groups * 3 * 8;
    let buf = Tensor::zeros_op(&[args], DType::U8, out.device(), "_grouped_mm");
    drop(Tensor::zeros_op(&[sms as usize * 512], DType::U8, out.device(), "_grouped_mm"));
    drop(buf);
}
