//! `vramscope estimate` for peft's LoRA over unquantized, 4-bit (QLoRA) and 8-bit weights: the closed form
//! (src/analyse/estimate/hf.rs, the adapters' terms and what frozen weights no longer keep)
//! against a simulated meta run of peft 0.21.2's `lora.Linear` over transformers 5.23
//! (src/model/lora.rs, byte-exact against peft in tests/lora_grid.rs), over model types,
//! targets, rank, dropout, `bias`, attention kernels, fp32, autocast over fp32 and bf16 weights
//! and pure bf16,
//! checkpointing and optimizers; bitsandbytes' storage and what `MatMul4Bit` and
//! `MatMul8bitLt` keep (src/model/bnb.rs, src/engine/ops/quant.rs and int8.rs, byte-exact
//! in tests/qlora_grid.rs and int8_grid.rs).
//!
//! Exact (0 bytes), as tests/estimate_hf.rs: parameters (frozen base, fp32 adapters),
//! gradients and optimizer state (the trainable parameters only), every activation when the
//! forward returns (layer 0 on its own: its input, the frozen embedding's output, needs no
//! gradient), the logits and the live set. The training peak is bounded from below as there.
mod scratch;
mod estimate_common;
use estimate_common::sum;
use vramscope::analyse::estimate::{estimate_with, hf, Estimate};
use vramscope::model::hf::{Arch, AttnImplementation, HfConfig, SdpaBackend};
use vramscope::engine::DType;
use vramscope::engine::ops::int8::Int8Kernel;
use vramscope::model::bnb::{kernel_for, Bnb, Bnb4bit, Int8, Quant};
use vramscope::model::lora::{LoraBias, LoraConfig, TARGETS};
use vramscope::model::{Flavour, ModelConfig};
use vramscope::session::estimate::simulate;
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::Precision;

#[derive(Clone, Debug)]
struct Point {
    arch: Arch,
    attn: AttnImplementation,
    backend: SdpaBackend,
    precision: Precision,
    /// None, non-reentrant (false) or reentrant (true).
    ckpt: Option<bool>,
    cache: bool,
    targets: Vec<&'static str>,
    r: usize,
    dropout: f64,
    bias: LoraBias,
    /// The config's attention_bias (OLMo-2's and Gemma's q/k/v/o biases; Phi-3 has none).
    attention_bias: bool,
    optim: OptimizerKind,
    /// QLoRA: (double quant, bnb_4bit_compute_dtype, prepare_model_for_kbit_training).
    four_bit: Option<(bool, DType, bool)>,
    /// LLM.int8(): prepare_model_for_kbit_training.
    int8: Option<bool>,
    /// peft's modules_to_save (embed_tokens, lm_head).
    saves: Vec<&'static str>,
    /// use_dora.
    dora: bool,
    /// tie_word_embeddings.
    tied: bool,
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
        cache: false,
        targets: TARGETS.to_vec(),
        r: 8,
        dropout: 0.0,
        bias: LoraBias::None,
        attention_bias: false,
        optim: OptimizerKind::AdamwTorchFused,
        four_bit: None,
        int8: None,
        saves: vec![],
        dora: false,
        tied: false,
        b: 2,
        s: 40,
    }
}

fn config(p: &Point) -> ModelConfig {
    let (d, h) = (128, 4);
    let mut hf = HfConfig::new(p.arch, d / h);
    hf.attn_implementation = p.attn;
    hf.sdpa_backend = p.backend;
    hf.use_cache = p.cache;
    hf.reentrant = p.ckpt == Some(true);
    if p.attention_bias {
        (hf.qkv_bias, hf.o_bias) = (true, true);
    }
    hf.lora = Some(LoraConfig {
        r: p.r,
        alpha: 16.0,
        dropout: p.dropout,
        targets: p.targets.iter().map(|t| t.to_string()).collect(),
        target_parameters: vec![],
        gate_up_doubled: false,
        dropout_kernel: Default::default(),
        bias: p.bias,
        use_dora: p.dora,
        modules_to_save: p.saves.iter().map(|m| m.to_string()).collect(),
        compute_dtype: None,
    });
    if let Some((double_quant, compute_dtype, prepare)) = p.four_bit {
        // Loaded in bf16 (pure bf16 unless prepare_model_for_kbit_training casts what stays
        // unquantized to fp32), as the GPU's default kernel runs it.
        let q = Bnb4bit { quant_type: "nf4".into(), double_quant, compute_dtype, kernel: kernel_for(None), quant_storage: DType::U8 };
        hf.bnb = Some(Bnb { quant: Quant::FourBit(q), load_dtype: DType::BF16, prepare });
    }
    if let Some(prepare) = p.int8 {
        hf.bnb = Some(Bnb { quant: Quant::Int8(Int8 { threshold: 6.0, kernel: Int8Kernel::Cuda }), load_dtype: DType::BF16, prepare });
    }
    if p.arch.is_gemma() {
        // Sliding, full, sliding layers; a 16-position window, shorter than S here.
        let mut g = vramscope::model::hf::gemma::published(p.arch, 3, 16, 24.0, 10_000.0);
        g.sliding = vec![true, false, true];
        hf.gemma = Some(g);
    }
    estimate_common::hf_model(hf, 3, 2, p.tied, p.ckpt)
}


