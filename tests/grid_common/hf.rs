//! The hf flavour's grid points (tools/pytorch/measure_hf.py) run on meta: the point's
//! config (LoRA included) and measure_hf.py's loop, shared by tests/hf_grid.rs and
//! tests/lora_grid.rs.
use serde_json::Value;
use vramscope::engine::ops::dropout::DropoutKernel;
use vramscope::engine::ops::quant::Gemm4bitKernel;
use vramscope::engine::ops::int8::Int8Kernel;
use vramscope::model::bnb::{Bnb, Bnb4bit, Int8, Quant};
use vramscope::engine::{runtime, DType, Device};
use vramscope::model::hf::gemma::GemmaConfig;
use vramscope::model::hf::{Arch, AttnImplementation, HfConfig, SdpaBackend};
use vramscope::model::lora::{default_targets, linears_of, LoraBias, LoraConfig};
use vramscope::model::{Attention, Checkpoint, Flavour, Model, ModelConfig};
use vramscope::record::{MemEvent, Phase};
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, CausalLmBatch, DataKind, Optimizer, Precision, StepRunner};

pub fn num(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}")) as usize
}

pub fn config_of(p: &Value) -> ModelConfig {
    let arch = Arch::parse(p["model_type"].as_str().unwrap()).expect("model type");
    let (d, h) = (num(p, "hidden_size"), num(p, "num_heads"));
    // measure_hf.py passes head_dim only when the point sets it; Qwen3Config's default is 128.
    // Gemma's points always name one (measure_hf.py passes hidden / heads).
    let head_dim = p["head_dim"].as_u64().map(|x| x as usize).unwrap_or(if arch == Arch::Qwen3 { 128 } else { d / h });
    let mut hf = HfConfig::new(arch, head_dim);
    hf.attn_implementation = AttnImplementation::parse(p["attn"].as_str().unwrap()).unwrap();
    // On CPU every sdpa point ran _scaled_dot_product_flash_attention_for_cpu (recorded per
    // point, checked below): the CPU kernel's tensors.
    hf.sdpa_backend = SdpaBackend::CpuFlash;
    hf.cpu_run = true;
    hf.use_cache = p["use_cache"].as_bool().unwrap();
    hf.logits_to_keep = num(p, "logits_to_keep");
    hf.reentrant = p["checkpoint"] == "reentrant";
    hf.attention_mask = p["attention_mask"] == "ones";
    hf.sliding_window = p["sliding_window"].as_u64().map(|x| x as usize);
    // measure_hf.py's attention_bias on OLMo-2 and Gemma (q/k/v/o biases; off when absent).
    if matches!(arch, Arch::Olmo2 | Arch::Gemma2 | Arch::Gemma3Text) && p["attention_bias"] == true {
        (hf.qkv_bias, hf.o_bias) = (true, true);
    }
    // measure_hf.py's Qwen2/Qwen3 max_window_layers (0 when absent: every layer slides): the
    // layers below it stay full.
    if let Some(mwl) = p["max_window_layers"].as_u64().filter(|&m| m > 0 && hf.sliding_window.is_some()) {
        hf.sliding_layers = Some((0..num(p, "num_layers")).map(|i| i as u64 >= mwl).collect());
    }
    if arch.is_gemma() {
        // The window is per layer type (HfConfig::gemma); measure_hf.py sets every Gemma field.
        hf.sliding_window = None;
        let gemma2 = arch == Arch::Gemma2;
        hf.gemma = Some(GemmaConfig {
            sliding: p["layer_types"].as_array().unwrap().iter().map(|t| t == "sliding_attention").collect(),
            sliding_window: num(p, "sliding_window"),
            query_pre_attn_scalar: p["query_pre_attn_scalar"].as_f64().unwrap(),
            attn_logit_softcapping: if gemma2 { p["attn_logit_softcapping"].as_f64() } else { None },
            final_logit_softcapping: p["final_logit_softcapping"].as_f64(),
            rope_local_base_freq: 10_000.0,
        });
    }
    apply_peft(p, &mut hf);
    ModelConfig {
        flavour: Flavour::Hf,
        vocab_size: num(p, "vocab_size"),
        d_model: d,
        num_layers: num(p, "num_layers"),
        num_heads: h,
        num_kv_heads: num(p, "num_kv_heads"),
        d_ff: num(p, "intermediate_size"),
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        norm_fp32_upcast: true,
        tied_embeddings: p["tied"].as_bool().unwrap(),
        max_seq_len: num(p, "max_position_embeddings"),
        attention: Attention::Naive,
        checkpoint: if p["checkpoint"] == "none" { Checkpoint::None } else { Checkpoint::Every(1) },
        fused_qkv: false,
        fused_gate_up: false,
        hf: Some(hf),
        tp: None,
    }
}

