//! `vramscope estimate`: the session's closed-form memory of a configuration with its
//! derivation, printed beside a simulated meta run of it and the gap (or as JSON).
use crate::options::estimate::{plan, EstimateArgs};
use anyhow::Result;

pub fn run(a: EstimateArgs) -> Result<()> {
    super::json_out::check(a.json.as_deref())?;
    if a.profile_type == crate::session::profile::ProfileType::Generate {
        let plan = crate::options::estimate_generate::plan(&a, |n| eprintln!("note: {n}"))?;
        let r = plan.run()?;
        if !a.json.as_deref().is_some_and(super::json_out::is_stdout) {
            print!("{}", plan.text(&r));
        }
        if let Some(path) = &a.json {
            super::json_out::write(path, &plan.json(&r))?;
        }
        return Ok(());
    }
    let plan = plan(&a, |n| eprintln!("note: {n}"))?;
    let r = plan.run()?;
    if !a.json.as_deref().is_some_and(super::json_out::is_stdout) {
        print!("{}", plan.text(&r));
    }
    if let Some(path) = &a.json {
        super::json_out::write(path, &plan.json(&r))?;
    }
    Ok(())
}
