//! `vramscope profile`: the CS336 `profile_memory.py` without a GPU. The session runs forward,
//! inference or training steps through the caching-allocator model; this writes each run's
//! memory_viz snapshot and report, `summary.json`, and prints the runs and the peak tables.
use super::set_threads;
use crate::engine::Device;
use crate::export::write_json;
use crate::options::profile::{self, ProfileArgs};
use crate::session::profile::profile_all;
use crate::session::text::profile as text;
use crate::session::{summary, ProfileOptions, Run};
use anyhow::Result;

/// The run's snapshot and report where `a` says (`--output`, else seed 001's names under
/// `--out-dir`), when the options keep traces.
fn save(p: &ProfileOptions, a: &ProfileArgs, r: &mut Run) -> Result<()> {
    if !p.keep_trace {
        return Ok(());
    }
    let path = a.output.clone().unwrap_or_else(|| p.snapshot_path(&a.out_dir, r));
    r.save_files(p, &path)
}

pub fn run(a: ProfileArgs) -> Result<()> {
    let mut p = profile::options(&a)?;
    if let Some(n) = &p.note {
        eprintln!("note: {n}");
    }
    if let Some(n) = p.host_fallback(&a.profile_type)? {
        println!("{n}");
        p.device = Device::Meta;
    }
    set_threads(a.threads)?;
    // Output paths are checked before any step runs; the files appear together at the end.
    if let Some(o) = &a.output {
        super::outputs::check_file("--output", o)?;
    }
    let set = super::outputs::begin_set("--out-dir", &a.out_dir)?;
    super::quiet_oom_panics();
    let ranks = p.ranks(a.parallel.rank.is_some())?;
    let runs = profile_all(&mut p, &a.profile_type, &ranks, |p, r| {
        save(p, &a, r)?;
        print!("{}", text::run(p, r, a.flops_depth));
        Ok(())
    })?;
    if ranks.len() > 1 {
        print!("{}", text::ranks_table(&runs));
    }
    if runs.len() > 1 && ranks.len() == 1 {
        print!("{}", text::contexts_table(&p.contexts, &a.profile_type, &runs));
    }
    let summary = summary::profile(&p, &a.profile_type, &ranks, &runs, Some(set.run_id().to_string()));
    // summary.json describes this invocation and names its snapshots; those carry the variant
    // in their names, so only the summary is replaced by a later run, and it says so.
    let summary_path = a.out_dir.join("summary.json");
    let replaced = if summary_path.exists() { " (replacing the summary of an earlier run; its snapshots keep their names)" } else { "" };
    write_json(&summary_path, &summary)?;
    set.commit()?;
    println!("\nwrote {}{replaced}", summary_path.display());
    // Exit 3 when every run ran out of memory (a single run that did); 0 when one fits, the
    // OOM runs marked in the tables and summary.json (crate::error::EXIT_CODES_HELP).
    let oom: Vec<&crate::session::Run> = runs.iter().filter(|r| r.oom.is_some()).collect();
    if let Some(r) = oom.first() {
        let snap = r.snapshot.as_ref().map_or(String::new(), |s| format!("; snapshot of the history up to the failing allocation: {}", s.display()));
        let msg = format!("out of memory in {}{snap}", r.oom_stage.as_deref().unwrap_or("the run"));
        if oom.len() == runs.len() {
            return Err(crate::error::DoesNotFit(msg).into());
        }
        println!("{} of {} runs ran out of memory (marked OOM in the tables and summary.json); the first: {msg}", oom.len(), runs.len());
    }
    Ok(())
}
