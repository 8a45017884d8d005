//! `Tensor`: shape + strides + offset + dtype over a shared storage, with its autograd link.
//! Views share storage and allocate nothing; every op output and `contiguous()` of a
//! non-contiguous tensor allocates.
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
#[allow(unused_imports)]
use crate::engine::dtype::Real as _;
use super::autograd::{self, attach, needs_grad, Node};
use super::cpu::{self, CReal};
use super::dtype::DType;
use super::layout::{dim_index, numel, Layout};
use super::storage::{Buffer, Device, Storage};
use crate::with_real;
use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

#[derive(Clone)]
pub struct Tensor(pub(crate) Rc<TensorImpl>);

pub struct TensorImpl {
    storage: Rc<Storage>,
    layout: Layout,
    /// For views, the tensor they view (as PyTorch's `_base`): it keeps the storage's
    /// reference count above one, which is what stops in-place gradient accumulation.
    base: Option<Tensor>,
    requires_grad: bool,
    grad_fn: Option<Rc<Node>>,
    grad: RefCell<Option<Tensor>>,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({:?}, {}, {}", self.shape(), self.dtype(), self.device())?;
        if let Some(n) = self.grad_fn() {
            write!(f, ", grad_fn={}", n.name)?;
        } else if self.requires_grad() {
            write!(f, ", requires_grad")?;
        }
        write!(f, ")")
    }
}

impl Tensor {
    // ---------------------------------------------------------------- construction
    #[track_caller]
    pub(crate) fn from_parts(storage: Rc<Storage>, layout: Layout) -> Tensor {
        Tensor(Rc::new(TensorImpl { storage, layout, base: None, requires_grad: false, grad_fn: None, grad: RefCell::new(None) }))
    }

    /// Allocate an output of `shape` computed by op `op` from `inputs`; on cpu `fill`
    /// produces its values (not called on meta). The op is timed and costed when asked.
    #[track_caller]
    pub(crate) fn build(device: Device, dtype: DType, shape: &[usize], op: &'static str, inputs: &[&Tensor], fill: impl FnOnce() -> Buffer) -> Tensor {
        let span = super::cost::begin();
        let st = Storage::alloc(device, dtype, numel(shape), op);
        let n = numel(shape);
        if device == Device::Cpu {
            st.set(fill());
        }
        super::cost::end(span, device, op, || {
            let (kind, flops, read, written) = super::cost::classify(op, inputs, n, dtype);
            (kind, flops, read, written, dtype.size() as u8)
        });
        Tensor::from_parts(st, Layout::contiguous(shape))
    }

    /// As [`Tensor::build`] with the output laid out with `strides` (`fill` still produces
    /// the values in row-major order of the shape).
    #[track_caller]
    pub(crate) fn build_strided(device: Device, dtype: DType, shape: &[usize], strides: Vec<usize>, op: &'static str, inputs: &[&Tensor], fill: impl FnOnce() -> Buffer) -> Tensor {
        let l = Layout { shape: shape.to_vec(), strides, offset: 0 };
        if l.is_contiguous() {
            let t = Tensor::build(device, dtype, shape, op, inputs, fill);
            return Tensor::from_parts(t.0.storage.clone(), l);
        }
        let span = super::cost::begin();
        let n = numel(shape);
        let st = Storage::alloc(device, dtype, n, op);
        if device == Device::Cpu {
            st.set(scatter_row_major(fill(), &l));
        }
        super::cost::end(span, device, op, || {
            let (kind, flops, read, written) = super::cost::classify(op, inputs, n, dtype);
            (kind, flops, read, written, dtype.size() as u8)
        });
        Tensor::from_parts(st, l)
    }

    /// Allocate an output whose values are computed in `R` and stored as `dtype`.
    #[track_caller]
    pub(crate) fn compute<R: CReal>(device: Device, dtype: DType, shape: &[usize], op: &'static str, inputs: &[&Tensor], f: impl FnOnce() -> Vec<R>) -> Tensor {
        Tensor::build(device, dtype, shape, op, inputs, || cpu::to_buffer(f(), dtype))
    }

