//! Writers. Every file is written to a temporary path beside its target and renamed, so a
//! failed run never leaves a half-written file.
pub mod html;
pub mod chrome_trace;
pub mod pickle;
pub mod snapshot;
pub mod svg;

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating directory {}", dir.display()))?;
    let name = path.file_name().context("output path has no file name")?.to_string_lossy().into_owned();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let res = (|| -> Result<()> {
        let mut f = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut s = serde_json::to_string_pretty(value)?;
    s.push('\n');
    write_atomic(path, s.as_bytes())
}

/// Bytes as MiB (1024² bytes).
pub fn mib(bytes: impl Into<u64>) -> f64 {
    bytes.into() as f64 / (1024.0 * 1024.0)
}

/// Bytes as GiB (1024³ bytes).
pub fn gib(bytes: impl Into<u64>) -> f64 {
    bytes.into() as f64 / (1024.0 * 1024.0 * 1024.0)
}
