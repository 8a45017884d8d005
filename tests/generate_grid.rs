//! `--profile-type generate` against transformers' own greedy `generate()`.
//!
//! tests/fixtures/pytorch_grid/generate.json comes from tools/pytorch/make_generate_grid.py:
//! transformers 5.23.0's `model.generate(input_ids, max_new_tokens=N, do_sample=False)` with
//! the default DynamicCache (llama, mistral, qwen2, qwen3, random weights, CPU), three calls in
//! one torch.profiler(profile_memory=True) session, the third measured (measure_generate.py).
//! Per phase -- data, prefill, decode_1 .. decode_{N-1} -- the peak of requested bytes over
//! blocks >= 512 B. Here the same loop runs on meta and every phase must agree to the byte.
//!
//! tests/fixtures/pytorch_grid/generate_qlora.json (`make_generate_grid.py --qlora`): the same
//! over bitsandbytes 4-bit weights (nf4/fp4, double quantization on/off, compute bf16/fp32)
//! without and with peft's unmerged LoRA adapters, and bf16 weights with adapters, in eval
//! mode; bitsandbytes' CPU gemm_4bit (dequantize + F.linear, also for the decode steps' one
//! row per sequence, where CUDA runs the fused kernel).
mod grid_common;

use serde_json::Value;
use vramscope::engine::{runtime, DType, Device};
use vramscope::model::hf::generation_5_23::{generate, Step};
use vramscope::model::Model;
use vramscope::record::{EventKind, MemEvent, Phase};
use vramscope::train::{Batcher, CausalLmBatch, DataKind};

/// Points where vramscope does not match transformers, each with the reason (printed on every
/// run; the test fails once one of them matches).
const KNOWN_FAILING: &[(&str, &str)] = &[];

/// The measured step's phases as (name, peak): the counted level (blocks >= 512 B) from the
/// live set before it, split where each step started.
fn run_vramscope(point: &Value) -> Vec<(String, u64)> {
    let p = &point["point"];
    let cfg = grid_common::generate::config_of(point, &point["point"]);
    let n = grid_common::hf::num(p, "max_new_tokens");
    let (batch, seq) = (grid_common::hf::num(p, "batch"), grid_common::hf::num(p, "seq"));
    // A 4-bit model's unquantized parameters: the load type, or fp32 once prepared.
    let loaded = if p["dtype"] == "bf16" { DType::BF16 } else { DType::F32 };
    let dtype = cfg.hf.as_ref().and_then(|h| h.bnb.as_ref()).map_or(loaded, |q| q.unquantized_dtype());
    runtime::reset();
    let model = Model::new_in(&cfg, Device::Meta, 42, dtype).unwrap();
    assert_eq!(model.num_parameters(), point["info"]["parameters"].as_u64().unwrap(), "parameter count");
    // (peft freezes the base model; a 4-bit model without adapters keeps requires_grad on
    // its unquantized parameters, which under generate's no_grad changes nothing)
    if let Some(t) = point["info"]["trainable_parameters"].as_u64().filter(|_| !p["lora_r"].is_null()) {
        assert_eq!(model.num_trainable_parameters(), t, "trainable parameter count");
    }
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, batch, seq, Device::Meta, 42);
    let mut bound = CausalLmBatch::default();
    let mut before = Vec::new();
    let mut marks: Vec<(String, usize)> = Vec::new();
    let recorded = || runtime::with(|rt| rt.log.events().map_or(0, |e| e.len()));
    const STEPS: usize = 3;
    for i in 0..STEPS {
        let last = i + 1 == STEPS;
        if last {
            runtime::with(|rt| {
                before = rt.log.live_as_events();
                rt.log.start_recording();
            });
            marks.push(("data".into(), 0));
        }
        data.next_causal_lm_batch(&mut bound, false, false);
        let ids = bound.input_ids.clone().unwrap();
        let out = generate(&model, &ids, &grid_common::generate::generate_config_of(p, n), &mut |step| {
            runtime::set_phase(if step == Step::Prefill { Phase::Prefill } else { Phase::Decode });
            if last {
                let name = match step {
                    Step::Prefill => "prefill".to_string(),
                    Step::Decode(k) => format!("decode_{k}"),
                };
                marks.push((name, recorded()));
            }
        });
        drop(ids);
        runtime::set_phase(Phase::Setup);
        let rows = batch * p["num_return_sequences"].as_u64().unwrap_or(1) as usize;
        assert_eq!(out.sequences.shape(), &[rows, seq + n]);
        assert_eq!(out.kv_cache_bytes as u64, point["info"]["kv_cache_bytes"].as_u64().unwrap(), "KV cache bytes");
        if last {
            marks.push(("other".into(), recorded()));
        }
        drop(out);
    }
    let events = runtime::with(|rt| rt.log.stop_recording());
    // PYTORCH_GRID_TRACE=<point name>: the counted events, to set beside measure_generate.py --events.
    if std::env::var("PYTORCH_GRID_TRACE").is_ok_and(|t| t == point["name"].as_str().unwrap_or_default()) {
        grid_common::trace(&before, &events);
    }
    peaks(&before, &events, &marks)
}

fn peaks(before: &[MemEvent], events: &[MemEvent], marks: &[(String, usize)]) -> Vec<(String, u64)> {
    let counted = |e: &MemEvent| e.bytes >= grid_common::MIN_BLOCK;
    let mut level: u64 = before.iter().filter(|e| counted(e)).map(|e| e.bytes as u64).sum();
    let mut out = Vec::new();
    for (i, (name, start)) in marks.iter().enumerate() {
        let end = marks.get(i + 1).map_or(events.len(), |m| m.1);
        let mut peak = level;
        for e in events[*start..end].iter().filter(|e| counted(e)) {
            match e.kind {
                EventKind::Alloc => level += e.bytes as u64,
                EventKind::Free => level -= e.bytes as u64,
                EventKind::Oom => {}
            }
            peak = peak.max(level);
        }
        out.push((name.clone(), peak));
    }
    out
}

#[test]
fn generate_grid_matches_transformers() {
    check_grid("pytorch_grid/generate.json", 20, KNOWN_FAILING);
}

