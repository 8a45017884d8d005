//! The KV cache of transformers 5.23's greedy `generate()` in closed form (the op sequence is
//! src/model/hf/generation_5_23.rs over transformers_5_23.rs's forward): the `DynamicCache`
//! holds, per layer, keys and values of (B, kv heads, positions, head_dim) in the weights'
//! dtype (DeepSeek-V3: MLA's latent and k_rot, [`layers`]). The prefill writes the prompt's S
//! positions; each of the N − 1 decode steps appends the token the step before chose (the
//! last token generate returns is never fed back), so the cache ends with S + N − 1 positions.
//!
//! `DynamicLayer.update` grows a layer by `torch.cat([keys, new], dim=-2)`: while the cat runs
//! the old keys and the new ones both live, so the cache's own high-water mark is the end
//! size plus one layer's keys (or values) at S + N − 2 positions, reached in the last decode
//! step. A sliding layer (a config's `sliding_window`, Gemma's and gpt-oss's
//! `sliding_attention` layers) is a `DynamicSlidingWindowLayer` instead: its update cats the
//! keys, then the values, and lets the old ones go only after both (so its old keys and
//! values both stand beside the new), and it holds a 0-d int64 window tensor from its first
//! update on. The same for every model type: the forward's own tensors differ, not the cache's.
use crate::model::{ConfigError, ModelConfig};
use serde::Serialize;

/// The closed form at (B, S, N), bytes (requested: the tensors' own).
#[derive(Clone, Debug, Serialize)]
pub struct GenerateEstimate {
    /// 2 (keys, values) × layers × kv heads × head_dim × the element's bytes: one position of
    /// one sequence.
    pub kv_bytes_per_token: u64,
    /// After the prefill: B × S positions.
    pub kv_cache_prefill_bytes: u64,
    /// When generate returns: B × (S + N − 1) positions.
    pub kv_cache_bytes: u64,
    /// The cache's high-water mark: the end size plus the old states beside the new ones in
    /// the last step's largest cat (N ≥ 2; the prefill's first cats copy, N = 1): a layer's old
    /// values (or keys), a sliding layer's old keys and values; and the sliding layers' 8-byte
    /// window tensors.
    pub kv_cache_peak_bytes: u64,
    /// The formulas, for the printout.
    pub formulas: Vec<(String, String, u64)>,
}

/// What one layer of the DynamicCache holds per position of one row, in elements: its keys'
/// and its values, and whether it is a `DynamicSlidingWindowLayer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLayer {
    pub keys: u64,
    pub values: u64,
    pub sliding: bool,
}

/// The window a sliding layer keeps (`cache_window` of transformers_5_23.rs): Gemma's and
/// gpt-oss's `sliding_window` of their `sliding_attention` layers, else the config's.
pub fn window(cfg: &ModelConfig) -> Option<usize> {
    let hf = cfg.hf()?;
    match (&hf.gemma, hf.moe.as_ref().and_then(|m| m.gpt_oss.as_ref())) {
        (Some(g), _) => Some(g.sliding_window),
        (None, Some(g)) => Some(g.window),
        (None, None) => hf.sliding_window,
    }
}

/// The cache's layers, as transformers 5.23's `DynamicCache(config=...)` builds them
/// (`layer_types`: Gemma's and gpt-oss's alternate sliding and full layers, a config's
/// `sliding_window` slides every layer or the ones `max_window_layers` says). A layer caches
/// (B, kv heads, positions, head_dim) keys and values; DeepSeek-V3's
/// `DeepseekV3Attention` caches multi-head latent attention's compressed latent after
/// `kv_a_layernorm` (B, 1, positions, kv_lora_rank) as the keys and the roped `k_rot`
/// (B, 1, positions, qk_rope_head_dim) as the values (kv_b_proj expands them every forward).
pub fn layers(cfg: &ModelConfig) -> Vec<CacheLayer> {
    let hf = cfg.hf().expect("checked: an hf model");
    let moe = hf.moe.as_ref();
    (0..cfg.num_layers)
        .map(|i| {
            let sliding = match (&hf.gemma, moe.and_then(|m| m.gpt_oss.as_ref())) {
                (Some(g), _) => g.sliding[i],
                (None, Some(g)) => g.is_sliding(i),
                (None, None) => hf.sliding_layers.as_ref().map_or(hf.sliding_window.is_some(), |s| s[i]),
            };
            match moe.and_then(|m| m.deepseek.as_ref()) {
                Some(ds) => CacheLayer { keys: ds.kv_lora_rank as u64, values: ds.qk_rope_head_dim as u64, sliding },
                None => {
                    let width = (cfg.num_kv_heads * hf.head_dim) as u64;
                    CacheLayer { keys: width, values: width, sliding }
                }
            }
        })
        .collect()
}

