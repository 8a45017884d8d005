//! Hostile snapshots (issue #15): `analyze` and `view` finish each file of the corpus
//! within 5 s and 1 GB RSS, exit 0 or 2 with a clear message, never panic, and leave no
//! file behind on error. The committed small corpus (tests/fixtures/hostile/) is checked
//! against its generator; `VRAMSCOPE_BLESS=1 cargo test --test hostile` rewrites it.
mod hostile_corpus;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vramscope");
const MAX_SECONDS: f64 = 5.0;
const MAX_RSS_KB: i64 = 1 << 20;

struct Outcome {
    code: i32,
    seconds: f64,
    /// User + system CPU time.
    cpu_seconds: f64,
    rss_kb: i64,
    stdout: String,
    stderr: String,
}

/// Run the binary, measuring wall time and the child's own max RSS (wait4's rusage).
fn measure(args: &[&str]) -> Outcome {
    let mut child = Command::new(BIN).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let t0 = Instant::now();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    // A watchdog, so a hang fails the test instead of stalling it.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            if d2.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let mut status = 0;
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let seconds = t0.elapsed().as_secs_f64();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(r, pid, "wait4 failed");
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
    std::mem::forget(child); // already reaped by wait4
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Outcome {
        code,
        seconds,
        cpu_seconds: tv(ru.ru_utime) + tv(ru.ru_stime),
        rss_kb: ru.ru_maxrss,
        stdout: String::from_utf8_lossy(&reader.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned(),
    }
}

/// Whether more runnable tasks than cores are waiting (1-minute load average).
fn overloaded() -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok()).is_some_and(|l| l > cores)
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile")
}

/// What a file must give: Ok for exit 0, or exit 2 with this text in the message (for
/// `analyze`, and for `view` when it differs).
fn expected(name: &str) -> (Result<(), &'static str>, Result<(), &'static str>) {
    let both = |e| (e, e);
    match name {
        "settings_shared_lists.pickle" => (Ok(()), Err("--max-output-bytes")),
        // PyTorch requires 0 or a power of two; `analyze` checks them too, so both agree.
        "divisions_not_power_of_two.pickle" | "divisions_negative.pickle" => both(Err("roundup_power2_divisions[")),
        n if n.starts_with("shared_frames") || n.starts_with("many_ooms") || n.starts_with("categories") => both(Ok(())),
        n if n.starts_with("divisions_") || n == "time_negative.pickle" || n == "shared_long_category.pickle" => both(Ok(())),
        n if n.starts_with("wide_shared_entry") || n == "shared_entries_small.pickle" || n == "shared_entries_1_9m.pickle" => both(Ok(())),
        // A bare list is the legacy segments-only form.
        "shared_blocks_small.pickle" | "long_list_small.pickle" | "long_list_23m.pickle" | "many_containers_2_9m.pickle" => both(Ok(())),
        "size_i64_max.pickle" | "size_i64_min.pickle" | "size_negative.pickle" => both(Err("device_traces[0][1].size")),
        "addr_negative.pickle" => both(Err("device_traces[0][1].addr")),
        "time_i64_max.pickle" => both(Err("device_traces[0][1].time_us")),
        "time_i64_min.pickle" => both(Err("device_traces[0][2].time_us")),
        "total_size_i64_max.pickle" => both(Err("segments[0].total_size")),
        "block_size_i64_max.pickle" => both(Err("segments[0].blocks[0].size")),
        "requested_size_i64_max.pickle" => both(Err("segments[0].blocks[0].requested_size")),
        "oom_size_i64_max.pickle" => both(Err("device_traces[0][3].size")),
        "device_free_negative.pickle" => both(Err("device_traces[0][3].device_free")),
        "sizes_sum_beyond_2p53.pickle" => both(Err("active memory after device_traces[0][1]")),
        "dup_bomb_small.pickle" => both(Err("STOP with 1001 values")),
        "dup_bomb_100m.pickle" => both(Err("--max-stack")),
        "long_list_50m.pickle" => both(Err("--max-items")),
        "deep_nesting.pickle" | "deep_marks.pickle" => both(Err("--max-depth")),
        // 3 M memoized values that nothing fetches: `view`'s tree reader keeps a memo slot for
        // each and stops at --max-memo; `analyze`'s streaming reader gives slots only to the keys
        // the file fetches (none here), holds nothing, and reads on to the missing segments.
        "memo_bomb_3m.pickle" => (Err("no 'segments' list"), Err("--max-memo")),
        "memo_bomb_small.pickle" | "memo_bomb_1_9m.pickle" => both(Err("no 'segments' list")),
        "many_containers_4m.pickle" => both(Err("--max-containers")),
        "shared_entries_11m.pickle" | "shared_blocks_3300.pickle" => both(Err("--max-trace-entries")),
        "huge_declared_length.pickle" => both(Err("truncated")),
        "executing.pickle" => both(Err("GLOBAL")),
        "zeros.pickle" | "zeros_device" => both(Err("byte offset 0: unknown opcode 0x00")),
        "truncated.pickle" => both(Err("truncated")),
        "garbage.pickle" | "garbage_big.pickle" => both(Err("byte offset")),
        "empty.pickle" => both(Err("byte offset 0: unexpected end of data")),
        other => panic!("no expectation for {other}"),
    }
}

