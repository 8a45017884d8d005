//! gpt-oss (`model_type` gpt_oss) as transformers 5.23's `GptOssConfig` reads a config.json,
//! and its parameter counts. The op sequence is `gpt_oss_5_23.rs`.
//!
//! What gpt-oss has beyond Mixtral: q/k/v/o biases and a learned sink logit per head
//! (`self_attn.sinks`), `layer_types` alternating sliding-window and full attention, YaRN
//! RoPE by default, a router with a bias whose softmax runs over the top-k logits only, and
//! experts with biases, an interleaved gate/up layout (`gate_up_proj` stored (experts, hidden,
//! 2·I), transposed) and a clamped SwiGLU. `_supports_sdpa = False`: only eager attention
//! dispatches (flash_attention_2 needs the sink-aware hub kernels).
//!
//! The released checkpoints store the experts in MXFP4 (`quantization_config.quant_method
//! "mxfp4"`); without the triton kernels transformers dequantizes them to bf16 at load. The
//! reading models that bf16 (dequantized) model and refuses a config that asks for MXFP4,
//! naming the field: delete `quantization_config` to ask about the dequantized load.
use super::moe::{ExpertsImplementation, MoeConfig, MoeCounts, MoeFamily, Routing};
use super::{Arch, AttnImplementation, HfConfig};
use crate::model::config::{Attention, Flavour, ModelConfig};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What gpt-oss adds to an [`MoeConfig`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GptOssParts {
    /// `sliding_window` of the `sliding_attention` layers.
    pub window: usize,
    /// `layer_types`: true for a sliding-window layer.
    pub sliding: Vec<bool>,
    /// `swiglu_limit` and `swiglu_alpha` (values only: they change no allocation).
    pub swiglu_limit: f64,
    pub swiglu_alpha: f64,
}

/// A gpt-oss layer's weights beyond Llama's (its router weight is `HfLayer::router`, its
/// experts' matrices the layer's `gate_up` and `down`).
#[derive(Clone)]
pub struct GptOssWeights {
    /// `self_attn.sinks` (heads).
    pub sinks: crate::engine::Tensor,
    /// `mlp.router.bias` (experts).
    pub router_bias: crate::engine::Tensor,
    /// `mlp.experts.gate_up_proj_bias` (experts, 2·I) and `down_proj_bias` (experts, hidden).
    pub gate_up_bias: crate::engine::Tensor,
    pub down_bias: crate::engine::Tensor,
}

impl GptOssParts {
    pub fn is_sliding(&self, layer: usize) -> bool {
        self.sliding.get(layer).copied().unwrap_or(false)
    }
}

fn field<'a>(obj: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    obj.get(k).filter(|v| !v.is_null())
}

fn uint(obj: &Map<String, Value>, k: &str, default: usize) -> Result<usize, String> {
    match field(obj, k) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .filter(|&n| n > 0)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| format!("field '{k}' must be a positive integer, found {v}")),
    }
}

fn float(obj: &Map<String, Value>, k: &str, default: f64) -> Result<f64, String> {
    match field(obj, k) {
        None => Ok(default),
        Some(v) => v.as_f64().ok_or_else(|| format!("field '{k}' must be a number, found {v}")),
    }
}

fn boolean(obj: &Map<String, Value>, k: &str, default: bool) -> Result<bool, String> {
    match field(obj, k) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| format!("field '{k}' must be true or false, found {v}")),
    }
}

/// The shape of a gpt-oss config, as `GptOssConfig` reads it (its defaults are gpt-oss-120b's
/// dimensions, with 36 layers and 128 experts).
#[derive(Clone, Debug, PartialEq)]
pub struct GptOssShape {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub experts: usize,
    pub top_k: usize,
    pub tied: bool,
    pub attention_bias: bool,
}

impl GptOssShape {
    pub fn read(obj: &Map<String, Value>) -> Result<GptOssShape, String> {
        let hidden = uint(obj, "hidden_size", 2880)?;
        let heads = uint(obj, "num_attention_heads", 64)?;
        // __post_init__: num_key_value_heads None → heads; head_dim None → hidden // heads
        // (the class default is 64).
        let kv_heads = match obj.get("num_key_value_heads") {
            Some(Value::Null) => heads,
            _ => uint(obj, "num_key_value_heads", 8)?,
        };
        let head_dim = match obj.get("head_dim") {
            Some(Value::Null) => hidden / heads,
            _ => uint(obj, "head_dim", 64)?,
        };
        Ok(GptOssShape {
            hidden,
            intermediate: uint(obj, "intermediate_size", 2880)?,
            layers: uint(obj, "num_hidden_layers", 36)?,
            heads,
            kv_heads,
            head_dim,
            vocab: uint(obj, "vocab_size", 201_088)?,
            experts: uint(obj, "num_local_experts", 128)?,
            top_k: uint(obj, "num_experts_per_tok", 4)?,
            tied: boolean(obj, "tie_word_embeddings", false)?,
            attention_bias: boolean(obj, "attention_bias", true)?,
        })
    }

