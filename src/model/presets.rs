//! The model sizes users run: the tables of reference-models.md and the workshop defaults.
use super::config::{Attention, Checkpoint, Flavour, ModelConfig};
use super::hf::moe::{ExpertsImplementation, MoeConfig, MoeFamily, Routing};
use super::hf::{Arch, HfConfig};

/// A named configuration with the run defaults its source uses.
#[derive(Clone, Debug)]
pub struct Preset {
    pub name: &'static str,
    pub model: ModelConfig,
    pub batch_size: usize,
    pub seq_len: usize,
    pub num_steps: usize,
    pub expected_params: u64,
}

fn cs336(name: &'static str, d: usize, f: usize, l: usize, h: usize, params: u64) -> Preset {
    Preset {
        name,
        model: ModelConfig {
            flavour: Flavour::Cs336,
            vocab_size: 10_000,
            d_model: d,
            num_layers: l,
            num_heads: h,
            num_kv_heads: h,
            d_ff: f,
            rope_theta: 10_000.0,
            norm_eps: 1e-5,
            norm_fp32_upcast: true,
            tied_embeddings: false,
            max_seq_len: 2048,
            attention: Attention::Naive,
            checkpoint: Checkpoint::None,
            fused_qkv: false,
            fused_gate_up: false,
            hf: None,
            tp: None,
        },
        batch_size: 4,
        seq_len: 512,
        num_steps: 10,
        expected_params: params,
    }
}

#[allow(clippy::too_many_arguments)]
fn tiny(name: &'static str, d: usize, l: usize, f: usize, s: usize, b: usize, steps: usize, max: usize, params: u64) -> Preset {
    Preset {
        name,
        model: ModelConfig {
            flavour: Flavour::Tinyllama,
            vocab_size: 1000,
            d_model: d,
            num_layers: l,
            num_heads: 8,
            num_kv_heads: 4,
            d_ff: f,
            rope_theta: 10_000.0,
            norm_eps: 1e-6,
            norm_fp32_upcast: false,
            tied_embeddings: true,
            max_seq_len: max,
            attention: Attention::Naive,
            checkpoint: Checkpoint::None,
            fused_qkv: false,
            fused_gate_up: false,
            hf: None,
            tp: None,
        },
        batch_size: b,
        seq_len: s,
        num_steps: steps,
        expected_params: params,
    }
}

/// The shape of a published Hugging Face model, as its config.json on the Hub gives it
/// (tests/fixtures/hf_models/<name>/config.json holds each file). Run defaults: batch 1,
/// context 2048.
#[allow(clippy::too_many_arguments)]
fn hf(name: &'static str, arch: Arch, [v, d, f, l, h, kv]: [usize; 6], theta: f64, eps: f64, max: usize, tied: bool, rope_type: Option<&str>, eos: i64, bos: Option<i64>, params: u64) -> Preset {
    let mut extra = HfConfig::new(arch, if arch == Arch::Qwen3 { 128 } else { d / h });
    extra.rope_type = rope_type.map(str::to_string);
    // config.json's eos_token_id (none of them names a pad token).
    extra.eos_token_id = vec![eos];
    // and its bos_token_id (OLMo-2's names none).
    extra.bos_token_id = bos.into_iter().collect();
    // Every shipped config.json says `"torch_dtype": "bfloat16"`.
    extra.torch_dtype = Some(crate::engine::DType::BF16);
    Preset {
        name,
        model: ModelConfig {
            flavour: Flavour::Hf,
            vocab_size: v,
            d_model: d,
            num_layers: l,
            num_heads: h,
            num_kv_heads: kv,
            d_ff: f,
            rope_theta: theta,
            norm_eps: eps,
            norm_fp32_upcast: true,
            tied_embeddings: tied,
            max_seq_len: max,
            attention: Attention::Naive,
            checkpoint: Checkpoint::None,
            fused_qkv: false,
            fused_gate_up: false,
            hf: Some(extra),
            tp: None,
        },
        batch_size: 1,
        seq_len: 2048,
        num_steps: 10,
        expected_params: params,
    }
}

/// An MoE preset: `experts` experts of the preset's d_ff, `top_k` per token, the top-k
/// renormalised (Mixtral always; Qwen3-30B-A3B's config says norm_topk_prob true).
fn moe(mut p: Preset, family: MoeFamily, experts: usize, top_k: usize) -> Preset {
    let hf = p.model.hf.as_mut().expect("an hf preset");
    hf.moe = Some(MoeConfig {
        family,
        experts,
        top_k,
        intermediate: p.model.d_ff,
        norm_topk_prob: true,
        implementation: ExpertsImplementation::default(),
        routing: Routing::default(),
        shared_intermediate: 0,
        gpt_oss: None,
        output_router_logits: false,
        router_aux_loss_coef: crate::model::hf::moe::ROUTER_AUX_LOSS_COEF,
        dense_layers: None,
        deepseek: None,
    });
    p
}

/// Other names of a preset: Mistral-7B is v0.3 (vocab 32768, no sliding window).
pub const ALIASES: [(&str, &str); 1] = [("Mistral-7B-v0.3", "Mistral-7B")];

