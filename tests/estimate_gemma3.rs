//! `vramscope estimate` for Gemma 3's text model: the closed form
//! (src/analyse/estimate/hf/gemma3.rs over Gemma 2's layer) against the simulated meta run of
//! transformers 5.23's op sequence (byte-exact against transformers in tests/families_grid.rs):
//! q_norm/k_norm, a cos/sin pair per layer type, the full and sliding masks, and under sdpa
//! the kernel each layer type gets on CUDA (the full layers unmasked, the sliding layers given
//! the window's mask once S reaches it: repeat_kv and the memory-efficient kernel keeping the
//! padded additive mask). Everything the estimate states exactly (parameters, gradients,
//! optimizer state, the autocast cache, logits, activations and the live set when the forward
//! returns) must equal the simulation byte for byte; the training peak is the lower bound
//! tests/estimate_hf.rs states.
mod scratch;
mod estimate_common;
use estimate_common::sum;
use vramscope::analyse::estimate::{estimate_with, hf};
use vramscope::model::hf::{Arch, AttnImplementation, HfConfig, SdpaBackend};
use vramscope::model::{Flavour, ModelConfig};
use vramscope::session::estimate::simulate;
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::Precision;

#[derive(Clone, Debug)]
struct Point {
    attn: AttnImplementation,
    backend: SdpaBackend,
    precision: Precision,
    /// None, non-reentrant (false) or reentrant (true).
    ckpt: Option<bool>,
    cache: bool,
    kv_heads: usize,
    tied: bool,
    /// Per layer, whether it is a sliding layer.
    sliding: Vec<bool>,
    window: usize,
    optim: OptimizerKind,
    b: usize,
    s: usize,
}

fn base() -> Point {
    Point {
        attn: AttnImplementation::Sdpa,
        backend: SdpaBackend::Auto,
        precision: Precision::Fp32,
        ckpt: None,
        cache: true,
        kv_heads: 2,
        tied: true,
        sliding: vec![true, false, true],
        window: 16,
        optim: OptimizerKind::AdamwTorchFused,
        b: 2,
        s: 40,
    }
}

fn config(p: &Point) -> ModelConfig {
    let (d, h) = (128, 4);
    let mut hf = HfConfig::new(Arch::Gemma3Text, d / h);
    hf.attn_implementation = p.attn;
    hf.sdpa_backend = p.backend;
    hf.use_cache = p.cache;
    hf.reentrant = p.ckpt == Some(true);
    let mut g = vramscope::model::hf::gemma::published(Arch::Gemma3Text, p.sliding.len(), p.window, 24.0, 10_000.0);
    g.sliding = p.sliding.clone();
    hf.gemma = Some(g);
    estimate_common::hf_model(hf, p.sliding.len(), p.kv_heads, p.tied, p.ckpt)
}

/// Compares one point; returns the simulated training peak over the closed form's bound.
fn check(p: &Point) -> f64 {
    let cfg = config(p);
    let name = format!("{p:?}");
    hf::check(&cfg, p.precision, p.s).unwrap_or_else(|e| panic!("{name}: refused: {e}"));
    let mut optim = OptimConfig::reference(Flavour::Hf);
    optim.kind = p.optim;
    let e = estimate_with(&cfg, p.precision, p.b, p.s, &optim);
    let sim = simulate(&cfg, p.precision, p.b, p.s, &optim).unwrap();
    assert_eq!(e.param_bytes, sim.parameter_bytes, "{name}: parameters");
    assert_eq!(e.grad_bytes, sim.gradient_bytes, "{name}: gradients");
    assert_eq!(e.optimizer_bytes, sim.optimizer_bytes, "{name}: optimizer state");
    assert_eq!(e.autocast_cache_bytes, sim.autocast_cache_bytes, "{name}: autocast cache");
    assert_eq!(e.logits.bytes(), sim.logits_bytes, "{name}: logits");
    let act = e.activation_bytes() as i64 - sim.activation_bytes as i64;
    let u = (p.b * p.s * 128) as i64;
    let sliding = e.sliding_block.as_ref().map_or(0, |b| sum(&b.block));
    assert_eq!(
        e.activation_bytes(),
        sim.activation_bytes,
        "{name}: activations when the forward returns (block {} bytes, sliding block {sliding}, outside {}; off by {act} = {:.3} a-elements)",
        e.block_bytes(),
        sum(&e.outside),
        act as f64 / u as f64
    );
    // The live set also holds the batch (input_ids, labels: (B, S) int64 each), an inv_freq
    // and original_inv_freq (d_h/2 fp32 each) per layer type present and the 0-d embed_scale.
    let batch = 2 * (p.b * p.s * 8) as u64;
    let types = cfg.hf().unwrap().gemma.as_ref().unwrap().types().len() as u64;
    let buffers = types * 2 * (cfg.head_dim() as u64 / 2) * 4 + estimate_common::embed_scale_bytes(true, p.precision);
    assert_eq!(e.forward_bytes() + batch + buffers, sim.forward_live_bytes, "{name}: live when the forward returns");
    let bound = e.training_bytes();
    assert!(bound <= sim.training_peak_allocated, "{name}: bound {bound} above the simulated peak {}", sim.training_peak_allocated);
    sim.training_peak_allocated as f64 / bound as f64
}