fn check(name: &str, file: &Path, dir: &Path, rows: &mut Vec<String>, failures: &mut Vec<String>) {
    let (want_analyze, want_view) = expected(name);
    let out = dir.join(format!("{name}.html"));
    let file_s = file.to_str().unwrap();
    let out_s = out.to_str().unwrap();
    for (cmd, args, want) in [("analyze", vec!["analyze", file_s], want_analyze), ("view", vec!["view", file_s, "--output", out_s], want_view)] {
        let o = measure(&args);
        rows.push(format!("{name:<40} {cmd:<8} exit {:>3} {:>7.2} s {:>7.2} s {:>8.1} MB", o.code, o.seconds, o.cpu_seconds, o.rss_kb as f64 / 1024.0));
        let mut fail = |why: String| failures.push(format!("{name} {cmd}: {why}\nstderr: {}", o.stderr.chars().take(500).collect::<String>()));
        // Wall time counts only when the machine is not oversubscribed (other builds
        // sharing its cores stretch it); CPU time always counts.
        if o.cpu_seconds > MAX_SECONDS || (o.seconds > MAX_SECONDS && !overloaded()) {
            fail(format!("took {:.2} s ({:.2} s of CPU)", o.seconds, o.cpu_seconds));
        }
        if o.rss_kb > MAX_RSS_KB {
            fail(format!("max RSS {} KB", o.rss_kb));
        }
        if o.stderr.contains("panicked") || o.stderr.contains("RUST_BACKTRACE") {
            fail("panicked".into());
        }
        match want {
            Ok(()) if o.code != 0 => fail(format!("exit {}, expected 0", o.code)),
            Err(text) if o.code != 2 => fail(format!("exit {}, expected 2 ({text})", o.code)),
            Err(text) if !(o.stderr.starts_with("error: ") && o.stderr.contains(text)) => fail(format!("message lacks {text:?}")),
            _ => {}
        }
        if cmd == "view" {
            // Nothing beside the report on success, nothing at all on error.
            let left: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
            let ok = if o.code == 0 { left == [format!("{name}.html")] } else { left.is_empty() };
            if !ok {
                fail(format!("left {left:?} in the output folder"));
            }
            let _ = std::fs::remove_file(&out);
        } else if o.code == 0 && o.stdout.is_empty() {
            fail("printed nothing".into());
        }
    }
}

