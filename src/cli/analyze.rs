//! `vramscope analyze FILE`: reads a memory snapshot pickle (ours or one PyTorch wrote) with
//! our own safe reader, replays its trace and prints the session's report: the peak and what
//! was live at it, the largest allocations with their frames, fragmentation and OOM context.
use crate::options::snapshot::AnalyzeArgs;
use crate::session::snapshot::{analyze, report_json, report_text};
use anyhow::Result;

pub fn run(a: AnalyzeArgs) -> Result<()> {
    let budget = a.budget.budget();
    let r = analyze(&a.file, a.device, a.detail, a.top, &budget)?;
    if a.json {
        println!("{}", report_json(&r, &a.file, &budget)?);
    } else {
        print!("{}", report_text(&r, &a.file, a.detail, a.top));
    }
    Ok(())
}
