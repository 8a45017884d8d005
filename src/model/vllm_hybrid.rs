//! vLLM 0.33.0's start-up plan for the hybrid-attention models, whose sliding and full layers
//! make several KV cache groups: Gemma 2 (`model_executor/models/gemma2.py`) and Gemma 3's
//! text model (`gemma3.py`). The rest of the plan is [`super::vllm_0_33`]'s; this file holds
//! what differs, each term with its vLLM file and line.
//!
//! - Layers: `layer_types` as transformers derives them; a `sliding_attention` layer's
//!   `Attention` gets `per_layer_sliding_window = sliding_window` (`gemma2.py:155-166`,
//!   `gemma3.py:153-185`), so its spec is a `SlidingWindowSpec`, the others'
//!   `FullAttentionSpec` (`model_executor/layers/attention/attention.py:624-690`). On
//!   FlashAttention (`MultipleOf(16)` kernel blocks, `v1/attention/backends/flash_attn.py:367`)
//!   `_largest_kernel_block_within` gives the sliding layers `--block-size` too
//!   (`attention.py:101-130`), so every layer has the same page.
//! - The hybrid KV cache manager is on (CUDA supports it and nothing turns it off,
//!   `config/vllm.py:2228-2294`), so the layers are grouped by
//!   `_get_kv_cache_groups_uniform_page_size` (`v1/core/kv_cache_planning.py:416-556`):
//!   one bucket per spec (sliding, full), the group size the smaller bucket's layer count (the
//!   larger one's when it is under 1.5 times that), and each bucket cut into
//!   cdiv(len, group size) groups of `layers[i::n]` ([`kv_cache_groups`]).
//! - The groups share one pool: a block is the largest group's layers' pages
//!   (`_get_kv_cache_bytes_per_block`, `kv_cache_planning.py:574-605`; the smaller groups'
//!   shortfall is the "padding layers" vLLM warns of), num_blocks = available // that.
//! - A request holds, in every group, the blocks of its group's spec: cdiv(len, block_size) for
//!   a full group and cdiv(min(W − 1 + max_in_flight_tokens, len), block_size) + 1 for a
//!   sliding one (`SlidingWindowSpec.max_admission_blocks_per_request`,
//!   `v1/kv_cache_interface.py:919-944`); the per-request total is the sum over groups
//!   (`_max_memory_usage_bytes_from_groups`, `kv_cache_planning.py:1253-1285`;
//!   `get_max_concurrency_for_kv_cache_config`, `v1/core/kv_cache_utils.py:1061-1093`). When
//!   the window reaches past max_model_len nothing is dropped: a sliding group then holds one
//!   block more than a full one (the +1 for a window not starting on a block boundary).
//! - Weights: [`layer_extra_elements`] and [`head_tied`].
//! - The profile run: Gemma's MLP (`GeluAndMul` over gate_up_proj) has llama's shapes, so
//!   [`super::vllm_0_33::activation_peak_estimate`] applies unchanged, an estimate as it is
//!   for llama: the pre- and post-feedforward norms write their outputs over the same T ×
//!   hidden tensors the formula counts (`gemma3.py:264-275`), and the final logit soft-cap
//!   (`model_executor/layers/logits_processor.py:222`, tanh(logits / cap) × cap) holds at most
//!   three R × V tensors in the weights' dtype, below the sampler's float32 copies counted there.
use super::hf::Arch;
use super::vllm_0_33::ServeConfig;
use super::ModelConfig;

/// Whether vLLM gives this model sliding and full layers in one run (several KV cache groups):
/// Gemma 2/3 and gpt-oss ([`super::vllm_gpt_oss`]).
pub fn is_hybrid(m: &ModelConfig) -> bool {
    m.hf().is_some_and(|h| h.model_type.is_gemma()) || super::vllm_gpt_oss::parts(m).is_some()
}

/// Per layer, its sliding window (None: full attention); None for a model that is not hybrid.
pub fn layer_windows(m: &ModelConfig) -> Option<Vec<Option<usize>>> {
    if let Some((_, p)) = super::vllm_gpt_oss::parts(m) {
        return Some(super::vllm_gpt_oss::layer_windows(m, p));
    }
    let g = m.hf()?.gemma.as_ref()?;
    Some(g.sliding.iter().map(|&s| s.then_some(g.sliding_window)).collect())
}

/// One KV cache group: its layers (by index, in vLLM's order) and their window (None: full).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvGroup {
    pub window: Option<usize>,
    pub layers: Vec<usize>,
}

/// `get_kv_cache_groups` for layers whose pages are all alike (`kv_cache_planning.py:1113-1200`):
/// one group when every layer has the same spec, else `_get_kv_cache_groups_uniform_page_size`
/// (`:416-556`). Buckets come in the order of their first layer (a dict keyed by spec); a
/// sliding and a full spec never merge into one bucket.
pub fn kv_cache_groups(m: &ModelConfig) -> Vec<KvGroup> {
    let windows = layer_windows(m).unwrap_or_else(|| vec![None; m.num_layers]);
    let mut buckets: Vec<(Option<usize>, Vec<usize>)> = Vec::new();
    for (i, w) in windows.iter().enumerate() {
        match buckets.iter_mut().find(|(bw, _)| bw == w) {
            Some((_, layers)) => layers.push(i),
            None => buckets.push((*w, vec![i])),
        }
    }
    if buckets.len() == 1 {
        let (window, layers) = buckets.pop().expect("one bucket");
        return vec![KvGroup { window, layers }];
    }
    let min = buckets.iter().map(|(_, l)| l.len()).min().unwrap_or(1);
    let max = buckets.iter().map(|(_, l)| l.len()).max().unwrap_or(1);
    // `max_num_layers < min_num_layers * 1.5` (kv_cache_planning.py:513).
    let group_size = if (max as f64) < min as f64 * 1.5 { max } else { min };
    let mut groups = Vec::new();
    for (window, layers) in buckets {
        let n = layers.len().div_ceil(group_size);
        for i in 0..n {
            groups.push(KvGroup { window, layers: layers.iter().copied().skip(i).step_by(n).collect() });
        }
    }
    groups
}

