//! Matrix products. `mm` and `bmm` are the primitives (gemm on cpu, any strides, no copy);
//! `matmul` is composed from reshape/expand + mm/bmm exactly as ATen's `matmul` is, so the
//! copies it makes (and what autograd saves) are PyTorch's.
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
use crate::engine::autocast;
use crate::engine::autograd::{attach, needs_grad, save};
use crate::engine::cpu::{self, CReal};
use crate::engine::dtype::DType;
use crate::engine::layout::{broadcast_shapes, Layout};
use crate::engine::runtime;
use crate::engine::sgemm;
use crate::engine::storage::{Device, Storage};
use crate::engine::tensor::Tensor;
use crate::engine::cost;
use crate::record::compute::OpKind;
use crate::record::Category;
use gemm::Parallelism;
use rayon::prelude::*;

/// Multiply-adds per batch item below which batches run in parallel instead of one gemm
/// using every thread.
const SMALL_GEMM: usize = 1 << 22;

/// `c[i] = a[i] · b[i]` for every batch item; `la` is (batch, m, k), `lb` (batch, k, n),
/// strides in elements (batch stride 0 = shared). Returns contiguous (batch, m, n).
fn gemm_batched<R: CReal>(a: &[R], la: &Layout, b: &[R], lb: &Layout) -> Vec<R> {
    let (batch, m, k, n) = (la.shape[0], la.shape[1], la.shape[2], lb.shape[2]);
    if m * n == 0 {
        return Vec::new();
    }
    if R::DTYPE == DType::F32 && sgemm::available() {
        // sgemm writes every element, so the output needs no zero fill.
        let mut c: Vec<R> = Vec::with_capacity(batch * m * n);
        #[allow(clippy::uninit_vec)]
        unsafe {
            c.set_len(batch * m * n)
        };
        // Same data, viewed as f32 (R is f32 here).
        let a = unsafe { std::slice::from_raw_parts(a.as_ptr() as *const f32, a.len()) };
        let b = unsafe { std::slice::from_raw_parts(b.as_ptr() as *const f32, b.len()) };
        let cf = unsafe { std::slice::from_raw_parts_mut(c.as_mut_ptr() as *mut f32, c.len()) };
        let mat = |s: &[f32], l: &Layout, i: usize| sgemm::MatRef {
            ptr: unsafe { s.as_ptr().add(l.offset + i * l.strides[0]) },
            rs: l.strides[1] as isize,
            cs: l.strides[2] as isize,
        };
        if batch > 1 && m * n * k < SMALL_GEMM {
            cf.par_chunks_mut(m * n).enumerate().for_each(|(i, dst)| unsafe {
                sgemm::sgemm(m, n, k, mat(a, la, i), mat(b, lb, i), dst, false)
            });
        } else {
            for (i, dst) in cf.chunks_mut(m * n).enumerate() {
                unsafe { sgemm::sgemm(m, n, k, mat(a, la, i), mat(b, lb, i), dst, true) };
            }
        }
        return c;
    }
    let mut c = vec![R::zero(); batch * m * n];
    let threads = rayon::current_num_threads();
    let run = |i: usize, dst: &mut [R], par: Parallelism| unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr().add(la.offset + i * la.strides[0]),
            la.strides[2] as isize,
            la.strides[1] as isize,
            b.as_ptr().add(lb.offset + i * lb.strides[0]),
            lb.strides[2] as isize,
            lb.strides[1] as isize,
            R::zero(),
            R::one(),
            false,
            false,
            false,
            par,
        )
    };
    if batch > 1 && m * n * k < SMALL_GEMM {
        c.par_chunks_mut(m * n).enumerate().for_each(|(i, dst)| run(i, dst, Parallelism::None));
    } else {
        let par = if threads > 1 && m * n * k >= 1 << 15 { Parallelism::Rayon(threads) } else { Parallelism::None };
        for (i, dst) in c.chunks_mut(m * n).enumerate() {
            run(i, dst, par);
        }
    }
    c
}

