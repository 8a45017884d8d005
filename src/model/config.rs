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
    /// Hugging Face transformers' own modeling code (llama, mistral, qwen2, qwen3) as the
    /// Trainer runs it; the architecture and options are in [`ModelConfig::hf`].
    Hf,
}

impl Flavour {
    /// Every flavour, in `--flavour`'s order.
    pub const ALL: [Flavour; 3] = [Flavour::Cs336, Flavour::Tinyllama, Flavour::Hf];
    /// What the flavour reproduces, in a few words (`--flavour`'s help).
    pub fn describe(self) -> &'static str {
        match self {
            Flavour::Cs336 => "Stanford CS336's assignment model and AdamW",
            Flavour::Tinyllama => "AMD's Tiny LLaMA workshop model (tiny_llama_v1.py)",
            Flavour::Hf => "transformers' modeling code (llama, mistral, qwen2, qwen3) as the Trainer runs it",
        }
    }
    pub fn parse(s: &str) -> Option<Flavour> {
        match s.to_ascii_lowercase().as_str() {
            "cs336" => Some(Flavour::Cs336),
            "tinyllama" | "tiny_llama" | "tiny-llama" => Some(Flavour::Tinyllama),
            "hf" | "transformers" | "huggingface" => Some(Flavour::Hf),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Cs336 => "cs336",
            Flavour::Tinyllama => "tinyllama",
            Flavour::Hf => "hf",
        }
    }
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parameter counts of a model ([`ModelConfig::param_counts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ParamCounts {
    pub total: u64,
    pub trainable: u64,
    pub embedding: u64,
    pub non_embedding: u64,
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
    /// Every attention, in `--attention`'s order.
    pub const ALL: [Attention; 2] = [Attention::Naive, Attention::Flash];
    /// How it computes, in a few words (`--attention`'s help).
    pub fn describe(self) -> &'static str {
        match self {
            Attention::Naive => "scores, mask, softmax, weights·V",
            Attention::Flash => "one fused primitive that never materialises the (B, h, S, S) scores",
        }
    }
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
    /// The spellings help lists: (name, what it checkpoints).
    pub const CHOICES: [(&'static str, &'static str); 3] =
        [("none", "no checkpointing"), ("blocks", "every decoder block"), ("every-N", "blocks 0, N, 2N, … (N ≥ 1)")];
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

/// The most bytes any size vramscope computes may reach (2^62): far above every device, and
/// low enough that sums of such sizes, rounding, and the snapshot's int64 fields never overflow.
pub const MAX_BYTES: u64 = 1 << 62;

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
    /// The hf flavour's architecture facts and transformers options (None for the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf: Option<crate::model::hf::HfConfig>,
    /// Tensor parallelism (`--tp`): the model is this rank's shards (hf flavour only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<crate::model::tp::TensorParallel>,
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
    /// Size of one attention head: hidden / heads, or a config.json's explicit `head_dim`.
    pub fn head_dim(&self) -> usize {
        match &self.hf {
            Some(h) => h.head_dim,
            None => self.d_model / self.num_heads,
        }
    }

    /// The hf options, for a model of the hf flavour.
    pub fn hf(&self) -> Option<&crate::model::hf::HfConfig> {
        self.hf.as_ref().filter(|_| self.flavour == Flavour::Hf)
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
        if self.flavour == Flavour::Hf && self.hf.is_none() {
            return Err(ConfigError::new("--flavour", "the hf flavour needs a config.json (--config) or an hf preset"));
        }
        // Gemma's layer types, window and soft-caps come with its model_type (the config reader
        // and the presets set them); a config without them cannot be run as Gemma.
        if let Some(h) = self.hf.as_ref().filter(|h| h.model_type.is_gemma()) {
            match &h.gemma {
                None => return Err(ConfigError::new("--config", "a gemma2/gemma3_text model needs its Gemma fields (layer types, sliding_window, query_pre_attn_scalar)")),
                // (--num-layers may keep the first layers: `layers[: num_hidden_layers]`.)
                Some(g) if g.sliding.len() < self.num_layers => {
                    return Err(ConfigError::new("--num-layers", format!("{} layers, but layer_types names only {}", self.num_layers, g.sliding.len())));
                }
                Some(_) => {}
            }
        }
        if self.hf.as_ref().is_some_and(|h| h.head_dim == 0) {
            return Err(ConfigError::new("--config", "head_dim must be at least 1"));
        }
        if self.hf.is_none() && self.d_model % self.num_heads != 0 {
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
        if let Some(tp) = &self.tp {
            crate::model::tp::validate(self, tp)?;
        }
        // The weights and buffers alone (a run checks its batch and sequence length too).
        self.check_sizes(1, 1, "--context-length")
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

    /// Refuses a shape whose byte counts could not be represented: every element count and
    /// byte size the model, engine, allocator and snapshot compute for `batch` × `seq` (and
    /// the model itself) must stay below [`MAX_BYTES`] (2^62, which also keeps the snapshot's
    /// int64 fields and the allocator's sums exact). The bound is generous on purpose: every
    /// tensor counted at 16 B per element (8 B int64 ids, ×2 allocator rounding), 64 of the
    /// largest per layer and 4 layers' worth outside the blocks. A shape that passes but
    /// exceeds every GPU is a correct answer (the simulated allocator records it; a `--gpu`
    /// run reports the OOM). The error names the flags that set the largest factor.
    pub fn check_sizes(&self, batch: usize, seq: usize, seq_flag: &'static str) -> Result<(), ConfigError> {
        let (b, s) = (batch as u128, seq as u128);
        let (d, f, v, h, l) = (self.d_model as u128, self.d_ff as u128, self.vocab_size as u128, self.num_heads as u128, self.num_layers as u128);
        let (dk, ms) = (self.head_dim() as u128, self.max_seq_len as u128);
        // A (B, S, …) tensor is blamed on the larger of the two.
        let bs = if s >= b { seq_flag } else { "--batch-size" };
        // The largest tensor of each kind, in elements (fused projections are 3d and 2F wide).
        // Saturating: usize-sized factors can pass even u128 (and saturate far above the bound).
        let m = |xs: &[u128]| xs.iter().fold(1u128, |a, &x| a.saturating_mul(x));
        // An hf config's head_dim is its own field: heads × head_dim need not be d. (When it is,
        // the (3d, d) weight above stands for these and blames --hidden-dim.)
        let qkv = if h.saturating_mul(dk) == d { 0 } else { h.saturating_add(2u128.saturating_mul(self.num_kv_heads as u128)).saturating_mul(dk) };
        let tensors: [(&'static str, &str, u128); 11] = [
            ("--hidden-dim", "a (3d, d) attention weight", m(&[3, d, d])),
            ("--num-heads", "the (heads·head_dim + 2·kv_heads·head_dim, d) q/k/v weights", m(&[qkv, d])),
            (bs, "a (B, S, heads·head_dim + 2·kv_heads·head_dim) q/k/v output", m(&[b, s, qkv])),
            ("--intermediate-dim", "a (2F, d) feed-forward weight", m(&[2, d, f])),
            ("--vocab-size", "the (V, d) embedding", m(&[v, d])),
            ("--max-seq-len", "the (2, max_seq_len, d_k/2) RoPE table", m(&[ms, dk])),
            (bs, "a (B, S, 3d) projection output", m(&[b, s, 3, d])),
            (bs, "a (B, S, 2F) feed-forward tensor", m(&[b, s, 2, f])),
            (bs, "the (B, S, V) logits", m(&[b, s, v])),
            (bs, "the (B, h, S, S) attention scores", m(&[b, h, s, s])),
            (seq_flag, "the (S, S) causal mask", m(&[s, s])),
        ];
        let &(flag, what, largest) = tensors.iter().max_by_key(|t| t.2).expect("non-empty");
        let one = largest.saturating_mul(16);
        let mut shape = format!("hidden {}, intermediate {}, vocabulary {}, {} heads, max_seq_len {}", self.d_model, self.d_ff, self.vocab_size, self.num_heads, self.max_seq_len);
        if flag == bs || flag == seq_flag {
            shape += &format!(", batch {batch}, sequence length {seq}");
        }
        // A config.json sets the model's sizes under Hugging Face's names.
        let key = match flag {
            "--hidden-dim" => " (hidden_size in a config.json)",
            "--intermediate-dim" => " (intermediate_size in a config.json)",
            "--vocab-size" => " (vocab_size in a config.json)",
            "--max-seq-len" => " (max_position_embeddings in a config.json)",
            "--num-heads" => " (num_attention_heads, num_key_value_heads and head_dim in a config.json)",
            _ => "",
        };
        let lower = if flag == bs { format!("--batch-size or {seq_flag}") } else { format!("{flag}{key}") };
        if one > MAX_BYTES as u128 {
            return Err(ConfigError::new(
                flag,
                format!("{what} would have {largest} elements ({shape}): more bytes than the 2^62 vramscope can count; lower {lower}"),
            ));
        }
        let all = one.saturating_mul(64).saturating_mul(l + 4);
        if all > MAX_BYTES as u128 {
            // Blame the layer count only when a few layers of the same shape would fit.
            let few_layers_fit = one.saturating_mul(64).saturating_mul(8) <= MAX_BYTES as u128;
            let (flag, lower) = if few_layers_fit { ("--num-layers", format!("--num-layers (num_hidden_layers in a config.json) or {lower}")) } else { (flag, lower) };
            return Err(ConfigError::new(
                flag,
                format!(
                    "{l} layers with tensors as large as {what} ({largest} elements; {shape}) could hold more bytes than the 2^62 vramscope can count (bound: 16 B per element, 64 such tensors per layer); lower {lower}"
                ),
            ));
        }
        Ok(())
    }

    /// Closed-form parameter count (each tied weight counted once).
    /// Exact for every validated config ([`Self::check_sizes`]); saturates at u64::MAX for one
    /// that is not yet validated, never wraps.
    pub fn param_count(&self) -> u64 {
        // DeepSeek-V3: latent attention and dense first layers (deepseek_v3.rs counts them).
        if let Some((m, ds)) = self.hf.as_ref().and_then(|h| h.moe.as_ref()).and_then(|m| m.deepseek.as_ref().map(|d| (m, d))) {
            return ds.shape(self, m).counts().map_or(u64::MAX, |c| c.total);
        }
        let (d, f, v, l) = (self.d_model as u128, self.d_ff as u128, self.vocab_size as u128, self.num_layers as u128);
        let hd = if self.hf.is_some() { self.head_dim() } else { self.d_model / self.num_heads.max(1) } as u128;
        let (q, kv) = ((self.num_heads as u128).saturating_mul(hd), (self.num_kv_heads as u128).saturating_mul(hd));
        // q and o are (h·d_k, d) and (d, h·d_k); k and v (h_kv·d_k, d).
        let mut attn = d.saturating_mul(q).saturating_mul(2).saturating_add(d.saturating_mul(kv).saturating_mul(2));
        let mut mlp = d.saturating_mul(f).saturating_mul(3);
        // A sparse MoE block: the router (experts × d) and every expert's three matrices (d_ff
        // is one expert's width).
        if let Some(m) = self.hf.as_ref().and_then(|h| h.moe.as_ref()) {
            mlp = mlp.saturating_mul(m.experts as u128).saturating_add(d.saturating_mul(m.experts as u128));
            // Qwen2-MoE's shared expert and its (1, d) gate.
            if m.shared_intermediate > 0 {
                mlp = mlp.saturating_add(d.saturating_mul(m.shared_intermediate as u128).saturating_mul(3)).saturating_add(d);
            }
            // gpt-oss: the router's bias (experts), the experts' biases (2·I + d each) and the
            // attention's sinks (one per head).
            if m.family == crate::model::hf::moe::MoeFamily::GptOss {
                let e = m.experts as u128;
                mlp = mlp.saturating_add(e).saturating_add(e.saturating_mul(f.saturating_mul(2).saturating_add(d)));
                attn = attn.saturating_add(self.num_heads as u128);
            }
        }
        let mut norms = 2 * d;
        if let Some(h) = &self.hf {
            if h.qkv_bias {
                attn = attn.saturating_add(q).saturating_add(2 * kv);
            }
            if h.o_bias {
                attn = attn.saturating_add(d);
            }
            if h.mlp_bias {
                mlp = mlp.saturating_add(2 * f + d);
            }
            match h.model_type {
                crate::model::hf::Arch::Qwen3 => norms += 2 * hd,
                // Gemma's four norms per layer; Gemma 3's per-head q_norm and k_norm too.
                crate::model::hf::Arch::Gemma2 => norms = 4 * d,
                crate::model::hf::Arch::Gemma3Text => norms = (4 * d).saturating_add(2 * hd),
                // OLMo-2's q_norm and k_norm span the whole projections.
                crate::model::hf::Arch::Olmo2 => norms = norms.saturating_add(q).saturating_add(kv),
                _ => {}
            }
        }
        let per_layer = attn.saturating_add(mlp).saturating_add(norms);
        let head = if self.tied_embeddings { 0 } else { v.saturating_mul(d) };
        let n = l.saturating_mul(per_layer).saturating_add(v.saturating_mul(d)).saturating_add(head).saturating_add(d);
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    /// Elements of peft's LoRA adapters (`lora_A` r × in and `lora_B` out × r per adapted
    /// projection and layer, plus DoRA's out-sized magnitude); 0 without LoRA.
    pub fn lora_param_count(&self) -> u64 {
        let Some(lc) = self.hf().and_then(|h| h.lora.as_ref()) else { return 0 };
        let hd = self.head_dim() as u128;
        let (d, f) = (self.d_model as u128, self.d_ff as u128);
        let (q, kv) = ((self.num_heads as u128).saturating_mul(hd), (self.num_kv_heads as u128).saturating_mul(hd));
        let h = self.hf().expect("LoRA is hf");
        // (in, out) per slot of lora::layer_linears: Phi-3's fused qkv_proj and gate_up_proj in
        // q's and gate's.
        let phi3 = h.model_type == crate::model::hf::Arch::Phi3;
        let (qkv_out, gate_out) = if phi3 { (q.saturating_add(kv.saturating_mul(2)), f.saturating_mul(2)) } else { (q, f) };
        let mut shapes = [(d, qkv_out), (d, kv), (d, kv), (q, d), (d, gate_out), (d, f), (f, d), (0, 0), (0, 0), (0, 0), (0, 0)];
        if let Some(ds) = h.moe.as_ref().and_then(|m| m.deepseek.as_ref()) {
            shapes = ds.mla_linear_shapes(self.d_model, self.num_heads).map(|(i, o)| (i as u128, o as u128));
        }
        // Qwen2-MoE's shared expert (s wide) and shared_expert_gate (d → 1): lora::QWEN2_MOE_SHARED.
        if let Some(s) = h.moe.as_ref().filter(|m| m.deepseek.is_none()).map(|m| m.shared_intermediate as u128).filter(|&s| s > 0) {
            shapes[4] = (d, s);
            shapes[5] = (d, s);
            shapes[6] = (s, d);
            shapes[7] = (d, 1);
        }
        let per_layer: u128 = crate::model::lora::linears_of(h)
            .iter()
            .map(|&(slot, name)| (name, shapes[slot]))
            .filter(|(t, _)| lc.targets(t))
            // DoRA adds a magnitude per output feature.
            .map(|(_, (i, o))| (lc.r as u128).saturating_mul(i.saturating_add(o)).saturating_add(if lc.use_dora { o } else { 0 }))
            .fold(0u128, u128::saturating_add);
        // peft's ParamWrapper (target_parameters): r·E × in and out × r·E per 3-D expert
        // weight (gate_up_proj at twice the rank when peft's conversion doubled it), r × hidden
        // and E × r for the router; in the sparse layers only (DeepSeek-V3's first ones are dense).
        let (params, sparse_layers): (u128, u128) = h.moe.as_ref().map_or((0, 0), |m| {
            let (e, i, r) = (m.experts as u128, m.intermediate as u128, lc.r as u128);
            let mut n = 0u128;
            if lc.targets_router() {
                n = n.saturating_add(r.saturating_mul(d.saturating_add(e)));
            }
            if lc.targets_parameter("mlp.experts.gate_up_proj") {
                let re = (lc.gate_up_rank() as u128).saturating_mul(e);
                n = n.saturating_add(re.saturating_mul(d.saturating_add(i.saturating_mul(2))));
            }
            if lc.targets_parameter("mlp.experts.down_proj") {
                n = n.saturating_add(r.saturating_mul(e).saturating_mul(i.saturating_add(d)));
            }
            let sparse = (0..self.num_layers).filter(|&l| m.deepseek.as_ref().is_none_or(|ds| ds.is_sparse(l))).count();
            (n, sparse as u128)
        });
        let total = per_layer.saturating_mul(self.num_layers as u128).saturating_add(params.saturating_mul(sparse_layers));
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// Elements of the base biases peft's `bias` option leaves trainable.
    pub fn lora_bias_count(&self) -> u64 {
        let Some(h) = self.hf() else { return 0 };
        let Some(lc) = h.lora.as_ref() else { return 0 };
        // DeepSeek-V3's latent attention: attention_bias's q_a_proj, kv_a_proj_with_mqa and
        // o_proj biases, in every layer (the router's e_score_correction_bias is a buffer).
        if let Some(ds) = h.moe.as_ref().and_then(|m| m.deepseek.as_ref()) {
            let shapes = ds.mla_linear_shapes(self.d_model, self.num_heads);
            let per_layer: u64 = crate::model::lora::linears_of(h).iter().filter(|(_, n)| ds.has_bias(n) && lc.trains_bias(n)).map(|&(slot, _)| shapes[slot].1 as u64).sum();
            return per_layer.saturating_mul(self.num_layers as u64);
        }
        let hd = self.head_dim() as u64;
        let (d, f) = (self.d_model as u64, self.d_ff as u64);
        let (q, kv) = (self.num_heads as u64 * hd, self.num_kv_heads as u64 * hd);
        // (out features, has a bias) per projection, in lora::TARGETS order.
        let biases = [(q, h.qkv_bias), (kv, h.qkv_bias), (kv, h.qkv_bias), (d, h.o_bias), (f, h.mlp_bias), (f, h.mlp_bias), (d, h.mlp_bias)];
        let mut per_layer: u64 = crate::model::lora::TARGETS.iter().zip(biases).filter(|(t, (_, has))| *has && lc.trains_bias(t)).map(|(_, (o, _))| o).sum();
        // gpt-oss's router bias (mlp.router.bias, one per expert).
        if let Some(m) = h.moe.as_ref().filter(|m| m.family == crate::model::hf::moe::MoeFamily::GptOss && lc.trains_router_bias()) {
            per_layer = per_layer.saturating_add(m.experts as u64);
        }
        per_layer.saturating_mul(self.num_layers as u64)
    }

    /// Elements of peft's `modules_to_save` copies (V·d each: the embedding, the head; a tied
    /// head's copy is a parameter of its own).
    pub fn modules_to_save_count(&self) -> u64 {
        let n = self.hf().and_then(|h| h.lora.as_ref()).map_or(0, |l| l.modules_to_save.len() as u64);
        n.saturating_mul((self.vocab_size as u64).saturating_mul(self.d_model as u64))
    }

    /// The counts users check first, as transformers and peft give them: every parameter
    /// (`num_parameters()`, a tied head once, adapters included), those that train
    /// (`print_trainable_parameters()`), the input embedding's, and the rest
    /// (`num_parameters(exclude_embeddings=True)`).
    pub fn param_counts(&self) -> ParamCounts {
        let base = self.param_count();
        let lora = self.lora_param_count();
        let saved = self.modules_to_save_count();
        let total = base.saturating_add(lora).saturating_add(saved);
        let embedding = (self.vocab_size as u64).saturating_mul(self.d_model as u64);
        // A bitsandbytes model without adapters trains nothing: its quantized weights are
        // frozen and prepare_model_for_kbit_training freezes the rest.
        let quantized = self.hf.as_ref().is_some_and(|h| h.bnb.is_some());
        let trainable = if lora > 0 {
            lora.saturating_add(self.lora_bias_count()).saturating_add(saved)
        } else if quantized {
            0
        } else {
            total
        };
        ParamCounts { total, trainable, embedding, non_embedding: total.saturating_sub(embedding) }
    }

    /// The count with a tied LM head counted a second time, as hand derivations that list
    /// "embedding" and "output projection" separately do (the workshop guide's 2,873,600 for
    /// its walkthrough model); equal to [`Self::param_count`] for an untied head.
    pub fn param_count_head_twice(&self) -> u64 {
        let head = if self.tied_embeddings { (self.vocab_size as u64).saturating_mul(self.d_model as u64) } else { 0 };
        self.param_count().saturating_add(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walkthrough() -> ModelConfig {
        crate::model::presets::find("walkthrough", None).unwrap().model
    }

    #[test]
    fn sizes_within_2_pow_62_pass_and_beyond_are_refused_naming_the_flag() {
        let c = walkthrough();
        assert!(c.check_sizes(8, 128, "--context-length").is_ok());
        // Terabyte-scale activations still fit (a correct answer on meta).
        assert!(c.check_sizes(1 << 20, 128, "--context-length").is_ok());
        let e = c.check_sizes(99_999_999_999, 128, "--context-length").unwrap_err();
        assert_eq!(e.flag, "--batch-size", "{e}");
        assert!(e.message.contains("--batch-size or --context-length"), "{e}");
        let e = c.check_sizes(8, 100_000_000, "--seq-len").unwrap_err();
        assert_eq!(e.flag, "--seq-len", "{e}");
        let e = c.check_sizes(usize::MAX, usize::MAX, "--context-length").unwrap_err();
        assert!(e.message.contains("elements"), "{e}");
        let mut h = c.clone();
        h.d_model = 1 << 32;
        let e = h.validate().unwrap_err();
        assert_eq!(e.flag, "--hidden-dim", "{e}");
        assert!(e.message.contains("hidden_size"), "{e}");
        // A petabyte embedding is still an answer; 2^52 rows are not.
        let mut v = c.clone();
        v.vocab_size = 1 << 40;
        assert!(v.validate().is_ok());
        v.vocab_size = 1 << 52;
        assert_eq!(v.validate().unwrap_err().flag, "--vocab-size");
        let mut l = c.clone();
        l.num_layers = 1 << 40;
        assert_eq!(l.validate().unwrap_err().flag, "--num-layers");
        l.num_layers = 100_000;
        assert!(l.validate().is_ok());
        let mut m = c;
        m.max_seq_len = usize::MAX;
        assert_eq!(m.validate().unwrap_err().flag, "--max-seq-len");
    }

    #[test]
    fn within_the_bound_every_count_fits() {
        // The largest accepted shapes keep the closed-form counts exact.
        let mut c = walkthrough();
        c.num_layers = 1000;
        c.check_sizes(8, 128, "--context-length").unwrap();
        assert!(c.param_count() < MAX_BYTES / 4);
        let e = crate::analyse::estimate::estimate(&c, crate::train::Precision::Fp32, 8, 128);
        assert!(e.training_bytes() < MAX_BYTES && e.training_bytes() > e.param_bytes);
    }
}
