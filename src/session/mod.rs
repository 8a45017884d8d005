//! The library's jobs, from plain options to results: a profiling session builds the model,
//! runs it under the allocator's model and returns what it recorded; writing files and
//! printing are the caller's steps (the command line in `cli/`, the Python package).
pub mod bench;
pub mod estimate;
pub mod hf;
pub mod profile;
pub mod summary;
pub mod train;
pub mod progress;

pub use profile::{profile_one, ProfileOptions, ProfileType, Run};
