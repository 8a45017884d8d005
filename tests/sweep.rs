//! `vramscope sweep` and `vramscope fit` end to end on meta.
mod scratch;
use std::process::Command;

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = scratch::dir().join(format!("vramscope-sweep-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn meta_sweep_activations_are_exactly_linear_in_batch_and_files_are_written() {
    let out = tmp("linear");
    let o = vramscope(&["sweep", "--batch-size", "1,2,3,4,5,6", "--context-length", "64,128", "--profile-type", "forward", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("peak allocated vs batch-size") && stdout.contains("per sample"), "{stdout}");
    for f in ["sweep.csv", "sweep.json", "sweep.md", "sweep_batch-size.svg", "sweep_context-length.svg"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let s = json(&out.join("sweep.json"));
    let points = s["points"].as_array().unwrap();
    assert_eq!(points.len(), 12);
    for ctx in ["64", "128"] {
        let act: Vec<i64> = points
            .iter()
            .filter(|p| p["values"]["context-length"] == ctx)
            .map(|p| p["at_peak_requested_by_category"]["activation"].as_i64().unwrap())
            .collect();
        assert_eq!(act.len(), 6);
        assert!(act[0] > 0);
        // Second differences are zero: every saved tensor is B times a per-sample size.
        for w in act.windows(3) {
            assert_eq!(w[2] - 2 * w[1] + w[0], 0, "S={ctx}: {act:?}");
        }
    }
    // The batch fit per context length: slope positive, R² ≈ 1.
    let fits = s["fits"].as_array().unwrap();
    let batch_fits: Vec<_> = fits.iter().filter(|f| f["axis"] == "batch-size").collect();
    assert_eq!(batch_fits.len(), 2);
    for f in batch_fits {
        assert!(f["linear"]["coeffs"][1].as_f64().unwrap() > 0.0);
        assert!(f["linear"]["r2"].as_f64().unwrap() > 0.999, "{f}");
    }
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 13);
    assert!(csv.starts_with("batch-size,context-length,profile-type,"));
    let svg = std::fs::read_to_string(out.join("sweep_batch-size.svg")).unwrap();
    assert!(svg.contains("GiB") && svg.matches("<polyline").count() == 4, "two lines per context length");
    let md = std::fs::read_to_string(out.join("sweep.md")).unwrap();
    assert!(md.contains("| batch-size | context-length |") && md.contains("## Fits"));
}

#[test]
fn context_sweep_finds_the_s_squared_attention_tensors() {
    let out = tmp("quad");
    let o = vramscope(&["sweep", "--model", "walkthrough", "--max-seq-len", "512", "--batch-size", "2", "--context-length", "64,128,256,512", "--profile-type", "forward", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("sweep.json"));
    let f = s["fits"].as_array().unwrap().iter().find(|f| f["axis"] == "context-length").unwrap().clone();
    let q = &f["quadratic"];
    assert!(q["coeffs"][2].as_f64().unwrap() > 0.0 && q["r2"].as_f64().unwrap() > 0.999, "{f}");
    // The naive forward saves the softmax output (B, h, S, S) per layer: 4 layers · B 2 · h 8 · 4 bytes.
    let act = f["components"].as_array().unwrap().iter().find(|c| c["name"] == "activation").unwrap();
    assert_eq!(act["grows_quadratically"], true, "{act}");
    let ops: Vec<&str> = f["quadratic_ops"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(ops.contains(&"softmax"), "{ops:?}");
    let c_softmax = f["quadratic_ops"].as_array().unwrap().iter().find(|c| c["name"] == "softmax").unwrap()["fit"]["coeffs"][2].as_f64().unwrap();
    assert!((c_softmax - (4 * 2 * 8 * 4) as f64).abs() < 1.0, "{c_softmax}");
    let steps = f["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    assert!(steps.iter().all(|s| s["per_doubling"].as_f64().unwrap() > 1.0));
}

#[test]
fn bad_grids_name_the_flag_exit_2_and_write_nothing() {
    let cases: &[(&[&str], &str)] = &[
        (&["--batch-size", "1,,4"], "--batch-size"),
        (&["--batch-size", ""], "--batch-size"),
        (&["--batch-size", "1,two"], "--batch-size"),
        (&["--max-seq-len", "128", "--context-length", "64,256"], "--context-length"),
        (&["--num-heads", "8,7"], "--num-heads"),
        (&["--profile-type", "forward,backward"], "--profile-type"),
        (&["--model", "walkthrough,nonsense"], "--preset"),
        (&["--grad-accum-steps", "1,3", "--batch-size", "8"], "--grad-accum-steps"),
        (&["--device", "tpu"], "--device"),
    ];
    for (args, flag) in cases {
        let out = tmp("bad");
        let mut a = vec!["sweep", "--out-dir", out.to_str().unwrap()];
        a.extend_from_slice(args);
        let o = vramscope(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} should name {flag}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

#[test]
fn out_of_memory_points_are_results() {
    let out = tmp("oom");
    let o = vramscope(&["sweep", "--batch-size", "1,64", "--memory-limit", "64MiB", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("sweep.json"));
    let p = s["points"].as_array().unwrap();
    assert!(p[0]["oom"].is_null());
    assert!(p[1]["oom"].as_str().unwrap().contains("out of memory"), "{}", p[1]);
    assert!(std::fs::read_to_string(out.join("sweep.md")).unwrap().contains("| OOM |"));
}

/// `fit --json` (to stdout); without a --reserve in `args`, `--reserve 0`, so the answer is
/// the boundary `profile` finds at the same limit.
fn fit_json(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["fit", "--json"];
    a.extend_from_slice(args);
    if !args.contains(&"--reserve") {
        a.extend(["--reserve", "0"]);
    }
    let o = vramscope(&a);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Does `profile` (meta) of this point fit the limit? (exit 0, or 3: out of memory)
fn profile_fits(extra: &[&str], dir: &std::path::Path) -> bool {
    let mut a = vec!["profile", "--device", "meta", "--out-dir", dir.to_str().unwrap()];
    a.extend_from_slice(extra);
    let o = vramscope(&a);
    let code = o.status.code().unwrap();
    assert!(code == 0 || code == 3, "{}", String::from_utf8_lossy(&o.stderr));
    code == 0
}

#[test]
fn fit_finds_the_largest_batch_and_the_longest_context_that_fit() {
    let dir = tmp("fit");
    let s = fit_json(&["--find", "batch", "--context-length", "64", "--memory-limit", "96MiB"]);
    let n = s["answer"].as_u64().unwrap();
    assert!(n > 1, "{s}");
    assert_eq!(s["first_not_fitting"].as_u64().unwrap(), n + 1);
    let cap = 96 * 1024 * 1024;
    assert_eq!(s["capacity_bytes"].as_u64().unwrap(), cap);
    let reserved = s["peak_reserved_bytes"].as_u64().unwrap();
    assert!(reserved <= cap);
    assert_eq!(s["margin_bytes"].as_i64().unwrap(), cap as i64 - reserved as i64);
    let (b, b1) = (n.to_string(), (n + 1).to_string());
    assert!(profile_fits(&["--batch-size", &b, "--context-length", "64", "--memory-limit", "96MiB"], &dir), "answer {n} must fit");
    assert!(!profile_fits(&["--batch-size", &b1, "--context-length", "64", "--memory-limit", "96MiB"], &dir), "answer+1 must not fit");

    let s = fit_json(&["--find", "context", "--batch-size", "4", "--max-seq-len", "8192", "--memory-limit", "96MiB", "--profile-type", "forward"]);
    let n = s["answer"].as_u64().unwrap();
    assert!(n > 2 && n < 8192, "{s}");
    let (c, c1) = (n.to_string(), (n + 1).to_string());
    let base = ["--batch-size", "4", "--max-seq-len", "8192", "--memory-limit", "96MiB", "--profile-type", "forward", "--context-length"];
    assert!(profile_fits(&[&base[..], &[c.as_str()]].concat(), &dir));
    assert!(!profile_fits(&[&base[..], &[c1.as_str()]].concat(), &dir));
}

#[test]
fn fit_needs_a_capacity_and_rejects_the_searched_flag() {
    for (args, flag) in [
        (vec!["fit"], "--gpu"),
        (vec!["fit", "--gpu", "H100", "--batch-size", "4"], "--batch-size"),
        (vec!["fit", "--gpu", "nonsense"], "--gpu"),
        (vec!["fit", "--memory-limit", "1GiB", "--find", "context", "--context-length", "64"], "--context-length"),
    ] {
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

/// `fit` passes the precision and memory flags to every probe: its answer under checkpointing
/// is the boundary `profile --checkpoint blocks` finds, and is larger than without.
#[test]
fn fit_searches_with_the_memory_options_given() {
    let dir = tmp("fit-options");
    let base = ["--find", "batch", "--context-length", "64", "--memory-limit", "96MiB"];
    let plain = fit_json(&base)["answer"].as_u64().unwrap();
    let with = fit_json(&[&base[..], &["--checkpoint", "blocks", "--precision", "bf16"]].concat());
    let n = with["answer"].as_u64().unwrap();
    assert!(n > plain, "checkpointing + bf16 fit {n}, plain {plain}");
    let (b, b1) = (n.to_string(), (n + 1).to_string());
    let opts = ["--context-length", "64", "--memory-limit", "96MiB", "--checkpoint", "blocks", "--precision", "bf16", "--batch-size"];
    assert!(profile_fits(&[&opts[..], &[b.as_str()]].concat(), &dir), "answer {n} must fit");
    assert!(!profile_fits(&[&opts[..], &[b1.as_str()]].concat(), &dir), "answer+1 must not fit");
}

/// The precision, checkpoint and fusion axes reach each grid point: the sweep's peaks are
/// those of separate `profile` runs.
#[test]
fn sweep_axes_for_the_memory_options_reach_profile() {
    let out = tmp("axes");
    let o = vramscope(&[
        "sweep", "--context-length", "64", "--precision", "fp32,bf16", "--checkpoint", "none,blocks", "--fusion", "none,all", "--out-dir", out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("sweep.json"));
    let points = s["points"].as_array().unwrap();
    assert_eq!(points.len(), 8);
    let mut peaks = std::collections::BTreeSet::new();
    for p in points {
        let v = &p["values"];
        let (prec, ck, fu) = (v["precision"].as_str().unwrap(), v["checkpoint"].as_str().unwrap(), v["fusion"].as_str().unwrap());
        let dir = tmp(&format!("axes-{prec}-{ck}-{fu}"));
        let o = vramscope(&["profile", "--device", "meta", "--context-length", "64", "--precision", prec, "--checkpoint", ck, "--fusion", fu, "--out-dir", dir.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let sum = json(&dir.join("summary.json"));
        let peak = p["peak_allocated_bytes"].as_u64().unwrap();
        assert_eq!(peak, sum["runs"][0]["peak_allocated_bytes"].as_u64().unwrap(), "{prec} {ck} {fu}");
        peaks.insert(peak);
    }
    assert!(peaks.len() >= 4, "the options change the peak: {peaks:?}");
}

/// Every "N %" in a text, as numbers.
fn percentages(text: &str) -> Vec<f64> {
    let mut v = Vec::new();
    for (i, _) in text.match_indices(" %") {
        let head = &text[..i];
        let start = head.rfind(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')).map_or(0, |k| k + 1);
        if let Ok(x) = head[start..].parse::<f64>() {
            v.push(x);
        }
    }
    v
}

/// Every share a fit reports lies in [0, 100 %]; shares are given only for components that
/// are at least 1 % of the peak and fitted with R² ≥ 0.99; the fitted terms are never
/// negative. (The free least-squares fit printed "cat 0.0 MiB (6857 % B²)" for the batch
/// sweep below and a 57.6 % "S² share" from a fit with a negative linear term for training.)
#[test]
fn fit_shares_are_bounded_and_only_for_components_that_matter() {
    let runs: [(&str, Vec<&str>); 2] = [
        ("bshare", vec!["--batch-size", "1,2,4,8,16", "--context-length", "64,128", "--profile-type", "forward"]),
        ("sshare", vec!["--model", "walkthrough", "--max-seq-len", "512", "--batch-size", "2", "--context-length", "64,128,256,512", "--profile-type", "forward,training"]),
    ];
    for (name, args) in runs {
        let out = tmp(name);
        let mut a = vec!["sweep", "--out-dir", out.to_str().unwrap()];
        a.extend(args.iter().copied());
        let o = vramscope(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let stdout = String::from_utf8_lossy(&o.stdout);
        let pcts = percentages(&stdout);
        assert!(!pcts.is_empty(), "{stdout}");
        assert!(pcts.iter().all(|p| (0.0..=100.0).contains(p)), "{pcts:?}\n{stdout}");
        let s = json(&out.join("sweep.json"));
        for f in s["fits"].as_array().unwrap() {
            let peak = f["peak_allocated_bytes"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).fold(0.0, f64::max);
            if let Some(q) = f["quadratic"].as_object() {
                assert!(q["coeffs"].as_array().unwrap().iter().all(|c| c.as_f64().unwrap() >= 0.0), "{q:?}");
            }
            if let Some(sh) = f["quadratic_share"].as_f64() {
                assert!((0.0..=1.0).contains(&sh));
            }
            for key in ["phases", "components", "quadratic_ops"] {
                for c in f[key].as_array().unwrap() {
                    assert!(c["fit"]["coeffs"].as_array().unwrap().iter().all(|v| v.as_f64().unwrap() >= 0.0), "{c}");
                    if let Some(sh) = c["quadratic_share"].as_f64() {
                        assert!((0.0..=1.0).contains(&sh), "{c}");
                        assert!(c["bytes_at_max"].as_f64().unwrap() >= 0.01 * peak, "negligible component with a share: {c}");
                        assert!(c["fit"]["r2"].as_f64().unwrap() >= 0.99, "badly fitted component with a share: {c}");
                    }
                    if key == "quadratic_ops" {
                        assert!(c["grows_quadratically"].as_bool().unwrap() && c["quadratic_share"].is_number(), "{c}");
                    }
                }
            }
        }
        if name == "bshare" {
            // Nothing grows as B² in a forward pass.
            assert!(!stdout.contains("grow as B²"), "{stdout}");
        } else {
            // The attention scores do grow as S², and are said to.
            assert!(stdout.contains("that grow as S² at the peak, by op"), "{stdout}");
        }
    }
}

/// The sweep plot draws the device limit, marks the points that ran out of memory, and
/// puts a doubling batch axis on a log₂ scale (even spacing, the batch sizes as labels).
#[test]
fn sweep_plot_has_the_limit_line_oom_markers_and_a_log2_axis() {
    let out = tmp("svg");
    let o = vramscope(&["sweep", "--batch-size", "1,2,4,8", "--memory-limit", "64MiB", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("sweep.json"));
    let ooms: Vec<String> = s["points"].as_array().unwrap().iter().filter(|p| p["oom"].is_string()).map(|p| p["values"]["batch-size"].as_str().unwrap().to_string()).collect();
    assert_eq!(ooms, ["4", "8"], "64 MiB holds batch 1 and 2 of the default model");
    assert_eq!(s["points"][0]["memory_limit_bytes"], 64 << 20);
    let svg = std::fs::read_to_string(out.join("sweep_batch-size.svg")).unwrap();
    // The limit line, at 64 MiB in GiB.
    let limits: Vec<f64> = svg.match_indices(r#"<g class="limit" data-y=""#).map(|(i, m)| svg[i + m.len()..].split('"').next().unwrap().parse().unwrap()).collect();
    assert_eq!(limits, [0.0625], "{svg}");
    assert!(svg.contains("memory limit: 0.06 GiB"), "{svg}");
    // One ✗ per OOM point, at its batch size.
    let marked: Vec<&str> = svg.match_indices(r#"<g class="oom" data-x=""#).map(|(i, m)| svg[i + m.len()..].split('"').next().unwrap()).collect();
    assert_eq!(marked, ["4", "8"], "{svg}");
    // Each ✗ says where the step ran out of memory ("OOM in <phase>"), as the table and the
    // CSV do, and the legend names the phases.
    let phases: Vec<String> = s["points"].as_array().unwrap().iter().filter_map(|p| p["oom_phase"].as_str().map(String::from)).collect();
    assert_eq!(phases.len(), 2, "{s}");
    for ph in &phases {
        assert!(svg.contains(&format!(">OOM in {ph}</text>")), "no 'OOM in {ph}' label on the ✗: {svg}");
        assert!(svg.contains(&format!("out of memory: OOM in {ph}")), "legend: {svg}");
    }
    let md = std::fs::read_to_string(out.join("sweep.md")).unwrap();
    assert!(md.contains(&format!("| OOM in {} |", phases[0])), "{md}");
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains(",oom,oom_phase,"), "{csv}");
    assert!(csv.lines().nth(3).unwrap().contains(&format!(",{},", phases[0])), "{csv}");
    // x ticks: the batch sizes, evenly spaced (log₂).
    let ticks: Vec<(f64, String)> = svg
        .match_indices(r#"<text class="x-tick" x=""#)
        .map(|(i, m)| {
            let rest = &svg[i + m.len()..];
            let x = rest.split('"').next().unwrap().parse().unwrap();
            let label = rest[rest.find('>').unwrap() + 1..rest.find("</text>").unwrap()].to_string();
            (x, label)
        })
        .collect();
    assert_eq!(ticks.iter().map(|t| t.1.as_str()).collect::<Vec<_>>(), ["1", "2", "4", "8"]);
    let gaps: Vec<f64> = ticks.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(gaps.iter().all(|g| (g - gaps[0]).abs() < 0.15), "{gaps:?}");
    assert!(svg.contains("batch-size (log₂ scale)"));
    // Without a limit: no line, no markers.
    let out = tmp("svg-nolimit");
    assert!(vramscope(&["sweep", "--batch-size", "1,2,3", "--out-dir", out.to_str().unwrap()]).status.success());
    let svg = std::fs::read_to_string(out.join("sweep_batch-size.svg")).unwrap();
    assert!(!svg.contains(r#"class="limit""#) && !svg.contains(r#"class="oom""#) && !svg.contains("log₂"));
}

/// `fit` keeps the reserve free: the default (CUDA context 512 MiB + two 8.125 MiB cuBLAS
/// workspaces for a training step off Hopper) lowers the answer to what fits the limit less
/// the reserve, `--reserve SIZE` overrides it, the memory fraction's budget loses it too, and
/// the margin printed is capacity − reserve − peak reserved.
#[test]
fn fit_reserve_lowers_the_answer_and_the_margin_is_printed() {
    let base = ["--find", "batch", "--context-length", "64", "--memory-limit", "1GiB"];
    let with = fit_json(&[&base[..], &["--reserve", "528.25MiB"]].concat());
    let default = {
        let mut a = vec!["fit", "--json"];
        a.extend_from_slice(&base);
        let o = vramscope(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let reserve = (528 << 20) + (1 << 18);
    assert_eq!(default["reserve_bytes"], reserve, "{}", default["reserve"]);
    assert_eq!(default["reserve"].as_array().unwrap().len(), 2);
    assert_eq!(default["answer"], with["answer"]);
    let bare = fit_json(&base)["answer"].as_u64().unwrap();
    let n = with["answer"].as_u64().unwrap();
    assert!(n < bare, "the reserve must lower the answer: {n} vs {bare}");
    // The same answer as the bare search at the limit less the reserve.
    let less = ((1u64 << 30) - reserve as u64).to_string();
    assert_eq!(fit_json(&["--find", "batch", "--context-length", "64", "--memory-limit", &less])["answer"].as_u64().unwrap(), n);
    // Under a memory fraction the reserve comes off the fraction's budget.
    let frac = fit_json(&["--find", "batch", "--context-length", "64", "--memory-limit", "2GiB", "--memory-fraction", "0.5", "--reserve", "528.25MiB"]);
    assert_eq!(frac["answer"].as_u64().unwrap(), n, "{frac}");
    // Margin = capacity − reserve − peak reserved.
    let margin = with["capacity_bytes"].as_i64().unwrap() - reserve - with["peak_reserved_bytes"].as_i64().unwrap();
    assert_eq!(with["margin_bytes"].as_i64().unwrap(), margin);
    assert!(margin >= 0);
    // The text says all of it.
    let o = vramscope(&["fit", "--find", "batch", "--context-length", "64", "--memory-limit", "1GiB"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("reserve 528.25 MiB (default; --reserve SIZE to change)") && text.contains("CUDA context = 512.00 MiB"), "{text}");
    assert!(text.contains(&format!("largest batch size that fits: {n}")), "{text}");
    assert!(text.contains("margin left at") && text.contains("− 528.25 MiB reserve −") && text.contains("peak reserved ="), "{text}");
    // A reserve that leaves nothing is refused, naming the flag.
    let o = vramscope(&["fit", "--memory-limit", "512MiB", "--reserve", "1GiB"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--reserve"));
    let o = vramscope(&["fit", "--memory-limit", "1GiB", "--reserve", "lots"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--reserve"));
}

/// `fit --json` and `estimate --json` take the same forms: no value or `-` prints the JSON
/// alone to stdout; FILE writes it there and prints the usual text.
#[test]
fn fit_and_estimate_json_behave_alike() {
    let dir = tmp("json-forms");
    std::fs::create_dir_all(&dir).unwrap();
    for cmd in [vec!["fit", "--memory-limit", "256MiB", "--context-length", "64", "--reserve", "0"], vec!["estimate", "--no-simulate"]] {
        let key = if cmd[0] == "fit" { "answer" } else { "estimate" };
        for form in [vec!["--json"], vec!["--json", "-"]] {
            let o = vramscope(&[&cmd[..], &form[..]].concat());
            assert!(o.status.success(), "{cmd:?} {form:?}: {}", String::from_utf8_lossy(&o.stderr));
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{cmd:?} {form:?}: stdout is not JSON alone ({e})"));
            assert!(!v[key].is_null(), "{v}");
        }
        let file = dir.join(format!("{}.json", cmd[0]));
        let o = vramscope(&[&cmd[..], &["--json", file.to_str().unwrap()]].concat());
        assert!(o.status.success());
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(&format!("wrote {} (JSON)", file.display())), "{text}");
        assert!(serde_json::from_str::<serde_json::Value>(&text).is_err(), "the text is printed beside the file");
        assert!(!json(&file)[key].is_null());
    }
}

/// `--points B:S,…` runs the pairs given, not the grid of their values ("S 512 at batch 4
/// beside S 128 at batch 16"), crossed with the other axes' lists; tables, CSV, JSON and
/// plots take the list, and a fit is made where listed points line up along an axis.
#[test]
fn points_list_runs_only_the_pairs_given() {
    let out = tmp("points");
    let o = vramscope(&["sweep", "--points", "4:64,16:32", "--profile-type", "forward", "--out-dir", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("sweep.json"));
    let pts: Vec<(u64, u64)> = s["points"].as_array().unwrap().iter().map(|p| (p["batch_size"].as_u64().unwrap(), p["context_length"].as_u64().unwrap())).collect();
    assert_eq!(pts, [(4, 64), (16, 32)], "only the listed pairs run, not the 2×2 grid");
    assert!(stdout.contains("sweep of 2 points"), "{stdout}");
    let axes: Vec<(String, Vec<String>)> = s["axes"].as_array().unwrap().iter().map(|a| (a["flag"].as_str().unwrap().to_string(), serde_json::from_value(a["values"].clone()).unwrap())).collect();
    assert!(axes.contains(&("--batch-size".into(), vec!["4".into(), "16".into()])), "{axes:?}");
    assert!(axes.contains(&("--context-length".into(), vec!["32".into(), "64".into()])), "{axes:?}");
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let md = std::fs::read_to_string(out.join("sweep.md")).unwrap();
    assert!(md.contains("| 4 | 64 |") && md.contains("| 16 | 32 |"), "{md}");
    // No two listed points share a context (or a batch): no fit, and each plot draws every
    // point once, each in its own series.
    assert!(s["fits"].as_array().unwrap().is_empty(), "{}", s["fits"]);
    for axis in ["batch-size", "context-length"] {
        let svg = std::fs::read_to_string(out.join(format!("sweep_{axis}.svg"))).unwrap();
        assert_eq!(svg.matches("<circle").count(), 4, "2 points × allocated and reserved: {svg}");
    }
    // Crossed with another list; points in a line along batch give a batch fit.
    let out = tmp("points-fit");
    let o = vramscope(&["sweep", "--points", "1:32,2:32,4:32,2:64", "--profile-type", "forward,training", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("sweep.json"));
    assert_eq!(s["points"].as_array().unwrap().len(), 8);
    let batch_fits: Vec<&serde_json::Value> = s["fits"].as_array().unwrap().iter().filter(|f| f["axis"] == "batch-size").collect();
    assert_eq!(batch_fits.len(), 2, "one per profile type at context 32: {}", s["fits"]);
    assert_eq!(batch_fits[0]["x"], serde_json::json!([1.0, 2.0, 4.0]));
    assert_eq!(batch_fits[0]["fixed"]["context-length"], "32");
    // Context 32 vs 64 at batch 2: a context fit per profile type.
    assert_eq!(s["fits"].as_array().unwrap().iter().filter(|f| f["axis"] == "context-length").count(), 2);
}

#[test]
fn bad_points_name_the_flag_and_the_token_exit_2_and_write_nothing() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["--points", "4x512"], &["--points", "'4x512'"]),
        (&["--points", "4:512,,2:8"], &["--points", "empty"]),
        (&["--points", "a:8"], &["--points", "'a'"]),
        (&["--points", "4:0"], &["--points", "'4:0'"]),
        (&["--points", "4:8,4:8"], &["--points", "'4:8' appears twice"]),
        (&["--points", "4:8", "--batch-size", "2"], &["--points", "--batch-size"]),
        (&["--points", "4:8", "--context-length", "8,16"], &["--points", "--context-length"]),
        // A point profile itself refuses names its grid point.
        (&["--points", "2:64", "--max-seq-len", "32"], &["--context-length", "--batch-size 2 --context-length 64)"]),
    ];
    for (args, wants) in cases {
        let out = tmp("bad-points");
        let mut a = vec!["sweep", "--out-dir", out.to_str().unwrap()];
        a.extend_from_slice(args);
        let o = vramscope(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        for w in *wants {
            assert!(err.contains(w), "{args:?} should say {w}: {err}");
        }
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

/// `fit` of a forward pass says it is one prefill, not generation or serving capacity.
#[test]
fn fit_of_a_forward_pass_says_it_is_not_serving_capacity() {
    for t in ["inference", "forward"] {
        let o = vramscope(&["fit", "--model", "Llama-3.2-1B", "--profile-type", t, "--context-length", "256", "--gpu", "H100-80GB", "--max", "4"]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("ONE forward pass") && text.contains("vramscope serve"), "{t}: {text}");
    }
    let o = vramscope(&["fit", "--model", "Llama-3.2-1B", "--context-length", "256", "--gpu", "H100-80GB", "--max", "4"]);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("ONE forward pass"));
}
