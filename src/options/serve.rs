//! `serve`'s flags, named as vLLM's engine arguments, resolved into the
//! [`ServeConfig`](crate::model::vllm_0_33::ServeConfig) of vLLM 0.33.0's start-up plan.
use super::usage;
use crate::model::hf::moe::MoeFamily;
use crate::model::hf::Arch;
use crate::model::vllm_0_33::{self as vllm, ServeConfig};
use crate::model::{presets, Flavour};
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Model preset vLLM runs here (Llama-*, Mistral-7B, Qwen2.5-7B, Qwen3-8B, Phi-3-mini, OLMo-2-7B, Gemma-*, Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V3, gpt-oss-*)
    ///
    /// gpt-oss-20b and gpt-oss-120b are their MXFP4 checkpoints, planned on H100/H200 (the OAI Triton
    /// kernels' layout of the experts, derived from source).
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::presets(), long, visible_alias = "model")]
    pub preset: Option<String>,
    /// A Hugging Face config.json (or a model folder holding one) instead of a preset
    ///
    /// model_type llama, mistral, qwen2, qwen3 or phi3 (a sliding window on every layer or on none), olmo2
    /// (vLLM's Transformers backend; a float32 checkpoint loads in 16 bits), gemma2 or
    /// gemma3_text (sliding and full layers in several KV cache groups; on SM 8.x/9.0), the
    /// mixture-of-experts mixtral, qwen3_moe or qwen2_moe (dense layers by mlp_only_layers or decoder_sparse_step
    /// allowed; a sliding window slides every layer, or none where Qwen2-MoE's layer_types mix; on H100/H200), or deepseek_v3 (multi-head latent attention, the
    /// first_k_dense_replace layers dense; on H100/H200, bf16 weights without a quantization_config); its
    /// torch_dtype (bfloat16 or float16) is the weights' dtype, as vLLM's --dtype auto keeps it (a float32 Gemma
    /// loads in bfloat16).
    #[arg(help_heading = super::heading::MODEL, long, value_name = "PATH")]
    pub config: Option<std::path::PathBuf>,
    /// The NVIDIA GPU (its total as torch.cuda.mem_get_info reports it)
    #[arg(help_heading = super::heading::RUN, value_parser = super::values::gpus(), long, default_value = "H100-80GB")]
    pub gpu: String,
    /// Fraction of the GPU's total memory vLLM may use, in (0, 1] (vLLM 0.33.0's default 0.92)
    #[arg(help_heading = super::heading::RUN, long, default_value_t = vllm::DEFAULT_GPU_MEMORY_UTILIZATION)]
    pub gpu_memory_utilization: f64,
    /// Longest request (prompt and output) in tokens (default: the model's max_position_embeddings)
    #[arg(help_heading = super::heading::RUN, long)]
    pub max_model_len: Option<usize>,
    /// Most requests in one batch (default: vllm serve's for the GPU: 1024 on H100/H200, else 256)
    #[arg(help_heading = super::heading::RUN, long)]
    pub max_num_seqs: Option<usize>,
    /// Most tokens in one batch, the profile run's dummy batch (default: vllm serve's: 8192 on H100, 16384 from 160 GiB, else 2048)
    #[arg(help_heading = super::heading::RUN, long)]
    pub max_num_batched_tokens: Option<usize>,
    /// Tokens per KV cache block (a multiple of 16, FlashAttention's kernel block sizes)
    #[arg(help_heading = super::heading::MEMORY, long, default_value_t = vllm::DEFAULT_BLOCK_SIZE)]
    pub block_size: usize,
    /// KV cache element type: auto (the weights' dtype), or 1-byte fp8 (fp8_e4m3) on H100/H200
    ///
    /// vLLM's FlashAttention backend stores an fp8 cache only with FlashAttention 3 on SM 9.0
    /// (`flash_attn_supports_kv_cache_dtype`, `v1/attention/backends/fa_utils.py:282`); other
    /// GPUs and fp8_e5m2 select other attention backends, which are not modelled. DeepSeek-V3's latent cache takes
    /// auto only (FLASH_ATTN_MLA keeps a 16-bit cache; fp8 falls to FlashMLA, not modelled).
    #[arg(help_heading = super::heading::MEMORY, long, default_value = "auto", value_parser = ["auto", "fp8", "fp8_e4m3"])]
    pub kv_cache_dtype: String,
    /// No CUDA graphs (required: the graphs' memory is measured by capturing them on the GPU)
    ///
    /// vLLM 0.33.0 subtracts the memory of its CUDA graphs, which it measures by capturing them
    /// at start-up; without a GPU that term cannot be known, so the plan is made for
    /// --enforce-eager, where it is 0.
    #[arg(help_heading = super::heading::RUN, long)]
    pub enforce_eager: bool,
    /// GPUs the model is sharded over (tensor parallelism); the plan is one rank's
    ///
    /// Weights, KV heads and the profile run's MLP are split as vLLM's parallel layers split
    /// them (KV heads replicated when the ranks outnumber them); every rank gets the same
    /// number of blocks. The heads, KV heads, intermediate size and padded vocabulary must divide.
    #[arg(help_heading = super::heading::RUN, long, default_value_t = 1)]
    pub tensor_parallel_size: usize,
    /// Answer an inverse question instead of planning at the given lengths
    ///
    /// max-model-len: the longest --max-model-len for which one request fits, by vLLM's own
    /// search (what `vllm serve --max-model-len -1` auto-fits to). max-num-seqs: the largest
    /// --max-num-seqs for which that many requests of --max-model-len tokens hold their KV
    /// cache at once (vLLM itself does not cap max_num_seqs by the cache: it queues what
    /// does not fit).
    #[arg(help_heading = super::heading::RUN, long, value_enum)]
    pub find: Option<ServeFind>,
}

