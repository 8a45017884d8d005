//! `vramscope view FILE [FILE2]`: the offline HTML report of a snapshot pickle (ours or
//! PyTorch's), or of two side by side on one scale.
use crate::options::budget::BudgetArgs;
use super::{usage, UsageError};
use crate::export::html::{self, Capacity, Source};
use crate::export::write_atomic;
use crate::pickle;
use crate::record::gpu;
use anyhow::Result;
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct ViewArgs {
    /// A snapshot pickle (torch.cuda.memory._dump_snapshot or vramscope profile)
    pub file: PathBuf,
    /// A second snapshot, shown beside the first on the same scale
    pub file2: Option<PathBuf>,
    /// The HTML file to write (default: beside FILE, `_snapshot.pickle` → `_report.html`)
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Device whose trace to show (default: the one with the most events)
    #[arg(long)]
    pub device: Option<usize>,
    /// Draw this GPU's capacity: H100-80GB, H200-141GB, A100-40GB, A100-80GB, MI250X-64GB,
    /// MI300X-192GB, RTX4090-24GB
    #[arg(long, conflicts_with = "memory_limit")]
    pub gpu: Option<String>,
    /// Draw this device capacity instead of a --gpu preset (e.g. 24GiB, 80GB)
    #[arg(long)]
    pub memory_limit: Option<String>,
    #[command(flatten)]
    pub budget: BudgetArgs,
}

/// `x_snapshot.pickle` → `x_report.html`; anything else → `<stem>_report.html`.
pub fn default_output(file: &Path, other: Option<&Path>) -> PathBuf {
    let stem = |p: &Path| {
        let s = p.file_stem().map_or_else(|| "snapshot".to_string(), |s| s.to_string_lossy().into_owned());
        s.strip_suffix("_snapshot").map(str::to_string).unwrap_or(s)
    };
    let name = match other {
        None => format!("{}_report.html", stem(file)),
        Some(o) => format!("{}_vs_{}_report.html", stem(file), stem(o)),
    };
    file.with_file_name(name)
}

pub fn run(a: ViewArgs) -> Result<()> {
    let capacity = match (&a.gpu, &a.memory_limit) {
        (Some(g), _) => {
            let g = gpu::find(g).map_err(|e| usage("--gpu", e))?;
            Some(Capacity { label: g.name.to_string(), bytes: g.memory_bytes as u64 })
        }
        (None, Some(m)) => Some(Capacity { label: "memory limit".into(), bytes: gpu::parse_size(m).map_err(|e| usage("--memory-limit", e))? as u64 }),
        (None, None) => None,
    };
    let output = a.output.clone().unwrap_or_else(|| default_output(&a.file, a.file2.as_deref()));
    super::outputs::check_file("--output", &output)?;
    let files: Vec<&PathBuf> = std::iter::once(&a.file).chain(a.file2.as_ref()).collect();
    // The report must never replace a snapshot it reads (same file by any path or link).
    for f in &files {
        if same_file(f, &output) {
            return Err(usage("--output", format!("{} is the input snapshot {}; name another file for the report", output.display(), f.display())));
        }
    }
    let budget = a.budget.budget();
    // `view` names an unreadable FILE as the user's mistake too (exit 2), as it always has.
    let snaps = files
        .iter()
        .map(|f| crate::options::budget::load(f, &budget).map_err(|e| if e.is::<UsageError>() { e } else { UsageError(e.to_string()).into() }))
        .collect::<Result<Vec<_>>>()?;
    if let Some(d) = a.device {
        for (f, s) in files.iter().zip(&snaps) {
            let n = s.get("device_traces").and_then(pickle::Value::as_list).map_or(0, <[pickle::Value]>::len).max(1);
            if d >= n {
                return Err(usage("--device", format!("{d}: {} has traces for devices 0..{}", f.display(), n - 1)));
            }
        }
    }
    let sources: Vec<Source> = files
        .iter()
        .zip(&snaps)
        .map(|(f, s)| Source {
            name: f.file_name().map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into_owned()),
            snapshot: s,
            device: a.device,
            stats: None,
        })
        .collect();
    let page = html::report_within(&sources, capacity, &budget).map_err(UsageError)?;
    write_atomic(&output, &page)?;
    println!("wrote {} ({:.1} MB; open it in a browser, it needs no network)", output.display(), page.len() as f64 / 1e6);
    Ok(())
}

/// Whether two paths name one existing file (compared after resolving links and `..`).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// The report beside a snapshot `vramscope profile` just wrote (`_snapshot.pickle` →
/// `_report.html`); returns its path.
pub fn write_beside(snapshot_path: &Path, snapshot: &pickle::Value, capacity: Option<Capacity>, stats: Option<serde_json::Value>) -> Result<PathBuf> {
    let name = snapshot_path.file_name().map_or_else(|| "snapshot".into(), |n| n.to_string_lossy().into_owned());
    // Built in memory by vramscope itself, not read from a file: no budget applies.
    let budget = crate::analyse::budget::Budget::unlimited();
    let page = html::report_within(&[Source { name, snapshot, device: None, stats }], capacity, &budget).map_err(anyhow::Error::msg)?;
    let page = crate::export::output_set::with_run_id_comment(page);
    let out = default_output(snapshot_path, None);
    write_atomic(&out, &page)?;
    Ok(out)
}
