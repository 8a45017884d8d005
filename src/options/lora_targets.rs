//! `--target-modules` per model, as peft 0.21.2 resolves `LoraConfig(target_modules=...)`: its
//! default per `model_type`, `all-linear`, or a list of module names matched by suffix; and
//! what LoRA or bitsandbytes on issue 30's models is not measured yet (refused, naming the flag).
use super::usage;
use crate::model::hf::moe::MoeFamily;
use crate::model::hf::{Arch, HfConfig};
use crate::model::lora::{default_targets, linears_of};
use anyhow::Result;

/// The `model_type` peft keys its default targets by.
fn model_type(hf: &HfConfig) -> &'static str {
    hf.moe.as_ref().map_or(hf.model_type.name(), |m| m.family.model_type())
}

/// What `--target-modules` and `--target-parameters` adapt, after peft's conversion for
/// transformers 5's fused experts.
pub struct Targets {
    /// The nn.Linear modules (in the order given, each once).
    pub modules: Vec<String>,
    /// The ParamWrapper parameters, in `lora_params::target_parameters` order.
    pub parameters: Vec<String>,
    /// peft's rank_pattern/alpha_pattern doubled r and alpha on the experts' gate_up_proj.
    pub gate_up_doubled: bool,
}

/// `--target-modules` and `--target-parameters` as peft 0.21.2 resolves them on `hf`: the
/// module names, the parameters, and (mixtral, qwen3_moe, deepseek_v3) the conversion of the
/// transformers-4 expert and router names (`all-linear` included) into target_parameters.
/// Refuses what peft refuses on a ParamWrapper (lora_dropout, DoRA) and what is not measured.
pub fn resolve_targets(flags: &super::hf::HfFlags, hf: &HfConfig) -> Result<Targets> {
    let mut parameters = resolve_parameters(flags.target_parameters.as_deref(), hf)?;
    let (modules, gate_up_doubled) = if flags.target_modules.is_none() && !parameters.is_empty() {
        // target_modules=None with target_parameters: peft adapts no module (mixtral, qwen3_moe
        // and deepseek_v3: convert_peft_config_for_transformers empties it; the others: no
        // default, and `_prepare_adapter_config` accepts target_parameters alone).
        (Vec::new(), false)
    } else {
        let (names, all_linear) = resolve(flags.target_modules.as_deref(), hf)?;
        match hf.moe.as_ref().and_then(|m| crate::model::lora_params::convert(m.family, &names)) {
            None => (names, false),
            Some(Err(why)) => return Err(usage("--target-modules", why)),
            Some(Ok(c)) => {
                if !all_linear {
                    check_modules(&c.modules, hf)?;
                }
                for p in c.parameters {
                    if !parameters.iter().any(|x| x == p) {
                        parameters.push(p.to_string());
                    }
                }
                let family = hf.moe.as_ref().expect("converted").family;
                parameters.sort_by_key(|p| crate::model::lora_params::target_parameters(family).iter().position(|x| x == p));
                (c.modules, c.gate_up_doubled)
            }
        }
    };
    if modules.is_empty() && parameters.is_empty() {
        return Err(usage("--target-modules", "names no module"));
    }
    if !parameters.is_empty() {
        let given = flags.target_parameters.is_some();
        let via = if given { "--target-parameters" } else { "--target-modules (converted by peft into target_parameters on the experts and the router)" };
        if flags.lora_dropout.is_some_and(|p| p != 0.0) {
            return Err(usage("--lora-dropout", format!("peft 0.21.2's ParamWrapper ({via}) raises \"does not work with lora_dropout != 0\": use 0")));
        }
        if flags.use_dora {
            return Err(usage("--use-dora", format!("peft 0.21.2's ParamWrapper ({via}) raises \"does not work with use_dora=True\"")));
        }
        if flags.load_in_4bit || flags.load_in_8bit {
            let flag = if flags.load_in_4bit { "--load-in-4bit" } else { "--load-in-8bit" };
            return Err(usage(flag, format!("with target_parameters ({via}: peft's ParamWrapper on the unquantized experts of a bitsandbytes model) is not measured yet: LoRA on the attention (--target-modules naming its projections) is")));
        }
    }
    Ok(Targets { modules, parameters, gate_up_doubled })
}

