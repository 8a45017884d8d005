//! The Python functions of transformers 5.23.0's mixture-of-experts models (`modeling_mixtral.py`,
//! `modeling_qwen3_moe.py`, `modeling_qwen2_moe.py`, `integrations/moe.py`), as frames for snapshots: the `def` line of
//! each (`inspect.getsourcelines` in the pinned release).
use super::hf_frames::HfFrames;
use crate::record::PyFn;

pub static MIXTRAL: HfFrames = HfFrames {
    rms_norm: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 142, name: "MixtralRMSNorm.forward" },
    rotary: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 189, name: "MixtralRotaryEmbedding.forward" },
    rotate_half: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 200, name: "rotate_half" },
    apply_rotary_pos_emb: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 207, name: "apply_rotary_pos_emb" },
    repeat_kv: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 233, name: "repeat_kv" },
    eager_attention_forward: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 245, name: "eager_attention_forward" },
    attention: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 288, name: "MixtralAttention.forward" },
    mlp: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 121, name: "MixtralSparseMoeBlock.forward" },
    decoder_layer: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 341, name: "MixtralDecoderLayer.forward" },
    model: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 416, name: "MixtralModel.forward" },
    for_causal_lm: PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 565, name: "MixtralForCausalLM.forward" },
};

pub static QWEN3_MOE: HfFrames = HfFrames {
    rms_norm: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 293, name: "Qwen3MoeRMSNorm.forward" },
    rotary: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 416, name: "Qwen3MoeRotaryEmbedding.forward" },
    rotate_half: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 50, name: "rotate_half" },
    apply_rotary_pos_emb: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 57, name: "apply_rotary_pos_emb" },
    repeat_kv: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 83, name: "repeat_kv" },
    eager_attention_forward: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 95, name: "eager_attention_forward" },
    attention: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 150, name: "Qwen3MoeAttention.forward" },
    mlp: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 275, name: "Qwen3MoeSparseMoeBlock.forward" },
    decoder_layer: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 318, name: "Qwen3MoeDecoderLayer.forward" },
    model: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 445, name: "Qwen3MoeModel.forward" },
    for_causal_lm: PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 594, name: "Qwen3MoeForCausalLM.forward" },
};

pub static MIXTRAL_ROUTER: PyFn = PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 103, name: "MixtralTopKRouter.forward" };
pub static MIXTRAL_EXPERTS: PyFn = PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 68, name: "MixtralExperts.forward" };
pub static QWEN3_MOE_ROUTER: PyFn = PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 257, name: "Qwen3MoeTopKRouter.forward" };
pub static QWEN3_MOE_EXPERTS: PyFn = PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 221, name: "Qwen3MoeExperts.forward" };
pub static GROUPED_MM_EXPERTS_FORWARD: PyFn = PyFn { file: "transformers/integrations/moe.py", line: 424, name: "grouped_mm_experts_forward" };
pub static BATCHED_MM_EXPERTS_FORWARD: PyFn = PyFn { file: "transformers/integrations/moe.py", line: 112, name: "batched_mm_experts_forward" };

/// `load_balancing_loss_func` of an MoE family's modeling file (the same function in each;
/// DeepSeek-V3's has none).
pub fn load_balancing_loss_func(family: crate::model::hf::moe::MoeFamily) -> &'static PyFn {
    use crate::model::hf::moe::MoeFamily;
    static MIXTRAL_LB: PyFn = PyFn { file: "transformers/models/mixtral/modeling_mixtral.py", line: 474, name: "load_balancing_loss_func" };
    static QWEN3_MOE_LB: PyFn = PyFn { file: "transformers/models/qwen3_moe/modeling_qwen3_moe.py", line: 503, name: "load_balancing_loss_func" };
    static QWEN2_MOE_LB: PyFn = PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 511, name: "load_balancing_loss_func" };
    static GPT_OSS_LB: PyFn = PyFn { file: "transformers/models/gpt_oss/modeling_gpt_oss.py", line: 491, name: "load_balancing_loss_func" };
    match family {
        MoeFamily::Mixtral => &MIXTRAL_LB,
        MoeFamily::Qwen3Moe => &QWEN3_MOE_LB,
        MoeFamily::Qwen2Moe => &QWEN2_MOE_LB,
        MoeFamily::GptOss => &GPT_OSS_LB,
        MoeFamily::DeepseekV3 => unreachable!("DeepSeek-V3 has no auxiliary loss"),
    }
}

/// The modeling file, router and experts frames of an MoE family.
pub fn of(family: crate::model::hf::moe::MoeFamily) -> (&'static HfFrames, &'static PyFn, &'static PyFn) {
    match family {
        crate::model::hf::moe::MoeFamily::Mixtral => (&MIXTRAL, &MIXTRAL_ROUTER, &MIXTRAL_EXPERTS),
        crate::model::hf::moe::MoeFamily::Qwen3Moe => (&QWEN3_MOE, &QWEN3_MOE_ROUTER, &QWEN3_MOE_EXPERTS),
        crate::model::hf::moe::MoeFamily::Qwen2Moe => (&QWEN2_MOE, &QWEN2_MOE_ROUTER, &QWEN2_MOE_EXPERTS),
        crate::model::hf::moe::MoeFamily::GptOss => (&GPT_OSS, &GPT_OSS_ROUTER, &GPT_OSS_EXPERTS),
        crate::model::hf::moe::MoeFamily::DeepseekV3 => (&DEEPSEEK_V3, &DEEPSEEK_V3_ROUTER, &DEEPSEEK_V3_EXPERTS),
    }
}

