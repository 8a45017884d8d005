//! vLLM 0.33.0's start-up memory plan (V1 engine, `--enforce-eager`, one GPU or
//! `--tensor-parallel-size` GPUs of one node): what
//! `Worker.determine_available_memory` leaves for the KV cache and how
//! `kv_cache_planning.get_kv_cache_configs` cuts it into blocks. Every term names the file and
//! line of the vllm-0.33.0 wheel (`vllm/…`) it comes from.
//!
//! - requested memory = ceil(total_memory × gpu_memory_utilization)
//!   (`v1/worker/utils.py:724`; total from `torch.accelerator.get_memory_info`,
//!   `utils/mem_utils.py:143`). vramscope has no GPU: it takes `torch.cuda.mem_get_info`'s
//!   total as published reports give it per GPU (`record::gpu`, each with its source).
//!   vLLM first stops unless the free memory at its init snapshot is at least the requested
//!   memory (`v1/worker/utils.py:761`); that free memory is the total less the CUDA context,
//!   NCCL and cuBLAS handles, measured at run time: not checked here, and said so in the output.
//! - available KV cache memory = requested − non_kv_cache_memory − cudagraph_memory_estimate
//!   (`v1/worker/gpu_worker.py:753`), with non_kv_cache_memory = total_consumed +
//!   transient_peak_headroom (`utils/mem_utils.py:321`):
//!   - total_consumed = free memory at the init snapshot − free memory after the profile run
//!     (`utils/mem_utils.py:312`): the weights (`model_memory_usage`, `gpu_worker.py:688`),
//!     plus the non-torch memory that grew after the snapshot. The snapshot is taken after the
//!     CUDA context, NCCL and the cuBLAS handles exist (`gpu_worker.py:526-541`), so they are
//!     not subtracted. Weights are the parameter count with the vocabulary padded to a multiple
//!     of 64 (`model_executor/layers/vocab_parallel_embedding.py:36`, DEFAULT_VOCAB_PADDING_SIZE)
//!     times the dtype's bytes. The non-torch growth is measured at run time; vramscope cannot
//!     measure it and takes [`NON_TORCH_INCREASE_BYTES`] (0), labelled as assumed.
//!   - transient_peak_headroom = torch peak − torch allocated after the profile run
//!     (`utils/mem_utils.py:318`): the activation peak of `profile_run`
//!     (`v1/worker/gpu_model_runner.py:6072`): a forward of max_num_batched_tokens dummy tokens
//!     and the sampler over min(max_num_seqs, max_num_batched_tokens) rows
//!     (`_dummy_sampler_run`, `gpu_model_runner.py:5866`). vramscope does not run vLLM's model
//!     code: [`activation_peak_estimate`] is a formula read off it, an estimate not yet
//!     measured against vLLM.
//!   - cudagraph_memory_estimate: measured by capturing the graphs
//!     (`profile_cudagraph_memory`, `gpu_model_runner.py:6268`) and subtracted by default
//!     (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`, `envs.py:2219`, `gpu_worker.py:720`). It
//!     cannot be known without a GPU, so the plan is only made with `--enforce-eager`
//!     (cudagraph_mode NONE and no torch.compile, `config/vllm.py:1766-1768`: the term is 0,
//!     `gpu_worker.py:709`, and the profile run executes the modeling code eagerly).
//! - Tensor parallelism (each rank plans alone, `v1/worker/gpu_worker.py`, and the engine takes
//!   the smallest block count, `kv_cache_planning.py:1587-1601`; the ranks here are identical,
//!   so it is every rank's): see [`weight_bytes_per_rank`] and [`kv_heads_per_rank`]; the
//!   divisibility vLLM asserts is [`check_tensor_parallel`].
//! - DeepSeek-V3 (multi-head latent attention, an `MLAAttentionSpec` per layer): its weights,
//!   latent cache page, divisibility and forward estimate are [`vllm_mla`]'s.
//! - gpt-oss (MXFP4 experts re-laid out for the OAI Triton kernels, sliding and full layers
//!   with sinks): its weights, layer windows and forward estimate are [`vllm_gpt_oss`]'s.
//! - KV cache: one `FullAttentionSpec` per layer (`model_executor/layers/attention/attention.py:675-682`),
//!   or a `SlidingWindowSpec` when the layer has a window (`attention.py:624-672`; see
//!   [`KvSpec`]), dtype the model's for `auto` and uint8 for
//!   fp8 (`utils/torch_utils.py:420`), page = block_size × num_kv_heads (per rank) ×
//!   (head_size + head_size_v) × dtype bytes (`v1/kv_cache_interface.py:594`, `:590`); one group,
//!   bytes per block = the sum of the layers' pages (`v1/core/kv_cache_planning.py:574-605`: no padding for FlashAttention's
//!   multiple-of-16 blocks, `v1/kv_cache_interface.py:224-234`);
//!   num_blocks = available // bytes_per_block (`kv_cache_planning.py:1572`).
//! - The fit check plans against available − one block (the null block,
//!   `kv_cache_planning.py:1536-1541`): one request needs [`blocks_per_request`] blocks
//!   (`_max_memory_usage_bytes_from_groups`, `kv_cache_planning.py:1253-1285`), else vLLM's
//!   ValueError (`kv_cache_planning.py:77`) with the longest length that fits (binary search,
//!   `_estimate_max_model_len_from_groups`, `kv_cache_planning.py:1288-1334`; the same search
//!   is vLLM's auto-fit for `--max-model-len -1`, `kv_cache_planning.py:1337-1410`).
//! - Maximum concurrency = num_blocks / blocks_per_request
//!   (`v1/core/kv_cache_utils.py:1061-1093`); GPU KV cache size = int(concurrency × max_model_len)
//!   tokens (`kv_cache_utils.py:1128`), logged with `:,` and `%.2fx`
//!   (`kv_cache_utils.py:1147-1154`). GiB figures print as `round(b / 2**30, 2)`
//!   (`format_gib`, `utils/mem_utils.py:30`).
use crate::model::hf::moe::MoeFamily;
use crate::model::vllm_hybrid as hybrid;
use crate::model::{vllm_gpt_oss, vllm_mla, ModelConfig};