/// Checks every point, reporting each failure; the simulated peak must lie within `limit`×
/// the bound (backward's transients lie above it).
fn run(points: &[Point], limit: f64) {
    estimate_common::run_points(points, limit, check);
}

/// Eager and sdpa × fp32/pure bf16/autocast bf16 × checkpointing × use_cache × (B, S) with S
/// above the window (16) and not a multiple of 16 (the memory-efficient kernel pads the mask).
#[test]
fn gemma3_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
        for precision in [Precision::Fp32, Precision::PureBf16, Precision::Bf16] {
            for ckpt in [None, Some(false), Some(true)] {
                for cache in [true, false] {
                    for (b, s) in [(1, 24), (3, 40)] {
                        points.push(Point { attn, precision, ckpt, cache, b, s, ..base() });
                    }
                }
            }
        }
    }
    run(&points, 1.30);
}

/// The window against S (below it: no sdpa mask anywhere; equal; a multiple of 16), the
/// layer patterns (all sliding; Gemma 3's five sliding layers to one full), MHA (the full
/// layers' fp32 kernel is then memory-efficient too), fp16 autocast, tied or not, and the
/// backends pinned (math, the CPU kernel with the mask).
#[test]
fn gemma3_windows_patterns_and_backends() {
    let mut points = Vec::new();
    for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
        for precision in [Precision::Fp32, Precision::PureBf16, Precision::Bf16] {
            for (window, s) in [(64, 40), (32, 32), (16, 48)] {
                points.push(Point { attn, precision, window, s, ..base() });
                points.push(Point { attn, precision, window, s, ckpt: Some(false), ..base() });
            }
            points.push(Point { attn, precision, sliding: vec![true, true], ..base() });
            points.push(Point { attn, precision, sliding: vec![true, true], ckpt: Some(true), ..base() });
            points.push(Point { attn, precision, sliding: vec![true, true, true, true, true, false], b: 1, s: 20, ..base() });
            points.push(Point { attn, precision, kv_heads: 4, tied: false, ..base() });
            points.push(Point { attn, precision, kv_heads: 1, s: 17, ..base() });
        }
        points.push(Point { attn, precision: Precision::Fp16, ..base() });
    }
    for (backend, precision) in [(SdpaBackend::Math, Precision::Fp32), (SdpaBackend::Math, Precision::PureBf16), (SdpaBackend::CpuFlash, Precision::Fp32), (SdpaBackend::CpuFlash, Precision::PureBf16)] {
        for cache in [true, false] {
            points.push(Point { backend, precision, cache, ..base() });
        }
        points.push(Point { backend, precision, window: 64, ..base() });
    }
    points.push(Point { backend: SdpaBackend::Efficient, kv_heads: 4, ..base() });
    points.push(Point { backend: SdpaBackend::Efficient, kv_heads: 4, precision: Precision::Bf16, cache: false, ..base() });
    run(&points, 1.30);
}

/// The optimizers the closed form derives over Gemma 3's parameters (four norms and two
/// d_h-wide q/k norms per layer): state and gradients equal, the peak above the bound.
#[test]
fn gemma3_optimizers() {
    let mut points = Vec::new();
    for precision in [Precision::Fp32, Precision::PureBf16] {
        for optim in [OptimizerKind::AdamwTorch, OptimizerKind::AdamwTorchForloop, OptimizerKind::Sgd, OptimizerKind::Adafactor] {
            points.push(Point { precision, optim, b: 1, s: 32, ..base() });
            points.push(Point { precision, optim, attn: AttnImplementation::Eager, ckpt: Some(false), ..base() });
        }
    }
    // Small activations beside the optimizers' transients: 1.315× seen here.
    run(&points, 1.40);
}

/// What the closed form does not derive for Gemma 3 is refused naming the flag: PyTorch's
/// flash kernel given the sliding layers' mask, SDPA's math backend under autocast, the
/// memory-efficient kernel with grouped-query attention (unmasked full layers), and
/// flash_attention_2.
#[test]
fn gemma3_not_derived_is_refused() {
    let refused = [
        (Point { backend: SdpaBackend::Flash, precision: Precision::PureBf16, ..base() }, "--sdpa-backend", "mask"),
        (Point { backend: SdpaBackend::Math, precision: Precision::Bf16, ..base() }, "--sdpa-backend", "autocast"),
        (Point { backend: SdpaBackend::Efficient, ..base() }, "--sdpa-backend", "grouped-query"),
        (Point { attn: AttnImplementation::FlashAttention2, precision: Precision::PureBf16, ..base() }, "--attn-implementation", "flash_attention_2"),
    ];
    for (p, flag, needle) in refused {
        let e = hf::check(&config(&p), p.precision, p.s).expect_err(&format!("{p:?}"));
        assert_eq!(e.flag, flag, "{p:?}: {e}");
        assert!(e.to_string().contains(needle), "{p:?}: {e}");
    }
    // The flash kernel is fine where no layer sees a mask (S below the window).
    let p = Point { backend: SdpaBackend::Flash, precision: Precision::PureBf16, window: 64, ..base() };
    hf::check(&config(&p), p.precision, p.s).unwrap();
}

