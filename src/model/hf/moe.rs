//! Mixture-of-experts configs: transformers 5.23's `MixtralConfig`, `Qwen3MoeConfig` and
//! `Qwen2MoeConfig` read
//! into an [`MoeConfig`] (the op sequence is `moe_5_23.rs`), the run options
//! (`experts_implementation`, the routing), and the guards that keep an MoE config from ever
//! running as a dense model: an MoE `model_type` vramscope does not run (DeepSeek, OLMoE …)
//! is refused, and so is a dense `model_type` (llama, mistral, qwen2, qwen3) whose config
//! carries expert keys (a Mixtral config relabelled `mistral`), naming the keys.
//! The measured ground truth is tests/fixtures/moe_grid (tools/pytorch/measure_moe.py).
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// config.json fields only mixture-of-experts configs carry (Mixtral, Qwen2/3-MoE, DeepSeek,
/// gpt-oss, OLMoE, Jamba …): a count of experts, the experts per token, an expert's width.
pub const EXPERT_KEYS: [&str; 11] = [
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "n_shared_experts",
    "num_experts_per_tok",
    "experts_per_token",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "router_aux_loss_coef",
    "decoder_sparse_step",
    "moe_layer_freq",
];

/// The MoE `model_type`s of transformers 5.23 people ask about (mixtral, qwen3_moe,
/// qwen2_moe and gpt_oss run; gpt_oss has its own reader).
pub const MOE_MODEL_TYPES: [&str; 9] = ["mixtral", "qwen3_moe", "qwen2_moe", "deepseek_v3", "deepseek_v2", "gpt_oss", "olmoe", "jamba", "dbrx"];

/// The expert keys `obj` sets to something other than null, 0, false or an empty list (a
/// dense config may write `"num_experts": 0`).
pub fn expert_keys(obj: &Map<String, Value>) -> Vec<&'static str> {
    EXPERT_KEYS
        .into_iter()
        .filter(|k| match obj.get(*k) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Number(n)) => n.as_f64().is_some_and(|x| x != 0.0),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        })
        .collect()
}

/// A dense `model_type`'s config with expert keys: refused, naming them (transformers would
/// build the dense model and ignore them; the user asked about the MoE).
pub fn refuse_dense_with_experts(obj: &Map<String, Value>, model_type: &str) -> Result<(), String> {
    let keys = expert_keys(obj);
    if keys.is_empty() {
        return Ok(());
    }
    let listed = keys.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ");
    Err(format!(
        "model_type '{model_type}' is a dense model, but the config sets the mixture-of-experts field{} {listed}: \
         transformers would build the dense {model_type} and ignore the experts; vramscope refuses rather than \
         answer for the wrong model (write the MoE model_type: mixtral, qwen3_moe, qwen2_moe or gpt_oss)",
        if keys.len() > 1 { "s" } else { "" }
    ))
}

/// The MoE families vramscope runs: their router differs (Mixtral renormalises its top-k
/// in fp32 and hands fp32 weights to the experts; Qwen3-MoE renormalises when
/// `norm_topk_prob` and casts the weights back to the logits' dtype).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoeFamily {
    Mixtral,
    Qwen3Moe,
    /// Qwen2-MoE: Qwen3-MoE's router, plus a shared expert on every token.
    Qwen2Moe,
    /// gpt-oss: a biased router softmaxed over its top-k logits, biased experts with a
    /// clamped SwiGLU, and its own attention (src/model/hf/gpt_oss.rs).
    GptOss,
    /// DeepSeek-V3: a sigmoid router with a score-correction bias and group-limited top-k, a
    /// shared MLP, dense first layers and multi-head latent attention (src/model/hf/deepseek_v3.rs).
    DeepseekV3,
}

impl MoeFamily {
    pub fn model_type(self) -> &'static str {
        match self {
            MoeFamily::Mixtral => "mixtral",
            MoeFamily::Qwen3Moe => "qwen3_moe",
            MoeFamily::Qwen2Moe => "qwen2_moe",
            MoeFamily::GptOss => "gpt_oss",
            MoeFamily::DeepseekV3 => "deepseek_v3",
        }
    }
}

/// `experts_implementation` (`from_pretrained(..., experts_implementation=...)`): how the
/// experts' matmuls run (integrations/moe.py).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertsImplementation {
    /// The modeling file's loop over the experts that were hit, `index_add_` into the output.
    Eager,
    /// One bmm per token-expert pair over the gathered expert weights.
    BatchedMm,
    /// `grouped_mm` over the tokens sorted by expert (transformers' default where it dispatches).
    #[default]
    GroupedMm,
}

