//! Snapshots in PyTorch's own memory_viz viewer. The harness `shared/tools/memviz/run_viewer.sh`
//! (found beside the repository, as a fresh clone in CI has it, or at `$VRAMSCOPE_SHARED`)
//! loads a pickle into MemoryViz.js in headless Chromium both ways PyTorch does (the
//! pytorch.org/memory_viz page and `_memory_viz.trace_plot`'s HTML), opens every view and
//! reports errors, what each view drew, whether hovering shows stack frames, and the peak
//! the viewer computes. A snapshot passes when no view logs an error (the one failure that is
//! PyTorch's own, named in the harness README, excepted), every view draws, hover shows
//! frames and the viewer's peak equals vramscope's requested-bytes peak to the byte.
//! Screenshots stay under CARGO_TARGET_TMPDIR/memviz/<case>/ for a person to look at.
//! Skips with a printed notice when the harness, node or chromium cannot be found (a fresh
//! clone has no `../shared`: set `VRAMSCOPE_SHARED` to a folder holding `tools/memviz`).
mod scratch;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vramscope::pickle;

/// The view `_memory_viz.trace_plot(plot_segments=True)` asks for, which this MemoryViz.js
/// does not have (it is "Active Cached Segment Timeline" there): fails for PyTorch's own
/// snapshots too (harness README).
const PYTORCH_OWN_FAILURE: (&str, &str, &str) = ("template", "Active Cached Memory Timeline", "is not a function");

const VIEWS: [&str; 5] = [
    "Active Memory Timeline",
    "Allocated Memory (incl. Private Pools)",
    "Active Cached Segment Timeline",
    "Allocator State History",
    "Allocator Settings",
];

/// The harness, or None (after a printed notice saying how to run it) when neither
/// `$VRAMSCOPE_SHARED` nor a `shared/` folder beside the repository (or above it) holds it,
/// as on a fresh clone. A `VRAMSCOPE_SHARED` that does not hold it is a mistake, not a skip.
fn harness() -> Option<PathBuf> {
    let rel = Path::new("tools/memviz/run_viewer.sh");
    if let Some(dir) = std::env::var_os("VRAMSCOPE_SHARED") {
        let p = Path::new(&dir).join(rel);
        assert!(p.exists(), "VRAMSCOPE_SHARED={} has no {}", Path::new(&dir).display(), rel.display());
        return Some(p);
    }
    // ../shared from the repository root; a git worktree may sit deeper, so look upwards.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = root.ancestors().skip(1).map(|a| a.join("shared").join(rel)).find(|p| p.exists());
    if found.is_none() {
        notice(&format!(
            "no shared/{} beside {} or above it (the harness is PyTorch's MemoryViz.js driven by headless Chromium; \
             set VRAMSCOPE_SHARED to the folder that holds tools/memviz to run these checks)",
            rel.display(),
            root.display()
        ));
    }
    found
}

/// Printed past the test harness's capture, so a skip shows in `cargo test`'s output.
fn notice(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "NOTICE: {msg}: skipping the memory_viz checks");
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// What the checks need: the harness, node (>= 18), npm when puppeteer-core is not
/// installed yet, and a chromium binary, as (harness, chromium); None (after a printed
/// notice) when one cannot be found, before any work is done.
struct Tools {
    harness: PathBuf,
    chrome: PathBuf,
}

fn tools() -> Option<Tools> {
    let harness = harness()?;
    let node_major = Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().trim_start_matches('v').split('.').next()?.parse::<u32>().ok());
    match node_major {
        None => {
            notice("node is not installed (apt-get install nodejs npm)");
            return None;
        }
        Some(v) if v < 18 => {
            notice(&format!("node {v} is older than the harness needs (18)"));
            return None;
        }
        Some(_) => {}
    }
    let node_dir = std::env::var_os("MEMVIZ_NODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into())).join(".cache/memviz-harness"));
    if !node_dir.join("node_modules/puppeteer-core").exists() && on_path("npm").is_none() {
        notice("npm is not installed, and the harness needs it once for puppeteer-core (apt-get install npm)");
        return None;
    }
    install_puppeteer_once(&harness, &node_dir);
    let chrome = std::env::var_os("CHROME")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| ["chromium", "chromium-browser", "google-chrome"].into_iter().find_map(on_path))
        .or_else(|| Some(PathBuf::from("/usr/bin/chromium")).filter(|p| p.is_file()));
    if chrome.is_none() {
        notice("chromium is not installed (apt-get install chromium)");
    }
    Some(Tools { harness, chrome: chrome? })
}

