//! The small hf model the closed-form tests hold `estimate` to the simulation on.
use vramscope::analyse::estimate::Term;
use vramscope::model::hf::HfConfig;
use vramscope::model::{Attention, Checkpoint, Flavour, ModelConfig};

/// d 128, 4 heads, d_ff 352, vocab 300: large enough that every tensor is a block of its own.
#[allow(dead_code)] // (estimate_moe builds its own MoE configs)
pub fn hf_model(hf: HfConfig, num_layers: usize, num_kv_heads: usize, tied: bool, ckpt: Option<bool>) -> ModelConfig {
    ModelConfig {
        flavour: Flavour::Hf,
        vocab_size: 300,
        d_model: 128,
        num_layers,
        num_heads: 4,
        num_kv_heads,
        d_ff: 352,
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        norm_fp32_upcast: true,
        tied_embeddings: tied,
        max_seq_len: 4096,
        attention: Attention::Naive,
        checkpoint: if ckpt.is_some() { Checkpoint::Every(1) } else { Checkpoint::None },
        fused_qkv: false,
        fused_gate_up: false,
        hf: Some(hf),
        tp: None,
    }
}

pub fn sum(ts: &[Term]) -> u64 {
    ts.iter().map(Term::bytes).sum()
}

/// Gemma's 0-d `embed_scale` buffer: built in the load dtype (the parameters'), so 2 B in a
/// half-precision load, 4 B in fp32; none on other models.
#[allow(dead_code)] // (not every test crate that includes this module reads it)
pub fn embed_scale_bytes(gemma: bool, precision: vramscope::train::Precision) -> u64 {
    if gemma {
        precision.param_dtype().size() as u64
    } else {
        0
    }
}

/// An `estimate --json` document's activations (layers × block + outside, summed from its
/// terms) against the meta simulation it carries.
#[allow(dead_code)] // (not every test crate that includes this module reads it)
pub fn assert_json_activations(v: &serde_json::Value, what: &str) {
    let e = &v["estimate"];
    let terms = |k: &str| e[k].as_array().unwrap().iter().map(|t| t["elements"].as_u64().unwrap() * t["elem"].as_u64().unwrap()).sum::<u64>();
    assert_eq!(e["layers"].as_u64().unwrap() * terms("block") + terms("outside"), v["simulated"]["activation_bytes"].as_u64().unwrap(), "{what}");
}

/// Runs `check` on every point, collecting each failing point's message rather than stopping at
/// the first; `check` returns the simulated training peak over the closed form's bound, which
/// must stay below `limit` (backward's transients lie above the bound).
#[allow(dead_code)] // (estimate_hf runs its grid without catching)
pub fn run_points<P: std::fmt::Debug + std::panic::RefUnwindSafe>(points: &[P], limit: f64, check: impl Fn(&P) -> f64 + std::panic::RefUnwindSafe) {
    let mut worst: f64 = 0.0;
    let mut failed = Vec::new();
    for p in points {
        match std::panic::catch_unwind(|| check(p)) {
            Ok(r) => worst = worst.max(r),
            Err(e) => failed.push(e.downcast_ref::<String>().cloned().unwrap_or_else(|| format!("{p:?}: panicked"))),
        }
    }
    assert!(failed.is_empty(), "{} of {} points differ:\n{}", failed.len(), points.len(), failed.join("\n"));
    assert!(worst < limit, "simulated training peak up to {worst:.3}× the closed form's bound");
    println!("{} points; simulated training peak at most {worst:.3}× the bound", points.len());
}