    /// Host scratch with data but no device accounting (a fused kernel's registers).
    #[track_caller]
    pub(crate) fn host(buf: Buffer, shape: &[usize]) -> Tensor {
        Tensor::from_parts(Storage::untracked(Device::Cpu, buf.dtype(), Some(buf)), Layout::contiguous(shape))
    }
    /// Shape and dtype only, no data and no accounting.
    #[track_caller]
    pub(crate) fn shape_only(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::from_parts(Storage::untracked(Device::Meta, dtype, None), Layout::contiguous(shape))
    }

    #[track_caller]
    pub fn zeros(shape: &[usize], dtype: DType, device: Device) -> Tensor {
        Tensor::build(device, dtype, shape, "zeros", &[], || Buffer::zeros(dtype, numel(shape)))
    }
    /// Zeros recorded under an op's own name (a kernel's zero-initialised scratch).
    #[track_caller]
    pub fn zeros_op(shape: &[usize], dtype: DType, device: Device, op: &'static str) -> Tensor {
        Tensor::build(device, dtype, shape, op, &[], || Buffer::zeros(dtype, numel(shape)))
    }
    #[track_caller]
    pub fn full(shape: &[usize], value: f64, dtype: DType, device: Device) -> Tensor {
        with_real!(dtype, R, { Tensor::compute::<R>(device, dtype, shape, "full", &[], || vec![R::lit(value); numel(shape)]) })
    }
    #[track_caller]
    pub fn ones(shape: &[usize], dtype: DType, device: Device) -> Tensor {
        Tensor::full(shape, 1.0, dtype, device)
    }
    #[track_caller]
    pub fn zeros_like(&self) -> Tensor {
        Tensor::zeros(self.shape(), self.dtype(), self.device())
    }
    #[track_caller]
    pub fn ones_like(&self) -> Tensor {
        Tensor::ones(self.shape(), self.dtype(), self.device())
    }
    /// From host values (f64 for exactness; stored as `dtype`).
    #[track_caller]
    pub fn from_f64(values: &[f64], shape: &[usize], dtype: DType, device: Device) -> Tensor {
        assert_eq!(values.len(), numel(shape), "{} values for shape {:?}", values.len(), shape);
        Tensor::compute::<f64>(device, dtype, shape, "tensor", &[], || values.to_vec())
    }
    #[track_caller]
    pub fn from_f32(values: &[f32], shape: &[usize], dtype: DType, device: Device) -> Tensor {
        assert_eq!(values.len(), numel(shape), "{} values for shape {:?}", values.len(), shape);
        Tensor::compute::<f32>(device, dtype, shape, "tensor", &[], || values.to_vec())
    }
    /// From host values computed only when the device holds data: on meta `values` is never
    /// called, so a shape-only tensor costs no host memory proportional to its size.
    #[track_caller]
    pub fn from_f64_with(shape: &[usize], dtype: DType, device: Device, values: impl FnOnce() -> Vec<f64>) -> Tensor {
        Tensor::compute::<f64>(device, dtype, shape, "tensor", &[], || {
            let v = values();
            assert_eq!(v.len(), numel(shape), "{} values for shape {:?}", v.len(), shape);
            v
        })
    }
    /// int64 ids computed only on a device that holds data (see [`Tensor::from_f64_with`]).
    #[track_caller]
    pub fn from_i64_with(shape: &[usize], device: Device, values: impl FnOnce() -> Vec<i64>) -> Tensor {
        Tensor::build(device, DType::I64, shape, "tensor", &[], || {
            let v = values();
            assert_eq!(v.len(), numel(shape), "{} values for shape {:?}", v.len(), shape);
            Buffer::I64(v)
        })
    }
    #[track_caller]
    pub fn from_i64(values: &[i64], shape: &[usize], device: Device) -> Tensor {
        assert_eq!(values.len(), numel(shape));
        Tensor::build(device, DType::I64, shape, "tensor", &[], || Buffer::I64(values.to_vec()))
    }
    /// `torch.eye(n, dtype=dtype)`.
    #[track_caller]
    pub fn eye(n: usize, dtype: DType, device: Device) -> Tensor {
        let len = n.checked_mul(n).expect("eye: n * n overflows");
        with_real!(dtype, R, {
            Tensor::compute::<R>(device, dtype, &[n, n], "eye", &[], || {
                let mut v = vec![R::lit(0.0); len];
                (0..n).for_each(|i| v[i * n + i] = R::lit(1.0));
                v
            })
        })
    }
    #[track_caller]
    pub fn arange(n: usize, device: Device) -> Tensor {
        Tensor::build(device, DType::I64, &[n], "arange", &[], || Buffer::I64((0..n as i64).collect()))
    }