/// Compares one point; returns the simulated training peak over the closed form's bound.
fn check(p: &Point) -> f64 {
    let cfg = config(p);
    let name = format!(
        "{} {} {} {} ckpt {:?} cache {} targets {:?} r {} dropout {} bias {:?} attention_bias {} {} 4-bit {:?} 8-bit {:?} saves {:?} dora {} tied {} B {} S {}",
        p.arch.name(),
        p.attn.name(),
        p.backend,
        p.precision,
        p.ckpt,
        p.cache,
        p.targets,
        p.r,
        p.dropout,
        p.bias,
        p.attention_bias,
        p.optim,
        p.four_bit,
        p.int8,
        p.saves,
        p.dora,
        p.tied,
        p.b,
        p.s
    );
    hf::check(&cfg, p.precision, p.s).unwrap_or_else(|e| panic!("{name}: refused: {e}"));
    let mut optim = OptimConfig::reference(Flavour::Hf);
    optim.kind = p.optim;
    let e: Estimate = estimate_with(&cfg, p.precision, p.b, p.s, &optim);
    let sim = simulate(&cfg, p.precision, p.b, p.s, &optim).unwrap();
    assert_eq!(e.param_bytes, sim.parameter_bytes, "{name}: parameters");
    assert_eq!(e.grad_bytes, sim.gradient_bytes, "{name}: gradients");
    assert_eq!(e.optimizer_bytes, sim.optimizer_bytes, "{name}: optimizer state");
    assert_eq!(e.autocast_cache_bytes, sim.autocast_cache_bytes, "{name}: autocast cache");
    assert_eq!(e.logits.bytes(), sim.logits_bytes, "{name}: logits");
    let first = e.first_block.as_deref().map_or(0, sum);
    assert_eq!(e.activation_bytes(), sim.activation_bytes, "{name}: activations when the forward returns (block {} bytes, block 0 {first}, outside {})", e.block_bytes(), sum(&e.outside));
    let batch = 2 * (p.b * p.s * 8) as u64;
    // Double quantization: bitsandbytes' process-wide 256-entry fp32 dynamic map besides.
    // Gemma: an inv_freq pair per layer type present and the 0-d embed_scale.
    let pairs = cfg.hf().and_then(|h| h.gemma.as_ref()).filter(|_| p.arch == Arch::Gemma3Text).map_or(1, |g| g.types().len() as u64);
    // (Loaded in bf16 for bitsandbytes: prepare_model_for_kbit_training casts parameters, not
    // the buffer, to fp32.)
    let load = if p.four_bit.is_some() || p.int8.is_some() { Precision::PureBf16 } else { p.precision };
    let gemma = estimate_common::embed_scale_bytes(p.arch.is_gemma(), load);
    let buffers = pairs * 2 * (cfg.head_dim() as u64 / 2) * 4 + gemma + if p.four_bit.is_some_and(|q| q.0) { 256 * 4 } else { 0 };
    assert_eq!(e.forward_bytes() + batch + buffers, sim.forward_live_bytes, "{name}: live when the forward returns");
    let bound = e.training_bytes();
    assert!(bound <= sim.training_peak_allocated, "{name}: bound {bound} above the simulated peak {}", sim.training_peak_allocated);
    sim.training_peak_allocated as f64 / bound as f64
}

/// Checks every point; the simulated peak must lie within `ratio`× the bound.
// Frozen weights leave little beside the activations, so backward's transients (the loss
// gradient, each op's input gradients while its saved tensors live) weigh more than in full
// fine-tuning: at most 1.39× on the first grid, 1.50× on the dropout, bias and optimizer one.
fn run_within(points: &[Point], ratio: f64) {
    estimate_common::run_points(points, ratio, check);
}

fn run(points: &[Point]) {
    run_within(points, 1.6);
}

const ATTN: [&str; 4] = ["q_proj", "k_proj", "v_proj", "o_proj"];

/// Every model type × targets (all-linear, the attention, peft's q/v default, the MLP alone)
/// × fp32/pure bf16 × checkpointing, eager attention.
#[test]
fn lora_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for arch in Arch::ALL.into_iter().filter(|a| !a.is_family()) {
        for targets in [TARGETS.to_vec(), ATTN.to_vec(), vec!["q_proj", "v_proj"], vec!["down_proj"], vec!["k_proj", "up_proj"]] {
            for precision in [Precision::Fp32, Precision::PureBf16] {
                for ckpt in [None, Some(false), Some(true)] {
                    points.push(Point { targets: targets.clone(), precision, ckpt, ..base(arch) });
                }
            }
        }
    }
    run(&points);
}

/// The SDPA kernels (flash, memory-efficient, CPU flash, math), flash_attention_2 and the
/// DynamicCache, over all-linear and partial targets, where layer 0's attention inputs need
/// a gradient or not.
#[test]
fn lora_kernels_and_cache() {
    let mut points = Vec::new();
    for arch in [Arch::Llama, Arch::Qwen3] {
        for targets in [TARGETS.to_vec(), vec!["q_proj", "v_proj"], vec!["v_proj"], vec!["gate_proj"]] {
            for (attn, backend, precision) in [
                (AttnImplementation::Sdpa, SdpaBackend::Math, Precision::Fp32),
                (AttnImplementation::Sdpa, SdpaBackend::Math, Precision::PureBf16),
                (AttnImplementation::Sdpa, SdpaBackend::CpuFlash, Precision::Fp32),
                (AttnImplementation::Sdpa, SdpaBackend::Flash, Precision::PureBf16),
                (AttnImplementation::FlashAttention2, SdpaBackend::Auto, Precision::PureBf16),
            ] {
                for cache in [false, true] {
                    points.push(Point { attn, backend, precision, cache, targets: targets.clone(), s: 33, ..base(arch) });
                }
            }
            points.push(Point { attn: AttnImplementation::Eager, cache: true, targets: targets.clone(), ..base(arch) });
        }
    }
    run(&points);
}

