//! Gemma 2 (`Gemma2Config`) and Gemma 3's text model (`Gemma3TextConfig`) as transformers
//! 5.23.0 reads their config.json: the fields the rest of the hf flavour has no place for.
//! The op sequence is in `gemma_5_23.rs`, beside the other families'.
use super::config_json::ROPE_TYPES;
use super::Arch;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What Gemma adds to [`HfConfig`](super::HfConfig).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmaConfig {
    /// Per layer, whether it is a `sliding_attention` layer (`layer_types`).
    pub sliding: Vec<bool>,
    /// `sliding_window`: what a sliding layer sees.
    pub sliding_window: usize,
    /// `query_pre_attn_scalar`: the scores are scaled by its inverse square root.
    pub query_pre_attn_scalar: f64,
    /// Gemma 2's `attn_logit_softcapping` (tanh on the scores; eager only). Gemma 3's attention
    /// never passes it, so it is None there whatever the config says.
    pub attn_logit_softcapping: Option<f64>,
    /// `final_logit_softcapping`: tanh on the logits after lm_head.
    pub final_logit_softcapping: Option<f64>,
    /// Gemma 3: the sliding layers' RoPE base (`rope_local_base_freq`, or
    /// `rope_parameters.sliding_attention.rope_theta`); the full layers' is the model's
    /// `rope_theta`. Gemma 2 has one base for all layers (this equals it).
    pub rope_local_base_freq: f64,
}

impl GemmaConfig {
    /// Layer types present, in `sorted(set(layer_types))` order (`full_attention` first):
    /// Gemma 3 registers one inv_freq pair and computes one cos/sin pair per type.
    pub fn types(&self) -> Vec<bool> {
        [false, true].into_iter().filter(|t| self.sliding.contains(t)).collect()
    }
}

/// A config.json's Gemma fields, read by [`read`].
pub struct GemmaRead {
    pub gemma: GemmaConfig,
    /// The full layers' RoPE base (Gemma 3) or the one base (Gemma 2).
    pub rope_theta: f64,
    /// The full layers' rope type when not "default".
    pub rope_type: Option<String>,
}

fn number(obj: &Map<String, Value>, name: &str, default: Option<f64>) -> Result<Option<f64>, String> {
    match obj.get(name) {
        None => Ok(default),
        Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| format!("field '{name}' must be a number, found {v}")),
    }
}

/// The class defaults Gemma's config classes set where config.json leaves a field out.
pub fn kv_heads_default() -> usize {
    4
}
pub fn head_dim_default() -> usize {
    256
}
pub fn max_positions_default(arch: Arch) -> usize {
    if arch == Arch::Gemma2 { 8192 } else { 131_072 }
}

/// Gemma's fields, with `Gemma2Config`/`Gemma3TextConfig`'s defaults (`__post_init__`'s
/// layer_types and `convert_rope_params_to_dict`'s two bases). `rope` reads Gemma 2's
/// ordinary rope fields (the flavour's reader).
pub fn read(obj: &Map<String, Value>, arch: Arch, layers: usize, rope: impl FnOnce() -> Result<(f64, Option<String>), String>) -> Result<GemmaRead, String> {
    let act = match obj.get("hidden_activation") {
        None => "gelu_pytorch_tanh",
        Some(v) => v.as_str().ok_or_else(|| format!("field 'hidden_activation' must be a string, found {v}"))?,
    };
    if act != "gelu_pytorch_tanh" {
        return Err(format!("field 'hidden_activation' is '{act}': Gemma is modelled with gelu_pytorch_tanh (its config classes' default)"));
    }
    if obj.get("use_bidirectional_attention").and_then(Value::as_bool) == Some(true) {
        return Err("field 'use_bidirectional_attention' is true: bidirectional masks (EmbeddingGemma) are not modelled".into());
    }
    let sliding_window = match obj.get("sliding_window") {
        None => 4096,
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => usize::try_from(n).map_err(|_| format!("field 'sliding_window' is too large ({n})"))?,
            _ => return Err(format!("field 'sliding_window' must be a positive integer, found {v} (Gemma's sliding layers need one)")),
        },
    };
    let sliding = match obj.get("layer_types") {
        None | Some(Value::Null) => {
            // Gemma2Config alternates from a sliding layer; Gemma3TextConfig makes every
            // `sliding_window_pattern`-th layer full (default 6).
            let pattern = match arch {
                Arch::Gemma2 => 2,
                _ => match obj.get("sliding_window_pattern") {
                    None | Some(Value::Null) => 6,
                    Some(v) => v.as_u64().filter(|&n| n > 0).ok_or_else(|| format!("field 'sliding_window_pattern' must be a positive integer, found {v}"))? as usize,
                },
            };
            (0..layers).map(|i| (i + 1) % pattern != 0).collect()
        }
        Some(Value::Array(types)) => super::config_json::layer_types(types, layers)?,
        Some(v) => return Err(format!("field 'layer_types' must be a list, found {v}")),
    };
    let query_pre_attn_scalar = number(obj, "query_pre_attn_scalar", Some(256.0))?.ok_or("field 'query_pre_attn_scalar' is null: Gemma needs a value")?;
    if !(query_pre_attn_scalar > 0.0 && query_pre_attn_scalar.is_finite()) {
        return Err(format!("field 'query_pre_attn_scalar' must be a positive number, found {query_pre_attn_scalar}"));
    }
    let gemma2 = arch == Arch::Gemma2;
    let cap = |name: &str, default: Option<f64>| -> Result<Option<f64>, String> {
        match number(obj, name, default)? {
            Some(c) if !(c > 0.0 && c.is_finite()) => Err(format!("field '{name}' must be a positive number or null, found {c}")),
            c => Ok(c),
        }
    };
    let final_logit_softcapping = cap("final_logit_softcapping", if gemma2 { Some(30.0) } else { None })?;
    let attn_logit_softcapping = if gemma2 { cap("attn_logit_softcapping", Some(50.0))? } else { None };
    let (rope_theta, rope_type, local) = if gemma2 {
        let (theta, ty) = rope()?;
        (theta, ty, theta)
    } else {
        let (full, ty, local) = gemma3_rope(obj)?;
        (full, ty, local)
    };
    let gemma = GemmaConfig { sliding, sliding_window, query_pre_attn_scalar, attn_logit_softcapping, final_logit_softcapping, rope_local_base_freq: local };
    Ok(GemmaRead { gemma, rope_theta, rope_type })
}