/// The modules `--target-modules` names on `hf` before peft's MoE conversion (in the order
/// given, each once; the names conversion maps are kept for it), and whether it was `all-linear`.
fn resolve(given: Option<&str>, hf: &HfConfig) -> Result<(Vec<String>, bool)> {
    let mt = model_type(hf);
    let linears: Vec<&str> = linears_of(hf).iter().map(|(_, n)| *n).collect();
    let family = hf.moe.as_ref().map(|m| m.family);
    let converts = matches!(family, Some(MoeFamily::Mixtral | MoeFamily::Qwen3Moe | MoeFamily::DeepseekV3));
    let choices = format!("all-linear or some of {}", linears.join(", "));
    match given.map(str::trim) {
        None => match default_targets(mt) {
            Some(t) => Ok((t.iter().map(|t| t.to_string()).collect(), false)),
            None if mt == "mixtral" => Err(usage(
                "--target-modules",
                format!("peft 0.21.2's default for mixtral (q_proj,v_proj) does not apply under transformers 5: convert_peft_config_for_transformers turns a missing target_modules into an empty set and get_peft_model raises NoMatchingPeftModuleError; name {choices}"),
            )),
            // deepseek_v3's config is converted as qwen2_moe's: the missing target_modules is
            // emptied first (measured: NoMatchingPeftModuleError).
            None if mt == "deepseek_v3" => Err(usage(
                "--target-modules",
                format!("peft 0.21.2 has no default target_modules for deepseek_v3 (under transformers 5 get_peft_model raises NoMatchingPeftModuleError): name {choices}"),
            )),
            None => Err(usage(
                "--target-modules",
                format!("peft 0.21.2 has no default target_modules for model_type {mt} (LoraConfig raises \"Please specify `target_modules`\"): name {choices}"),
            )),
        },
        // peft's `_resolve_string_target_modules`: the nn.Linear leaf names (no lm_head), plus,
        // where the experts are fused (converts), the transformers-4 expert and router names,
        // which the conversion turns into target_parameters (measured: the trainable count).
        Some("all-linear") => {
            let mut v: Vec<String> = linears.iter().map(|t| t.to_string()).collect();
            if let Some(f) = family {
                v.extend(crate::model::lora_params::converted_names(f).iter().map(|t| t.to_string()));
            }
            Ok((v, true))
        }
        Some(list) => {
            let mut v: Vec<String> = Vec::new();
            for t in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                if !v.iter().any(|x| x == t) {
                    v.push(t.to_string());
                }
            }
            if v.is_empty() {
                return Err(usage("--target-modules", "names no module"));
            }
            if !converts {
                check_modules(&v, hf)?;
            }
            Ok((v, false))
        }
    }
}

/// Every name of `modules` is an adaptable linear of `hf`.
fn check_modules(modules: &[String], hf: &HfConfig) -> Result<()> {
    let linears: Vec<&str> = linears_of(hf).iter().map(|(_, n)| *n).collect();
    match modules.iter().find(|t| !linears.contains(&t.as_str())) {
        Some(t) => Err(usage("--target-modules", format!("'{t}': {}", not_a_target(t, hf, &linears)))),
        None => Ok(()),
    }
}

