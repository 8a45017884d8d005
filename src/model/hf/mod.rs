//! The `hf` flavour: causal LMs as Hugging Face transformers' own modeling code runs them
//! (`model_type` llama, mistral, qwen2, qwen3, phi3, olmo2, gemma2, gemma3_text), with
//! transformers' run options.
//!
//! [`HfConfig`] holds what a `config.json` and transformers' options add to a
//! [`ModelConfig`](super::ModelConfig); [`config_json`] reads the file; the op sequence of
//! the pinned release lives in one file ([`transformers_5_23`]), so a later release is a new
//! file beside it.
pub mod accelerate_amp;
pub mod config_file;
pub mod config_json;
pub mod beam_search_5_23;
pub mod deepseek_v3;
pub mod generation_5_23;
pub mod gemma;
pub mod generation_config;
pub mod gpt_oss;
pub mod moe;
pub mod moe_5_23;
pub mod router_aux_loss;
pub mod transformers_5_23;

pub use config_json::{parse, HfModel};
pub use transformers_5_23 as modeling;

use serde::{Deserialize, Serialize};
use std::fmt;

/// The transformers release whose modeling code the flavour reproduces.
pub const TRANSFORMERS_VERSION: &str = "5.23.0";

/// `model_type` of a config.json: which modeling file runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Mistral,
    /// q/k/v projections with biases.
    Qwen2,
    /// RMSNorm on each head of q and k before RoPE; explicit head_dim (128 by default).
    Qwen3,
    /// Phi-3: one fused `qkv_proj` and one fused `gate_up_proj` (src/model/hf/phi3.rs).
    Phi3,
    /// OLMo-2: norms after attention and the MLP (none before), RMSNorm over the whole q and k
    /// projections (src/model/hf/olmo2.rs).
    Olmo2,
    /// Gemma 2: scaled embedding, `1 + w` norms around attention and the MLP, gelu-tanh,
    /// alternating sliding/full layers, soft-capped scores and logits (src/model/hf/gemma.rs).
    Gemma2,
    /// Gemma 3's text model (`Gemma3ForCausalLM`): Gemma 2's layer with per-head q/k norms, a
    /// RoPE base per layer type and no score soft-capping (src/model/hf/gemma.rs).
    #[serde(rename = "gemma3_text")]
    Gemma3Text,
}

impl Arch {
    pub const ALL: [Arch; 8] = [Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3, Arch::Phi3, Arch::Olmo2, Arch::Gemma2, Arch::Gemma3Text];
    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == s)
    }
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Mistral => "mistral",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Phi3 => "phi3",
            Arch::Olmo2 => "olmo2",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3Text => "gemma3_text",
        }
    }
    /// Whether the model is one of issue 30's dense families, which run profile, training,
    /// checkpointing, the optimizers, the data-parallel layouts and (Phi-3, OLMo-2) generate, but
    /// not yet LoRA, bitsandbytes, tensor parallelism, Gemma's generate or the estimate's closed form (the options
    /// refuse those, naming the flag).
    pub fn is_family(self) -> bool {
        matches!(self, Arch::Phi3 | Arch::Olmo2 | Arch::Gemma2 | Arch::Gemma3Text)
    }
    /// Gemma 2 or Gemma 3 text.
    pub fn is_gemma(self) -> bool {
        matches!(self, Arch::Gemma2 | Arch::Gemma3Text)
    }
    /// The supported `model_type`s, for error messages.
    pub fn list() -> String {
        Arch::ALL.map(|a| a.name()).join(", ")
    }
}

/// `attn_implementation` (`from_pretrained(..., attn_implementation=...)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnImplementation {
    /// `eager_attention_forward`: repeat_kv, matmul, mask add, fp32 softmax, matmul.
    Eager,
    /// `sdpa_attention_forward`: `F.scaled_dot_product_attention` (transformers' default).
    #[default]
    Sdpa,
    /// The flash-attn package's `flash_attn_func` on (B, S, h, d) tensors.
    FlashAttention2,
}