/// Points of generate_options.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_OPTIONS: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_options.json (`make_generate_grid.py --options`):
/// generate() with `cache_implementation="static"` (disable_compile=True), with `do_sample`
/// (GenerationConfig's top_k 50, or the point's temperature/top_k), `min_new_tokens` and
/// `num_return_sequences`, two of them over peft adapters (one on 4-bit weights).
#[test]
fn generate_options_grid_matches_transformers() {
    let doc = check_grid("pytorch_grid/generate_options.json", 24, KNOWN_FAILING_OPTIONS);
    let points = doc["points"].as_array().unwrap();
    let count = |f: &dyn Fn(&Value) -> bool| points.iter().filter(|p| f(&p["point"])).count();
    assert!(count(&|p| p["cache"] == "static") >= 8, "static cache points");
    assert!(count(&|p| p["do_sample"] == true) >= 8, "sampling points");
    assert!(count(&|p| p["min_new_tokens"].as_u64().is_some_and(|n| n > 0)) >= 4, "min_new_tokens points");
    assert!(count(&|p| p["num_return_sequences"].as_u64().is_some_and(|n| n > 1)) >= 4, "num_return_sequences points");
    assert!(count(&|p| p["cache"] == "static" && p["load_in_4bit"] == true && !p["lora_r"].is_null()) >= 1, "a static 4-bit + LoRA point");
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    for mt in ["llama", "mistral", "qwen2", "qwen3"] {
        assert!(count(&|p| p["model_type"] == mt && (p["cache"] == "static" || p["do_sample"] == true)) >= 2, "{mt}");
    }
}

/// Points of generate_beams.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_BEAMS: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_beams.json (`make_generate_grid.py --beams`):
/// generate() with `num_beams` 2-4 (`_beam_search`), `num_return_sequences` 1..beams, the
/// DynamicCache and a StaticCache, min_new_tokens, and beam sampling (`do_sample`: the
/// warpers, multinomial without replacement).
#[test]
fn generate_beams_grid_matches_transformers() {
    let doc = check_grid("pytorch_grid/generate_beams.json", 20, KNOWN_FAILING_BEAMS);
    let points = doc["points"].as_array().unwrap();
    let count = |f: &dyn Fn(&Value) -> bool| points.iter().filter(|p| f(&p["point"])).count();
    for beams in 2..=4 {
        assert!(count(&|p| p["num_beams"] == beams) >= 4, "{beams} beams");
    }
    assert!(count(&|p| p["cache"] == "static") >= 4, "static cache points");
    assert!(count(&|p| p["num_return_sequences"].as_u64().is_some_and(|n| n > 1)) >= 6, "num_return_sequences points");
    assert!(count(&|p| p["num_return_sequences"] == p["num_beams"]) >= 2, "all beams returned");
    assert!(count(&|p| p["max_new_tokens"].as_u64().is_some_and(|n| n >= 64)) >= 1, "64 new tokens");
    assert!(count(&|p| p["do_sample"] == true) >= 6, "beam sampling points");
    assert!(count(&|p| p["do_sample"] == true && p["cache"] == "static") >= 1, "beam sampling over a static cache");
    for mt in ["llama", "mistral", "qwen2", "qwen3"] {
        for dtype in ["fp32", "bf16"] {
            assert!(count(&|p| p["model_type"] == mt && p["dtype"] == dtype) >= 1, "{mt} {dtype}");
        }
    }
}

/// Points of generate_qlora.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_QLORA: &[(&str, &str)] = &[];

#[test]
fn generate_qlora_grid_matches_transformers_peft_bitsandbytes() {
    let doc = check_grid("pytorch_grid/generate_qlora.json", 16, KNOWN_FAILING_QLORA);
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let points = doc["points"].as_array().unwrap();
    let has = |f: &dyn Fn(&Value) -> bool| points.iter().any(|p| f(&p["point"]));
    assert!(has(&|p| p["load_in_4bit"] == true && p["lora_r"].is_null()), "a 4-bit point without adapters");
    assert!(has(&|p| p["load_in_4bit"] == true && p["target_modules"] == "q_proj,v_proj"), "a 4-bit point with q,v adapters");
    assert!(has(&|p| p["load_in_4bit"] == true && p["target_modules"] == "all-linear"), "a 4-bit point with all-linear adapters");
    assert!(has(&|p| p["load_in_4bit"].is_null() && !p["lora_r"].is_null()), "a bf16 point with adapters");
    assert!(has(&|p| p["prepare"] == true), "a prepared 4-bit point");
}

fn check_grid(fixture: &str, min_points: usize, known_failing: &[(&str, &str)]) -> Value {
    check_doc(grid_common::fixture(fixture), fixture, min_points, known_failing)
}

fn check_doc(doc: Value, fixture: &str, min_points: usize, known_failing: &[(&str, &str)]) -> Value {
    assert_eq!(doc["transformers"], vramscope::model::hf::TRANSFORMERS_VERSION, "the fixture's transformers release");
    let points = doc["points"].as_array().unwrap();
    assert!(points.len() >= min_points, "{} grid points", points.len());
    let (mut phases, mut exact) = (0, 0);
    let (mut failing, mut stale): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for point in points {
        let name = point["name"].as_str().unwrap();
        if point["point"]["attn"] == "sdpa" {
            let (p, ran) = (&point["point"], point["info"]["sdpa_backends"].as_array().unwrap());
            // DeepSeek-V3 with v's head size unlike q's: PyTorch's CPU falls back to the math kernel.
            let unequal_v = p["v_head_dim"].as_u64().is_some_and(|v| Some(v) != p["qk_nope_head_dim"].as_u64().zip(p["qk_rope_head_dim"].as_u64()).map(|(n, r)| n + r));
            let kernel = if unequal_v { "aten::_scaled_dot_product_attention_math" } else { "aten::_scaled_dot_product_flash_attention_for_cpu" };
            assert!(ran.iter().any(|b| b == kernel), "{name}: {ran:?}");
        }
        let ours = run_vramscope(point);
        let mut rows = Vec::new();
        for (phase, want) in point["phases"].as_object().unwrap() {
            phases += 1;
            let torch = want["peak"].as_u64().unwrap();
            let got = ours.iter().find(|(n, _)| n == phase).map(|&(_, b)| b);
            if got == Some(torch) {
                exact += 1;
            } else {
                rows.push(format!("{name:<64} {phase:<10} torch {torch:>10} vramscope {}", got.map_or("-".into(), |g| format!("{g:>10} ({:+})", g as i64 - torch as i64))));
            }
        }
        match (known_failing.iter().find(|(n, _)| *n == name), rows.is_empty()) {
            (Some((_, why)), false) => println!("known failing: {name}: {why}\n  {}", rows.join("\n  ")),
            (Some(_), true) => stale.push(name.to_string()),
            (None, false) => failing.extend(rows),
            (None, true) => {}
        }
    }
    println!("{fixture}: {exact} of {phases} phases exact over {} points", points.len());
    assert!(failing.is_empty(), "phases that differ from transformers:\n{}", failing.join("\n"));
    assert!(stale.is_empty(), "KNOWN_FAILING points that match now (remove them): {stale:?}");
    doc
}

