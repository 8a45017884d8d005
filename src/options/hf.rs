//! transformers' run options for the hf flavour (`from_pretrained(attn_implementation=…)`,
//! `model(…, use_cache=…, logits_to_keep=…)`, `gradient_checkpointing_enable(…)`, the
//! collator's attention_mask), and the checks of what transformers and PyTorch refuse to run.
//! The line and JSON that say which options a run used are `session/hf.rs`'s.
use super::usage;
use crate::model::hf::{AttnImplementation, SdpaBackend};
use crate::model::{Checkpoint, Flavour, ModelConfig};
use crate::train::Precision;
use clap::Args;
use crate::session::hf::sdpa_on_cuda;

/// `--gradient-checkpointing` modes: (name, what gradient_checkpointing_enable() gets).
pub const GRADIENT_CHECKPOINTING: [(&str, &str); 3] =
    [("none", "no checkpointing"), ("non-reentrant", "use_reentrant=False, gradient_checkpointing_enable()'s default (= --checkpoint blocks)"), ("reentrant", "use_reentrant=True")];

/// `--attention-mask` values: (name, what the batch carries).
pub const ATTENTION_MASKS: [(&str, &str); 2] = [("none", "no attention_mask (the default)"), ("ones", "an unpadded tokenizer batch's all-ones mask")];