/// The vLLM release whose plan this file reproduces.
pub const VLLM_VERSION: &str = "0.33.0";
/// `CacheConfig.gpu_memory_utilization` (`config/cache.py:215`).
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.92;
/// `CacheConfig.DEFAULT_BLOCK_SIZE` (`config/cache.py:185`).
pub const DEFAULT_BLOCK_SIZE: usize = 16;
/// FlashAttention's kernel block sizes: `MultipleOf(16)` (`v1/attention/backends/flash_attn.py:367`).
pub const BLOCK_SIZE_MULTIPLE: usize = 16;
/// `DEFAULT_VOCAB_PADDING_SIZE` of `VocabParallelEmbedding` / `ParallelLMHead`
/// (`model_executor/layers/vocab_parallel_embedding.py:36`).
pub const VOCAB_PADDING: usize = 64;
/// Non-torch memory that grows between the init snapshot and the end of the profile run
/// (`utils/mem_utils.py:306`): measured by vLLM at run time; assumed 0 here.
pub const NON_TORCH_INCREASE_BYTES: u64 = 0;
const GIB: f64 = (1u64 << 30) as f64;

/// `max_num_batched_tokens` / `max_num_seqs` defaults of `vllm serve` (the OpenAI API server,
/// `engine/arg_utils.py:2971-3006`): by total device memory and name.
pub fn default_batch_limits(total_bytes: u64, gpu_name: &str) -> (usize, usize) {
    let gib = 1u64 << 30;
    if total_bytes >= 160 * gib {
        (16384, 1024)
    } else if total_bytes >= 70 * gib && !gpu_name.to_ascii_lowercase().contains("a100") {
        (8192, 1024)
    } else {
        (2048, 256)
    }
}

/// The KV cache spec of every layer (one group: all layers alike,
/// `kv_cache_planning.py:1134-1138`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvSpec {
    /// `FullAttentionSpec`: a request holds cdiv(max_model_len, block_size) blocks
    /// (`v1/kv_cache_interface.py:643-648`).
    Full,
    /// `SlidingWindowSpec` (`v1/kv_cache_interface.py:901-952`): a request holds at most
    /// cdiv(min(window − 1 + max_in_flight_tokens, max_model_len), block_size) + 1 blocks.
    /// Every layer slides: Mistral's `sliding_window` with no `layer_types` sets
    /// `CacheConfig.sliding_window` (`engine/arg_utils.py:2288-2294`), which every attention
    /// layer takes (`model_executor/layers/attention/attention.py:266-273`); so does Qwen2/3's
    /// `use_sliding_window` with `max_window_layers` 0.
    SlidingWindow { window: usize },
}

