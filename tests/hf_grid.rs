//! The hf flavour against Hugging Face transformers itself.
//!
//! tests/fixtures/hf_grid/hf.json comes from tools/pytorch/make_hf_grid.py: transformers
//! 5.23.0's own modeling code (llama, mistral, qwen2, qwen3) built from a config with random
//! weights on CPU and run as the Trainer runs it (measure_hf.py), mode-free under
//! torch.profiler(profile_memory=True); per phase, the peak of requested bytes over blocks
//! >= 512 B. Here the same loop runs on meta and a phase passes when the two peaks agree to
//! 16 B per live tensor (tests/grid_common).
mod grid_common;
use serde_json::Value;
use vramscope::engine::{runtime, DType, Device};
use vramscope::model::hf::{Arch, AttnImplementation, HfConfig, SdpaBackend};
use vramscope::model::{Attention, Checkpoint, Flavour, Model, ModelConfig};
use vramscope::record::{MemEvent, Phase};
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, CausalLmBatch, DataKind, Optimizer, Precision, StepRunner};

/// Points where vramscope does not match transformers, each with the reason (printed with
/// the table on every run; the test fails once one of them matches).
const KNOWN_FAILING: &[(&str, &str)] = &[];

fn num(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}")) as usize
}

fn config_of(p: &Value) -> ModelConfig {
    let arch = Arch::parse(p["model_type"].as_str().unwrap()).expect("model type");
    let (d, h) = (num(p, "hidden_size"), num(p, "num_heads"));
    // measure_hf.py passes head_dim only when the point sets it; Qwen3Config's default is 128.
    let head_dim = p["head_dim"].as_u64().map(|x| x as usize).unwrap_or(if arch == Arch::Qwen3 { 128 } else { d / h });
    let mut hf = HfConfig::new(arch, head_dim);
    hf.attn_implementation = AttnImplementation::parse(p["attn"].as_str().unwrap()).unwrap();
    // On CPU every sdpa point ran _scaled_dot_product_flash_attention_for_cpu (recorded per
    // point, checked below): the CPU kernel's tensors.
    hf.sdpa_backend = SdpaBackend::CpuFlash;
    hf.use_cache = p["use_cache"].as_bool().unwrap();
    hf.logits_to_keep = num(p, "logits_to_keep");
    hf.reentrant = p["checkpoint"] == "reentrant";
    hf.attention_mask = p["attention_mask"] == "ones";
    hf.sliding_window = p["sliding_window"].as_u64().map(|x| x as usize);
    ModelConfig {
        flavour: Flavour::Hf,
        vocab_size: num(p, "vocab_size"),
        d_model: d,
        num_layers: num(p, "num_layers"),
        num_heads: h,
        num_kv_heads: num(p, "num_kv_heads"),
        d_ff: num(p, "intermediate_size"),
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        norm_fp32_upcast: true,
        tied_embeddings: p["tied"].as_bool().unwrap(),
        max_seq_len: num(p, "max_position_embeddings"),
        attention: Attention::Naive,
        checkpoint: if p["checkpoint"] == "none" { Checkpoint::None } else { Checkpoint::Every(1) },
        fused_qkv: false,
        fused_gate_up: false,
        hf: Some(hf),
        tp: None,
    }
}

/// measure_hf.py's loop on meta: three steps (data, then the profile type's calls), the
/// last one's events with the live set before it.
fn run_vramscope(point: &Value) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let p = &point["point"];
    let cfg = config_of(p);
    if p["attn"] == "sdpa" {
        let ran = point["info"]["sdpa_backends"].as_array().unwrap();
        assert!(ran.iter().any(|b| b == "aten::_scaled_dot_product_flash_attention_for_cpu"), "{ran:?}");
    }
    let (batch, seq) = (num(p, "batch"), num(p, "seq"));
    let kind = point["profile_type"].as_str().unwrap();
    let precision = if p["dtype"] == "bf16" { Precision::PureBf16 } else { Precision::Fp32 };
    runtime::reset();
    let model = Model::new_in(&cfg, Device::Meta, 42, precision.param_dtype()).unwrap();
    assert_eq!(model.dtype, if precision == Precision::PureBf16 { DType::BF16 } else { DType::F32 });
    assert_eq!(model.num_parameters(), point["info"]["parameters"].as_u64().unwrap(), "parameter count");
    // measure_hf.py: the Trainer's optimizer names (lr 1e-3, weight decay 0; SGD lr 1e-3) and
    // clip_grad_norm_ only when max_grad_norm > 0.
    let mut opt_cfg = OptimConfig::reference(Flavour::Hf);
    opt_cfg.kind = OptimizerKind::parse(p["optimizer"].as_str().unwrap()).expect("optimizer name");
    opt_cfg.lr = 1e-3;
    let norm = p["max_grad_norm"].as_f64().unwrap();
    opt_cfg.max_grad_norm = (norm > 0.0).then_some(norm);
    let opt = Optimizer::new(opt_cfg, model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_precision(precision);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, batch, seq, Device::Meta, 42);
    let mask = cfg.hf.as_ref().unwrap().attention_mask;
    let mut bound = CausalLmBatch::default();
    let mut before = Vec::new();
    const STEPS: usize = 3;
    for i in 0..STEPS {
        if i + 1 == STEPS {
            runtime::with(|rt| {
                before = rt.log.live_as_events();
                rt.log.start_recording();
            });
        }
        let labeled = matches!(kind, "training" | "forward-loss");
        data.next_causal_lm_batch(&mut bound, labeled, mask);
        let x = bound.input_ids.as_ref().unwrap();
        let m = bound.attention_mask.as_ref();
        match kind {
            "training" => {
                runner.step_masked(x, bound.labels.as_ref().unwrap(), m);
            }
            "inference" | "forward" => {
                let _g = (kind == "inference").then(runtime::no_grad);
                runtime::set_phase(Phase::Forward);
                drop(model.forward_masked(x, m));
                runtime::set_phase(Phase::Setup);
            }
            "forward-loss" => {
                runtime::set_phase(Phase::Forward);
                let (logits, loss) = model.forward_loss_masked(x, bound.labels.as_ref().unwrap(), m, &mut |_| runtime::set_phase(Phase::Loss));
                drop(logits);
                runtime::set_phase(Phase::Setup);
                drop(loss);
            }
            other => panic!("unknown profile type {other}"),
        }
    }
    let events = runtime::with(|rt| rt.log.stop_recording());
    runner.finish();
    (before, events)
}

#[test]
fn hf_grid_matches_transformers() {
    let doc = grid_common::fixture("hf_grid/hf.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("hf", points, 130, KNOWN_FAILING, run_vramscope);
}
