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
/// terms; block 0's own terms in place of one block where it has them) against the meta
/// simulation it carries.
#[allow(dead_code)] // (not every test crate that includes this module reads it)
pub fn assert_json_activations(v: &serde_json::Value, what: &str) {
    let e = &v["estimate"];
    let terms = |k: &str| e[k].as_array().unwrap().iter().map(|t| t["elements"].as_u64().unwrap() * t["elem"].as_u64().unwrap()).sum::<u64>();
    let layers = e["layers"].as_u64().unwrap();
    let blocks = if e["first_block"].is_array() { terms("first_block") + (layers - 1) * terms("block") } else { layers * terms("block") };
    assert_eq!(blocks + terms("outside"), v["simulated"]["activation_bytes"].as_u64().unwrap(), "{what}");
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

/// A skewed file of counts for an MoE grid: expert 0 gets every token, the other top-k − 1
/// picks spread evenly.
#[allow(dead_code)] // (only the MoE estimate tests route)
pub fn skewed(tokens: usize, top_k: usize, experts: usize) -> vramscope::model::hf::moe::Routing {
    let rest = tokens * (top_k - 1);
    let others = experts - 1;
    vramscope::model::hf::moe::Routing::Counts((0..experts).map(|e| if e == 0 { tokens } else { rest / others + usize::from(e - 1 < rest % others) }).collect())
}

/// Holds an MoE point's closed form to the meta simulation: parameters, gradients, optimizer
/// state, autocast cache, logits, activations and the live set when the forward returns exact,
/// the training peak above the bound. `buffers`: the live set's buffers beyond the batch
/// (input_ids and labels, (B, S) int64 each). Returns the simulated training peak over the
/// bound plus, when checkpointed, the layer backward recomputes (its whole block lies above
/// the bound, which counts layer inputs only).
#[allow(dead_code)] // (only the MoE estimate tests compare through it)
pub fn compare_moe(cfg: &ModelConfig, precision: vramscope::train::Precision, b: usize, s: usize, name: &str, buffers: impl Fn(&vramscope::analyse::estimate::Estimate) -> u64) -> f64 {
    use vramscope::analyse::estimate::{check_range, estimate, hf};
    hf::check(cfg, precision, s).unwrap_or_else(|e| panic!("{name}: refused: {e}"));
    check_range(cfg, b, s).unwrap();
    let e = estimate(cfg, precision, b, s);
    let sim = vramscope::session::estimate::simulate(cfg, precision, b, s, &vramscope::train::optim::OptimConfig::reference(Flavour::Hf)).unwrap();
    assert_eq!(e.param_bytes, sim.parameter_bytes, "{name}: parameters");
    assert_eq!(e.grad_bytes, sim.gradient_bytes, "{name}: gradients");
    assert_eq!(e.optimizer_bytes, sim.optimizer_bytes, "{name}: optimizer state");
    assert_eq!(e.autocast_cache_bytes, sim.autocast_cache_bytes, "{name}: autocast cache");
    assert_eq!(e.logits.bytes(), sim.logits_bytes, "{name}: logits");
    let act = e.activation_bytes() as i64 - sim.activation_bytes as i64;
    let other = e.sliding_block.as_ref().map_or(0, |o| sum(&o.block));
    assert_eq!(
        e.activation_bytes(),
        sim.activation_bytes,
        "{name}: activations when the forward returns (block {} bytes, other layers' block {other}, outside {}; off by {act})",
        e.block_bytes(),
        sum(&e.outside)
    );
    let batch = 2 * (b * s * 8) as u64;
    assert_eq!(e.forward_bytes() + batch + buffers(&e), sim.forward_live_bytes, "{name}: live when the forward returns");
    let bound = e.training_bytes();
    assert!(bound <= sim.training_peak_allocated, "{name}: bound {bound} above the simulated peak {}", sim.training_peak_allocated);
    let recomputed = if cfg.checkpoint != Checkpoint::None {
        let mut full = cfg.clone();
        full.checkpoint = Checkpoint::None;
        full.hf.as_mut().unwrap().use_cache = false;
        estimate(&full, precision, b, s).block_bytes()
    } else {
        0
    };
    sim.training_peak_allocated as f64 / (bound + recomputed) as f64
}

/// Holds the closed form's optimizer state and gradients under `kind` to the meta simulation,
/// and the training peak above the bound; `what` names the case in a failure.
#[allow(dead_code)] // (not every test crate that includes this module compares optimizers)
pub fn compare_optimizer(cfg: &ModelConfig, precision: vramscope::train::Precision, b: usize, s: usize, kind: vramscope::train::optim::OptimizerKind, what: &str) {
    let mut optim = vramscope::train::optim::OptimConfig::reference(Flavour::Hf);
    optim.kind = kind;
    let e = vramscope::analyse::estimate::estimate_with(cfg, precision, b, s, &optim);
    let sim = vramscope::session::estimate::simulate(cfg, precision, b, s, &optim).unwrap();
    assert_eq!(e.optimizer_bytes, sim.optimizer_bytes, "{what}: optimizer state");
    assert_eq!(e.grad_bytes, sim.gradient_bytes, "{what}: gradients");
    assert!(e.training_bytes() <= sim.training_peak_allocated, "{what}: bound {} above the simulated peak {}", e.training_bytes(), sim.training_peak_allocated);
}

/// peft's LoraConfig of an MoE estimate point: r, alpha 16, dropout and target_modules, the
/// rest at peft's defaults.
#[allow(dead_code)] // (not every estimate grid has adapters)
pub fn lora(r: usize, dropout: f64, targets: &[&str]) -> vramscope::model::lora::LoraConfig {
    vramscope::model::lora::LoraConfig {
        r,
        alpha: 16.0,
        dropout,
        targets: targets.iter().map(|t| t.to_string()).collect(),
        target_parameters: vec![],
        dropout_kernel: Default::default(),
        bias: vramscope::model::lora::LoraBias::None,
        use_dora: false,
        modules_to_save: vec![],
        compute_dtype: None,
        gate_up_doubled: false,
    }
}

/// Through the CLI: LLM.int8() on a small `model` (a preset) with LoRA on the attention states
/// its closed form (block 0 its own) equal to the simulated activations, parameters, gradients
/// and optimizer state, over all four projections and over v_proj with checkpointing.
#[allow(dead_code)] // (estimate_moe and estimate_gpt_oss run it)
pub fn assert_int8_lora_cli(model: &str) {
    let dir = crate::scratch::dir().join(format!("vramscope-estimate-int8-{model}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("e.json");
    let small = ["estimate", "--model", model, "--num-layers", "2", "--hidden-dim", "128", "--num-heads", "4", "--num-kv-heads", "2", "--vocab-size", "300", "--batch-size", "2", "--context-length", "24", "--lora-r", "8", "--load-in-8bit", "--json", json.to_str().unwrap()];
    for extra in [&["--target-modules", "q_proj,k_proj,v_proj,o_proj"][..], &["--target-modules", "v_proj", "--gradient-checkpointing", "non-reentrant"][..]] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args([&small[..], extra].concat()).output().unwrap();
        assert!(o.status.success(), "{model} {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_json_activations(&v, &format!("{model} {extra:?}"));
        let e = &v["estimate"];
        assert_eq!(e["param_bytes"], v["simulated"]["parameter_bytes"], "{model} {extra:?}");
        assert_eq!(e["grad_bytes"], v["simulated"]["gradient_bytes"], "{model} {extra:?}");
        assert_eq!(e["optimizer_bytes"], v["simulated"]["optimizer_bytes"], "{model} {extra:?}");
        std::fs::remove_file(&json).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
