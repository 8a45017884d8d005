//! `vramscope sweep`: the session's sweep over the grid of the comma lists given to profile
//! flags, on meta by default; prints the table and fits and writes sweep.csv, sweep.json,
//! sweep.md and SVG plots (with `--snapshots`, each point's snapshot and report too).
use super::set_threads;
use crate::export::output_set::with_run_id_comment;
use crate::export::{write_atomic, write_json};
use crate::options::sweep::{plan, SweepArgs};
use crate::session::sweep::sweep;
use anyhow::Result;

pub fn run(a: SweepArgs) -> Result<()> {
    // The whole grid is validated before anything runs.
    let (axes, planned) = plan(&a)?;
    for p in &planned {
        if let Some(n) = &p.host_note {
            println!("grid point {}: {n}", p.label);
        }
    }
    set_threads(a.threads)?;
    // The whole set (tables, plots, points/) appears at the end or not at all.
    let set = super::outputs::begin_set("--out-dir", &a.out_dir)?;
    super::quiet_oom_panics();
    if let Some(n) = planned.iter().find_map(|p| p.options.note.clone()) {
        eprintln!("note: {n}");
    }
    let bar = crate::session::progress::points(planned.len());
    // The message names the point running now.
    let labels: Vec<String> = planned.iter().map(|p| p.label.clone()).collect();
    bar.set_message(labels.first().map_or("", |l| l.as_str()));
    let res = sweep(axes, &planned, |p, r| {
        p.save(r)?;
        bar.inc(1);
        bar.set_message(labels.get(bar.position() as usize).map_or("", |l| l.as_str()));
        Ok(())
    })?;
    bar.finish_and_clear();
    print!("{}", res.text(&a.device));
    write_json(&a.out_dir.join("sweep.json"), &res.json(&a.device, Some(set.run_id())))?;
    let mut written = vec!["sweep.csv".to_string(), "sweep.json".into()];
    for (name, bytes) in res.files(&a.device) {
        let bytes = if name.ends_with(".svg") { with_run_id_comment(bytes) } else { bytes };
        write_atomic(&a.out_dir.join(&name), &bytes)?;
        if name != "sweep.csv" {
            written.push(name);
        }
    }
    set.commit()?;
    println!("\nwrote {} in {}", written.join(", "), a.out_dir.display());
    let ooms = res.points.iter().filter(|r| r.oom.is_some()).count();
    if ooms > 0 && ooms == res.points.len() {
        // Exit 3 only when every point ran out of memory (crate::error::EXIT_CODES_HELP).
        return Err(crate::error::DoesNotFit(format!("every one of the {ooms} points ran out of memory (marked OOM in the table, sweep.csv and sweep.json)")).into());
    }
    if ooms > 0 {
        println!("{ooms} point(s) ran out of memory (marked OOM; left out of the fits; drawn as ✗ on the memory limit in the plots)");
    }
    Ok(())
}
