//! The estimate job: the closed form (`analyse::estimate`) of an [`EstimatePlan`] and, beside
//! it, a meta run of the configuration measured where the closed form speaks; its JSON and
//! (in `text/estimate.rs`) its printout.
use crate::engine::{autocast, runtime, Device, Tensor};
use crate::model::{Model, ModelConfig};
use crate::record::allocator::{AllocatorConfig, CachingAllocator};
use crate::record::{Category, Phase};
use crate::train::optim::OptimConfig;
use crate::train::{Batcher, CausalLmBatch, DataKind, Optimizer, Precision, StepRunner};
use anyhow::Result;
use serde::Serialize;

/// What a meta run of the same configuration allocated (requested bytes unless said).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Simulated {
    pub parameter_bytes: u64,
    pub gradient_bytes: u64,
    pub optimizer_bytes: u64,
    /// Saved for backward when the forward has returned.
    pub activation_bytes: u64,
    /// The autocast cache's low-precision weight copies when the forward has returned.
    pub autocast_cache_bytes: u64,
    pub logits_bytes: u64,
    /// Live bytes when the forward has returned (autograd on), everything included.
    pub forward_live_bytes: u64,
    /// Peak of allocated blocks (`max_memory_allocated`) over a training step after one
    /// warm-up step, through the caching-allocator model.
    pub training_peak_allocated: u64,
    pub training_peak_phase: String,
}

fn live(cat: Category) -> u64 {
    runtime::with(|rt| rt.log.live_by_category().into_iter().filter(|(c, _)| *c == cat).map(|(_, b)| b as u64).sum())
}

