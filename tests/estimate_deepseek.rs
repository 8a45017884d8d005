//! `vramscope estimate` on DeepSeek-V3 (issue 30): the closed form of multi-head latent
//! attention, the dense first layers and the sparse block (src/analyse/estimate/hf/deepseek.rs)
//! against the simulated meta run of transformers 5.23's op sequence (itself byte-exact against
//! transformers in tests/deepseek_grid.rs): q_lora_rank set and None, kv_lora_rank, the rope,
//! nope and v head sizes, interleaved rope or not, 4–16 experts, top-k 1–4, n_group/topk_group,
//! one or two shared experts, first_k_dense_replace (none, some, every layer), norm_topk_prob,
//! attention biases, the three experts implementations, balanced, worst and a file's routing,
//! eager and sdpa (the math composite v's head size unlike q's takes), fp32 and pure bf16,
//! checkpointing, use_cache, B and S (1 included: V's fold is then a view), a tied head.
//! Everything the estimate states exactly (parameters, gradients, optimizer state, logits,
//! activations and the live set when the forward returns) must equal the simulation byte for
//! byte; the training peak is the lower bound tests/estimate_hf.rs states. What is not derived
//! is refused, naming the flag and `profile`.
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
    d: usize,
    heads: usize,
    q_lora_rank: Option<usize>,
    kv_lora_rank: usize,
    nope: usize,
    rope: usize,
    v: usize,
    interleave: bool,
    /// One routed expert's width.
    i: usize,
    dense_i: usize,
    experts: usize,
    top_k: usize,
    n_group: usize,
    topk_group: usize,
    shared: usize,
    first_k_dense: usize,
    layers: usize,
    norm_topk_prob: bool,
    bias: bool,
    implementation: ExpertsImplementation,
    routing: Routing,
    attn: AttnImplementation,
    /// sdpa's backend: math by default (v's head size unlike q's runs the math composite
    /// whatever it is; the options let cpu_flash and math through there).
    backend: SdpaBackend,
    precision: Precision,
    /// None, non-reentrant (false) or reentrant (true).
    ckpt: Option<bool>,
    cache: bool,
    tied: bool,
    b: usize,
    s: usize,
    /// peft's LoRA on the latent attention: (r, dropout, target modules); the rest frozen.
    lora: Option<(usize, f64, &'static [&'static str])>,
    /// QLoRA: (double quant, bnb_4bit_compute_dtype, prepare_model_for_kbit_training), loaded
    /// in bf16.
    four_bit: Option<(bool, vramscope::engine::DType, bool)>,
    /// peft's ParamWrapper (`target_parameters`), with `lora`'s r.
    params: &'static [&'static str],
    /// peft's `bias` (none, all, lora_only).
    lora_bias: vramscope::model::lora::LoraBias,
    /// peft's modules_to_save (embed_tokens, lm_head).
    saves: &'static [&'static str],
}

fn base() -> Point {
    Point {
        d: 64,
        heads: 4,
        q_lora_rank: Some(48),
        kv_lora_rank: 32,
        nope: 16,
        rope: 8,
        v: 16,
        interleave: true,
        i: 32,
        dense_i: 96,
        experts: 8,
        top_k: 2,
        n_group: 2,
        topk_group: 1,
        shared: 1,
        first_k_dense: 1,
        layers: 3,
        norm_topk_prob: true,
        bias: false,
        implementation: ExpertsImplementation::GroupedMm,
        routing: Routing::Balanced,
        attn: AttnImplementation::Eager,
        backend: SdpaBackend::Math,
        precision: Precision::Fp32,
        ckpt: None,
        cache: true,
        tied: false,
        b: 2,
        s: 24,
        lora: None,
        params: &[],
        four_bit: None,
        lora_bias: vramscope::model::lora::LoraBias::None,
        saves: &[],
    }
}

/// The point's config.json, read by vramscope's reader, with the run's options set.
fn config(p: &Point) -> ModelConfig {
    let c = json!({
        "model_type": "deepseek_v3", "hidden_size": p.d, "intermediate_size": p.dense_i, "moe_intermediate_size": p.i,
        "num_hidden_layers": p.layers, "num_attention_heads": p.heads, "num_key_value_heads": p.heads, "vocab_size": 300,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": p.tied, "use_cache": p.cache,
        "n_routed_experts": p.experts, "num_experts_per_tok": p.top_k, "n_group": p.n_group, "topk_group": p.topk_group,
        "n_shared_experts": p.shared, "first_k_dense_replace": p.first_k_dense, "q_lora_rank": p.q_lora_rank,
        "kv_lora_rank": p.kv_lora_rank, "qk_nope_head_dim": p.nope, "qk_rope_head_dim": p.rope, "v_head_dim": p.v,
        "rope_interleave": p.interleave, "norm_topk_prob": p.norm_topk_prob, "attention_bias": p.bias,
    });
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
        lc.bias = p.lora_bias;
        lc.modules_to_save = p.saves.iter().map(|m| m.to_string()).collect();
    }
    if let Some((double_quant, compute_dtype, prepare)) = p.four_bit {
        use vramscope::model::bnb::{kernel_for, Bnb, Bnb4bit, Quant};
        let q = Bnb4bit { quant_type: "nf4".into(), double_quant, compute_dtype, kernel: kernel_for(None), quant_storage: vramscope::engine::DType::U8 };
        hf.bnb = Some(Bnb { quant: Quant::FourBit(q), load_dtype: vramscope::engine::DType::BF16, prepare });
    }
    let m = hf.moe.as_mut().unwrap();
    m.implementation = p.implementation;
    m.routing = p.routing.clone();
    cfg
}