/// Points of generate_families.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_FAMILIES: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_families.json (`make_generate_grid.py --families`,
/// issue 30): Phi-3 (fused qkv and gate_up) and OLMo-2 (q/k norms, post-norms) through
/// generate(): greedy, sampling (num_return_sequences too), beams 2-3, DynamicCache and
/// StaticCache, sdpa and eager, fp32 and bf16.
#[test]
fn generate_families_grid_matches_transformers() {
    let doc = check_grid("pytorch_grid/generate_families.json", 24, KNOWN_FAILING_FAMILIES);
    coverage(&doc, &["phi3", "olmo2"]);
}

/// Points of generate_moe.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_MOE: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_moe.json (`make_generate_grid.py --moe`, issue 30):
/// Mixtral, Qwen3-MoE and Qwen2-MoE (its shared expert) through generate(), the router's
/// top-k forced to balanced or worst routing for each forward's token count (the prompt's
/// rows x S, then one per row), over the three experts implementations.
#[test]
fn generate_moe_grid_matches_transformers() {
    let families = ["mixtral", "qwen3_moe", "qwen2_moe"];
    let doc = check_grid("pytorch_grid/generate_moe.json", 36, KNOWN_FAILING_MOE);
    coverage(&doc, &families);
    for point in doc["points"].as_array().unwrap() {
        let (p, name) = (&point["point"], point["name"].as_str().unwrap());
        // The forced routing of each forward: tokens × top-k pairs, split as the routing says.
        let (k, e) = (p["top_k"].as_u64().unwrap(), p["num_experts"].as_u64().unwrap());
        for (tokens, per) in point["info"]["tokens_per_expert"].as_object().unwrap() {
            let t: u64 = tokens.parse().unwrap();
            let per: Vec<u64> = per.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
            assert_eq!(per.iter().sum::<u64>(), t * k, "{name}");
            match p["routing"].as_str().unwrap() {
                "worst" => assert!(per.iter().enumerate().all(|(i, &n)| n == if (i as u64) < k { t } else { 0 }), "{name}: {per:?}"),
                _ => assert!(per.iter().all(|&n| n == t * k / e || n == t * k / e + 1), "{name}: {per:?}"),
            }
        }
    }
    let points = doc["points"].as_array().unwrap();
    for family in families {
        let set = |k: &str| points.iter().filter(|q| q["point"]["model_type"] == family).map(|q| q["point"][k].to_string()).collect::<std::collections::BTreeSet<_>>();
        assert_eq!(set("experts").len(), 3, "{family}: experts implementations");
        assert_eq!(set("routing").len(), 2, "{family}: routings");
    }
}

/// What a families/MoE generate grid covers per model type: 12 points or more, greedy,
/// sampling, beams 2 and 3, the static cache, sdpa and eager, fp32 and bf16, batch 1-3,
/// prompts 8-64, new tokens 1-8.
fn coverage(doc: &Value, types: &[&str]) {
    let points = doc["points"].as_array().unwrap();
    for mt in types {
        let ps: Vec<&Value> = points.iter().map(|q| &q["point"]).filter(|p| p["model_type"] == *mt).collect();
        let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
        assert!(ps.len() >= 12, "{mt}: {} points", ps.len());
        assert!(count(&|p| p["do_sample"].is_null() && p["num_beams"].is_null()) >= 4, "{mt}: greedy");
        assert!(count(&|p| p["do_sample"] == true) >= 2, "{mt}: sampling");
        for beams in [2, 3] {
            assert!(count(&|p| p["num_beams"] == beams) >= 1, "{mt}: {beams} beams");
        }
        assert!(count(&|p| p["cache"] == "static") >= 3, "{mt}: static cache");
        for (k, v) in [("attn", "sdpa"), ("attn", "eager"), ("dtype", "fp32"), ("dtype", "bf16")] {
            assert!(count(&|p| p[k] == v) >= 3, "{mt}: {k} {v}");
        }
        for b in 1..=3 {
            assert!(count(&|p| p["batch"] == b) >= 1, "{mt}: batch {b}");
        }
        assert!(ps.iter().all(|p| (8..=64).contains(&p["seq"].as_u64().unwrap()) && (1..=8).contains(&p["max_new_tokens"].as_u64().unwrap())), "{mt}: shapes");
    }
}

/// Points of generate_gemma.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_GEMMA: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_gemma.json (`make_generate_grid.py --gemma`, issue 30):
/// Gemma 2 (eager: it has no sdpa) and Gemma 3 text (eager and sdpa) through generate() with
/// alternating sliding and full layers: the DynamicCache's DynamicSlidingWindowLayer keeps the
/// window's last positions, the sliding mask spans them, the full mask the whole past; the
/// window below the prompt, crossed by the decode steps, at the prompt and above everything;
/// greedy, sampling, beams; fp32 and bf16; Gemma 2's soft-capping. Its StaticCache points
/// (StaticSlidingWindowLayer) match too; generate_static_sliding.json covers those in full.
#[test]
fn generate_gemma_grid_matches_transformers() {
    let doc = grid_common::fixture("pytorch_grid/generate_gemma.json");
    let points = doc["points"].as_array().unwrap();
    assert!(points.iter().filter(|p| p["point"]["cache"] != "static").count() >= 24, "DynamicCache points");
    let doc = check_doc(doc.clone(), "pytorch_grid/generate_gemma.json", 36, KNOWN_FAILING_GEMMA);
    let points = doc["points"].as_array().unwrap();
    for mt in ["gemma2", "gemma3_text"] {
        let ps: Vec<&Value> = points.iter().map(|q| &q["point"]).filter(|p| p["model_type"] == mt).collect();
        let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
        assert!(ps.len() >= 12, "{mt}: {} points", ps.len());
        let (s, n, w) = (|p: &Value| p["seq"].as_u64().unwrap(), |p: &Value| p["max_new_tokens"].as_u64().unwrap(), |p: &Value| p["sliding_window"].as_u64().unwrap());
        assert!(count(&|p| w(p) < s(p)) >= 3, "{mt}: a prompt longer than the window");
        assert!(count(&|p| s(p) < w(p) && w(p) < s(p) + n(p)) >= 3, "{mt}: the window crossed while decoding");
        assert!(count(&|p| w(p) > s(p) + n(p)) >= 1, "{mt}: a window above everything");
        assert!(count(&|p| p["do_sample"].is_null() && p["num_beams"].is_null()) >= 4, "{mt}: greedy");
        assert!(count(&|p| p["do_sample"] == true) >= 2, "{mt}: sampling");
        for beams in [2, 3] {
            assert!(count(&|p| p["num_beams"] == beams) >= 1, "{mt}: {beams} beams");
        }
        for b in 1..=3 {
            assert!(count(&|p| p["batch"] == b) >= 1, "{mt}: batch {b}");
        }
        for dtype in ["fp32", "bf16"] {
            assert!(count(&|p| p["dtype"] == dtype) >= 3, "{mt}: {dtype}");
        }
    }
    assert!(points.iter().any(|q| q["point"]["model_type"] == "gemma3_text" && q["point"]["attn"] == "sdpa"), "gemma3_text sdpa");
}

