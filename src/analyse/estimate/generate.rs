//! The KV cache of transformers 5.23's greedy `generate()` in closed form (the op sequence is
//! src/model/hf/generation_5_23.rs over transformers_5_23.rs's forward): the `DynamicCache`
//! holds, per layer, keys and values of (B, kv heads, positions, head_dim) in the weights'
//! dtype. The prefill writes the prompt's S positions; each of the N − 1 decode steps appends
//! the token the step before chose (the last token generate returns is never fed back), so
//! the cache ends with S + N − 1 positions.
//!
//! `DynamicLayer.update` grows a layer by `torch.cat([keys, new], dim=-2)`: while the cat runs
//! the old keys and the new ones both live, so the cache's own high-water mark is the end
//! size plus one layer's keys (or values) at S + N − 2 positions, reached in the last decode
//! step's last layer. A config with a sliding window gives every layer a
//! `DynamicSlidingWindowLayer` instead: its update cats the keys, then the values, and lets
//! the old ones go only after both (so the last layer's old keys and values both stand beside
//! the new), and each layer holds a 0-d int64 window tensor from its first update on.
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
    /// The cache's high-water mark: the end size plus the last layer's old values beside the
    /// new ones in the last step's cat (N ≥ 2; the prefill's first cat copies, N = 1); with a
    /// sliding window, its old keys and values, and the layers' 8-byte window tensors.
    pub kv_cache_peak_bytes: u64,
    /// The formulas, for the printout.
    pub formulas: Vec<(String, String, u64)>,
}

/// Refuses what this closed form (and the modelled cache) does not state honestly: a sliding
/// window the prompt and new tokens pass. transformers 5.23's `DynamicCache(config=...)` gives
/// such a layer a `DynamicSlidingWindowLayer` (it keeps the last window − 1 positions), which
/// the cache here does not model.
pub fn check(cfg: &ModelConfig, s: usize, n: usize) -> Result<(), ConfigError> {
    let Some(hf) = cfg.hf() else {
        return Err(ConfigError::new("--profile-type", format!("generate runs Hugging Face transformers' generate(): it needs an hf model, not the {} flavour", cfg.flavour)));
    };
    if let Some(w) = hf.sliding_window.filter(|&w| s + n > w) {
        return Err(ConfigError::new(
            "--max-new-tokens",
            format!("the prompt and the new tokens ({}) pass the model's sliding window ({w}): transformers 5.23 then keeps a DynamicSlidingWindowLayer (the last {} positions), which the closed form does not derive; `vramscope profile --profile-type generate` runs it op for op on mistral and phi3", s + n, w - 1),
        ));
    }
    Ok(())
}

/// The closed form; `elem` is the weights' element size (the cache takes the projections'
/// dtype). Checked arithmetic: the caller's sizes passed `check_sizes`, so an overflow is a bug.
pub fn estimate(cfg: &ModelConfig, elem: u64, b: usize, s: usize, n: usize) -> GenerateEstimate {
    assert!(n >= 1 && s >= 1, "generate needs a prompt and at least one new token");
    let hf = cfg.hf().expect("checked: an hf model");
    let mul = |xs: &[u64]| xs.iter().try_fold(1u64, |a, &x| a.checked_mul(x)).expect("sizes checked before the estimate");
    let (layers, kv, hd, b64) = (cfg.num_layers as u64, cfg.num_kv_heads as u64, hf.head_dim as u64, b as u64);
    let end_positions = (s + n - 1) as u64;
    let per_token = mul(&[2, layers, kv, hd, elem]);
    let prefill = mul(&[per_token, b64, s as u64]);
    let end = mul(&[per_token, b64, end_positions]);
    // One layer's keys or values at S + N − 2 positions, beside the grown ones (N ≥ 2): both
    // of them in a DynamicSlidingWindowLayer, whose layers also hold their window tensors.
    let sliding = hf.sliding_window.is_some();
    let old_states = if sliding { 2 } else { 1 };
    let old_layer = if n >= 2 { mul(&[old_states, b64, kv, end_positions - 1, hd, elem]) } else { 0 };
    let windows = if sliding { mul(&[layers, 8]) } else { 0 };
    let peak = end.checked_add(old_layer).and_then(|p| p.checked_add(windows)).expect("sizes checked before the estimate");
    let high_water = if sliding {
        "end + 2 × B × kv_heads × (S + N − 2) × head_dim × bytes (N ≥ 2) + layers × 8 (DynamicSlidingWindowLayer: old keys and values, window tensors)"
    } else {
        "end + B × kv_heads × (S + N − 2) × head_dim × bytes (N ≥ 2)"
    };
    let formulas = vec![
        ("KV bytes per position".to_string(), "2 × layers × kv_heads × head_dim × bytes".to_string(), per_token),
        ("DynamicCache after the prefill".to_string(), "per position × B × S".to_string(), prefill),
        ("DynamicCache at the end".to_string(), "per position × B × (S + N − 1)".to_string(), end),
        ("DynamicCache high-water (last cat)".to_string(), high_water.to_string(), peak),
    ];
    GenerateEstimate { kv_bytes_per_token: per_token, kv_cache_prefill_bytes: prefill, kv_cache_bytes: end, kv_cache_peak_bytes: peak, formulas }
}
