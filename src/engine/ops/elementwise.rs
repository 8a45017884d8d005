//! Elementwise ops with broadcasting, their PyTorch save rules, and the in-place updates
//! optimizers and gradient accumulation use (no autograd on those, as under no_grad).
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
#[allow(unused_imports)]
use crate::engine::dtype::Real as _;
use crate::engine::autocast;
use crate::engine::autograd::{attach, needs_grad, save};
use crate::engine::cpu::{self, CReal};
use crate::engine::dtype::{DType, Real};
use crate::engine::layout::{broadcast_shapes, iterator_strides, Layout};
use crate::engine::storage::Buffer;
use crate::engine::tensor::{write_strided, Tensor};
use crate::engine::cost;
use crate::record::compute::OpKind;
use crate::with_real;
use rayon::prelude::*;

/// A unary function written once for every compute type.
pub trait UnFn: Copy + Send + Sync + 'static {
    fn call<R: Real>(self, x: R) -> R;
}
/// A binary function written once for every compute type.
pub trait BinFn: Copy + Send + Sync + 'static {
    fn call<R: Real>(self, a: R, b: R) -> R;
}

macro_rules! unfn {
    ($name:ident, |$x:ident| $e:expr) => {
        #[derive(Clone, Copy)]
        pub struct $name;
        impl UnFn for $name {
            #[inline(always)]
            fn call<R: Real>(self, $x: R) -> R {
                $e
            }
        }
    };
    ($name:ident($f:ident), |$x:ident| $e:expr) => {
        #[derive(Clone, Copy)]
        pub struct $name(pub f64);
        impl UnFn for $name {
            #[inline(always)]
            fn call<R: Real>(self, $x: R) -> R {
                let $f = R::lit(self.0);
                $e
            }
        }
    };
}
macro_rules! binfn {
    ($name:ident, |$a:ident, $b:ident| $e:expr) => {
        #[derive(Clone, Copy)]
        pub struct $name;
        impl BinFn for $name {
            #[inline(always)]
            fn call<R: Real>(self, $a: R, $b: R) -> R {
                $e
            }
        }
    };
    ($name:ident($f:ident), |$a:ident, $b:ident| $e:expr) => {
        #[derive(Clone, Copy)]
        pub struct $name(pub f64);
        impl BinFn for $name {
            #[inline(always)]
            fn call<R: Real>(self, $a: R, $b: R) -> R {
                let $f = R::lit(self.0);
                $e
            }
        }
    };
}

unfn!(Neg, |x| -x);
unfn!(Exp, |x| x.fexp());
unfn!(Log, |x| x.ln());
unfn!(Sqrt, |x| x.sqrt());
unfn!(Rsqrt, |x| R::one() / x.sqrt());
unfn!(Recip, |x| R::one() / x);
unfn!(Sigmoid, |x| R::one() / (R::one() + (-x).fexp()));
unfn!(Silu, |x| x / (R::one() + (-x).fexp()));
unfn!(Tanh, |x| x.tanh());
// gelu(x, approximate="tanh"): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
unfn!(GeluTanh, |x| {
    let inner = R::lit(0.797_884_560_802_865_4) * (x + R::lit(0.044_715) * x * x * x);
    R::lit(0.5) * x * (R::one() + inner.tanh())
});
unfn!(Cos, |x| x.cos());
unfn!(Sin, |x| x.sin());
unfn!(PowS(p), |x| {
    if p == R::lit(2.0) {
        x * x
    } else if p == R::one() {
        x
    } else if p == R::lit(3.0) {
        x * x * x
    } else if p == R::lit(0.5) {
        x.sqrt()
    } else {
        x.powf(p)
    }
});
unfn!(AddS(s), |x| x + s);
unfn!(MulS(s), |x| x * s);
unfn!(DivS(s), |x| x / s);
unfn!(RSubS(s), |x| s - x);
unfn!(RDivS(s), |x| s / x);
unfn!(ClampMax(m), |x| if x > m { m } else { x });
binfn!(Add, |a, b| a + b);
binfn!(Sub, |a, b| a - b);
binfn!(Mul, |a, b| a * b);
binfn!(Div, |a, b| a / b);
binfn!(AddScaled(alpha), |a, b| a + alpha * b);
binfn!(Lerp(w), |a, b| a + w * (b - a));
binfn!(SigmoidBackward, |g, r| g * r * (R::one() - r));
binfn!(SiluBackward, |g, x| {
    let s = R::one() / (R::one() + (-x).fexp());
    g * s * (R::one() + x * (R::one() - s))
});
binfn!(TanhBackward, |g, y| g * (R::one() - y * y));
binfn!(GeluTanhBackward, |g, x| {
    let k = R::lit(0.797_884_560_802_865_4);
    let c = R::lit(0.044_715);
    let t = (k * (x + c * x * x * x)).tanh();
    let d = R::lit(0.5) * (R::one() + t) + R::lit(0.5) * x * (R::one() - t * t) * k * (R::one() + R::lit(3.0) * c * x * x);
    g * d
});
binfn!(Ge, |a, b| if a >= b { R::one() } else { R::zero() });

