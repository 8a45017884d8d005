//! vLLM 0.33.0's start-up plan for gpt-oss (`model_executor/models/gpt_oss.py`) served from its
//! MXFP4 checkpoint on H100/H200: the terms that differ from
//! [`vllm_0_33`](super::vllm_0_33), each with the vllm-0.33.0 wheel's file and line.
//!
//! - The experts' backend (`select_mxfp4_moe_backend`, `layers/fused_moe/oracle/mxfp4.py:650-760`,
//!   over `_get_priority_backends_for_gpt_oss`, `:402-435`): FlashInfer's TRT-LLM experts need
//!   SM 10 (`experts/trtllm_mxfp4_moe.py:121-123`), AITER needs ROCm, so SM 9.0 takes TRITON, the
//!   OAI Triton kernels (`experts/gpt_oss_triton_kernels_moe.py:41-55`, `:1525-1526`), from the
//!   `triton_kernels` vendored in the wheel (`vllm/third_party/triton_kernels`,
//!   `utils/import_utils.py:56-72`).
//! - Its intermediate size per rank: I/tp rounded up to 64
//!   (`mxfp4_round_up_hidden_size_and_intermediate_size`, `oracle/mxfp4.py:916`; the hidden size
//!   stays, `fused_moe_method_base.py:96-100`) ([`intermediate_per_rank`]).
//! - The experts' bytes after loading ([`experts_bytes_per_rank`]):
//!   `GptOssMxfp4MoEMethod.create_weights` (`quantization/mxfp4.py:200-290`) makes uint8 values
//!   (two 4-bit values a byte) and uint8 scales (one per 32), and bf16 biases; after loading,
//!   `convert_gpt_oss_weight_to_mxfp4_moe_kernel_format` (`oracle/mxfp4.py:1444-1480`) turns the
//!   biases into float32 copies (`replace_parameter`, `quantization/mxfp4.py:374-376`, frees the
//!   bf16 ones) and swizzles values and scales with `_swizzle_mxfp4`
//!   (`quantization/utils/mxfp4_utils.py:65-165`), then deletes the loaded ones (`:1469-1472`).
//!   On SM 9.0 the scales' K (blocks of 32) is first padded to a multiple of 4 (`mxfp4_utils.py:136-139`);
//!   the values go through triton_kernels' `HopperMXValueLayout.swizzle_data`
//!   (`tensor_details/layout_details/hopper_value.py`: rows padded to 16, packed bytes along K
//!   to 32) and the scales through `HopperMXScaleLayout.swizzle_data` (`hopper_scale.py`: rows
//!   padded to 256, K to 2), plain torch pads and permutes. vLLM's own conversion, run on the
//!   meta device with the platform answering SM 9.0 (`tools/vllm/serve_grid.py --gpt-oss`),
//!   gives these bytes; they are derived from that source, not measured on a card.
//! - The rest is bf16 (`Mxfp4Config.get_quant_method` gives linear layers
//!   `UnquantizedLinearMethod`, `quantization/mxfp4.py:91-107`): qkv_proj and o_proj with biases
//!   (`gpt_oss.py:137-152`), the attention sinks, heads/tp in the model dtype
//!   (`gpt_oss.py:131`; `make_attention_sink`, `model_loader/weight_utils.py:1584-1592`), the router
//!   (`GateLinear` with a bias, whole on every rank, `gpt_oss.py:382-387`), two RMSNorms a layer,
//!   the embedding, the untied lm_head (`gpt_oss.py:1417`) and the final norm.
//! - KV cache: even layers slide over `sliding_window`, odd ones are full, whatever
//!   `layer_types` says (`OAIAttention._build_attention`, `gpt_oss.py:175`); sinks keep the
//!   plain specs, and FlashAttention 3 (SM 9.0) takes them and an fp8 cache
//!   (`v1/attention/backends/fa_utils.py:319-322`, `:282-316`), so the groups and plan are
//!   [`super::vllm_hybrid`]'s.
use super::hf::gpt_oss::GptOssParts;
use super::hf::moe::{MoeConfig, MoeFamily};
use super::vllm_0_33::{padded_vocab, ServeConfig};
use super::ModelConfig;

