//! The README and the book under `docs/` (every `*.md`, recursively, but `docs/reference/`,
//! which is generated from the command line's help and has its own drift test) are run and
//! checked, so that what they say stays what the tool does:
//!
//! - **Commands.** Every command in a page's `sh` code blocks runs, in order, in one scratch
//!   folder per page (so a command can read what an earlier one on the page wrote, as a reader
//!   following the page would), and exits 0. Commands that would take minutes on CI's two cores
//!   run with fewer steps; each such change is listed in `SHORTER` with its reason, and nothing
//!   else is altered.
//! - **Figures.** A block (the paragraph, table, list or fenced block right after it) may be
//!   preceded by `<!-- check: ARGS -->` (run `vramscope ARGS`; `ARGS => FILE` also reads FILE,
//!   which the command wrote, relative to its folder) or `<!-- check-script: tools/X.py ARGS -->`
//!   (run that generator with `--bin` this build). GitHub does not show these comments. Every
//!   figure in the block — a number with a decimal point or digit grouping (`65.532`,
//!   `8,030,261,248`), and any number in a table cell but the first — must appear in the
//!   commands' output, exactly or as that output rounded to the figure's decimals. So a figure
//!   that drifts fails here.
//! - **Every figure is accounted for.** A number with a decimal point or digit grouping that is
//!   followed by a unit (`GiB`, `MiB`, `KiB`, `GB`, `MB`, `B`, `%`) must sit in a checked block, or
//!   in one preceded by `<!-- source: PATH … -->`, naming the test or fixture that pins it (the
//!   path must exist): measurements of PyTorch itself, which no command here reproduces.
//! - **Links.** Every relative link resolves to a file in the repository (links into
//!   `docs/reference/` only once that folder exists: another change generates it).
//! - **The picture.** The SVG the README shows is what `sweep` draws today.
mod scratch;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Flag values set (or added) for speed, by subcommand, with the reason. Only cpu `train`
/// runs and `bench` are shortened; everything on meta runs exactly as written.
const SHORTER: &[(&str, &[(&str, &str)], &str)] = &[
    ("train", &[("--num-steps", "4"), ("--warmup-steps", "1")], "a cpu training run prints the same lines after 4 steps as after 20"),
    ("study", &[("--num-steps", "4")], "a cpu study run writes the same files after 4 steps"),
    ("bench", &[("--steps", "4"), ("--no-torch", "")], "a benchmark's ratios are not checked here, only that it runs; PyTorch's side is optional"),
];

