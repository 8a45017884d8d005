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

/// bf16 → f32 without branches (half's conversion branches on NaN, which keeps the loop
/// from vectorising): the bits move up 16 places; a NaN gets its quiet bit as in `half`.
fn widen_bf16(src: &[bf16]) -> Vec<f32> {
    fill_vec(src.len(), |st, o| {
        for (o, &e) in o.iter_mut().zip(&src[st..]) {
            let b = e.to_bits();
            let quiet = (((b & 0x7FFF) > 0x7F80) as u16) << 6;
            o.write(f32::from_bits(((b | quiet) as u32) << 16));
        }
    })
}

fn gather<E: Elem, R: Real>(src: &[E], l: &Layout) -> Vec<R> {
    let n = l.numel();
    if l.is_contiguous() {
        let s = &src[l.offset..l.offset + n];
        if std::any::TypeId::of::<E>() == std::any::TypeId::of::<bf16>() && std::any::TypeId::of::<R>() == std::any::TypeId::of::<f32>() {
            // SAFETY: E is bf16 and R is f32 (checked above); same layouts, only reinterpreted.
            let s: &[bf16] = unsafe { std::slice::from_raw_parts(s.as_ptr() as *const bf16, s.len()) };
            let v = std::mem::ManuallyDrop::new(widen_bf16(s));
            return unsafe { Vec::from_raw_parts(v.as_ptr() as *mut R, v.len(), v.capacity()) };
        }
        return fill_vec(n, |st, o| {
            for (o, &e) in o.iter_mut().zip(&s[st..]) {
                o.write(R::from_elem(e));
            }
        });
    }
    let inner = l.shape.last().copied().unwrap_or(1).max(1);
    let st = l.strides.last().copied().unwrap_or(0);
    fill_rows(n / inner, inner, |r0, dst| {
        let mut rows = RowOffsets::new(l, r0);
        for row in dst.chunks_mut(inner) {
            let base = rows.next_row();
            if st == 1 {
                for (o, &e) in row.iter_mut().zip(&src[base..base + inner]) {
                    o.write(R::from_elem(e));
                }
            } else {
                for (j, o) in row.iter_mut().enumerate() {
                    o.write(R::from_elem(src[base + j * st]));
                }
            }
        }
    })
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

/// Storage offsets of consecutive rows from row `r` on, advanced like an odometer over
/// the outer dims: one add per row instead of a div/mod per dim.
pub struct RowOffsets<'a> {
    l: &'a Layout,
    index: Vec<usize>,
    off: usize,
}

impl<'a> RowOffsets<'a> {
    pub fn new(l: &'a Layout, mut r: usize) -> Self {
        let outer = l.rank().saturating_sub(1);
        let mut index = vec![0; outer];
        for d in (0..outer).rev() {
            index[d] = r % l.shape[d].max(1);
            r /= l.shape[d].max(1);
        }
        let off = l.offset + index.iter().zip(&l.strides).map(|(i, s)| i * s).sum::<usize>();
        RowOffsets { l, index, off }
    }
    #[inline]
    pub fn next_row(&mut self) -> usize {
        let cur = self.off;
        for d in (0..self.index.len()).rev() {
            self.index[d] += 1;
            self.off += self.l.strides[d];
            if self.index[d] < self.l.shape[d] {
                break;
            }
            self.off -= self.l.strides[d] * self.l.shape[d];
            self.index[d] = 0;
        }
        cur
    }
}

/// Fill a new Vec of `nrows` rows of `inner` values, in parallel blocks of whole rows when
/// large: `f(first_row, dst)` must write every element of `dst` (uninitialised on entry).
pub fn fill_rows<T: Copy + Send + Sync>(nrows: usize, inner: usize, f: impl Fn(usize, &mut [std::mem::MaybeUninit<T>]) + Sync + Send) -> Vec<T> {
    let n = nrows * inner;
    let mut v: Vec<T> = Vec::with_capacity(n);
    let spare = &mut v.spare_capacity_mut()[..n];
    let rows_per_chunk = (CHUNK / inner.max(1)).max(1);
    if n >= PAR_MIN && nrows > 1 {
        spare.par_chunks_mut(rows_per_chunk * inner).enumerate().for_each(|(i, c)| f(i * rows_per_chunk, c));
    } else if n > 0 {
        f(0, spare);
    }
    // SAFETY: `f` initialised all n elements.
    unsafe { v.set_len(n) };
    v
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
        Buffer::U8(v) => gather(v, l),
        Buffer::I8(v) => gather(v, l),
        Buffer::I32(v) => gather(v, l),
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
    slice_to_buffer(&v, dtype)
}