/// lora_dropout (the bool mask, the fp32 dropout output lora_A keeps), rank, `bias`
/// (qwen2's q/k/v biases train: layer 0's K and V need a gradient without an adapter), the
/// optimizers estimate derives for peft models, and other (B, S).
#[test]
fn lora_dropout_rank_bias_and_optimizers() {
    let mut points = Vec::new();
    for arch in [Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3] {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            for (targets, dropout) in [(TARGETS.to_vec(), 0.1), (vec!["q_proj", "v_proj"], 0.05), (vec!["o_proj", "down_proj"], 0.1)] {
                for ckpt in [None, Some(false)] {
                    points.push(Point { targets: targets.clone(), dropout, precision, ckpt, r: 4, ..base(arch) });
                }
            }
            for bias in [LoraBias::All, LoraBias::LoraOnly] {
                points.push(Point { targets: vec!["q_proj"], bias, precision, ..base(arch) });
                points.push(Point { targets: vec!["q_proj", "v_proj", "down_proj"], bias, precision, ckpt: Some(true), ..base(arch) });
            }
            for optim in [OptimizerKind::AdamwTorch, OptimizerKind::Sgd, OptimizerKind::AdamwTorchForloop, OptimizerKind::Adafactor] {
                points.push(Point { optim, precision, r: 16, b: 1, s: 64, ..base(arch) });
            }
        }
    }
    run(&points);
}

