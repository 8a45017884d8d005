//! Flags that choose and reshape a model, shared by the subcommands that build one.
use super::usage;
use crate::model::{presets, Attention, Flavour, ModelConfig};
use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct ModelFlags {
    /// Model preset: cs336 sizes small|medium|large|xl|2.7B, tinyllama walkthrough|script|
    /// tiny|small|medium|large|very_large (prefix cs336- / tinyllama- when ambiguous)
    #[arg(long, visible_alias = "model", alias = "model-size")]
    pub preset: Option<String>,
    /// Reference implementation to reproduce: cs336 or tinyllama
    #[arg(long)]
    pub flavour: Option<String>,
    /// Hidden size d_model
    #[arg(long)]
    pub hidden_dim: Option<usize>,
    #[arg(long)]
    pub num_layers: Option<usize>,
    #[arg(long)]
    pub num_heads: Option<usize>,
    /// Key/value heads (grouped-query attention when fewer than --num-heads)
    #[arg(long)]
    pub num_kv_heads: Option<usize>,
    /// Feed-forward size d_ff
    #[arg(long)]
    pub intermediate_dim: Option<usize>,
    #[arg(long)]
    pub vocab_size: Option<usize>,
    /// Longest sequence the model accepts (sizes cs336's RoPE buffer)
    #[arg(long)]
    pub max_seq_len: Option<usize>,
    #[arg(long)]
    pub rope_theta: Option<f64>,
    #[arg(long)]
    pub norm_eps: Option<f64>,
    /// Attention: naive (scores, mask, softmax, weights·V) or flash (one fused primitive
    /// that never materialises the (B, h, S, S) scores)
    #[arg(long)]
    pub attention: Option<String>,
}

/// A resolved model plus the run defaults of its preset.
pub struct Resolved {
    pub preset: presets::Preset,
    pub config: ModelConfig,
}

impl ModelFlags {
    pub fn resolve(&self, default_preset: &str) -> anyhow::Result<Resolved> {
        let flavour = match &self.flavour {
            Some(f) => Some(Flavour::parse(f).ok_or_else(|| usage("--flavour", format!("'{f}' (expected cs336 or tinyllama)")))?),
            None => None,
        };
        let name = self.preset.as_deref().unwrap_or(default_preset);
        // A flavour without a preset picks that flavour's default model.
        let name = match (self.preset.as_deref(), flavour) {
            (None, Some(Flavour::Cs336)) => "small",
            _ => name,
        };
        let preset = presets::find(name, flavour).map_err(|e| usage("--preset", e))?;
        if let Some(f) = flavour {
            if f != preset.model.flavour {
                return Err(usage("--flavour", format!("preset '{name}' is a {} model", preset.model.flavour)));
            }
        }
        let mut c = preset.model.clone();
        let set = |v: &mut usize, o: Option<usize>| {
            if let Some(o) = o {
                *v = o
            }
        };
        set(&mut c.d_model, self.hidden_dim);
        set(&mut c.num_layers, self.num_layers);
        if let Some(h) = self.num_heads {
            // Without GQA in the preset, changing the heads changes the kv heads too.
            if c.num_kv_heads == c.num_heads && self.num_kv_heads.is_none() {
                c.num_kv_heads = h;
            }
            c.num_heads = h;
        }
        set(&mut c.num_kv_heads, self.num_kv_heads);
        set(&mut c.d_ff, self.intermediate_dim);
        set(&mut c.vocab_size, self.vocab_size);
        set(&mut c.max_seq_len, self.max_seq_len);
        if let Some(t) = self.rope_theta {
            c.rope_theta = t;
        }
        if let Some(e) = self.norm_eps {
            c.norm_eps = e;
        }
        if let Some(a) = &self.attention {
            c.attention = Attention::parse(a).ok_or_else(|| usage("--attention", format!("'{a}' (expected naive or flash)")))?;
        }
        c.validate().map_err(super::UsageError::from)?;
        Ok(Resolved { preset, config: c })
    }
}
