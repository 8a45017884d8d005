//! Where memory_viz's viewer code is (for tests/memviz_replay.mjs), shared by the tests that
//! replay snapshots in it.
use std::path::{Path, PathBuf};
use std::process::Command;

/// The viewer folder (`shared/tools/memviz/viewer` beside the repository or above it, or under
/// `$VRAMSCOPE_SHARED`) when node is installed too; None after a printed NOTICE otherwise.
pub fn viewer() -> Option<PathBuf> {
    let rel = Path::new("tools/memviz/viewer/process_alloc_data.js");
    let found = match std::env::var_os("VRAMSCOPE_SHARED") {
        // Named but wrong is a mistake, not a skip (as tests/memviz.rs has it).
        Some(d) => {
            let p = Path::new(&d).join(rel);
            assert!(p.exists(), "VRAMSCOPE_SHARED={} has no {}", Path::new(&d).display(), rel.display());
            Some(p)
        }
        None => Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().skip(1).map(|a| a.join("shared").join(rel)).find(|p| p.exists()),
    };
    let node = Command::new("node").arg("--version").output().ok().filter(|o| o.status.success());
    let notice = |m: &str| {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "NOTICE: {m}: skipping the checks against memory_viz's process_alloc_data");
    };
    match (found, node) {
        (None, _) => {
            notice("no shared/tools/memviz/viewer beside the repository or above it (set VRAMSCOPE_SHARED)");
            None
        }
        (_, None) => {
            notice("node is not installed");
            None
        }
        (Some(p), Some(_)) => Some(p.parent().unwrap().to_path_buf()),
    }
}