    /// The parameter counts of transformers' build (checked against its meta build in
    /// tests/gptoss_grid.rs): per layer q/k/v/o with biases when `attention_bias`, the sinks
    /// (heads), the router (experts × hidden + experts), the experts' `gate_up_proj`
    /// (experts, hidden, 2·I) and its bias (experts, 2·I), `down_proj` (experts, I, hidden) and
    /// its bias (experts, hidden), two norms; the final norm and the head unless tied.
    /// Active: the top-k experts of each layer in place of all of them.
    pub fn counts(&self) -> Result<MoeCounts, String> {
        let over = || "the gpt_oss parameter count overflows".to_string();
        let m = |a: usize, b: usize| (a as u64).checked_mul(b as u64).ok_or_else(over);
        let (d, i, hd) = (self.hidden, self.intermediate, self.head_dim);
        let (q, kv) = (m(self.heads, hd)?, m(self.kv_heads, hd)?);
        let mut attn = (2 * q + 2 * kv).checked_mul(d as u64).ok_or_else(over)? + self.heads as u64;
        if self.attention_bias {
            attn += q + 2 * kv + d as u64;
        }
        let expert = m(3 * i, d)? + (2 * i + d) as u64;
        let router = m(self.experts, d)? + self.experts as u64;
        let layer = attn + router + 2 * d as u64;
        let all = expert.checked_mul(self.experts as u64).ok_or_else(over)?;
        let used = expert.checked_mul(self.top_k as u64).ok_or_else(over)?;
        let l = self.layers as u64;
        let outer = m(self.vocab, d)? * if self.tied { 1 } else { 2 } + d as u64;
        let total = (layer + all).checked_mul(l).and_then(|x| x.checked_add(outer)).ok_or_else(over)?;
        let active = (layer + used).checked_mul(l).and_then(|x| x.checked_add(outer)).ok_or_else(over)?;
        Ok(MoeCounts { total, active })
    }
}

/// `layer_types` (None: the default, sliding on even layers, full on odd ones).
fn layer_types(obj: &Map<String, Value>, layers: usize) -> Result<Vec<bool>, String> {
    match field(obj, "layer_types") {
        None => Ok((0..layers).map(|i| (i + 1) % 2 == 1).collect()),
        Some(Value::Array(types)) => super::config_json::layer_types(types, layers),
        Some(v) => Err(format!("field 'layer_types' must be a list, found {v}")),
    }
}