/// Storage-level product of two 3-D layouts into a new (batch, m, n) tensor of `dtype`.
#[track_caller]
fn product(a: &Tensor, la: Layout, b: &Tensor, lb: Layout, dtype: DType, op: &'static str) -> Tensor {
    let shape = [la.shape[0], la.shape[1], lb.shape[2]];
    let span = cost::begin();
    let out = Storage::alloc(a.device(), dtype, shape.iter().product(), op);
    let (batch, m, k, n) = (la.shape[0], la.shape[1], la.shape[2], lb.shape[2]);
    let cost = || {
        let read = (batch * m * k + batch * k * n) * dtype.size();
        let written = batch * m * n * dtype.size();
        (OpKind::Matmul, 2 * (batch * m * n * k) as u64, read as u64, written as u64, dtype.size() as u8)
    };
    let buf = (a.device() == Device::Cpu).then(|| {
        match dtype {
            DType::F32 | DType::F64 => crate::with_real!(dtype, R, {
                let (ba, bb) = (a.storage().buffer(), b.storage().buffer());
                cpu::to_buffer(gemm_batched::<R>(R::slice(&ba).unwrap(), &la, R::slice(&bb).unwrap(), &lb), dtype)
            }),
            _ => {
                // bf16/f16: widen both operands to f32 around gemm. The staging buffers are
                // real host memory, so they go through the allocator as workspace.
                let _w = runtime::category(Category::Workspace);
                let (wa, wla) = widen(a, &la);
                let (wb, wlb) = widen(b, &lb);
                let wc = Tensor::compute::<f32>(Device::Cpu, DType::F32, &shape, "matmul_widen", &[], || {
                    cpu::with_slice::<f32, _>(&wa, |sa| cpu::with_slice::<f32, _>(&wb, |sb| gemm_batched::<f32>(sa, &wla, sb, &wlb)))
                });
                drop((wa, wb));
                // Rounded straight from the f32 result (no intermediate copy).
                cpu::with_slice::<f32, _>(&wc, |v| cpu::slice_to_buffer(v, dtype))
            }
        }
    });
    if let Some(buf) = buf {
        out.set(buf);
    }
    cost::end(span, a.device(), op, cost);
    Tensor::from_parts(out, Layout::contiguous(&shape))
}

/// An f32 copy of a bf16/f16 operand for the f32 kernel, and its layout there. A transposed
/// or otherwise permuted dense operand is widened in storage order with its strides kept
/// (sequential reads; gemm takes any strides); a sparse one (broadcast, gaps) is gathered.
#[track_caller]
fn widen(t: &Tensor, l: &Layout) -> (Tensor, Layout) {
    let span = if l.numel() == 0 { 0 } else { 1 + l.shape.iter().zip(&l.strides).map(|(&n, &s)| (n - 1) * s).sum::<usize>() };
    if span == l.numel() {
        let flat = Tensor::from_parts(t.storage().clone(), Layout { shape: vec![span], strides: vec![1], offset: l.offset });
        let w = Tensor::compute::<f32>(Device::Cpu, DType::F32, &[span], "matmul_widen", &[], || cpu::read::<f32>(&flat));
        return (w, Layout { shape: l.shape.clone(), strides: l.strides.clone(), offset: 0 });
    }
    let w = Tensor::compute::<f32>(Device::Cpu, DType::F32, &l.shape, "matmul_widen", &[], || {
        cpu::read::<f32>(&Tensor::from_parts(t.storage().clone(), l.clone()))
    });
    (w, Layout::contiguous(&l.shape))
}

fn as3d(l: &Layout) -> Layout {
    Layout { shape: vec![1, l.shape[0], l.shape[1]], strides: vec![0, l.strides[0], l.strides[1]], offset: l.offset }
}

/// Column-major 2-D layout (a transposed contiguous matrix).
fn is_col_major(t: &Tensor) -> bool {
    let l = t.layout();
    l.strides[0] == 1 && l.strides[1] == l.shape[0] && l.shape[0] > 1 && l.shape[1] > 1
}

