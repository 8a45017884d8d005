//! Optimizers, each with the allocation pattern of the implementation users run.
use crate::engine::runtime;
use crate::engine::Tensor;
use crate::model::Param;
use crate::record::Category;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// The CS336 course AdamW: `state.get("m", zeros_like(grad))` evaluated every step and
    /// out-of-place moment updates.
    AdamwCs336,
    /// `torch.optim.AdamW` default (foreach/multi-tensor) path.
    AdamwTorch,
    /// `torch.optim.SGD` (foreach), optional momentum.
    Sgd,
}

impl OptimizerKind {
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::AdamwCs336 => "adamw_cs336",
            OptimizerKind::AdamwTorch => "adamw_torch",
            OptimizerKind::Sgd => "sgd",
        }
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
}

impl OptimConfig {
    /// AdamW as the flavour's reference runs it (cs336: the course AdamW, lr 1e-3;
    /// tinyllama: torch.optim.AdamW, lr 3e-4), weight decay 0.01.
    pub fn reference(flavour: crate::model::Flavour) -> OptimConfig {
        let (kind, lr) = match flavour {
            crate::model::Flavour::Cs336 => (OptimizerKind::AdamwCs336, 1e-3),
            crate::model::Flavour::Tinyllama => (OptimizerKind::AdamwTorch, 3e-4),
            crate::model::Flavour::Hf => (OptimizerKind::AdamwTorch, 5e-5),
        };
        OptimConfig { kind, lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, momentum: 0.0 }
    }
}

pub struct Optimizer {
    pub config: OptimConfig,
    /// Per parameter: (first moment or momentum buffer, second moment).
    state: Vec<Option<(Tensor, Option<Tensor>)>>,
    steps: u64,
}

fn keep_as_state(t: &Tensor) {
    runtime::set_category(t.storage().id, Category::OptimizerState);
}

impl Optimizer {
    pub fn new(config: OptimConfig, num_params: usize) -> Optimizer {
        Optimizer { config, state: (0..num_params).map(|_| None).collect(), steps: 0 }
    }

    /// Bytes of optimizer state currently held.
    pub fn state_bytes(&self) -> u64 {
        self.state
            .iter()
            .flatten()
            .map(|(a, b)| (a.nbytes() + b.as_ref().map_or(0, |b| b.nbytes())) as u64)
            .sum()
    }

    pub fn step(&mut self, params: &[Param]) {
        let _g = runtime::no_grad();
        let _s = runtime::scope("optimizer");
        self.steps += 1;
        match self.config.kind {
            OptimizerKind::AdamwCs336 => self.adamw_cs336(params),
            OptimizerKind::AdamwTorch => self.adamw_torch(params),
            OptimizerKind::Sgd => self.sgd(params),
        }
    }

    fn adamw_cs336(&mut self, params: &[Param]) {
        let c = self.config.clone();
        for (i, p) in params.iter().enumerate() {
            let Some(grad) = p.tensor.grad() else { continue };
            let _s = runtime::scope(&p.name);
            let t = self.steps as f64;
            // m = state.get("m", torch.zeros_like(grad)): the default is built every step.
            let default_m = grad.zeros_like();
            let m = match &self.state[i] {
                Some((m, _)) => m.clone(),
                None => default_m.clone(),
            };
            drop(default_m);
            let default_v = grad.zeros_like();
            let v = match &self.state[i] {
                Some((_, Some(v))) => v.clone(),
                _ => default_v.clone(),
            };
            drop(default_v);
            // Python frees each unnamed intermediate as soon as the op consuming it returns;
            // Rust would keep a statement's temporaries to its end, so chains longer than
            // two ops are split: `beta2 * v + (1 - beta2) * grad**2` has grad**2 gone
            // before the add, `alpha_t * m / (torch.sqrt(v) + eps)` the sqrt before the div.
            let m_new = m.mul_scalar(c.beta1).add(&grad.mul_scalar(1.0 - c.beta1));
            let v_new = {
                let decayed = v.mul_scalar(c.beta2);
                let sq = grad.pow_scalar(2.0).mul_scalar(1.0 - c.beta2);
                decayed.add(&sq)
            };
            drop((m, v));
            let alpha_t = c.lr * (1.0 - c.beta2.powf(t)).sqrt() / (1.0 - c.beta1.powf(t));
            let upd = {
                let num = m_new.mul_scalar(alpha_t);
                let den = v_new.sqrt().add_scalar(c.eps);
                num.div(&den)
            };
            p.tensor.sub_(&upd);
            drop(upd);
            let decay = p.tensor.mul_scalar(c.lr * c.weight_decay);
            p.tensor.sub_(&decay);
            drop(decay);
            keep_as_state(&m_new);
            keep_as_state(&v_new);
            self.state[i] = Some((m_new, Some(v_new)));
        }
    }

