//! The offline HTML report in a real browser: `vramscope profile` and `vramscope view`
//! write it, headless Chromium loads it with `#selftest` (the page draws, moves the detail
//! slider, hovers the largest allocation and writes what happened into `#selftest`), and
//! screenshots are saved under CARGO_TARGET_TMPDIR/html-screenshots for a person to look at.
//! Without a `chromium` binary the browser checks print a notice and pass.
mod scratch;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vramscope::pickle::{self, Value};

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn ok(args: &[&str]) -> String {
    let o = vramscope(args);
    assert!(o.status.success(), "vramscope {args:?} failed: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let d = scratch::dir().join(format!("vramscope-html-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Removes a test's directory when the test ends, however it ends (the million-event one holds ~100 MB).
struct Cleanup(PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn screenshots() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()));
    if found.is_none() {
        eprintln!("NOTICE: chromium is not installed: skipping the browser checks (apt-get install chromium)");
    }
    found
}

/// Runs headless Chromium on `url` with `extra` flags; returns stdout.
fn run_chromium(bin: &str, url: &str, extra: &[&str]) -> String {
    let profile = tmp(&format!("chromium-profile-{}", url.len() ^ extra.len() << 8 ^ rand_suffix()));
    let mut child = Command::new(bin)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).unwrap();
        s
    });
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("chromium did not finish within 120 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&profile);
    reader.join().unwrap()
}

fn rand_suffix() -> usize {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as usize
}

fn url(path: &Path, hash: &str) -> String {
    format!("file://{}{hash}", path.canonicalize().unwrap().display())
}

/// Loads the report with `#selftest` and returns the page's own account of the run.
fn selftest(bin: &str, report: &Path, hash: &str) -> serde_json::Value {
    let t0 = Instant::now();
    let dom = run_chromium(bin, &url(report, hash), &["--dump-dom"]);
    let wall = t0.elapsed().as_secs_f64();
    let start = dom.find("<pre id=\"selftest\"").unwrap_or_else(|| panic!("no #selftest in the page of {}:\n{}", report.display(), &dom[..dom.len().min(3000)]));
    let body = &dom[start..];
    let body = &body[body.find('>').unwrap() + 1..body.find("</pre>").unwrap()];
    let text = body.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&");
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["chromium_wall_s"] = wall.into();
    assert_eq!(v["ok"], true, "self-test failed for {}: {v:#}", report.display());
    v
}

fn screenshot(bin: &str, report: &Path, hash: &str, name: &str, height: u32) -> PathBuf {
    let png = screenshots().join(name);
    let _ = std::fs::remove_file(&png);
    run_chromium(bin, &url(report, hash), &[&format!("--screenshot={}", png.display()), &format!("--window-size=1400,{height}")]);
    assert!(png.metadata().map(|m| m.len() > 10_000).unwrap_or(false), "no screenshot at {}", png.display());
    eprintln!("screenshot: {}", png.display());
    png
}

fn check_offline(page: &str) {
    for needle in ["<script src", "<link ", "http://", "https://", "import("] {
        assert!(!page.contains(needle), "the report must not load anything ({needle:?} found)");
    }
}

fn analyze_json(snapshot: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(&["analyze", "--json", snapshot.to_str().unwrap()])).unwrap()
}

fn timings(name: &str, st: &serde_json::Value) {
    eprintln!(
        "{name}: {} events, {} allocations: page ready in {:.0} ms (JSON parse {:.0} ms, layout {:.0} ms, first frame {:.0} ms); \
         redraw while zooming/panning median {:.1} ms, max {:.1} ms (first visit of each zoom level: median {:.1} ms, max {:.1} ms); chromium run {:.1} s",
        st["events"], st["allocations"],
        st["timings"]["load_ms"].as_f64().unwrap(),
        st["timings"]["parse_ms"].as_f64().unwrap(),
        st["timings"]["layout_ms"][0].as_f64().unwrap(),
        st["timings"]["first_frame_ms"][0].as_f64().unwrap(),
        st["frame_ms"]["median"].as_f64().unwrap(),
        st["frame_ms"]["max"].as_f64().unwrap(),
        st["frame_ms_first_visit"]["median"].as_f64().unwrap(),
        st["frame_ms_first_visit"]["max"].as_f64().unwrap(),
        st["chromium_wall_s"].as_f64().unwrap(),
    );
}

