//! Precision flags shared by `train`, `profile`, `fit` and `estimate`, in the spellings users know:
//! `--precision fp32|bf16|fp16`, CS336's `--use-mixed-precision --dtype bf16|fp16`, the
//! workshop's `--use-amp` (fp16 autocast with a GradScaler), and `--pure-bf16`.
use super::usage;
use crate::train::Precision;
use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct PrecisionFlags {
    /// Training precision (default fp32)
    ///
    /// bf16: autocast to bf16 around forward and loss; fp16: autocast to fp16 with a dynamic
    /// loss scaler — parameters, gradients and optimizer state stay fp32 — or pure-bf16
    /// (= --pure-bf16).
    #[arg(help_heading = super::heading::PRECISION, value_parser = super::values::precisions(), long)]
    pub precision: Option<String>,
    /// CS336 spelling of autocast: with --dtype bf16 (default) or fp16
    #[arg(help_heading = super::heading::PRECISION, long)]
    pub use_mixed_precision: bool,
    /// hf flavour: from_pretrained's dtype; with --use-mixed-precision: the autocast type
    ///
    /// auto (the default, as in transformers 5: the config's torch_dtype, bfloat16 for every hf preset; float32 when it names none),
    /// float32, bfloat16 or float16. With --use-mixed-precision: CS336's autocast type, bf16
    /// or fp16
    #[arg(help_heading = super::heading::PRECISION, long, value_parser = super::values::torch_dtypes(true))]
    pub dtype: Option<String>,
    /// The workshop's spelling: fp16 autocast with a GradScaler
    #[arg(help_heading = super::heading::PRECISION, long)]
    pub use_amp: bool,
    /// Parameters, gradients and optimizer state in bf16 (`model.to(torch.bfloat16)`), no autocast
    #[arg(help_heading = super::heading::PRECISION, long)]
    pub pure_bf16: bool,
    /// Who applies the autocast, hf flavour: accelerate (default) or torch.
    ///
    /// accelerate is the Trainer's bf16=True/fp16=True (or `Accelerator(mixed_precision=...)`):
    /// `prepare_model` wraps the model's forward in autocast and `convert_outputs_to_fp32`, so
    /// the output's bf16/fp16 tensors (the logits, an MoE model's router logits) get an fp32
    /// copy that lives until compute_loss drops the output (training and forward-loss). torch is
    /// your own loop's `with torch.autocast(...)` around the model call, no conversion. The
    /// cs336 and tinyllama flavours run their scripts' plain torch.autocast.
    #[arg(help_heading = super::heading::PRECISION, long, value_name = "BY", value_parser = ["accelerate", "torch"])]
    pub autocast_by: Option<String>,
}

