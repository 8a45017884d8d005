//! `estimate`'s text: the closed form with its derivation, term by term, and the simulated
//! meta run beside it with the gap.
use crate::analyse::estimate::{Estimate, Term};
use crate::export::{gib, mib};
use crate::model::ModelConfig;
use crate::session::estimate::Simulated;
use crate::train::Precision;

fn row(s: &mut String, what: &str, formula: &str, bytes: u64) {
    out!(s, "  {:<58} {:<34} {:>14} B {:>11.2} MiB", what, formula, bytes, mib(bytes));
}

fn terms(s: &mut String, ts: &[Term]) {
    for t in ts {
        row(s, &format!("{} [{}]", t.what, t.op), &t.formula, t.bytes());
    }
}

/// `estimate` vs `simulated`, with the gap in bytes and percent of the simulated value.
fn beside(s: &mut String, what: &str, est: u64, sim: u64) {
    let gap = sim as i128 - est as i128;
    let pct = if sim > 0 { 100.0 * gap as f64 / sim as f64 } else { 0.0 };
    out!(s, "  {:<44} {:>12.3} {:>12.3} {:>+12.3} ({:+.2}%)", what, gib(est), gib(sim), gap as f64 / (1u64 << 30) as f64, pct);
}

/// What `estimate` prints: the closed form's derivation, then the simulated run beside it.
pub fn estimate(e: &Estimate, cfg: &ModelConfig, sim: Option<&Simulated>) -> String {
    let mut s = String::new();
    let precision = match e.precision {
        Precision::Fp32 => "fp32".to_string(),
        Precision::Bf16 | Precision::Fp16 => format!("{} autocast around forward and loss (fp32 parameters, gradients, optimizer state)", e.precision),
        // peft keeps its adapters (and so their gradients and state) in fp32 over bf16 weights.
        Precision::PureBf16 if cfg.hf().is_some_and(|h| h.lora.is_some()) => "pure bf16 (frozen weights and activations bf16; LoRA adapters, their gradients and optimizer state fp32)".to_string(),
        Precision::PureBf16 => "pure bf16 (parameters, gradients, optimizer state and activations bf16)".to_string(),
        Precision::PureBf16Autocast if cfg.hf().is_some_and(|h| h.lora.is_some()) => "bf16 autocast around forward and loss over bf16 weights (frozen weights bf16; LoRA adapters, their gradients and optimizer state fp32)".to_string(),
        Precision::PureBf16Autocast => "bf16 autocast around forward and loss over bf16 weights (parameters, gradients, optimizer state bf16)".to_string(),
        Precision::PureFp16 if cfg.hf().is_some_and(|h| h.lora.is_some()) => "pure fp16 (frozen weights and activations fp16; LoRA adapters, their gradients and optimizer state fp32)".to_string(),
        Precision::PureFp16 => "pure fp16 (parameters, gradients, optimizer state and activations fp16)".to_string(),
    };
    // hf: the attention line below names transformers' kernel (its --attention is unused).
    let attention = if cfg.hf().is_some() { String::new() } else { format!(", {} attention", cfg.attention) };
    out!(s,
        "vramscope estimate | {} flavour, d {} L {} h {} h_kv {} F {} V {} | B {} S {} | {}{attention}",
        e.flavour, cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.d_ff, cfg.vocab_size, e.batch, e.seq, precision
    );
    if let Some(hf) = cfg.hf() {
        let ckpt = match (cfg.checkpoint, hf.reentrant) {
            (crate::model::Checkpoint::None, _) => "off",
            (_, true) => "every layer, reentrant",
            (_, false) => "every layer, non-reentrant",
        };
        let cache = if hf.use_cache && cfg.checkpoint != crate::model::Checkpoint::None { " (off in training while checkpointing)" } else { "" };
        out!(s,
            "transformers {} {} (d_h {}): {}; attention {} (as on a CUDA GPU), use_cache {}{cache}, gradient checkpointing {ckpt}, a Trainer step (model.train(); the logits die before backward)",
            crate::model::hf::TRANSFORMERS_VERSION,
            hf.moe.as_ref().map_or(hf.model_type.name(), |m| m.family.model_type()),
            hf.head_dim,
            crate::session::hf::loaded(hf, e.precision),
            crate::analyse::estimate::hf::kernels_name(cfg, hf, e.precision, e.seq),
            hf.use_cache
        );
    }
    if let Some(m) = cfg.hf().and_then(|h| h.moe.as_ref()) {
        let shared = if m.shared_intermediate > 0 { format!(", a shared expert of width I_s {}", m.shared_intermediate) } else { String::new() };
        let renorm = match m.family {
            crate::model::hf::moe::MoeFamily::GptOss => "a biased router, softmax over the top-k logits",
            crate::model::hf::moe::MoeFamily::Mixtral => "renormalised",
            _ if m.norm_topk_prob => "renormalised",
            _ => "not renormalised (norm_topk_prob false)",
        };
        out!(s,
            "mixture of experts: E {} experts of width I {}, top-k {} ({renorm}){shared}; experts_implementation {}, routing {} (it decides how many rows each expert gets, not how many rows there are: the terms below hold for any split)",
            m.experts,
            m.intermediate,
            m.top_k,
            m.implementation.name(),
            m.routing.name()
        );
        if let Some(ds) = &m.deepseek {
            let q = ds.q_lora_rank.map_or("q_proj (no q_lora_rank)".to_string(), |r| format!("r_q {r}"));
            let sdpa = if cfg.hf().is_some_and(|h| h.attn_implementation == crate::model::hf::AttnImplementation::Sdpa) && ds.v_head_dim != ds.qk_head_dim() { "; sdpa runs its math composite (v's head size unlike q's)" } else { "" };
            out!(s,
                "multi-head latent attention: q/k heads d_n {} + d_r {} (d_h above is RoPE's d_r), v heads d_v {}, {q}, r_kv {}, {} rope; the first {} layers dense (F_d {}); router groups {} (top {}){sdpa}",
                ds.qk_nope_head_dim,
                ds.qk_rope_head_dim,
                ds.v_head_dim,
                ds.kv_lora_rank,
                if ds.rope_interleave { "interleaved" } else { "half-split" },
                ds.first_k_dense.min(cfg.num_layers),
                ds.dense_intermediate,
                ds.n_group,
                ds.topk_group
            );
        }
    }
    out!(s, "(bytes are exact integers; MiB/GiB are 1024-based)\n");
    out!(s, "symbols (4-byte elements; a 2-byte bf16/fp16 tensor of the same shape is written ½a = B·S·d·2, ½f, ½s):");
    for (sym, f, b) in &e.symbols {
        out!(s, "  {sym} = {f} = {b} B ({:.2} MiB)", mib(*b));
    }
    let pe = e.param_elem;
    let pt = if pe == 2 { "bf16" } else { "fp32" };
    out!(s, "\n(sizes below are tensor bytes, i.e. requested; `profile` reports allocated bytes, which add the caching allocator's block rounding: 512 B, and whole 2 MiB for a tensor over 1 MiB that gets a segment of its own)");
    match cfg.hf().map(|h| (h.lora.is_some(), h.bnb.is_some())) {
        // bitsandbytes' storage is written in bytes.
        Some((_, true)) => out!(s, "\n1. parameters in bytes: {} = {} B = {:.3} GiB requested", e.param_formula, e.param_bytes, gib(e.param_bytes)),
        Some((true, false)) => out!(s, "\n1. parameters: P = {} = {} (the base's {pt}, the adapters fp32) = {} B = {:.3} GiB requested", e.param_formula, e.params, e.param_bytes, gib(e.param_bytes)),
        _ => out!(s, "\n1. parameters: P = {} = {} ; × {pe} B ({pt}) = {} B = {:.3} GiB requested", e.param_formula, e.params, e.param_bytes, gib(e.param_bytes)),
    }
    if cfg.hf().is_some_and(|h| h.lora.is_some()) {
        // peft: only the adapters (fp32) and the biases `bias` names have gradients.
        out!(s, "2. gradients: the trainable parameters' only (LoRA adapters in fp32, trained biases), frozen weights none = {} B = {:.3} GiB (training only; freed by zero_grad(set_to_none))", e.grad_bytes, gib(e.grad_bytes));
    } else {
        out!(s, "2. gradients: P × {pe} B = {} B = {:.3} GiB (training only; freed by zero_grad(set_to_none))", e.grad_bytes, gib(e.grad_bytes));
    }
    out!(s, "3. optimizer state ({}): {} = {} B = {:.3} GiB", e.optimizer.summary(), e.optimizer_formula, e.optimizer_bytes, gib(e.optimizer_bytes));
    out!(s, "   parameters + gradients + optimizer state = {:.3} GiB", gib(e.param_bytes + e.grad_bytes + e.optimizer_bytes));
    if e.autocast_cache_bytes > 0 {
        out!(s,
            "4. autocast weight cache: every weight a matmul-class op reads, cast once per region and kept until backward: {} = {} B = {:.3} GiB",
            e.autocast_cache_formula,
            e.autocast_cache_bytes,
            gib(e.autocast_cache_bytes)
        );
    } else {
        out!(s, "4. autocast weight cache: {}", e.autocast_cache_formula);
    }
    out!(s, "\n5. activations kept for backward, per block ({} per block):", e.block_symbolic);
    terms(&mut s, &e.block);
    out!(s, "  {:<58} {:<34} {:>14} B {:>11.2} MiB", "= one block", e.block_symbolic, e.block_bytes(), mib(e.block_bytes()));
    if e.block_fp32_units != e.block_symbolic {
        out!(s, "  {:<58} {:<34}", "  in 4-byte symbols", e.block_fp32_units);
    }
    match &e.first_block {
        Some(first) => {
            let sym = crate::analyse::estimate::symbolic(first);
            let k = e.first_block_layer;
            if k == 0 {
                out!(s, "   block 0 ({sym}: its input, the frozen embedding's output, needs no gradient, so what only that gradient needs is not kept):");
            } else {
                let dense = if k == 1 { "the dense layer" } else { "the dense layers" };
                out!(s, "   block {k}, the first sparse layer ({sym}: its input, the output of {dense} before it (nothing trains there), needs no gradient, so what only that gradient needs is not kept):");
            }
            terms(&mut s, first);
            let b0: u64 = first.iter().map(|t| t.bytes()).sum();
            out!(s, "  {:<58} {:<34} {:>14} B {:>11.2} MiB", format!("= block {k}"), sym, b0, mib(b0));
            out!(s, "  block {k} + (L − 1) = {} more blocks: {} B = {:.3} GiB", e.layers.saturating_sub(1), e.blocks_bytes(), gib(e.blocks_bytes()));
        }
        None if e.sliding_block.is_none() => out!(s, "  × L = {} blocks: {} B = {:.3} GiB", e.layers, e.blocks_bytes(), gib(e.blocks_bytes())),
        None => {}
    }
    if let Some(sb) = &e.sliding_block {
        let (these, others, why) = sb.kind.names();
        out!(s, "   the {} {these} layers' block ({}: {why}; the block above is the {others} layers'):", sb.layers.len(), sb.symbolic);
        terms(&mut s, &sb.block);
        let bytes: u64 = sb.block.iter().map(|t| t.bytes()).sum();
        out!(s, "  {:<58} {:<34} {:>14} B {:>11.2} MiB", format!("= one {these} block"), sb.symbolic, bytes, mib(bytes));
        out!(s, "  {} {others} + {} {these} blocks: {} B = {:.3} GiB", e.layers - sb.layers.len(), sb.layers.len(), e.blocks_bytes(), gib(e.blocks_bytes()));
    }
    out!(s, "   outside the blocks:");
    terms(&mut s, &e.outside);
    out!(s, "   all activations when the forward returns: {} B = {:.3} GiB", e.activation_bytes(), gib(e.activation_bytes()));
    out!(s, "\n6. logits and loss:");
    row(&mut s, &format!("{} [{}]", e.logits.what, e.logits.op), &e.logits.formula, e.logits.bytes());
    terms(&mut s, &e.loss);
    let rt = if e.residual_elem == 2 { "bf16" } else { "fp32" };
    out!(s,
        "\n7. one residual-stream tensor (B, S, d) in {rt}: B·S·d·{} = {} B = {:.2} MiB (CS336's memory-profiling question, part d)",
        e.residual_elem,
        e.residual_bytes,
        mib(e.residual_bytes)
    );
    let cache = if e.autocast_cache_bytes > 0 { " + autocast cache" } else { "" };
    out!(s, "\ntotals:");
    out!(s, "  forward with autograd, when it returns = parameters + activations{cache} + logits = {:.3} GiB", gib(e.forward_bytes()));
    out!(s,
        "  training step, at the loss (no gradients yet: zero_grad set them to None) = parameters + optimizer state + activations{cache} + logits + loss tensors = {:.3} GiB",
        gib(e.training_loss_moment())
    );
    let logits = if e.logits_held_through_step() > 0 { "logits (still bound)" } else { "no logits (the Trainer dropped them)" };
    out!(s,
        "  training step, in the optimizer = parameters + gradients + optimizer state + {logits} + {} = {:.3} GiB",
        e.optimizer_temp_formula,
        gib(e.training_optimizer_moment())
    );
    out!(s, "  training step peak ≥ the larger of the two = {:.3} GiB (backward, releasing activations as gradients appear, can exceed both)", gib(e.training_bytes()));
    if let Some(sm) = sim {
        out!(s, "\nclosed form beside a simulated meta run (GiB; gap = simulated − estimate, % of simulated):");
        out!(s, "  {:<44} {:>12} {:>12} {:>12}", "", "estimate", "simulated", "gap");
        beside(&mut s, "parameters", e.param_bytes, sm.parameter_bytes);
        beside(&mut s, "gradients", e.grad_bytes, sm.gradient_bytes);
        beside(&mut s, "optimizer state", e.optimizer_bytes, sm.optimizer_bytes);
        beside(&mut s, "autocast weight cache", e.autocast_cache_bytes, sm.autocast_cache_bytes);
        beside(&mut s, "activations when the forward returns", e.activation_bytes(), sm.activation_bytes);
        beside(&mut s, "logits", e.logits.bytes(), sm.logits_bytes);
        beside(&mut s, "live when the forward returns", e.forward_bytes(), sm.forward_live_bytes);
        beside(&mut s, &format!("training step peak (simulated in {})", sm.training_peak_phase), e.training_bytes(), sm.training_peak_allocated);
        out!(s,
            "  (the simulation counts requested bytes except the training peak, which is allocated blocks after the caching allocator's 512-byte rounding; \
             the forward's live set also holds the input ids and buffers)"
        );
    }
    s
}