/// Through the CLI: Gemma-3-27B's preset states its closed form at S 4096 (the sliding
/// layers' memory-efficient kernel with the window's mask beside the full layers' flash), and
/// a small Gemma 3 config.json's JSON blocks equal the simulated activations.
#[test]
fn gemma3_estimate_cli() {
    let run = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).arg("estimate").args(args).output().unwrap();
    let o = run(&["--preset", "Gemma-3-27B", "--batch-size", "1", "--context-length", "4096", "--pure-bf16", "--no-simulate"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for needle in ["gemma3_text", "sliding layers sdpa, efficient kernel", "full layers sdpa, flash kernel", "q_norm 1 + weight.float()", "RoPE cos of the sliding layers", "the 52 sliding layers' block", "L·(2d·h·d_h + 2d·h_kv·d_h + 3d·F + 4d + 2d_h (q_norm, k_norm))"] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    let dir = scratch::dir().join(format!("vramscope-estimate-gemma3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cfg, json) = (dir.join("config.json"), dir.join("e.json"));
    std::fs::write(
        &cfg,
        r#"{"model_type": "gemma3_text", "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "vocab_size": 300, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "sliding_window": 16, "query_pre_attn_scalar": 32,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"], "use_cache": true}"#,
    )
    .unwrap();
    for extra in [&["--pure-bf16"][..], &["--precision", "bf16"][..], &["--attn-implementation", "eager"][..], &["--gradient-checkpointing", "non-reentrant"][..]] {
        let o = run(&[&["--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "40", "--json", json.to_str().unwrap()][..], extra].concat());
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let e = &v["estimate"];
        let bytes = |t: &serde_json::Value| t.as_array().unwrap().iter().map(|t| t["elements"].as_u64().unwrap() * t["elem"].as_u64().unwrap()).sum::<u64>();
        let layers = e["layers"].as_u64().unwrap();
        let blocks = match e["sliding_block"].as_object() {
            Some(sb) => {
                let n = sb["layers"].as_array().unwrap().len() as u64;
                (layers - n) * bytes(&e["block"]) + n * bytes(&sb["block"])
            }
            None => layers * bytes(&e["block"]),
        };
        assert_eq!(blocks + bytes(&e["outside"]), v["simulated"]["activation_bytes"].as_u64().unwrap(), "{extra:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// bf16 autocast over bf16 weights (the Trainer's bf16=True on a bf16 checkpoint): eager and
/// sdpa × checkpointing × use_cache at two (B, S), and sdpa's math, CPU and memory-efficient
/// kernels pinned: pure bf16's terms, byte for byte (the `1 + w` norms' fp32 internals cast back
/// before the projections read them).
#[test]
fn gemma3_pure_autocast_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
        for ckpt in [None, Some(false), Some(true)] {
            for cache in [true, false] {
                let (b, s) = if cache { (1, 24) } else { (3, 40) };
                points.push(Point { attn, precision: Precision::PureBf16Autocast, ckpt, cache, b, s, ..base() });
            }
        }
    }
    for backend in [SdpaBackend::Math, SdpaBackend::CpuFlash, SdpaBackend::Efficient] {
        points.push(Point { backend, precision: Precision::PureBf16Autocast, kv_heads: if backend == SdpaBackend::Efficient { 4 } else { 2 }, ..base() });
    }
    run(&points, 1.30);
}

/// Pure fp16 weights (a float16 checkpoint loaded with `from_pretrained(dtype="auto")`, no
/// autocast): the grid above over fp16 parameters. No op picks its output type or its kernel by
/// which 2-byte float it reads: pure bf16's terms, byte for byte.
#[test]
fn gemma3_pure_fp16_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
        for ckpt in [None, Some(false), Some(true)] {
            for cache in [true, false] {
                let (b, s) = if cache { (1, 24) } else { (3, 40) };
                points.push(Point { attn, precision: Precision::PureFp16, ckpt, cache, b, s, ..base() });
            }
        }
    }
    for backend in [SdpaBackend::Math, SdpaBackend::CpuFlash, SdpaBackend::Efficient] {
        points.push(Point { backend, precision: Precision::PureFp16, kv_heads: if backend == SdpaBackend::Efficient { 4 } else { 2 }, ..base() });
    }
    run(&points, 1.30);
}
