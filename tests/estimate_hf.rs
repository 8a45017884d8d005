//! `vramscope estimate` for the hf flavour: the closed form (src/analyse/estimate/hf.rs,
//! written from PyTorch's save rules, not from the model code) against a simulated meta run
//! of transformers 5.23's op sequence (src/model/hf/transformers_5_23.rs, itself byte-exact
//! against transformers in tests/hf_grid.rs), over model types, attention implementations and
//! SDPA kernels, precisions, checkpointing, use_cache, B and S.
//!
//! Exact (0 bytes) when the forward returns: parameters, gradients, optimizer state, the
//! autocast weight cache, the logits, every activation (what autograd keeps, the
//! DynamicCache, what checkpointed layers' closures hold), and the whole live set (those plus
//! the batch and the RoPE buffers). The training peak is bounded from below only: the closed
//! form takes the larger of two moments (the loss, the optimizer) and leaves out backward's
//! transients (the loss's gradient beside the kept log_softmax, each op's input gradients
//! while its saved tensors still live, the fused kernels' dQ accumulators, the optimizer's
//! per-group temporaries) and the caching allocator's rounding; the test states how far
//! above the bound the simulated peak may lie on this grid: 5 % (3 % seen; on these small
//! models the peak sits in the optimizer or early in backward, near the bound's moments).
mod scratch;
mod estimate_common;
use estimate_common::sum;
use vramscope::analyse::estimate::{estimate, hf, Estimate};
use vramscope::session::estimate::simulate;
use vramscope::model::hf::{Arch, AttnImplementation, HfConfig, SdpaBackend};
use vramscope::model::{Flavour, ModelConfig};
use vramscope::train::optim::OptimConfig;
use vramscope::train::Precision;

#[derive(Clone, Copy, Debug)]
struct Point {
    arch: Arch,
    attn: AttnImplementation,
    backend: SdpaBackend,
    precision: Precision,
    /// None, non-reentrant (false) or reentrant (true).
    ckpt: Option<bool>,
    cache: bool,
    kv_heads: usize,
    head_dim: Option<usize>,
    window: Option<usize>,
    tied: bool,
    mask: bool,
    b: usize,
    s: usize,
}

fn base(arch: Arch) -> Point {
    Point {
        arch,
        attn: AttnImplementation::Eager,
        backend: SdpaBackend::Auto,
        precision: Precision::Fp32,
        ckpt: None,
        cache: true,
        kv_heads: 2,
        head_dim: None,
        window: None,
        tied: false,
        mask: false,
        b: 2,
        s: 40,
    }
}

fn config(p: &Point) -> ModelConfig {
    let (d, h) = (128, 4);
    let mut hf = HfConfig::new(p.arch, p.head_dim.unwrap_or(d / h));
    hf.attn_implementation = p.attn;
    hf.sdpa_backend = p.backend;
    hf.use_cache = p.cache;
    hf.reentrant = p.ckpt == Some(true);
    hf.sliding_window = p.window;
    hf.attention_mask = p.mask;
    estimate_common::hf_model(hf, 2, p.kv_heads, p.tied, p.ckpt)
}