impl Tensor {
    /// 2-D matrix product (`aten::mm`). Saves `self` only if `other` needs grad and vice
    /// versa; gradients come back in their input's layout (so a transposed weight's gradient
    /// lands contiguous, as in PyTorch).
    #[track_caller]
    pub fn mm(&self, other: &Tensor) -> Tensor {
        if let Some((a, b)) = autocast::lower_pair(self, other) {
            return a.mm(&b);
        }
        assert!(self.rank() == 2 && other.rank() == 2, "mm expects matrices, got {:?} and {:?}", self.shape(), other.shape());
        assert_eq!(self.shape()[1], other.shape()[0], "mm: {:?} x {:?}", self.shape(), other.shape());
        assert_eq!(self.dtype(), other.dtype(), "mm: dtype mismatch {} vs {}", self.dtype(), other.dtype());
        // The autograd wrapper saves the inputs before the kernel runs: a checkpoint's
        // recomputation that ends on them stops before the product is allocated.
        let grad = needs_grad(&[self, other]);
        let (ra, rb) = (self.requires_grad(), other.requires_grad());
        let sa = (grad && rb).then(|| save(self));
        let sb = (grad && ra).then(|| save(other));
        let out = product(self, as3d(self.layout()), other, as3d(other.layout()), self.dtype(), "mm");
        let out = out.unsafe_view(&[self.shape()[0], other.shape()[1]]);
        if grad {
            let (a_col, b_col) = (is_col_major(self), is_col_major(other));
            return attach(out, "MmBackward0", &[self, other], Box::new(move |g| {
                // Both saved operands are unpacked first and held until the node returns.
                let (b, a) = (sb.as_ref().map(|s| s.unpack()), sa.as_ref().map(|s| s.unpack()));
                // PyTorch's MmBackward0 computes the mat2 gradient first (profiler order).
                let gb = a.as_ref().map(|a| if b_col { g.t().mm(a).t() } else { a.t().mm(&g) });
                let ga = b.as_ref().map(|b| if a_col { b.mm(&g.t()).t() } else { g.mm(&b.t()) });
                vec![ga, gb]
            }));
        }
        out
    }

    /// Batched matrix product of 3-D tensors (`aten::bmm`).
    #[track_caller]
    pub fn bmm(&self, other: &Tensor) -> Tensor {
        if let Some((a, b)) = autocast::lower_pair(self, other) {
            return a.bmm(&b);
        }
        assert!(self.rank() == 3 && other.rank() == 3, "bmm expects 3-D tensors, got {:?} and {:?}", self.shape(), other.shape());
        assert_eq!(self.shape()[0], other.shape()[0], "bmm batch mismatch");
        assert_eq!(self.shape()[2], other.shape()[1], "bmm: {:?} x {:?}", self.shape(), other.shape());
        assert_eq!(self.dtype(), other.dtype(), "bmm: dtype mismatch {} vs {}", self.dtype(), other.dtype());
        let grad = needs_grad(&[self, other]);
        let (ra, rb) = (self.requires_grad(), other.requires_grad());
        let sa = (grad && rb).then(|| save(self));
        let sb = (grad && ra).then(|| save(other));
        let out = product(self, self.layout().clone(), other, other.layout().clone(), self.dtype(), "bmm");
        // cuBLAS's copies of batches it cannot read in place die inside the op.
        drop(super::operand_copies::bmm(self, other));
        if grad {
            return attach(out, "BmmBackward0", &[self, other], Box::new(move |g| {
                let (b, a) = (sb.as_ref().map(|s| s.unpack()), sa.as_ref().map(|s| s.unpack()));
                // mat2's gradient first, as MmBackward0.
                let gb = a.as_ref().map(|a| a.transpose(1, 2).bmm(&g));
                let ga = b.as_ref().map(|b| g.bmm(&b.transpose(1, 2)));
                vec![ga, gb]
            }));
        }
        out
    }

