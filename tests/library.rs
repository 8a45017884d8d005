//! The jobs as library calls, without the command line: flags resolved by `options`, run by
//! `session`, each result equal to what the `vramscope` binary writes for the same flags.
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use vramscope::options::{self, parse_words};
use vramscope::session;

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

fn cli(dir: &Path, args: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(words(args)).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{args}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn read(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// summary.json less what only a written run has: its output set and file names; numbers as
/// read back from JSON text (serde_json's parser may round a float's last digit).
fn comparable(v: Value) -> Value {
    let mut v: Value = serde_json::from_str(&v.to_string()).unwrap();
    v["run_id"] = Value::Null;
    for r in v["runs"].as_array_mut().unwrap() {
        let r = r.as_object_mut().unwrap();
        r.remove("snapshot");
        r.remove("report");
    }
    v
}

#[test]
fn profile_summary_and_text_equal_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let flags = "--model walkthrough --device meta --context-length 32,64 --profile-type forward,training";
    let a: options::profile::ProfileArgs = parse_words("profile", &words(flags)).unwrap();
    let mut p = options::profile::options(&a).unwrap();
    let ranks = p.ranks(false).unwrap();
    let mut text = String::new();
    let runs = session::profile::profile_all(&mut p, &a.profile_type, &ranks, |p, r| {
        text += &session::text::profile::run(p, r, 3);
        Ok(())
    })
    .unwrap();
    assert_eq!(runs.len(), 4);
    let ours = session::summary::profile(&p, &a.profile_type, &ranks, &runs, None);
    let printed = cli(dir.path(), &format!("profile {flags} --out-dir out"));
    assert_eq!(comparable(ours), comparable(read(&dir.path().join("out/summary.json"))));
    // The CLI's printout is the runs' text plus the files it wrote and the context table.
    let kept = |t: &str| t.lines().filter(|l| !l.starts_with("snapshot:") && !l.starts_with("report:")).map(str::to_string).collect::<Vec<_>>().join("\n");
    assert!(kept(&printed).starts_with(kept(&text).trim_end()), "{printed}");
}

#[test]
fn compare_fit_and_estimate_equal_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let flags = "--model small --device meta --context-length 64 --precision bf16";
    let a: options::profile::ProfileArgs = parse_words("profile", &words(flags)).unwrap();
    let (mut vs, note) = options::compare::variants_of(&a).unwrap();
    assert!(note.is_empty());
    vs.iter_mut().for_each(|v| v.options.keep_trace = false);
    let c = session::compare::compare(&vs, &a.profile_type, false, |_, _| Ok(())).unwrap();
    cli(dir.path(), &format!("profile --compare {flags} --out-dir c"));
    assert_eq!(c.markdown.trim_start(), std::fs::read_to_string(dir.path().join("c/compare.md")).unwrap());
    assert_eq!(c.rows.len(), 2);

    let flags = "--model small --gpu RTX4090-24GB --context-length 256";
    let f: options::fit::FitArgs = parse_words("fit", &words(flags)).unwrap();
    let plan = options::fit::plan(&f, |_| {}).unwrap();
    let found = plan.search(|n| options::fit::probe(&f, &plan, n)).unwrap();
    assert!(found.answer.is_some() && found.first_fail.is_some());
    let printed: Value = serde_json::from_str(&cli(dir.path(), &format!("fit {flags} --json"))).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&plan.json(&found).to_string()).unwrap(), printed);
    assert_eq!(plan.text(&found), cli(dir.path(), &format!("fit {flags}")));

    let flags = "--model small --context-length 64";
    let e: options::estimate::EstimateArgs = parse_words("estimate", &words(flags)).unwrap();
    let plan = options::estimate::plan(&e, |_| {}).unwrap();
    let r = plan.run().unwrap();
    let printed: Value = serde_json::from_str(&cli(dir.path(), &format!("estimate {flags} --json"))).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&plan.json(&r).to_string()).unwrap(), printed);
}

#[test]
fn a_bad_flag_is_a_usage_error_naming_it() {
    let a: options::profile::ProfileArgs = parse_words("profile", &words("--batch-size 0")).unwrap();
    let Err(e) = options::profile::options(&a) else { panic!("--batch-size 0 was accepted") };
    assert!(e.downcast_ref::<vramscope::error::UsageError>().is_some() && e.to_string().contains("--batch-size"), "{e}");
    let e = parse_words::<options::fit::FitArgs>("fit", &words("--find nothing")).unwrap_err();
    assert!(e.contains("--find"), "{e}");
}