/// The picture the README shows, and the command that draws it.
const PICTURE: &str = "docs/img/peak-vs-context-2.7B.svg";
const PICTURE_CMD: &str = "sweep --model 2.7B --batch-size 4 --context-length 128,256,512,1024,2048 --profile-type forward,training --gpu H100-80GB --out-dir picture";
const PICTURE_OUT: &str = "picture/sweep_context-length.svg";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, then every docs/**/*.md but docs/reference/, as (path relative to the repo, text).
fn pages() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                if p.file_name().unwrap() != "reference" || p.parent().unwrap() != repo().join("docs") {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let mut files = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut files);
    files
        .into_iter()
        .map(|p| (p.strip_prefix(repo()).unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

/// The `sh` code blocks' lines, comments stripped.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut in_fence = false;
    for line in text.lines() {
        let t = line.trim();
        if let Some(lang) = t.strip_prefix("```") {
            if in_fence {
                in_fence = false;
                in_sh = false;
            } else {
                in_fence = true;
                in_sh = lang.trim() == "sh";
            }
            continue;
        }
        if in_sh {
            let cmd = t.split(" #").next().unwrap().trim();
            if !cmd.is_empty() && !cmd.starts_with('#') {
                out.push(cmd.to_string());
            }
        }
    }
    out
}

/// Set `flag` to `value` in `args` (add it when absent; a value-less flag when `value` is empty).
fn set(args: &mut Vec<String>, flag: &str, value: &str) {
    match args.iter().position(|a| a == flag) {
        Some(i) if !value.is_empty() => args[i + 1] = value.to_string(),
        Some(_) => {}
        None => {
            args.push(flag.to_string());
            if !value.is_empty() {
                args.push(value.to_string());
            }
        }
    }
}

/// A command line's words as the shell gives them: a quoted word (a value with shell-special
/// characters, such as `;`) loses its quotes.
fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    let mut any = false;
    for c in s.chars() {
        match (quote, c) {
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (_, c) => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

fn runnable(cmd: &str, scratch: &Path) -> Option<Vec<String>> {
    if cmd == "cargo test" || cmd.starts_with("cargo test ") || cmd.starts_with("cargo build") {
        return None; // the suite this test is part of; the build that runs it
    }
    if cmd.starts_with("pip install ") || cmd.starts_with("python -c ") || cmd.starts_with("python3 ") || cmd.starts_with("python ") {
        // The Python package: .ci/run installs it and python/tests runs these (the same
        // `profile` figure as the CLI's summary.json); the table generators are run by the
        // `check-script` blocks.
        return None;
    }
    let rest = cmd
        .strip_prefix("cargo run --release -- ")
        .or_else(|| cmd.strip_prefix("vramscope "))
        .unwrap_or_else(|| panic!("command not covered by this test: {cmd}"));
    let mut args = words(rest);
    // Absolute paths outside the repository go to the scratch folder.
    for a in args.iter_mut() {
        if let Some(p) = a.strip_prefix("/tmp/") {
            *a = scratch.join(p).to_string_lossy().into_owned();
        }
    }
    let on_meta = args.windows(2).any(|w| w[0] == "--device" && w[1] == "meta");
    for (sub, flags, _why) in SHORTER {
        if args[0] == *sub && !on_meta {
            for (f, v) in *flags {
                set(&mut args, f, v);
            }
        }
    }
    if args[0] == "train" {
        if let Some(i) = args.iter().position(|a| a == "--profile-steps") {
            args[i + 1] = "2".into(); // fits the shortened run: 1 warm-up + 2 profiled ≤ 4 steps
        }
    }
    Some(args)
}

/// A folder for one page's or one check's commands; `tests/` is there, as commands name
/// repository files (tests/fixtures/...) relative to the repository root.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = scratch::dir().join(format!("vramscope-docs-{}", std::process::id())).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(repo().join("tests"), dir.join("tests")).unwrap();
    dir
}

fn vramscope(args: &[String], cwd: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).current_dir(cwd).env_remove("PYTORCH_CUDA_ALLOC_CONF").output().unwrap()
}

/// Runs `jobs` on two threads (CI has two cores), results in order.
fn parallel<T: Send, R: Send>(jobs: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let n = jobs.len();
    let queue = Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let results = Mutex::new((0..n).map(|_| None).collect::<Vec<Option<R>>>());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let Some((i, job)) = queue.lock().unwrap().pop() else { break };
                let r = f(job);
                results.lock().unwrap()[i] = Some(r);
            });
        }
    });
    results.into_inner().unwrap().into_iter().map(|r| r.unwrap()).collect()
}

#[test]
fn every_command_runs() {
    let pages = pages();
    let total: usize = pages.iter().map(|(_, t)| commands(t).len()).sum();
    assert!(total >= 40, "found only {total} commands in the pages' sh blocks");
    let t0 = std::time::Instant::now();
    let results = parallel(pages, |(page, text)| {
        let scratch = scratch_dir(&page.replace('/', "_"));
        let cwd = scratch.join("repo");
        std::fs::create_dir_all(&cwd).unwrap();
        std::os::unix::fs::symlink(repo().join("tests"), cwd.join("tests")).unwrap();
        let mut failures = Vec::new();
        let mut ran = 0;
        for cmd in commands(&text) {
            let Some(args) = runnable(&cmd, &scratch) else { continue };
            let t = std::time::Instant::now();
            let o = vramscope(&args, &cwd);
            ran += 1;
            eprintln!("{:>6.1} s  exit {:?}  {page}: vramscope {}", t.elapsed().as_secs_f64(), o.status.code(), args.join(" "));
            if !o.status.success() {
                let err = String::from_utf8_lossy(&o.stderr);
                failures.push(format!("{page}: {cmd}\n    ran as: vramscope {}\n    {}", args.join(" "), err.lines().last().unwrap_or("")));
            }
        }
        let _ = std::fs::remove_dir_all(&scratch);
        (ran, failures)
    });
    let ran: usize = results.iter().map(|r| r.0).sum();
    let failures: Vec<String> = results.into_iter().flat_map(|r| r.1).collect();
    eprintln!("{ran} commands in {:.1} s", t0.elapsed().as_secs_f64());
    assert!(failures.is_empty(), "{} of {ran} commands failed:\n{}", failures.len(), failures.join("\n"));
}