/// Through the CLI: `--lora-r` reaches the closed form, whose JSON blocks (block 0 its own)
/// equal the simulated activations; what it does not derive exits 2 naming the flag.
#[test]
fn lora_estimate_cli() {
    let dir = scratch::dir().join(format!("vramscope-estimate-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("e.json");
    let model = ["estimate", "--model", "Llama-3.2-1B", "--num-layers", "2", "--hidden-dim", "128", "--num-heads", "4", "--num-kv-heads", "2", "--intermediate-dim", "352", "--vocab-size", "300", "--batch-size", "2", "--context-length", "48"];
    let run = |extra: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(model).args(["--json", json.to_str().unwrap()]).args(extra).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    for extra in [&["--lora-r", "8"][..], &["--lora-r", "8", "--load-in-4bit", "--bnb-4bit-use-double-quant"][..], &["--lora-r", "8", "--load-in-8bit", "--gradient-checkpointing", "non-reentrant"][..], &["--lora-r", "8", "--load-in-8bit", "--gradient-checkpointing", "none"][..], &["--lora-r", "4", "--target-modules", "q_proj,v_proj", "--lora-dropout", "0.1", "--pure-bf16"][..], &["--lora-r", "8", "--gradient-checkpointing", "reentrant"][..], &["--lora-r", "8", "--modules-to-save", "lm_head"][..]] {
        let (code, text, err) = run(extra);
        assert_eq!(code, Some(0), "{extra:?}: {err}");
        assert!(text.contains("LoRA A and B"), "{extra:?}: {text}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let e = &v["estimate"];
        // Checkpointed layers (QLoRA's default: reentrant) keep only their input.
        assert_eq!(text.contains("lora_A output (lora_B keeps it)"), e["first_block"].is_array(), "{extra:?}: {text}");
        estimate_common::assert_json_activations(&v, &format!("{extra:?}"));
        assert_eq!(e["grad_bytes"], v["simulated"]["gradient_bytes"], "{extra:?}");
        assert_eq!(e["param_bytes"], v["simulated"]["parameter_bytes"], "{extra:?}");
    }
    std::fs::remove_file(&json).unwrap();
    for (extra, flag) in [
        (&["--load-in-4bit"][..], "--load-in-4bit"),
        (&["--lora-r", "8", "--load-in-4bit", "--lora-bias", "all"][..], "--lora-bias"),
        (&["--lora-r", "8", "--use-dora", "--lora-dropout", "0.1"][..], "--use-dora"),
        (&["--lora-r", "8", "--use-dora", "--precision", "bf16"][..], "--use-dora"),
        (&["--lora-r", "8", "--modules-to-save", "lm_head", "--optimizer", "adafactor"][..], "--optimizer"),
        (&["--lora-r", "8", "--optimizer", "adamw_8bit"][..], "--optimizer"),
    ] {
        let (code, _, err) = run(extra);
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?} should name {flag}: {err}");
        assert!(!json.exists(), "{extra:?} wrote {}", json.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Autocast (bf16, fp16) over fp32 weights: lora_A keeps its own low-precision cast of its
/// input (of the fp32 copy of o_proj's and down_proj's low-precision inputs), A's output is
/// low-precision, and the autocast cache holds only the adapters' (and trained biases')
/// casts: the frozen weights' die after each matmul.
#[test]
fn lora_autocast_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for arch in Arch::ALL.into_iter().filter(|a| !a.is_family()) {
        for precision in [Precision::Bf16, Precision::Fp16] {
            for (targets, dropout) in [(TARGETS.to_vec(), 0.0), (vec!["q_proj", "v_proj"], 0.0), (TARGETS.to_vec(), 0.1), (vec!["o_proj", "down_proj"], 0.05)] {
                for ckpt in [None, Some(false)] {
                    points.push(Point { targets: targets.clone(), dropout, precision, ckpt, ..base(arch) });
                }
            }
            for (attn, cache) in [(AttnImplementation::Sdpa, false), (AttnImplementation::FlashAttention2, true)] {
                points.push(Point { attn, cache, precision, ..base(arch) });
            }
            points.push(Point { bias: LoraBias::All, targets: vec!["q_proj"], precision, ..base(arch) });
        }
    }
    run(&points);
}


/// QLoRA: bitsandbytes' 4-bit storage (packed weights, absmax, double quantization's state)
/// as parameters, nf4 ± double quant, compute dtype fp32/bf16, with and without
/// prepare_model_for_kbit_training (fp32 or bf16 unquantized parameters), checkpointing
/// none/non-reentrant/reentrant: `MatMul4Bit` keeps nothing (its backward dequantizes the
/// packed weight again), so the adapters' terms are LoRA's over the model's type; the
/// dequantized weights and cast inputs are transients of the forward.
#[test]
fn qlora_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for arch in Arch::ALL.into_iter().filter(|a| !a.is_family()) {
        for (dq, compute, prepare) in [(false, DType::F32, true), (true, DType::BF16, true), (true, DType::F32, false), (false, DType::BF16, false)] {
            let precision = if prepare { Precision::Fp32 } else { Precision::PureBf16 };
            for ckpt in [None, Some(false), Some(true)] {
                points.push(Point { four_bit: Some((dq, compute, prepare)), precision, ckpt, ..base(arch) });
            }
            points.push(Point { four_bit: Some((dq, compute, prepare)), precision, targets: vec!["q_proj", "v_proj"], dropout: 0.1, attn: AttnImplementation::Sdpa, ..base(arch) });
        }
    }
    // Backward dequantizes each packed weight again (and casts it to the gradient's type):
    // transients the size of an unquantized weight, which the bound leaves out, large beside
    // these small models' activations: at most 1.72× here.
    run_within(&points, 1.8);
}

/// LLM.int8() (`Linear8bitLt`, int8 weights and an fp32 SCB per row), with and without
/// prepare_model_for_kbit_training, checkpointing none/non-reentrant/reentrant, all-linear
/// and partial targets, dropout: `MatMul8bitLt` keeps its input for the input's gradient, so
/// a frozen 8-bit projection keeps what a full fine-tune's would; the int8-quantized inputs
/// are transients.
#[test]
fn int8_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for arch in Arch::ALL.into_iter().filter(|a| !a.is_family()) {
        for prepare in [true, false] {
            let precision = if prepare { Precision::Fp32 } else { Precision::PureBf16 };
            for ckpt in [None, Some(false), Some(true)] {
                points.push(Point { int8: Some(prepare), precision, ckpt, ..base(arch) });
            }
            points.push(Point { int8: Some(prepare), precision, targets: vec!["q_proj", "v_proj"], dropout: 0.1, attn: AttnImplementation::Sdpa, ..base(arch) });
            points.push(Point { int8: Some(prepare), precision, targets: vec!["down_proj"], ..base(arch) });
        }
    }
    run_within(&points, 1.8);
}

/// Phi-3, whose fused qkv_proj and gate_up_proj peft adapts whole (one lora_A reading the
/// norm's output, one frozen weight cast under autocast, Phi-3's module order for the
/// optimizers): targets × fp32/pure bf16/autocast bf16 × checkpointing, the SDPA kernels and
/// the cache, dropout, rank and the optimizers.
#[test]
fn phi3_lora_closed_form_equals_the_simulation() {
    let all = vec!["qkv_proj", "o_proj", "gate_up_proj", "down_proj"];
    let mut points = Vec::new();
    for targets in [all.clone(), vec!["qkv_proj"], vec!["o_proj", "down_proj"], vec!["gate_up_proj"]] {
        for precision in [Precision::Fp32, Precision::PureBf16, Precision::Bf16] {
            for ckpt in [None, Some(false), Some(true)] {
                points.push(Point { targets: targets.clone(), precision, ckpt, ..base(Arch::Phi3) });
            }
        }
        for (attn, backend, precision) in [
            (AttnImplementation::Sdpa, SdpaBackend::Math, Precision::Fp32),
            (AttnImplementation::Sdpa, SdpaBackend::CpuFlash, Precision::Fp32),
            (AttnImplementation::Sdpa, SdpaBackend::Flash, Precision::PureBf16),
            (AttnImplementation::Sdpa, SdpaBackend::Flash, Precision::Bf16),
        ] {
            for cache in [false, true] {
                points.push(Point { attn, backend, precision, cache, targets: targets.clone(), s: 33, ..base(Arch::Phi3) });
            }
        }
        points.push(Point { targets: targets.clone(), dropout: 0.1, r: 4, ..base(Arch::Phi3) });
        points.push(Point { targets: targets.clone(), dropout: 0.05, precision: Precision::Bf16, ..base(Arch::Phi3) });
    }
    for optim in [OptimizerKind::AdamwTorch, OptimizerKind::Sgd, OptimizerKind::AdamwTorchForloop, OptimizerKind::Adafactor] {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            points.push(Point { optim, precision, targets: all.clone(), r: 16, b: 1, s: 64, ..base(Arch::Phi3) });
        }
    }
    run(&points);
}

/// OLMo-2 (no pre-norms: q/k/v_proj and gate/up_proj read the residual stream; q_norm and
/// k_norm over the whole projections and the post-norms frozen, keeping no x·r): targets ×
/// fp32/pure bf16/autocast bf16 × checkpointing, the SDPA kernels and the cache, dropout, rank
/// and the optimizers.
#[test]
fn olmo2_lora_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for targets in [TARGETS.to_vec(), vec!["q_proj", "v_proj"], vec!["k_proj"], vec!["o_proj", "down_proj"], vec!["gate_proj"], vec!["up_proj", "down_proj"]] {
        for precision in [Precision::Fp32, Precision::PureBf16, Precision::Bf16] {
            for ckpt in [None, Some(false), Some(true)] {
                points.push(Point { targets: targets.clone(), precision, ckpt, ..base(Arch::Olmo2) });
            }
        }
        for (attn, backend, precision) in [
            (AttnImplementation::Sdpa, SdpaBackend::Math, Precision::Fp32),
            (AttnImplementation::Sdpa, SdpaBackend::CpuFlash, Precision::Fp32),
            (AttnImplementation::Sdpa, SdpaBackend::Flash, Precision::PureBf16),
            (AttnImplementation::Sdpa, SdpaBackend::Flash, Precision::Bf16),
        ] {
            for cache in [false, true] {
                points.push(Point { attn, backend, precision, cache, targets: targets.clone(), s: 33, ..base(Arch::Olmo2) });
            }
        }
        points.push(Point { targets: targets.clone(), dropout: 0.1, r: 4, ..base(Arch::Olmo2) });
        points.push(Point { targets: targets.clone(), dropout: 0.05, precision: Precision::Bf16, cache: true, ..base(Arch::Olmo2) });
        points.push(Point { targets: targets.clone(), dropout: 0.1, precision: Precision::PureBf16, ckpt: Some(false), ..base(Arch::Olmo2) });
    }
    for optim in [OptimizerKind::AdamwTorch, OptimizerKind::Sgd, OptimizerKind::AdamwTorchForloop, OptimizerKind::Adafactor] {
        for precision in [Precision::Fp32, Precision::PureBf16] {
            points.push(Point { optim, precision, r: 16, b: 1, s: 64, ..base(Arch::Olmo2) });
        }
    }
    run(&points);
}

