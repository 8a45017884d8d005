//! The library's jobs, from plain options (resolved from flags by `options/`) to results: a
//! profiling session builds the model, runs it under the allocator's model and returns what it
//! recorded; compare, sweep, fit and run-all are made of such runs, and estimate, analyze,
//! view and train are jobs of their own. Each
//! result gives its JSON and (in `text/`) what the command line prints; writing files and
//! printing are the caller's steps (the command line in `cli/`, the Python package).
pub mod compare;
pub mod estimate;
pub mod estimate_generate;
pub mod fit;
pub mod hf;
pub mod host_memory;
pub mod names;
pub mod profile;
pub mod run_all;
pub mod serve;
pub mod snapshot;
pub mod study;
pub mod summary;
pub mod sweep;
pub mod text;
pub mod progress;
pub mod train;

pub use profile::{profile_one, ProfileOptions, ProfileType, Run};

/// The most worker threads `--threads` takes: far above any CPU's cores, below where thread
/// creation starts failing on ordinary systems (thousands of stacks).
pub const MAX_THREADS: usize = 1024;

/// Size the rayon pool once per process (`--threads`); later calls keep the first size.
pub fn set_threads(n: Option<usize>) -> anyhow::Result<usize> {
    static BUILT: std::sync::Once = std::sync::Once::new();
    match n {
        Some(0) => return Err(crate::error::usage("--threads", "must be at least 1")),
        Some(n) if n > MAX_THREADS => return Err(crate::error::usage("--threads", format!("{n} is above the limit of {MAX_THREADS} worker threads"))),
        _ => {}
    }
    let n = n.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS));
    let mut failed = None;
    // Only the first call sizes the pool; a failure there (threads the system will not
    // create) is the user's --threads, not a panic later in rayon.
    BUILT.call_once(|| failed = rayon::ThreadPoolBuilder::new().num_threads(n).build_global().err());
    if let Some(e) = failed {
        return Err(crate::error::usage("--threads", format!("cannot start {n} worker threads: {e}")));
    }
    Ok(rayon::current_num_threads())
}

/// The allocator model's out-of-memory unwinds as a panic carrying `OomPanic`, caught by the
/// run that reports it; keep the default hook from printing it, or a requested stop
/// ([`crate::engine::runtime::Interrupted`]); other panics print as usual.
pub fn quiet_oom_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = info.payload();
            if p.downcast_ref::<crate::engine::runtime::OomPanic>().is_none() && p.downcast_ref::<crate::engine::runtime::Interrupted>().is_none() {
                prev(info)
            }
        }));
    });
}

