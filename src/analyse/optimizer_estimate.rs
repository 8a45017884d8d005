//! Closed-form optimizer memory per implementation: the state a step keeps and the
//! temporaries it adds at its peak (with `clip_grad_norm_`'s small tensors), in requested bytes
//! (each 0-d tensor is 4 B requested, a 512 B block on CUDA).
use crate::model::{hf::Arch, Flavour, ModelConfig};
use crate::train::optim::clip::FOREACH_CHUNK;
use crate::train::optim::{OptimConfig, OptimizerKind};

/// The parameters' element counts in `model.parameters()` order (the order the for-loop
/// AdamW walks them), kept as embedding, one decoder block repeated `layers` times, and the
/// tail (final norm, untied head): a model of 10^8 layers is not listed out.
pub struct ParamSizes {
    pub first: u64,
    /// A block repeated `pre_layers` times before `block` (DeepSeek-V3's dense layers).
    pub pre_block: Vec<u64>,
    pub pre_layers: u64,
    pub block: Vec<u64>,
    pub layers: u64,
    pub tail: Vec<u64>,
    /// Adafactor's fp32 second-moment elements: rows + columns per matrix (factored), the
    /// whole vector per 1-D parameter; the model's total.
    pub factored: u64,
    /// Per parameter of [`Self::neighbours`]' order: rows + columns of a matrix, 0 for a vector
    /// (Adafactor's row and column factors coexist with its full-size temporaries).
    factors: Vec<u64>,
}

impl ParamSizes {
    pub fn of(cfg: &ModelConfig) -> ParamSizes {
        if let Some((m, ds)) = cfg.hf().and_then(|h| h.moe.as_ref()).and_then(|m| m.deepseek.as_ref().map(|ds| (m, ds))) {
            return Self::deepseek(cfg, m, ds);
        }
        let (d, f, v) = (cfg.d_model as u64, cfg.d_ff as u64, cfg.vocab_size as u64);
        let hd = cfg.head_dim() as u64;
        let (q, kv) = ((cfg.num_heads as u64).saturating_mul(hd), (cfg.num_kv_heads as u64).saturating_mul(hd));
        let m = |a: u64, b: u64| a.saturating_mul(b);
        // One decoder block's parameters as (rows, Some(cols)) for matrices, (n, None) for vectors.
        let mut dims: Vec<(u64, Option<u64>)> = Vec::new();
        // A 3-D parameter's leading size by its index in `dims` (the MoE experts' (E, rows,
        // cols)): its elements are lead·rows·cols, Adafactor's factors lead·(rows + cols).
        let mut lead: Vec<(usize, u64)> = Vec::new();
        match (&cfg.hf, cfg.flavour) {
            // Phi-3's registration: o_proj, the fused qkv_proj, gate_up_proj, down_proj, norms.
            (Some(h), Flavour::Hf) if h.model_type == Arch::Phi3 => {
                dims.extend([(d, Some(q)), (q.saturating_add(kv.saturating_mul(2)), Some(d)), (f.saturating_mul(2), Some(d)), (d, Some(f)), (d, None), (d, None)]);
            }
            (Some(h), Flavour::Hf) => {
                // transformers' registration: q, k, v, o (each weight then bias), Qwen3's
                // q_norm/k_norm, gate, up, down, then the two norms.
                for (rows, cols, bias) in [(q, d, h.qkv_bias), (kv, d, h.qkv_bias), (kv, d, h.qkv_bias), (d, q, h.o_bias)] {
                    dims.push((rows, Some(cols)));
                    if bias {
                        dims.push((rows, None));
                    }
                }
                match h.model_type {
                    Arch::Qwen3 | Arch::Gemma3Text => dims.extend([(hd, None), (hd, None)]),
                    // OLMo-2's norms span the whole projections.
                    Arch::Olmo2 => dims.extend([(q, None), (kv, None)]),
                    _ => {}
                }
                match &h.moe {
                    Some(m) if m.gpt_oss.is_some() => lead = gpt_oss_dims(m, d, cfg.num_heads as u64, &mut dims),
                    Some(m) => {
                        lead = moe_dims(m, d, &mut dims);
                    }
                    None => {
                        for (rows, cols) in [(f, d), (f, d), (d, f)] {
                            dims.push((rows, Some(cols)));
                            if h.mlp_bias {
                                dims.push((rows, None));
                            }
                        }
                    }
                }
                dims.extend([(d, None), (d, None)]);
                // Gemma: pre- and post-feedforward norms besides the two above.
                if h.model_type.is_gemma() {
                    dims.extend([(d, None), (d, None)]);
                }
            }
            _ => {
                dims.push((d, None));
                if cfg.fused_qkv {
                    dims.push((q.saturating_add(kv.saturating_mul(2)), Some(d)));
                } else {
                    dims.extend([(q, Some(d)), (kv, Some(d)), (kv, Some(d))]);
                }
                dims.extend([(d, Some(q)), (d, None)]);
                if cfg.fused_gate_up {
                    dims.extend([(f.saturating_mul(2), Some(d)), (d, Some(f))]);
                } else {
                    dims.extend([(f, Some(d)), (f, Some(d)), (d, Some(f))]);
                }
            }
        }
        let lead_of = |i: usize| lead.iter().find(|(j, _)| *j == i).map_or(1, |&(_, e)| e);
        let block: Vec<u64> = dims.iter().enumerate().map(|(i, &(r, c))| m(lead_of(i), c.map_or(r, |c| m(r, c)))).collect();
        let block_factored = dims.iter().enumerate().fold(0u64, |a, (i, &(r, c))| a.saturating_add(m(lead_of(i), r.saturating_add(c.unwrap_or(0)))));
        let mut tail = vec![d];
        let mut factored = v.saturating_add(d).saturating_add(d);
        if !cfg.tied_embeddings {
            tail.push(m(v, d));
            factored = factored.saturating_add(v.saturating_add(d));
        }
        let layers = cfg.num_layers as u64;
        let factored = factored.saturating_add(block_factored.saturating_mul(layers));
        let rc = |(i, &(r, c)): (usize, &(u64, Option<u64>))| c.map_or(0, |c| m(lead_of(i), r.saturating_add(c)));
        let mut factors = vec![v.saturating_add(d)];
        for _ in 0..layers.min(2) {
            factors.extend(dims.iter().enumerate().map(rc));
        }
        factors.push(0);
        if !cfg.tied_embeddings {
            factors.push(v.saturating_add(d));
        }
        ParamSizes { first: m(v, d), pre_block: Vec::new(), pre_layers: 0, block, layers, tail, factored, factors }
    }

