//! Full-size hf models against transformers' own code where CPU cannot run it:
//! tests/fixtures/hf_grid/fake_full.json (tools/pytorch/fake_hf.py) is the peak MemTracker
//! saw under FakeTensorMode for Llama-3.1-8B (eager, bf16 weights, batch 1): a fresh model's
//! first call, the parameters included. On fake cuda MemTracker rounds every storage up to
//! 512 B (the caching allocator's allocated bytes); the training row ran on fake cpu, unrounded.
//! vramscope runs the same calls on meta; every row agrees to the byte (the input ids, drawn
//! before MemTracker starts, are left out on both sides), the training row included: the
//! loss, backward and the first fused AdamW step (fake cpu, where backward runs without a
//! GPU) peak at 64.24 GB in the optimizer with parameters, gradients and both moments.
use serde_json::Value;
use vramscope::engine::{runtime, Device};
use vramscope::model::hf::{self, AttnImplementation};
use vramscope::model::Model;
use vramscope::record::EventKind;
use vramscope::model::Flavour;
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Optimizer, Precision};

fn llama31_8b(use_cache: bool) -> vramscope::model::ModelConfig {
    let text = include_str!("fixtures/llama3_8b_config.json");
    let mut cfg = hf::parse(text).unwrap().config;
    let h = cfg.hf.as_mut().unwrap();
    h.attn_implementation = AttnImplementation::Eager;
    h.use_cache = use_cache;
    cfg
}

/// The peak over everything allocated from the model's construction on, each storage counted
/// as `round(bytes)`.
fn peak_of(round: impl Fn(u64) -> u64) -> u64 {
    let events = runtime::with(|rt| rt.log.stop_recording());
    let (mut level, mut peak) = (0u64, 0u64);
    for e in &events {
        match e.kind {
            EventKind::Alloc => level += round(e.bytes as u64),
            EventKind::Free => level -= round(e.bytes as u64),
            EventKind::Oom => {}
        }
        peak = peak.max(level);
    }
    peak
}

/// A MoE preset as fake_hf.py --moe-grid builds it: eager attention, grouped_mm experts, the
/// balanced routing its router is forced to.
fn moe_preset(name: &str, use_cache: bool) -> vramscope::model::ModelConfig {
    let mut cfg = vramscope::model::presets::find(name, Some(Flavour::Hf)).unwrap().model;
    let h = cfg.hf.as_mut().unwrap();
    h.attn_implementation = AttnImplementation::Eager;
    h.use_cache = use_cache;
    let moe = h.moe.as_mut().expect("a MoE preset");
    moe.implementation = hf::moe::ExpertsImplementation::GroupedMm;
    moe.routing = hf::moe::Routing::Balanced;
    cfg
}

fn run(row: &Value) -> u64 {
    let cfg = llama31_8b(row["use_cache"].as_bool().unwrap());
    run_config(row, cfg)
}

fn run_config(row: &Value, cfg: vramscope::model::ModelConfig) -> u64 {
    let (seq, kind) = (row["seq"].as_u64().unwrap() as usize, row["kind"].as_str().unwrap());
    assert_eq!((row["attn"].as_str(), row["dtype"].as_str(), row["batch"].as_u64()), (Some("eager"), Some("bf16"), Some(1)));
    runtime::reset();
    // fake_hf.py draws the input ids before MemTracker starts, so they are not counted.
    let ids = vramscope::engine::Tensor::from_i64_with(&[1, seq], Device::Meta, || unreachable!("meta holds no values"));
    runtime::with(|rt| rt.log.start_recording());
    let model = Model::new_in(&cfg, Device::Meta, 0, Precision::PureBf16.param_dtype()).unwrap();
    match kind {
        "inference" => {
            let _g = runtime::no_grad();
            drop(model.forward(&ids));
        }
        "forward" => drop(model.forward(&ids)),
        "training" => {
            // `loss = model(input_ids=x, labels=x.clone()).loss; loss.backward(); opt.step()`
            // with `torch.optim.AdamW(fused=True)` (defaults: lr 1e-3, weight decay 0.01), no
            // clipping, model.train().
            let mut oc = OptimConfig::reference(Flavour::Hf);
            oc.kind = OptimizerKind::AdamwTorchFused;
            (oc.lr, oc.weight_decay, oc.max_grad_norm) = (1e-3, 1e-2, None);
            let labels = ids.clone_contiguous();
            model.training.set(true);
            let (logits, loss) = model.forward_loss(&ids, &labels, &mut |_| {});
            // `labels=x.clone()` is an argument temporary, the output is unbound past `.loss`.
            drop((logits, labels));
            loss.backward();
            let mut opt = Optimizer::new(oc, model.parameters().len());
            opt.step(model.parameters());
            drop((loss, opt));
        }
        other => panic!("{other}: unknown kind"),
    }
    let cuda = row["device"] == "cuda";
    let peak = peak_of(|b| if cuda { b.div_ceil(512) * 512 } else { b });
    drop(ids);
    peak
}

