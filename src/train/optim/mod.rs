//! Optimizers, each with the allocation pattern of the implementation users run (torch 2.15
//! on a CUDA device: what it allocates and when it frees), and gradient clipping.
//!
//! One file per implementation: [`adamw_cs336`] (the course AdamW), [`adamw_foreach`]
//! (`torch.optim.AdamW()` on CUDA), [`adamw_fused`] (`fused=True`, the Trainer's
//! `adamw_torch_fused`), [`adamw_forloop`] (`foreach=False`), [`sgd`] and [`clip`]
//! (`torch.nn.utils.clip_grad_norm_`), [`adafactor`] (the Trainer's `adafactor`).
mod adafactor;
mod adamw_bnb;
mod adamw_cs336;
mod adamw_foreach;
mod adamw_forloop;
mod adamw_fused;
pub mod clip;
mod sgd;

use crate::engine::runtime;
use crate::engine::{DType, Tensor};
use crate::model::py::lib_frames as py;
use crate::model::{Flavour, Param};
use crate::record::Category;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// The CS336 course AdamW: `state.get("m", zeros_like(grad))` evaluated every step and
    /// out-of-place moment updates.
    AdamwCs336,
    /// `torch.optim.AdamW` foreach (multi-tensor) path, CUDA's default: one `sqrt` temporary
    /// per parameter, all alive together; `step` counters on the host.
    AdamwTorch,
    /// `torch.optim.AdamW(fused=True)` (`_fused_adamw_`): no temporaries; `step` is a 0-d fp32
    /// tensor on the device per parameter.
    AdamwTorchFused,
    /// `torch.optim.AdamW(foreach=False)` (`_single_tensor_adamw`): a parameter at a time, its
    /// `sqrt` and `denom` temporaries (and the previous parameter's `denom`).
    AdamwTorchForloop,
    /// `torch.optim.SGD` (foreach), optional momentum and (coupled) weight decay.
    Sgd,
    /// bitsandbytes' 8-bit AdamW (`adamw_bnb_8bit`, also `adamw_8bit`): one-byte moments with
    /// block scales; parameters under 4096 elements keep fp32 moments.
    #[serde(rename = "adamw_bnb_8bit")]
    AdamwBnb8bit,
    /// bitsandbytes' paged 8-bit AdamW: as `adamw_bnb_8bit`, large buffers in CUDA unified memory.
    #[serde(rename = "paged_adamw_8bit")]
    PagedAdamw8bit,
    /// bitsandbytes' paged 32-bit AdamW: fp32 moments, large ones in CUDA unified memory.
    #[serde(rename = "paged_adamw_32bit")]
    PagedAdamw32bit,
    /// transformers' `Adafactor(scale_parameter=False, relative_step=False)`: factored fp32
    /// second moments, fp32 copies of bf16/fp16 parameters and gradients, a parameter at a time.
    Adafactor,
}

impl OptimizerKind {
    /// Every implementation, in `--optimizer`'s order.
    pub const ALL: [OptimizerKind; 9] = [
        OptimizerKind::AdamwTorchFused,
        OptimizerKind::AdamwTorch,
        OptimizerKind::AdamwTorchForloop,
        OptimizerKind::Sgd,
        OptimizerKind::AdamwCs336,
        OptimizerKind::AdamwBnb8bit,
        OptimizerKind::PagedAdamw8bit,
        OptimizerKind::PagedAdamw32bit,
        OptimizerKind::Adafactor,
    ];