/// Every preset, cs336 first.
pub fn all() -> Vec<Preset> {
    vec![
        cs336("small", 768, 3072, 12, 12, 128_625_408),
        cs336("medium", 1024, 4096, 24, 16, 423_183_360),
        cs336("large", 1280, 5120, 36, 20, 969_411_840),
        cs336("xl", 1600, 6400, 48, 25, 1_998_235_200),
        cs336("2.7B", 2560, 10240, 32, 32, 3_406_809_600),
        // The walkthrough's config (the default everywhere).
        tiny("walkthrough", 256, 4, 512, 128, 8, 20, 128, 2_617_600),
        // tiny_llama_v1.py's own command-line defaults.
        tiny("script", 512, 8, 2048, 256, 8, 20, 2048, 31_977_984),
        // launch_performance_study.sh problem sizes.
        tiny("tiny", 256, 4, 1024, 128, 8, 50, 128, 4_190_464),
        tiny("small", 512, 8, 2048, 256, 8, 50, 256, 31_977_984),
        tiny("medium", 1024, 12, 4096, 512, 16, 100, 512, 189_793_280),
        tiny("large", 2048, 16, 8192, 1024, 8, 100, 1024, 1_008_748_544),
        tiny("very_large", 4096, 24, 16384, 2048, 4, 100, 2048, 6_044_094_464),
        // [vocab, hidden, intermediate, layers, heads, kv heads]; the totals are what
        // transformers 5.23.0 builds from each config.json (meta device, tied weights once).
        hf("Llama-3.2-1B", Arch::Llama, [128_256, 2048, 8192, 16, 32, 8], 500_000.0, 1e-5, 131_072, true, Some("llama3"), 128001, Some(128000), 1_235_814_400),
        hf("Llama-3.1-8B", Arch::Llama, [128_256, 4096, 14336, 32, 32, 8], 500_000.0, 1e-5, 131_072, false, Some("llama3"), 128001, Some(128000), 8_030_261_248),
        hf("Llama-3.1-70B", Arch::Llama, [128_256, 8192, 28672, 80, 64, 8], 500_000.0, 1e-5, 131_072, false, Some("llama3"), 128001, Some(128000), 70_553_706_496),
        hf("Mistral-7B", Arch::Mistral, [32_768, 4096, 14336, 32, 32, 8], 1_000_000.0, 1e-5, 32_768, false, None, 2, Some(1), 7_248_023_552),
        hf("Qwen2.5-7B", Arch::Qwen2, [152_064, 3584, 18944, 28, 28, 4], 1_000_000.0, 1e-6, 131_072, false, None, 151643, Some(151643), 7_615_616_512),
        hf("Qwen3-8B", Arch::Qwen3, [151_936, 4096, 12288, 36, 32, 8], 1_000_000.0, 1e-6, 40_960, false, None, 151645, Some(151643), 8_190_735_360),
        // microsoft/Phi-3-mini-4k-instruct: a 2047-token sliding window, pad token 32000.
        with_hf(hf("Phi-3-mini", Arch::Phi3, [32_064, 3072, 8192, 32, 32, 32], 10_000.0, 1e-5, 4096, false, None, 32000, Some(1), 3_821_079_552), |h| {
            h.sliding_window = Some(2047);
            h.pad_token_id = Some(32000);
        }),
        // allenai/OLMo-2-1124-7B: saved in float32, pad token 100277.
        with_hf(hf("OLMo-2-7B", Arch::Olmo2, [100_352, 4096, 11008, 32, 32, 32], 500_000.0, 1e-6, 4096, false, None, 100257, None, 7_298_617_344), |h| {
            h.torch_dtype = Some(crate::engine::DType::F32);
            h.pad_token_id = Some(100277);
        }),
        // google/gemma-2-9b: saved in float32; 256-wide heads, a 4096 window on every other
        // layer, soft-capping 50 (scores) and 30 (logits).
        with_hf(hf("Gemma-2-9B", Arch::Gemma2, [256_000, 3584, 14336, 42, 16, 8], 10_000.0, 1e-6, 8192, true, None, 1, Some(2), 9_241_705_984), |h| {
            h.head_dim = 256;
            h.torch_dtype = Some(crate::engine::DType::F32);
            h.gemma = Some(super::hf::gemma::published(Arch::Gemma2, 42, 4096, 256.0, 10_000.0));
        }),
        // google/gemma-3-27b-it's text model (its text_config): 128-wide heads, a 1024 window
        // on five layers of six, RoPE bases 1e6 (linear ×8) and 1e4.
        with_hf(hf("Gemma-3-27B", Arch::Gemma3Text, [262_208, 5376, 21504, 62, 32, 16], 1_000_000.0, 1e-6, 131_072, true, Some("linear"), 1, Some(2), 27_009_346_304), |h| {
            h.head_dim = 128;
            h.eos_token_id = vec![1, 106];
            h.gemma = Some(super::hf::gemma::published(Arch::Gemma3Text, 62, 1024, 168.0, 10_000.0));
        }),
        // Mixture of experts (d_ff is one expert's width); 12,879,925,248 and 3,353,032,704
        // parameters active per token.
        moe(hf("Mixtral-8x7B", Arch::Mistral, [32_000, 4096, 14336, 32, 32, 8], 1_000_000.0, 1e-5, 32_768, false, None, 2, Some(1), 46_702_792_704), MoeFamily::Mixtral, 8, 2),
        moe(hf("Qwen3-30B-A3B", Arch::Qwen3, [151_936, 2048, 768, 48, 32, 4], 1_000_000.0, 1e-6, 40_960, false, None, 151645, Some(151643), 30_532_122_624), MoeFamily::Qwen3Moe, 128, 8),
        // 4,187,440,704 and 5,711,982,912 parameters active per token.
        gpt_oss("gpt-oss-20b", 24, 32, 20_914_757_184),
        gpt_oss("gpt-oss-120b", 36, 128, 116_829_156_672),
        deepseek_v3(),
    ]
}

