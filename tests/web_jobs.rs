//! The page's jobs (src/web, what the WebAssembly build runs) give the command line's answers
//! for the same words: profile's summary.json, fit's and estimate's JSON, the error line of a
//! bad flag or config.json, and the refusals of what the page does not run.
use serde_json::Value;
use std::process::Command;
use vramscope::web;

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// The command line run with `args` in `dir`: (exit code, stdout, stderr).
fn cli(dir: &std::path::Path, args: &[String]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).current_dir(dir).output().unwrap();
    (o.status.code().unwrap(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// summary.json less what names this invocation's files: the run id, and the folder the
/// command line put the snapshots in (the page returns them by file name).
fn comparable(s: Value) -> Value {
    // Through text, as summary.json is read back: serde_json's float parse may differ from
    // the f64 it printed by an ulp (the *_gib fields), on either side alike.
    let mut s: Value = serde_json::from_str(&serde_json::to_string_pretty(&s).unwrap()).unwrap();
    s["run_id"] = Value::Null;
    // Block addresses carry on from the process's earlier runs; the page's first run is alone.
    fn no_addr(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("addr");
                m.values_mut().for_each(no_addr);
            }
            Value::Array(a) => a.iter_mut().for_each(no_addr),
            _ => {}
        }
    }
    no_addr(&mut s);
    for r in s["runs"].as_array_mut().unwrap() {
        for k in ["snapshot", "report"] {
            if let Some(p) = r[k].as_str() {
                r[k] = p.rsplit('/').next().unwrap().into();
            }
        }
    }
    s
}

#[test]
fn profile_summary_and_files_match_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    for flags in ["--preset 2.7B --profile-type training", "--preset small --profile-type forward,training --context-length 128,256 --precision bf16"] {
        let args = words(&format!("profile --device meta {flags} --out-dir out"));
        let (code, _, err) = cli(dir.path(), &args);
        assert_eq!(code, 0, "{err}");
        let want: Value = serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap()).unwrap();
        let got = web::run(&args, &[]);
        assert_eq!(got.exit_code, 0, "{:?}", got.error);
        let summary = got.answer.clone().unwrap();
        assert_eq!(comparable(summary.clone()), comparable(want), "{flags}");
        // Each run's snapshot pickle and report come back under the names summary.json gives.
        for r in summary["runs"].as_array().unwrap() {
            let snap = got.files.iter().find(|(n, _)| n == r["snapshot"].as_str().unwrap()).expect("snapshot file");
            assert_eq!(snap.1[0], 0x80, "a pickle starts with PROTO");
            let report = got.files.iter().find(|(n, _)| n == r["report"].as_str().unwrap()).expect("report file");
            assert!(String::from_utf8_lossy(&report.1).contains("<html"));
        }
        assert!(got.files.iter().any(|(n, _)| n == "summary.json"));
    }
}

#[test]
fn fit_and_estimate_answers_match_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    for line in [
        "fit --preset Llama-3.1-8B --gpu RTX4090-24GB --load-in-4bit --lora-r 16 --dtype bf16 --json -",
        "estimate --preset small --json -",
    ] {
        let args = words(line);
        let (code, out, err) = cli(dir.path(), &args);
        let got = web::run(&args, &[]);
        assert_eq!(got.exit_code, code, "{line}: {err} / {:?}", got.error);
        let want: Value = serde_json::from_str(&out).unwrap();
        // The command line's answer is read back from its JSON text: compare the page's through
        // the same text (serde_json's default float parsing need not round-trip every f64).
        let got: Value = serde_json::from_str(&serde_json::to_string(&got.answer.unwrap()).unwrap()).unwrap();
        assert_eq!(got, want, "{line}");
    }
    // Nothing fits: exit 3 and the command line's line.
    let args = words("fit --preset Llama-3.1-8B --gpu RTX4090-24GB --json -");
    let (code, _, err) = cli(dir.path(), &args);
    let got = web::run(&args, &[]);
    assert_eq!((got.exit_code, got.error.unwrap()), (code, err.trim_end().lines().last().unwrap().to_string()));
}