    /// DeepSeek-V3: the embedding, `first_k_dense_replace` dense layers, the sparse ones (their
    /// 3-D experts factored per expert by Adafactor), the final norm and the head.
    fn deepseek(cfg: &ModelConfig, m: &crate::model::hf::moe::MoeConfig, ds: &crate::model::hf::deepseek_v3::DeepseekParts) -> ParamSizes {
        let (d, v) = (cfg.d_model as u64, cfg.vocab_size as u64);
        let layers = cfg.num_layers as u64;
        let dense = (ds.first_k_dense as u64).min(layers);
        let sat = |a: u64, b: u64| a.saturating_mul(b);
        // (elements, Adafactor's factored elements, rows + cols of a matrix or 0) per parameter.
        let sizes = |sparse: bool| -> Vec<(u64, u64, u64)> {
            let (dims, lead) = crate::analyse::estimate::hf::deepseek::layer_dims(cfg, m, ds, sparse);
            let lead_of = |i: usize| lead.iter().find(|(j, _)| *j == i).map_or(1, |&(_, e)| e);
            dims.iter().enumerate().map(|(i, &(r, c))| (sat(lead_of(i), c.map_or(r, |c| sat(r, c))), sat(lead_of(i), r.saturating_add(c.unwrap_or(0))), c.map_or(0, |c| sat(lead_of(i), r.saturating_add(c))))).collect()
        };
        let (pre, main) = (sizes(false), sizes(true));
        let factored_of = |b: &[(u64, u64, u64)]| b.iter().fold(0u64, |a, x| a.saturating_add(x.1));
        let mut factored = v.saturating_add(d).saturating_add(d);
        let mut tail = vec![d];
        if !cfg.tied_embeddings {
            tail.push(sat(v, d));
            factored = factored.saturating_add(v.saturating_add(d));
        }
        factored = factored.saturating_add(sat(factored_of(&pre), dense)).saturating_add(sat(factored_of(&main), layers - dense));
        let mut factors = vec![v.saturating_add(d)];
        for _ in 0..dense.min(2) {
            factors.extend(pre.iter().map(|x| x.2));
        }
        for _ in 0..(layers - dense).min(2) {
            factors.extend(main.iter().map(|x| x.2));
        }
        factors.push(0);
        if !cfg.tied_embeddings {
            factors.push(v.saturating_add(d));
        }
        ParamSizes {
            first: sat(v, d),
            pre_block: pre.iter().map(|x| x.0).collect(),
            pre_layers: dense,
            block: main.iter().map(|x| x.0).collect(),
            layers: layers - dense,
            tail,
            factored,
            factors,
        }
    }