#[derive(Args, Debug, Clone, Default)]
pub struct HfFlags {
    /// hf flavour: transformers' attn_implementation (default sdpa, as transformers')
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::attn_implementations(), long, value_name = "IMPL")]
    pub attn_implementation: Option<String>,
    /// hf flavour, sdpa: the kernel F.scaled_dot_product_attention runs on CUDA
    ///
    /// auto (the default) is what PyTorch 2.11 picks for the dtype, mask and GPU (cuDNN
    /// attention for fp16/bf16 on an H100/H200 --gpu, else flash); it is printed with the run.
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::sdpa_backends(), long, value_name = "BACKEND")]
    pub sdpa_backend: Option<String>,
    /// hf flavour: use_cache true|false (default: the config's)
    ///
    /// true for every shipped preset: a forward fills a DynamicCache with each layer's keys
    /// and values.
    #[arg(help_heading = super::heading::MODEL, long, value_name = "BOOL", value_parser = super::values::listed(&[("true", "fill a DynamicCache"), ("false", "no cache")]))]
    pub use_cache: Option<String>,
    /// hf flavour: logits_to_keep: the LM head runs on the last N positions only (0: all)
    ///
    /// transformers' loss needs every position, so N < the context is for inference
    #[arg(help_heading = super::heading::MODEL, long, value_name = "N")]
    pub logits_to_keep: Option<usize>,
    /// hf flavour: gradient_checkpointing_enable(): none, non-reentrant or reentrant
    ///
    /// non-reentrant is use_reentrant=False, the same as --checkpoint blocks.
    #[arg(help_heading = super::heading::MEMORY, long, value_name = "MODE", value_parser = super::values::listed(&GRADIENT_CHECKPOINTING))]
    pub gradient_checkpointing: Option<String>,
    /// hf flavour: the attention_mask passed with the batch: none (the default) or ones
    ///
    /// ones is what an unpadded tokenizer batch carries.
    #[arg(help_heading = super::heading::MODEL, long, value_name = "MASK", value_parser = super::values::listed(&ATTENTION_MASKS))]
    pub attention_mask: Option<String>,
    /// hf flavour, peft LoraConfig's r: turns LoRA on
    ///
    /// get_peft_model over the loaded model: base weights frozen, fp32 adapters lora_A/lora_B
    /// trained.
    #[arg(help_heading = super::heading::LORA, long, value_name = "R")]
    pub lora_r: Option<usize>,
    /// LoraConfig's lora_alpha (peft's default 8; scaling = alpha / r)
    #[arg(help_heading = super::heading::LORA, long, value_name = "ALPHA", requires = "lora_r")]
    pub lora_alpha: Option<f64>,
    /// LoraConfig's lora_dropout on the adapters' input in training (peft's default 0.0)
    #[arg(help_heading = super::heading::LORA, long, value_name = "P", requires = "lora_r")]
    pub lora_dropout: Option<f64>,
    /// LoraConfig's target_modules: all-linear, or a comma list of modules
    ///
    /// peft's default is q_proj,v_proj for llama, mistral, qwen2, qwen3, gemma2 and
    /// gemma3_text; phi3, olmo2 and the mixture-of-experts types need them named (Phi-3's are
    /// qkv_proj, o_proj, gate_up_proj, down_proj; an MoE model's adaptable linears are its
    /// attention's). On mixtral, qwen3_moe and deepseek_v3 peft converts the transformers-4
    /// names of the experts and the router (mixtral: w1, w3, w2, gate; the others: gate_proj,
    /// up_proj, down_proj, gate), all-linear included, into --target-parameters, with r and
    /// lora_alpha doubled on gate_up_proj (both of its halves must be named).
    #[arg(help_heading = super::heading::LORA, value_parser = super::values::target_modules(), long, value_name = "MODULES", requires = "lora_r")]
    pub target_modules: Option<String>,
    /// LoraConfig's target_parameters: a comma list of a sparse MoE block's parameters
    ///
    /// peft's ParamWrapper (one LoRA per expert) on mlp.experts.gate_up_proj,
    /// mlp.experts.down_proj and the router's mlp.gate.weight (gpt_oss: mlp.router.weight;
    /// matched by suffix as peft matches them). Without --target-modules no module is adapted.
    #[arg(help_heading = super::heading::LORA, value_parser = super::values::target_parameters(), long, value_name = "PARAMETERS", requires = "lora_r")]
    pub target_parameters: Option<String>,
    /// LoraConfig's bias: none (peft's default), all or lora_only
    ///
    /// all: every bias of the model trains; lora_only: the adapted projections' biases train.
    #[arg(help_heading = super::heading::LORA, long, value_name = "BIAS", requires = "lora_r")]
    pub lora_bias: Option<String>,
    /// LoraConfig's use_dora: DoRA (weight-decomposed LoRA) on the adapted projections
    ///
    /// A trainable fp32 magnitude per output feature; every forward rebuilds the adapter's
    /// dense update and the weight's row norms (a 4-bit weight is dequantized for it).
    #[arg(help_heading = super::heading::LORA, long, requires = "lora_r")]
    pub use_dora: bool,
    /// LoraConfig's modules_to_save: a comma list of embed_tokens and lm_head
    ///
    /// peft's ModulesToSaveWrapper: the original module kept frozen and a trainable deep copy
    /// in its dtype (after prepare_model_for_kbit_training's fp32 cast under 4-bit), with its
    /// gradient and optimizer state. On a model with tied embeddings the copy unties them
    /// (peft warns): the other end keeps the frozen original.
    #[arg(help_heading = super::heading::LORA, value_parser = super::values::modules_to_save(), long, value_name = "MODULES", requires = "lora_r")]
    pub modules_to_save: Option<String>,
    /// hf flavour, BitsAndBytesConfig's load_in_4bit (QLoRA with --lora-r)
    ///
    /// Every decoder linear is stored in 4 bits by bitsandbytes (lm_head, embedding and norms
    /// unquantized).
    #[arg(help_heading = super::heading::LORA, long)]
    pub load_in_4bit: bool,
    /// BitsAndBytesConfig's bnb_4bit_quant_type: fp4 (bitsandbytes' default) or nf4
    #[arg(help_heading = super::heading::LORA, long, value_name = "TYPE", requires = "load_in_4bit", value_parser = super::values::bnb_quant_types())]
    pub bnb_4bit_quant_type: Option<String>,
    /// BitsAndBytesConfig's bnb_4bit_use_double_quant
    ///
    /// 8-bit block scales, one fp32 scale per 256 blocks.
    #[arg(help_heading = super::heading::LORA, long, requires = "load_in_4bit")]
    pub bnb_4bit_use_double_quant: bool,
    /// BitsAndBytesConfig's bnb_4bit_compute_dtype: float32 (the default), bfloat16 or float16
    #[arg(help_heading = super::heading::LORA, long, value_name = "DTYPE", requires = "load_in_4bit", value_parser = super::values::torch_dtypes(false))]
    pub bnb_4bit_compute_dtype: Option<String>,
    /// BitsAndBytesConfig's bnb_4bit_quant_storage: uint8 (the default), or the compute dtype for FSDP-QLoRA (the same packed bytes)
    #[arg(help_heading = super::heading::LORA, long, value_name = "DTYPE", requires = "load_in_4bit", value_parser = super::values::bnb_quant_storages())]
    pub bnb_4bit_quant_storage: Option<String>,
    /// peft's prepare_model_for_kbit_training on the 4-bit or 8-bit model: true (the default;
    /// false with --profile-type generate) or false
    ///
    /// QLoRA recipes call it: unquantized parameters cast to fp32, gradient checkpointing with
    /// its reentrant default. An inference script does not, so generate() runs the model as
    /// from_pretrained loads it unless this is given.
    #[arg(help_heading = super::heading::LORA, long, value_name = "BOOL")]
    pub prepare_model_for_kbit_training: Option<String>,
    /// hf flavour, BitsAndBytesConfig's load_in_8bit: LLM.int8() (LoRA with --lora-r)
    ///
    /// Every decoder linear is a bitsandbytes Linear8bitLt: int8 weights with an fp32 scale per
    /// row (lm_head, embedding and norms unquantized); inputs quantized to int8 per row.
    #[arg(help_heading = super::heading::LORA, long)]
    pub load_in_8bit: bool,
    /// BitsAndBytesConfig's llm_int8_threshold (default 6.0; 0 turns the outlier split off)
    ///
    /// With a threshold, input columns holding |x| >= it would be multiplied in 16 bits;
    /// vramscope counts no such column (a normalized input rarely has one).
    #[arg(help_heading = super::heading::LORA, long, value_name = "T", requires = "load_in_8bit")]
    pub llm_int8_threshold: Option<f64>,
    /// hf flavour, mixture of experts: transformers' experts_implementation: grouped_mm (the
    /// default), batched_mm or eager
    ///
    /// grouped_mm sorts the tokens by expert and runs two grouped matmuls; batched_mm gathers
    /// each token's expert weights and runs a bmm; eager loops over the experts that were hit.
    #[arg(help_heading = super::heading::MODEL, long, value_name = "IMPL")]
    pub experts_implementation: Option<String>,
    /// hf flavour, mixture of experts: how many tokens each expert gets: balanced (the
    /// default), worst, or a file of per-expert counts
    ///
    /// balanced splits the tokens evenly; worst sends every token to the same top-k experts; a
    /// file holds one count per expert (whitespace or commas) adding up to tokens × top-k,
    /// where tokens is batch × context.
    #[arg(help_heading = super::heading::MODEL, long, value_name = "ROUTING")]
    pub routing: Option<String>,
    /// hf flavour, mixture of experts: transformers' output_router_logits: keep every router's
    /// logits and add the router's auxiliary loss
    ///
    /// Mixtral, Qwen3-MoE, Qwen2-MoE and gpt-oss: load_balancing_loss_func runs on the kept
    /// logits in every profile type (transformers computes it without labels too), and training
    /// adds router_aux_loss_coef (the config's, 0.001 by default) times it to the loss.
    /// DeepSeek-V3 has no such loss.
    #[arg(help_heading = super::heading::MODEL, long)]
    pub output_router_logits: bool,
}

