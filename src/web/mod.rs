//! The jobs the static page (web/) runs, from the command line's words: parsed by the CLI's
//! own clap definitions (the same flags, defaults and error messages), run by the session jobs
//! on the meta device, with what the command line prints and writes returned instead: the text,
//! the JSON answer (profile's summary.json, fit's and estimate's `--json`, compare.json,
//! sweep.json) and the files as bytes (snapshot pickles, HTML reports, sweep's CSV and plots).
//! Plain Rust, so native tests hold it to the command line; `abi` exports it to JavaScript
//! when built with the `wasm` feature for wasm.
#[cfg(all(feature = "wasm", target_family = "wasm"))]
pub mod abi;
pub mod pasted;

use crate::cli::{Cli, Command};
use crate::error::{usage, DoesNotFit, ExitCode};
use crate::options;
use crate::session;
use anyhow::Result;
use clap::Parser;
use serde_json::{json, Value};

/// What one command gave: its exit code (the command line's), the text it prints, its notes
/// (the command line's `note:` lines), its JSON answer and its files.
#[derive(Default)]
pub struct Outcome {
    pub exit_code: i32,
    /// stdout's text, or clap's whole message for `--help` and a flag clap refused.
    pub text: String,
    /// The command line's stderr line for a failed command (`error: …`, `does not fit: …`).
    pub error: Option<String>,
    pub notes: Vec<String>,
    pub answer: Option<Value>,
    pub files: Vec<(String, Vec<u8>)>,
}

impl Outcome {
    /// Everything but the files' bytes, for the page: `files` lists their names and sizes.
    pub fn json(&self) -> Value {
        json!({
            "exit_code": self.exit_code,
            "text": self.text,
            "error": self.error,
            "notes": self.notes,
            "answer": self.answer,
            "files": self.files.iter().map(|(n, b)| json!({"name": n, "bytes": b.len()})).collect::<Vec<_>>(),
        })
    }
}

/// What the page asks: the command line's words (without `vramscope`) and the pasted files as
/// `[name, text]` pairs, by the name the flags give them.
#[derive(serde::Deserialize)]
pub struct Request {
    pub words: Vec<String>,
    #[serde(default)]
    pub files: Vec<(String, String)>,
}

/// Runs a request's JSON; a request that is not one (the page's bug) is exit code 1.
pub fn run_request(json: &[u8]) -> Outcome {
    match serde_json::from_slice::<Request>(json) {
        Ok(r) => run(&r.words, &r.files),
        Err(e) => Outcome { exit_code: ExitCode::Failure.code(), error: Some(format!("internal error: the page's request is not one: {e}")), ..Outcome::default() },
    }
}

/// What the page reads back: 8 bytes of little-endian length of [`Outcome::json`]'s text, that
/// text, then the files' bytes one after another in the order (and of the sizes) it lists.
pub fn frame(out: &Outcome) -> Vec<u8> {
    let head = out.json().to_string().into_bytes();
    let mut b = Vec::with_capacity(8 + head.len() + out.files.iter().map(|(_, f)| f.len()).sum::<usize>());
    b.extend_from_slice(&(head.len() as u64).to_le_bytes());
    b.extend_from_slice(&head);
    for (_, f) in &out.files {
        b.extend_from_slice(f);
    }
    b
}

/// A panic's outcome: a bug, reported as the command line's panic would be, exit code 1.
pub fn internal_error(payload: &(dyn std::any::Any + Send)) -> Outcome {
    let msg = payload.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| payload.downcast_ref::<String>().cloned()).unwrap_or_else(|| "a panic".into());
    Outcome { exit_code: ExitCode::Failure.code(), error: Some(format!("internal error: {msg}")), ..Outcome::default() }
}

/// The `--help` text of a subcommand (or of vramscope with ""), for the page's flag list.
pub fn help(subcommand: &str) -> String {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    match cmd.find_subcommand_mut(subcommand) {
        Some(s) => s.render_long_help().to_string(),
        None => cmd.render_long_help().to_string(),
    }
}

/// The subcommands the page runs; the others read or write files, or run real numerics.
const ON_THE_PAGE: &str = "profile (and profile --compare), sweep, fit and estimate";

/// Run the command line `words` (without the program's name). `pasted` holds the files the
/// user pasted or dropped, by the name the flags give them (`--config config.json`).
pub fn run(words: &[String], pasted: &[(String, String)]) -> Outcome {
    let cli = match Cli::try_parse_from(std::iter::once("vramscope".to_string()).chain(words.iter().cloned())) {
        Ok(c) => c,
        // `--help` and `--version` (exit 0, stdout) and clap's refusals (exit 2, stderr), in
        // clap's words.
        Err(e) => {
            let msg = e.render().to_string();
            let (text, error) = if e.use_stderr() { (String::new(), Some(msg.trim_end().to_string())) } else { (msg, None) };
            return Outcome { exit_code: e.exit_code(), text, error, ..Outcome::default() };
        }
    };
    let _files = pasted::Scope::set(pasted);
    session::quiet_oom_panics();
    let mut out = Outcome::default();
    let r = dispatch(cli, &mut out);
    let code = ExitCode::of(&r);
    if let Err(e) = r {
        out.error = Some(match code {
            ExitCode::DoesNotFit => format!("does not fit: {e:#}"),
            _ => format!("error: {e:#}"),
        });
    }
    out.exit_code = code.code();
    if code == ExitCode::Usage {
        // Nothing is written on a usage error, as on the command line.
        out.files.clear();
        out.answer = None;
    }
    out
}