    // ---------------------------------------------------------------- accessors
    #[track_caller]
    pub fn shape(&self) -> &[usize] {
        &self.0.layout.shape
    }
    #[track_caller]
    pub fn dim(&self, d: isize) -> usize {
        self.shape()[dim_index(d, self.rank())]
    }
    #[track_caller]
    pub fn rank(&self) -> usize {
        self.0.layout.shape.len()
    }
    #[track_caller]
    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }
    #[track_caller]
    pub fn dtype(&self) -> DType {
        self.0.storage.dtype
    }
    #[track_caller]
    pub fn device(&self) -> Device {
        self.0.storage.device
    }
    #[track_caller]
    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }
    #[track_caller]
    pub fn storage(&self) -> &Rc<Storage> {
        &self.0.storage
    }
    #[track_caller]
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype().size()
    }
    #[track_caller]
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }
    /// Contiguous and covering its whole storage.
    #[track_caller]
    pub fn is_dense(&self) -> bool {
        self.is_contiguous() && self.0.layout.offset == 0 && self.numel() == self.0.storage.numel
    }
    /// Its elements fill a gap-free block of its storage in some dim order (c10's
    /// `is_non_overlapping_and_dense`).
    #[track_caller]
    pub fn is_non_overlapping_and_dense(&self) -> bool {
        self.0.layout.is_non_overlapping_and_dense()
    }
    /// Nobody else holds this handle or its storage (a view's base counts as a holder).
    #[track_caller]
    pub fn is_unique(&self) -> bool {
        Rc::strong_count(&self.0) == 1 && Rc::strong_count(&self.0.storage) == 1
    }
    /// Nobody else holds this handle (its storage may be shared with a view base).
    #[track_caller]
    pub fn is_sole_handle(&self) -> bool {
        Rc::strong_count(&self.0) == 1
    }
    #[track_caller]
    pub fn same_storage(&self, other: &Tensor) -> bool {
        Rc::ptr_eq(&self.0.storage, &other.0.storage)
    }
    #[track_caller]
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad
    }
    #[track_caller]
    pub fn grad_fn(&self) -> Option<&Rc<Node>> {
        self.0.grad_fn.as_ref()
    }
    #[track_caller]
    pub fn is_leaf(&self) -> bool {
        self.0.grad_fn.is_none()
    }
    #[track_caller]
    pub fn grad(&self) -> Option<Tensor> {
        self.0.grad.borrow().clone()
    }
    #[track_caller]
    pub(crate) fn grad_slot(&self) -> &RefCell<Option<Tensor>> {
        &self.0.grad
    }
    /// `zero_grad(set_to_none=True)` for one leaf: frees its gradient.
    #[track_caller]
    pub fn clear_grad(&self) {
        let g = self.0.grad.borrow_mut().take();
        drop(g);
    }
    #[track_caller]
    pub fn set_grad(&self, g: Option<Tensor>) {
        *self.0.grad.borrow_mut() = g;
    }

    /// A new leaf handle over the same storage that requires grad (nn.Parameter).
    #[track_caller]
    pub fn requires_grad_(self, on: bool) -> Tensor {
        assert!(self.is_leaf(), "requires_grad_ on a non-leaf tensor");
        Tensor(Rc::new(TensorImpl {
            storage: self.0.storage.clone(),
            layout: self.0.layout.clone(),
            base: self.0.base.clone(),
            requires_grad: on,
            grad_fn: None,
            grad: RefCell::new(None),
        }))
    }
    /// Same storage and layout, no autograd link.
    #[track_caller]
    pub fn detach(&self) -> Tensor {
        Tensor::from_parts(self.0.storage.clone(), self.0.layout.clone())
    }
    #[track_caller]
    pub(crate) fn with_grad_fn(self, node: Rc<Node>) -> Tensor {
        Tensor(Rc::new(TensorImpl {
            storage: self.0.storage.clone(),
            layout: self.0.layout.clone(),
            base: self.0.base.clone(),
            requires_grad: true,
            grad_fn: Some(node),
            grad: RefCell::new(None),
        }))
    }
    fn view_with(&self, layout: Layout) -> Tensor {
        let base = Some(self.0.base.clone().unwrap_or_else(|| self.detach()));
        Tensor(Rc::new(TensorImpl {
            storage: self.0.storage.clone(),
            layout,
            base,
            requires_grad: false,
            grad_fn: None,
            grad: RefCell::new(None),
        }))
    }
    /// A new shape over a fresh output (ATen's `_unsafe_view`): not a view for autograd.
    #[track_caller]
    pub(crate) fn unsafe_view(self, shape: &[usize]) -> Tensor {
        debug_assert!(self.is_contiguous() && self.0.base.is_none() && self.grad_fn().is_none());
        Tensor::from_parts(self.0.storage.clone(), Layout::contiguous(shape))
    }
    #[track_caller]
    pub fn is_view(&self) -> bool {
        self.0.base.is_some()
    }

    #[track_caller]
    pub fn backward(&self) {
        autograd::backward(self, None)
    }
    #[track_caller]
    pub fn backward_with(&self, grad: Tensor) {
        autograd::backward(self, Some(grad))
    }

    // ---------------------------------------------------------------- host values
    #[track_caller]
    pub fn to_vec_f64(&self) -> Vec<f64> {
        cpu::read::<f64>(self)
    }
    #[track_caller]
    pub fn to_vec_f32(&self) -> Vec<f32> {
        cpu::read::<f32>(self)
    }
    #[track_caller]
    pub fn to_vec_i64(&self) -> Vec<i64> {
        cpu::read_i64(self)
    }
    #[track_caller]
    pub fn item(&self) -> f64 {
        assert_eq!(self.numel(), 1, "item() of a tensor with {} elements", self.numel());
        self.to_vec_f64()[0]
    }

    // ---------------------------------------------------------------- views
    /// `view`/`reshape`: a view when strides allow, otherwise a contiguous copy (as `reshape`).
    #[track_caller]
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        let shape = infer_shape(shape, self.numel());
        match self.0.layout.view(&shape) {
            Some(l) => {
                let out = self.view_with(l);
                if needs_grad(&[self]) {
                    let in_shape = self.shape().to_vec();
                    return attach(out, "ViewBackward0", &[self], Box::new(move |g| vec![Some(g.reshape(&in_shape))]));
                }
                out
            }
            None => self.contiguous().reshape(&shape),
        }
    }
    /// Like `reshape` but panics instead of copying (`Tensor.view`).
    #[track_caller]
    pub fn view(&self, shape: &[usize]) -> Tensor {
        let shape = infer_shape(shape, self.numel());
        assert!(self.0.layout.view(&shape).is_some(), "view {:?} of a non-viewable layout {:?}; use reshape", shape, self.0.layout);
        self.reshape(&shape)
    }
    #[track_caller]
    pub fn flatten(&self, start: usize, end: usize) -> Tensor {
        let s = self.shape();
        let mut shape: Vec<usize> = s[..start].to_vec();
        shape.push(s[start..=end].iter().product());
        shape.extend_from_slice(&s[end + 1..]);
        self.reshape(&shape)
    }
    #[track_caller]
    pub fn transpose(&self, a: isize, b: isize) -> Tensor {
        let (a, b) = (dim_index(a, self.rank()), dim_index(b, self.rank()));
        let out = self.view_with(self.0.layout.transpose(a, b));
        if needs_grad(&[self]) {
            return attach(out, "TransposeBackward0", &[self], Box::new(move |g| vec![Some(g.transpose(a as isize, b as isize))]));
        }
        out
    }
    /// Transpose of a 2-D tensor.
    #[track_caller]
    pub fn t(&self) -> Tensor {
        assert_eq!(self.rank(), 2, "t() expects a 2-D tensor");
        self.transpose(0, 1)
    }
    #[track_caller]
    pub fn permute(&self, dims: &[usize]) -> Tensor {
        let out = self.view_with(self.0.layout.permute(dims));
        if needs_grad(&[self]) {
            let mut inv = vec![0; dims.len()];
            for (i, &d) in dims.iter().enumerate() {
                inv[d] = i;
            }
            return attach(out, "PermuteBackward0", &[self], Box::new(move |g| vec![Some(g.permute(&inv))]));
        }
        out
    }
    /// `x[..., start:end:step]` along `dim` (a view).
    #[track_caller]
    pub fn slice(&self, dim: isize, start: usize, end: usize, step: usize) -> Tensor {
        let d = dim_index(dim, self.rank());
        let l = self.0.layout.slice(d, start, end, step);
        let out = self.view_with(l);
        if needs_grad(&[self]) {
            let in_shape = self.shape().to_vec();
            return attach(
                out,
                "SliceBackward0",
                &[self],
                Box::new(move |g| {
                    let z = Tensor::zeros(&in_shape, g.dtype(), g.device());
                    z.view_with(z.layout().slice(d, start, end, step)).copy_(&g);
                    vec![Some(z)]
                }),
            );
        }
        out
    }
    /// `x.split([sizes], dim)` (and `chunk`): views. Like PyTorch's one
    /// SplitWithSizesBackward0 node, the parts' gradients wait until every part's has
    /// arrived and are then concatenated once into one input-sized gradient (so each part
    /// must receive one; the models use every part: a part that gets none leaves the input
    /// without a gradient).
    #[track_caller]
    pub fn split_with_sizes(&self, sizes: &[usize], dim: isize) -> Vec<Tensor> {
        let d = dim_index(dim, self.rank());
        assert_eq!(sizes.iter().sum::<usize>(), self.shape()[d], "split sizes {:?} do not add up to dim {} of {:?}", sizes, d, self.shape());
        let mut start = 0;
        let views: Vec<Tensor> = sizes
            .iter()
            .map(|&n| {
                let v = self.view_with(self.0.layout.slice(d, start, start + n, 1));
                start += n;
                v
            })
            .collect();
        if !needs_grad(&[self]) {
            return views;
        }
        let pending = Rc::new(RefCell::new(vec![None::<Tensor>; sizes.len()]));
        views
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                let pending = pending.clone();
                attach(v, "SplitWithSizesBackward0", &[self], Box::new(move |g| {
                    let mut p = pending.borrow_mut();
                    p[i] = Some(g);
                    if p.iter().any(Option::is_none) {
                        return vec![None];
                    }
                    let parts: Vec<Tensor> = std::mem::take(&mut *p).into_iter().flatten().collect();
                    drop(p);
                    vec![Some(Tensor::cat(&parts, d as isize))]
                }))
            })
            .collect()
    }
    #[track_caller]
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Tensor {
        self.slice(dim, start, start + len, 1)
    }
    /// `x.select(dim, i)` (a view that drops `dim`).
    #[track_caller]
    pub fn select(&self, dim: isize, i: usize) -> Tensor {
        let d = dim_index(dim, self.rank());
        let out = self.view_with(self.0.layout.select(d, i));
        if needs_grad(&[self]) {
            let in_shape = self.shape().to_vec();
            return attach(
                out,
                "SelectBackward0",
                &[self],
                Box::new(move |g| {
                    let z = Tensor::zeros(&in_shape, g.dtype(), g.device());
                    z.view_with(z.layout().select(d, i)).copy_(&g);
                    vec![Some(z)]
                }),
            );
        }
        out
    }
    #[track_caller]
    pub fn unsqueeze(&self, dim: isize) -> Tensor {
        let d = if dim < 0 { (dim + self.rank() as isize + 1) as usize } else { dim as usize };
        let mut shape = self.shape().to_vec();
        shape.insert(d, 1);
        self.reshape(&shape)
    }
    #[track_caller]
    pub fn squeeze(&self, dim: isize) -> Tensor {
        let d = dim_index(dim, self.rank());
        assert_eq!(self.shape()[d], 1, "squeeze of a dimension of size {}", self.shape()[d]);
        let mut shape = self.shape().to_vec();
        shape.remove(d);
        self.reshape(&shape)
    }
    /// Broadcast to `shape` (a view; backward sums over the expanded dims).
    #[track_caller]
    pub fn expand(&self, shape: &[usize]) -> Tensor {
        if shape == self.shape() {
            return self.clone();
        }
        let out = self.view_with(self.0.layout.expand(shape));
        if needs_grad(&[self]) {
            let in_shape = self.shape().to_vec();
            return attach(out, "ExpandBackward0", &[self], Box::new(move |g| vec![Some(g.sum_to_shape(&in_shape))]));
        }
        out
    }

    // ---------------------------------------------------------------- copies
    /// Returns `self` when already contiguous, else a contiguous copy.
    #[track_caller]
    pub fn contiguous(&self) -> Tensor {
        if self.is_contiguous() {
            return self.clone();
        }
        self.clone_contiguous()
    }
    /// Always a fresh contiguous copy (`clone()`).
    #[track_caller]
    pub fn clone_contiguous(&self) -> Tensor {
        let out = copy_of(self, self.dtype(), "clone", false);
        if needs_grad(&[self]) {
            return attach(out, "CloneBackward0", &[self], Box::new(|g| vec![Some(g)]));
        }
        out
    }
    /// A contiguous copy a kernel makes of an operand it cannot read in place: no autograd,
    /// it dies inside the op (ops::operand_copies).
    pub(crate) fn operand_copy(&self, op: &'static str) -> Tensor {
        copy_of(self, self.dtype(), op, false)
    }
    /// `self.roll(-1, dims=dim)`: a fresh contiguous tensor, each slice along `dim` moved one
    /// place down and the first one last.
    #[track_caller]
    pub fn roll_left(&self, dim: isize) -> Tensor {
        let out = copy_of(self, self.dtype(), "roll", false);
        let n = self.dim(dim);
        if self.device() == Device::Cpu && n > 1 {
            out.narrow(dim, 0, n - 1).copy_(&self.narrow(dim, 1, n - 1));
            out.narrow(dim, n - 1, 1).copy_(&self.narrow(dim, 0, 1));
        }
        out
    }
    /// `.to(dtype)`: returns `self` when the dtype already matches.
    #[track_caller]
    pub fn to_dtype(&self, dtype: DType) -> Tensor {
        if dtype == self.dtype() {
            return self.clone();
        }
        let out = copy_of(self, dtype, "_to_copy", true);
        if needs_grad(&[self]) && dtype.is_float() {
            let src = self.dtype();
            return attach(out, "ToCopyBackward0", &[self], Box::new(move |g| vec![Some(g.to_dtype(src))]));
        }
        out
    }

    /// In-place copy of `src` (broadcast) into this tensor's elements, no autograd.
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) {
        let cost = || {
            let written = (self.numel() * self.dtype().size()) as u64;
            (crate::record::compute::OpKind::Copy, 0, super::cost::read_bytes(src), written, self.dtype().size() as u8)
        };
        super::cost::timed(self.device(), "copy_", cost, || {
            let src = src.expand(self.shape());
            let l = self.0.layout.clone();
            with_real!(self.dtype(), R, {
                let vals = cpu::read::<R>(&src);
                let mut b = self.0.storage.buffer_mut();
                write_strided(&mut b, &l, &vals);
            });
        });
    }
}

