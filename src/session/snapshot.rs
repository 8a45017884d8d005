//! Snapshot pickles read back (ours or PyTorch's): `analyze`'s report of one, and `view`'s
//! offline HTML page of one or two, each within the input budgets.
use crate::analyse::budget::Budget;
use crate::analyse::snapshot::{analyse_replay, analyse_within, replay_condensed, unknown_actions, Alloc, SnapshotReport};
use crate::error::UsageError;
use crate::export::html::{self, Capacity, Capped, Source};
use crate::export::mib;
use crate::pickle::condense::{read_file_condensed, Refused};
use crate::pickle::{self, read_file, FileError};
use anyhow::Result;
use std::io::Write;
use std::path::Path;

/// Read a snapshot pickle within `budget`: content that is no snapshot, or over a budget,
/// is a usage error (exit 2); a file that cannot be read is a plain error.
pub fn load(path: &Path, budget: &Budget) -> Result<pickle::Value> {
    read_file(path, &budget.pickle_limits()).map_err(|e| file_error(path, e))
}

fn file_error(path: &Path, e: FileError) -> anyhow::Error {
    match e {
        FileError::Io(m) => anyhow::anyhow!(m),
        FileError::Pickle(e) => UsageError(format!("{}: not a readable snapshot pickle: {e}", path.display())).into(),
    }
}

/// `analyze`: replay the snapshot's trace (`device`: the one with the most events when
/// None) and report the peak, what is live at it, the largest `detail` percent of allocations
/// (`top` of them listed), fragmentation and OOMs.
pub fn analyze(path: &Path, device: Option<usize>, detail: f64, top: usize, budget: &Budget) -> Result<SnapshotReport> {
    if !(detail > 0.0 && detail <= 100.0) {
        return Err(UsageError(format!("invalid --detail: {detail} (expected a percentage in (0, 100])")).into());
    }
    let r = match read_file_condensed(path, &budget.pickle_limits(), budget.trace_entries, budget.frames) {
        Ok(c) => replay_condensed(c, device, budget).and_then(|rp| analyse_replay(&rp, detail, top)),
        // A shape the streaming reader does not take: the tree reader's answer.
        Err(Refused::Bail) => analyse_within(&load(path, budget)?, device, detail, top, budget),
        Err(Refused::File(e)) => return Err(file_error(path, e)),
    };
    let r = r.map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    warn_unknown(path, r.device, &r.unknown_actions);
    Ok(r)
}

/// Names, on stderr, the trace actions memory_viz does not know (both it and the replay
/// ignore them), so that none is skipped silently.
fn warn_unknown(path: &Path, device: usize, unknown: &[(String, usize)]) {
    for (a, n) in unknown {
        eprintln!(
            "warning: {}: device {device}: {n} trace entries with action '{a}', which memory_viz does not know: ignored, as memory_viz ignores them",
            path.display()
        );
    }
}

/// The report as pretty JSON, its frames formatted as they are written, within the output
/// budget.
pub fn report_json(r: &SnapshotReport, path: &Path, budget: &Budget) -> Result<String> {
    let mut w = Capped::new(budget.output_bytes);
    let mut b = std::io::BufWriter::with_capacity(1 << 16, &mut w);
    let res = serde_json::to_writer_pretty(&mut b, r).map_err(|e| e.to_string()).and_then(|()| b.flush().map_err(|e| e.to_string()));
    drop(b);
    if let Err(e) = res {
        return Err(UsageError(if w.over { format!("{}: JSON report larger than {} bytes (budget --max-output-bytes)", path.display(), budget.output_bytes) } else { e }).into());
    }
    Ok(String::from_utf8_lossy(&w.out).into_owned())
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

/// What `analyze` prints for the report of `path`.
pub fn report_text(r: &SnapshotReport, path: &Path, detail: f64, top: usize) -> String {
    let mut s = String::new();
    out!(s, "{} — device {}, {} trace events, {} allocations (MiB = 1024² B; sizes as requested, like memory_viz)", path.display(), r.device, r.events, r.allocations);
    out!(s,
        "peak active memory {:.2} MiB requested (tensor bytes, as memory_viz draws it; `profile`'s allocated adds block rounding) at {}",
        mib(r.peak_active_bytes),
        r.peak_at.map_or("the start of the trace".to_string(), |i| format!("event {i}{}", r.peak_time_us.map_or(String::new(), |t| format!(" (time_us {t})"))))
    );
    out!(s, "live at the peak by category:");
    for (c, b) in r.live_at_peak_by_category.iter().take(top) {
        out!(s, "  {:>10.2} MiB  {c}", mib(*b));
    }
    out!(s, "live at the peak by top frame:");
    for (f, b) in r.live_at_peak_by_frame.iter().take(top) {
        out!(s, "  {:>10.2} MiB  {f}", mib(*b));
    }
    out!(s, "largest allocations (top {}% by size, {} shown):", detail, r.largest.len());
    for l in &r.largest {
        out!(s, "  {}", show(l));
    }
    out!(s,
        "reserved {:.2} MiB, allocated {:.2} MiB at the end: {:.2} MiB cached but unused (reserved − allocated); peak reserved {:.2} MiB",
        mib(r.reserved_bytes_end),
        mib(r.allocated_bytes_end),
        mib(r.reserved_bytes_end.saturating_sub(r.allocated_bytes_end)),
        mib(r.peak_reserved_bytes)
    );
    for o in &r.ooms {
        out!(s,
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
    s
}

/// `view`: the offline HTML page of one snapshot, or two side by side on one scale; `device`
/// picks the trace shown, `capacity` draws the device's line.
pub fn view_page(files: &[&Path], device: Option<usize>, capacity: Option<Capacity>, budget: &Budget) -> Result<Vec<u8>> {
    // `view` names an unreadable FILE as the user's mistake too (exit 2), as it always has.
    let snaps = files.iter().map(|f| load(f, budget).map_err(|e| if e.is::<UsageError>() { e } else { UsageError(e.to_string()).into() })).collect::<Result<Vec<_>>>()?;
    if let Some(d) = device {
        for (f, s) in files.iter().zip(&snaps) {
            let n = s.get("device_traces").and_then(pickle::Value::as_list).map_or(0, <[pickle::Value]>::len).max(1);
            if d >= n {
                return Err(crate::error::usage("--device", format!("{d}: {} has traces for devices 0..{}", f.display(), n - 1)));
            }
        }
    }
    for (f, s) in files.iter().zip(&snaps) {
        let unknown = unknown_actions(s, device).map_err(|e| UsageError(format!("{}: {e}", f.display())))?;
        let d = device.unwrap_or_else(|| crate::analyse::snapshot::default_device_of(s));
        warn_unknown(f, d, &unknown);
    }
    let sources: Vec<Source> = files
        .iter()
        .zip(&snaps)
        .map(|(f, s)| Source { name: f.file_name().map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into_owned()), snapshot: s, device, stats: None })
        .collect();
    html::report_within(&sources, capacity, budget).map_err(|e| UsageError(e).into())
}
