//! `vramscope estimate` on mixture-of-experts models (issue 30): the closed form of the sparse
//! block (src/analyse/estimate/hf/moe.rs) against the simulated meta run of transformers
//! 5.23's op sequence (itself byte-exact against transformers in tests/moe_grid.rs), over
//! mixtral, qwen3_moe (norm_topk_prob on and off) and qwen2_moe (its shared expert): the three
//! experts implementations, balanced, worst and a file's routing, hidden and expert sizes,
//! 4–16 experts, top-k 1–4, B and S, fp32, pure bf16, autocast over fp32 and bf16 weights,
//! peft's LoRA and its ParamWrapper on the router and experts (`--target-parameters`), both
//! under autocast too, checkpointing, use_cache, eager and sdpa attention. Everything the estimate states exactly (parameters, gradients, optimizer
//! state, the autocast cache, logits, activations and the live set when the forward returns)
//! must equal the simulation byte for byte; the training peak is the lower bound
//! tests/estimate_hf.rs states. What is not derived is refused, naming the flag and `profile`.
mod scratch;
mod estimate_common;

use serde_json::json;
use vramscope::model::hf::moe::{ExpertsImplementation, Routing};
use vramscope::model::hf::{AttnImplementation, SdpaBackend};
use vramscope::model::{Checkpoint, ModelConfig};
use vramscope::train::optim::OptimizerKind;
use vramscope::train::Precision;

#[derive(Clone, Debug)]
struct Point {
    model_type: &'static str,
    d: usize,
    /// One expert's width.
    i: usize,
    experts: usize,
    top_k: usize,
    /// Qwen2-MoE's shared expert width.
    shared: usize,
    norm_topk_prob: bool,
    implementation: ExpertsImplementation,
    routing: Routing,
    attn: AttnImplementation,
    backend: SdpaBackend,
    precision: Precision,
    /// None, non-reentrant (false) or reentrant (true).
    ckpt: Option<bool>,
    cache: bool,
    kv_heads: usize,
    tied: bool,
    b: usize,
    s: usize,
    /// peft's LoRA: (r, dropout, target modules); the router and experts frozen.
    lora: Option<(usize, f64, &'static [&'static str])>,
    /// peft's ParamWrapper (`target_parameters`), with `lora`'s r (its targets may be empty).
    params: &'static [&'static str],
    /// peft's conversion doubled gate_up_proj's rank (both halves named).
    doubled: bool,
    /// peft's `bias` (none, all, lora_only).
    bias: vramscope::model::lora::LoraBias,
    /// QLoRA: (double quant, bnb_4bit_compute_dtype, prepare_model_for_kbit_training), loaded
    /// in bf16.
    four_bit: Option<(bool, vramscope::engine::DType, bool)>,
    /// LLM.int8(): prepare_model_for_kbit_training, loaded in bf16.
    int8: Option<bool>,
    /// Qwen2-MoE's use_sliding_window: (sliding_window, max_window_layers).
    window: Option<(usize, usize)>,
    /// peft's modules_to_save (embed_tokens, lm_head).
    saves: &'static [&'static str],
    layers: usize,
    /// output_router_logits: the router's auxiliary loss.
    aux: bool,
}

fn base(model_type: &'static str) -> Point {
    Point {
        model_type,
        d: 128,
        i: 96,
        experts: 6,
        top_k: 2,
        shared: if model_type == "qwen2_moe" { 160 } else { 0 },
        norm_topk_prob: model_type == "qwen3_moe",
        implementation: ExpertsImplementation::GroupedMm,
        routing: Routing::Balanced,
        attn: AttnImplementation::Eager,
        backend: SdpaBackend::Auto,
        precision: Precision::Fp32,
        ckpt: None,
        cache: true,
        kv_heads: 2,
        tied: false,
        b: 2,
        s: 40,
        lora: None,
        params: &[],
        doubled: false,
        bias: vramscope::model::lora::LoraBias::None,
        four_bit: None,
        int8: None,
        window: None,
        saves: &[],
        layers: 2,
        aux: false,
    }
}

