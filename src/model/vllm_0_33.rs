//! vLLM 0.33.0's start-up memory plan (V1 engine, one GPU, `--enforce-eager`): what
//! `Worker.determine_available_memory` leaves for the KV cache and how
//! `kv_cache_planning.get_kv_cache_configs` cuts it into blocks. Every term names the file and
//! line of the vllm-0.33.0 wheel (`vllm/…`) it comes from.
//!
//! - requested memory = ceil(total_memory × gpu_memory_utilization)
//!   (`v1/worker/utils.py:724`; total from `torch.accelerator.get_memory_info`,
//!   `utils/mem_utils.py:143`). vramscope has no GPU: it takes the total nvidia-smi reports
//!   (`record::gpu`), which is what `cudaMemGetInfo` returns as total.
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
//! - KV cache: one `FullAttentionSpec` per layer (`model_executor/layers/attention/attention.py:675-682`;
//!   a sliding window makes other specs, refused), dtype the model's for `auto` and uint8 for
//!   fp8 (`utils/torch_utils.py:420`), page = block_size × num_kv_heads ×
//!   (head_size + head_size_v) × dtype bytes (`v1/kv_cache_interface.py:594`, `:590`); one group,
//!   bytes per block = the sum of the layers' pages (`v1/core/kv_cache_planning.py:574-605`: no padding for FlashAttention's
//!   multiple-of-16 blocks, `v1/kv_cache_interface.py:224-234`);
//!   num_blocks = available // bytes_per_block (`kv_cache_planning.py:1572`).
//! - The fit check plans against available − one block (the null block,
//!   `kv_cache_planning.py:1536-1541`): it needs cdiv(max_model_len, block_size) blocks
//!   (`kv_cache_interface.py:648`), else vLLM's ValueError (`kv_cache_planning.py:77`) with the
//!   longest length that fits (binary search, `kv_cache_planning.py:97`).
//! - Maximum concurrency = num_blocks / cdiv(max_model_len, block_size)
//!   (`v1/core/kv_cache_utils.py:1061-1093`); GPU KV cache size = int(concurrency × max_model_len)
//!   tokens (`kv_cache_utils.py:1128`), logged with `:,` and `%.2fx`
//!   (`kv_cache_utils.py:1147-1154`). GiB figures print as `round(b / 2**30, 2)`
//!   (`format_gib`, `utils/mem_utils.py:30`).
use crate::model::ModelConfig;

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

/// Weights as vLLM loads them: the parameters with the vocabulary padded to a multiple of 64
/// (embedding, and an untied LM head), times the element size.
pub fn weight_bytes(m: &ModelConfig, elem: usize) -> u64 {
    let padded = m.vocab_size.div_ceil(VOCAB_PADDING) * VOCAB_PADDING;
    let extra_rows = (padded - m.vocab_size) as u64 * if m.tied_embeddings { 1 } else { 2 };
    (m.param_count() + extra_rows * m.d_model as u64) * elem as u64
}

/// The activation peak of `profile_run`, an estimate read off vLLM's code, not yet measured
/// against vLLM (eager, as `--enforce-eager` runs it; the attention backend's buffers are left out):
/// the larger of
/// - the forward's MLP of one layer over T = max_num_batched_tokens tokens
///   (`model_executor/models/llama.py:317-324` `LlamaDecoderLayer.forward`, `:119-121` `LlamaMLP.forward`): the
///   residual and the normed hidden states (T × hidden each), gate_up_proj's output
///   (T × 2·intermediate) and SiluAndMul's (T × intermediate), in the weights' dtype;
/// - the sampler (`_dummy_sampler_run`, `v1/worker/gpu_model_runner.py:5866`) over
///   R = min(max_num_seqs, T) rows (`gpu_model_runner.py:5545`) of V (the padded vocabulary), while the forward's hidden
///   states (T × hidden) are still held (`gpu_model_runner.py:6132-6143`): the last hidden
///   states and their `rand_like` (R × hidden each), compute_logits' R × V in the weights'
///   dtype, their float32 copy (`v1/sample/sampler.py:158`), softmax's float32 probabilities
///   and the exponential noise `q` (`v1/sample/ops/topk_topp_sampler.py:309`, `:594`); top-k/top-p
///   (triton) and `probs.div_(q)` (`:599`) work in place.
pub fn activation_peak_estimate(c: &ServeConfig) -> u64 {
    let m = &c.model;
    let t = c.max_num_batched_tokens as u64;
    let b = c.weight_bytes as u64;
    let (d, f) = (m.d_model as u64, m.d_ff as u64);
    let forward = t * b * (2 * d + 3 * f);
    let r = c.max_num_seqs.min(c.max_num_batched_tokens) as u64;
    let v = (m.vocab_size.div_ceil(VOCAB_PADDING) * VOCAB_PADDING) as u64;
    let sampler = t * d * b + 2 * r * d * b + r * v * (b + 4 + 4 + 4);
    forward.max(sampler)
}

/// KV cache bytes of one layer's page: block_size × kv heads × (head_size + head_size_v) × bytes.
pub fn page_bytes(c: &ServeConfig) -> u64 {
    let m = &c.model;
    (c.block_size * m.num_kv_heads * 2 * m.head_dim() * c.kv_bytes) as u64
}

/// The whole plan.
pub fn plan(c: &ServeConfig) -> ServePlan {
    let requested_memory = (c.total_memory as f64 * c.gpu_memory_utilization).ceil() as u64;
    let weights = weight_bytes(&c.model, c.weight_bytes);
    let activation_peak = activation_peak_estimate(c);
    let non_torch_increase = NON_TORCH_INCREASE_BYTES;
    let cudagraph_memory = 0;
    let available = requested_memory as i128 - (weights + non_torch_increase + activation_peak) as i128 - cudagraph_memory as i128;
    let page = page_bytes(c);
    let bytes_per_block = page * c.model.num_layers as u64;
    let num_blocks = if available > 0 { available as u64 / bytes_per_block } else { 0 };
    let blocks_per_request = cdiv(c.max_model_len as u64, c.block_size as u64);
    let max_concurrency = num_blocks as f64 / blocks_per_request as f64;
    let kv_cache_tokens = (max_concurrency * c.max_model_len as f64) as u64;
    ServePlan {
        requested_memory,
        weights,
        activation_peak,
        non_torch_increase,
        cudagraph_memory,
        available_kv_cache_memory: available,
        page_bytes_per_layer: page,
        bytes_per_block,
        num_blocks,
        blocks_per_request,
        kv_cache_tokens,
        max_concurrency,
    }
}

/// `format_gib`: `f"{round(b / GiB, 2)}"`, as Python prints the float (`80.0`, `55.9`).
pub fn format_gib(b: i128) -> String {
    let r = (b as f64 / GIB * 100.0).round() / 100.0;
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
    let needed = |len: u64| cdiv(len, c.block_size as u64) as i128 * p.bytes_per_block as i128;
    let need = needed(c.max_model_len as u64);
    if need <= check {
        return None;
    }
    // estimate_max_model_len: the longest length in [1, max_model_len] whose need fits.
    let (mut lo, mut hi, mut best) = (1u64, c.max_model_len as u64, 0u64);
    if needed(1) <= check {
        while lo <= hi {
            let mid = (lo + hi) / 2;
            if needed(mid) <= check {
                best = mid;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
    }
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
        assert_eq!(commas(457_760), "457,760");
        assert_eq!(commas(131_072), "131,072");
        assert_eq!(commas(999), "999");
        assert_eq!(commas(1_000_000), "1,000,000");
    }
}