/// gpt-oss's parts, when the model is gpt-oss.
pub fn parts(m: &ModelConfig) -> Option<(&MoeConfig, &GptOssParts)> {
    let moe = m.hf()?.moe.as_ref().filter(|moe| moe.family == MoeFamily::GptOss)?;
    Some((moe, moe.gpt_oss.as_ref()?))
}

/// Per layer, its window (None: full): even layers slide (`gpt_oss.py:175`).
pub fn layer_windows(m: &ModelConfig, p: &GptOssParts) -> Vec<Option<usize>> {
    (0..m.num_layers).map(|i| (i % 2 == 0 && p.window > 0).then_some(p.window)).collect()
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// The experts' intermediate size on one rank: I/tp rounded up to 64 (`oracle/mxfp4.py:916`).
pub fn intermediate_per_rank(moe: &MoeConfig, tp: usize) -> u64 {
    round_up(moe.intermediate as u64 / tp.max(1) as u64, 64)
}

/// One layer's experts on one rank, in bytes, as `GptOssMxfp4MoEMethod` leaves them on SM 9.0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertBytes {
    pub w13_weight: u64,
    pub w2_weight: u64,
    pub w13_weight_scale: u64,
    pub w2_weight_scale: u64,
    pub w13_bias: u64,
    pub w2_bias: u64,
}

impl ExpertBytes {
    pub fn total(&self) -> u64 {
        self.w13_weight + self.w2_weight + self.w13_weight_scale + self.w2_weight_scale + self.w13_bias + self.w2_bias
    }
}

/// `HopperMXValueLayout.swizzle_data` of E experts' (n, k/2) packed values (mma_version 3: rows
/// padded to 4 x 2 x 2 = 16 (threads x warp tile x scott trick), packed bytes along K to
/// 4 x 2 x 4 = 32 (k tile x warp tile x threads); the bit twiddle keeps the bytes).
fn swizzled_values(e: u64, n: u64, k: u64) -> u64 {
    e * round_up(n, 16) * round_up(k / 2, 32)
}

/// SM 9.0's pad of the scales' K (k/32 blocks) to a multiple of 4 (`mxfp4_utils.py:138-139`), then
/// `HopperMXScaleLayout.swizzle_data` (num_warps 8): rows padded to 2 x 8 x 2 x 8 = 256, K to 2.
fn swizzled_scales(e: u64, n: u64, k: u64) -> u64 {
    e * round_up(n, 256) * round_up(round_up(k / 32, 4), 2)
}

/// [`ExpertBytes`] of one layer on one rank: w13 is (E, 2I, hidden) and w2 (E, hidden, I) as
/// the matmul's (outputs, reduction) with I = [`intermediate_per_rank`]; biases float32.
pub fn experts_bytes_per_rank(m: &ModelConfig, moe: &MoeConfig, tp: usize) -> ExpertBytes {
    let (e, h, i) = (moe.experts as u64, m.d_model as u64, intermediate_per_rank(moe, tp));
    ExpertBytes {
        w13_weight: swizzled_values(e, 2 * i, h),
        w2_weight: swizzled_values(e, h, i),
        w13_weight_scale: swizzled_scales(e, 2 * i, h),
        w2_weight_scale: swizzled_scales(e, h, i),
        w13_bias: e * 2 * i * 4,
        w2_bias: e * h * 4,
    }
}

/// Elements of one layer's bf16 weights on one rank: qkv_proj (heads/tp + 2 KV heads per rank)
/// x head_dim outputs and their bias, o_proj (heads/tp x head_dim inputs) and its whole bias,
/// the sinks (heads/tp), the router (experts x hidden and a bias of experts), two norms.
pub fn bf16_layer_elements(m: &ModelConfig, moe: &MoeConfig, tp: usize) -> u64 {
    let (d, hd, e) = (m.d_model as u64, m.head_dim() as u64, moe.experts as u64);
    let h = (m.num_heads / tp.max(1)) as u64;
    let kv = super::vllm_0_33::kv_heads_per_rank(m, tp) as u64;
    let qkv_out = (h + 2 * kv) * hd;
    d * qkv_out + qkv_out + h * hd * d + d + h + e * d + e + 2 * d
}

