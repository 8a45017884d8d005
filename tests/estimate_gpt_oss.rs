//! `vramscope estimate` on gpt-oss (issue 30): the closed form of src/analyse/estimate/hf/gpt_oss.rs
//! (attention sinks, alternating sliding and full layers, the biased router, the clamped SwiGLU
//! experts with biases) against the simulated meta run of transformers 5.23's op sequence
//! (itself byte-exact against transformers in tests/gptoss_grid.rs): the three experts
//! implementations, balanced, worst and a file's routing, hidden and expert sizes, 4–16
//! experts, top-k 1–4, a window below and above the context, B and S, fp32 and pure bf16,
//! checkpointing (none, non-reentrant, reentrant), use_cache, GQA and MHA, a tied head, and
//! layer types (all sliding, all full). Everything the estimate states exactly (parameters,
//! gradients, optimizer state, logits, activations and the live set when the forward returns)
//! must equal the simulation byte for byte; the training peak is the lower bound
//! tests/estimate_hf.rs states. What is not derived is refused, naming the flag and `profile`.
mod scratch;
mod estimate_common;

use serde_json::json;
use vramscope::model::hf::moe::{ExpertsImplementation, Routing};
use vramscope::model::{Checkpoint, ModelConfig};
use vramscope::train::optim::OptimizerKind;
use vramscope::train::Precision;

#[derive(Clone, Debug)]
struct Point {
    d: usize,
    /// One expert's width.
    i: usize,
    experts: usize,
    top_k: usize,
    window: usize,
    implementation: ExpertsImplementation,
    routing: Routing,
    precision: Precision,
    /// None, non-reentrant (false) or reentrant (true).
    ckpt: Option<bool>,
    cache: bool,
    kv_heads: usize,
    tied: bool,
    layers: usize,
    /// `layer_types` (None: the default, sliding on even layers).
    layer_types: Option<&'static str>,
    b: usize,
    s: usize,
    /// peft's LoRA on the attention: (r, dropout, target modules).
    lora: Option<(usize, f64, &'static [&'static str])>,
    /// peft's ParamWrapper (`target_parameters`), with `lora`'s r (its targets may be empty).
    params: &'static [&'static str],
    /// QLoRA: (double quant, bnb_4bit_compute_dtype, prepare_model_for_kbit_training), loaded
    /// in bf16.
    four_bit: Option<(bool, vramscope::engine::DType, bool)>,
    /// LLM.int8(): prepare_model_for_kbit_training, loaded in bf16.
    int8: Option<bool>,
    /// peft's `bias` (none, all, lora_only).
    lora_bias: vramscope::model::lora::LoraBias,
    /// peft's modules_to_save (embed_tokens, lm_head).
    saves: &'static [&'static str],
    /// The config's attention_bias (gpt-oss's default: on).
    attention_bias: bool,
    /// output_router_logits: the router's auxiliary loss.
    aux: bool,
}

fn base() -> Point {
    Point {
        d: 128,
        i: 96,
        experts: 6,
        top_k: 2,
        window: 16,
        implementation: ExpertsImplementation::GroupedMm,
        routing: Routing::Balanced,
        precision: Precision::Fp32,
        ckpt: None,
        cache: true,
        kv_heads: 2,
        tied: false,
        layers: 3,
        layer_types: None,
        b: 2,
        s: 40,
        lora: None,
        params: &[],
        four_bit: None,
        int8: None,
        lora_bias: vramscope::model::lora::LoraBias::None,
        saves: &[],
        attention_bias: true,
        aux: false,
    }
}

/// The point's config.json, read by vramscope's reader, with the run's options set.
fn config(p: &Point) -> ModelConfig {
    let mut c = json!({
        "model_type": "gpt_oss", "hidden_size": p.d, "intermediate_size": p.i, "num_hidden_layers": p.layers,
        "num_attention_heads": 4, "num_key_value_heads": p.kv_heads, "head_dim": p.d / 4, "vocab_size": 300,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": p.tied, "use_cache": p.cache,
        "num_local_experts": p.experts, "num_experts_per_tok": p.top_k, "sliding_window": p.window,
        "attention_bias": p.attention_bias,
    });
    if let Some(t) = p.layer_types {
        let kind = if t == "sliding" { "sliding_attention" } else { "full_attention" };
        c["layer_types"] = json!(vec![kind; p.layers]);
    }
    let mut cfg = vramscope::model::hf::parse(&c.to_string()).unwrap().config;
    if p.ckpt.is_some() {
        cfg.checkpoint = Checkpoint::Every(1);
    }
    let hf = cfg.hf.as_mut().unwrap();
    hf.reentrant = p.ckpt == Some(true);
    hf.lora = p.lora.map(|(r, dropout, targets)| estimate_common::lora(r, dropout, targets));
    if let Some(lc) = hf.lora.as_mut() {
        lc.target_parameters = p.params.iter().map(|t| t.to_string()).collect();
        lc.bias = p.lora_bias;
        lc.modules_to_save = p.saves.iter().map(|m| m.to_string()).collect();
    }
    if let Some((double_quant, compute_dtype, prepare)) = p.four_bit {
        use vramscope::model::bnb::{kernel_for, Bnb, Bnb4bit, Quant};
        let q = Bnb4bit { quant_type: "nf4".into(), double_quant, compute_dtype, kernel: kernel_for(None), quant_storage: vramscope::engine::DType::U8 };
        hf.bnb = Some(Bnb { quant: Quant::FourBit(q), load_dtype: vramscope::engine::DType::BF16, prepare });
    }
    if let Some(prepare) = p.int8 {
        use vramscope::model::bnb::{Bnb, Int8, Quant};
        let q = Int8 { threshold: 6.0, kernel: vramscope::engine::ops::int8::Int8Kernel::Cuda };
        hf.bnb = Some(Bnb { quant: Quant::Int8(q), load_dtype: vramscope::engine::DType::BF16, prepare });
    }
    let m = hf.moe.as_mut().unwrap();
    m.implementation = p.implementation;
    m.routing = p.routing.clone();
    m.output_router_logits = p.aux;
    cfg
}