/// Write row-major `vals` into the elements of `l` in `buf`, converting to its dtype.
pub(crate) fn write_strided<R: CReal>(buf: &mut Buffer, l: &Layout, vals: &[R]) {
    fn put<E: crate::engine::dtype::Elem, R: CReal>(dst: &mut [E], l: &Layout, vals: &[R]) {
        if l.is_contiguous() {
            for (d, v) in dst[l.offset..l.offset + vals.len()].iter_mut().zip(vals) {
                *d = v.to_elem();
            }
        } else {
            for (o, v) in l.offsets().zip(vals) {
                dst[o] = v.to_elem();
            }
        }
    }
    match buf {
        Buffer::F32(d) => put(d, l, vals),
        Buffer::F64(d) => put(d, l, vals),
        Buffer::BF16(d) => put(d, l, vals),
        Buffer::F16(d) => put(d, l, vals),
        Buffer::I64(d) => put(d, l, vals),
        Buffer::Bool(d) => put(d, l, vals),
        Buffer::U8(d) => put(d, l, vals),
        Buffer::I8(d) => put(d, l, vals),
        Buffer::I32(d) => put(d, l, vals),
    }
}

#[track_caller]
/// A copy of `t` as `dtype`: laid out as `t` when `preserve` (`empty_like` with the preserve
/// format, as `_to_copy` does), else contiguous (`clone(memory_format=contiguous_format)`).
fn copy_of(t: &Tensor, dtype: DType, op: &'static str, preserve: bool) -> Tensor {
    match (t.dtype(), dtype) {
        (DType::I64, DType::I64) => Tensor::build(t.device(), dtype, t.shape(), op, &[t], || Buffer::I64(cpu::read_i64(t))),
        (DType::Bool, DType::Bool) => Tensor::build(t.device(), dtype, t.shape(), op, &[t], || Buffer::Bool(cpu::read_bool(t))),
        // `_to_copy` allocates `empty_like(t)` with the preserve format (t's own dim order
        // when it is dense), then copies.
        _ => with_real!(dtype, R, {
            let strides = if preserve { super::layout::preserve_strides(t.layout()) } else { super::layout::contiguous_strides(t.shape()) };
            if t.dtype() == DType::F64 {
                Tensor::build_strided(t.device(), dtype, t.shape(), strides, op, &[t], || cpu::to_buffer(cpu::read::<f64>(t), dtype))
            } else {
                Tensor::build_strided(t.device(), dtype, t.shape(), strides, op, &[t], || cpu::to_buffer(cpu::read::<R>(t), dtype))
            }
        }),
    }
}