/// Compares one point; returns the simulated training peak over the closed form's bound.
fn check(p: &Point) -> f64 {
    let cfg = config(p);
    // RoPE's inv_freq and original_inv_freq (d_r/2 fp32 each) and each sparse layer's
    // e_score_correction_bias buffer (E, in the load dtype).
    let sparse = (p.layers.saturating_sub(p.first_k_dense) * p.experts) as u64;
    let params = vramscope::analyse::estimate::estimate(&cfg, p.precision, p.b, p.s).params;
    assert_eq!(params, cfg.param_count() + cfg.lora_param_count() + cfg.modules_to_save_count(), "{p:?}: parameter count");
    // (Double quantization adds its process-wide 256-entry fp32 map.)
    let qmap = if p.four_bit.is_some_and(|q| q.0) { 256 * 4 } else { 0 };
    estimate_common::compare_moe(&cfg, p.precision, p.b, p.s, &format!("{p:?}"), |e| 2 * (p.rope as u64 / 2) * 4 + sparse * e.param_elem + qmap)
}

fn run(points: &[Point], limit: f64) {
    estimate_common::run_points(points, limit, check);
}

/// The shapes: (d, heads, q_lora_rank, kv_lora_rank, nope, rope, v, experts, top_k, n_group,
/// topk_group, shared experts, first_k_dense).
#[allow(clippy::type_complexity)]
const SHAPES: [(usize, usize, Option<usize>, usize, usize, usize, usize, usize, usize, usize, usize, usize, usize); 6] = [
    (64, 4, Some(48), 32, 16, 8, 16, 8, 2, 2, 1, 1, 1),
    (96, 2, None, 24, 24, 16, 32, 4, 1, 1, 1, 2, 0),
    (64, 4, Some(32), 48, 16, 8, 20, 16, 4, 4, 2, 1, 2),
    (128, 8, None, 64, 8, 8, 8, 6, 3, 3, 2, 2, 1),
    (64, 2, Some(16), 16, 32, 16, 16, 12, 2, 3, 3, 1, 3),
    (96, 4, Some(64), 32, 16, 24, 32, 16, 4, 8, 4, 2, 1),
];

fn shaped(n: usize) -> Point {
    let (d, heads, q_lora_rank, kv_lora_rank, nope, rope, v, experts, top_k, n_group, topk_group, shared, first_k_dense) = SHAPES[n % SHAPES.len()];
    Point { d, heads, q_lora_rank, kv_lora_rank, nope, rope, v, experts, top_k, n_group, topk_group, shared, first_k_dense, interleave: n.is_multiple_of(2), ..base() }
}

/// The experts implementations × fp32/pure bf16 × balanced/worst over the shapes, under eager
/// and sdpa; then checkpointing (none, non-reentrant, reentrant) × use_cache, B and S (1
/// included), a routing file, norm_topk_prob off, biases, every layer dense, a tied head.
fn grid() -> Vec<Point> {
    let mut points = Vec::new();
    let mut n = 0;
    for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
        for implementation in ExpertsImplementation::ALL {
            for precision in [Precision::Fp32, Precision::PureBf16] {
                for routing in [Routing::Balanced, Routing::Worst] {
                    points.push(Point { implementation, precision, routing, attn, ..shaped(n) });
                    n += 1;
                }
            }
        }
    }
    for ckpt in [None, Some(false), Some(true)] {
        for cache in [true, false] {
            for (b, s) in [(1, 16), (3, 20)] {
                let implementation = ExpertsImplementation::ALL[(b + usize::from(cache)) % 3];
                let attn = if b == 1 { AttnImplementation::Sdpa } else { AttnImplementation::Eager };
                points.push(Point { ckpt, cache, b, s, implementation, attn, routing: Routing::Worst, ..shaped(b + usize::from(cache)) });
            }
        }
    }
    for (b, s) in [(1, 1), (4, 1), (1, 33)] {
        for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
            for precision in [Precision::Fp32, Precision::PureBf16] {
                points.push(Point { b, s, attn, precision, ..base() });
            }
        }
    }
    for implementation in ExpertsImplementation::ALL {
        let p = base();
        points.push(Point { routing: estimate_common::skewed(p.b * p.s, 3, 8), top_k: 3, implementation, ..p });
        points.push(Point { norm_topk_prob: false, bias: true, implementation, precision: Precision::PureBf16, ..base() });
    }
    // v's head size equal to q's (d_n + d_r): sdpa's fused kernels (fp32 auto: the
    // memory-efficient one; pure bf16 auto: flash; the CPU kernel), and the math backend.
    for (precision, backend) in [(Precision::Fp32, SdpaBackend::Auto), (Precision::PureBf16, SdpaBackend::Auto), (Precision::Fp32, SdpaBackend::CpuFlash), (Precision::PureBf16, SdpaBackend::CpuFlash), (Precision::Fp32, SdpaBackend::Math), (Precision::PureBf16, SdpaBackend::Math)] {
        for (b, s, n) in [(2, 24, 0), (1, 40, 1), (3, 17, 3)] {
            let p = shaped(n);
            points.push(Point { attn: AttnImplementation::Sdpa, backend, precision, b, s, v: p.nope + p.rope, ..p });
        }
    }
    points.push(Point { first_k_dense: 3, ..base() });
    points.push(Point { first_k_dense: 5, precision: Precision::PureBf16, attn: AttnImplementation::Sdpa, ..base() });
    points.push(Point { tied: true, first_k_dense: 0, layers: 2, ..base() });
    points.push(Point { precision: Precision::PureBf16, ckpt: Some(false), implementation: ExpertsImplementation::BatchedMm, ..base() });
    points
}