    /// The Trainer's `optim` name (adamw_cs336 for the course AdamW).
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::AdamwCs336 => "adamw_cs336",
            OptimizerKind::AdamwTorch => "adamw_torch",
            OptimizerKind::AdamwTorchFused => "adamw_torch_fused",
            OptimizerKind::AdamwTorchForloop => "adamw_torch_forloop",
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::AdamwBnb8bit => "adamw_bnb_8bit",
            OptimizerKind::PagedAdamw8bit => "paged_adamw_8bit",
            OptimizerKind::PagedAdamw32bit => "paged_adamw_32bit",
            OptimizerKind::Adafactor => "adafactor",
        }
    }

    /// bitsandbytes' optimizers: their state numerics are not computed (meta only).
    pub fn is_bitsandbytes(self) -> bool {
        matches!(self, OptimizerKind::AdamwBnb8bit | OptimizerKind::PagedAdamw8bit | OptimizerKind::PagedAdamw32bit)
    }

    /// A name as `--optimizer` takes it: the Trainer's names, `adamw_torch_foreach` (=
    /// adamw_torch), and the older hyphenated spellings.
    pub fn parse(s: &str) -> Option<OptimizerKind> {
        Some(match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "adamw_torch_fused" => OptimizerKind::AdamwTorchFused,
            "adamw_torch" | "adamw_torch_foreach" => OptimizerKind::AdamwTorch,
            "adamw_torch_forloop" => OptimizerKind::AdamwTorchForloop,
            "sgd" => OptimizerKind::Sgd,
            "adamw_cs336" => OptimizerKind::AdamwCs336,
            "adamw_bnb_8bit" | "adamw_8bit" => OptimizerKind::AdamwBnb8bit,
            "paged_adamw_8bit" => OptimizerKind::PagedAdamw8bit,
            "paged_adamw_32bit" => OptimizerKind::PagedAdamw32bit,
            "adafactor" => OptimizerKind::Adafactor,
            _ => return None,
        })
    }

    /// What the implementation is, in a few words (printed with a run's settings).
    pub fn describe(self) -> &'static str {
        match self {
            OptimizerKind::AdamwCs336 => "the CS336 course AdamW",
            OptimizerKind::AdamwTorch => "torch.optim.AdamW, foreach (multi-tensor)",
            OptimizerKind::AdamwTorchFused => "torch.optim.AdamW(fused=True)",
            OptimizerKind::AdamwTorchForloop => "torch.optim.AdamW(foreach=False), a parameter at a time",
            OptimizerKind::Sgd => "torch.optim.SGD, foreach",
            OptimizerKind::AdamwBnb8bit => "bitsandbytes AdamW, 8-bit blockwise state",
            OptimizerKind::PagedAdamw8bit => "bitsandbytes AdamW, 8-bit state, paged to CUDA unified memory",
            OptimizerKind::PagedAdamw32bit => "bitsandbytes AdamW, fp32 state, paged to CUDA unified memory",
            OptimizerKind::Adafactor => "transformers Adafactor(scale_parameter=False, relative_step=False), a parameter at a time",
        }
    }
}

impl std::fmt::Display for OptimizerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct OptimConfig {
    pub kind: OptimizerKind,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    /// `torch.nn.utils.clip_grad_norm_(params, max_grad_norm)` before each step (None: off;
    /// infinity: the norm is computed but nothing is clipped, as the hf Trainer does with
    /// `max_grad_norm` 0 to log it). JSON writes infinity as "inf".
    #[serde(serialize_with = "max_norm_json")]
    pub max_grad_norm: Option<f64>,
}

fn max_norm_json<S: serde::Serializer>(m: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match m {
        Some(x) if x.is_infinite() => s.serialize_str("inf"),
        Some(x) => s.serialize_f64(*x),
        None => s.serialize_none(),
    }
}