/// Resolve one `usize::MAX` ("-1") entry.
fn infer_shape(shape: &[usize], n: usize) -> Vec<usize> {
    let known: usize = shape.iter().filter(|&&d| d != usize::MAX).product();
    shape.iter().map(|&d| if d == usize::MAX { n / known.max(1) } else { d }).collect()
}

/// Row-major values placed at the offsets of layout `l` (a dense, permuted layout).
fn scatter_row_major(vals: Buffer, l: &Layout) -> Buffer {
    fn put<E: Copy + Default>(v: Vec<E>, l: &Layout) -> Vec<E> {
        let mut out = vec![E::default(); v.len()];
        for (x, o) in v.into_iter().zip(l.offsets()) {
            out[o] = x;
        }
        out
    }
    match vals {
        Buffer::F32(v) => Buffer::F32(put(v, l)),
        Buffer::F64(v) => Buffer::F64(put(v, l)),
        Buffer::BF16(v) => Buffer::BF16(put(v, l)),
        Buffer::F16(v) => Buffer::F16(put(v, l)),
        Buffer::I64(v) => Buffer::I64(put(v, l)),
        Buffer::Bool(v) => Buffer::Bool(put(v, l)),
        Buffer::U8(v) => Buffer::U8(put(v, l)),
        Buffer::I8(v) => Buffer::I8(put(v, l)),
        Buffer::I32(v) => Buffer::I32(put(v, l)),
    }
}