/// The point's config.json, read by vramscope's reader, with the run's options set.
fn config(p: &Point) -> ModelConfig {
    let mut c = json!({
        "model_type": p.model_type, "hidden_size": p.d, "intermediate_size": p.i, "num_hidden_layers": p.layers,
        "num_attention_heads": 4, "num_key_value_heads": p.kv_heads, "head_dim": p.d / 4, "vocab_size": 300,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": p.tied, "use_cache": p.cache,
        "num_experts_per_tok": p.top_k,
    });
    let o = c.as_object_mut().unwrap();
    if p.model_type == "mixtral" {
        o.insert("num_local_experts".into(), json!(p.experts));
    } else {
        o.insert("num_experts".into(), json!(p.experts));
        o.insert("moe_intermediate_size".into(), json!(p.i));
        o.insert("norm_topk_prob".into(), json!(p.norm_topk_prob));
    }
    if p.model_type == "qwen2_moe" {
        o.insert("shared_expert_intermediate_size".into(), json!(p.shared));
    }
    if let Some((w, mwl)) = p.window {
        o.insert("use_sliding_window".into(), json!(true));
        o.insert("sliding_window".into(), json!(w));
        o.insert("max_window_layers".into(), json!(mwl));
    }
    let mut cfg = vramscope::model::hf::parse(&c.to_string()).unwrap().config;
    if p.ckpt.is_some() {
        cfg.checkpoint = Checkpoint::Every(1);
    }
    let hf = cfg.hf.as_mut().unwrap();
    hf.reentrant = p.ckpt == Some(true);
    hf.attn_implementation = p.attn;
    hf.sdpa_backend = p.backend;
    hf.lora = p.lora.map(|(r, dropout, targets)| estimate_common::lora(r, dropout, targets));
    if let Some(lc) = hf.lora.as_mut() {
        lc.target_parameters = p.params.iter().map(|t| t.to_string()).collect();
        lc.gate_up_doubled = p.doubled;
        lc.bias = p.bias;
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

/// Runs every point, reporting each that fails; `limit`: the largest simulated training peak
/// over the bound (with a checkpointed layer's recomputed block) the grid may show
/// (backward's transients lie above it).
fn run(points: &[Point], limit: f64) {
    estimate_common::run_points(points, limit, check);
}

/// One family's grid: the three experts implementations × fp32/pure bf16 × balanced/worst
/// routing over four shapes (hidden, expert width, experts, top-k), then checkpointing
/// (none, non-reentrant, reentrant) × use_cache, sdpa's kernels, a routing file, B and S,
/// MHA and a tied head.
fn grid(model_type: &'static str) -> Vec<Point> {
    let shapes = [(128, 96, 4, 1), (64, 48, 8, 2), (128, 64, 6, 3), (64, 96, 16, 4)];
    let mut points = Vec::new();
    let mut n = 0;
    for implementation in ExpertsImplementation::ALL {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            for routing in [Routing::Balanced, Routing::Worst] {
                let (d, i, experts, top_k) = shapes[n % shapes.len()];
                n += 1;
                points.push(Point { implementation, precision, routing, d, i, experts, top_k, ..base(model_type) });
            }
        }
    }
    for ckpt in [None, Some(false), Some(true)] {
        for cache in [true, false] {
            for (b, s) in [(1, 24), (3, 40)] {
                let implementation = ExpertsImplementation::ALL[(b + usize::from(cache)) % 3];
                points.push(Point { ckpt, cache, b, s, implementation, routing: Routing::Worst, ..base(model_type) });
            }
        }
    }
    // sdpa: fp32 runs the memory-efficient kernel with MHA (math with GQA), pure bf16 flash;
    // the CPU kernel as measured on CPU.
    for (precision, backend, kv_heads) in [
        (Precision::Fp32, SdpaBackend::Auto, 4),
        (Precision::Fp32, SdpaBackend::Auto, 2),
        (Precision::PureBf16, SdpaBackend::Auto, 2),
        (Precision::Fp32, SdpaBackend::CpuFlash, 2),
    ] {
        points.push(Point { attn: AttnImplementation::Sdpa, precision, backend, kv_heads, implementation: ExpertsImplementation::Eager, ..base(model_type) });
    }
    for implementation in ExpertsImplementation::ALL {
        let p = base(model_type);
        points.push(Point { routing: estimate_common::skewed(p.b * p.s, 3, 8), top_k: 3, experts: 8, implementation, ..p });
    }
    points.push(Point { kv_heads: 4, tied: true, top_k: 4, experts: 4, ..base(model_type) });
    points.push(Point { precision: Precision::PureBf16, ckpt: Some(false), implementation: ExpertsImplementation::BatchedMm, ..base(model_type) });
    points
}

/// peft's LoRA on the attention (the router and experts frozen): target sets (each of q, k, v,
/// o alone, q/v, all four), r, dropout, fp32 and pure bf16, each experts implementation,
/// balanced and worst routing, with and without the cache, checkpointing (both kinds), GQA and
/// MHA, eager and sdpa.
fn lora_grid(model_type: &'static str) -> Vec<Point> {
    const ALL: &[&str] = &["q_proj", "k_proj", "v_proj", "o_proj"];
    let sets: [&'static [&'static str]; 6] = [&["q_proj", "v_proj"], &["q_proj"], &["k_proj"], &["v_proj"], &["o_proj"], ALL];
    let shapes = [(128, 96, 4, 1), (64, 48, 8, 2), (128, 64, 6, 3), (64, 96, 16, 4)];
    let mut points = Vec::new();
    let mut n = 0;
    for targets in sets {
        for implementation in ExpertsImplementation::ALL {
            let precision = if n % 2 == 0 { Precision::Fp32 } else { Precision::PureBf16 };
            let routing = if n % 3 == 0 { Routing::Balanced } else { Routing::Worst };
            let (d, i, experts, top_k) = shapes[n % shapes.len()];
            let cache = n % 4 != 1;
            n += 1;
            points.push(Point { lora: Some((8, 0.0, targets)), implementation, precision, routing, cache, d, i, experts, top_k, ..base(model_type) });
        }
    }
    for (ckpt, dropout, kv_heads, implementation, attn) in [
        (Some(false), 0.0, 2, ExpertsImplementation::GroupedMm, AttnImplementation::Eager),
        (Some(true), 0.1, 4, ExpertsImplementation::Eager, AttnImplementation::Eager),
        (None, 0.1, 2, ExpertsImplementation::BatchedMm, AttnImplementation::Eager),
        (None, 0.1, 4, ExpertsImplementation::GroupedMm, AttnImplementation::Sdpa),
        (None, 0.0, 2, ExpertsImplementation::Eager, AttnImplementation::Sdpa),
        (Some(false), 0.1, 4, ExpertsImplementation::BatchedMm, AttnImplementation::Sdpa),
    ] {
        points.push(Point { lora: Some((4, dropout, ALL)), ckpt, cache: ckpt.is_none(), kv_heads, implementation, attn, routing: Routing::Worst, ..base(model_type) });
        points.push(Point { lora: Some((16, dropout, &["q_proj", "v_proj"])), ckpt, kv_heads, implementation, attn, precision: Precision::PureBf16, ..base(model_type) });
    }
    points
}