#[test]
fn profile_writes_a_report_whose_timeline_slider_and_tooltip_work() {
    let out = tmp("tiny");
    let _cleanup = Cleanup(out.clone());
    let stdout = ok(&["profile", "--threads", "2", "--gpu", "H100", "--out-dir", out.to_str().unwrap()]);
    let report = out.join("walkthrough_ctx128_training_report.html");
    let snapshot = out.join("walkthrough_ctx128_training_snapshot.pickle");
    assert!(stdout.contains(&format!("report: {}", report.display())), "{stdout}");
    let page = std::fs::read_to_string(&report).unwrap();
    check_offline(&page);
    assert!(page.contains("\"capacity\":{\"label\":\"H100-80GB\""), "the --gpu capacity is in the report");
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["runs"][0]["report"].as_str().unwrap(), report.to_str().unwrap());
    let Some(bin) = chromium() else { return };
    let st = selftest(bin, &report, "#selftest");
    timings("tiny training step", &st);
    assert!(st["painted_fraction"].as_f64().unwrap() > 0.2, "the timeline drew: {st}");
    assert!(st["rects_default"].as_u64().unwrap() > 100, "{st}");
    assert_eq!(st["slider_changed"], true);
    assert_eq!(st["slider_restored"], true);
    assert!(st["detail_low"].as_u64().unwrap() < st["detail_default"].as_u64().unwrap());
    assert!(st["phases"].as_u64().unwrap() >= 4, "forward, loss, backward, optimizer bands: {st}");
    // The tooltip names the allocation the mouse is over: the largest one, as analyze says.
    let exp = &st["expected"];
    let an = analyze_json(&snapshot);
    assert_eq!(exp["requested"].as_u64(), an["largest"][0]["size"].as_u64(), "{exp} vs {}", an["largest"][0]);
    let tip = st["tooltip"].as_str().unwrap();
    for want in [exp["requested_text"].as_str().unwrap(), exp["module"].as_str().unwrap(), exp["op"].as_str().unwrap(), exp["category"].as_str().unwrap()] {
        assert!(tip.contains(want), "tooltip lacks {want:?}: {tip}");
    }
    for field in ["requested", "rounded", "category", "module", "op", "phase", "allocated", "freed", "src/model/"] {
        assert!(tip.contains(field), "tooltip lacks {field:?}: {tip}");
    }
    // The page's breakdown at the peak is the Rust replay's, and analyze's.
    assert_eq!(st["by_category_js"], st["by_category_rust"]);
    assert_eq!(st["peak_total_js"].as_u64(), an["peak_active_bytes"].as_u64());
    screenshot(bin, &report, "", "tiny_report.png", 2000);
    screenshot(bin, &report, "#selftest", "tiny_tooltip.png", 1000);
}

#[test]
fn view_compares_two_runs_on_one_scale_and_the_2_7b_step_renders() {
    let out = tmp("compare");
    let _cleanup = Cleanup(out.clone());
    let dir = out.to_str().unwrap();
    ok(&["profile", "--model", "2.7B", "--context-length", "512", "--device", "meta", "--gpu", "H100", "--out-dir", dir]);
    ok(&["profile", "--model", "2.7B", "--context-length", "256", "--device", "meta", "--out-dir", dir]);
    let (a, b) = (out.join("2.7B_ctx512_training_snapshot.pickle"), out.join("2.7B_ctx256_training_snapshot.pickle"));
    let Some(bin) = chromium() else { return };
    let single = out.join("2.7B_ctx512_training_report.html");
    let st = selftest(bin, &single, "#selftest");
    timings("meta 2.7B training step, context 512", &st);
    // Timings are printed, not asserted: a loaded CI machine is no speed reference.
    assert!(st["timings"]["load_ms"].as_f64().is_some(), "{st}");
    screenshot(bin, &single, "", "2.7B_report.png", 1000);
    let cmp = out.join("cmp.html");
    let stdout = ok(&["view", a.to_str().unwrap(), b.to_str().unwrap(), "--output", cmp.to_str().unwrap(), "--memory-limit", "80GiB"]);
    assert!(stdout.contains("wrote"), "{stdout}");
    let page = std::fs::read_to_string(&cmp).unwrap();
    check_offline(&page);
    let st = selftest(bin, &cmp, "#selftest");
    assert_eq!(st["ok"], true);
    screenshot(bin, &cmp, "", "compare.png", 1300);
}