/// Points of generate_gpt_oss.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_GPT_OSS: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_gpt_oss.json (`make_generate_grid.py --gpt-oss`, issue
/// 30): gpt-oss (eager: it has no sdpa) through generate() with its alternating sliding and
/// full layers (DynamicSlidingWindowLayer, the sliding mask over the window's keys), the
/// router's top-k forced as generate_moe.json's, the window below the prompt, crossed while
/// decoding, at the prompt and above everything; greedy, sampling, beams; and one StaticCache
/// point (generate_static_sliding.json has twelve).
#[test]
fn generate_gpt_oss_grid_matches_transformers() {
    let doc = check_grid("pytorch_grid/generate_gpt_oss.json", 12, KNOWN_FAILING_GPT_OSS);
    let ps: Vec<&Value> = doc["points"].as_array().unwrap().iter().map(|q| &q["point"]).collect();
    let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
    let (s, n, w) = (|p: &Value| p["seq"].as_u64().unwrap(), |p: &Value| p["max_new_tokens"].as_u64().unwrap(), |p: &Value| p["sliding_window"].as_u64().unwrap());
    assert!(count(&|p| w(p) < s(p)) >= 3, "a prompt longer than the window");
    assert!(count(&|p| s(p) < w(p) && w(p) < s(p) + n(p)) >= 3, "the window crossed while decoding");
    assert!(count(&|p| p["do_sample"] == true) >= 2 && count(&|p| p["num_beams"].as_u64().is_some_and(|b| b > 1)) >= 2, "sampling and beams");
    for dtype in ["fp32", "bf16"] {
        assert!(count(&|p| p["dtype"] == dtype) >= 3, "{dtype}");
    }
}

/// Points of generate_static_sliding.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_STATIC_SLIDING: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_static_sliding.json (`make_generate_grid.py
/// --static-sliding`, issue 30): `cache_implementation="static"` (disable_compile) on models
/// with a sliding window: Gemma 2 and Gemma 3 text and gpt-oss (sliding and full layers:
/// StaticSlidingWindowLayer beside StaticLayer, create_masks_for_generate's mask per layer
/// type), Mistral and Qwen2 (use_sliding_window, every layer sliding): the window below the
/// prompt (the prefill overflows it), crossed while decoding (the roll once full), at the
/// prompt and above everything; greedy, sampling, beams; fp32 and bf16; eager and sdpa.
#[test]
fn generate_static_sliding_grid_matches_transformers() {
    let types = ["gemma2", "gemma3_text", "gpt_oss", "mistral", "qwen2"];
    let doc = check_grid("pytorch_grid/generate_static_sliding.json", 60, KNOWN_FAILING_STATIC_SLIDING);
    let points = doc["points"].as_array().unwrap();
    for point in points {
        // The order create_masks_for_generate built the masks in (set(layer_types) under the
        // grid's PYTHONHASHSEED=0): the one vramscope models.
        if let Some(order) = point["info"]["mask_order"].as_array().filter(|o| o.len() > 1) {
            assert_eq!(order[0], "full_attention", "{}", point["name"]);
        }
    }
    for mt in types {
        let ps: Vec<&Value> = points.iter().map(|q| &q["point"]).filter(|p| p["model_type"] == mt).collect();
        let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
        assert!(ps.len() >= 12, "{mt}: {} points", ps.len());
        assert!(ps.iter().all(|p| p["cache"] == "static"), "{mt}: static cache");
        let (s, n, w) = (|p: &Value| p["seq"].as_u64().unwrap(), |p: &Value| p["max_new_tokens"].as_u64().unwrap(), |p: &Value| p["sliding_window"].as_u64().unwrap());
        assert!(count(&|p| w(p) < s(p)) >= 3, "{mt}: a prompt longer than the window");
        assert!(count(&|p| s(p) < w(p) && w(p) < s(p) + n(p)) >= 3, "{mt}: the window crossed while decoding");
        assert!(count(&|p| w(p) > s(p) + n(p)) >= 1, "{mt}: a window above everything");
        assert!(count(&|p| p["do_sample"].is_null() && p["num_beams"].is_null()) >= 4, "{mt}: greedy");
        assert!(count(&|p| p["do_sample"] == true) >= 2, "{mt}: sampling");
        for beams in [2, 3] {
            assert!(count(&|p| p["num_beams"] == beams) >= 1, "{mt}: {beams} beams");
        }
        for b in 1..=3 {
            assert!(count(&|p| p["batch"] == b) >= 1, "{mt}: batch {b}");
        }
        for dtype in ["fp32", "bf16"] {
            assert!(count(&|p| p["dtype"] == dtype) >= 3, "{mt}: {dtype}");
        }
        if !matches!(mt, "gemma2" | "gpt_oss") {
            assert!(count(&|p| p["attn"] == "sdpa") >= 3 && count(&|p| p["attn"] == "eager") >= 3, "{mt}: sdpa and eager");
        }
    }
}