/// The router's auxiliary loss (`output_router_logits`, measured: moe_grid/aux_loss.json and
/// aux_loss_autocast.json) on Mixtral, Qwen3-MoE and Qwen2-MoE, where profile runs it (no
/// adapters): every layer's router logits, (B·S, E) in the router linear's type, stay in the
/// output until the forward returns (checkpointed layers' too), exact; load_balancing_loss_func's
/// softmaxes come after the loss's moment, above the bound. The three experts implementations ×
/// fp32/pure bf16/autocast bf16 (fp16 and bf16 over bf16 weights once) over shapes and routing, checkpointing × use_cache,
/// sdpa, a tied head, Qwen2-MoE's window.
#[test]
fn moe_aux_loss_closed_form_equals_the_simulation() {
    let shapes = [(128, 96, 4, 1), (64, 48, 8, 2), (128, 64, 6, 3), (64, 96, 16, 4)];
    let mut points = Vec::new();
    let mut n = 0;
    for model_type in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        for implementation in ExpertsImplementation::ALL {
            for precision in [Precision::Fp32, Precision::PureBf16, Precision::Bf16] {
                let (d, i, experts, top_k) = shapes[n % shapes.len()];
                let routing = if n % 2 == 0 { Routing::Balanced } else { Routing::Worst };
                n += 1;
                points.push(Point { aux: true, implementation, precision, routing, d, i, experts, top_k, ..base(model_type) });
            }
        }
        for (ckpt, cache) in [(Some(false), false), (Some(true), false), (None, false)] {
            points.push(Point { aux: true, ckpt, cache, b: 3, s: 24, routing: Routing::Worst, ..base(model_type) });
        }
        points.push(Point { aux: true, precision: Precision::Fp16, layers: 3, ..base(model_type) });
        points.push(Point { aux: true, precision: Precision::PureBf16Autocast, implementation: ExpertsImplementation::BatchedMm, ..base(model_type) });
        points.push(Point { aux: true, attn: AttnImplementation::Sdpa, kv_heads: 4, tied: true, ..base(model_type) });
    }
    points.push(Point { aux: true, window: Some((16, 1)), ..base("qwen2_moe") });
    assert!(points.len() >= 20);
    // (Autocast's batched_mm gathered weights and the aux loss's softmaxes lie above the bound.)
    run(&points, 2.1);
}

/// The router's auxiliary loss beside peft's LoRA and 4-bit QLoRA, as profile runs it
/// (moe_grid/aux_loss_lora.json): adapters on the attention (Qwen2-MoE's shared expert too) and
/// on the router's weight (ParamWrapper), nf4 with and without double quant, compute bf16 and
/// fp32, prepared and not; fp32 and pure bf16, checkpointing off, non-reentrant and reentrant.
#[test]
fn moe_aux_loss_with_adapters_closed_form_equals_the_simulation() {
    use vramscope::engine::DType;
    const ATT: &[&str] = &["q_proj", "k_proj", "v_proj", "o_proj"];
    let mut points = Vec::new();
    for (n, model_type) in ["mixtral", "qwen3_moe", "qwen2_moe"].into_iter().enumerate() {
        let implementation = ExpertsImplementation::ALL[n % 3];
        let targets: &'static [&'static str] = if model_type == "qwen2_moe" { &["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"] } else { &["q_proj", "v_proj"] };
        for (ckpt, precision) in [(None, Precision::Fp32), (Some(false), Precision::PureBf16), (Some(true), Precision::Fp32)] {
            points.push(Point { aux: true, lora: Some((8, 0.0, targets)), ckpt, precision, implementation, ..base(model_type) });
        }
        points.push(Point { aux: true, lora: Some((4, 0.0, ATT)), params: &["mlp.gate.weight"], ckpt: Some(false), routing: Routing::Worst, ..base(model_type) });
        // ParamWrapper on the experts (the fold's baddbmm), bf16 under checkpointing as measured.
        points.push(Point { aux: true, lora: Some((8, 0.0, &["q_proj"])), params: &["mlp.experts.gate_up_proj", "mlp.experts.down_proj"], ckpt: Some(true), precision: Precision::PureBf16, implementation, ..base(model_type) });
        points.push(Point { aux: true, lora: Some((4, 0.0, &["q_proj"])), params: &["mlp.experts.down_proj"], precision: Precision::Fp32, routing: Routing::Worst, ..base(model_type) });
        for (four_bit, ckpt) in [((true, DType::BF16, true), Some(true)), ((false, DType::F32, false), None), ((true, DType::F32, true), Some(false))] {
            points.push(Point { aux: true, lora: Some((16, 0.0, ATT)), four_bit: Some(four_bit), ckpt, precision: Precision::PureBf16, implementation, ..base(model_type) });
        }
    }
    assert!(points.len() >= 20);
    run(&points, 2.1);
}

/// peft's `bias` ("all", "lora_only") on Mixtral, Qwen3-MoE and Qwen2-MoE (measured:
/// hf_grid/lora_extras_models.json): only the attention's biases can train (Qwen2-MoE's q/k/v
/// biases; Mixtral and Qwen3-MoE have none), the router and experts having none: every third
/// point of each family's LoRA grid under each option, then a ParamWrapper point beside them.
#[test]
fn moe_lora_bias_closed_form_equals_the_simulation() {
    use vramscope::model::lora::LoraBias;
    let mut points = Vec::new();
    for model_type in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        for (n, p) in lora_grid(model_type).into_iter().enumerate().filter(|(n, _)| n % 3 == 0) {
            let bias = if n % 2 == 0 { LoraBias::All } else { LoraBias::LoraOnly };
            points.push(Point { bias, ..p });
        }
        points.push(Point { bias: LoraBias::All, lora: Some((8, 0.0, &["q_proj"])), params: &["mlp.experts.down_proj"], ..base(model_type) });
    }
    assert!(points.len() >= 12);
    run(&points, 1.4);
}

/// peft's modules_to_save (embed_tokens, lm_head, both; measured: hf_grid/lora_extras_models.json)
/// on Mixtral, Qwen3-MoE and Qwen2-MoE in the weights' type (profile refuses it under autocast):
/// the trained copies, their gradients and optimizer state; embed_tokens' copy makes layer 0's
/// input need a gradient, lm_head's keeps its input. Every fourth point of each family's LoRA
/// grid under each set (fp32/pure bf16, the experts implementations, checkpointing, sdpa, a
/// tied head).
#[test]
fn moe_modules_to_save_closed_form_equals_the_simulation() {
    let sets: [&'static [&'static str]; 3] = [&["embed_tokens"], &["lm_head"], &["embed_tokens", "lm_head"]];
    let mut points = Vec::new();
    for model_type in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        for (n, p) in lora_grid(model_type).into_iter().enumerate().filter(|(n, _)| n % 4 == 0) {
            points.push(Point { saves: sets[n / 4 % 3], tied: n % 8 == 0, ..p });
        }
    }
    assert!(points.len() >= 24);
    run(&points, 1.4);
}