fn report(rows: &[String], failures: &[String]) {
    println!("{:<40} {:<8} {:>8} {:>9} {:>9} {:>11}", "file", "command", "exit", "wall", "CPU", "max RSS");
    for r in rows {
        println!("{r}");
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn committed_corpus_matches_its_generator() {
    let dir = fixtures();
    let bless = std::env::var_os("VRAMSCOPE_BLESS").is_some();
    for (name, bytes) in hostile_corpus::small() {
        let path = dir.join(name);
        if bless {
            std::fs::write(&path, &bytes).unwrap();
        }
        let have = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (VRAMSCOPE_BLESS=1 writes it)", path.display()));
        assert!(have == bytes, "{name} differs from its generator (VRAMSCOPE_BLESS=1 rewrites it)");
        assert!(bytes.len() <= 64 << 10, "{name} is {} bytes: generate it at test time instead", bytes.len());
    }
}

#[test]
fn small_hostile_corpus_is_handled_within_bounds() {
    let out = tempfile::tempdir().unwrap();
    let (mut rows, mut failures) = (Vec::new(), Vec::new());
    for (name, _) in hostile_corpus::small() {
        check(name, &fixtures().join(name), out.path(), &mut rows, &mut failures);
    }
    if Path::new("/dev/zero").exists() {
        check("zeros_device", Path::new("/dev/zero"), out.path(), &mut rows, &mut failures);
    }
    report(&rows, &failures);
}

#[test]
fn big_hostile_corpus_is_handled_within_bounds() {
    // Generated by a child process: a child's max RSS starts from its parent's (fork and
    // exec keep the high-water mark), so this process must never hold the big files.
    let files = tempfile::tempdir().unwrap();
    let gen = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "dump_big_corpus", "--test-threads", "1"])
        .env("VRAMSCOPE_HOSTILE_OUT", files.path())
        .output()
        .unwrap();
    assert!(gen.status.success(), "{}", String::from_utf8_lossy(&gen.stdout));
    let out = tempfile::tempdir().unwrap();
    let (mut rows, mut failures) = (Vec::new(), Vec::new());
    for (name, _) in hostile_corpus::big() {
        let path = files.path().join(name);
        check(name, &path, out.path(), &mut rows, &mut failures);
        let _ = std::fs::remove_file(&path);
    }
    report(&rows, &failures);
}

/// Each budget's flag raises it: a file refused under the default is read with the flag.
#[test]
fn budget_flags_raise_their_budget() {
    let files = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<u8>, &str, &str); 3] = [
        ("entries", hostile_corpus::shared_entries(5000), "--max-trace-entries", "4000"),
        ("stack", hostile_corpus::shared_frames(10, 20), "--max-stack", "5"),
        ("frames", hostile_corpus::shared_frames(10, 20), "--max-frames", "5"),
    ];
    for (name, bytes, flag, value) in cases {
        let path = files.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let p = path.to_str().unwrap();
        // Lowered, the same flag refuses a file the default reads (raising the default
        // --max-trace-entries of 10.5 M would take gigabytes here).
        assert_eq!(measure(&["analyze", p]).code, 0);
        let o = measure(&["analyze", p, flag, value]);
        assert!(o.code == 2 && o.stderr.contains(flag), "{name}: {}", o.stderr);
    }
    // Lowered input and output budgets, on a real-shaped file.
    let path = files.path().join("ooms");
    std::fs::write(&path, hostile_corpus::many_ooms(100)).unwrap();
    let p = path.to_str().unwrap();
    let o = measure(&["analyze", p, "--max-input-bytes", "100"]);
    assert!(o.code == 2 && o.stderr.contains("--max-input-bytes"), "{}", o.stderr);
    let html = files.path().join("ooms.html");
    let o = measure(&["view", p, "--output", html.to_str().unwrap(), "--max-output-bytes", "10000"]);
    assert!(o.code == 2 && o.stderr.contains("--max-output-bytes") && !html.exists(), "{}", o.stderr);
    let o = measure(&["analyze", p, "--json", "--max-output-bytes", "1000"]);
    assert!(o.code == 2 && o.stderr.contains("--max-output-bytes"), "{}", o.stderr);
    for (flag, v) in [("--max-items", "100"), ("--max-containers", "100"), ("--max-memo", "3"), ("--max-depth", "1"), ("--max-bytes-objects", "0")] {
        let o = measure(&["analyze", p, flag, v]);
        if flag == "--max-bytes-objects" {
            assert_eq!(o.code, 0, "{flag}: a snapshot has no bytes objects: {}", o.stderr);
        } else {
            assert!(o.code == 2 && o.stderr.contains(flag), "{flag}: {}", o.stderr);
        }
    }
}

/// `VRAMSCOPE_HOSTILE_OUT=DIR cargo test --test hostile -- --ignored dump`: writes the big
/// files, to measure another build on them (or to seed a fuzzer).
#[test]
#[ignore]
fn dump_big_corpus() {
    let dir = PathBuf::from(std::env::var_os("VRAMSCOPE_HOSTILE_OUT").expect("set VRAMSCOPE_HOSTILE_OUT"));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, gen) in hostile_corpus::big() {
        std::fs::write(dir.join(name), gen()).unwrap();
    }
}