fn dispatch(cli: Cli, out: &mut Outcome) -> Result<()> {
    match cli.command {
        Command::Profile(a) if a.compare => compare(&a, out),
        Command::Profile(a) => profile(a, out),
        Command::Sweep(a) => sweep(a, out),
        Command::Fit(a) => fit(a, out),
        Command::Estimate(a) => estimate(a, out),
        other => {
            let name = format!("{other:?}");
            let name = name.split('(').next().unwrap_or_default().to_ascii_lowercase();
            Err(crate::error::UsageError(format!("the page runs {ON_THE_PAGE}; '{name}' needs the command line")).into())
        }
    }
}

/// The page runs shapes only: real numerics (cpu) and its thread pool are the command line's.
fn meta_only(device: &str, threads: Option<usize>) -> Result<()> {
    if options::parse_device(device)? != crate::engine::Device::Meta {
        return Err(usage("--device", format!("'{device}': the page runs the meta device only (shapes, no numerics); --device cpu needs the command line")));
    }
    if threads.is_some() {
        return Err(usage("--threads", "the page runs on one thread; --threads sizes the command line's cpu device"));
    }
    Ok(())
}

/// The command line's thread pool where there are threads; the browser's wasm has none, and
/// rayon runs its work on the calling thread there.
fn begin() -> Result<()> {
    #[cfg(not(target_family = "wasm"))]
    session::set_threads(None)?;
    Ok(())
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().map_or_else(|| "snapshot.pickle".into(), |n| n.to_string_lossy().into_owned())
}

/// A run's snapshot pickle and report under the names the command line gives them, recorded in
/// the run as the command line's `save_files` does.
fn keep_files(p: &session::ProfileOptions, snapshot: &std::path::Path, r: &mut session::Run, files: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
    let Some(snap) = r.snapshot_value() else { return Ok(()) };
    let name = file_name(snapshot);
    let report = file_name(&crate::export::html::report_path(snapshot, None));
    files.push((name.clone(), crate::pickle::write(&snap)));
    files.push((report.clone(), r.report_page(&name, p.capacity_line())?));
    r.snapshot = Some(name.into());
    r.report_html = Some(report.into());
    r.trace = None;
    Ok(())
}

fn profile(a: options::profile::ProfileArgs, out: &mut Outcome) -> Result<()> {
    meta_only(&a.device, a.threads)?;
    let mut p = options::profile::options(&a)?;
    out.notes.extend(p.note.clone());
    if let Some(n) = p.host_fallback(&a.profile_type)? {
        out.text.push_str(&format!("{n}\n"));
        p.device = crate::engine::Device::Meta;
    }
    begin()?;
    let ranks = p.ranks(a.parallel.rank.is_some())?;
    let mut files = Vec::new();
    let runs = session::profile::profile_all(&mut p, &a.profile_type, &ranks, |p, r| {
        if p.keep_trace {
            let path = a.output.clone().unwrap_or_else(|| p.snapshot_path(std::path::Path::new(""), r));
            keep_files(p, &path, r, &mut files)?;
        }
        out.text.push_str(&session::text::profile::run(p, r, a.flops_depth));
        Ok(())
    })?;
    if ranks.len() > 1 {
        out.text.push_str(&session::text::profile::ranks_table(&runs));
    }
    if runs.len() > 1 && ranks.len() == 1 {
        out.text.push_str(&session::text::profile::contexts_table(&p.contexts, &a.profile_type, &runs));
    }
    let summary = session::summary::profile(&p, &a.profile_type, &ranks, &runs, None);
    files.push(("summary.json".into(), json_bytes(&summary)));
    out.answer = Some(summary);
    out.files = files;
    let oom: Vec<&session::Run> = runs.iter().filter(|r| r.oom.is_some()).collect();
    if let Some(r) = oom.first() {
        let snap = r.snapshot.as_ref().map_or(String::new(), |s| format!("; snapshot of the history up to the failing allocation: {}", s.display()));
        let msg = format!("out of memory in {}{snap}", r.oom_stage.as_deref().unwrap_or("the run"));
        if oom.len() == runs.len() {
            return Err(DoesNotFit(msg).into());
        }
        out.text.push_str(&format!("{} of {} runs ran out of memory (marked OOM in the tables and summary.json); the first: {msg}\n", oom.len(), runs.len()));
    }
    Ok(())
}