fn float_dtype(t: &Tensor) -> DType {
    if t.dtype().is_float() {
        t.dtype()
    } else {
        DType::F32
    }
}

/// `f(x)` into a new tensor of `dtype`.
#[track_caller]
pub(crate) fn unary_raw<F: UnFn>(x: &Tensor, f: F, dtype: DType, op: &'static str) -> Tensor {
    // TensorIterator lays the output out in x's physical dim order.
    let strides = iterator_strides(&[x.layout()], x.shape());
    with_real!(dtype, R, {
        Tensor::build_strided(x.device(), dtype, x.shape(), strides, op, &[x], || {
            cpu::to_buffer(cpu::with_slice::<R, _>(x, |s| cpu::map(s, move |v| f.call(v))), dtype)
        })
    })
}

/// Compute `f(a, b)` with broadcasting as `R` values (cpu only).
fn binary_values<R: CReal, F: BinFn>(a: &Tensor, b: &Tensor, shape: &[usize], f: F) -> Vec<R> {
    if a.shape() == shape && b.shape() == shape {
        return cpu::with_slice::<R, _>(a, |sa| cpu::with_slice::<R, _>(b, |sb| cpu::zip(sa, sb, move |x, y| f.call(x, y))));
    }
    let la = Layout::contiguous(a.shape()).expand(shape);
    let lb = Layout::contiguous(b.shape()).expand(shape);
    cpu::with_slice::<R, _>(a, |sa| cpu::with_slice::<R, _>(b, |sb| cpu::broadcast2(sa, &la, sb, &lb, move |x, y| f.call(x, y))))
}

#[track_caller]
pub(crate) fn binary_raw<F: BinFn>(a: &Tensor, b: &Tensor, f: F, dtype: DType, op: &'static str) -> Tensor {
    assert_eq!(a.device(), b.device(), "{op}: tensors on different devices");
    let shape = broadcast_shapes(a.shape(), b.shape());
    let strides = iterator_strides(&[a.layout(), b.layout()], &shape);
    with_real!(dtype, R, {
        Tensor::build_strided(a.device(), dtype, &shape, strides, op, &[a, b], || cpu::to_buffer(binary_values::<R, F>(a, b, &shape, f), dtype))
    })
}

/// Gradient of a broadcast input: summed back to its shape and cast to its dtype.
fn reduce_grad(g: Tensor, like: &Tensor) -> Tensor {
    g.sum_to_shape(like.shape()).to_dtype(like.dtype())
}