/// Gemma 2 (eager) and Gemma 3 (eager and sdpa: the sliding layers' kernel sees the window's
/// mask, layer 0 is one), with their GemmaRMSNorms frozen (`1 + weight` kept for the input's
/// gradient, x·r not): targets × fp32/pure bf16/autocast bf16 × checkpointing, the cache,
/// dropout, rank and the optimizers.
#[test]
fn gemma_lora_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for arch in [Arch::Gemma2, Arch::Gemma3Text] {
        let attns: &[AttnImplementation] = if arch == Arch::Gemma2 { &[AttnImplementation::Eager] } else { &[AttnImplementation::Eager, AttnImplementation::Sdpa] };
        for &attn in attns {
            for targets in [TARGETS.to_vec(), vec!["q_proj", "v_proj"], vec!["o_proj", "down_proj"], vec!["k_proj", "up_proj"]] {
                for precision in [Precision::Fp32, Precision::PureBf16, Precision::Bf16] {
                    for ckpt in [None, Some(false), Some(true)] {
                        points.push(Point { attn, targets: targets.clone(), precision, ckpt, ..base(arch) });
                    }
                }
                points.push(Point { attn, targets: targets.clone(), cache: true, ..base(arch) });
                points.push(Point { attn, targets: targets.clone(), dropout: 0.1, r: 4, ..base(arch) });
                points.push(Point { attn, targets: targets.clone(), dropout: 0.05, precision: Precision::Bf16, s: 12, ..base(arch) });
            }
        }
        for optim in [OptimizerKind::AdamwTorch, OptimizerKind::Sgd, OptimizerKind::AdamwTorchForloop, OptimizerKind::Adafactor] {
            for precision in [Precision::Fp32, Precision::PureBf16] {
                points.push(Point { optim, precision, r: 16, b: 1, s: 64, ..base(arch) });
            }
        }
    }
    run_within(&points, 1.8);
}