/// Points of generate_deepseek.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_DEEPSEEK: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_deepseek.json (`make_generate_grid.py --deepseek`, issue
/// 30): DeepSeek-V3 through generate() with the DynamicCache, which keeps multi-head latent
/// attention's compressed latent and k_rot per layer (kv_b_proj expands them at every step);
/// make_deepseek_grid.py's MLA and MoE shapes (q_lora_rank set and null, dense first layers,
/// shared experts, group-limited top-k, the three experts implementations), the router's top-k
/// forced as generate_moe.json's; greedy, sampling, beams 2-3; sdpa and eager; fp32 and bf16.
#[test]
fn generate_deepseek_grid_matches_transformers() {
    let doc = check_grid("pytorch_grid/generate_deepseek.json", 12, KNOWN_FAILING_DEEPSEEK);
    let ps: Vec<&Value> = doc["points"].as_array().unwrap().iter().map(|q| &q["point"]).collect();
    let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
    assert!(ps.iter().all(|p| p["model_type"] == "deepseek_v3" && p["cache"].is_null()), "deepseek_v3, DynamicCache");
    assert!(count(&|p| p["do_sample"].is_null() && p["num_beams"].is_null()) >= 4, "greedy");
    assert!(count(&|p| p["do_sample"] == true) >= 2, "sampling");
    for beams in [2, 3] {
        assert!(count(&|p| p["num_beams"] == beams) >= 1, "{beams} beams");
    }
    for (k, v) in [("attn", "sdpa"), ("attn", "eager"), ("dtype", "fp32"), ("dtype", "bf16"), ("routing", "balanced"), ("routing", "worst")] {
        assert!(count(&|p| p[k] == v) >= 3, "{k} {v}");
    }
    for b in 1..=3 {
        assert!(count(&|p| p["batch"] == b) >= 1, "batch {b}");
    }
    assert!(count(&|p| p["q_lora_rank"].is_null()) >= 1 && count(&|p| !p["q_lora_rank"].is_null()) >= 1, "q_proj and q_lora");
    let impls: std::collections::BTreeSet<String> = ps.iter().map(|p| p["experts"].to_string()).collect();
    assert_eq!(impls.len(), 3, "experts implementations");
}

/// Points of generate_sliding.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_SLIDING: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_sliding.json (`make_generate_grid.py --sliding`):
/// Mistral (12 points), Phi-3 (4) and Mixtral (4, routing forced) whose sliding window the prompt and new tokens pass, with the default DynamicCache:
/// every layer a DynamicSlidingWindowLayer (the window's last positions kept, the old states
/// freed after both cats), the sliding mask over them; the window below the prompt, crossed
/// while decoding and at the prompt; greedy, sampling, beams; sdpa and eager; fp32 and bf16.
#[test]
fn generate_sliding_grid_matches_transformers() {
    let doc = check_grid("pytorch_grid/generate_sliding.json", 12, KNOWN_FAILING_SLIDING);
    let ps: Vec<&Value> = doc["points"].as_array().unwrap().iter().map(|q| &q["point"]).collect();
    let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
    let (s, n, w) = (|p: &Value| p["seq"].as_u64().unwrap(), |p: &Value| p["max_new_tokens"].as_u64().unwrap(), |p: &Value| p["sliding_window"].as_u64().unwrap());
    assert!(ps.iter().all(|p| w(p) < s(p) + n(p)), "every point passes its window");
    assert!(count(&|p| p["model_type"] == "mistral") >= 12 && count(&|p| p["model_type"] == "phi3") >= 4, "mistral and phi3");
    assert!(count(&|p| p["model_type"] == "mixtral") >= 4, "mixtral");
    assert!(count(&|p| w(p) < s(p)) >= 4, "a prompt longer than the window");
    assert!(count(&|p| s(p) < w(p)) >= 3, "the window crossed while decoding");
    assert!(count(&|p| p["do_sample"] == true) >= 2, "sampling");
    assert!(count(&|p| p["num_beams"].as_u64().is_some_and(|b| b > 1)) >= 2, "beams");
    for attn in ["sdpa", "eager"] {
        assert!(count(&|p| p["attn"] == attn) >= 4, "{attn}");
    }
    for dtype in ["fp32", "bf16"] {
        assert!(count(&|p| p["dtype"] == dtype) >= 4, "{dtype}");
    }
    for b in 1..=3 {
        assert!(count(&|p| p["batch"] == b) >= 1, "batch {b}");
    }
}

/// Points of generate_static_families.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_STATIC_FAMILIES: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_static_families.json (`make_generate_grid.py
/// --static-families`, issue 30): `cache_implementation="static"` (disable_compile) on the models
/// generate_static_sliding.json left out. Phi-3 (its config's sliding_window), Qwen3
/// (use_sliding_window, max_window_layers 0), Mixtral (sliding_window set) and Qwen3-MoE
/// (use_sliding_window), the MoE routing forced:
/// every layer a StaticSlidingWindowLayer, the window below the prompt, crossed while decoding
/// and above everything; DeepSeek-V3: a StaticLayer per layer holding the MLA latent
/// (kv_lora_rank) and k_rot (qk_rope_head_dim), expanded over max_cache_len positions at every
/// step, one point with q, k and v of one head size (CPU's flash kernel under the static mask).
/// Greedy, sampling, beams 2-3; batch 1-3; fp32 and bf16; eager and sdpa.
#[test]
fn generate_static_families_grid_matches_transformers() {
    let doc = check_grid("pytorch_grid/generate_static_families.json", 36, KNOWN_FAILING_STATIC_FAMILIES);
    let points: Vec<&Value> = doc["points"].as_array().unwrap().iter().map(|q| &q["point"]).collect();
    assert!(points.iter().all(|p| p["cache"] == "static"), "static cache");
    for mt in ["phi3", "qwen3", "mixtral", "qwen3_moe", "deepseek_v3"] {
        let ps: Vec<&&Value> = points.iter().filter(|p| p["model_type"] == mt).collect();
        let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
        assert!(ps.len() >= 6, "{mt}: {} points", ps.len());
        assert!(count(&|p| p["do_sample"].is_null() && p["num_beams"].is_null()) >= 2, "{mt}: greedy");
        assert!(count(&|p| p["do_sample"] == true) >= 2, "{mt}: sampling");
        for beams in [2, 3] {
            assert!(count(&|p| p["num_beams"] == beams) >= 1, "{mt}: {beams} beams");
        }
        for b in 1..=3 {
            assert!(count(&|p| p["batch"] == b) >= 1, "{mt}: batch {b}");
        }
        for (k, v) in [("dtype", "fp32"), ("dtype", "bf16"), ("attn", "sdpa"), ("attn", "eager")] {
            assert!(count(&|p| p[k] == v) >= 2, "{mt}: {k} {v}");
        }
        if mt == "deepseek_v3" {
            assert!(count(&|p| p["sliding_window"].is_null()) == ps.len(), "deepseek_v3: no window");
            continue;
        }
        let (s, n, w) = (|p: &Value| p["seq"].as_u64().unwrap(), |p: &Value| p["max_new_tokens"].as_u64().unwrap(), |p: &Value| p["sliding_window"].as_u64().unwrap());
        assert!(count(&|p| w(p) < s(p)) >= 3, "{mt}: a prompt longer than the window");
        assert!(count(&|p| s(p) < w(p) && w(p) < s(p) + n(p)) >= 3, "{mt}: the window crossed while decoding");
        assert!(count(&|p| w(p) > s(p) + n(p)) >= 1, "{mt}: a window above everything");
    }
}

