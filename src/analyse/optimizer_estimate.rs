//! Closed-form optimizer memory per implementation: the state a step keeps and the
//! temporaries it adds at its peak (with `clip_grad_norm_`'s small tensors), in requested bytes
//! (each 0-d tensor is 4 B requested, a 512 B block on CUDA).
use crate::model::{hf::Arch, Flavour, ModelConfig};
use crate::train::optim::clip::foreach_norm_scratch_elems;
use crate::train::optim::{OptimConfig, OptimizerKind};

/// Each parameter's element count, in `model.parameters()` order (the order the for-loop
/// AdamW walks them).
pub fn param_numels(cfg: &ModelConfig) -> Vec<u64> {
    let (d, f, v) = (cfg.d_model as u64, cfg.d_ff as u64, cfg.vocab_size as u64);
    let hd = cfg.head_dim() as u64;
    let (q, kv) = (cfg.num_heads as u64 * hd, cfg.num_kv_heads as u64 * hd);
    let mut out = vec![v * d];
    for _ in 0..cfg.num_layers {
        match (&cfg.hf, cfg.flavour) {
            (Some(h), Flavour::Hf) => {
                // transformers' registration: q, k, v, o (each weight then bias), Qwen3's
                // q_norm/k_norm, gate, up, down, then the two norms.
                for (rows, cols, bias) in [(q, d, h.qkv_bias), (kv, d, h.qkv_bias), (kv, d, h.qkv_bias), (d, q, h.o_bias)] {
                    out.push(rows * cols);
                    if bias {
                        out.push(rows);
                    }
                }
                if h.model_type == Arch::Qwen3 {
                    out.extend([hd, hd]);
                }
                for (rows, cols) in [(f, d), (f, d), (d, f)] {
                    out.push(rows * cols);
                    if h.mlp_bias {
                        out.push(rows);
                    }
                }
                out.extend([d, d]);
            }
            _ => {
                out.push(d);
                if cfg.fused_qkv {
                    out.push((q + 2 * kv) * d);
                } else {
                    out.extend([q * d, kv * d, kv * d]);
                }
                out.extend([d * q, d]);
                if cfg.fused_gate_up {
                    out.extend([2 * f * d, d * f]);
                } else {
                    out.extend([f * d, f * d, d * f]);
                }
            }
        }
    }
    out.push(d);
    if !cfg.tied_embeddings {
        out.push(v * d);
    }
    out
}

/// (state bytes, its formula, temporaries at the step's peak, their formula) for parameters
/// of `pe` bytes each.
pub fn optimizer_terms(cfg: &ModelConfig, pe: u64, optim: &OptimConfig) -> (u64, String, u64, String) {
    let numels = param_numels(cfg);
    let p: u64 = numels.iter().sum();
    let n = numels.len() as u64;
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
    };
    let (mut temp, mut temp_f) = match optim.kind {
        OptimizerKind::AdamwCs336 => {
            // One parameter at a time: m_new, v_new, α·m, √v + eps and the update coexist.
            let largest = numels.iter().copied().max().unwrap_or(0);
            (5 * largest * pe, format!("5 × the largest parameter × {pe} (m_new, v_new, α·m_new, √v_new + eps, the update)"))
        }
        OptimizerKind::AdamwTorch => (p * pe, format!("P × {pe} (torch._foreach_sqrt over every exp_avg_sq at once)")),
        OptimizerKind::AdamwTorchFused => (0, "0 B (_fused_adamw_ updates in place)".to_string()),
        OptimizerKind::AdamwTorchForloop => {
            // denom = (exp_avg_sq.sqrt() / bc2).add_(eps): the sqrt and the quotient coexist
            // while the previous parameter's denom is still bound.
            let worst = numels.iter().enumerate().map(|(i, &x)| 2 * x + if i > 0 { numels[i - 1] } else { 0 }).max().unwrap_or(0);
            (worst * pe, format!("max over parameters of (2 × it + the one before) × {pe} (its √exp_avg_sq and denom, the previous denom)"))
        }
        OptimizerKind::Sgd if optim.weight_decay != 0.0 => (p * pe, format!("P × {pe} (_foreach_add(grads, params, alpha=weight_decay))")),
        OptimizerKind::Sgd => (0, "0 B (SGD updates in place)".to_string()),
    };
    if optim.max_grad_norm.is_some() {
        // clip_grad_norm_: per gradient a 0-d norm, _foreach_norm's fp32 scratch, the stacked
        // norms; the 0-d total stays bound through the step.
        let scratch = 4 * foreach_norm_scratch_elems(&numels.iter().map(|&x| x as usize).collect::<Vec<_>>()) as u64;
        let clip_peak = 4 * n + scratch.max(4 * n + 4);
        if clip_peak > temp + 4 {
            temp_f = format!("clip_grad_norm_: {n} × 4 (0-d norms) + max(_foreach_norm scratch {scratch}, stacked norms {n} × 4 + total 4)");
            temp = clip_peak;
        } else {
            temp += 4;
            temp_f += " + 4 (clip_grad_norm_'s total norm, bound through the step)";
        }
    }
    (state, state_f, temp, temp_f)
}
