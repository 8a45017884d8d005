//! How an hf run's transformers settings are described: the header line and summary.json's
//! `transformers` object, with the SDPA kernel PyTorch would pick on a CUDA GPU.
use crate::model::hf::{AttnImplementation, HfConfig, SdpaBackend, TRANSFORMERS_VERSION};
use crate::model::{Checkpoint, ModelConfig};
use crate::train::Precision;
use serde_json::{json, Value};

/// The SDPA kernel PyTorch picks on a CUDA GPU for this run (None unless sdpa): half-precision
/// queries under bf16/fp16 (autocast or bf16 weights); a mask only for a sliding window shorter
/// than the context (an all-ones attention_mask is dropped); GQA left to the kernel
/// (enable_gqa) only without a mask, else transformers repeats k and v first.
pub fn sdpa_on_cuda(c: &ModelConfig, precision: Precision, seq: usize) -> Option<SdpaBackend> {
    let hf = c.hf().filter(|h| h.attn_implementation == AttnImplementation::Sdpa)?;
    Some(hf.sdpa_kernel(c.num_heads, c.num_kv_heads, precision != Precision::Fp32, seq))
}

fn checkpointing(c: &ModelConfig, hf: &HfConfig) -> &'static str {
    match (c.checkpoint, hf.reentrant) {
        (Checkpoint::None, _) => "off",
        (_, true) => "reentrant",
        (_, false) => "non-reentrant",
    }
}

/// One line with the transformers settings of an hf run at one context length.
pub fn describe(c: &ModelConfig, precision: Precision, seq: usize) -> Option<String> {
    let hf = c.hf()?;
    // Gemma 3's sliding layers see the window's mask (the full layers none), so their kernel
    // can differ from the full layers'.
    let sliding = hf.gemma.as_ref().filter(|g| g.sliding.iter().any(|s| *s)).map(|g| {
        let windowed = HfConfig { sliding_window: Some(g.sliding_window), ..hf.clone() };
        windowed.sdpa_kernel(c.num_heads, c.num_kv_heads, precision != Precision::Fp32, seq)
    });
    let attn = match sdpa_on_cuda(c, precision, seq) {
        Some(b) if hf.sdpa_backend == SdpaBackend::Auto => match sliding.filter(|&sb| sb != b) {
            Some(sb) => format!("sdpa (on CUDA PyTorch picks the {b} kernel on the full layers, the {sb} kernel on the sliding layers, whose window masks them)"),
            None => format!("sdpa (on CUDA PyTorch picks the {b} kernel)"),
        },
        Some(b) => format!("sdpa (--sdpa-backend {b})"),
        None => hf.attn_implementation.name().to_string(),
    };
    let cache = if hf.use_cache && c.checkpoint != Checkpoint::None { " (off in training while checkpointing, as transformers does)" } else { "" };
    let keep = if hf.logits_to_keep == 0 { "0 (all)".to_string() } else { hf.logits_to_keep.to_string() };
    let mask = if hf.attention_mask { "ones" } else { "none" };
    Some(format!(
        "transformers {TRANSFORMERS_VERSION}: {}; attn_implementation {attn}, use_cache {}{cache}, gradient checkpointing {}, logits_to_keep {keep}, attention_mask {mask}{}{}",
        loaded(hf, precision),
        hf.use_cache,
        checkpointing(c, hf),
        adapters(hf),
        experts(c, hf)
    ))
}

/// A mixture-of-experts model's experts, implementation and the routing the run assumed.
fn experts(c: &ModelConfig, hf: &HfConfig) -> String {
    hf.moe.as_ref().map_or(String::new(), |m| {
        format!(
            "; {}: {} experts, top-{}, {} parameters active per token, experts_implementation {}, routing {} (--routing)",
            m.family.model_type(),
            m.experts,
            m.top_k,
            active_parameters(c),
            m.implementation.name(),
            m.routing.name()
        )
    })
}

/// Parameters one token meets: all but the experts it is not routed to.
pub fn active_parameters(c: &ModelConfig) -> u64 {
    let Some(m) = c.hf().and_then(|h| h.moe.as_ref()) else { return c.param_count() };
    if let Some(ds) = &m.deepseek {
        return ds.shape(c, m).counts().map_or(u64::MAX, |n| n.active);
    }
    let idle = (m.experts.saturating_sub(m.top_k) as u64).saturating_mul(m.expert_params(c.d_model)).saturating_mul(c.num_layers as u64);
    c.param_count().saturating_sub(idle)
}

/// peft's adapters when DoRA is on (its magnitude vectors and per-forward weight norms are
/// what the run adds to LoRA).
fn adapters(hf: &HfConfig) -> String {
    match &hf.lora {
        Some(l) if l.use_dora => format!("; peft 0.21.2 DoRA (use_dora) r {}, lora_alpha {}", l.r, l.alpha),
        _ => String::new(),
    }
}

