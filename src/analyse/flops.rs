//! The compute side of a run, from its kernel records: FLOPs per op and per module (a tree
//! like the DeepSpeed FLOPS profiler's, forward and backward apart), bytes moved and
//! arithmetic intensity with seed 000's memory-/compute-bound call, achieved FLOP/s against
//! a peak (MFU), and a roofline prediction of each op's time on a GPU preset.
use crate::record::compute::{OpKind, OpRecord};
use crate::record::gpu::Gpu;
use crate::record::Phase;
use serde::Serialize;
use std::collections::BTreeMap;

/// Measured cpu rates of a run: achieved against the calibrated peaks.
pub struct Achieved {
    pub step_s: f64,
    pub peaks: crate::engine::calibrate::CpuPeaks,
}

/// Which pass an op belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pass {
    /// Forward and loss phases.
    Forward,
    Backward,
    /// zero_grad and the optimizer step.
    Optimizer,
    Other,
}

impl Pass {
    pub fn of(p: Phase) -> Pass {
        match p {
            Phase::Forward | Phase::Loss | Phase::Prefill | Phase::Decode => Pass::Forward,
            Phase::Backward => Pass::Backward,
            Phase::Optimizer | Phase::ZeroGrad => Pass::Optimizer,
            _ => Pass::Other,
        }
    }
}

/// FLOPs (by kind), bytes and time of a set of kernels.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Totals {
    pub calls: u64,
    /// 2·m·n·k per product: what FlopCounterMode and DeepSpeed count.
    pub matmul_flops: u64,
    pub elementwise_flops: u64,
    pub reduction_flops: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Kernel wall time on cpu (0 on meta).
    pub time_us: f64,
}

impl Totals {
    fn add(&mut self, r: &OpRecord) {
        self.calls += 1;
        match r.kind {
            OpKind::Matmul => self.matmul_flops += r.flops,
            OpKind::Elementwise => self.elementwise_flops += r.flops,
            OpKind::Reduction => self.reduction_flops += r.flops,
            OpKind::Copy => {}
        }
        self.bytes_read += r.bytes_read;
        self.bytes_written += r.bytes_written;
        self.time_us += r.dur_us;
    }
    pub fn all_flops(&self) -> u64 {
        self.matmul_flops + self.elementwise_flops + self.reduction_flops
    }
    pub fn bytes(&self) -> u64 {
        self.bytes_read + self.bytes_written
    }
    /// FLOP per byte moved (all kinds of FLOPs).
    pub fn intensity(&self) -> f64 {
        if self.bytes() == 0 {
            0.0
        } else {
            self.all_flops() as f64 / self.bytes() as f64
        }
    }
}

