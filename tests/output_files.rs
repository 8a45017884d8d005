//! Output files: written whole or not at all, never through a planted symlink, a command's
//! set replaced together or left as it was (SIGINT/SIGTERM included), output paths checked
//! before the work starts, write errors naming the file.
use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

/// Every file under `dir` (relative path → bytes), hidden ones included. A running
/// vramscope may rename or remove an entry between listing and reading it (a temp file
/// renamed into place, a staging folder swapped in): such an entry is skipped, any other
/// error fails the test.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn gone(e: &std::io::Error) -> bool {
        e.kind() == std::io::ErrorKind::NotFound
    }
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let entries = match std::fs::read_dir(d) {
            Ok(it) => it,
            Err(e) if gone(&e) => return,
            Err(e) => panic!("{}: {e}", d.display()),
        };
        for e in entries {
            let e = match e {
                Ok(e) => e,
                Err(e) if gone(&e) => continue,
                Err(e) => panic!("{}: {e}", d.display()),
            };
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = match std::fs::symlink_metadata(&p) {
                Ok(m) => m,
                Err(e) if gone(&e) => continue,
                Err(e) => panic!("{}: {e}", p.display()),
            };
            if m.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &p, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn leftovers(t: &BTreeMap<String, Vec<u8>>) -> Vec<&String> {
    t.keys().filter(|k| k.contains(".vramscope-staging-") || k.ends_with(".tmp") || k.contains(".tmp")).collect()
}

#[test]
fn profile_with_out_dir_a_file_fails_before_any_step() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let t0 = Instant::now();
    let o = vramscope(&["profile", "--device", "cpu", "--out-dir", file.to_str().unwrap()]);
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("invalid --out-dir") && err.contains("not a directory"), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
    // An --output that is a folder, and a folder under a file, are refused the same way.
    let o = vramscope(&["profile", "--device", "meta", "--out-dir", dir.path().join("o").to_str().unwrap(), "--output", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid --output"));
    let under = file.join("sub");
    for (flag, args) in [
        ("--out-dir", vec!["sweep", "--batch-size", "1,2", "--out-dir", under.to_str().unwrap()]),
        ("--out-dir", vec!["run-all", "--out-dir", under.to_str().unwrap()]),
        ("--out-dir", vec!["profile", "--compare", "--out-dir", under.to_str().unwrap()]),
        ("--output-dir", vec!["train", "--output-dir", under.to_str().unwrap()]),
        ("--json", vec!["estimate", "--json", under.to_str().unwrap()]),
        ("--json", vec!["fit", "--gpu", "H100-80GB", "--json", under.to_str().unwrap()]),
        ("--out-dir", vec!["study", "tiny", "--out-dir", under.to_str().unwrap()]),
    ] {
        let t0 = Instant::now();
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("invalid {flag}: ")), "{args:?}: {err}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{args:?} took {:?}", t0.elapsed());
    }
}

#[test]
fn write_errors_name_the_file_and_devices_are_written_into() {
    if !Path::new("/dev/full").exists() {
        eprintln!("no /dev/full here: skipped");
        return;
    }
    // ENOSPC through the same write path every output takes.
    let o = vramscope(&["estimate", "--json", "/dev/full"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("writing /dev/full: No space left on device"), "{err}");
    // A link to a device is written through, and the device node stays a device.
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("report.json");
    std::os::unix::fs::symlink("/dev/full", &link).unwrap();
    let o = vramscope(&["estimate", "--json", link.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&o.stderr).contains(&format!("writing {}: No space left on device", link.display())));
    let o = vramscope(&["estimate", "--json", "/dev/null"]);
    assert!(o.status.success());
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    // /dev/stdout onto a file: the JSON follows the text (appended), and the link stays.
    let captured = dir.path().join("stdout.txt");
    let st = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["estimate", "--json", "/dev/stdout"])
        .stdout(std::fs::File::create(&captured).unwrap())
        .status()
        .unwrap();
    assert!(st.success());
    let text = std::fs::read_to_string(&captured).unwrap();
    assert!(text.starts_with("vramscope estimate") && text.contains("\"estimate\"") && text.trim_end().ends_with("wrote /dev/stdout (JSON)"), "{text}");
    assert!(std::fs::symlink_metadata("/dev/stdout").unwrap().file_type().is_symlink());
}

