//! What the `serve` CLI tests share: running the binary, its output as text, and the check
//! that a refused command exits 2 naming the flag and the reason.
use std::process::{Command, Output};

pub fn serve(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).arg("serve").args(args).output().expect("run vramscope")
}

pub fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Each `(args, flag, why)`, run after `base` and `--enforce-eager`, exits 2 and its error
/// names `flag` and says `why`.
pub fn assert_refused(base: &[&str], refused: &[(&[&str], &str, &str)]) {
    for (args, flag, why) in refused {
        let mut a = base.to_vec();
        a.extend_from_slice(args);
        a.push("--enforce-eager");
        let o = serve(&a);
        let err = text(&o).1;
        assert_eq!(o.status.code(), Some(2), "{a:?}: {err}");
        assert!(err.contains(flag) && err.contains(why), "{a:?} should name {flag} and say {why:?}: {err}");
    }
}
