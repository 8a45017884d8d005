//! The Python package's native module, `vramscope._vramscope` (feature `python`, built by
//! maturin): the command line's flags in, the library's results out. Keyword arguments become
//! the same flags (`python/vramscope/__init__.py`), so defaults, checks and error messages are
//! the command line's; a flag's error is a ValueError, anything else a RuntimeError.
use crate::cli::profile::{self as cli_profile, ProfileArgs};
use crate::cli::UsageError;
use crate::session::{self, ProfileOptions, Run};
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;

fn py_err(e: anyhow::Error) -> PyErr {
    if e.downcast_ref::<UsageError>().is_some() {
        PyValueError::new_err(format!("{e:#}"))
    } else {
        PyRuntimeError::new_err(format!("{e:#}"))
    }
}

/// `vramscope ARGS…` in this process (the `vramscope` console script); the exit code.
#[pyfunction]
fn main(argv: Vec<String>) -> i32 {
    use clap::Parser;
    crate::engine::host::keep_freed_memory();
    match crate::cli::Cli::try_parse_from(argv) {
        Ok(cli) => crate::cli::run(cli),
        Err(e) => {
            let _ = e.print();
            e.exit_code()
        }
    }
}

/// A subcommand run for its files (`--json`, `--out-dir`); its error raised.
#[pyfunction]
fn run_command(argv: Vec<String>) -> PyResult<()> {
    use clap::Parser;
    let cli = crate::cli::Cli::try_parse_from(argv).map_err(|e| PyValueError::new_err(e.to_string().trim_start_matches("error: ").trim_end().to_string()))?;
    let res = crate::cli::dispatch(cli);
    // Python restores its stdout next: what Rust buffered goes where the command wrote.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    res.map_err(py_err)
}

/// A profile's runs, their traces kept for the snapshot and the report.
#[pyclass(unsendable, module = "vramscope._vramscope")]
struct Profile {
    options: ProfileOptions,
    runs: Vec<Run>,
    summary: String,
    notes: Vec<String>,
}

impl Profile {
    fn out_of_range(&self, i: usize) -> PyErr {
        PyIndexError::new_err(format!("run {i} of {}", self.runs.len()))
    }
    fn run_mut(&mut self, i: usize) -> PyResult<&mut Run> {
        let e = self.out_of_range(i);
        self.runs.get_mut(i).ok_or(e)
    }
}

#[pymethods]
impl Profile {
    /// summary.json's object, as JSON text.
    fn summary_json(&self) -> String {
        self.summary.clone()
    }
    /// What the command line prints as notes (a config's dtype, a cpu run moved to meta).
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
    fn save_snapshot(&mut self, i: usize, path: PathBuf) -> PyResult<()> {
        self.run_mut(i)?.save_snapshot(&path).map_err(py_err)
    }
    fn save_report(&mut self, i: usize, path: PathBuf) -> PyResult<()> {
        let cap = self.options.capacity_line();
        let name = path.file_stem().map_or_else(|| "snapshot".into(), |s| s.to_string_lossy().into_owned());
        self.run_mut(i)?.save_report(&path, &name, cap).map_err(py_err)
    }
    /// The offline HTML report of run `i`, as text.
    fn report_html(&self, i: usize, name: String) -> PyResult<String> {
        let run = self.runs.get(i).ok_or_else(|| self.out_of_range(i))?;
        let page = run.report_page(&name, self.options.capacity_line()).map_err(py_err)?;
        String::from_utf8(page).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }
}

/// `vramscope profile FLAGS…` without printing or writing files.
#[pyfunction]
fn profile(words: Vec<String>) -> PyResult<Profile> {
    let a: ProfileArgs = ProfileArgs::parse_words(&words).map_err(PyValueError::new_err)?;
    if a.compare {
        return Err(PyValueError::new_err("invalid compare: use vramscope.compare(...)"));
    }
    let mut p = cli_profile::plan(&a).map_err(py_err)?;
    let mut notes: Vec<String> = p.note.iter().cloned().collect();
    if let Some(n) = cli_profile::meta_if_host_too_small(&p, &a.profile_type).map_err(py_err)? {
        notes.push(n);
        p.device = crate::engine::Device::Meta;
    }
    crate::cli::set_threads(a.threads).map_err(py_err)?;
    crate::cli::quiet_oom_panics();
    let ranks = p.ranks(a.parallel.rank.is_some()).map_err(py_err)?;
    let runs = session::profile::profile_all(&mut p, &a.profile_type, &ranks, |_, _| Ok(())).map_err(py_err)?;
    let summary = session::summary::profile(&p, &a.profile_type, &ranks, &runs, None).to_string();
    Ok(Profile { options: p, runs, summary, notes })
}

#[pymodule]
fn _vramscope(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(run_command, m)?)?;
    m.add_function(wrap_pyfunction!(profile, m)?)?;
    m.add_class::<Profile>()?;
    Ok(())
}
