//! `serve`: vLLM 0.33.0's start-up memory plan for a model on a GPU
//! ([`crate::model::vllm_0_33`]), as the text vLLM's log prints, each term labelled with
//! where it comes from (computed, assumed or estimated).
use crate::model::vllm_0_33::{self as vllm, format_gib, ServeConfig, ServePlan};

/// A plan and what it was made for.
pub struct Serve {
    pub model_name: String,
    pub gpu: crate::record::gpu::Gpu,
    pub config: ServeConfig,
    pub plan: ServePlan,
}

/// Makes the plan; `Err(text)` is vLLM's own error when one request of max_model_len does not
/// fit (the text printed before it is still returned).
pub fn run(model_name: String, gpu: crate::record::gpu::Gpu, config: ServeConfig) -> (Serve, Option<String>) {
    let plan = vllm::plan(&config);
    let err = vllm::does_not_fit(&config, &plan);
    (Serve { model_name, gpu, config, plan }, err)
}

impl Serve {
    /// The plan's terms, then vLLM's three log lines (the last two only when the cache fits).
    pub fn text(&self, fits: bool) -> String {
        let (c, p) = (&self.config, &self.plan);
        let g = |b: u64| format!("{:>6} GiB {:>18} bytes", format_gib(b as i128), vllm::commas(b));
        let mut s = String::new();
        s += &format!(
            "vLLM {} start-up memory plan: {} on {}, --enforce-eager, max_model_len {}, max_num_batched_tokens {}, max_num_seqs {}, block_size {}\n",
            vllm::VLLM_VERSION,
            self.model_name,
            self.gpu.name,
            c.max_model_len,
            c.max_num_batched_tokens,
            c.max_num_seqs,
            c.block_size
        );
        s += &format!("  total GPU memory           {}  torch.cuda.mem_get_info's total ({} MiB; nvidia-smi shows {} MiB)\n", g(c.total_memory), c.total_memory >> 20, self.gpu.smi_mib);
        s += &format!("  requested memory           {}  ceil({} x total)\n", g(p.requested_memory), c.gpu_memory_utilization);
        s += "    (not checked here: vLLM stops unless the free memory at start-up, the total less the CUDA context and the\n     cuBLAS/NCCL buffers it makes first, is at least the requested memory; v1/worker/utils.py:761)\n";
        s += &format!("  - weights                  {}  parameters (vocabulary padded to 64) x {} bytes\n", g(p.weights), c.weight_bytes);
        s += &format!("  - activation peak          {}  estimate, not yet measured: profile run of {} tokens and the sampler\n", g(p.activation_peak), c.max_num_batched_tokens);
        s += &format!("  - non-torch memory growth  {}  assumed (vLLM measures it at start-up)\n", g(p.non_torch_increase));
        s += &format!("  - CUDA graph memory        {}  --enforce-eager\n", g(p.cudagraph_memory));
        s += &format!(
            "  {:<26}{:>11}{:>18} bytes  {} layers x {} tokens x {} kv heads x 2 x head_dim {} x {} bytes\n",
            "KV cache block",
            "",
            vllm::commas(p.bytes_per_block),
            c.model.num_layers,
            c.block_size,
            c.model.num_kv_heads,
            c.model.head_dim(),
            c.kv_bytes
        );
        s += &format!("Available KV cache memory: {} GiB\n", format_gib(p.available_kv_cache_memory));
        if fits {
            // One log line in vLLM (`v1/core/kv_cache_utils.py:1147-1154`).
            s += &format!(
                "GPU KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {:.2}x\n",
                vllm::commas(p.kv_cache_tokens),
                vllm::commas(c.max_model_len as u64),
                p.max_concurrency
            );
        }
        s
    }
}
