//! Wall-clock time: std's on native targets; in the browser (wasm64-unknown-unknown), where
//! std's `Instant::now` and `SystemTime::now` panic, performance.now() and Date.now() through
//! web-time.
#[cfg(not(target_family = "wasm"))]
pub use std::time::{Instant, SystemTime, UNIX_EPOCH};
#[cfg(target_family = "wasm")]
pub use web_time::{Instant, SystemTime, UNIX_EPOCH};