/// f32 → bf16 rounding to nearest even without branches (so the loop vectorises); a NaN
/// keeps its top mantissa bits and gets the quiet bit, as in `half`.
fn narrow_bf16(v: &[f32]) -> Vec<bf16> {
    fill_vec(v.len(), |st, o| {
        for (o, &x) in o.iter_mut().zip(&v[st..]) {
            let b = x.to_bits();
            let rounded = (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
            let nan = ((b >> 16) as u16) | 0x40;
            o.write(bf16::from_bits(if x.is_nan() { nan } else { rounded }));
        }
    })
}

/// `to_buffer` from borrowed values (always a converted copy).
pub fn slice_to_buffer<R: CReal>(v: &[R], dtype: DType) -> Buffer {
    if dtype == DType::BF16 && R::DTYPE == DType::F32 {
        // SAFETY: R is f32 (its DTYPE says so); only the slice type is reinterpreted.
        let f: &[f32] = unsafe { std::slice::from_raw_parts(v.as_ptr() as *const f32, v.len()) };
        return Buffer::BF16(narrow_bf16(f));
    }
    fn conv<R: Real, E: Elem>(v: &[R]) -> Vec<E> {
        fill_vec(v.len(), |s, o| {
            for (o, &x) in o.iter_mut().zip(&v[s..]) {
                o.write(x.to_elem::<E>());
            }
        })
    }
    match dtype {
        DType::F32 => Buffer::F32(conv(v)),
        DType::F64 => Buffer::F64(conv(v)),
        DType::BF16 => Buffer::BF16(conv::<R, bf16>(v)),
        DType::F16 => Buffer::F16(conv::<R, f16>(v)),
        DType::I64 => Buffer::I64(v.iter().map(|x| Elem::to_f64(*x) as i64).collect()),
        DType::Bool => Buffer::Bool(v.iter().map(|x| !x.is_zero()).collect()),
        DType::U8 => Buffer::U8(v.iter().map(|x| Elem::to_f64(*x) as u8).collect()),
        DType::I8 => Buffer::I8(v.iter().map(|x| Elem::to_f64(*x) as i8).collect()),
        DType::I32 => Buffer::I32(v.iter().map(|x| Elem::to_f64(*x) as i32).collect()),
    }
}

/// Chunk size for parallel elementwise loops: plain slice loops inside each chunk so the
/// compiler vectorises them (rayon's per-element collect would not).
const CHUNK: usize = 1 << 14;

/// Fill a new Vec of `n` values chunk by chunk (in parallel when large) without zeroing it
/// first: `f(start, dst)` must write every element of `dst` (uninitialised on entry).
pub fn fill_vec<T: Copy + Send + Sync>(n: usize, f: impl Fn(usize, &mut [std::mem::MaybeUninit<T>]) + Sync + Send) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(n);
    let spare = &mut v.spare_capacity_mut()[..n];
    if n >= PAR_MIN {
        spare.par_chunks_mut(CHUNK).enumerate().for_each(|(i, c)| f(i * CHUNK, c));
    } else {
        f(0, spare);
    }
    // SAFETY: `f` initialised all n elements (every kernel below writes its whole chunk).
    unsafe { v.set_len(n) };
    v
}

/// Elementwise map, parallel when large.
pub fn map<R: Real>(x: &[R], f: impl Fn(R) -> R + Sync + Send) -> Vec<R> {
    fill_vec(x.len(), |s, o| {
        for (o, &v) in o.iter_mut().zip(&x[s..]) {
            o.write(f(v));
        }
    })
}

pub fn zip<R: Real>(a: &[R], b: &[R], f: impl Fn(R, R) -> R + Sync + Send) -> Vec<R> {
    debug_assert_eq!(a.len(), b.len());
    fill_vec(a.len(), |s, o| {
        for ((o, &x), &y) in o.iter_mut().zip(&a[s..]).zip(&b[s..]) {
            o.write(f(x, y));
        }
    })
}

