//! Every command in the README's `sh` code blocks runs, in order, in one scratch folder (so a
//! command can read what an earlier one wrote, as a reader following the README would), and
//! exits 0. Commands that would take minutes on CI's two cores run with fewer steps; each such
//! change is listed in `SHORTER` with its reason, and nothing else is altered. The README's
//! links point at files that exist.
use std::path::{Path, PathBuf};
use std::process::Command;

const README: &str = include_str!("../README.md");

/// Flag values set (or added) for speed, by subcommand, with the reason. Only cpu `train`
/// runs and `bench` are shortened; everything on meta runs exactly as written.
const SHORTER: &[(&str, &[(&str, &str)], &str)] = &[
    ("train", &[("--num-steps", "4"), ("--warmup-steps", "1")], "a cpu training run prints the same lines after 4 steps as after 20"),
    ("bench", &[("--steps", "4"), ("--no-torch", "")], "a benchmark's ratios are not checked here, only that it runs; PyTorch's side is optional"),
];

/// The `sh` code blocks' lines, comments stripped.
fn commands() -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in README.lines() {
        let t = line.trim();
        if let Some(lang) = t.strip_prefix("```") {
            in_sh = !in_sh && lang.trim() == "sh";
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

fn runnable(cmd: &str, scratch: &Path) -> Option<Vec<String>> {
    if cmd == "cargo test" || cmd.starts_with("cargo test ") {
        return None; // the suite this test is part of
    }
    if cmd.starts_with("pip install ") || cmd.starts_with("python -c ") {
        // The Python package: .ci/run installs it and python/tests runs these (the same
        // `profile` figure as the CLI's summary.json).
        return None;
    }
    let rest = cmd.strip_prefix("cargo run --release -- ").unwrap_or_else(|| panic!("README command not covered by this test: {cmd}"));
    // A quoted word (a value with shell-special characters, such as `;`) loses its quotes, as
    // the shell removes them.
    let mut args: Vec<String> = rest.split_whitespace().map(|w| w.trim_matches('"').to_string()).collect();
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

#[test]
fn every_readme_command_runs() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = std::env::temp_dir().join(format!("vramscope-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let cwd = scratch.join("repo");
    std::fs::create_dir_all(&cwd).unwrap();
    // Commands name repository files (tests/fixtures/...) relative to the repository root.
    std::os::unix::fs::symlink(repo.join("tests"), cwd.join("tests")).unwrap();
    let cmds = commands();
    assert!(cmds.len() >= 20, "found only {} commands in the README's sh blocks", cmds.len());
    let mut failures = Vec::new();
    let mut ran = 0;
    for cmd in &cmds {
        let Some(args) = runnable(cmd, &scratch) else { continue };
        let t = std::time::Instant::now();
        let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(&args).current_dir(&cwd).env_remove("PYTORCH_CUDA_ALLOC_CONF").output().unwrap();
        ran += 1;
        eprintln!("{:>6.1} s  exit {:?}  vramscope {}", t.elapsed().as_secs_f64(), o.status.code(), args.join(" "));
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr);
            failures.push(format!("{cmd}\n    ran as: vramscope {}\n    {}", args.join(" "), err.lines().last().unwrap_or("")));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{} of {ran} README commands failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn readme_links_point_at_files_that_exist() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    let mut rest = README;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        let target = &rest[..end];
        rest = &rest[end..];
        if target.starts_with("http") || target.starts_with('#') || target.starts_with("mailto:") {
            continue;
        }
        let path: PathBuf = repo.join(target.split('#').next().unwrap());
        if !path.exists() {
            missing.push(target.to_string());
        }
    }
    assert!(missing.is_empty(), "README links to missing files: {missing:?}");
}