    /// `F.linear(x, w, b)` with a bias: ATen flattens the input and runs `addmm(b, x2d, wᵀ)`
    /// (one (N, out) output, viewed back). AddmmBackward0 returns grad·w for the input and
    /// (gradᵀ·x)ᵀᵀ (contiguous, in w's layout) for the weight, and the bias gradient is the
    /// grad summed to the bias's shape afterwards.
    #[track_caller]
    pub fn linear_bias(&self, w: &Tensor, b: &Tensor) -> Tensor {
        // F.linear is on autocast's lower-precision list: all three arguments are cast, right
        // to left (autocast::lower_pair), then the op reruns on the cast ones.
        if let Some(low) = autocast::active() {
            if [self, w, b].iter().any(|t| t.dtype().is_float() && t.dtype() != DType::F64 && t.dtype() != low) {
                let b = autocast::lower(b);
                let w = autocast::lower(w);
                return autocast::lower(self).linear_bias(&w, &b);
            }
        }
        let (in_f, out_f) = (self.dim(-1), w.dim(0));
        let mut out_shape = self.shape().to_vec();
        *out_shape.last_mut().expect("linear input has a last dim") = out_f;
        let x2 = self.reshape(&[usize::MAX, in_f]);
        let out = {
            let _g = runtime::no_grad();
            let o = x2.mm(&w.t());
            if o.device() == crate::engine::Device::Cpu {
                o.add_(&b.detach().expand(o.shape()));
            }
            o
        };
        let out = if needs_grad(&[&x2, w, b]) {
            // As MmBackward0: mat1 is saved only for mat2's gradient and mat2 only for mat1's
            // (a frozen weight, as under peft, keeps no input alive).
            let (rx, rw, rb) = (x2.requires_grad(), w.requires_grad(), b.requires_grad());
            let (xs, ws) = (rw.then(|| save(&x2)), rx.then(|| save(w)));
            attach(out, "AddmmBackward0", &[b, &x2, w], Box::new(move |g| {
                let (x, w) = (xs.as_ref().map(|s| s.unpack()), ws.as_ref().map(|s| s.unpack()));
                let gx = w.as_ref().map(|w| g.mm(w));
                let gw = x.as_ref().map(|x| g.t().mm(x));
                drop((x, w));
                let gb = rb.then(|| g.sum_dim(0, false));
                vec![gb, gx, gw]
            }))
        } else {
            out
        };
        out.view(&out_shape)
    }

    /// `torch.matmul` for rank ≥ 2 operands, following ATen: fold the batch of an N-D × 2-D
    /// product into one `mm` (via `reshape`, which copies when the layout does not allow a
    /// view), otherwise broadcast the batch dims and `bmm`.
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        if let Some((a, b)) = autocast::lower_pair(self, other) {
            return a.matmul(&b);
        }
        let (d1, d2) = (self.rank(), other.rank());
        assert!(d1 >= 2 && d2 >= 2, "matmul expects rank >= 2, got {:?} and {:?}", self.shape(), other.shape());
        if d1 == 2 && d2 == 2 {
            return self.mm(other);
        }
        if d1 >= 3 && d2 == 2 && should_fold(self, other) {
            let k = self.shape()[d1 - 1];
            let mut out_shape = self.shape()[..d1 - 1].to_vec();
            out_shape.push(other.shape()[1]);
            return self.reshape(&[usize::MAX, k]).mm(other).reshape(&out_shape);
        }
        let (b1, b2) = (&self.shape()[..d1 - 2], &other.shape()[..d2 - 2]);
        let batch = broadcast_shapes(b1, b2);
        let nb: usize = batch.iter().product();
        let (n, m1) = (self.shape()[d1 - 2], self.shape()[d1 - 1]);
        let (m2, p) = (other.shape()[d2 - 2], other.shape()[d2 - 1]);
        let mut e1 = batch.clone();
        e1.extend([n, m1]);
        let mut e2 = batch.clone();
        e2.extend([m2, p]);
        let t1 = self.expand(&e1).reshape(&[nb, n, m1]);
        let t2 = other.expand(&e2).reshape(&[nb, m2, p]);
        let mut out_shape = batch;
        out_shape.extend([n, p]);
        t1.bmm(&t2).reshape(&out_shape)
    }
}

/// ATen's `should_fold` for an N-D (N ≥ 3) × 2-D product.
fn should_fold(t1: &Tensor, t2: &Tensor) -> bool {
    if t2.requires_grad() && runtime::is_grad_enabled() {
        return true;
    }
    let l = t1.layout();
    (0..l.rank() - 2).all(|i| l.strides[i] == l.strides[i + 1] * l.shape[i + 1])
}
