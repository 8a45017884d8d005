//! `estimate --profile-type generate` on issue 30's models: the DynamicCache's closed form
//! (src/analyse/estimate/generate.rs) and the peak's lower bound
//! (src/analyse/estimate/generate_peak.rs's `lower_bound`) against the simulated meta
//! `generate()` (src/model/hf/generation_5_23.rs, byte-exact against transformers in
//! tests/generate_grid.rs). The points are the measured generate grids' own (their configs,
//! batch, prompt and new tokens, fp32/bf16, eager/sdpa, greedy and sampling, the experts
//! implementations and balanced/worst routing) with the DynamicCache and one beam, each also
//! at a larger batch, prompt and new-token count: Phi-3 and OLMo-2 (generate_families.json),
//! Mixtral, Qwen3-MoE and Qwen2-MoE (generate_moe.json), DeepSeek-V3 (generate_deepseek.json:
//! its cache holds MLA's latent and k_rot), Gemma 2/3 and gpt-oss (generate_gemma.json,
//! generate_gpt_oss.json, their sliding layers' window set at or above the prompt and new
//! tokens, which the closed form requires). The cache after the prefill, at the end and its
//! high-water mark must equal the simulation's byte for byte; the peak lies at or above the
//! bound, within a stated factor.
mod grid_common;
use serde_json::Value;
use vramscope::analyse::estimate::generate::{check, estimate, past_window};
use vramscope::analyse::estimate::generate_peak::{covers, lower_bound};
use vramscope::engine::DType;
use vramscope::session::estimate_generate::simulate;

/// Compares one (B, S, N) of a point; returns the simulated peak over the bound.
/// `gpu`: a GPU run (generate decodes grouped_mm experts with batched_mm there).
fn compare(point: &Value, p: &Value, (b, s, n): (usize, usize, usize), gpu: bool) -> f64 {
    let mut cfg = grid_common::generate::config_of(point, p);
    cfg.hf.as_mut().unwrap().cpu_run = !gpu;
    let name = format!("{} B {b} S {s} N {n}{}", point["name"].as_str().unwrap(), if gpu { " gpu" } else { "" });
    let loaded = if p["dtype"] == "bf16" { DType::BF16 } else { DType::F32 };
    // A 4-bit model's unquantized parameters: fp32 once prepared, else the load type.
    let dtype = cfg.hf().and_then(|h| h.bnb.as_ref()).map_or(loaded, |q| q.unquantized_dtype());
    let gc = grid_common::generate::generate_config_of(p, n);
    let rows = b * gc.num_return_sequences;
    check(&cfg, s, n).unwrap_or_else(|e| panic!("{name}: refused: {e}"));
    let e = estimate(&cfg, dtype.size() as u64, rows, s, n);
    let sim = simulate(&cfg, dtype, b, s, &gc).unwrap();
    assert_eq!(e.kv_cache_bytes, sim.kv_cache_bytes, "{name}: the cache at the end");
    assert_eq!(e.kv_cache_peak_bytes, sim.kv_cache_peak_bytes, "{name}: the cache's high-water mark");
    let once = simulate(&cfg, dtype, b, s, &grid_common::generate::generate_config_of(p, 1)).unwrap();
    assert_eq!(e.kv_cache_prefill_bytes, once.kv_cache_bytes, "{name}: the cache after the prefill");
    // The peak: the closed form does not derive these model types exactly, nor a dense model's
    // forward past its window; its bound holds.
    assert!(covers(&cfg, dtype, &gc).is_some() || past_window(&cfg, s, n), "{name}: covered");
    let bound = lower_bound(&cfg, dtype, sim.parameter_bytes, b, s, &gc);
    assert!(bound.bytes <= sim.peak_bytes, "{name}: bound {} above the simulated peak {}: {:#?}", bound.bytes, sim.peak_bytes, bound.candidates);
    assert!(bound.bytes >= sim.parameter_bytes + e.kv_cache_bytes, "{name}: the bound holds the weights and the cache");
    let r = sim.peak_bytes as f64 / bound.bytes as f64;
    if std::env::var_os("VRAMSCOPE_GAP").is_some() {
        eprintln!("{r:.3} {name} {:?} | sim {} {} {} {} | bound {} {} {}", p["experts"], sim.peak_bytes, sim.peak_step, sim.peak_scope, sim.peak_op, bound.bytes, bound.step, bound.op);
    }
    r
}