impl OptimConfig {
    /// The optimizer each flavour's reference runs:
    /// - cs336: the course AdamW ([`OptimizerKind::AdamwCs336`]), lr 1e-3, weight decay 0.01,
    ///   no clipping;
    /// - tinyllama: `torch.optim.AdamW` with CUDA's default foreach path
    ///   ([`OptimizerKind::AdamwTorch`]), lr 3e-4, weight decay 0.01, no clipping;
    /// - hf: the Trainer's defaults: `adamw_torch_fused` ([`OptimizerKind::AdamwTorchFused`]),
    ///   lr 5e-5, weight decay 0.0, `max_grad_norm` 1.0.
    ///
    /// All: betas (0.9, 0.999), eps 1e-8.
    pub fn reference(flavour: Flavour) -> OptimConfig {
        let (kind, lr, weight_decay, max_grad_norm) = match flavour {
            Flavour::Cs336 => (OptimizerKind::AdamwCs336, 1e-3, 0.01, None),
            Flavour::Tinyllama => (OptimizerKind::AdamwTorch, 3e-4, 0.01, None),
            Flavour::Hf => (OptimizerKind::AdamwTorchFused, 5e-5, 0.0, Some(1.0)),
        };
        OptimConfig { kind, lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay, momentum: 0.0, max_grad_norm }
    }

    /// One line for printed run settings, e.g. `adamw_torch_fused (torch.optim.AdamW(fused=True)):
    /// lr 0.00005, weight decay 0, betas (0.9, 0.999), eps 0.00000001; clip_grad_norm_ max_norm 1`.
    pub fn summary(&self) -> String {
        let clip = match self.max_grad_norm {
            None => "no gradient clipping".to_string(),
            Some(m) if m.is_infinite() => "clip_grad_norm_ with max_norm inf (the Trainer's norm for its log; nothing clipped)".to_string(),
            Some(m) => format!("clip_grad_norm_ max_norm {m}"),
        };
        let extra = match self.kind {
            OptimizerKind::Sgd => format!("momentum {}", self.momentum),
            OptimizerKind::Adafactor => "eps (1e-30, 1e-3), clip_threshold 1, decay_rate -0.8, no beta1".to_string(),
            _ => format!("betas ({}, {}), eps {:e}", self.beta1, self.beta2, self.eps),
        };
        format!("{} ({}): lr {}, weight decay {}, {extra}; {clip}", self.kind, self.kind.describe(), self.lr, self.weight_decay)
    }
}

/// One parameter's state: AdamW's two moments (SGD: the momentum buffer alone) and, for the
/// fused AdamW, its device-side `step` tensor.
pub(crate) struct ParamState {
    pub m: Tensor,
    pub v: Option<Tensor>,
    pub step: Option<Tensor>,
    /// bitsandbytes' 8-bit block scales (absmax1, absmax2).
    pub extra: Vec<Tensor>,
}

impl ParamState {
    fn nbytes(&self) -> usize {
        self.m.nbytes() + self.v.as_ref().map_or(0, Tensor::nbytes) + self.step.as_ref().map_or(0, Tensor::nbytes) + self.extra.iter().map(Tensor::nbytes).sum::<usize>()
    }
}

pub struct Optimizer {
    pub config: OptimConfig,
    state: Vec<Option<ParamState>>,
    /// State shared by every parameter (bitsandbytes' quantization maps).
    shared: Vec<Tensor>,
    steps: u64,
}

fn keep_as_state(t: &Tensor) {
    runtime::set_category(t.storage().id, Category::OptimizerState);
}

/// The parameters that have a gradient: (index, parameter, gradient), in order.
pub(crate) type Live<'p> = Vec<(usize, &'p Param, Tensor)>;

fn live(params: &[Param]) -> Live<'_> {
    params.iter().enumerate().filter_map(|(i, p)| p.tensor.grad().map(|g| (i, p, g))).collect()
}

/// `_group_tensors_by_device_and_dtype`: positions into `items` per dtype, dtypes in the order
/// first seen, each group in list order (one device here).
pub(crate) fn group_by_dtype(dtypes: impl IntoIterator<Item = DType>) -> Vec<Vec<usize>> {
    let mut keys: Vec<DType> = Vec::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, d) in dtypes.into_iter().enumerate() {
        match keys.iter().position(|&k| k == d) {
            Some(g) => groups[g].push(i),
            None => {
                keys.push(d);
                groups.push(vec![i]);
            }
        }
    }
    groups
}