    /// The trainable parameters of a peft model with frozen biases, in `parameters()` order:
    /// each layer's adapter matrices `mats` (lora_A, lora_B per adapted projection), `layers`
    /// times. Held as the first matrix, the rest of a layer and the next layer's first
    /// matrix repeated `layers − 1` times, and the last layer's rest.
    pub fn adapters(mats: &[(u64, u64)], layers: u64) -> ParamSizes {
        let (first, rest) = mats.split_first().expect("an adapted projection");
        let size = |&(r, c): &(u64, u64)| r.saturating_mul(c);
        let rc = |&(r, c): &(u64, u64)| r.saturating_add(c);
        let mut block: Vec<u64> = rest.iter().map(size).collect();
        block.push(size(first));
        let tail: Vec<u64> = rest.iter().map(size).collect();
        let per_layer = mats.iter().fold(0u64, |a, m| a.saturating_add(rc(m)));
        let repeats = layers.saturating_sub(1);
        let mut factors = vec![rc(first)];
        for _ in 0..repeats.min(2) {
            factors.extend(rest.iter().map(rc));
            factors.push(rc(first));
        }
        factors.extend(rest.iter().map(rc));
        ParamSizes { first: size(first), pre_block: Vec::new(), pre_layers: 0, block, layers: repeats, tail, factored: per_layer.saturating_mul(layers), factors }
    }

    /// Number of parameter tensors.
    pub fn count(&self) -> u64 {
        let pre = (self.pre_block.len() as u64).saturating_mul(self.pre_layers);
        (self.block.len() as u64).saturating_mul(self.layers).saturating_add(pre).saturating_add(1 + self.tail.len() as u64)
    }
    /// Elements in all.
    pub fn total(&self) -> u64 {
        let sum = |b: &[u64]| b.iter().fold(0u64, |a, &x| a.saturating_add(x));
        let pre = sum(&self.pre_block).saturating_mul(self.pre_layers);
        self.first.saturating_add(sum(&self.block).saturating_mul(self.layers)).saturating_add(pre).saturating_add(self.tail.iter().sum())
    }
    /// The largest parameter.
    pub fn largest(&self) -> u64 {
        let b = if self.layers > 0 { self.block.iter().copied().max().unwrap_or(0) } else { 0 };
        let pre = if self.pre_layers > 0 { self.pre_block.iter().copied().max().unwrap_or(0) } else { 0 };
        self.first.max(b).max(pre).max(self.tail.iter().copied().max().unwrap_or(0))
    }
    /// The order with at most two of each block: every pair of neighbours the full order has.
    fn neighbours(&self) -> Vec<u64> {
        let mut s = vec![self.first];
        for _ in 0..self.pre_layers.min(2) {
            s.extend(&self.pre_block);
        }
        for _ in 0..self.layers.min(2) {
            s.extend(&self.block);
        }
        s.extend(&self.tail);
        s
    }
    /// Adafactor's fp32 temporaries at their peak, in elements, a parameter at a time (see
    /// train/optim/adafactor.rs): `grad²` and `grad² + eps` while the previous parameter's
    /// `update` is bound, then `grad² + eps`, the row and column factors and the new `update`;
    /// over half-precision weights the fp32 copies of the gradient and the parameter besides,
    /// and at a parameter's start its gradient's copy while the previous parameter's copy and
    /// update are still bound.
    pub fn adafactor_worst(&self, half: bool) -> u64 {
        let s = self.neighbours();
        let copies: u64 = if half { 2 } else { 0 };
        s.iter()
            .zip(&self.factors)
            .enumerate()
            .map(|(i, (&n, &f))| {
                let prev = if i > 0 { s[i - 1] } else { 0 };
                let main = n.saturating_mul(2 + copies).saturating_add(prev.max(f));
                let start = if half { n.saturating_add(prev.saturating_mul(2)) } else { 0 };
                main.max(start)
            })
            .max()
            .unwrap_or(0)
    }
    /// max over parameters of 2 × it + the one before (the for-loop AdamW's temporaries).
    pub fn forloop_worst(&self) -> u64 {
        let s = self.neighbours();
        s.iter().enumerate().map(|(i, &x)| x.saturating_mul(2).saturating_add(if i > 0 { s[i - 1] } else { 0 })).max().unwrap_or(0)
    }
    /// Every parameter's element count, in order (small models: tests).
    pub fn list(&self) -> Vec<u64> {
        let mut out = vec![self.first];
        for _ in 0..self.pre_layers {
            out.extend(&self.pre_block);
        }
        for _ in 0..self.layers {
            out.extend(&self.block);
        }
        out.extend(&self.tail);
        out
    }
}