/// Seed 000's classification of arithmetic intensity (FLOP/byte).
pub fn bound(intensity: f64) -> &'static str {
    if intensity < 10.0 {
        "memory-bound"
    } else if intensity <= 100.0 {
        "mixed"
    } else {
        "compute-bound"
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct OpRow {
    pub op: &'static str,
    pub kind: OpKind,
    pub pass: Pass,
    pub totals: Totals,
    pub intensity: f64,
    pub bound: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModuleRow {
    /// Module path ("" is the whole model).
    pub path: String,
    pub depth: usize,
    /// Parameters owned by the module and its children.
    pub params: u64,
    /// Inclusive of children.
    pub forward: Totals,
    pub backward: Totals,
}

#[derive(Clone, Debug, Serialize)]
pub struct FlopReport {
    /// Steps the records cover (totals are per step: divided by this).
    pub steps: usize,
    pub by_pass: BTreeMap<Pass, Totals>,
    pub by_op: Vec<OpRow>,
    pub modules: Vec<ModuleRow>,
}

fn scale(t: &mut Totals, steps: usize) {
    let s = steps.max(1) as u64;
    t.calls /= s;
    t.matmul_flops /= s;
    t.elementwise_flops /= s;
    t.reduction_flops /= s;
    t.bytes_read /= s;
    t.bytes_written /= s;
    t.time_us /= s as f64;
}

/// Aggregate kernel records covering `steps` whole steps into per-step figures.
/// `params` are (parameter name, element count); a parameter belongs to the module its
/// name minus the last component names.
pub fn report(ops: &[OpRecord], steps: usize, params: &[(String, u64)]) -> FlopReport {
    let mut by_pass: BTreeMap<Pass, Totals> = BTreeMap::new();
    let mut by_op: BTreeMap<(Pass, &'static str, OpKind), Totals> = BTreeMap::new();
    let mut modules: BTreeMap<String, (Totals, Totals)> = BTreeMap::new();
    let prefixes = |path: &str| -> Vec<String> {
        let mut v = vec![String::new()];
        let mut acc = String::new();
        for part in path.split('.').filter(|p| !p.is_empty()) {
            if !acc.is_empty() {
                acc.push('.');
            }
            acc.push_str(part);
            v.push(acc.clone());
        }
        v
    };
    for r in ops {
        let pass = Pass::of(r.phase);
        by_pass.entry(pass).or_default().add(r);
        by_op.entry((pass, r.name, r.kind)).or_default().add(r);
        if matches!(pass, Pass::Forward | Pass::Backward) {
            for p in prefixes(&r.scope) {
                let e = modules.entry(p).or_default();
                if pass == Pass::Forward { &mut e.0 } else { &mut e.1 }.add(r);
            }
        }
    }
    let mut owned: BTreeMap<String, u64> = BTreeMap::new();
    for (name, n) in params {
        let module = name.rsplit_once('.').map_or("", |(m, _)| m);
        for p in prefixes(module) {
            *owned.entry(p).or_default() += n;
        }
    }
    for t in by_pass.values_mut() {
        scale(t, steps);
    }
    let mut by_op: Vec<OpRow> = by_op
        .into_iter()
        .map(|((pass, op, kind), mut totals)| {
            scale(&mut totals, steps);
            let intensity = totals.intensity();
            OpRow { op, kind, pass, totals, intensity, bound: bound(intensity) }
        })
        .collect();
    by_op.sort_by(|a, b| b.totals.all_flops().cmp(&a.totals.all_flops()).then(b.totals.bytes().cmp(&a.totals.bytes())));
    let mut paths: Vec<String> = modules.keys().chain(owned.keys()).cloned().collect();
    paths.sort_by(|a, b| super::natural_cmp(a, b));
    paths.dedup();
    let modules = paths
        .into_iter()
        .map(|path| {
            let (mut forward, mut backward) = modules.get(&path).copied().unwrap_or_default();
            scale(&mut forward, steps);
            scale(&mut backward, steps);
            let depth = if path.is_empty() { 0 } else { path.split('.').count() };
            ModuleRow { params: owned.get(&path).copied().unwrap_or(0), path, depth, forward, backward }
        })
        .collect();
    FlopReport { steps, by_pass, by_op, modules }
}

/// Peak rates a roofline compares against.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Peaks {
    /// Matmul FLOP/s in the run's matmul precision.
    pub matmul_flops: f64,
    /// Non-matmul arithmetic FLOP/s.
    pub vector_flops: f64,
    /// Memory bytes/s.
    pub bytes_per_s: f64,
}

impl Peaks {
    /// A GPU preset's published dense peaks: bf16/fp16 tensor cores for 2-byte matmuls;
    /// for fp32 matmuls the plain fp32 rate (PyTorch leaves TF32 off for matmuls by default).
    pub fn of_gpu(g: &Gpu, elem_bytes: u8) -> Peaks {
        let matmul = if elem_bytes <= 2 { g.peak_bf16_tflops } else { g.peak_fp32_tflops };
        Peaks { matmul_flops: matmul * 1e12, vector_flops: g.peak_fp32_tflops * 1e12, bytes_per_s: g.hbm_tb_per_s * 1e12 }
    }
}

/// A roofline prediction of a set of kernels on a device: each op takes the longer of its
/// compute time and its memory time (no launch overheads, no overlap between ops).
#[derive(Clone, Debug, Serialize)]
pub struct Roofline {
    pub device: String,
    pub predicted_step_us: f64,
    pub predicted_matmul_us: f64,
    pub predicted_other_us: f64,
    /// Matmul FLOPs / predicted step time / matmul peak.
    pub predicted_mfu: f64,
    pub memory_bound_ops: u64,
    pub compute_bound_ops: u64,
    /// Predicted time per step of each (pass, op), largest first.
    pub by_op: Vec<PredictedOp>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PredictedOp {
    pub pass: Pass,
    pub op: &'static str,
    pub predicted_us: f64,
    /// Whether the memory or the compute side sets its time.
    pub limited_by: &'static str,
}

pub fn roofline(ops: &[OpRecord], steps: usize, g: &Gpu) -> Roofline {
    let (mut matmul_us, mut other_us, mut mem_bound, mut comp_bound, mut mm_flops) = (0.0, 0.0, 0u64, 0u64, 0u64);
    let mut peak_matmul = 0.0f64;
    let mut per_op: BTreeMap<(Pass, &'static str), (f64, f64, f64)> = BTreeMap::new();
    for r in ops {
        let p = Peaks::of_gpu(g, r.elem_bytes);
        let rate = if r.kind == OpKind::Matmul { p.matmul_flops } else { p.vector_flops };
        let compute_s = r.flops as f64 / rate;
        let memory_s = (r.bytes_read + r.bytes_written) as f64 / p.bytes_per_s;
        let t = compute_s.max(memory_s) * 1e6;
        let e = per_op.entry((Pass::of(r.phase), r.name)).or_default();
        e.0 += t;
        e.1 += compute_s;
        e.2 += memory_s;
        if compute_s >= memory_s && r.flops > 0 {
            comp_bound += 1;
        } else {
            mem_bound += 1;
        }
        if r.kind == OpKind::Matmul {
            matmul_us += t;
            mm_flops += r.flops;
            peak_matmul = peak_matmul.max(p.matmul_flops);
        } else {
            other_us += t;
        }
    }
    let s = steps.max(1) as f64;
    let step_us = (matmul_us + other_us) / s;
    let mfu = if step_us > 0.0 && peak_matmul > 0.0 { (mm_flops as f64 / s) / (step_us * 1e-6) / peak_matmul } else { 0.0 };
    let mut by_op: Vec<PredictedOp> = per_op
        .into_iter()
        .map(|((pass, op), (t, c, m))| PredictedOp { pass, op, predicted_us: t / s, limited_by: if c >= m { "compute" } else { "memory" } })
        .collect();
    by_op.sort_by(|a, b| b.predicted_us.total_cmp(&a.predicted_us));
    Roofline {
        by_op,
        device: g.name.to_string(),
        predicted_step_us: step_us,
        predicted_matmul_us: matmul_us / s,
        predicted_other_us: other_us / s,
        predicted_mfu: mfu,
        memory_bound_ops: mem_bound / steps.max(1) as u64,
        compute_bound_ops: comp_bound / steps.max(1) as u64,
    }
}

/// summary.json's `flops` object: the report with its per-pass totals, the achieved cpu rates
/// and the GPU roofline prediction when measured.
pub fn to_json(r: &FlopReport, achieved: Option<&Achieved>, roof: Option<&Roofline>) -> serde_json::Value {
    let fwd = r.by_pass.get(&Pass::Forward).map_or(0, |t| t.matmul_flops);
    let bwd = r.by_pass.get(&Pass::Backward).map_or(0, |t| t.matmul_flops);
    let cpu = achieved.map(|a| {
        let mm: u64 = r.by_pass.values().map(|t| t.matmul_flops).sum();
        let bytes: u64 = r.by_pass.values().map(|t| t.bytes()).sum();
        serde_json::json!({
            "step_s": a.step_s,
            "achieved_matmul_flops_per_s": mm as f64 / a.step_s,
            "calibrated_peak_matmul_flops_per_s": a.peaks.matmul_flops,
            "mfu": mm as f64 / a.step_s / a.peaks.matmul_flops,
            "achieved_bytes_per_s": bytes as f64 / a.step_s,
            "calibrated_copy_bytes_per_s": a.peaks.copy_bytes_per_s,
        })
    });
    serde_json::json!({
        "units": "FLOP per step (a multiply-add is 2 FLOP); matmul_flops is what FlopCounterMode counts; bytes are read + written",
        "forward_matmul_flops": fwd,
        "backward_matmul_flops": bwd,
        "forward_backward_matmul_flops": fwd + bwd,
        "report": r,
        "cpu": cpu,
        "gpu_prediction": roof,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    fn rec(name: &'static str, kind: OpKind, scope: &str, phase: Phase, flops: u64, bytes: u64) -> OpRecord {
        OpRecord { name, kind, scope: Rc::from(scope), phase, flops, bytes_read: bytes, bytes_written: 0, elem_bytes: 4, start_us: 0.0, dur_us: 1.0, alloc_bytes: 0, self_alloc_bytes: 0 }
    }

    #[test]
    fn modules_are_inclusive_and_passes_apart() {
        let ops = vec![
            rec("mm", OpKind::Matmul, "blocks.0.attention.q_proj", Phase::Forward, 100, 10),
            rec("mm", OpKind::Matmul, "blocks.0.attention.q_proj", Phase::Backward, 200, 10),
            rec("softmax", OpKind::Elementwise, "blocks.0.attention", Phase::Forward, 50, 100),
            rec("mm", OpKind::Matmul, "output_proj", Phase::Forward, 30, 10),
        ];
        let params = vec![("blocks.0.attention.q_proj.weight".to_string(), 64), ("output_proj.weight".to_string(), 8)];
        let r = report(&ops, 1, &params);
        let m = |p: &str| r.modules.iter().find(|m| m.path == p).unwrap().clone();
        assert_eq!(m("").forward.matmul_flops, 130);
        assert_eq!(m("").backward.matmul_flops, 200);
        assert_eq!(m("blocks.0.attention").forward.matmul_flops, 100);
        assert_eq!(m("blocks.0.attention").forward.elementwise_flops, 50);
        assert_eq!(m("blocks").params, 64);
        assert_eq!(m("").params, 72);
        assert_eq!(r.by_pass[&Pass::Forward].matmul_flops, 130);
        assert_eq!(bound(0.5), "memory-bound");
        assert_eq!(bound(50.0), "mixed");
        assert_eq!(bound(500.0), "compute-bound");
    }
}
