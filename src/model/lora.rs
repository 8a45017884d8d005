//! LoRA as peft 0.21.2 runs it over transformers' linears (`peft.tuners.lora.layer.Linear`):
//! what `get_peft_model(model, LoraConfig(...))` adds to the model and what one adapted
//! projection does in forward.
//!
//! Per adapted projection, `lora_A` (r × in) and `lora_B` (out × r) are fp32 parameters
//! whatever the base weights' type (`autocast_adapter_dtype=True`, peft's default, casts bf16/fp16
//! adapters up); the base weights are frozen (no gradient, no optimizer state). Forward:
//! `result = base_layer(x)`; `x = x.to(lora_A.weight.dtype)` (a copy when the types differ,
//! bound to the local `x` until forward returns); `result = result + lora_B(lora_A(dropout(x)))
//! * scaling` (bf16 + fp32 promotes: the sum is fp32); `result.to(torch_result_dtype)`.
use crate::engine::ops::dropout::DropoutKernel;
use crate::engine::{runtime, DType, Tensor};
pub use crate::model::dora::BaseWeight;
use serde::{Deserialize, Serialize};

/// The projections of a decoder layer LoRA can adapt, in module order.
pub const TARGETS: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

/// A decoder layer's linears peft can adapt, as (slot, module name) in registration order (the
/// order `get_peft_model` adds their adapters in). A slot is the projection's index in
/// [`TARGETS`] (Phi-3's fused `qkv_proj` takes q's slot, `gate_up_proj` gate's); a mixture-of-
/// experts layer's linears are its attention's: the experts are 3-D `nn.Parameter`s of one
/// module and the router a plain parameter, neither an `nn.Linear`.
pub fn layer_linears(arch: crate::model::hf::Arch, moe: bool) -> &'static [(usize, &'static str)] {
    const LLAMA: [(usize, &str); 7] = [(0, "q_proj"), (1, "k_proj"), (2, "v_proj"), (3, "o_proj"), (4, "gate_proj"), (5, "up_proj"), (6, "down_proj")];
    // Phi3Attention declares o_proj before qkv_proj.
    const PHI3: [(usize, &str); 4] = [(3, "o_proj"), (0, "qkv_proj"), (4, "gate_up_proj"), (6, "down_proj")];
    match (arch, moe) {
        (_, true) => &LLAMA[..4],
        (crate::model::hf::Arch::Phi3, _) => &PHI3,
        _ => &LLAMA,
    }
}

/// A decoder layer's nn.Linear slots: [`TARGETS`]' seven, then DeepSeek-V3's `kv_b_proj` (7) and
/// its shared experts' `gate_proj`, `up_proj`, `down_proj` (8-10), which bitsandbytes quantizes
/// but no LoRA name reaches.
pub const SLOTS: usize = 11;

/// The module in slot `t` of [`SLOTS`] when the layer's [`linears_of`] does not name it.
pub fn slot_module(t: usize) -> &'static str {
    const EXTRA: [&str; 4] = ["kv_b_proj", "gate_proj", "up_proj", "down_proj"];
    TARGETS.get(t).copied().unwrap_or_else(|| EXTRA[t - TARGETS.len()])
}

/// DeepSeek-V3's multi-head latent attention linears LoRA can adapt, as (slot, name) in
/// registration order: `q_a_proj` and `q_b_proj` (or `q_proj` without `q_lora_rank`),
/// `kv_a_proj_with_mqa`, `kv_b_proj`, `o_proj`. Its MLP linears (the dense layers' and the
/// shared experts' gate/up/down_proj) are none of them: with transformers 5, peft 0.21.2 converts
/// those names into target_parameters on the routed experts (`_MOE_TARGET_MODULE_MAPPING`'s
/// qwen2_moe entry, which deepseek_v3 shares), so no name reaches them.
pub const MLA_Q_LORA: [(usize, &str); 5] = [(0, "q_a_proj"), (1, "q_b_proj"), (2, "kv_a_proj_with_mqa"), (7, "kv_b_proj"), (3, "o_proj")];
/// [`MLA_Q_LORA`] without `q_lora_rank`: one `q_proj`.
pub const MLA_Q_PROJ: [(usize, &str); 4] = [(0, "q_proj"), (2, "kv_a_proj_with_mqa"), (7, "kv_b_proj"), (3, "o_proj")];