/// `--target-parameters`: the sparse MoE block's parameters peft's ParamWrapper adapts, each
/// name matched as peft matches it (the full `module.parameter` key or a suffix of it at a dot),
/// in `lora_params::target_parameters` order; empty without the flag.
fn resolve_parameters(given: Option<&str>, hf: &HfConfig) -> Result<Vec<String>> {
    let Some(list) = given.map(str::trim) else { return Ok(Vec::new()) };
    let Some(m) = &hf.moe else {
        return Err(usage("--target-parameters", format!("model_type {} has no 3-D expert or router parameters (use --target-modules)", hf.model_type.name())));
    };
    let keys = crate::model::lora_params::target_parameters(m.family);
    let mut picked = [false; 3];
    for t in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match crate::model::lora_params::resolve_name(t, m.family).and_then(|k| keys.iter().position(|x| *x == k)) {
            Some(i) => picked[i] = true,
            // gpt-oss's expert biases are 2-D parameters peft would wrap too.
            None if m.family == MoeFamily::GptOss && t.ends_with("bias") => {
                return Err(usage("--target-parameters", format!("'{t}': a ParamWrapper on gpt-oss's biases is not modelled yet (peft wraps the experts' 2-D biases and raises on the router's 1-D one; the weights are: {})", keys.join(", "))))
            }
            None => {
                return Err(usage(
                    "--target-parameters",
                    format!("'{t}': names none of the sparse block's parameters peft can wrap ({}; a suffix at a dot matches, as in peft)", keys.join(", ")),
                ))
            }
        }
    }
    if !picked.iter().any(|&p| p) {
        return Err(usage("--target-parameters", "names no parameter"));
    }
    Ok((0..3).filter(|&i| picked[i]).map(|i| keys[i].to_string()).collect())
}

/// Why `t` is not an adaptable linear of `hf`.
fn not_a_target(t: &str, hf: &HfConfig, linears: &[&str]) -> String {
    let expected = linears.join(", ");
    if t == "lm_head" || t == "embed_tokens" {
        return format!("LoRA on the {t} is not modelled (the decoder's linears are: {expected})");
    }
    if let Some(m) = &hf.moe {
        let family = m.family.model_type();
        if t == "shared_expert" {
            return format!("is the shared expert's MLP module, not an nn.Linear (peft raises on it): name its linears; adaptable modules: {expected}");
        }
        // (peft 0.21.2 converts the transformers-4 names -- mixtral's w1/w2/w3 and gate,
        // qwen2_moe's gate/gate_proj/up_proj/down_proj for qwen3_moe and deepseek_v3 -- into
        // target_parameters before this check.)
        if m.family == MoeFamily::DeepseekV3 && matches!(t, "shared_experts" | "mlp") {
            return format!("deepseek_v3's MLP linears (the dense layers' and the shared experts' gate_proj/up_proj/down_proj) take no LoRA from a name under transformers 5: peft 0.21.2 converts gate_proj/up_proj/down_proj and gate into target_parameters on the routed experts' 3-D gate_up_proj/down_proj and the router (deepseek_v3 converts as qwen2_moe); adaptable modules: {expected}");
        }
        if m.family == MoeFamily::GptOss && matches!(t, "router" | "gate") {
            return format!("gpt_oss's router (mlp.router, a GptOssTopKRouter) holds plain nn.Parameters, not an nn.Linear: peft 0.21.2 adapts it only through target_parameters: use --target-parameters mlp.router.weight; adaptable modules: {expected}");
        }
        if t == "gate" {
            return format!("{family}'s router (mlp.gate) holds a plain nn.Parameter, not an nn.Linear: peft 0.21.2 adapts it only as target_parameters (gate.weight, its ParamWrapper): use --target-parameters mlp.gate.weight; adaptable modules: {expected}");
        }
        if matches!(t, "experts" | "gate_up_proj" | "down_proj" | "gate_proj" | "up_proj" | "w1" | "w2" | "w3") {
            return format!(
                "{family}'s experts are 3-D nn.Parameters of one module (mlp.experts.gate_up_proj, mlp.experts.down_proj), not nn.Linear modules: peft 0.21.2 adapts them only through target_parameters (its ParamWrapper, one LoRA per expert): use --target-parameters mlp.experts.gate_up_proj,mlp.experts.down_proj; adaptable modules: {expected}"
            );
        }
    }
    if hf.model_type == Arch::Phi3 {
        if matches!(t, "q_proj" | "k_proj" | "v_proj") {
            return format!("Phi-3 projects q, k and v with one fused qkv_proj (adaptable: {expected})");
        }
        if matches!(t, "gate_proj" | "up_proj") {
            return format!("Phi-3's MLP has one fused gate_up_proj (adaptable: {expected})");
        }
    }
    format!("is no module of this model (expected all-linear or some of {expected})")
}

