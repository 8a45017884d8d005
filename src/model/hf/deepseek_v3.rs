//! DeepSeek-V3 (`model_type` deepseek_v3) as transformers 5.23's `DeepseekV3Config` reads a
//! config.json, and the parameter counts of `DeepseekV3ForCausalLM` (checked against its meta
//! build in tests/deepseek_grid.rs, tests/fixtures/moe_grid/deepseek_v3_meta_params.json).
//!
//! What the model has beyond Mixtral: multi-head latent attention (`q_a_proj`, `q_a_layernorm`,
//! `q_b_proj` when `q_lora_rank` is set, else `q_proj`; `kv_a_proj_with_mqa`, `kv_a_layernorm`,
//! `kv_b_proj`; heads of `qk_nope_head_dim + qk_rope_head_dim` for q and k and `v_head_dim`
//! for v), the first `first_k_dense_replace` layers dense, then a sigmoid router with
//! `e_score_correction_bias` and group-limited top-k, and `n_shared_experts` as one shared MLP.
//!
//! The op sequence is `deepseek_v3_5_23.rs`; the measured ground truth of the forward is
//! tests/fixtures/moe_grid/deepseek_v3.json (tools/pytorch/make_deepseek_grid.py). The Hub's
//! checkpoint stores fp8 block-quantized weights (`quantization_config`), which are refused:
//! vramscope models the bf16 load.
use super::moe::{ExpertsImplementation, MoeConfig, MoeCounts, MoeFamily, Routing};
use super::{Arch, HfConfig};
use crate::model::config::{Attention, Flavour, ModelConfig};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What DeepSeek-V3 adds to an [`MoeConfig`] (whose `intermediate` is one routed expert's
/// width and `shared_intermediate` the shared MLP's, `moe_intermediate_size × n_shared_experts`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeepseekParts {
    /// Layers below this index have a dense `DeepseekV3MLP` of `dense_intermediate`.
    pub first_k_dense: usize,
    pub dense_intermediate: usize,
    pub n_group: usize,
    pub topk_group: usize,
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
    pub rope_interleave: bool,
    /// Biases on q_a_proj, kv_a_proj_with_mqa and o_proj.
    pub attention_bias: bool,
    /// The softmax scale, `qk_head_dim ** -0.5` times YaRN's mscale² (a value: no allocation).
    pub scaling: f64,
    /// `routed_scaling_factor` (the router's top-k weights are multiplied by it).
    pub routed_scaling_factor: f64,
    /// `topk_method` is "noaux_tc" (DeepSeek-V3's config.json): vLLM then gives the router an
    /// fp32 `e_score_correction_bias` (deepseek_v2.py:327-332); transformers always has one.
    #[serde(default)]
    pub noaux_tc: bool,
}

impl DeepseekParts {
    pub fn qk_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }
    /// (in, out) features of the latent attention's linears by slot of `lora::SLOTS` (0: q_a_proj,
    /// or q_proj; 1: q_b_proj; 2: kv_a_proj_with_mqa; 3: o_proj; 7: kv_b_proj; the others (0, 0)),
    /// for `hidden` and `heads`.
    pub fn mla_linear_shapes(&self, hidden: usize, heads: usize) -> [(usize, usize); crate::model::lora::SLOTS] {
        let q_out = heads * self.qk_head_dim();
        let mut s = [(0, 0); crate::model::lora::SLOTS];
        s[0] = self.q_lora_rank.map_or((hidden, q_out), |r| (hidden, r));
        s[1] = self.q_lora_rank.map_or((0, 0), |r| (r, q_out));
        s[2] = (hidden, self.kv_lora_rank + self.qk_rope_head_dim);
        s[3] = (heads * self.v_head_dim, hidden);
        s[7] = (self.kv_lora_rank, heads * (self.qk_nope_head_dim + self.v_head_dim));
        s
    }
    /// Whether the latent attention's linear `name` has a bias (`attention_bias`: q_a_proj,
    /// kv_a_proj_with_mqa and o_proj; q_b_proj, q_proj and kv_b_proj never).
    pub fn has_bias(&self, name: &str) -> bool {
        self.attention_bias && matches!(name, "q_a_proj" | "kv_a_proj_with_mqa" | "o_proj")
    }
    pub fn is_sparse(&self, layer: usize) -> bool {
        layer >= self.first_k_dense
    }
    /// The shape these parts and `c` describe, for the parameter counts.
    pub fn shape(&self, c: &ModelConfig, m: &MoeConfig) -> DeepseekV3Shape {
        DeepseekV3Shape {
            hidden: c.d_model,
            intermediate: self.dense_intermediate,
            moe_intermediate: m.intermediate,
            layers: c.num_layers,
            heads: c.num_heads,
            vocab: c.vocab_size,
            experts: m.experts,
            top_k: m.top_k,
            shared_experts: m.shared_intermediate.checked_div(m.intermediate).unwrap_or(0),
            first_k_dense: self.first_k_dense,
            n_group: self.n_group,
            topk_group: self.topk_group,
            q_lora_rank: self.q_lora_rank,
            kv_lora_rank: self.kv_lora_rank,
            qk_nope_head_dim: self.qk_nope_head_dim,
            qk_rope_head_dim: self.qk_rope_head_dim,
            v_head_dim: self.v_head_dim,
            attention_bias: self.attention_bias,
            tied: c.tied_embeddings,
        }
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

/// A count that may be 0 (`first_k_dense_replace`, `n_shared_experts`).
fn count(obj: &Map<String, Value>, k: &str, default: usize) -> Result<usize, String> {
    match field(obj, k) {
        None => Ok(default),
        Some(v) => v.as_u64().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| format!("field '{k}' must be a non-negative integer, found {v}")),
    }
}