impl ExpertsImplementation {
    pub const ALL: [ExpertsImplementation; 3] = [ExpertsImplementation::Eager, ExpertsImplementation::BatchedMm, ExpertsImplementation::GroupedMm];
    pub fn parse(s: &str) -> Option<ExpertsImplementation> {
        ExpertsImplementation::ALL.into_iter().find(|e| e.name() == s.to_ascii_lowercase().replace('-', "_"))
    }
    pub fn name(self) -> &'static str {
        match self {
            ExpertsImplementation::Eager => "eager",
            ExpertsImplementation::BatchedMm => "batched_mm",
            ExpertsImplementation::GroupedMm => "grouped_mm",
        }
    }
}

/// How many tokens each expert gets (`--routing`): the data decides on a GPU, so a run says
/// which split it assumes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// Token t goes to experts (t·k + j) mod E: every expert gets T·k/E (±1).
    #[default]
    Balanced,
    /// Every token goes to the same k experts.
    Worst,
    /// Tokens per expert, from a file (they add up to T·k, none above T).
    Counts(Vec<usize>),
}

impl Routing {
    pub fn name(&self) -> String {
        match self {
            Routing::Balanced => "balanced".into(),
            Routing::Worst => "worst".into(),
            Routing::Counts(c) => format!("counts {c:?}"),
        }
    }

    /// Tokens per expert for `tokens` tokens routed to `top_k` of `experts` each.
    pub fn counts(&self, tokens: usize, top_k: usize, experts: usize) -> Result<Vec<usize>, String> {
        let pairs = tokens.checked_mul(top_k).ok_or("tokens × top-k overflows")?;
        match self {
            Routing::Balanced => Ok((0..experts).map(|e| pairs / experts + usize::from(e < pairs % experts)).collect()),
            Routing::Worst => Ok((0..experts).map(|e| if e < top_k { tokens } else { 0 }).collect()),
            Routing::Counts(c) => {
                if c.len() != experts {
                    return Err(format!("--routing: the file gives {} counts for {experts} experts", c.len()));
                }
                if c.iter().sum::<usize>() != pairs {
                    return Err(format!("--routing: the counts add up to {}, not tokens × top-k = {pairs}", c.iter().sum::<usize>()));
                }
                if let Some(n) = c.iter().find(|&&n| n > tokens) {
                    return Err(format!("--routing: an expert gets {n} tokens, more than the {tokens} there are (top-k picks distinct experts)"));
                }
                Ok(c.clone())
            }
        }
    }
}

/// What an MoE model adds to [`HfConfig`](super::HfConfig): every decoder layer's MLP is a
/// sparse block of `experts` experts of width `intermediate`, `top_k` per token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MoeConfig {
    pub family: MoeFamily,
    pub experts: usize,
    pub top_k: usize,
    /// One expert's intermediate size.
    pub intermediate: usize,
    /// Qwen3-MoE's `norm_topk_prob` (Mixtral always renormalises).
    pub norm_topk_prob: bool,
    pub implementation: ExpertsImplementation,
    pub routing: Routing,
    /// Qwen2-MoE's shared expert: a dense MLP of this width on every token, scaled by
    /// `sigmoid(shared_expert_gate(x))` (0: none).
    #[serde(default)]
    pub shared_intermediate: usize,
    /// gpt-oss's attention layout and SwiGLU (None for the other families).
    #[serde(default)]
    pub gpt_oss: Option<super::gpt_oss::GptOssParts>,
    /// DeepSeek-V3's attention, router and layer layout (None for the other families).
    #[serde(default)]
    pub deepseek: Option<super::deepseek_v3::DeepseekParts>,
    /// `output_router_logits` (off by default): the routers' logits are kept in the output and
    /// `load_balancing_loss_func` runs on them (src/model/hf/router_aux_loss.rs).
    #[serde(default)]
    pub output_router_logits: bool,
    /// `router_aux_loss_coef`: the aux loss's weight in the training loss (no bytes depend on it).
    #[serde(default = "default_aux_loss_coef")]
    pub router_aux_loss_coef: f64,
    /// Qwen2-MoE/Qwen3-MoE layers built dense (`mlp_only_layers`, `decoder_sparse_step`), set by
    /// `serve` alone ([`dense_layers`]): vLLM's plan models them, the transformers side refuses
    /// the mix in [`read`]. None: every layer sparse.
    #[serde(default)]
    pub dense_layers: Option<DenseLayers>,
}