/// Compares one point; returns the simulated training peak over the closed form's bound.
fn check(p: &Point) -> f64 {
    let cfg = config(p);
    let name = format!(
        "{} {} {} {} ckpt {:?} cache {} kv {} d_h {:?} window {:?} tied {} mask {} B {} S {}",
        p.arch.name(),
        p.attn.name(),
        p.backend,
        p.precision,
        p.ckpt,
        p.cache,
        p.kv_heads,
        p.head_dim,
        p.window,
        p.tied,
        p.mask,
        p.b,
        p.s
    );
    hf::check(&cfg, p.precision, p.s).unwrap_or_else(|e| panic!("{name}: refused: {e}"));
    let e: Estimate = estimate(&cfg, p.precision, p.b, p.s);
    let sim = simulate(&cfg, p.precision, p.b, p.s, &OptimConfig::reference(Flavour::Hf)).unwrap();
    assert_eq!(e.param_bytes, sim.parameter_bytes, "{name}: parameters");
    assert_eq!(e.grad_bytes, sim.gradient_bytes, "{name}: gradients");
    assert_eq!(e.optimizer_bytes, sim.optimizer_bytes, "{name}: optimizer state");
    assert_eq!(e.autocast_cache_bytes, sim.autocast_cache_bytes, "{name}: autocast cache");
    assert_eq!(e.logits.bytes(), sim.logits_bytes, "{name}: logits");
    assert_eq!(e.activation_bytes(), sim.activation_bytes, "{name}: activations when the forward returns (block {} bytes, outside {})", e.block_bytes(), sum(&e.outside));
    // The live set also holds the batch (input_ids, labels, the attention_mask: (B, S) int64
    // each) and RoPE's inv_freq and original_inv_freq (d_h/2 fp32 each).
    let batch = (2 + p.mask as u64) * (p.b * p.s * 8) as u64;
    let buffers = 2 * (cfg.head_dim() as u64 / 2) * 4;
    assert_eq!(e.forward_bytes() + batch + buffers, sim.forward_live_bytes, "{name}: live when the forward returns");
    let bound = e.training_bytes();
    assert!(bound <= sim.training_peak_allocated, "{name}: bound {bound} above the simulated peak {}", sim.training_peak_allocated);
    sim.training_peak_allocated as f64 / bound as f64
}

fn run(points: &[Point]) {
    let mut worst: f64 = 0.0;
    for p in points {
        worst = worst.max(check(p));
    }
    // The closed form is a lower bound: it leaves out backward's short-lived tensors (the loss
    // gradient beside the kept log_softmax, input gradients while saved tensors live, the
    // fused kernels' workspaces). With the Trainer's fused AdamW (no optimizer temporaries)
    // the peak is in backward, where those transients are a large share of these small test
    // models' memory: at most 1.256× here (1.03× with foreach AdamW, whose temporaries made
    // the optimizer the peak).
    assert!(worst < 1.30, "simulated training peak up to {worst:.3}× the closed form's bound");
    println!("{} points; simulated training peak at most {worst:.3}× the bound", points.len());
}

/// Every model type × eager/sdpa × fp32/pure bf16 × checkpointing × use_cache, at two (B, S).
#[test]
fn hf_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    // (issue 30's families: Phi-3 and OLMo-2 in tests/estimate_families.rs; Gemma is refused)
    for arch in Arch::ALL.into_iter().filter(|a| !a.is_family()) {
        for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
            for precision in [Precision::Fp32, Precision::PureBf16] {
                for ckpt in [None, Some(false), Some(true)] {
                    for cache in [true, false] {
                        for (b, s) in [(1, 24), (3, 40)] {
                            points.push(Point { attn, precision, ckpt, cache, b, s, ..base(arch) });
                        }
                    }
                }
            }
        }
    }
    run(&points);
}