/// peft's LoRA on the latent attention (everything else frozen): target sets (each linear
/// alone, the query path, the key/value path, all of them) with q_lora_rank set and None,
/// r, dropout, fp32 and pure bf16, eager and sdpa (math, and the fused kernels where v's head
/// size equals q's), each experts implementation, first_k_dense_replace (layer 0 dense or
/// sparse), checkpointing, use_cache, B or S 1.
fn lora_grid() -> Vec<Point> {
    const Q_LORA: &[&str] = &["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"];
    const Q_PROJ: &[&str] = &["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"];
    let sets: [&'static [&'static str]; 8] = [&["q_a_proj"], &["q_b_proj"], &["kv_a_proj_with_mqa"], &["kv_b_proj"], &["o_proj"], &["q_a_proj", "q_b_proj"], &["kv_a_proj_with_mqa", "kv_b_proj"], Q_LORA];
    let mut points = Vec::new();
    let mut n = 0;
    for targets in sets {
        for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
            let precision = if n % 2 == 0 { Precision::Fp32 } else { Precision::PureBf16 };
            let dropout = if n % 3 == 1 { 0.1 } else { 0.0 };
            let cache = n % 4 != 3;
            points.push(Point { lora: Some((4 + 4 * (n % 2), dropout, targets)), attn, precision, cache, implementation: ExpertsImplementation::ALL[n % 3], first_k_dense: n % 3, routing: Routing::Worst, ..base() });
            n += 1;
        }
    }
    // q_lora_rank None: q_proj.
    for (n, targets) in [&["q_proj"][..], &["kv_b_proj"], &["o_proj"], Q_PROJ].into_iter().enumerate() {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            let p = shaped(1);
            points.push(Point { lora: Some((8, if n % 2 == 0 { 0.0 } else { 0.1 }, targets)), precision, attn: if n < 2 { AttnImplementation::Eager } else { AttnImplementation::Sdpa }, ..p });
        }
    }
    // Checkpointing, B or S 1, v's head size equal to q's (the fused kernels).
    for (ckpt, b, s) in [(Some(false), 2, 24), (Some(true), 1, 16), (None, 1, 33), (None, 4, 1)] {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            points.push(Point { lora: Some((8, 0.1, Q_LORA)), ckpt, cache: ckpt.is_none(), b, s, precision, ..base() });
        }
    }
    for (precision, backend) in [(Precision::Fp32, SdpaBackend::Auto), (Precision::PureBf16, SdpaBackend::Auto), (Precision::Fp32, SdpaBackend::CpuFlash), (Precision::PureBf16, SdpaBackend::Math)] {
        for targets in [&["q_b_proj"][..], &["kv_b_proj", "o_proj"], &["o_proj"], Q_LORA] {
            let p = shaped(0);
            points.push(Point { lora: Some((8, 0.0, targets)), attn: AttnImplementation::Sdpa, backend, precision, v: p.nope + p.rope, ..p });
        }
    }
    points
}

/// peft's `bias` ("all", "lora_only") on DeepSeek-V3 (measured: hf_grid/lora_extras_models.json):
/// attention_bias's q_a_proj, kv_a_proj_with_mqa and o_proj biases train (q_b_proj, q_proj and
/// kv_b_proj have none; the router's e_score_correction_bias is a buffer), so such a
/// projection's output needs a gradient in layer 0 too. Every other point of the LoRA grid under
/// both options with attention_bias on (and every fourth off: nothing to train), a
/// ParamWrapper point, and the optimizers that take interleaved biases.
#[test]
fn deepseek_v3_lora_bias_closed_form_equals_the_simulation() {
    use vramscope::model::lora::LoraBias;
    let mut points = Vec::new();
    for (n, p) in lora_grid().into_iter().enumerate().filter(|(n, _)| n % 2 == 0) {
        let lora_bias = if n % 4 == 0 { LoraBias::All } else { LoraBias::LoraOnly };
        points.push(Point { lora_bias, bias: n % 8 != 6, ..p });
    }
    points.push(Point { lora_bias: LoraBias::All, bias: true, lora: Some((8, 0.0, &["kv_b_proj"])), params: &["mlp.experts.down_proj"], first_k_dense: 0, ..base() });
    points.push(Point { lora_bias: LoraBias::LoraOnly, bias: true, lora: Some((8, 0.0, &["o_proj"])), q_lora_rank: None, precision: Precision::PureBf16, ckpt: Some(false), cache: false, ..base() });
    assert!(points.len() >= 12);
    run(&points, 1.6);
    for kind in [OptimizerKind::AdamwTorch, OptimizerKind::Sgd, OptimizerKind::AdamwTorchFused] {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            let p = Point { lora_bias: LoraBias::All, bias: true, lora: Some((8, 0.0, &["q_b_proj", "o_proj"])), precision, ..base() };
            estimate_common::compare_optimizer(&config(&p), precision, p.b, p.s, kind, &format!("{p:?} {kind:?}"));
        }
    }
}

