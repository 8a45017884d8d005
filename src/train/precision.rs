//! The precision a run trains or profiles in: fp32, `torch.autocast` with bf16 or fp16
//! (fp16 with a `GradScaler`), or pure bf16 (`model.to(torch.bfloat16)`: parameters,
//! gradients and optimizer state in bf16, no autocast).
use crate::engine::DType;
use serde::Serialize;
use std::fmt;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    #[default]
    Fp32,
    /// Autocast to bf16 around forward and loss; fp32 parameters, gradients, state.
    Bf16,
    /// Autocast to fp16 around forward and loss, with dynamic loss scaling.
    Fp16,
    /// Everything in bf16.
    PureBf16,
}

impl Precision {
    pub fn parse(s: &str) -> Option<Precision> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" | "float32" | "f32" => Some(Precision::Fp32),
            "bf16" | "bfloat16" => Some(Precision::Bf16),
            "fp16" | "float16" | "f16" | "half" => Some(Precision::Fp16),
            "pure-bf16" | "pure_bf16" => Some(Precision::PureBf16),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::PureBf16 => "pure-bf16",
        }
    }
    /// The autocast region's type, if the run uses one.
    pub fn autocast(self) -> Option<DType> {
        match self {
            Precision::Bf16 => Some(DType::BF16),
            Precision::Fp16 => Some(DType::F16),
            _ => None,
        }
    }
    /// The type parameters (and so gradients and optimizer state) are kept in.
    pub fn param_dtype(self) -> DType {
        if self == Precision::PureBf16 {
            DType::BF16
        } else {
            DType::F32
        }
    }
    /// fp16 gradients underflow without loss scaling (`torch.amp.GradScaler`).
    pub fn loss_scaling(self) -> bool {
        self == Precision::Fp16
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