/// Qwen2-MoE's linears: the attention's, then its shared expert's `shared_expert.gate_proj`,
/// `up_proj`, `down_proj` (slots 4-6) and `shared_expert_gate` (slot 7, out 1): qwen2_moe has no
/// transformers-5 conversion in peft 0.21.2, so these names (and all-linear) reach them.
pub const QWEN2_MOE_SHARED: [(usize, &str); 8] =
    [(0, "q_proj"), (1, "k_proj"), (2, "v_proj"), (3, "o_proj"), (4, "gate_proj"), (5, "up_proj"), (6, "down_proj"), (7, "shared_expert_gate")];

/// [`layer_linears`] of `hf`'s decoder layers (DeepSeek-V3: its latent attention's; Qwen2-MoE:
/// with its shared expert's).
pub fn linears_of(hf: &crate::model::hf::HfConfig) -> &'static [(usize, &'static str)] {
    match hf.moe.as_ref().and_then(|m| m.deepseek.as_ref()) {
        Some(ds) if ds.q_lora_rank.is_some() => &MLA_Q_LORA,
        Some(_) => &MLA_Q_PROJ,
        None if hf.moe.as_ref().is_some_and(|m| m.family == crate::model::hf::moe::MoeFamily::Qwen2Moe && m.shared_intermediate > 0) => &QWEN2_MOE_SHARED,
        None => layer_linears(hf.model_type, hf.moe.is_some()),
    }
}

/// The module in `slot` of [`linears_of`] (None: the layer has no linear there).
pub fn slot_name(hf: &crate::model::hf::HfConfig, slot: usize) -> Option<&'static str> {
    linears_of(hf).iter().find(|(s, _)| *s == slot).map(|(_, n)| *n)
}

/// peft 0.21.2's default `target_modules` for a `model_type`
/// (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`); None where the mapping has no entry
/// (peft raises "Please specify `target_modules` in `peft_config`") and for mixtral, whose entry
/// never applies under transformers 5: `convert_peft_config_for_transformers` first turns a
/// missing `target_modules` into an empty set (measured: NoMatchingPeftModuleError).
pub fn default_targets(model_type: &str) -> Option<[&'static str; 2]> {
    matches!(model_type, "llama" | "mistral" | "qwen2" | "qwen3" | "gemma2" | "gemma3_text").then_some(["q_proj", "v_proj"])
}

/// The modules `modules_to_save` can name here, in module order: peft wraps each in a
/// `ModulesToSaveWrapper` (the original frozen, a trainable deep copy that runs in forward).
pub const MODULES_TO_SAVE: [&str; 2] = ["embed_tokens", "lm_head"];

/// `LoraConfig`'s fields that change memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// `r`: the adapters' rank.
    pub r: usize,
    /// `lora_alpha`: scaling = alpha / r.
    pub alpha: f64,
    /// `lora_dropout` on the adapter's input (training mode only; 0 is `nn.Identity`).
    pub dropout: f64,
    /// Which of [`TARGETS`] are adapted (`all-linear`: every one; never lm_head).
    pub targets: Vec<String>,
    /// `target_parameters`: which of `lora_params::TARGET_PARAMETERS` peft's ParamWrapper
    /// adapts (MoE experts and router).
    #[serde(default)]
    pub target_parameters: Vec<String>,
    /// peft's conversion for transformers 5's fused experts (`lora_params::convert`) named both
    /// halves of `gate_up_proj`: its rank_pattern and alpha_pattern double r and alpha there.
    #[serde(default)]
    pub gate_up_doubled: bool,
    /// The dropout kernel (CUDA's unless a CPU measurement is reproduced).
    #[serde(default)]
    pub dropout_kernel: DropoutKernel,
    /// `bias`: which of the base model's biases train besides the adapters.
    #[serde(default)]
    pub bias: LoraBias,
    /// `use_dora`: DoRA's magnitude vectors and per-forward weight norm (`crate::model::dora`).
    #[serde(default)]
    pub use_dora: bool,
    /// `modules_to_save`: which of [`MODULES_TO_SAVE`] train fully, as a copy in the
    /// original's dtype.
    #[serde(default)]
    pub modules_to_save: Vec<String>,
    /// FSDP2's `MixedPrecisionPolicy(param_dtype)` (set by `ParallelConfig::model_config`): the
    /// adapters are all-gathered and computed in it (their fp32 shards are what the optimizer
    /// steps); None: peft's own dtype ([`adapter_dtype`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_dtype: Option<DType>,
}