    fn adamw_torch(&mut self, params: &[Param]) {
        let c = self.config.clone();
        let live: Vec<(usize, &Param, Tensor)> =
            params.iter().enumerate().filter_map(|(i, p)| p.tensor.grad().map(|g| (i, p, g))).collect();
        // _init_group: exp_avg and exp_avg_sq zeros at the first step, per parameter.
        for (i, p, _) in &live {
            if self.state[*i].is_none() {
                let _s = runtime::scope(&p.name);
                let _c = runtime::category(Category::OptimizerState);
                let m = p.tensor.zeros_like();
                let v = p.tensor.zeros_like();
                self.state[*i] = Some((m, Some(v)));
            }
        }
        let t = self.steps as f64;
        let states: Vec<(Tensor, Tensor)> = live
            .iter()
            .map(|(i, _, _)| {
                let (m, v) = self.state[*i].as_ref().unwrap();
                (m.clone(), v.clone().unwrap())
            })
            .collect();
        for (_, p, _) in &live {
            p.tensor.mul_scalar_(1.0 - c.lr * c.weight_decay);
        }
        for ((m, _), (_, _, g)) in states.iter().zip(&live) {
            m.lerp_(g, 1.0 - c.beta1);
        }
        for ((_, v), (_, _, g)) in states.iter().zip(&live) {
            v.mul_scalar_(c.beta2);
            v.addcmul_(g, g, 1.0 - c.beta2);
        }
        let bc1 = 1.0 - c.beta1.powf(t);
        let bc2_sqrt = (1.0 - c.beta2.powf(t)).sqrt();
        let step_size = c.lr / bc1;
        // exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs): one temporary per parameter,
        // all alive together until the update is done.
        let sqrt: Vec<Tensor> = states
            .iter()
            .zip(&live)
            .map(|((_, v), (_, p, _))| {
                let _s = runtime::scope(&p.name);
                v.sqrt()
            })
            .collect();
        for s in &sqrt {
            s.div_scalar_(bc2_sqrt);
            s.add_scalar_(c.eps);
        }
        for (((m, _), s), (_, p, _)) in states.iter().zip(&sqrt).zip(&live) {
            p.tensor.addcdiv_(m, s, -step_size);
        }
        drop(sqrt);
    }

    fn sgd(&mut self, params: &[Param]) {
        let c = self.config.clone();
        for (i, p) in params.iter().enumerate() {
            let Some(grad) = p.tensor.grad() else { continue };
            if c.momentum == 0.0 {
                p.tensor.add_scaled_(&grad, -c.lr);
                continue;
            }
            let buf = match &self.state[i] {
                Some((b, _)) => {
                    b.mul_scalar_(c.momentum);
                    b.add_(&grad);
                    b.clone()
                }
                None => {
                    let _s = runtime::scope(&p.name);
                    let _c = runtime::category(Category::OptimizerState);
                    let b = grad.clone_contiguous();
                    self.state[i] = Some((b.clone(), None));
                    b
                }
            };
            p.tensor.add_scaled_(&buf, -c.lr);
        }
    }
}