/// Bytes of one rank's weights (`elem`: the bf16 parts' element bytes).
pub fn weight_bytes_per_rank(m: &ModelConfig, moe: &MoeConfig, elem: usize, tp: usize) -> u64 {
    let rows = padded_vocab(m) as u64 / tp.max(1) as u64;
    let bf16 = m.num_layers as u64 * bf16_layer_elements(m, moe, tp) + 2 * rows * m.d_model as u64 + m.d_model as u64;
    bf16 * elem as u64 + m.num_layers as u64 * experts_bytes_per_rank(m, moe, tp).total()
}

/// What vLLM fails on before it shards gpt-oss over `tp` ranks beyond the generic checks:
/// `num_local_key_value_heads = num_key_value_heads // tp_size` (`gpt_oss.py:156`) is 0 when
/// the ranks outnumber the KV heads (gpt-oss does not replicate them).
pub fn check_tensor_parallel(m: &ModelConfig, tp: usize) -> Result<(), String> {
    if tp > m.num_kv_heads {
        return Err(format!(
            "{tp} ranks outnumber gpt-oss's {} KV heads: OAIAttention gives each rank num_key_value_heads // tp_size = 0 of them (gpt_oss.py:156)",
            m.num_kv_heads
        ));
    }
    Ok(())
}

/// One gpt-oss layer's forward over T = max_num_batched_tokens tokens on one rank, an estimate
/// read off vLLM's code (not measured against vLLM), in bf16 unless said: the residual and the
/// normed hidden states (T x hidden each); the router logits (T x experts); triton_kernels'
/// fused routing (`triton_kernel_moe_forward`, `experts/gpt_oss_triton_kernels_moe.py:629-631`):
/// the gate scales (T x top_k) and the gather and scatter indices (int32, two of T x top_k
/// each); the first matmul's output, the SwiGLU-fused intermediate cache (T x top_k x I/tp,
/// `:792`); the second matmul's scratch (T x top_k x hidden: with top_k > 1 the scatter is not
/// fused, `third_party/triton_kernels/matmul_ogs.py:168-170`, `:369`) and the output
/// (T x hidden, `:680`).
pub fn forward_estimate(c: &ServeConfig, moe: &MoeConfig) -> u64 {
    let t = c.max_num_batched_tokens as u64;
    let b = c.weight_bytes as u64;
    let d = c.model.d_model as u64;
    let (e, k) = (moe.experts as u64, moe.top_k as u64);
    let i = intermediate_per_rank(moe, c.tensor_parallel_size);
    let routing = t * e * b + t * k * (b + 4 * 4);
    2 * t * d * b + routing + t * k * i * b + t * k * d * b + t * d * b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{presets, Flavour};

    #[test]
    fn gpt_oss_20b_experts_at_tp_1_and_2() {
        // tools/vllm/serve_grid.py --gpt-oss: vLLM's conversion on the meta device.
        let m = presets::find("gpt-oss-20b", Some(Flavour::Hf)).unwrap().model;
        let (moe, _) = parts(&m).unwrap();
        let one = experts_bytes_per_rank(&m, moe, 1);
        assert_eq!((one.w13_weight_scale, one.w2_weight_scale), (32 * 5888 * 92, 32 * 3072 * 92));
        let two = experts_bytes_per_rank(&m, moe, 2);
        assert_eq!(intermediate_per_rank(moe, 2), 1472);
        assert_eq!((two.w13_weight, two.w2_weight, two.w13_weight_scale, two.w2_weight_scale), (135_659_520, 67_829_760, 9_043_968, 4_718_592));
        assert_eq!((two.w13_bias, two.w2_bias), (376_832, 368_640));
    }
}