/// Read a gpt_oss config.json into a model of the hf flavour (Llama's decoder with gpt-oss's
/// attention and experts), or refuse what is not modelled, naming the field.
pub fn parse(obj: &Map<String, Value>) -> Result<super::HfModel, String> {
    if let Some(q) = field(obj, "quantization_config") {
        let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("(no quant_method)");
        return Err(format!(
            "field 'quantization_config' names quant_method '{method}': gpt-oss's MXFP4 experts (and any other quantized load) are not modelled; \
             vramscope models the bf16 load (what transformers dequantizes MXFP4 to without the triton kernels): delete the field to ask about it"
        ));
    }
    let (output_router_logits, router_aux_loss_coef) = super::moe::aux_loss_fields(obj)?;
    let dropout = float(obj, "attention_dropout", 0.0)?;
    if dropout != 0.0 {
        return Err(format!("field 'attention_dropout' is {dropout}: dropout's masks in training are not modelled (only 0.0 is supported)"));
    }
    let shape = GptOssShape::read(obj)?;
    if shape.top_k > shape.experts {
        return Err(format!("num_experts_per_tok {} exceeds the {} experts", shape.top_k, shape.experts));
    }
    if shape.heads % shape.kv_heads != 0 {
        return Err(format!("num_key_value_heads {} does not divide num_attention_heads {}", shape.kv_heads, shape.heads));
    }
    if shape.head_dim % 2 != 0 {
        return Err(format!("head_dim {} must be even for rotary embeddings", shape.head_dim));
    }
    let sliding = layer_types(obj, shape.layers)?;
    let window = match obj.get("sliding_window") {
        None => 128,
        Some(Value::Null) if sliding.iter().any(|&s| s) => {
            return Err("field 'sliding_window' is null but 'layer_types' has sliding_attention layers (transformers raises building their mask)".into())
        }
        Some(Value::Null) => 0,
        Some(_) => uint(obj, "sliding_window", 128)?,
    };
    let (mut rope_theta, rope_type) = super::config_json::rope(obj)?;
    let theta_given = field(obj, "rope_theta").is_some()
        || ["rope_scaling", "rope_parameters"].iter().any(|k| field(obj, k).and_then(|p| p.get("rope_theta")).is_some());
    if !theta_given {
        rope_theta = 150_000.0; // GptOssConfig.default_theta
    }
    let eps = float(obj, "rms_norm_eps", 1e-5)?;
    if eps.is_nan() || eps < 0.0 {
        return Err(format!("field 'rms_norm_eps' must be non-negative, found {eps}"));
    }
    let torch_dtype = match field(obj, "dtype").or_else(|| field(obj, "torch_dtype")) {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(format!("field 'torch_dtype' must be a string, found {v}")),
    };
    let weight_dtype = match torch_dtype.as_deref() {
        None => None,
        Some(d) => Some(super::config_json::parse_dtype(d).ok_or_else(|| format!("field 'torch_dtype' is '{d}' (expected float32, bfloat16 or float16)"))?),
    };
    let mut hf = HfConfig::new(Arch::Llama, shape.head_dim);
    (hf.qkv_bias, hf.o_bias) = (shape.attention_bias, shape.attention_bias);
    // The default resolves to eager: GptOssPreTrainedModel has `_supports_sdpa = False`.
    hf.attn_implementation = AttnImplementation::Eager;
    // The full layers' mask has no window; the sliding layers' is GptOssParts::window.
    hf.sliding_window = None;
    // YaRN when the config names no rope parameters (GptOssConfig.__post_init__).
    let rope_given = ["rope_scaling", "rope_parameters"].iter().any(|k| field(obj, k).and_then(Value::as_object).is_some_and(|m| !m.is_empty()));
    hf.rope_type = if rope_given { rope_type } else { Some("yarn".into()) };
    hf.torch_dtype = weight_dtype;
    hf.use_cache = boolean(obj, "use_cache", true)?;
    hf.eos_token_id = match obj.get("eos_token_id") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.iter().map(|x| x.as_i64().ok_or_else(|| format!("field 'eos_token_id' must hold integers, found {x}"))).collect::<Result<_, _>>()?,
        Some(x) => vec![x.as_i64().ok_or_else(|| format!("field 'eos_token_id' must be an integer or a list of integers, found {x}"))?],
    };
    hf.bos_token_id = match obj.get("bos_token_id") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.iter().map(|x| x.as_i64().ok_or_else(|| format!("field 'bos_token_id' must hold integers, found {x}"))).collect::<Result<_, _>>()?,
        Some(x) => vec![x.as_i64().ok_or_else(|| format!("field 'bos_token_id' must be an integer or a list of integers, found {x}"))?],
    };
    hf.pad_token_id = field(obj, "pad_token_id").and_then(Value::as_i64);
    hf.moe = Some(MoeConfig {
        family: MoeFamily::GptOss,
        experts: shape.experts,
        top_k: shape.top_k,
        intermediate: shape.intermediate,
        norm_topk_prob: false,
        implementation: ExpertsImplementation::default(),
        routing: Routing::default(),
        shared_intermediate: 0,
        output_router_logits,
        router_aux_loss_coef,
        dense_layers: None,
        deepseek: None,
        gpt_oss: Some(GptOssParts {
            window,
            sliding,
            swiglu_limit: float(obj, "swiglu_limit", 7.0)?,
            swiglu_alpha: float(obj, "swiglu_alpha", 1.702)?,
        }),
    });
    let config = ModelConfig {
        flavour: Flavour::Hf,
        vocab_size: shape.vocab,
        d_model: shape.hidden,
        num_layers: shape.layers,
        num_heads: shape.heads,
        num_kv_heads: shape.kv_heads,
        d_ff: shape.intermediate,
        rope_theta,
        norm_eps: eps,
        norm_fp32_upcast: true,
        tied_embeddings: shape.tied,
        max_seq_len: uint(obj, "max_position_embeddings", 131_072)?,
        attention: Attention::Naive,
        checkpoint: Default::default(),
        fused_qkv: false,
        fused_gate_up: false,
        hf: Some(hf),
        tp: None,
    };
    let name_or_path = field(obj, "_name_or_path").and_then(Value::as_str).map(str::to_string).filter(|n| !n.trim().is_empty());
    Ok(super::HfModel { config, torch_dtype, model_type: Some("gpt_oss".into()), name_or_path })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(text: &str) -> Map<String, Value> {
        serde_json::from_str::<Value>(text).unwrap().as_object().unwrap().clone()
    }

    #[test]
    fn defaults_and_refusals() {
        let m = parse(&obj(r#"{"num_hidden_layers": 3}"#)).unwrap();
        let g = m.config.hf.as_ref().unwrap().moe.as_ref().unwrap().gpt_oss.clone().unwrap();
        assert_eq!((g.window, g.sliding), (128, vec![true, false, true]));
        assert_eq!(m.config.rope_theta, 150_000.0);
        let e = parse(&obj(r#"{"quantization_config": {"quant_method": "mxfp4"}}"#)).unwrap_err();
        assert!(e.contains("'quantization_config'") && e.contains("mxfp4"), "{e}");
        let aux = |text: &str| parse(&obj(text)).map(|m| m.config.hf.unwrap().moe.unwrap().aux_loss());
        assert_eq!(aux(r#"{"output_router_logits": true}"#), Ok(Some(0.001)));
        assert_eq!(aux(r#"{"output_router_logits": true, "router_aux_loss_coef": 0.02}"#), Ok(Some(0.02)));
        assert_eq!(aux(r#"{"router_aux_loss_coef": 0.02}"#), Ok(None));
        assert!(aux(r#"{"output_router_logits": "yes"}"#).unwrap_err().contains("output_router_logits"));
        assert!(parse(&obj(r#"{"num_hidden_layers": 2, "layer_types": ["full_attention"]}"#)).unwrap_err().contains("layer_types"));
    }
}
