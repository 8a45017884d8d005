//! `vramscope view FILE [FILE2]`: the session's offline HTML report of a snapshot pickle
//! (ours or PyTorch's), or of two side by side on one scale, written beside FILE.
use super::usage;
use crate::export::html::report_path;
use crate::export::write_atomic;
use crate::options::snapshot::ViewArgs;
use anyhow::Result;
use std::path::{Path, PathBuf};

pub fn run(a: ViewArgs) -> Result<()> {
    let capacity = a.capacity()?;
    let output = a.output.clone().unwrap_or_else(|| report_path(&a.file, a.file2.as_deref()));
    super::outputs::check_file("--output", &output)?;
    let files: Vec<&PathBuf> = std::iter::once(&a.file).chain(a.file2.as_ref()).collect();
    // The report must never replace a snapshot it reads (same file by any path or link).
    for f in &files {
        if same_file(f, &output) {
            return Err(usage("--output", format!("{} is the input snapshot {}; name another file for the report", output.display(), f.display())));
        }
    }
    let files: Vec<&Path> = files.iter().map(|f| f.as_path()).collect();
    let page = crate::session::snapshot::view_page(&files, a.device, capacity, &a.budget.budget())?;
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
