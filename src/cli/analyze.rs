//! `vramscope analyze FILE`: reads a memory snapshot pickle — ours or one PyTorch wrote —
//! with our own safe reader, replays its trace and prints the peak and what was live at
//! it, the largest allocations with their frames, fragmentation and OOM context.
use crate::options::budget::{load, BudgetArgs};
use super::UsageError;
use crate::analyse::snapshot::{analyse_within, Alloc};
use crate::export::html::Capped;
use crate::export::mib;
use anyhow::Result;
use std::io::Write;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct AnalyzeArgs {
    /// A snapshot pickle (torch.cuda.memory._dump_snapshot or vramscope profile)
    pub file: PathBuf,
    /// Device whose trace to analyse (default: the one with the most events)
    #[arg(long)]
    pub device: Option<usize>,
    /// Keep the largest PERCENT of allocations, like memory_viz's Detail slider
    #[arg(long, default_value_t = 100.0)]
    pub detail: f64,
    /// How many of the largest allocations and live groups to list
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub budget: BudgetArgs,
}

fn show(a: &Alloc) -> String {
    let when = match (a.alloc_at, a.free_at) {
        (Some(x), Some(f)) => format!("events {x}..{f}"),
        (Some(x), None) => format!("event {x}, live at the end"),
        (None, Some(f)) => format!("before the trace..{f}"),
        (None, None) => "live throughout".into(),
    };
    format!(
        "{:>10.2} MiB  {}{} [{when}]",
        mib(a.size),
        a.category.as_deref().map_or(String::new(), |c| format!("({c}) ")),
        a.frames.head(3)
    )
}

pub fn run(a: AnalyzeArgs) -> Result<()> {
    if !(a.detail > 0.0 && a.detail <= 100.0) {
        return Err(UsageError(format!("invalid --detail: {} (expected a percentage in (0, 100])", a.detail)).into());
    }
    let budget = a.budget.budget();
    let snap = load(&a.file, &budget)?;
    let r = analyse_within(&snap, a.device, a.detail, a.top, &budget).map_err(|e| UsageError(format!("{}: {e}", a.file.display())))?;
    if a.json {
        // Frames are formatted as they are written, within the output budget.
        let mut w = Capped::new(budget.output_bytes);
        let mut b = std::io::BufWriter::with_capacity(1 << 16, &mut w);
        let res = serde_json::to_writer_pretty(&mut b, &r).map_err(|e| e.to_string()).and_then(|()| b.flush().map_err(|e| e.to_string()));
        drop(b);
        if let Err(e) = res {
            return Err(UsageError(if w.over { format!("{}: JSON report larger than {} bytes (budget --max-output-bytes)", a.file.display(), budget.output_bytes) } else { e }).into());
        }
        println!("{}", String::from_utf8_lossy(&w.out));
        return Ok(());
    }
    println!("{} — device {}, {} trace events, {} allocations (MiB = 1024² B; sizes as requested, like memory_viz)", a.file.display(), r.device, r.events, r.allocations);
    println!(
        "peak active memory {:.2} MiB requested (tensor bytes, as memory_viz draws it; `profile`'s allocated adds block rounding) at {}",
        mib(r.peak_active_bytes),
        r.peak_at.map_or("the start of the trace".to_string(), |i| format!("event {i}{}", r.peak_time_us.map_or(String::new(), |t| format!(" (time_us {t})"))))
    );
    println!("live at the peak by category:");
    for (c, b) in r.live_at_peak_by_category.iter().take(a.top) {
        println!("  {:>10.2} MiB  {c}", mib(*b));
    }
    println!("live at the peak by top frame:");
    for (f, b) in r.live_at_peak_by_frame.iter().take(a.top) {
        println!("  {:>10.2} MiB  {f}", mib(*b));
    }
    println!("largest allocations (top {}% by size, {} shown):", a.detail, r.largest.len());
    for l in &r.largest {
        println!("  {}", show(l));
    }
    println!(
        "reserved {:.2} MiB, allocated {:.2} MiB at the end: {:.2} MiB cached but unused (reserved − allocated); peak reserved {:.2} MiB",
        mib(r.reserved_bytes_end),
        mib(r.allocated_bytes_end),
        mib(r.reserved_bytes_end.saturating_sub(r.allocated_bytes_end)),
        mib(r.peak_reserved_bytes)
    );
    for o in &r.ooms {
        println!(
            "OUT OF MEMORY at event {}: tried to allocate {:.2} MiB with {:.2} MiB free on the device, {:.2} MiB active; {}: {}",
            o.at,
            mib(o.requested_segment_bytes),
            mib(o.device_free_bytes),
            mib(o.active_bytes),
            // The entry's own context when the writer recorded one (PyTorch does), else the
            // allocation before it.
            if o.frames.is_empty() { "last allocation" } else { "requested by" },
            if o.frames.is_empty() { &o.last_frames } else { &o.frames }.head(3)
        );
    }
    Ok(())
}
