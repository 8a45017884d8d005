//! Optimizer flags shared by the subcommands that run a training step (train, profile and
//! what runs profiles: sweep, fit, compare, run-all; study; estimate's simulated step), in the
//! Trainer's `optim` names.
use super::usage;
use crate::model::Flavour;
use crate::train::optim::{OptimConfig, OptimizerKind};
use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct OptimFlags {
    /// Optimizer implementation, in the Trainer's `optim` names (default: the flavour's)
    ///
    /// The flavour's reference is the default: cs336 adamw_cs336, tinyllama adamw_torch, hf
    /// adamw_torch_fused (the Trainer's default). adamw_torch_foreach is adamw_torch and
    /// adamw_8bit is adamw_bnb_8bit; bitsandbytes' optimizers need --device meta.
    #[arg(help_heading = super::heading::RUN, value_parser = super::values::optimizers(), long)]
    pub optimizer: Option<String>,
    /// clip_grad_norm_(params, X) before each optimizer step; 0 = off
    ///
    /// torch.nn.utils.clip_grad_norm_; the hf flavour's Trainer still computes the norm, with
    /// max_norm inf, to log it. Default: the flavour's: 1.0 for hf (the Trainer's
    /// max_grad_norm), off for cs336 and tinyllama.
    #[arg(help_heading = super::heading::RUN, long, value_name = "X", allow_negative_numbers = true)]
    pub max_grad_norm: Option<f64>,
}

/// The names `--optimizer` lists in its errors.
fn names() -> String {
    OptimizerKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
}

impl OptimFlags {
    /// Whether either flag was given.
    pub fn given(&self) -> bool {
        self.optimizer.is_some() || self.max_grad_norm.is_some()
    }

    /// The flags as words, for subcommands that pass them on to `profile`.
    pub fn words(&self) -> Vec<String> {
        let mut w = Vec::new();
        if let Some(o) = &self.optimizer {
            w.extend(["--optimizer".to_string(), o.clone()]);
        }
        if let Some(m) = self.max_grad_norm {
            w.extend(["--max-grad-norm".to_string(), m.to_string()]);
        }
        w
    }

    /// The implementation only (the reference's when not given). `adamw` (the older `train`
    /// spelling) means the flavour's reference AdamW.
    pub fn kind(&self, flavour: Flavour) -> anyhow::Result<OptimizerKind> {
        let reference = OptimConfig::reference(flavour).kind;
        match self.optimizer.as_deref() {
            None | Some("adamw") => Ok(reference),
            Some(s) => OptimizerKind::parse(s).ok_or_else(|| usage("--optimizer", format!("'{s}' (expected {})", names()))),
        }
    }

    /// The flavour's reference optimizer with the flags applied. `training`: whether the run
    /// has an optimizer step at all (the flags are refused when it has none).
    pub fn resolve(&self, flavour: Flavour, training: bool) -> anyhow::Result<OptimConfig> {
        if !training {
            if self.optimizer.is_some() {
                return Err(usage("--optimizer", "the run has no optimizer step (it applies to --profile-type training)"));
            }
            if self.max_grad_norm.is_some() {
                return Err(usage("--max-grad-norm", "the run has no optimizer step (it applies to --profile-type training)"));
            }
        }
        let mut c = OptimConfig::reference(flavour);
        let kind = self.kind(flavour)?;
        if kind != c.kind && kind == OptimizerKind::Sgd {
            // torch.optim.SGD's own default; an AdamW reference's decoupled decay is not SGD's.
            c.weight_decay = 0.0;
        }
        c.kind = kind;
        match self.max_grad_norm {
            None => {}
            Some(m) if !(m >= 0.0 && m.is_finite()) => {
                return Err(usage("--max-grad-norm", format!("{m} (expected a finite max norm >= 0; 0 turns clipping off)")));
            }
            // transformers' Trainer computes the norm for its log even when clipping is off.
            Some(0.0) if flavour == Flavour::Hf => c.max_grad_norm = Some(f64::INFINITY),
            Some(0.0) => c.max_grad_norm = None,
            Some(m) => c.max_grad_norm = Some(m),
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(o: Option<&str>, m: Option<f64>) -> OptimFlags {
        OptimFlags { optimizer: o.map(String::from), max_grad_norm: m }
    }

    #[test]
    fn defaults_are_the_references() {
        for f in [Flavour::Cs336, Flavour::Tinyllama, Flavour::Hf] {
            let c = flags(None, None).resolve(f, true).unwrap();
            let r = OptimConfig::reference(f);
            assert_eq!((c.kind, c.lr, c.weight_decay, c.max_grad_norm), (r.kind, r.lr, r.weight_decay, r.max_grad_norm));
        }
    }

    #[test]
    fn choices_and_clipping() {
        let c = flags(Some("adamw_torch_forloop"), Some(0.5)).resolve(Flavour::Tinyllama, true).unwrap();
        assert_eq!((c.kind, c.max_grad_norm), (OptimizerKind::AdamwTorchForloop, Some(0.5)));
        let c = flags(Some("sgd"), None).resolve(Flavour::Cs336, true).unwrap();
        assert_eq!((c.kind, c.weight_decay), (OptimizerKind::Sgd, 0.0));
        assert_eq!(flags(None, Some(0.0)).resolve(Flavour::Hf, true).unwrap().max_grad_norm, Some(f64::INFINITY));
        assert_eq!(flags(None, Some(0.0)).resolve(Flavour::Cs336, true).unwrap().max_grad_norm, None);
        assert_eq!(flags(Some("adamw_torch_foreach"), None).resolve(Flavour::Hf, true).unwrap().kind, OptimizerKind::AdamwTorch);
    }

    #[test]
    fn refusals_name_the_flag() {
        let e = flags(Some("adam"), None).resolve(Flavour::Hf, true).unwrap_err().to_string();
        assert!(e.contains("--optimizer") && e.contains("adamw_torch_fused"), "{e}");
        let e = flags(None, Some(-1.0)).resolve(Flavour::Hf, true).unwrap_err().to_string();
        assert!(e.contains("--max-grad-norm"), "{e}");
        let e = flags(Some("sgd"), None).resolve(Flavour::Hf, false).unwrap_err().to_string();
        assert!(e.contains("--optimizer") && e.contains("no optimizer step"), "{e}");
        let e = flags(None, Some(1.0)).resolve(Flavour::Hf, false).unwrap_err().to_string();
        assert!(e.contains("--max-grad-norm"), "{e}");
        assert!(flags(None, None).resolve(Flavour::Hf, false).is_ok());
    }
}