#[test]
fn mixtral_lora_closed_form_equals_the_simulation() {
    run(&lora_grid("mixtral"), 1.35);
}

#[test]
fn qwen3_moe_lora_closed_form_equals_the_simulation() {
    let mut points = lora_grid("qwen3_moe");
    for implementation in ExpertsImplementation::ALL {
        points.push(Point { norm_topk_prob: false, lora: Some((8, 0.1, &["q_proj", "k_proj", "v_proj", "o_proj"])), implementation, ..base("qwen3_moe") });
    }
    run(&points, 1.35);
}

/// Qwen2-MoE's LoRA: the attention grid, then its shared expert's linears (each alone, the
/// MLP's three, with the attention, all eight as all-linear names them), where layer 0's frozen
/// attention leaves the routed block and the router without a gradient: r, dropout, fp32 and
/// pure bf16, each experts implementation, routing, checkpointing.
#[test]
fn qwen2_moe_lora_closed_form_equals_the_simulation() {
    const ALL: &[&str] = &["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "shared_expert_gate"];
    let mut points = lora_grid("qwen2_moe");
    let sets: [&'static [&'static str]; 7] =
        [&["gate_proj"], &["up_proj"], &["down_proj"], &["shared_expert_gate"], &["gate_proj", "up_proj", "down_proj"], &["q_proj", "v_proj", "down_proj"], ALL];
    let mut n = 0;
    for targets in sets {
        for implementation in ExpertsImplementation::ALL {
            for (dropout, precision) in [(0.0, Precision::Fp32), (0.1, Precision::PureBf16), (0.1, Precision::Fp32), (0.0, Precision::PureBf16)].into_iter().skip(n % 2).step_by(2) {
                let routing = if n % 3 == 0 { Routing::Balanced } else { Routing::Worst };
                let ckpt = [None, None, Some(false), None, Some(true)][n % 5];
                n += 1;
                points.push(Point { lora: Some((4 + 4 * (n % 3), dropout, targets)), implementation, precision, routing, ckpt, cache: ckpt.is_none(), ..base("qwen2_moe") });
            }
        }
    }
    points.push(Point { lora: Some((8, 0.0, ALL)), norm_topk_prob: true, shared: 320, ..base("qwen2_moe") });
    points.push(Point { lora: Some((8, 0.1, ALL)), attn: AttnImplementation::Sdpa, kv_heads: 4, ..base("qwen2_moe") });
    run(&points, 1.35);
}

/// peft's ParamWrapper (`--target-parameters`) on the router and the experts' 3-D weights of
/// each family: every subset of the three parameters, alone and with LoRA on the attention
/// (and Qwen2-MoE's shared expert), gate_up_proj at the doubled rank peft's conversion gives,
/// each experts implementation, fp32 and pure bf16 (the folds' bf16 factors), balanced and
/// worst routing, shapes, r, checkpointing (both kinds), the cache, eager and sdpa. Layer 0's
/// input needs no gradient: only what the adapters need is kept there.
fn params_grid(model_type: &'static str) -> Vec<Point> {
    const GU: &str = "mlp.experts.gate_up_proj";
    const DN: &str = "mlp.experts.down_proj";
    const R: &str = "mlp.gate.weight";
    let sets: [&'static [&'static str]; 7] = [&[GU, DN], &[R], &[GU], &[DN], &[R, GU, DN], &[R, DN], &[R, GU]];
    let modules: [&'static [&'static str]; 3] = [&[], &["q_proj", "v_proj"], if model_type == "qwen2_moe" { &["o_proj", "gate_proj", "down_proj"] } else { &["o_proj"] }];
    let shapes = [(128, 96, 4, 1), (64, 48, 8, 2), (128, 64, 6, 3), (64, 96, 16, 4)];
    let mut points = Vec::new();
    let mut n = 0;
    for params in sets {
        for implementation in ExpertsImplementation::ALL {
            let precision = if n % 2 == 0 { Precision::Fp32 } else { Precision::PureBf16 };
            let routing = if n % 3 == 0 { Routing::Balanced } else { Routing::Worst };
            let (d, i, experts, top_k) = shapes[n % shapes.len()];
            let ckpt = [None, None, Some(false), None, Some(true)][n % 5];
            let attn = if n % 4 == 3 { AttnImplementation::Sdpa } else { AttnImplementation::Eager };
            let r = [8, 4, 16][n % 3];
            let doubled = params.contains(&GU) && n % 4 == 1;
            n += 1;
            points.push(Point { lora: Some((r, 0.0, modules[n % 3])), params, doubled, implementation, precision, routing, d, i, experts, top_k, ckpt, cache: ckpt.is_none() && n % 2 == 0, attn, ..base(model_type) });
        }
    }
    points.push(Point { lora: Some((8, 0.0, &[])), params: &[R, GU, DN], layers: 3, b: 3, s: 17, ..base(model_type) });
    points.push(Point { lora: Some((8, 0.0, &[])), params: &[GU], precision: Precision::PureBf16, layers: 3, implementation: ExpertsImplementation::Eager, ..base(model_type) });
    // One layer: nothing keeps the RoPE tables.
    points.push(Point { lora: Some((8, 0.0, &[])), params: &[R, GU], layers: 1, ..base(model_type) });
    points
}

#[test]
fn mixtral_target_parameters_closed_form_equals_the_simulation() {
    run(&params_grid("mixtral"), 1.5);
}

#[test]
fn qwen3_moe_target_parameters_closed_form_equals_the_simulation() {
    run(&params_grid("qwen3_moe"), 1.5);
}

#[test]
fn qwen2_moe_target_parameters_closed_form_equals_the_simulation() {
    run(&params_grid("qwen2_moe"), 1.5);
}

/// peft's ParamWrapper under autocast: each family's ParamWrapper grid with bf16 autocast over
/// its fp32 weights (the fp32 points; every fourth under fp16) and over bf16 weights (the pure
/// bf16 points). The router's delta mm runs low (the adapters' casts cached) and its linear
/// keeps the fold's uncached cast and its input's; baddbmm is no autocast op, so the experts'
/// folds stay in the weights' type (grouped_mm keeps them, batched_mm's bmm and eager's linears
/// their low casts) and their adapters are never cast.
fn params_autocast_grid(model_type: &'static str) -> Vec<Point> {
    params_grid(model_type)
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
        .collect()
}

