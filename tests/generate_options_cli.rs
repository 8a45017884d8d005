//! `profile --profile-type generate` with generate()'s options: `--cache-implementation`,
//! `--do-sample` (`--temperature`, `--top-k`, `--top-p`), `--min-new-tokens`, `--num-beams`,
//! `--num-return-sequences`. Refusals exit 2 naming the flag and write nothing; a static
//! cache is allocated once, in the prefill. Byte counts are tests/generate_grid.rs's
//! (generate_options.json).
mod scratch;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-generate-options-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run(name: &str, extra: &[&str]) -> (Output, PathBuf) {
    let out = tmp(name);
    let mut args = vec!["profile", "--device", "meta", "--model", "Llama-3.2-1B", "--context-length", "16", "--batch-size", "1", "--warmup-steps", "0", "--out-dir", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    (Command::new(env!("CARGO_BIN_EXE_vramscope")).args(&args).output().expect("run vramscope"), out)
}

#[test]
fn generate_options_that_are_refused_name_their_flag() {
    let g = ["--profile-type", "generate", "--max-new-tokens", "4"];
    let cases: &[(&[&str], &str)] = &[
        (&["--cache-implementation", "static"], "--disable-compile"),
        (&["--cache-implementation", "offloaded", "--disable-compile"], "--cache-implementation"),
        (&["--cache-implementation", "paged"], "--cache-implementation"),
        (&["--num-beams", "0"], "--num-beams"),
        (&["--num-beams", "2", "--num-return-sequences", "3"], "--num-return-sequences"),
        (&["--num-return-sequences", "2"], "--num-return-sequences"),
        (&["--do-sample", "--num-return-sequences", "0"], "--num-return-sequences"),
        (&["--do-sample", "--top-p", "0.9"], "--top-p"),
        (&["--do-sample", "--top-p", "1.5"], "--top-p"),
        (&["--temperature", "0.7"], "--temperature"),
        (&["--do-sample", "--temperature", "0"], "--temperature"),
        (&["--top-k", "10"], "--top-k"),
        (&["--min-new-tokens", "5"], "--min-new-tokens"),
    ];
    for (i, (extra, flag)) in cases.iter().enumerate() {
        let args: Vec<&str> = g.iter().chain(extra.iter()).copied().collect();
        let (o, out) = run(&format!("refuse{i}"), &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} should name {flag}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
    // generate()'s options without generate.
    let (o, out) = run("no-generate", &["--profile-type", "inference", "--do-sample"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--do-sample"));
    assert!(!out.exists());
}

/// Each step's peak (allocated bytes), the KV cache at the end, and the report's line.
fn steps(name: &str, extra: &[&str]) -> (Vec<u64>, u64, String) {
    let mut args = vec!["--profile-type", "generate", "--max-new-tokens", "5"];
    args.extend_from_slice(extra);
    let (o, out) = run(name, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let g = &s["runs"][0]["generate"];
    let peaks = g["steps"].as_array().unwrap().iter().map(|x| x[1].as_u64().unwrap()).collect();
    (peaks, g["kv_cache_bytes"].as_u64().unwrap(), String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn a_static_cache_is_allocated_once_and_holds_what_the_dynamic_one_ends_with() {
    let (dynamic, dyn_kv, _) = steps("dynamic", &[]);
    let (fixed, static_kv, text) = steps("static", &["--cache-implementation", "static", "--disable-compile"]);
    // Llama-3.2-1B: 16 layers x keys and values x 8 kv heads x (16 + 5 - 1) positions x 64 x bf16,
    // for both: max_cache_len is max_length - 1.
    assert_eq!((dyn_kv, static_kv), (16 * 2 * 8 * 20 * 64 * 2, 16 * 2 * 8 * 20 * 64 * 2));
    // The DynamicCache grows by torch.cat at every decode step; the StaticCache was allocated
    // in full by the prefill, and the decode steps write into it: their peaks do not grow.
    assert!(dynamic[1..].windows(2).all(|w| w[1] > w[0]), "dynamic decode peaks grow: {dynamic:?}");
    assert!(fixed[1..].windows(2).all(|w| w[1] == w[0]), "static decode peaks are flat: {fixed:?}");
    assert!(fixed[1] > dynamic[1], "the first decode step already holds the whole static cache: {fixed:?} vs {dynamic:?}");
    assert!(text.contains("greedy, StaticCache, max_new_tokens 5"), "{text}");
}

#[test]
fn sampling_adds_the_warpers_and_multinomial_over_the_fp32_logits() {
    let (greedy, _, _) = steps("greedy", &[]);
    let (sampled, _, text) = steps("sampled", &["--do-sample", "--temperature", "0.7", "--min-new-tokens", "2"]);
    // Llama-3.2-1B's 128,256-token vocabulary: each (1, V) fp32 row is 501 KiB; sampling keeps
    // the scores and probs beside the logits copy, so every decode step peaks higher.
    for (g, s) in greedy[1..].iter().zip(&sampled[1..]) {
        assert!(s >= &(g + 2 * 128_256 * 4), "sampled {sampled:?} vs greedy {greedy:?}");
    }
    assert!(text.contains("sampling (temperature 0.7, top_k 50), DynamicCache, min_new_tokens 2, max_new_tokens 5"), "{text}");
}

#[test]
fn beam_search_holds_a_cache_per_beam_reordered_every_step() {
    let (greedy, greedy_kv, _) = steps("greedy-beams", &[]);
    let (beams, beams_kv, text) = steps("beams", &["--num-beams", "3", "--num-return-sequences", "2"]);
    // One prompt, three beams: the cache has three rows (reorder_cache index_selects each
    // layer's keys and values every step; the last reorder's tensors are what remains).
    assert_eq!(beams_kv, 3 * greedy_kv);
    // Each decode step reorders the whole cache (old and new tensors of a layer live together)
    // and keeps (1, 3 x V) fp32 scores beside the logits copy.
    for (g, b) in greedy[1..].iter().zip(&beams[1..]) {
        assert!(b > &(g + 3 * 128_256 * 4), "beams {beams:?} vs greedy {greedy:?}");
    }
    assert!(text.contains("beam search (3 beams, num_return_sequences 2), DynamicCache, max_new_tokens 5"), "{text}");
    let (_, sampled_kv, text) = steps("beam-sampling", &["--num-beams", "2", "--do-sample", "--top-k", "1"]);
    assert_eq!(sampled_kv, 2 * greedy_kv);
    assert!(text.contains("beam sampling (2 beams, top_k 1), DynamicCache, max_new_tokens 5"), "{text}");
}