/// Points of generate_static_mixed.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_STATIC_MIXED: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_static_mixed.json (`make_generate_grid.py
/// --static-mixed`, issue 30): Qwen2 and Qwen3 whose `max_window_layers` (1 or 2 of 2-3 layers)
/// keeps the first layers full: a StaticLayer beside StaticSlidingWindowLayers, and
/// create_masks_for_generate's full and sliding masks (set(layer_types) order, full first under
/// the grid's PYTHONHASHSEED=0); the window below the prompt, crossed while decoding and above
/// everything; greedy, sampling, beams 2-3; fp32 and bf16; eager and sdpa.
#[test]
fn generate_static_mixed_grid_matches_transformers() {
    let doc = check_grid("pytorch_grid/generate_static_mixed.json", 14, KNOWN_FAILING_STATIC_MIXED);
    let points = doc["points"].as_array().unwrap();
    for point in points {
        let order = point["info"]["mask_order"].as_array().expect("two layer types");
        assert_eq!(order.len(), 2, "{}", point["name"]);
        assert_eq!(order[0], "full_attention", "{}", point["name"]);
    }
    for mt in ["qwen2", "qwen3"] {
        let ps: Vec<&Value> = points.iter().map(|q| &q["point"]).filter(|p| p["model_type"] == mt).collect();
        let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
        assert!(ps.len() >= 7, "{mt}: {} points", ps.len());
        assert!(ps.iter().all(|p| p["cache"] == "static" && p["max_window_layers"].as_u64().unwrap() < p["num_layers"].as_u64().unwrap()), "{mt}: static, mixed");
        let (s, n, w) = (|p: &Value| p["seq"].as_u64().unwrap(), |p: &Value| p["max_new_tokens"].as_u64().unwrap(), |p: &Value| p["sliding_window"].as_u64().unwrap());
        assert!(count(&|p| w(p) < s(p)) >= 3, "{mt}: a prompt longer than the window");
        assert!(count(&|p| s(p) < w(p) && w(p) < s(p) + n(p)) >= 3, "{mt}: the window crossed while decoding");
        assert!(count(&|p| p["do_sample"] == true) >= 2, "{mt}: sampling");
        for beams in [2, 3] {
            assert!(count(&|p| p["num_beams"] == beams) >= 1, "{mt}: {beams} beams");
        }
        for (k, v) in [("dtype", "fp32"), ("dtype", "bf16"), ("attn", "sdpa"), ("attn", "eager")] {
            assert!(count(&|p| p[k] == v) >= 2, "{mt}: {k} {v}");
        }
    }
}

/// Points of generate_qwen2_moe_sliding.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_QWEN2_MOE_SLIDING: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_qwen2_moe_sliding.json (`make_generate_grid.py
/// --qwen2-moe-sliding`, issue 30): Qwen2-MoE with `use_sliding_window`, layers 0, 2, ... below
/// `max_window_layers` sliding (a DynamicSlidingWindowLayer, or a StaticSlidingWindowLayer
/// beside the full layers' StaticLayers), the router's top-k forced as generate_moe.json's; the
/// window below the prompt, at it, crossed while decoding and above everything; max_window_layers
/// cutting the stack, above it and 0; greedy, sampling, beams; eager and sdpa; fp32 and bf16.
#[test]
fn generate_qwen2_moe_sliding_grid_matches_transformers() {
    let doc = check_grid("pytorch_grid/generate_qwen2_moe_sliding.json", 12, KNOWN_FAILING_QWEN2_MOE_SLIDING);
    let points = doc["points"].as_array().unwrap();
    let ps: Vec<&Value> = points.iter().map(|q| &q["point"]).collect();
    let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
    let u = |p: &Value, k: &str| p[k].as_u64().unwrap();
    assert!(ps.iter().all(|p| p["model_type"] == "qwen2_moe" && u(p, "sliding_window") > 0));
    let (s, n, w, l, mwl) = (|p: &Value| u(p, "seq"), |p: &Value| u(p, "max_new_tokens"), |p: &Value| u(p, "sliding_window"), |p: &Value| u(p, "num_layers"), |p: &Value| u(p, "max_window_layers"));
    assert!(count(&|p| w(p) < s(p)) >= 3, "a prompt longer than the window");
    assert!(count(&|p| w(p) == s(p)) >= 1, "the window at the prompt");
    assert!(count(&|p| s(p) < w(p) && w(p) < s(p) + n(p)) >= 3, "the window crossed while decoding");
    assert!(count(&|p| w(p) > s(p) + n(p)) >= 1, "a window above everything");
    assert!(count(&|p| mwl(p) > 0 && mwl(p) < l(p)) >= 3, "max_window_layers cutting the stack");
    assert!(count(&|p| mwl(p) == 0) >= 1, "no layer sliding");
    assert!(count(&|p| p["cache"] == "static") >= 3, "static cache");
    assert!(count(&|p| p["cache"].is_null()) >= 8, "DynamicCache");
    assert!(count(&|p| p["do_sample"] == true) >= 2 && count(&|p| p["num_beams"] == 2) >= 1, "sampling and beams");
    for (k, v) in [("attn", "sdpa"), ("attn", "eager"), ("dtype", "fp32"), ("dtype", "bf16"), ("routing", "balanced"), ("routing", "worst")] {
        assert!(count(&|p| p[k] == v) >= 3, "{k} {v}");
    }
    for b in 1..=2 {
        assert!(count(&|p| p["batch"] == b) >= 1, "batch {b}");
    }
    assert_eq!(ps.iter().map(|p| p["experts"].as_str().unwrap()).collect::<std::collections::BTreeSet<_>>().len(), 3, "experts implementations");
    // The reader's layer types: layers 0, 2, ... below max_window_layers.
    for q in points {
        let p = &q["point"];
        let cfg = grid_common::generate::config_of(q, &q["point"]);
        let want: Vec<bool> = (0..l(p)).map(|i| i % 2 == 0 && i < mwl(p)).collect();
        assert_eq!(cfg.hf.as_ref().unwrap().sliding_layers, Some(want), "{}", q["name"]);
    }
}