/// What LoRA and bitsandbytes on issue 30's models (the dense families and the MoE models) leave
/// refused: the options their grids did not measure. DoRA (on nn.Linear targets: peft's
/// ParamWrapper refuses it, `resolve_targets`), modules_to_save and bias run over fp32 and bf16
/// weights (tests/lora_extras_models_grid.rs: hf_grid/dora_models.json and
/// lora_extras_models.json); over bitsandbytes weights they are not measured.
pub fn check_new_models(hf: &HfConfig, four_bit: bool, eight_bit: bool) -> Result<()> {
    if !hf.model_type.is_family() && hf.moe.is_none() {
        return Ok(());
    }
    let mt = model_type(hf);
    if let Some(l) = hf.lora.as_ref().filter(|_| four_bit || eight_bit) {
        let load = if four_bit { "4-bit" } else { "8-bit" };
        let unmeasured = |flag: &str, what: &str| usage(flag, format!("{what} over {load} weights on model_type {mt} is not measured yet (over fp32 and bf16 weights it is: hf_grid/dora_models.json, lora_extras_models.json); drop one"));
        if l.use_dora {
            return Err(unmeasured("--use-dora", "DoRA"));
        }
        if !l.modules_to_save.is_empty() {
            return Err(unmeasured("--modules-to-save", "peft's modules_to_save"));
        }
    }
    if let Some(m) = hf.moe.as_ref().filter(|_| four_bit || eight_bit) {
        let flag = if four_bit { "--load-in-4bit" } else { "--load-in-8bit" };
        match m.family {
            // Their nn.Linear modules are the attention's (DeepSeek-V3: also its dense MLPs' and
            // shared experts'): those are what bitsandbytes quantizes.
            MoeFamily::Mixtral | MoeFamily::Qwen3Moe | MoeFamily::GptOss => {}
            MoeFamily::DeepseekV3 if four_bit => {}
            // Qwen2-MoE: also its shared expert's (gate/up/down_proj, shared_expert_gate).
            MoeFamily::Qwen2Moe if four_bit => {}
            MoeFamily::Qwen2Moe => return Err(usage(flag, "LLM.int8() on qwen2_moe is not measured yet (its 4-bit load is)")),
            MoeFamily::DeepseekV3 => {
                return Err(usage(
                    flag,
                    "LLM.int8() on deepseek_v3 is not modelled: it cannot be measured on CPU (bitsandbytes 0.50.2's CPU int8_vectorwise_quant fails on kv_b_proj's 4-D input), so there is no ground truth",
                ))
            }
        }
    }
    Ok(())
}

/// DoRA, modules_to_save and bias on issue 30's models are measured without autocast (the
/// weights in their dtype): under `--precision` bf16/fp16 autocast they are refused.
pub fn check_new_models_autocast(hf: &HfConfig, precision: crate::train::Precision) -> Result<()> {
    if (!hf.model_type.is_family() && hf.moe.is_none()) || precision.autocast().is_none() {
        return Ok(());
    }
    let Some(l) = &hf.lora else { return Ok(()) };
    let mt = model_type(hf);
    let flag = if l.use_dora {
        "--use-dora"
    } else if !l.modules_to_save.is_empty() {
        "--modules-to-save"
    } else if l.bias != crate::model::lora::LoraBias::None {
        "--lora-bias"
    } else {
        return Ok(());
    };
    Err(usage(flag, format!("with {precision} autocast on model_type {mt} is not measured yet (hf_grid/dora_models.json and lora_extras_models.json run the weights in their dtype); drop the autocast precision or the flag")))
}