/// `serve --find`'s questions.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServeFind {
    MaxModelLen,
    MaxNumSeqs,
}

/// vLLM's AssertionError for a Qwen2/Qwen3 config.json whose `layer_types` (as transformers
/// derives them from `use_sliding_window` and `max_window_layers`) mix sliding and full
/// layers (`model_executor/models/qwen2.py:351-360`, Qwen3Model is a Qwen2Model), or None.
fn qwen_sliding_mix(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let o = v.as_object()?;
    if !matches!(o.get("model_type")?.as_str()?, "qwen2" | "qwen3") {
        return None;
    }
    let layers = o.get("num_hidden_layers")?.as_u64()?;
    let mwl = o.get("max_window_layers").and_then(|x| x.as_u64()).unwrap_or(28);
    let sliding_on = o.get("use_sliding_window").and_then(|x| x.as_bool()).unwrap_or(false) && !o.get("sliding_window").is_some_and(|w| w.is_null());
    // Qwen2Config.__post_init__: layer_types as given, else sliding from max_window_layers on.
    let kinds: Vec<bool> = match o.get("layer_types").and_then(|x| x.as_array()) {
        Some(t) => t.iter().map(|k| k.as_str() == Some("sliding_attention")).collect(),
        None => (0..layers).map(|i| sliding_on && i >= mwl).collect(),
    };
    let mixed = kinds.iter().any(|&k| k) && kinds.iter().any(|&k| !k);
    (mixed && mwl != layers).then(|| {
        format!(
            "vLLM 0.33.0 refuses this model (AssertionError, model_executor/models/qwen2.py:352): Sliding window for some but all layers is not supported. \
             This model uses sliding window but `max_window_layers` = {mwl} is less than `num_hidden_layers` = {layers}. Please open an issue to discuss this feature."
        )
    })
}

/// A Qwen2-MoE/Qwen3-MoE config.json with dense layers among the sparse ones: the text without
/// `mlp_only_layers`/`decoder_sparse_step` (which the transformers-side parse refuses) and the
/// dense layers' indices, which vLLM's plan takes (`vllm_0_33::weight_elements_per_rank`);
/// otherwise the text unchanged and no dense layers.
pub fn split_dense_layers(text: &str) -> std::result::Result<(String, Option<crate::model::hf::moe::DenseLayers>), String> {
    let Ok(serde_json::Value::Object(mut o)) = serde_json::from_str::<serde_json::Value>(text) else {
        return Ok((text.to_string(), None));
    };
    let mt = o.get("model_type").and_then(|v| v.as_str()).unwrap_or("").to_string();
    if !matches!(mt.as_str(), "qwen2_moe" | "qwen3_moe") {
        return Ok((text.to_string(), None));
    }
    let Some(dense) = crate::model::hf::moe::dense_layers(&o, &mt)? else {
        return Ok((text.to_string(), None));
    };
    o.remove("mlp_only_layers");
    o.remove("decoder_sparse_step");
    Ok((serde_json::Value::Object(o).to_string(), Some(dense)))
}