#[test]
fn a_million_event_snapshot_opens_and_redraws() {
    // The snapshot `vramscope bench analyze` measures: 40 meta 2.7B steps at context 128.
    let out = tmp("million");
    let _cleanup = Cleanup(out.clone());
    // Above profile's default --max-entries (1000000), which would keep only the newest million.
    ok(&["profile", "--model", "2.7B", "--context-length", "128", "--device", "meta", "--measure-steps", "40", "--max-entries", "2000000", "--out-dir", out.to_str().unwrap()]);
    let report = out.join("2.7B_ctx128_training_report.html");
    let mb = std::fs::metadata(&report).unwrap().len() as f64 / 1e6;
    let pickle_mb = std::fs::metadata(out.join("2.7B_ctx128_training_snapshot.pickle")).unwrap().len() as f64 / 1e6;
    eprintln!("million-event report: {mb:.1} MB of HTML for a {pickle_mb:.1} MB snapshot");
    assert!(mb < pickle_mb / 3.0, "the report stays compact");
    let Some(bin) = chromium() else { return };
    let st = selftest(bin, &report, "#selftest");
    timings("one-million-event snapshot", &st);
    assert!(st["events"].as_u64().unwrap() > 1_000_000, "{st}");
    // Load and redraw times are printed above (`timings`), not asserted: on a machine shared
    // with other jobs a wall-clock bound fails for reasons that are not the page's.
    assert!(st["frame_ms"]["median"].as_f64().is_some(), "the self-test measured redraws: {st}");
    screenshot(bin, &report, "", "million_report.png", 1000);
}

