//! The precision a run trains or profiles in: fp32, `torch.autocast` with bf16 or fp16
//! (fp16 with a `GradScaler`), or pure bf16 / fp16 (`model.to(torch.bfloat16)`, or an hf
//! model loaded in its config's dtype: parameters, gradients and optimizer state in that
//! type, no autocast), or bf16 weights under bf16 autocast (the Trainer's `bf16=True`).
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
    /// Parameters (and so gradients and optimizer state) in fp16, no autocast: an hf model
    /// whose config says `torch_dtype: float16`, loaded as `from_pretrained` does.
    PureFp16,
    /// bf16 parameters under bf16 autocast: the Trainer's `bf16=True` on a model
    /// `from_pretrained` loaded in bf16 (autocast still runs its fp32 op list in fp32).
    PureBf16Autocast,
}

impl Precision {
    /// What `--precision` offers (the other precisions come from an hf model's dtype).
    pub const CHOICES: [Precision; 4] = [Precision::Fp32, Precision::Bf16, Precision::Fp16, Precision::PureBf16];
    pub fn parse(s: &str) -> Option<Precision> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" | "float32" | "f32" => Some(Precision::Fp32),
            "bf16" | "bfloat16" => Some(Precision::Bf16),
            "fp16" | "float16" | "f16" | "half" => Some(Precision::Fp16),
            "pure-bf16" | "pure_bf16" => Some(Precision::PureBf16),
            "pure-fp16" | "pure_fp16" => Some(Precision::PureFp16),
            "pure-bf16-autocast" => Some(Precision::PureBf16Autocast),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::PureBf16 => "pure-bf16",
            Precision::PureFp16 => "pure-fp16",
            Precision::PureBf16Autocast => "pure-bf16-autocast",
        }
    }
    /// The autocast region's type, if the run uses one.
    pub fn autocast(self) -> Option<DType> {
        match self {
            Precision::Bf16 | Precision::PureBf16Autocast => Some(DType::BF16),
            Precision::Fp16 => Some(DType::F16),
            _ => None,
        }
    }
    /// The type parameters (and so gradients and optimizer state) are kept in.
    pub fn param_dtype(self) -> DType {
        match self {
            Precision::PureBf16 | Precision::PureBf16Autocast => DType::BF16,
            Precision::PureFp16 => DType::F16,
            Precision::Fp32 | Precision::Bf16 | Precision::Fp16 => DType::F32,
        }
    }

    /// The precision of a model whose weights are `weights`, with the autocast the flags
    /// asked for (`Fp32`: none): None where that pair is not modelled.
    pub fn on_weights(self, weights: DType) -> Option<Precision> {
        match (weights, self) {
            (DType::F32, p) if p.param_dtype() == DType::F32 => Some(p),
            (DType::BF16, Precision::Fp32 | Precision::PureBf16) => Some(Precision::PureBf16),
            (DType::BF16, Precision::Bf16 | Precision::PureBf16Autocast) => Some(Precision::PureBf16Autocast),
            (DType::F16, Precision::Fp32 | Precision::PureFp16) => Some(Precision::PureFp16),
            _ => None,
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
