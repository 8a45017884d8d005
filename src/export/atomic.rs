//! One output file written whole or not at all.
//!
//! The bytes go to a temp file in the target's folder that nobody else can name in advance,
//! then a rename puts it over the target. On Linux the temp file is unnamed (O_TMPFILE): a
//! new file is linked straight at its name, whole, so neither an error, SIGINT nor kill -9
//! can leave a temp file behind (every file of a staged output set is new). One replacing an
//! existing file gets a random name for the instant between `linkat` and `rename`, both done
//! under the cleanup registry's lock: SIGINT and SIGTERM wait for the rename, and only a
//! kill -9 in that instant leaves the named copy.
//! Elsewhere, or on a filesystem without O_TMPFILE, it is a named file created with O_EXCL
//! (which never follows a symlink) under a random name and registered for removal on
//! SIGINT/SIGTERM. The target itself is replaced, never followed: a symlink planted at an
//! output's name is swapped for the new file. A target that is a device or a FIFO, or a
//! link under /dev or /proc (`--json /dev/stdout`, even when stdout is a file), is written
//! straight into instead (appending): renaming over it would replace the device node or the
//! link; only where the user named it, though: one planted at a name vramscope chose inside an
//! output folder (`out/summary.json`) is replaced like any file. Every error names the target
//! file.
use super::cleanup;
use anyhow::{bail, Context, Result};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Write `bytes` to `path` atomically (see the module comment). While an output set is
/// open (`OutputSet::begin`), the file is staged and appears with the rest of the set when
/// it commits.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    // Only a path the user named is written into: a FIFO or device planted at a name vramscope
    // chose inside an output folder (out/summary.json) is replaced, not opened (a FIFO would
    // block the run).
    if written_into(path) && !super::output_set::chosen_name(path) {
        return write_into(path, bytes);
    }
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        bail!("writing {}: it is a directory", path.display());
    }
    let dest = super::output_set::stage(path)?.unwrap_or_else(|| path.to_path_buf());
    write_replacing(&dest, bytes, path)
}

/// A character or block device or a FIFO (after following links), or a link under /dev or
/// /proc (/dev/stdout, /dev/fd/N, /proc/self/fd/N): written into, not replaced.
fn written_into(path: &Path) -> bool {
    let special = std::fs::metadata(path).is_ok_and(|m| {
        let t = m.file_type();
        t.is_char_device() || t.is_block_device() || t.is_fifo()
    });
    let fd_link = (path.starts_with("/dev") || path.starts_with("/proc")) && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    special || fd_link
}

/// The descriptor a path names in this process (/dev/stdout, /dev/fd/N, /proc/self/fd/N).
fn own_fd(path: &Path) -> Option<libc::c_int> {
    let s = path.to_str()?;
    match s {
        "/dev/stdin" => Some(0),
        "/dev/stdout" => Some(1),
        "/dev/stderr" => Some(2),
        _ => s.strip_prefix("/dev/fd/").or_else(|| s.strip_prefix("/proc/self/fd/")).and_then(|n| n.parse().ok()),
    }
}

fn write_into(path: &Path, bytes: &[u8]) -> Result<()> {
    let opened = match own_fd(path) {
        // Our own descriptor is written through a duplicate, which shares its offset with the
        // text already printed to it (reopening a redirected stdout would start at 0).
        Some(fd) => {
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().flush();
            // SAFETY: dup of a descriptor number; the result is owned by the File below.
            let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if d < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                // SAFETY: `d` is a fresh descriptor nothing else owns.
                Ok(unsafe { <File as std::os::unix::io::FromRawFd>::from_raw_fd(d) })
            }
        }
        None => OpenOptions::new().append(true).open(path),
    };
    let mut f = opened.with_context(|| format!("writing {}", path.display()))?;
    f.write_all(bytes).and_then(|()| f.flush()).with_context(|| format!("writing {}", path.display()))
}