/// What DeepSeek-V3's plan (multi-head latent attention, `vllm_mla`) takes, else a usage error
/// naming the flag: FLASH_ATTN_MLA's cache dtypes and head sizes, and a config.json whose
/// layers vLLM builds as `vllm_mla` counts them.
fn check_mla(flag: &str, a: &ServeArgs, p: &crate::model::hf::deepseek_v3::DeepseekParts, model: &crate::model::ModelConfig, raw: Option<&str>) -> Result<()> {
    use crate::model::vllm_mla;
    let hs = vllm_mla::head_size(p);
    if !vllm_mla::MLA_HEAD_SIZES.contains(&hs) {
        return Err(usage(
            flag,
            format!(
                "kv_lora_rank + qk_rope_head_dim = {hs}: vLLM's MLA backends take head sizes 320, 512 or 576 (MLACommonBackend, mla_attention.py:1623); \
                 with another, no attention backend is valid"
            ),
        ));
    }
    if a.kv_cache_dtype != "auto" {
        return Err(usage(
            "--kv-cache-dtype",
            format!(
                "{} with multi-head latent attention: FLASH_ATTN_MLA (SM 9.0's first MLA backend) keeps a bf16/fp16 cache only; vLLM falls to FlashMLA, \
                 whose dense fp8 kernel (and 64-token blocks) depends on the build and the GPU, which is not modelled",
                a.kv_cache_dtype
            ),
        ));
    }
    if p.attention_bias {
        return Err(usage(flag, "attention_bias true: vLLM's DeepseekV2MLAAttention builds no biases (deepseek_v2.py:1051-1113), so the checkpoint's do not load"));
    }
    if model.tied_embeddings {
        return Err(usage(flag, "tie_word_embeddings true: vLLM's DeepseekV2ForCausalLM builds its own lm_head whatever it says (deepseek_v2.py:1917); not measured"));
    }
    if let Some(text) = raw {
        let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        if let Some(f) = v.get("moe_layer_freq").filter(|f| f.as_u64() != Some(1)) {
            return Err(usage(flag, format!("moe_layer_freq {f}: vLLM then keeps every layer whose index is not a multiple of it dense (deepseek_v2.py:1293-1297); only 1 is modelled")));
        }
    }
    Ok(())
}

