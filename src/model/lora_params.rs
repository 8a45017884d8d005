//! peft 0.21.2's `ParamWrapper` (`LoraConfig(target_parameters=...)`) on a sparse MoE block's
//! plain parameters: the experts' 3-D `gate_up_proj` (E, 2·I, hidden) and `down_proj`
//! (E, hidden, I) — gpt-oss stores them `is_transposed`, (E, hidden, 2·I) and (E, I, hidden) —
//! and the router's `weight` (E, hidden; gpt-oss's `mlp.router.weight`).
//!
//! Each targeted parameter gets one LoRA pair whose rank spans the experts: `lora_A` (r·E × in)
//! and `lora_B` (out × r·E) for a 3-D parameter (peft reads (E, in, out) from the shape and
//! swaps in/out unless the experts are `is_transposed`: either way in is hidden for gate_up_proj
//! and I for down_proj), `lora_A` (r × hidden) and `lora_B` (E × r) for the router. Two
//! parameters of one module nest: the first in registration order (`gate_up_proj`) is the inner
//! wrapper, `down_proj`'s the outer.
//!
//! peft's conversion for transformers 5's fused experts ([`convert`]) turns the transformers-4
//! names of the experts' and the router's linears into these target_parameters, with rank and
//! alpha doubled on `gate_up_proj` when both of its halves were named.
//!
//! Every forward of the wrapped module, per wrapper from the outside in (`_activate_lora`):
//! the delta is built (3-D: `_LoraFactorsProxy` keeps the factors `lhs` = B viewed (E, out, r)
//! and `rhs` = A viewed (E, r, in), each cast to the weight's dtype; 2-D: `_LoraParameterProxy`
//! keeps `(B @ A) * scaling` cast to the weight's dtype), then `register_parametrization`
//! evaluates the parametrization once to check its dtype and shape (a full-size temporary,
//! freed at once) and `parametrize.cached()` is entered. Inside the module's forward, the first
//! read of the parameter computes `baddbmm(W, lhs, rhs, alpha=scaling)` (2-D: `W + delta`), a
//! full-size tensor that requires grad, cached until the outermost `cached()` exits (after the
//! module returns); each wrapper's exit frees its proxy (factors or delta). Autograd keeps what
//! the module's ops saved of the folded weight (grouped_mm and the eager linears save it; the
//! batched gather saves only its index), and the base weights stay frozen.
use crate::engine::Tensor;
use crate::model::hf::moe::MoeFamily;
use crate::model::lora::Adapter;
use std::cell::OnceCell;

/// The parameters `target_parameters` can name on a sparse MoE block, as peft matches them
/// (by suffix of `module.parameter`): the router's, then the experts'.
pub const TARGET_PARAMETERS: [&str; 3] = ["mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"];
/// gpt-oss's: its router is `mlp.router` (a GptOssTopKRouter with a weight and a bias).
pub const GPT_OSS_TARGET_PARAMETERS: [&str; 3] = ["mlp.router.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"];

/// The router's key of either list.
pub fn is_router(key: &str) -> bool {
    key == TARGET_PARAMETERS[0] || key == GPT_OSS_TARGET_PARAMETERS[0]
}

/// [`TARGET_PARAMETERS`] or gpt-oss's.
pub fn target_parameters(family: MoeFamily) -> [&'static str; 3] {
    if family == MoeFamily::GptOss {
        GPT_OSS_TARGET_PARAMETERS
    } else {
        TARGET_PARAMETERS
    }
}

/// The one of `family`'s [`target_parameters`] a `target_parameters` entry names, as peft
/// matches it (the key itself or a suffix at a dot); None for no match and for a bare `weight`,
/// which would reach every nn.Linear's weight too.
pub fn resolve_name(t: &str, family: MoeFamily) -> Option<&'static str> {
    if t == "weight" {
        return None;
    }
    let hits: Vec<&'static str> = target_parameters(family).into_iter().filter(|k| *k == t || k.ends_with(&format!(".{t}"))).collect();
    match hits.as_slice() {
        [k] => Some(k),
        _ => None,
    }
}