pub static QWEN2_MOE: HfFrames = HfFrames {
    rms_norm: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 64, name: "Qwen2MoeRMSNorm.forward" },
    rotary: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 111, name: "Qwen2MoeRotaryEmbedding.forward" },
    rotate_half: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 138, name: "rotate_half" },
    apply_rotary_pos_emb: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 145, name: "apply_rotary_pos_emb" },
    repeat_kv: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 171, name: "repeat_kv" },
    eager_attention_forward: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 183, name: "eager_attention_forward" },
    attention: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 229, name: "Qwen2MoeAttention.forward" },
    mlp: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 339, name: "Qwen2MoeSparseMoeBlock.forward" },
    decoder_layer: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 367, name: "Qwen2MoeDecoderLayer.forward" },
    model: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 447, name: "Qwen2MoeModel.forward" },
    for_causal_lm: PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 603, name: "Qwen2MoeForCausalLM.forward" },
};
pub static QWEN2_MOE_ROUTER: PyFn = PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 319, name: "Qwen2MoeTopKRouter.forward" };
pub static QWEN2_MOE_EXPERTS: PyFn = PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 283, name: "Qwen2MoeExperts.forward" };
pub static QWEN2_MOE_MLP: PyFn = PyFn { file: "transformers/models/qwen2_moe/modeling_qwen2_moe.py", line: 133, name: "Qwen2MoeMLP.forward" };

const GO: &str = "transformers/models/gpt_oss/modeling_gpt_oss.py";
/// gpt-oss (`rotate_half` is its `_apply_rotary_emb`, the chunk-and-cat rotation of one tensor).
pub static GPT_OSS: HfFrames = HfFrames {
    rms_norm: PyFn { file: GO, line: 56, name: "GptOssRMSNorm.forward" },
    rotary: PyFn { file: GO, line: 184, name: "GptOssRotaryEmbedding.forward" },
    rotate_half: PyFn { file: GO, line: 207, name: "_apply_rotary_emb" },
    apply_rotary_pos_emb: PyFn { file: GO, line: 218, name: "apply_rotary_pos_emb" },
    repeat_kv: PyFn { file: GO, line: 195, name: "repeat_kv" },
    eager_attention_forward: PyFn { file: GO, line: 227, name: "eager_attention_forward" },
    attention: PyFn { file: GO, line: 287, name: "GptOssAttention.forward" },
    mlp: PyFn { file: GO, line: 139, name: "GptOssMLP.forward" },
    decoder_layer: PyFn { file: GO, line: 339, name: "GptOssDecoderLayer.forward" },
    model: PyFn { file: GO, line: 431, name: "GptOssModel.forward" },
    for_causal_lm: PyFn { file: GO, line: 582, name: "GptOssForCausalLM.forward" },
};
pub static GPT_OSS_ROUTER: PyFn = PyFn { file: GO, line: 125, name: "GptOssTopKRouter.forward" };
pub static GPT_OSS_EXPERTS: PyFn = PyFn { file: GO, line: 89, name: "GptOssExperts.forward" };
pub static GPT_OSS_APPLY_GATE: PyFn = PyFn { file: GO, line: 81, name: "GptOssExperts._apply_gate" };

const DS: &str = "transformers/models/deepseek_v3/modeling_deepseek_v3.py";
/// DeepSeek-V3 (`mlp` is the dense `DeepseekV3MLP`; the sparse layers' block is
/// [`DEEPSEEK_V3_MOE`]).
pub static DEEPSEEK_V3: HfFrames = HfFrames {
    rms_norm: PyFn { file: DS, line: 46, name: "DeepseekV3RMSNorm.forward" },
    rotary: PyFn { file: DS, line: 93, name: "DeepseekV3RotaryEmbedding.forward" },
    rotate_half: PyFn { file: DS, line: 277, name: "rotate_half" },
    apply_rotary_pos_emb: PyFn { file: DS, line: 284, name: "apply_rotary_pos_emb" },
    repeat_kv: PyFn { file: DS, line: 225, name: "repeat_kv" },
    eager_attention_forward: PyFn { file: DS, line: 237, name: "eager_attention_forward" },
    attention: PyFn { file: DS, line: 426, name: "DeepseekV3Attention.forward" },
    mlp: PyFn { file: DS, line: 115, name: "DeepseekV3MLP.forward" },
    decoder_layer: PyFn { file: DS, line: 500, name: "DeepseekV3DecoderLayer.forward" },
    model: PyFn { file: DS, line: 581, name: "DeepseekV3Model.forward" },
    for_causal_lm: PyFn { file: DS, line: 656, name: "DeepseekV3ForCausalLM.forward" },
};
pub static DEEPSEEK_V3_ROUTER: PyFn = PyFn { file: DS, line: 133, name: "DeepseekV3TopkRouter.forward" };
pub static DEEPSEEK_V3_EXPERTS: PyFn = PyFn { file: DS, line: 174, name: "DeepseekV3Experts.forward" };
pub static DEEPSEEK_V3_MOE: PyFn = PyFn { file: DS, line: 215, name: "DeepseekV3MoE.forward" };
pub static DEEPSEEK_V3_EXPAND_KV: PyFn = PyFn { file: DS, line: 407, name: "DeepseekV3Attention.expand_kv" };
pub static DEEPSEEK_V3_ROPE_INTERLEAVE: PyFn = PyFn { file: DS, line: 310, name: "apply_rotary_pos_emb_interleave" };