impl HfFlags {
    /// The flags given, by name (for refusing them on another flavour).
    fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut add = |set: bool, flag| {
            if set {
                v.push(flag)
            }
        };
        add(self.attn_implementation.is_some(), "--attn-implementation");
        add(self.sdpa_backend.is_some(), "--sdpa-backend");
        add(self.use_cache.is_some(), "--use-cache");
        add(self.logits_to_keep.is_some(), "--logits-to-keep");
        add(self.gradient_checkpointing.is_some(), "--gradient-checkpointing");
        add(self.attention_mask.is_some(), "--attention-mask");
        add(self.lora_r.is_some(), "--lora-r");
        add(self.load_in_4bit, "--load-in-4bit");
        add(self.load_in_8bit, "--load-in-8bit");
        add(self.prepare_model_for_kbit_training.is_some(), "--prepare-model-for-kbit-training");
        add(self.experts_implementation.is_some(), "--experts-implementation");
        add(self.routing.is_some(), "--routing");
        add(self.output_router_logits, "--output-router-logits");
        v
    }

    /// Set the options on an hf model; any of them on another flavour is refused.
    pub fn apply(&self, c: &mut ModelConfig) -> anyhow::Result<()> {
        let Some(hf) = c.hf.as_mut().filter(|_| c.flavour == Flavour::Hf) else {
            if let Some(flag) = self.given().first() {
                return Err(usage(flag, format!("is a transformers option of the hf flavour; this model is {} (use --config or an hf preset such as Llama-3.2-1B)", c.flavour)));
            }
            return Ok(());
        };
        if let Some(s) = &self.attn_implementation {
            hf.attn_implementation =
                AttnImplementation::parse(s).ok_or_else(|| usage("--attn-implementation", format!("'{s}' (expected eager, sdpa or flash_attention_2)")))?;
        }
        if let Some(s) = &self.sdpa_backend {
            hf.sdpa_backend = SdpaBackend::parse(s).ok_or_else(|| usage("--sdpa-backend", format!("'{s}' (expected auto, flash, efficient, math, cpu_flash or cudnn)")))?;
            if hf.attn_implementation != AttnImplementation::Sdpa {
                return Err(usage("--sdpa-backend", format!("chooses the kernel of sdpa attention; this run uses --attn-implementation {}", hf.attn_implementation.name())));
            }
        }
        if let Some(s) = &self.use_cache {
            hf.use_cache = match s.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" => false,
                _ => return Err(usage("--use-cache", format!("'{s}' (expected true or false)"))),
            };
        }
        if let Some(n) = self.logits_to_keep {
            hf.logits_to_keep = n;
        }
        if let Some(s) = &self.gradient_checkpointing {
            let (ckpt, reentrant) = match s.to_ascii_lowercase().replace('_', "-").as_str() {
                "none" | "off" | "false" => (Checkpoint::None, false),
                "non-reentrant" | "on" | "true" => (Checkpoint::Every(1), false),
                "reentrant" => (Checkpoint::Every(1), true),
                _ => return Err(usage("--gradient-checkpointing", format!("'{s}' (expected {})", GRADIENT_CHECKPOINTING.map(|(n, _)| n).join(", ")))),
            };
            c.checkpoint = ckpt;
            hf.reentrant = reentrant;
        }
        if let Some(r) = self.lora_r {
            hf.lora = Some(self.lora(r, hf)?);
        }
        if self.load_in_4bit && self.load_in_8bit {
            // transformers: "load_in_4bit and load_in_8bit are both True, but only one can be used at the same time"
            return Err(usage("--load-in-8bit", "and --load-in-4bit both given: bitsandbytes loads a model in one of them (transformers raises); pick one"));
        }
        if self.prepare_model_for_kbit_training.is_some() && !(self.load_in_4bit || self.load_in_8bit) {
            return Err(usage("--prepare-model-for-kbit-training", "prepares a quantized model: give --load-in-4bit or --load-in-8bit"));
        }
        if self.load_in_4bit || self.load_in_8bit {
            let q = self.bnb()?;
            // prepare_model_for_kbit_training(use_gradient_checkpointing=True) enables
            // checkpointing with `{}` kwargs: torch's default, reentrant.
            if q.prepare && self.gradient_checkpointing.is_none() && c.checkpoint == Checkpoint::None {
                c.checkpoint = Checkpoint::Every(1);
                hf.reentrant = true;
            }
            hf.bnb = Some(q);
        }
        if let Some(s) = &self.attention_mask {
            hf.attention_mask = match s.to_ascii_lowercase().as_str() {
                "none" => false,
                "ones" => true,
                _ => return Err(usage("--attention-mask", format!("'{s}' (expected {})", ATTENTION_MASKS.map(|(n, _)| n).join(" or ")))),
            };
        }
        super::families::check_flags(hf, self.load_in_4bit, self.load_in_8bit)?;
        super::moe::apply(self.experts_implementation.as_deref(), self.routing.as_deref(), self.output_router_logits, hf)
    }
}

