//! Host-side helpers every cpu kernel uses: reading strided tensors as a compute type,
//! writing outputs, and the broadcasting loop. bf16/f16/int/bool values are widened here;
//! these widenings live in registers/scratch in PyTorch too, so they are not device memory.
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
use super::dtype::{DType, Elem, Real};
use super::layout::Layout;
use super::storage::Buffer;
use super::tensor::Tensor;
use half::{bf16, f16};
use rayon::prelude::*;

/// Elements per parallel chunk; below this, kernels stay on one thread.
pub const PAR_MIN: usize = 1 << 15;

pub trait CReal: Real {
    fn slice(b: &Buffer) -> Option<&[Self]>;
    fn slice_mut(b: &mut Buffer) -> Option<&mut [Self]>;
    fn wrap(v: Vec<Self>) -> Buffer;
}

impl CReal for f32 {
    fn slice(b: &Buffer) -> Option<&[f32]> {
        if let Buffer::F32(v) = b { Some(v) } else { None }
    }
    fn slice_mut(b: &mut Buffer) -> Option<&mut [f32]> {
        if let Buffer::F32(v) = b { Some(v) } else { None }
    }
    fn wrap(v: Vec<f32>) -> Buffer {
        Buffer::F32(v)
    }
}

impl CReal for f64 {
    fn slice(b: &Buffer) -> Option<&[f64]> {
        if let Buffer::F64(v) = b { Some(v) } else { None }
    }
    fn slice_mut(b: &mut Buffer) -> Option<&mut [f64]> {
        if let Buffer::F64(v) = b { Some(v) } else { None }
    }
    fn wrap(v: Vec<f64>) -> Buffer {
        Buffer::F64(v)
    }
}

/// Run `$body` with `$R` bound to the compute type for `$dt` (f64 for f64, else f32).
#[macro_export]
macro_rules! with_real {
    ($dt:expr, $R:ident, $body:block) => {
        if $dt == $crate::engine::DType::F64 {
            #[allow(dead_code)]
            type $R = f64;
            $body
        } else {
            #[allow(dead_code)]
            type $R = f32;
            $body
        }
    };
}

fn gather<E: Elem, R: Real>(src: &[E], l: &Layout) -> Vec<R> {
    let n = l.numel();
    if l.is_contiguous() {
        let s = &src[l.offset..l.offset + n];
        if n >= PAR_MIN {
            return s.par_iter().map(|&e| R::from_elem(e)).collect();
        }
        return s.iter().map(|&e| R::from_elem(e)).collect();
    }
    if l.rank() > 0 && n >= PAR_MIN {
        // Parallel over rows of the last dimension.
        let inner = *l.shape.last().unwrap();
        let st = *l.strides.last().unwrap();
        let rows = n / inner.max(1);
        let mut out = vec![R::zero(); n];
        out.par_chunks_mut(inner.max(1)).enumerate().for_each(|(r, row)| {
            let base = row_offset(l, r);
            for (j, o) in row.iter_mut().enumerate() {
                *o = R::from_elem(src[base + j * st]);
            }
        });
        debug_assert_eq!(rows * inner, n);
        return out;
    }
    l.offsets().map(|o| R::from_elem(src[o])).collect()
}

/// Storage offset of the first element of row `r` (rows = all dims but the last).
#[inline]
pub fn row_offset(l: &Layout, mut r: usize) -> usize {
    let mut off = l.offset;
    let rank = l.rank();
    if rank < 2 {
        return off;
    }
    for d in (0..rank - 1).rev() {
        let s = l.shape[d];
        off += (r % s) * l.strides[d];
        r /= s;
    }
    off
}

/// A tensor's elements in row-major order as compute type `R`.
pub fn read<R: CReal>(t: &Tensor) -> Vec<R> {
    let b = t.storage().buffer();
    let l = t.layout();
    match &*b {
        Buffer::F32(v) => gather(v, l),
        Buffer::F64(v) => gather(v, l),
        Buffer::BF16(v) => gather(v, l),
        Buffer::F16(v) => gather(v, l),
        Buffer::I64(v) => gather(v, l),
        Buffer::Bool(v) => gather(v, l),
    }
}

/// Borrow the elements when they already are contiguous `R`, else read a converted copy.
pub fn with_slice<R: CReal, T>(t: &Tensor, f: impl FnOnce(&[R]) -> T) -> T {
    if t.dtype() == R::DTYPE && t.layout().is_contiguous() {
        let b = t.storage().buffer();
        let s = R::slice(&b).expect("dtype checked");
        let o = t.layout().offset;
        f(&s[o..o + t.numel()])
    } else {
        let v = read::<R>(t);
        f(&v)
    }
}

/// Read i64 values (token ids, indices).
pub fn read_i64(t: &Tensor) -> Vec<i64> {
    let b = t.storage().buffer();
    let l = t.layout();
    match &*b {
        Buffer::I64(v) => l.offsets().map(|o| v[o]).collect(),
        Buffer::Bool(v) => l.offsets().map(|o| v[o] as i64).collect(),
        _ => panic!("expected an integer tensor, got {}", t.dtype()),
    }
}