/// Gemma3TextConfig's `convert_rope_params_to_dict`: `rope_parameters` per layer type
/// (default: both "default"); an older `rope_scaling` updates the full layers'; the full
/// layers' theta defaults to `rope_theta` or 1e6, the sliding layers' to
/// `rope_local_base_freq` or 1e4. Returns (full theta, full rope type, sliding theta).
fn gemma3_rope(obj: &Map<String, Value>) -> Result<(f64, Option<String>, f64), String> {
    let nested = |t: &str| obj.get("rope_parameters").and_then(|p| p.get(t)).and_then(Value::as_object);
    let kind = |m: Option<&Map<String, Value>>, name: &str| -> Result<String, String> {
        let ty = match m.and_then(|m| m.get("rope_type").or_else(|| m.get("type"))) {
            None | Some(Value::Null) => "default".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => return Err(format!("field '{name}.rope_type' must be a string, found {v}")),
        };
        if !ROPE_TYPES.contains(&ty.as_str()) {
            return Err(format!("field '{name}.rope_type' is '{ty}': supported: {}", ROPE_TYPES.join(", ")));
        }
        Ok(ty)
    };
    let theta = |m: Option<&Map<String, Value>>, name: &str, fallback: &str, default: f64| -> Result<f64, String> {
        let t = match m.and_then(|m| m.get("rope_theta")) {
            Some(v) => v.as_f64().ok_or_else(|| format!("field '{name}.rope_theta' must be a number, found {v}"))?,
            None => number(obj, fallback, Some(default))?.ok_or_else(|| format!("field '{fallback}' is null (leave it out for the default)"))?,
        };
        if !(t > 0.0 && t.is_finite()) {
            return Err(format!("field '{name}.rope_theta' must be a positive number, found {t}"));
        }
        Ok(t)
    };
    let scaling = obj.get("rope_scaling").and_then(Value::as_object).filter(|m| !m.is_empty());
    let full = scaling.or(nested("full_attention"));
    let sliding = nested("sliding_attention");
    let full_type = kind(full, "rope_parameters.full_attention")?;
    kind(sliding, "rope_parameters.sliding_attention")?;
    let full_theta = theta(nested("full_attention"), "rope_parameters.full_attention", "rope_theta", 1_000_000.0)?;
    let local = theta(sliding, "rope_parameters.sliding_attention", "rope_local_base_freq", 10_000.0)?;
    Ok((full_theta, (full_type != "default").then_some(full_type), local))
}

/// Fields Gemma's config classes need a value for (an explicit null is refused).
pub const NON_NULL: [&str; 5] = ["attention_bias", "attention_dropout", "head_dim", "num_key_value_heads", "query_pre_attn_scalar"];

/// A published config's Gemma fields with its class's defaults (the default layer pattern:
/// Gemma 2 alternates from a sliding layer, Gemma 3 makes every sixth layer full; Gemma 2's
/// soft-caps 50 and 30, Gemma 3's none), for the presets.
pub fn published(arch: Arch, layers: usize, sliding_window: usize, query_pre_attn_scalar: f64, rope_local_base_freq: f64) -> GemmaConfig {
    let gemma2 = arch == Arch::Gemma2;
    let pattern = if gemma2 { 2 } else { 6 };
    GemmaConfig {
        sliding: (0..layers).map(|i| (i + 1) % pattern != 0).collect(),
        sliding_window,
        query_pre_attn_scalar,
        attn_logit_softcapping: gemma2.then_some(50.0),
        final_logit_softcapping: gemma2.then_some(30.0),
        rope_local_base_freq,
    }
}