// ---- figures ----

/// One annotated block: where it is, what to run, and its text.
struct Block {
    page: String,
    line: usize,
    checks: Vec<String>,
    scripts: Vec<String>,
    sources: Vec<String>,
    text: String,
}

/// The blocks of a page, each with the `check` / `check-script` / `source` comments right
/// above it (none for an unannotated block). A block is a fenced block, or lines up to the next
/// blank line.
fn blocks(page: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let (mut checks, mut scripts, mut sources) = (Vec::new(), Vec::new(), Vec::new());
    while i < lines.len() {
        let t = lines[i].trim();
        if t.is_empty() {
            i += 1;
            continue;
        }
        if let Some(c) = t.strip_prefix("<!--").and_then(|c| c.strip_suffix("-->")) {
            let c = c.trim();
            if let Some(a) = c.strip_prefix("check:") {
                checks.push(a.trim().to_string());
            } else if let Some(a) = c.strip_prefix("check-script:") {
                scripts.push(a.trim().to_string());
            } else if let Some(a) = c.strip_prefix("source:") {
                sources.push(a.trim().to_string());
            }
            i += 1;
            continue;
        }
        let start = i;
        if t.starts_with("```") {
            i += 1;
            while i < lines.len() && !lines[i].trim().starts_with("```") {
                i += 1;
            }
            i += 1;
        } else {
            while i < lines.len() && !lines[i].trim().is_empty() && !lines[i].trim().starts_with("```") {
                i += 1;
            }
        }
        let end = i.min(lines.len());
        out.push(Block {
            page: page.to_string(),
            line: start + 1,
            checks: std::mem::take(&mut checks),
            scripts: std::mem::take(&mut scripts),
            sources: std::mem::take(&mut sources),
            text: lines[start..end].join("\n"),
        });
    }
    out
}

/// A number token: its digits (grouping commas removed) and whether it has a decimal point or
/// grouping, with what follows it.
struct Num {
    digits: String,
    figure: bool,
    after: String,
}

/// The numbers of `s`. A number glued to a letter or another number (`2.7B`, `bf16`, `5.23.0`,
/// `1e-5`, `@2048`, `x86`) is no figure and left out.
fn numbers(s: &str) -> Vec<Num> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if !c[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let glued_before = i > 0
            && (c[i - 1].is_alphanumeric() || matches!(c[i - 1], '_' | '.' | '@' | '^') || (c[i - 1] == '-' && i > 1 && c[i - 2].is_alphanumeric()));
        let mut figure = false;
        let mut digits = String::new();
        while i < c.len() && c[i].is_ascii_digit() {
            digits.push(c[i]);
            i += 1;
        }
        // Digit groups: ",ddd" not followed by another digit, after a first group of at most
        // three digits (a list "1,2,4" is no grouping).
        if digits.len() <= 3 {
            while i + 3 < c.len() && c[i] == ',' && c[i + 1..i + 4].iter().all(|d| d.is_ascii_digit()) && !(i + 4 < c.len() && c[i + 4].is_ascii_digit()) {
                digits.extend(&c[i + 1..i + 4]);
                figure = true;
                i += 4;
            }
        }
        if i + 1 < c.len() && c[i] == '.' && c[i + 1].is_ascii_digit() {
            digits.push('.');
            i += 1;
            while i < c.len() && c[i].is_ascii_digit() {
                digits.push(c[i]);
                i += 1;
            }
            figure = true;
        }
        let glued_after = i < c.len() && (c[i].is_alphabetic() || c[i] == '_' || (c[i] == '.' && i + 1 < c.len() && c[i + 1].is_ascii_digit()) || (c[i] == ',' && i + 1 < c.len() && c[i + 1].is_ascii_digit()));
        // The first group of a grouped number may be up to three digits; a longer run with
        // commas is a list.
        if glued_before || glued_after {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '.' || c[i] == '_') {
                i += 1;
            }
            continue;
        }
        let after: String = c[i..c.len().min(i + 4)].iter().collect();
        out.push(Num { digits, figure, after });
    }
    out
}

