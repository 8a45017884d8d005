//! Wall-clock time: std's on native targets; in the browser (wasm32-unknown-unknown), where
//! std's `Instant::now` and `SystemTime::now` panic, performance.now() and Date.now() through
//! web-time.
#[cfg(not(target_arch = "wasm32"))]
pub use std::time::{Instant, SystemTime, UNIX_EPOCH};
#[cfg(target_arch = "wasm32")]
pub use web_time::{Instant, SystemTime, UNIX_EPOCH};