/// What the plan takes.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub model: ModelConfig,
    /// Bytes of one weight element (the config's torch_dtype).
    pub weight_bytes: usize,
    /// Bytes of one KV cache element (`--kv-cache-dtype`).
    pub kv_bytes: usize,
    pub total_memory: u64,
    pub gpu_memory_utilization: f64,
    pub max_model_len: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub block_size: usize,
    /// `--tensor-parallel-size`: the plan is one rank's (all ranks plan the same).
    pub tensor_parallel_size: usize,
}

/// `VllmConfig.max_concurrent_batches` (`config/vllm.py:588-598`): async scheduling is on by
/// default with one pipeline stage (`config/vllm.py:1685-1719`; both executors support it,
/// `v1/executor/uniproc_executor.py:157`, `multiproc_executor.py:666`), so 2.
pub const MAX_CONCURRENT_BATCHES: usize = 2;

impl ServeConfig {
    /// The spec every layer gets.
    pub fn kv_spec(&self) -> KvSpec {
        // A window of 0 is none (`config/model.py:815-821`). CacheConfig.sliding_window is set
        // only when the config has no layer_types or every layer is "sliding_attention"
        // (`engine/arg_utils.py:2288-2294`); an MoE model file (mixtral.py, qwen3_moe.py,
        // qwen2_moe.py) passes no per-layer window, so Qwen2-MoE's mix of sliding and full
        // layer_types leaves every layer full.
        let h = self.model.hf();
        if h.is_some_and(|h| h.moe.is_some() && h.sliding_layers.as_ref().is_some_and(|s| !s.iter().all(|&x| x))) {
            return KvSpec::Full;
        }
        match h.and_then(|h| h.sliding_window) {
            Some(window) if window > 0 => KvSpec::SlidingWindow { window },
            _ => KvSpec::Full,
        }
    }

    /// `VllmConfig.max_in_flight_tokens` (`config/vllm.py:601-609`).
    pub fn max_in_flight_tokens(&self) -> u64 {
        (MAX_CONCURRENT_BATCHES as u64).saturating_mul(self.max_num_batched_tokens as u64)
    }
}

/// The plan's terms, in bytes.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ServePlan {
    pub requested_memory: u64,
    pub weights: u64,
    pub activation_peak: u64,
    pub non_torch_increase: u64,
    pub cudagraph_memory: u64,
    /// May be negative (then nothing is left for the cache).
    pub available_kv_cache_memory: i128,
    /// KV heads on each rank (`kv_heads_per_rank`).
    pub num_kv_heads_per_rank: usize,
    /// "FullAttentionSpec" or "SlidingWindowSpec(sliding_window=W)", or a hybrid model's groups
    /// ([`hybrid::describe_groups`]).
    pub kv_cache_spec: String,
    pub page_bytes_per_layer: u64,
    pub bytes_per_block: u64,
    pub num_blocks: u64,
    pub blocks_per_request: u64,
    pub kv_cache_tokens: u64,
    pub max_concurrency: f64,
}