/// The SDPA kernels one by one (flash, memory-efficient with its 32-row logsumexp padding,
/// the CPU kernel, math with its fp32 upcasts and GQA repeat), flash_attention_2, MHA and
/// GQA, Qwen3's explicit head_dim (h·d_h ≠ d), tied heads, a sliding window shorter than S,
/// and the collator's attention_mask.
#[test]
fn hf_kernels_and_shapes() {
    let mut points = Vec::new();
    for arch in [Arch::Llama, Arch::Qwen3] {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            for (backend, kv) in [(SdpaBackend::Efficient, 4), (SdpaBackend::CpuFlash, 2), (SdpaBackend::Math, 2), (SdpaBackend::Math, 4), (SdpaBackend::Flash, 2), (SdpaBackend::Flash, 1)] {
                if backend == SdpaBackend::Flash && precision == Precision::Fp32 {
                    continue;
                }
                for cache in [true, false] {
                    points.push(Point { attn: AttnImplementation::Sdpa, backend, precision, kv_heads: kv, cache, s: 33, ..base(arch) });
                }
            }
        }
        points.push(Point { attn: AttnImplementation::FlashAttention2, precision: Precision::PureBf16, ..base(arch) });
        points.push(Point { attn: AttnImplementation::FlashAttention2, precision: Precision::PureBf16, ckpt: Some(false), ..base(arch) });
    }
    // Qwen3 with head_dim 48 (q is 192 wide, d 128): the q and kv symbols.
    for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            points.push(Point { attn, precision, head_dim: Some(48), ..base(Arch::Qwen3) });
            points.push(Point { attn, precision, head_dim: Some(48), kv_heads: 4, tied: true, b: 1, s: 64, ..base(Arch::Qwen3) });
        }
    }
    // Mistral's window shorter than S: eager's mask, sdpa math with the repeat; checkpointed
    // layers hold the mask; the attention_mask makes sdpa's boolean mask (B, 1, S, S).
    for (attn, backend) in [(AttnImplementation::Eager, SdpaBackend::Auto), (AttnImplementation::Sdpa, SdpaBackend::Math), (AttnImplementation::Sdpa, SdpaBackend::CpuFlash)] {
        for ckpt in [None, Some(false)] {
            for mask in [false, true] {
                points.push(Point { attn, backend, ckpt, mask, window: Some(16), s: 40, ..base(Arch::Mistral) });
            }
        }
    }
    run(&points);
}

/// Autocast (bf16, fp16): fp32 residual and RoPE, bf16 projections, fp32 rotated Q and K (the
/// fp32 cos promotes them), SDPA's and matmul's casts, the weight cache with the biases.
#[test]
fn hf_autocast_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    // (issue 30's families: Phi-3 and OLMo-2 in tests/estimate_families.rs; Gemma is refused)
    for arch in Arch::ALL.into_iter().filter(|a| !a.is_family()) {
        for precision in [Precision::Bf16, Precision::Fp16] {
            for (attn, kv) in [(AttnImplementation::Eager, 2), (AttnImplementation::Eager, 4), (AttnImplementation::Sdpa, 2), (AttnImplementation::FlashAttention2, 2)] {
                for ckpt in [None, Some(false)] {
                    for cache in [true, false] {
                        points.push(Point { attn, precision, kv_heads: kv, ckpt, cache, ..base(arch) });
                    }
                }
            }
        }
        // The memory-efficient kernel (no GQA) with its padded logsumexp.
        points.push(Point { attn: AttnImplementation::Sdpa, backend: SdpaBackend::Efficient, precision: Precision::Bf16, kv_heads: 4, s: 33, ..base(arch) });
    }
    run(&points);
}

/// What the closed form cannot state is refused, naming the flag.
#[test]
fn hf_refusals_name_the_flag() {
    let refused = |p: Point, keep: usize, flag: &str| {
        let mut cfg = config(&p);
        cfg.hf.as_mut().unwrap().logits_to_keep = keep;
        let e = hf::check(&cfg, p.precision, p.s).expect_err(flag);
        assert_eq!(e.flag, flag, "{e}");
    };
    refused(base(Arch::Llama), 1, "--logits-to-keep");
    refused(Point { attn: AttnImplementation::FlashAttention2, ..base(Arch::Llama) }, 0, "--attn-implementation");
    refused(Point { attn: AttnImplementation::Sdpa, backend: SdpaBackend::Flash, ..base(Arch::Llama) }, 0, "--sdpa-backend");
    refused(Point { attn: AttnImplementation::Sdpa, backend: SdpaBackend::Efficient, ..base(Arch::Llama) }, 0, "--sdpa-backend");
    refused(Point { attn: AttnImplementation::Sdpa, backend: SdpaBackend::Math, precision: Precision::Bf16, ..base(Arch::Llama) }, 0, "--sdpa-backend");
    refused(Point { attn: AttnImplementation::Sdpa, window: Some(16), precision: Precision::PureBf16, ..base(Arch::Mistral) }, 0, "--sdpa-backend");
    // logits_to_keep covering the whole context is a full forward.
    let p = base(Arch::Llama);
    let mut cfg = config(&p);
    cfg.hf.as_mut().unwrap().logits_to_keep = p.s;
    assert!(hf::check(&cfg, p.precision, p.s).is_ok());
}