impl AttnImplementation {
    /// Every implementation, in `--attn-implementation`'s order.
    pub const ALL: [AttnImplementation; 3] = [AttnImplementation::Eager, AttnImplementation::Sdpa, AttnImplementation::FlashAttention2];
    pub fn parse(s: &str) -> Option<AttnImplementation> {
        match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "eager" => Some(AttnImplementation::Eager),
            "sdpa" => Some(AttnImplementation::Sdpa),
            "flash_attention_2" | "fa2" | "flash_attn_2" => Some(AttnImplementation::FlashAttention2),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            AttnImplementation::Eager => "eager",
            AttnImplementation::Sdpa => "sdpa",
            AttnImplementation::FlashAttention2 => "flash_attention_2",
        }
    }
}

/// The kernel `F.scaled_dot_product_attention` dispatches to on a CUDA GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SdpaBackend {
    /// What PyTorch picks for the dtype and mask ([`SdpaBackend::resolve`]).
    #[default]
    Auto,
    /// FlashAttention-2: fp16/bf16, no explicit mask, head_dim ≤ 256.
    Flash,
    /// Memory-efficient attention (xFormers' cutlass kernels): any float dtype, masks allowed.
    Efficient,
    /// The math fallback: the composite of matmul, softmax and matmul.
    Math,
    /// PyTorch's CPU kernel (`_scaled_dot_product_flash_attention_for_cpu`), what a CPU run
    /// of transformers executes (the hf grid's sdpa points).
    CpuFlash,
    /// cuDNN attention (`_scaled_dot_product_cudnn_attention`): what torch 2.11 runs for
    /// fp16/bf16 on sm90 (H100, H200), masked or not, GQA native.
    Cudnn,
}

impl SdpaBackend {
    /// The backends `--sdpa-backend` offers (cpu_flash is what a CPU run executes).
    pub const ALL: [SdpaBackend; 6] = [SdpaBackend::Auto, SdpaBackend::Flash, SdpaBackend::Efficient, SdpaBackend::Math, SdpaBackend::CpuFlash, SdpaBackend::Cudnn];
    pub fn parse(s: &str) -> Option<SdpaBackend> {
        match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "auto" => Some(SdpaBackend::Auto),
            "flash" => Some(SdpaBackend::Flash),
            "efficient" | "mem_efficient" | "memory_efficient" => Some(SdpaBackend::Efficient),
            "math" => Some(SdpaBackend::Math),
            "cpu_flash" | "cpu" => Some(SdpaBackend::CpuFlash),
            "cudnn" | "cudnn_attention" => Some(SdpaBackend::Cudnn),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SdpaBackend::Auto => "auto",
            SdpaBackend::Flash => "flash",
            SdpaBackend::Efficient => "efficient",
            SdpaBackend::Math => "math",
            SdpaBackend::CpuFlash => "cpu_flash",
            SdpaBackend::Cudnn => "cudnn",
        }
    }

    /// PyTorch's priority order on CUDA (`sdp_utils.cpp`: flash → efficient → math, with cuDNN
    /// first where `check_prefer_cudnn_attention` holds, `cudnn_preferred`) for the query
    /// dtype, whether a mask is passed, GQA (`enable_gqa`), the head size and the keys' length.
    /// cuDNN takes half types, masks and GQA, head sizes that are multiples of 8 up to 256
    /// (torch 2.11 with cuDNN 9.19 on an H200 picked it for 80–256, tests/fixtures/gpu), but
    /// not a single key; the memory-efficient kernel has no GQA; flash needs a half type and
    /// no mask.
    pub fn resolve(self, half: bool, masked: bool, gqa: bool, head_dim: usize, cudnn_preferred: bool, kv_len: usize) -> SdpaBackend {
        if self != SdpaBackend::Auto {
            return self;
        }
        if cudnn_preferred && half && head_dim <= 256 && head_dim % 8 == 0 && kv_len != 1 {
            SdpaBackend::Cudnn
        } else if half && !masked && head_dim <= 256 && head_dim % 8 == 0 {
            SdpaBackend::Flash
        } else if !gqa && head_dim % 8 == 0 {
            SdpaBackend::Efficient
        } else {
            SdpaBackend::Math
        }
    }
}