fn cdiv(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// `pad_vocab_size` (`model_executor/layers/vocab_parallel_embedding.py:95-97`).
pub fn padded_vocab(m: &ModelConfig) -> usize {
    m.vocab_size.div_ceil(VOCAB_PADDING) * VOCAB_PADDING
}

/// KV heads on one rank: `max(1, total_num_kv_heads // tp_size)`, replicated when the ranks
/// outnumber them (`model_executor/models/llama.py:147-156`, `qwen2.py:141-149`,
/// `qwen3.py:91-99`; `config/model.py:1683`).
pub fn kv_heads_per_rank(m: &ModelConfig, tp: usize) -> usize {
    if vllm_mla::parts(m).is_some() {
        return 1; // one latent head, whole on every rank
    }
    (m.num_kv_heads / tp.max(1)).max(1)
}

/// What vLLM asserts before it shards the model over `tp` ranks, as its own message.
pub fn check_tensor_parallel(m: &ModelConfig, tp: usize) -> Result<(), String> {
    if tp == 0 {
        return Err("must be at least 1".into());
    }
    if let Some((moe, p)) = vllm_mla::parts(m) {
        return vllm_mla::check_tensor_parallel(m, moe, p, tp);
    }
    if vllm_gpt_oss::parts(m).is_some() {
        vllm_gpt_oss::check_tensor_parallel(m, tp)?;
    }
    // ModelConfig.verify_with_parallel_config (config/model.py:1557-1563).
    if !m.num_heads.is_multiple_of(tp) {
        return Err(format!("Total number of attention heads ({}) must be divisible by tensor parallel size ({tp}).", m.num_heads));
    }
    // LlamaAttention (model_executor/models/llama.py:148-155), QKVParallelLinear (layers/linear.py:1066-1071).
    let kv = m.num_kv_heads;
    if kv >= tp && !kv.is_multiple_of(tp) {
        return Err(format!("the {kv} KV heads are not divisible by tensor parallel size ({tp}) (vLLM asserts total_num_kv_heads % tp_size == 0, model_executor/models/llama.py:151)"));
    }
    if kv < tp && !tp.is_multiple_of(kv) {
        return Err(format!("tensor parallel size ({tp}) is not a multiple of the {kv} KV heads it replicates (vLLM asserts tp_size % total_num_kv_heads == 0, model_executor/models/llama.py:155)"));
    }
    if let Some(moe) = m.hf().and_then(|h| h.moe.as_ref()) {
        // Qwen3MoeSparseMoeBlock / Qwen2MoeSparseMoeBlock (qwen3_moe.py:153, qwen2_moe.py:136).
        if moe.family != MoeFamily::Mixtral && tp > moe.experts {
            return Err(format!("Tensor parallel size {tp} is greater than the number of experts {}.", moe.experts));
        }
        // FusedMoEConfig.__post_init__ (layers/fused_moe/config.py:1352).
        if !moe.intermediate.is_multiple_of(tp) {
            return Err(format!("the experts' intermediate size {} is not divisible by {tp} (vLLM asserts intermediate_size % tp_size == 0, layers/fused_moe/config.py:1352)", moe.intermediate));
        }
        if let Some(dl) = moe.dense_layers.as_ref().filter(|dl| !dl.intermediate.is_multiple_of(tp)) {
            return Err(format!("intermediate_size {} (the dense layers' MLP) is not divisible by {tp} (gate_up_proj's divide, layers/linear.py:502)", dl.intermediate));
        }
        if moe.shared_intermediate > 0 && !moe.shared_intermediate.is_multiple_of(tp) {
            return Err(format!("shared_expert_intermediate_size {} is not divisible by {tp} (the shared expert's gate_up_proj divide, layers/linear.py:502)", moe.shared_intermediate));
        }
    } else if !m.d_ff.is_multiple_of(tp) {
        // MergedColumnParallelLinear's divide (layers/linear.py:497-503, distributed/utils.py:130).
        return Err(format!("intermediate_size {} is not divisible by {tp} (gate_up_proj's divide, layers/linear.py:502)", m.d_ff));
    }
    // VocabParallelEmbedding's divide (layers/vocab_parallel_embedding.py:304).
    let v = padded_vocab(m);
    if !v.is_multiple_of(tp) {
        return Err(format!("the padded vocabulary {v} is not divisible by {tp} (VocabParallelEmbedding, layers/vocab_parallel_embedding.py:304)"));
    }
    Ok(())
}

/// Elements of one rank's weights as vLLM shards them (`tp` passed
/// [`check_tensor_parallel`]); at tp 1, the parameters with the vocabulary padded to 64:
/// - embed_tokens and an untied lm_head: padded vocabulary / tp rows
///   (`vocab_parallel_embedding.py:286-306`); a tied head is the embedding (`llama.py:509-510`);
/// - qkv_proj (QKVParallelLinear, `layers/linear.py:1065-1077`): (heads/tp + 2 × kv heads per
///   rank) × head_dim outputs, and as many bias elements (qwen2's);
/// - o_proj and down_proj (RowParallelLinear, `linear.py:1708-1709`): inputs / tp, a bias whole
///   on every rank (`linear.py:1756-1758`);
/// - gate_up_proj (MergedColumnParallelLinear, `linear.py:497-503`): 2 × intermediate / tp
///   outputs; the RMSNorms (and Qwen3's and Qwen3-MoE's q/k norms over head_dim, OLMo-2's over the
///   whole q/k projection) whole on every rank;
/// - a mixture-of-experts layer's MLP: [`mlp_elements_per_rank`].
pub fn weight_elements_per_rank(m: &ModelConfig, tp: usize) -> u64 {
    let tp = tp.max(1) as u64;
    let (d, f, hd) = (m.d_model as u64, m.d_ff as u64, m.head_dim() as u64);
    let h = m.num_heads as u64 / tp;
    let kvr = kv_heads_per_rank(m, tp as usize) as u64;
    let hf = m.hf();
    let qkv_out = (h + 2 * kvr) * hd;
    let mut layer = d * qkv_out + h * hd * d + mlp_elements_per_rank(m, tp) + 2 * d;
    if hf.is_some_and(|h| h.qkv_bias) {
        layer += qkv_out;
    }
    if hf.is_some_and(|h| h.o_bias) {
        layer += d;
    }
    if hf.is_some_and(|h| h.mlp_bias && h.moe.is_none()) {
        layer += 2 * f / tp + d;
    }
    if hf.is_some_and(|h| h.model_type == crate::model::hf::Arch::Qwen3) {
        layer += 2 * hd;
    }
    if hf.is_some_and(|h| h.model_type == crate::model::hf::Arch::Olmo2) {
        // vLLM serves Olmo2ForCausalLM through its Transformers backend, whose fusers shard it as
        // llama.py does (QKVParallelLinear, MergedColumnParallelLinear, row-parallel o/down) but
        // keep q_norm and k_norm whole over the projection on every rank: TPAwareRMSNorm gathers
        // the sharded q/k before normalizing (`models/transformers/fusers/rms_norm.py:105-125`).
        layer += (m.num_heads + m.num_kv_heads) as u64 * hd;
    }
    layer += hybrid::layer_extra_elements(m);
    let rows = padded_vocab(m) as u64 / tp;
    let vocab = rows * d * if hybrid::head_tied(m) { 1 } else { 2 };
    // Layers built dense (`mlp_only_layers`, `decoder_sparse_step`: Qwen2MoeDecoderLayer,
    // qwen2_moe.py:313-321; Qwen3MoeDecoderLayer, qwen3_moe.py:385-393) hold a Qwen2MoeMLP /
    // Qwen3MoeMLP of intermediate_size (gate_up_proj and down_proj split, no bias) instead.
    let (dense, dense_mlp) = match hf.and_then(|h| h.moe.as_ref()).and_then(|moe| moe.dense_layers.as_ref()) {
        Some(dl) => (dl.layers.len() as u64, 3 * d * (dl.intermediate as u64 / tp)),
        None => (0, 0),
    };
    m.num_layers as u64 * layer - dense * mlp_elements_per_rank(m, tp) + dense * dense_mlp + vocab + d
}

/// One decoder layer's MLP on one rank. Dense: gate_up_proj and down_proj, intermediate / tp
/// each. Mixture of experts (mixtral.py:111-125, qwen3_moe.py:170-215, qwen2_moe.py:142-180):
/// - the router (`GateLinear`, a `ReplicatedLinear`): experts × hidden, whole on every rank;
/// - the experts (`FusedMoE`, expert parallelism off): `w13_weight` (experts, 2 × I/tp, hidden)
///   and `w2_weight` (experts, hidden, I/tp) (`unquantized_fused_moe_method.py:68-131`), with
///   I/tp = `intermediate_size_per_partition` (`layers/fused_moe/config.py:1353`; the
///   `FusedMoEParallelConfig` tp is tp × dp × pcp, `config.py:1112`). The Triton backend SM 9.0
///   picks pads nothing (`oracle/unquantized.py:76-80`, `:385-397`); FlashInfer's TRT-LLM
///   backend (first on other GPUs) rounds I/tp up to 128, which is why `serve` takes MoE
///   models on SM 9.0 only;
/// - Qwen2-MoE: `shared_expert_gate` (hidden × 1, replicated) always, and the shared expert
///   (column/row-parallel, shared_expert_intermediate_size / tp) when its width is not 0.
pub fn mlp_elements_per_rank(m: &ModelConfig, tp: u64) -> u64 {
    let d = m.d_model as u64;
    let Some(moe) = m.hf().and_then(|h| h.moe.as_ref()) else {
        let f = m.d_ff as u64;
        return d * 2 * f / tp + f / tp * d;
    };
    let (e, i) = (moe.experts as u64, moe.intermediate as u64 / tp);
    let mut mlp = e * d + e * 2 * i * d + e * d * i;
    if moe.family == MoeFamily::Qwen2Moe {
        let s = moe.shared_intermediate as u64 / tp;
        mlp += d + 3 * s * d;
    }
    mlp
}

/// Bytes of one rank's weights.
pub fn weight_bytes_per_rank(m: &ModelConfig, elem: usize, tp: usize) -> u64 {
    if let Some((moe, p)) = vllm_mla::parts(m) {
        return vllm_mla::weight_bytes_per_rank(m, moe, p, elem, tp);
    }
    if let Some((moe, _)) = vllm_gpt_oss::parts(m) {
        return vllm_gpt_oss::weight_bytes_per_rank(m, moe, elem, tp);
    }
    weight_elements_per_rank(m, tp).saturating_mul(elem as u64)
}

/// The activation peak of `profile_run`, an estimate read off vLLM's code, not yet measured
/// against vLLM (eager, as `--enforce-eager` runs it; the attention backend's buffers are left out):
/// the larger of
/// - the forward's MLP of one layer over T = max_num_batched_tokens tokens
///   (`model_executor/models/llama.py:317-324` `LlamaDecoderLayer.forward`, `:119-121` `LlamaMLP.forward`): the
///   residual and the normed hidden states (T × hidden each), gate_up_proj's output
///   (T × 2·intermediate/tp) and SiluAndMul's (T × intermediate/tp), in the weights' dtype;
/// - the sampler (`_dummy_sampler_run`, `v1/worker/gpu_model_runner.py:5866`) over
///   R = min(max_num_seqs, T) rows (`gpu_model_runner.py:5545`) of V (the padded vocabulary), while the forward's hidden
///   states (T × hidden) are still held (`gpu_model_runner.py:6132-6143`): the last hidden
///   states and their `rand_like` (R × hidden each), compute_logits' R × V in the weights'
///   dtype, their float32 copy (`v1/sample/sampler.py:158`), softmax's float32 probabilities
///   and the exponential noise `q` (`v1/sample/ops/topk_topp_sampler.py:309`, `:594`); top-k/top-p
///   (triton) and `probs.div_(q)` (`:599`) work in place. With tensor parallelism the logits
///   are gathered whole (`model_executor/layers/logits_processor.py`), so this term is not divided.
///
/// A mixture-of-experts layer's forward is [`moe_forward_estimate`] instead of the MLP's.
pub fn activation_peak_estimate(c: &ServeConfig) -> u64 {
    let m = &c.model;
    let t = c.max_num_batched_tokens as u64;
    let b = c.weight_bytes as u64;
    let (d, f) = (m.d_model as u64, (m.d_ff / c.tensor_parallel_size.max(1)) as u64);
    let forward = match m.hf().and_then(|h| h.moe.as_ref()) {
        Some(moe) if moe.deepseek.is_some() => vllm_mla::forward_estimate(c, moe, moe.deepseek.as_ref().expect("checked")),
        Some(moe) if moe.family == MoeFamily::GptOss => vllm_gpt_oss::forward_estimate(c, moe),
        // With dense layers among the sparse ones, the larger of the two layers' forwards.
        Some(moe) if moe.dense_layers.is_some() => {
            let f = moe.dense_layers.as_ref().map_or(0, |dl| dl.intermediate / c.tensor_parallel_size.max(1)) as u64;
            moe_forward_estimate(c, moe).max(t * b * (2 * d + 3 * f))
        }
        Some(moe) => moe_forward_estimate(c, moe),
        None => t * b * (2 * d + 3 * f),
    };
    let r = c.max_num_seqs.min(c.max_num_batched_tokens) as u64;
    let v = padded_vocab(m) as u64;
    let sampler = t * d * b + 2 * r * d * b + r * v * (b + 4 + 4 + 4);
    forward.max(sampler)
}

/// One mixture-of-experts layer's forward over T = max_num_batched_tokens tokens on one rank,
/// an estimate read off vLLM's code (not measured against vLLM), in the weights' dtype unless
/// said: the residual and the normed hidden states (T × hidden each); the router logits
/// (`GateLinear`, T × experts); the top-k weights (float32) and ids (int32), T × top_k each;
/// the Triton experts' two workspaces, taken whole from the workspace manager for the whole
/// batch (no chunking: `_allocate_buffers(M_full, M_full, …)`, `layers/fused_moe/modular_kernel.py:1354`;
/// `TritonExperts.workspace_shapes`, `experts/triton_moe.py:240-255`; each rounded up to 256
/// bytes, `v1/worker/workspace.py:193-195`): T × top_k × max(I/tp, hidden) (shared with the
/// output, T × hidden) and T × top_k × max(2·I/tp, hidden); the layer's output (T × hidden);
/// and Qwen2-MoE's shared expert beside them (its gate_up and SiluAndMul outputs, T × 3·S/tp,
/// and its gate, T × 1). `moe_align_block_size`'s index buffers are left out.
pub fn moe_forward_estimate(c: &ServeConfig, moe: &crate::model::hf::moe::MoeConfig) -> u64 {
    let tp = c.tensor_parallel_size.max(1) as u64;
    let t = c.max_num_batched_tokens as u64;
    let b = c.weight_bytes as u64;
    let d = c.model.d_model as u64;
    let (e, k, i) = (moe.experts as u64, moe.top_k as u64, moe.intermediate as u64 / tp);
    let round = |x: u64| x.div_ceil(256) * 256;
    let ws13 = round(t * k * i.max(d) * b);
    let ws2 = round(t * k * (2 * i).max(d) * b);
    let routing = t * e * b + t * k * (4 + 4);
    let shared = if moe.family == MoeFamily::Qwen2Moe { t * b * (3 * moe.shared_intermediate as u64 / tp + 1) } else { 0 };
    2 * t * d * b + routing + ws13 + ws2 + t * d * b + shared
}

/// KV cache bytes of one layer's page on one rank: block_size × kv heads per rank ×
/// (head_size + head_size_v) × bytes (`v1/kv_cache_interface.py:590-601`). A sliding window
/// layer's block size is `--block-size` too: FlashAttention's `MultipleOf(16)` kernel blocks
/// (`v1/attention/backends/flash_attn.py:367`) let `_largest_kernel_block_within`
/// (`model_executor/layers/attention/attention.py:101-130`, `:655-661`) keep it.
pub fn page_bytes(c: &ServeConfig) -> u64 {
    let m = &c.model;
    if let Some((_, p)) = vllm_mla::parts(m) {
        return vllm_mla::page_bytes(c, p);
    }
    (c.block_size as u64) * kv_heads_per_rank(m, c.tensor_parallel_size) as u64 * 2 * m.head_dim() as u64 * c.kv_bytes as u64
}

/// Blocks one request of `len` tokens holds at most, per layer and so per group
/// (`_max_memory_usage_bytes_from_groups`, `kv_cache_planning.py:1253-1285`, and
/// `get_max_concurrency_for_kv_cache_config`, `v1/core/kv_cache_utils.py:1061-1093`):
/// full attention cdiv(len, block_size) (`kv_cache_interface.py:643-648`); a sliding window W
/// cdiv(min(W − 1 + max_in_flight_tokens, len), block_size) + 1
/// (`SlidingWindowSpec.max_admission_blocks_per_request`, `kv_cache_interface.py:919-944`).
pub fn blocks_per_request(c: &ServeConfig, len: u64) -> u64 {
    if hybrid::is_hybrid(&c.model) {
        return hybrid::blocks_per_request(c, len);
    }
    let bs = c.block_size as u64;
    match c.kv_spec() {
        KvSpec::Full => cdiv(len, bs),
        KvSpec::SlidingWindow { window } => {
            let tokens = (window as u64 - 1).saturating_add(c.max_in_flight_tokens()).min(len);
            cdiv(tokens, bs) + 1
        }
    }
}

/// The longest length in [1, upper] whose request fits `check` bytes (0 when one token does
/// not): `_estimate_max_model_len_from_groups` (`kv_cache_planning.py:1288-1334`).
pub fn estimate_max_model_len(c: &ServeConfig, bytes_per_block: u64, check: i128, upper: u64) -> u64 {
    let fits = |len: u64| (blocks_per_request(c, len) as i128) * bytes_per_block as i128 <= check;
    if upper == 0 || !fits(1) {
        return 0;
    }
    let (mut lo, mut hi, mut best) = (1u64, upper, 1u64);
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    best
}

/// The whole plan.
pub fn plan(c: &ServeConfig) -> ServePlan {
    let requested_memory = (c.total_memory as f64 * c.gpu_memory_utilization).ceil() as u64;
    let weights = weight_bytes_per_rank(&c.model, c.weight_bytes, c.tensor_parallel_size);
    let activation_peak = activation_peak_estimate(c);
    let non_torch_increase = NON_TORCH_INCREASE_BYTES;
    let cudagraph_memory = 0;
    let available = requested_memory as i128 - (weights + non_torch_increase + activation_peak) as i128 - cudagraph_memory as i128;
    ServePlan { requested_memory, weights, activation_peak, non_torch_increase, cudagraph_memory, ..plan_kv_cache(c, available) }
}

/// The KV cache's part of the plan for a given available memory per rank (what
/// `get_kv_cache_configs` is handed, `kv_cache_planning.py:1461`); the memory terms above it
/// are left 0.
pub fn plan_kv_cache(c: &ServeConfig, available: i128) -> ServePlan {
    let page = page_bytes(c);
    // Several KV cache groups share one pool: a block is the largest group's pages.
    let layers = if hybrid::is_hybrid(&c.model) { hybrid::layers_per_block(&c.model) } else { c.model.num_layers };
    let bytes_per_block = page * layers as u64;
    let num_blocks = if available > 0 { available as u64 / bytes_per_block } else { 0 };
    let blocks_per_request = blocks_per_request(c, c.max_model_len as u64);
    let max_concurrency = num_blocks as f64 / blocks_per_request as f64;
    let kv_cache_tokens = (max_concurrency * c.max_model_len as f64) as u64;
    ServePlan {
        requested_memory: 0,
        weights: 0,
        activation_peak: 0,
        non_torch_increase: 0,
        cudagraph_memory: 0,
        available_kv_cache_memory: available,
        num_kv_heads_per_rank: kv_heads_per_rank(&c.model, c.tensor_parallel_size),
        kv_cache_spec: match c.kv_spec() {
            _ if hybrid::is_hybrid(&c.model) => hybrid::describe_groups(&c.model),
            KvSpec::Full if vllm_mla::parts(&c.model).is_some() => "MLAAttentionSpec".into(),
            KvSpec::Full => "FullAttentionSpec".into(),
            KvSpec::SlidingWindow { window } => format!("SlidingWindowSpec(sliding_window={window})"),
        },
        page_bytes_per_layer: page,
        bytes_per_block,
        num_blocks,
        blocks_per_request,
        kv_cache_tokens,
        max_concurrency,
    }
}

/// vLLM's auto-fit (`--max-model-len -1`, `_auto_fit_max_model_len`,
/// `kv_cache_planning.py:1337-1410`): the longest max_model_len up to the derived one whose
/// request fits the available memory less the null block; Err with vLLM's message when not
/// even one token fits.
pub fn auto_fit_max_model_len(c: &ServeConfig, p: &ServePlan) -> Result<u64, String> {
    let check = p.available_kv_cache_memory - p.bytes_per_block as i128;
    let best = estimate_max_model_len(c, p.bytes_per_block, check, c.max_model_len as u64);
    if best == 0 {
        return Err("Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. Try increasing `gpu_memory_utilization`.".into());
    }
    Ok(best)
}

/// `format_gib`: `f"{round(b / GiB, 2)}"`, as Python prints the float (`80.0`, `55.9`).
/// Python's round is correctly rounded with ties to even on the exact binary value (5.625 GiB
/// prints 5.62), which is what Rust's `{:.2}` does; the result then prints as its shortest repr.
pub fn format_gib(b: i128) -> String {
    let r: f64 = format!("{:.2}", b as f64 / GIB).parse().expect("a formatted float parses");
    let s = format!("{r}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

/// A whole number with thousands separators (`f"{n:,}"`).
pub fn commas(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// vLLM's ValueError when one request of max_model_len does not fit
/// (`v1/core/kv_cache_planning.py:57` and `:77`), or None when it fits. The check plans
/// against the available memory less the null block (`kv_cache_planning.py:1536-1541`).
pub fn does_not_fit(c: &ServeConfig, p: &ServePlan) -> Option<String> {
    let check = p.available_kv_cache_memory - p.bytes_per_block as i128;
    if check <= 0 {
        return Some(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine \
             (this flag also controls CPU memory reservation on the CPU backend, despite its name). \
             See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
                .to_string(),
        );
    }
    let need = blocks_per_request(c, c.max_model_len as u64) as i128 * p.bytes_per_block as i128;
    if need <= check {
        return None;
    }
    let best = estimate_max_model_len(c, p.bytes_per_block, check, c.max_model_len as u64);
    let est = if best > 0 { format!("Based on the available memory, the estimated maximum model length is {best}. ") } else { String::new() };
    Some(format!(
        "To serve at least one request with the model's max seq len ({}), ({} GiB KV cache is needed, which is larger than the available KV cache memory ({} GiB). {est}\
         Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. \
         See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        c.max_model_len,
        format_gib(need),
        format_gib(check)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn python_formats() {
        assert_eq!(format_gib(80 << 30), "80.0");
        assert_eq!(format_gib((559 << 30) / 10), "55.9");
        // Python: round(5.625, 2) == 5.62 (ties to even on the exact value).
        assert_eq!(format_gib(6_039_797_760), "5.62");
        assert_eq!(format_gib(-(1 << 29)), "-0.5");
        assert_eq!(commas(457_760), "457,760");
        assert_eq!(commas(131_072), "131,072");
        assert_eq!(commas(999), "999");
        assert_eq!(commas(1_000_000), "1,000,000");
    }
}
