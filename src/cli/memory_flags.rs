//! Memory optimisations of the model that `train` and `profile` compare: activation
//! checkpointing and the workshop's version-2 projection fusions.
use super::usage;
use crate::model::{Checkpoint, ModelConfig};
use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct MemoryFlags {
    /// Activation checkpointing (torch.utils.checkpoint, use_reentrant=False): none, blocks
    /// (every decoder block) or every-N (blocks 0, N, 2N, …)
    #[arg(long)]
    pub checkpoint: Option<String>,
    /// Projection fusions of the workshop's version 2: none, or all (--fused-qkv and
    /// --fused-gate-up; its flash attention is --attention flash)
    #[arg(long)]
    pub fusion: Option<String>,
    /// One QKV projection whose output is split into Q, K, V views
    #[arg(long)]
    pub fused_qkv: bool,
    /// One gate/up projection whose output is chunked into two views
    #[arg(long)]
    pub fused_gate_up: bool,
}

impl MemoryFlags {
    /// Set the chosen optimisations on a resolved model configuration.
    pub fn apply(&self, c: &mut ModelConfig) -> anyhow::Result<()> {
        if let Some(s) = &self.checkpoint {
            // hf: --checkpoint is use_reentrant=False; --gradient-checkpointing already chose.
            if c.hf().is_some_and(|h| h.reentrant) || (c.hf().is_some() && c.checkpoint != Checkpoint::None) {
                return Err(usage("--checkpoint", "--gradient-checkpointing already sets checkpointing: give one of them"));
            }
            c.checkpoint = Checkpoint::parse(s).ok_or_else(|| usage("--checkpoint", format!("'{s}' (expected none, blocks or every-N with N ≥ 1)")))?;
        }
        let all = match self.fusion.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("none") => false,
            Some("all") => true,
            Some(_) => return Err(usage("--fusion", format!("'{}' (expected none or all)", self.fusion.as_deref().unwrap_or_default()))),
        };
        if c.hf().is_some() && (all || self.fused_qkv || self.fused_gate_up) {
            let flag = if self.fusion.is_some() { "--fusion" } else if self.fused_qkv { "--fused-qkv" } else { "--fused-gate-up" };
            return Err(usage(flag, "transformers' modeling code has separate q/k/v and gate/up projections: the hf flavour has no fusions"));
        }
        c.fused_qkv |= all || self.fused_qkv;
        c.fused_gate_up |= all || self.fused_gate_up;
        Ok(())
    }
}

/// One line naming the optimisations in effect, or None for the reference model.
pub fn describe(c: &ModelConfig) -> Option<String> {
    let mut parts = Vec::new();
    if c.checkpoint != Checkpoint::None {
        let kind = if c.hf().is_some_and(|h| h.reentrant) { "reentrant" } else { "non-reentrant" };
        parts.push(format!("activation checkpointing {} ({kind})", c.checkpoint));
    }
    if c.fused_qkv {
        parts.push("fused QKV projection".to_string());
    }
    if c.fused_gate_up {
        parts.push("fused gate/up projection".to_string());
    }
    (!parts.is_empty()).then(|| format!("memory optimisations: {}", parts.join(", ")))
}

/// The part of an output file name that tells a variant from the reference run, so a
/// `--checkpoint blocks` profile does not overwrite the baseline's snapshot: empty for the
/// reference, else `_flash`, `_checkpoint-blocks` / `_checkpoint-every-N`, `_fused-qkv`,
/// `_fused-gate-up` and `_accumN`, in that order.
pub fn file_tag(c: &ModelConfig, grad_accum_steps: usize) -> String {
    let mut tag = String::new();
    if c.attention == crate::model::Attention::Flash {
        tag.push_str("_flash");
    }
    match c.checkpoint {
        Checkpoint::None => {}
        Checkpoint::Every(1) => tag.push_str("_checkpoint-blocks"),
        Checkpoint::Every(n) => tag.push_str(&format!("_checkpoint-every-{n}")),
    }
    if c.checkpoint != Checkpoint::None && c.hf().is_some_and(|h| h.reentrant) {
        tag.push_str("-reentrant");
    }
    tag.push_str(&super::hf_flags::file_tag(c));
    if c.fused_qkv {
        tag.push_str("_fused-qkv");
    }
    if c.fused_gate_up {
        tag.push_str("_fused-gate-up");
    }
    if grad_accum_steps > 1 {
        tag.push_str(&format!("_accum{grad_accum_steps}"));
    }
    tag
}
