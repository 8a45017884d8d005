//! Extreme shapes on meta (issue 15): each gives a correct figure or a clear refusal naming
//! the flag (exit 2), never a panic, an abort or a wrapped number, within bounded host memory.
mod scratch;
use std::path::PathBuf;
use std::process::{Command, Output};

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-extreme-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs the binary; returns its output and the largest resident set any child of this test
/// process has had so far (RUSAGE_CHILDREN), in bytes. Every case shares one bound, so a
/// child of a test running beside this one can only make the check stricter, never wrong.
fn run(args: &[&str]) -> (Output, u64) {
    let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope");
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) }, 0);
    (o, ru.ru_maxrss as u64 * 1024)
}

/// Host memory any of these runs may use.
const MAX_RSS: u64 = 1 << 30;

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Exit 2 with a message naming `flag`, nothing panicked, RSS bounded.
fn refused(args: &[&str], flag: &str) -> String {
    let (o, rss) = run(args);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}\nstdout: {out}\nstderr: {err}");
    assert!(err.contains(flag), "{args:?}: the error names {flag}: {err}");
    assert!(!err.contains("panicked") && !err.contains("memory allocation"), "{err}");
    assert!(rss < MAX_RSS, "{args:?}: children's max RSS {rss} B");
    err
}

#[test]
fn a_huge_batch_on_meta_is_refused_naming_the_batch_size() {
    let out = tmp("batch");
    let err = refused(&["profile", "--device", "meta", "--batch-size", "99999999999", "--out-dir", out.to_str().unwrap()], "--batch-size");
    assert!(err.contains("2^62"), "{err}");
    assert!(!out.exists(), "nothing written");
}

#[test]
fn a_huge_context_on_meta_is_refused_by_profile_and_run_all() {
    for cmd in ["profile", "run-all"] {
        let out = tmp(cmd);
        let err = refused(&[cmd, "--device", "meta", "--context-length", "100000000", "--out-dir", out.to_str().unwrap()], "--context-length");
        assert!(err.contains("attention scores"), "{err}");
        assert!(!out.exists(), "{cmd}: nothing written");
    }
}

fn hf_config(name: &str, hidden: u64) -> PathBuf {
    let p = scratch::dir().join(format!("vramscope-extreme-{}-{name}.json", std::process::id()));
    let j = format!(
        r#"{{"model_type": "llama", "hidden_size": {hidden}, "intermediate_size": 11008, "num_attention_heads": 32,
            "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 2048}}"#
    );
    std::fs::write(&p, j).unwrap();
    p
}

#[test]
fn a_hidden_size_of_2_pow_32_is_refused_and_2_pow_20_is_answered() {
    let huge = hf_config("h32", 1 << 32);
    let out = tmp("h32");
    let err = refused(&["profile", "--device", "meta", "--config", huge.to_str().unwrap(), "--out-dir", out.to_str().unwrap()], "--hidden-dim");
    assert!(err.contains("hidden_size"), "{err}");
    refused(&["estimate", "--config", huge.to_str().unwrap()], "--hidden-dim");

    // 2^20 fits: weights of terabytes, more than any GPU, answered exactly on meta.
    let big = hf_config("h20", 1 << 20);
    let out = tmp("h20");
    let (o, rss) = run(&["profile", "--device", "meta", "--config", big.to_str().unwrap(), "--context-length", "16", "--batch-size", "1", "--out-dir", out.to_str().unwrap()]);
    let (stdout, err) = text(&o);
    assert!(o.status.success(), "{stdout}\n{err}");
    assert!(rss < MAX_RSS, "children's max RSS {rss} B");
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let run = &s["runs"][0];
    let (d, f, v, l) = (1u64 << 20, 11008u64, 32000u64, 2u64);
    let params = l * (4 * d * d + 3 * d * f + 2 * d) + 2 * v * d + d;
    // Every weight is a multiple of 512 bytes: allocated = requested = 4 B per parameter.
    let at_peak: u64 = run["peak"]["by_category"].as_array().unwrap().iter().filter(|c| c[0] == "parameter").map(|c| c[1].as_u64().unwrap()).sum();
    assert_eq!(at_peak, 4 * params, "{}", run["peak"]["by_category"]);
    let peak = run["peak_allocated_bytes"].as_u64().unwrap();
    // Parameters, gradients and two AdamW states at least; far beyond every GPU, far below 2^62.
    assert!(peak >= 16 * params && peak < 1 << 62, "{peak}");
}

