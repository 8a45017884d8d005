//! The output checks every writing command makes before its long work starts: the folder
//! given by its flag exists or can be created, is a folder and can be written (a probe temp
//! file is created and removed), and a file flag does not name a folder. A failure is a usage
//! error naming the flag (exit 2).
use super::usage;
use crate::export::{atomic, OutputSet};
use anyhow::Result;
use std::path::Path;

/// Check `dir` and open the command's output set there (see `export::output_set`).
pub fn begin_set(flag: &str, dir: &Path) -> Result<OutputSet> {
    OutputSet::begin(dir).map_err(|e| usage(flag, e))
}

pub fn check_dir(flag: &str, dir: &Path) -> Result<()> {
    atomic::check_dir(dir).map_err(|e| usage(flag, e))
}

pub fn check_file(flag: &str, path: &Path) -> Result<()> {
    atomic::check_file(path).map_err(|e| usage(flag, e))
}
