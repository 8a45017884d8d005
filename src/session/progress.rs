//! A progress line on stderr for cpu runs, which take seconds to minutes. indicatif draws only
//! when stderr is a terminal, so logs and CI output get nothing.
use crate::engine::Device;
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

/// A bar over `total` steps, ticking while a step runs; hidden on meta (a run takes
/// milliseconds) and when stderr is not a terminal.
pub fn steps(device: Device, total: usize, what: &str) -> ProgressBar {
    if device != Device::Cpu {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix} [{bar:20}] {pos}/{len} steps, {elapsed} ({msg})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(what.to_string());
    bar.set_message("building the model");
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}