/// `compare` over many runs: every failure kept (a panic's message), the worst peak / bound.
#[derive(Default)]
struct Tally {
    worst: f64,
    count: usize,
    failed: Vec<String>,
}

impl Tally {
    fn check(&mut self, point: &Value, q: &Value, shape: (usize, usize, usize), gpu: bool) {
        match std::panic::catch_unwind(|| compare(point, q, shape, gpu)) {
            Ok(r) => self.worst = self.worst.max(r),
            Err(e) => self.failed.push(e.downcast_ref::<String>().cloned().unwrap_or_else(|| format!("{} {shape:?}: panicked", point["name"]))),
        }
        self.count += 1;
    }

    /// Every run matched, and the simulated peak stayed under `limit` × the bound.
    fn assert_within(&self, limit: f64) {
        assert!(self.failed.is_empty(), "{} of {} points differ:\n{}", self.failed.len(), self.count, self.failed.join("\n"));
        assert!(self.worst < limit, "simulated peak up to {:.3}× the closed form's lower bound", self.worst);
    }
}

/// A fixture point's runs: its own (B, S, N) and a larger one (grouped_mm experts there also
/// as a GPU run when `gpu`), a window the point has set at S + N (+ 5 for the larger), as
/// `run` sets it.
fn runs(p: &Value, gpu: bool) -> Vec<(Value, (usize, usize, usize), bool)> {
    let num = |k: &str| grid_common::hf::num(p, k);
    let (b, s, n) = (num("batch"), num("seq"), num("max_new_tokens"));
    let big = (b + 1, 2 * s + 3, 3 * n + 2);
    [(0, (b, s, n), false), (1, big, false), (1, big, true)]
        .into_iter()
        .filter(|&(_, _, on_gpu)| !on_gpu || gpu && p["experts"] == "grouped_mm")
        .map(|(i, shape, on_gpu)| {
            let mut q = p.clone();
            if q["sliding_window"].as_u64().is_some() {
                q["sliding_window"] = (shape.1 + shape.2 + 5 * i).into();
            }
            (q, shape, on_gpu)
        })
        .collect()
}

/// The DynamicCache points of `fixture` for `types` (one beam), each at its own (B, S, N) and
/// at a larger one (grouped_mm experts there also as a GPU run); with `window`, each sliding window set to S + N (the closed form's edge:
/// the cache ends at window − 1 positions) and the larger run's above it (Phi-3's and
/// Mixtral's larger runs also with a window on every layer at S + N). Every failing point
/// is reported; the peak stays within `limit` × the bound.
fn run(fixture: &str, types: &[&str], window: bool, limit: f64) {
    let doc = grid_common::fixture(fixture);
    let mut t = Tally::default();
    let mut seen = std::collections::BTreeSet::new();
    for point in doc["points"].as_array().unwrap() {
        let p = &point["point"];
        if !types.contains(&p["model_type"].as_str().unwrap()) || p["cache"] == "static" || p["num_beams"].as_u64().is_some_and(|k| k > 1) {
            continue;
        }
        let num = |k: &str| grid_common::hf::num(p, k);
        let (b, s, n) = (num("batch"), num("seq"), num("max_new_tokens"));
        // grouped_mm experts also as a GPU run: generate decodes them with batched_mm there.
        // Phi-3 and Mixtral also with a window on every layer, at the prompt and new tokens.
        let big = (b + 1, 2 * s + 3, 3 * n + 2);
        for (i, shape, gpu, slide) in [(0, (b, s, n), false, window), (1, big, false, window), (1, big, true, window), (0, big, false, true)] {
            if gpu && p["experts"] != "grouped_mm" || slide && !window && !matches!(p["model_type"].as_str(), Some("phi3" | "mixtral")) {
                continue;
            }
            let mut q = p.clone();
            if slide {
                q["sliding_window"] = (shape.1 + shape.2 + 5 * i).into();
            }
            t.check(point, &q, shape, gpu);
            seen.insert((p["model_type"].to_string(), p["attn"].to_string(), p["dtype"].to_string()));
        }
    }
    t.assert_within(limit);
    assert!(t.count >= 12 * types.len(), "{} points", t.count);
    for t in types {
        for dtype in ["fp32", "bf16"] {
            assert!(seen.iter().any(|(m, _, d)| m.trim_matches('"') == *t && d.trim_matches('"') == dtype), "{t}: {dtype}");
        }
    }
    println!("{fixture}: {} points of {types:?}; the simulated peak at most {:.3}× the bound", t.count, t.worst);
}

