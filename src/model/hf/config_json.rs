//! Models from a Hugging Face `config.json`: the fields transformers' config classes
//! (`LlamaConfig`, `MistralConfig`, `Qwen2Config`, `Qwen3Config`, `Phi3Config`, `Olmo2Config`,
//! `Gemma2Config`, `Gemma3TextConfig`: their own fields in [`super::gemma`])
//! read, with their defaults,
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

/// A token id field: null (none), an integer or a list of integers.
fn token_ids(v: &Value, name: &str) -> Result<Vec<i64>, String> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => a.iter().map(|x| x.as_i64().ok_or_else(|| format!("field '{name}' must hold integers, found {x}"))).collect(),
        x => x.as_i64().map(|i| vec![i]).ok_or_else(|| format!("field '{name}' must be an integer or a list of integers, found {x}")),
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

/// The rope types whose `inv_freq` is computed once at init (so only its values change, not
/// what is allocated): transformers' `ROPE_INIT_FUNCTIONS` less `dynamic` and `longrope`,
/// which recompute it inside the forward (`dynamic_rope_update`).
pub const ROPE_TYPES: [&str; 5] = ["default", "linear", "llama3", "yarn", "proportional"];

/// The shape fields vramscope requires. transformers' config classes default them too
/// (hidden_size 4096 …), but every saved config.json writes them, and a config without one is
/// far more likely a typo than a request for the class's 7B-sized default.
const REQUIRED: [&str; 5] = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"];