#[test]
fn pasted_config_json_runs_as_the_file_does_and_a_bad_one_gives_the_same_error() {
    let dir = tempfile::tempdir().unwrap();
    let good = r#"{"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512,
        "_name_or_path": "someone/tiny-llama"}"#;
    let bad = r#"{"model_type": "llama", "hidden_size": "x"}"#;
    let args = words("profile --config config.json --device meta --profile-type training --out-dir out");
    std::fs::write(dir.path().join("config.json"), good).unwrap();
    let (code, _, err) = cli(dir.path(), &args);
    assert_eq!(code, 0, "{err}");
    let want: Value = serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap()).unwrap();
    let got = web::run(&args, &[("config.json".into(), good.into())]);
    assert_eq!(comparable(got.answer.unwrap()), comparable(want));

    std::fs::write(dir.path().join("config.json"), bad).unwrap();
    let (code, _, err) = cli(dir.path(), &args);
    let got = web::run(&args, &[("config.json".into(), bad.into())]);
    assert_eq!(code, 2);
    assert_eq!((got.exit_code, got.error.unwrap()), (2, err.trim_end().to_string()));
    assert!(got.files.is_empty() && got.answer.is_none(), "nothing is returned on a usage error");
    // Without the paste, the page says what it can read.
    let got = web::run(&args, &[]);
    assert_eq!(got.exit_code, 2);
    assert!(got.error.unwrap().contains("invalid --config: "));
}

#[test]
fn flag_errors_are_the_command_lines_and_the_page_refuses_what_it_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    for line in ["profile --preset nope --device meta", "fit --gpu RTX4090-24GB --preset 2.7B --batch-size 0", "profile --bogus"] {
        let args = words(line);
        let (code, _, err) = cli(dir.path(), &args);
        let got = web::run(&args, &[]);
        assert_eq!(got.exit_code, code, "{line}");
        // clap's refusals come back whole as text; the jobs' as the `error: …` line.
        let page = got.error.unwrap_or(got.text);
        assert_eq!(page.trim_end(), err.trim_end(), "{line}");
    }
    for (line, flag) in [("profile --preset small", "--device"), ("profile --preset small --device meta --threads 2", "--threads"), ("sweep --preset small --snapshots", "--snapshots")] {
        let got = web::run(&words(line), &[]);
        assert_eq!(got.exit_code, 2, "{line}");
        assert!(got.error.as_deref().unwrap().starts_with(&format!("error: invalid {flag}: ")), "{line}: {:?}", got.error);
    }
    let got = web::run(&words("train --preset small"), &[]);
    assert_eq!(got.exit_code, 2);
    assert!(got.error.unwrap().contains("'train' needs the command line"));
}

#[test]
fn the_framed_answer_holds_the_outcome_and_its_files_in_order() {
    // What web/vramscope.js reads back from the WebAssembly build's vs_run.
    let req = serde_json::json!({"words": words("profile --preset small --device meta --profile-type training")}).to_string();
    let out = web::run_request(req.as_bytes());
    assert_eq!(out.exit_code, 0, "{:?}", out.error);
    let b = web::frame(&out);
    let head = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let j: Value = serde_json::from_slice(&b[8..8 + head]).unwrap();
    assert_eq!(j, out.json());
    let mut at = 8 + head;
    for (f, (name, bytes)) in j["files"].as_array().unwrap().iter().zip(&out.files) {
        assert_eq!(f["name"], name.as_str());
        let n = f["bytes"].as_u64().unwrap() as usize;
        assert_eq!(&b[at..at + n], bytes.as_slice());
        at += n;
    }
    assert_eq!(at, b.len());
    // Pasted files travel as [name, text] pairs; a request that is not one is exit code 1.
    let req = serde_json::json!({"words": words("profile --config config.json --device meta"), "files": [["config.json", "{\"model_type\": 1}"]]}).to_string();
    let out = web::run_request(req.as_bytes());
    assert_eq!(out.exit_code, 2);
    assert!(out.error.unwrap().starts_with("error: invalid --config: "));
    let out = web::run_request(b"{\"words\": 3}");
    assert_eq!(out.exit_code, 1);
    assert!(out.error.unwrap().starts_with("internal error: "));
}