/// Layers of an MoE model built with a dense MLP instead of the experts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DenseLayers {
    /// Their indices.
    pub layers: Vec<usize>,
    /// Their MLP's width (`intermediate_size`).
    pub intermediate: usize,
}

/// `router_aux_loss_coef`'s default in MixtralConfig, Qwen3MoeConfig, Qwen2MoeConfig and GptOssConfig.
pub const ROUTER_AUX_LOSS_COEF: f64 = 0.001;

fn default_aux_loss_coef() -> f64 {
    ROUTER_AUX_LOSS_COEF
}

thread_local! {
    static DECODE_BATCHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// generate()'s `_optimize_model_for_decode` (transformers 5.23 generation/utils.py, around
/// `_sample`'s decode loop): on a device other than the CPU, every grouped_mm experts
/// implementation runs as batched_mm for the decode forwards ("much more performant than
/// 'grouped_mm' on smaller inputs"), which gathers each token's expert weights. Measured on an
/// H200 (tests/gpu_grid.rs: the MoE generate points). The prefill and beam search keep the
/// configured implementation. While the guard lives, [`MoeConfig::implementation_now`] says so.
pub fn decode_as_batched_mm() -> crate::engine::runtime::Guard {
    let was = DECODE_BATCHED.with(|c| c.replace(true));
    crate::engine::runtime::Guard::new(move || DECODE_BATCHED.with(|c| c.set(was)))
}

impl MoeConfig {
    /// The experts implementation this forward runs: batched_mm for grouped_mm inside
    /// [`decode_as_batched_mm`].
    pub fn implementation_now(&self) -> ExpertsImplementation {
        if self.implementation == ExpertsImplementation::GroupedMm && DECODE_BATCHED.with(|c| c.get()) {
            ExpertsImplementation::BatchedMm
        } else {
            self.implementation
        }
    }
}

impl MoeConfig {
    /// The aux loss's coefficient when `output_router_logits` is on.
    pub fn aux_loss(&self) -> Option<f64> {
        self.output_router_logits.then_some(self.router_aux_loss_coef)
    }
}

impl MoeConfig {
    /// One expert's parameters: its three matrices, and gpt-oss's biases (2·I + hidden).
    pub fn expert_params(&self, hidden: usize) -> u64 {
        let i = self.intermediate as u64;
        let mats = (3 * i).saturating_mul(hidden as u64);
        if self.family == MoeFamily::GptOss { mats.saturating_add(2 * i + hidden as u64) } else { mats }
    }
}

/// The shape of a Mixtral or Qwen3-MoE config, as its config class reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoeShape {
    pub model_type: &'static str,
    pub hidden: usize,
    /// Each expert's intermediate size (Mixtral's `intermediate_size`, Qwen3-MoE's
    /// `moe_intermediate_size`).
    pub expert_intermediate: usize,
    /// A dense layer's MLP width (Qwen3-MoE's `intermediate_size`, in `mlp_only_layers`).
    pub dense_intermediate: usize,
    /// Qwen2-MoE's shared expert width (0: none).
    pub shared_intermediate: usize,
    /// Qwen2-MoE's `qkv_bias` (true by default).
    pub qkv_bias: bool,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub experts: usize,
    pub top_k: usize,
    pub tied: bool,
    /// Which layers have experts (the others a dense MLP).
    pub sparse: Vec<bool>,
}

/// Parameters in total and per token (the top-k experts of each sparse layer in place of all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeCounts {
    pub total: u64,
    pub active: u64,
}

fn get(obj: &Map<String, Value>, k: &str, default: u64) -> Result<u64, String> {
    match obj.get(k) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_u64().filter(|&n| n > 0).ok_or_else(|| format!("field '{k}' must be a positive integer, found {v}")),
    }
}

fn size(n: u64, k: &str) -> Result<usize, String> {
    usize::try_from(n).map_err(|_| format!("field '{k}' is too large ({n})"))
}