/// A sparse MoE block's parameters in transformers' registration order, pushed on `dims`:
/// the router (E, d) (Qwen3-MoE registers it after the experts), the experts' 3-D
/// `gate_up_proj` (E, 2I, d) and `down_proj` (E, d, I), and Qwen2-MoE's shared expert (its
/// three linears and the (1, d) `shared_expert_gate`). Returns the 3-D ones' indices with E.
fn moe_dims(m: &crate::model::hf::moe::MoeConfig, d: u64, dims: &mut Vec<(u64, Option<u64>)>) -> Vec<(usize, u64)> {
    use crate::model::hf::moe::MoeFamily;
    let (e, i, s) = (m.experts as u64, m.intermediate as u64, m.shared_intermediate as u64);
    let router_first = m.family != MoeFamily::Qwen3Moe;
    if router_first {
        dims.push((e, Some(d)));
    }
    let at = dims.len();
    dims.extend([(i.saturating_mul(2), Some(d)), (d, Some(i))]);
    if !router_first {
        dims.push((e, Some(d)));
    }
    if s > 0 {
        dims.extend([(s, Some(d)), (s, Some(d)), (d, Some(s)), (1, Some(d))]);
    }
    vec![(at, e), (at + 1, e)]
}

/// gpt-oss's layer after its attention, in registration order: the sinks (heads), the router's
/// weight (E, d) and bias (E), the experts' `gate_up_proj` (E, d, 2I), its bias (E, 2I),
/// `down_proj` (E, I, d) and its bias (E, d) (2-D: Adafactor factors them). Returns the 3-D
/// ones' indices with E.
fn gpt_oss_dims(m: &crate::model::hf::moe::MoeConfig, d: u64, heads: u64, dims: &mut Vec<(u64, Option<u64>)>) -> Vec<(usize, u64)> {
    let (e, i) = (m.experts as u64, m.intermediate as u64);
    dims.extend([(heads, None), (e, Some(d)), (e, None)]);
    let at = dims.len();
    dims.extend([(d, Some(i.saturating_mul(2))), (e, Some(i.saturating_mul(2))), (i, Some(d)), (e, Some(d))]);
    vec![(at, e), (at + 2, e)]
}

/// (state bytes, its formula, temporaries at the step's peak, their formula) for parameters
/// of `pe` bytes each.
pub fn optimizer_terms(cfg: &ModelConfig, pe: u64, optim: &OptimConfig) -> (u64, String, u64, String) {
    let sizes = ParamSizes::of(cfg);
    let (state, state_f, temp, temp_f) = optimizer_sizes(&sizes, pe, optim);
    let (temp, temp_f) = clip(optim, sizes.count(), sizes.largest(), temp, temp_f);
    (state, state_f, temp, temp_f)
}

