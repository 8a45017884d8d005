//! The Python package's native module, `vramscope._vramscope` (feature `python`, built by
//! maturin): keyword arguments arrive as the jobs' flags (`python/vramscope/__init__.py`
//! turns them into words), are resolved by `options/` and run by `session/` — the command
//! line's own library calls, so defaults, checks and messages are the same. Results come back
//! as objects or JSON; files are written only where the caller asks. A flag's error is a
//! ValueError, anything else a RuntimeError (a Rust panic included); Ctrl-C interrupts a run.
use crate::error::UsageError;
use crate::options::{self, parse_words_detailed};
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

thread_local! {
    /// The KeyboardInterrupt (or other error) a signal handler raised mid-run.
    static PENDING: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// Whether Python's signal handlers asked the run to stop (Ctrl-C raises KeyboardInterrupt in
/// them); the error is kept for [`guarded`] to raise.
fn signalled() -> bool {
    match Python::attach(|py| py.check_signals()) {
        Ok(()) => false,
        Err(e) => {
            PENDING.with(|p| *p.borrow_mut() = Some(e));
            true
        }
    }
}

/// Run a job for Python: Ctrl-C interrupts it (KeyboardInterrupt), and a Rust panic becomes a
/// RuntimeError with its message instead of pyo3's PanicException (a BaseException that
/// `except Exception` does not catch).
fn guarded<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    session::quiet_oom_panics();
    crate::engine::runtime::set_interrupt_check(Some(signalled));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    crate::engine::runtime::set_interrupt_check(None);
    match r {
        Ok(r) => r,
        Err(payload) if payload.is::<crate::engine::runtime::Interrupted>() => {
            Err(PENDING.with(|p| p.borrow_mut().take()).unwrap_or_else(|| pyo3::exceptions::PyKeyboardInterrupt::new_err("interrupted")))
        }
        Err(payload) => {
            let msg = payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_else(|| "a panic without a message".into());
            Err(PyRuntimeError::new_err(format!("internal error in vramscope (please report it): {msg}")))
        }
    }
}

fn parse<T: clap::Args>(command: &'static str, words: &[String]) -> PyResult<T> {
    parse_words_detailed(command, words).map_err(PyValueError::new_err)
}

