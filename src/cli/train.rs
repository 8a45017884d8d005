//! `vramscope train`: the workshop's `tiny_llama_v1.py` through the session — trains on
//! synthetic tokens, prints loss, step times, throughput and memory, then writes
//! `config.json` and `performance_summary.json` (and, as asked, the FLOPs, the operator table
//! and a chrome trace).
use super::set_threads;
use crate::analyse::flops;
use crate::engine::Device;
use crate::export::text::compute;
use crate::export::write_json;
use crate::options::train::{plan, TrainArgs};
use crate::session::text::train as text;
use crate::session::train::{chrome_trace, execute_timed};
use anyhow::Result;
use serde_json::json;
use std::path::PathBuf;

pub fn run(a: TrainArgs) -> Result<()> {
    let mut p = plan(&a, |n| eprintln!("note: {n}"))?;
    if p.device == Device::Cpu {
        if let Some(n) = crate::session::host_memory::meta_instead(&p.model, p.precision, p.batch / p.accum, &[p.seq], true)? {
            println!("{n}");
            p.device = Device::Meta;
        }
    }
    let threads = set_threads(a.threads)?;
    // Output folders are checked before any step runs; the files appear together at the end.
    let set = super::outputs::begin_set("--output-dir", &a.output_dir)?;
    if a.enable_pytorch_profiler || p.operators.is_some() {
        super::outputs::check_dir("--profile-dir", a.profile_dir.as_deref().unwrap_or(std::path::Path::new("./profiles")))?;
    }
    print!("{}", text::banner(&p, threads, a.deterministic));
    let op_times = std::env::var_os("VRAMSCOPE_OP_TIMES").is_some();
    let (out, times) = execute_timed(&p, op_times, &mut |i, r| {
        if let Some(l) = text::step_line(&p, i, r) {
            println!("{l}");
        }
    })?;
    print!("{}", text::op_times(&times));
    print!("{}", text::results(&p, &out));

    let mut flops_json = None;
    if let (Some(log), Some(w)) = (&out.compute, p.compute) {
        if a.flops {
            let (report, achieved, roof) = out.flops(&p, log, w);
            print!("{}", compute::flops(&report, a.flops_depth, achieved.as_ref(), roof.as_ref()));
            flops_json = Some(flops::to_json(&report, achieved.as_ref(), roof.as_ref()));
        }
        let profile_dir = a.profile_dir.clone().unwrap_or_else(|| PathBuf::from("./profiles"));
        if let Some((_, note)) = &p.operators {
            if let Some(n) = note {
                println!("note: {n}");
            }
            let text = out.operator_table(&p, log, w);
            println!("{}\n{text}{}", "=".repeat(78), "=".repeat(78));
            let path = profile_dir.join("operator_table.txt");
            crate::export::write_atomic(&path, text.as_bytes())?;
            println!("operator table saved to {}", path.display());
        }
        if a.enable_pytorch_profiler {
            let worker = format!("{}_{}", hostname(), std::process::id());
            let (name, trace) = chrome_trace(&p, log, &worker);
            let path = profile_dir.join(name);
            write_json(&path, &trace)?;
            println!(
                "wrote chrome trace {} ({} ops, {} module spans, {} memory events over steps {}..{}); open in https://ui.perfetto.dev, chrome://tracing or TensorBoard",
                path.display(),
                log.ops.len(),
                log.modules.len(),
                log.memory.as_ref().map_or(0, |m| m.len()),
                w.first + 1,
                w.first + w.count
            );
        }
    }

    let mut config_file = out.config_json(&p, threads);
    config_file["run_id"] = json!(set.run_id());
    write_json(&a.output_dir.join("config.json"), &config_file)?;
    write_json(&a.output_dir.join("performance_summary.json"), &out.summary_json(&p, threads, flops_json, Some(set.run_id())))?;
    set.commit()?;
    println!("wrote {}/config.json and performance_summary.json", a.output_dir.display());
    Ok(())
}

/// The host name, as `tensorboard_trace_handler` names its worker.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}