impl Optimizer {
    pub fn new(config: OptimConfig, num_params: usize) -> Optimizer {
        Optimizer { config, state: (0..num_params).map(|_| None).collect(), shared: Vec::new(), steps: 0 }
    }

    /// Bytes of optimizer state currently held (the fused AdamW's device `step` tensors included).
    pub fn state_bytes(&self) -> u64 {
        self.state.iter().flatten().map(|s| s.nbytes() as u64).sum()
    }

    /// `clip_grad_norm_` (when configured), then `optimizer.step()`, as the Trainer runs them.
    /// The returned total norm stays bound through the step, as the Trainer's `_grad_norm` does.
    pub fn step(&mut self, params: &[Param]) {
        let _g = runtime::no_grad();
        let _s = runtime::scope("optimizer");
        let grad_norm = self.config.max_grad_norm.and_then(|m| {
            let _f = runtime::py_frame(&py::CLIP_GRAD_NORM);
            clip::clip_grad_norm_(params, m)
        });
        self.steps += 1;
        let live = live(params);
        // The Python function each optimizer's step mirrors, and the one inside it.
        let (outer, inner) = match self.config.kind {
            OptimizerKind::AdamwCs336 => (None, None),
            OptimizerKind::AdamwTorch => (Some(&py::TORCH_ADAM_STEP), Some(&py::TORCH_MULTI_TENSOR_ADAM)),
            OptimizerKind::AdamwTorchFused => (Some(&py::TORCH_ADAM_STEP), Some(&py::TORCH_FUSED_ADAM)),
            OptimizerKind::AdamwTorchForloop => (Some(&py::TORCH_ADAM_STEP), Some(&py::TORCH_SINGLE_TENSOR_ADAM)),
            OptimizerKind::Sgd => (Some(&py::TORCH_SGD_STEP), None),
            OptimizerKind::AdamwBnb8bit | OptimizerKind::PagedAdamw8bit | OptimizerKind::PagedAdamw32bit => (Some(&py::BNB_OPTIMIZER_STEP), Some(&py::BNB_OPTIMIZER_UPDATE)),
            OptimizerKind::Adafactor => (Some(&py::ADAFACTOR_STEP), None),
        };
        let _outer = outer.map(runtime::py_frame);
        let _inner = inner.map(runtime::py_frame);
        match self.config.kind {
            OptimizerKind::AdamwCs336 => adamw_cs336::step(&self.config, &mut self.state, self.steps, &live),
            OptimizerKind::AdamwTorch => adamw_foreach::step(&self.config, &mut self.state, self.steps, &live),
            OptimizerKind::AdamwTorchFused => adamw_fused::step(&self.config, &mut self.state, self.steps, &live),
            OptimizerKind::AdamwTorchForloop => adamw_forloop::step(&self.config, &mut self.state, self.steps, &live),
            OptimizerKind::Sgd => sgd::step(&self.config, &mut self.state, &live),
            OptimizerKind::AdamwBnb8bit => adamw_bnb::step(&mut self.state, &mut self.shared, &live, true, false),
            OptimizerKind::PagedAdamw8bit => adamw_bnb::step(&mut self.state, &mut self.shared, &live, true, true),
            OptimizerKind::PagedAdamw32bit => adamw_bnb::step(&mut self.state, &mut self.shared, &live, false, true),
            OptimizerKind::Adafactor => adafactor::step(&self.config, &mut self.state, self.steps, &live),
        }
        drop(grad_norm);
    }
}

/// AdamW's `_init_group` for torch's implementations: at a parameter's first step, its
/// `exp_avg` and `exp_avg_sq` zeros (after the fused path's device `step` tensor), parameter
/// by parameter.
fn init_adamw_state(state: &mut [Option<ParamState>], live: &Live<'_>, device_step: bool) {
    for (i, p, _) in live {
        if state[*i].is_none() {
            let _s = runtime::scope(&p.name);
            let _c = runtime::category(Category::OptimizerState);
            // torch.zeros((), dtype=float32, device=p.device): 4 B, a 512 B block on CUDA.
            let step = device_step.then(|| Tensor::zeros(&[], DType::F32, p.tensor.device()));
            let m = p.tensor.zeros_like();
            let v = p.tensor.zeros_like();
            state[*i] = Some(ParamState { m, v: Some(v), step, extra: Vec::new() });
        }
    }
}

