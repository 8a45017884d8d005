//! One rank of a tensor-parallel (with and without sequence parallelism, and FSDP2 × TP, 2-D)
//! job against PyTorch itself:
//! tests/fixtures/dist_grid/tp.json (tools/pytorch/measure_tp.py: transformers' Llama under
//! torch's Megatron-style plan on a fake process group, trained as measure_hf.py trains it),
//! per phase, requested bytes of blocks >= 512 B, the third iteration, 16 B per live tensor.
mod grid_common;

use serde_json::Value;
use vramscope::engine::{runtime, DType, Device};
use vramscope::model::hf::{Arch, AttnImplementation, HfConfig, SdpaBackend};
use vramscope::model::{Attention, Checkpoint, Flavour, Model, ModelConfig};
use vramscope::parallel::{apply, Layout, ParallelConfig};
use vramscope::record::MemEvent;
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, CausalLmBatch, DataKind, Optimizer, StepRunner};

/// Points where vramscope does not match PyTorch, each with the reason.
const KNOWN_FAILING: &[(&str, &str)] = &[];

fn num(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}")) as usize
}

/// measure_hf.py's LlamaConfig for the point (use_cache off, no mask, untied).
fn config_of(p: &Value) -> ModelConfig {
    let c = &p["config"];
    assert_eq!(c["model_type"], "llama");
    let (d, h) = (num(c, "hidden_size"), num(c, "num_heads"));
    let mut hf = HfConfig::new(Arch::Llama, d / h);
    hf.attn_implementation = AttnImplementation::parse(p["attn"].as_str().unwrap()).unwrap();
    hf.sdpa_backend = SdpaBackend::CpuFlash;
    hf.cpu_run = true;
    hf.use_cache = false;
    ModelConfig {
        flavour: Flavour::Hf,
        vocab_size: num(c, "vocab_size"),
        d_model: d,
        num_layers: num(c, "num_layers"),
        num_heads: h,
        num_kv_heads: num(c, "num_kv_heads"),
        d_ff: num(c, "intermediate_size"),
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        norm_fp32_upcast: true,
        tied_embeddings: false,
        max_seq_len: 4096,
        attention: Attention::Naive,
        checkpoint: Checkpoint::None,
        fused_qkv: false,
        fused_gate_up: false,
        hf: Some(hf),
        tp: None,
    }
}

/// The point's mesh as vramscope's layout: tensor parallelism alone, or FSDP2 over the
/// data-parallel dimension of (fsdp, tp).
fn parallel_of(p: &Value) -> ParallelConfig {
    let (tp, dp) = (num(p, "tp"), num(p, "fsdp"));
    let mut pc = if dp == 1 { ParallelConfig::new(Layout::Tp, tp) } else { ParallelConfig::new(Layout::Fsdp, tp * dp) };
    pc.tp = tp;
    pc.sequence_parallel = p["sp"].as_bool().unwrap_or(false);
    pc.rank = num(p, "rank");
    pc.validate().unwrap();
    pc
}

fn run(p: &Value) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let pc = parallel_of(p);
    let cfg = pc.model_config(&config_of(p));
    let (batch, seq) = (num(p, "batch"), num(p, "seq"));
    runtime::reset();
    let model = {
        let _d = pc.shards_params().then(runtime::defer_allocation);
        Model::new_in(&cfg, Device::Meta, 42, DType::F32).unwrap()
    };
    let layout = apply(&model, &pc, DType::F32);
    let mut oc = OptimConfig::reference(Flavour::Hf);
    oc.kind = OptimizerKind::parse(p["optimizer"].as_str().unwrap()).expect("optimizer name");
    oc.lr = 1e-3;
    oc.max_grad_norm = None;
    let opt = Optimizer::new(oc, model.parameters().len());
    let mut runner = StepRunner::new(&model, opt);
    if let Some(l) = layout {
        runner = runner.with_parallel(l);
    }
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, batch, seq, Device::Meta, 42);
    let mut bound = CausalLmBatch::default();
    let recorded = grid_common::record_last(3, |_| {
        data.next_causal_lm_batch(&mut bound, true, false);
        if pc.sequence_parallel {
            data.next_position_ids(&mut bound);
            model.position_ids.replace(bound.position_ids.clone());
        }
        runner.step_masked(bound.input_ids.as_ref().unwrap(), bound.labels.as_ref().unwrap(), None);
    });
    runner.finish();
    recorded
}

#[test]
fn tensor_parallel_ranks_match_pytorch() {
    let doc = grid_common::fixture("dist_grid/tp.json");
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    grid_common::check("dist_grid/tp.json", points, 12, KNOWN_FAILING, run);
}