/// `LoraConfig(bias=...)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoraBias {
    /// Every bias frozen (peft's default).
    #[default]
    None,
    /// Every bias of the model trains.
    All,
    /// The biases of the adapted projections train.
    LoraOnly,
}

impl LoraBias {
    pub fn name(self) -> &'static str {
        match self {
            LoraBias::None => "none",
            LoraBias::All => "all",
            LoraBias::LoraOnly => "lora_only",
        }
    }
    pub fn parse(s: &str) -> Option<LoraBias> {
        match s {
            "none" => Some(LoraBias::None),
            "all" => Some(LoraBias::All),
            "lora_only" => Some(LoraBias::LoraOnly),
            _ => None,
        }
    }
}

impl LoraConfig {
    /// The dtype the adapters compute in over `weights`: FSDP2's param_dtype, else peft's.
    pub fn adapter_dtype(&self, weights: DType) -> DType {
        self.compute_dtype.unwrap_or(adapter_dtype(weights))
    }
    pub fn scaling(&self) -> f64 {
        self.alpha / self.r as f64
    }
    /// Whether projection `name` is adapted.
    pub fn targets(&self, name: &str) -> bool {
        self.targets.iter().any(|t| t == name)
    }
    /// Whether `target_parameters` names `param` (one of `lora_params::TARGET_PARAMETERS`).
    pub fn targets_parameter(&self, param: &str) -> bool {
        self.target_parameters.iter().any(|t| t == param)
    }
    /// Whether `target_parameters` names the router's weight (`mlp.gate.weight`, gpt-oss's
    /// `mlp.router.weight`).
    pub fn targets_router(&self) -> bool {
        self.target_parameters.iter().any(|t| crate::model::lora_params::is_router(t))
    }
    /// The rank of the experts' `gate_up_proj` adapter (the scaling stays alpha / r: both double).
    pub fn gate_up_rank(&self) -> usize {
        if self.gate_up_doubled {
            self.r.saturating_mul(2)
        } else {
            self.r
        }
    }
    /// Whether `modules_to_save` names `module` (one of [`MODULES_TO_SAVE`]).
    pub fn saves(&self, module: &str) -> bool {
        self.modules_to_save.iter().any(|m| m == module)
    }
    /// Whether a router's own bias (gpt-oss's `mlp.router.bias`) trains: `bias="all"` marks
    /// every parameter named `*.bias`; `lora_only` marks the bias of a LoRA layer's base module,
    /// which a ParamWrapper on the router's weight is (`BaseTunerLayer.bias`).
    pub fn trains_router_bias(&self) -> bool {
        match self.bias {
            LoraBias::None => false,
            LoraBias::All => true,
            LoraBias::LoraOnly => self.targets_router(),
        }
    }
    /// Whether projection `name`'s bias trains.
    pub fn trains_bias(&self, name: &str) -> bool {
        match self.bias {
            LoraBias::None => false,
            LoraBias::All => true,
            LoraBias::LoraOnly => self.targets(name),
        }
    }
}

/// One adapted projection's trainable weights.
#[derive(Clone)]
pub struct Adapter {
    pub a: Tensor,
    pub b: Tensor,
    /// DoRA's `lora_magnitude_vector` (out features), with `use_dora`.
    pub magnitude: Option<Tensor>,
}

