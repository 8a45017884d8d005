//! Precision flags shared by `train`, `profile`, `fit` and `estimate`, in the spellings users know:
//! `--precision fp32|bf16|fp16`, CS336's `--use-mixed-precision --dtype bf16|fp16`, the
//! workshop's `--use-amp` (fp16 autocast with a GradScaler), and `--pure-bf16`.
use super::usage;
use crate::train::Precision;
use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct PrecisionFlags {
    /// fp32, bf16 (autocast to bf16 around forward and loss) or fp16 (autocast to fp16 with
    /// a dynamic loss scaler) — parameters, gradients and optimizer state stay fp32 — or
    /// pure-bf16 (= --pure-bf16)
    #[arg(long)]
    pub precision: Option<String>,
    /// CS336 spelling of autocast: with --dtype bf16 (default) or fp16
    #[arg(long)]
    pub use_mixed_precision: bool,
    /// The autocast type for --use-mixed-precision: bf16 or fp16
    #[arg(long, requires = "use_mixed_precision")]
    pub dtype: Option<String>,
    /// The workshop's spelling: fp16 autocast with a GradScaler
    #[arg(long)]
    pub use_amp: bool,
    /// Parameters, gradients and optimizer state in bf16 (`model.to(torch.bfloat16)`), no autocast
    #[arg(long)]
    pub pure_bf16: bool,
}

impl PrecisionFlags {
    pub fn resolve(&self) -> anyhow::Result<Precision> {
        let mut chosen: Vec<(&str, Precision)> = Vec::new();
        if let Some(p) = &self.precision {
            let v = Precision::parse(p);
            chosen.push(("--precision", v.ok_or_else(|| usage("--precision", format!("'{p}' (expected fp32, bf16, fp16 or pure-bf16)")))?));
        }
        if self.use_mixed_precision {
            let v = match self.dtype.as_deref().unwrap_or("bf16") {
                d if Precision::parse(d) == Some(Precision::Bf16) => Precision::Bf16,
                d if Precision::parse(d) == Some(Precision::Fp16) => Precision::Fp16,
                d => return Err(usage("--dtype", format!("'{d}' (expected bf16 or fp16)"))),
            };
            chosen.push(("--use-mixed-precision", v));
        }
        if self.use_amp {
            chosen.push(("--use-amp", Precision::Fp16));
        }
        if self.pure_bf16 {
            chosen.push(("--pure-bf16", Precision::PureBf16));
        }
        match chosen.as_slice() {
            [] => Ok(Precision::Fp32),
            [(_, p)] => Ok(*p),
            [(f1, p1), rest @ ..] => {
                if let Some((f2, p2)) = rest.iter().find(|(_, p)| p != p1) {
                    Err(usage(f2, format!("asks for {p2} but {f1} asks for {p1}")))
                } else {
                    Ok(*p1)
                }
            }
        }
    }
}

impl PrecisionFlags {
    /// The precision for a model, refusing combinations PyTorch itself cannot run.
    pub fn resolve_for(&self, cfg: &crate::model::ModelConfig) -> anyhow::Result<Precision> {
        let p = self.resolve()?;
        check(cfg, p)?;
        Ok(p)
    }
}

/// Combinations PyTorch itself cannot run, refused before anything runs.
fn check(cfg: &crate::model::ModelConfig, precision: Precision) -> anyhow::Result<()> {
    use crate::model::{Attention, Flavour};
    use crate::model::hf::{AttnImplementation, SdpaBackend};
    if let Some(hf) = cfg.hf().filter(|_| precision == Precision::Fp32) {
        // flash-attn and PyTorch's flash SDPA kernel take only fp16/bf16 queries.
        if hf.attn_implementation == AttnImplementation::FlashAttention2 {
            return Err(usage("--attn-implementation", "flash_attention_2 runs on fp16/bf16 only (flash-attn raises for float32): add --precision bf16 or --pure-bf16"));
        }
        if hf.attn_implementation == AttnImplementation::Sdpa && hf.sdpa_backend == SdpaBackend::Flash {
            return Err(usage("--sdpa-backend", "flash takes fp16/bf16 queries only (PyTorch finds no kernel for float32): add --precision bf16 or --pure-bf16, or use auto"));
        }
    }
    if precision == Precision::PureBf16 && cfg.flavour == Flavour::Tinyllama && cfg.attention == Attention::Naive {
        return Err(usage(
            "--pure-bf16",
            "the tinyllama flavour adds an fp32 causal mask to bf16 scores, so `probs @ v` mixes float32 and bfloat16 \
             (PyTorch raises the same dtype error); use --attention flash, or --precision bf16 (autocast)",
        ));
    }
    Ok(())
}
