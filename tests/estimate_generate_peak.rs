//! `estimate --profile-type generate`'s peak in closed form
//! (src/analyse/estimate/generate_peak.rs) against a simulated meta `generate()`
//! (src/model/hf/generation_5_23.rs, byte-exact against transformers in
//! tests/generate_grid.rs): the peak's bytes, its step, module and op, to the byte, over a
//! grid of greedy and sampling (temperature, top-k, num_return_sequences) runs of llama,
//! mistral, qwen2 and qwen3 shapes (hidden, intermediate, heads, kv heads,
//! head_dim, layers, vocabulary, eos and pad tokens) × batch 1–8 × prompt 1–4096 × new tokens
//! 1–256, chosen so that each moment the closed form compares is the peak somewhere.
use vramscope::analyse::estimate::generate_peak::{covers, peak};
use vramscope::engine::DType;
use vramscope::model::hf::generation_config::GenerateConfig;
use vramscope::model::hf::{Arch, AttnImplementation, HfConfig};
use vramscope::model::{Attention, Checkpoint, Flavour, ModelConfig};
use vramscope::session::estimate_generate::simulate;

/// (hidden, intermediate, heads, kv heads, head_dim, layers, vocab).
const SHAPES: [(usize, usize, usize, usize, usize, usize, usize); 6] = [
    (128, 352, 4, 2, 32, 2, 300),    // MLP-bound prefill
    (64, 172, 4, 1, 16, 2, 32000),   // logits-bound
    (128, 352, 4, 2, 128, 2, 300),   // qwen3-like head_dim: attention-bound
    (96, 256, 6, 6, 16, 1, 1000),    // one layer, MHA
    (128, 128, 8, 2, 64, 3, 5000),   // wide heads, narrow MLP
    (64, 512, 2, 1, 32, 2, 2000),    // wide MLP
];

fn config(arch: Arch, shape: usize, eos: &[i64], pad: Option<i64>) -> ModelConfig {
    config_attn(arch, shape, eos, pad, AttnImplementation::Sdpa)
}

fn config_attn(arch: Arch, shape: usize, eos: &[i64], pad: Option<i64>, attn: AttnImplementation) -> ModelConfig {
    let (d, f, h, kv, hd, l, v) = SHAPES[shape];
    let mut hf = HfConfig::new(arch, hd);
    hf.attn_implementation = attn;
    hf.eos_token_id = eos.to_vec();
    hf.pad_token_id = pad;
    ModelConfig { flavour: Flavour::Hf, vocab_size: v, d_model: d, num_layers: l, num_heads: h, num_kv_heads: kv, d_ff: f, rope_theta: 10_000.0, norm_eps: 1e-6, norm_fp32_upcast: true, tied_embeddings: false, max_seq_len: 8192, attention: Attention::Naive, checkpoint: Checkpoint::None, fused_qkv: false, fused_gate_up: false, hf: Some(hf), tp: None }
}

/// Greedy, and sampling with and without the temperature and top-k warpers, with
/// num_return_sequences; min_new_tokens over all the steps, or part of them.
const GENERATIONS: usize = 9;

fn generation(i: usize, n: usize) -> GenerateConfig {
    let mut gc = GenerateConfig::greedy(n);
    match i {
        0 => return gc,
        6 => {
            gc.min_new_tokens = n;
            return gc;
        }
        7 => {
            gc.min_new_tokens = n.div_ceil(2);
            return gc;
        }
        _ => {}
    }
    gc.do_sample = true;
    (gc.temperature, gc.top_k, gc.num_return_sequences) = match i {
        1 => (1.0, 50, 1),   // GenerationConfig's defaults
        2 => (0.7, 0, 1),    // temperature alone
        3 => (1.0, 0, 1),    // no warper
        4 => (0.7, 50, 3),   // both, three sequences a prompt
        5 => (1.0, 280, 2),  // a top-k near the vocabulary
        _ => {
            gc.min_new_tokens = n.div_ceil(3);
            (0.7, 50, 1)
        }
    };
    gc
}