impl MoeShape {
    /// Read `obj` as `MixtralConfig` or `Qwen3MoeConfig` (their defaults where a field is
    /// absent); None for the other MoE types.
    pub fn read(obj: &Map<String, Value>, model_type: &str) -> Option<Result<MoeShape, String>> {
        let (mixtral, qwen2) = match model_type {
            "mixtral" => (true, false),
            "qwen3_moe" => (false, false),
            "qwen2_moe" => (false, true),
            _ => return None,
        };
        Some((|| {
            let u = |k: &str, d: u64| get(obj, k, d).and_then(|n| size(n, k));
            let hidden = u("hidden_size", if mixtral { 4096 } else { 2048 })?;
            let heads = u("num_attention_heads", if qwen2 { 16 } else { 32 })?;
            let layers = u("num_hidden_layers", if mixtral { 32 } else { 24 })?;
            // Neither config class has a head_dim default: the attention takes hidden / heads.
            let head_dim = match obj.get("head_dim") {
                Some(v) if !v.is_null() => u("head_dim", 0)?,
                _ => hidden / heads,
            };
            let dense_intermediate = u("intermediate_size", if mixtral { 14336 } else if qwen2 { 5632 } else { 6144 })?;
            let (expert_intermediate, experts) = match (mixtral, qwen2) {
                (true, _) => (dense_intermediate, u("num_local_experts", 8)?),
                (_, true) => (u("moe_intermediate_size", 1408)?, u("num_experts", 60)?),
                _ => (u("moe_intermediate_size", 768)?, u("num_experts", 128)?),
            };
            let shared_intermediate = if qwen2 { u("shared_expert_intermediate_size", 5632)? } else { 0 };
            let step = if mixtral { 1 } else { u("decoder_sparse_step", 1)? };
            let only: Vec<u64> = match obj.get("mlp_only_layers") {
                Some(Value::Array(a)) if !mixtral => a.iter().map(|x| x.as_u64().ok_or_else(|| format!("field 'mlp_only_layers' must hold layer indices, found {x}"))).collect::<Result<_, _>>()?,
                _ => Vec::new(),
            };
            let sparse = (0..layers).map(|i| !only.contains(&(i as u64)) && (i + 1) % step == 0).collect();
            Ok(MoeShape {
                model_type: if mixtral { "mixtral" } else if qwen2 { "qwen2_moe" } else { "qwen3_moe" },
                hidden,
                expert_intermediate,
                shared_intermediate,
                dense_intermediate,
                layers,
                heads,
                kv_heads: u("num_key_value_heads", if mixtral { 8 } else if qwen2 { 16 } else { 4 })?,
                head_dim,
                vocab: u("vocab_size", if mixtral { 32000 } else { 151936 })?,
                experts,
                top_k: u("num_experts_per_tok", if mixtral { 2 } else if qwen2 { 4 } else { 8 })?,
                qkv_bias: qwen2 && obj.get("qkv_bias").and_then(Value::as_bool).unwrap_or(true),
                tied: obj.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false),
                sparse,
            })
        })())
    }

    /// The parameter counts of transformers' build (checked against its meta build in
    /// tests/moe_grid.rs): embedding, per layer q/k/v/o (Qwen3-MoE: q_norm and k_norm), the
    /// router (experts × hidden) and the 3-D `gate_up_proj` (experts, 2·I, hidden) and
    /// `down_proj` (experts, hidden, I) — or a dense MLP — and two norms; the final norm and
    /// the head unless tied.
    pub fn counts(&self) -> Result<MoeCounts, String> {
        let over = || format!("the {} parameter count overflows", self.model_type);
        let m = |a: usize, b: usize| (a as u64).checked_mul(b as u64).ok_or_else(over);
        let (d, hd) = (self.hidden, self.head_dim);
        let mut attn = m(d, (self.heads + self.heads + 2 * self.kv_heads) * hd)? + if self.model_type == "qwen3_moe" { 2 * hd as u64 } else { 0 };
        if self.qkv_bias {
            attn += ((self.heads + 2 * self.kv_heads) * hd) as u64;
        }
        // The shared expert's three matrices and its (1, hidden) gate, in every sparse layer.
        let shared = if self.shared_intermediate > 0 { m(3 * self.shared_intermediate, d)? + d as u64 } else { 0 };
        let expert = m(3 * self.expert_intermediate, d)?;
        let (mut total, mut active) = (0u64, 0u64);
        for &sparse in &self.sparse {
            let (all, used) = if sparse {
                let router = m(self.experts, d)?;
                (m(self.experts, 1)?.checked_mul(expert).ok_or_else(over)? + router + shared, expert.checked_mul(self.top_k as u64).ok_or_else(over)? + router + shared)
            } else {
                let mlp = m(3 * self.dense_intermediate, d)?;
                (mlp, mlp)
            };
            let layer = attn + 2 * d as u64;
            total = total.checked_add(layer + all).ok_or_else(over)?;
            active = active.checked_add(layer + used).ok_or_else(over)?;
        }
        let outer = m(self.vocab, d)? * if self.tied { 1 } else { 2 } + d as u64;
        Ok(MoeCounts { total: total.checked_add(outer).ok_or_else(over)?, active: active.checked_add(outer).ok_or_else(over)? })
    }
}

