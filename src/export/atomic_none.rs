//! File writes in the browser build (wasm): the page has no file system, and its jobs return
//! their outputs as bytes (src/web), so a write that is reached anyway is an error saying so.
use anyhow::{bail, Result};
use std::path::Path;

const NO_FILES: &str = "the page writes no files (its outputs are returned as bytes)";

pub fn write_atomic(path: &Path, _bytes: &[u8]) -> Result<()> {
    bail!("writing {}: {NO_FILES}", path.display())
}

/// The folder a file lives in ("." for a bare name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

pub fn check_dir(dir: &Path) -> std::result::Result<(), String> {
    Err(format!("cannot write into {}: {NO_FILES}", dir.display()))
}

pub fn check_file(path: &Path) -> std::result::Result<(), String> {
    Err(format!("cannot write {}: {NO_FILES}", path.display()))
}