#[test]
fn many_layers_run_in_bounded_host_memory() {
    let out = tmp("layers");
    let (o, rss) = run(&[
        "profile", "--device", "meta", "--num-layers", "3000", "--profile-type", "inference", "--max-entries", "10000", "--out-dir", out.to_str().unwrap(),
    ]);
    let (stdout, err) = text(&o);
    assert!(o.status.success(), "{stdout}\n{err}");
    assert!(rss < MAX_RSS, "children's max RSS {rss} B");
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["runs"][0]["trace_entries"], 10000, "the ring buffer keeps --max-entries");
    // Inference keeps the weights: 3000 layers of the walkthrough block plus embedding and norm.
    // (4 key/value heads of 32: k and v are 128 wide; the head is tied to the embedding.)
    let (d, kv, f, v, l) = (256u64, 128u64, 512u64, 1000u64, 3000u64);
    let params = l * (2 * d * d + 2 * d * kv + 3 * d * f + 2 * d) + v * d + d;
    let at_peak: u64 = s["runs"][0]["peak"]["by_category"].as_array().unwrap().iter().filter(|c| c[0] == "parameter").map(|c| c[1].as_u64().unwrap()).sum();
    assert_eq!(at_peak, 4 * params);
}

#[test]
fn layer_counts_the_host_cannot_hold_are_refused_before_the_run() {
    let out = tmp("layers-refused");
    let err = refused(&["profile", "--device", "meta", "--num-layers", "1000000000", "--out-dir", out.to_str().unwrap()], "--num-layers");
    assert!(err.contains("host memory"), "{err}");
    // 2^40 layers: beyond what sizes can count at all.
    refused(&["profile", "--device", "meta", "--num-layers", "1099511627776", "--out-dir", out.to_str().unwrap()], "--num-layers");
    refused(&["estimate", "--num-layers", "1099511627776"], "--num-layers");
}

/// A grid of huge values through `estimate` (closed form and simulation): every answer is
/// exit 0 with consistent totals (a wrapped sum would break the orderings) or exit 2.
#[test]
fn estimate_never_prints_a_wrapped_number() {
    let sizes = [
        vec!["--batch-size", "1000000000000", "--context-length", "1000000", "--max-seq-len", "1000000"],
        vec!["--batch-size", "99999999999"],
        vec!["--batch-size", "1000000", "--context-length", "100000", "--max-seq-len", "100000"],
        vec!["--hidden-dim", "4294967296", "--num-heads", "32", "--num-kv-heads", "32"],
        vec!["--hidden-dim", "1048576", "--num-heads", "32", "--num-kv-heads", "32", "--intermediate-dim", "4194304"],
        vec!["--vocab-size", "1099511627776"],
        vec!["--vocab-size", "1073741824"],
        vec!["--num-layers", "1099511627776"],
        vec!["--num-layers", "100000000"],
        vec!["--intermediate-dim", "18446744073709551615"],
        vec!["--max-seq-len", "18446744073709551615"],
    ];
    for args in &sizes {
        for sim in [true, false] {
            let mut a = vec!["estimate", "--json", "-"];
            a.extend(args.iter().copied());
            if !sim {
                a.push("--no-simulate");
            }
            let (o, rss) = run(&a);
            let (out, err) = text(&o);
            assert!(rss < MAX_RSS, "{a:?}: children's max RSS {rss} B");
            assert!(!err.contains("panicked") && !err.contains("memory allocation"), "{a:?}: {err}");
            match o.status.code() {
                Some(2) => assert!(err.contains("invalid --"), "{a:?}: {err}"),
                Some(0) => {
                    let j: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{a:?}: {e}: {out}"));
                    let e = &j["estimate"];
                    let n = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{a:?}: {k} = {}", e[k]));
                    assert!(n("param_bytes") >= n("params"), "{a:?}");
                    assert!(n("grad_bytes") == n("param_bytes") || n("grad_bytes") >= n("params"), "{a:?}");
                    assert!(n("residual_bytes") > 0 && n("param_bytes") < 1 << 62, "{a:?}");
                    if let Some(s) = j["simulated"].as_object() {
                        let peak = s["training_peak_allocated"].as_u64().unwrap();
                        assert!(peak >= n("param_bytes") && peak < 1 << 62, "{a:?}: {peak}");
                    }
                }
                c => panic!("{a:?}: exit {c:?}\n{out}\n{err}"),
            }
        }
    }
}