/// Points of generate_models_adapters.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_MODELS_ADAPTERS: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_models_adapters.json (`make_generate_grid.py
/// --adapters-models`, issue 30): generate() with peft's unmerged LoRA adapters and bitsandbytes
/// 4-bit weights (nf4/fp4, double quantization on/off, compute bf16/fp32; not prepared) on
/// Phi-3, OLMo-2, Gemma 2, Gemma 3 text, Mixtral, Qwen3-MoE, Qwen2-MoE, gpt-oss and DeepSeek-V3:
/// LoRA on the projections (Phi-3's fused ones), the MoE models' attention, Qwen2-MoE's shared
/// expert, and peft's ParamWrapper on the experts (target_parameters, or mixtral's all-linear
/// converted into them) over unquantized weights; Gemma's and gpt-oss's windows crossed; the
/// routing forced as generate_moe.json's.
#[test]
fn generate_models_adapters_grid_matches_transformers_peft_bitsandbytes() {
    let doc = check_grid("pytorch_grid/generate_models_adapters.json", 20, KNOWN_FAILING_MODELS_ADAPTERS);
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let ps: Vec<&Value> = doc["points"].as_array().unwrap().iter().map(|q| &q["point"]).collect();
    let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
    let (four, lora) = (|p: &Value| p["load_in_4bit"] == true, |p: &Value| !p["lora_r"].is_null());
    for mt in ["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"] {
        assert!(count(&|p| p["model_type"] == mt) >= 2, "{mt}: points");
        assert!(count(&|p| p["model_type"] == mt && four(p) && lora(p)) >= 1, "{mt}: 4-bit + LoRA");
        assert!(count(&|p| p["model_type"] == mt && !four(p) && lora(p)) >= 1, "{mt}: LoRA over unquantized weights");
    }
    assert!(count(&|p| four(p) && !lora(p)) >= 2, "4-bit without adapters");
    assert!(count(&|p| p["target_parameters"].is_string()) >= 4, "ParamWrapper on the experts");
    assert!(count(&|p| p["model_type"] == "mixtral" && p["target_modules"] == "all-linear") >= 1, "mixtral's all-linear converted");
    assert!(count(&|p| p["model_type"] == "qwen2_moe" && p["target_modules"].as_str().is_some_and(|t| t.contains("gate_proj"))) >= 1, "qwen2_moe's shared expert");
    for (k, v) in [("quant_type", "nf4"), ("quant_type", "fp4"), ("compute_dtype", "bf16"), ("compute_dtype", "fp32")] {
        assert!(count(&|p| four(p) && p[k] == v) >= 2, "4-bit {k} {v}");
    }
    let (s, n) = (|p: &Value| p["seq"].as_u64().unwrap(), |p: &Value| p["max_new_tokens"].as_u64().unwrap());
    for mt in ["gemma2", "gemma3_text", "gpt_oss"] {
        assert!(count(&|p| p["model_type"] == mt && p["sliding_window"].as_u64().is_some_and(|w| s(p) < w && w < s(p) + n(p))) >= 1, "{mt}: the window crossed while decoding");
    }
    assert!(count(&|p| p["do_sample"] == true) >= 2 && count(&|p| p["num_beams"].as_u64().is_some_and(|b| b > 1)) >= 2, "sampling and beams");
    assert!(count(&|p| p["cache"] == "static") >= 6, "static cache");
    for b in 1..=3 {
        assert!(count(&|p| p["batch"] == b) >= 1, "batch {b}");
    }
    // Only peft's ParamWrapper points miss (what vramscope refuses with generate).
    for (name, _) in KNOWN_FAILING_MODELS_ADAPTERS {
        let point = doc["points"].as_array().unwrap().iter().find(|q| q["name"] == *name).expect("a known failing point of the fixture");
        assert!(point["point"]["target_parameters"].is_string(), "{name}");
    }
    // The static points' masks, full first (the order vramscope models; PYTHONHASHSEED=0).
    for point in doc["points"].as_array().unwrap() {
        if let Some(order) = point["info"]["mask_order"].as_array().filter(|o| o.len() > 1) {
            assert_eq!(order[0], "full_attention", "{}", point["name"]);
        }
    }
}

