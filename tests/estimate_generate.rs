//! `estimate --profile-type generate`: the DynamicCache's closed form
//! (src/analyse/estimate/generate.rs, written from transformers 5.23's cache_utils.py) against
//! a simulated meta `generate()` (src/model/hf/generation_5_23.rs, itself byte-exact against
//! transformers in tests/generate_grid.rs), exact to the byte: the cache at the end and its
//! high-water mark (the last decode step's cat), over llama, mistral, qwen2 and qwen3, fp32 and
//! bf16 weights, eager and sdpa attention, grouped-query heads, head_dim, batch, prompt, new
//! tokens and sliding windows, within and past the run; the refusals of the CLI.
use std::process::Command;
use vramscope::analyse::estimate::generate::{check, estimate};
use vramscope::engine::DType;
use vramscope::model::hf::generation_config::GenerateConfig;
use vramscope::model::hf::{Arch, AttnImplementation, HfConfig};
use vramscope::model::{Attention, Checkpoint, Flavour, ModelConfig};
use vramscope::session::estimate_generate::simulate;

struct Point {
    arch: Arch,
    attn: AttnImplementation,
    dtype: DType,
    kv: usize,
    head_dim: Option<usize>,
    window: Option<usize>,
    b: usize,
    s: usize,
    n: usize,
}

fn config(p: &Point) -> ModelConfig {
    let (d, h) = (128, 4);
    // Qwen3Config's default head_dim is 128, the others' d / h.
    let hd = p.head_dim.unwrap_or(if p.arch == Arch::Qwen3 { 128 } else { d / h });
    let mut hf = HfConfig::new(p.arch, hd);
    hf.attn_implementation = p.attn;
    hf.sliding_window = p.window;
    hf.eos_token_id = vec![2];
    ModelConfig {
        flavour: Flavour::Hf,
        vocab_size: 300,
        d_model: d,
        num_layers: 2,
        num_heads: h,
        num_kv_heads: p.kv,
        d_ff: 352,
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        norm_fp32_upcast: true,
        tied_embeddings: false,
        max_seq_len: 4096,
        attention: Attention::Naive,
        checkpoint: Checkpoint::None,
        fused_qkv: false,
        fused_gate_up: false,
        hf: Some(hf),
        tp: None,
    }
}

fn pt(arch: Arch, attn: AttnImplementation, dtype: DType, kv: usize, (b, s, n): (usize, usize, usize)) -> Point {
    Point { arch, attn, dtype, kv, head_dim: None, window: None, b, s, n }
}

#[test]
fn the_cache_closed_form_equals_a_simulated_generate() {
    use AttnImplementation::{Eager, Sdpa};
    use Arch::{Llama, Mistral, Qwen2, Qwen3};
    use DType::{BF16, F32};
    let mut points = vec![
        pt(Llama, Sdpa, F32, 2, (2, 40, 4)),
        pt(Llama, Sdpa, BF16, 2, (2, 40, 4)),
        pt(Llama, Eager, F32, 4, (1, 8, 16)),
        pt(Llama, Sdpa, BF16, 1, (4, 16, 8)),
        pt(Llama, Sdpa, F32, 2, (3, 300, 3)),
        pt(Llama, Eager, BF16, 2, (3, 40, 1)),
        pt(Mistral, Sdpa, F32, 2, (2, 64, 4)),
        pt(Mistral, Eager, BF16, 4, (1, 120, 6)),
        pt(Qwen2, Sdpa, F32, 2, (2, 120, 6)),
        pt(Qwen2, Sdpa, BF16, 2, (4, 16, 8)),
        pt(Qwen2, Eager, F32, 1, (1, 8, 2)),
        pt(Qwen3, Sdpa, F32, 2, (1, 8, 16)),
        pt(Qwen3, Sdpa, BF16, 2, (2, 64, 4)),
        pt(Qwen3, Eager, BF16, 4, (3, 40, 1)),
        pt(Qwen3, Sdpa, F32, 2, (4, 24, 12)),
        pt(Llama, Sdpa, F32, 4, (1, 1, 5)),
    ];
    // head_dim set apart from hidden / heads (qwen3's default aside).
    points.push(Point { head_dim: Some(48), ..pt(Qwen3, Sdpa, BF16, 2, (2, 20, 5)) });
    points.push(Point { head_dim: Some(16), ..pt(Llama, Eager, F32, 2, (2, 30, 3)) });
    // Sliding windows the prompt and the new tokens stay within (S + N ≤ W): the full cache.
    points.push(Point { window: Some(48), ..pt(Mistral, Sdpa, F32, 2, (2, 40, 8)) });
    points.push(Point { window: Some(64), ..pt(Mistral, Eager, BF16, 2, (1, 32, 10)) });
    points.push(Point { window: Some(16), ..pt(Qwen2, Sdpa, BF16, 2, (3, 12, 4)) });
    points.push(Point { window: Some(100), ..pt(Mistral, Sdpa, BF16, 4, (2, 90, 1)) });
    assert!(points.len() >= 20);
    for p in &points {
        let cfg = config(p);
        let name = format!("{} {} {:?} kv {} d_h {:?} window {:?} B {} S {} N {}", p.arch.name(), p.attn.name(), p.dtype, p.kv, p.head_dim, p.window, p.b, p.s, p.n);
        check(&cfg, p.s, p.n).unwrap_or_else(|e| panic!("{name}: refused: {e}"));
        let e = estimate(&cfg, p.dtype.size() as u64, p.b, p.s, p.n);
        let sim = simulate(&cfg, p.dtype, p.b, p.s, &GenerateConfig::greedy(p.n)).unwrap();
        assert_eq!(e.kv_cache_bytes, sim.kv_cache_bytes, "{name}: the cache at the end");
        assert_eq!(e.kv_cache_peak_bytes, sim.kv_cache_peak_bytes, "{name}: the cache's high-water mark");
        // After the prefill: a one-token run ends there.
        let once = simulate(&cfg, p.dtype, p.b, p.s, &GenerateConfig::greedy(1)).unwrap();
        assert_eq!(e.kv_cache_prefill_bytes, once.kv_cache_bytes, "{name}: the cache after the prefill");
        assert!(sim.peak_bytes >= sim.parameter_bytes + e.kv_cache_bytes, "{name}: the peak holds the weights and the cache");
    }
}