/// peft's `bias` ("all": every `*.bias`; "lora_only": an adapted module's) on the families,
/// measured in the weights' dtype (hf_grid/lora_extras_models.json; profile refuses it under
/// autocast): OLMo-2, Gemma 2 and Gemma 3 with attention_bias (q/k/v/o biases: a projection
/// whose bias trains gives an output that needs a gradient even in layer 0, adapter or not),
/// Phi-3 without (it has no biases: the adapters' terms alone). bias mode × fp32/pure bf16 ×
/// targets (q alone, o and down, all) × checkpointing × (B, S), sdpa (eager on Gemma 2), pure
/// fp16, and the optimizers that take interleaved biases.
#[test]
fn families_lora_bias_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for arch in [Arch::Phi3, Arch::Olmo2, Arch::Gemma2, Arch::Gemma3Text] {
        let sets: [Vec<&'static str>; 3] = if arch == Arch::Phi3 {
            [vec!["qkv_proj"], vec!["o_proj", "down_proj"], vec!["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]]
        } else {
            [vec!["q_proj"], vec!["o_proj", "down_proj"], TARGETS.to_vec()]
        };
        let attention_bias = arch != Arch::Phi3;
        let mut n = 0;
        for bias in [LoraBias::All, LoraBias::LoraOnly] {
            for precision in [Precision::Fp32, Precision::PureBf16] {
                for ckpt in [None, Some(false), Some(true)] {
                    let (b, s) = [(2, 40), (1, 24), (3, 33)][n % 3];
                    let targets = sets[n % 3].clone();
                    n += 1;
                    points.push(Point { bias, attention_bias, precision, ckpt, targets, b, s, ..base(arch) });
                }
            }
        }
        let attn = if arch == Arch::Gemma2 { AttnImplementation::Eager } else { AttnImplementation::Sdpa };
        points.push(Point { bias: LoraBias::All, attention_bias, attn, cache: true, targets: sets[0].clone(), ..base(arch) });
        points.push(Point { bias: LoraBias::LoraOnly, attention_bias, attn, precision: Precision::PureBf16, targets: sets[1].clone(), dropout: 0.1, ..base(arch) });
        points.push(Point { bias: LoraBias::All, attention_bias, precision: Precision::PureFp16, targets: sets[2].clone(), ..base(arch) });
        for optim in [OptimizerKind::AdamwTorch, OptimizerKind::Sgd] {
            points.push(Point { bias: LoraBias::All, attention_bias, optim, precision: Precision::PureBf16, targets: sets[1].clone(), r: 16, b: 1, s: 64, ..base(arch) });
        }
    }
    assert!(points.len() >= 24);
    run(&points);
}

/// QLoRA on the families: Phi-3 (its fused qkv_proj and gate_up_proj quantized whole), OLMo-2
/// (q_norm/k_norm over the whole projections, two post-norms), Gemma 2 and Gemma 3 (four norms
/// per layer, Gemma 3's q/k norms): nf4 ± double quant, compute dtype fp32/bf16, with and
/// without prepare_model_for_kbit_training, checkpointing none/non-reentrant/reentrant, over
/// contexts, batches, ranks and targets. `MatMul4Bit` keeps nothing, as on Llama.
#[test]
fn qlora_families_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    let quants = [(false, DType::F32, true), (true, DType::BF16, true), (true, DType::F32, false), (false, DType::BF16, false)];
    for arch in [Arch::Phi3, Arch::Olmo2, Arch::Gemma2, Arch::Gemma3Text] {
        let (all, attn): (Vec<&'static str>, Vec<&'static str>) = if arch == Arch::Phi3 {
            (vec!["qkv_proj", "o_proj", "gate_up_proj", "down_proj"], vec!["qkv_proj", "o_proj"])
        } else {
            (TARGETS.to_vec(), vec!["q_proj", "v_proj"])
        };
        for (i, &(dq, compute, prepare)) in quants.iter().enumerate() {
            let precision = if prepare { Precision::Fp32 } else { Precision::PureBf16 };
            for (j, ckpt) in [None, Some(false), Some(true)].into_iter().enumerate() {
                let (b, s, r) = [(2, 40, 8), (1, 24, 16), (3, 17, 4)][(i + j) % 3];
                points.push(Point { four_bit: Some((dq, compute, prepare)), precision, ckpt, targets: all.clone(), b, s, r, ..base(arch) });
            }
            points.push(Point { four_bit: Some((dq, compute, prepare)), precision, targets: attn.clone(), dropout: 0.1, ..base(arch) });
        }
        if arch != Arch::Gemma2 {
            points.push(Point { four_bit: Some((true, DType::BF16, true)), targets: all.clone(), attn: AttnImplementation::Sdpa, s: 33, ..base(arch) });
            points.push(Point { four_bit: Some((false, DType::BF16, false)), precision: Precision::PureBf16, targets: all.clone(), attn: AttnImplementation::Sdpa, cache: true, ..base(arch) });
        }
    }
    run_within(&points, 1.8);
}