impl HfFlags {
    /// A 4-bit model for `generate()`: prepare_model_for_kbit_training is a training recipe's
    /// call (fp32 casts, checkpointing), not an inference script's, so unless
    /// --prepare-model-for-kbit-training is given the model is as from_pretrained loads it
    /// (and checkpointing stays as --gradient-checkpointing says; it is inactive in eval mode).
    pub fn unprepared_for_generate(&self, c: &mut ModelConfig) {
        if self.prepare_model_for_kbit_training.is_some() {
            return;
        }
        let Some(q) = c.hf.as_mut().and_then(|h| h.bnb.as_mut()).filter(|q| q.prepare) else { return };
        q.prepare = false;
        if self.gradient_checkpointing.is_none() {
            c.checkpoint = Checkpoint::None;
            if let Some(h) = c.hf.as_mut() {
                h.reentrant = false;
            }
        }
    }
}

impl HfFlags {
    /// `BitsAndBytesConfig(load_in_4bit=True, ...)` or `(load_in_8bit=True, ...)` from the
    /// flags. The load dtype is set with the precision (`--dtype`), the 4-bit kernel with the GPU.
    fn bnb(&self) -> anyhow::Result<crate::model::bnb::Bnb> {
        use crate::engine::DType;
        use crate::model::bnb::{Bnb, Quant};
        let prepare = match self.prepare_model_for_kbit_training.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("true" | "1" | "yes" | "on") => true,
            Some("false" | "0" | "no" | "off") => false,
            Some(o) => return Err(usage("--prepare-model-for-kbit-training", format!("'{o}' (expected true or false)"))),
        };
        if self.load_in_8bit {
            let threshold = self.llm_int8_threshold.unwrap_or(6.0);
            if !threshold.is_finite() || threshold < 0.0 {
                return Err(usage("--llm-int8-threshold", format!("{threshold} (expected a number >= 0; bitsandbytes raises on a negative threshold)")));
            }
            let int8 = crate::model::bnb::Int8 { threshold, kernel: crate::engine::ops::int8::Int8Kernel::Cuda };
            return Ok(Bnb { quant: Quant::Int8(int8), load_dtype: DType::BF16, prepare });
        }
        let quant_type = match self.bnb_4bit_quant_type.as_deref().unwrap_or("fp4") {
            t if crate::model::bnb::QUANT_TYPES.iter().any(|(n, _)| *n == t) => t.to_string(),
            t => return Err(usage("--bnb-4bit-quant-type", format!("'{t}' (expected {})", crate::model::bnb::QUANT_TYPES.map(|(n, _)| n).join(" or ")))),
        };
        let compute_dtype = match self.bnb_4bit_compute_dtype.as_deref() {
            None => DType::F32,
            Some(d) => crate::model::hf::config_json::parse_dtype(d).ok_or_else(|| usage("--bnb-4bit-compute-dtype", format!("'{d}' (expected {})", crate::model::hf::config_json::TORCH_DTYPES.map(|(n, _)| n).join(", "))))?,
        };
        let quant_storage = match self.bnb_4bit_quant_storage.as_deref() {
            None => DType::U8,
            Some(st) => crate::model::bnb::quant_storage(st).ok_or_else(|| usage("--bnb-4bit-quant-storage", format!("'{st}' (expected {})", crate::model::bnb::QUANT_STORAGES.map(|(n, _, _)| n).join(", "))))?,
        };
        let four = crate::model::bnb::Bnb4bit { quant_type, double_quant: self.bnb_4bit_use_double_quant, compute_dtype, kernel: crate::model::bnb::DEFAULT_KERNEL, quant_storage };
        Ok(Bnb { quant: Quant::FourBit(four), load_dtype: DType::BF16, prepare })
    }

    /// peft's `LoraConfig` from the flags, checked as peft checks it (and what is not modelled).
    fn lora(&self, r: usize, hf: &crate::model::hf::HfConfig) -> anyhow::Result<crate::model::lora::LoraConfig> {
        use crate::model::lora::{LoraConfig, MODULES_TO_SAVE};
        if r == 0 {
            return Err(usage("--lora-r", "0: peft requires a positive rank (`r` should be a positive integer)"));
        }
        let alpha = self.lora_alpha.unwrap_or(8.0);
        if !alpha.is_finite() {
            return Err(usage("--lora-alpha", format!("{alpha} (expected a finite number)")));
        }
        let dropout = self.lora_dropout.unwrap_or(0.0);
        if !(0.0..1.0).contains(&dropout) {
            return Err(usage("--lora-dropout", format!("{dropout} (expected a probability in [0, 1))")));
        }
        let super::lora_targets::Targets { modules: targets, parameters: target_parameters, gate_up_doubled } = super::lora_targets::resolve_targets(self, hf)?;
        let bias = match self.lora_bias.as_deref() {
            None => crate::model::lora::LoraBias::None,
            Some(b) => crate::model::lora::LoraBias::parse(b).ok_or_else(|| usage("--lora-bias", format!("'{b}' (expected none, all or lora_only)")))?,
        };
        if bias != crate::model::lora::LoraBias::None && self.load_in_4bit {
            return Err(usage("--lora-bias", "trainable biases of a 4-bit model (bitsandbytes' MatMul4Bit bias gradient) are not modelled yet; use none"));
        }
        if bias != crate::model::lora::LoraBias::None && self.load_in_8bit {
            return Err(usage("--lora-bias", "trainable biases of an 8-bit model (bitsandbytes' MatMul8bitLt bias gradient) are not modelled yet; use none"));
        }
        if self.use_dora && self.load_in_8bit {
            return Err(usage("--use-dora", "DoRA over 8-bit weights (peft dequantizes the int8 weight each forward) is not modelled yet: use it on bf16 or 4-bit weights"));
        }
        let mut modules_to_save: Vec<String> = Vec::new();
        if let Some(list) = self.modules_to_save.as_deref() {
            for m in list.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                // peft matches module keys by suffix: model.embed_tokens is the embedding too.
                let m = m.strip_prefix("model.").filter(|m| *m == "embed_tokens").unwrap_or(m);
                if !MODULES_TO_SAVE.contains(&m) {
                    return Err(usage("--modules-to-save", format!("'{m}': only {} are modelled (the decoder's projections train through LoRA: --target-modules)", MODULES_TO_SAVE.join(" and "))));
                }
                if !modules_to_save.iter().any(|x| x == m) {
                    modules_to_save.push(m.to_string());
                }
            }
            if modules_to_save.is_empty() {
                return Err(usage("--modules-to-save", "names no module"));
            }
            // Module order (the order peft wraps them in).
            modules_to_save.sort_by_key(|m| MODULES_TO_SAVE.iter().position(|x| x == m));
        }
        Ok(LoraConfig { r, alpha, dropout, targets, target_parameters, gate_up_doubled, dropout_kernel: Default::default(), bias, use_dora: self.use_dora, modules_to_save, compute_dtype: None })
    }
}