/// `_MOE_TARGET_MODULE_MAPPING` of the conversion pattern `family` uses (each old name with the
/// slot of [`TARGET_PARAMETERS`] it becomes); the second and third are gate_up_proj's halves.
/// None where peft converts nothing.
fn mapping(family: MoeFamily) -> Option<[(&'static str, usize); 4]> {
    match family {
        MoeFamily::Mixtral => Some([("gate", 0), ("w1", 1), ("w3", 1), ("w2", 2)]),
        MoeFamily::Qwen3Moe | MoeFamily::DeepseekV3 => Some([("gate", 0), ("gate_proj", 1), ("up_proj", 1), ("down_proj", 2)]),
        MoeFamily::Qwen2Moe | MoeFamily::GptOss => None,
    }
}

/// The transformers-4 names `all-linear` adds where peft converts (`_resolve_string_target_modules`:
/// the mapping's keys beside the nn.Linear leaf names); empty elsewhere.
pub fn converted_names(family: MoeFamily) -> Vec<&'static str> {
    mapping(family).map_or(Vec::new(), |m| m.iter().map(|(n, _)| *n).collect())
}

/// A LoraConfig after peft's `convert_peft_config_for_transformers`.
#[derive(Debug, PartialEq)]
pub struct Converted {
    /// The target_modules left (the names that matched no converted linear).
    pub modules: Vec<String>,
    /// The target_parameters the converted names add, as keys of [`TARGET_PARAMETERS`].
    pub parameters: Vec<&'static str>,
    /// rank_pattern/alpha_pattern `.*\.gate_up_proj`: r and alpha doubled (both halves named).
    pub gate_up_doubled: bool,
}

/// peft 0.21.2's `_convert_peft_config_moe` (`_MOE_TARGET_MODULE_MAPPING`, `_MOE_FUSED_TARGETS`)
/// for a `family` whose transformers-5 experts are fused: Mixtral's `gate`, `w1`/`w3`, `w2` and
/// qwen2_moe's `gate`, `gate_proj`/`up_proj`, `down_proj` (Qwen3-MoE and DeepSeek-V3 convert as
/// qwen2_moe) become the router's weight, the experts' gate_up_proj and down_proj (a name
/// matches as it is or as a suffix at a dot; the first mapping entry that matches wins). None
/// for a family peft does not convert (qwen2_moe itself: transformers keeps no checkpoint
/// conversion for it; gpt_oss). Err names a half of gate_up_proj given without the other, as
/// peft raises ("Cannot convert PEFT target(s) ... without also targeting ...").
pub fn convert(family: MoeFamily, names: &[String]) -> Option<Result<Converted, String>> {
    let mapping = mapping(family)?;
    let mut modules = Vec::new();
    let mut picked = [false; 3];
    let mut halves = [false; 2];
    for t in names {
        match mapping.iter().position(|(old, _)| t == old || t.ends_with(&format!(".{old}"))) {
            Some(i) => {
                picked[mapping[i].1] = true;
                if mapping[i].1 == 1 {
                    halves[i - 1] = true;
                }
            }
            None => modules.push(t.clone()),
        }
    }
    if halves[0] != halves[1] {
        let (present, missing) = if halves[0] { (mapping[1].0, mapping[2].0) } else { (mapping[2].0, mapping[1].0) };
        return Some(Err(format!("peft 0.21.2 raises \"Cannot convert PEFT target(s) {present} without also targeting {missing} because they are fused into gate_up_proj\"")));
    }
    let parameters = (0..3).filter(|&i| picked[i]).map(|i| TARGET_PARAMETERS[i]).collect();
    Some(Ok(Converted { modules, parameters, gate_up_doubled: halves[0] && halves[1] }))
}

/// One layer's ParamWrapper adapters (None: that parameter is not targeted).
#[derive(Clone, Default)]
pub struct ParamAdapters {
    pub router: Option<Adapter>,
    pub gate_up: Option<Adapter>,
    pub down: Option<Adapter>,
}

