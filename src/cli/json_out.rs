//! `--json [FILE]`, the same on `estimate` and `fit`: with FILE, the JSON is written there
//! (atomically) and the usual text is printed; with no value or `-`, the JSON alone goes to
//! stdout, so it can be piped.
use crate::export::write_json;
use anyhow::Result;
use std::path::Path;

/// Does this `--json` value mean stdout?
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Check a `--json FILE` before the work starts (a folder, or one that cannot be written
/// into, is a usage error).
pub fn check(path: Option<&Path>) -> Result<()> {
    match path {
        Some(p) if !is_stdout(p) => super::outputs::check_file("--json", p),
        _ => Ok(()),
    }
}

/// Print `value` to stdout or write it to `path` (saying so); true when it went to stdout.
pub fn write(path: &Path, value: &serde_json::Value) -> Result<bool> {
    if is_stdout(path) {
        println!("{}", serde_json::to_string_pretty(value)?);
        return Ok(true);
    }
    write_json(path, value)?;
    println!("wrote {} (JSON)", path.display());
    Ok(false)
}