/// Every number of command output, as digit strings without grouping.
fn output_numbers(s: &str) -> Vec<String> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if !c[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let mut d = String::new();
        while i < c.len() && (c[i].is_ascii_digit() || ((c[i] == '.' || c[i] == ',') && i + 1 < c.len() && c[i + 1].is_ascii_digit())) {
            if c[i] != ',' {
                d.push(c[i]);
            }
            i += 1;
        }
        // A comma list (1,2,4) joins into one long run; its parts are numbers too.
        out.push(d);
    }
    let mut parts = Vec::new();
    for part in s.split(|ch: char| !(ch.is_ascii_digit() || ch == '.')) {
        let p = part.trim_matches('.');
        if !p.is_empty() {
            parts.push(p.to_string());
        }
    }
    out.extend(parts);
    out
}

/// `figure` (digits, maybe one '.') is `o` exactly or `o` rounded to the figure's decimals.
fn matches(figure: &str, o: &str) -> bool {
    if figure == o {
        return true;
    }
    let fd = figure.split('.').nth(1).map_or(0, str::len);
    let od = o.split('.').nth(1).map_or(0, str::len);
    if od <= fd || o.matches('.').count() > 1 {
        return false;
    }
    let Ok(v) = o.parse::<f64>() else { return false };
    // Round half away from zero, as the tables' generators print.
    let scaled = v * 10f64.powi(fd as i32);
    let r = (scaled + 1e-9).round() / 10f64.powi(fd as i32);
    format!("{r:.fd$}") == figure
}

/// `line` without its inline code spans that hold a command line (`--context-length
/// 128,256,512` is no figure).
fn without_flag_spans(line: &str) -> String {
    let mut out = String::new();
    for (k, part) in line.split('`').enumerate() {
        if k % 2 == 0 || !part.contains("--") {
            out.push_str(part);
        }
        out.push(' ');
    }
    out
}

/// The figures of a block that its checks must find: decimals and groupings anywhere, and any
/// number in a table body cell but the first.
fn figures(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (k, line) in lines.iter().enumerate() {
        let stripped = without_flag_spans(line);
        let t = stripped.trim();
        let is_table = t.starts_with('|');
        let header = is_table && lines.get(k + 1).is_some_and(|n| n.trim().starts_with("|-") || n.trim().starts_with("|:"));
        if is_table && (t.starts_with("|-") || t.starts_with("|:")) {
            continue;
        }
        if is_table && !header {
            for cell in t.trim_matches('|').split('|').skip(1) {
                out.extend(numbers(cell).into_iter().map(|n| n.digits));
            }
            out.extend(numbers(t.trim_matches('|').split('|').next().unwrap_or("")).into_iter().filter(|n| n.figure).map(|n| n.digits));
        } else {
            out.extend(numbers(t).into_iter().filter(|n| n.figure).map(|n| n.digits));
        }
    }
    out
}

/// A figure with a memory unit or a percentage after it: what must be checked or sourced.
fn unit_figures(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in text.lines() {
        let t = line.trim();
        if let Some(lang) = t.strip_prefix("```") {
            in_sh = !in_sh && lang.trim() == "sh";
            continue;
        }
        if in_sh {
            continue;
        }
        let prose: String = t.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        for n in numbers(&prose) {
            let a = n.after.trim_start_matches([' ', '\u{a0}']);
            let unit = ["GiB", "MiB", "KiB", "GB", "MB", "B ", "B,", "B)", "B;", "B.", "%"].iter().any(|u| a.starts_with(u)) || a == "B";
            if n.figure && unit {
                out.push(n.digits);
            }
        }
    }
    out
}

