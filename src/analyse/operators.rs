//! The operator table of a recorded window of steps: what `prof.key_averages().table(sort_by=…)`
//! prints for the workshop's `--profile-operators`, one row per operator name.
//!
//! Memory is attributed as torch's profiler does with `profile_memory=True`: an op's memory
//! (`cuda_memory_usage`, "CUDA Mem") is every allocation minus every free made while it ran,
//! the ops it called included; its self memory ("Self CUDA Mem") leaves out what the ops it
//! called made, so each allocation and free counts once, as self memory of the innermost op
//! running. What happens while no op runs is the `[memory]` row, as in torch's table.
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
    /// `self_cuda_memory_usage` (also `self_cpu_memory_usage`): bytes the op itself allocated
    /// minus freed.
    SelfMemory,
    /// `cuda_memory_usage` (also `cpu_memory_usage`): the same with the ops it called.
    Memory,
}

impl SortKey {
    pub fn name(self) -> &'static str {
        match self {
            SortKey::CpuTimeTotal => "self_cpu_time_total",
            SortKey::CpuTimeAvg => "cpu_time",
            SortKey::Count => "count",
            SortKey::Flops => "flops",
            SortKey::SelfMemory => "self_cuda_memory_usage",
            SortKey::Memory => "cuda_memory_usage",
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
    /// Bytes allocated minus freed while the op ran, the ops it called included (summed over
    /// calls; negative when it freed more than it allocated).
    pub alloc_bytes: i64,
    /// The same by the op itself.
    pub self_alloc_bytes: i64,
}

/// The row of what was allocated and freed while no op ran (torch's `[memory]`).
pub const OUTSIDE_OPS: &str = "[memory]";

/// Group `ops` by operator name and order them by `sort` (largest first, then by name);
/// `outside` (events, bytes) made while no op ran becomes the `[memory]` row when not empty.
pub fn rows(ops: &[OpRecord], outside: (u64, i64), sort: SortKey) -> Vec<OpRow> {
    let mut by: HashMap<&'static str, OpRow> = HashMap::new();
    let empty = |name| OpRow { name, calls: 0, total_us: 0.0, flops: 0, bytes: 0, alloc_bytes: 0, self_alloc_bytes: 0 };
    for o in ops {
        let r = by.entry(o.name).or_insert(empty(o.name));
        r.calls += 1;
        r.total_us += o.dur_us;
        r.flops += o.flops;
        r.bytes += o.bytes_read + o.bytes_written;
        r.alloc_bytes += o.alloc_bytes;
        r.self_alloc_bytes += o.self_alloc_bytes;
    }
    if outside.0 > 0 {
        by.insert(OUTSIDE_OPS, OpRow { calls: outside.0, alloc_bytes: outside.1, self_alloc_bytes: outside.1, ..empty(OUTSIDE_OPS) });
    }
    let mut v: Vec<OpRow> = by.into_values().collect();
    let key = |r: &OpRow| match sort {
        SortKey::CpuTimeTotal => r.total_us,
        SortKey::CpuTimeAvg => r.total_us / r.calls as f64,
        SortKey::Count => r.calls as f64,
        SortKey::Flops => r.flops as f64,
        SortKey::SelfMemory => r.self_alloc_bytes as f64,
        SortKey::Memory => r.alloc_bytes as f64,
    };
    v.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.name.cmp(b.name)));
    v
}

const MIB: f64 = 1024.0 * 1024.0;

/// The table as text: the first `limit` rows and a total line (times in ms and µs, MiB = 1024²).
pub fn table(rows: &[OpRow], limit: usize, timed: bool) -> String {
    let total_us: f64 = rows.iter().map(|r| r.total_us).sum();
    let width = 111 + 2 * 15;
    let mut s = format!(
        "{:<28} {:>10} {:>16} {:>11} {:>14} {:>12} {:>14} {:>14} {:>14}\n",
        "Name", "# of Calls", "Self CPU total", "Self CPU %", "CPU time avg", "GFLOPs", "MiB moved", "CUDA Mem", "Self CUDA Mem"
    );
    s.push_str(&"-".repeat(width));
    s.push('\n');
    let time = |us: f64, f: &dyn Fn(f64) -> String| if timed { f(us) } else { "-".to_string() };
    for r in rows.iter().take(limit) {
        s.push_str(&format!(
            "{:<28} {:>10} {:>16} {:>11} {:>14} {:>12.3} {:>14.2} {:>14} {:>14}\n",
            r.name,
            r.calls,
            time(r.total_us, &|u| format!("{:.3} ms", u / 1e3)),
            time(r.total_us, &|u| format!("{:.2} %", 100.0 * u / total_us.max(f64::MIN_POSITIVE))),
            time(r.total_us / r.calls as f64, &|u| format!("{u:.1} us")),
            r.flops as f64 / 1e9,
            r.bytes as f64 / MIB,
            format!("{:.2} MiB", r.alloc_bytes as f64 / MIB),
            format!("{:.2} MiB", r.self_alloc_bytes as f64 / MIB)
        ));
    }
    s.push_str(&"-".repeat(width));
    s.push('\n');
    s.push_str(&format!(
        "{} operators, {} calls{}\n",
        rows.len(),
        rows.iter().map(|r| r.calls).sum::<u64>(),
        if timed { format!(", self CPU time total {:.3} ms", total_us / 1e3) } else { " (meta: no kernel runs, so no times)".into() }
    ));
    s.push_str(
        "CUDA Mem: MiB (1024² bytes) allocated minus freed (allocator blocks) while the op ran, the ops it called included; \
         Self CUDA Mem: by the op itself (torch's cuda_memory_usage / self_cuda_memory_usage); [memory]: while no op ran\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::compute::OpKind;
    use crate::record::Phase;

    fn op(name: &'static str, alloc_bytes: i64, self_alloc_bytes: i64) -> OpRecord {
        OpRecord {
            name,
            kind: OpKind::Copy,
            scope: "m".into(),
            phase: Phase::Forward,
            flops: 0,
            bytes_read: 0,
            bytes_written: 0,
            elem_bytes: 4,
            start_us: 0.0,
            dur_us: 0.0,
            alloc_bytes,
            self_alloc_bytes,
        }
    }

    #[test]
    fn memory_columns_sum_over_calls_sort_and_show_the_memory_row() {
        let ops = [op("mm", 3 << 20, 1 << 20), op("mm", 1 << 20, 1 << 20), op("add", 4 << 20, 4 << 20)];
        let r = rows(&ops, (2, -(1 << 20)), SortKey::SelfMemory);
        let names: Vec<&str> = r.iter().map(|r| r.name).collect();
        assert_eq!(names, ["add", "mm", "[memory]"]);
        assert_eq!((r[1].alloc_bytes, r[1].self_alloc_bytes, r[1].calls), (4 << 20, 2 << 20, 2));
        let r = rows(&ops, (0, 0), SortKey::Memory);
        assert_eq!(r.iter().map(|r| r.name).collect::<Vec<_>>(), ["add", "mm"], "equal totals: by name; no [memory] row without events");
        let t = table(&r, 10, false);
        let mm = t.lines().find(|l| l.starts_with("mm ")).unwrap();
        assert!(mm.ends_with("4.00 MiB       2.00 MiB"), "{mm}");
        assert!(t.contains("CUDA Mem") && t.contains("Self CUDA Mem") && t.contains("MiB (1024² bytes) allocated minus freed"), "{t}");
    }
}
