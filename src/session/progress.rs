//! A progress line on stderr for cpu runs, which take seconds to minutes, and for sweeps.
//! indicatif draws only when stderr is a terminal, so logs and CI output get nothing. The
//! browser build has no terminal (and indicatif's console does not compile for wasm64): there a
//! [`Bar`] draws nothing.
use crate::engine::Device;
#[cfg(not(target_family = "wasm"))]
use indicatif::{ProgressBar, ProgressStyle};
#[cfg(not(target_family = "wasm"))]
use std::time::Duration;

/// A progress bar on stderr (none in the browser build).
pub struct Bar {
    #[cfg(not(target_family = "wasm"))]
    bar: ProgressBar,
}

#[cfg_attr(target_family = "wasm", allow(unused_variables))]
impl Bar {
    pub fn set_message(&self, msg: &str) {
        #[cfg(not(target_family = "wasm"))]
        self.bar.set_message(msg.to_string());
    }
    pub fn inc(&self, n: u64) {
        #[cfg(not(target_family = "wasm"))]
        self.bar.inc(n);
    }
    pub fn position(&self) -> u64 {
        #[cfg(not(target_family = "wasm"))]
        return self.bar.position();
        #[cfg(target_family = "wasm")]
        0
    }
    pub fn finish_and_clear(&self) {
        #[cfg(not(target_family = "wasm"))]
        self.bar.finish_and_clear();
    }
}

/// A bar over `total` steps, ticking while a step runs; hidden on meta (a run takes
/// milliseconds) and when stderr is not a terminal.
#[cfg_attr(target_family = "wasm", allow(unused_variables))]
pub fn steps(device: Device, total: usize, what: &str) -> Bar {
    #[cfg(target_family = "wasm")]
    return Bar {};
    #[cfg(not(target_family = "wasm"))]
    {
        if device != Device::Cpu {
            return Bar { bar: ProgressBar::hidden() };
        }
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template("{spinner} {prefix} [{bar:20}] {pos}/{len} steps, {elapsed} ({msg})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(what.to_string());
        bar.set_message("building the model");
        bar.enable_steady_tick(Duration::from_millis(250));
        Bar { bar }
    }
}

/// A bar over a sweep's `total` grid points.
#[cfg_attr(target_family = "wasm", allow(unused_variables))]
pub fn points(total: usize) -> Bar {
    #[cfg(target_family = "wasm")]
    return Bar {};
    #[cfg(not(target_family = "wasm"))]
    {
        let bar = ProgressBar::new(total as u64);
        bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} points, {elapsed} [{msg}]").unwrap_or_else(|_| ProgressStyle::default_bar()));
        Bar { bar }
    }
}
