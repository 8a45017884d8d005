//! `vramscope bench` without PyTorch: the PyTorch columns are left out with a line saying
//! how to install torch, and no NaN is printed.
use std::process::Command;

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

#[test]
fn bench_without_torch_says_how_to_install_it_and_prints_no_nan() {
    let dir = std::env::temp_dir().join(format!("vramscope-bench-test-{}", std::process::id()));
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