/// Blocks one request of `len` tokens holds in one group of the given window.
pub fn group_blocks(c: &ServeConfig, window: Option<usize>, len: u64) -> u64 {
    let bs = c.block_size as u64;
    match window {
        None => len.div_ceil(bs),
        Some(w) => ((w as u64 - 1).saturating_add(c.max_in_flight_tokens()).min(len)).div_ceil(bs) + 1,
    }
}

/// Blocks one request of `len` tokens holds over all groups.
pub fn blocks_per_request(c: &ServeConfig, len: u64) -> u64 {
    kv_cache_groups(&c.model).iter().map(|g| group_blocks(c, g.window, len)).sum()
}

/// How [`blocks_per_request`] adds up at max_model_len, in words:
/// "6 sliding groups x (cdiv(min(1024 - 1 + 2 x 8192 in-flight tokens, 131072), 16) + 1) + 1 full group x cdiv(131072, 16)".
pub fn blocks_formula(c: &ServeConfig) -> String {
    let groups = kv_cache_groups(&c.model);
    let (len, bs) = (c.max_model_len, c.block_size);
    let sliding: Vec<usize> = groups.iter().filter_map(|g| g.window).collect();
    let full = groups.iter().filter(|g| g.window.is_none()).count();
    let mut parts = Vec::new();
    if let Some(&w) = sliding.first() {
        let n = sliding.len();
        parts.push(format!(
            "{n} sliding group{} x (cdiv(min({w} - 1 + 2 x {} in-flight tokens, {len}), {bs}) + 1)",
            if n == 1 { "" } else { "s" },
            c.max_num_batched_tokens
        ));
    }
    if full > 0 {
        parts.push(format!("{full} full group{} x cdiv({len}, {bs})", if full == 1 { "" } else { "s" }));
    }
    parts.join(" + ")
}

/// Layers whose pages make one block of the shared pool: the largest group's.
pub fn layers_per_block(m: &ModelConfig) -> usize {
    kv_cache_groups(m).iter().map(|g| g.layers.len()).max().unwrap_or(0)
}

/// The groups in words: "6 x SlidingWindowSpec(sliding_window=1024) (9, 9, 9, 9, 8, 8 layers), 1 x FullAttentionSpec (10 layers)".
pub fn describe_groups(m: &ModelConfig) -> String {
    let groups = kv_cache_groups(m);
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < groups.len() {
        let w = groups[i].window;
        let same: Vec<&KvGroup> = groups[i..].iter().take_while(|g| g.window == w).collect();
        let spec = match w {
            Some(w) => format!("SlidingWindowSpec(sliding_window={w})"),
            None => "FullAttentionSpec".to_string(),
        };
        let sizes: Vec<String> = same.iter().map(|g| g.layers.len().to_string()).collect();
        parts.push(format!("{} x {spec} ({} layers)", same.len(), sizes.join(", ")));
        i += same.len();
    }
    parts.join(", ")
}

/// Elements a hybrid model's decoder layer has beyond llama's on one rank: Gemma's four
/// `GemmaRMSNorm`s of hidden (`gemma2.py:213-223`, `gemma3.py:240-250`) where llama has two,
/// and Gemma 3's q_norm and k_norm over head_dim (`gemma3.py:148-149`).
pub fn layer_extra_elements(m: &ModelConfig) -> u64 {
    match m.hf().map(|h| h.model_type) {
        Some(Arch::Gemma2) => 2 * m.d_model as u64,
        Some(Arch::Gemma3Text) => 2 * m.d_model as u64 + 2 * m.head_dim() as u64,
        _ => 0,
    }
}

/// Whether the logits come from the embedding: Gemma 2 has no lm_head at all, whatever
/// tie_word_embeddings says (`compute_logits` uses embed_tokens, `gemma2.py:374`); Gemma 3
/// ties its `ParallelLMHead` when tie_word_embeddings is set (`gemma3.py:393-399`).
pub fn head_tied(m: &ModelConfig) -> bool {
    m.tied_embeddings || m.hf().is_some_and(|h| h.model_type == Arch::Gemma2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{presets, Flavour};

    fn model(name: &str) -> ModelConfig {
        presets::find(name, Some(Flavour::Hf)).unwrap().model
    }

    #[test]
    fn gemma_groups() {
        // Gemma 3 27B: 52 sliding layers, 10 full: group size 10, six sliding groups.
        let g = kv_cache_groups(&model("Gemma-3-27B"));
        let sizes: Vec<usize> = g.iter().map(|g| g.layers.len()).collect();
        assert_eq!(sizes, [9, 9, 9, 9, 8, 8, 10]);
        assert_eq!(g[0].layers[..3], [0, 7, 14]);
        assert_eq!(g[6].window, None);
        // Gemma 2 9B: 21 and 21, one group each.
        let g = kv_cache_groups(&model("Gemma-2-9B"));
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].window, Some(4096));
        assert_eq!(layers_per_block(&model("Gemma-2-9B")), 21);
    }
}