impl fmt::Display for SdpaBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the hf flavour adds to a [`ModelConfig`](super::ModelConfig): the architecture
/// facts of the config.json and the run options transformers offers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HfConfig {
    pub model_type: Arch,
    /// Size of one attention head (config.json `head_dim`; hidden_size / heads by default,
    /// Qwen3's default is 128).
    pub head_dim: usize,
    /// Biases on q, k and v (`attention_bias`; always on for qwen2).
    pub qkv_bias: bool,
    /// A bias on o_proj (`attention_bias` for llama and qwen3; never for qwen2/mistral).
    pub o_bias: bool,
    /// Biases on gate, up and down (llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// Mistral's (and Qwen's `use_sliding_window`) attention window, if any.
    pub sliding_window: Option<usize>,
    /// Qwen2/Qwen3 whose `max_window_layers` / `layer_types` slide only some layers, and
    /// Qwen2-MoE with `use_sliding_window` (all, some or none of its layers): which (None:
    /// `sliding_window` covers every layer). Modelled for Qwen2/Qwen3's generate with a
    /// StaticCache and every profile type of Qwen2-MoE (one GPU and data-parallel layouts)
    /// only (options::generate::check_static_only_window refuses the rest).
    #[serde(default)]
    pub sliding_layers: Option<Vec<bool>>,
    /// `rope_parameters.rope_type` when not "default" (llama3, linear, yarn …: they change
    /// inv_freq's values, not what is allocated); recorded, not modelled.
    #[serde(default)]
    pub rope_type: Option<String>,
    pub attn_implementation: AttnImplementation,
    pub sdpa_backend: SdpaBackend,
    /// transformers runs on the CPU (the CPU grids' measurements), so its device-dependent
    /// Python branches take the CPU side: generate()'s `_optimize_model_for_decode` keeps
    /// grouped_mm experts for the decode forwards. False for every prediction (a GPU run).
    #[serde(default)]
    pub cpu_run: bool,
    /// The GPU's SDPA prefers cuDNN attention (`--gpu` an H100 or H200: torch 2.11's
    /// `check_prefer_cudnn_attention`, [`crate::record::gpu::Gpu::sdpa_prefers_cudnn`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cudnn_sdpa: bool,
    /// The SM count of the `--gpu` where a bf16 `_grouped_mm` runs CUTLASS's grouped GEMM
    /// (sm90: its argument buffer and workspace, `runtime::CudaKernels::cutlass_sms`).
    #[serde(default)]
    pub cutlass_sms: Option<u32>,
    /// `use_cache` (the config's default is true: a forward builds a `DynamicCache`).
    pub use_cache: bool,
    /// `logits_to_keep` (0: all positions).
    pub logits_to_keep: usize,
    /// `gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": …})`.
    pub reentrant: bool,
    /// The collator passes an all-ones `attention_mask` (a tokenizer's unpadded batch).
    pub attention_mask: bool,
    /// The config's `torch_dtype`/`dtype`: what `from_pretrained(dtype="auto")`, its
    /// default in transformers 5, loads the weights in (None: the config names none, float32).
    #[serde(default)]
    pub torch_dtype: Option<crate::engine::DType>,
    /// `from_pretrained(dtype=...)` when the user named one (`--dtype`), else None (auto).
    #[serde(default)]
    pub dtype: Option<crate::engine::DType>,
    /// accelerate's `convert_outputs_to_fp32` around the forward (`--autocast-by accelerate`,
    /// the Trainer's autocast): compute_loss's output holds fp32 copies of its bf16/fp16 tensors.
    #[serde(default)]
    pub convert_outputs_to_fp32: bool,
    /// peft's LoRA over the model (`get_peft_model(model, LoraConfig(...))`), if any.
    #[serde(default)]
    pub lora: Option<crate::model::lora::LoraConfig>,
    /// Loaded in 4 or 8 bits by bitsandbytes (`BitsAndBytesConfig(load_in_4bit=True)` or
    /// `load_in_8bit=True`), if so.
    #[serde(default)]
    pub bnb: Option<crate::model::bnb::Bnb>,
    /// A mixture-of-experts model's experts (Mixtral, Qwen3-MoE), if any.
    #[serde(default)]
    pub moe: Option<moe::MoeConfig>,
    /// Gemma 2/3's layer types, window, score scale and soft-caps (None for other families).
    #[serde(default)]
    pub gemma: Option<gemma::GemmaConfig>,
    /// The config's `eos_token_id` (none, one or a list): `generate()` stops rows on them and,
    /// without a pad token, pads with the first.
    #[serde(default)]
    pub eos_token_id: Vec<i64>,
    /// The config's `pad_token_id`, if any.
    #[serde(default)]
    pub pad_token_id: Option<i64>,
    /// The config's `bos_token_id` (none, one or a list): `generate()` makes it a device
    /// tensor it keeps to the end (`_prepare_special_tokens`), one 512 B block on CUDA.
    #[serde(default)]
    pub bos_token_id: Vec<i64>,
    /// Phi-3's `original_max_position_embeddings` (4096 by default; None for other families):
    /// its generate() drops the cache once the ids pass it (options::families::check_generate).
    #[serde(default)]
    pub original_max_position_embeddings: Option<usize>,
}