/// The symbolic sums a reader derives for Llama (h·d_h = d, GQA 4:2) at fp32 without
/// checkpointing: per layer 7a for the norms, residuals and merged heads, the kept Q and
/// the 2-head copies, 4f, one fp32 softmax, and the cache.
#[test]
fn hf_symbolic_block() {
    let sym = |p: Point| estimate(&config(&p), p.precision, p.b, p.s).block_symbolic;
    assert_eq!(sym(base(Arch::Llama)), "10a + 2kv + 4f + s + small");
    assert_eq!(sym(Point { cache: false, ..base(Arch::Llama) }), "10a + 4f + s + small");
    assert_eq!(sym(Point { ckpt: Some(false), ..base(Arch::Llama) }), "a");
    assert_eq!(sym(Point { ckpt: Some(true), precision: Precision::PureBf16, ..base(Arch::Llama) }), "½a");
    assert_eq!(sym(Point { attn: AttnImplementation::Sdpa, precision: Precision::PureBf16, ..base(Arch::Llama) }), "2a + 6·½a + 2·½kv + 4·½f + small");
}

/// Through the CLI: `--config` picks the hf flavour; the text names transformers' settings and
/// the kernel, and the JSON's activations equal the simulated ones.
#[test]
fn hf_estimate_cli_on_a_config_json() {
    let dir = scratch::dir().join(format!("vramscope-estimate-hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    std::fs::write(
        &cfg,
        r#"{"model_type": "qwen3", "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 48, "vocab_size": 300, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": true, "hidden_act": "silu", "use_cache": true}"#,
    )
    .unwrap();
    let json = dir.join("e.json");
    let run = |extra: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .args(["estimate", "--config", cfg.to_str().unwrap(), "--batch-size", "2", "--context-length", "48", "--json", json.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        (String::from_utf8_lossy(&o.stdout).into_owned(), v)
    };
    // (--dtype bfloat16 --precision bf16: the Trainer's bf16=True over bf16 weights.)
    for (extra, kernel) in [(&[][..], "attention sdpa, math backend"), (&["--pure-bf16"][..], "attention sdpa, flash kernel"), (&["--dtype", "bfloat16", "--precision", "bf16"][..], "attention sdpa, flash kernel")] {
        let (text, v) = run(extra);
        for needle in ["transformers 5.23.0 qwen3 (d_h 48)", kernel, "use_cache true", "q_norm", "DynamicCache keys", "no logits (the Trainer dropped them)", "q = B·S·h·d_h·4"] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        assert!(!text.contains("naive attention"), "{text}");
        estimate_common::assert_json_activations(&v, &format!("{extra:?}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// bf16 autocast over bf16 weights (the Trainer's bf16=True on a bf16 checkpoint, transformers'
/// default load): every model type × eager/sdpa × checkpointing × use_cache at two (B, S), the
/// SDPA kernels, flash_attention_2, Qwen3's explicit head_dim, tied heads, Mistral's window
/// with the attention_mask. The weights are bf16 leaves, so autocast caches nothing, and
/// transformers casts down before every matmul-class op what it upcast (RMSNorm's fp32
/// internals, eager's fp32 softmax, RoPE's tables, the loss's `.float()` feeding ops already
/// fp32): pure bf16's terms, byte for byte.
#[test]
fn hf_pure_autocast_closed_form_equals_the_simulation() {
    estimate_common::run_points(&two_byte_points(Precision::PureBf16Autocast), 1.30, check);
}

/// Pure fp16 weights (a float16 checkpoint loaded with `from_pretrained(dtype="auto")`, no
/// autocast): the grid above over fp16 parameters. No op picks its output type or its kernel by
/// which 2-byte float it reads: pure bf16's terms, byte for byte.
#[test]
fn hf_pure_fp16_closed_form_equals_the_simulation() {
    estimate_common::run_points(&two_byte_points(Precision::PureFp16), 1.30, check);
}

/// The grid of the two tests above in `precision`.
fn two_byte_points(precision: Precision) -> Vec<Point> {
    let mut points = Vec::new();
    for arch in Arch::ALL.into_iter().filter(|a| !a.is_family()) {
        for attn in [AttnImplementation::Eager, AttnImplementation::Sdpa] {
            for ckpt in [None, Some(false), Some(true)] {
                for cache in [true, false] {
                    let (b, s) = if cache { (1, 24) } else { (3, 40) };
                    points.push(Point { attn, precision: precision, ckpt, cache, b, s, ..base(arch) });
                }
            }
        }
    }
    for arch in [Arch::Llama, Arch::Qwen3] {
        for (backend, kv) in [(SdpaBackend::Efficient, 4), (SdpaBackend::CpuFlash, 2), (SdpaBackend::Math, 2), (SdpaBackend::Flash, 1)] {
            points.push(Point { attn: AttnImplementation::Sdpa, backend, precision: precision, kv_heads: kv, s: 33, ..base(arch) });
        }
        points.push(Point { attn: AttnImplementation::FlashAttention2, precision: precision, ckpt: Some(false), ..base(arch) });
        points.push(Point { head_dim: Some(48), precision: precision, tied: true, ..base(arch) });
    }
    for (attn, backend) in [(AttnImplementation::Eager, SdpaBackend::Auto), (AttnImplementation::Sdpa, SdpaBackend::Math)] {
        points.push(Point { attn, backend, mask: true, window: Some(16), precision: precision, ..base(Arch::Mistral) });
    }
    points
}

/// The most common fine-tuning run: a bf16 preset (from_pretrained(dtype="auto")) under the
/// Trainer's bf16=True, in closed form, with and without LoRA.
#[test]
fn hf_pure_autocast_preset_cli() {
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .args(["estimate", "--model", "Llama-3.1-8B", "--precision", "bf16", "--context-length", "1024", "--batch-size", "1", "--no-simulate"])
            .args(extra)
            .output()
            .unwrap()
    };
    for (extra, needle) in [(&[][..], "no fp32 leaf to cast"), (&["--lora-r", "8", "--target-modules", "q_proj"][..], "fp32 leaves over bf16 weights")] {
        let o = run(extra);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        for needle in ["bf16 autocast around forward and loss over bf16 weights", needle] {
            assert!(text.contains(needle), "{extra:?}: missing {needle:?} in\n{text}");
        }
    }
}

/// Through the CLI: a float16 load (`--dtype float16`, no autocast) states pure fp16's closed
/// form, its JSON activations equal to the simulated ones, with and without LoRA.
#[test]
fn hf_pure_fp16_cli() {
    let dir = scratch::dir().join(format!("vramscope-estimate-fp16-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("e.json");
    let small = ["--num-layers", "2", "--hidden-dim", "128", "--num-heads", "4", "--num-kv-heads", "2", "--intermediate-dim", "352", "--vocab-size", "300", "--batch-size", "2", "--context-length", "48"];
    for (model, extra, needle) in [
        ("Llama-3.2-1B", &[][..], "pure fp16 (parameters, gradients, optimizer state and activations fp16)"),
        ("Qwen3-8B", &["--attn-implementation", "eager", "--gradient-checkpointing", "non-reentrant"][..], "pure fp16 (parameters"),
        ("Mistral-7B", &["--lora-r", "8", "--target-modules", "q_proj,v_proj"][..], "pure fp16 (frozen weights and activations fp16; LoRA adapters"),
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .args(["estimate", "--model", model, "--dtype", "float16", "--json", json.to_str().unwrap()])
            .args(small)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{model} {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(needle), "{model} {extra:?}: missing {needle:?} in\n{text}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        estimate_common::assert_json_activations(&v, &format!("{model} {extra:?}"));
        let e = &v["estimate"];
        assert_eq!(e["param_bytes"], v["simulated"]["parameter_bytes"], "{model} {extra:?}");
        assert_eq!(e["optimizer_bytes"], v["simulated"]["optimizer_bytes"], "{model} {extra:?}");
        std::fs::remove_file(&json).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