impl Tensor {
    // ---------------------------------------------------------------- binary
    #[track_caller]
    pub fn add(&self, o: &Tensor) -> Tensor {
        let out = binary_raw(self, o, Add, DType::promote(float_dtype(self), float_dtype(o)), "add");
        if needs_grad(&[self, o]) {
            let (a, b) = (self.meta_like(), o.meta_like());
            let (ra, rb) = (self.requires_grad(), o.requires_grad());
            return attach(out, "AddBackward0", &[self, o], Box::new(move |g| {
                vec![ra.then(|| reduce_grad(g.clone(), &a)), rb.then(|| reduce_grad(g, &b))]
            }));
        }
        out
    }
    #[track_caller]
    pub fn sub(&self, o: &Tensor) -> Tensor {
        let out = binary_raw(self, o, Sub, DType::promote(float_dtype(self), float_dtype(o)), "sub");
        if needs_grad(&[self, o]) {
            let (a, b) = (self.meta_like(), o.meta_like());
            let (ra, rb) = (self.requires_grad(), o.requires_grad());
            return attach(out, "SubBackward0", &[self, o], Box::new(move |g| {
                // apply returns both raw gradients (self's is grad itself, other's a new
                // -grad); the engine's validate_outputs then sums and casts them in input
                // order, so the whole -grad is alive while self's is cast (measured on an H200:
                // cs336's log-softmax `x - lse` under autocast, tests/gpu_grid.rs).
                let gb = rb.then(|| g.neg());
                let ga = ra.then(|| g.clone());
                drop(g);
                vec![ga.map(|x| reduce_grad(x, &a)), gb.map(|x| reduce_grad(x, &b))]
            }));
        }
        out
    }
    #[track_caller]
    pub fn mul(&self, o: &Tensor) -> Tensor {
        let out = binary_raw(self, o, Mul, DType::promote(float_dtype(self), float_dtype(o)), "mul");
        if needs_grad(&[self, o]) {
            // PyTorch saves `other` only if self needs grad, and `self` only if other does.
            let (ra, rb) = (self.requires_grad(), o.requires_grad());
            let sb = ra.then(|| save(o));
            let sa = rb.then(|| save(self));
            let (a, b) = (self.meta_like(), o.meta_like());
            return attach(out, "MulBackward0", &[self, o], Box::new(move |g| {
                // The generated node unpacks every saved variable first and holds it until
                // it returns (which matters when an unpack hands over the only reference,
                // as a checkpoint's does).
                let (ob, oa) = (sb.as_ref().map(|s| s.unpack()), sa.as_ref().map(|s| s.unpack()));
                let ga = ob.as_ref().map(|ob| g.mul(ob));
                let gb = oa.as_ref().map(|oa| g.mul(oa));
                // apply's unpacked locals die as it returns (a checkpoint's recomputed tensor
                // with them); the engine's validate_outputs then sums each gradient to its
                // input's shape and casts it to its dtype, in input order, while the saved
                // variables themselves live on until release_variables.
                drop((ob, oa));
                vec![ga.map(|x| reduce_grad(x, &a)), gb.map(|x| reduce_grad(x, &b))]
            }));
        }
        out
    }
    #[track_caller]
    pub fn div(&self, o: &Tensor) -> Tensor {
        let out = binary_raw(self, o, Div, DType::promote(float_dtype(self), float_dtype(o)), "div");
        self.div_backward(o, out)
    }

    /// `self /= other` under autograd, modelled out of place (the same bytes under autograd)
    /// but in self's type: an in-place quotient keeps it (DeepSeek-V3's router under autocast
    /// over bf16 weights divides its bf16 weights by an fp32 sum).
    #[track_caller]
    pub fn div_keeping_dtype(&self, o: &Tensor) -> Tensor {
        let out = binary_raw(self, o, Div, float_dtype(self), "div_");
        self.div_backward(o, out)
    }

    #[track_caller]
    fn div_backward(&self, o: &Tensor, out: Tensor) -> Tensor {
        if needs_grad(&[self, o]) {
            let (ra, rb) = (self.requires_grad(), o.requires_grad());
            let so = save(o);
            let sa = rb.then(|| save(self));
            let (a, b) = (self.meta_like(), o.meta_like());
            return attach(out, "DivBackward0", &[self, o], Box::new(move |g| {
                let so = so.unpack();
                // The generated DivBackward0 computes `other`'s gradient first,
                // -grad * ((self / other) / other), the quotients before the negation, and
                // frees its temporaries before `self`'s, grad / other. The engine sums
                // broadcast gradients back to their inputs' shapes afterwards, in input order.
                let gb = sa.map(|sa| {
                    let q = sa.unpack().div(&so);
                    let q2 = q.div(&so);
                    let n = g.neg();
                    let r = n.mul(&q2);
                    drop((n, q2, q));
                    r
                });
                let ga = ra.then(|| g.div(&so));
                vec![ga.map(|ga| reduce_grad(ga, &a)), gb.map(|gb| reduce_grad(gb, &b))]
            }));
        }
        out
    }

