//! Host RAM before a cpu run: a run whose tensors cannot fit in the memory the machine has
//! free would abort inside the allocator (`memory allocation of … failed`), so it runs on meta
//! instead, with a note saying why.
use super::UsageError;
use crate::analyse::estimate::estimate;
use crate::export::gib;
use crate::model::ModelConfig;
use crate::train::Precision;

/// Overrides MemAvailable (a size such as `8GiB`): lets tests and users on shared machines
/// say how much host memory a cpu run may use.
pub const AVAILABLE_ENV: &str = "VRAMSCOPE_HOST_MEM_AVAILABLE";

/// Share of the available memory a cpu run may plan to use: the closed-form estimate leaves
/// out allocator slack and the process's own memory.
const USABLE: f64 = 0.8;

/// Bytes the run may use: the override, else /proc/meminfo's MemAvailable; None when unknown.
fn available() -> anyhow::Result<Option<u64>> {
    if let Ok(v) = std::env::var(AVAILABLE_ENV) {
        let b = crate::record::gpu::parse_size(&v).map_err(|e| UsageError(format!("invalid {AVAILABLE_ENV}: {e}")))?;
        return Ok(Some(b as u64));
    }
    let Ok(info) = std::fs::read_to_string("/proc/meminfo") else { return Ok(None) };
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024))
}

/// None when a cpu run of `cfg` at every context fits in host memory; else the note that says
/// it runs on meta instead. `training` selects the training step's peak, else the forward's.
pub fn meta_instead(cfg: &ModelConfig, precision: Precision, batch: usize, contexts: &[usize], training: bool) -> anyhow::Result<Option<String>> {
    let Some(avail) = available()? else { return Ok(None) };
    let need = contexts
        .iter()
        .map(|&s| {
            let e = estimate(cfg, precision, batch, s);
            if training { e.training_bytes() } else { e.forward_bytes() }
        })
        .max()
        .unwrap_or(0);
    if (need as f64) <= USABLE * avail as f64 {
        return Ok(None);
    }
    let source = if std::env::var_os(AVAILABLE_ENV).is_some() { AVAILABLE_ENV } else { "MemAvailable" };
    let size = |b: u64| if b >= 1 << 30 { format!("{:.2} GiB", gib(b)) } else { format!("{:.1} MiB", crate::export::mib(b)) };
    Ok(Some(format!(
        "host memory: this cpu run needs about {} (closed-form estimate of its peak allocated tensors) but {} is available ({source}); \
         running on meta instead (shapes only: the same memory figures, no loss or timing). --device meta asks for this up front",
        size(need),
        size(avail)
    )))
}