/// Compares one point; returns the simulated training peak over the closed form's bound.
fn check(p: &Point) -> f64 {
    let cfg = config(p);
    // RoPE's inv_freq and original_inv_freq (d_h/2 fp32 each); double quantization's
    // process-wide 256-entry fp32 map.
    let buffers = 2 * (cfg.head_dim() as u64 / 2) * 4 + if p.four_bit.is_some_and(|q| q.0) { 256 * 4 } else { 0 };
    estimate_common::compare_moe(&cfg, p.precision, p.b, p.s, &format!("{p:?}"), |_| buffers)
}

fn run(points: &[Point], limit: f64) {
    estimate_common::run_points(points, limit, check);
}

/// The grid: the three experts implementations × fp32/pure bf16 × balanced/worst routing over
/// four shapes (hidden, expert width, experts, top-k) with the window below or above the
/// context; then checkpointing × use_cache × B and S; a routing file under each
/// implementation; MHA with a tied head; layer types all sliding and all full.
fn grid() -> Vec<Point> {
    let shapes = [(128, 96, 4, 1, 16), (64, 48, 8, 2, 64), (128, 64, 6, 3, 8), (64, 96, 16, 4, 128)];
    let mut points = Vec::new();
    let mut n = 0;
    for implementation in ExpertsImplementation::ALL {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            for routing in [Routing::Balanced, Routing::Worst] {
                let (d, i, experts, top_k, window) = shapes[n % shapes.len()];
                n += 1;
                points.push(Point { implementation, precision, routing, d, i, experts, top_k, window, ..base() });
            }
        }
    }
    for ckpt in [None, Some(false), Some(true)] {
        for cache in [true, false] {
            for (b, s) in [(1, 24), (3, 40)] {
                let implementation = ExpertsImplementation::ALL[(b + usize::from(cache)) % 3];
                let precision = if b == 1 { Precision::PureBf16 } else { Precision::Fp32 };
                points.push(Point { ckpt, cache, b, s, implementation, precision, routing: Routing::Worst, ..base() });
            }
        }
    }
    for implementation in ExpertsImplementation::ALL {
        let p = base();
        points.push(Point { routing: estimate_common::skewed(p.b * p.s, 3, 8), top_k: 3, experts: 8, implementation, ..p });
    }
    for implementation in ExpertsImplementation::ALL {
        points.push(Point { kv_heads: 4, tied: true, top_k: 4, experts: 4, implementation, ..base() });
    }
    for (layer_types, ckpt, cache) in [("sliding", None, true), ("full", None, true), ("sliding", Some(false), false), ("full", Some(true), false)] {
        points.push(Point { layer_types: Some(layer_types), ckpt, cache, layers: 2, ..base() });
    }
    points.push(Point { precision: Precision::PureBf16, ckpt: Some(false), implementation: ExpertsImplementation::BatchedMm, ..base() });
    points.push(Point { layers: 1, cache: true, implementation: ExpertsImplementation::Eager, ..base() });
    points
}

/// peft's LoRA on the attention (the router and experts frozen): target sets (each of q, k, v
/// alone, all four), dropout, fp32 and pure bf16, each experts implementation, with and
/// without the cache, checkpointing, GQA and MHA.
fn lora_grid() -> Vec<Point> {
    const ALL: &[&str] = &["q_proj", "k_proj", "v_proj", "o_proj"];
    let sets: [&'static [&'static str]; 5] = [&["q_proj", "v_proj"], &["q_proj"], &["k_proj"], &["v_proj"], ALL];
    let mut points = Vec::new();
    for (n, targets) in sets.into_iter().enumerate() {
        for implementation in ExpertsImplementation::ALL {
            for precision in [Precision::Fp32, Precision::PureBf16] {
                let cache = (n + usize::from(precision == Precision::PureBf16)) % 2 == 0;
                points.push(Point { lora: Some((8, 0.0, targets)), implementation, precision, cache, routing: Routing::Worst, ..base() });
            }
        }
    }
    for (ckpt, dropout, kv_heads, implementation) in [
        (Some(false), 0.0, 2, ExpertsImplementation::GroupedMm),
        (Some(true), 0.1, 4, ExpertsImplementation::Eager),
        (None, 0.1, 2, ExpertsImplementation::BatchedMm),
        (None, 0.0, 4, ExpertsImplementation::GroupedMm),
        (Some(false), 0.0, 4, ExpertsImplementation::BatchedMm),
    ] {
        points.push(Point { lora: Some((4, dropout, ALL)), ckpt, cache: ckpt.is_none(), kv_heads, implementation, ..base() });
        points.push(Point { lora: Some((16, dropout, &["o_proj"])), ckpt, kv_heads, implementation, precision: Precision::PureBf16, ..base() });
    }
    points
}