/// The point's peft and bitsandbytes options (measure_hf.py's LoraConfig and
/// BitsAndBytesConfig) on `hf`, whose model_type and MoE parts are already set.
pub fn apply_peft(p: &Value, hf: &mut HfConfig) {
    if let Some(r) = p["lora_r"].as_u64() {
        // No target_modules: peft's default for the model_type (measure_hf.py passes None).
        let family = hf.moe.as_ref().map(|m| m.family);
        let names: Vec<String> = match p["target_modules"].as_str() {
            // target_modules=[] (or None beside target_parameters): no module adapted.
            Some("") => Vec::new(),
            None if p["target_parameters"].is_string() => Vec::new(),
            None => default_targets(hf.model_type.name()).expect("peft has a default for the model type").iter().map(|t| t.to_string()).collect(),
            // Every linear of the layer (gpt_oss adapts those of them it has: its attention's),
            // plus the transformers-4 expert and router names peft converts.
            Some("all-linear") => {
                let mut v: Vec<String> = linears_of(hf).iter().map(|(_, t)| t.to_string()).collect();
                v.extend(family.map_or(Vec::new(), vramscope::model::lora_params::converted_names).iter().map(|t| t.to_string()));
                v
            }
            Some(list) => list.split(',').map(str::to_string).collect(),
        };
        // peft's convert_peft_config_for_transformers (mixtral, qwen3_moe, deepseek_v3).
        let (targets, mut target_parameters, gate_up_doubled) = match family.and_then(|f| vramscope::model::lora_params::convert(f, &names)) {
            Some(c) => {
                let c = c.expect("a conversion peft makes");
                (c.modules, c.parameters.iter().map(|t| t.to_string()).collect::<Vec<_>>(), c.gate_up_doubled)
            }
            None => (names, Vec::new(), false),
        };
        if let Some(list) = p["target_parameters"].as_str() {
            let f = family.expect("target_parameters on an MoE model");
            for n in list.split(',') {
                let k = vramscope::model::lora_params::resolve_name(n, f).expect("a ParamWrapper target").to_string();
                if !target_parameters.contains(&k) {
                    target_parameters.push(k);
                }
            }
            let order = vramscope::model::lora_params::target_parameters(f);
            target_parameters.sort_by_key(|k| order.iter().position(|x| x == k));
        }
        hf.lora = Some(LoraConfig {
            r: r as usize,
            alpha: p["lora_alpha"].as_f64().unwrap(),
            dropout: p["lora_dropout"].as_f64().unwrap_or(0.0),
            targets,
            target_parameters,
            gate_up_doubled,
            // measured on CPU: `_dropout_impl`'s noise tensor, not CUDA's bool mask
            dropout_kernel: DropoutKernel::Cpu,
            bias: LoraBias::parse(p["lora_bias"].as_str().unwrap_or("none")).expect("lora_bias"),
            use_dora: p["use_dora"].as_bool().unwrap_or(false),
            modules_to_save: p["modules_to_save"].as_str().map_or(Vec::new(), |m| m.split(',').map(str::to_string).collect()),
            compute_dtype: None,
        });
    }
    if p["load_in_4bit"].as_bool() == Some(true) {
        let dt = |k: &str| if p[k] == "bf16" { DType::BF16 } else { DType::F32 };
        let four = Bnb4bit {
            quant_type: p["quant_type"].as_str().unwrap().to_string(),
            double_quant: p["double_quant"].as_bool().unwrap(),
            compute_dtype: dt("compute_dtype"),
            // measured on CPU: bitsandbytes' default gemm_4bit (dequantize, then F.linear)
            kernel: Gemm4bitKernel::Cpu,
            quant_storage: vramscope::model::bnb::quant_storage(p["quant_storage"].as_str().unwrap_or("uint8")).expect("quant_storage"),
        };
        hf.bnb = Some(Bnb { quant: Quant::FourBit(four), load_dtype: dt("dtype"), prepare: p["prepare"].as_bool().unwrap() });
    }
    if p["load_in_8bit"].as_bool() == Some(true) {
        let int8 = Int8 {
            threshold: p["llm_int8_threshold"].as_f64().unwrap(),
            // measured on CPU with CUDA's MatMul8bitLt, the default kernels' working tensors left
            // out (tools/pytorch/README.md, rule 8): their outputs only
            kernel: Int8Kernel::CpuOutputsOnly,
        };
        let load = if p["dtype"] == "bf16" { DType::BF16 } else { DType::F32 };
        hf.bnb = Some(Bnb { quant: Quant::Int8(int8), load_dtype: load, prepare: p["prepare"].as_bool().unwrap() });
    }
}

