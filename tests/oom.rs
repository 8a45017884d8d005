//! Out of memory, PyTorch's OOM-observer way: the history is recorded from the first
//! allocation into a ring buffer of `--max-entries` trace entries, and an OOM anywhere
//! (warm-up included) writes the snapshot and report of the step that failed: the trace
//! ends in an `oom` entry carrying the failing request's context, and the console and HTML
//! name the phase, category, module and op of the failed allocation and the limit in force.
mod scratch;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn vramscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-oom-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn summary(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// The snapshot as Python's pickle reads it, after tests/fixtures/check_snapshot.py's
/// memory_viz-style backwards replay accepted it: (checker summary, the last trace entries
/// as JSON, every entry's (action, addr or device_free, size)). None without python3.
type Replayed = (Value, Value, Vec<(String, u64, u64)>);

fn python(snapshot: &Path) -> Option<Replayed> {
    let check = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/check_snapshot.py");
    let o = Command::new("python3").arg(&check).arg(snapshot).output().ok()?;
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "replay check failed for {}: {out}{}", snapshot.display(), String::from_utf8_lossy(&o.stderr));
    let summary: Value = serde_json::from_str(out.trim()).unwrap();
    let script = r#"
import json, pickle, sys
t = pickle.load(open(sys.argv[1], "rb"))["device_traces"][0]
print(json.dumps({"last": t[-2:], "all": [[e["action"], e.get("addr", e.get("device_free")), e["size"]] for e in t]}))
"#;
    let o = Command::new("python3").arg("-c").arg(script).arg(snapshot).output().ok()?;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let all = v["all"].as_array().unwrap().iter().map(|e| (e[0].as_str().unwrap().to_string(), e[1].as_u64().unwrap(), e[2].as_u64().unwrap())).collect();
    Some((summary, v["last"].clone(), all))
}

/// The data the HTML report embeds (what its script draws from).
fn html_data(report: &Path) -> Value {
    let page = std::fs::read_to_string(report).unwrap();
    let start = page.find("id=\"vramscope-data\">").unwrap() + "id=\"vramscope-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end].replace("<\\/", "</")).unwrap()
}

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"].into_iter().find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
}