/// `f(a, b)` with broadcasting. `a` and `b` are compute-type views of contiguous data
/// with layouts `la`, `lb` already expanded to the output shape.
pub fn broadcast2<R: Real>(a: &[R], la: &Layout, b: &[R], lb: &Layout, f: impl Fn(R, R) -> R + Sync + Send) -> Vec<R> {
    let n = la.numel();
    let inner = la.shape.last().copied().unwrap_or(1).max(1);
    let (sa, sb) = (la.strides.last().copied().unwrap_or(0), lb.strides.last().copied().unwrap_or(0));
    fill_rows(n / inner, inner, |r0, dst| {
        let (mut ra, mut rb) = (RowOffsets::new(la, r0), RowOffsets::new(lb, r0));
        for row in dst.chunks_mut(inner) {
            let (oa, ob) = (ra.next_row(), rb.next_row());
            match (sa, sb) {
                (1, 1) => {
                    for ((o, x), y) in row.iter_mut().zip(&a[oa..oa + inner]).zip(&b[ob..ob + inner]) {
                        o.write(f(*x, *y));
                    }
                }
                (1, 0) => {
                    let y = b[ob];
                    for (o, x) in row.iter_mut().zip(&a[oa..oa + inner]) {
                        o.write(f(*x, y));
                    }
                }
                (0, 1) => {
                    let x = a[oa];
                    for (o, y) in row.iter_mut().zip(&b[ob..ob + inner]) {
                        o.write(f(x, *y));
                    }
                }
                _ => {
                    for (j, o) in row.iter_mut().enumerate() {
                        o.write(f(a[oa + j * sa], b[ob + j * sb]));
                    }
                }
            }
        }
    })
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

/// Sum with 16 independent accumulators: float reductions only vectorise when the
/// additions are reassociated by hand (the compiler may not reorder them itself).
#[inline]
pub fn lsum<R: Real>(x: &[R]) -> R {
    let mut acc = [R::zero(); 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    let mut s = R::zero();
    for &v in rest {
        s += v;
    }
    acc.iter().fold(s, |s, &a| s + a)
}

/// Dot product with independent accumulators.
#[inline]
pub fn ldot<R: Real>(x: &[R], y: &[R]) -> R {
    let mut acc = [R::zero(); 16];
    let (cx, cy) = (x.chunks_exact(16), y.chunks_exact(16));
    let (rx, ry) = (cx.remainder(), cy.remainder());
    for (a, b) in cx.zip(cy) {
        for i in 0..16 {
            acc[i] += a[i] * b[i];
        }
    }
    let mut s = R::zero();
    for (&a, &b) in rx.iter().zip(ry) {
        s += a * b;
    }
    acc.iter().fold(s, |s, &a| s + a)
}

/// Maximum (NaN propagates) with independent lanes.
#[inline]
pub fn lmax<R: Real>(x: &[R]) -> R {
    let mut acc = [R::neg_infinity(); 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    let mut nan = false;
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            nan |= v.is_nan();
            *a = if v > *a { v } else { *a };
        }
    }
    let mut m = R::neg_infinity();
    for &v in rest {
        nan |= v.is_nan();
        m = if v > m { v } else { m };
    }
    if nan {
        return R::nan();
    }
    acc.iter().fold(m, |m, &a| if a > m { a } else { m })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branchless_bf16_widening_equals_half_for_every_bit_pattern() {
        let all: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let fast = widen_bf16(&all);
        for (x, y) in all.iter().zip(&fast) {
            assert_eq!(x.to_f32().to_bits(), y.to_bits(), "bf16 bits {:#06x}", x.to_bits());
        }
    }

    #[test]
    fn branchless_bf16_rounding_equals_half() {
        // Every 251st f32 bit pattern (all exponents, signs and rounding cases) plus edges.
        let mut xs: Vec<f32> = (0..=u32::MAX).step_by(251).map(f32::from_bits).collect();
        xs.extend([0.0, -0.0, f32::MAX, f32::MIN, f32::MIN_POSITIVE, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::from_bits(0x7F80_0001), f32::from_bits(0x3F80_8000), f32::from_bits(0x3F81_8000), f32::from_bits(0x7F7F_FFFF)]);
        let fast = narrow_bf16(&xs);
        for (x, y) in xs.iter().zip(&fast) {
            assert_eq!(bf16::from_f32(*x).to_bits(), y.to_bits(), "f32 bits {:#010x}", x.to_bits());
        }
    }
}