    // ---------------------------------------------------------------- scalar
    #[track_caller]
    pub fn add_scalar(&self, s: f64) -> Tensor {
        let out = unary_raw(self, AddS(s), float_dtype(self), "add");
        if needs_grad(&[self]) {
            return attach(out, "AddBackward1", &[self], Box::new(|g| vec![Some(g)]));
        }
        out
    }
    #[track_caller]
    pub fn mul_scalar(&self, s: f64) -> Tensor {
        let out = unary_raw(self, MulS(s), float_dtype(self), "mul");
        if needs_grad(&[self]) {
            return attach(out, "MulBackward1", &[self], Box::new(move |g| vec![Some(g.mul_scalar(s))]));
        }
        out
    }
    #[track_caller]
    pub fn div_scalar(&self, s: f64) -> Tensor {
        let out = unary_raw(self, DivS(s), float_dtype(self), "div");
        if needs_grad(&[self]) {
            return attach(out, "DivBackward1", &[self], Box::new(move |g| vec![Some(g.div_scalar(s))]));
        }
        out
    }
    /// `s - self`
    #[track_caller]
    pub fn rsub_scalar(&self, s: f64) -> Tensor {
        let out = unary_raw(self, RSubS(s), float_dtype(self), "rsub");
        if needs_grad(&[self]) {
            return attach(out, "RsubBackward1", &[self], Box::new(|g| vec![Some(g.neg())]));
        }
        out
    }

    /// `s / self` (no autograd: the optimizer-side scalar math of clip_grad_norm_).
    #[track_caller]
    pub fn rdiv_scalar(&self, s: f64) -> Tensor {
        assert!(!needs_grad(&[self]), "rdiv_scalar has no backward");
        unary_raw(self, RDivS(s), float_dtype(self), "div")
    }
    /// `torch.clamp(self, max=m)` (no autograd).
    #[track_caller]
    pub fn clamp_max(&self, m: f64) -> Tensor {
        assert!(!needs_grad(&[self]), "clamp_max has no backward");
        unary_raw(self, ClampMax(m), self.dtype(), "clamp")
    }