/// Parse the text of a `config.json` as transformers 5.23's `LlamaConfig`, `MistralConfig`,
/// `Qwen2Config` or `Qwen3Config` reads it (by `model_type`; none: llama), with their
/// defaults where a field is absent. Errors name the field.
pub fn parse(text: &str) -> Result<HfModel, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let obj = v.as_object().ok_or("expected a JSON object at the top level")?;
    if field(obj, "hidden_size").is_none() && field(obj, "text_config").is_some() {
        return Err("a multimodal config (its language model's fields are under 'text_config'): multimodal models are not modelled".into());
    }
    let model_type = string(obj, "model_type")?;
    // gpt-oss: its own reader (src/model/hf/gpt_oss.rs).
    if model_type.as_deref() == Some("gpt_oss") {
        return super::gpt_oss::parse(obj);
    }
    // DeepSeek-V3: its own reader (src/model/hf/deepseek_v3.rs).
    if model_type.as_deref() == Some("deepseek_v3") {
        return super::deepseek_v3::parse(obj);
    }
    let mut moe: Option<super::moe::MoeRead> = None;
    // A config without model_type is read as LlamaConfig (the field every saved config has;
    // hand-written ones often omit it).
    let arch = match model_type.as_deref() {
        None => Arch::Llama,
        Some(t) => match super::moe::read(obj, t) {
            Some(m) => {
                let m = m?;
                let arch = m.arch;
                moe = Some(m);
                arch
            }
            None if super::moe::MOE_MODEL_TYPES.contains(&t) => return Err(super::moe::refuse_moe_type(t, &Arch::list())),
            None => Arch::parse(t).ok_or_else(|| format!("model_type '{t}' is not supported; supported: {}, mixtral, qwen3_moe, qwen2_moe, gpt_oss, deepseek_v3", Arch::list()))?,
        },
    };
    // Expert keys under a dense model_type (a Mixtral config relabelled mistral): never run as dense.
    if moe.is_none() {
        super::moe::refuse_dense_with_experts(obj, arch.name())?;
    }
    check_nulls(obj, arch)?;
    let [d, f, l, h, vocab] = REQUIRED.map(|name| uint(obj, name, None));
    let (d, f, l, h, vocab) = (d?, f?, l?, h?, vocab?);
    // num_key_value_heads: absent → the class default (LlamaConfig: None; MistralConfig 8;
    // Qwen2/3Config 32); None → num_attention_heads (__post_init__).
    let kv_default = match arch {
        _ if obj.get("num_key_value_heads").is_some_and(Value::is_null) => h,
        _ if moe.as_ref().is_some_and(|m| m.kv_default.is_some()) => moe.as_ref().and_then(|m| m.kv_default).unwrap_or(h),
        Arch::Llama | Arch::Phi3 | Arch::Olmo2 => h,
        Arch::Gemma2 | Arch::Gemma3Text => super::gemma::kv_heads_default(),
        Arch::Mistral => 8,
        Arch::Qwen2 | Arch::Qwen3 => 32,
    };
    let kv = uint(obj, "num_key_value_heads", Some(kv_default))?;
    let max = uint(obj, "max_position_embeddings", Some(match arch {
        Arch::Llama | Arch::Olmo2 => 2048,
        Arch::Phi3 => 4096,
        Arch::Mistral => 4096 * 32,
        Arch::Qwen2 | Arch::Qwen3 => 32768,
        Arch::Gemma2 | Arch::Gemma3Text => super::gemma::max_positions_default(arch),
    }))?;
    // Gemma 3 has a RoPE base per layer type (super::gemma reads both).
    let gemma = arch.is_gemma().then(|| super::gemma::read(obj, arch, l, || rope(obj))).transpose()?;
    let (rope_theta, rope_type) = match &gemma {
        Some(g) => (g.rope_theta, g.rope_type.clone()),
        None => rope(obj)?,
    };
    // Phi3Config and Olmo2Config default to 1e-5, the others to 1e-6.
    let eps = float(obj, "rms_norm_eps", if matches!(arch, Arch::Phi3 | Arch::Olmo2) { 1e-5 } else { 1e-6 })?;
    // Gemma's config classes tie the head by default.
    let tied = boolean(obj, "tie_word_embeddings", arch.is_gemma())?;
    let torch_dtype = match string(obj, "dtype")? {
        Some(d) => Some(d),
        None => string(obj, "torch_dtype")?,
    };
    let weight_dtype = match torch_dtype.as_deref() {
        None => None,
        Some(d) => Some(parse_dtype(d).ok_or_else(|| format!("field 'torch_dtype' is '{d}' (expected float32, bfloat16 or float16)"))?),
    };
    quantization(obj)?;
    let name_or_path = string(obj, "_name_or_path")?.filter(|n| !n.trim().is_empty());
    // Gemma's MLP reads `hidden_activation` (super::gemma checks it); its configs' `hidden_act` is unused.
    if let Some(act) = string(obj, "hidden_act")?.filter(|a| a != "silu" && !arch.is_gemma()) {
        return Err(format!("field 'hidden_act' is '{act}': the hf flavour models silu (every supported model's default)"));
    }
    let dropout = float(obj, "attention_dropout", 0.0)?;
    if dropout != 0.0 {
        return Err(format!("field 'attention_dropout' is {dropout}: dropout's masks in training are not modelled (only 0.0 is supported)"));
    }
    // LlamaConfig.validate_architecture (and Gemma's) checks divisibility even with an explicit head_dim.
    if matches!(arch, Arch::Llama | Arch::Gemma2 | Arch::Gemma3Text) && d % h != 0 {
        return Err(format!("num_attention_heads {h} does not divide hidden_size {d} ({}Config requires it)", if arch == Arch::Llama { "Llama" } else { "Gemma" }));
    }
    // head_dim: Qwen3Config's default is 128; the others take hidden_size // heads.
    let head_dim = match field(obj, "head_dim") {
        Some(_) => uint(obj, "head_dim", None)?,
        None if moe.as_ref().is_some_and(|m| m.head_dim_default.is_some()) => moe.as_ref().and_then(|m| m.head_dim_default).unwrap_or(d / h),
        None if arch == Arch::Qwen3 => 128,
        None if arch.is_gemma() => super::gemma::head_dim_default(),
        None if d < h => return Err(format!("num_attention_heads {h} exceeds hidden_size {d} (and no head_dim is given)")),
        None => d / h,
    };
    if h % kv != 0 {
        return Err(format!("num_key_value_heads {kv} does not divide num_attention_heads {h}"));
    }
    if head_dim % 2 != 0 {
        return Err(format!("head_dim {head_dim} must be even for rotary embeddings"));
    }
    if !(eps >= 0.0) {
        return Err(format!("field 'rms_norm_eps' must be non-negative, found {eps}"));
    }
    let mut hf = HfConfig::new(arch, head_dim);
    // An MoE model's MLP width is one expert's (Qwen3-MoE's moe_intermediate_size).
    let f = moe.as_ref().map_or(f, |m| m.moe.intermediate);
    let moe_qkv_bias = moe.as_ref().and_then(|m| m.qkv_bias);
    hf.moe = moe.map(|m| m.moe);
    hf.rope_type = rope_type;
    hf.torch_dtype = weight_dtype;
    // Bias flags only the config class of that model_type reads.
    match arch {
        Arch::Llama => {
            let b = boolean(obj, "attention_bias", false)?;
            (hf.qkv_bias, hf.o_bias) = (b, b);
            hf.mlp_bias = boolean(obj, "mlp_bias", false)?;
        }
        Arch::Qwen3 => {
            let b = boolean(obj, "attention_bias", false)?;
            (hf.qkv_bias, hf.o_bias) = (b, b);
        }
        // Qwen2-MoE reads `qkv_bias` (true by default).
        Arch::Qwen2 => (hf.qkv_bias, hf.o_bias) = (moe_qkv_bias.unwrap_or(true), false),
        Arch::Olmo2 | Arch::Gemma2 | Arch::Gemma3Text => {
            let b = boolean(obj, "attention_bias", false)?;
            (hf.qkv_bias, hf.o_bias) = (b, b);
        }
        Arch::Phi3 => {
            phi3_dropout_and_rotary(obj, hf.rope_type.as_deref())?;
            hf.original_max_position_embeddings = Some(uint(obj, "original_max_position_embeddings", Some(4096))?);
        }
        Arch::Mistral => {}
    }
    (hf.sliding_window, hf.sliding_layers) = sliding_window(obj, arch, l)?;
    if let Some(m) = &hf.moe {
        // (Mixtral and Qwen3-MoE slide every layer or none; Qwen2-MoE mixes.)
        (hf.sliding_window, hf.sliding_layers) = super::moe::sliding_window(obj, m.family, hf.sliding_window, l)?;
    }
    hf.gemma = gemma.map(|g| g.gemma);
    hf.use_cache = boolean(obj, "use_cache", true)?;
    if let Some(v) = obj.get("eos_token_id") {
        hf.eos_token_id = token_ids(v, "eos_token_id")?;
    }
    if let Some(v) = obj.get("bos_token_id") {
        hf.bos_token_id = token_ids(v, "bos_token_id")?;
    }
    if let Some(v) = obj.get("pad_token_id") {
        hf.pad_token_id = token_ids(v, "pad_token_id")?.first().copied();
    }
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
        tp: None,
    };
    Ok(HfModel { config, torch_dtype, model_type, name_or_path })
}