/// The layer peft wraps, which picks its LoRA layer's forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseLayer {
    /// `nn.Linear` (peft's `lora.Linear`).
    Linear,
    /// bitsandbytes' `Linear4bit` (peft's `lora.bnb.Linear4bit`).
    Linear4bit,
    /// bitsandbytes' `Linear8bitLt` (peft's `lora.bnb.Linear8bitLt`).
    Linear8bitLt,
}

/// peft's `Linear.forward` around a base projection: `base` computes `base_layer(x)`, whose
/// weight (for DoRA) is `weight` and bias `bias`. peft's bitsandbytes layers instead cast the
/// adapter's output to the result's type before adding it, and add in that type;
/// `Linear4bit` also clones the base result first ("defensively", for 4-bit), `Linear8bitLt`
/// does not.
#[allow(clippy::too_many_arguments)]
pub fn forward(cfg: &LoraConfig, adapter: &Adapter, x: &Tensor, training: bool, layer: BaseLayer, weight: Option<BaseWeight>, bias: Option<&Tensor>, base: impl FnOnce(&Tensor) -> Tensor) -> Tensor {
    use crate::model::py::lib_frames as py;
    let _f = runtime::py_frame(match layer {
        BaseLayer::Linear => &py::PEFT_LORA_LINEAR,
        BaseLayer::Linear4bit => &py::PEFT_LORA_LINEAR_4BIT,
        BaseLayer::Linear8bitLt => &py::PEFT_LORA_LINEAR_8BIT,
    });
    let mut result = base(x);
    let _s = runtime::scope("lora");
    let bnb = layer != BaseLayer::Linear;
    if layer == BaseLayer::Linear4bit {
        result = result.clone_contiguous();
    }
    let result_dtype = result.dtype();
    // `_cast_input_dtype`: a copy only when the types differ; the local lives until return.
    let x = if x.dtype() == adapter.a.dtype() { x.clone() } else { x.to_dtype(adapter.a.dtype()) };
    if adapter.magnitude.is_some() {
        // `result = variant.forward(...)`, then (both wrappers) `result.to(result dtype)`.
        let weight = weight.expect("DoRA's base weight (DoRA over 8-bit weights is refused by the options)");
        let sum = crate::model::dora::variant_forward(cfg, adapter, &x, &result, training, weight, bias);
        drop(result);
        let out = if sum.dtype() == result_dtype { sum } else { sum.to_dtype(result_dtype) };
        drop(x);
        return out;
    }
    let delta = {
        let h = if training && cfg.dropout > 0.0 { x.dropout(cfg.dropout, cfg.dropout_kernel) } else { x.clone() };
        let a = crate::model::linear("lora_A", &h, &adapter.a);
        drop(h);
        let b = crate::model::linear("lora_B", &a, &adapter.b);
        drop(a);
        b.mul_scalar(cfg.scaling())
    };
    // bnb casts the adapter's output to the result's type before the add; the plain Linear
    // adds (promoting) and casts the sum back.
    let delta = if bnb && delta.dtype() != result_dtype { delta.to_dtype(result_dtype) } else { delta };
    let sum = result.add(&delta);
    drop((result, delta));
    let out = if sum.dtype() == result_dtype { sum } else { sum.to_dtype(result_dtype) };
    drop(x);
    out
}

/// Whether parameter `name` is one of peft's adapters (lora_A, lora_B, a DoRA magnitude), as
/// `get_peft_model` names them.
pub fn is_adapter(name: &str) -> bool {
    [".lora_A.", ".lora_B.", ".lora_magnitude_vector."].iter().any(|k| name.contains(k))
}

/// The adapters' dtype: fp32 over half-precision weights (autocast_adapter_dtype), else the
/// weights' own (what FSDP2 shards and the optimizer steps under a MixedPrecisionPolicy too).
pub fn adapter_dtype(weights: DType) -> DType {
    match weights {
        DType::BF16 | DType::F16 => DType::F32,
        d => d,
    }
}