/// Refuses what transformers itself cannot run with labels: a loss over fewer logits than
/// labels (`logits_to_keep` below the context; `ForCausalLMLoss` raises a batch-size mismatch).
pub fn check_with_labels(c: &ModelConfig, seq: usize) -> anyhow::Result<()> {
    if let Some(hf) = c.hf() {
        if hf.logits_to_keep > 0 && hf.logits_to_keep < seq {
            return Err(usage(
                "--logits-to-keep",
                format!(
                    "{} < context {seq}: transformers' loss needs logits for every position (cross_entropy raises a size mismatch); use it with --profile-type inference",
                    hf.logits_to_keep
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses the SDPA kernels the hf model cannot run at this context: the memory-efficient
/// kernel with grouped-query attention (PyTorch has no such kernel: "No available kernel"),
/// and the fused kernels given a mask (a sliding window no longer than the context; their
/// `attn_bias` handling is not modelled).
pub fn check_kernel(c: &ModelConfig, precision: Precision, seq: usize) -> anyhow::Result<()> {
    let Some(k) = sdpa_on_cuda(c, precision, seq) else { return Ok(()) };
    let hf = c.hf().expect("sdpa is hf");
    if k == SdpaBackend::Cudnn && precision == Precision::Fp32 {
        return Err(usage("--sdpa-backend", "cuDNN attention runs only fp16/bf16 queries (PyTorch finds no kernel for fp32); give --precision bf16 or --pure-bf16, or another backend"));
    }
    if k == SdpaBackend::Cudnn && (hf.head_dim > 256 || !hf.head_dim.is_multiple_of(8)) {
        return Err(usage("--sdpa-backend", format!("cuDNN attention takes head sizes that are multiples of 8 up to 256; this model's is {}", hf.head_dim)));
    }
    if k == SdpaBackend::Efficient && hf.sdpa_gqa(c.num_heads, c.num_kv_heads, seq) {
        return Err(usage("--sdpa-backend", format!("the memory-efficient kernel has no grouped-query attention ({} key/value heads for {} query heads); use flash, math or auto", c.num_kv_heads, c.num_heads)));
    }
    if matches!(k, SdpaBackend::Flash | SdpaBackend::Efficient | SdpaBackend::CpuFlash) && hf.sdpa_masked(seq) {
        return Err(usage(
            "--sdpa-backend",
            format!("the sliding window ({}) is not longer than the context {seq}, so SDPA gets a mask, and the {k} kernel's mask handling is not modelled; use --sdpa-backend math or --attn-implementation eager", hf.sliding_window.unwrap_or(0)),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn load_in_8bit_sets_llm_int8_prepares_and_tags_the_files() {
        use crate::model::bnb::Quant;
        let mut c = model("Llama-3.2-1B");
        let f = HfFlags { load_in_8bit: true, lora_r: Some(8), ..HfFlags::default() };
        f.apply(&mut c).unwrap();
        let q = c.hf().unwrap().bnb.clone().unwrap();
        assert!(matches!(&q.quant, Quant::Int8(i) if i.threshold == 6.0), "{q:?}");
        // prepare_model_for_kbit_training's reentrant checkpointing, as for 4-bit.
        assert!(q.prepare && c.checkpoint == Checkpoint::Every(1) && c.hf().unwrap().reentrant);
        assert_eq!((q.flag(), q.bits()), ("--load-in-8bit", "8-bit"));
        assert_eq!(crate::session::names::hf_tag(&c), "_8bit");
        let mut c = model("Llama-3.2-1B");
        HfFlags { load_in_8bit: true, llm_int8_threshold: Some(0.0), prepare_model_for_kbit_training: Some("false".into()), ..HfFlags::default() }.apply(&mut c).unwrap();
        assert_eq!((c.checkpoint, crate::session::names::hf_tag(&c).as_str()), (Checkpoint::None, "_8bit-threshold-0"));
        for (f, flag) in [
            (HfFlags { load_in_8bit: true, load_in_4bit: true, ..HfFlags::default() }, "--load-in-4bit"),
            (HfFlags { load_in_8bit: true, llm_int8_threshold: Some(-1.0), ..HfFlags::default() }, "--llm-int8-threshold"),
            (HfFlags { prepare_model_for_kbit_training: Some("true".into()), ..HfFlags::default() }, "--load-in-8bit"),
            (HfFlags { load_in_8bit: true, lora_r: Some(8), lora_bias: Some("all".into()), ..HfFlags::default() }, "--lora-bias"),
        ] {
            let e = f.apply(&mut model("Llama-3.2-1B")).unwrap_err();
            assert!(e.to_string().contains(flag), "{e}");
        }
    }

    use super::*;
    use crate::session::hf::describe;
    use crate::model::presets;

    fn model(name: &str) -> ModelConfig {
        presets::find(name, None).unwrap().model
    }

    #[test]
    fn the_cuda_sdpa_kernel_follows_dtype_mask_and_gqa() {
        let llama = model("Llama-3.2-1B");
        assert_eq!(sdpa_on_cuda(&llama, Precision::Bf16, 2048), Some(SdpaBackend::Flash));
        assert_eq!(sdpa_on_cuda(&llama, Precision::PureBf16, 2048), Some(SdpaBackend::Flash));
        // fp32 rules flash out; GQA rules the memory-efficient kernel out.
        assert_eq!(sdpa_on_cuda(&llama, Precision::Fp32, 2048), Some(SdpaBackend::Math));
        let mut mha = llama.clone();
        mha.num_kv_heads = mha.num_heads;
        assert_eq!(sdpa_on_cuda(&mha, Precision::Fp32, 2048), Some(SdpaBackend::Efficient));
        // A window no longer than the context needs a mask (transformers skips it only while
        // the keys are fewer than the window): no flash, no enable_gqa
        let mut mistral = model("Mistral-7B");
        mistral.hf.as_mut().unwrap().sliding_window = Some(64);
        assert_eq!(sdpa_on_cuda(&mistral, Precision::Bf16, 63), Some(SdpaBackend::Flash));
        assert_eq!(sdpa_on_cuda(&mistral, Precision::Bf16, 64), Some(SdpaBackend::Efficient));
        // (with a mask transformers repeats k and v itself, so the memory-efficient kernel runs).
        assert_eq!(sdpa_on_cuda(&mistral, Precision::Bf16, 128), Some(SdpaBackend::Efficient));
        let mut eager = llama.clone();
        eager.hf.as_mut().unwrap().attn_implementation = AttnImplementation::Eager;
        assert_eq!(sdpa_on_cuda(&eager, Precision::Bf16, 2048), None);
        assert!(describe(&eager, Precision::Bf16, 16).unwrap().contains("attn_implementation eager,"));
        assert_eq!(sdpa_on_cuda(&model("2.7B"), Precision::Bf16, 2048), None);
        assert!(describe(&model("2.7B"), Precision::Bf16, 16).is_none());
    }

    #[test]
    fn on_an_h100_sdpa_prefers_cudnn_for_half_types() {
        // torch 2.11 on sm90 tries cuDNN first: half types, masked or not, GQA or not; fp32
        // keeps the memory-efficient/math choice; a single key rules cuDNN out (flash).
        let mut llama = model("Llama-3.2-1B");
        llama.hf.as_mut().unwrap().cudnn_sdpa = true;
        assert_eq!(sdpa_on_cuda(&llama, Precision::Bf16, 2048), Some(SdpaBackend::Cudnn));
        assert_eq!(sdpa_on_cuda(&llama, Precision::PureBf16, 2048), Some(SdpaBackend::Cudnn));
        assert_eq!(sdpa_on_cuda(&llama, Precision::Fp32, 2048), Some(SdpaBackend::Math));
        assert_eq!(sdpa_on_cuda(&llama, Precision::Bf16, 1), Some(SdpaBackend::Flash));
        let mut mistral = model("Mistral-7B");
        mistral.hf.as_mut().unwrap().sliding_window = Some(64);
        mistral.hf.as_mut().unwrap().cudnn_sdpa = true;
        assert_eq!(sdpa_on_cuda(&mistral, Precision::Bf16, 128), Some(SdpaBackend::Cudnn));
        assert!(describe(&llama, Precision::Bf16, 2048).unwrap().contains("PyTorch picks the cudnn kernel"));
        // Named explicitly it needs a half type.
        let mut named = model("Llama-3.2-1B");
        HfFlags { sdpa_backend: Some("cudnn".into()), ..HfFlags::default() }.apply(&mut named).unwrap();
        assert_eq!(sdpa_on_cuda(&named, Precision::Bf16, 2048), Some(SdpaBackend::Cudnn));
        let e = check_kernel(&named, Precision::Fp32, 2048).unwrap_err();
        assert!(e.to_string().contains("--sdpa-backend") && e.to_string().contains("fp16/bf16"), "{e}");
        assert!(check_kernel(&named, Precision::Bf16, 2048).is_ok());
    }

    #[test]
    fn flags_set_the_options_and_the_file_tag() {
        let mut c = model("Qwen3-8B");
        assert_eq!(crate::session::names::hf_tag(&c), "");
        let f = HfFlags {
            attn_implementation: Some("eager".into()),
            use_cache: Some("false".into()),
            logits_to_keep: Some(1),
            gradient_checkpointing: Some("reentrant".into()),
            attention_mask: Some("ones".into()),
            ..HfFlags::default()
        };
        f.apply(&mut c).unwrap();
        let h = c.hf.clone().unwrap();
        assert_eq!((h.attn_implementation, h.use_cache, h.logits_to_keep, h.reentrant, h.attention_mask), (AttnImplementation::Eager, false, 1, true, true));
        assert_eq!(c.checkpoint, Checkpoint::Every(1));
        assert_eq!(crate::session::names::hf_tag(&c), "_eager_no-cache_keep-1_mask-ones");
        assert!(check_with_labels(&c, 128).is_err() && check_with_labels(&c, 1).is_ok());
        let off = HfFlags { gradient_checkpointing: Some("none".into()), ..HfFlags::default() };
        off.apply(&mut c).unwrap();
        assert_eq!((c.checkpoint, c.hf.unwrap().reentrant), (Checkpoint::None, false));
        let mut t = model("walkthrough");
        assert!(HfFlags::default().apply(&mut t).is_ok());
        // peft's use_dora: the magnitudes count (one per output feature of each adapted
        // projection) and the file tag tells the run apart.
        let (mut lora, mut dora) = (model("Qwen3-8B"), model("Qwen3-8B"));
        HfFlags { lora_r: Some(8), ..HfFlags::default() }.apply(&mut lora).unwrap();
        HfFlags { lora_r: Some(8), use_dora: true, ..HfFlags::default() }.apply(&mut dora).unwrap();
        assert!(dora.hf().unwrap().lora.as_ref().unwrap().use_dora);
        // q_proj (32 heads × 128) and v_proj (8 × 128) in 36 layers.
        assert_eq!(dora.param_counts().trainable - lora.param_counts().trainable, 36 * (4096 + 1024));
        assert_eq!(crate::session::names::hf_tag(&dora), "_dora");
        let e = HfFlags { load_in_8bit: true, ..HfFlags::default() }.apply(&mut t).unwrap_err();
        assert!(e.to_string().contains("--load-in-8bit"), "{e}");
        let e = HfFlags { attention_mask: Some("ones".into()), ..HfFlags::default() }.apply(&mut t).unwrap_err();
        assert!(e.to_string().contains("--attention-mask"), "{e}");
    }
}
