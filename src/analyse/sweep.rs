//! A sweep's grid and what its points measured, and how peak memory scales along each
//! numeric axis (least-squares fits from `analyse::fit`, per phase, category and op).
use crate::analyse::fit::{self, Poly, Step};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One axis of the grid.
#[derive(Clone, Debug, Serialize)]
pub struct Axis {
    pub flag: &'static str,
    pub values: Vec<String>,
    /// Every value is a number (plots and fits use it as x).
    pub numeric: bool,
}

impl Axis {
    pub fn name(&self) -> &'static str {
        self.flag.trim_start_matches("--")
    }
}

/// The grid's points, each an index per axis, in row-major order (last axis fastest).
pub fn points(axes: &[Axis]) -> Vec<Vec<usize>> {
    let mut pts = vec![vec![]];
    for ax in axes {
        pts = pts.into_iter().flat_map(|p| (0..ax.values.len()).map(move |i| [p.clone(), vec![i]].concat())).collect();
    }
    pts
}

/// What one grid point measured.
#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    /// flag name (without dashes) → value.
    pub values: BTreeMap<String, String>,
    pub model: String,
    pub batch_size: usize,
    pub context_length: usize,
    pub profile_type: String,
    /// The training step's optimizer and clipping (None for a run without one).
    pub optimizer: Option<crate::train::optim::OptimConfig>,
    pub peak_allocated_bytes: usize,
    pub peak_reserved_bytes: usize,
    pub peak_allocated_gib: f64,
    pub peak_reserved_gib: f64,
    /// The out-of-memory message when this point did not fit.
    pub oom: Option<String>,
    /// The phase of the step the failing allocation was made in (forward, backward, …).
    pub oom_phase: Option<String>,
    /// The memory the allocator could reserve at this point (--gpu's or --memory-limit's
    /// capacity, times --memory-fraction when given); None without a limit.
    pub memory_limit_bytes: Option<usize>,
    /// What set that limit: the GPU preset's name, or "memory limit".
    pub memory_limit_label: Option<String>,
    pub peak_phase: Option<String>,
    /// Live bytes (allocator blocks) at the peak per category.
    pub at_peak_by_category: BTreeMap<String, usize>,
    /// The same in requested bytes (the tensors' own sizes, before the allocator's rounding
    /// and unsplit cached blocks).
    pub at_peak_requested_by_category: BTreeMap<String, usize>,
    /// Activation bytes live at the peak per op.
    pub activations_by_op: BTreeMap<String, usize>,
    /// Highest allocated bytes within each phase (forward, loss, backward, optimizer, …).
    pub phase_peaks: BTreeMap<String, usize>,
    pub snapshot: Option<PathBuf>,
    /// A generate point's steps, the step of its peak and the KV cache at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generate: Option<crate::session::profile::GenerateReport>,
}

/// A fit of peak memory along one numeric axis, the other axes fixed.
#[derive(Clone, Debug, Serialize)]
pub struct AxisFit {
    pub axis: String,
    /// The other axes' values for this line.
    pub fixed: BTreeMap<String, String>,
    pub x: Vec<f64>,
    pub peak_allocated_bytes: Vec<f64>,
    /// peak allocated ≈ a + b·x (bytes; for --batch-size b is bytes per sample).
    pub linear: Option<Poly>,
    /// peak allocated ≈ a + b·x + c·x² with a, b, c ≥ 0 (three points or more).
    pub quadratic: Option<Poly>,
    /// Share of the fitted peak at the largest x that the x² term explains, in [0, 1]; None
    /// when the quadratic fits badly (R² < [`MIN_R2`]).
    pub quadratic_share: Option<f64>,
    pub reserved_linear: Option<Poly>,
    /// mem(next) / mem(this) along x, and that factor per doubling of x.
    pub steps: Vec<Step>,
    /// The phase of the peak and the x values where the peak falls in it.
    pub peak_phases: Vec<(String, Vec<f64>)>,
    /// Per phase, that phase's own peak: which part of the step grows fastest.
    pub phases: Vec<ComponentFit>,
    /// The x values the per-category and per-op fits use: the points whose peak falls in the
    /// same phase as the largest x's (the live set is only comparable within one phase).
    pub components_x: Vec<f64>,
    pub components_phase: Option<String>,
    /// Per category live at the peak: its fit and the share its x² term has at the largest x.
    pub components: Vec<ComponentFit>,
    /// Per op of the activations live at the peak (only ops that grow as x²).
    pub quadratic_ops: Vec<ComponentFit>,
}

/// A fit whose R² is below this describes its points too poorly for its terms to be read
/// as shares (a jump from a cached block, a peak that moves between phases).
pub const MIN_R2: f64 = 0.99;
/// A component under this share of the peak (at the largest x) is too small for its
/// growth to matter; its share is left out.
pub const MIN_SHARE_OF_PEAK: f64 = 0.01;

#[derive(Clone, Debug, Serialize)]
pub struct ComponentFit {
    pub name: String,
    /// a + b·x (+ c·x² from three points) with every coefficient ≥ 0.
    pub fit: Poly,
    /// The component as measured at the largest x (bytes).
    pub bytes_at_max: f64,
    /// The share of the fitted component at the largest x that its x² term explains,
    /// c·x² / (a + b·x + c·x²), in [0, 1]. None (left out) for a component under
    /// [`MIN_SHARE_OF_PEAK`] of the peak or fitted with R² under [`MIN_R2`].
    pub quadratic_share: Option<f64>,
    /// Grows as x²: it has a share, that share is over 5 %, and the x² term is over 0.5 %
    /// of the peak at the largest x.
    pub grows_quadratically: bool,
}

