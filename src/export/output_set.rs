//! A command's outputs as one set, all or nothing (sweep.csv/json/md/svg with points/,
//! profile's snapshots, reports and summary.json, run-all's snapshots and tables …).
//!
//! While a set is open every `write_atomic` under its folder goes to a staging folder
//! inside it (`.vramscope-staging-<random>`, 0700); a target outside it (`--output
//! elsewhere/x.pickle`) gets a staging folder of its own beside it. `commit` then renames
//! every staged file over its target, holding the cleanup registry's lock so that SIGINT or
//! SIGTERM waits the few milliseconds it takes; an error, a panic that unwinds or an
//! interrupt before that removes the staging folders, and the previous outputs stay as they
//! were. (kill -9 cannot be caught: it leaves a staging folder of complete files beside the
//! untouched previous outputs, or, inside the commit, a part-renamed set; the next set opened
//! in that folder on the same host removes it.)
//!
//! From staging to commit the set holds an exclusive `flock` on each output folder: a second
//! process writing into the same folder waits (saying so), and two runs' files never mix.
//!
//! Each set has a run id: the JSON outputs carry it as `run_id`, HTML reports and SVG plots
//! as a comment, so files from one run can be told apart from an older run's. The CSV does
//! not (a first line or column would break its readers), nor do the snapshot pickles, whose
//! layout is PyTorch's `_dump_snapshot` format.
use super::atomic::{check_dir, parent_dir};
use super::cleanup::{self, create_unique_dir, Registry};
use anyhow::{Context, Result};
use std::path::{Component, Path, PathBuf};

const STAGING_PREFIX: &str = ".vramscope-staging-";

/// The open set, kept in the cleanup registry so the signal handler can remove its staging.
pub(crate) struct Staged {
    id: String,
    /// (output folder, its staging folder)
    roots: Vec<(PathBuf, PathBuf)>,
    /// (staged copy, target), in the order written
    files: Vec<(PathBuf, PathBuf)>,
    /// Each root's exclusive `flock`, held until the set is committed or dropped: another
    /// process's set into the same folder waits, so two sets never mix.
    locks: Vec<std::fs::File>,
}

/// The handle a command holds while its outputs are staged; dropped without `commit`, the
/// staged files are removed.
pub struct OutputSet {
    owner: bool,
    done: bool,
    id: String,
}

impl OutputSet {
    /// Open a set whose outputs go under `root`, created if missing. Checks up front that
    /// `root` is a writable folder (the error says why not; the caller names its flag). Inside
    /// an open set (run-all and sweep running profiles) it joins that set, which commits.
    pub fn begin(root: &Path) -> std::result::Result<OutputSet, String> {
        check_dir(root)?;
        let joins = cleanup::lock().set.is_some();
        // Waited for before the registry is locked, so Ctrl-C still works while waiting.
        let lock = if joins { None } else { Some(lock_dir(root, true).map_err(|e| format!("cannot lock {}: {e}", root.display()))?.expect("a blocking lock")) };
        let mut reg = cleanup::lock();
        if let Some(set) = &reg.set {
            let id = set.id.clone();
            staging_for(&mut reg, root, root).map_err(|e| format!("cannot write into {}: {e}", root.display()))?;
            return Ok(OutputSet { owner: false, done: false, id });
        }
        let id = format!("{:016x}", rand::random::<u64>());
        reg.set = Some(Staged { id: id.clone(), roots: Vec::new(), files: Vec::new(), locks: lock.into_iter().collect() });
        if let Err(e) = staging_for(&mut reg, root, root) {
            reg.set = None;
            return Err(format!("cannot write into {}: {e}", root.display()));
        }
        Ok(OutputSet { owner: true, done: false, id })
    }

    pub fn run_id(&self) -> &str {
        &self.id
    }

    /// Put every staged file in place (creating folders as needed), then remove the staging.
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        if !self.owner {
            return Ok(());
        }
        let mut reg = cleanup::lock();
        let Some(set) = reg.set.take() else { return Ok(()) };
        let res = (|| -> Result<()> {
            // A target that became a directory fails the set before anything moves.
            for (_, t) in &set.files {
                if std::fs::symlink_metadata(t).is_ok_and(|m| m.is_dir()) {
                    anyhow::bail!("writing {}: it is a directory", t.display());
                }
            }
            for (s, t) in &set.files {
                let dir = parent_dir(t);
                std::fs::create_dir_all(dir).with_context(|| format!("creating directory {}", dir.display()))?;
                std::fs::rename(s, t).with_context(|| format!("writing {}", t.display()))?;
            }
            Ok(())
        })();
        remove_staging(&mut reg, &set);
        res
    }
}