fn run_check(check: &str) -> Result<String, String> {
    let (cmd, file) = match check.split_once("=>") {
        Some((c, f)) => (c.trim(), Some(f.trim())),
        None => (check, None),
    };
    let dir = scratch_dir(&format!("check-{:016x}", {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        check.hash(&mut h);
        h.finish()
    }));
    let args = words(cmd);
    let o = vramscope(&args, &dir);
    let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&o.stderr));
    if !matches!(o.status.code(), Some(0 | 1)) {
        return Err(format!("vramscope {cmd}: exit {:?}\n{}", o.status.code(), text.lines().last().unwrap_or("")));
    }
    if let Some(f) = file {
        text.push_str(&std::fs::read_to_string(dir.join(f)).map_err(|e| format!("vramscope {cmd}: reading {f}: {e}"))?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(text)
}

fn run_script(script: &str) -> Result<String, String> {
    let mut args = words(script);
    args.push("--bin".into());
    args.push(env!("CARGO_BIN_EXE_vramscope").into());
    let o = Command::new("python3").args(&args).current_dir(repo()).env_remove("PYTORCH_CUDA_ALLOC_CONF").output().map_err(|e| format!("python3 {script}: {e}"))?;
    if !o.status.success() {
        return Err(format!("python3 {script}: exit {:?}\n{}", o.status.code(), String::from_utf8_lossy(&o.stderr)));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Which check-scripts run here: `tools/fine_tune_table.py` takes about ten minutes on two
/// cores in a debug build, so it runs only with `VRAMSCOPE_DOCS_SLOW=1`; its block is listed
/// as skipped. `.ci/run` sets it for a second, release-build run of this test.
fn slow(script: &str) -> bool {
    script.contains("fine_tune_table.py") && std::env::var_os("VRAMSCOPE_DOCS_SLOW").is_none()
}

#[test]
fn every_quoted_figure_is_what_the_tool_prints() {
    let t0 = std::time::Instant::now();
    let all: Vec<Block> = pages().iter().flat_map(|(p, t)| blocks(p, t)).collect();
    let mut problems = Vec::new();
    // Every figure with a unit is checked or sourced.
    for b in &all {
        if !b.checks.is_empty() || !b.scripts.is_empty() {
            continue;
        }
        let unchecked = unit_figures(&b.text);
        if !unchecked.is_empty() && b.sources.is_empty() {
            problems.push(format!("{}:{}: figures with no check or source comment: {}", b.page, b.line, unchecked.join(", ")));
        }
        for s in &b.sources {
            let path = s.split_whitespace().next().unwrap_or("");
            if !repo().join(path).exists() {
                problems.push(format!("{}:{}: source {path} does not exist", b.page, b.line));
            }
        }
    }
    // Run every distinct check and script once, two at a time.
    let mut jobs: Vec<String> = Vec::new();
    for b in &all {
        for c in &b.checks {
            if !jobs.contains(&format!("c {c}")) {
                jobs.push(format!("c {c}"));
            }
        }
        for s in &b.scripts {
            if !slow(s) && !jobs.contains(&format!("s {s}")) {
                jobs.push(format!("s {s}"));
            }
        }
    }
    let outputs: HashMap<String, Result<String, String>> = parallel(jobs.clone(), |j| {
        let t = std::time::Instant::now();
        let r = if let Some(c) = j.strip_prefix("c ") { run_check(c) } else { run_script(&j[2..]) };
        eprintln!("{:>6.1} s  {}", t.elapsed().as_secs_f64(), &j[2..]);
        r
    })
    .into_iter()
    .zip(jobs)
    .map(|(r, j)| (j, r))
    .collect();
    let mut checked = 0;
    for b in &all {
        if b.checks.is_empty() && b.scripts.is_empty() {
            continue;
        }
        if b.scripts.iter().any(|s| slow(s)) {
            eprintln!("{}:{}: skipped (set VRAMSCOPE_DOCS_SLOW=1 to run {})", b.page, b.line, b.scripts.join(", "));
            continue;
        }
        let mut out = String::new();
        for j in b.checks.iter().map(|c| format!("c {c}")).chain(b.scripts.iter().map(|s| format!("s {s}"))) {
            match &outputs[&j] {
                Ok(o) => out.push_str(o),
                Err(e) => problems.push(format!("{}:{}: {e}", b.page, b.line)),
            }
        }
        let nums = output_numbers(&out);
        let figs = figures(&b.text);
        if figs.is_empty() {
            problems.push(format!("{}:{}: a checked block without figures", b.page, b.line));
        }
        for f in figs {
            checked += 1;
            if !nums.iter().any(|o| matches(&f, o)) {
                problems.push(format!("{}:{}: {f} is not in the output of {}", b.page, b.line, b.checks.iter().chain(&b.scripts).cloned().collect::<Vec<_>>().join(" + ")));
            }
        }
    }
    eprintln!("{checked} figures checked in {:.1} s", t0.elapsed().as_secs_f64());
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn the_figure_checker_catches_drift() {
    // 58.865 where the tool prints 58.705 (the drift issue #27 reported) must fail; 58.7 and
    // 58.705 pass; groupings and list items are read as the numbers they are.
    let out = output_numbers("| all of the above | 57.378 | -12.4% | 58.705 |\ntrainable params: 41,943,040 || probes 1,2,4");
    assert!(!out.iter().any(|o| matches("58.865", o)));
    assert!(out.iter().any(|o| matches("58.705", o)) && out.iter().any(|o| matches("58.7", o)));
    assert!(out.iter().any(|o| matches("41943040", o)));
    assert!(out.iter().any(|o| matches("4", o)));
    assert_eq!(figures("peaks at 137.0 MiB, 2.7B model, transformers 5.23.0, lr 1e-3"), vec!["137.0"]);
    assert_eq!(figures("| a | b |\n|---|---:|\n| 1 | 2 / 4388 |"), vec!["2", "4388"]);
    assert_eq!(unit_figures("65.5 GiB and 83,178,496 B, 4 GiB, 12.4 %"), vec!["65.5", "83178496", "12.4"]);
}

// ---- links ----

#[test]
fn links_point_at_files_that_exist() {
    let reference_exists = repo().join("docs/reference/README.md").exists();
    let mut missing = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        let base = repo().join(&page).parent().unwrap().to_path_buf();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].trim();
            rest = &rest[end..];
            if target.starts_with("http") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let file = target.split('#').next().unwrap();
            let path = base.join(file);
            let norm = normalize(&path);
            if !norm.starts_with(repo()) {
                missing.push(format!("{page}: {target} (outside the repository)"));
                continue;
            }
            if norm.starts_with(repo().join("docs/reference")) && !reference_exists {
                continue; // generated by another change; checked once it exists
            }
            checked += 1;
            if !norm.exists() {
                missing.push(format!("{page}: {target}"));
            }
        }
    }
    eprintln!("{checked} links checked");
    assert!(missing.is_empty(), "links to missing files:\n{}", missing.join("\n"));
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

// ---- the picture ----

#[test]
fn the_readme_picture_is_what_sweep_draws() {
    assert!(std::fs::read_to_string(repo().join("README.md")).unwrap().contains(PICTURE), "the README shows {PICTURE}");
    let dir = scratch_dir("picture");
    let o = vramscope(&words(PICTURE_CMD), &dir);
    assert!(o.status.success() || o.status.code() == Some(1), "vramscope {PICTURE_CMD}: {}", String::from_utf8_lossy(&o.stderr));
    let strip = |s: &str| s.lines().filter(|l| !l.contains("vramscope run_id:")).collect::<Vec<_>>().join("\n");
    let drawn = std::fs::read_to_string(dir.join(PICTURE_OUT)).unwrap();
    let kept = std::fs::read_to_string(repo().join(PICTURE)).unwrap();
    if strip(&drawn) != strip(&kept) {
        if std::env::var_os("VRAMSCOPE_UPDATE_PICTURE").is_some() {
            std::fs::write(repo().join(PICTURE), &drawn).unwrap();
        } else {
            panic!("{PICTURE} is not what `vramscope {PICTURE_CMD}` draws today; VRAMSCOPE_UPDATE_PICTURE=1 cargo test --test readme rewrites it");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
