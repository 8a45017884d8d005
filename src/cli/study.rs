//! `vramscope study SIZE`: seed 002's `launch_performance_study.sh` — one of the five
//! workshop problem sizes trained with its preset's batch, sequence and step count, into a
//! timestamped `performance_results_<size>_<YYYYmmdd_HHMMSS>/` holding `config.json`,
//! `training_output.log` (the run's output, with the `Throughput:` and `Peak memory usage:`
//! lines the seed's comparison loop greps) and `performance_summary.json`. Sizes this
//! machine can train in a few minutes run on cpu; the rest run on meta (memory only), and
//! the study says which and why. The run is `vramscope train` in a child process, its output
//! teed into the log as the shell script does.
use super::usage;
use crate::export::{mib, write_atomic, write_json};
use crate::model::presets;
use crate::options::study::StudyArgs;
use crate::session::study::{parameter_lines, step_flops, timestamp, GUIDE_TABLE, SIZES};
use anyhow::{Context, Result};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

pub fn run(a: StudyArgs) -> Result<()> {
    let size = a.size.to_ascii_lowercase();
    if !SIZES.contains(&size.as_str()) {
        return Err(usage("SIZE", format!("'{}' (expected one of {})", a.size, SIZES.join(", "))));
    }
    let preset = presets::find(&size, Some(crate::model::Flavour::Tinyllama)).map_err(|e| usage("SIZE", e))?;
    let steps = a.num_steps.unwrap_or(preset.num_steps);
    if steps < 2 {
        return Err(usage("--num-steps", "needs at least 2 (the first is a warm-up step)"));
    }
    if !(a.cpu_budget_minutes > 0.0) {
        return Err(usage("--cpu-budget-minutes", "must be positive"));
    }
    // Checked here, before anything is written; the training run gets the flags as given.
    a.optim.resolve(crate::model::Flavour::Tinyllama, true)?;
    // cuda and the like get parse_device's explanation; anything else names the choices.
    if !["auto", "cpu", "meta"].contains(&a.device.as_str()) {
        crate::options::parse_device(&a.device)?;
        return Err(usage("--device", format!("'{}' (expected auto, cpu or meta)", a.device)));
    }
    // Checked before calibration and the training run; config.json and the log appear together.
    let set = super::outputs::begin_set("--out-dir", &a.out_dir)?;
    let flops = step_flops(&preset) * steps as f64;
    let (device, why) = match a.device.as_str() {
        "cpu" => ("cpu", "asked for with --device cpu".to_string()),
        "meta" => ("meta", "asked for with --device meta: memory only, no loss or timing".to_string()),
        _ => {
            super::set_threads(a.threads)?;
            // Effective speed of a whole step: about half the calibrated matmul peak.
            let speed = 0.5 * crate::engine::calibrate::cpu_peaks().matmul_flops;
            let minutes = flops / speed / 60.0;
            if minutes <= a.cpu_budget_minutes {
                ("cpu", format!("estimated {minutes:.1} min on this machine (≤ --cpu-budget-minutes {})", a.cpu_budget_minutes))
            } else {
                ("meta", format!("a cpu run would take about {minutes:.0} min here (> --cpu-budget-minutes {}): memory modelled on meta, no loss or timing", a.cpu_budget_minutes))
            }
        }
    };
    let dir = a.out_dir.join(format!("performance_results_{size}_{}", timestamp()));
    let mut train: Vec<String> = vec![
        "train".into(),
        "--preset".into(),
        format!("tinyllama-{size}"),
        "--device".into(),
        device.into(),
        "--num-steps".into(),
        steps.to_string(),
        "--warmup-steps".into(),
        "1".into(),
        "--log-interval".into(),
        (steps / 10).max(1).to_string(),
        "--output-dir".into(),
        dir.display().to_string(),
    ];
    if let Some(t) = a.threads {
        train.extend(["--threads".into(), t.to_string()]);
    }
    train.extend(a.optim.words());
    if a.enable_profilers {
        train.extend(["--flops".into(), "--enable-pytorch-profiler".into(), "--profile-memory".into(), "--profile-steps".into(), "1".into()]);
        train.extend(["--profile-dir".into(), dir.join("profiles").display().to_string()]);
    }
    let m = &preset.model;
    let banner = format!(
        "{eq}\nVRAMSCOPE - VERSION 1 BASELINE PERFORMANCE STUDY\n{eq}\n\nProblem Size: {}\nConfiguration:\n  Hidden Dimension:    {}\n  Number of Layers:    {}\n  \
         Sequence Length:     {}\n  Batch Size:          {}\n  Training Steps:      {steps}\n{}  Est. FLOPs per step: {:.3e}\n  \
         Profilers Enabled:   {}\n  Device:              {device} ({why})\n\nOutput Directory: {}\n{eq}\n",
        size.to_uppercase(),
        m.d_model,
        m.num_layers,
        preset.seq_len,
        preset.batch_size,
        parameter_lines(&size, m),
        step_flops(&preset),
        a.enable_profilers,
        dir.display(),
        eq = "=".repeat(80)
    );
    print!("{banner}");
    // The training script's own output, teed into training_output.log as the shell script does.
    let exe = std::env::current_exe().context("locating the vramscope executable")?;
    let t0 = std::time::Instant::now();
    let mut child = Command::new(exe).args(&train).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("starting the training run")?;
    let mut log = banner.clone();
    log.push_str(&format!("\nStarting V1 Baseline training: vramscope {}\n", train.join(" ")));
    let stdout = child.stdout.take().expect("piped");
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        log.push_str(&line);
        log.push('\n');
    }
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut err)?;
    let status = child.wait()?;
    if !status.success() {
        eprint!("{err}");
        // The training run's "does not fit" is the study's answer too (crate::error::ExitCode).
        if status.code() == Some(crate::error::ExitCode::DoesNotFit.code()) {
            return Err(crate::error::DoesNotFit(format!("the training run does not fit ({status})")).into());
        }
        anyhow::bail!("the training run failed ({status})");
    }
    let runtime_s = t0.elapsed().as_secs_f64();
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("performance_summary.json")).context("reading the run's performance_summary.json")?)?;
    let s = &summary["summary"];
    let peak_mib = s["peak_allocated_bytes"].as_u64().map_or(0.0, mib);
    let throughput = s["samples_per_s"].as_f64().map_or("n/a (meta: not measured)".to_string(), |v| format!("{v:.1} samples/sec"));
    let tail = format!(
        "{eq}\nPERFORMANCE STUDY COMPLETE\n{eq}\nTotal Runtime: {runtime_s:.0}s\nThroughput: {throughput}\nPeak memory usage: {peak_mib:.1} MB (MB = 1024² bytes, allocated)\n",
        eq = "=".repeat(80)
    );
    print!("{tail}");
    log.push_str(&tail);
    // config.json: the size's configuration and how it ran (train's own config.json is
    // replaced by this superset, as the script writes its own).
    let train_config: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;
    let config = json!({
        "run_id": set.run_id(),
        "problem_size": size,
        "hidden_dim": m.d_model,
        "num_layers": m.num_layers,
        "seq_len": preset.seq_len,
        "batch_size": preset.batch_size,
        "num_steps": steps,
        "parameters": m.param_count(),
        "parameters_head_counted_twice": m.param_count_head_twice(),
        "guide_table_parameters": GUIDE_TABLE.iter().find(|(k, _)| *k == size).map(|(_, v)| *v),
        "estimated_step_flops": step_flops(&preset),
        "enable_profilers": a.enable_profilers,
        "device": device,
        "device_reason": why,
        "timestamp": dir.file_name().unwrap().to_string_lossy().trim_start_matches(&format!("performance_results_{size}_")),
        "command": format!("vramscope {}", train.join(" ")),
        "training": train_config,
    });
    write_json(&dir.join("config.json"), &config)?;
    write_atomic(&dir.join("training_output.log"), log.as_bytes())?;
    set.commit()?;
    std::io::stdout().flush()?;
    Ok(())
}
