//! vLLM 0.33.0's start-up plan for DeepSeek-V3 (multi-head latent attention): the terms that
//! differ from [`vllm_0_33`](super::vllm_0_33), each with the vllm-0.33.0 wheel's file and line.
//! `vllm_0_33` calls in here when the model has [`DeepseekParts`].
//!
//! - Weights: `DeepseekV2ForCausalLM` (`model_executor/models/deepseek_v2.py:1872-1935`), one
//!   rank's shard: [`weight_bytes_per_rank`].
//! - KV cache: one `MLAAttentionSpec` per layer (`model_executor/layers/attention/mla_attention.py:1371-1401`):
//!   one head (`num_kv_heads=1`, `max_tp_shards=1`: every rank holds the whole latent) of
//!   head_size kv_lora_rank + qk_rope_head_dim and no separate V (`head_size_v = 0`,
//!   `v1/kv_cache_interface.py:743`): page = block_size × (kv_lora_rank + qk_rope_head_dim) ×
//!   dtype bytes (`kv_cache_interface.py:586-601`).
//! - The attention backend (`platforms/cuda.py:145-154`, SM 9.0's MLA priorities): FLASH_ATTN_MLA
//!   first, which takes a bf16/fp16 cache (`v1/attention/backends/mla/flashattn_mla.py:42-46`),
//!   kernel blocks `MultipleOf(16)` (`:49-50`, so `--block-size` stays as given) and head sizes
//!   320, 512 or 576 (`MLACommonBackend`, `mla_attention.py:1623-1624`). An fp8 cache falls to
//!   FlashMLA (fixed 64-token blocks, `flashmla.py:57-58`), whose dense fp8 kernel depends on the
//!   build and the GPU: refused. Other GPUs pick other backends (FlashInfer MLA and CUTLASS MLA
//!   on SM 10.x): refused.
//! - `num_nextn_predict_layers` (the multi-token-prediction layer): `DeepseekV2Model` builds
//!   `num_hidden_layers` layers only (`deepseek_v2.py:1465-1474`); the MTP layer is
//!   `deepseek_mtp.py`'s, built only for speculative decoding, and its checkpoint weights are
//!   skipped in plain serving. So it is not counted.
//! - `W_UK_T`/`W_UV` (`mla_attention.py:1270-1349`): views of kv_b_proj's bf16 weight
//!   (`get_and_maybe_dequant_weights` returns the weight itself for an unquantized layer,
//!   `layers/quantization/utils/quant_utils.py:532-535`), so no bytes of their own.
use super::hf::deepseek_v3::DeepseekParts;
use super::hf::moe::MoeConfig;
use super::vllm_0_33::{padded_vocab, ServeConfig};
use super::ModelConfig;

/// Head sizes MLACommonBackend (and so FLASH_ATTN_MLA) takes (`mla_attention.py:1623-1624`).
pub const MLA_HEAD_SIZES: [usize; 3] = [320, 512, 576];

/// DeepSeek-V3's parts, when the model has multi-head latent attention.
pub fn parts(m: &ModelConfig) -> Option<(&MoeConfig, &DeepseekParts)> {
    let moe = m.hf()?.moe.as_ref()?;
    Some((moe, moe.deepseek.as_ref()?))
}

/// The latent cache's head size: kv_lora_rank + qk_rope_head_dim (`MLAAttention.head_size`).
pub fn head_size(p: &DeepseekParts) -> usize {
    p.kv_lora_rank + p.qk_rope_head_dim
}

