//! What an interrupted run must not leave behind: the named temp files, staging folders and
//! private folders in flight are listed in one process-wide registry, and a SIGINT/SIGTERM
//! handler removes them before the process dies.
//!
//! The handler is libc `sigaction` with a self-pipe rather than the `ctrlc` crate: ctrlc's
//! callback is not told which signal arrived, and the exit status must say (130 for SIGINT,
//! 143 for SIGTERM). The signal handler only writes the signal number to a pipe
//! (async-signal-safe); a thread reads it, takes the registry lock — so it waits out an
//! output set's commit, which holds the same lock for its few renames — removes what is
//! registered, then restores the default action and re-raises the signal: the parent sees a
//! death by that signal, which a shell reports as `$?` 130 / 143 (and a shell loop stops, as
//! it would for a tool without a handler). Should the re-raise not end the process, it
//! exits with 128 + the signal number.
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Paths to remove if the process is interrupted, and the output set being staged.
pub(crate) struct Registry {
    pub files: Vec<PathBuf>,
    pub dirs: Vec<PathBuf>,
    pub set: Option<super::output_set::Staged>,
}

/// Unit tests that write files take this: an open output set would stage other tests' writes.
#[cfg(test)]
pub(crate) static TEST_LOCK: Mutex<()> = Mutex::new(());

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { files: Vec::new(), dirs: Vec::new(), set: None });

/// The registry, locked; installs the signal handler on first use. Hold the guard across
/// creating-and-registering (and unregistering-and-renaming) so that an interrupt never finds
/// a path on disk that it does not know about.
pub(crate) fn lock() -> MutexGuard<'static, Registry> {
    install();
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    pub fn forget_file(&mut self, p: &Path) {
        self.files.retain(|f| f != p);
    }

    pub fn forget_dir(&mut self, p: &Path) {
        self.dirs.retain(|d| d != p);
    }

    fn remove_all(&mut self) {
        for f in self.files.drain(..) {
            let _ = std::fs::remove_file(f);
        }
        for d in self.dirs.drain(..) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A folder of our own with an unpredictable name (created 0700, never an existing one),
/// removed when dropped and on SIGINT/SIGTERM: scratch space for a command's temporary files.
pub struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    /// A new folder inside `parent` named `<prefix><random>`.
    pub fn new_in(parent: &Path, prefix: &str) -> std::io::Result<PrivateDir> {
        let mut reg = lock();
        let path = create_unique_dir(parent, prefix)?;
        reg.dirs.push(path.clone());
        Ok(PrivateDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let mut reg = lock();
        let _ = std::fs::remove_dir_all(&self.path);
        reg.forget_dir(&self.path);
    }
}

/// mkdir of `<parent>/<prefix><16 random hex digits>`, mode 0700; a name that exists (a
/// planted file or link included) is never reused, another is drawn.
#[cfg(target_family = "wasm")]
pub(crate) fn create_unique_dir(parent: &Path, _prefix: &str) -> std::io::Result<PathBuf> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, format!("{}: the page writes no files", parent.display())))
}

/// mkdir of `<parent>/<prefix><16 random hex digits>`, mode 0700; a name that exists (a
/// planted file or link included) is never reused, another is drawn.
#[cfg(not(target_family = "wasm"))]
pub(crate) fn create_unique_dir(parent: &Path, prefix: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for _ in 0..32 {
        let path = parent.join(format!("{prefix}{:016x}", rand::random::<u64>()));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
}

#[cfg(not(target_family = "wasm"))]
static WRITE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

#[cfg(not(target_family = "wasm"))]
extern "C" fn on_signal(sig: libc::c_int) {
    let fd = WRITE_FD.load(std::sync::atomic::Ordering::Relaxed);
    let b = sig as u8;
    // SAFETY: write(2) is async-signal-safe; the buffer is a local byte.
    unsafe {
        libc::write(fd, (&b as *const u8).cast(), 1);
    }
}

/// Install the SIGINT/SIGTERM handler once per process (a signal the process was started
/// with ignored, as `nohup` does, stays ignored).
pub fn install() {
    // The browser has no signals, nor files to remove.
    #[cfg(not(target_family = "wasm"))]
    install_handler();
}

#[cfg(not(target_family = "wasm"))]
fn install_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: plain libc calls on fds we own; the reader thread owns fds[0].
        unsafe {
            if libc::pipe(fds.as_mut_ptr()) != 0 {
                return;
            }
            for fd in fds {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        WRITE_FD.store(fds[1], std::sync::atomic::Ordering::Relaxed);
        let rd = fds[0];
        let spawned = std::thread::Builder::new().name("vramscope-signals".into()).spawn(move || {
            let mut b = 0u8;
            loop {
                // SAFETY: reading one byte into a local.
                let n = unsafe { libc::read(rd, (&mut b as *mut u8).cast(), 1) };
                if n == 1 {
                    break;
                }
                if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            let sig = libc::c_int::from(b);
            let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
            reg.remove_all();
            // SAFETY: restoring the default action and re-raising ends the process by the signal.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
            std::process::exit(128 + sig);
        });
        if spawned.is_err() {
            return;
        }
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: a zeroed sigaction with our handler and an empty mask is valid.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(sig, &sa, &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN {
                    libc::sigaction(sig, &old, std::ptr::null_mut());
                }
            }
        }
    });
}