/// A snapshot shaped like PyTorch's: Python frames, no category, no phases.
fn pytorch_like() -> Value {
    let frame = |file: &str, line: i64, name: &str| Value::dict(vec![("filename", Value::str(file)), ("line", Value::Int(line)), ("name", Value::str(name))]);
    let stack = |user: &str| {
        Value::list(vec![
            frame("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 125, "forward"),
            frame("train.py", 42, user),
            frame("train.py", 90, "main"),
        ])
    };
    let base = 0x7f00_0000_0000i64;
    let mut trace = Vec::new();
    let entry = |action: &str, addr: i64, size: i64, t: i64, frames: &Value| {
        Value::dict(vec![
            ("action", Value::str(action)),
            ("addr", Value::Int(addr)),
            ("size", Value::Int(size)),
            ("stream", Value::Int(0)),
            ("time_us", Value::Int(1_700_000_000_000_000 + t)),
            ("frames", frames.clone()),
        ])
    };
    let (f1, f2) = (stack("attention"), stack("mlp"));
    trace.push(entry("segment_alloc", base, 20 << 20, 0, &f1));
    for i in 0..8i64 {
        let f = if i % 2 == 0 { &f1 } else { &f2 };
        trace.push(entry("alloc", base + i * (2 << 20), (1 << 20) + i * 4096, 2 * i, f));
    }
    for i in (1..8i64).rev() {
        let f = if i % 2 == 0 { &f1 } else { &f2 };
        trace.push(entry("free_requested", base + i * (2 << 20), (1 << 20) + i * 4096, 100 + i, f));
        trace.push(entry("free_completed", base + i * (2 << 20), (1 << 20) + i * 4096, 100 + i, f));
    }
    let blocks = Value::list(vec![
        Value::dict(vec![
            ("address", Value::Int(base)),
            ("size", Value::Int(1 << 20)),
            ("requested_size", Value::Int(1 << 20)),
            ("state", Value::str("active_allocated")),
            ("frames", f1.clone()),
        ]),
        Value::dict(vec![
            ("address", Value::Int(base + (1 << 20))),
            ("size", Value::Int(19 << 20)),
            ("requested_size", Value::Int(0)),
            ("state", Value::str("inactive")),
            ("frames", Value::list(vec![])),
        ]),
    ]);
    let seg = Value::dict(vec![
        ("device", Value::Int(0)),
        ("address", Value::Int(base)),
        ("total_size", Value::Int(20 << 20)),
        ("allocated_size", Value::Int(1 << 20)),
        ("active_size", Value::Int(1 << 20)),
        ("requested_size", Value::Int(1 << 20)),
        ("stream", Value::Int(0)),
        ("segment_type", Value::str("large")),
        ("blocks", blocks),
    ]);
    Value::dict(vec![("segments", Value::list(vec![seg])), ("device_traces", Value::list(vec![Value::list(trace)]))])
}

#[test]
fn view_reads_pytorch_snapshots_and_colours_them_by_module() {
    let out = tmp("torch");
    let _cleanup = Cleanup(out.clone());
    let snap = out.join("torch_snapshot.pickle");
    std::fs::write(&snap, pickle::write(&pytorch_like())).unwrap();
    let stdout = ok(&["view", snap.to_str().unwrap()]);
    let report = out.join("torch_report.html");
    assert!(stdout.contains(&report.display().to_string()), "{stdout}");
    let page = std::fs::read_to_string(&report).unwrap();
    assert!(page.contains("\"categorised\":false") && page.contains("\"phased\":false"));
    // The group is the innermost user frame, not torch's own code.
    assert!(page.contains("train.py:42") && page.contains("\"attention\""), "module from the user frame");
    let Some(bin) = chromium() else { return };
    let st = selftest(bin, &report, "#selftest");
    assert_eq!(st["expected"]["module"], "train.py:42");
    assert!(st["tooltip"].as_str().unwrap().contains("train.py:42"), "{st}");
    assert_eq!(st["phases"], 0);
}

#[test]
fn view_rejects_bad_input_with_exit_code_2_and_writes_nothing() {
    let out = tmp("bad");
    let _cleanup = Cleanup(out.clone());
    let good = out.join("good_snapshot.pickle");
    std::fs::write(&good, pickle::write(&pytorch_like())).unwrap();
    let junk = out.join("junk.pickle");
    std::fs::write(&junk, b"\x80\x04\xff\xff not a pickle").unwrap();
    let html = out.join("never.html");
    let o = html.to_str().unwrap();
    let missing = out.join("missing.pickle");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["view", missing.to_str().unwrap(), "--output", o], "missing.pickle"),
        (vec!["view", junk.to_str().unwrap(), "--output", o], "byte offset"),
        (vec!["view", good.to_str().unwrap(), "--gpu", "V100", "--output", o], "--gpu"),
        (vec!["view", good.to_str().unwrap(), "--memory-limit", "lots", "--output", o], "--memory-limit"),
        (vec!["view", good.to_str().unwrap(), "--gpu", "H100", "--memory-limit", "8GiB", "--output", o], "--memory-limit"),
        (vec!["view", good.to_str().unwrap(), "--output", out.to_str().unwrap()], "--output"),
        (vec!["view", good.to_str().unwrap(), "--device", "3", "--output", o], "--device"),
    ];
    for (args, want) in cases {
        let r = vramscope(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: error should name {want:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!html.exists(), "{args:?} wrote a file");
    }
    // A pickle that is not a snapshot.
    let not = out.join("dict.pickle");
    std::fs::write(&not, pickle::write(&Value::dict(vec![("a", Value::Int(1))]))).unwrap();
    let r = vramscope(&["view", not.to_str().unwrap(), "--output", o]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("not a memory snapshot"));
    assert!(!html.exists());
}
