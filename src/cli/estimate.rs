//! `vramscope estimate`: closed-form memory of a configuration with its derivation, printed
//! beside a simulated meta run of the same configuration and the gap between them.
use crate::options::model::ModelFlags;
use crate::options::precision::PrecisionFlags;
use super::usage;
use crate::analyse::estimate::{estimate_with, Estimate, Term};
use crate::export::{gib, mib};
use crate::model::{Flavour, ModelConfig};
use crate::train::Precision;
use anyhow::Result;
use clap::Args;
pub use crate::session::estimate::{simulate, Simulated};
use serde_json::json;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct EstimateArgs {
    #[command(flatten)]
    pub model: ModelFlags,
    #[command(flatten)]
    pub precision: PrecisionFlags,
    #[command(flatten)]
    pub optim: crate::options::optim::OptimFlags,
    /// Batch size B (default: the preset's)
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Sequence length (default: the preset's)
    #[arg(long, alias = "seq-len")]
    pub context_length: Option<usize>,
    /// Print the closed form only (no simulated meta run beside it)
    #[arg(long)]
    pub no_simulate: bool,
    /// Write the derivation and the simulated numbers as JSON to FILE (beside the text); with
    /// no FILE or `-`, print the JSON to stdout instead of the text (as `fit --json`)
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
}

fn row(what: &str, formula: &str, bytes: u64) {
    println!("  {:<58} {:<34} {:>14} B {:>11.2} MiB", what, formula, bytes, mib(bytes));
}

fn terms(ts: &[Term]) {
    for t in ts {
        row(&format!("{} [{}]", t.what, t.op), &t.formula, t.bytes());
    }
}

/// `estimate` vs `simulated`, with the gap in bytes and percent of the simulated value.
fn beside(what: &str, est: u64, sim: u64) {
    let gap = sim as i128 - est as i128;
    let pct = if sim > 0 { 100.0 * gap as f64 / sim as f64 } else { 0.0 };
    println!("  {:<44} {:>12.3} {:>12.3} {:>+12.3} ({:+.2}%)", what, gib(est), gib(sim), gap as f64 / (1u64 << 30) as f64, pct);
}

fn print(e: &Estimate, cfg: &ModelConfig, sim: Option<&Simulated>) {
    let precision = match e.precision {
        Precision::Fp32 => "fp32".to_string(),
        Precision::Bf16 | Precision::Fp16 => format!("{} autocast around forward and loss (fp32 parameters, gradients, optimizer state)", e.precision),
        Precision::PureBf16 => "pure bf16 (parameters, gradients, optimizer state and activations bf16)".to_string(),
    };
    // hf: the attention line below names transformers' kernel (its --attention is unused).
    let attention = if cfg.hf().is_some() { String::new() } else { format!(", {} attention", cfg.attention) };
    println!(
        "vramscope estimate | {} flavour, d {} L {} h {} h_kv {} F {} V {} | B {} S {} | {}{attention}",
        e.flavour, cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.d_ff, cfg.vocab_size, e.batch, e.seq, precision
    );
    if let Some(hf) = cfg.hf() {
        let kernel = crate::analyse::estimate::hf::kernel(cfg, hf, e.precision, e.seq);
        let ckpt = match (cfg.checkpoint, hf.reentrant) {
            (crate::model::Checkpoint::None, _) => "off",
            (_, true) => "every layer, reentrant",
            (_, false) => "every layer, non-reentrant",
        };
        let cache = if hf.use_cache && cfg.checkpoint != crate::model::Checkpoint::None { " (off in training while checkpointing)" } else { "" };
        println!(
            "transformers {} {} (d_h {}): attention {} (as on a CUDA GPU), use_cache {}{cache}, gradient checkpointing {ckpt}, a Trainer step (model.train(); the logits die before backward)",
            crate::model::hf::TRANSFORMERS_VERSION,
            hf.model_type.name(),
            hf.head_dim,
            crate::analyse::estimate::hf::kernel_name(hf, kernel),
            hf.use_cache
        );
    }
    println!("(bytes are exact integers; MiB/GiB are 1024-based)\n");
    println!("symbols (4-byte elements; a 2-byte bf16/fp16 tensor of the same shape is written ½a = B·S·d·2, ½f, ½s):");
    for (s, f, b) in &e.symbols {
        println!("  {s} = {f} = {b} B ({:.2} MiB)", mib(*b));
    }
    let pe = e.param_elem;
    let pt = if pe == 2 { "bf16" } else { "fp32" };
    println!("\n(sizes below are tensor bytes, i.e. requested; `profile` reports allocated bytes, which add the caching allocator's block rounding: 512 B, and whole 2 MiB for a tensor over 1 MiB that gets a segment of its own)");
    println!("\n1. parameters: P = {} = {} ; × {pe} B ({pt}) = {} B = {:.3} GiB requested", e.param_formula, e.params, e.param_bytes, gib(e.param_bytes));
    println!("2. gradients: P × {pe} B = {} B = {:.3} GiB (training only; freed by zero_grad(set_to_none))", e.grad_bytes, gib(e.grad_bytes));
    println!("3. optimizer state ({}): {} = {} B = {:.3} GiB", e.optimizer.summary(), e.optimizer_formula, e.optimizer_bytes, gib(e.optimizer_bytes));
    println!("   parameters + gradients + optimizer state = {:.3} GiB", gib(e.param_bytes + e.grad_bytes + e.optimizer_bytes));
    if e.autocast_cache_bytes > 0 {
        println!(
            "4. autocast weight cache: every weight a matmul-class op reads, cast once per region and kept until backward: {} = {} B = {:.3} GiB",
            e.autocast_cache_formula,
            e.autocast_cache_bytes,
            gib(e.autocast_cache_bytes)
        );
    } else {
        println!("4. autocast weight cache: {}", e.autocast_cache_formula);
    }
    println!("\n5. activations kept for backward, per block ({} per block):", e.block_symbolic);
    terms(&e.block);
    println!("  {:<58} {:<34} {:>14} B {:>11.2} MiB", "= one block", e.block_symbolic, e.block_bytes(), mib(e.block_bytes()));
    if e.block_fp32_units != e.block_symbolic {
        println!("  {:<58} {:<34}", "  in 4-byte symbols", e.block_fp32_units);
    }
    println!("  × L = {} blocks: {} B = {:.3} GiB", e.layers, e.layers as u64 * e.block_bytes(), gib(e.layers as u64 * e.block_bytes()));
    println!("   outside the blocks:");
    terms(&e.outside);
    println!("   all activations when the forward returns: {} B = {:.3} GiB", e.activation_bytes(), gib(e.activation_bytes()));
    println!("\n6. logits and loss:");
    row(&format!("{} [{}]", e.logits.what, e.logits.op), &e.logits.formula, e.logits.bytes());
    terms(&e.loss);
    let rt = if e.residual_elem == 2 { "bf16" } else { "fp32" };
    println!(
        "\n7. one residual-stream tensor (B, S, d) in {rt}: B·S·d·{} = {} B = {:.2} MiB (CS336's memory-profiling question, part d)",
        e.residual_elem,
        e.residual_bytes,
        mib(e.residual_bytes)
    );
    let cache = if e.autocast_cache_bytes > 0 { " + autocast cache" } else { "" };
    println!("\ntotals:");
    println!("  forward with autograd, when it returns = parameters + activations{cache} + logits = {:.3} GiB", gib(e.forward_bytes()));
    println!(
        "  training step, at the loss (no gradients yet: zero_grad set them to None) = parameters + optimizer state + activations{cache} + logits + loss tensors = {:.3} GiB",
        gib(e.training_loss_moment())
    );
    let logits = if e.logits_held_through_step() > 0 { "logits (still bound)" } else { "no logits (the Trainer dropped them)" };
    println!(
        "  training step, in the optimizer = parameters + gradients + optimizer state + {logits} + {} = {:.3} GiB",
        e.optimizer_temp_formula,
        gib(e.training_optimizer_moment())
    );
    println!("  training step peak ≥ the larger of the two = {:.3} GiB (backward, releasing activations as gradients appear, can exceed both)", gib(e.training_bytes()));
    if let Some(s) = sim {
        println!("\nclosed form beside a simulated meta run (GiB; gap = simulated − estimate, % of simulated):");
        println!("  {:<44} {:>12} {:>12} {:>12}", "", "estimate", "simulated", "gap");
        beside("parameters", e.param_bytes, s.parameter_bytes);
        beside("gradients", e.grad_bytes, s.gradient_bytes);
        beside("optimizer state", e.optimizer_bytes, s.optimizer_bytes);
        beside("autocast weight cache", e.autocast_cache_bytes, s.autocast_cache_bytes);
        beside("activations when the forward returns", e.activation_bytes(), s.activation_bytes);
        beside("logits", e.logits.bytes(), s.logits_bytes);
        beside("live when the forward returns", e.forward_bytes(), s.forward_live_bytes);
        beside(&format!("training step peak (simulated in {})", s.training_peak_phase), e.training_bytes(), s.training_peak_allocated);
        println!(
            "  (the simulation counts requested bytes except the training peak, which is allocated blocks after the caching allocator's 512-byte rounding; \
             the forward's live set also holds the input ids and buffers)"
        );
    }
}

pub fn run(a: EstimateArgs) -> Result<()> {
    super::json_out::check(a.json.as_deref())?;
    let r = a.model.resolve("walkthrough", crate::options::model::Names::Cs336)?;
    r.print_note();
    let mut cfg = r.config;
    let seq = a.context_length.unwrap_or(r.preset.seq_len.min(cfg.max_seq_len));
    let batch = a.batch_size.unwrap_or(r.preset.batch_size);
    if batch == 0 {
        return Err(usage("--batch-size", "must be at least 1"));
    }
    if seq == 0 {
        return Err(usage("--context-length", "must be at least 1"));
    }
    a.model.follow_seq_len(&mut cfg, seq);
    cfg.check_seq_len(seq, "--context-length").map_err(super::UsageError::from)?;
    crate::options::hf::check_with_labels(&cfg, seq)?;
    if cfg.flavour == Flavour::Tinyllama && seq < 2 {
        return Err(usage("--context-length", "tinyllama shifts logits and labels by one: needs at least 2"));
    }
    let precision = a.precision.resolve_for(&cfg)?;
    crate::analyse::estimate::hf::check(&cfg, precision, seq).map_err(super::UsageError::from)?;
    crate::analyse::estimate::check_range(&cfg, batch, seq).map_err(super::UsageError::from)?;
    let optim = a.optim.resolve(cfg.flavour, true)?;
    let e = estimate_with(&cfg, precision, batch, seq, &optim);
    let sim = if a.no_simulate {
        None
    } else {
        cfg.check_sizes(batch, seq, "--context-length").map_err(super::UsageError::from)?;
        crate::session::host_memory::check_bookkeeping(cfg.num_layers, 0)?;
        Some(simulate(&cfg, precision, batch, seq, &optim)?)
    };
    if !a.json.as_deref().is_some_and(super::json_out::is_stdout) {
        print(&e, &cfg, sim.as_ref());
    }
    if let Some(path) = &a.json {
        super::json_out::write(path, &json!({ "model": cfg, "estimate": e, "simulated": sim, "units": "bytes" }))?;
    }
    Ok(())
}
