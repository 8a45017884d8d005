//! Writers. Every file is written whole or not at all (`atomic`), and a command's files
//! together as one set (`output_set`); an interrupted run leaves no temp files (`cleanup`).
#[cfg(not(target_family = "wasm"))]
pub mod atomic;
/// The browser build has no file system: writes are errors there (src/web returns bytes).
#[cfg(target_family = "wasm")]
#[path = "atomic_none.rs"]
pub mod atomic;
pub mod chrome_trace;
pub mod cleanup;
pub mod html;
pub mod output_set;
pub mod snapshot;
pub mod svg;
pub mod sweep;
pub mod text;
pub mod compare;

pub use atomic::write_atomic;
pub use output_set::{staged_path, OutputSet};

use anyhow::Result;
use std::path::Path;

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
