//! `bench profile-steps`: the peak RSS of `vramscope profile --device meta --model 2.7B
//! --measure-steps N` (context 512, the default `--max-entries`) at 100 and 400 steps, each
//! run as a child, beside issue 29's target (400 steps under 2 GB) and the growth per step.
//! What still grows per step is the run's event log (`MemoryLog::events`, one `MemEvent` per
//! alloc and free, read by the peak report); the snapshot's trace is a ring of
//! `--max-entries` and stops growing once full.
use super::analyze::{cpu_name, run_child, TARGET_RSS};
use anyhow::{Context, Result};
use std::io::Write;

pub fn bench(w: &mut dyn Write) -> Result<()> {
    let exe = std::env::current_exe().context("finding the vramscope executable")?;
    let tmp = crate::export::cleanup::PrivateDir::new_in(&std::env::temp_dir(), "vramscope-bench-profile-").context("creating a temp folder")?;
    let _ = writeln!(w, "profile --device meta --model 2.7B --measure-steps N (context 512, default --max-entries), peak RSS of the child:");
    let _ = writeln!(w, "  cpu: {}", cpu_name());
    let mut rows = Vec::new();
    for steps in [100u64, 400] {
        let out = tmp.path().join(format!("out{steps}"));
        let (n, o) = (steps.to_string(), out.to_string_lossy().into_owned());
        let c = run_child(&exe, &["profile", "--device", "meta", "--model", "2.7B", "--measure-steps", &n, "--out-dir", &o], tmp.path())?;
        anyhow::ensure!(c.code == 0, "profile --measure-steps {steps} failed (exit {}): {}", c.code, c.stderr.trim());
        let _ = writeln!(w, "  {steps:>4} steps: {:.2} s wall, peak RSS {:.2} GB", c.wall, c.max_rss as f64 / 1e9);
        rows.push(c.max_rss);
        let _ = std::fs::remove_dir_all(&out);
    }
    let per_step = (rows[1] as f64 - rows[0] as f64) / 300.0;
    let _ = writeln!(
        w,
        "  growth {:.2} MB per step (the event log); 400 steps {} the {:.0} GB target",
        per_step / 1e6,
        if rows[1] < TARGET_RSS { "meets" } else { "MISSES" },
        TARGET_RSS as f64 / 1e9
    );
    Ok(())
}
