//! peft 0.21.2's `ParamWrapper` (`LoraConfig(target_parameters=...)`) on a sparse MoE block's
//! plain parameters: the experts' 3-D `gate_up_proj` (E, 2·I, hidden) and `down_proj`
//! (E, hidden, I), and the router's `weight` (E, hidden).
//!
//! Each targeted parameter gets one LoRA pair whose rank spans the experts: `lora_A` (r·E × in)
//! and `lora_B` (out × r·E) for a 3-D parameter (in/out swapped from its (E, in, out) shape,
//! since transformers' experts are not `is_transposed`), `lora_A` (r × hidden) and `lora_B`
//! (E × r) for the router. Two parameters of one module nest: the first in registration order
//! (`gate_up_proj`) is the inner wrapper, `down_proj`'s the outer.
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
use crate::model::lora::Adapter;
use std::cell::OnceCell;

/// The parameters `target_parameters` can name on a sparse MoE block, as peft matches them
/// (by suffix of `module.parameter`): the router's, then the experts'.
pub const TARGET_PARAMETERS: [&str; 3] = ["mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"];

/// The one of [`TARGET_PARAMETERS`] a `target_parameters` entry names, as peft matches it (the
/// key itself or a suffix at a dot); None for no match and for a bare `weight`, which would
/// reach every nn.Linear's weight too.
pub fn resolve_name(t: &str) -> Option<&'static str> {
    if t == "weight" {
        return None;
    }
    let hits: Vec<&'static str> = TARGET_PARAMETERS.iter().copied().filter(|k| *k == t || k.ends_with(&format!(".{t}"))).collect();
    match hits.as_slice() {
        [k] => Some(k),
        _ => None,
    }
}

/// One layer's ParamWrapper adapters (None: that parameter is not targeted).
#[derive(Clone, Default)]
pub struct ParamAdapters {
    pub router: Option<Adapter>,
    pub gate_up: Option<Adapter>,
    pub down: Option<Adapter>,
}

/// `get_delta_factors` of a 3-D parameter `w` (E, out, in): `lhs` = lora_B viewed (E, out, r),
/// `rhs` = lora_A viewed (E, r, in), each `.to(w.dtype)` (a copy only when the types differ:
/// fp32 adapters over bf16 experts), lhs first.
fn factors(adapter: &Adapter, w: &Tensor) -> (Tensor, Tensor) {
    let e = w.dim(0);
    let (a, b) = (&adapter.a, &adapter.b);
    let r = a.dim(0) / e;
    let wa = a.reshape(&[e, r, a.dim(1)]);
    let wb = b.reshape(&[b.dim(0), r, e]).permute(&[2, 0, 1]);
    let lhs = wb.to_dtype(w.dtype());
    let rhs = wa.to_dtype(w.dtype());
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
/// targeted. Registers the outer (down) then the inner (gate_up) parametrization, each
/// evaluated once and dropped, runs `forward` with the parameters as the module reads them,
/// then frees the inner proxy, the outer proxy and the cache.
pub fn experts_wrapped(p: Option<&ParamAdapters>, scaling: f64, gate_up: &Tensor, down: &Tensor, forward: impl FnOnce(&Folded<'_>, &Folded<'_>) -> Tensor) -> Tensor {
    let register = |adapter: Option<&Adapter>, w: &Tensor| {
        adapter.map(|a| {
            let (lhs, rhs) = factors(a, w);
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