pub fn read_bool(t: &Tensor) -> Vec<bool> {
    let b = t.storage().buffer();
    let l = t.layout();
    match &*b {
        Buffer::Bool(v) => l.offsets().map(|o| v[o]).collect(),
        Buffer::I64(v) => l.offsets().map(|o| v[o] != 0).collect(),
        _ => panic!("expected a bool tensor, got {}", t.dtype()),
    }
}

/// Store compute values as `dtype` (one rounding, as PyTorch's kernels do).
pub fn to_buffer<R: CReal>(v: Vec<R>, dtype: DType) -> Buffer {
    if dtype == R::DTYPE {
        return R::wrap(v);
    }
    fn conv<R: Real, E: Elem>(v: &[R]) -> Vec<E> {
        if v.len() >= PAR_MIN {
            v.par_iter().map(|&x| x.to_elem::<E>()).collect()
        } else {
            v.iter().map(|&x| x.to_elem::<E>()).collect()
        }
    }
    match dtype {
        DType::F32 => Buffer::F32(conv(&v)),
        DType::F64 => Buffer::F64(conv(&v)),
        DType::BF16 => Buffer::BF16(conv::<R, bf16>(&v)),
        DType::F16 => Buffer::F16(conv::<R, f16>(&v)),
        DType::I64 => Buffer::I64(v.iter().map(|x| Elem::to_f64(*x) as i64).collect()),
        DType::Bool => Buffer::Bool(v.iter().map(|x| !x.is_zero()).collect()),
    }
}

/// Elementwise map, parallel when large.
pub fn map<R: Real>(x: &[R], f: impl Fn(R) -> R + Sync + Send) -> Vec<R> {
    if x.len() >= PAR_MIN {
        x.par_iter().map(|&v| f(v)).collect()
    } else {
        x.iter().map(|&v| f(v)).collect()
    }
}

pub fn zip<R: Real>(a: &[R], b: &[R], f: impl Fn(R, R) -> R + Sync + Send) -> Vec<R> {
    debug_assert_eq!(a.len(), b.len());
    if a.len() >= PAR_MIN {
        a.par_iter().zip(b.par_iter()).map(|(&x, &y)| f(x, y)).collect()
    } else {
        a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
    }
}

/// `f(a, b)` with broadcasting. `a` and `b` are compute-type views of contiguous data
/// with layouts `la`, `lb` already expanded to the output shape.
pub fn broadcast2<R: Real>(a: &[R], la: &Layout, b: &[R], lb: &Layout, f: impl Fn(R, R) -> R + Sync + Send) -> Vec<R> {
    let n = la.numel();
    let inner = la.shape.last().copied().unwrap_or(1).max(1);
    let (sa, sb) = (la.strides.last().copied().unwrap_or(0), lb.strides.last().copied().unwrap_or(0));
    let mut out = vec![R::zero(); n];
    let rows_per_chunk = (PAR_MIN / inner).max(1);
    let work = |ci: usize, chunk: &mut [R]| {
        for (k, row) in chunk.chunks_mut(inner).enumerate() {
            let r = ci * rows_per_chunk + k;
            let (oa, ob) = (row_offset(la, r), row_offset(lb, r));
            match (sa, sb) {
                (1, 1) => {
                    for ((o, x), y) in row.iter_mut().zip(&a[oa..oa + inner]).zip(&b[ob..ob + inner]) {
                        *o = f(*x, *y)
                    }
                }
                (1, 0) => {
                    let y = b[ob];
                    for (o, x) in row.iter_mut().zip(&a[oa..oa + inner]) {
                        *o = f(*x, y)
                    }
                }
                (0, 1) => {
                    let x = a[oa];
                    for (o, y) in row.iter_mut().zip(&b[ob..ob + inner]) {
                        *o = f(x, *y)
                    }
                }
                _ => {
                    for (j, o) in row.iter_mut().enumerate() {
                        *o = f(a[oa + j * sa], b[ob + j * sb])
                    }
                }
            }
        }
    };
    if n >= PAR_MIN {
        out.par_chunks_mut(rows_per_chunk * inner).enumerate().for_each(|(ci, c)| work(ci, c));
    } else {
        work(0, &mut out);
    }
    out
}

/// Apply `f` to each contiguous row of length `len`, producing `out_len` values per row.
pub fn rows<R: Real>(x: &[R], len: usize, out_len: usize, f: impl Fn(&[R], &mut [R]) + Sync + Send) -> Vec<R> {
    let nrows = if len == 0 { 0 } else { x.len() / len };
    let mut out = vec![R::zero(); nrows * out_len];
    if out_len == 0 {
        return out;
    }
    if x.len() >= PAR_MIN {
        out.par_chunks_mut(out_len).zip(x.par_chunks(len)).for_each(|(o, r)| f(r, o));
    } else {
        out.chunks_mut(out_len).zip(x.chunks(len)).for_each(|(o, r)| f(r, o));
    }
    out
}