#[test]
fn phi3_and_olmo2() {
    run("pytorch_grid/generate_families.json", &["phi3", "olmo2"], false, 1.25);
}

#[test]
fn mixtral_qwen3_moe_and_qwen2_moe() {
    run("pytorch_grid/generate_moe.json", &["mixtral", "qwen3_moe", "qwen2_moe"], false, 1.4);
}

/// The bound leaves out sdpa's math kernel, which PyTorch's CPU falls back to for v's head
/// size unlike q's (its fp32 scores and softmax): up to 2× there, as estimate_moe.rs allows.
#[test]
fn deepseek_v3() {
    run("pytorch_grid/generate_deepseek.json", &["deepseek_v3"], false, 2.1);
}

#[test]
fn gemma_under_the_window() {
    run("pytorch_grid/generate_gemma.json", &["gemma2", "gemma3_text"], true, 1.2);
}

#[test]
fn gpt_oss_under_the_window() {
    run("pytorch_grid/generate_gpt_oss.json", &["gpt_oss"], true, 1.4);
}

/// Past the sliding window (DynamicSlidingWindowLayer keeps a view of the last window − 1
/// positions of each update's cat, which holds the cat's storage: min(S + step, w) positions):
/// the DynamicCache points of the measured window grids (Mistral, Phi-3 and Mixtral's every
/// layer sliding, generate_sliding.json; Qwen2-MoE's layers below max_window_layers,
/// generate_qwen2_moe_sliding.json; Gemma 2/3's and gpt-oss's sliding layers beside full ones)
/// at their own window and (B, S, N), then at a larger (B, S, N) under windows shorter than the
/// prompt (the prefill's S positions above every later window), equal to it, and of 2. The
/// cache after the prefill, at the end and its high-water mark equal the simulation's; the peak
/// lies at or above the bound.
#[test]
fn past_the_window() {
    let mut t = Tally::default();
    let mut past = 0;
    let mut seen = std::collections::BTreeSet::new();
    for (fixture, types) in [
        ("pytorch_grid/generate_sliding.json", &["mistral", "phi3", "mixtral"][..]),
        ("pytorch_grid/generate_qwen2_moe_sliding.json", &["qwen2_moe"][..]),
        ("pytorch_grid/generate_gemma.json", &["gemma2", "gemma3_text"][..]),
        ("pytorch_grid/generate_gpt_oss.json", &["gpt_oss"][..]),
    ] {
        let doc = grid_common::fixture(fixture);
        for point in doc["points"].as_array().unwrap() {
            let p = &point["point"];
            if !types.contains(&p["model_type"].as_str().unwrap()) || p["cache"] == "static" || p["num_beams"].as_u64().is_some_and(|k| k > 1) {
                continue;
            }
            let num = |k: &str| grid_common::hf::num(p, k);
            let (b, s, n) = (num("batch"), num("seq"), num("max_new_tokens"));
            let big = (b + 1, 2 * s + 3, 3 * n + 2);
            for (shape, w) in [((b, s, n), None), (big, Some(big.1 - 1)), (big, Some(big.1)), (big, Some(2))] {
                let mut q = p.clone();
                if let Some(w) = w {
                    q["sliding_window"] = w.into();
                }
                let cfg = grid_common::generate::config_of(point, &q);
                past += usize::from(past_window(&cfg, shape.1, shape.2));
                t.check(point, &q, shape, false);
                seen.insert(p["model_type"].as_str().unwrap().to_string());
            }
        }
    }
    t.assert_within(2.1);
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert!(past >= 40, "{past} of {} points pass the window", t.count);
    println!("{} points ({past} past the window); the simulated peak at most {:.3}× the bound", t.count, t.worst);
}