/// [`optimizer_terms`] of the parameters `sizes` of `pe` bytes each, before clipping.
fn optimizer_sizes(sizes: &ParamSizes, pe: u64, optim: &OptimConfig) -> (u64, String, u64, String) {
    let p = sizes.total();
    let n = sizes.count();
    let pt = if pe == 2 { "bf16" } else { "fp32" };
    let (state, state_f) = match optim.kind {
        OptimizerKind::AdamwCs336 => (2 * p * pe, format!("2·P·{pe} (AdamW m and v, {pt})")),
        OptimizerKind::AdamwTorch | OptimizerKind::AdamwTorchForloop => {
            (2 * p * pe, format!("2·P·{pe} (torch AdamW exp_avg and exp_avg_sq, {pt}; `step` counters stay on the host)"))
        }
        OptimizerKind::AdamwTorchFused => (
            2 * p * pe + 4 * n,
            format!("2·P·{pe} + {n} × 4 (exp_avg and exp_avg_sq, {pt}; fused AdamW's 0-d fp32 `step` per parameter on the device, a 512 B block each)"),
        ),
        OptimizerKind::Sgd if optim.momentum != 0.0 => (p * pe, format!("P·{pe} (SGD momentum buffers, {pt})")),
        OptimizerKind::Sgd => (0, "0 B (SGD without momentum keeps no state)".to_string()),
        // Refused by options/estimate.rs: the closed form derives torch's optimizers only.
        OptimizerKind::AdamwBnb8bit | OptimizerKind::PagedAdamw8bit | OptimizerKind::PagedAdamw32bit => (0, "not derived in closed form".to_string()),
        OptimizerKind::Adafactor => (
            4 * sizes.factored + 4 * n,
            format!("4 × {} + {n} × 4 (Adafactor's fp32 exp_avg_sq_row + exp_avg_sq_col per matrix, exp_avg_sq per vector; a 0-d fp32 RMS per parameter, a 512 B block each)", sizes.factored),
        ),
    };
    let (temp, temp_f) = match optim.kind {
        OptimizerKind::AdamwCs336 => {
            // One parameter at a time: m_new, v_new, α·m, √v + eps and the update coexist.
            let largest = sizes.largest();
            (5 * largest * pe, format!("5 × the largest parameter × {pe} (m_new, v_new, α·m_new, √v_new + eps, the update)"))
        }
        OptimizerKind::AdamwTorch => (p * pe, format!("P × {pe} (torch._foreach_sqrt over every exp_avg_sq at once)")),
        OptimizerKind::AdamwTorchFused => (0, "0 B (_fused_adamw_ updates in place)".to_string()),
        OptimizerKind::AdamwTorchForloop => {
            // denom = (exp_avg_sq.sqrt() / bc2).add_(eps): the sqrt and the quotient coexist
            // while the previous parameter's denom is still bound.
            (sizes.forloop_worst() * pe, format!("max over parameters of (2 × it + the one before) × {pe} (its √exp_avg_sq and denom, the previous denom)"))
        }
        OptimizerKind::Sgd if optim.weight_decay != 0.0 => (p * pe, format!("P × {pe} (_foreach_add(grads, params, alpha=weight_decay))")),
        OptimizerKind::Sgd => (0, "0 B (SGD updates in place)".to_string()),
        OptimizerKind::AdamwBnb8bit | OptimizerKind::PagedAdamw8bit | OptimizerKind::PagedAdamw32bit => (0, "0 B (bitsandbytes updates in place)".to_string()),
        OptimizerKind::Adafactor => {
            // A parameter at a time, in fp32: (grad.float() and p.float() for half weights),
            // grad**2 and the sum with eps, while the previous parameter's update is still
            // bound (factored: row and column factors besides).
            let half = pe == 2;
            let what = if half { "its fp32 gradient and parameter copies, " } else { "" };
            (
                4 * sizes.adafactor_worst(half),
                format!("4 × max over parameters of ({what}grad², grad² + eps with the previous parameter's update, or grad² + eps with the row and column factors and the new update)"),
            )
        }
    };
    (state, state_f, temp, temp_f)
}

