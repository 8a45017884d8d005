//! Memory recording: what was allocated and freed, by whom, and the running totals.
//!
//! The engine reports every storage allocation and free here (through
//! [`crate::engine::runtime`]); nothing else creates device memory.
pub mod allocator;
pub mod compute;
pub mod context;
pub mod gpu;
pub mod log;
pub mod pyframe;
pub mod reserve;

pub use context::{scope_name, Category, Phase};
pub use log::{EventKind, MemEvent, MemoryLog, MemoryStats, Recording};
pub use pyframe::{PyFn, PyStack};
