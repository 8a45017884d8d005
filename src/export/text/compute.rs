//! The compute-side text shared by `train` and `profile`: the FLOP tree per module,
//! the top ops with arithmetic intensity, MFU against the calibrated cpu peaks, and the
//! roofline prediction on a GPU preset.
use crate::analyse::flops::{bound, FlopReport, Roofline};

fn g(x: u64) -> f64 {
    x as f64 / 1e9
}

use crate::analyse::flops::Achieved;

/// The FLOP tree per module, the top ops and MFU (cpu) or the roofline (a GPU preset).
pub fn flops(r: &FlopReport, depth: usize, achieved: Option<&Achieved>, roof: Option<&Roofline>) -> String {
    let mut s = String::new();
    out!(s, "\n== FLOPs per step (GFLOP = 1e9 FLOP; matmul FLOPs = 2·m·n·k, what FlopCounterMode counts; elementwise/reduction counted apart)");
    for (pass, t) in &r.by_pass {
        out!(s,
            "  {:<9} matmul {:>10.3} GFLOP | elementwise {:>8.3} | reduction {:>8.3} | moved {:>9.1} MB | intensity {:>7.1} FLOP/B ({}){}",
            format!("{pass:?}").to_lowercase(),
            g(t.matmul_flops),
            g(t.elementwise_flops),
            g(t.reduction_flops),
            t.bytes() as f64 / 1e6,
            t.intensity(),
            bound(t.intensity()),
            if t.time_us > 0.0 { format!(" | {:.2} ms", t.time_us / 1e3) } else { String::new() }
        );
    }
    let total = r.modules.iter().find(|m| m.path.is_empty());
    let tf = total.map_or(1, |m| m.forward.matmul_flops.max(1));
    out!(s, "\nper module (forward | backward; inclusive of children; MACs = matmul FLOPs / 2; depth ≤ {depth}):");
    out!(s,
        "  {:<40} {:>11} {:>12} {:>12} {:>7} {:>10} {:>8} {:>12} {:>10}",
        "module", "params", "fwd GFLOP", "fwd GMACs", "fwd %", "fwd ms", "FLOP/B", "bwd GFLOP", "bwd ms"
    );
    for m in r.modules.iter().filter(|m| m.depth <= depth) {
        let name = if m.path.is_empty() { "(model)".to_string() } else { format!("{}{}", "  ".repeat(m.depth.saturating_sub(1)), m.path.rsplit('.').next().unwrap_or("")) };
        let label = if m.depth <= 1 { name } else { format!("{name} [{}]", m.path) };
        out!(s,
            "  {:<40} {:>11} {:>12.4} {:>12.4} {:>6.1}% {:>10.3} {:>8.1} {:>12.4} {:>10.3}",
            label.chars().take(40).collect::<String>(),
            m.params,
            g(m.forward.matmul_flops),
            g(m.forward.matmul_flops) / 2.0,
            100.0 * m.forward.matmul_flops as f64 / tf as f64,
            m.forward.time_us / 1e3,
            m.forward.intensity(),
            g(m.backward.matmul_flops),
            m.backward.time_us / 1e3
        );
    }
    out!(s, "\ntop ops (per step; intensity = all FLOPs / bytes read+written; <10 memory-bound, 10–100 mixed, >100 compute-bound):");
    out!(s, "  {:<30} {:<9} {:>6} {:>11} {:>10} {:>10} {:>14} {:>9}", "op", "pass", "calls", "GFLOP", "MB moved", "FLOP/B", "", "ms");
    for o in r.by_op.iter().take(15) {
        out!(s,
            "  {:<30} {:<9} {:>6} {:>11.4} {:>10.1} {:>10.2} {:>14} {:>9.3}",
            o.op,
            format!("{:?}", o.pass).to_lowercase(),
            o.totals.calls,
            g(o.totals.all_flops()),
            o.totals.bytes() as f64 / 1e6,
            o.intensity,
            o.bound,
            o.totals.time_us / 1e3
        );
    }
    if let Some(a) = achieved {
        let mm: u64 = r.by_pass.values().map(|t| t.matmul_flops).sum();
        let bytes: u64 = r.by_pass.values().map(|t| t.bytes()).sum();
        let flops_s = mm as f64 / a.step_s;
        let bw = bytes as f64 / a.step_s;
        out!(s,
            "\ncpu: {:.1} GFLOP/s matmul over the step = MFU {:.1}% of the calibrated {:.1} GFLOP/s (f32 2048² matmul, this machine); \
             {:.1} GB/s moved = {:.1}% of the calibrated {:.1} GB/s copy bandwidth",
            flops_s / 1e9,
            100.0 * flops_s / a.peaks.matmul_flops,
            a.peaks.matmul_flops / 1e9,
            bw / 1e9,
            100.0 * bw / a.peaks.copy_bytes_per_s,
            a.peaks.copy_bytes_per_s / 1e9
        );
    }
    if let Some(rf) = roof {
        out!(s,
            "\nPREDICTION for {} (roofline from published peaks; no launch overhead, no overlap): step {:.3} ms \
             (matmul {:.3} ms, other ops {:.3} ms), MFU {:.1}%, {} memory-bound and {} compute-bound kernels per step",
            rf.device,
            rf.predicted_step_us / 1e3,
            rf.predicted_matmul_us / 1e3,
            rf.predicted_other_us / 1e3,
            100.0 * rf.predicted_mfu,
            rf.memory_bound_ops,
            rf.compute_bound_ops
        );
        out!(s, "  predicted time per step of the costliest ops on {}:", rf.device);
        for o in rf.by_op.iter().take(10) {
            out!(s, "    {:<30} {:<9} {:>10.1} µs  ({}-bound)", o.op, format!("{:?}", o.pass).to_lowercase(), o.predicted_us, o.limited_by);
        }
    }
    s
}