fn boolean(obj: &Map<String, Value>, k: &str, default: bool) -> Result<bool, String> {
    match field(obj, k) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| format!("field '{k}' must be true or false, found {v}")),
    }
}

/// The shape of a deepseek_v3 config, as `DeepseekV3Config` reads it (its defaults are
/// DeepSeek-V3's dimensions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeepseekV3Shape {
    pub hidden: usize,
    /// The dense layers' MLP width (`intermediate_size`).
    pub intermediate: usize,
    /// One routed expert's width (`moe_intermediate_size`); the shared MLP is
    /// `moe_intermediate_size × n_shared_experts` wide.
    pub moe_intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub vocab: usize,
    pub experts: usize,
    pub top_k: usize,
    pub shared_experts: usize,
    /// Layers below this index are dense.
    pub first_k_dense: usize,
    pub n_group: usize,
    pub topk_group: usize,
    /// None: q_proj (no low-rank query).
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
    pub attention_bias: bool,
    pub tied: bool,
}

impl DeepseekV3Shape {
    pub fn read(obj: &Map<String, Value>) -> Result<DeepseekV3Shape, String> {
        // `q_lora_rank: null` asks for q_proj; absent, the class default 1536.
        let q_lora_rank = match obj.get("q_lora_rank") {
            Some(Value::Null) => None,
            _ => Some(uint(obj, "q_lora_rank", 1536)?),
        };
        let layers = uint(obj, "num_hidden_layers", 61)?;
        let shape = DeepseekV3Shape {
            hidden: uint(obj, "hidden_size", 7168)?,
            intermediate: uint(obj, "intermediate_size", 18432)?,
            moe_intermediate: uint(obj, "moe_intermediate_size", 2048)?,
            layers,
            heads: uint(obj, "num_attention_heads", 128)?,
            vocab: uint(obj, "vocab_size", 129_280)?,
            // attribute_map: num_local_experts is n_routed_experts.
            experts: uint(obj, "n_routed_experts", uint(obj, "num_local_experts", 256)?)?,
            top_k: uint(obj, "num_experts_per_tok", 8)?,
            shared_experts: count(obj, "n_shared_experts", 1)?,
            first_k_dense: count(obj, "first_k_dense_replace", 3)?,
            n_group: uint(obj, "n_group", 8)?,
            topk_group: uint(obj, "topk_group", 4)?,
            q_lora_rank,
            kv_lora_rank: uint(obj, "kv_lora_rank", 512)?,
            qk_nope_head_dim: uint(obj, "qk_nope_head_dim", 128)?,
            qk_rope_head_dim: uint(obj, "qk_rope_head_dim", 64)?,
            v_head_dim: uint(obj, "v_head_dim", 128)?,
            attention_bias: boolean(obj, "attention_bias", false)?,
            tied: boolean(obj, "tie_word_embeddings", false)?,
        };
        if shape.top_k > shape.experts {
            return Err(format!("num_experts_per_tok {} exceeds the {} experts (n_routed_experts)", shape.top_k, shape.experts));
        }
        if !shape.experts.is_multiple_of(shape.n_group) {
            return Err(format!("n_routed_experts {} is not a multiple of n_group {} (the router views the scores as groups)", shape.experts, shape.n_group));
        }
        if shape.experts / shape.n_group < 2 {
            return Err(format!("n_routed_experts {} over n_group {} leaves fewer than 2 experts per group: the router's per-group top-2 fails", shape.experts, shape.n_group));
        }
        if shape.topk_group > shape.n_group {
            return Err(format!("topk_group {} exceeds n_group {}", shape.topk_group, shape.n_group));
        }
        if !shape.qk_rope_head_dim.is_multiple_of(2) {
            return Err(format!("qk_rope_head_dim {} must be even for rotary embeddings", shape.qk_rope_head_dim));
        }
        Ok(shape)
    }