/// peft's ParamWrapper (`--target-parameters`) on the sparse layers' router and routed experts
/// (the dense first_k_dense_replace layers have none): every subset of the three parameters,
/// alone and with LoRA on the latent attention, each experts implementation, fp32 and pure bf16,
/// first_k_dense_replace 0 (layer 0 sparse, its input needing no gradient) to 2, checkpointing,
/// the cache, eager and sdpa.
#[test]
fn deepseek_v3_target_parameters_closed_form_equals_the_simulation() {
    run(&params_points(), 1.5);
}

fn params_points() -> Vec<Point> {
    const GU: &str = "mlp.experts.gate_up_proj";
    const DN: &str = "mlp.experts.down_proj";
    const R: &str = "mlp.gate.weight";
    let sets: [&'static [&'static str]; 7] = [&[GU, DN], &[R], &[GU], &[DN], &[R, GU, DN], &[R, DN], &[R, GU]];
    let mut points = Vec::new();
    let mut n = 0;
    for params in sets {
        for implementation in ExpertsImplementation::ALL {
            let precision = if n % 2 == 0 { Precision::Fp32 } else { Precision::PureBf16 };
            let ckpt = [None, None, Some(false), None, Some(true)][n % 5];
            let modules: &'static [&'static str] = [&[][..], &["q_b_proj", "kv_b_proj"][..], &["o_proj"][..]][n % 3];
            let attn = if n % 4 == 3 { AttnImplementation::Sdpa } else { AttnImplementation::Eager };
            n += 1;
            // (Without module adapters only first_k_dense_replace 0 is derived: refused below.)
            let first_k_dense = if modules.is_empty() { 0 } else { n % 3 };
            points.push(Point { lora: Some((4 + 4 * (n % 2), 0.0, modules)), params, implementation, precision, ckpt, cache: ckpt.is_none(), first_k_dense, routing: if n % 2 == 0 { Routing::Worst } else { Routing::Balanced }, attn, ..base() });
        }
        // Every shape (q_lora_rank or q_proj, experts, top-k, groups, shared experts), with
        // attention adapters over its dense layers, fp32 and pure bf16.
        for precision in [Precision::Fp32, Precision::PureBf16] {
            let p = shaped(n);
            let modules: &'static [&'static str] = if p.q_lora_rank.is_some() { &["q_a_proj", "kv_b_proj"] } else { &["q_proj", "o_proj"] };
            let implementation = ExpertsImplementation::ALL[n % 3];
            n += 1;
            points.push(Point { lora: Some((8, 0.0, modules)), params, precision, implementation, ..p });
        }
    }
    points
}

/// peft's ParamWrapper without module adapters over first_k_dense_replace dense layers (the
/// published DeepSeek-V3's shape): the dense layers train nothing, so neither their inputs nor
/// the first sparse layer's need a gradient (that layer keeps only what the folds need, the
/// dense ones only their DynamicCache). Every subset of the three parameters, 1–3 dense layers
/// (every layer dense too), fp32 and pure bf16, each experts implementation, checkpointing
/// (both kinds), the cache, routing, eager and sdpa, and the shapes.
#[test]
fn deepseek_v3_target_parameters_dense_first_closed_form_equals_the_simulation() {
    // Everything stated is exact on every point. batched_mm's gathered (B·S·k, I, d) expert
    // weights are forward transients the bound leaves out, large beside what a model keeps
    // when only its last layer trains: up to 3.41× there.
    let (batched, rest): (Vec<Point>, Vec<Point>) = dense_first_points().into_iter().partition(|p| p.implementation == ExpertsImplementation::BatchedMm);
    assert!(batched.len() + rest.len() >= 10);
    run(&rest, 1.5);
    run(&batched, 3.5);
}

fn dense_first_points() -> Vec<Point> {
    const GU: &str = "mlp.experts.gate_up_proj";
    const DN: &str = "mlp.experts.down_proj";
    const R: &str = "mlp.gate.weight";
    let sets: [&'static [&'static str]; 7] = [&[GU, DN], &[R], &[GU], &[DN], &[R, GU, DN], &[R, DN], &[R, GU]];
    let mut points = Vec::new();
    let mut n = 0;
    for params in sets {
        for implementation in ExpertsImplementation::ALL {
            let precision = if n % 2 == 0 { Precision::Fp32 } else { Precision::PureBf16 };
            let ckpt = [None, None, Some(false), None, Some(true)][n % 5];
            let attn = if n % 4 == 3 { AttnImplementation::Sdpa } else { AttnImplementation::Eager };
            let (first_k_dense, layers) = [(1, 3), (2, 4), (3, 4), (1, 2)][n % 4];
            n += 1;
            points.push(Point { lora: Some((4 + 4 * (n % 2), 0.0, &[])), params, implementation, precision, ckpt, cache: ckpt.is_none() && n % 3 != 0, first_k_dense, layers, routing: if n % 2 == 0 { Routing::Worst } else { Routing::Balanced }, attn, ..base() });
        }
    }
    for precision in [Precision::Fp32, Precision::PureBf16] {
        for k in 0..3 {
            let p = shaped(n);
            n += 1;
            // (At least one dense layer, and a sparse one for the parameters to match.)
            let first_k_dense = p.first_k_dense.clamp(1, p.layers - 1);
            points.push(Point { lora: Some((8, 0.0, &[])), params: sets[(n + k) % 7], precision, first_k_dense, implementation: ExpertsImplementation::ALL[k], ..p });
        }
    }
    // Only the last layer sparse: no layer's RoPE needs a gradient, so nothing keeps cos/sin.
    points.push(Point { lora: Some((8, 0.0, &[])), params: &[R, GU, DN], first_k_dense: 2, layers: 3, implementation: ExpertsImplementation::BatchedMm, ..base() });
    points
}