/// AdamW's bias corrections at step `steps`: (√(1 − β₂ᵗ), the step size lr / (1 − β₁ᵗ)).
fn bias_corrections(c: &OptimConfig, steps: u64) -> (f64, f64) {
    let t = steps as f64;
    ((1.0 - c.beta2.powf(t)).sqrt(), c.lr / (1.0 - c.beta1.powf(t)))
}

/// One parameter's in-place part of AdamW as the single-tensor and fused paths write it:
/// `param.mul_(1 - lr·wd)` (when wd ≠ 0), `exp_avg.lerp_(grad, 1 - β₁)`,
/// `exp_avg_sq.mul_(β₂).addcmul_(grad, grad, value=1 - β₂)`. No allocation, except for a
/// tensor-parallel parameter whose gradient is whole: DTensor redistributes it to the
/// parameter's shard for each operand (one copy for lerp_, two for addcmul_), each freed
/// when its op returns.
fn decay_and_update_moments(c: &OptimConfig, param: &Tensor, m: &Tensor, v: &Tensor, grad: &Tensor) {
    use crate::engine::autograd::grad_as_placed;
    if c.weight_decay != 0.0 {
        param.mul_scalar_(1.0 - c.lr * c.weight_decay);
    }
    m.lerp_(&grad_as_placed(param, grad), 1.0 - c.beta1);
    v.mul_scalar_(c.beta2);
    let (a, b) = (grad_as_placed(param, grad), grad_as_placed(param, grad));
    v.addcmul_(&a, &b, 1.0 - c.beta2);
}

/// (exp_avg, exp_avg_sq) handles of the live parameters, in order.
fn moments(state: &[Option<ParamState>], live: &Live<'_>) -> Vec<(Tensor, Tensor)> {
    live.iter()
        .map(|(i, _, _)| {
            let s = state[*i].as_ref().expect("state initialised");
            (s.m.clone(), s.v.clone().expect("AdamW has a second moment"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases_parse() {
        for k in OptimizerKind::ALL {
            assert_eq!(OptimizerKind::parse(k.name()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.name());
        }
        assert_eq!(OptimizerKind::parse("adamw_torch_foreach"), Some(OptimizerKind::AdamwTorch));
        assert_eq!(OptimizerKind::parse("adamw-torch"), Some(OptimizerKind::AdamwTorch));
        assert_eq!(OptimizerKind::parse("adamw"), None);
    }

    #[test]
    fn references_per_flavour() {
        let cs = OptimConfig::reference(Flavour::Cs336);
        assert_eq!((cs.kind, cs.lr, cs.weight_decay, cs.max_grad_norm), (OptimizerKind::AdamwCs336, 1e-3, 0.01, None));
        let tl = OptimConfig::reference(Flavour::Tinyllama);
        assert_eq!((tl.kind, tl.lr, tl.weight_decay, tl.max_grad_norm), (OptimizerKind::AdamwTorch, 3e-4, 0.01, None));
        let hf = OptimConfig::reference(Flavour::Hf);
        assert_eq!((hf.kind, hf.lr, hf.weight_decay, hf.max_grad_norm), (OptimizerKind::AdamwTorchFused, 5e-5, 0.0, Some(1.0)));
        assert_eq!((hf.beta1, hf.beta2, hf.eps), (0.9, 0.999, 1e-8));
    }

    #[test]
    fn groups_keep_first_seen_dtype_order() {
        let g = group_by_dtype([DType::BF16, DType::F32, DType::BF16, DType::F32, DType::F32]);
        assert_eq!(g, vec![vec![0, 2], vec![1, 3, 4]]);
    }
}
