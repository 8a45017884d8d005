//! `vramscope bench` without PyTorch: the PyTorch columns are left out with a line saying
//! how to install torch, and no NaN is printed.
mod scratch;
use std::process::Command;

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

#[test]
fn bench_without_torch_says_how_to_install_it_and_prints_no_nan() {
    let dir = scratch::dir().join(format!("vramscope-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // An interpreter that runs but has no torch, as a fresh python3 does.
    let fake = dir.join("python3");
    std::fs::write(&fake, "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let missing = dir.join("no-such-python");
    for (which, python, why) in [("train", fake.to_str().unwrap(), "cannot import torch"), ("matmul", missing.to_str().unwrap(), "cannot run the Python interpreter")] {
        let o = vramscope(&["bench", which, "--steps", "4", "--threads", "1", "--python", python]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{which}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(out.contains(why) && out.contains("pip install torch"), "{which}: {out}");
        assert!(!out.to_lowercase().contains("nan"), "{which}: {out}");
        assert!(!out.contains("torch f32") && !out.contains("pytorch/ours"), "{which}: the PyTorch columns are left out: {out}");
    }
}

/// `bench analyze` at a small size: the snapshot is written, analyzed with the default
/// budgets, and the peak analyze finds is the one the generator counted (the command fails
/// otherwise). Its timing is printed, never asserted.
#[test]
fn bench_analyze_runs_at_a_small_size_and_writes_what_cpython_writes() {
    let dir = scratch::dir().join(format!("vramscope-bench-analyze-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("snap.pickle");
    let o = vramscope(&["bench", "analyze", "--events", "4000", "--snapshot", file.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    for want in ["cpu: ", "4000 trace entries", "default budgets: ", "s wall", "peak RSS", "as the generator counted"] {
        assert!(out.contains(want), "{want:?} missing: {out}");
    }
    // CPython loads the file, and pickle.dumps(protocol=4) of what it loaded gives the same
    // opcodes and arguments (FRAME boundaries aside): the file is what _dump_snapshot writes.
    let script = r#"
import pickle, pickletools, sys
d = open(sys.argv[1], 'rb').read()
s = pickle.loads(d)
t = s['device_traces'][0]
assert len(t) == 4000, len(t)
assert set(t[0]) == {'action', 'addr', 'size', 'stream', 'time_us', 'frames', 'compile_context', 'user_metadata'}, t[0].keys()
ops = lambda b: [(o.name, a) for o, a, _ in pickletools.genops(b) if o.name != 'FRAME']
assert ops(d) == ops(pickle.dumps(s, protocol=4)), 'opcodes differ from CPython'
print('same')
"#;
    match Command::new("python3").arg("-c").arg(script).arg(&file).output() {
        Ok(p) if p.status.success() || !String::from_utf8_lossy(&p.stderr).contains("No such file") => {
            assert!(p.status.success() && String::from_utf8_lossy(&p.stdout).contains("same"), "{}", String::from_utf8_lossy(&p.stderr));
        }
        _ => eprintln!("python3 not found: the CPython comparison is skipped"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