fn json_text(v: &serde_json::Value) -> String {
    v.to_string()
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

/// The keyword arguments of each function that takes a subcommand's flags, read off the clap
/// definitions (`options::keywords`), as JSON text: names, help, defaults, choices, shapes.
#[pyfunction]
fn keywords() -> String {
    options::keywords::json()
}

/// A profile's runs, their traces kept for the snapshot and the report.
#[pyclass(unsendable, module = "vramscope._vramscope")]
struct Profile {
    options: ProfileOptions,
    runs: Vec<Run>,
    summary: String,
    notes: Vec<String>,
    depth: usize,
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
    /// What the command line prints for run `i`.
    fn text(&self, i: usize) -> PyResult<String> {
        let run = self.runs.get(i).ok_or_else(|| self.out_of_range(i))?;
        guarded(|| Ok(session::text::profile::run(&self.options, run, self.depth)))
    }
    fn save_snapshot(&mut self, i: usize, path: PathBuf) -> PyResult<()> {
        let run = self.run_mut(i)?;
        guarded(|| run.save_snapshot(&path).map_err(py_err))
    }
    fn save_report(&mut self, i: usize, path: PathBuf) -> PyResult<()> {
        let cap = self.options.capacity_line();
        let name = path.file_stem().map_or_else(|| "snapshot".into(), |s| s.to_string_lossy().into_owned());
        let run = self.run_mut(i)?;
        guarded(|| run.save_report(&path, &name, cap).map_err(py_err))
    }
    /// The offline HTML report of run `i`, as text.
    fn report_html(&self, i: usize, name: String) -> PyResult<String> {
        let run = self.runs.get(i).ok_or_else(|| self.out_of_range(i))?;
        let page = guarded(|| run.report_page(&name, self.options.capacity_line()).map_err(py_err))?;
        String::from_utf8(page).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }
}

/// Process set-up every job needs: the thread pool, and quiet out-of-memory unwinds.
fn begin(threads: Option<usize>) -> PyResult<()> {
    session::set_threads(threads).map_err(py_err)?;
    session::quiet_oom_panics();
    Ok(())
}

/// `profile` with these flags: the runs kept in memory, nothing printed or written.
#[pyfunction]
fn profile(words: Vec<String>) -> PyResult<Profile> {
    guarded(|| profile_impl(words))
}

fn profile_impl(words: Vec<String>) -> PyResult<Profile> {
    let a: options::profile::ProfileArgs = parse("profile", &words)?;
    if a.compare {
        return Err(PyValueError::new_err("invalid compare: use vramscope.compare(...)"));
    }
    let mut p = options::profile::options(&a).map_err(py_err)?;
    let mut notes: Vec<String> = p.note.iter().cloned().collect();
    if let Some(n) = p.host_fallback(&a.profile_type).map_err(py_err)? {
        notes.push(n);
        p.device = crate::engine::Device::Meta;
    }
    begin(a.threads)?;
    let ranks = p.ranks(a.parallel.rank.is_some()).map_err(py_err)?;
    let runs = session::profile::profile_all(&mut p, &a.profile_type, &ranks, |_, _| Ok(())).map_err(py_err)?;
    let summary = session::summary::profile(&p, &a.profile_type, &ranks, &runs, None).to_string();
    Ok(Profile { options: p, runs, summary, notes, depth: a.flops_depth })
}

/// `profile --compare` with these flags: compare.json's object plus `markdown` (the tables)
/// and `notes`, as JSON text. With `out_dir`, each variant's snapshot and report go there.
#[pyfunction]
#[pyo3(signature = (words, out_dir=None))]
fn compare(words: Vec<String>, out_dir: Option<PathBuf>) -> PyResult<String> {
    guarded(|| compare_impl(words, out_dir))
}

fn compare_impl(words: Vec<String>, out_dir: Option<PathBuf>) -> PyResult<String> {
    let a: options::profile::ProfileArgs = parse("profile", &words)?;
    let (mut vs, notes) = options::compare::variants_of(&a).map_err(py_err)?;
    for v in &mut vs {
        v.options.keep_trace = out_dir.is_some();
    }
    begin(a.threads)?;
    let c = session::compare::compare(&vs, &a.profile_type, a.parallel.world_size.is_some(), |v, r| match &out_dir {
        Some(dir) => r.save_files(&v.options, &v.snapshot_path(dir, r)),
        None => Ok(()),
    })
    .map_err(py_err)?;
    let mut v = c.json(None);
    v["markdown"] = c.markdown.into();
    v["notes"] = serde_json::json!(notes);
    Ok(json_text(&v))
}

/// `sweep` with these flags: sweep.json's object, as JSON text. With `out_dir`, the sweep's
/// files (and, with `snapshots`, each point's) are written there as the command line does.
#[pyfunction]
#[pyo3(signature = (words, out_dir=None))]
fn sweep(words: Vec<String>, out_dir: Option<PathBuf>) -> PyResult<String> {
    guarded(|| sweep_impl(words, out_dir))
}

fn sweep_impl(words: Vec<String>, out_dir: Option<PathBuf>) -> PyResult<String> {
    let mut words = words;
    if let Some(d) = &out_dir {
        words.extend(["--out-dir".to_string(), d.display().to_string()]);
    }
    let a: options::sweep::SweepArgs = parse("sweep", &words)?;
    let (axes, mut planned) = options::sweep::plan(&a).map_err(py_err)?;
    if out_dir.is_none() {
        planned.iter_mut().for_each(|p| p.options.keep_trace = false);
    }
    begin(a.threads)?;
    let res = session::sweep::sweep(axes, &planned, |p, r| p.save(r))
        .map_err(py_err)?;
    let v = res.json(&a.device, None);
    if let Some(dir) = &out_dir {
        crate::export::write_json(&dir.join("sweep.json"), &v).map_err(py_err)?;
        for (name, bytes) in res.files(&a.device) {
            crate::export::write_atomic(&dir.join(name), &bytes).map_err(py_err)?;
        }
    }
    Ok(json_text(&v))
}

/// `fit` with these flags: fit's JSON object, as text (`--find world-size` included).
#[pyfunction]
fn fit(words: Vec<String>) -> PyResult<String> {
    guarded(|| fit_impl(words))
}

fn fit_impl(words: Vec<String>) -> PyResult<String> {
    let a: options::fit::FitArgs = parse("fit", &words)?;
    let v = if a.find == session::fit::Find::WorldSize {
        let plan = options::fit::world_plan(&a, |_| {}).map_err(py_err)?;
        begin(None)?;
        let answers = plan.search(|layout, n| options::fit::world_probe(&a, &plan, layout, n)).map_err(py_err)?;
        plan.json(&answers)
    } else {
        let plan = options::fit::plan(&a, |_| {}).map_err(py_err)?;
        begin(None)?;
        let found = plan.search(|n| options::fit::probe(&a, &plan, n)).map_err(py_err)?;
        plan.json(&found)
    };
    Ok(json_text(&v))
}

/// `estimate` with these flags: its JSON object (the closed form and the simulated run).
#[pyfunction]
fn estimate(words: Vec<String>) -> PyResult<String> {
    guarded(|| estimate_impl(words))
}

fn estimate_impl(words: Vec<String>) -> PyResult<String> {
    let a: options::estimate::EstimateArgs = parse("estimate", &words)?;
    if a.profile_type == session::profile::ProfileType::Generate {
        let plan = options::estimate_generate::plan(&a, |_| {}).map_err(py_err)?;
        begin(None)?;
        let r = plan.run().map_err(py_err)?;
        return Ok(json_text(&plan.json(&r)));
    }
    let plan = options::estimate::plan(&a, |_| {}).map_err(py_err)?;
    begin(None)?;
    let r = plan.run().map_err(py_err)?;
    Ok(json_text(&plan.json(&r)))
}

/// `analyze FILE` with these flags: the report's JSON, within the budgets.
#[pyfunction]
fn analyze(words: Vec<String>) -> PyResult<String> {
    guarded(|| analyze_impl(words))
}

fn analyze_impl(words: Vec<String>) -> PyResult<String> {
    let a: options::snapshot::AnalyzeArgs = parse("analyze", &words)?;
    let budget = a.budget.budget();
    let r = session::snapshot::analyze(&a.file, a.device, a.detail, a.top, &budget).map_err(py_err)?;
    session::snapshot::report_json(&r, &a.file, &budget).map_err(py_err)
}

/// `serve` with these flags: vLLM 0.33.0's start-up plan (or `--find`'s answer) as JSON text;
/// when vLLM would not start, `fits` is false and `error` holds its message.
#[pyfunction]
fn serve(words: Vec<String>) -> PyResult<String> {
    guarded(|| {
        let a: options::serve::ServeArgs = parse("serve", &words)?;
        let o = session::serve::outcome(&a).map_err(py_err)?;
        Ok(json_text(&o.json()))
    })
}

#[pymodule]
fn _vramscope(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(keywords, m)?)?;
    m.add_function(wrap_pyfunction!(profile, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(fit, m)?)?;
    m.add_function(wrap_pyfunction!(estimate, m)?)?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(serve, m)?)?;
    m.add_class::<Profile>()?;
    Ok(())
}
