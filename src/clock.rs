//! Wall-clock time: std's on native targets; in the browser (wasm64-unknown-unknown), where
//! std's `Instant::now` and `SystemTime::now` panic, performance.now() and Date.now(), which the
//! page's loader (web/vramscope.js) gives the module as imports.
#[cfg(not(target_family = "wasm"))]
pub use std::time::{Instant, SystemTime, UNIX_EPOCH};
#[cfg(target_family = "wasm")]
pub use web::{Instant, SystemTime, UNIX_EPOCH};

#[cfg(target_family = "wasm")]
mod web {
    use std::time::Duration;

    #[link(wasm_import_module = "vramscope")]
    extern "C" {
        /// performance.now(): milliseconds, monotonic.
        fn performance_now() -> f64;
        /// Date.now(): milliseconds since the Unix epoch.
        fn date_now() -> f64;
    }

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64((x / 1e3).max(0.0))
    }

    /// A point of performance.now(), in milliseconds.
    #[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
    pub struct Instant(f64);

    impl Instant {
        pub fn now() -> Instant {
            // SAFETY: an import without arguments that returns a number.
            Instant(unsafe { performance_now() })
        }
        pub fn elapsed(&self) -> Duration {
            ms(Instant::now().0 - self.0)
        }
        pub fn duration_since(&self, earlier: Instant) -> Duration {
            ms(self.0 - earlier.0)
        }
    }

    /// Milliseconds since the Unix epoch, from Date.now().
    #[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
    pub struct SystemTime(f64);

    pub const UNIX_EPOCH: SystemTime = SystemTime(0.0);

    impl SystemTime {
        pub fn now() -> SystemTime {
            // SAFETY: an import without arguments that returns a number.
            SystemTime(unsafe { date_now() })
        }
        pub fn duration_since(&self, earlier: SystemTime) -> Result<Duration, Duration> {
            if self.0 >= earlier.0 { Ok(ms(self.0 - earlier.0)) } else { Err(ms(earlier.0 - self.0)) }
        }
    }
}
