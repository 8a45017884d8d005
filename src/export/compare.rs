//! `profile --compare`'s Markdown: one table per (context, profile type), each variant's peaks
//! against the baseline (the first row) and what is live at the peak per category.
use crate::record::Category;
use std::fmt::Write as _;

/// One variant's figures (bytes of allocator blocks).
pub struct VariantRow {
    pub name: String,
    pub oom: bool,
    pub peak_allocated: usize,
    pub peak_reserved: usize,
    /// Live at the peak, one per category of the table.
    pub at_peak: Vec<usize>,
    /// Seconds per measured step (cpu runs).
    pub step_seconds: Option<f64>,
}

/// The table for `rows` (the baseline first) under `### {title}`; step times when `cpu`.
pub fn compare_table(title: &str, optimizer: Option<&str>, cats: &[Category], rows: &[VariantRow], cpu: bool) -> String {
    let mut md = String::new();
    let base = &rows[0];
    // Small models read better in MiB; one unit per table either way.
    let (unit, div) = if base.peak_allocated < 1 << 30 { ("MiB", 1u64 << 20) } else { ("GiB", 1u64 << 30) };
    let u = |b: usize| b as f64 / div as f64;
    let rel = |x: usize, b: usize| if b == 0 { "-".to_string() } else { format!("{:+.1}%", (x as f64 / b as f64 - 1.0) * 100.0) };
    let _ = writeln!(md, "\n### {title} — {unit} are {} bytes\n", if unit == "GiB" { "1024³" } else { "1024²" });
    if let Some(o) = optimizer {
        let _ = writeln!(md, "Every variant's optimizer: {o}\n");
    }
    let names: Vec<&str> = cats.iter().map(|c| c.name()).collect();
    let _ = writeln!(
        md,
        "| variant | peak allocated ({unit}) | vs baseline | peak reserved ({unit}) | vs baseline | {} |{}",
        names.join(" | "),
        if cpu { " step time (ms) | vs baseline |" } else { "" }
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|{}{}", "---:|".repeat(cats.len()), if cpu { "---:|---:|" } else { "" });
    for r in rows {
        let (pa, pr) = (r.peak_allocated, r.peak_reserved);
        let cells: Vec<String> = r.at_peak.iter().map(|&b| format!("{:.3}", u(b))).collect();
        let peak = if r.oom { "OOM".to_string() } else { format!("{:.3}", u(pa)) };
        let time = match (cpu, r.step_seconds, base.step_seconds) {
            (false, ..) => String::new(),
            (true, Some(t), Some(b)) => format!(" {:.1} | ×{:.2} |", t * 1e3, t / b),
            (true, ..) => " - | - |".into(),
        };
        let _ = writeln!(md, "| {} | {peak} | {} | {:.3} | {} | {} |{time}", r.name, rel(pa, base.peak_allocated), u(pr), rel(pr, base.peak_reserved), cells.join(" | "));
    }
    md
}