/// What a Mixtral or Qwen3-MoE config.json adds to its dense family's reading (Mixtral's
/// attention is Mistral's, Qwen3-MoE's Qwen3's): the experts, and the dense fields whose
/// defaults differ. None for a dense `model_type`.
pub struct MoeRead {
    pub arch: super::Arch,
    pub moe: MoeConfig,
    /// Qwen3-MoE's `num_key_value_heads` default (4; Qwen3's is 32).
    pub kv_default: Option<usize>,
    /// Qwen3-MoE: hidden / heads when no head_dim is given (Qwen3's default is 128).
    pub head_dim_default: Option<usize>,
    /// Qwen2-MoE's `qkv_bias` (Qwen2's biases are always on).
    pub qkv_bias: Option<bool>,
}

/// The layers a Qwen2-MoE/Qwen3-MoE config makes dense (not sparse: in `mlp_only_layers`, or
/// `(index + 1) % decoder_sparse_step != 0`), as vLLM's and transformers' decoder layers decide;
/// None for other configs or when every layer is sparse.
pub fn dense_layers(obj: &Map<String, Value>, model_type: &str) -> Result<Option<DenseLayers>, String> {
    let Some(shape) = MoeShape::read(obj, model_type) else { return Ok(None) };
    let shape = shape?;
    let layers: Vec<usize> = shape.sparse.iter().enumerate().filter(|(_, s)| !**s).map(|(i, _)| i).collect();
    Ok((!layers.is_empty()).then_some(DenseLayers { layers, intermediate: shape.dense_intermediate }))
}

/// Read the experts of an MoE config (`model_type` mixtral or qwen3_moe); None for the
/// others. What transformers would run but vramscope does not model is refused, naming the
/// field: dense layers among the sparse ones, router jitter.
pub fn read(obj: &Map<String, Value>, model_type: &str) -> Option<Result<MoeRead, String>> {
    let shape = MoeShape::read(obj, model_type)?;
    Some((|| {
        let shape = shape?;
        if shape.sparse.iter().any(|s| !s) {
            return Err("fields 'decoder_sparse_step'/'mlp_only_layers' make some layers dense: a mix of dense and sparse layers is not modelled".into());
        }
        let (output_router_logits, router_aux_loss_coef) = aux_loss_fields(obj)?;
        if obj.get("router_jitter_noise").and_then(Value::as_f64).is_some_and(|j| j != 0.0) {
            return Err("field 'router_jitter_noise' is not 0: the jitter's random tensor in training is not modelled".into());
        }
        let (mixtral, qwen2) = (shape.model_type == "mixtral", shape.model_type == "qwen2_moe");
        let moe = MoeConfig {
            family: if mixtral { MoeFamily::Mixtral } else if qwen2 { MoeFamily::Qwen2Moe } else { MoeFamily::Qwen3Moe },
            shared_intermediate: shape.shared_intermediate,
            experts: shape.experts,
            top_k: shape.top_k,
            intermediate: shape.expert_intermediate,
            norm_topk_prob: mixtral || obj.get("norm_topk_prob").and_then(Value::as_bool).unwrap_or(false),
            implementation: ExpertsImplementation::default(),
            routing: Routing::default(),
            gpt_oss: None,
            deepseek: None,
            output_router_logits,
            router_aux_loss_coef,
            dense_layers: None,
        };
        if moe.top_k > moe.experts {
            return Err(format!("num_experts_per_tok {} exceeds the {} experts", moe.top_k, moe.experts));
        }
        let has = |k: &str| obj.get(k).is_some_and(|v| !v.is_null());
        Ok(MoeRead {
            arch: if mixtral { super::Arch::Mistral } else if qwen2 { super::Arch::Qwen2 } else { super::Arch::Qwen3 },
            moe,
            kv_default: (!mixtral).then_some(if qwen2 { 16 } else { 4 }),
            head_dim_default: (!mixtral && !qwen2 && !has("head_dim")).then(|| shape.hidden / shape.heads),
            qkv_bias: qwen2.then_some(shape.qkv_bias),
        })
    })())
}