#[test]
fn llama31_8b_rows_match_faketensor_memtracker() {
    let doc: Value = serde_json::from_str(include_str!("fixtures/hf_grid/fake_full.json")).unwrap();
    assert_eq!(doc["transformers"], hf::TRANSFORMERS_VERSION);
    let mut bad = Vec::new();
    for row in doc["rows"].as_array().unwrap() {
        let want = row["peak_total"].as_u64().unwrap();
        let got = run(row);
        let ratio = got as f64 / want as f64;
        println!("{} S{} {} use_cache={}: MemTracker {want} B, vramscope {got} B ({ratio:.4})", row["preset"], row["seq"], row["kind"], row["use_cache"]);
        // The issue asks for 1 %; these rows agree to the byte, so any change is a regression.
        if got != want {
            bad.push(format!("{row}: {got} vs {want} ({ratio:.5})"));
        }
    }
    assert!(bad.is_empty(), "differ from MemTracker: {bad:#?}");
}

/// Mixtral-8x7B and Qwen3-30B-A3B at S 4096 (fake cuda, grouped_mm, balanced routing):
/// tests/fixtures/hf_grid/fake_full_moe.json from `fake_hf.py --moe-grid`.
#[test]
fn moe_rows_match_faketensor_memtracker() {
    check_rows(include_str!("fixtures/hf_grid/fake_full_moe.json"), moe_preset, &[]);
}

/// Each row of a fake_hf.py grid run with its preset's config: vramscope − MemTracker is 0,
/// or the difference `known` lists for its (preset, kind).
fn check_rows(json: &str, preset: fn(&str, bool) -> vramscope::model::ModelConfig, known: &[(&str, &str, i64)]) {
    let doc: Value = serde_json::from_str(json).unwrap();
    assert_eq!(doc["transformers"], hf::TRANSFORMERS_VERSION);
    let mut bad = Vec::new();
    for row in doc["rows"].as_array().unwrap() {
        let want = row["peak_total"].as_u64().unwrap();
        let (name, kind) = (row["preset"].as_str().unwrap(), row["kind"].as_str().unwrap());
        let got = run_config(row, preset(name, row["use_cache"].as_bool().unwrap()));
        println!("{name} S{} {kind}: MemTracker {want} B, vramscope {got} B", row["seq"]);
        let expected = known.iter().find(|(p, k, _)| *p == name && *k == kind).map_or(0, |k| k.2);
        if got as i64 - want as i64 != expected {
            bad.push(format!("{name} S{} {kind}: {got} vs {want} ({:+}, expected {expected:+})", row["seq"], got as i64 - want as i64));
        }
    }
    assert!(bad.is_empty(), "differ from MemTracker: {bad:#?}");
}

/// DeepSeek-V3 (671B) at S 4096 (fake cuda, eager attention, grouped_mm, balanced routing):
/// tests/fixtures/hf_grid/fake_full_deepseek.json from `fake_hf.py --deepseek-grid`.
#[test]
fn deepseek_v3_rows_match_faketensor_memtracker() {
    check_rows(include_str!("fixtures/hf_grid/fake_full_deepseek.json"), moe_preset, &[]);
}

/// A dense family preset as fake_hf.py --family-grid builds it: its committed config.json,
/// eager attention.
fn family_preset(name: &str, use_cache: bool) -> vramscope::model::ModelConfig {
    let mut cfg = vramscope::model::presets::find(name, Some(Flavour::Hf)).unwrap().model;
    let h = cfg.hf.as_mut().unwrap();
    h.attn_implementation = AttnImplementation::Eager;
    h.use_cache = use_cache;
    cfg
}

/// Rows whose difference from MemTracker is known: (preset, kind, vramscope − MemTracker).
/// None: Gemma's `embed_scale` is built in the load dtype, so its forward cast is no copy.
const FAMILY_KNOWN: [(&str, &str, i64); 0] = [];

/// Gemma-3-27B (text), Gemma-2-9B, Phi-3-mini and OLMo-2-7B at S 4096 (fake cuda, eager):
/// tests/fixtures/hf_grid/fake_full_families.json from `fake_hf.py --family-grid`. The
/// inference rows (use_cache) hold a 512 B block per sliding cache layer: the
/// `DynamicSlidingWindowLayer`'s window tensor moved to the device.
#[test]
fn family_rows_match_faketensor_memtracker() {
    check_rows(include_str!("fixtures/hf_grid/fake_full_families.json"), family_preset, &FAMILY_KNOWN);
}