/// The precision of a measure_hf.py point (its `autocast` over weights of `weights`), with its
/// `amp` recorded in `cfg`: accelerate's prepared forward (`--autocast-by accelerate`, the
/// Trainer's) or, as measure_hf.py does without the key and every grid measured before it, the
/// loop's own torch.autocast.
pub fn point_precision(p: &Value, weights: DType, cfg: &mut ModelConfig) -> Precision {
    let autocast = match p["autocast"].as_str() {
        None => Precision::Fp32,
        Some(a) => Precision::parse(a).filter(|p| p.autocast().is_some()).unwrap_or_else(|| panic!("autocast {a}")),
    };
    let precision = autocast.on_weights(weights).expect("a modelled weights/autocast pair");
    cfg.hf.as_mut().unwrap().convert_outputs_to_fp32 = match p["amp"].as_str() {
        None | Some("torch") => false,
        Some("accelerate") => precision.autocast().is_some(),
        Some(other) => panic!("amp {other}"),
    };
    precision
}

/// measure_hf.py's loop on meta: three steps (data, then the profile type's calls), the
/// last one's events with the live set before it.
pub fn run_vramscope(point: &Value) -> (Vec<MemEvent>, Vec<MemEvent>) {
    run_config(point, config_of(&point["point"]))
}