/// LLM.int8() on the families: Phi-3 (its fused qkv_proj and gate_up_proj quantized whole: one
/// MatMul8bitLt each keeps the norm's output), OLMo-2 (q/k/v_proj and gate/up_proj read the
/// residual stream: MatMul8bitLt keeps the layer input and h), Gemma 2 and Gemma 3 (the input
/// and pre-feedforward norms' outputs): with and without prepare_model_for_kbit_training,
/// checkpointing none/non-reentrant/reentrant (the non-reentrant checkpoint cannot reach
/// MatMul8bitLt's ctx), over batches, contexts, ranks, targets, dropout, the cache and sdpa.
#[test]
fn int8_families_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for arch in [Arch::Phi3, Arch::Olmo2, Arch::Gemma2, Arch::Gemma3Text] {
        let (all, attn, mlp): (Vec<&'static str>, Vec<&'static str>, Vec<&'static str>) = if arch == Arch::Phi3 {
            (vec!["qkv_proj", "o_proj", "gate_up_proj", "down_proj"], vec!["qkv_proj", "o_proj"], vec!["down_proj"])
        } else {
            (TARGETS.to_vec(), vec!["q_proj", "v_proj"], vec!["down_proj"])
        };
        for (i, prepare) in [true, false].into_iter().enumerate() {
            let precision = if prepare { Precision::Fp32 } else { Precision::PureBf16 };
            for (j, ckpt) in [None, Some(false), Some(true)].into_iter().enumerate() {
                let (b, s, r) = [(2, 40, 8), (1, 24, 16), (3, 17, 4)][(i + j) % 3];
                points.push(Point { int8: Some(prepare), precision, ckpt, targets: all.clone(), b, s, r, ..base(arch) });
            }
            points.push(Point { int8: Some(prepare), precision, targets: attn.clone(), dropout: 0.1, ..base(arch) });
            points.push(Point { int8: Some(prepare), precision, targets: mlp.clone(), ckpt: Some(false), ..base(arch) });
            points.push(Point { int8: Some(prepare), precision, targets: all.clone(), cache: true, b: 1, s: 33, ..base(arch) });
            if arch != Arch::Gemma2 {
                // (Gemma 3's masked sliding layers take PyTorch's own pick.)
                let backend = match (arch, prepare) {
                    (Arch::Gemma3Text, _) => SdpaBackend::Auto,
                    (_, true) => SdpaBackend::CpuFlash,
                    (_, false) => SdpaBackend::Flash,
                };
                points.push(Point { int8: Some(prepare), precision, targets: all.clone(), attn: AttnImplementation::Sdpa, backend, s: 33, ..base(arch) });
            }
        }
    }
    run_within(&points, 1.8);
}

/// bf16 autocast over bf16 weights (the Trainer's bf16=True on a bf16 checkpoint) with peft's
/// LoRA: every dense model type × targets (all-linear, peft's q/v default) × dropout ×
/// checkpointing, sdpa (eager on Gemma 2) with the cache, trained biases. peft casts each
/// adapted projection's bf16 input to the adapters' fp32 and lora_A casts that to bf16, which it
/// keeps (dropout's mask beside it), as over fp32 weights; the frozen weights are bf16 (nothing
/// cast), the fp32 adapters' casts are cached.
#[test]
fn lora_pure_autocast_closed_form_equals_the_simulation() {
    run(&two_byte_points(Precision::PureBf16Autocast));
}

/// peft's LoRA over pure fp16 weights (no autocast): the fp32 adapters read peft's fp32 copy
/// of each adapted projection's fp16 input, as over bf16 weights.
#[test]
fn lora_pure_fp16_closed_form_equals_the_simulation() {
    run(&two_byte_points(Precision::PureFp16));
}

/// The grid of the two tests above in `precision`.
fn two_byte_points(precision: Precision) -> Vec<Point> {
    let mut points = Vec::new();
    for arch in Arch::ALL {
        let all: Vec<&'static str> = if arch == Arch::Phi3 { vec!["qkv_proj", "o_proj", "gate_up_proj", "down_proj"] } else { TARGETS.to_vec() };
        let part: Vec<&'static str> = if arch == Arch::Phi3 { vec!["qkv_proj"] } else { vec!["q_proj", "v_proj"] };
        for (targets, dropout) in [(all.clone(), 0.0), (part, 0.0), (all.clone(), 0.1)] {
            for ckpt in [None, Some(false), Some(true)] {
                points.push(Point { targets: targets.clone(), dropout, precision: precision, ckpt, ..base(arch) });
            }
        }
        let attn = if arch == Arch::Gemma2 { AttnImplementation::Eager } else { AttnImplementation::Sdpa };
        points.push(Point { attn, cache: true, precision: precision, targets: all.clone(), ..base(arch) });
        points.push(Point { bias: LoraBias::All, targets: all, precision: precision, ..base(arch) });
    }
    points
}


/// peft's modules_to_save on the llama family: the trainable copies (in the weights' type)
/// with their gradients and optimizer state; embed_tokens' copy makes layer 0's input need a
/// gradient (layer 0 keeps what the others keep, the embedding output is kept), lm_head's keeps
/// its input (under autocast its own cast, the copy's cast cached). embed_tokens, lm_head,
/// both × fp32/pure bf16/bf16 autocast × checkpointing, tied heads, targets, dropout, the
/// cache and SDPA kernels, (B, S), the optimizers and QLoRA (measured: hf_grid/lora.json's
/// and qlora.json's save= points).
#[test]
fn modules_to_save_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    let sets: [Vec<&'static str>; 3] = [vec!["embed_tokens"], vec!["lm_head"], vec!["embed_tokens", "lm_head"]];
    for (i, arch) in [Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3].into_iter().enumerate() {
        for (j, saves) in sets.iter().enumerate() {
            for precision in [Precision::Fp32, Precision::PureBf16, Precision::Bf16] {
                for ckpt in [None, Some(false), Some(true)] {
                    let targets = if (i + j) % 2 == 0 { TARGETS.to_vec() } else { vec!["q_proj", "v_proj"] };
                    let (b, s) = [(2, 40), (1, 24), (3, 17)][(i + j) % 3];
                    points.push(Point { saves: saves.clone(), precision, ckpt, targets, b, s, tied: j == 2 && i % 2 == 1, ..base(arch) });
                }
            }
            points.push(Point { saves: saves.clone(), tied: true, dropout: 0.1, targets: vec!["o_proj", "down_proj"], ..base(arch) });
            points.push(Point { saves: saves.clone(), attn: AttnImplementation::Sdpa, backend: SdpaBackend::Flash, precision: Precision::PureBf16, cache: true, s: 33, ..base(arch) });
            points.push(Point { saves: saves.clone(), attn: AttnImplementation::Sdpa, backend: SdpaBackend::CpuFlash, cache: true, s: 33, ..base(arch) });
            for optim in [OptimizerKind::AdamwTorch, OptimizerKind::Sgd] {
                points.push(Point { saves: saves.clone(), optim, precision: Precision::PureBf16, r: 16, b: 1, s: 64, ..base(arch) });
            }
        }
        points.push(Point { saves: sets[1].clone(), four_bit: Some((true, DType::BF16, true)), ckpt: Some(true), ..base(arch) });
        points.push(Point { saves: sets[2].clone(), four_bit: Some((false, DType::BF16, true)), ckpt: Some(false), ..base(arch) });
    }
    assert!(points.len() >= 24);
    run(&points);
}

