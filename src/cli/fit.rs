//! `vramscope fit`: the session's searches over meta profiles — the largest batch size or
//! longest context that fits a device, or (`--find world-size`) the fewest ranks per layout —
//! printed, or written as JSON.
use super::set_threads;
use crate::options::fit::{self, FitArgs};
use crate::session::fit::Find;
use anyhow::Result;

pub fn run(a: FitArgs) -> Result<()> {
    super::json_out::check(a.json.as_deref())?;
    let note = |n: &str| eprintln!("note: {n}");
    if a.find == Find::WorldSize {
        let plan = fit::world_plan(&a, note)?;
        set_threads(None)?;
        super::quiet_oom_panics();
        let answers = plan.search(|layout, n| fit::world_probe(&a, &plan, layout, n))?;
        if let Some(path) = &a.json {
            if super::json_out::write(path, &plan.json(&answers))? {
                return Ok(());
            }
        }
        print!("{}", plan.text(&answers));
        return Ok(());
    }
    let plan = fit::plan(&a, note)?;
    set_threads(None)?;
    super::quiet_oom_panics();
    let found = plan.search(|n| fit::probe(&a, &plan, n))?;
    if let Some(path) = &a.json {
        if super::json_out::write(path, &plan.json(&found))? {
            return Ok(());
        }
    }
    print!("{}", plan.text(&found));
    Ok(())
}
