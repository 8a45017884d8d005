//! `serve`: vLLM 0.33.0's start-up memory plan for a model on a GPU
//! ([`crate::model::vllm_0_33`]), as the text vLLM's log prints, each term labelled with
//! where it comes from (computed, assumed or estimated).
use crate::model::vllm_0_33::{self as vllm, format_gib, ServeConfig, ServePlan};
use crate::model::vllm_hybrid as hybrid;
use crate::options::serve::{resolve, ServeArgs, ServeFind};

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

/// What `serve` answers: the plan at the lengths asked (or found), vLLM's error when it does
/// not start, and `--find`'s answer.
pub struct Outcome {
    pub serve: Serve,
    /// vLLM's error (its words) when it would not start: the weights do not fit the GPU, no
    /// request of max_model_len fits, or auto-fit finds not even one token.
    pub error: Option<String>,
    /// vLLM's auto-fit log line (`--find max-model-len`, `kv_cache_planning.py:1386-1410`).
    pub auto_fit: Option<String>,
    pub find: Option<(ServeFind, Option<u64>)>,
    /// How `--find` reached its answer, in words.
    pub find_note: Option<String>,
}

/// The error vLLM dies with before any plan when the weights alone exceed the GPU.
fn weights_error(s: &Serve) -> Option<String> {
    (s.plan.weights > s.config.total_memory).then(|| {
        format!(
            "the weights ({} GiB) are more than the GPU's memory ({} GiB): vLLM runs out of CUDA memory loading them, before any plan",
            format_gib(s.plan.weights as i128),
            format_gib(s.config.total_memory as i128)
        )
    })
}

fn plan_at(a: &ServeArgs) -> anyhow::Result<(Serve, Option<String>)> {
    let (name, gpu, config) = resolve(a)?;
    let (serve, err) = run(name, gpu, config);
    let err = weights_error(&serve).or(err);
    Ok((serve, err))
}

/// The plan, or `--find`'s search; usage errors are Err.
pub fn outcome(a: &ServeArgs) -> anyhow::Result<Outcome> {
    match a.find {
        None => {
            let (serve, error) = plan_at(a)?;
            Ok(Outcome { serve, error, auto_fit: None, find: None, find_note: None })
        }
        Some(ServeFind::MaxModelLen) => find_max_model_len(a),
        Some(ServeFind::MaxNumSeqs) => {
            if a.max_num_seqs.is_some() {
                return Err(crate::error::usage("--max-num-seqs", "is what --find max-num-seqs searches for; drop it"));
            }
            find_max_num_seqs(a)
        }
    }
}

/// vLLM's auto-fit: the plan at the derived (or given) max_model_len, then the longest length
/// whose request fits (`_auto_fit_max_model_len`, `kv_cache_planning.py:1337-1410`); the batch
/// defaults stay those of the length it started from, as vLLM sets them before it knows the fit
/// (`config/model.py:2639-2653`, `engine/arg_utils.py:3151-3231`).
fn find_max_model_len(a: &ServeArgs) -> anyhow::Result<Outcome> {
    // vLLM's error at the starting length is what auto-fit answers, so it is dropped here.
    let (mut serve, _) = plan_at(a)?;
    let upper = serve.config.max_model_len as u64;
    if let Some(e) = weights_error(&serve) {
        return Ok(Outcome { serve, error: Some(e), auto_fit: None, find: Some((ServeFind::MaxModelLen, None)), find_note: None });
    }
    match vllm::auto_fit_max_model_len(&serve.config, &serve.plan) {
        Err(e) => Ok(Outcome { serve, error: Some(e), auto_fit: None, find: Some((ServeFind::MaxModelLen, None)), find_note: None }),
        Ok(best) => {
            let check = serve.plan.available_kv_cache_memory - serve.plan.bytes_per_block as i128;
            let mem = format!("{} GiB GPU", format_gib(check));
            let line = if best >= upper {
                format!("Auto-fit max_model_len: full model context length {upper} fits in available KV cache memory ({mem})")
            } else {
                format!("Auto-fit max_model_len: reduced from {upper} to {best} to fit in available KV cache memory ({mem})")
            };
            serve.config.max_model_len = best as usize;
            serve.plan = vllm::plan(&serve.config);
            let note = format!(
                "the longest max_model_len (up to {upper}) for which one request fits: {best} (vLLM's binary search, as `vllm serve --max-model-len -1` runs it)"
            );
            Ok(Outcome { serve, error: None, auto_fit: Some(line), find: Some((ServeFind::MaxModelLen, Some(best))), find_note: Some(note) })
        }
    }
}

/// Whether `n` requests of max_model_len hold their blocks at once in the pool less the null
/// block (`BlockPool`, `v1/core/block_pool.py`), with vLLM starting at all.
fn all_fit(o: &(Serve, Option<String>)) -> bool {
    let (s, err) = o;
    let n = s.config.max_num_seqs as u64;
    err.is_none() && s.plan.num_blocks > 0 && n.saturating_mul(s.plan.blocks_per_request) < s.plan.num_blocks
}