/// Phi3Config's fields that change the op sequence and are not modelled: residual dropout in
/// training (`resid_pdrop`, an `nn.Dropout` after attention and the MLP) and a partial rotary
/// factor (`apply_rotary_pos_emb` then rotates only the first dims).
fn phi3_dropout_and_rotary(obj: &serde_json::Map<String, Value>, rope_type: Option<&str>) -> Result<(), String> {
    // Phi3Config.validate_rope allows "default" and "longrope" ("su" and "yarn" become
    // longrope), which recomputes inv_freq inside the forward (not modelled).
    if let Some(t) = rope_type.filter(|t| *t != "default") {
        return Err(format!("field 'rope_scaling' has rope_type '{t}': Phi3Config accepts default or longrope, and longrope (which yarn/su become) is not modelled"));
    }
    let p = float(obj, "resid_pdrop", 0.0)?;
    if p != 0.0 {
        return Err(format!("field 'resid_pdrop' is {p}: dropout's masks in training are not modelled (only 0.0 is supported)"));
    }
    let params = ["rope_scaling", "rope_parameters"].iter().find_map(|k| field(obj, k).and_then(Value::as_object));
    let partial = match params.and_then(|m| m.get("partial_rotary_factor")).or_else(|| field(obj, "partial_rotary_factor")) {
        None => 1.0,
        Some(v) => v.as_f64().ok_or_else(|| format!("field 'partial_rotary_factor' must be a number, found {v}"))?,
    };
    if partial != 1.0 {
        return Err(format!("field 'partial_rotary_factor' is {partial}: a partial rotary embedding is not modelled (only 1.0 is supported)"));
    }
    Ok(())
}

/// A dtype as transformers writes it in a config (`torch.bfloat16` → "bfloat16") or a user
/// names it for `from_pretrained(dtype=...)`.
/// The torch dtypes a config or a flag names, by torch's names (help lists these).
pub const TORCH_DTYPES: [(&str, crate::engine::DType); 3] =
    [("float32", crate::engine::DType::F32), ("bfloat16", crate::engine::DType::BF16), ("float16", crate::engine::DType::F16)];