    /// Whether layer `i` is a sparse (MoE) layer: `layer_idx >= first_k_dense_replace`.
    pub fn is_sparse(&self, i: usize) -> bool {
        i >= self.first_k_dense
    }

    /// The parameter counts of transformers' build: per layer the attention (`q_a_proj` (+bias),
    /// `q_a_layernorm`, `q_b_proj` — or `q_proj` —, `kv_a_proj_with_mqa` (+bias),
    /// `kv_a_layernorm`, `kv_b_proj`, `o_proj` (+bias)), a dense MLP or the experts' 3-D
    /// `gate_up_proj` and `down_proj`, the router (experts × hidden; `e_score_correction_bias` is
    /// a buffer) and the shared MLP, two norms; the final norm and the head unless tied.
    /// Active: the top-k experts of each sparse layer in place of all of them.
    pub fn counts(&self) -> Result<MoeCounts, String> {
        let over = || "the deepseek_v3 parameter count overflows".to_string();
        let m = |a: usize, b: usize| (a as u64).checked_mul(b as u64).ok_or_else(over);
        let add = |xs: &[u64]| xs.iter().try_fold(0u64, |s, &x| s.checked_add(x)).ok_or_else(over);
        let (d, h) = (self.hidden, self.heads);
        let bias = |n: usize| if self.attention_bias { n as u64 } else { 0 };
        let qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim;
        let q = match self.q_lora_rank {
            Some(r) => add(&[m(r, d)?, bias(r), r as u64, m(h * qk_head, r)?])?,
            None => m(h * qk_head, d)?,
        };
        let kv_a = self.kv_lora_rank + self.qk_rope_head_dim;
        let attn = add(&[
            q,
            m(kv_a, d)?,
            bias(kv_a),
            self.kv_lora_rank as u64,
            m(h * (self.qk_nope_head_dim + self.v_head_dim), self.kv_lora_rank)?,
            m(d, h * self.v_head_dim)?,
            bias(d),
            2 * d as u64,
        ])?;
        let dense = m(3 * self.intermediate, d)?;
        let expert = m(3 * self.moe_intermediate, d)?;
        let router = m(self.experts, d)?;
        let shared = m(3 * self.moe_intermediate * self.shared_experts, d)?;
        let all = add(&[expert.checked_mul(self.experts as u64).ok_or_else(over)?, router, shared])?;
        let used = add(&[expert.checked_mul(self.top_k as u64).ok_or_else(over)?, router, shared])?;
        let (mut total, mut active) = (0u64, 0u64);
        for i in 0..self.layers {
            let (a, u) = if self.is_sparse(i) { (all, used) } else { (dense, dense) };
            total = add(&[total, attn, a])?;
            active = add(&[active, attn, u])?;
        }
        let outer = add(&[m(self.vocab, d)?, if self.tied { 0 } else { m(self.vocab, d)? }, d as u64])?;
        Ok(MoeCounts { total: add(&[total, outer])?, active: add(&[active, outer])? })
    }
}

fn float(obj: &Map<String, Value>, k: &str, default: f64) -> Result<f64, String> {
    match field(obj, k) {
        None => Ok(default),
        Some(v) => v.as_f64().ok_or_else(|| format!("field '{k}' must be a number, found {v}")),
    }
}

