//! The library's jobs, from plain options (resolved from flags by `options/`) to results: a
//! profiling session builds the model, runs it under the allocator's model and returns what it
//! recorded; compare, sweep, fit and run-all are made of such runs, and estimate, analyze,
//! view and train are jobs of their own. Each
//! result gives its JSON and (in `text/`) what the command line prints; writing files and
//! printing are the caller's steps (the command line in `cli/`, the Python package).
pub mod compare;
pub mod estimate;
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

/// Size the rayon pool once per process (`--threads`); later calls keep the first size.
pub fn set_threads(n: Option<usize>) -> anyhow::Result<usize> {
    if let Some(0) = n {
        return Err(crate::error::usage("--threads", "must be at least 1"));
    }
    let n = n.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
    Ok(rayon::current_num_threads())
}

/// The allocator model's out-of-memory unwinds as a panic carrying `OomPanic`, caught by the
/// run that reports it; keep the default hook from printing it (other panics print as usual).
pub fn quiet_oom_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<crate::engine::runtime::OomPanic>().is_none() {
                prev(info)
            }
        }));
    });
}