/// A torch dtype by name: [`TORCH_DTYPES`], `torch.`-prefixed or not, or an alias torch also
/// has (`float`, `half`) or a short one (`fp32`, `bf16`, `fp16`).
pub fn parse_dtype(s: &str) -> Option<crate::engine::DType> {
    use crate::engine::DType;
    let s = s.trim().trim_start_matches("torch.").to_ascii_lowercase();
    TORCH_DTYPES.iter().find(|(n, _)| *n == s).map(|(_, d)| *d).or(match s.as_str() {
        "float" | "fp32" => Some(DType::F32),
        "bf16" => Some(DType::BF16),
        "half" | "fp16" => Some(DType::F16),
        _ => None,
    })
}

/// A config's `quantization_config`: the checkpoint is stored quantized and `from_pretrained`
/// loads it so. None of the methods is modelled yet, so each is refused by name rather than
/// run at full precision.
fn quantization(obj: &serde_json::Map<String, Value>) -> Result<(), String> {
    let Some(q) = field(obj, "quantization_config") else { return Ok(()) };
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("(no quant_method)");
    let detail = match method {
        "bitsandbytes" => {
            let bits = if q.get("load_in_4bit").and_then(Value::as_bool) == Some(true) { "4-bit" } else { "8-bit" };
            format!("a pre-quantized bitsandbytes {bits} checkpoint; its storage and Linear4bit/Linear8bitLt kernels are not modelled yet")
        }
        m => format!("'{m}' quantization is not modelled (awq, gptq, fp8, compressed-tensors, hqq … all run kernels of their own)"),
    };
    Err(format!("field 'quantization_config' names quant_method '{method}': {detail}; vramscope refuses it rather than run the model at full precision (remove the field to ask about the unquantized model)"))
}

/// An explicit `null` where transformers 5.23's config class needs a value: its `@strict`
/// validation refuses it (bools, eps, hidden_act …), or building the model fails on it
/// (rope_theta, qwen2's head_dim). `null` stays allowed where the class field is optional
/// (llama's num_key_value_heads and head_dim, sliding_window, rope_scaling …).
fn check_nulls(obj: &serde_json::Map<String, Value>, arch: Arch) -> Result<(), String> {
    const ALL: [&str; 11] = [
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "max_position_embeddings",
        "rms_norm_eps", "use_cache", "tie_word_embeddings", "hidden_act", "rope_theta",
    ];
    let own: &[&str] = match arch {
        Arch::Llama => &["attention_bias", "mlp_bias"],
        Arch::Mistral => &["num_key_value_heads", "attention_dropout"],
        Arch::Qwen2 => &["head_dim", "attention_dropout", "use_sliding_window", "max_window_layers"],
        Arch::Qwen3 => &["head_dim", "attention_bias", "attention_dropout", "use_sliding_window", "max_window_layers"],
        Arch::Phi3 => &["resid_pdrop", "embd_pdrop", "attention_dropout", "original_max_position_embeddings"],
        Arch::Olmo2 => &["attention_bias", "attention_dropout"],
        Arch::Gemma2 | Arch::Gemma3Text => &super::gemma::NON_NULL,
    };
    match ALL.iter().chain(own).find(|k| obj.get(**k).is_some_and(Value::is_null)) {
        Some(k) => Err(format!("field '{k}' is null: transformers 5.23 needs a value for {} (leave the field out for the default)", arch.name())),
        None => Ok(()),
    }
}

