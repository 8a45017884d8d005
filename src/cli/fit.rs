//! `vramscope fit`: the session's searches over meta profiles — the largest batch size or
//! longest context that fits a device, or (`--find world-size`) the fewest ranks per layout —
//! printed, or written as JSON.
use super::set_threads;
use crate::options::fit::{self, FitArgs};
use crate::session::fit::Find;
use crate::error::DoesNotFit;
use anyhow::Result;

pub fn run(a: FitArgs) -> Result<()> {
    super::json_out::check(a.json.as_deref())?;
    let note = |n: &str| eprintln!("note: {n}");
    if a.find == Find::WorldSize {
        let plan = fit::world_plan(&a, note)?;
        set_threads(None)?;
        super::quiet_oom_panics();
        let answers = plan.search(|layout, n| fit::world_probe(&a, &plan, layout, n))?;
        let none_fits = answers.iter().all(|x| x.world_size.is_none());
        let printed = match &a.json {
            Some(path) => super::json_out::write(path, &plan.json(&answers))?,
            None => false,
        };
        if !printed {
            print!("{}", plan.text(&answers));
        }
        // Exit 3 when no layout fits at any world size searched (crate::error::EXIT_CODES_HELP).
        if none_fits {
            return Err(DoesNotFit("no layout fits at any world size searched".into()).into());
        }
        return Ok(());
    }
    let plan = fit::plan(&a, note)?;
    set_threads(None)?;
    super::quiet_oom_panics();
    let found = plan.search(|n| fit::probe(&a, &plan, n))?;
    let printed = match &a.json {
        Some(path) => super::json_out::write(path, &plan.json(&found))?,
        None => false,
    };
    if !printed {
        print!("{}", plan.text(&found));
    }
    // Exit 3 when nothing fits, not even the search's first value (crate::error::EXIT_CODES_HELP).
    if found.answer.is_none() {
        let why = found.first_fail.as_ref().and_then(|p| p.oom.clone()).unwrap_or_default();
        return Err(DoesNotFit(format!("nothing fits: the first value tried, {}, already runs out of memory ({why})", plan.start)).into());
    }
    Ok(())
}
