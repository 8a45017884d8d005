//! The folder a test binary writes its outputs under: one per process, removed when the
//! process exits (the harness returns from main, or exits after a failure), so repeated
//! `cargo test` runs do not pile folders up in the system's temp folder. Set
//! VRAMSCOPE_KEEP_TEST_DIRS=1 to keep it for a look after a failure.
use std::path::PathBuf;
use std::sync::OnceLock;

static DIR: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_at_exit() {
    if let Some(d) = DIR.get() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// This process's scratch folder (created on first use); tests join their own names to it.
pub fn dir() -> PathBuf {
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("vramscope-tests-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("creating the tests' scratch folder");
        if std::env::var_os("VRAMSCOPE_KEEP_TEST_DIRS").is_none() {
            // SAFETY: registers a plain function with no captured state; it runs once at exit.
            assert_eq!(unsafe { libc::atexit(remove_at_exit) }, 0, "registering the scratch folder's removal");
        }
        d
    })
    .clone()
}