/// Refuses what this closed form (and the modelled cache) does not state honestly: a sliding
/// window the prompt and new tokens pass. transformers 5.23's `DynamicCache(config=...)` gives
/// such a layer a `DynamicSlidingWindowLayer` that keeps the last window − 1 positions, which
/// the closed form does not derive (the op-for-op run does).
pub fn check(cfg: &ModelConfig, s: usize, n: usize) -> Result<(), ConfigError> {
    if cfg.hf().is_none() {
        return Err(ConfigError::new("--profile-type", format!("generate runs Hugging Face transformers' generate(): it needs an hf model, not the {} flavour", cfg.flavour)));
    }
    if let Some(w) = window(cfg).filter(|&w| s + n > w && layers(cfg).iter().any(|l| l.sliding)) {
        return Err(ConfigError::new(
            "--max-new-tokens",
            format!("the prompt and the new tokens ({}) pass the model's sliding window ({w}): transformers 5.23 then keeps a DynamicSlidingWindowLayer (the last {} positions), which the closed form does not derive; `vramscope profile --profile-type generate` runs it op for op", s + n, w - 1),
        ));
    }
    Ok(())
}

/// The closed form; `elem` is the weights' element size (the cache takes the projections'
/// dtype). Checked arithmetic: the caller's sizes passed `check_sizes`, so an overflow is a bug.
pub fn estimate(cfg: &ModelConfig, elem: u64, b: usize, s: usize, n: usize) -> GenerateEstimate {
    assert!(n >= 1 && s >= 1, "generate needs a prompt and at least one new token");
    let mul = |xs: &[u64]| xs.iter().try_fold(1u64, |a, &x| a.checked_mul(x)).expect("sizes checked before the estimate");
    let add = |a: u64, b: u64| a.checked_add(b).expect("sizes checked before the estimate");
    let layers = layers(cfg);
    let b64 = b as u64;
    let end_positions = (s + n - 1) as u64;
    let width: u64 = layers.iter().map(|l| l.keys + l.values).sum();
    let per_token = mul(&[width, elem]);
    let prefill = mul(&[per_token, b64, s as u64]);
    let end = mul(&[per_token, b64, end_positions]);
    let windows = mul(&[layers.iter().filter(|l| l.sliding).count() as u64, 8]);
    // The last step's updates, layer by layer (N ≥ 2; the prefill's first cats only copy, so
    // the cache ends at its high-water mark when N = 1). Before layer i's update the layers
    // from i on hold one position less. A DynamicLayer cats the keys (the old ones beside the
    // new), frees the old keys, then cats the values; a DynamicSlidingWindowLayer frees its
    // old keys and values only after both cats.
    let mut peak = add(end, windows);
    if n >= 2 {
        let row = |elements: u64, positions: u64| mul(&[b64, elements, positions, elem]);
        let mut level = add(mul(&[per_token, b64, end_positions - 1]), windows);
        for l in &layers {
            let keys_cat = add(level, row(l.keys, end_positions));
            let after_keys = if l.sliding { keys_cat } else { keys_cat - row(l.keys, end_positions - 1) };
            let values_cat = add(after_keys, row(l.values, end_positions));
            peak = peak.max(keys_cat).max(values_cat);
            level = values_cat - row(l.values, end_positions - 1) - if l.sliding { row(l.keys, end_positions - 1) } else { 0 };
        }
        debug_assert_eq!(level, add(end, windows));
    }
    let sliding = layers.iter().filter(|l| l.sliding).count();
    let deepseek = cfg.hf().and_then(|h| h.moe.as_ref()).is_some_and(|m| m.deepseek.is_some());
    let per_position = if deepseek {
        "layers × (kv_lora_rank + qk_rope_head_dim) × bytes (MLA's latent and k_rot)"
    } else {
        "2 × layers × kv_heads × head_dim × bytes"
    };
    let high_water = match sliding {
        0 => "end + the last step's largest cat: a layer's old keys (or values) at S + N − 2 positions beside the grown ones (N ≥ 2)",
        _ if sliding == layers.len() => "end + the last step's largest cat: a layer's old keys and values at S + N − 2 positions (DynamicSlidingWindowLayer frees them after both cats; N ≥ 2) + layers × 8 (window tensors)",
        _ => "end + the last step's largest cat, layer by layer: a full layer's old keys (or values), a sliding layer's old keys and values, at S + N − 2 positions (N ≥ 2) + sliding layers × 8 (window tensors)",
    };
    let formulas = vec![
        ("KV bytes per position".to_string(), per_position.to_string(), per_token),
        ("DynamicCache after the prefill".to_string(), "per position × B × S".to_string(), prefill),
        ("DynamicCache at the end".to_string(), "per position × B × (S + N − 1)".to_string(), end),
        ("DynamicCache high-water (last cat)".to_string(), high_water.to_string(), peak),
    ];
    GenerateEstimate { kv_bytes_per_token: per_token, kv_cache_prefill_bytes: prefill, kv_cache_bytes: end, kv_cache_peak_bytes: peak, formulas }
}