/// What `from_pretrained` loaded the weights in, and why: `dtype="auto"` (transformers 5's
/// default) takes the config's torch_dtype; --dtype, --precision fp32 or --pure-bf16 name one.
pub fn loaded(hf: &HfConfig, precision: Precision) -> String {
    if let Some(q) = &hf.bnb {
        use crate::engine::ops::quant::Gemm4bitKernel;
        let unquantized = format!("lm_head, embedding and norms {}{}", q.unquantized_dtype(), if q.prepare { " (prepare_model_for_kbit_training)" } else { "" });
        let f = match &q.quant {
            crate::model::bnb::Quant::FourBit(f) => f,
            crate::model::bnb::Quant::Int8(i) => {
                use crate::engine::ops::int8::Int8Kernel;
                let kernel = match i.kernel {
                    Int8Kernel::Cuda => "CUDA kernels",
                    Int8Kernel::CpuOutputsOnly => "kernel outputs only, as the CPU grid counts them",
                };
                let outliers = if i.threshold > 0.0 { ", no outlier column counted" } else { "" };
                return format!(
                    "weights 8-bit LLM.int8() (bitsandbytes 0.50.2: loaded as {}, int8 with an fp32 scale per row; llm_int8_threshold {}{outliers}; {kernel}); {unquantized}",
                    q.load_dtype, i.threshold
                );
            }
        };
        let kernel = match f.kernel {
            Gemm4bitKernel::Cuda { sms, major, minor } => format!("gemm_4bit as bitsandbytes picks it on a CUDA sm{major}{minor} GPU with {sms} SMs"),
            Gemm4bitKernel::RocmCdna => "gemm_4bit as bitsandbytes picks it on an AMD CDNA GPU".to_string(),
            Gemm4bitKernel::Cpu => "gemm_4bit's CPU implementation".to_string(),
        };
        return format!(
            "weights 4-bit {}{} (bitsandbytes 0.50.2: loaded as {}, computed in {}; {kernel}); {unquantized}",
            f.quant_type,
            if f.double_quant { " with double quantization" } else { "" },
            q.load_dtype,
            f.compute_dtype,
        );
    }
    let weights = precision.param_dtype();
    let why = match (hf.dtype, hf.torch_dtype) {
        (Some(_), _) => "named by --dtype/--precision".to_string(),
        (None, Some(t)) => format!("dtype=\"auto\": the config's torch_dtype {t}"),
        (None, None) => "dtype=\"auto\": the config names no torch_dtype".to_string(),
    };
    let autocast = match precision.autocast() {
        Some(a) => format!(", forward and loss under {a} autocast (the Trainer's {}=True)", if a == crate::engine::DType::F16 { "fp16" } else { "bf16" }),
        None => String::new(),
    };
    format!("weights {weights} ({why}){autocast}")
}

/// The same settings for summary.json (the CUDA SDPA kernel per context length).
pub fn settings_json(c: &ModelConfig, precision: Precision, contexts: &[usize]) -> Option<Value> {
    let hf = c.hf()?;
    let kernels: serde_json::Map<String, Value> =
        contexts.iter().filter_map(|&s| sdpa_on_cuda(c, precision, s).map(|b| (s.to_string(), json!(b.name())))).collect();
    let mut v = json!({
        "transformers_version": TRANSFORMERS_VERSION,
        "model_type": hf.model_type,
        "attn_implementation": hf.attn_implementation,
        "sdpa_backend": hf.sdpa_backend,
        "sdpa_backend_on_cuda_by_context": (!kernels.is_empty()).then_some(kernels),
        "use_cache": hf.use_cache,
        "gradient_checkpointing": checkpointing(c, hf),
        "logits_to_keep": hf.logits_to_keep,
        "attention_mask": if hf.attention_mask { "ones" } else { "none" },
        "rope_type": hf.rope_type.as_deref().unwrap_or("default"),
        "weights_dtype": precision.param_dtype().name(),
        "config_torch_dtype": hf.torch_dtype.map(|d| d.name()),
        "dtype": hf.dtype.map_or("auto", |d| d.name()),
    });
    if let Some(m) = &hf.moe {
        v["moe"] = json!({
            "model_type": m.family.model_type(),
            "num_experts": m.experts,
            "num_experts_per_tok": m.top_k,
            "experts_implementation": m.implementation.name(),
            "routing": m.routing,
            "active_parameters_per_token": active_parameters(c),
        });
    }
    if let Some(l) = &hf.lora {
        // peft's LoraConfig(use_dora=...) of a LoRA run (the adapters themselves are under
        // the model's `hf.lora`).
        v["use_dora"] = json!(l.use_dora);
    }
    Some(v)
}

