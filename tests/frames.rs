//! Snapshot frames name the reference implementation's Python code, innermost first, as
//! PyTorch's own snapshot would (then the module path, the Rust line and the phase), and
//! `analyze` groups by them across layers.
use serde_json::Value;
use std::process::Command;

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

/// Profiles a forward pass on meta and returns `analyze --json --detail 100 --top 100000` of
/// its snapshot.
fn analyzed(name: &str, args: &[&str]) -> Value {
    analyzed_as(name, "forward", args)
}

/// The same for profile type `kind`.
fn analyzed_as(name: &str, kind: &str, args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(name);
    let mut a = vec!["profile", "--device", "meta", "--profile-type", kind, "--out-dir", out.to_str().unwrap()];
    a.extend_from_slice(args);
    let o = vramscope(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let snap = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|e| e == "pickle")).unwrap();
    let o = vramscope(&["analyze", "--json", "--top", "100000", snap.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn stacks(v: &Value) -> Vec<Vec<String>> {
    v["largest"].as_array().unwrap().iter().map(|a| a["frames"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect()).collect()
}

fn groups(v: &Value) -> Vec<String> {
    v["live_at_peak_by_frame"].as_array().unwrap().iter().map(|g| g[0].as_str().unwrap().to_string()).collect()
}

#[test]
fn cs336_frames_name_cs336_basics_functions_innermost_first() {
    let v = analyzed("cs336", &["--model", "small", "--context-length", "256"]);
    let all = stacks(&v);
    // The attention scores: scaled_dot_product_attention inside the attention module inside
    // the block inside the LM, then the module path, the Rust line and the phase.
    let scores = all
        .iter()
        .find(|s| s[0] == "scaled_dot_product_attention cs336_basics/model.py:94")
        .unwrap_or_else(|| panic!("no allocation made in scaled_dot_product_attention: {:?}", &all[..5]));
    assert_eq!(scores[1], "CausalMultiHeadSelfAttention.forward cs336_basics/model.py:118");
    assert_eq!(scores[2], "TransformerBlock.forward cs336_basics/model.py:179");
    assert_eq!(scores[3], "BasicsTransformerLM.forward cs336_basics/model.py:200");
    assert!(scores[4].contains("layers.") && scores[4].contains(".attn"), "{scores:?}");
    assert!(scores[5].starts_with("rust src/"), "{scores:?}");
    assert_eq!(scores.last().unwrap(), "forward vramscope:0");
    assert!(all.iter().any(|s| s[0] == "softmax cs336_basics/nn_utils.py:88" && s[1] == "scaled_dot_product_attention cs336_basics/model.py:94"));
    // Grouped by the innermost frame: one group per function, whatever the layer.
    let g = groups(&v);
    assert!(g.iter().any(|t| t == "Linear.forward cs336_basics/model.py:34"), "{g:?}");
    assert!(!g.iter().any(|t| t.contains("layers.0.") || t.contains("layers.1.")), "a layer index left unfolded: {g:?}");
}

#[test]
fn hf_frames_name_the_familys_modeling_file() {
    for (model, file, class) in [
        ("Llama-3.1-8B", "transformers/models/llama/modeling_llama.py", "Llama"),
        ("Qwen3-8B", "transformers/models/qwen3/modeling_qwen3.py", "Qwen3"),
    ] {
        let v = analyzed(model, &["--model", model, "--num-layers", "2", "--context-length", "128", "--attn-implementation", "eager"]);
        let all = stacks(&v);
        let eager = all
            .iter()
            .find(|s| s[0].starts_with("eager_attention_forward "))
            .unwrap_or_else(|| panic!("{model}: no allocation in eager_attention_forward"));
        assert!(eager[0].contains(file), "{model}: {eager:?}");
        assert!(eager[1].starts_with(&format!("{class}Attention.forward {file}:")), "{model}: {eager:?}");
        assert!(eager[2].starts_with(&format!("{class}DecoderLayer.forward {file}:")), "{model}: {eager:?}");
        assert!(eager[3].starts_with(&format!("{class}Model.forward {file}:")), "{model}: {eager:?}");
        assert!(eager[4].starts_with(&format!("{class}ForCausalLM.forward {file}:")), "{model}: {eager:?}");
        assert!(all.iter().any(|s| s[0].starts_with("Linear.forward torch/nn/modules/linear.py:")), "{model}: no nn.Linear frame");
        let g = groups(&v);
        assert!(!g.iter().any(|t| t.contains("layers.0.") || t.contains("layers.1.")), "{model}: a layer index left unfolded: {g:?}");
    }
}

/// The first stack whose innermost frame starts with `top`.
fn stack<'a>(all: &'a [Vec<String>], top: &str, what: &str) -> &'a Vec<String> {
    all.iter().find(|s| s[0].starts_with(top)).unwrap_or_else(|| panic!("{what}: no allocation under {top:?}; stacks begin {:?}", all.iter().map(|s| &s[0]).take(20).collect::<Vec<_>>()))
}

#[test]
fn tinyllama_frames_name_the_workshop_models_functions() {
    let v = analyzed("tinyllama", &["--preset", "tinyllama-tiny", "--context-length", "64"]);
    let all = stacks(&v);
    let file = "pytorch_tinyllama.py";
    let probs = all.iter().find(|s| s[0] == format!("Attention.forward {file}:103")).expect("an allocation made in Attention.forward (the scores)");
    assert_eq!(probs[1], format!("Block.forward {file}:144"), "{probs:?}");
    assert_eq!(probs[2], format!("TinyLlama.forward {file}:166"), "{probs:?}");
    let rope = stack(&all, "Rotary.apply ", "tinyllama");
    assert_eq!(rope[1], format!("Attention.forward {file}:103"), "{rope:?}");
    let lin = stack(&all, "Linear.forward torch/nn/modules/linear.py:", "tinyllama");
    assert!(lin[1].starts_with("Attention.forward ") || lin[1].starts_with("SwiGLU.forward ") || lin[1].starts_with("TinyLlama.forward "), "{lin:?}");
    stack(&all, &format!("RMSNorm.forward {file}:45"), "tinyllama");
}

#[test]
fn qlora_frames_name_peft_and_bitsandbytes() {
    let args = ["--model", "Llama-3.1-8B", "--num-layers", "2", "--context-length", "128", "--load-in-4bit", "--lora-r", "8", "--target-modules", "all-linear", "--lora-dropout", "0.05"];
    let v = analyzed_as("qlora", "training", &args);
    let all = stacks(&v);
    // Dequantization inside bitsandbytes' matmul_4bit, inside its Linear4bit, inside peft's.
    let mm = stack(&all, "matmul_4bit bitsandbytes/autograd/_functions.py:", "qlora");
    assert!(mm[1].starts_with("Linear4bit.forward bitsandbytes/nn/modules.py:"), "{mm:?}");
    assert!(mm[2].starts_with("Linear4bit.forward peft/tuners/lora/bnb.py:"), "{mm:?}");
    assert!(mm[3].starts_with("LlamaAttention.forward ") || mm[3].starts_with("LlamaMLP.forward "), "{mm:?}");
    // The adapter's own allocations (dropout, lora_A/B) sit under peft's layer only.
    let lora = all.iter().find(|s| s[0].starts_with("Linear4bit.forward peft/tuners/lora/bnb.py:")).expect("an allocation made by peft's Linear4bit itself");
    assert!(lora[1].starts_with("Llama"), "{lora:?}");
}

#[test]
fn optimizer_frames_name_the_optimizer_that_runs() {
    for (optim, outer, inner) in [
        ("adamw_torch_fused", "Adam.step torch/optim/adam.py:", Some("_fused_adam torch/optim/adam.py:")),
        ("adamw_torch", "Adam.step torch/optim/adam.py:", Some("_multi_tensor_adam torch/optim/adam.py:")),
        ("adamw_8bit", "Optimizer8bit.step bitsandbytes/optim/optimizer.py:", Some("Optimizer2State.update_step bitsandbytes/optim/optimizer.py:")),
        ("adafactor", "Adafactor.step transformers/optimization.py:", None),
    ] {
        let v = analyzed_as(optim, "training", &["--model", "Llama-3.1-8B", "--num-layers", "1", "--hidden-dim", "256", "--num-heads", "4", "--num-kv-heads", "2", "--context-length", "32", "--optimizer", optim]);
        let all = stacks(&v);
        let st = all.iter().find(|s| s.iter().any(|f| f.starts_with(outer))).unwrap_or_else(|| panic!("{optim}: no allocation under {outer}"));
        if let Some(inner) = inner {
            let i = st.iter().position(|f| f.starts_with(inner)).unwrap_or_else(|| panic!("{optim}: {st:?}"));
            assert!(st[i + 1].starts_with(outer), "{optim}: {st:?}");
        }
    }
}
