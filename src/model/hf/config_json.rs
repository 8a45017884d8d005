//! Models from a Hugging Face `config.json`: the fields transformers' config classes
//! (`LlamaConfig`, `MistralConfig`, `Qwen2Config`, `Qwen3Config`) read, with their defaults,
//! into a [`ModelConfig`] of the hf flavour.
use super::{Arch, HfConfig};
use crate::model::config::{Attention, Flavour, ModelConfig};
use serde_json::Value;

/// What a config.json describes, plus the fields vramscope records but does not model.
#[derive(Clone, Debug)]
pub struct HfModel {
    pub config: ModelConfig,
    /// `torch_dtype` as written ("bfloat16", "float16", "float32"), if present.
    pub torch_dtype: Option<String>,
    /// `model_type` as written, if present.
    pub model_type: Option<String>,
    /// `_name_or_path` as written (the hub id or folder the config was saved from), if present.
    pub name_or_path: Option<String>,
}

fn field<'a>(obj: &'a serde_json::Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn uint(obj: &serde_json::Map<String, Value>, name: &str, default: Option<usize>) -> Result<usize, String> {
    match field(obj, name) {
        None => default.ok_or_else(|| format!("required field '{name}' is missing")),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => usize::try_from(n).map_err(|_| format!("field '{name}' is too large ({n})")),
            _ => Err(format!("field '{name}' must be a positive integer, found {v}")),
        },
    }
}

fn opt_uint(obj: &serde_json::Map<String, Value>, name: &str) -> Result<Option<usize>, String> {
    match field(obj, name) {
        None => Ok(None),
        Some(_) => uint(obj, name, None).map(Some),
    }
}

fn float(obj: &serde_json::Map<String, Value>, name: &str, default: f64) -> Result<f64, String> {
    match field(obj, name) {
        None => Ok(default),
        Some(v) => v.as_f64().ok_or_else(|| format!("field '{name}' must be a number, found {v}")),
    }
}

fn boolean(obj: &serde_json::Map<String, Value>, name: &str, default: bool) -> Result<bool, String> {
    match field(obj, name) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| format!("field '{name}' must be true or false, found {v}")),
    }
}

fn string(obj: &serde_json::Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match field(obj, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(format!("field '{name}' must be a string, found {v}")),
    }
}

