//! Element types and the conversions every kernel relies on.
use half::{bf16, f16};
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    /// Not a training dtype: used by the finite-difference gradient checks.
    F64,
    BF16,
    F16,
    /// Token ids and argmax indices.
    I64,
    /// Masks.
    Bool,
    /// Bytes: bitsandbytes' packed 4-bit weights and 8-bit block scales.
    U8,
    /// bitsandbytes' LLM.int8() weights and quantized activations.
    I8,
    /// The int8 matmul's product (cuBLASLt's int32 accumulator).
    I32,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::BF16 | DType::F16 => 2,
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::I32 => 4,
        }
    }
    /// `torch.finfo(dtype).min` (the additive mask's "-inf"); integer types have none.
    pub fn finfo_min(self) -> f64 {
        match self {
            DType::F32 => f32::MIN as f64,
            DType::F64 => f64::MIN,
            DType::BF16 => half::bf16::MIN.to_f64(),
            DType::F16 => half::f16::MIN.to_f64(),
            DType::I64 | DType::I32 | DType::Bool | DType::U8 | DType::I8 => panic!("finfo of a non-float type"),
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::BF16 | DType::F16)
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::BF16 => "bfloat16",
            DType::F16 => "float16",
            DType::I64 => "int64",
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I32 => "int32",
        }
    }
    /// PyTorch's type promotion for two float operands (int/bool promote to the float).
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a, b) {
            (F64, _) | (_, F64) => F64,
            (F32, _) | (_, F32) => F32,
            (BF16, F16) | (F16, BF16) => F32,
            (BF16, _) | (_, BF16) => BF16,
            (F16, _) | (_, F16) => F16,
            (I64, _) | (_, I64) => I64,
            _ => Bool,
        }
    }
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "fp32" | "f32" | "float32" => DType::F32,
            "fp64" | "f64" | "float64" => DType::F64,
            "bf16" | "bfloat16" => DType::BF16,
            "fp16" | "f16" | "float16" => DType::F16,
            "i64" | "int64" => DType::I64,
            "bool" => DType::Bool,
            "u8" | "uint8" => DType::U8,
            "i8" | "int8" => DType::I8,
            "i32" | "int32" => DType::I32,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A stored element: converts to and from the compute types.
pub trait Elem: Copy + Send + Sync + 'static {
    fn to_f32(self) -> f32;
    fn to_f64(self) -> f64;
    fn from_f32(v: f32) -> Self;
    fn from_f64(v: f64) -> Self;
}

macro_rules! elem_prim {
    ($t:ty) => {
        impl Elem for $t {
            #[inline(always)]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}
elem_prim!(f32);
elem_prim!(f64);
elem_prim!(i64);
elem_prim!(u8);
elem_prim!(i8);
elem_prim!(i32);

impl Elem for bool {
    fn to_f32(self) -> f32 {
        self as u8 as f32
    }
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn from_f32(v: f32) -> Self {
        v != 0.0
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}

macro_rules! elem_half {
    ($t:ty) => {
        impl Elem for $t {
            #[inline(always)]
            fn to_f32(self) -> f32 {
                <$t>::to_f32(self)
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                <$t>::from_f32(v)
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
        }
    };
}
elem_half!(bf16);
elem_half!(f16);

/// A compute type: kernels are written once for f32 and f64. bf16/f16 values are widened
/// to f32 around the kernel and rounded once when stored, as PyTorch's CPU kernels do.
pub trait Real:
    num_traits::Float + Elem + std::iter::Sum + std::ops::AddAssign + fmt::Debug + Default
{
    const DTYPE: DType;
    fn from_elem<E: Elem>(e: E) -> Self;
    fn to_elem<E: Elem>(self) -> E;
    fn lit(v: f64) -> Self;
    /// exp(x) that vectorises (no libm call). f32: Cody–Waite range reduction and a
    /// degree-6 polynomial, within 2 ulp of libm over the float range; f64: libm.
    fn fexp(self) -> Self;
}

impl Real for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn from_elem<E: Elem>(e: E) -> Self {
        e.to_f32()
    }
    #[inline(always)]
    fn to_elem<E: Elem>(self) -> E {
        E::from_f32(self)
    }
    #[inline(always)]
    fn lit(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn fexp(self) -> Self {
        exp_f32(self)
    }
}

/// Branch-free exp for f32 so loops over it auto-vectorise. Clamps are plain selects and
/// the exponent comes from the float's bits by the 1.5·2²³ trick: `f32::max` (NaN rules)
/// and saturating `as i32` casts each add fix-up instructions that made the loop ~3× slower.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const MAGIC: f32 = 12_582_912.0; // 1.5·2²³: adding it rounds to an integer in the low bits
    let xc = if x < -87.336_55 { -87.336_55 } else { x };
    let xc = if xc > 88.722_84 { 88.722_84 } else { xc };
    let n = (xc * std::f32::consts::LOG2_E + MAGIC) - MAGIC;
    // n ≤ 127 keeps the scale finite; the polynomial covers the wider r near the top.
    let n = if n > 127.0 { 127.0 } else { n };
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5 + r * (0.166_666_67 + r * (0.041_666_668 + r * (0.008_333_345 + r * (0.001_388_731_8 + r * 0.000_198_4))))));
    // n is an integer in [-126, 127]: its value sits in the low mantissa bits of n + MAGIC.
    let ni = (n + MAGIC).to_bits() as i32 - 0x4B40_0000;
    let scale = f32::from_bits(((ni + 127) as u32) << 23);
    // Below the clamp the true value underflows to 0 (and exp(-inf) = 0); NaN stays NaN.
    let v = if x < -87.336_55 { 0.0 } else { p * scale };
    if x > 88.722_84 {
        f32::INFINITY
    } else if x.is_nan() {
        x
    } else {
        v
    }
}

impl Real for f64 {
    const DTYPE: DType = DType::F64;
    #[inline(always)]
    fn from_elem<E: Elem>(e: E) -> Self {
        e.to_f64()
    }
    #[inline(always)]
    fn to_elem<E: Elem>(self) -> E {
        E::from_f64(self)
    }
    #[inline(always)]
    fn lit(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn fexp(self) -> Self {
        self.exp()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fast_exp_is_within_a_few_ulp_of_libm() {
        let mut x = -100.0f32;
        while x < 100.0 {
            let (a, b) = (super::exp_f32(x), x.exp());
            if b.is_finite() && b > 1e-37 {
                let tol = if x > 88.0 { 2e-6 } else { 4e-7 };
                assert!(((a - b) / b).abs() < tol, "exp({x}) = {a} vs {b}");
            } else {
                assert!(a == b || (a < 1e-37 && b < 1e-37), "exp({x}) = {a} vs {b}");
            }
            x += 0.0137;
        }
        assert_eq!(super::exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(super::exp_f32(f32::INFINITY), f32::INFINITY);
        assert!(super::exp_f32(f32::NAN).is_nan());
    }
}