/// `output_router_logits` (false by default) and `router_aux_loss_coef` (0.001 by default in
/// Mixtral's, Qwen3-MoE's, Qwen2-MoE's and gpt-oss's configs).
pub fn aux_loss_fields(obj: &Map<String, Value>) -> Result<(bool, f64), String> {
    let on = match obj.get("output_router_logits") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(format!("field 'output_router_logits' must be true or false, found {v}")),
    };
    let coef = match obj.get("router_aux_loss_coef") {
        None | Some(Value::Null) => ROUTER_AUX_LOSS_COEF,
        Some(v) => v.as_f64().filter(|c| c.is_finite()).ok_or_else(|| format!("field 'router_aux_loss_coef' must be a number, found {v}"))?,
    };
    Ok((on, coef))
}

/// An MoE config's attention window, given what its dense family's reading found (`dense`),
/// and which of its `layers` layers slide (HfConfig::sliding_layers): MixtralConfig's default
/// is none (MistralConfig's 4096); Qwen3MoeConfig has no max_window_layers or layer_types, so
/// `use_sliding_window` slides every layer (its window, default 4096; null: none); Qwen2-MoE's
/// slides the layers [`qwen2_moe_layer_types`] says.
pub fn sliding_window(obj: &Map<String, Value>, family: MoeFamily, dense: Option<usize>, layers: usize) -> Result<(Option<usize>, Option<Vec<bool>>), String> {
    match family {
        MoeFamily::Mixtral if obj.get("sliding_window").is_none() => Ok((None, None)),
        MoeFamily::Mixtral => Ok((dense, None)),
        MoeFamily::Qwen3Moe => {
            if !matches!(obj.get("use_sliding_window"), Some(Value::Bool(true))) {
                return Ok((None, None));
            }
            match obj.get("sliding_window") {
                None => Ok((Some(4096), None)),
                Some(Value::Null) => Ok((None, None)),
                Some(Value::Number(n)) if n.as_u64().is_some_and(|w| w > 0) => Ok((n.as_u64().map(|w| w as usize), None)),
                Some(v) => Err(format!("field 'sliding_window' must be a positive whole number or null, found {v}")),
            }
        }
        MoeFamily::Qwen2Moe => qwen2_moe_window(obj, layers),
        MoeFamily::GptOss | MoeFamily::DeepseekV3 => Ok((None, None)),
    }
}

/// Qwen2MoeConfig.__post_init__: `sliding_window` is kept only with `use_sliding_window` (else
/// 0: Qwen2MoeModel still builds a sliding mask, with window 0, which no layer takes), and
/// layer i is "sliding_attention" when `layer_types` says so, else when use_sliding_window,
/// (i + 1) % 2 and i < max_window_layers (default 28): layers 0, 2, 4 ... below it. With the
/// window on, the layers' flags are given even when all or none slide (the model builds both
/// masks whatever they are).
fn qwen2_moe_window(obj: &Map<String, Value>, layers: usize) -> Result<(Option<usize>, Option<Vec<bool>>), String> {
    if !matches!(obj.get("use_sliding_window"), Some(Value::Bool(true))) {
        return Ok((None, None));
    }
    let w = match obj.get("sliding_window") {
        None => 4096,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|w| w > 0) => n.as_u64().unwrap_or_default() as usize,
        // create_sliding_window_causal_mask raises on a window of None.
        Some(Value::Null) => return Err("field 'sliding_window' is null with use_sliding_window true: transformers raises building Qwen2-MoE's sliding mask (\"Could not find a `sliding_window` argument in the config\")".into()),
        Some(v) => return Err(format!("field 'sliding_window' must be a positive whole number, found {v}")),
    };
    let types = match obj.get("layer_types") {
        Some(Value::Array(t)) => super::config_json::layer_types(t, layers)?,
        Some(Value::Null) | None => {
            let below = match obj.get("max_window_layers") {
                None | Some(Value::Null) => 28,
                Some(v) => v.as_u64().ok_or_else(|| format!("field 'max_window_layers' must be a whole number, found {v}"))? as usize,
            };
            (0..layers).map(|i| (i + 1) % 2 == 1 && i < below).collect()
        }
        Some(v) => return Err(format!("field 'layer_types' must be a list, found {v}")),
    };
    Ok((Some(w), Some(types)))
}

