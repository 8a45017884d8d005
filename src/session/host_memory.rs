//! Host RAM before a cpu run: a run whose tensors cannot fit in the memory the machine has
//! free would abort inside the allocator (`memory allocation of … failed`), so it runs on meta
//! instead, with a note saying why.
use crate::error::UsageError;
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
    Ok(mem_available())
}

/// /proc/meminfo's MemAvailable in bytes, None when unknown.
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
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

/// Host bytes a recorded meta (or cpu) profile keeps per decoder layer, whatever the tensor
/// sizes: the model's handles, the autograd graph, the event log (one record per allocation
/// and free, kept whole for the peak analysis) and the snapshot's blocks and report.
/// Measured on the walkthrough training step (release build: about 150 KiB per layer and
/// 1.2 KiB per trace entry from 1k-, 2k- and 10k-layer runs), rounded up.
pub const BYTES_PER_LAYER: u64 = 192 << 10;
/// Host bytes per trace entry the snapshot keeps (the ring buffer holds `--max-entries`).
pub const BYTES_PER_TRACE_ENTRY: u64 = 1280;
/// Trace entries one layer adds to a training step (the walkthrough's is about 390).
const TRACE_ENTRIES_PER_LAYER: u64 = 512;

/// Refuses, before any work, a profile whose bookkeeping cannot fit in host memory: on meta
/// nothing is proportional to tensor sizes, but every layer adds events, graph nodes and
/// snapshot blocks. Names --num-layers (and --max-entries when the trace is what is large).
/// Measured against the machine's MemAvailable: VRAMSCOPE_HOST_MEM_AVAILABLE sizes a cpu run's
/// tensors (and so decides when it moves to meta), not this.
pub fn check_bookkeeping(layers: usize, max_entries: usize) -> anyhow::Result<()> {
    let Some(avail) = mem_available() else { return Ok(()) };
    let layers = layers as u64;
    let trace = (max_entries as u64).min(layers.saturating_mul(TRACE_ENTRIES_PER_LAYER).saturating_add(1 << 16));
    let need = layers.saturating_mul(BYTES_PER_LAYER).saturating_add(trace.saturating_mul(BYTES_PER_TRACE_ENTRY));
    if (need as f64) <= USABLE * avail as f64 {
        return Ok(());
    }
    let fit = ((USABLE * avail as f64 - (trace * BYTES_PER_TRACE_ENTRY) as f64).max(0.0) / BYTES_PER_LAYER as f64) as u64;
    let entries = if trace > 0 { format!("; plus {trace} trace entries, --max-entries") } else { String::new() };
    Err(UsageError(format!(
        "invalid --num-layers: {layers} layers need about {:.1} GiB of host memory for the run's bookkeeping (about {} KiB per layer: \
         events, autograd graph, snapshot blocks{entries}), more than the {:.1} GiB vramscope allows itself ({:.0} % of the {:.1} GiB \
         available, MemAvailable); about {fit} layers fit",
        gib(need),
        BYTES_PER_LAYER >> 10,
        gib((USABLE * avail as f64) as u64),
        USABLE * 100.0,
        gib(avail)
    ))
    .into())
}