#[test]
fn moe_target_parameters_autocast_closed_form_equals_the_simulation() {
    let points: Vec<Point> = ["mixtral", "qwen3_moe", "qwen2_moe"].into_iter().flat_map(params_autocast_grid).collect();
    assert!(points.len() >= 12);
    let (grouped, cast): (Vec<Point>, Vec<Point>) = points.into_iter().partition(|p| p.implementation == ExpertsImplementation::GroupedMm);
    run(&grouped, 1.5);
    run(&cast, 2.6);
}

#[test]
fn mixtral_closed_form_equals_the_simulation() {
    run(&grid("mixtral"), 1.30);
}

#[test]
fn qwen3_moe_closed_form_equals_the_simulation() {
    let mut points = grid("qwen3_moe");
    // norm_topk_prob false: the top-k probabilities go to the experts as they are.
    for implementation in ExpertsImplementation::ALL {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            points.push(Point { norm_topk_prob: false, implementation, precision, ..base("qwen3_moe") });
        }
    }
    run(&points, 1.30);
}

#[test]
fn qwen2_moe_closed_form_equals_the_simulation() {
    let mut points = grid("qwen2_moe");
    // norm_topk_prob on (its default is off), and a wide shared expert.
    for implementation in ExpertsImplementation::ALL {
        points.push(Point { norm_topk_prob: true, shared: 320, implementation, ..base("qwen2_moe") });
    }
    run(&points, 1.30);
}

/// The optimizers the closed form derives, over the 3-D experts (Adafactor factors
/// (E, 2I) and (E, d) of gate_up_proj) and each family's registration order (Qwen3-MoE's
/// router after its experts, Qwen2-MoE's shared expert): state and gradients equal the
/// simulation's, and the training peak lies above the bound.
#[test]
fn moe_optimizers() {
    for model_type in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            for kind in [OptimizerKind::AdamwTorch, OptimizerKind::AdamwTorchFused, OptimizerKind::AdamwTorchForloop, OptimizerKind::Sgd, OptimizerKind::Adafactor] {
                let p = Point { precision, b: 1, s: 32, ..base(model_type) };
                let cfg = config(&p);
                estimate_common::compare_optimizer(&cfg, precision, p.b, p.s, kind, &format!("{model_type} {precision:?} {kind:?}"));
                // Over the LoRA adapters of the attention (the experts frozen; Qwen2-MoE's shared
                // expert's linears after the attention's).
                let targets: &'static [&'static str] = if model_type == "qwen2_moe" { &["q_proj", "v_proj", "gate_proj", "down_proj", "shared_expert_gate"] } else { &["q_proj", "k_proj", "v_proj", "o_proj"] };
                let p = Point { lora: Some((8, 0.0, targets)), ..p };
                let cfg = config(&p);
                estimate_common::compare_optimizer(&cfg, precision, p.b, p.s, kind, &format!("{model_type} LoRA {precision:?} {kind:?}"));
            }
        }
    }
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).arg("estimate").args(args).output().unwrap()
}

