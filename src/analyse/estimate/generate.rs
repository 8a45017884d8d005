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
//! `sliding_attention` layers, Qwen2-MoE's below max_window_layers) is a
//! `DynamicSlidingWindowLayer` instead: its update cats the keys, then the values, and lets the
//! old ones go only after both (so its old keys and values both stand beside the new), it keeps
//! a view of the last window − 1 positions of each cat (which holds the cat's whole storage:
//! min(S + step, w) positions once the prompt and new tokens pass the window, [`layer_positions`]),
//! and it holds a 0-d int64 window tensor from its first update on. The same for every model
//! type: the forward's own tensors differ, not the cache's.
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

/// Refuses what this closed form does not state: a model of another flavour.
pub fn check(cfg: &ModelConfig, _s: usize, _n: usize) -> Result<(), ConfigError> {
    if cfg.hf().is_none() {
        return Err(ConfigError::new("--profile-type", format!("generate runs Hugging Face transformers' generate(): it needs an hf model, not the {} flavour", cfg.flavour)));
    }
    Ok(())
}

/// Whether the prompt and the new tokens pass a sliding layer's window (its cache then holds
/// fewer positions than a full layer's).
pub fn past_window(cfg: &ModelConfig, s: usize, n: usize) -> bool {
    window(cfg).is_some_and(|w| s + n > w && layers(cfg).iter().any(|l| l.sliding))
}

/// The positions a layer's keys (and values) hold after decode step `step` (0: the prefill): a
/// `DynamicSlidingWindowLayer` (window w ≥ 2) keeps the last w − 1.
pub fn layer_held(l: &CacheLayer, w: Option<usize>, s: u64, step: u64) -> u64 {
    match w.filter(|&w| l.sliding && w >= 2) {
        Some(w) => (s + step).min(w as u64 - 1),
        None => s + step,
    }
}

/// The positions a layer's keys (and values) storage holds after decode step `step` (0: the
/// prefill). A full layer grows by one a step. A `DynamicSlidingWindowLayer` (window w ≥ 2)
/// keeps `full[:, :, -w + 1:]` of each update's `cat([keys, new])`, a view that holds the cat's
/// whole storage: the prompt's S after the prefill, then min(kept, w − 1) + 1 = min(S + step, w).
pub fn layer_positions(l: &CacheLayer, w: Option<usize>, s: u64, step: u64) -> u64 {
    match w.filter(|&w| l.sliding && w >= 2 && step >= 1) {
        Some(w) => (s + step).min(w as u64),
        None => s + step,
    }
}

/// The closed form; `elem` is the weights' element size (the cache takes the projections'
/// dtype). Checked arithmetic: the caller's sizes passed `check_sizes`, so an overflow is a bug.
pub fn estimate(cfg: &ModelConfig, elem: u64, b: usize, s: usize, n: usize) -> GenerateEstimate {
    assert!(n >= 1 && s >= 1, "generate needs a prompt and at least one new token");
    let mul = |xs: &[u64]| xs.iter().try_fold(1u64, |a, &x| a.checked_mul(x)).expect("sizes checked before the estimate");
    let add = |a: u64, b: u64| a.checked_add(b).expect("sizes checked before the estimate");
    let layers = layers(cfg);
    let w = window(cfg);
    let b64 = b as u64;
    let (s64, last) = (s as u64, (n - 1) as u64);
    let width: u64 = layers.iter().map(|l| l.keys + l.values).sum();
    let per_token = mul(&[width, elem]);
    let row = |elements: u64, positions: u64| mul(&[b64, elements, positions, elem]);
    // The cache's storage after step `step` (0: the prefill), without the window tensors.
    let at = |step: u64| layers.iter().fold(0u64, |a, l| add(a, row(l.keys + l.values, layer_positions(l, w, s64, step))));
    // What it holds (a sliding layer's view of the last w − 1 positions).
    let held = |step: u64| layers.iter().fold(0u64, |a, l| add(a, row(l.keys + l.values, layer_held(l, w, s64, step))));
    let prefill = held(0);
    let end = held(last);
    let windows = mul(&[layers.iter().filter(|l| l.sliding).count() as u64, 8]);
    // Decode step `step`'s updates, layer by layer: before layer i's the layers from i on hold
    // the step before's positions. A DynamicLayer cats the keys (the old ones beside the new),
    // frees the old keys, then cats the values; a DynamicSlidingWindowLayer frees its old keys
    // and values only after both cats.
    let step_peak = |step: u64| {
        let mut level = add(at(step - 1), windows);
        let mut peak = level;
        for l in &layers {
            let (old, new) = (layer_positions(l, w, s64, step - 1), layer_positions(l, w, s64, step));
            let keys_cat = add(level, row(l.keys, new));
            let after_keys = if l.sliding { keys_cat } else { keys_cat - row(l.keys, old) };
            let values_cat = add(after_keys, row(l.values, new));
            peak = peak.max(keys_cat).max(values_cat);
            level = values_cat - row(l.values, old) - if l.sliding { row(l.keys, old) } else { 0 };
        }
        debug_assert_eq!(level, add(at(step), windows));
        peak
    };
    // Every layer's storage grows step by step from step 1 on, so the last step's cats hold the
    // decode's high-water; a prompt longer than the window also puts the prefill's S positions
    // beside step 1's first windows (N ≥ 2; the prefill's first cats only copy).
    let mut peak = add(at(0).max(at(last)), windows);
    if n >= 2 {
        peak = peak.max(step_peak(1)).max(step_peak(last));
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
    let past = w.filter(|&w| sliding > 0 && s + n > w);
    let (prefill_formula, end_formula, high_water) = match past {
        None => ("per position × B × S".to_string(), "per position × B × (S + N − 1)".to_string(), high_water.to_string()),
        Some(w) => (
            format!("per position × B × S on the full layers, × min(S, w − 1 = {}) on the sliding ones (the window's view)", w.saturating_sub(1)),
            format!("per position × B × (S + N − 1) on the full layers, × min(S + N − 1, w − 1 = {}) on the sliding ones (the window's view of the last cat, whose storage holds min(S + N − 1, w))", w.saturating_sub(1)),
            "the storage's: the largest of the prefill's S positions and step 1's and the last step's cats (a sliding layer's old keys and values beside the new, each min(S + step, w) positions; a full layer's old keys or values) + sliding layers × 8 (window tensors)".to_string(),
        ),
    };
    let formulas = vec![
        ("KV bytes per position".to_string(), per_position.to_string(), per_token),
        ("DynamicCache after the prefill".to_string(), prefill_formula, prefill),
        ("DynamicCache at the end".to_string(), end_formula, end),
        ("DynamicCache high-water (last cat)".to_string(), high_water, peak),
    ];
    GenerateEstimate { kv_bytes_per_token: per_token, kv_cache_prefill_bytes: prefill, kv_cache_bytes: end, kv_cache_peak_bytes: peak, formulas }
}