fn component_fit(name: String, xs: &[f64], ys: &[f64], peak_at_max: f64) -> Option<ComponentFit> {
    let p = fit::nonneg_polyfit(xs, ys, if xs.len() >= 3 { 2 } else { 1 })?;
    let i_max = xs.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1))?.0;
    let x_max = xs[i_max];
    let at_max = ys[i_max];
    let share = if at_max >= MIN_SHARE_OF_PEAK * peak_at_max && p.r2 >= MIN_R2 { fit::quadratic_share(&p, x_max) } else { None };
    let quad_abs = p.coeff(2) * x_max * x_max;
    let grows = share.is_some_and(|s| s > 0.05) && quad_abs > 0.005 * peak_at_max;
    Some(ComponentFit { name, bytes_at_max: at_max, quadratic_share: share, grows_quadratically: grows, fit: p })
}

/// The grid points along numeric axis `k` (two values or more), grouped by the values of
/// the other axes; None for an axis nothing can be fitted or plotted along.
pub fn along(ax: &Axis, k: usize, idx: &[Vec<usize>]) -> Option<BTreeMap<Vec<usize>, Vec<usize>>> {
    if !ax.numeric || ax.values.len() < 2 {
        return None;
    }
    let mut groups: BTreeMap<Vec<usize>, Vec<usize>> = BTreeMap::new();
    for (pi, p) in idx.iter().enumerate() {
        let mut key = p.clone();
        key.remove(k);
        groups.entry(key).or_default().push(pi);
    }
    Some(groups)
}

/// Fits along every numeric axis with two values or more, one per combination of the others.
pub fn fits(axes: &[Axis], idx: &[Vec<usize>], res: &[PointResult]) -> Vec<AxisFit> {
    let mut out = Vec::new();
    for (k, ax) in axes.iter().enumerate() {
        let Some(groups) = along(ax, k, idx) else { continue };
        for (_, members) in groups {
            let ok: Vec<usize> = members.iter().copied().filter(|&m| res[m].oom.is_none()).collect();
            if ok.len() < 2 {
                continue;
            }
            let xs: Vec<f64> = ok.iter().map(|&m| ax.values[idx[m][k]].parse::<f64>().unwrap()).collect();
            let ys: Vec<f64> = ok.iter().map(|&m| res[m].peak_allocated_bytes as f64).collect();
            let rs: Vec<f64> = ok.iter().map(|&m| res[m].peak_reserved_bytes as f64).collect();
            let x_max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let quadratic = if xs.len() >= 3 { fit::nonneg_polyfit(&xs, &ys, 2) } else { None };
            let peak_at_max = ys.iter().copied().fold(0.0, f64::max);
            let fit_keys = |keys: &dyn Fn(&PointResult) -> &BTreeMap<String, usize>, pts: &[usize], xs: &[f64]| -> Vec<ComponentFit> {
                let mut names: Vec<String> = pts.iter().flat_map(|&m| keys(&res[m]).keys().cloned()).collect();
                names.sort();
                names.dedup();
                let mut v: Vec<ComponentFit> = names
                    .iter()
                    .filter_map(|c| {
                        let cy: Vec<f64> = pts.iter().map(|&m| *keys(&res[m]).get(c).unwrap_or(&0) as f64).collect();
                        component_fit(c.clone(), xs, &cy, peak_at_max)
                    })
                    .collect();
                v.sort_by(|a, b| b.bytes_at_max.total_cmp(&a.bytes_at_max));
                v
            };
            let phases = fit_keys(&|r| &r.phase_peaks, &ok, &xs);
            // Points whose peak is in the same phase as the largest x's.
            let last = ok[xs.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i)];
            let phase = res[last].peak_phase.clone();
            let same: Vec<usize> = ok.iter().copied().filter(|&m| res[m].peak_phase == phase).collect();
            let same_x: Vec<f64> = same.iter().map(|&m| ax.values[idx[m][k]].parse::<f64>().unwrap()).collect();
            let (components, quadratic_ops) = if same.len() >= 2 {
                let ops = fit_keys(&|r| &r.activations_by_op, &same, &same_x).into_iter().filter(|c| c.grows_quadratically).collect();
                (fit_keys(&|r| &r.at_peak_by_category, &same, &same_x), ops)
            } else {
                (Vec::new(), Vec::new())
            };
            let first = &res[ok[0]];
            let fixed = first.values.iter().filter(|(f, _)| f.as_str() != ax.name()).map(|(f, v)| (f.clone(), v.clone())).collect();
            out.push(AxisFit {
                axis: ax.name().to_string(),
                fixed,
                linear: fit::linear(&xs, &ys),
                quadratic_share: quadratic.as_ref().filter(|q| q.r2 >= MIN_R2).and_then(|q| fit::quadratic_share(q, x_max)),
                quadratic,
                reserved_linear: fit::linear(&xs, &rs),
                steps: fit::doubling_factors(&xs, &ys),
                phases,
                peak_phases: {
                    let mut v: Vec<(String, Vec<f64>)> = Vec::new();
                    for (i, &m) in ok.iter().enumerate() {
                        let ph = res[m].peak_phase.clone().unwrap_or_else(|| "-".into());
                        match v.iter_mut().find(|(p, _)| *p == ph) {
                            Some((_, xv)) => xv.push(xs[i]),
                            None => v.push((ph, vec![xs[i]])),
                        }
                    }
                    v
                },
                components_x: if same.len() >= 2 { same_x } else { Vec::new() },
                components_phase: phase,
                components,
                quadratic_ops,
                x: xs,
                peak_allocated_bytes: ys,
            });
        }
    }
    out
}