/// `convert_rope_params_to_dict` / `standardize_rope_params`: a truthy `rope_scaling` (the
/// older name) replaces `rope_parameters`; its `rope_theta` wins over the top-level one, else
/// `default_theta` 10000; `rope_type` (or the older `type`) defaults to "default". Returns
/// the theta and the rope type when it is not the default.
pub(super) fn rope(obj: &serde_json::Map<String, Value>) -> Result<(f64, Option<String>), String> {
    type Named<'a> = Option<(&'static str, &'a serde_json::Map<String, Value>)>;
    let dict = |name: &'static str| -> Result<Named<'_>, String> {
        match field(obj, name) {
            None => Ok(None),
            Some(Value::Object(m)) if m.is_empty() => Ok(None),
            Some(Value::Object(m)) => Ok(Some((name, m))),
            Some(v) => Err(format!("field '{name}' must be an object, found {v}")),
        }
    };
    let params = match dict("rope_scaling")? {
        Some(p) => Some(p),
        None => dict("rope_parameters")?,
    };
    let top = float(obj, "rope_theta", 10_000.0)?;
    let (theta, rope_type) = match params {
        None => (top, None),
        Some((name, p)) => {
            if p.keys().any(|k| k == "full_attention" || k == "sliding_attention") {
                return Err(format!("field '{name}' is nested per layer type, which the hf flavour does not model"));
            }
            let inner = |key: &str| format!("{name}.{key}");
            let theta = match p.get("rope_theta") {
                None => top,
                Some(Value::Null) => return Err(format!("field '{}' is null (leave it out for the top-level or default theta)", inner("rope_theta"))),
                Some(v) => v.as_f64().ok_or_else(|| format!("field '{}' must be a number, found {v}", inner("rope_theta")))?,
            };
            let ty = match field(p, "rope_type").or_else(|| field(p, "type")) {
                None => "default".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(v) => return Err(format!("field '{}' must be a string, found {v}", inner("rope_type"))),
            };
            if !ROPE_TYPES.contains(&ty.as_str()) {
                return Err(format!(
                    "field '{}' is '{ty}': supported: {} (dynamic and longrope recompute inv_freq inside the forward, which is not modelled)",
                    inner("rope_type"),
                    ROPE_TYPES.join(", ")
                ));
            }
            if let Some(v) = field(p, "partial_rotary_factor") {
                if v.as_f64() != Some(1.0) {
                    return Err(format!("field '{}' is {v}: only 1.0 (rotary over the whole head) is modelled", inner("partial_rotary_factor")));
                }
            }
            (theta, (ty != "default").then_some(ty))
        }
    };
    if !(theta > 0.0 && theta.is_finite()) {
        return Err(format!("field 'rope_theta' must be a positive number, found {theta}"));
    }
    Ok((theta, rope_type))
}

/// The attention window. MistralConfig: `sliding_window` (default 4096; null: none).
/// Qwen2/3Config: only with `use_sliding_window`, and only on the layers `layer_types` marks
/// "sliding_attention" (by default those at or after `max_window_layers`, default 28): with a
/// mix of sliding and full layers, which ones slide (HfConfig::sliding_layers).
fn sliding_window(obj: &serde_json::Map<String, Value>, arch: Arch, layers: usize) -> Result<(Option<usize>, Option<Vec<bool>>), String> {
    let types = qwen_sliding_layers(obj, arch, layers)?;
    let w = sliding_window_of(obj, arch, types.as_ref().map(|t| t.iter().filter(|&&s| s).count()))?;
    Ok((w, types.filter(|t| w.is_some() && t.iter().any(|&s| !s) && t.iter().any(|&s| s))))
}

/// A config's `layer_types` list, one entry per layer: true where the layer slides.
pub(super) fn layer_types(types: &[Value], layers: usize) -> Result<Vec<bool>, String> {
    if types.len() != layers {
        return Err(format!("field 'layer_types' has {} entries for {layers} layers (num_hidden_layers)", types.len()));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(format!("field 'layer_types' holds {t}: expected \"full_attention\" or \"sliding_attention\"")),
        })
        .collect()
}

/// Qwen2/3's sliding layers when `use_sliding_window` is on and a window is set
/// (`layer_types`, else those at or after `max_window_layers`); None otherwise.
fn qwen_sliding_layers(obj: &serde_json::Map<String, Value>, arch: Arch, layers: usize) -> Result<Option<Vec<bool>>, String> {
    if !matches!(arch, Arch::Qwen2 | Arch::Qwen3) || !boolean(obj, "use_sliding_window", false)? {
        return Ok(None);
    }
    match field(obj, "layer_types") {
        Some(Value::Array(types)) => layer_types(types, layers).map(Some),
        Some(v) => Err(format!("field 'layer_types' must be a list, found {v}")),
        None => {
            let first = match obj.get("max_window_layers") {
                None => 28,
                Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap() as usize,
                Some(v) => return Err(format!("field 'max_window_layers' must be a whole number, found {v}")),
            };
            Ok(Some((0..layers).map(|i| i >= first).collect()))
        }
    }
}