/// [`run_vramscope`] with the point's model config given (tests/moe_grid.rs adds the experts).
pub fn run_config(point: &Value, mut cfg: ModelConfig) -> (Vec<MemEvent>, Vec<MemEvent>) {
    let p = &point["point"];
    if p["attn"] == "sdpa" {
        let ran = point["info"]["sdpa_backends"].as_array().unwrap();
        // DeepSeek-V3 with v's head size unlike q's: PyTorch's CPU falls back to the math kernel.
        let unequal_v = p["v_head_dim"].as_u64().is_some_and(|v| Some(v) != p["qk_nope_head_dim"].as_u64().zip(p["qk_rope_head_dim"].as_u64()).map(|(n, r)| n + r));
        let kernel = if unequal_v { "aten::_scaled_dot_product_attention_math" } else { "aten::_scaled_dot_product_flash_attention_for_cpu" };
        assert!(ran.iter().any(|b| b == kernel), "{ran:?}");
    }
    let (batch, seq) = (num(p, "batch"), num(p, "seq"));
    let kind = point["profile_type"].as_str().unwrap();
    // The parameters' type: the load dtype, or fp32 for a 4-bit model's unquantized ones after
    // prepare_model_for_kbit_training.
    let weights = cfg.hf.as_ref().and_then(|h| h.bnb.as_ref()).map_or(if p["dtype"] == "bf16" { DType::BF16 } else { DType::F32 }, |q| q.unquantized_dtype());
    let precision = point_precision(p, weights, &mut cfg);
    runtime::reset();
    let model = Model::new_in(&cfg, Device::Meta, 42, precision.param_dtype()).unwrap();
    assert_eq!(model.dtype, weights);
    assert_eq!(model.num_parameters(), point["info"]["parameters"].as_u64().unwrap(), "parameter count");
    if cfg.hf.as_ref().is_none_or(|h| h.bnb.as_ref().is_none_or(|q| q.int8().is_some())) {
        // (a 4-bit weight is a uint8 tensor of half as many elements; the closed form counts
        // the logical parameters, as peft's print_trainable_parameters does; an int8 weight
        // holds one element per parameter)
        assert_eq!(cfg.param_counts().total, model.num_parameters(), "the closed-form count");
    }
    if let Some(t) = point["info"]["trainable_parameters"].as_u64() {
        assert_eq!(model.num_trainable_parameters(), t, "trainable parameter count");
        assert_eq!(cfg.param_counts().trainable, t, "the closed-form trainable count");
    }
    // measure_hf.py: the Trainer's optimizer names (lr 1e-3, weight decay 0; SGD lr 1e-3) and
    // clip_grad_norm_ only when max_grad_norm > 0.
    let mut opt_cfg = OptimConfig::reference(Flavour::Hf);
    opt_cfg.kind = OptimizerKind::parse(p["optimizer"].as_str().unwrap()).expect("optimizer name");
    opt_cfg.lr = 1e-3;
    let norm = p["max_grad_norm"].as_f64().unwrap();
    opt_cfg.max_grad_norm = (norm > 0.0).then_some(norm);
    let opt = Optimizer::new(opt_cfg, model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_precision(precision);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, batch, seq, Device::Meta, 42);
    let mask = cfg.hf.as_ref().unwrap().attention_mask;
    let mut bound = CausalLmBatch::default();
    let mut before = Vec::new();
    const STEPS: usize = 3;
    for i in 0..STEPS {
        if i + 1 == STEPS {
            runtime::with(|rt| {
                before = rt.log.live_as_events();
                rt.log.start_recording();
            });
        }
        let labeled = matches!(kind, "training" | "forward-loss");
        data.next_causal_lm_batch(&mut bound, labeled, mask);
        let x = bound.input_ids.as_ref().unwrap();
        let m = bound.attention_mask.as_ref();
        match kind {
            "training" => {
                runner.step_masked(x, bound.labels.as_ref().unwrap(), m);
            }
            "inference" | "forward" => {
                let _g = (kind == "inference").then(runtime::no_grad);
                runtime::set_phase(Phase::Forward);
                let region = precision.autocast().map(vramscope::engine::autocast::enable);
                drop(model.forward_masked(x, m));
                drop(region);
                runtime::set_phase(Phase::Setup);
            }
            "forward-loss" => {
                runtime::set_phase(Phase::Forward);
                let region = precision.autocast().map(vramscope::engine::autocast::enable);
                let (logits, loss) = model.forward_loss_masked(x, bound.labels.as_ref().unwrap(), m, &mut |_| runtime::set_phase(Phase::Loss));
                drop(region);
                drop(logits);
                runtime::set_phase(Phase::Setup);
                drop(loss);
            }
            other => panic!("unknown profile type {other}"),
        }
    }
    let events = runtime::with(|rt| rt.log.stop_recording());
    runner.finish();
    (before, events)
}