/// Through the CLI: an MoE config.json estimates with the JSON's activations equal to the
/// simulated ones under each experts implementation and routing; the presets state their
/// closed form.
#[test]
fn moe_estimate_cli() {
    let dir = scratch::dir().join(format!("vramscope-estimate-moe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("e.json");
    let cfg = dir.join("qwen3_moe.json");
    std::fs::write(&cfg, r#"{"model_type": "qwen3_moe", "hidden_size": 128, "moe_intermediate_size": 96, "intermediate_size": 384, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": true}"#)
    .unwrap();
    let counts = dir.join("counts.txt");
    // 2 × 24 tokens × top-2 = 96 routed rows, one expert taking every token.
    std::fs::write(&counts, "48 8 8 8 8 8 4 4").unwrap();
    for (implementation, routing) in [("grouped_mm", "balanced"), ("batched_mm", "worst"), ("eager", counts.to_str().unwrap())] {
        let o = cli(&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--experts-implementation", implementation, "--routing", routing, "--json", json.to_str().unwrap()]);
        assert!(o.status.success(), "{implementation} {routing}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        for needle in ["transformers 5.23.0 qwen3_moe", &format!("experts_implementation {implementation}"), "router top-k expert indices", "E·d (router) + 3E·I·d"] {
            assert!(text.contains(needle), "{implementation}: missing {needle:?} in\n{text}");
        }
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        estimate_common::assert_json_activations(&v, &format!("{implementation} {routing}"));
    }
    // The router's auxiliary loss: every layer's logits in the output, stated and simulated alike.
    let o = cli(&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--output-router-logits", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "aux: {}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("every layer's router logits"), "aux: missing the router logits in\n{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    estimate_common::assert_json_activations(&v, "aux");
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
    // LoRA under bf16 autocast over fp32 weights (the frozen router's cast) and over bf16 weights.
    for (dtype, needle) in [("float32", "router (gate) weight cast to bf16"), ("bfloat16", "bf16 autocast around forward and loss over bf16 weights")] {
        let o = cli(&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--lora-r", "8", "--target-modules", "q_proj,v_proj", "--dtype", dtype, "--precision", "bf16", "--json", json.to_str().unwrap()]);
        assert!(o.status.success(), "lora {dtype}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(needle), "lora {dtype}: missing {needle:?} in\n{text}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let e = &v["estimate"];
        let blocks = terms(&e["first_block"]) + (e["layers"].as_u64().unwrap() - 1) * terms(&e["block"]);
        assert_eq!(blocks + terms(&e["outside"]), v["simulated"]["activation_bytes"].as_u64().unwrap(), "lora {dtype}");
        assert_eq!(e["autocast_cache_bytes"].as_u64(), v["simulated"]["autocast_cache_bytes"].as_u64(), "lora {dtype}");
    }
    // peft's ParamWrapper on the router and experts (named, and converted from Qwen's
    // transformers-4 names), in fp32 and pure bf16, and under bf16 autocast over fp32 and bf16
    // weights: block 0 its own.
    for extra in [
        &["--target-parameters", "mlp.gate.weight,mlp.experts.gate_up_proj", "--experts-implementation", "eager"][..],
        &["--target-modules", "q_proj,gate_proj,up_proj,down_proj", "--dtype", "bfloat16"][..],
        &["--target-parameters", "mlp.gate.weight,mlp.experts.down_proj", "--experts-implementation", "batched_mm", "--dtype", "float32", "--precision", "bf16"][..],
        &["--target-modules", "all-linear", "--dtype", "bfloat16", "--precision", "bf16"][..],
    ] {
        let o = cli(&[&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--lora-r", "8", "--json", json.to_str().unwrap()][..], extra].concat());
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("the ParamWrapper's fold"), "{extra:?}: missing the fold in\n{text}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        estimate_common::assert_json_activations(&v, &format!("{extra:?}"));
        let e = &v["estimate"];
        for (k, sim) in [("param_bytes", "parameter_bytes"), ("grad_bytes", "gradient_bytes"), ("optimizer_bytes", "optimizer_bytes"), ("autocast_cache_bytes", "autocast_cache_bytes")] {
            assert_eq!(e[k], v["simulated"][sim], "{extra:?}: {k}");
        }
    }
    // The presets at full size, closed form only.
    for (preset, needles) in [("Mixtral-8x7B", &["mixtral", "E 8 experts of width I 14336, top-k 2"][..]), ("Qwen3-30B-A3B", &["qwen3_moe", "E 128 experts of width I 768, top-k 8"][..])] {
        let o = cli(&["--preset", preset, "--batch-size", "1", "--context-length", "4096", "--no-simulate"]);
        assert!(o.status.success(), "{preset}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        for needle in needles {
            assert!(text.contains(needle), "{preset}: missing {needle:?} in\n{text}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the closed form does not derive exits 2, naming the flag and pointing at `profile`
/// (or, for autocast, at the weights' own dtype, as `profile` refuses it too).
/// QLoRA on Mixtral, Qwen3-MoE and Qwen2-MoE: the attention's (and Qwen2-MoE's shared
/// expert's) linears 4-bit, the router and experts frozen in the load dtype (fp32 after
/// prepare_model_for_kbit_training): nf4 ± double quant, compute dtype fp32/bf16, with and
/// without prepare, each experts implementation, checkpointing, B, S, r and targets.
#[test]
fn moe_qlora_closed_form_equals_the_simulation() {
    use vramscope::engine::DType;
    let quants = [(false, DType::F32, true), (true, DType::BF16, true), (true, DType::F32, false), (false, DType::BF16, false)];
    let mut points = Vec::new();
    let mut n = 0;
    for model_type in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        let all: &'static [&'static str] = if model_type == "qwen2_moe" { &["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "shared_expert_gate"] } else { &["q_proj", "k_proj", "v_proj", "o_proj"] };
        for (dq, compute, prepare) in quants {
            let precision = if prepare { Precision::Fp32 } else { Precision::PureBf16 };
            for ckpt in [None, Some(false), Some(true)] {
                let implementation = ExpertsImplementation::ALL[n % 3];
                let (b, s, r) = [(2, 40, 8), (1, 24, 16), (3, 17, 4)][n % 3];
                let targets: &'static [&'static str] = if n % 2 == 0 { all } else { &["q_proj", "v_proj"] };
                let dropout = if n % 4 == 3 { 0.1 } else { 0.0 };
                n += 1;
                points.push(Point { four_bit: Some((dq, compute, prepare)), lora: Some((r, dropout, targets)), precision, ckpt, cache: ckpt.is_none(), implementation, b, s, ..base(model_type) });
            }
        }
        points.push(Point { four_bit: Some((true, DType::BF16, true)), lora: Some((8, 0.0, all)), attn: AttnImplementation::Sdpa, routing: Routing::Worst, ..base(model_type) });
    }
    run(&points, 1.8);
}

/// LLM.int8() on Mixtral and Qwen3-MoE (where profile runs it): the attention's linears 8-bit,
/// each MatMul8bitLt keeping its input (the non-reentrant checkpoint cannot reach it), the
/// router and experts frozen in the load dtype (fp32 after prepare_model_for_kbit_training):
/// with and without prepare, each experts implementation, checkpointing, the cache, B, S, r,
/// targets and dropout.
#[test]
fn moe_int8_closed_form_equals_the_simulation() {
    let all: &'static [&'static str] = &["q_proj", "k_proj", "v_proj", "o_proj"];
    let mut points = Vec::new();
    let mut n = 0;
    for model_type in ["mixtral", "qwen3_moe"] {
        for prepare in [true, false] {
            let precision = if prepare { Precision::Fp32 } else { Precision::PureBf16 };
            for ckpt in [None, Some(false), Some(true)] {
                let implementation = ExpertsImplementation::ALL[n % 3];
                let (b, s, r) = [(2, 40, 8), (1, 24, 16), (3, 17, 4)][n % 3];
                let targets: &'static [&'static str] = if n % 2 == 0 { all } else { &["q_proj", "v_proj"] };
                let dropout = if n % 4 == 3 { 0.1 } else { 0.0 };
                n += 1;
                points.push(Point { int8: Some(prepare), lora: Some((r, dropout, targets)), precision, ckpt, cache: ckpt.is_none(), implementation, b, s, ..base(model_type) });
            }
            points.push(Point { int8: Some(prepare), lora: Some((8, 0.0, &["o_proj"])), precision, cache: false, ..base(model_type) });
        }
        points.push(Point { int8: Some(true), lora: Some((8, 0.0, all)), attn: AttnImplementation::Sdpa, routing: Routing::Worst, ..base(model_type) });
    }
    run(&points, 1.8);
}

/// Qwen2-MoE's sliding window (use_sliding_window; every other layer below max_window_layers
/// slides, tests/qwen2_moe_sliding_grid.rs): the full layers see no window (sdpa: no mask, GQA
/// in the kernel), the sliding layers the window's mask (sdpa masked once the window is not
/// longer than the context: the math kernel here) and, with the cache, a
/// DynamicSlidingWindowLayer's window tensor; checkpointed layers' closures hold their type's
/// mask. Windows shorter than, equal to and longer than S, max_window_layers cutting the stack
/// or 0, every layer sliding, eager and sdpa, fp32, pure bf16/fp16 and autocast, checkpointing,
/// the cache, each experts implementation, LoRA, B and S.
#[test]
fn qwen2_moe_sliding_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    let mut n = 0;
    for (w, mwl, layers) in [(16, 2, 3), (40, 4, 4), (64, 1, 2), (8, 0, 2), (12, 1, 1)] {
        for (attn, backend) in [(AttnImplementation::Eager, SdpaBackend::Auto), (AttnImplementation::Sdpa, SdpaBackend::Math)] {
            for ckpt in [None, Some(false), Some(true)] {
                let precision = [Precision::Fp32, Precision::PureBf16][n % 2];
                let implementation = ExpertsImplementation::ALL[n % 3];
                let (b, s) = [(2, 40), (1, 24), (3, 17)][n % 3];
                n += 1;
                points.push(Point { window: Some((w, mwl)), layers, attn, backend, precision, ckpt, cache: ckpt.is_none() && n % 2 == 0, implementation, b, s, ..base("qwen2_moe") });
            }
        }
    }
    points.push(Point { window: Some((16, 2)), layers: 3, lora: Some((8, 0.0, &["q_proj", "v_proj", "gate_proj"])), ..base("qwen2_moe") });
    points.push(Point { window: Some((16, 2)), layers: 3, lora: Some((8, 0.1, &["q_proj", "k_proj", "v_proj", "o_proj"])), attn: AttnImplementation::Sdpa, backend: SdpaBackend::Math, precision: Precision::PureBf16, ..base("qwen2_moe") });
    points.push(Point { window: Some((64, 1)), layers: 2, attn: AttnImplementation::Sdpa, backend: SdpaBackend::Flash, precision: Precision::PureBf16, ..base("qwen2_moe") });
    // Autocast over fp32 and bf16 weights, and pure fp16.
    for (i, precision) in [Precision::Bf16, Precision::PureBf16Autocast, Precision::PureFp16, Precision::Fp16].into_iter().enumerate() {
        let ckpt = [None, Some(false), None, Some(true)][i];
        points.push(Point { window: Some((16, 2)), layers: 3, precision, ckpt, cache: ckpt.is_none(), implementation: ExpertsImplementation::ALL[i % 3], ..base("qwen2_moe") });
    }
    run(&points, 1.8);
}

/// bf16 autocast of Mixtral, Qwen3-MoE (norm_topk_prob on and off) and Qwen2-MoE: grouped_mm
/// is not an autocast op (the experts run in fp32), batched_mm's bmm keeps bf16 casts of the
/// gathered weights and rows, eager's linears uncached casts of each hit expert's weights; the
/// router's logits, the Qwens' routing weights and the shared expert are bf16; the autocast
/// cache holds the attention's, the router's and the shared expert's casts. The three experts
/// implementations × shapes, routing, checkpointing, use_cache, B, S, MHA and GQA, eager and
/// sdpa, a tied head.
#[test]
fn moe_autocast_closed_form_equals_the_simulation() {
    let shapes = [(128, 96, 4, 1), (64, 48, 8, 2), (128, 64, 6, 3), (64, 96, 16, 4)];
    let mut points = Vec::new();
    let mut n = 0;
    for model_type in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        for ckpt in [None, Some(false), Some(true)] {
            for (b, s) in [(1, 24), (3, 40)] {
                let (d, i, experts, top_k) = shapes[n % shapes.len()];
                let routing = if n % 2 == 0 { Routing::Balanced } else { Routing::Worst };
                let (attn, kv_heads) = [(AttnImplementation::Eager, 2), (AttnImplementation::Sdpa, 4), (AttnImplementation::Eager, 4)][n % 3];
                n += 1;
                let implementation = ExpertsImplementation::ALL[n % 3];
                points.push(Point { precision: Precision::Bf16, ckpt, cache: ckpt.is_none() && n % 2 == 0, b, s, d, i, experts, top_k, routing, attn, kv_heads, tied: n % 5 == 0, implementation, ..base(model_type) });
            }
        }
        for implementation in ExpertsImplementation::ALL {
            points.push(Point { precision: Precision::Bf16, attn: AttnImplementation::Sdpa, backend: SdpaBackend::Flash, implementation, ..base(model_type) });
        }
        // Worst routing: one expert gets every token, so eager's loop casts fewer experts' weights.
        points.push(Point { precision: Precision::Bf16, implementation: ExpertsImplementation::Eager, routing: Routing::Worst, experts: 8, ..base(model_type) });
    }
    points.push(Point { precision: Precision::Bf16, norm_topk_prob: false, ..base("qwen3_moe") });
    points.push(Point { precision: Precision::Bf16, norm_topk_prob: true, shared: 320, ..base("qwen2_moe") });
    // Everything stated is exact on every point. batched_mm's peak falls in the forward, where
    // the gathered fp32 expert weights live beside the bf16 casts its bmm keeps (transients the
    // bound leaves out): up to 2.04× on the batched_mm and eager points.
    let (grouped, cast): (Vec<Point>, Vec<Point>) = points.into_iter().partition(|p| p.implementation == ExpertsImplementation::GroupedMm);
    run(&grouped, 1.35);
    run(&cast, 2.1);
}

#[test]
fn not_derived_is_refused_naming_the_flag() {
    let dir = scratch::dir().join(format!("vramscope-estimate-moe-refusals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("counts.txt");
    std::fs::write(&bad, "10 10 10 10 10 10 10 10").unwrap();
    let json = dir.join("never.json");
    let mix = ["--preset", "Mixtral-8x7B", "--batch-size", "1", "--context-length", "64", "--no-simulate", "--json", json.to_str().unwrap()];
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        // The aux loss is derived with adapters where profile runs it (aux_loss_lora.json), not
        // under autocast (measured in the weights' dtype).
        ([&mix[..], &["--output-router-logits", "--lora-r", "8", "--target-modules", "q_proj", "--dtype", "float32", "--precision", "bf16"]].concat(), "--output-router-logits", "autocast"),
        // The for-loop AdamW and Adafactor follow the parameters' order.
        ([&mix[..], &["--lora-r", "8", "--target-parameters", "mlp.experts.down_proj", "--optimizer", "adafactor"]].concat(), "--optimizer", "--target-parameters"),
        ([&mix[..], &["--routing", bad.to_str().unwrap()]].concat(), "--routing", "add up to 80"),
        // peft's bias is derived in the weights' dtype (as measured), not under autocast.
        ([&mix[..], &["--lora-r", "8", "--target-modules", "q_proj", "--lora-bias", "all", "--dtype", "float32", "--precision", "bf16"]].concat(), "--lora-bias", "autocast"),
        // generate runs (tests/estimate_generate_families.rs), without the aux loss.
        ([&mix[..], &["--profile-type", "generate", "--max-new-tokens", "4", "--output-router-logits"]].concat(), "--output-router-logits", "generate"),
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

/// bf16 autocast over bf16 weights (the Trainer's bf16=True on the presets' bf16 checkpoints):
/// the three families × experts implementations × checkpointing, use_cache, shapes, routing,
/// eager and sdpa (GQA and MHA), B and S. The routers' fp32 softmax casts back to bf16 before
/// the experts, grouped_mm is no autocast op and batched_mm's and eager's matmuls already read
/// bf16: pure bf16's terms, byte for byte.
#[test]
fn moe_pure_autocast_closed_form_equals_the_simulation() {
    // (batched_mm's gathered expert weights are forward transients the bound leaves out, as in
    // the autocast grid above.)
    run(&two_byte_points(Precision::PureBf16Autocast), 2.1);
}

/// Pure fp16 weights (a float16 checkpoint loaded with `from_pretrained(dtype="auto")`, no
/// autocast): the grid above over fp16 parameters. No op picks its output type or its kernel by
/// which 2-byte float it reads: pure bf16's terms, byte for byte.
#[test]
fn moe_pure_fp16_closed_form_equals_the_simulation() {
    run(&two_byte_points(Precision::PureFp16), 2.1);
}

/// The grid of the two tests above in `precision`.
fn two_byte_points(precision: Precision) -> Vec<Point> {
    let shapes = [(128, 96, 4, 1), (64, 48, 8, 2), (128, 64, 6, 3), (64, 96, 16, 4)];
    let mut points = Vec::new();
    let mut n = 0;
    for model_type in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        for implementation in ExpertsImplementation::ALL {
            for ckpt in [None, Some(false), Some(true)] {
                let (d, i, experts, top_k) = shapes[n % shapes.len()];
                let routing = if n % 2 == 0 { Routing::Balanced } else { Routing::Worst };
                let (attn, kv_heads) = [(AttnImplementation::Eager, 2), (AttnImplementation::Sdpa, 4), (AttnImplementation::Sdpa, 2)][n % 3];
                let (b, s) = if n % 2 == 0 { (1, 24) } else { (3, 40) };
                n += 1;
                points.push(Point { precision: precision, ckpt, cache: ckpt.is_none() && n % 2 == 0, b, s, d, i, experts, top_k, routing, attn, kv_heads, tied: n % 5 == 0, implementation, ..base(model_type) });
            }
        }
        points.push(Point { precision: precision, attn: AttnImplementation::Sdpa, backend: SdpaBackend::Flash, ..base(model_type) });
    }
    points
}

/// peft's LoRA under bf16 and fp16 autocast over fp32 weights and bf16 autocast over bf16
/// weights on Mixtral, Qwen3-MoE and Qwen2-MoE: every third point of each family's LoRA grid
/// (targets, r, dropout, experts implementations, routing, use_cache, checkpointing, GQA and
/// MHA, eager and sdpa) in each of the three precisions, then Qwen2-MoE's shared-expert targets.
/// Over fp32 weights every frozen linear whose input needs a gradient keeps its weight's
/// uncached low-precision cast (the attention's, the router's, the shared expert's and its
/// gate's); the adapters' casts are cached; over bf16 weights nothing is cast but the adapters.
#[test]
fn moe_lora_autocast_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for model_type in ["mixtral", "qwen3_moe", "qwen2_moe"] {
        let mut n = 0;
        for precision in [Precision::Bf16, Precision::Fp16, Precision::PureBf16Autocast] {
            for p in lora_grid(model_type) {
                n += 1;
                if n % 3 == 0 {
                    points.push(Point { precision, ..p });
                }
            }
        }
    }
    const ALL: &[&str] = &["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "shared_expert_gate"];
    let sets: [&'static [&'static str]; 6] = [&["gate_proj"], &["up_proj"], &["down_proj"], &["shared_expert_gate"], &["gate_proj", "up_proj", "down_proj"], ALL];
    let mut n = 0;
    for targets in sets {
        for precision in [Precision::Bf16, Precision::PureBf16Autocast] {
            let implementation = ExpertsImplementation::ALL[n % 3];
            let ckpt = [None, Some(false), None, Some(true)][n % 4];
            n += 1;
            points.push(Point { lora: Some((8, if n % 2 == 0 { 0.1 } else { 0.0 }, targets)), implementation, precision, ckpt, cache: ckpt.is_none(), ..base("qwen2_moe") });
        }
    }
    // batched_mm's and eager's gathered and cast expert weights are forward transients the
    // bound leaves out, large beside LoRA's activations: up to 2.32× on those points.
    let (grouped, cast): (Vec<Point>, Vec<Point>) = points.into_iter().partition(|p| p.implementation == ExpertsImplementation::GroupedMm);
    run(&grouped, 1.35);
    run(&cast, 2.4);
}

/// Through the CLI: LLM.int8() with LoRA on the attention states its closed form, block 0 its
/// own, equal to the simulated activations, gradients and optimizer state.
#[test]
fn moe_int8_estimate_cli() {
    estimate_common::assert_int8_lora_cli("Mixtral-8x7B");
}
