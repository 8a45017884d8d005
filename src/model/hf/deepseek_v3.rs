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
//! The forward pass is not modelled yet: a deepseek_v3 config is read, counted and refused
//! ([`refusal`]), with its parameter counts in the message. The measured ground truth of the
//! forward is tests/fixtures/moe_grid/deepseek_v3.json (tools/pytorch/make_deepseek_grid.py).
use super::moe::MoeCounts;
use serde_json::{Map, Value};

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
        if shape.experts % shape.n_group != 0 {
            return Err(format!("n_routed_experts {} is not a multiple of n_group {} (the router views the scores as groups)", shape.experts, shape.n_group));
        }
        if shape.topk_group > shape.n_group {
            return Err(format!("topk_group {} exceeds n_group {}", shape.topk_group, shape.n_group));
        }
        if shape.qk_rope_head_dim % 2 != 0 {
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

/// What vramscope says of a deepseek_v3 config: it is read and counted (an error in it names
/// the field), and refused, since the forward of multi-head latent attention and DeepSeek's
/// router is not modelled yet.
pub fn refusal(obj: &Map<String, Value>, supported: &str) -> String {
    let counted = DeepseekV3Shape::read(obj).and_then(|s| s.counts());
    let facts = match counted {
        Ok(c) => format!(" (this config builds {} parameters, {} active per token)", c.total, c.active),
        Err(e) => format!(" (and this config does not read: {e})"),
    };
    format!(
        "model_type 'deepseek_v3' is not modelled yet: the forward of its multi-head latent attention and sigmoid group-limited router is not reproduced{facts}; supported: {supported}, mixtral, qwen3_moe, qwen2_moe, gpt_oss"
    )
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
        let e = refusal(&obj("{}"), "llama");
        assert!(e.contains("deepseek_v3") && e.contains("671026404352") && e.contains("llama"), "{e}");
    }
}