/// peft's ParamWrapper (`--target-parameters`) on gpt-oss's router (`mlp.router.weight`, its
/// bias frozen) and its `is_transposed` experts: every subset of the three parameters, alone
/// and with LoRA on the attention, each experts implementation, fp32 and pure bf16 (the folds'
/// bf16 factors), balanced and worst routing, shapes, r, checkpointing (both kinds), the cache,
/// GQA and MHA, and sliding, full and alternating layers. Layer 0's input needs no gradient:
/// only what the folds need is kept there.
fn params_grid() -> Vec<Point> {
    const GU: &str = "mlp.experts.gate_up_proj";
    const DN: &str = "mlp.experts.down_proj";
    const R: &str = "mlp.router.weight";
    let sets: [&'static [&'static str]; 7] = [&[GU, DN], &[R], &[GU], &[DN], &[R, GU, DN], &[R, DN], &[R, GU]];
    let modules: [&'static [&'static str]; 3] = [&[], &["q_proj", "v_proj"], &["o_proj"]];
    let shapes = [(128, 96, 4, 1, 16), (64, 48, 8, 2, 64), (128, 64, 6, 3, 8), (64, 96, 16, 4, 128)];
    let mut points = Vec::new();
    let mut n = 0;
    for params in sets {
        for implementation in ExpertsImplementation::ALL {
            let precision = if n % 2 == 0 { Precision::Fp32 } else { Precision::PureBf16 };
            let routing = if n % 3 == 0 { Routing::Balanced } else { Routing::Worst };
            let (d, i, experts, top_k, window) = shapes[n % shapes.len()];
            let ckpt = [None, None, Some(false), None, Some(true)][n % 5];
            let r = [8, 4, 16][n % 3];
            let kv_heads = if n % 4 == 3 { 4 } else { 2 };
            let layer_types = [None, Some("sliding"), None, Some("full")][n % 4];
            n += 1;
            points.push(Point { lora: Some((r, 0.0, modules[n % 3])), params, implementation, precision, routing, d, i, experts, top_k, window, ckpt, cache: ckpt.is_none() && n % 2 == 0, kv_heads, layer_types, ..base() });
        }
    }
    points.push(Point { lora: Some((8, 0.0, &[])), params: &[R, GU, DN], layers: 4, b: 3, s: 17, ..base() });
    // One layer: nothing keeps the RoPE tables.
    points.push(Point { lora: Some((8, 0.0, &[])), params: &[R, DN], layers: 1, precision: Precision::PureBf16, ..base() });
    points.push(Point { lora: Some((8, 0.0, &["q_proj", "k_proj", "v_proj", "o_proj"])), params: &[GU], precision: Precision::PureBf16, layers: 2, implementation: ExpertsImplementation::Eager, tied: true, ..base() });
    points
}

/// peft's ParamWrapper under autocast: the grid above under bf16 autocast over fp32 weights (the
/// fp32 points; every fourth under fp16) and over bf16 weights (the pure bf16 points).
#[test]
fn gpt_oss_target_parameters_autocast_closed_form_equals_the_simulation() {
    let points: Vec<Point> = params_grid()
        .into_iter()
        .enumerate()
        .map(|(n, p)| {
            let precision = match p.precision {
                Precision::PureBf16 => Precision::PureBf16Autocast,
                _ if n % 4 == 0 => Precision::Fp16,
                _ => Precision::Bf16,
            };
            Point { precision, ..p }
        })
        .collect();
    assert!(points.len() >= 12);
    let (grouped, cast): (Vec<Point>, Vec<Point>) = points.into_iter().partition(|p| p.implementation == ExpertsImplementation::GroupedMm);
    run(&grouped, 1.5);
    run(&cast, 2.6);
}

#[test]
fn gpt_oss_target_parameters_closed_form_equals_the_simulation() {
    let points = params_grid();
    assert!(points.len() >= 20);
    run(&points, 1.5);
}