/// The window itself, given how many of a Qwen's layers slide.
fn sliding_window_of(obj: &serde_json::Map<String, Value>, arch: Arch, qwen_sliding: Option<usize>) -> Result<Option<usize>, String> {
    let window = || match obj.get("sliding_window") {
        None => Ok(Some(4096)),
        Some(_) => opt_uint(obj, "sliding_window"),
    };
    match arch {
        // Gemma's window is per layer type (HfConfig::gemma).
        Arch::Llama | Arch::Olmo2 | Arch::Gemma2 | Arch::Gemma3Text => Ok(None),
        Arch::Mistral => window(),
        // Phi3Config's sliding_window defaults to None (Phi-3-mini's config.json sets 2047).
        Arch::Phi3 => opt_uint(obj, "sliding_window"),
        Arch::Qwen2 | Arch::Qwen3 => {
            if !boolean(obj, "use_sliding_window", false)? {
                return Ok(None);
            }
            let Some(w) = window()? else { return Ok(None) };
            // No layer sliding: no window; some or all: the window (the mix in sliding_layers).
            Ok((qwen_sliding.unwrap_or(0) > 0).then_some(w))
        }
    }
}

/// Map a config.json's model onto the cs336 or tinyllama flavour (`--config` with
/// `--flavour`): only the shape carries over, so what those flavours cannot express
/// (biases, Qwen3's q/k norms, an explicit head_dim, a sliding window) is refused.
pub fn onto_flavour(mut c: ModelConfig, flavour: Flavour) -> Result<ModelConfig, String> {
    if flavour == Flavour::Hf {
        return Ok(c);
    }
    if let Some(hf) = c.hf.take() {
        let why = if hf.model_type == Arch::Qwen3 {
            Some("qwen3's q/k RMSNorm".to_string())
        } else if hf.qkv_bias || hf.o_bias || hf.mlp_bias {
            Some("projection biases".to_string())
        } else if !c.d_model.is_multiple_of(c.num_heads) || hf.head_dim != c.d_model / c.num_heads {
            Some(format!("head_dim {} ≠ hidden_size / num_attention_heads", hf.head_dim))
        } else {
            hf.sliding_window.map(|w| format!("a sliding window of {w}"))
        };
        if let Some(why) = why {
            return Err(format!("this {} model has {why}, which the {flavour} flavour cannot express; drop --flavour to use hf", hf.model_type.name()));
        }
    }
    c.flavour = flavour;
    c.norm_fp32_upcast = flavour == Flavour::Cs336;
    Ok(c)
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

    fn with(model_type: &str, extra: &str) -> Result<HfModel, String> {
        parse(&format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 100{extra}}}"#
        ))
    }

    /// The class defaults, as `LlamaConfig(**shape)` etc. in transformers 5.23.0 print them.
    #[test]
    fn absent_fields_take_each_config_class_default() {
        let hf = |m: &HfModel| m.config.hf.clone().unwrap();
        let l = with("llama", "").unwrap();
        assert_eq!((l.config.num_kv_heads, hf(&l).head_dim, l.config.max_seq_len, hf(&l).sliding_window), (8, 32, 2048, None));
        assert_eq!((l.config.rope_theta, l.config.norm_eps, l.config.tied_embeddings, hf(&l).use_cache), (10_000.0, 1e-6, false, true));
        let m = with("mistral", "").unwrap();
        assert_eq!((m.config.num_kv_heads, m.config.max_seq_len, hf(&m).sliding_window), (8, 131_072, Some(4096)));
        assert_eq!(hf(&with("mistral", r#", "sliding_window": null"#).unwrap()).sliding_window, None);
        // Qwen2/3Config default num_key_value_heads to 32 (not to the heads); null means the heads.
        assert!(with("qwen2", "").unwrap_err().contains("num_key_value_heads 32"));
        let q2 = with("qwen2", r#", "num_key_value_heads": null"#).unwrap();
        assert_eq!((q2.config.num_kv_heads, hf(&q2).head_dim, q2.config.max_seq_len, q2.config.rope_theta), (8, 32, 32768, 10_000.0));
        assert!(hf(&q2).qkv_bias && !hf(&q2).o_bias && !hf(&q2).mlp_bias);
        let q3 = with("qwen3", r#", "num_key_value_heads": 2"#).unwrap();
        assert_eq!((hf(&q3).head_dim, hf(&q3).sliding_window), (128, None));
        assert!(!hf(&q3).qkv_bias);
        let q3b = with("qwen3", r#", "num_key_value_heads": 2, "attention_bias": true, "mlp_bias": true"#).unwrap();
        assert!(hf(&q3b).qkv_bias && hf(&q3b).o_bias && !hf(&q3b).mlp_bias);
        let lb = with("llama", r#", "attention_bias": true, "mlp_bias": true"#).unwrap();
        assert!(hf(&lb).qkv_bias && hf(&lb).o_bias && hf(&lb).mlp_bias);
        // mistral reads neither bias flag.
        let mb = with("mistral", r#", "attention_bias": true, "mlp_bias": true"#).unwrap();
        assert!(!hf(&mb).qkv_bias && !hf(&mb).mlp_bias);
        assert!(!hf(&with("llama", r#", "use_cache": false"#).unwrap()).use_cache);
        assert_eq!(with("llama", r#", "dtype": "float16", "torch_dtype": "bfloat16""#).unwrap().torch_dtype.as_deref(), Some("float16"));
    }

    #[test]
    fn rope_theta_and_type_come_from_rope_parameters_or_rope_scaling() {
        let r = |extra: &str| with("llama", extra).map(|m| (m.config.rope_theta, m.config.hf.unwrap().rope_type));
        assert_eq!(r(r#", "rope_theta": 5.0"#).unwrap(), (5.0, None));
        assert_eq!(r(r#", "rope_theta": 5.0, "rope_parameters": {"rope_type": "default", "rope_theta": 7.0}"#).unwrap(), (7.0, None));
        // rope_scaling (truthy) replaces rope_parameters; its missing theta is the top-level one.
        let lin = r#", "rope_theta": 5.0, "rope_parameters": {"rope_theta": 7.0}, "rope_scaling": {"type": "linear", "factor": 2.0}"#;
        assert_eq!(r(lin).unwrap(), (5.0, Some("linear".into())));
        assert_eq!(r(r#", "rope_scaling": {}, "rope_parameters": {"rope_theta": 3.0}"#).unwrap(), (3.0, None));
        assert_eq!(r(r#", "rope_scaling": null, "rope_theta": 1000000"#).unwrap(), (1e6, None));
        let e = r(r#", "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}"#).unwrap_err();
        assert!(e.contains("rope_scaling.rope_type") && e.contains("llama3"), "{e}");
        assert!(r(r#", "rope_parameters": 3"#).unwrap_err().contains("'rope_parameters' must be an object"));
        assert!(r(r#", "rope_parameters": {"rope_theta": "big"}"#).unwrap_err().contains("rope_parameters.rope_theta"));
        assert!(r(r#", "rope_parameters": {"partial_rotary_factor": 0.5}"#).unwrap_err().contains("partial_rotary_factor"));
        assert!(r(r#", "rope_theta": -1"#).unwrap_err().contains("rope_theta"));
    }

    #[test]
    fn qwen_sliding_windows_follow_use_sliding_window_and_layer_types() {
        let w = |extra: &str| with("qwen2", &format!(r#", "num_key_value_heads": 4{extra}"#)).map(|m| m.config.hf.unwrap().sliding_window);
        assert_eq!(w(r#", "sliding_window": 64"#).unwrap(), None);
        // max_window_layers 28 ≥ 4 layers: no layer slides.
        assert_eq!(w(r#", "use_sliding_window": true, "sliding_window": 64"#).unwrap(), None);
        assert_eq!(w(r#", "use_sliding_window": true, "sliding_window": 64, "max_window_layers": 0"#).unwrap(), Some(64));
        assert_eq!(w(r#", "use_sliding_window": true, "max_window_layers": 0"#).unwrap(), Some(4096));
        // A mix: the window, and which layers slide (those from max_window_layers on, or layer_types').
        let layers = |extra: &str| with("qwen3", &format!(r#", "num_key_value_heads": 4, "head_dim": 16{extra}"#)).map(|m| m.config.hf.unwrap().sliding_layers);
        assert_eq!(w(r#", "use_sliding_window": true, "sliding_window": 64, "max_window_layers": 2"#).unwrap(), Some(64));
        assert_eq!(layers(r#", "use_sliding_window": true, "sliding_window": 64, "max_window_layers": 2"#).unwrap(), Some(vec![false, false, true, true]));
        let mixed = r#", "use_sliding_window": true, "sliding_window": 64, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]"#;
        assert_eq!(layers(mixed).unwrap(), Some(vec![true, false, true, false]));
        let all = r#", "use_sliding_window": true, "sliding_window": 64, "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention"]"#;
        assert_eq!(w(all).unwrap(), Some(64));
        assert_eq!(layers(all).unwrap(), None, "every layer sliding: no mix");
        assert_eq!(layers(r#", "use_sliding_window": true, "sliding_window": null, "max_window_layers": 2"#).unwrap(), None, "no window");
        assert!(w(r#", "use_sliding_window": true, "layer_types": ["full_attention"]"#).unwrap_err().contains("layer_types"));
        // llama has no window, whatever the file says.
        assert_eq!(with("llama", r#", "sliding_window": 64"#).unwrap().config.hf.unwrap().sliding_window, None);
    }

    #[test]
    fn unsupported_choices_are_refused_naming_the_field() {
        let e = with("gemma", "").unwrap_err();
        assert!(e.contains("'gemma'") && e.contains("llama, mistral, qwen2, qwen3"), "{e}");
        assert!(with("llama", r#", "hidden_act": "gelu""#).unwrap_err().contains("hidden_act"));
        assert!(with("llama", r#", "attention_dropout": 0.1"#).unwrap_err().contains("attention_dropout"));
        assert!(with("llama", r#", "use_cache": "yes""#).unwrap_err().contains("'use_cache'"));
        assert!(with("llama", r#", "tie_word_embeddings": 1"#).unwrap_err().contains("'tie_word_embeddings'"));
        assert!(with("llama", r#", "torch_dtype": 16"#).unwrap_err().contains("'torch_dtype'"));
        assert!(with("llama", r#", "head_dim": 7"#).unwrap_err().contains("head_dim 7"));
        // LlamaConfig checks hidden % heads even with head_dim; MistralConfig does not.
        let odd = r#"{"model_type": "TYPE", "hidden_size": 250, "head_dim": 32, "intermediate_size": 512, "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 100}"#;
        assert!(parse(&odd.replace("TYPE", "llama")).unwrap_err().contains("hidden_size 250"));
        assert!(parse(&odd.replace("TYPE", "mistral")).unwrap().config.param_count() > 0);
    }

    /// null where the class field is not optional is refused, as transformers' strict
    /// validation (or its model build) refuses it; where it is optional it means the default.
    #[test]
    fn null_is_refused_where_transformers_needs_a_value() {
        for (ty, field) in [("llama", "use_cache"), ("llama", "attention_bias"), ("mistral", "num_key_value_heads"), ("qwen2", "head_dim"), ("qwen3", "head_dim"), ("qwen3", "max_window_layers"), ("llama", "rope_theta")] {
            let e = with(ty, &format!(r#", "{field}": null"#)).unwrap_err();
            assert!(e.contains(&format!("'{field}' is null")), "{ty} {field}: {e}");
        }
        for (ty, field) in [("llama", "head_dim"), ("llama", "num_key_value_heads"), ("mistral", "head_dim"), ("mistral", "attention_bias"), ("qwen2", "mlp_bias"), ("qwen3", "sliding_window"), ("llama", "rope_scaling")] {
            assert!(with(ty, &format!(r#", "num_key_value_heads": 8, "{field}": null"#).replace(r#""num_key_value_heads": 8, "num_key_value_heads""#, r#""num_key_value_heads""#)).is_ok(), "{ty} {field}");
        }
        assert!(with("llama", r#", "rope_parameters": {"rope_theta": null}"#).unwrap_err().contains("rope_parameters.rope_theta"));
    }

    #[test]
    fn only_plain_shapes_map_onto_the_other_flavours() {
        let plain = with("llama", "").unwrap().config;
        let t = onto_flavour(plain, Flavour::Tinyllama).unwrap();
        assert!(t.hf.is_none() && t.flavour == Flavour::Tinyllama && !t.norm_fp32_upcast);
        let q2 = with("qwen2", r#", "num_key_value_heads": 8"#).unwrap().config;
        assert!(onto_flavour(q2, Flavour::Cs336).unwrap_err().contains("biases"));
        let q3 = with("qwen3", r#", "num_key_value_heads": 8"#).unwrap().config;
        assert!(onto_flavour(q3, Flavour::Cs336).unwrap_err().contains("qwen3"));
        let m = with("mistral", "").unwrap().config;
        assert!(onto_flavour(m, Flavour::Tinyllama).unwrap_err().contains("sliding window"));
    }
}