/// The largest max_num_seqs for which [`all_fit`]: more sequences make the sampler's dummy
/// run larger (and the default token budget with them), so the cache shrinks as they grow.
fn find_max_num_seqs(a: &ServeArgs) -> anyhow::Result<Outcome> {
    let at = |n: usize| {
        let mut b = a.clone();
        b.max_num_seqs = Some(n);
        b.find = None;
        plan_at(&b)
    };
    // The first value's usage errors are the user's; later ones (max_num_seqs above the token
    // budget) end the search.
    let first = at(1)?;
    if !all_fit(&first) {
        let (serve, err) = first;
        let e = err.unwrap_or_else(|| {
            format!(
                "not even one request of {} tokens fits: it needs {} blocks and the cache has {} (one held back as the null block)",
                serve.config.max_model_len, serve.plan.blocks_per_request, serve.plan.num_blocks
            )
        });
        return Ok(Outcome { serve, error: Some(e), auto_fit: None, find: Some((ServeFind::MaxNumSeqs, None)), find_note: None });
    }
    let fits = |n: usize| at(n).ok().filter(all_fit);
    let (mut lo, mut best) = (1usize, first);
    let mut hi = 2usize;
    loop {
        match fits(hi) {
            Some(o) => {
                lo = hi;
                best = o;
                if hi >= 1 << 24 {
                    break;
                }
                hi *= 2;
            }
            None => break,
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match fits(mid) {
            Some(o) => {
                lo = mid;
                best = o;
            }
            None => hi = mid,
        }
    }
    let (serve, _) = best;
    let (p, n) = (&serve.plan, lo as u64);
    let note = format!(
        "the largest max_num_seqs for which that many requests of {} tokens hold their KV cache at once: {n} ({n} x {} blocks within the {} blocks less the null block; vLLM does not cap max_num_seqs by the cache, it queues what does not fit)",
        serve.config.max_model_len, p.blocks_per_request, p.num_blocks
    );
    Ok(Outcome { serve, error: None, auto_fit: None, find: Some((ServeFind::MaxNumSeqs, Some(n))), find_note: Some(note) })
}

impl Outcome {
    /// The plan's text; vLLM's error is not in it (the caller prints it).
    pub fn text(&self) -> String {
        let mut s = self.serve.text(self.error.is_none(), self.auto_fit.as_deref());
        if let Some(n) = &self.find_note {
            s += &format!("{n}\n");
        }
        s
    }

    /// The whole outcome as JSON (the Python API's dict).
    pub fn json(&self) -> serde_json::Value {
        let (c, p) = (&self.serve.config, &self.serve.plan);
        let fits = self.error.is_none();
        let mut log = vec![format!("Available KV cache memory: {} GiB", format_gib(p.available_kv_cache_memory))];
        if let Some(l) = &self.auto_fit {
            log.push(l.clone());
        }
        if fits {
            log.push(self.serve.size_line());
        }
        serde_json::json!({
            "vllm_version": vllm::VLLM_VERSION,
            "model": self.serve.model_name,
            "gpu": self.serve.gpu.name,
            "config": {
                "tensor_parallel_size": c.tensor_parallel_size,
                "gpu_memory_utilization": c.gpu_memory_utilization,
                "max_model_len": c.max_model_len,
                "max_num_seqs": c.max_num_seqs,
                "max_num_batched_tokens": c.max_num_batched_tokens,
                "block_size": c.block_size,
                "weight_bytes_per_element": c.weight_bytes,
                "kv_cache_bytes_per_element": c.kv_bytes,
                "total_gpu_memory": c.total_memory,
                "enforce_eager": true,
            },
            "plan": p,
            "fits": fits,
            "error": self.error,
            "log": log,
            "find": self.find.map(|(q, n)| serde_json::json!({"question": q, "answer": n, "note": self.find_note})),
        })
    }
}

impl Serve {
    /// vLLM's capacity log line (`v1/core/kv_cache_utils.py:1147-1154`).
    pub fn size_line(&self) -> String {
        format!(
            "GPU KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {:.2}x",
            vllm::commas(self.plan.kv_cache_tokens),
            vllm::commas(self.config.max_model_len as u64),
            self.plan.max_concurrency
        )
    }

    /// The plan's terms, then vLLM's log lines (the capacity line only when the cache fits;
    /// auto-fit's between them, as vLLM logs it).
    pub fn text(&self, fits: bool, auto_fit: Option<&str>) -> String {
        let (c, p) = (&self.config, &self.plan);
        let g = |b: u64| format!("{:>6} GiB {:>18} bytes", format_gib(b as i128), vllm::commas(b));
        let mut s = String::new();
        let tp = if c.tensor_parallel_size > 1 { format!(", tensor_parallel_size {} (one rank's plan; every rank's is the same)", c.tensor_parallel_size) } else { String::new() };
        s += &format!(
            "vLLM {} start-up memory plan: {} on {}, --enforce-eager, max_model_len {}, max_num_batched_tokens {}, max_num_seqs {}, block_size {}{tp}\n",
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
        let noaux = crate::model::vllm_mla::parts(&c.model).is_some_and(|(_, d)| d.noaux_tc);
        let bias = if noaux { ", the routers' e_score_correction_bias x 4" } else { "" };
        if let Some((moe, _)) = crate::model::vllm_gpt_oss::parts(&c.model) {
            let shard = if c.tensor_parallel_size > 1 { format!("one rank's shard ({} ways, the experts' intermediate {} per rank): ", c.tensor_parallel_size, crate::model::vllm_gpt_oss::intermediate_per_rank(moe, c.tensor_parallel_size)) } else { String::new() };
            s += &format!(
                "  - weights                  {}  {shard}bf16 attention (with sinks), routers, embeddings and lm_head; MXFP4 experts as the OAI Triton kernels re-lay them out on SM 9.0 \
                 (derived from triton_kernels' source, unmeasured on a card)\n",
                g(p.weights)
            );
        } else if c.tensor_parallel_size > 1 {
            s += &format!("  - weights                  {}  one rank's shard (vocabulary padded to 64, split {} ways) x {} bytes{bias}\n", g(p.weights), c.tensor_parallel_size, c.weight_bytes);
        } else {
            s += &format!("  - weights                  {}  parameters (vocabulary padded to 64) x {} bytes{bias}\n", g(p.weights), c.weight_bytes);
        }
        let moe = if crate::model::vllm_gpt_oss::parts(&c.model).is_some() {
            " (the OAI Triton experts' buffers)"
        } else if crate::model::vllm_mla::parts(&c.model).is_some() {
            " (the larger of the latent attention's prefill, a dense MLP and a MoE layer)"
        } else if c.model.hf().is_some_and(|h| h.moe.is_some()) {
            " (the experts' Triton workspaces)"
        } else {
            ""
        };
        s += &format!("  - activation peak          {}  estimate, not yet measured: profile run of {} tokens{moe} and the sampler\n", g(p.activation_peak), c.max_num_batched_tokens);
        s += &format!("  - non-torch memory growth  {}  assumed (vLLM measures it at start-up)\n", g(p.non_torch_increase));
        s += &format!("  - CUDA graph memory        {}  --enforce-eager\n", g(p.cudagraph_memory));
        if let Some((_, dp)) = crate::model::vllm_mla::parts(&c.model) {
            s += &format!(
                "  {:<26}{:>11}{:>18} bytes  {} layers x {} tokens x one latent head (kv_lora_rank {} + qk_rope_head_dim {}, whole on every rank) x {} bytes\n",
                "KV cache block",
                "",
                vllm::commas(p.bytes_per_block),
                c.model.num_layers,
                c.block_size,
                dp.kv_lora_rank,
                dp.qk_rope_head_dim,
                c.kv_bytes
            );
        } else {
            let heads = if c.tensor_parallel_size > 1 { format!("{} kv heads per rank", p.num_kv_heads_per_rank) } else { format!("{} kv heads", p.num_kv_heads_per_rank) };
            let hybrid = hybrid::is_hybrid(&c.model);
            let layers = if hybrid { format!("{} layers (the largest KV cache group's)", hybrid::layers_per_block(&c.model)) } else { format!("{} layers", c.model.num_layers) };
            s += &format!(
                "  {:<26}{:>11}{:>18} bytes  {layers} x {} tokens x {heads} x 2 x head_dim {} x {} bytes\n",
                "KV cache block",
                "",
                vllm::commas(p.bytes_per_block),
                c.block_size,
                c.model.head_dim(),
                c.kv_bytes
            );
            if hybrid {
                s += &format!("  {:<26}{:>29}  {}\n", "KV cache groups", hybrid::kv_cache_groups(&c.model).len(), p.kv_cache_spec);
                s += &format!("  {:<26}{:>29}  {}\n", "KV blocks per request", vllm::commas(p.blocks_per_request), hybrid::blocks_formula(c));
            }
        }
        if let vllm::KvSpec::SlidingWindow { window } = c.kv_spec() {
            s += &format!(
                "  {:<26}{:>29}  every layer's SlidingWindowSpec: cdiv(min({window} - 1 + 2 x {} in-flight tokens, {}), {}) + 1\n",
                "KV blocks per request",
                vllm::commas(p.blocks_per_request),
                c.max_num_batched_tokens,
                c.max_model_len,
                c.block_size
            );
        }
        s += &format!("Available KV cache memory: {} GiB\n", format_gib(p.available_kv_cache_memory));
        if let Some(l) = auto_fit {
            s += &format!("{l}\n");
        }
        if fits {
            s += &self.size_line();
            s.push('\n');
        }
        s
    }
}