/// What vLLM asserts (or fails on) before it shards DeepSeek-V3 over `tp` ranks, in its words.
pub fn check_tensor_parallel(m: &ModelConfig, moe: &MoeConfig, p: &DeepseekParts, tp: usize) -> Result<(), String> {
    // ModelConfig.verify_with_parallel_config (config/model.py:1557-1563); DeepseekV2MLAAttention asserts it too.
    if !m.num_heads.is_multiple_of(tp) {
        return Err(format!("Total number of attention heads ({}) must be divisible by tensor parallel size ({tp}).", m.num_heads));
    }
    // FusedMoEConfig.__post_init__ (layers/fused_moe/config.py:1352).
    if !moe.intermediate.is_multiple_of(tp) {
        return Err(format!("the experts' moe_intermediate_size {} is not divisible by {tp} (vLLM asserts intermediate_size % tp_size == 0, layers/fused_moe/config.py:1352)", moe.intermediate));
    }
    // The dense layers' and the shared experts' gate_up_proj (MergedColumnParallelLinear, layers/linear.py:502).
    if p.first_k_dense > 0 && !p.dense_intermediate.is_multiple_of(tp) {
        return Err(format!("intermediate_size {} (the first_k_dense_replace layers' MLP) is not divisible by {tp} (gate_up_proj's divide, layers/linear.py:502)", p.dense_intermediate));
    }
    if !moe.shared_intermediate.is_multiple_of(tp) {
        return Err(format!(
            "the shared experts' width {} (moe_intermediate_size x n_shared_experts) is not divisible by {tp} (gate_up_proj's divide, layers/linear.py:502)",
            moe.shared_intermediate
        ));
    }
    let v = padded_vocab(m);
    if !v.is_multiple_of(tp) {
        return Err(format!("the padded vocabulary {v} is not divisible by {tp} (VocabParallelEmbedding, layers/vocab_parallel_embedding.py:304)"));
    }
    Ok(())
}

/// Bytes of one rank's weights as `DeepseekV2ForCausalLM` builds them (bf16 or fp16 `elem`,
/// expert parallelism off, `tp` passed [`check_tensor_parallel`]):
/// - attention (`DeepseekV2MLAAttention`, `deepseek_v2.py:1051-1113`): with q_lora_rank,
///   `fused_qkv_a_proj` (hidden → q_lora_rank + kv_lora_rank + qk_rope_head_dim, `disable_tp`:
///   whole on every rank, `:953-967`), `q_a_layernorm` and `q_b_proj` (column-parallel,
///   q_lora_rank → heads/tp × (qk_nope + qk_rope)); without, `kv_a_proj_with_mqa` (replicated)
///   and `q_proj` (column-parallel); `kv_a_layernorm`; `kv_b_proj` (column-parallel,
///   kv_lora_rank → heads/tp × (qk_nope + v_head_dim)); `o_proj` (row-parallel). No biases
///   (vLLM builds none, whatever attention_bias says: refused in `serve`);
/// - the two RMSNorms;
/// - layers below first_k_dense_replace: `DeepseekV2MLP` of intermediate_size / tp;
/// - the others, `DeepseekV2MoE` (`:291-395`): the router `GateLinear` (experts × hidden, the
///   weights' dtype), `e_score_correction_bias` (experts, float32) when topk_method is
///   noaux_tc, `shared_experts` (a `DeepseekV2MLP` of moe_intermediate_size × n_shared_experts;
///   AITER's fused shared experts are ROCm-only, `layers/fused_moe/utils.py:55-80`) and
///   FusedMoE's w13/w2 (as [`super::vllm_0_33::mlp_elements_per_rank`]'s, Triton on SM 9.0);
/// - the embedding and a separate `ParallelLMHead` (`:1917-1922`: built whatever
///   tie_word_embeddings says), padded vocabulary / tp rows each, and the final norm.
pub fn weight_bytes_per_rank(m: &ModelConfig, moe: &MoeConfig, p: &DeepseekParts, elem: usize, tp: usize) -> u64 {
    let tp = tp.max(1) as u64;
    let (d, h) = (m.d_model as u64, m.num_heads as u64 / tp);
    let (kv_lora, rope, nope, v) = (p.kv_lora_rank as u64, p.qk_rope_head_dim as u64, p.qk_nope_head_dim as u64, p.v_head_dim as u64);
    let qk = nope + rope;
    let mut attn = match p.q_lora_rank.map(|r| r as u64) {
        Some(q) => d * (q + kv_lora + rope) + q + q * h * qk,
        None => d * (kv_lora + rope) + d * h * qk,
    };
    attn += kv_lora + kv_lora * h * (nope + v) + h * v * d;
    let norms = 2 * d;
    let mlp = |width: u64| 3 * d * (width / tp);
    let (e, i) = (moe.experts as u64, moe.intermediate as u64 / tp);
    let sparse_mlp = e * d + mlp(moe.shared_intermediate as u64) + 3 * e * i * d;
    let dense_layers = p.first_k_dense.min(m.num_layers) as u64;
    let sparse_layers = m.num_layers as u64 - dense_layers;
    let vocab = 2 * (padded_vocab(m) as u64 / tp) * d;
    let elems = dense_layers * (attn + norms + mlp(p.dense_intermediate as u64)) + sparse_layers * (attn + norms + sparse_mlp) + vocab + d;
    let bias = if p.noaux_tc { sparse_layers * e * 4 } else { 0 };
    elems * elem as u64 + bias
}