impl HfConfig {
    /// Whether SDPA is given an explicit mask: only when a sliding window is no longer than the
    /// sequence (`_ignore_causal_mask_sdpa` drops a causal mask and an all-ones padding mask,
    /// and a window's mask only while kv_length < window).
    pub fn sdpa_masked(&self, seq: usize) -> bool {
        self.sliding_window.is_some_and(|w| w <= seq)
    }

    /// `use_gqa_in_sdpa`: fewer key/value heads, no mask, head_dim ≤ 256 (else transformers
    /// repeats k and v first).
    pub fn sdpa_gqa(&self, heads: usize, kv_heads: usize, seq: usize) -> bool {
        kv_heads < heads && !self.sdpa_masked(seq) && self.head_dim <= 256
    }

    /// The kernel `F.scaled_dot_product_attention` runs for this model at `seq` on CUDA, for
    /// inputs that are fp16/bf16 (`half`: also under autocast, which casts sdpa's inputs
    /// before the backend is chosen) or not. The one place the choice is made.
    pub fn sdpa_kernel(&self, heads: usize, kv_heads: usize, half: bool, seq: usize) -> SdpaBackend {
        self.sdpa_backend.resolve(half, self.sdpa_masked(seq), self.sdpa_gqa(heads, kv_heads, seq), self.head_dim, self.cudnn_sdpa, seq)
    }

    /// An architecture's defaults as transformers' config class sets them.
    pub fn new(model_type: Arch, head_dim: usize) -> HfConfig {
        HfConfig {
            model_type,
            head_dim,
            qkv_bias: model_type == Arch::Qwen2,
            o_bias: false,
            mlp_bias: false,
            sliding_window: None,
            sliding_layers: None,
            rope_type: None,
            // Gemma2PreTrainedModel has `_supports_sdpa = False`: transformers picks eager.
            attn_implementation: if model_type == Arch::Gemma2 { AttnImplementation::Eager } else { AttnImplementation::Sdpa },
            sdpa_backend: SdpaBackend::Auto,
            cpu_run: false,
            cudnn_sdpa: false,
            cutlass_sms: None,
            use_cache: true,
            logits_to_keep: 0,
            reentrant: false,
            attention_mask: false,
            torch_dtype: None,
            dtype: None,
            convert_outputs_to_fp32: false,
            lora: None,
            bnb: None,
            moe: None,
            gemma: None,
            // The config classes' defaults: llama and mistral 2, qwen2/qwen3 none.
            eos_token_id: match model_type {
                Arch::Llama | Arch::Mistral => vec![2],
                Arch::Phi3 => vec![32000],
                Arch::Olmo2 => vec![50279],
                Arch::Gemma2 | Arch::Gemma3Text => vec![1],
                Arch::Qwen2 | Arch::Qwen3 => Vec::new(),
            },
            // The config classes' defaults: qwen2/qwen3 and OLMo-2 none.
            bos_token_id: match model_type {
                Arch::Llama | Arch::Mistral | Arch::Phi3 => vec![1],
                Arch::Gemma2 | Arch::Gemma3Text => vec![2],
                Arch::Olmo2 | Arch::Qwen2 | Arch::Qwen3 => Vec::new(),
            },
            pad_token_id: match model_type {
                Arch::Phi3 => Some(32000),
                Arch::Olmo2 => Some(1),
                Arch::Gemma2 | Arch::Gemma3Text => Some(0),
                _ => None,
            },
            original_max_position_embeddings: (model_type == Arch::Phi3).then_some(4096),
        }
    }
}