/// The folder a file lives in ("." for a bare name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Write a temp file beside `dest` and rename it over `dest`; errors name `shown` (the
/// target the user asked for, when `dest` is its staged copy).
fn write_replacing(dest: &Path, bytes: &[u8], shown: &Path) -> Result<()> {
    let dir = parent_dir(dest);
    std::fs::create_dir_all(dir).with_context(|| format!("creating directory {}", parent_dir(shown).display()))?;
    let name = dest.file_name().with_context(|| format!("{}: output path has no file name", shown.display()))?;
    let name = name.to_string_lossy();
    // A file being replaced keeps its permission bits; a new one gets 0666 minus the umask.
    let keep_mode = std::fs::symlink_metadata(shown).ok().filter(|m| m.is_file()).map(|m| m.permissions().mode() & 0o7777);
    let fill = |f: &mut File| -> std::io::Result<()> {
        f.write_all(bytes)?;
        if let Some(mode) = keep_mode {
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        f.sync_all()
    };
    let ctx = || format!("writing {}", shown.display());
    #[cfg(target_os = "linux")]
    match open_unnamed(dir) {
        Ok(mut f) => {
            fill(&mut f).with_context(ctx)?;
            match link_over(&f, dir, &name, dest) {
                Ok(()) => return Ok(()),
                // No /proc to link through: write a named temp file instead.
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(ctx),
            }
        }
        Err(e) if tmpfile_unsupported(&e) => {}
        Err(e) => return Err(e).with_context(ctx),
    }
    write_named(dir, &name, dest, fill).with_context(ctx)
}

/// The portable way: a named O_EXCL temp file, filled, renamed over `dest`; removed on error.
fn write_named(dir: &Path, name: &str, dest: &Path, fill: impl FnOnce(&mut File) -> std::io::Result<()>) -> std::io::Result<()> {
    let (mut f, tmp) = create_named(dir, name)?;
    let res = fill(&mut f).and_then(|()| {
        drop(f);
        let mut reg = cleanup::lock();
        let r = std::fs::rename(&tmp, dest);
        reg.forget_file(&tmp);
        r
    });
    if res.is_err() {
        let mut reg = cleanup::lock();
        let _ = std::fs::remove_file(&tmp);
        reg.forget_file(&tmp);
    }
    res
}

/// An unnamed file in `dir` (O_TMPFILE), mode 0666 minus the umask once linked.
#[cfg(target_os = "linux")]
fn open_unnamed(dir: &Path) -> std::io::Result<File> {
    OpenOptions::new().write(true).mode(0o666).custom_flags(libc::O_TMPFILE).open(dir)
}

/// Kernels and filesystems without O_TMPFILE answer EOPNOTSUPP, EISDIR (kernels that predate
/// it and see only O_DIRECTORY) or EINVAL.
#[cfg(target_os = "linux")]
fn tmpfile_unsupported(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL))
}

/// A random temp name for `name` in `dir`: `.NAME.<16 hex>.tmp` (NAME cut to 100 bytes).
fn temp_name(dir: &Path, name: &str) -> PathBuf {
    let mut cut = name.len().min(100);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    dir.join(format!(".{}.{:016x}.tmp", &name[..cut], rand::random::<u64>()))
}

/// Link the unnamed file at `dest` when nothing is there (no temp name ever exists);
/// otherwise give it a random name (linkat never follows or replaces an existing path) and
/// rename it over `dest`, both under the registry lock.
#[cfg(target_os = "linux")]
fn link_over(f: &File, dir: &Path, name: &str, dest: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    let from = CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).expect("no NUL");
    let _reg = cleanup::lock();
    let at = CString::new(dest.as_os_str().as_bytes()).map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))?;
    // SAFETY: two valid NUL-terminated paths.
    if unsafe { libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, at.as_ptr(), libc::AT_SYMLINK_FOLLOW) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.kind() != ErrorKind::AlreadyExists {
        return Err(e);
    }
    for _ in 0..32 {
        let tmp = temp_name(dir, name);
        let to = CString::new(tmp.as_os_str().as_bytes()).map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))?;
        // SAFETY: two valid NUL-terminated paths.
        let rc = unsafe { libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::AlreadyExists {
                continue;
            }
            return Err(e);
        }
        return std::fs::rename(&tmp, dest).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        });
    }
    Err(ErrorKind::AlreadyExists.into())
}

