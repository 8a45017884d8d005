//! `vramscope run-all`: seed 001's `run_all.sh` through the session — writing
//! `results/memory_profiling/` with the snapshots named as the seed lists them and the four
//! text answers (parts b to e), the snapshots read back within `--max-*` budgets.
use super::set_threads;
use crate::export::{gib, staged_path, write_atomic};
use crate::options::run_all::{plan, RunAllArgs};
use crate::session::run_all::{peak_cell, read_back, run_all};
use anyhow::Result;
use std::path::Path;

pub fn run(a: RunAllArgs) -> Result<()> {
    let (plan, note) = plan(&a)?;
    if let Some(n) = note {
        println!("{n}");
    }
    if let Some(n) = &plan.jobs[0].options.note {
        eprintln!("note: {n}");
    }
    set_threads(a.threads)?;
    // Snapshots, reports and tables appear together at the end, or not at all.
    let set = super::outputs::begin_set("--out-dir", &a.out_dir)?;
    let t0 = std::time::Instant::now();
    let all = run_all(plan, |j, run| {
        if j.options.keep_trace {
            run.save_files(&j.options, &j.snapshot)?;
        }
        println!(
            "{:<48} peak allocated {:>8} GiB | reserved {:>8.2} GiB{}",
            j.snapshot.file_name().unwrap().to_string_lossy(),
            peak_cell(run),
            gib(run.stats.reserved_bytes.peak as u64),
            run.oom.as_ref().map_or(String::new(), |o| format!(" | {o}"))
        );
        Ok(())
    })?;
    let budget = a.budget.budget();
    // The snapshots just written (still staged in the output set), read back as a user's would be.
    let report = |path: &Path, detail: f64| read_back(&staged_path(path), path, detail, &budget);
    let (t, c) = (all.part_b(), all.part_c());
    write_atomic(&a.out_dir.join("peak_memory_summary.txt"), t.as_bytes())?;
    write_atomic(&a.out_dir.join("mixed_precision_memory_summary.txt"), c.as_bytes())?;
    let d = all.part_d(|path, size| Ok(report(path, 100.0)?.largest.iter().filter(|x| x.size == size && x.alloc_at.is_some()).count()))?;
    write_atomic(&a.out_dir.join("activation_size_analysis.txt"), d.as_bytes())?;
    let e = all.part_e(&report(all.part_e_snapshot(), 10.0)?);
    write_atomic(&a.out_dir.join("largest_allocations.txt"), e.as_bytes())?;
    set.commit()?;
    println!(
        "\nwrote {} snapshots (+ HTML reports), peak_memory_summary.txt, mixed_precision_memory_summary.txt, activation_size_analysis.txt, largest_allocations.txt to {} in {:.1} s",
        all.done.len(),
        a.out_dir.display(),
        t0.elapsed().as_secs_f64()
    );
    print!("\n{t}\n{c}");
    // Exit 3 only when every run ran out of memory; 0 when one fits (crate::error::EXIT_CODES_HELP).
    let ooms = all.done.iter().filter(|d| d.run.oom.is_some()).count();
    if ooms > 0 && ooms == all.done.len() {
        return Err(crate::error::DoesNotFit(format!("every one of the {ooms} runs ran out of memory (marked OOM in the tables; their snapshots stop at the failing allocation)")).into());
    }
    if ooms > 0 {
        println!("{ooms} of {} runs ran out of memory (marked OOM in the tables; their snapshots stop at the failing allocation)", all.done.len());
    }
    Ok(())
}