fn compare(a: &options::profile::ProfileArgs, out: &mut Outcome) -> Result<()> {
    meta_only(&a.device, a.threads)?;
    let (vs, notes) = options::compare::variants_of(a)?;
    for n in notes {
        out.text.push_str(&format!("{n}\n"));
    }
    begin()?;
    let mut files = Vec::new();
    let c = session::compare::compare(&vs, &a.profile_type, a.parallel.world_size.is_some(), |v, r| {
        keep_files(&v.options, &v.snapshot_path(std::path::Path::new(""), r), r, &mut files)
    })?;
    out.text.push_str(&c.markdown);
    files.push(("compare.md".into(), c.markdown.trim_start().as_bytes().to_vec()));
    let j = c.json(None);
    files.push(("compare.json".into(), json_bytes(&j)));
    out.answer = Some(j);
    out.files = files;
    let ooms = c.rows.iter().filter(|r| !r["oom"].is_null()).count();
    if ooms == c.rows.len() {
        return Err(DoesNotFit(format!("every one of the {ooms} runs ran out of memory (marked OOM in compare.md)")).into());
    }
    if ooms > 0 {
        out.text.push_str(&format!("{ooms} of {} runs ran out of memory (marked OOM in the tables)\n", c.rows.len()));
    }
    Ok(())
}

fn sweep(a: options::sweep::SweepArgs, out: &mut Outcome) -> Result<()> {
    meta_only(&a.device, a.threads)?;
    if a.snapshots {
        return Err(usage("--snapshots", "the page returns the sweep's tables and plots; a snapshot per grid point needs the command line"));
    }
    let (axes, planned) = options::sweep::plan(&a)?;
    for p in &planned {
        if let Some(n) = &p.host_note {
            out.text.push_str(&format!("grid point {}: {n}\n", p.label));
        }
    }
    out.notes.extend(planned.iter().find_map(|p| p.options.note.clone()));
    begin()?;
    let res = session::sweep::sweep(axes, &planned, |_, _| Ok(()))?;
    out.text.push_str(&res.text(&a.device));
    let j = res.json(&a.device, None);
    let mut files = vec![("sweep.json".to_string(), json_bytes(&j))];
    files.extend(res.files(&a.device));
    out.answer = Some(j);
    out.files = files;
    let ooms = res.points.iter().filter(|r| r.oom.is_some()).count();
    if ooms > 0 && ooms == res.points.len() {
        return Err(DoesNotFit(format!("every one of the {ooms} points ran out of memory (marked OOM in the table, sweep.csv and sweep.json)")).into());
    }
    if ooms > 0 {
        out.text.push_str(&format!("{ooms} point(s) ran out of memory (marked OOM; left out of the fits; drawn as ✗ on the memory limit in the plots)\n"));
    }
    Ok(())
}

fn fit(a: options::fit::FitArgs, out: &mut Outcome) -> Result<()> {
    let mut notes = Vec::new();
    if a.find == session::fit::Find::WorldSize {
        let plan = options::fit::world_plan(&a, |n| notes.push(n.to_string()))?;
        out.notes = notes;
        begin()?;
        let answers = plan.search(|layout, n| options::fit::world_probe(&a, &plan, layout, n))?;
        out.text = plan.text(&answers);
        out.answer = Some(plan.json(&answers));
        if answers.iter().all(|x| x.world_size.is_none()) {
            return Err(DoesNotFit("no layout fits at any world size searched".into()).into());
        }
        return Ok(());
    }
    let plan = options::fit::plan(&a, |n| notes.push(n.to_string()))?;
    out.notes = notes;
    begin()?;
    let found = plan.search(|n| options::fit::probe(&a, &plan, n))?;
    out.text = plan.text(&found);
    out.answer = Some(plan.json(&found));
    if found.answer.is_none() {
        let why = found.first_fail.as_ref().and_then(|p| p.oom.clone()).unwrap_or_default();
        return Err(DoesNotFit(format!("nothing fits: the first value tried, {}, already runs out of memory ({why})", plan.start)).into());
    }
    Ok(())
}

fn estimate(a: options::estimate::EstimateArgs, out: &mut Outcome) -> Result<()> {
    let mut notes = Vec::new();
    if a.profile_type == session::profile::ProfileType::Generate {
        let plan = options::estimate_generate::plan(&a, |n| notes.push(n.to_string()))?;
        out.notes = notes;
        begin()?;
        let r = plan.run()?;
        out.text = plan.text(&r);
        out.answer = Some(plan.json(&r));
        return Ok(());
    }
    let plan = options::estimate::plan(&a, |n| notes.push(n.to_string()))?;
    out.notes = notes;
    begin()?;
    let r = plan.run()?;
    out.text = plan.text(&r);
    out.answer = Some(plan.json(&r));
    Ok(())
}

/// JSON as `export::write_json` writes it.
fn json_bytes(v: &Value) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s.into_bytes()
}