/// The harness installs puppeteer-core on its first run, but the tests here run in parallel and
/// concurrent first installs into the one folder break each other ("Cannot find module", seen
/// on a fresh machine): the first test to get here installs it as run_viewer.sh would, the
/// others wait.
fn install_puppeteer_once(harness: &Path, node_dir: &Path) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if node_dir.join("node_modules/puppeteer-core").exists() {
            return;
        }
        std::fs::create_dir_all(node_dir).unwrap();
        std::fs::copy(harness.parent().unwrap().join("package.json"), node_dir.join("package.json")).unwrap();
        let st = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent"])
            .env("PUPPETEER_SKIP_DOWNLOAD", "1")
            .current_dir(node_dir)
            .status();
        assert!(st.is_ok_and(|s| s.success()), "npm install of puppeteer-core into {} failed", node_dir.display());
    });
}

fn out_dir(case: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("memviz").join(case);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `cmd` to completion within `limit`, returning (success, stdout + stderr).
fn run(mut cmd: Command, limit: Duration) -> (bool, String) {
    let dir = scratch::dir().join(format!("vramscope-memviz-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (o, e) = (dir.join("out"), dir.join("err"));
    let mut child = cmd
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {cmd:?}: {err}"));
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = format!("{}{}", std::fs::read_to_string(&o).unwrap_or_default(), std::fs::read_to_string(&e).unwrap_or_default());
    let _ = std::fs::remove_dir_all(&dir);
    match status {
        Some(s) => (s.success(), text),
        None => (false, format!("{text}\n(killed after {} s)", limit.as_secs())),
    }
}

fn u64_at(v: &Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_u64)
}

/// Profiles with `args`, loads the snapshot into memory_viz and checks every view.
fn check(case: &str, args: &[&str], expandable: bool) {
    check_hover(case, args, expandable, &[]);
}

/// `check`, and the Active Memory Timeline's hover at the peak shows each of `hover` (the
/// frames naming the model's Python code).
fn check_hover(case: &str, args: &[&str], expandable: bool, hover: &'static [&'static str]) {
    let Some(tools) = tools() else { return };
    let t0 = Instant::now();
    let dir = out_dir(case);
    let prof = dir.join("profile");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramscope"));
    cmd.arg("profile").args(args).arg("--out-dir").arg(&prof);
    let (ok, text) = run(cmd, Duration::from_secs(600));
    assert!(ok, "vramscope profile {args:?} failed:\n{text}");
    let summary: Value = serde_json::from_slice(&std::fs::read(prof.join("summary.json")).unwrap()).unwrap();
    let r = &summary["runs"][0];
    let snapshot = PathBuf::from(r["snapshot"].as_str().expect("summary names the snapshot"));
    let peak_requested = u64_at(r, &["allocator_stats", "requested_bytes", "peak"]).expect("requested peak in summary.json");
    let peak_reserved = r["peak_reserved_bytes"].as_u64().unwrap();
    let reserved_end = u64_at(r, &["allocator_stats", "reserved_bytes", "current"]).expect("reserved bytes in summary.json");
    let profiled = t0.elapsed();
    let expect = Expect { peak_requested, peak_reserved, reserved_end, summary: Some(prof.join("summary.json")), hover };
    check_viewer(case, &tools, &dir, &snapshot, &expect, expandable, profiled, t0);
}

/// vramscope's own figures for a snapshot, which the viewer must reproduce.
struct Expect {
    peak_requested: u64,
    peak_reserved: u64,
    reserved_end: u64,
    /// The summary.json the harness reads vramscope's peak from, if any.
    summary: Option<PathBuf>,
    /// Text the Active Memory Timeline's hover at the peak must show.
    hover: &'static [&'static str],
}

