//! Memory optimisations of the model that `train` and `profile` compare: activation
//! checkpointing and the workshop's version-2 projection fusions.
use super::usage;
use crate::model::{Checkpoint, ModelConfig};
use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct MemoryFlags {
    /// Activation checkpointing: none, blocks or every-N
    ///
    /// torch.utils.checkpoint with use_reentrant=False, on every decoder block (blocks) or on
    /// blocks 0, N, 2N, … (every-N).
    #[arg(help_heading = super::heading::MEMORY, long, value_parser = super::values::checkpoints())]
    pub checkpoint: Option<String>,
    /// Projection fusions of the workshop's version 2: none or all
    ///
    /// all is --fused-qkv and --fused-gate-up; its flash attention is --attention flash.
    #[arg(help_heading = super::heading::MEMORY, long, value_parser = super::values::fusions())]
    pub fusion: Option<String>,
    /// One QKV projection whose output is split into Q, K, V views
    #[arg(help_heading = super::heading::MEMORY, long)]
    pub fused_qkv: bool,
    /// One gate/up projection whose output is chunked into two views
    #[arg(help_heading = super::heading::MEMORY, long)]
    pub fused_gate_up: bool,
}

/// `--fusion` values: (name, what it fuses).
pub const FUSIONS: [(&str, &str); 2] = [("none", "separate projections"), ("all", "--fused-qkv and --fused-gate-up")];

impl MemoryFlags {
    /// Set the chosen optimisations on a resolved model configuration.
    pub fn apply(&self, c: &mut ModelConfig) -> anyhow::Result<()> {
        if let Some(s) = &self.checkpoint {
            // hf: --checkpoint is use_reentrant=False; --gradient-checkpointing already chose.
            if c.hf().is_some_and(|h| h.reentrant) || (c.hf().is_some() && c.checkpoint != Checkpoint::None) {
                return Err(usage("--checkpoint", "--gradient-checkpointing already sets checkpointing: give one of them"));
            }
            c.checkpoint = Checkpoint::parse(s).ok_or_else(|| usage("--checkpoint", format!("'{s}' (expected {})", Checkpoint::CHOICES.map(|(n, _)| n).join(", "))))?;
        }
        let all = match self.fusion.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("none") => false,
            Some("all") => true,
            Some(_) => return Err(usage("--fusion", format!("'{}' (expected {})", self.fusion.as_deref().unwrap_or_default(), FUSIONS.map(|(n, _)| n).join(" or ")))),
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