/// peft's `bias` ("all", "lora_only") on gpt-oss (measured: hf_grid/lora_extras_models.json):
/// `all` trains the attention's q/k/v/o biases and the router's (`mlp.router.bias`; the experts'
/// `gate_up_proj_bias`/`down_proj_bias` are not named `*.bias`), `lora_only` the adapted
/// projections' and, under a ParamWrapper on `mlp.router.weight`, the router's. A trained bias
/// makes its output need a gradient even in layer 0 (the router's: the routing weights, so the
/// weighting keeps the experts' output). Every other LoRA point under both options, ParamWrapper
/// points (router, experts), attention_bias off (the router's bias alone before the experts'
/// folds), the optimizers.
#[test]
fn gpt_oss_lora_bias_closed_form_equals_the_simulation() {
    use vramscope::model::lora::LoraBias;
    const R: &str = "mlp.router.weight";
    const DN: &str = "mlp.experts.down_proj";
    let mut points = Vec::new();
    for (n, p) in lora_grid().into_iter().enumerate().filter(|(n, _)| n % 2 == 0) {
        let lora_bias = if n % 4 == 0 { LoraBias::All } else { LoraBias::LoraOnly };
        points.push(Point { lora_bias, ..p });
    }
    for (n, (lora_bias, params, modules)) in [
        (LoraBias::LoraOnly, &[R][..], &[][..]),
        (LoraBias::LoraOnly, &[DN], &["q_proj"]),
        (LoraBias::All, &[R, DN], &[]),
        (LoraBias::All, &[DN], &["o_proj"]),
    ]
    .into_iter()
    .enumerate()
    {
        let implementation = ExpertsImplementation::ALL[n % 3];
        let precision = if n % 2 == 0 { Precision::Fp32 } else { Precision::PureBf16 };
        points.push(Point { lora_bias, lora: Some((8, 0.0, modules)), params, implementation, precision, routing: Routing::Worst, ..base() });
    }
    // attention_bias off, the attention without adapters: in layer 0 only the router's bias
    // makes anything need a gradient before the experts' folds.
    for (n, implementation) in ExpertsImplementation::ALL.into_iter().enumerate() {
        let params: &'static [&'static str] = if n == 1 { &["mlp.experts.gate_up_proj"] } else { &[DN] };
        points.push(Point { lora_bias: LoraBias::All, attention_bias: false, lora: Some((8, 0.0, &[])), params, implementation, ..base() });
    }
    points.push(Point { lora_bias: LoraBias::All, attention_bias: false, lora: Some((8, 0.0, &["v_proj"])), layers: 2, ..base() });
    points.push(Point { lora_bias: LoraBias::All, lora: Some((8, 0.0, &["q_proj"])), ckpt: Some(true), cache: false, precision: Precision::PureBf16, ..base() });
    assert!(points.len() >= 12);
    run(&points, 1.6);
    for kind in [OptimizerKind::AdamwTorch, OptimizerKind::Sgd, OptimizerKind::AdamwTorchFused] {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            let p = Point { lora_bias: LoraBias::All, lora: Some((8, 0.0, &["q_proj", "v_proj"])), precision, ..base() };
            estimate_common::compare_optimizer(&config(&p), precision, p.b, p.s, kind, &format!("{p:?} {kind:?}"));
        }
    }
}

/// The router's auxiliary loss beside peft's LoRA and 4-bit QLoRA on gpt-oss, as profile runs it
/// (moe_grid/aux_loss_lora.json): adapters on the attention and on the router's weight
/// (ParamWrapper), nf4 with compute bf16 and fp32, prepared and not; fp32 and pure bf16,
/// checkpointing off, non-reentrant and reentrant.
#[test]
fn gpt_oss_aux_loss_with_adapters_closed_form_equals_the_simulation() {
    use vramscope::engine::DType;
    const ATT: &[&str] = &["q_proj", "k_proj", "v_proj", "o_proj"];
    let mut points = Vec::new();
    for (n, (ckpt, precision)) in [(None, Precision::Fp32), (Some(false), Precision::PureBf16), (Some(true), Precision::Fp32)].into_iter().enumerate() {
        let implementation = ExpertsImplementation::ALL[n % 3];
        points.push(Point { aux: true, lora: Some((8, 0.0, &["q_proj", "v_proj"])), ckpt, precision, implementation, ..base() });
        points.push(Point { aux: true, lora: Some((4, 0.0, ATT)), params: &["mlp.router.weight"], ckpt, precision, implementation, ..base() });
        points.push(Point { aux: true, lora: Some((8, 0.0, &["q_proj"])), params: &["mlp.experts.gate_up_proj", "mlp.experts.down_proj"], ckpt, precision, implementation, ..base() });
    }
    for (four_bit, ckpt) in [((true, DType::BF16, true), Some(true)), ((false, DType::F32, false), None), ((true, DType::F32, true), Some(false))] {
        points.push(Point { aux: true, lora: Some((16, 0.0, ATT)), four_bit: Some(four_bit), ckpt, precision: Precision::PureBf16, ..base() });
    }
    assert!(points.len() >= 9);
    run(&points, 2.6);
}

/// The router's auxiliary loss (`output_router_logits`, measured: moe_grid/aux_loss.json and
/// aux_loss_autocast.json) on gpt-oss: every layer's biased router logits, (B·S, E) in the
/// linear's type (bf16 under autocast), held in the output until the forward returns, exact;
/// the experts implementations × fp32/pure bf16/autocast bf16 over shapes and windows,
/// checkpointing × use_cache, fp16 autocast, bf16 autocast over bf16 weights, layer types.
#[test]
fn gpt_oss_aux_loss_closed_form_equals_the_simulation() {
    let shapes = [(128, 96, 4, 1, 16), (64, 48, 8, 2, 64), (128, 64, 6, 3, 8), (64, 96, 16, 4, 128)];
    let mut points = Vec::new();
    let mut n = 0;
    for implementation in ExpertsImplementation::ALL {
        for precision in [Precision::Fp32, Precision::PureBf16, Precision::Bf16] {
            let (d, i, experts, top_k, window) = shapes[n % shapes.len()];
            let routing = if n % 2 == 0 { Routing::Balanced } else { Routing::Worst };
            n += 1;
            points.push(Point { aux: true, implementation, precision, routing, d, i, experts, top_k, window, ..base() });
        }
    }
    for (ckpt, cache) in [(Some(false), false), (Some(true), false), (None, false)] {
        points.push(Point { aux: true, ckpt, cache, b: 3, s: 24, ..base() });
    }
    points.push(Point { aux: true, precision: Precision::Fp16, layer_types: Some("full"), ..base() });
    points.push(Point { aux: true, precision: Precision::PureBf16Autocast, implementation: ExpertsImplementation::Eager, ..base() });
    points.push(Point { aux: true, kv_heads: 4, tied: true, layers: 2, layer_types: Some("sliding"), ..base() });
    assert!(points.len() >= 12);
    run(&points, 2.6);
}