/// The refusal of an MoE `model_type` vramscope does not run (all but mixtral and qwen3_moe).
pub fn refuse_moe_type(model_type: &str, supported: &str) -> String {
    format!("model_type '{model_type}' is a mixture-of-experts model, which vramscope does not model yet; supported: {supported}, mixtral, qwen3_moe, qwen2_moe, gpt_oss, deepseek_v3")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(text: &str) -> Map<String, Value> {
        serde_json::from_str::<Value>(text).unwrap().as_object().unwrap().clone()
    }

    #[test]
    fn qwen2_moe_slides_every_other_layer_below_max_window_layers() {
        let q2 = |text: &str, layers: usize| sliding_window(&obj(text), MoeFamily::Qwen2Moe, None, layers);
        assert_eq!(q2("{}", 4), Ok((None, None)));
        assert_eq!(q2(r#"{"use_sliding_window": false, "sliding_window": 8}"#, 4), Ok((None, None)));
        // Qwen2MoeConfig's defaults: window 4096, max_window_layers 28.
        assert_eq!(q2(r#"{"use_sliding_window": true}"#, 4), Ok((Some(4096), Some(vec![true, false, true, false]))));
        assert_eq!(q2(r#"{"use_sliding_window": true, "sliding_window": 8, "max_window_layers": 3}"#, 5), Ok((Some(8), Some(vec![true, false, true, false, false]))));
        assert_eq!(q2(r#"{"use_sliding_window": true, "sliding_window": 8, "max_window_layers": 0}"#, 2), Ok((Some(8), Some(vec![false, false]))));
        // layer_types, when given, decides.
        let types = r#"{"use_sliding_window": true, "sliding_window": 8, "max_window_layers": 1, "layer_types": ["full_attention", "sliding_attention"]}"#;
        assert_eq!(q2(types, 2), Ok((Some(8), Some(vec![false, true]))));
        assert!(q2(r#"{"use_sliding_window": true, "sliding_window": null}"#, 2).unwrap_err().contains("transformers raises"));
        assert!(q2(r#"{"use_sliding_window": true, "sliding_window": 0}"#, 2).is_err());
        assert!(q2(r#"{"use_sliding_window": true, "max_window_layers": -1}"#, 2).is_err());
    }

    #[test]
    fn expert_keys_are_those_set_to_something() {
        let o = obj(r#"{"num_local_experts": 8, "num_experts_per_tok": 2, "num_experts": 0, "router_aux_loss_coef": null, "moe_layer_freq": []}"#);
        assert_eq!(expert_keys(&o), ["num_local_experts", "num_experts_per_tok"]);
        assert!(refuse_dense_with_experts(&obj(r#"{"num_experts": 0}"#), "llama").is_ok());
        let e = refuse_dense_with_experts(&o, "mistral").unwrap_err();
        assert!(e.contains("'num_local_experts', 'num_experts_per_tok'") && e.contains("mistral"), "{e}");
    }

    #[test]
    fn routing_splits_tokens_as_named() {
        assert_eq!(Routing::Balanced.counts(10, 2, 6).unwrap(), [4, 4, 3, 3, 3, 3]);
        assert_eq!(Routing::Worst.counts(10, 2, 6).unwrap(), [10, 10, 0, 0, 0, 0]);
        assert_eq!(Routing::Counts(vec![10, 5, 5]).counts(10, 2, 3).unwrap(), [10, 5, 5]);
        assert!(Routing::Counts(vec![11, 4, 5]).counts(10, 2, 3).unwrap_err().contains("11 tokens"));
        assert!(Routing::Counts(vec![10, 5]).counts(10, 2, 3).unwrap_err().contains("2 counts for 3 experts"));
        assert!(Routing::Counts(vec![10, 5, 4]).counts(10, 2, 3).unwrap_err().contains("add up to 19"));
        assert_eq!(ExpertsImplementation::parse("batched-mm"), Some(ExpertsImplementation::BatchedMm));
    }

    #[test]
    fn mixtral_8x7b_counts() {
        let o = obj(r#"{"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}"#);
        let c = MoeShape::read(&o, "mixtral").unwrap().unwrap().counts().unwrap();
        assert_eq!(c, MoeCounts { total: 46_702_792_704, active: 12_879_925_248 });
    }
}