/// `clip_grad_norm_` over `n` gradients whose largest has `largest` elements, beside the
/// optimizer's own temporaries `temp`: per gradient a 0-d norm, _foreach_norm's fp32
/// scratch, the stacked norms; the 0-d total stays bound through the step.
fn clip(optim: &OptimConfig, n: u64, largest: u64, mut temp: u64, mut temp_f: String) -> (u64, String) {
    if optim.max_grad_norm.is_some() {
        let scratch = 4 * n * largest.div_ceil(FOREACH_CHUNK as u64);
        let clip_peak = 4 * n + scratch.max(4 * n + 4);
        if clip_peak > temp + 4 {
            temp_f = format!("clip_grad_norm_: {n} × 4 (0-d norms) + max(_foreach_norm scratch {scratch}, stacked norms {n} × 4 + total 4)");
            temp = clip_peak;
        } else {
            temp += 4;
            temp_f += " + 4 (clip_grad_norm_'s total norm, bound through the step)";
        }
    }
    (temp, temp_f)
}

/// The trainable parameters of a peft model: `bytes` in all (fp32 adapters, biases in the
/// weights' type), `count` tensors, the largest of `largest` elements.
pub struct Trainable {
    pub bytes: u64,
    pub count: u64,
    pub largest: u64,
}

/// Whether [`trainable_terms`] derives `kind`: torch's AdamW (foreach, fused) and SGD, and
/// where the parameters' order is known (`ordered`: the adapters alone, no trained biases)
/// the for-loop AdamW and Adafactor too.
pub fn derives_trainable(kind: OptimizerKind, ordered: bool) -> bool {
    match kind {
        OptimizerKind::AdamwTorch | OptimizerKind::AdamwTorchFused | OptimizerKind::Sgd => true,
        OptimizerKind::AdamwTorchForloop | OptimizerKind::Adafactor => ordered,
        _ => false,
    }
}

/// [`optimizer_terms`] over only the parameters that train (a peft model's adapters and
/// biases: frozen weights get no state), for the optimizers of [`derives_trainable`].
pub fn trainable_terms(t: &Trainable, order: Option<&ParamSizes>, optim: &OptimConfig) -> (u64, String, u64, String) {
    let (p, n) = (t.bytes, t.count);
    // The for-loop AdamW and Adafactor over the fp32 adapters, in their order.
    if let (Some(sizes), OptimizerKind::AdamwTorchForloop | OptimizerKind::Adafactor) = (order, optim.kind) {
        let (state, state_f, temp, temp_f) = optimizer_sizes(sizes, 4, optim);
        let (temp, temp_f) = clip(optim, n, t.largest, temp, temp_f);
        return (state, state_f, temp, temp_f);
    }
    let (state, state_f) = match optim.kind {
        OptimizerKind::AdamwTorch => (2 * p, format!("2 × {p} B (torch AdamW exp_avg and exp_avg_sq of the trainable parameters, in their types)")),
        OptimizerKind::AdamwTorchFused => {
            (2 * p + 4 * n, format!("2 × {p} B + {n} × 4 (exp_avg and exp_avg_sq of the trainable parameters; fused AdamW's 0-d fp32 `step` per parameter)"))
        }
        OptimizerKind::Sgd if optim.momentum != 0.0 => (p, format!("{p} B (SGD momentum buffers of the trainable parameters)")),
        OptimizerKind::Sgd => (0, "0 B (SGD without momentum keeps no state)".to_string()),
        other => unreachable!("{other}: refused by options/estimate.rs for peft models"),
    };
    let (temp, temp_f) = match optim.kind {
        OptimizerKind::AdamwTorch => (p, format!("{p} B (torch._foreach_sqrt over every exp_avg_sq at once)")),
        OptimizerKind::Sgd if optim.weight_decay != 0.0 => (p, format!("{p} B (_foreach_add(grads, params, alpha=weight_decay))")),
        OptimizerKind::Sgd => (0, "0 B (SGD updates in place)".to_string()),
        _ => (0, "0 B (_fused_adamw_ updates in place)".to_string()),
    };
    let (temp, temp_f) = clip(optim, n, t.largest, temp, temp_f);
    (state, state_f, temp, temp_f)
}