#[test]
fn gpt_oss_lora_closed_form_equals_the_simulation() {
    run(&lora_grid(), 1.35);
}

/// QLoRA on gpt-oss: the attention's biased linears 4-bit (their biases in the compute
/// dtype), the sinks, router and experts frozen in the load dtype (fp32 after
/// prepare_model_for_kbit_training): nf4 ± double quant, compute dtype fp32/bf16, with and
/// without prepare, each experts implementation, checkpointing, B, S, r and targets.
#[test]
fn gpt_oss_qlora_closed_form_equals_the_simulation() {
    use vramscope::engine::DType;
    const ALL: &[&str] = &["q_proj", "k_proj", "v_proj", "o_proj"];
    let mut points = Vec::new();
    let mut n = 0;
    for (dq, compute, prepare) in [(false, DType::F32, true), (true, DType::BF16, true), (true, DType::F32, false), (false, DType::BF16, false)] {
        let precision = if prepare { Precision::Fp32 } else { Precision::PureBf16 };
        for ckpt in [None, Some(false), Some(true)] {
            let implementation = ExpertsImplementation::ALL[n % 3];
            let (b, s, r) = [(2, 40, 8), (1, 24, 16), (3, 17, 4)][n % 3];
            let targets: &'static [&'static str] = if n % 2 == 0 { ALL } else { &["q_proj", "v_proj"] };
            let dropout = if n % 4 == 3 { 0.1 } else { 0.0 };
            n += 1;
            points.push(Point { four_bit: Some((dq, compute, prepare)), lora: Some((r, dropout, targets)), precision, ckpt, cache: ckpt.is_none(), implementation, b, s, ..base() });
        }
    }
    run(&points, 1.8);
}

/// LLM.int8() on gpt-oss: the attention's biased linears 8-bit (int8 weights, an fp32 SCB per
/// row, the biases in the load dtype), each MatMul8bitLt keeping its input (the non-reentrant
/// checkpoint cannot reach it), the sinks, router and experts frozen in the load dtype: with
/// and without prepare_model_for_kbit_training, each experts implementation, checkpointing, the
/// cache, B, S, r, targets and dropout.
#[test]
fn gpt_oss_int8_closed_form_equals_the_simulation() {
    const ALL: &[&str] = &["q_proj", "k_proj", "v_proj", "o_proj"];
    let mut points = Vec::new();
    let mut n = 0;
    for prepare in [true, false] {
        let precision = if prepare { Precision::Fp32 } else { Precision::PureBf16 };
        for ckpt in [None, Some(false), Some(true)] {
            let implementation = ExpertsImplementation::ALL[n % 3];
            let (b, s, r) = [(2, 40, 8), (1, 24, 16), (3, 17, 4)][n % 3];
            let targets: &'static [&'static str] = if n % 2 == 0 { ALL } else { &["q_proj", "v_proj"] };
            let dropout = if n % 4 == 3 { 0.1 } else { 0.0 };
            n += 1;
            points.push(Point { int8: Some(prepare), lora: Some((r, dropout, targets)), precision, ckpt, cache: ckpt.is_none(), implementation, b, s, ..base() });
        }
        points.push(Point { int8: Some(prepare), lora: Some((8, 0.0, &["o_proj"])), precision, cache: false, ..base() });
        points.push(Point { int8: Some(prepare), lora: Some((8, 0.0, ALL)), precision, routing: Routing::Worst, kv_heads: 4, s: 12, ..base() });
        points.push(Point { int8: Some(prepare), lora: Some((4, 0.0, ALL)), precision, ckpt: Some(false), layer_types: Some("full"), tied: true, b: 1, s: 33, ..base() });
    }
    run(&points, 1.8);
}

/// Autocast over fp32 weights (the Trainer's bf16=True, and fp16=True): the router's biased
/// linear and the attention's bf16, the fp32 mask promoting the sinks' softmax (its key columns
/// copied to the values' bf16), grouped_mm in fp32, batched_mm's bmm and eager's matmuls
/// keeping low casts (eager's weight slices per expert hit, uncached); the three experts
/// implementations × shapes, balanced, worst and a file's routing, checkpointing (none,
/// non-reentrant, reentrant), use_cache, B and S, GQA and MHA, a tied head, layer types and
/// the window below and above the context.
#[test]
fn gpt_oss_autocast_closed_form_equals_the_simulation() {
    let shapes = [(128, 96, 4, 1, 16), (64, 48, 8, 2, 64), (128, 64, 6, 3, 8), (64, 96, 16, 4, 128)];
    let mut points = Vec::new();
    let mut n = 0;
    for ckpt in [None, Some(false), Some(true)] {
        for (b, s) in [(1, 24), (3, 40)] {
            for implementation in ExpertsImplementation::ALL {
                let (d, i, experts, top_k, window) = shapes[n % shapes.len()];
                let routing = if n % 2 == 0 { Routing::Balanced } else { Routing::Worst };
                let kv_heads = if n % 3 == 0 { 4 } else { 2 };
                // bf16 autocast over fp32 and bf16 weights, fp16 over fp32.
                let precision = [Precision::Bf16, Precision::PureBf16Autocast, Precision::Bf16, Precision::Fp16][n % 4];
                n += 1;
                points.push(Point { precision, ckpt, cache: ckpt.is_none() && n % 2 == 0, b, s, d, i, experts, top_k, window, routing, kv_heads, tied: n % 5 == 0, implementation, ..base() });
            }
        }
    }
    for implementation in ExpertsImplementation::ALL {
        let p = base();
        points.push(Point { precision: Precision::Bf16, routing: estimate_common::skewed(p.b * p.s, 3, 8), top_k: 3, experts: 8, implementation, ..p });
    }
    for (layer_types, ckpt, cache) in [("sliding", None, true), ("full", None, false), ("full", Some(true), false)] {
        points.push(Point { precision: Precision::Bf16, layer_types: Some(layer_types), ckpt, cache, layers: 2, ..base() });
        points.push(Point { precision: Precision::PureBf16Autocast, layer_types: Some(layer_types), ckpt, cache, layers: 2, ..base() });
    }
    assert!(points.len() >= 12);
    // batched_mm's and eager's peak falls in the forward, where the gathered fp32 expert
    // weights (or each hit expert's casts) live beside what the bound counts.
    let (grouped, cast): (Vec<Point>, Vec<Point>) = points.into_iter().partition(|p| p.implementation == ExpertsImplementation::GroupedMm);
    run(&grouped, 1.35);
    run(&cast, 2.1);
}