/// Past the window (tests/estimate_generate_families.rs's grid holds it to the simulation): a
/// sliding layer holds the last window − 1 positions.
#[test]
fn a_window_the_run_passes_keeps_its_last_positions() {
    let p = Point { window: Some(48), ..pt(Arch::Mistral, AttnImplementation::Sdpa, DType::F32, 2, (2, 40, 9)) };
    let cfg = config(&p);
    check(&cfg, p.s, p.n).unwrap();
    let e = estimate(&cfg, 4, p.b, p.s, p.n);
    assert_eq!(e.kv_cache_bytes, e.kv_bytes_per_token * p.b as u64 * 47);
    assert_eq!(e.kv_cache_prefill_bytes, e.kv_bytes_per_token * p.b as u64 * 40);
}

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().unwrap()
}

#[test]
fn the_cli_prints_the_cache_and_refuses_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("mistral.json");
    std::fs::write(
        &cfg,
        r#"{"model_type": "mistral", "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 4096, "sliding_window": 32, "eos_token_id": 2}"#,
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let json = dir.path().join("e.json");
    let o = vramscope(&["estimate", "--config", c, "--profile-type", "generate", "--max-new-tokens", "4", "--context-length", "24", "--batch-size", "2", "--precision", "fp32", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    // 2 layers × keys and values × 2 kv heads × 32 × fp32 per position; B 2 × (24 + 4 − 1).
    let end = 2 * 2 * 2 * 32 * 4 * 2 * 27;
    assert!(text.contains("DynamicCache at the end") && text.contains(&format!("({end} B) | ")), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["estimate"]["kv_cache_bytes"], end);
    assert_eq!(v["simulated"]["kv_cache_bytes"], end);
    // Past the window (32): each sliding layer holds its last 31 positions, equal to the
    // simulation; the peak is the lower bound's.
    let o = vramscope(&["estimate", "--config", c, "--profile-type", "generate", "--max-new-tokens", "9", "--context-length", "30", "--batch-size", "2", "--precision", "fp32", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("the window's view") && text.contains("generate peak lower bound"), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["estimate"]["kv_cache_bytes"], 2 * 2 * 2 * 32 * 4 * 2 * 31);
    assert_eq!(v["simulated"]["kv_cache_bytes"], v["estimate"]["kv_cache_bytes"]);
    assert_eq!(v["simulated"]["kv_cache_peak_bytes"], v["estimate"]["kv_cache_peak_bytes"]);
    // peft's unmerged LoRA, 4-bit weights with and without it (generate_qlora.json): the cache
    // equal to the simulation's, the peak the lower bound's.
    // peft's bias, DoRA and modules_to_save and 8-bit weights (generate_dense_extras.json) too.
    for extra in [
        &["--lora-r", "8"][..],
        &["--load-in-4bit", "--dtype", "bfloat16"][..],
        &["--lora-r", "16", "--target-modules", "all-linear", "--load-in-4bit", "--dtype", "bfloat16", "--prepare-model-for-kbit-training", "true"][..],
        &["--lora-r", "8", "--load-in-8bit", "--dtype", "bfloat16"][..],
        &["--lora-r", "8", "--use-dora"][..],
        &["--lora-r", "8", "--modules-to-save", "embed_tokens,lm_head", "--lora-bias", "all"][..],
    ] {
        let o = vramscope(&[&["estimate", "--config", c, "--profile-type", "generate", "--max-new-tokens", "5", "--context-length", "12", "--batch-size", "2", "--json", json.to_str().unwrap()][..], extra].concat());
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("generate peak lower bound"), "{extra:?}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        for k in ["kv_cache_bytes", "kv_cache_peak_bytes"] {
            assert!(v["estimate"][k].as_u64().is_some_and(|x| x > 0), "{extra:?}: {k}");
            assert_eq!(v["simulated"][k], v["estimate"][k], "{extra:?}: {k}");
        }
    }
    // Qwen2-MoE's window on the layers below max_window_layers (generate_qwen2_moe_sliding.json).
    let moe = dir.path().join("qwen2_moe.json");
    std::fs::write(
        &moe,
        r#"{"model_type": "qwen2_moe", "hidden_size": 128, "intermediate_size": 96, "moe_intermediate_size": 96, "shared_expert_intermediate_size": 96, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 4096, "num_experts": 4, "num_experts_per_tok": 2,
            "use_sliding_window": true, "sliding_window": 12, "max_window_layers": 2}"#,
    )
    .unwrap();
    let o = vramscope(&["estimate", "--config", moe.to_str().unwrap(), "--profile-type", "generate", "--max-new-tokens", "6", "--context-length", "16", "--batch-size", "2", "--precision", "fp32", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "qwen2_moe: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for k in ["kv_cache_bytes", "kv_cache_peak_bytes"] {
        assert!(v["estimate"][k].as_u64().is_some_and(|x| x > 0), "qwen2_moe: {k}");
        assert_eq!(v["simulated"][k], v["estimate"][k], "qwen2_moe: {k}");
    }
    for (extra, flag) in [
        (&["--context-length", "24"][..], "--max-new-tokens"),
        (&["--max-new-tokens", "0", "--context-length", "8"][..], "--max-new-tokens"),
        (&["--max-new-tokens", "2", "--context-length", "8", "--precision", "bf16"][..], "--precision"),
        // (LoRA, DoRA, modules_to_save, 4-bit and 8-bit weights run, above; DoRA and
        // modules_to_save over quantized weights are not measured with generate.)
        (&["--max-new-tokens", "2", "--context-length", "8", "--lora-r", "8", "--load-in-4bit", "--use-dora"][..], "--use-dora"),
        (&["--max-new-tokens", "2", "--context-length", "8", "--lora-r", "8", "--load-in-8bit", "--modules-to-save", "lm_head"][..], "--modules-to-save"),
        (&["--max-new-tokens", "2", "--context-length", "8", "--use-cache", "false"][..], "--use-cache"),
    ] {
        let mut args = vec!["estimate", "--config", c, "--profile-type", "generate"];
        args.extend_from_slice(extra);
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?} should name {flag}: {err}");
    }
    let o = vramscope(&["estimate", "--config", c, "--max-new-tokens", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--max-new-tokens"));
    let o = vramscope(&["estimate", "--model", "tiny", "--profile-type", "generate", "--max-new-tokens", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--profile-type"));
}

/// Issue 30's models: estimate states their DynamicCache in closed form and a lower bound of
/// the peak (tests/estimate_generate_families.rs holds both to the simulation); what it does
/// not derive for them stays refused, naming the flag.
#[test]
fn estimate_generate_runs_issue_30s_models_and_refuses_what_it_does_not_derive() {
    let run = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().unwrap();
    for preset in ["Phi-3-mini", "OLMo-2-7B", "Qwen3-30B-A3B", "Mixtral-8x7B", "DeepSeek-V3", "Gemma-2-9B", "gpt-oss-20b"] {
        // (DeepSeek-V3's sdpa with v's head size unlike q's is modelled for the CPU's kernels only.)
        let attn: &[&str] = if preset == "DeepSeek-V3" { &["--attn-implementation", "eager"] } else { &[] };
        let o = run(&[&["estimate", "--preset", preset, "--profile-type", "generate", "--max-new-tokens", "4", "--context-length", "64", "--batch-size", "1", "--no-simulate"][..], attn].concat());
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{preset}: {err}");
        assert!(out.contains("DynamicCache at the end") && out.contains("generate peak lower bound (closed form"), "{preset}: {out}");
    }
    let dir = tempfile::tempdir().unwrap();
    let routing = dir.path().join("counts.txt");
    std::fs::write(&routing, "8 8 8 8 8 8 8 8").unwrap();
    // Phi-3-mini's window (2047) and Gemma 2's (4096) passed by the prompt and new tokens.
    for (preset, extra) in [("Phi-3-mini", &["--context-length", "2040", "--max-new-tokens", "16"][..]), ("Gemma-2-9B", &["--context-length", "4090", "--max-new-tokens", "8"][..])] {
        let o = run(&[&["estimate", "--preset", preset, "--profile-type", "generate", "--batch-size", "1", "--no-simulate"][..], extra].concat());
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{preset}: {err}");
        assert!(out.contains("the window's view") && out.contains("generate peak lower bound (closed form"), "{preset}: {out}");
    }
    for (preset, extra, flag) in [
        ("Mixtral-8x7B", &["--context-length", "8", "--max-new-tokens", "4", "--routing", routing.to_str().unwrap()][..], "--routing"),
        ("Qwen3-30B-A3B", &["--context-length", "8", "--max-new-tokens", "4", "--output-router-logits"][..], "--output-router-logits"),
        // peft's ParamWrapper (named, or mixtral's all-linear converted into it) is measured with
        // generate alone, not beside peft's bias; DoRA over 4-bit weights is not either, nor
        // deepseek_v3's 8-bit load.
        ("Mixtral-8x7B", &["--context-length", "8", "--max-new-tokens", "4", "--lora-r", "8", "--target-parameters", "mlp.experts.down_proj", "--lora-bias", "all"][..], "--lora-bias"),
        ("Gemma-2-9B", &["--context-length", "8", "--max-new-tokens", "4", "--lora-r", "8", "--use-dora", "--load-in-4bit"][..], "--use-dora"),
        ("DeepSeek-V3", &["--context-length", "8", "--max-new-tokens", "4", "--attn-implementation", "eager", "--load-in-8bit"][..], "--load-in-8bit"),
    ] {
        let o = run(&[&["estimate", "--preset", preset, "--profile-type", "generate", "--batch-size", "1", "--no-simulate"][..], extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{preset} {extra:?}: {err}");
        assert!(err.contains(flag), "{preset} {extra:?} should name {flag}: {err}");
    }
    // peft's ParamWrapper with generate (generate_models_adapters.json; its closed form is checked
    // against the simulation in tests/estimate_generate_families.rs).
    for extra in [&["--target-parameters", "mlp.experts.down_proj"][..], &["--target-modules", "all-linear"][..]] {
        let o = run(&[&["estimate", "--preset", "Mixtral-8x7B", "--profile-type", "generate", "--batch-size", "1", "--no-simulate", "--context-length", "8", "--max-new-tokens", "4", "--lora-r", "8"][..], extra].concat());
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    // LoRA on the nn.Linear modules and 4-bit weights (generate_models_adapters.json), prepared
    // too (generate_models_int8.json): the cache in closed form equal to the simulation's, the
    // peak's lower bound.
    let json = dir.path().join("adapters.json");
    for (preset, extra) in [
        ("OLMo-2-7B", &["--lora-r", "8", "--target-modules", "q_proj"][..]),
        ("Gemma-2-9B", &["--load-in-4bit", "--lora-r", "16", "--target-modules", "all-linear"][..]),
        ("Gemma-2-9B", &["--load-in-4bit", "--prepare-model-for-kbit-training", "true"][..]),
        ("Mixtral-8x7B", &["--load-in-4bit", "--lora-r", "8", "--target-modules", "q_proj,v_proj"][..]),
        ("DeepSeek-V3", &["--attn-implementation", "eager", "--lora-r", "8", "--target-modules", "kv_b_proj,o_proj"][..]),
        // peft's bias, DoRA, modules_to_save and 8-bit weights (generate_models_extras.json,
        // generate_models_int8.json).
        ("Phi-3-mini", &["--load-in-8bit", "--lora-r", "8", "--target-modules", "qkv_proj"][..]),
        ("Gemma-2-9B", &["--lora-r", "8", "--use-dora"][..]),
        ("Qwen3-30B-A3B", &["--lora-r", "8", "--target-modules", "q_proj,v_proj", "--modules-to-save", "lm_head", "--lora-bias", "lora_only"][..]),
        ("gpt-oss-20b", &["--lora-r", "8", "--target-modules", "q_proj,v_proj", "--lora-bias", "all", "--modules-to-save", "embed_tokens"][..]),
    ] {
        let o = run(&[&["estimate", "--preset", preset, "--num-layers", "2", "--profile-type", "generate", "--batch-size", "1", "--context-length", "16", "--max-new-tokens", "3", "--dtype", "bfloat16", "--json", json.to_str().unwrap()][..], extra].concat());
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{preset} {extra:?}: {err}");
        assert!(out.contains("generate peak lower bound"), "{preset} {extra:?}: {out}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        for k in ["kv_cache_bytes", "kv_cache_peak_bytes"] {
            assert!(v["estimate"][k].as_u64().is_some_and(|x| x > 0), "{preset} {extra:?}: {k}");
            assert_eq!(v["simulated"][k], v["estimate"][k], "{preset} {extra:?}: {k}");
        }
    }
}