/// Parse the text of a `config.json`. Errors name the field. Defaults are `LlamaConfig`'s:
/// num_key_value_heads = num_attention_heads, rope_theta 10000, rms_norm_eps 1e-6,
/// tie_word_embeddings false, max_position_embeddings 2048.
pub fn parse(text: &str) -> Result<HfModel, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let obj = v.as_object().ok_or("expected a JSON object at the top level")?;
    let model_type = string(obj, "model_type")?;
    // A config without model_type is read as LlamaConfig (the field every saved config has;
    // hand-written ones often omit it).
    let arch = match model_type.as_deref() {
        None => Arch::Llama,
        Some(t) => Arch::parse(t).ok_or_else(|| format!("model_type '{t}' is not supported; supported: {}", Arch::list()))?,
    };
    let d = uint(obj, "hidden_size", None)?;
    let f = uint(obj, "intermediate_size", None)?;
    let l = uint(obj, "num_hidden_layers", None)?;
    let h = uint(obj, "num_attention_heads", None)?;
    let kv = uint(obj, "num_key_value_heads", Some(h))?;
    let vocab = uint(obj, "vocab_size", None)?;
    let max = uint(obj, "max_position_embeddings", Some(if arch == Arch::Llama { 2048 } else { 32768 }))?;
    // transformers 5 keeps rope_theta inside rope_parameters; older files have it at the top.
    let rope_params = field(obj, "rope_parameters").and_then(|v| v.as_object());
    let rope_theta = match rope_params.and_then(|r| field(r, "rope_theta")) {
        Some(_) => float(rope_params.unwrap(), "rope_theta", 10_000.0)?,
        None => float(obj, "rope_theta", if arch == Arch::Qwen3 || arch == Arch::Qwen2 { 1_000_000.0 } else { 10_000.0 })?,
    };
    let eps = float(obj, "rms_norm_eps", 1e-6)?;
    let tied = boolean(obj, "tie_word_embeddings", false)?;
    let torch_dtype = match string(obj, "dtype")? {
        Some(d) => Some(d),
        None => string(obj, "torch_dtype")?,
    };
    let name_or_path = string(obj, "_name_or_path")?.filter(|n| !n.trim().is_empty());
    let head_dim = match field(obj, "head_dim") {
        Some(_) => uint(obj, "head_dim", None)?,
        None if arch == Arch::Qwen3 => 128,
        None => {
            if d % h != 0 {
                return Err(format!("num_attention_heads {h} does not divide hidden_size {d} (and no head_dim is given)"));
            }
            d / h
        }
    };
    if h % kv != 0 {
        return Err(format!("num_key_value_heads {kv} does not divide num_attention_heads {h}"));
    }
    if head_dim % 2 != 0 {
        return Err(format!("head_dim {head_dim} must be even for rotary embeddings"));
    }
    if !(rope_theta > 0.0) {
        return Err(format!("rope_theta must be positive, found {rope_theta}"));
    }
    if !(eps >= 0.0) {
        return Err(format!("rms_norm_eps must be non-negative, found {eps}"));
    }
    let mut hf = HfConfig::new(arch, head_dim);
    let attention_bias = boolean(obj, "attention_bias", false)?;
    match arch {
        Arch::Llama => {
            (hf.qkv_bias, hf.o_bias) = (attention_bias, attention_bias);
            hf.mlp_bias = boolean(obj, "mlp_bias", false)?;
        }
        Arch::Qwen3 => (hf.qkv_bias, hf.o_bias) = (attention_bias, attention_bias),
        Arch::Qwen2 => (hf.qkv_bias, hf.o_bias) = (true, false),
        Arch::Mistral => {}
    }
    hf.sliding_window = match arch {
        Arch::Mistral => opt_uint(obj, "sliding_window")?,
        Arch::Qwen2 | Arch::Qwen3 if boolean(obj, "use_sliding_window", false)? => opt_uint(obj, "sliding_window")?,
        _ => None,
    };
    hf.use_cache = boolean(obj, "use_cache", true)?;
    let config = ModelConfig {
        flavour: Flavour::Hf,
        vocab_size: vocab,
        d_model: d,
        num_layers: l,
        num_heads: h,
        num_kv_heads: kv,
        d_ff: f,
        rope_theta,
        norm_eps: eps,
        norm_fp32_upcast: true,
        tied_embeddings: tied,
        max_seq_len: max,
        attention: Attention::Naive,
        checkpoint: Default::default(),
        fused_qkv: false,
        fused_gate_up: false,
        hf: Some(hf),
    };
    Ok(HfModel { config, torch_dtype, model_type, name_or_path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_8b_counts_its_parameters() {
        let m = parse(include_str!("../../../tests/fixtures/llama3_8b_config.json")).unwrap();
        assert_eq!(m.config.param_count(), 8_030_261_248);
        assert_eq!(m.config.num_kv_heads, 8);
        assert!(!m.config.tied_embeddings);
        assert_eq!(m.torch_dtype.as_deref(), Some("bfloat16"));
    }

    #[test]
    fn errors_name_the_field() {
        assert!(parse("{").unwrap_err().contains("JSON"));
        assert!(parse(r#"{"hidden_size": 64}"#).unwrap_err().contains("intermediate_size"));
        let bad = r#"{"hidden_size": "64", "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}"#;
        assert!(parse(bad).unwrap_err().contains("'hidden_size' must be a positive integer"));
        let heads = r#"{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 100}"#;
        assert!(parse(heads).unwrap_err().contains("num_key_value_heads 3"));
        let ok = r#"{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}"#;
        let m = parse(ok).unwrap();
        assert_eq!((m.config.num_kv_heads, m.config.max_seq_len, m.config.tied_embeddings), (4, 2048, false));
    }
}