#[test]
fn gpt_oss_closed_form_equals_the_simulation() {
    let points = grid();
    assert!(points.len() >= 24);
    run(&points, 1.35);
}

/// The optimizers the closed form derives, over gpt-oss's registration order (the sinks, the
/// router's weight and bias, the 3-D experts and their 2-D biases, which Adafactor factors):
/// state and gradients equal the simulation's, and the training peak lies above the bound.
#[test]
fn gpt_oss_optimizers() {
    for precision in [Precision::Fp32, Precision::PureBf16] {
        for kind in [OptimizerKind::AdamwTorch, OptimizerKind::AdamwTorchFused, OptimizerKind::AdamwTorchForloop, OptimizerKind::Sgd, OptimizerKind::Adafactor] {
            for implementation in [ExpertsImplementation::GroupedMm, ExpertsImplementation::Eager] {
                let p = Point { precision, b: 1, s: 32, implementation, ..base() };
                let cfg = config(&p);
                estimate_common::compare_optimizer(&cfg, precision, p.b, p.s, kind, &format!("{precision:?} {kind:?} {implementation:?}"));
            }
        }
    }
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).arg("estimate").args(args).output().unwrap()
}

/// Through the CLI: a gpt_oss config.json estimates with the JSON's activations equal to the
/// simulated ones under each experts implementation and routing; gpt-oss-20b and -120b state
/// their closed form at S 4096, equal to their simulated meta run.
#[test]
fn gpt_oss_estimate_cli() {
    let dir = scratch::dir().join(format!("vramscope-estimate-gpt-oss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("e.json");
    let cfg = dir.join("gpt_oss.json");
    std::fs::write(&cfg, r#"{"model_type": "gpt_oss", "hidden_size": 128, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 16}"#)
    .unwrap();
    let counts = dir.join("counts.txt");
    // 2 × 24 tokens × top-2 = 96 routed rows, one expert taking every token.
    std::fs::write(&counts, "48 8 8 8 8 8 4 4").unwrap();
    for (implementation, routing) in [("grouped_mm", "balanced"), ("batched_mm", "worst"), ("eager", counts.to_str().unwrap())] {
        let o = cli(&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--experts-implementation", implementation, "--routing", routing, "--json", json.to_str().unwrap()]);
        assert!(o.status.success(), "{implementation} {routing}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        for needle in ["transformers 5.23.0 gpt_oss", &format!("experts_implementation {implementation}"), "softmax over the top-k logits", "its sink column", "h (sinks)", "DynamicSlidingWindowLayer window tensors"] {
            assert!(text.contains(needle), "{implementation}: missing {needle:?} in\n{text}");
        }
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        estimate_common::assert_json_activations(&v, &format!("{implementation} {routing}"));
    }
    // peft's bias: the attention's and the router's biases train beside the adapters (stated,
    // and equal to the simulation; the trainable count in the parameters' formula).
    for bias in ["all", "lora_only"] {
        let o = cli(&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--lora-r", "8", "--target-modules", "q_proj", "--target-parameters", "mlp.router.weight", "--lora-bias", bias, "--json", json.to_str().unwrap()]);
        assert!(o.status.success(), "bias {bias}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("bias elements"), "bias {bias}: no trained biases stated");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        estimate_common::assert_json_activations(&v, &format!("bias {bias}"));
        for k in ["param_bytes", "grad_bytes", "optimizer_bytes"] {
            let sim = k.replace("param_", "parameter_").replace("grad_", "gradient_");
            assert_eq!(v["estimate"][k], v["simulated"][sim.as_str()], "bias {bias}: {k}");
        }
    }
    // bf16 autocast over the fp32 weights: the casts in the block, the router's in the cache;
    // over bf16 weights (the Trainer's bf16=True on a bf16 checkpoint) nothing is cast.
    for (implementation, dtype) in [("batched_mm", "float32"), ("eager", "float32"), ("grouped_mm", "bfloat16")] {
        let o = cli(&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--dtype", dtype, "--precision", "bf16", "--experts-implementation", implementation, "--json", json.to_str().unwrap()]);
        assert!(o.status.success(), "autocast {implementation}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        let needles: &[&str] = if dtype == "float32" { &["the probabilities' key columns cast to bf16", "E·d + E (router)", "cast to bf16 (the"] } else { &["bf16 autocast around forward and loss over bf16 weights", "no fp32 leaf to cast"] };
        for needle in needles {
            assert!(text.contains(needle), "autocast {implementation}: missing {needle:?} in\n{text}");
        }
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        estimate_common::assert_json_activations(&v, &format!("autocast {implementation}"));
    }
    // LoRA on the attention: block 0 its own, the adapters in the parameters.
    let o = cli(&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "lora: {}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for needle in ["block 0 (", "q_proj lora_A output", "LoRA A and B"] {
        assert!(text.contains(needle), "lora: missing {needle:?} in\n{text}");
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let e = &v["estimate"];
    let terms = |b: &serde_json::Value| b.as_array().unwrap().iter().map(|t| t["elements"].as_u64().unwrap() * t["elem"].as_u64().unwrap()).sum::<u64>();
    let blocks = terms(&e["first_block"]) + (e["layers"].as_u64().unwrap() - 1) * terms(&e["block"]);
    assert_eq!(blocks + terms(&e["outside"]), v["simulated"]["activation_bytes"].as_u64().unwrap(), "lora");
    // fit searches meta runs of gpt-oss (worst routing unless told).
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["fit", "--find", "batch", "--config", cfg.to_str().unwrap(), "--context-length", "32", "--memory-limit", "64MiB", "--reserve", "0", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "fit: {}", String::from_utf8_lossy(&o.stderr));
    let fit: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(fit["config"]["hf"]["moe"]["routing"], "worst", "{fit}");
    assert!(fit["answer"].as_u64().unwrap() >= 1, "{fit}");
    // (Their bf16 weights, and under the Trainer's bf16=True over them and over fp32 masters.)
    for (preset, needle, precision) in [
        ("gpt-oss-20b", "E 32 experts of width I 2880, top-k 4", &[][..]),
        ("gpt-oss-120b", "E 128 experts of width I 2880, top-k 4", &[][..]),
        ("gpt-oss-20b", "E 32 experts of width I 2880, top-k 4", &["--precision", "bf16"][..]),
        ("gpt-oss-20b", "E 32 experts of width I 2880, top-k 4", &["--dtype", "float32", "--precision", "bf16"][..]),
    ] {
        let o = cli(&[&["--preset", preset, "--batch-size", "1", "--context-length", "4096", "--json", json.to_str().unwrap()][..], precision].concat());
        assert!(o.status.success(), "{preset} {precision:?}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(needle) && text.contains("gpt_oss"), "{preset}: missing {needle:?} in\n{text}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        estimate_common::assert_json_activations(&v, preset);
    }
    // peft's ParamWrapper on the router and the experts, in fp32, pure bf16 and under bf16
    // autocast, without and with LoRA on the attention: block 0 its own.
    for extra in [
        &["--target-parameters", "mlp.router.weight,mlp.experts.gate_up_proj", "--experts-implementation", "eager"][..],
        &["--target-parameters", "mlp.experts.down_proj", "--target-modules", "q_proj", "--dtype", "bfloat16"][..],
        &["--target-parameters", "mlp.router.weight,mlp.experts.down_proj", "--experts-implementation", "eager", "--dtype", "float32", "--precision", "bf16"][..],
    ] {
        let o = cli(&[&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--lora-r", "8", "--json", json.to_str().unwrap()][..], extra].concat());
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("the ParamWrapper's fold") && text.contains("block 0 ("), "{extra:?}: missing the fold or block 0 in\n{text}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        estimate_common::assert_json_activations(&v, &format!("{extra:?}"));
    }
    // LoRA under bf16 autocast over bf16 weights: block 0 its own, the adapters' casts cached.
    let o = cli(&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--dtype", "bfloat16", "--precision", "bf16", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "lora autocast: {}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("fp32 leaves over bf16 weights"), "lora autocast: {text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let e = &v["estimate"];
    let terms = |b: &serde_json::Value| b.as_array().unwrap().iter().map(|t| t["elements"].as_u64().unwrap() * t["elem"].as_u64().unwrap()).sum::<u64>();
    let blocks = terms(&e["first_block"]) + (e["layers"].as_u64().unwrap() - 1) * terms(&e["block"]);
    assert_eq!(blocks + terms(&e["outside"]), v["simulated"]["activation_bytes"].as_u64().unwrap(), "lora autocast");
    assert_eq!(e["autocast_cache_bytes"].as_u64(), v["simulated"]["autocast_cache_bytes"].as_u64(), "lora autocast");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the closed form does not derive of gpt-oss exits 2, naming the flag and pointing at
/// `profile` (or, for autocast, at the weights' dtype), writing nothing.
#[test]
fn gpt_oss_not_derived_is_refused_naming_the_flag() {
    let dir = scratch::dir().join(format!("vramscope-estimate-gpt-oss-refusals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("counts.txt");
    // gpt-oss-20b's 32 experts, 320 rows for 64 tokens × top-4 = 256.
    std::fs::write(&bad, vec!["10"; 32].join(" ")).unwrap();
    let json = dir.join("never.json");
    let g = ["--preset", "gpt-oss-20b", "--batch-size", "1", "--context-length", "64", "--no-simulate", "--json", json.to_str().unwrap()];
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        ([&g[..], &["--attn-implementation", "sdpa"]].concat(), "--attn-implementation", "eager"),
        ([&g[..], &["--routing", bad.to_str().unwrap()]].concat(), "--routing", "add up to"),
        // generate runs within the window (tests/estimate_generate_families.rs); beam search is not derived.
        ([&g[..], &["--profile-type", "generate", "--max-new-tokens", "4", "--num-beams", "2"]].concat(), "--num-beams", "greedy search"),
    ];
    for (args, flag, what) in cases {
        let o = cli(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag) && err.contains(what), "{args:?}: {err}");
        assert!(!json.exists(), "{args:?} wrote {}", json.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// peft's LoRA under bf16 autocast over bf16 weights (the Trainer's bf16=True on the bf16
/// checkpoint): the LoRA grid above in that precision. Nothing frozen is cast (the weights
/// are bf16 leaves); lora_A keeps the bf16 cast of peft's fp32 input copy and the cache holds
/// the adapters' casts, as on the dense models.
#[test]
fn gpt_oss_lora_pure_autocast_closed_form_equals_the_simulation() {
    let points: Vec<Point> = lora_grid().into_iter().map(|p| Point { precision: Precision::PureBf16Autocast, ..p }).collect();
    run(&points, 1.40);
}

/// Through the CLI: LLM.int8() with LoRA on the attention states its closed form, block 0 its
/// own, equal to the simulated activations, gradients and optimizer state.
#[test]
fn gpt_oss_int8_estimate_cli() {
    estimate_common::assert_int8_lora_cli("gpt-oss-20b");
}

/// Pure fp16 weights (a float16 checkpoint, no autocast): the pure bf16 points of the grids
/// above (with and without LoRA) over fp16 parameters: pure bf16's terms, byte for byte.
#[test]
fn gpt_oss_pure_fp16_closed_form_equals_the_simulation() {
    let fp16 = |p: Point| Point { precision: Precision::PureFp16, ..p };
    let points: Vec<Point> = grid().into_iter().chain(lora_grid()).filter(|p| p.precision == Precision::PureBf16).map(fp16).collect();
    assert!(points.len() >= 12, "{} points", points.len());
    run(&points, 1.8);
}

/// peft's LoRA under autocast over fp32 weights (the Trainer's bf16=True / fp16=True on an fp32
/// load): the LoRA grid above under bf16 (fp16 on every third point). Each frozen linear whose
/// input needs a gradient keeps its weight's uncached low cast (q/k/v/o_proj, the router,
/// lm_head); under peft the attention's matmuls keep an operand only for the other's gradient
/// (layer 0's, whose input needs none, keeps less); the cache holds the adapters' casts.
#[test]
fn gpt_oss_lora_autocast_closed_form_equals_the_simulation() {
    let points: Vec<Point> = lora_grid().into_iter().enumerate().map(|(n, p)| Point { precision: if n % 3 == 2 { Precision::Fp16 } else { Precision::Bf16 }, ..p }).collect();
    // batched_mm's and eager's gathered and cast expert weights are forward transients the
    // bound leaves out, large beside LoRA's activations (as in tests/estimate_moe.rs).
    let (grouped, cast): (Vec<Point>, Vec<Point>) = points.into_iter().partition(|p| p.implementation == ExpertsImplementation::GroupedMm);
    run(&grouped, 1.35);
    run(&cast, 2.4);
}

/// Through the CLI: LoRA under the Trainer's bf16=True over fp32 weights states its closed form,
/// block 0 its own, equal to the simulated activations and autocast cache.
#[test]
fn gpt_oss_lora_autocast_estimate_cli() {
    let dir = scratch::dir().join(format!("vramscope-estimate-gpt-oss-lora-autocast-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("e.json");
    let o = cli(&["--model", "gpt-oss-20b", "--num-layers", "2", "--hidden-dim", "128", "--num-heads", "4", "--num-kv-heads", "2", "--vocab-size", "300", "--batch-size", "2", "--context-length", "24", "--dtype", "float32", "--precision", "bf16", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("weight cast to bf16 (uncached: frozen"), "{}", String::from_utf8_lossy(&o.stdout));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let e = &v["estimate"];
    let bytes = |t: &serde_json::Value| t.as_array().unwrap().iter().map(|t| t["elements"].as_u64().unwrap() * t["elem"].as_u64().unwrap()).sum::<u64>();
    let blocks = bytes(&e["first_block"]) + (e["layers"].as_u64().unwrap() - 1) * bytes(&e["block"]);
    assert_eq!(blocks + bytes(&e["outside"]), v["simulated"]["activation_bytes"].as_u64().unwrap());
    assert_eq!(e["autocast_cache_bytes"], v["simulated"]["autocast_cache_bytes"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// peft's modules_to_save (embed_tokens, lm_head, both; measured: hf_grid/lora_extras_models.json)
/// on gpt-oss in the weights' type (profile refuses it under autocast): the trained copies, their
/// gradients and optimizer state; embed_tokens' copy makes layer 0's input need a gradient,
/// lm_head's keeps its input. Every other point of the LoRA grid under each set.
#[test]
fn gpt_oss_modules_to_save_closed_form_equals_the_simulation() {
    let sets: [&'static [&'static str]; 3] = [&["embed_tokens"], &["lm_head"], &["embed_tokens", "lm_head"]];
    let mut points = Vec::new();
    for (n, p) in lora_grid().into_iter().enumerate().filter(|(n, _)| n % 2 == 0) {
        points.push(Point { saves: sets[n / 2 % 3], ..p });
    }
    assert!(points.len() >= 12, "{} points", points.len());
    run(&points, 1.6);
}