/// peft's unmerged LoRA adapters and bitsandbytes' 4-bit weights (nf4/fp4, double quantization,
/// compute bf16/fp32, prepared or not, with and without adapters) on the dense llama, mistral,
/// qwen2 and qwen3 (generate_qlora.json's points, eval mode), each at its own (B, S, N) and at
/// larger ones: the cache equals the simulation's (in the unquantized parameters' type), and
/// the peak lies above the lower bound (the weights the model's; the adapters' and
/// dequantization's per-step transients above it).
#[test]
fn lora_and_qlora() {
    let doc = grid_common::fixture("pytorch_grid/generate_qlora.json");
    let mut t = Tally::default();
    let (mut adapters, mut four_bit) = (0, 0);
    for point in doc["points"].as_array().unwrap() {
        let p = &point["point"];
        let num = |k: &str| grid_common::hf::num(p, k);
        let (b, s, n) = (num("batch"), num("seq"), num("max_new_tokens"));
        for shape in [(b, s, n), (b + 1, 2 * s + 3, 3 * n + 2), (1, s + 7, 2 * n + 1)] {
            t.check(point, p, shape, false);
            adapters += usize::from(!p["lora_r"].is_null());
            four_bit += usize::from(p["load_in_4bit"] == true);
        }
    }
    t.assert_within(2.1);
    assert!(t.count >= 60 && adapters >= 40 && four_bit >= 40, "{} points, {adapters} with adapters, {four_bit} 4-bit", t.count);
    println!("{} points ({adapters} with adapters, {four_bit} 4-bit); the simulated peak at most {:.3}× the bound", t.count, t.worst);
}

/// peft's unmerged LoRA on the nn.Linear modules and bitsandbytes' 4-bit weights (unprepared)
/// on issue 30's nine models (generate_models_adapters.json's DynamicCache points with one beam;
/// peft's ParamWrapper on the experts too), each at its own (B, S, N) and at a larger one (grouped_mm
/// experts there also as a GPU run), a sliding window set at S + N as `run` sets it: the cache
/// equals the simulation's (in the unquantized parameters' type), and the peak lies above the
/// lower bound (the weights the model's; the adapters' and dequantization's per-step
/// transients above it).
#[test]
fn adapters_and_4bit_on_issue_30s_models() {
    let doc = grid_common::fixture("pytorch_grid/generate_models_adapters.json");
    let mut t = Tally::default();
    let mut seen = std::collections::BTreeSet::new();
    for point in doc["points"].as_array().unwrap() {
        let p = &point["point"];
        if p["cache"] == "static" || p["num_beams"].as_u64().is_some_and(|k| k > 1) {
            continue;
        }
        for (q, shape, gpu) in runs(p, true) {
            t.check(point, &q, shape, gpu);
            seen.insert(p["model_type"].as_str().unwrap().to_string());
        }
    }
    t.assert_within(2.1);
    assert_eq!(seen.len(), 9, "{seen:?}");
    assert!(t.count >= 40, "{} points", t.count);
    println!("{} points of {} models; the simulated peak at most {:.3}× the bound", t.count, seen.len(), t.worst);
}