/// One layer's page on one rank: block_size × (kv_lora_rank + qk_rope_head_dim) × kv bytes,
/// one head whatever the tensor-parallel size (`MLAAttentionSpec`, see the module's notes).
pub fn page_bytes(c: &ServeConfig, p: &DeepseekParts) -> u64 {
    c.block_size as u64 * head_size(p) as u64 * c.kv_bytes as u64
}

/// The forward's share of `profile_run`'s activation peak for DeepSeek-V3 over
/// T = max_num_batched_tokens tokens on one rank, an estimate read off vLLM's code, not
/// measured against vLLM (eager; the attention backend's workspaces are left out), in the
/// weights' dtype: the residual and the normed hidden states (T × hidden each) beside the
/// largest of
/// - a dense layer's MLP (`DeepseekV2MLP.forward`, `deepseek_v2.py:284-288`): gate_up_proj's
///   output (T × 2·intermediate/tp) and SiluAndMul's (T × intermediate/tp);
/// - a sparse layer: [`super::vllm_0_33::moe_forward_estimate`]'s routing, Triton workspaces
///   and output, with the shared experts' gate_up and SiluAndMul outputs beside them
///   (T × 3·S/tp, S = moe_intermediate_size × n_shared_experts);
/// - the latent attention's prefill (`MLACommonImpl`, `mla_attention.py`; `forward_mha`): the
///   queries (T × heads/tp × (qk_nope + qk_rope)), kv_b_proj's output (T × heads/tp ×
///   (qk_nope + v_head_dim)), the keys with the roped part expanded to every head
///   (T × heads/tp × (qk_nope + qk_rope)) and the output (T × heads/tp × v_head_dim).
pub fn forward_estimate(c: &ServeConfig, moe: &MoeConfig, p: &DeepseekParts) -> u64 {
    let tp = c.tensor_parallel_size.max(1) as u64;
    let t = c.max_num_batched_tokens as u64;
    let b = c.weight_bytes as u64;
    let d = c.model.d_model as u64;
    let h = c.model.num_heads as u64 / tp;
    let qk = (p.qk_nope_head_dim + p.qk_rope_head_dim) as u64;
    let dense = if p.first_k_dense > 0 { t * b * 3 * (p.dense_intermediate as u64 / tp) } else { 0 };
    // moe_forward_estimate counts the residual, the normed states and the output; take the
    // residual and normed states out to add them once below.
    let sparse = super::vllm_0_33::moe_forward_estimate(c, moe) - 2 * t * d * b + t * b * 3 * (moe.shared_intermediate as u64 / tp);
    let attention = t * h * b * (2 * qk + p.qk_nope_head_dim as u64 + 2 * p.v_head_dim as u64);
    2 * t * d * b + dense.max(sparse).max(attention)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deepseek_v3_page_is_one_latent_head() {
        let pr = crate::model::presets::find("DeepSeek-V3", Some(crate::model::Flavour::Hf)).unwrap();
        let (_, p) = parts(&pr.model).unwrap();
        assert_eq!(head_size(p), 576);
        assert!(MLA_HEAD_SIZES.contains(&head_size(p)));
    }
}
