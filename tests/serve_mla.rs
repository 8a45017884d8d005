//! `vramscope serve` for DeepSeek-V3 (multi-head latent attention): the CLI's plan and its
//! refusals. The weights and KV terms themselves are pinned against vLLM 0.33.0 by
//! tests/serve_mla_grid.rs; here the latent cache's block is recomputed by hand and what is not
//! modelled exits 2 naming the flag.
mod scratch;
mod serve_cli;
use serve_cli::{assert_refused, serve, text};
use std::process::Command;

#[test]
fn deepseek_v3_plans_with_one_latent_head() {
    let o = serve(&["--preset", "DeepSeek-V3", "--gpu", "H200", "--enforce-eager", "--tensor-parallel-size", "16"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    // 61 layers x 16 tokens x (512 + 64) x 2 bytes: the same on every rank (not split by TP).
    assert_eq!(61 * 16 * 576 * 2, 1_124_352);
    assert!(out.contains("1,124,352 bytes  61 layers x 16 tokens x one latent head (kv_lora_rank 512 + qk_rope_head_dim 64"), "{out}");
    let o8 = serve(&["--preset", "DeepSeek-V3", "--gpu", "H200", "--enforce-eager", "--tensor-parallel-size", "8", "--block-size", "64"]);
    let (out8, err8) = text(&o8);
    // Eight ranks: a shard of 157.92 GiB does not load on a 139.8 GiB H200 (exit 3, vLLM's OOM).
    assert_eq!(o8.status.code(), Some(3), "{out8}{err8}");
    assert!(err8.contains("the weights (157.92 GiB) are more than the GPU's memory (139.8 GiB)"), "{err8}");
    // The MTP layer (num_nextn_predict_layers) is not loaded for plain serving: a config that
    // names it plans the same weights as one that does not.
    let dir = scratch::dir();
    let pid = std::process::id();
    let base = r#"{"model_type": "deepseek_v3", "vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 2816, "moe_intermediate_size": 256,
        "num_hidden_layers": 5, "num_attention_heads": 16, "num_key_value_heads": 16, "q_lora_rank": 384, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 32, "n_shared_experts": 1,
        "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2, "first_k_dense_replace": 2, "topk_method": "noaux_tc",
        "max_position_embeddings": 16384, "torch_dtype": "bfloat16", "tie_word_embeddings": false"#;
    let weights = |extra: &str, name: &str| {
        let p = dir.join(format!("vramscope-serve-mla-{name}-{pid}.json"));
        std::fs::write(&p, format!("{base}{extra}}}")).unwrap();
        let o = serve(&["--config", p.to_str().unwrap(), "--enforce-eager"]);
        let _ = std::fs::remove_file(&p);
        let (out, err) = text(&o);
        (o.status.code(), out.lines().find(|l| l.contains("- weights")).map(str::to_string), err)
    };
    let (code, plain, err) = weights("", "plain");
    assert_eq!(code, Some(0), "{err}");
    // tests/fixtures/vllm_serve_mla.json, DeepSeek-V3-small-shape at TP 1: 385,186,944 bytes.
    assert!(plain.as_deref().is_some_and(|l| l.contains("385,186,944 bytes")), "{plain:?}");
    let (code, mtp, err) = weights(r#", "num_nextn_predict_layers": 1"#, "mtp");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(plain, mtp);
    // Refused, naming the flag.
    for (extra, why) in [
        (r#", "moe_layer_freq": 2"#, "moe_layer_freq 2"),
        (r#", "attention_bias": true"#, "attention_bias true"),
        (r#", "kv_lora_rank": 448, "qk_rope_head_dim": 32"#, "= 480"),
        (r#", "quantization_config": {"quant_method": "fp8"}"#, "quantization_config"),
    ] {
        let (code, _, err) = weights(extra, "refused");
        assert_eq!(code, Some(2), "{extra}: {err}");
        assert!(err.contains("--config") && err.contains(why), "{extra}: {err}");
    }
    let refused: &[(&[&str], &str, &str)] = &[
        (&["--gpu", "A100-80GB"], "--gpu", "FLASH_ATTN_MLA"),
        (&["--gpu", "H100-80GB", "--kv-cache-dtype", "fp8"], "--kv-cache-dtype", "FlashMLA"),
        (&["--gpu", "H200", "--tensor-parallel-size", "3"], "--tensor-parallel-size", "Total number of attention heads (128)"),
    ];
    assert_refused(&["--preset", "DeepSeek-V3"], refused);
}

/// A Qwen3-MoE config with dense layers among the sparse ones plans under `serve` (its weights
/// are pinned by tests/serve_mla_grid.rs), while the transformers-side commands still refuse it.
#[test]
fn dense_layers_among_sparse_ones_plan() {
    let p = scratch::dir().join(format!("vramscope-serve-dense-mix-{}.json", std::process::id()));
    std::fs::write(
        &p,
        r#"{"model_type": "qwen3_moe", "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 128,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_experts": 8,
            "num_experts_per_tok": 2, "max_position_embeddings": 2048, "mlp_only_layers": [0], "decoder_sparse_step": 1, "torch_dtype": "bfloat16"}"#,
    )
    .unwrap();
    let cfg = p.to_str().unwrap();
    let o = serve(&["--config", cfg, "--enforce-eager"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    // By hand: 4 layers of attention (256 x (4 + 2 x 2) x 64 + 4 x 64 x 256), norms 2 x 256 and
    // q/k norms 2 x 64; one dense MLP 3 x 256 x 512; three sparse ones (router 8 x 256, experts
    // 3 x 8 x 128 x 256); embedding and lm_head 2 x 1024 x 256; final norm 256. Times 2 bytes.
    let attn = 256 * 8 * 64 + 4 * 64 * 256 + 2 * 256 + 2 * 64;
    let elems = 4 * attn + 3 * 256 * 512 + 3 * (8 * 256 + 3 * 8 * 128 * 256) + 2 * 1024 * 256 + 256;
    let bytes = format!("{} bytes  parameters", commas(2 * elems as u64));
    assert!(out.contains(&bytes), "{bytes}: {out}");
    let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(["estimate", "--config", cfg]).output().unwrap();
    let err = text(&o).1;
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("mlp_only_layers"), "{err}");
    let _ = std::fs::remove_file(&p);
}

fn commas(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