impl PrecisionFlags {
    pub fn resolve(&self) -> anyhow::Result<Precision> {
        let mut chosen: Vec<(&str, Precision)> = Vec::new();
        if let Some(d) = self.dtype.as_ref().filter(|_| !self.use_mixed_precision) {
            // from_pretrained's dtype: checked here, applied by resolve_for.
            if d != "auto" && crate::model::hf::config_json::parse_dtype(d).is_none() {
                return Err(usage("--dtype", format!("'{d}' (expected auto, float32, bfloat16 or float16)")));
            }
        }
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
    /// The precision for a model, refusing combinations PyTorch itself cannot run. An hf
    /// model's weights load as `from_pretrained` loads them (`dtype="auto"`: the config's
    /// torch_dtype) unless --dtype, --precision fp32 or --pure-bf16 says otherwise; the
    /// autocast flags are the Trainer's `bf16=True`/`fp16=True` on top. The choice is
    /// recorded in the config (`HfConfig::dtype`) for the line that says what was loaded.
    pub fn resolve_for(&self, cfg: &mut crate::model::ModelConfig) -> anyhow::Result<Precision> {
        let flags = self.resolve()?;
        let asked = (!self.use_mixed_precision).then_some(self.dtype.as_deref()).flatten().filter(|d| *d != "auto");
        let asked = asked.map(|d| crate::model::hf::config_json::parse_dtype(d).expect("checked by resolve"));
        let p = match cfg.hf.as_mut() {
            None => {
                if let Some(d) = asked {
                    return Err(usage("--dtype", format!("{d} is from_pretrained's dtype, for an hf model; the {} flavour builds float32 weights (--pure-bf16 for bf16, --precision for autocast)", cfg.flavour)));
                }
                flags
            }
            Some(hf) => {
                let named = self.precision.is_some() || self.use_mixed_precision || self.use_amp || self.pure_bf16;
                // What the flags say of the weights themselves: fp32 and pure-bf16 name a type.
                let from_flags = match flags {
                    Precision::Fp32 if named => Some(crate::engine::DType::F32),
                    Precision::PureBf16 | Precision::PureBf16Autocast => Some(crate::engine::DType::BF16),
                    Precision::PureFp16 => Some(crate::engine::DType::F16),
                    _ => None,
                };
                if let (Some(a), Some(f)) = (asked, from_flags) {
                    if a != f {
                        return Err(usage("--dtype", format!("{a} weights, but --precision/--pure-bf16 asks for {f} ones")));
                    }
                }
                let mut weights = asked.or(from_flags).or(hf.torch_dtype).unwrap_or(crate::engine::DType::F32);
                hf.dtype = asked.or(from_flags);
                if let Some(q) = hf.bnb.as_mut() {
                    // The 4-bit weights dequantize to the load type; what stays unquantized is
                    // fp32 after prepare_model_for_kbit_training, else the load type.
                    if flags.autocast().is_some() {
                        let why = match q.quant {
                            crate::model::bnb::Quant::FourBit(_) => "over a 4-bit model is not modelled: bitsandbytes computes in --bnb-4bit-compute-dtype",
                            crate::model::bnb::Quant::Int8(_) => "over an 8-bit model is not modelled: bitsandbytes quantizes its inputs to int8 from float16",
                        };
                        return Err(usage("--precision", format!("autocast (the Trainer's bf16=True/fp16=True) {why}")));
                    }
                    q.load_dtype = weights;
                    weights = q.unquantized_dtype();
                }
                flags.on_weights(weights).ok_or_else(|| {
                    let why = match (weights, flags) {
                        (crate::engine::DType::F16, Precision::Fp16) => "the Trainer's fp16=True on float16 weights stops in GradScaler (\"Attempting to unscale FP16 gradients\")".to_string(),
                        _ => format!("{flags} autocast over {weights} weights is not modelled"),
                    };
                    usage("--precision", format!("{why}; load the weights in float32 (--dtype float32) for mixed precision, or drop the autocast flag"))
                })?
            }
        };
        self.autocast_by_for(cfg, p)?;
        check(cfg, p)?;
        Ok(p)
    }

    /// --autocast-by: records accelerate's output conversion in the hf config (the default
    /// wherever an hf model runs under autocast), refusing it where it has no meaning.
    fn autocast_by_for(&self, cfg: &mut crate::model::ModelConfig, p: Precision) -> anyhow::Result<()> {
        let by = self.autocast_by.as_deref();
        if let Some(b) = by {
            if p.autocast().is_none() {
                return Err(usage("--autocast-by", format!("{b} names who applies autocast, but this run has none ({p}): add --precision bf16 or fp16")));
            }
        }
        let flavour = cfg.flavour;
        match cfg.hf.as_mut() {
            Some(hf) => hf.convert_outputs_to_fp32 = p.autocast().is_some() && by != Some("torch"),
            None if by == Some("accelerate") => {
                return Err(usage("--autocast-by", format!("accelerate's prepared model is modelled for the hf flavour; the {flavour} flavour runs its script's plain torch.autocast (--autocast-by torch)")));
            }
            None => {}
        }
        Ok(())
    }
}

/// Combinations PyTorch itself cannot run, refused before anything runs.
fn check(cfg: &crate::model::ModelConfig, precision: Precision) -> anyhow::Result<()> {
    use crate::model::{Attention, Flavour};
    use crate::model::hf::{AttnImplementation, SdpaBackend};
    if let Some(hf) = cfg.hf().filter(|_| precision == Precision::Fp32) {
        // flash-attn and PyTorch's flash SDPA kernel take only fp16/bf16 queries (transformers
        // casts a quantized model's fp32 queries to its load dtype for flash-attn).
        if hf.attn_implementation == AttnImplementation::FlashAttention2 && hf.bnb.is_none() {
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