/// `yarn_apply_mscale`: a rope type other than default with `mscale_all_dim` multiplies the
/// scale by `(0.1 · mscale_all_dim · ln(factor) + 1)²` (factor > 1).
fn softmax_scale(obj: &Map<String, Value>, qk_head_dim: usize) -> f64 {
    let base = (qk_head_dim as f64).powf(-0.5);
    let params = ["rope_scaling", "rope_parameters"].iter().find_map(|k| field(obj, k).and_then(Value::as_object).filter(|m| !m.is_empty()));
    let Some(p) = params else { return base };
    let ty = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str).unwrap_or("default");
    let all = p.get("mscale_all_dim").and_then(Value::as_f64).unwrap_or(0.0);
    let factor = p.get("factor").and_then(Value::as_f64).unwrap_or(1.0);
    if ty == "default" || all == 0.0 || factor <= 1.0 {
        return base;
    }
    let m = 0.1 * all * factor.ln() + 1.0;
    base * m * m
}

/// Read a deepseek_v3 config.json into a model of the hf flavour, or refuse what is not
/// modelled, naming the field.
pub fn parse(obj: &Map<String, Value>) -> Result<super::HfModel, String> {
    if let Some(q) = field(obj, "quantization_config") {
        let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("(no quant_method)");
        return Err(format!(
            "field 'quantization_config' names quant_method '{method}': DeepSeek-V3's fp8 block-quantized weights (and any other quantized load) are not modelled; \
             vramscope models the bf16 load: delete the field to ask about it"
        ));
    }
    if boolean(obj, "output_router_logits", false)? {
        return Err("field 'output_router_logits' is true: DeepSeek-V3 has no router auxiliary loss in transformers 5.23 (DeepseekV3ForCausalLM never calls load_balancing_loss_func); \
             the flag only keeps every router's fp32 logits in the output, which is not modelled (the config's default is false)"
            .into());
    }
    let dropout = float(obj, "attention_dropout", 0.0)?;
    if dropout != 0.0 {
        return Err(format!("field 'attention_dropout' is {dropout}: dropout's masks in training are not modelled (only 0.0 is supported)"));
    }
    if let Some(act) = field(obj, "hidden_act").and_then(Value::as_str).filter(|a| *a != "silu") {
        return Err(format!("field 'hidden_act' is '{act}': only silu is modelled"));
    }
    let shape = DeepseekV3Shape::read(obj)?;
    let heads = shape.heads;
    match field(obj, "num_key_value_heads") {
        None => {}
        Some(v) if v.as_u64() == Some(heads as u64) => {}
        Some(v) => return Err(format!("field 'num_key_value_heads' is {v}: multi-head latent attention expands the latent to every head (num_attention_heads {heads}); another value is not modelled")),
    }
    if shape.shared_experts == 0 {
        return Err("field 'n_shared_experts' is 0: zero-width shared experts are not modelled".into());
    }
    let (rope_theta, rope_type) = super::config_json::rope(obj)?;
    let eps = float(obj, "rms_norm_eps", 1e-6)?;
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
    // The rotary tables are qk_rope_head_dim wide (`config.head_dim`, set in __post_init__).
    let mut hf = HfConfig::new(Arch::Llama, shape.qk_rope_head_dim);
    hf.rope_type = rope_type;
    hf.torch_dtype = weight_dtype;
    hf.use_cache = boolean(obj, "use_cache", true)?;
    hf.eos_token_id = match obj.get("eos_token_id") {
        None => vec![1],
        Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.iter().map(|x| x.as_i64().ok_or_else(|| format!("field 'eos_token_id' must hold integers, found {x}"))).collect::<Result<_, _>>()?,
        Some(x) => vec![x.as_i64().ok_or_else(|| format!("field 'eos_token_id' must be an integer or a list of integers, found {x}"))?],
    };
    hf.bos_token_id = match obj.get("bos_token_id") {
        None => vec![0],
        Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.iter().map(|x| x.as_i64().ok_or_else(|| format!("field 'bos_token_id' must hold integers, found {x}"))).collect::<Result<_, _>>()?,
        Some(x) => vec![x.as_i64().ok_or_else(|| format!("field 'bos_token_id' must be an integer or a list of integers, found {x}"))?],
    };
    hf.pad_token_id = field(obj, "pad_token_id").and_then(Value::as_i64);
    hf.moe = Some(MoeConfig {
        family: MoeFamily::DeepseekV3,
        experts: shape.experts,
        top_k: shape.top_k,
        intermediate: shape.moe_intermediate,
        norm_topk_prob: boolean(obj, "norm_topk_prob", true)?,
        implementation: ExpertsImplementation::default(),
        routing: Routing::default(),
        shared_intermediate: shape.moe_intermediate * shape.shared_experts,
        gpt_oss: None,
        output_router_logits: false,
        router_aux_loss_coef: super::moe::ROUTER_AUX_LOSS_COEF,
        dense_layers: None,
        deepseek: Some(DeepseekParts {
            first_k_dense: shape.first_k_dense,
            dense_intermediate: shape.intermediate,
            n_group: shape.n_group,
            topk_group: shape.topk_group,
            q_lora_rank: shape.q_lora_rank,
            kv_lora_rank: shape.kv_lora_rank,
            qk_nope_head_dim: shape.qk_nope_head_dim,
            qk_rope_head_dim: shape.qk_rope_head_dim,
            v_head_dim: shape.v_head_dim,
            rope_interleave: boolean(obj, "rope_interleave", true)?,
            attention_bias: shape.attention_bias,
            scaling: softmax_scale(obj, shape.qk_nope_head_dim + shape.qk_rope_head_dim),
            routed_scaling_factor: float(obj, "routed_scaling_factor", 2.5)?,
            noaux_tc: field(obj, "topk_method").and_then(Value::as_str) == Some("noaux_tc"),
        }),
    });
    let config = ModelConfig {
        flavour: Flavour::Hf,
        vocab_size: shape.vocab,
        d_model: shape.hidden,
        num_layers: shape.layers,
        num_heads: heads,
        num_kv_heads: heads,
        d_ff: shape.moe_intermediate,
        rope_theta,
        norm_eps: eps,
        norm_fp32_upcast: true,
        tied_embeddings: shape.tied,
        max_seq_len: uint(obj, "max_position_embeddings", 4096)?,
        attention: Attention::Naive,
        checkpoint: Default::default(),
        fused_qkv: false,
        fused_gate_up: false,
        hf: Some(hf),
        tp: None,
    };
    let name_or_path = field(obj, "_name_or_path").and_then(Value::as_str).map(str::to_string).filter(|n| !n.trim().is_empty());
    Ok(super::HfModel { config, torch_dtype, model_type: Some("deepseek_v3".into()), name_or_path })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(text: &str) -> Map<String, Value> {
        serde_json::from_str::<Value>(text).unwrap().as_object().unwrap().clone()
    }

    #[test]
    fn defaults_are_deepseek_v3s_and_bad_fields_are_named() {
        let s = DeepseekV3Shape::read(&obj("{}")).unwrap();
        assert_eq!((s.hidden, s.layers, s.experts, s.top_k, s.first_k_dense, s.q_lora_rank), (7168, 61, 256, 8, 3, Some(1536)));
        assert_eq!(s.counts().unwrap(), MoeCounts { total: 671_026_404_352, active: 37_552_282_624 });
        assert_eq!(DeepseekV3Shape::read(&obj(r#"{"q_lora_rank": null}"#)).unwrap().q_lora_rank, None);
        assert!(DeepseekV3Shape::read(&obj(r#"{"n_routed_experts": 10}"#)).unwrap_err().contains("n_group"));
        assert!(DeepseekV3Shape::read(&obj(r#"{"topk_group": 9}"#)).unwrap_err().contains("topk_group"));
        assert!(DeepseekV3Shape::read(&obj(r#"{"n_routed_experts": 8, "n_group": 8, "topk_group": 2}"#)).unwrap_err().contains("top-2"));
        assert!(parse(&obj(r#"{"quantization_config": {"quant_method": "fp8"}}"#)).unwrap_err().contains("fp8"));
        assert!(parse(&obj(r#"{"n_shared_experts": 0}"#)).unwrap_err().contains("n_shared_experts"));
        let m = parse(&obj(r#"{"q_lora_rank": null, "num_hidden_layers": 4}"#)).unwrap().config;
        assert_eq!((m.param_count(), m.hf.as_ref().unwrap().head_dim), (DeepseekV3Shape::read(&obj(r#"{"q_lora_rank": null, "num_hidden_layers": 4}"#)).unwrap().counts().unwrap().total, 64));
    }
}