/// peft's ParamWrapper under autocast: the two ParamWrapper grids above (with and without
/// module adapters, dense first layers or none) under bf16 autocast over fp32 weights (the
/// fp32 points; every fourth under fp16) and over bf16 weights (the pure bf16 points).
#[test]
fn deepseek_v3_target_parameters_autocast_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for (n, p) in params_points().into_iter().chain(dense_first_points()).enumerate() {
        let precision = match p.precision {
            Precision::PureBf16 => Precision::PureBf16Autocast,
            _ if n % 4 == 0 => Precision::Fp16,
            _ => Precision::Bf16,
        };
        points.push(Point { precision, ..p });
    }
    let (grouped, cast): (Vec<Point>, Vec<Point>) = points.into_iter().partition(|p| p.implementation == ExpertsImplementation::GroupedMm);
    run(&grouped, 1.5);
    run(&cast, 3.5);
}

#[test]
fn deepseek_v3_lora_closed_form_equals_the_simulation() {
    run(&lora_grid(), 1.40);
}

/// QLoRA on DeepSeek-V3: the latent attention's linears and the dense and shared-expert MLPs
/// 4-bit (attention_bias's biases in the compute dtype), the router and experts frozen in the
/// load dtype (fp32 after prepare_model_for_kbit_training): nf4 ± double quant, compute dtype
/// fp32/bf16, with and without prepare, q_lora_rank or q_proj, attention_bias, each experts
/// implementation, checkpointing, B, S, r and targets.
#[test]
fn deepseek_v3_qlora_closed_form_equals_the_simulation() {
    use vramscope::engine::DType;
    const Q_LORA: &[&str] = &["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"];
    let mut points = Vec::new();
    let mut n = 0;
    for (dq, compute, prepare) in [(false, DType::F32, true), (true, DType::BF16, true), (true, DType::F32, false), (false, DType::BF16, false)] {
        let precision = if prepare { Precision::Fp32 } else { Precision::PureBf16 };
        for ckpt in [None, Some(false), Some(true)] {
            let implementation = ExpertsImplementation::ALL[n % 3];
            let (b, s, r) = [(2, 24, 8), (1, 17, 16), (3, 12, 4)][n % 3];
            let (q_lora_rank, targets): (Option<usize>, &'static [&'static str]) = if n % 2 == 0 { (Some(48), Q_LORA) } else { (None, &["q_proj", "kv_b_proj", "o_proj"]) };
            let dropout = if n % 4 == 3 { 0.1 } else { 0.0 };
            n += 1;
            points.push(Point { four_bit: Some((dq, compute, prepare)), lora: Some((r, dropout, targets)), q_lora_rank, bias: n % 3 == 0, precision, ckpt, cache: ckpt.is_none(), implementation, b, s, ..base() });
        }
    }
    run(&points, 1.8);
}

/// Autocast over fp32 weights (the Trainer's bf16=True, and fp16=True): MLA's projections in
/// bf16, the latent norms' fp32 copies and outputs (the next linear's bf16 casts; the cache
/// holds the fp32 latent), the fp32 query cat and softmax cast by each matmul, sdpa's math
/// composite on its bf16 casts and the fused kernels, the bf16 router (sigmoid, gather,
/// routing weights) with its fp32 sum, the shared and dense MLPs in bf16, grouped_mm in fp32,
/// batched_mm's and eager's casts: the shapes × the experts implementations × eager and sdpa ×
/// balanced and worst routing, checkpointing (none, non-reentrant, reentrant) × use_cache, B
/// and S (1 included), v's head size equal to q's (the fused kernels), biases,
/// norm_topk_prob off, every layer dense, a tied head.
#[test]
fn deepseek_v3_autocast_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    let mut n = 0;
    for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
        for implementation in ExpertsImplementation::ALL {
            for routing in [Routing::Balanced, Routing::Worst] {
                // bf16 autocast over fp32 and bf16 weights, fp16 over fp32.
                let precision = [Precision::Bf16, Precision::PureBf16Autocast, Precision::Bf16, Precision::Fp16][n % 4];
                points.push(Point { implementation, precision, routing, attn, ..shaped(n) });
                n += 1;
            }
        }
    }
    for ckpt in [None, Some(false), Some(true)] {
        for cache in [true, false] {
            for (b, s) in [(1, 16), (3, 20)] {
                let implementation = ExpertsImplementation::ALL[(b + usize::from(cache)) % 3];
                let attn = if b == 1 { AttnImplementation::Sdpa } else { AttnImplementation::Eager };
                let precision = if b == 1 { Precision::PureBf16Autocast } else { Precision::Bf16 };
                points.push(Point { ckpt, cache, b, s, implementation, attn, precision, routing: Routing::Worst, ..shaped(b + usize::from(cache)) });
            }
        }
    }
    for (b, s) in [(1, 1), (4, 1), (1, 33)] {
        for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
            points.push(Point { b, s, attn, precision: Precision::Bf16, ..base() });
        }
    }
    for backend in [SdpaBackend::Auto, SdpaBackend::CpuFlash, SdpaBackend::Math] {
        for (b, s, n) in [(2, 24, 0), (1, 40, 1), (3, 17, 3)] {
            let p = shaped(n);
            let precision = if n == 1 { Precision::PureBf16Autocast } else { Precision::Bf16 };
            points.push(Point { attn: AttnImplementation::Sdpa, backend, precision, b, s, v: p.nope + p.rope, ..p });
        }
    }
    for implementation in ExpertsImplementation::ALL {
        points.push(Point { norm_topk_prob: false, bias: true, implementation, precision: Precision::Bf16, ..base() });
        points.push(Point { norm_topk_prob: true, bias: true, implementation, precision: Precision::PureBf16Autocast, ..base() });
    }
    points.push(Point { first_k_dense: 5, precision: Precision::Bf16, attn: AttnImplementation::Sdpa, ..base() });
    points.push(Point { tied: true, first_k_dense: 0, layers: 2, precision: Precision::Bf16, ..base() });
    // batched_mm's and eager's peak falls in the forward, where the gathered fp32 expert
    // weights (or each hit expert's casts) live beside what the bound counts.
    let (grouped, cast): (Vec<Point>, Vec<Point>) = points.into_iter().partition(|p| p.implementation == ExpertsImplementation::GroupedMm);
    run(&grouped, 1.40);
    run(&cast, 2.1);
}