/// The plan's inputs, checked: every bad flag is a usage error naming it.
pub fn resolve(a: &ServeArgs) -> Result<(String, crate::record::gpu::Gpu, ServeConfig)> {
    let mut raw: Option<String> = None;
    let (name, model, torch_dtype) = match (&a.preset, &a.config) {
        (Some(p), Some(_)) => return Err(usage("--config", format!("gives the model; drop --preset/--model '{p}'"))),
        (None, None) => return Err(usage("--preset", "name the model: --preset NAME or --config PATH")),
        (Some(p), None) => {
            let pr = presets::find(p, Some(Flavour::Hf)).map_err(|e| usage("--preset", e))?;
            let dt = pr.model.hf().and_then(|h| h.torch_dtype);
            (pr.name.to_string(), pr.model, dt)
        }
        (None, Some(path)) => {
            let (file, text) = crate::model::hf::config_file::read(path).map_err(|e| usage("--config", e))?;
            if let Some(why) = qwen_sliding_mix(&text) {
                return Err(usage("--config", why));
            }
            if serde_json::from_str::<serde_json::Value>(&text).ok().is_some_and(|v| v["model_type"] == "gpt_oss") {
                // Its quantization_config the hf parse refuses; without one vLLM loads bf16 experts
                // through another method, which is not modelled.
                return Err(usage(
                    "--config",
                    "gpt_oss: serve models gpt-oss's MXFP4 checkpoints as vLLM 0.33.0 loads them on H100/H200 (the OAI Triton kernels' layout); \
                     name them with --preset gpt-oss-20b or --preset gpt-oss-120b",
                ));
            }
            let (text, dense) = split_dense_layers(&text).map_err(|e| usage("--config", format!("{}: {e}", file.display())))?;
            let mut hf = crate::model::hf::parse(&text).map_err(|e| usage("--config", format!("{}: {e}", file.display())))?;
            if let Some(moe) = hf.config.hf.as_mut().and_then(|h| h.moe.as_mut()) {
                moe.dense_layers = dense;
            }
            raw = Some(text.clone());
            // (layer_types mixing sliding and full layers with max_window_layers = the layer
            // count: vLLM builds it, its per-layer windows are not modelled here). An MoE
            // config's window is planned as vLLM sets it (`ServeConfig::kv_spec`).
            if hf.config.hf().is_some_and(|h| h.moe.is_none()) {
                super::generate::check_static_only_window(hf.config.hf(), false, false, "--config", "serve")?;
            }
            let dt = hf.config.hf().and_then(|h| h.torch_dtype);
            let name = hf.name_or_path.as_deref().and_then(|n| n.trim_end_matches('/').rsplit('/').next()).unwrap_or("config.json").to_string();
            (name, hf.config, dt)
        }
    };
    let flag = if a.config.is_some() { "--config" } else { "--preset" };
    let Some(h) = model.hf() else {
        return Err(usage(flag, "vLLM's plan is modelled for Hugging Face models (the hf presets or a config.json)"));
    };
    if !matches!(h.model_type, Arch::Llama | Arch::Mistral | Arch::Qwen2 | Arch::Qwen3 | Arch::Phi3 | Arch::Olmo2 | Arch::Gemma2 | Arch::Gemma3Text) {
        return Err(usage(flag, format!("model_type {} is not modelled", h.model_type.name())));
    }
    if let Some(m) = &h.moe {
        if !matches!(m.family, MoeFamily::Mixtral | MoeFamily::Qwen3Moe | MoeFamily::Qwen2Moe | MoeFamily::DeepseekV3 | MoeFamily::GptOss) {
            return Err(usage(flag, format!("vLLM's plan for {} is not modelled yet (Mixtral, Qwen3-MoE, Qwen2-MoE, DeepSeek-V3 and gpt-oss are)", m.family.model_type())));
        }
        if let Some(p) = &m.deepseek {
            check_mla(flag, a, p, &model, raw.as_deref())?;
        }
    }
    let gemma = h.model_type.is_gemma();
    let weight_bytes = match torch_dtype {
        // _check_valid_dtype (config/model.py:2398-2419): Gemma refuses float16.
        Some(crate::engine::DType::F16) if gemma => {
            return Err(usage(
                flag,
                format!("vLLM 0.33.0 refuses it: The model type '{}' does not support float16. Reason: Numerical instability. Please use bfloat16 or float32 instead.", h.model_type.name()),
            ))
        }
        Some(d @ (crate::engine::DType::BF16 | crate::engine::DType::F16)) => d.size(),
        // _resolve_auto_dtype (config/model.py:2440-2442): a float32 checkpoint loads in the
        // platform's first dtype, bfloat16 from SM 8.0 (platforms/cuda.py:258-260; checked below
        // for Gemma), float16 before: 2 bytes either way.
        Some(crate::engine::DType::F32) if gemma || h.model_type == Arch::Olmo2 => 2,
        _ => return Err(usage(flag, "only 16-bit weights are modelled (torch_dtype bfloat16 or float16; float32 for Gemma and OLMo-2, which vLLM loads in 16 bits)")),
    };
    if !a.enforce_eager {
        return Err(usage(
            "--enforce-eager",
            "required: vLLM 0.33.0 subtracts its CUDA graphs' memory, measured by capturing them on the GPU, which vramscope cannot know; \
             the plan is made for --enforce-eager, where that term is 0",
        ));
    }
    vllm::check_tensor_parallel(&model, a.tensor_parallel_size).map_err(|e| usage("--tensor-parallel-size", e))?;
    let gpu = crate::record::gpu::find(&a.gpu).map_err(|e| usage("--gpu", e))?;
    if h.moe.is_some() && !matches!(gpu.arch, Some(crate::record::gpu::Arch::Cuda { major: 9, .. })) {
        // select_unquantized_moe_backend (layers/fused_moe/oracle/unquantized.py:62-80).
        if crate::model::vllm_gpt_oss::parts(&model).is_some() {
            return Err(usage(
                "--gpu",
                format!(
                    "{}: gpt-oss's MXFP4 experts are modelled on SM 9.0 (H100, H200), where vLLM 0.33.0 picks the OAI Triton kernels and their Hopper layout \
                     (fused_moe/oracle/mxfp4.py:402-435); other GPUs pick FlashInfer's TRT-LLM (SM 10), Marlin or others, whose layouts and padding are not modelled",
                    gpu.name
                ),
            ));
        }
        if h.moe.as_ref().is_some_and(|m| m.deepseek.is_some()) {
            return Err(usage(
                "--gpu",
                format!(
                    "{}: DeepSeek-V3's plan is modelled on SM 9.0 (H100, H200), where vLLM picks FLASH_ATTN_MLA and the Triton MoE backend; \
                     other GPUs pick other MLA backends (FlashInfer MLA, CUTLASS MLA, platforms/cuda.py:96-137) and MoE kernels, which are not modelled",
                    gpu.name
                ),
            ));
        }
        return Err(usage(
            "--gpu",
            format!(
                "{}: vLLM's unquantized MoE backend is Triton on SM 9.0 (H100, H200), which is what is modelled; \
                 elsewhere it tries FlashInfer's first (TRT-LLM's pads the experts' intermediate size to 128), which is not",
                gpu.name
            ),
        ));
    }
    if !matches!(gpu.arch, Some(crate::record::gpu::Arch::Cuda { .. })) {
        return Err(usage(
            "--gpu",
            format!("{}: vLLM's ROCm start-up (its profiling fallback, gpu_worker.py:728, and ROCm attention backends) is not modelled; name an NVIDIA GPU", gpu.name),
        ));
    }
    if gemma && !matches!(gpu.arch, Some(crate::record::gpu::Arch::Cuda { major: 8 | 9, .. })) {
        // _get_backend_priorities (platforms/cuda.py:156-180): FlashAttention first on SM 8.x/9.x,
        // whose MultipleOf(16) kernel blocks give the sliding layers --block-size; SM 10 tries
        // FlashInfer first and FA4's head_dim-256 kernel takes 128-token pages (fa_utils.py:14, :224).
        return Err(usage(
            "--gpu",
            format!(
                "{}: {}'s sliding layers are planned for vLLM's FlashAttention backend on SM 8.x/9.x (A100, RTX 4090, H100, H200), which keeps --block-size for them; \
                 the backend and sliding block size vLLM picks on this GPU are not modelled",
                gpu.name,
                h.model_type.name()
            ),
        ));
    }
    let u = a.gpu_memory_utilization;
    if !(u > 0.0 && u <= 1.0) {
        return Err(usage("--gpu-memory-utilization", format!("{u} must be in (0, 1] (vLLM's CacheConfig: gt=0, le=1)")));
    }
    if a.block_size == 0 || !a.block_size.is_multiple_of(vllm::BLOCK_SIZE_MULTIPLE) {
        return Err(usage("--block-size", format!("{} is not supported: FlashAttention takes multiples of {}", a.block_size, vllm::BLOCK_SIZE_MULTIPLE)));
    }
    let derived = model.max_seq_len;
    let max_model_len = a.max_model_len.unwrap_or(derived);
    if max_model_len == 0 {
        return Err(usage("--max-model-len", "must be at least 1"));
    }
    if max_model_len > derived {
        return Err(usage(
            "--max-model-len",
            format!("User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len (max_position_embeddings={derived} or model_max_length=None in model's config.json)."),
        ));
    }
    let total = gpu.memory_bytes as u64;
    let (def_tokens, def_seqs) = vllm::default_batch_limits(total, gpu.name);
    if a.max_num_seqs == Some(0) {
        return Err(usage("--max-num-seqs", "must be at least 1"));
    }
    if a.max_num_batched_tokens == Some(0) {
        return Err(usage("--max-num-batched-tokens", "must be at least 1"));
    }
    // EngineArgs._set_default_max_num_seqs_and_batched_tokens_args (engine/arg_utils.py:3151):
    // a default token budget is capped at max_num_seqs x max_model_len (:3218), then a default
    // max_num_seqs at the token budget (:3231).
    let seqs_given = a.max_num_seqs.unwrap_or(def_seqs);
    let max_num_batched_tokens = a.max_num_batched_tokens.unwrap_or_else(|| def_tokens.min(seqs_given.saturating_mul(max_model_len)));
    let max_num_seqs = a.max_num_seqs.unwrap_or_else(|| def_seqs.min(max_num_batched_tokens));
    if max_num_batched_tokens < max_num_seqs {
        // SchedulerConfig.verify_max_model_len (config/scheduler.py:331).
        return Err(usage(
            "--max-num-batched-tokens",
            format!("max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to max_num_seqs ({max_num_seqs})."),
        ));
    }
    let kv_bytes = if a.kv_cache_dtype == "auto" {
        weight_bytes
    } else {
        if !matches!(gpu.arch, Some(crate::record::gpu::Arch::Cuda { major: 9, .. })) {
            return Err(usage(
                "--kv-cache-dtype",
                format!("{} on {}: vLLM's FlashAttention keeps an fp8 cache only on SM 9.0 (H100, H200); the backend vLLM picks instead is not modelled", a.kv_cache_dtype, gpu.name),
            ));
        }
        1
    };
    Ok((
        name,
        gpu,
        ServeConfig { model, weight_bytes, kv_bytes, total_memory: total, gpu_memory_utilization: u, max_model_len, max_num_seqs, max_num_batched_tokens, block_size: a.block_size, tensor_parallel_size: a.tensor_parallel_size },
    ))
}