    // ---------------------------------------------------------------- unary
    #[track_caller]
    pub fn neg(&self) -> Tensor {
        let out = unary_raw(self, Neg, float_dtype(self), "neg");
        if needs_grad(&[self]) {
            return attach(out, "NegBackward0", &[self], Box::new(|g| vec![Some(g.neg())]));
        }
        out
    }
    #[track_caller]
    pub fn exp(&self) -> Tensor {
        if let Some(x) = autocast::fp32_input(self) {
            return x.exp();
        }
        let out = unary_raw(self, Exp, float_dtype(self), "exp");
        if needs_grad(&[self]) {
            let r = save(&out);
            return attach(out, "ExpBackward0", &[self], Box::new(move |g| vec![Some(g.mul(&r.unpack()))]));
        }
        out
    }
    #[track_caller]
    pub fn log(&self) -> Tensor {
        if let Some(x) = autocast::fp32_input(self) {
            return x.log();
        }
        let out = unary_raw(self, Log, float_dtype(self), "log");
        if needs_grad(&[self]) {
            let x = save(self);
            return attach(out, "LogBackward0", &[self], Box::new(move |g| vec![Some(g.div(&x.unpack()))]));
        }
        out
    }
    #[track_caller]
    pub fn sqrt(&self) -> Tensor {
        let out = unary_raw(self, Sqrt, float_dtype(self), "sqrt");
        if needs_grad(&[self]) {
            let r = save(&out);
            return attach(out, "SqrtBackward0", &[self], Box::new(move |g| vec![Some(g.div(&r.unpack().mul_scalar(2.0)))]));
        }
        out
    }
    #[track_caller]
    pub fn rsqrt(&self) -> Tensor {
        if let Some(x) = autocast::fp32_input(self) {
            return x.rsqrt();
        }
        let out = unary_raw(self, Rsqrt, float_dtype(self), "rsqrt");
        if needs_grad(&[self]) {
            let r = save(&out);
            return attach(out, "RsqrtBackward0", &[self], Box::new(move |g| {
                let cube = r.unpack().pow_scalar(3.0);
                vec![Some(g.mul_scalar(-0.5).mul(&cube))]
            }));
        }
        out
    }
    /// `1 / self`; saves its output.
    #[track_caller]
    pub fn reciprocal(&self) -> Tensor {
        if let Some(x) = autocast::fp32_input(self) {
            return x.reciprocal();
        }
        let out = unary_raw(self, Recip, float_dtype(self), "reciprocal");
        if needs_grad(&[self]) {
            let r = save(&out);
            return attach(out, "ReciprocalBackward0", &[self], Box::new(move |g| {
                let r = r.unpack();
                vec![Some(g.neg().mul(&r.mul(&r)))]
            }));
        }
        out
    }
    #[track_caller]
    pub fn pow_scalar(&self, p: f64) -> Tensor {
        if let Some(x) = autocast::fp32_input(self) {
            return x.pow_scalar(p);
        }
        let out = unary_raw(self, PowS(p), float_dtype(self), "pow");
        if needs_grad(&[self]) {
            let x = save(self);
            return attach(out, "PowBackward0", &[self], Box::new(move |g| {
                if p == 0.0 {
                    return vec![Some(g.zeros_like())];
                }
                vec![Some(g.mul(&x.unpack().pow_scalar(p - 1.0).mul_scalar(p)))]
            }));
        }
        out
    }
    #[track_caller]
    pub fn square(&self) -> Tensor {
        self.pow_scalar(2.0)
    }
    #[track_caller]
    pub fn sigmoid(&self) -> Tensor {
        let out = unary_raw(self, Sigmoid, float_dtype(self), "sigmoid");
        if needs_grad(&[self]) {
            let r = save(&out);
            return attach(out, "SigmoidBackward0", &[self], Box::new(move |g| {
                let dt = g.dtype();
                vec![Some(binary_raw(&g, &r.unpack(), SigmoidBackward, dt, "sigmoid_backward"))]
            }));
        }
        out
    }
    /// Fused SiLU (`F.silu`): saves its input.
    #[track_caller]
    pub fn silu(&self) -> Tensor {
        let out = unary_raw(self, Silu, float_dtype(self), "silu");
        if needs_grad(&[self]) {
            let x = save(self);
            return attach(out, "SiluBackward0", &[self], Box::new(move |g| {
                let dt = g.dtype();
                vec![Some(binary_raw(&g, &x.unpack(), SiluBackward, dt, "silu_backward"))]
            }));
        }
        out
    }
    /// `torch.tanh`: saves its output (`tanh_backward(grad, result)`).
    #[track_caller]
    pub fn tanh(&self) -> Tensor {
        let out = unary_raw(self, Tanh, float_dtype(self), "tanh");
        if needs_grad(&[self]) {
            let r = save(&out);
            return attach(out, "TanhBackward0", &[self], Box::new(move |g| {
                let dt = g.dtype();
                vec![Some(binary_raw(&g, &r.unpack(), TanhBackward, dt, "tanh_backward"))]
            }));
        }
        out
    }
    /// `F.gelu(x, approximate="tanh")` (transformers' `gelu_pytorch_tanh`): saves its input
    /// (`gelu_backward(grad, self, approximate)`).
    #[track_caller]
    pub fn gelu_tanh(&self) -> Tensor {
        let out = unary_raw(self, GeluTanh, float_dtype(self), "gelu");
        if needs_grad(&[self]) {
            let x = save(self);
            return attach(out, "GeluBackward0", &[self], Box::new(move |g| {
                let dt = g.dtype();
                vec![Some(binary_raw(&g, &x.unpack(), GeluTanhBackward, dt, "gelu_backward"))]
            }));
        }
        out
    }
    #[track_caller]
    pub fn cos(&self) -> Tensor {
        assert!(!self.requires_grad() || !crate::engine::runtime::is_grad_enabled(), "cos has no backward here");
        unary_raw(self, Cos, float_dtype(self), "cos")
    }
    #[track_caller]
    pub fn sin(&self) -> Tensor {
        assert!(!self.requires_grad() || !crate::engine::runtime::is_grad_enabled(), "sin has no backward here");
        unary_raw(self, Sin, float_dtype(self), "sin")
    }