#[test]
fn the_peak_closed_form_equals_a_simulated_generate() {
    let archs = [Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3];
    let batches = [1, 2, 3, 5, 8];
    let prompts = [1, 2, 7, 64, 300, 1024, 4096];
    let news = [1, 2, 3, 17, 64, 256];
    let tokens: [(&[i64], Option<i64>); 3] = [(&[2], None), (&[2, 7], None), (&[2], Some(0))];
    // A fixed walk over the product (a linear congruential stream), plus the corners.
    let mut points = vec![(0, 0, 0, 0, 0, 0, 0), (3, 5, 4, 6, 5, 0, 0), (1, 1, 0, 0, 1, 1, 2), (1, 1, 2, 3, 3, 0, 3), (2, 3, 1, 2, 2, 0, 5), (0, 1, 1, 3, 4, 0, 7), (0, 1, 2, 2, 5, 0, 6), (2, 1, 0, 1, 3, 0, 8)];
    let mut x: u64 = 0x9E37_79B9;
    while points.len() < 200 {
        let mut r = |m: usize| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((x >> 33) % m as u64) as usize
        };
        points.push((r(4), r(SHAPES.len()), r(5), r(7), r(6), r(3), r(GENERATIONS)));
    }
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for (i, &(a, shape, bi, si, ni, ti, gi)) in points.iter().enumerate() {
        let (arch, b, s, n) = (archs[a], batches[bi], prompts[si], news[ni.min(5)]);
        // Keep the big runs cheap: 4096-token prompts with at most 17 new tokens.
        let n = if s >= 1024 { n.min(17) } else { n };
        let (eos, pad) = tokens[ti];
        // Every third point eager (its S × S scores: prompts up to 1024).
        let eager = i % 3 == 0 && s <= 1024;
        let cfg = config_attn(arch, shape, eos, pad, if eager { AttnImplementation::Eager } else { AttnImplementation::Sdpa });
        let gc = generation(gi, n);
        assert_eq!(covers(&cfg, DType::BF16, &gc), None);
        let name = format!("{} {} shape {shape} eos {eos:?} pad {pad:?} B {b} S {s} N {n} {}", arch.name(), if eager { "eager" } else { "sdpa" }, gc.describe());
        let sim = simulate(&cfg, DType::BF16, b, s, &gc).unwrap();
        let p = peak(&cfg, sim.parameter_bytes, b, s, &gc);
        assert_eq!((p.bytes, &p.step, &p.scope, &p.op), (sim.peak_bytes, &sim.peak_step, &sim.peak_scope, &sim.peak_op), "{name}: {:#?}", p.candidates);
        let when = match p.step.as_str() {
            "prefill" => "prefill",
            last if last == format!("decode step {}", n - 1) => "last decode step",
            _ => "earlier decode step",
        };
        *seen.entry(format!("{when} {}{} {}", if eager { "eager " } else { "" }, p.scope.rsplit('.').next().unwrap_or(""), p.op)).or_default() += 1;
    }
    eprintln!("{seen:#?}");
    // The grid reaches the peak at several moments, in the prefill and in the decode (the
    // last step, and the last that masks eos under min_new_tokens).
    assert!(["prefill", "last decode step", "earlier decode step"].iter().all(|w| seen.keys().any(|k| k.starts_with(w))) && seen.len() >= 10, "{seen:?}");
}

#[test]
fn what_the_closed_form_does_not_cover_is_named() {
    let cfg = config(Arch::Llama, 0, &[2], None);
    assert!(covers(&cfg, DType::F32, &GenerateConfig::greedy(4)).unwrap().contains("fp32"));
    let mut gc = GenerateConfig::greedy(4);
    gc.cache = vramscope::model::hf::generation_config::CacheImplementation::Static;
    assert!(covers(&cfg, DType::BF16, &gc).unwrap().contains("StaticCache"));
}

fn vramscope(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().unwrap()
}

/// The CLI prints the closed-form peak beside the simulated one (equal), takes generate()'s
/// sampling options, labels the simulated peak where the closed form does not cover the run,
/// and refuses what neither models, naming the flag.
#[test]
fn the_cli_prints_the_closed_form_peak_and_refuses_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("llama.json");
    std::fs::write(
        &cfg,
        r#"{"model_type": "llama", "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 3000, "max_position_embeddings": 4096, "eos_token_id": 2, "torch_dtype": "bfloat16"}"#,
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let json = dir.path().join("e.json");
    let base = ["estimate", "--config", c, "--profile-type", "generate", "--max-new-tokens", "6", "--context-length", "40", "--batch-size", "2", "--precision", "pure-bf16"];
    for extra in [&[][..], &["--do-sample", "--temperature", "0.7", "--num-return-sequences", "3"][..], &["--do-sample", "--top-k", "0"][..], &["--min-new-tokens", "3"][..]] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--json", json.to_str().unwrap()]);
        let o = vramscope(&args);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("generate peak (closed form, exact against the simulated meta generate()"), "{text}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(v["peak"]["bytes"], v["simulated"]["peak_bytes"], "{extra:?}");
        assert_eq!(v["peak"]["step"], v["simulated"]["peak_step"], "{extra:?}");
    }
    // fp32 weights: the simulated peak, labelled with why.
    let mut args = base.to_vec();
    *args.last_mut().unwrap() = "fp32";
    let o = vramscope(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("generate peak (simulated; the closed form does not cover float32 weights"), "{text}");
    for (extra, flag) in [
        (&["--num-beams", "2"][..], "--num-beams"),
        (&["--do-sample", "--top-p", "0.9"][..], "--top-p"),
        (&["--cache-implementation", "static", "--disable-compile"][..], "--cache-implementation"),
        (&["--cache-implementation", "offloaded"][..], "--cache-implementation"),
        (&["--num-return-sequences", "2"][..], "--num-return-sequences"),
        (&["--temperature", "0.5"][..], "--temperature"),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?} should name {flag}: {err}");
    }
    // generate()'s options need --profile-type generate.
    let o = vramscope(&["estimate", "--config", c, "--do-sample"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--do-sample"));
}