#[test]
fn deepseek_v3_closed_form_equals_the_simulation() {
    run(&grid(), 1.40);
}

/// The optimizers the closed form derives, over DeepSeek-V3's registration order (the dense
/// layers' MLP, then the sparse layers' 3-D experts, router and shared experts; Adafactor
/// factors the experts (E, 2I) and (E, d)): state and gradients equal the simulation's, and
/// the training peak lies above the bound.
#[test]
fn deepseek_v3_optimizers() {
    for (first_k_dense, q_lora_rank) in [(1, Some(48)), (0, None), (3, Some(16))] {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            for kind in [OptimizerKind::AdamwTorch, OptimizerKind::AdamwTorchFused, OptimizerKind::AdamwTorchForloop, OptimizerKind::Sgd, OptimizerKind::Adafactor] {
                let p = Point { precision, b: 1, s: 16, first_k_dense, q_lora_rank, bias: first_k_dense == 0, ..base() };
                let cfg = config(&p);
                estimate_common::compare_optimizer(&cfg, precision, p.b, p.s, kind, &format!("first_k_dense {first_k_dense} {precision:?} {kind:?}"));
                // Over the latent attention's LoRA adapters, in registration order.
                let targets: &'static [&'static str] = if q_lora_rank.is_some() { &["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"] } else { &["q_proj", "kv_b_proj", "o_proj"] };
                let p = Point { lora: Some((8, 0.0, targets)), ..p };
                let cfg = config(&p);
                estimate_common::compare_optimizer(&cfg, precision, p.b, p.s, kind, &format!("LoRA first_k_dense {first_k_dense} {precision:?} {kind:?}"));
            }
        }
    }
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).arg("estimate").args(args).output().unwrap()
}

/// An `estimate --json` document's activations (the sparse block over the sparse layers, the
/// dense block over the first_k_dense_replace ones, and outside) against the meta simulation
/// it carries.
fn assert_json_activations(v: &serde_json::Value, what: &str) {
    let e = &v["estimate"];
    let bytes = |ts: &serde_json::Value| ts.as_array().unwrap().iter().map(|t| t["elements"].as_u64().unwrap() * t["elem"].as_u64().unwrap()).sum::<u64>();
    let layers = e["layers"].as_u64().unwrap();
    let (dense, dense_layers) = match e["sliding_block"].as_object() {
        Some(b) => {
            assert_eq!(b["kind"], "dense", "{what}");
            (bytes(&b["block"]), b["layers"].as_array().unwrap().len() as u64)
        }
        None => (0, 0),
    };
    let mut total = (layers - dense_layers) * bytes(&e["block"]) + dense_layers * dense + bytes(&e["outside"]);
    // Under peft layer 0 keeps its own block (its input needs no gradient), or the first
    // sparse layer where the dense layers before it train nothing.
    if e["first_block"].is_array() {
        let at = e["first_block_layer"].as_u64().unwrap();
        total = total - if at < dense_layers { dense } else { bytes(&e["block"]) } + bytes(&e["first_block"]);
    }
    assert_eq!(total, v["simulated"]["activation_bytes"].as_u64().unwrap(), "{what}");
}