/// A new named temp file in `dir` (O_CREAT|O_EXCL: never an existing file, never through a
/// symlink), registered for removal on SIGINT/SIGTERM.
fn create_named(dir: &Path, name: &str) -> std::io::Result<(File, PathBuf)> {
    let mut reg = cleanup::lock();
    for _ in 0..32 {
        let tmp = temp_name(dir, name);
        match OpenOptions::new().write(true).create_new(true).mode(0o666).open(&tmp) {
            Ok(f) => {
                reg.files.push(tmp.clone());
                return Ok((f, tmp));
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ErrorKind::AlreadyExists.into())
}

/// Can files be written into `dir`? Creates it if missing, then creates and removes a probe
/// temp file the way outputs are written. The error says what is wrong, without a flag name.
pub fn check_dir(dir: &Path) -> std::result::Result<(), String> {
    if let Ok(m) = std::fs::metadata(dir) {
        if !m.is_dir() {
            return Err(format!("{} exists and is not a directory", dir.display()));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create directory {}: {e}", dir.display()))?;
    let unwritable = |e: std::io::Error| format!("cannot write into {}: {e}", dir.display());
    #[cfg(target_os = "linux")]
    match open_unnamed(dir) {
        Ok(_) => return Ok(()),
        Err(e) if tmpfile_unsupported(&e) => {}
        Err(e) => return Err(unwritable(e)),
    }
    let (f, tmp) = create_named(dir, "probe").map_err(unwritable)?;
    drop(f);
    let mut reg = cleanup::lock();
    let _ = std::fs::remove_file(&tmp);
    reg.forget_file(&tmp);
    Ok(())
}

/// Can `path` be written as an output file? Not a directory, and its folder passes
/// `check_dir` (a device, a FIFO or /dev/stdout is written into and needs no folder check).
pub fn check_file(path: &Path) -> std::result::Result<(), String> {
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(format!("{} is a directory", path.display()));
    }
    if written_into(path) {
        return Ok(());
    }
    if path.file_name().is_none() {
        return Err(format!("{} names no file", path.display()));
    }
    check_dir(parent_dir(path))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The entries of `dir`, sorted (what a failed or interrupted write must leave).
    pub(crate) fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn old_predictable_temp_names_are_not_followed() {
        let _g = cleanup::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        // What the old writer opened with File::create: `.NAME.tmp<pid>`.
        let planted = out.join(format!(".a.json.tmp{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        write_atomic(&out.join("a.json"), b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(out.join("a.json")).unwrap(), b"new");
        assert_eq!(names(&out), vec![planted.file_name().unwrap().to_string_lossy().into_owned(), "a.json".into()]);
    }

    #[test]
    fn named_fallback_replaces_the_target_and_cleans_up_on_error() {
        let _g = cleanup::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x.txt");
        std::fs::write(&dest, "old").unwrap();
        write_named(dir.path(), "x.txt", &dest, |f| f.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"new");
        assert_eq!(names(dir.path()), vec!["x.txt"]);
        let err = write_named(dir.path(), "x.txt", &dest, |f| {
            f.write_all(b"half")?;
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        });
        assert_eq!(err.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(std::fs::read(&dest).unwrap(), b"new");
        assert_eq!(names(dir.path()), vec!["x.txt"]);
        assert!(cleanup::lock().files.is_empty());
    }

    #[test]
    fn errors_name_the_target() {
        let _g = cleanup::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let e = format!("{:#}", write_atomic(&sub, b"x").unwrap_err());
        assert_eq!(e, format!("writing {}: it is a directory", sub.display()));
        if Path::new("/dev/full").exists() {
            let e = format!("{:#}", write_atomic(Path::new("/dev/full"), b"x").unwrap_err());
            assert_eq!(e, "writing /dev/full: No space left on device (os error 28)");
        }
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        assert_eq!(check_dir(&file).unwrap_err(), format!("{} exists and is not a directory", file.display()));
        assert_eq!(check_file(&sub).unwrap_err(), format!("{} is a directory", sub.display()));
        assert!(check_file(&dir.path().join("new/deeper/x.json")).is_ok());
        assert_eq!(names(&dir.path().join("new/deeper")), Vec::<String>::new());
    }
}
