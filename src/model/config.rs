//! Model configuration, its validation, and the closed-form parameter count.
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which reference implementation's op sequence to reproduce (reference-models.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavour {
    /// Stanford CS336 assignment: einsum linears, hand-written softmax/cross-entropy,
    /// fp32-upcast RMSNorm, untied head, the course's AdamW.
    Cs336,
    /// AMD's Tiny LLaMA workshop: GQA, fused softmax/silu/cross-entropy, tied head,
    /// torch.optim.AdamW.
    Tinyllama,
}

impl Flavour {
    pub fn parse(s: &str) -> Option<Flavour> {
        match s.to_ascii_lowercase().as_str() {
            "cs336" => Some(Flavour::Cs336),
            "tinyllama" | "tiny_llama" | "tiny-llama" => Some(Flavour::Tinyllama),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Cs336 => "cs336",
            Flavour::Tinyllama => "tinyllama",
        }
    }
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How attention is computed (both give the same values; memory differs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// The flavour's own composition: scores (B, h, S, S), mask, softmax, weights·V.
    #[default]
    Naive,
    /// One `scaled_dot_product_attention` call on the flash backend: no (B, h, S, S) tensor.
    Flash,
}

impl Attention {
    pub fn parse(s: &str) -> Option<Attention> {
        match s.to_ascii_lowercase().as_str() {
            "naive" => Some(Attention::Naive),
            "flash" => Some(Attention::Flash),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Attention::Naive => "naive",
            Attention::Flash => "flash",
        }
    }
}

impl fmt::Display for Attention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which blocks run under `torch.utils.checkpoint(block, x, use_reentrant=False)`.
/// Written as the flag spells it (`none`, `blocks`, `every-N`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Checkpoint {
    #[default]
    None,
    /// Blocks 0, N, 2N, …: every N-th block, counting from the first (N = 1: all blocks).
    Every(usize),
}

impl Checkpoint {
    /// `none`, `blocks` (every block) or `every-N`.
    pub fn parse(s: &str) -> Option<Checkpoint> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Some(Checkpoint::None),
            "blocks" | "all" => Some(Checkpoint::Every(1)),
            o => o.strip_prefix("every-").and_then(|n| n.parse().ok()).filter(|&n| n >= 1).map(Checkpoint::Every),
        }
    }
    pub fn covers(self, block: usize) -> bool {
        match self {
            Checkpoint::None => false,
            Checkpoint::Every(n) => block.is_multiple_of(n),
        }
    }
}

impl From<Checkpoint> for String {
    fn from(c: Checkpoint) -> String {
        c.to_string()
    }
}

impl TryFrom<String> for Checkpoint {
    type Error = String;
    fn try_from(s: String) -> Result<Checkpoint, String> {
        Checkpoint::parse(&s).ok_or_else(|| format!("checkpoint '{s}' (expected none, blocks or every-N)"))
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Checkpoint::None => f.write_str("none"),
            Checkpoint::Every(1) => f.write_str("blocks"),
            Checkpoint::Every(n) => write!(f, "every-{n}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub flavour: Flavour,
    pub vocab_size: usize,
    pub d_model: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub d_ff: usize,
    pub rope_theta: f64,
    pub norm_eps: f64,
    /// RMSNorm computes in fp32 and casts back (cs336) or in the input dtype (tinyllama).
    pub norm_fp32_upcast: bool,
    /// LM head shares the token embedding's weight.
    pub tied_embeddings: bool,
    pub max_seq_len: usize,
    /// `--attention`: naive composition or the flash primitive.
    #[serde(default)]
    pub attention: Attention,
    /// `--checkpoint`: activation checkpointing of decoder blocks.
    #[serde(default)]
    pub checkpoint: Checkpoint,
    /// `--fused-qkv`: one (h + 2·h_kv)·d_k × d projection, Q/K/V split from its output as views.
    #[serde(default)]
    pub fused_qkv: bool,
    /// `--fused-gate-up`: one 2F × d projection, gate and up chunked from its output as views.
    #[serde(default)]
    pub fused_gate_up: bool,
}

/// A configuration problem, naming the command-line flag that sets the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid {flag}: {message}")]
pub struct ConfigError {
    pub flag: &'static str,
    pub message: String,
}

impl ConfigError {
    pub fn new(flag: &'static str, message: impl Into<String>) -> Self {
        ConfigError { flag, message: message.into() }
    }
}

impl ModelConfig {
    pub fn head_dim(&self) -> usize {
        self.d_model / self.num_heads
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let nonzero = [
            ("--vocab-size", self.vocab_size),
            ("--hidden-dim", self.d_model),
            ("--num-layers", self.num_layers),
            ("--num-heads", self.num_heads),
            ("--num-kv-heads", self.num_kv_heads),
            ("--intermediate-dim", self.d_ff),
            ("--max-seq-len", self.max_seq_len),
        ];
        for (flag, v) in nonzero {
            if v == 0 {
                return Err(ConfigError::new(flag, "must be at least 1"));
            }
        }
        if self.d_model % self.num_heads != 0 {
            return Err(ConfigError::new(
                "--num-heads",
                format!("{} heads do not divide the hidden size {} (--hidden-dim)", self.num_heads, self.d_model),
            ));
        }
        if self.num_heads % self.num_kv_heads != 0 {
            return Err(ConfigError::new(
                "--num-kv-heads",
                format!("{} key/value heads do not divide the {} attention heads (--num-heads)", self.num_kv_heads, self.num_heads),
            ));
        }
        if self.head_dim() % 2 != 0 {
            return Err(ConfigError::new(
                "--num-heads",
                format!("head dimension {} (hidden {} / {} heads) must be even for rotary embeddings", self.head_dim(), self.d_model, self.num_heads),
            ));
        }
        if !(self.rope_theta > 0.0) {
            return Err(ConfigError::new("--rope-theta", "must be positive"));
        }
        if !(self.norm_eps >= 0.0) {
            return Err(ConfigError::new("--norm-eps", "must be non-negative"));
        }
        Ok(())
    }

    /// Checks a run's sequence length against the model.
    pub fn check_seq_len(&self, seq_len: usize, flag: &'static str) -> Result<(), ConfigError> {
        if seq_len == 0 {
            return Err(ConfigError::new(flag, "must be at least 1"));
        }
        if seq_len > self.max_seq_len {
            return Err(ConfigError::new(
                flag,
                format!("{seq_len} exceeds the model's maximum sequence length {} (raise --max-seq-len)", self.max_seq_len),
            ));
        }
        Ok(())
    }

    /// Closed-form parameter count (each tied weight counted once).
    pub fn param_count(&self) -> u64 {
        let (d, f, v, l) = (self.d_model as u64, self.d_ff as u64, self.vocab_size as u64, self.num_layers as u64);
        let kv = (self.num_kv_heads * self.head_dim()) as u64;
        let attn = d * d * 2 + d * kv * 2;
        let per_layer = attn + 3 * d * f + 2 * d;
        let head = if self.tied_embeddings { 0 } else { v * d };
        l * per_layer + v * d + head + d
    }

    /// The count with a tied LM head counted a second time, as hand derivations that list
    /// "embedding" and "output projection" separately do (the workshop guide's 2,873,600 for
    /// its walkthrough model); equal to [`Self::param_count`] for an untied head.
    pub fn param_count_head_twice(&self) -> u64 {
        self.param_count() + if self.tied_embeddings { (self.vocab_size * self.d_model) as u64 } else { 0 }
    }
}