/// Loads `snapshot` into memory_viz and checks every view against `expect`.
#[allow(clippy::too_many_arguments)]
fn check_viewer(case: &str, tools: &Tools, dir: &Path, snapshot: &Path, expect: &Expect, expandable: bool, profiled: Duration, t0: Instant) {
    let (peak_requested, peak_reserved, reserved_end) = (expect.peak_requested, expect.peak_reserved, expect.reserved_end);
    // What the trace holds: the segment actions this case is meant to show.
    let snap = pickle::read(&std::fs::read(snapshot).unwrap(), &pickle::Limits::default()).unwrap();
    let trace = snap.get("device_traces").and_then(|d| d.as_list()?.first()?.as_list()).expect("a device trace");
    let count = |a: &str| trace.iter().filter(|e| e.get("action").and_then(pickle::Value::as_str) == Some(a)).count();
    let segment_allocs = count("segment_alloc");
    if expandable {
        assert!(count("segment_map") > 0 && count("segment_unmap") > 0 && count("segment_alloc") == 0, "{case}: expected segment_map and segment_unmap, no segment_alloc");
    } else {
        assert!(count("segment_map") + count("segment_unmap") == 0, "{case}: segment_map/segment_unmap without expandable segments");
    }

    let viewer = dir.join("viewer");
    let harness = || {
        let mut cmd = Command::new("bash");
        cmd.arg(&tools.harness).arg(snapshot).arg(&viewer);
        if let Some(summary) = &expect.summary {
            cmd.arg(summary);
        }
        cmd.env("CHROME", &tools.chrome);
        cmd
    };
    let (mut ok, mut text) = run(harness(), Duration::from_secs(900));
    if !ok && text.trim().is_empty() {
        // The headless browser can die silently when the machine is saturated (seen once in CI
        // with every test binary's threads running): one more try, with a fresh process.
        (ok, text) = run(harness(), Duration::from_secs(900));
    }
    assert!(ok, "the memory_viz harness failed on {}:\n{text}", snapshot.display());
    let res: Value = serde_json::from_slice(&std::fs::read(viewer.join("results.json")).unwrap()).unwrap();

    let offered: Vec<&str> = res["views_offered"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for v in VIEWS {
        assert!(offered.contains(&v), "{case}: the viewer offers no {v:?} ({offered:?})");
    }
    let runs = res["runs"].as_array().unwrap();
    assert_eq!(runs.len(), VIEWS.len() + 3, "{case}: one result per view and per trace_plot page");
    let mut problems = Vec::new();
    let mut lines = Vec::new();
    let mut site_peaks = Vec::new();
    for run in runs {
        let (mode, kind) = (run["mode"].as_str().unwrap(), run["kind"].as_str().unwrap());
        let errors: Vec<&str> = run["errors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| !matches!(e["type"].as_str(), Some("warn" | "warning")))
            .map(|e| e["text"].as_str().unwrap_or("").lines().next().unwrap_or(""))
            .collect();
        let warnings = run["errors"].as_array().unwrap().len() - errors.len();
        if (mode, kind) == (PYTORCH_OWN_FAILURE.0, PYTORCH_OWN_FAILURE.1) {
            if let Some(e) = errors.iter().find(|e| !e.contains(PYTORCH_OWN_FAILURE.2)) {
                problems.push(format!("[{mode}] {kind}: an error other than PyTorch's own: {e}"));
            }
            lines.push(format!("[{mode}] {kind}: PyTorch's own failure ({} error(s), as the harness README says)", errors.len()));
            continue;
        }
        let dom = &run["dom"];
        let drawn = ["polygons", "rects"].iter().find_map(|k| dom[k].as_u64());
        let text = dom["text"].as_str();
        let drew = dom["visible"].as_bool() == Some(true) && (drawn.is_some_and(|n| n > 0) || text.is_some_and(|t| !t.trim().is_empty()));
        let mut line = format!("[{mode}] {kind}: {}, {} error(s), {warnings} warning(s)", if drew { "drew" } else { "DREW NOTHING" }, errors.len());
        for e in &errors {
            problems.push(format!("[{mode}] {kind}: {e}"));
        }
        if !drew {
            problems.push(format!("[{mode}] {kind}: nothing drawn ({dom})"));
        }
        if let Some(e) = run["probe_error"].as_str() {
            problems.push(format!("[{mode}] {kind}: the probe failed: {e}"));
        }
        for k in ["nan_or_empty_polygons", "nan_rects"] {
            if dom[k].as_u64().is_some_and(|n| n > 0) {
                problems.push(format!("[{mode}] {kind}: {} {k}", dom[k]));
            }
        }
        if let Some(n) = drawn {
            line += &format!(", {n} {}", if dom["polygons"].is_u64() { "polygons" } else { "rects" });
        }
        if kind == "Allocator Settings" && text.is_some_and(|t| t.contains("No allocator settings")) {
            problems.push(format!("[{mode}] {kind}: no allocator settings shown"));
        }
        // This view takes segments from segment_alloc entries, and draws those it finds only
        // in the final state with `frames: []`. With no segment_alloc in the trace (expandable
        // segments record segment_map, which it does not read; or every segment already
        // existed before the recorded step) its hover says "no frames" for PyTorch's own
        // snapshots too; those frames are on the segment rows of Allocator State History.
        let frameless_segments = kind == "Active Cached Segment Timeline" && segment_allocs == 0;
        if kind != "Allocator Settings" {
            let frames = run["hover_has_frames"].as_bool() == Some(true);
            line += &format!(", hover frames {frames}");
            if frameless_segments {
                line += " (no segment_alloc in the trace: segments come from the final state, which this view draws without frames)";
                if run["hover_text"].as_str().is_none_or(|t| !t.contains("Addr:")) {
                    problems.push(format!("[{mode}] {kind}: hovering shows nothing ({})", run["hover_target"]));
                }
            } else if !frames {
                problems.push(format!("[{mode}] {kind}: hovering shows no stack frames ({})", run["hover_target"]));
            }
        }
        if kind == "Active Memory Timeline" {
            let text = run["hover_text"].as_str().unwrap_or("");
            for want in expect.hover {
                if !text.contains(want) {
                    problems.push(format!("[{mode}] {kind}: the hover at the peak does not show {want:?}: {text:?}"));
                }
            }
        }
        if kind == "Allocator State History" && mode == "site" {
            let fails = run["select_failure_count"].as_u64().unwrap_or(u64::MAX);
            line += &format!(", {fails} of {} event selections failed", run["plan"]["probes"]);
            if fails != 0 || run["pageerrors_during_selects"].as_u64() != Some(0) {
                problems.push(format!("[{mode}] {kind}: selecting events failed: {}", run["select_failures"]));
            }
            // The event at the active peak: the view's "allocated" is the requested bytes live.
            let at_peak = run["at_peak_allocated_bytes"].as_u64();
            line += &format!(", at the peak event {at_peak:?} B allocated");
            if at_peak != Some(peak_requested) {
                problems.push(format!("[{mode}] {kind}: {at_peak:?} B allocated at the peak event, vramscope's requested peak {peak_requested} B"));
            }
        }
        // The viewer's peak: its own process_alloc_data computation when the harness caught the
        // unpickled snapshot (it can miss it on a loaded machine), else the viewer's tooltip at
        // the highest drawn allocation, "Total memory used after allocation".
        let computed = u64_at(run, &["computed", "max_at_time_peak"]);
        if let Some(peak) = computed.or_else(|| run["hover_total_after_alloc_bytes"].as_u64()) {
            let how = if computed.is_some() { "computed" } else { "from the viewer's tooltip" };
            line += &format!(", viewer peak {peak} B ({how})");
            site_peaks.push((kind.to_string(), peak));
        }
        lines.push(line);
    }
    let peak_of = |k: &str| site_peaks.iter().find(|p| p.0 == k).map(|p| p.1);
    // Active memory: the viewer stacks requested bytes, so its peak is our requested peak.
    for k in ["Active Memory Timeline", "Allocated Memory (incl. Private Pools)"] {
        match peak_of(k) {
            Some(p) if p == peak_requested => {}
            p => problems.push(format!("{k}: viewer peak {p:?} B, vramscope's requested peak {peak_requested} B")),
        }
    }
    // Segments: whole cudaMalloc segments over time, so the reserved peak. With expandable
    // segments the view ignores segment_map (as for PyTorch's own snapshots) and draws the
    // final mapped ranges from the start: the reserved bytes at the end.
    let want = if expandable { reserved_end } else { peak_reserved };
    match peak_of("Active Cached Segment Timeline") {
        Some(p) if p == want => {}
        p => problems.push(format!("Active Cached Segment Timeline: viewer peak {p:?} B, vramscope's {} {want} B", if expandable { "final reserved" } else { "reserved peak" })),
    }
    eprintln!(
        "memory_viz {case}: {} (vramscope: requested peak {peak_requested} B, reserved peak {peak_reserved} B, reserved at the end {reserved_end} B; profile {:.1} s, viewer {:.1} s; screenshots in {})\n  {}",
        snapshot.file_name().unwrap().to_string_lossy(),
        profiled.as_secs_f64(),
        (t0.elapsed() - profiled).as_secs_f64(),
        viewer.display(),
        lines.join("\n  ")
    );
    assert!(problems.is_empty(), "{case}: {} in memory_viz:\n  {}", snapshot.display(), problems.join("\n  "));
}

#[test]
fn cpu_training_step_of_the_walkthrough_model() {
    check("cpu_walkthrough_training", &[], false);
}

#[test]
fn meta_training_step_of_the_2_7b() {
    check("meta_2.7B_training", &["--model", "2.7B", "--device", "meta", "--context-length", "128"], false);
}

/// One FSDP rank: its all-gather and reduce-scatter buffers sit on their own streams.
#[test]
fn fsdp_rank_of_the_2_7b_on_three_streams() {
    check("meta_2.7B_fsdp8_rank0", &["--model", "2.7B", "--device", "meta", "--context-length", "128", "--parallel", "fsdp", "--world-size", "8", "--rank", "0"], false);
}

#[test]
fn qlora_training_step_of_llama_3_1_8b() {
    // 4-bit nf4 weights with double quantization, fp32 adapters, reentrant checkpointing, a
    // paged 8-bit optimizer: the snapshot holds uint8 storages, dequantize buffers and state.
    check(
        "meta_llama8b_qlora",
        &[
            "--model", "Llama-3.1-8B", "--device", "meta", "--num-layers", "4", "--context-length", "512", "--load-in-4bit", "--bnb-4bit-quant-type", "nf4",
            "--bnb-4bit-use-double-quant", "--bnb-4bit-compute-dtype", "bfloat16", "--lora-r", "16", "--target-modules", "all-linear", "--optimizer", "paged_adamw_8bit",
        ],
        false,
    );
}

#[test]
fn dora_training_step_of_llama_3_1_8b() {
    // bf16 weights, DoRA adapters: per forward the weight norm and magnitude tensors.
    check(
        "meta_llama8b_dora",
        &["--model", "Llama-3.1-8B", "--device", "meta", "--num-layers", "2", "--context-length", "256", "--lora-r", "8", "--use-dora", "--target-modules", "q_proj,v_proj", "--lora-dropout", "0.05"],
        false,
    );
}

#[test]
fn int8_training_step_of_llama_3_1_8b() {
    // LLM.int8 weights (int8 + fp32 SCB), MatMul8bitLt's row quantization, an 8-bit optimizer.
    check(
        "meta_llama8b_int8",
        &["--model", "Llama-3.1-8B", "--device", "meta", "--num-layers", "2", "--context-length", "256", "--load-in-8bit", "--lora-r", "8", "--target-modules", "all-linear", "--optimizer", "adamw_8bit"],
        false,
    );
}

#[test]
fn moe_training_step_of_qwen3_30b_a3b() {
    // Qwen3-MoE with 128 experts stored as 3-D parameters, worst-case routing (every token to
    // the same 8 experts), grouped_mm: router logits, the gather/sort and the grouped matmuls.
    check(
        "meta_qwen3moe_training",
        &["--preset", "Qwen3-30B-A3B", "--device", "meta", "--num-layers", "2", "--context-length", "256", "--routing", "worst"],
        false,
    );
}

/// The peak of a cs336 forward with autograd is the logits (`self.lm_head(x)`): hovering it
/// names the Python functions the op mirrors, in the staff package's files, as
/// `file:line:function` like PyTorch's own frames.
#[test]
fn fp32_forward_of_the_2_7b_names_the_model_code() {
    check_hover(
        "meta_2.7B_forward_fp32",
        &["--model", "2.7B", "--device", "meta", "--context-length", "512", "--profile-type", "forward"],
        false,
        &["cs336_basics/model.py:34:Linear.forward", "cs336_basics/model.py:200:BasicsTransformerLM.forward"],
    );
}

#[test]
fn bf16_forward_of_the_2_7b() {
    check("meta_2.7B_forward_bf16", &["--model", "2.7B", "--device", "meta", "--context-length", "512", "--profile-type", "forward", "--precision", "bf16"], false);
}

/// Under a limit just below this step's reserved peak, the allocator frees its cache and
/// retries once, so the trace has `segment_unmap` between the `segment_map`s: the Allocator
/// State History view splits and merges mapped ranges.
#[test]
fn expandable_segments_run() {
    // 158 MiB: just above what the walkthrough step needs once cached segments are given
    // back, so the allocator must unmap (a retry) and then succeed; 157 MiB runs out.
    check("cpu_walkthrough_expandable", &["--allocator-conf", "expandable_segments:True", "--memory-limit", "158MiB"], true);
}

/// FSDP-like use of two side streams through the runtime: an all-gather buffer allocated on
/// stream 1 and used on the default stream (`record_stream`) is still pending free when the
/// snapshot is taken; a reduce-scatter buffer on stream 2 went through pending free to
/// `free_completed` after its stream was synchronised. The snapshot has segments on three
/// streams and an `active_pending_free` block, and must render like the others.
#[test]
fn two_side_streams_with_a_pending_free() {
    use vramscope::engine::{runtime, DType, Device, Tensor};
    use vramscope::export::snapshot;
    use vramscope::record::allocator::{AllocatorConfig, CachingAllocator, StreamId};
    let Some(tools) = tools() else { return };
    let t0 = Instant::now();
    let (ag_stream, rs_stream) = (StreamId(1), StreamId(2));
    runtime::reset();
    runtime::with(|rt| {
        rt.log.allocator = Some(CachingAllocator::new(AllocatorConfig::default(), 1 << 30));
        rt.log.start_recording();
    });
    let mib = |n: usize| Tensor::zeros(&[n << 18], DType::F32, Device::Meta);
    let shard = mib(4);
    let gathered = {
        let _s = runtime::on_stream(ag_stream);
        mib(8)
    };
    assert_eq!(runtime::with(|rt| rt.log.stream_of(gathered.storage().id)), Some(ag_stream));
    runtime::record_stream(gathered.storage().id, StreamId::DEFAULT);
    let act = mib(2);
    let grad = mib(8);
    let reduced = {
        let _s = runtime::on_stream(rs_stream);
        mib(2)
    };
    runtime::record_stream(reduced.storage().id, StreamId::DEFAULT);
    drop(grad);
    drop(reduced); // pending until the default stream catches up
    let tmp = mib(2); // the event is not complete: this malloc leaves it pending
    runtime::synchronize_stream(StreamId::DEFAULT);
    let act2 = mib(3); // this malloc completes the reduce-scatter buffer's free
    let next = {
        let _s = runtime::on_stream(ag_stream);
        let n = mib(8); // stream 1's next all-gather: the pending buffer is not reused
        runtime::record_stream(n.storage().id, StreamId::DEFAULT);
        n
    };
    drop(gathered); // pending: the default stream has not caught up since
    let rec = runtime::with(|rt| rt.log.finish_recording());
    let alloc = rec.allocator.expect("an allocator model");
    let st = alloc.stats;
    assert!(st.active_bytes.current > st.allocated_bytes.current, "the all-gather buffer is pending free");
    let snap = snapshot::build(&alloc, &[], &rec.events, &rec.actions);
    drop((shard, act, act2, next, tmp));
    runtime::reset();

    let streams = |v: &pickle::Value| v.get("stream").and_then(pickle::Value::as_int).unwrap();
    let segs = snap.get("segments").and_then(pickle::Value::as_list).unwrap();
    let mut seg_streams: Vec<i64> = segs.iter().map(streams).collect();
    seg_streams.sort();
    seg_streams.dedup();
    assert_eq!(seg_streams, vec![0, 1, 2], "segments on the default and both side streams");
    let states: Vec<&str> = segs.iter().flat_map(|s| s.get("blocks").and_then(pickle::Value::as_list).unwrap()).filter_map(|b| b.get("state")?.as_str()).collect();
    assert_eq!(states.iter().filter(|s| **s == "active_pending_free").count(), 1, "{states:?}");
    let trace = snap.get("device_traces").and_then(|d| d.as_list()?.first()?.as_list()).unwrap();
    let trace_streams: std::collections::BTreeSet<i64> = trace.iter().map(streams).collect();
    assert_eq!(trace_streams.into_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
    // The reduce-scatter buffer's free completes later than it was requested, so the
    // viewer shows the two entries (it folds an adjacent pair into one `free`).
    let action = |i: usize| trace[i].get("action").and_then(pickle::Value::as_str).unwrap();
    let completed_late = (1..trace.len()).filter(|&i| action(i) == "free_completed" && action(i - 1) != "free_requested").count();
    assert_eq!(completed_late, 1, "one free completed after other entries");

    let dir = out_dir("two_side_streams_pending_free");
    let path = dir.join("snapshot.pickle");
    std::fs::write(&path, pickle::write(&snap)).unwrap();
    let expect = Expect { peak_requested: st.requested_bytes.peak as u64, peak_reserved: st.reserved_bytes.peak as u64, reserved_end: st.reserved_bytes.current as u64, summary: None, hover: &[] };
    check_viewer("two_side_streams_pending_free", &tools, &dir, &path, &expect, false, t0.elapsed(), t0);
}