/// Through the CLI: a deepseek_v3 config.json estimates with the JSON's activations equal to
/// the simulated ones under each experts implementation, routing and attention; the preset
/// states its closed form at S 4096.
#[test]
fn deepseek_v3_estimate_cli() {
    let dir = scratch::dir().join(format!("vramscope-estimate-deepseek-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("e.json");
    let cfg = dir.join("deepseek_v3.json");
    std::fs::write(
        &cfg,
        r#"{"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 160, "moe_intermediate_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "vocab_size": 300, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
        "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 32, "kv_lora_rank": 24, "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8, "v_head_dim": 16, "max_position_embeddings": 4096}"#,
    )
    .unwrap();
    let counts = dir.join("counts.txt");
    // 2 × 24 tokens × top-2 = 96 routed rows, one expert taking every token.
    std::fs::write(&counts, "48 8 8 8 8 8 4 4").unwrap();
    let runs: [(&str, &str, &[&str]); 6] = [
        ("grouped_mm", "balanced", &["--attn-implementation", "eager"]),
        // bf16 autocast over fp32 weights, and over bf16 weights (sdpa's math composite).
        ("batched_mm", "worst", &["--attn-implementation", "eager", "--dtype", "float32", "--precision", "bf16"]),
        ("eager", "balanced", &["--attn-implementation", "sdpa", "--sdpa-backend", "math", "--dtype", "bfloat16", "--precision", "bf16"]),
        ("batched_mm", "worst", &["--attn-implementation", "sdpa", "--sdpa-backend", "math"]),
        ("eager", counts.to_str().unwrap(), &["--attn-implementation", "sdpa", "--sdpa-backend", "cpu_flash", "--dtype", "bfloat16"]),
        ("grouped_mm", "worst", &["--attn-implementation", "eager", "--gradient-checkpointing", "non-reentrant"]),
    ];
    // peft's bias over attention_bias's q_a_proj, kv_a_proj_with_mqa and o_proj biases: stated,
    // and equal to the simulation.
    let biased = dir.join("deepseek_v3_bias.json");
    std::fs::write(&biased, std::fs::read_to_string(&cfg).unwrap().replacen("{", r#"{"attention_bias": true, "#, 1)).unwrap();
    for bias in ["all", "lora_only"] {
        let o = cli(&["--config", biased.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--attn-implementation", "eager", "--lora-r", "8", "--target-modules", "q_b_proj,o_proj", "--lora-bias", bias, "--json", json.to_str().unwrap()]);
        assert!(o.status.success(), "bias {bias}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("bias elements"), "bias {bias}: no trained biases stated");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_json_activations(&v, &format!("bias {bias}"));
        for k in ["param_bytes", "grad_bytes", "optimizer_bytes"] {
            let sim = k.replace("param_", "parameter_").replace("grad_", "gradient_");
            assert_eq!(v["estimate"][k], v["simulated"][sim.as_str()], "bias {bias}: {k}");
        }
    }
    for (implementation, routing, extra) in runs {
        let args = [&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "24", "--experts-implementation", implementation, "--routing", routing, "--json", json.to_str().unwrap()][..], extra].concat();
        let o = cli(&args);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        // (Checkpointed, every layer keeps its input only.)
        let router = if extra.contains(&"--gradient-checkpointing") { "gradient checkpointing every layer" } else { "router sigmoid(logits)" };
        for needle in ["transformers 5.23.0 deepseek_v3", &format!("experts_implementation {implementation}"), router, "L_dense·3d·F_d"] {
            assert!(text.contains(needle), "{args:?}: missing {needle:?} in\n{text}");
        }
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_json_activations(&v, &format!("{args:?}"));
    }
    // The preset at full size, closed form only (transformers' default sdpa needs a backend
    // named for v's head size 128 unlike q's 192).
    let o = cli(&["--preset", "DeepSeek-V3", "--context-length", "4096", "--attn-implementation", "eager", "--no-simulate"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for needle in ["deepseek_v3", "671026404352", "the 3 dense layers' block", "kv_a_layernorm", "58 sparse + 3 dense blocks", "d_n 128 + d_r 64", "r_q 1536, r_kv 512"] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // The preset's widths over 4 layers (3 dense, 1 sparse) under the Trainer's bf16=True, over
    // fp32 masters and over its bf16 weights, equal to the simulated run.
    // With LoRA under autocast over the fp32 masters too (the frozen linears' uncached casts).
    // And peft's ParamWrapper on the router and experts under autocast over both.
    for precision in [
        &["--dtype", "float32", "--precision", "bf16"][..],
        &["--precision", "bf16"][..],
        &["--dtype", "float32", "--precision", "bf16", "--lora-r", "8", "--target-modules", "q_a_proj,kv_b_proj"][..],
        &["--dtype", "float32", "--precision", "bf16", "--lora-r", "8", "--target-parameters", "mlp.gate.weight,mlp.experts.down_proj"][..],
        &["--precision", "bf16", "--lora-r", "8", "--target-parameters", "mlp.experts.gate_up_proj", "--target-modules", "o_proj"][..],
    ] {
        let args = [&["--preset", "DeepSeek-V3", "--num-layers", "4", "--batch-size", "1", "--context-length", "256", "--attn-implementation", "eager", "--json", json.to_str().unwrap()][..], precision].concat();
        let o = cli(&args);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_json_activations(&v, &format!("{args:?}"));
    }
    // peft's ParamWrapper alone over the published shape's 3 dense layers (4 layers, its bf16
    // weights): block 3, the first sparse layer, is its own.
    let args = ["--preset", "DeepSeek-V3", "--num-layers", "4", "--batch-size", "1", "--context-length", "64", "--attn-implementation", "eager", "--lora-r", "8", "--target-parameters", "mlp.gate.weight,mlp.experts.gate_up_proj,mlp.experts.down_proj", "--json", json.to_str().unwrap()];
    let o = cli(&args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for needle in ["block 3, the first sparse layer", "the ParamWrapper's fold", "the 3 dense layers' block"] {
        assert!(text.contains(needle), "{args:?}: missing {needle:?} in\n{text}");
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["estimate"]["first_block_layer"], 3, "{args:?}");
    assert_json_activations(&v, &format!("{args:?}"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the closed form does not derive exits 2, naming the flag and pointing at `profile`,
/// with nothing written.
#[test]
fn deepseek_v3_not_derived_is_refused_naming_the_flag() {
    let dir = scratch::dir().join(format!("vramscope-estimate-deepseek-refusals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("counts.txt");
    std::fs::write(&bad, "10 10 10 10 10 10 10 10").unwrap();
    let json = dir.join("never.json");
    let ds = ["--preset", "DeepSeek-V3", "--batch-size", "1", "--context-length", "64", "--no-simulate", "--json", json.to_str().unwrap()];
    let ds = |attn: &'static str| [&ds[..], &["--attn-implementation", attn]].concat();
    let eager = ds("eager");
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        // (8-bit: profile's own refusal, which estimate runs first.)
        ([&eager[..], &["--lora-r", "8", "--target-modules", "q_b_proj", "--load-in-8bit"]].concat(), "--load-in-8bit", "not modelled"),
        ([&eager[..], &["--routing", bad.to_str().unwrap()]].concat(), "--routing", "counts for 256 experts"),
        // Every layer dense: peft finds no parameter to wrap.
        ([&eager[..], &["--num-layers", "3", "--lora-r", "8", "--target-parameters", "mlp.experts.down_proj"]].concat(), "--target-parameters", "NoMatchingPeftModuleError"),
        ([&eager[..], &["--output-router-logits"]].concat(), "--output-router-logits", "deepseek_v3"),
        (ds("flash_attention_2"), "--attn-implementation", "deepseek_v3"),
        // transformers' default sdpa, v's head size (128) unlike q's (192), no backend named.
        (ds("sdpa"), "--attn-implementation", "deepseek_v3"),
        // generate runs (tests/estimate_generate_families.rs); beam search is not derived.
        ([&eager[..], &["--profile-type", "generate", "--max-new-tokens", "4", "--num-beams", "2"]].concat(), "--num-beams", "greedy search"),
    ];
    // Latent-attention tensors too large to count (v_head_dim 2^40 over 128 heads at S 2^20).
    let huge = dir.join("huge.json");
    std::fs::write(&huge, r#"{"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 160, "moe_intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 128, "vocab_size": 300, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
        "q_lora_rank": 32, "kv_lora_rank": 24, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 1099511627776, "max_position_embeddings": 1048576}"#)
    .unwrap();
    let cases = [cases, vec![(vec!["--config", huge.to_str().unwrap(), "--attn-implementation", "eager", "--context-length", "1048576", "--no-simulate", "--json", json.to_str().unwrap()], "--context-length", "2^62")]].concat();
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
fn deepseek_v3_lora_pure_autocast_closed_form_equals_the_simulation() {
    let points: Vec<Point> = lora_grid().into_iter().map(|p| Point { precision: Precision::PureBf16Autocast, ..p }).collect();
    run(&points, 1.40);
}

/// Pure fp16 weights (a float16 checkpoint, no autocast): the pure bf16 points of the grids
/// above (with and without LoRA) over fp16 parameters: pure bf16's terms, byte for byte.
#[test]
fn deepseek_v3_pure_fp16_closed_form_equals_the_simulation() {
    let fp16 = |p: Point| Point { precision: Precision::PureFp16, ..p };
    let points: Vec<Point> = grid().into_iter().chain(lora_grid()).filter(|p| p.precision == Precision::PureBf16).map(fp16).collect();
    assert!(points.len() >= 12, "{} points", points.len());
    run(&points, 1.8);
}

/// peft's LoRA under autocast over fp32 weights (the Trainer's bf16=True / fp16=True on an fp32
/// load): the LoRA grid above under bf16 (fp16 on every third point). Each frozen linear whose
/// input needs a gradient keeps its weight's uncached low cast (the latent attention's, the
/// dense and shared MLPs', the router's, lm_head's) beside the autocast block's terms, which
/// already follow the gradients; the cache holds the adapters' casts.
#[test]
fn deepseek_v3_lora_autocast_closed_form_equals_the_simulation() {
    let points: Vec<Point> = lora_grid().into_iter().enumerate().map(|(n, p)| Point { precision: if n % 3 == 2 { Precision::Fp16 } else { Precision::Bf16 }, ..p }).collect();
    // (batched_mm's and eager's gathered and cast expert weights: forward transients the bound
    // leaves out, as in tests/estimate_moe.rs.)
    let (grouped, cast): (Vec<Point>, Vec<Point>) = points.into_iter().partition(|p| p.implementation == ExpertsImplementation::GroupedMm);
    run(&grouped, 1.35);
    run(&cast, 2.4);
}

/// peft's modules_to_save (embed_tokens, lm_head, both; measured: hf_grid/lora_extras_models.json)
/// on DeepSeek-V3 in the weights' type (profile refuses it under autocast): the trained copies, their
/// gradients and optimizer state; embed_tokens' copy makes layer 0's input need a gradient,
/// lm_head's keeps its input. Every other point of the LoRA grid under each set.
#[test]
fn deepseek_v3_modules_to_save_closed_form_equals_the_simulation() {
    let sets: [&'static [&'static str]; 3] = [&["embed_tokens"], &["lm_head"], &["embed_tokens", "lm_head"]];
    let mut points = Vec::new();
    for (n, p) in lora_grid().into_iter().enumerate().filter(|(n, _)| n % 2 == 0) {
        points.push(Point { saves: sets[n / 2 % 3], tied: n % 6 == 0, ..p });
    }
    assert!(points.len() >= 12, "{} points", points.len());
    run(&points, 1.6);
}