/// A meta forward (autograd on) and a training step, measured where the closed form speaks.
/// The caller checks the sizes first (`ModelConfig::check_sizes`).
pub fn simulate(cfg: &ModelConfig, precision: Precision, batch: usize, seq: usize, optim: &OptimConfig) -> Result<Simulated> {
    let mut sim = Simulated::default();
    // hf sdpa: run the kernel PyTorch picks on a CUDA GPU (autocast casts the inputs before
    // the pick), the one the closed form derives.
    let mut pinned = cfg.clone();
    if let (Some(kernel), Some(h)) = (cfg.hf().map(|h| crate::analyse::estimate::hf::kernel(cfg, h, precision, seq)), pinned.hf.as_mut()) {
        // (Gemma's layers choose theirs by layer type, whether the window's mask reaches them,
        // as PyTorch does on CUDA: left to the model.)
        if h.attn_implementation == crate::model::hf::AttnImplementation::Sdpa && h.gemma.is_none() {
            h.sdpa_backend = match kernel {
                crate::analyse::estimate::hf::Kernel::Fused(b) => b,
                _ => crate::model::hf::SdpaBackend::Math,
            };
        }
    }
    let cfg = &pinned;
    runtime::reset();
    runtime::with(|rt| rt.log.allocator = Some(CachingAllocator::new(AllocatorConfig::default(), usize::MAX / 4)));
    let res = (|| -> Result<()> {
        let model = Model::new_in(cfg, Device::Meta, 0, precision.param_dtype())?;
        let mut batcher = Batcher::new(DataKind::Random, cfg.vocab_size, batch, seq, Device::Meta, 0);
        // hf: the collator's batch (input_ids, labels = a copy, the all-ones attention_mask
        // when asked for), and `model.train()`, as the Trainer runs it (transformers
        // checkpoints layers only in training mode).
        let hf = cfg.hf().map(|h| h.attention_mask);
        let mut hf_batch = CausalLmBatch::default();
        let mut next = |batcher: &mut Batcher| -> (Tensor, Tensor, Option<Tensor>) {
            match hf {
                Some(mask) => {
                    batcher.next_causal_lm_batch(&mut hf_batch, true, mask);
                    let b = &hf_batch;
                    (b.input_ids.clone().expect("ids"), b.labels.clone().expect("labels"), b.attention_mask.clone())
                }
                None => {
                    let (x, y) = batcher.next_batch();
                    (x, y, None)
                }
            }
        };
        {
            let (x, y, mask) = next(&mut batcher);
            runtime::set_phase(Phase::Forward);
            model.training.set(hf.is_some());
            // `with torch.autocast(...)` around forward and loss, as the training step runs it.
            let region = precision.autocast().map(autocast::enable);
            let (logits, loss) = model.forward_loss_masked(&x, &y, mask.as_ref(), &mut |logits| {
                sim.activation_bytes = live(Category::Activation);
                if hf.is_some() {
                    // hf: the DynamicCache and what checkpointed layers' closures capture (the
                    // mask, position ids, RoPE tables) are held for backward without autograd
                    // saving them, as temporaries; the only other temporary now is the logits.
                    sim.activation_bytes += live(Category::Temporary) - logits.nbytes() as u64;
                }
                sim.autocast_cache_bytes = live(Category::AutocastCache);
                if std::env::var_os("VRAMSCOPE_ESTIMATE_DEBUG").is_some() {
                    for ev in runtime::with(|rt| rt.log.live_as_events()) {
                        let held = matches!(ev.category, Category::Activation | Category::AutocastCache) || (hf.is_some() && ev.category == Category::Temporary);
                        if held && (ev.scope.starts_with("layers.0") || ev.scope.starts_with("blocks.0") || ev.scope.starts_with("model.layers.0.") || &*ev.scope == "model.layers.0" || !ev.scope.contains("layers.")) {
                            eprintln!("{:>12} {:<40} {:<12} {:?}", ev.bytes, ev.scope, ev.op, ev.category);
                        }
                    }
                }
                sim.logits_bytes = logits.nbytes() as u64;
                sim.forward_live_bytes = runtime::with(|rt| rt.log.live_by_category().iter().map(|(_, b)| *b as u64).sum());
            });
            drop(region);
            drop((loss, logits));
            model.training.set(false);
            runtime::set_phase(Phase::Setup);
        }
        let opt = Optimizer::new(optim.clone(), model.parameters().len());
        let mut runner = StepRunner::new(&model, opt).with_precision(precision);
        let (x, y, mask) = next(&mut batcher);
        runner.step_masked(&x, &y, mask.as_ref());
        runtime::with(|rt| rt.log.reset_peak());
        let (x, y, mask) = next(&mut batcher);
        let r = runner.step_masked(&x, &y, mask.as_ref());
        sim.training_peak_allocated = r.peak_allocated as u64;
        sim.training_peak_phase = r.phases.iter().max_by_key(|p| p.peak_allocated).map_or(String::new(), |p| p.phase.to_string());
        sim.parameter_bytes = live(Category::Parameter);
        sim.gradient_bytes = live(Category::Gradient);
        sim.optimizer_bytes = live(Category::OptimizerState);
        runner.finish();
        Ok(())
    })();
    runtime::reset();
    res.map(|()| sim)
}


/// An estimate to make: the configuration and run shape, and whether to simulate beside it.
pub struct EstimatePlan {
    pub model: ModelConfig,
    pub precision: Precision,
    pub batch: usize,
    pub seq: usize,
    pub optim: OptimConfig,
    pub simulate: bool,
}

/// The closed form and, when asked, the simulated meta run.
pub struct EstimateResult {
    pub estimate: crate::analyse::estimate::Estimate,
    pub simulated: Option<Simulated>,
}

impl EstimatePlan {
    pub fn run(&self) -> Result<EstimateResult> {
        let estimate = crate::analyse::estimate::estimate_with(&self.model, self.precision, self.batch, self.seq, &self.optim);
        let simulated = if self.simulate { Some(simulate(&self.model, self.precision, self.batch, self.seq, &self.optim)?) } else { None };
        Ok(EstimateResult { estimate, simulated })
    }

    /// `estimate --json`'s object.
    pub fn json(&self, r: &EstimateResult) -> serde_json::Value {
        serde_json::json!({ "model": self.model, "estimate": r.estimate, "simulated": r.simulated, "units": "bytes" })
    }

    /// What `estimate` prints.
    pub fn text(&self, r: &EstimateResult) -> String {
        super::text::estimate::estimate(&r.estimate, &self.model, r.simulated.as_ref())
    }
}