/// deepseek-ai/DeepSeek-V3: its config.json (tests/fixtures/hf_models/DeepSeek-V3), less the fp8
/// `quantization_config` (the bf16 load vramscope models); 37,552,282,624 parameters active
/// per token.
fn deepseek_v3() -> Preset {
    let config = serde_json::json!({
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129_280,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
        "first_k_dense_replace": 3, "norm_topk_prob": true, "routed_scaling_factor": 2.5, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "kv_lora_rank": 512,
        "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "max_position_embeddings": 163_840, "rms_norm_eps": 1e-6, "rope_theta": 10_000, "tie_word_embeddings": false,
        "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16", "hidden_act": "silu",
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"}
    });
    let model = super::hf::deepseek_v3::parse(config.as_object().expect("a JSON object")).expect("DeepSeek-V3's config reads").config;
    Preset { name: "DeepSeek-V3", model, batch_size: 1, seq_len: 2048, num_steps: 10, expected_params: 671_026_404_352 }
}

/// openai/gpt-oss-20b and -120b: their config.json, less the MXFP4 `quantization_config` (the
/// bf16 load vramscope models), read by the gpt_oss config reader; they differ in depth and
/// experts.
fn gpt_oss(name: &'static str, layers: usize, experts: usize, params: u64) -> Preset {
    let types: Vec<&str> = (0..layers).map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
    let config = serde_json::json!({
        "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64,
        "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": layers, "num_local_experts": experts,
        "num_experts_per_tok": 4, "vocab_size": 201_088, "sliding_window": 128, "layer_types": types,
        "max_position_embeddings": 131_072, "rms_norm_eps": 1e-5, "rope_theta": 150_000, "attention_bias": true,
        "swiglu_limit": 7.0, "tie_word_embeddings": false, "eos_token_id": 200_002, "pad_token_id": 199_999,
        "torch_dtype": "bfloat16",
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false, "original_max_position_embeddings": 4096}
    });
    let model = super::hf::gpt_oss::parse(config.as_object().expect("a JSON object")).expect("gpt-oss's config reads").config;
    Preset { name, model, batch_size: 1, seq_len: 2048, num_steps: 10, expected_params: params }
}

/// A preset with `edit` applied to its hf options (the facts its config.json adds).
fn with_hf(mut p: Preset, edit: impl FnOnce(&mut HfConfig)) -> Preset {
    edit(p.model.hf.as_mut().expect("an hf preset"));
    p
}

/// Look up `name` ("2.7B", "cs336-small", "tinyllama-small", "walkthrough", …). A bare name
/// that exists in both flavours needs `flavour` or a prefix.
pub fn find(name: &str, flavour: Option<Flavour>) -> Result<Preset, String> {
    let (fl, bare) = match name.split_once('-') {
        Some((p, rest)) if Flavour::parse(p).is_some() => (Flavour::parse(p), rest),
        _ => (flavour, name),
    };
    let bare = ALIASES.iter().find(|(alias, _)| alias.eq_ignore_ascii_case(bare)).map_or(bare, |(_, to)| to);
    let matches: Vec<Preset> = all()
        .into_iter()
        .filter(|p| p.name.eq_ignore_ascii_case(bare) && fl.is_none_or(|f| f == p.model.flavour))
        .collect();
    match matches.len() {
        1 => Ok(matches.into_iter().next().unwrap()),
        0 => Err(format!("unknown preset '{name}'; known: {}", names().join(", "))),
        _ => Err(format!(
            "preset '{name}' exists in both flavours: say --flavour cs336|tinyllama or write cs336-{bare} / tinyllama-{bare}"
        )),
    }
}

/// Whether a bare `name` (no cs336-/tinyllama- prefix) names a preset in both flavours.
pub fn is_ambiguous(name: &str) -> bool {
    let prefixed = name.split_once('-').is_some_and(|(p, _)| Flavour::parse(p).is_some());
    !prefixed && all().iter().filter(|p| p.name.eq_ignore_ascii_case(name)).count() > 1
}

pub fn names() -> Vec<String> {
    all().iter().map(|p| format!("{}-{}", p.model.flavour, p.name)).collect()
}
