//! `vramscope profile --compare`: the variants' tables printed and written (compare.md,
//! compare.json) with one snapshot and report per variant.
use super::set_threads;
use crate::export::{write_atomic, write_json};
use crate::options::profile::ProfileArgs;
use crate::options::compare::variants_of;
use crate::session::compare::compare;
use anyhow::Result;

pub fn run(a: &ProfileArgs) -> Result<()> {
    let (vs, notes) = variants_of(a)?;
    for n in notes {
        println!("{n}");
    }
    set_threads(a.threads)?;
    // The variants' snapshots and the tables appear together at the end, or not at all.
    let set = super::outputs::begin_set("--out-dir", &a.out_dir)?;
    super::quiet_oom_panics();
    let c = compare(&vs, &a.profile_type, a.parallel.world_size.is_some(), |v, r| {
        r.save_files(&v.options, &v.snapshot_path(&a.out_dir, r))
    })?;
    print!("{}", c.markdown);
    write_atomic(&a.out_dir.join("compare.md"), c.markdown.trim_start().as_bytes())?;
    write_json(&a.out_dir.join("compare.json"), &c.json(Some(set.run_id())))?;
    set.commit()?;
    println!("\nwrote compare.md, compare.json and one snapshot (+ HTML report) per variant to {}", a.out_dir.display());
    // Exit 3 only when every variant ran out of memory (crate::error::EXIT_CODES_HELP).
    let ooms = c.rows.iter().filter(|r| !r["oom"].is_null()).count();
    if ooms == c.rows.len() {
        return Err(crate::error::DoesNotFit(format!("every one of the {ooms} runs ran out of memory (marked OOM in compare.md)")).into());
    }
    if ooms > 0 {
        println!("{ooms} of {} runs ran out of memory (marked OOM in the tables)", c.rows.len());
    }
    Ok(())
}