impl Drop for OutputSet {
    fn drop(&mut self) {
        if self.owner && !self.done {
            let mut reg = cleanup::lock();
            if let Some(set) = reg.set.take() {
                remove_staging(&mut reg, &set);
            }
        }
    }
}

fn remove_staging(reg: &mut Registry, set: &Staged) {
    for (_, st) in &set.roots {
        let _ = std::fs::remove_dir_all(st);
        reg.forget_dir(st);
    }
}

/// An exclusive `flock` on folder `dir` (created if missing): Ok(None) when another process
/// holds it and `wait` is false. Waiting says so on stderr. A folder, not a file in it, is
/// locked, so nothing is left behind.
#[cfg(target_family = "wasm")]
fn lock_dir(dir: &Path, _wait: bool) -> std::io::Result<Option<std::fs::File>> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, format!("{}: the page writes no files", dir.display())))
}

#[cfg(not(target_family = "wasm"))]
fn lock_dir(dir: &Path, wait: bool) -> std::io::Result<Option<std::fs::File>> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(dir)?;
    let f = std::fs::File::open(dir)?;
    let flock = |op| {
        // SAFETY: flock on an open descriptor this function owns.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    loop {
        match flock(libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => return Ok(Some(f)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.raw_os_error() != Some(libc::EWOULDBLOCK) => return Err(e),
            Err(_) if !wait => return Ok(None),
            Err(_) => break,
        }
    }
    eprintln!("vramscope: another run is writing into {}: waiting for it to finish", dir.display());
    loop {
        match flock(libc::LOCK_EX) {
            Ok(()) => return Ok(Some(f)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The staging folder covering `path` in the open set: an existing root's when `path` lies
/// under it, else a new one in `new_root`. Returns (root, staging).
fn staging_for(reg: &mut Registry, path: &Path, new_root: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    let set = reg.set.as_ref().expect("a set is open");
    if let Some(r) = set.roots.iter().find(|(r, _)| under(path, r).is_some()) {
        return Ok(r.clone());
    }
    std::fs::create_dir_all(new_root)?;
    remove_stale_staging(new_root);
    let staging = create_unique_dir(new_root, &format!("{STAGING_PREFIX}{}-{}-", host(), std::process::id()))?;
    reg.dirs.push(staging.clone());
    let root = (new_root.to_path_buf(), staging);
    reg.set.as_mut().expect("a set is open").roots.push(root.clone());
    Ok(root)
}

/// This host's name as it goes into staging folder names ([A-Za-z0-9.] only).
#[cfg(not(target_family = "wasm"))]
fn host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let name = if ok { &buf[..buf.iter().position(|&b| b == 0).unwrap_or(buf.len())] } else { b"host".as_slice() };
    name.iter().map(|&b| if b.is_ascii_alphanumeric() || b == b'.' { b as char } else { '_' }).collect()
}

/// Remove the staging folders a killed run (kill -9, a crash) left in `dir`: those named for
/// this host, owned by this user, whose process no longer exists. Another host's (a shared
/// disk) or a live process's are left alone.
#[cfg(target_family = "wasm")]
fn host() -> String {
    "browser".into()
}

/// The browser leaves no staging folders.
#[cfg(target_family = "wasm")]
fn remove_stale_staging(_dir: &Path) {}

#[cfg(not(target_family = "wasm"))]
fn remove_stale_staging(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let ours = format!("{STAGING_PREFIX}{}-", host());
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(&ours).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<libc::pid_t>().ok()) else { continue };
        let Ok(m) = std::fs::symlink_metadata(e.path()) else { continue };
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = pid > 0 && unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if m.is_dir() && m.uid() == uid && gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// `path` relative to `root`, when it lies under it in plain steps (no `..`).
fn under<'a>(path: &'a Path, root: &Path) -> Option<&'a Path> {
    let rel = if root == Path::new(".") && path.is_relative() { path } else { path.strip_prefix(root).ok()? };
    rel.components().all(|c| matches!(c, Component::Normal(_))).then_some(rel)
}

/// Where `target` is staged while a set is open (None when no set is open).
pub(crate) fn stage(target: &Path) -> Result<Option<PathBuf>> {
    let mut reg = cleanup::lock();
    let Some(set) = &reg.set else { return Ok(None) };
    if let Some((s, _)) = set.files.iter().find(|(_, t)| t == target) {
        return Ok(Some(s.clone()));
    }
    // A target outside every root (`--output elsewhere/x.pickle`) locks its folder too; a
    // wait for another process's set happens with the registry unlocked.
    if set.roots.iter().all(|(r, _)| under(target, r).is_none()) {
        let dir = parent_dir(target);
        let lock = match lock_dir(dir, false).with_context(|| format!("locking {}", dir.display()))? {
            Some(l) => l,
            None => {
                drop(reg);
                let l = lock_dir(dir, true).with_context(|| format!("locking {}", dir.display()))?.expect("a blocking lock");
                reg = cleanup::lock();
                l
            }
        };
        match reg.set.as_mut() {
            Some(set) => set.locks.push(lock),
            None => return Ok(None),
        }
    }
    let (root, staging) = staging_for(&mut reg, target, parent_dir(target)).with_context(|| format!("writing {}", target.display()))?;
    let staged = staging.join(under(target, &root).expect("target lies under its root"));
    reg.set.as_mut().expect("a set is open").files.push((staged.clone(), target.to_path_buf()));
    Ok(Some(staged))
}

/// Whether `target` lies in a folder of the open set (a name vramscope chose inside the
/// user's output folder), not at a path the user gave as a file.
pub(crate) fn chosen_name(target: &Path) -> bool {
    let reg = cleanup::lock();
    reg.set.as_ref().is_some_and(|s| s.roots.iter().any(|(r, _)| target != r.as_path() && under(target, r).is_some_and(|rel| !rel.as_os_str().is_empty())))
}

/// Where to read an output this process wrote: its staged copy while the set is open.
pub fn staged_path(target: &Path) -> PathBuf {
    let reg = cleanup::lock();
    reg.set.as_ref().and_then(|s| s.files.iter().find(|(_, t)| t == target).map(|(s, _)| s.clone())).unwrap_or_else(|| target.to_path_buf())
}

/// The open set's run id.
pub fn run_id() -> Option<String> {
    cleanup::lock().set.as_ref().map(|s| s.id.clone())
}

/// An HTML page or SVG image with the open set's run id as a comment after its first line
/// (the doctype or the `<svg>` tag: a comment before a doctype would switch a browser to
/// quirks mode); unchanged when no set is open.
/// Works on bytes: the HTML report is built as bytes, and a copy through `String` would
/// validate the whole page again.
pub fn with_run_id_comment(mut text: Vec<u8>) -> Vec<u8> {
    let Some(id) = run_id() else { return text };
    if let Some(i) = text.iter().position(|&b| b == b'\n') {
        let comment = format!("<!-- vramscope run_id: {id} -->\n");
        text.splice(i + 1..i + 1, comment.into_bytes());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::atomic::tests::names;
    use crate::export::write_atomic;

    // One test: the open set is process-wide, and the test harness runs tests in parallel.
    #[test]
    fn a_set_appears_whole_at_commit_or_not_at_all() {
        let _g = cleanup::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("out");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("a.txt"), "old a").unwrap();

        // Dropped without commit: nothing changes, no staging is left.
        let set = OutputSet::begin(&root).unwrap();
        write_atomic(&root.join("a.txt"), b"new a").unwrap();
        write_atomic(&root.join("points/p1/b.txt"), b"b").unwrap();
        write_atomic(&elsewhere.join("c.txt"), b"c").unwrap();
        assert_eq!(std::fs::read(staged_path(&root.join("points/p1/b.txt"))).unwrap(), b"b");
        assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"old a");
        drop(set);
        assert_eq!(names(&root), vec!["a.txt"]);
        assert_eq!(names(&elsewhere), Vec::<String>::new());
        assert!(cleanup::lock().dirs.is_empty());

        // Committed: every file in place, a nested set joined the outer one.
        let set = OutputSet::begin(&root).unwrap();
        let id = set.run_id().to_string();
        let inner = OutputSet::begin(&root.join("points")).unwrap();
        assert_eq!(inner.run_id(), id);
        write_atomic(&root.join("points/p1/b.txt"), b"b").unwrap();
        inner.commit().unwrap();
        assert!(!root.join("points/p1/b.txt").exists());
        write_atomic(&root.join("a.txt"), b"new a").unwrap();
        write_atomic(&elsewhere.join("c.txt"), b"c").unwrap();
        assert_eq!(with_run_id_comment(b"<svg>\n</svg>\n".to_vec()), format!("<svg>\n<!-- vramscope run_id: {id} -->\n</svg>\n").into_bytes());
        set.commit().unwrap();
        assert_eq!(names(&root), vec!["a.txt", "points"]);
        assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"new a");
        assert_eq!(std::fs::read(root.join("points/p1/b.txt")).unwrap(), b"b");
        assert_eq!(names(&elsewhere), vec!["c.txt"]);
        assert!(run_id().is_none() && cleanup::lock().dirs.is_empty());
    }
}