/// `get_delta_factors` of a 3-D parameter `w`: A viewed (E, r, in), B viewed (E, out, r);
/// for (E, out, in) experts `lhs` = B, `rhs` = A; for `is_transposed` (E, in, out) ones
/// `lhs` = Aᵀ (E, in, r), `rhs` = Bᵀ (E, r, out). Each `.to(w.dtype)` (a copy only when the
/// types differ: fp32 adapters over bf16 experts), lhs first.
fn factors(adapter: &Adapter, w: &Tensor, transposed: bool) -> (Tensor, Tensor) {
    let e = w.dim(0);
    let (a, b) = (&adapter.a, &adapter.b);
    let r = a.dim(0) / e;
    let wa = a.reshape(&[e, r, a.dim(1)]);
    let wb = b.reshape(&[b.dim(0), r, e]).permute(&[2, 0, 1]);
    let (lhs, rhs) = if transposed { (wa.transpose(-2, -1), wb.transpose(-2, -1)) } else { (wb, wa) };
    let lhs = lhs.to_dtype(w.dtype());
    let rhs = rhs.to_dtype(w.dtype());
    (lhs, rhs)
}

/// A wrapped 3-D parameter while its module runs: the proxy's factors and the cached fold.
pub struct Folded<'a> {
    base: &'a Tensor,
    factors: Option<(Tensor, Tensor)>,
    scaling: f64,
    cached: OnceCell<Tensor>,
}

impl<'a> Folded<'a> {
    /// The parameter as the module reads it: the base weight, or the fold computed at the
    /// first read (`parametrize.cached()`).
    pub fn get(&self) -> &Tensor {
        match &self.factors {
            None => self.base,
            Some((lhs, rhs)) => self.cached.get_or_init(|| self.base.baddbmm(lhs, rhs, self.scaling)),
        }
    }
}

/// The experts module under its (nested) wrappers: `gate_up`'s and `down`'s adapters, if
/// targeted (`transposed`: gpt-oss's (E, in, out) experts). Registers the outer (down) then the
/// inner (gate_up) parametrization, each evaluated once and dropped, runs `forward` with the
/// parameters as the module reads them, then frees the inner proxy, the outer proxy and the
/// cache.
pub fn experts_wrapped(p: Option<&ParamAdapters>, scaling: f64, transposed: bool, gate_up: &Tensor, down: &Tensor, forward: impl FnOnce(&Folded<'_>, &Folded<'_>) -> Tensor) -> Tensor {
    let register = |adapter: Option<&Adapter>, w: &Tensor| {
        adapter.map(|a| {
            let (lhs, rhs) = factors(a, w, transposed);
            // ParametrizationList's check: `Z = self()`, unbound after.
            drop(w.baddbmm(&lhs, &rhs, scaling));
            (lhs, rhs)
        })
    };
    let down_f = register(p.and_then(|p| p.down.as_ref()), down);
    let gate_up_f = register(p.and_then(|p| p.gate_up.as_ref()), gate_up);
    let gu = Folded { base: gate_up, factors: gate_up_f, scaling, cached: OnceCell::new() };
    let dn = Folded { base: down, factors: down_f, scaling, cached: OnceCell::new() };
    let out = forward(&gu, &dn);
    // The inner wrapper exits first (its proxy goes), then the outer (its proxy, then the cache).
    let Folded { factors: gu_factors, cached: gu_cached, .. } = gu;
    let Folded { factors: dn_factors, cached: dn_cached, .. } = dn;
    drop(gu_factors);
    drop(dn_factors);
    drop((gu_cached, dn_cached));
    out
}

/// The router module under its wrapper: the delta `(B @ A) * scaling` cast to the weight's
/// dtype, the registration check `W + delta` (dropped), then `forward` on the cached
/// `W + delta`; the delta and the cache go when the module returns.
pub fn router_wrapped<T>(adapter: Option<&Adapter>, scaling: f64, weight: &Tensor, forward: impl FnOnce(&Tensor) -> T) -> T {
    let Some(a) = adapter else { return forward(weight) };
    let delta = {
        let prod = a.b.mm(&a.a);
        let scaled = prod.mul_scalar(scaling);
        drop(prod);
        scaled.to_dtype(weight.dtype())
    };
    drop(weight.add(&delta));
    let folded = weight.add(&delta);
    let out = forward(&folded);
    drop(delta);
    drop(folded);
    out
}