    // ---------------------------------------------------------------- masks
    /// `self >= other` (broadcast) as bool.
    #[track_caller]
    pub fn ge(&self, o: &Tensor) -> Tensor {
        let shape = broadcast_shapes(self.shape(), o.shape());
        Tensor::build(self.device(), DType::Bool, &shape, "ge", &[self, o], || {
            let v = binary_values::<f64, Ge>(self, o, &shape, Ge);
            Buffer::Bool(v.into_iter().map(|x| x != 0.0).collect())
        })
    }
    /// `torch.where(cond, self, value)`: saves only the condition.
    #[track_caller]
    pub fn where_scalar(&self, cond: &Tensor, value: f64) -> Tensor {
        let shape = broadcast_shapes(self.shape(), cond.shape());
        let dtype = self.dtype();
        // where.ScalarOther wraps the scalar as a 0-d tensor on the operand's device.
        let scalar = Tensor::full(&[], value, dtype, self.device());
        let out = with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, &shape, "where", &[self, cond], || {
                let c = cpu::read_bool(&cond.expand(&shape).detach());
                let x = cpu::read::<R>(&self.detach().expand(&shape));
                let v = R::lit(value);
                c.iter().zip(x).map(|(&c, x)| if c { x } else { v }).collect()
            })
        });
        drop(scalar);
        if needs_grad(&[self]) {
            let c = save(cond);
            let in_shape = self.meta_like();
            return attach(out, "WhereBackward0", &[self], Box::new(move |g| {
                vec![Some(reduce_grad(g.where_scalar(&c.unpack(), 0.0), &in_shape))]
            }));
        }
        out
    }
    /// Upper triangle from diagonal `k` up (as `torch.triu`), no autograd.
    #[track_caller]
    pub fn triu(&self, k: i64) -> Tensor {
        assert_eq!(self.rank(), 2, "triu expects a matrix");
        let (r, c) = (self.shape()[0], self.shape()[1]);
        let dtype = self.dtype();
        with_real!(dtype, R, {
            Tensor::compute::<R>(self.device(), dtype, self.shape(), "triu", &[self], || {
                let mut v = cpu::read::<R>(self);
                for i in 0..r {
                    for j in 0..c {
                        if (j as i64) - (i as i64) < k {
                            v[i * c + j] = R::zero();
                        }
                    }
                }
                v
            })
        })
    }

    /// A shape/dtype-only stand-in used by backward closures that need no data.
    #[track_caller]
    pub(crate) fn meta_like(&self) -> Tensor {
        Tensor::shape_only(self.shape(), self.dtype())
    }

    // ---------------------------------------------------------------- in place (no autograd)
    /// An in-place kernel, recorded as op `name` doing `per_elem` FLOPs per element and
    /// reading `others` besides itself.
    fn inplace_op(&self, name: &'static str, per_elem: u64, others: &[&Tensor], kernel: impl FnOnce()) {
        let cost = || {
            let read = cost::read_bytes(self) + others.iter().map(|t| cost::read_bytes(t)).sum::<u64>();
            (OpKind::Elementwise, self.numel() as u64 * per_elem, read, (self.numel() * self.dtype().size()) as u64, self.dtype().size() as u8)
        };
        cost::timed(self.device(), name, cost, kernel);
    }
    fn inplace<F: BinFn>(&self, name: &'static str, per_elem: u64, other: Option<&Tensor>, f: F) {
        let others: Vec<&Tensor> = other.into_iter().collect();
        self.inplace_op(name, per_elem, &others, || self.inplace_kernel(other, f));
    }
    fn inplace_kernel<F: BinFn>(&self, other: Option<&Tensor>, f: F) {
        let l = self.layout().clone();
        with_real!(self.dtype(), R, {
            let run = |o: &[R]| {
                let mut buf = self.storage().buffer_mut();
                if self.dtype() == R::DTYPE && l.is_contiguous() {
                    let s = &mut R::slice_mut(&mut buf).unwrap()[l.offset..l.offset + l.numel()];
                    const CH: usize = 1 << 14;
                    if o.is_empty() {
                        s.par_chunks_mut(CH).for_each(|c| c.iter_mut().for_each(|x| *x = f.call(*x, R::zero())));
                    } else {
                        s.par_chunks_mut(CH).zip(o.par_chunks(CH)).for_each(|(c, oc)| c.iter_mut().zip(oc).for_each(|(x, &y)| *x = f.call(*x, y)));
                    }
                } else {
                    drop(buf);
                    let cur = cpu::read::<R>(self);
                    let new: Vec<R> = if o.is_empty() {
                        cur.iter().map(|&x| f.call(x, R::zero())).collect()
                    } else {
                        cur.iter().zip(o).map(|(&x, &y)| f.call(x, y)).collect()
                    };
                    let mut buf = self.storage().buffer_mut();
                    write_strided(&mut buf, &l, &new);
                }
            };
            match other {
                // Another storage, same shape: read in place when contiguous in R (no copy).
                Some(o) if o.shape() == self.shape() && !o.same_storage(self) => cpu::with_slice::<R, _>(o, run),
                Some(o) if o.shape() == self.shape() => run(&cpu::read::<R>(o)),
                Some(o) => run(&cpu::read::<R>(&o.detach().expand(self.shape()))),
                None => run(&[]),
            }
        });
    }
    /// `self += other`
    #[track_caller]
    pub fn add_(&self, other: &Tensor) {
        self.inplace("add_", 1, Some(other), Add);
    }
    /// `self += alpha * other`
    #[track_caller]
    pub fn add_scaled_(&self, other: &Tensor, alpha: f64) {
        self.inplace("add_", 2, Some(other), AddScaled(alpha));
    }
    /// `self -= other`
    #[track_caller]
    pub fn sub_(&self, other: &Tensor) {
        self.inplace("sub_", 1, Some(other), AddScaled(-1.0));
    }
    /// `self *= other` (other broadcast to self, e.g. a 0-d clip coefficient).
    #[track_caller]
    pub fn mul_(&self, other: &Tensor) {
        self.inplace("mul_", 1, Some(other), Mul);
    }
    #[track_caller]
    pub fn mul_scalar_(&self, s: f64) {
        #[derive(Clone, Copy)]
        struct M(f64);
        impl BinFn for M {
            fn call<R: Real>(self, a: R, _: R) -> R {
                a * R::lit(self.0)
            }
        }
        self.inplace("mul_", 1, None, M(s));
    }
    /// `self.fill_(value)`
    #[track_caller]
    pub fn fill_(&self, value: f64) {
        #[derive(Clone, Copy)]
        struct F(f64);
        impl BinFn for F {
            fn call<R: Real>(self, _: R, _: R) -> R {
                R::lit(self.0)
            }
        }
        self.inplace("fill_", 0, None, F(value));
    }
    #[track_caller]
    pub fn add_scalar_(&self, s: f64) {
        #[derive(Clone, Copy)]
        struct A(f64);
        impl BinFn for A {
            fn call<R: Real>(self, a: R, _: R) -> R {
                a + R::lit(self.0)
            }
        }
        self.inplace("add_", 1, None, A(s));
    }
    /// `self += w * (end - self)` (`lerp_`)
    #[track_caller]
    pub fn lerp_(&self, end: &Tensor, w: f64) {
        self.inplace("lerp_", 3, Some(end), Lerp(w));
    }
    /// `self += value * t1 * t2` (fused; no device temporaries).
    #[track_caller]
    pub fn addcmul_(&self, t1: &Tensor, t2: &Tensor, value: f64) {
        self.inplace_op("addcmul_", 3, &[t1, t2], || {
            if !self.fused3_f32(t1, t2, |x, a, b| x + value as f32 * a * b) {
                let prod = host_binary(t1, t2, Mul);
                self.inplace_kernel(Some(&prod), AddScaled(value));
            }
        });
    }
    /// `self += value * t1 / t2` (fused; no device temporaries).
    #[track_caller]
    pub fn addcdiv_(&self, t1: &Tensor, t2: &Tensor, value: f64) {
        self.inplace_op("addcdiv_", 3, &[t1, t2], || {
            if !self.fused3_f32(t1, t2, |x, a, b| x + value as f32 * (a / b)) {
                let q = host_binary(t1, t2, Div);
                self.inplace_kernel(Some(&q), AddScaled(value));
            }
        });
    }
    /// `self = f(self, t1, t2)` in one pass over contiguous f32 tensors of one shape (the
    /// optimizers' case); false, doing nothing, for anything else.
    fn fused3_f32(&self, t1: &Tensor, t2: &Tensor, f: impl Fn(f32, f32, f32) -> f32 + Sync) -> bool {
        let same = |t: &Tensor| t.dtype() == DType::F32 && t.shape() == self.shape() && t.is_contiguous() && !t.same_storage(self);
        if self.dtype() != DType::F32 || !self.is_contiguous() || !same(t1) || !same(t2) || self.device() != crate::engine::Device::Cpu {
            return false;
        }
        let n = self.numel();
        let (b1, b2) = (t1.storage().buffer(), t2.storage().buffer());
        let a = &f32::slice(&b1).expect("f32")[t1.layout().offset..][..n];
        let b = &f32::slice(&b2).expect("f32")[t2.layout().offset..][..n];
        let off = self.layout().offset;
        let mut buf = self.storage().buffer_mut();
        let x = &mut f32::slice_mut(&mut buf).expect("f32")[off..off + n];
        const CH: usize = 1 << 14;
        x.par_chunks_mut(CH).zip(a.par_chunks(CH)).zip(b.par_chunks(CH)).for_each(|((x, a), b)| {
            for ((x, &a), &b) in x.iter_mut().zip(a).zip(b) {
                *x = f(*x, a, b);
            }
        });
        true
    }
    #[track_caller]
    pub fn sqrt_(&self) {
        #[derive(Clone, Copy)]
        struct S;
        impl BinFn for S {
            fn call<R: Real>(self, a: R, _: R) -> R {
                a.sqrt()
            }
        }
        self.inplace("sqrt_", 1, None, S);
    }
    /// `self /= other` (other broadcast to self, e.g. a 0-d tensor).
    #[track_caller]
    pub fn div_(&self, other: &Tensor) {
        self.inplace("div_", 1, Some(other), Div);
    }
    #[track_caller]
    pub fn rsqrt_(&self) {
        #[derive(Clone, Copy)]
        struct S;
        impl BinFn for S {
            fn call<R: Real>(self, a: R, _: R) -> R {
                R::one() / a.sqrt()
            }
        }
        self.inplace("rsqrt_", 1, None, S);
    }
    /// `self.clamp_(min=m)`
    #[track_caller]
    pub fn clamp_min_(&self, m: f64) {
        #[derive(Clone, Copy)]
        struct C(f64);
        impl BinFn for C {
            fn call<R: Real>(self, a: R, _: R) -> R {
                let m = R::lit(self.0);
                if a < m { m } else { a }
            }
        }
        self.inplace("clamp_", 1, None, C(m));
    }
    #[track_caller]
    pub fn div_scalar_(&self, s: f64) {
        self.mul_scalar_(1.0 / s);
    }
}

/// The result of a fused kernel's internal step: host scratch, not device memory.
fn host_binary<F: BinFn>(a: &Tensor, b: &Tensor, f: F) -> Tensor {
    let shape = broadcast_shapes(a.shape(), b.shape());
    let dtype = if a.dtype() == DType::F64 { DType::F64 } else { DType::F32 };
    with_real!(dtype, R, {
        let v = binary_values::<R, F>(a, b, &shape, f);
        Tensor::host(cpu::to_buffer(v, dtype), &shape)
    })
}

