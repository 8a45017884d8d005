//! `bench analyze`: `vramscope analyze` of a PyTorch-format snapshot of `--events` trace
//! entries (10 M by default), with its default budgets, run as a child process so that its
//! wall time and peak RSS (`getrusage` of the child, through `wait4`) are its own. Printed
//! beside the targets of issue 29 (under 10 s, under 2 GB) and the CPU that ran it.
use super::torch_snapshot;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;
#[cfg(not(target_family = "wasm"))]
use std::process::{Command, Stdio};
use std::time::Instant;

/// The targets: wall seconds and peak RSS bytes.
pub const TARGET_S: f64 = 10.0;
pub const TARGET_RSS: u64 = 2_000_000_000;

/// The CPU as /proc/cpuinfo names it, with the vector extensions that matter for speed.
pub fn cpu_name() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |k: &str| {
        info.lines().find(|l| l.split(':').next().is_some_and(|n| n.trim() == k)).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string())
    };
    let model = field("model name").unwrap_or_else(|| "unknown CPU".into());
    let flags = field("flags").unwrap_or_default();
    let has: Vec<&str> = flags.split_whitespace().collect();
    let ext: Vec<&str> = [("avx2", "AVX2"), ("avx512f", "AVX-512"), ("amx_tile", "AMX")].iter().filter(|(f, _)| has.contains(f)).map(|(_, n)| *n).collect();
    let cores = info.lines().filter(|l| l.starts_with("processor")).count();
    format!("{model}, {cores} logical cores visible, {}", if ext.is_empty() { "no AVX2/AVX-512/AMX".to_string() } else { ext.join(" ") })
}

/// A child run: exit code, wall seconds, peak RSS in bytes, its stdout and stderr.
pub(super) struct Child {
    pub code: i32,
    pub wall: f64,
    pub max_rss: u64,
    pub stdout: String,
    pub stderr: String,
}

/// Run `exe args` with its output into files of `dir`, and reap it with `wait4` for its own
/// resource usage.
#[cfg(target_family = "wasm")]
pub(super) fn run_child(exe: &Path, _args: &[&str], _dir: &Path) -> Result<Child> {
    anyhow::bail!("running {}: the page runs no processes", exe.display())
}

#[cfg(not(target_family = "wasm"))]
pub(super) fn run_child(exe: &Path, args: &[&str], dir: &Path) -> Result<Child> {
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let t0 = Instant::now();
    let child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out)?)
        .stderr(std::fs::File::create(&err)?)
        .spawn()
        .with_context(|| format!("running {}", exe.display()))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value, and both pointers outlive the call.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = loop {
        // SAFETY: as above; `pid` is our own unreaped child.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        break r;
    };
    let wall = t0.elapsed().as_secs_f64();
    anyhow::ensure!(r == pid, "waiting for {}: {}", exe.display(), std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    let text = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    // ru_maxrss is in KiB on Linux.
    Ok(Child { code, wall, max_rss: (ru.ru_maxrss.max(0) as u64) * 1024, stdout: text(&out), stderr: text(&err) })
}

/// Write the snapshot, then time `analyze` of it with the default budgets.
pub fn bench(events: u64, keep: Option<&Path>, w: &mut dyn Write) -> Result<()> {
    let exe = std::env::current_exe().context("finding the vramscope executable")?;
    let tmp = crate::export::cleanup::PrivateDir::new_in(&std::env::temp_dir(), "vramscope-bench-analyze-").context("creating a temp folder")?;
    let file = keep.map_or_else(|| tmp.path().join("torch_snapshot.pickle"), Path::to_path_buf);
    let t0 = Instant::now();
    let f = std::fs::File::create(&file).with_context(|| format!("creating {}", file.display()))?;
    let made = torch_snapshot::write(std::io::BufWriter::with_capacity(1 << 20, f), events).with_context(|| format!("writing {}", file.display()))?;
    let write_s = t0.elapsed().as_secs_f64();
    let _ = writeln!(w, "analyze of a PyTorch-format snapshot (pickle protocol 4 as torch.cuda.memory._dump_snapshot writes it, frame dicts shared, a frames list per entry):");
    let _ = writeln!(w, "  cpu: {}", cpu_name());
    let _ = writeln!(
        w,
        "  snapshot: {} trace entries, {} blocks live at the end, {:.1} MB, written in {:.1} s; its peak active memory {} B",
        made.events,
        made.live_at_end,
        made.bytes as f64 / 1e6,
        write_s,
        made.peak_active
    );
    let path = file.to_string_lossy().into_owned();
    let c = run_child(&exe, &["analyze", &path], tmp.path())?;
    let verdict = |ok: bool| if ok { "meets" } else { "MISSES" };
    if c.code == 0 {
        let _ = writeln!(
            w,
            "  vramscope analyze, default budgets: {:.2} s wall ({} the {TARGET_S:.0} s target), peak RSS {:.2} GB ({} the {:.0} GB target)",
            c.wall,
            verdict(c.wall < TARGET_S),
            c.max_rss as f64 / 1e9,
            verdict(c.max_rss < TARGET_RSS),
            TARGET_RSS as f64 / 1e9
        );
        // The peak it found, against the one the generator counted (the text shows MiB).
        let want = format!("peak active memory {:.2} MiB", crate::export::mib(made.peak_active));
        let found = c.stdout.lines().find(|l| l.starts_with("peak active memory")).unwrap_or("no peak line");
        let same = found.starts_with(&want);
        let _ = writeln!(w, "  its peak: {} ({})", found.split(" requested").next().unwrap_or(found), if same { "as the generator counted" } else { "DIFFERS from the generator's count" });
        anyhow::ensure!(same, "analyze found another peak than the snapshot holds: {found} (expected {want})");
    } else {
        let why = c.stderr.lines().find(|l| l.starts_with("error")).unwrap_or(c.stderr.trim()).to_string();
        let _ = writeln!(
            w,
            "  vramscope analyze, default budgets: refused (exit {}) after {:.2} s, peak RSS {:.2} GB, MISSES the targets: {why}",
            c.code,
            c.wall,
            c.max_rss as f64 / 1e9
        );
    }
    drop(tmp);
    Ok(())
}