#[test]
fn planted_symlinks_are_replaced_not_followed_and_modes_are_a_new_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    for name in ["sweep.csv", "sweep.json", "sweep.md", "sweep_batch-size.svg", ".sweep.json.tmp1", "points"] {
        std::os::unix::fs::symlink(&victim, out.join(name)).unwrap();
    }
    let o = vramscope(&["sweep", "--batch-size", "1,2", "--context-length", "32", "--profile-type", "forward", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    // SAFETY: umask only reads-and-restores this process's mask.
    let umask = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    };
    for name in ["sweep.csv", "sweep.json", "sweep.md", "sweep_batch-size.svg"] {
        let m = std::fs::symlink_metadata(out.join(name)).unwrap();
        assert!(m.is_file(), "{name} is still a link");
        assert_eq!(m.permissions().mode() & 0o777, 0o666 & !(umask as u32), "{name}");
    }
    let t = tree(&out);
    assert!(leftovers(&t).iter().all(|k| k.as_str() == ".sweep.json.tmp1"), "{:?}", leftovers(&t));
    // A file being replaced keeps its permission bits.
    std::fs::set_permissions(out.join("sweep.json"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = vramscope(&["sweep", "--batch-size", "1,2", "--context-length", "32", "--profile-type", "forward", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success());
    assert_eq!(std::fs::metadata(out.join("sweep.json")).unwrap().permissions().mode() & 0o777, 0o600);
}

/// Start a long sweep over an existing complete set, interrupt it once it has staged a point,
/// and check that the previous set is exactly as it was, with nothing left beside it.
fn interrupted_sweep_keeps_the_previous_set(signal: i32) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = vramscope(&["sweep", "--batch-size", "1,2", "--context-length", "32", "--profile-type", "forward", "--snapshots", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let before = tree(&out);
    assert!(before.contains_key("sweep.json") && before.keys().any(|k| k.ends_with("_report.html")));
    assert!(leftovers(&before).is_empty(), "{:?}", leftovers(&before));

    let batches: Vec<String> = (1..=2000).map(|b| b.to_string()).collect();
    let batches = batches.join(",");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramscope"));
    cmd.args(["sweep", "--batch-size", &batches, "--context-length", "32", "--profile-type", "forward", "--snapshots", "--out-dir", out.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // The child gets the signal's default disposition: a test harness started in the
    // background by a non-interactive shell inherits SIGINT ignored, and vramscope rightly
    // keeps an inherited "ignore" (as nohup'd programs must).
    // SAFETY: pre_exec runs in the forked child before exec; signal() is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(signal, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    // Wait until the run has written files (a point's report in its staging folder).
    let t0 = Instant::now();
    let staged = loop {
        let t = tree(&out);
        if t.keys().any(|k| k.contains(".vramscope-staging-") && k.ends_with("_report.html")) {
            break true;
        }
        if t0.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(staged, "the sweep never staged a point");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
    let status = child.wait().unwrap();
    // Killed by the signal after cleaning up (a shell reports 128 + signal: 130, 143).
    assert!(status.signal() == Some(signal) || status.code() == Some(128 + signal), "{status:?}");
    let mut after = tree(&out);
    if signal == libc::SIGKILL {
        // Nothing can clean up after kill -9: the staging folder stays, holding only complete
        // files (temp files are unnamed where the filesystem has O_TMPFILE), beside the
        // untouched previous set.
        let stale: Vec<String> = after.keys().filter(|k| k.starts_with(".vramscope-staging-")).cloned().collect();
        assert!(!stale.is_empty());
        if o_tmpfile_works(&out) {
            assert!(stale.iter().all(|k| !k.ends_with(".tmp")), "{stale:?}");
        }
        after.retain(|k, _| !k.starts_with(".vramscope-staging-"));
        // The next run in that folder removes the dead run's staging folder.
        let o = vramscope(&["sweep", "--batch-size", "1", "--context-length", "32", "--profile-type", "forward", "--out-dir", out.to_str().unwrap()]);
        assert!(o.status.success());
        assert!(leftovers(&tree(&out)).is_empty(), "{:?}", leftovers(&tree(&out)));
    }
    assert!(leftovers(&after).is_empty(), "left behind: {:?}", leftovers(&after));
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
    assert!(before == after, "the previous set changed");
}

#[test]
fn sigint_mid_sweep_leaves_exactly_the_previous_set() {
    interrupted_sweep_keeps_the_previous_set(libc::SIGINT);
}

#[test]
fn kill_9_mid_sweep_leaves_the_previous_set_and_no_temp_files() {
    interrupted_sweep_keeps_the_previous_set(libc::SIGKILL);
}

fn o_tmpfile_works(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).custom_flags(libc::O_TMPFILE).open(dir).is_ok()
}

#[test]
fn sigterm_mid_sweep_leaves_exactly_the_previous_set() {
    interrupted_sweep_keeps_the_previous_set(libc::SIGTERM);
}

#[test]
fn a_completed_set_carries_one_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = vramscope(&["profile", "--device", "meta", "--context-length", "32,64", "--profile-type", "forward", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let id = summary["run_id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 16);
    for r in summary["runs"].as_array().unwrap() {
        let html = std::fs::read_to_string(r["report"].as_str().unwrap()).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>\n"));
        assert!(html.contains(&format!("<!-- vramscope run_id: {id} -->")));
        assert!(Path::new(r["snapshot"].as_str().unwrap()).is_file());
    }
    assert!(leftovers(&tree(&out)).is_empty());
}