/// peft's modules_to_save on the dense families (measured: hf_grid/lora_extras_models.json),
/// in the weights' type (profile refuses it under autocast on them): Phi-3 (its fused
/// linears), OLMo-2 (no pre-norms: layer 0's projections read the trained embedding copy's
/// output), Gemma 2 and Gemma 3 (the scaled embedding) × embed_tokens, lm_head, both ×
/// fp32/pure bf16 × checkpointing, tied heads, targets, sdpa with the cache, (B, S).
#[test]
fn families_modules_to_save_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    let sets: [Vec<&'static str>; 3] = [vec!["embed_tokens"], vec!["lm_head"], vec!["embed_tokens", "lm_head"]];
    for arch in [Arch::Phi3, Arch::Olmo2, Arch::Gemma2, Arch::Gemma3Text] {
        let (all, part): (Vec<&'static str>, Vec<&'static str>) = if arch == Arch::Phi3 {
            (vec!["qkv_proj", "o_proj", "gate_up_proj", "down_proj"], vec!["qkv_proj"])
        } else {
            (TARGETS.to_vec(), vec!["q_proj", "v_proj"])
        };
        let mut n = 0;
        for saves in &sets {
            for precision in [Precision::Fp32, Precision::PureBf16] {
                for ckpt in [None, Some(false), Some(true)] {
                    let (b, s) = [(2, 40), (1, 24), (3, 17)][n % 3];
                    let targets = if n % 2 == 0 { all.clone() } else { part.clone() };
                    points.push(Point { saves: saves.clone(), precision, ckpt, targets, b, s, tied: arch.is_gemma() && n % 3 != 1, ..base(arch) });
                    n += 1;
                }
            }
            let attn = if arch == Arch::Gemma2 { AttnImplementation::Eager } else { AttnImplementation::Sdpa };
            points.push(Point { saves: saves.clone(), attn, cache: true, dropout: 0.1, targets: all.clone(), ..base(arch) });
        }
    }
    assert!(points.len() >= 24);
    run_within(&points, 1.8);
}

/// peft's DoRA (use_dora; measured: hf_grid's dora points, tests/dora_grid.rs) on the llama
/// family in fp32 and pure bf16/fp16 without dropout: each adapted projection keeps, besides
/// LoRA's, the row norms, mag_norm_scale (and mag_norm_scale − 1 where its input needs a
/// gradient), the base output and lora_B(lora_A(x)); the magnitude vectors train. Targets ×
/// precision × checkpointing, SDPA kernels with the cache, qwen2's biases, rank, (B, S) and
/// the optimizers.
#[test]
fn dora_closed_form_equals_the_simulation() {
    let mut points = Vec::new();
    for (i, arch) in [Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3].into_iter().enumerate() {
        for (j, targets) in [TARGETS.to_vec(), vec!["q_proj", "v_proj"], vec!["o_proj", "down_proj"], vec!["k_proj", "gate_proj", "up_proj"]].into_iter().enumerate() {
            for precision in [Precision::Fp32, Precision::PureBf16, Precision::PureFp16] {
                for ckpt in [None, Some(false), Some(true)] {
                    let (b, s, r) = [(2, 40, 8), (1, 24, 16), (3, 17, 4)][(i + j) % 3];
                    points.push(Point { dora: true, targets: targets.clone(), precision, ckpt, b, s, r, ..base(arch) });
                }
            }
            points.push(Point { dora: true, targets: targets.clone(), attn: AttnImplementation::Sdpa, backend: SdpaBackend::CpuFlash, cache: true, s: 33, ..base(arch) });
            points.push(Point { dora: true, targets: targets.clone(), attn: AttnImplementation::Sdpa, backend: SdpaBackend::Flash, precision: Precision::PureBf16, cache: true, s: 33, ..base(arch) });
        }
        for optim in [OptimizerKind::AdamwTorch, OptimizerKind::Sgd] {
            points.push(Point { dora: true, optim, precision: Precision::PureBf16, r: 16, b: 1, s: 64, ..base(arch) });
        }
        points.push(Point { dora: true, bias: LoraBias::All, saves: vec!["lm_head"], ..base(arch) });
    }
    assert!(points.len() >= 24);
    // DoRA's per-forward transients (the in × in eye, the dense update, the weight's fp32 copy
    // and its sum with it, per projection, in backward's recomputation too) lie above the
    // bound and do not shrink with B·S: up to 2.15× here, where the activations are small.
    run_within(&points, 2.2);
}