/// Points of generate_models_extras.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_MODELS_EXTRAS: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_models_extras.json (`make_generate_grid.py
/// --adapters-extras`): generate() on issue 30's nine models with peft's other LoRA options over
/// unquantized weights: `bias` all and lora_only, DoRA (`use_dora`) and `modules_to_save`
/// (lm_head, embed_tokens), on generate_models_adapters.json's builders (windows crossed, the
/// routing forced).
#[test]
fn generate_models_extras_grid_matches_transformers_peft() {
    let doc = check_grid("pytorch_grid/generate_models_extras.json", 18, KNOWN_FAILING_MODELS_EXTRAS);
    assert_eq!(doc["peft"].as_str(), Some("0.21.2"), "the fixture's peft");
    let ps: Vec<&Value> = doc["points"].as_array().unwrap().iter().map(|q| &q["point"]).collect();
    let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
    let saves = |p: &Value, m: &str| p["modules_to_save"].as_str().is_some_and(|s| s.split(',').any(|x| x == m));
    for mt in ["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"] {
        assert!(count(&|p| p["model_type"] == mt && p["use_dora"] == true) >= 1, "{mt}: DoRA");
        assert!(count(&|p| p["model_type"] == mt && p["lora_bias"].is_string()) >= 1, "{mt}: lora bias");
    }
    for bias in ["all", "lora_only"] {
        assert!(count(&|p| p["lora_bias"] == bias) >= 4, "lora bias {bias}");
    }
    assert!(count(&|p| saves(p, "lm_head")) >= 4 && count(&|p| saves(p, "embed_tokens")) >= 3, "modules_to_save");
    assert!(count(&|p| p["model_type"] == "gemma2" && saves(p, "lm_head")) >= 1, "modules_to_save of a tied lm_head");
    // gpt-oss's and Qwen2-MoE's attention biases made trainable by bias "all"
    for mt in ["gpt_oss", "qwen2_moe"] {
        assert!(count(&|p| p["model_type"] == mt && p["lora_bias"] == "all") >= 1, "{mt}: bias all");
    }
    let (s, n) = (|p: &Value| p["seq"].as_u64().unwrap(), |p: &Value| p["max_new_tokens"].as_u64().unwrap());
    for mt in ["gemma2", "gemma3_text", "gpt_oss"] {
        assert!(count(&|p| p["model_type"] == mt && p["sliding_window"].as_u64().is_some_and(|w| s(p) < w && w < s(p) + n(p))) >= 1, "{mt}: the window crossed while decoding");
    }
    assert!(count(&|p| p["do_sample"] == true) >= 2 && count(&|p| p["num_beams"].as_u64().is_some_and(|b| b > 1)) >= 2, "sampling and beams");
    assert!(count(&|p| p["cache"] == "static") >= 2, "static cache");
    for b in 1..=3 {
        assert!(count(&|p| p["batch"] == b) >= 1, "batch {b}");
    }
    assert!(count(&|p| p["dtype"] == "fp32") >= 4 && count(&|p| p["dtype"] == "bf16") >= 4, "fp32 and bf16");
}

/// Points of generate_models_int8.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_MODELS_INT8: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_models_int8.json (`make_generate_grid.py
/// --adapters-int8`): generate() on issue 30's models over LLM.int8() weights (load_in_8bit,
/// thresholds 0 and 6; CUDA's MatMul8bitLt run on CPU, its outputs counted) and after peft's
/// prepare_model_for_kbit_training over 4-bit and 8-bit weights, with and without LoRA.
#[test]
fn generate_models_int8_grid_matches_transformers_peft_bitsandbytes() {
    let doc = check_grid("pytorch_grid/generate_models_int8.json", 8, KNOWN_FAILING_MODELS_INT8);
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let ps: Vec<&Value> = doc["points"].as_array().unwrap().iter().map(|q| &q["point"]).collect();
    let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
    let (eight, four, lora) = (|p: &Value| p["load_in_8bit"] == true, |p: &Value| p["load_in_4bit"] == true, |p: &Value| !p["lora_r"].is_null());
    // (qwen2_moe and deepseek_v3 have no 8-bit load vramscope models: lora_targets::check_new_models)
    for mt in ["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "gpt_oss"] {
        assert!(count(&|p| p["model_type"] == mt && eight(p)) >= 1, "{mt}: 8-bit");
    }
    for mt in ["phi3", "olmo2", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"] {
        assert!(count(&|p| p["model_type"] == mt) >= 1, "{mt}: points");
    }
    for t in [0.0, 6.0] {
        assert!(count(&|p| eight(p) && p["llm_int8_threshold"].as_f64() == Some(t)) >= 2, "threshold {t}");
    }
    assert!(count(&|p| eight(p) && lora(p)) >= 3 && count(&|p| eight(p) && !lora(p)) >= 2, "8-bit with and without LoRA");
    assert!(count(&|p| eight(p) && p["prepare"] == true) >= 2 && count(&|p| four(p) && p["prepare"] == true) >= 4, "prepared 4-bit and 8-bit");
    assert!(count(&|p| p["prepare"] == true && !lora(p)) >= 2, "prepared without adapters");
    for point in doc["points"].as_array().unwrap().iter().filter(|q| eight(&q["point"])) {
        assert_eq!(point["info"]["int8_outlier_columns"], 0, "{}", point["name"]);
    }
}

/// Points of generate_dense_extras.json where vramscope does not match, each with the reason.
const KNOWN_FAILING_DENSE_EXTRAS: &[(&str, &str)] = &[];

/// tests/fixtures/pytorch_grid/generate_dense_extras.json (`make_generate_grid.py
/// --dense-extras`): generate() on llama, mistral, qwen2 and qwen3 with peft's `bias` (all,
/// lora_only), DoRA and `modules_to_save` over unquantized weights, and LLM.int8() weights
/// (thresholds 0 and 6, unprepared and prepared, with and without LoRA).
#[test]
fn generate_dense_extras_grid_matches_transformers_peft_bitsandbytes() {
    let doc = check_grid("pytorch_grid/generate_dense_extras.json", 10, KNOWN_FAILING_DENSE_EXTRAS);
    assert_eq!((doc["peft"].as_str(), doc["bitsandbytes"].as_str()), (Some("0.21.2"), Some("0.50.2")), "the fixture's releases");
    let ps: Vec<&Value> = doc["points"].as_array().unwrap().iter().map(|q| &q["point"]).collect();
    let count = |f: &dyn Fn(&Value) -> bool| ps.iter().filter(|p| f(p)).count();
    for mt in ["llama", "mistral", "qwen2", "qwen3"] {
        assert!(count(&|p| p["model_type"] == mt && p["load_in_8bit"] == true) >= 1, "{mt}: 8-bit");
        assert!(count(&|p| p["model_type"] == mt && (p["use_dora"] == true || p["modules_to_save"].is_string() || p["lora_bias"].is_string())) >= 1, "{mt}: peft's options");
    }
    assert!(count(&|p| p["use_dora"] == true) >= 3 && count(&|p| p["modules_to_save"].is_string()) >= 3, "DoRA and modules_to_save");
    for bias in ["all", "lora_only"] {
        assert!(count(&|p| p["lora_bias"] == bias) >= 2, "lora bias {bias}");
    }
    assert!(count(&|p| p["model_type"] == "qwen2" && p["lora_bias"] == "all") >= 1, "qwen2's attention biases trainable");
    assert!(count(&|p| p["load_in_8bit"] == true && p["prepare"] == true) >= 2, "prepared 8-bit");
    for point in doc["points"].as_array().unwrap().iter().filter(|q| q["point"]["load_in_8bit"] == true) {
        assert_eq!(point["info"]["int8_outlier_columns"], 0, "{}", point["name"]);
    }
}