/// The report's out-of-memory box as the browser renders it (text only); None without chromium.
fn rendered_oom_box(report: &Path) -> Option<String> {
    let bin = chromium()?;
    let profile = tmp("chromium-profile");
    let url = format!("file://{}", report.canonicalize().unwrap().display());
    let o = Command::new(bin)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .ok()?;
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&o.stdout).to_string();
    let start = dom.find("<div class=\"oom-box\">").unwrap_or_else(|| panic!("no out-of-memory box in the rendered report:\n{}", &dom[..dom.len().min(2000)]));
    let end = start + dom[start..].find("</table>").unwrap();
    let mut text = String::new();
    let mut in_tag = false;
    for c in dom[start..end].chars() {
        match c {
            '<' => {
                in_tag = true;
                text.push(' ');
            }
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    Some(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[test]
fn oom_in_warm_up_writes_its_history_an_oom_entry_and_a_report_that_explains_it() {
    let out = tmp("warmup");
    // The walkthrough's first warm-up step needs ~52 MiB: a 64 MiB card fails in its forward.
    let o = vramscope(&["profile", "--memory-limit", "64MiB", "--threads", "2", "--out-dir", out.to_str().unwrap()]);
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(3), "an OOM run answers \"does not fit\": {stdout}{stderr}");
    assert!(stdout.contains("| memory limit 64.00 MiB"), "the header names the limit in force: {stdout}");
    assert!(stdout.contains("OUT OF MEMORY in warm-up step 1 of 1: CUDA out of memory."), "{stdout}");
    assert!(stderr.contains("out of memory in warm-up step 1 of 1; snapshot of the history up to the failing allocation:"), "{stderr}");

    let s = summary(&out);
    assert_eq!(s["capacity_bytes"], 64 << 20);
    let r = &s["runs"][0];
    assert_eq!(r["oom_stage"], "warm-up step 1 of 1");
    let f = &r["peak"]["failed"];
    let (phase, category, scope, op) = (f["phase"].as_str().unwrap(), f["category"].as_str().unwrap(), f["scope"].as_str().unwrap(), f["op"].as_str().unwrap());
    assert_eq!(phase, "forward", "{f}");
    assert!(scope.starts_with("blocks."), "{f}");
    // The console says the same, and what was live by category and module.
    // "at" the Python frame the op mirrors (torch's nn.Linear here), then the Rust line.
    let line = format!("by {op} in {scope}, phase {phase}, category {category}, at torch/nn/modules/linear.py:130 Linear.forward (src/");
    assert!(stdout.contains(&line), "missing {line:?} in {stdout}");
    let live_cats = f["live_by_category"].as_array().unwrap();
    assert!(live_cats.iter().any(|c| c[0] == "parameter") && live_cats.iter().any(|c| c[0] == "activation"), "{f}");
    let live: u64 = live_cats.iter().map(|c| c[1].as_u64().unwrap()).sum();
    assert_eq!(live, f["live_bytes"].as_u64().unwrap());
    assert_eq!(live, r["allocator_stats"]["allocated_bytes"]["current"].as_u64().unwrap(), "live at the failure = allocated then");
    let top_module = f["live_by_module"][0][0].as_str().unwrap();
    assert!(stdout.contains(&format!("live when it failed: {:.3} GiB allocated", live as f64 / (1u64 << 30) as f64)), "{stdout}");
    assert!(stdout.contains(&format!("MiB  {top_module}\n")), "{stdout}");
    // The phase and category lines are filled from the history since the first allocation.
    assert!(stdout.contains("peak allocated so far "), "{stdout}");
    assert!(stdout.contains("peak allocated by phase (GiB): setup "), "{stdout}");
    assert!(stdout.contains("live at the peak by category (GiB allocated): activation "), "{stdout}");
    assert_eq!(r["peak_allocated_bytes"].as_u64().unwrap(), r["peak"]["peak_allocated"].as_u64().unwrap());

    // The snapshot: the whole history from model construction, ending in the oom entry.
    let snap = Path::new(r["snapshot"].as_str().unwrap());
    if let Some((check, last, all)) = python(snap) {
        assert_eq!(check["actions"]["oom"], 1, "{check}");
        assert!(check["actions"]["alloc"].as_u64().unwrap() > 100, "{check}");
        assert_eq!(all[0].0, "segment_alloc", "the first entry is the first parameter's segment");
        let oom = &last[1];
        assert_eq!(oom["action"], "oom");
        assert_eq!(oom["size"], f["block_bytes"], "{oom}");
        let free = (64u64 << 20) - r["allocator_stats"]["reserved_bytes"]["current"].as_u64().unwrap();
        assert_eq!(oom["device_free"], free, "{oom}");
        assert!(oom.get("addr").is_none(), "oom entries carry device_free instead of addr");
        let frames = oom["frames"].as_array().unwrap();
        // The Python frames the op mirrors, innermost first, then its module path and op.
        assert_eq!((frames[0]["filename"].as_str().unwrap(), frames[0]["name"].as_str().unwrap()), ("torch/nn/modules/linear.py", "Linear.forward"), "{oom}");
        assert_eq!(frames[1]["name"], "SwiGLU.forward", "{oom}");
        assert!(frames.iter().any(|f| (f["filename"].as_str().unwrap(), f["name"].as_str().unwrap()) == (scope, op)), "{oom}");
        assert_eq!(frames.last().unwrap()["name"], phase, "{oom}");
    }

    // The HTML: the oom with its phase, category, module and op, and the limit.
    let html = Path::new(r["report"].as_str().unwrap());
    let d = html_data(html);
    assert_eq!(d["capacity"]["bytes"], 64 << 20);
    let p = &d["panels"][0];
    let o = &p["ooms"][0];
    let str_of = |k: &str| p["strs"][o[k].as_u64().unwrap() as usize].as_str().unwrap().to_string();
    assert_eq!((str_of("module"), str_of("op")), (scope.to_string(), op.to_string()));
    assert_eq!(p["phases"][o["phase"].as_u64().unwrap() as usize], phase);
    assert_eq!(o["category"], category);
    assert_eq!(o["live_by_category"].as_array().unwrap().len(), live_cats.len());
    assert!(o["live_by_module"].as_array().unwrap().iter().any(|m| m[0] == top_module), "{o}");
    match rendered_oom_box(html) {
        Some(text) => {
            for want in [format!("made by op {op} in module {scope}"), format!("phase {phase}"), format!("category {category}"), "memory limit 64.00 MiB".into(), format!("live by module {top_module}")] {
                assert!(text.contains(&want), "{want:?} not in the rendered box: {text}");
            }
        }
        None => eprintln!("note: no chromium; the rendered out-of-memory box was not checked (its data was)"),
    }
}

#[test]
fn the_2_7b_on_an_rtx4090_fails_in_warm_up_with_the_gpu_named() {
    let out = tmp("rtx");
    let o = vramscope(&["profile", "--model", "2.7B", "--context-length", "128", "--device", "meta", "--gpu", "RTX4090", "--out-dir", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("| RTX4090-24GB, 23.64 GiB"), "{stdout}");
    assert!(stdout.contains("OUT OF MEMORY in warm-up step 1 of 1"), "{stdout}");
    let r = &summary(&out)["runs"][0];
    let f = &r["peak"]["failed"];
    // Parameters and gradients alone (25.4 GiB) exceed the card: it fails in backward,
    // holding gradients, while every parameter is live.
    assert_eq!(f["phase"], "backward", "{f}");
    let cats: std::collections::HashMap<&str, u64> = f["live_by_category"].as_array().unwrap().iter().map(|c| (c[0].as_str().unwrap(), c[1].as_u64().unwrap())).collect();
    // Block bytes: every parameter, each rounded up to its allocator block.
    let params = 3_406_809_600u64 * 4;
    assert!(cats["parameter"] >= params && cats["parameter"] < params + params / 50, "{f}");
    assert!(cats["gradient"] > 0, "{f}");
    if let Some((check, last, _)) = python(Path::new(r["snapshot"].as_str().unwrap())) {
        assert_eq!(check["actions"]["oom"], 1, "{check}");
        assert_eq!(last[1]["action"], "oom");
    }
}

#[test]
fn bounded_history_keeps_the_newest_entries_and_still_replays() {
    // A successful step: the bounded trace is exactly the tail of the unbounded one.
    let (full, kept) = (tmp("full"), tmp("kept"));
    let base = ["profile", "--num-layers", "2", "--context-length", "32", "--threads", "2", "--out-dir"];
    let run = |dir: &Path, extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.push(dir.to_str().unwrap());
        a.extend(extra);
        let o = vramscope(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s = summary(dir);
        (String::from_utf8_lossy(&o.stdout).to_string(), PathBuf::from(s["runs"][0]["snapshot"].as_str().unwrap()), s)
    };
    let (_, full_snap, full_sum) = run(&full, &[]);
    let (stdout, kept_snap, kept_sum) = run(&kept, &["--max-entries", "300"]);
    assert!(stdout.contains("300 trace entries, the last of "), "{stdout}");
    assert_eq!(kept_sum["max_entries"], 300);
    assert_eq!(kept_sum["runs"][0]["trace_entries"], 300);
    let dropped = kept_sum["runs"][0]["trace_entries_dropped"].as_u64().unwrap();
    assert_eq!(full_sum["runs"][0]["trace_entries_dropped"], 0);
    assert_eq!(full_sum["runs"][0]["trace_entries"].as_u64().unwrap(), 300 + dropped);
    // The analysis does not depend on the bound.
    assert_eq!(full_sum["runs"][0]["peak"]["peak_allocated"], kept_sum["runs"][0]["peak"]["peak_allocated"]);
    if let (Some((_, _, all)), Some((check, _, tail))) = (python(&full_snap), python(&kept_snap)) {
        assert_eq!(check["events"], 300, "{check}");
        assert!(all.len() > 600, "the step makes more entries than the bound: {}", all.len());
        assert_eq!(tail[..], all[all.len() - 300..], "the ring buffer keeps the newest 300 entries in order");
        assert!(stdout.contains(&format!("the last of {}: --max-entries dropped the oldest {}", all.len(), all.len() - 300)), "{stdout}");
    }
    // An OOM with a bound smaller than its history: still ends in the oom entry, still replays.
    let out = tmp("oom-kept");
    let o = vramscope(&["profile", "--memory-limit", "64MiB", "--threads", "2", "--max-entries", "50", "--out-dir", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3));
    let snap = PathBuf::from(summary(&out)["runs"][0]["snapshot"].as_str().unwrap());
    if let Some((check, last, _)) = python(&snap) {
        assert_eq!(check["events"], 50, "{check}");
        assert_eq!(last[1]["action"], "oom");
    }
    // Our own readers take the wrapped snapshot too.
    let a = vramscope(&["analyze", "--json", snap.to_str().unwrap()]);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let rep: Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(rep["events"], 50);
    assert_eq!(rep["ooms"][0]["at"], 49);
}

#[test]
fn max_entries_must_be_positive() {
    let out = tmp("bad");
    let o = vramscope(&["profile", "--max-entries", "0", "--out-dir", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--max-entries"), "{err}");
    assert!(!out.exists());
}

/// An OOM run never reads as a fit: the multi-context table says OOM and the phase, and
/// summary.json marks the run (`fits`, `oom_phase`).
#[test]
fn the_context_table_and_the_summary_mark_an_oom_run() {
    let out = tmp("oom-table");
    let o = vramscope(&[
        "profile", "--model", "Llama-3.1-8B", "--device", "meta", "--num-layers", "4", "--context-length", "512,16384", "--gpu", "RTX4090-24GB", "--lora-r", "16",
        "--gradient-checkpointing", "none", "--out-dir", out.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    // One of the two runs fits: an answer (exit 0), the other marked OOM.
    assert_eq!(o.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("1 of 2 runs ran out of memory"), "{text}");
    let row = text.lines().find(|l| l.starts_with("| 16384 |")).unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("OOM in forward") || row.contains("OOM in loss") || row.contains("OOM in backward"), "{row}");
    let s = summary(&out);
    let runs = s["runs"].as_array().unwrap();
    assert_eq!((runs[0]["fits"].as_bool(), runs[0]["oom_phase"].is_null()), (Some(true), true));
    assert_eq!(runs[1]["fits"].as_bool(), Some(false));
    assert!(runs[1]["oom_phase"].is_string(), "{}", runs[1]);
}

/// One exit-code rule for every command (`vramscope --help` states it): 3 is the answer "it
/// does not fit" — with the outputs written — and a command that runs several configurations
/// answers 3 only when every one of them ran out of memory.
#[test]
fn exit_code_3_means_it_does_not_fit_everywhere() {
    let help = vramscope(&["--help"]);
    let h = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success());
    for want in ["Exit codes", "0  an answer", "1  failure", "2  usage error", "3  the answer is \"it does not fit\"", "exit 3 only when every run ran out of memory"] {
        assert!(h.contains(want), "{want:?} not in --help: {h}");
    }

    // sweep: every point out of memory → 3, and the table, CSV, JSON and plot are written.
    let out = tmp("all-oom-sweep");
    let o = vramscope(&["sweep", "--batch-size", "4,8", "--memory-limit", "64MiB", "--out-dir", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("does not fit: every one of the 2 points ran out of memory"), "{err}");
    for f in ["sweep.json", "sweep.csv", "sweep.md", "sweep_batch-size.svg"] {
        assert!(out.join(f).exists(), "{f} not written");
    }
    // ... one point fits → 0.
    let out = tmp("some-oom-sweep");
    let o = vramscope(&["sweep", "--batch-size", "1,8", "--memory-limit", "64MiB", "--out-dir", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));

    // profile --compare: every variant out of memory → 3.
    let out = tmp("all-oom-compare");
    let o = vramscope(&["profile", "--compare", "--precision", "bf16", "--device", "meta", "--memory-limit", "8MiB", "--out-dir", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(out.join("compare.md").exists() && out.join("compare.json").exists());

    // fit: nothing fits → 3, the text and the JSON still printed.
    let o = vramscope(&["fit", "--find", "batch", "--context-length", "64", "--memory-limit", "8MiB", "--reserve", "0"]);
    let (stdout, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(3), "{stdout}{err}");
    assert!(stdout.contains("nothing fits"), "{stdout}");
    assert!(err.contains("does not fit: nothing fits"), "{err}");
    let o = vramscope(&["fit", "--json", "--find", "batch", "--context-length", "64", "--memory-limit", "8MiB", "--reserve", "0"]);
    assert_eq!(o.status.code(), Some(3));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["answer"].is_null(), "{j}");
    // ... something fits → 0.
    let o = vramscope(&["fit", "--json", "--find", "batch", "--context-length", "64", "--memory-limit", "96MiB", "--reserve", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));

    // A usage error stays 2, and an unwritable output stays 1.
    let o = vramscope(&["fit", "--find", "batch", "--memory-limit", "nonsense"]);
    assert_eq!(o.status.code(), Some(2));
    // estimate answers no fit question: 0.
    let o = vramscope(&["estimate", "--no-simulate"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
}
