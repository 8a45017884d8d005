//! The operator table of a recorded window of steps: what `prof.key_averages().table(sort_by=…)`
//! prints for the workshop's `--profile-operators`, one row per operator name.
use crate::record::compute::OpRecord;
use std::collections::HashMap;

/// What the rows are ordered by (the torch sort keys that have a meaning here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// `self_cpu_time_total` / `cpu_time_total` (our ops are leaves: self = total).
    CpuTimeTotal,
    /// `cpu_time`: the average per call.
    CpuTimeAvg,
    /// `count`: calls.
    Count,
    /// `flops`: floating-point operations (the order on meta, where no kernel runs).
    Flops,
}

impl SortKey {
    pub fn name(self) -> &'static str {
        match self {
            SortKey::CpuTimeTotal => "self_cpu_time_total",
            SortKey::CpuTimeAvg => "cpu_time",
            SortKey::Count => "count",
            SortKey::Flops => "flops",
        }
    }
}

/// One operator's totals over the window.
#[derive(Clone, Debug, PartialEq)]
pub struct OpRow {
    pub name: &'static str,
    pub calls: u64,
    pub total_us: f64,
    pub flops: u64,
    pub bytes: u64,
}

/// Group `ops` by operator name and order them by `sort` (largest first, then by name).
pub fn rows(ops: &[OpRecord], sort: SortKey) -> Vec<OpRow> {
    let mut by: HashMap<&'static str, OpRow> = HashMap::new();
    for o in ops {
        let r = by.entry(o.name).or_insert(OpRow { name: o.name, calls: 0, total_us: 0.0, flops: 0, bytes: 0 });
        r.calls += 1;
        r.total_us += o.dur_us;
        r.flops += o.flops;
        r.bytes += o.bytes_read + o.bytes_written;
    }
    let mut v: Vec<OpRow> = by.into_values().collect();
    let key = |r: &OpRow| match sort {
        SortKey::CpuTimeTotal => r.total_us,
        SortKey::CpuTimeAvg => r.total_us / r.calls as f64,
        SortKey::Count => r.calls as f64,
        SortKey::Flops => r.flops as f64,
    };
    v.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.name.cmp(b.name)));
    v
}

/// The table as text: the first `limit` rows and a total line (times in ms and µs, MiB = 1024²).
pub fn table(rows: &[OpRow], limit: usize, timed: bool) -> String {
    let total_us: f64 = rows.iter().map(|r| r.total_us).sum();
    let mut s = format!(
        "{:<28} {:>10} {:>16} {:>11} {:>14} {:>12} {:>14}\n",
        "Name", "# of Calls", "Self CPU total", "Self CPU %", "CPU time avg", "GFLOPs", "MiB moved"
    );
    s.push_str(&"-".repeat(111));
    s.push('\n');
    let time = |us: f64, f: &dyn Fn(f64) -> String| if timed { f(us) } else { "-".to_string() };
    for r in rows.iter().take(limit) {
        s.push_str(&format!(
            "{:<28} {:>10} {:>16} {:>11} {:>14} {:>12.3} {:>14.2}\n",
            r.name,
            r.calls,
            time(r.total_us, &|u| format!("{:.3} ms", u / 1e3)),
            time(r.total_us, &|u| format!("{:.2} %", 100.0 * u / total_us.max(f64::MIN_POSITIVE))),
            time(r.total_us / r.calls as f64, &|u| format!("{u:.1} us")),
            r.flops as f64 / 1e9,
            r.bytes as f64 / (1024.0 * 1024.0)
        ));
    }
    s.push_str(&"-".repeat(111));
    s.push('\n');
    s.push_str(&format!(
        "{} operators, {} calls{}\n",
        rows.len(),
        rows.iter().map(|r| r.calls).sum::<u64>(),
        if timed { format!(", self CPU time total {:.3} ms", total_us / 1e3) } else { " (meta: no kernel runs, so no times)".into() }
    ));
    s
}