/// peft's prepare_model_for_kbit_training over 4-bit weights on issue 30's models
/// (generate_models_int8.json's prepared 4-bit DynamicCache points with one beam: Gemma 3,
/// Qwen2-MoE, gpt-oss, DeepSeek-V3), at their own (B, S, N) and a larger one: the fp32 cache
/// equals the simulation's and the peak lies above the lower bound. (Their 8-bit points:
/// `peft_extras_and_8bit`.)
#[test]
fn prepared_4bit_on_issue_30s_models() {
    let doc = grid_common::fixture("pytorch_grid/generate_models_int8.json");
    let mut t = Tally::default();
    let mut seen = std::collections::BTreeSet::new();
    for point in doc["points"].as_array().unwrap() {
        let p = &point["point"];
        if p["load_in_4bit"] != true || p["cache"] == "static" || p["num_beams"].as_u64().is_some_and(|k| k > 1) {
            continue;
        }
        assert_eq!(p["prepare"], true, "{}", point["name"]);
        for (q, shape, gpu) in runs(p, false) {
            t.check(point, &q, shape, gpu);
            seen.insert(p["model_type"].as_str().unwrap().to_string());
        }
    }
    t.assert_within(2.1);
    assert!(seen.len() >= 4 && t.count >= 8, "{} points of {seen:?}", t.count);
    println!("{} points of {} models; the simulated peak at most {:.3}× the bound", t.count, seen.len(), t.worst);
}

/// peft's `bias` (all, lora_only), `modules_to_save` (embed_tokens, lm_head: a trained copy
/// beside the frozen original) and DoRA over unquantized weights, and LLM.int8() weights with
/// plain LoRA or none, prepared or not (generate_models_extras.json, generate_models_int8.json's
/// 8-bit points, generate_dense_extras.json: the DynamicCache points with one beam), on the
/// dense llama, mistral, qwen2, qwen3 and issue 30's models, each at its own (B, S, N) and at
/// a larger one (grouped_mm experts there also as a GPU run), a sliding window set at S + N as
/// `run` sets it: the cache equals the simulation's (in the unquantized parameters' type), and
/// the peak lies above the lower bound (the weights the model's, the copies included; the
/// adapters', weight norms' and int8 matmuls' per-step transients above it).
#[test]
fn peft_extras_and_8bit() {
    let mut t = Tally::default();
    let (mut bias, mut saves, mut dora, mut int8) = (0, 0, 0, 0);
    let mut seen = std::collections::BTreeSet::new();
    for fixture in ["pytorch_grid/generate_models_extras.json", "pytorch_grid/generate_models_int8.json", "pytorch_grid/generate_dense_extras.json"] {
        let doc = grid_common::fixture(fixture);
        for point in doc["points"].as_array().unwrap() {
            let p = &point["point"];
            if p["cache"] == "static" || p["num_beams"].as_u64().is_some_and(|k| k > 1) || p["load_in_4bit"] == true {
                continue;
            }
            for (q, shape, gpu) in runs(p, true) {
                t.check(point, &q, shape, gpu);
                bias += usize::from(p["lora_bias"].is_string());
                saves += usize::from(p["modules_to_save"].is_string());
                dora += usize::from(p["use_dora"] == true);
                int8 += usize::from(p["load_in_8bit"] == true);
                seen.insert(p["model_type"].as_str().unwrap().to_string());
            }
        }
    }
    t.assert_within(2.1);
    assert!(seen.len() >= 12, "{seen:?}");
    assert!(bias >= 20 && saves >= 15 && dora >= 10 && int8 >= 15, "{} points: bias {bias}, modules_to_save {saves}, DoRA {dora}, 8-bit {int8}", t.count);
    println!("{} points of {} models (bias {bias}, modules_to_save {saves}, DoRA {dora}, 8-bit {int8}); the simulated peak at most {:.3}× the bound", t.count, seen.len(), t.worst);
}
