//! `vramscope sweep`: profile runs over the cartesian grid of comma lists given to profile
//! flags (`--batch-size 1,2,4 --context-length 128,256,512 --profile-type forward,training`),
//! on meta by default; writes sweep.csv, sweep.json, sweep.md and SVG plots of peak memory
//! against each swept numeric axis, and fits how memory scales (src/analyse/fit.rs).
//!
//! Every axis is a profile flag: a grid point is turned back into profile arguments and
//! validated by profile's own parser and planner, so an axis added to [`axes`] (one line and
//! one field) works everywhere at once.
use super::profile::{self, ProfileArgs};
use super::{set_threads, usage, UsageError};
use crate::analyse::fit::{self, Poly, Step};
use crate::export::svg::{self, Series};
use crate::export::output_set::with_run_id_comment;
use crate::export::{gib, write_atomic, write_json};
use crate::record::Category;
use anyhow::Result;
use clap::Args;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Args, Debug, Clone, Default)]
pub struct SweepArgs {
    /// Model preset(s) (as `profile --model`), comma separated
    #[arg(long, visible_alias = "model", alias = "model-size")]
    pub preset: Option<String>,
    /// Hugging Face config.json file(s), comma separated
    #[arg(long, value_name = "FILE[,FILE…]")]
    pub config: Option<String>,
    /// Reference implementation to reproduce: cs336 or tinyllama
    #[arg(long)]
    pub flavour: Option<String>,
    /// Hidden size d_model (a comma list sweeps it)
    #[arg(long)]
    pub hidden_dim: Option<String>,
    /// Number of decoder blocks (layers)
    #[arg(long)]
    pub num_layers: Option<String>,
    /// Attention heads (must divide --hidden-dim)
    #[arg(long)]
    pub num_heads: Option<String>,
    /// Key/value heads (grouped-query attention when fewer than --num-heads)
    #[arg(long)]
    pub num_kv_heads: Option<String>,
    /// Feed-forward size d_ff
    #[arg(long)]
    pub intermediate_dim: Option<String>,
    /// Vocabulary size (rows of the embedding and the LM head)
    #[arg(long)]
    pub vocab_size: Option<String>,
    /// Longest sequence the model accepts (sizes RoPE tables)
    #[arg(long)]
    pub max_seq_len: Option<String>,
    /// RoPE base frequency theta
    #[arg(long)]
    pub rope_theta: Option<String>,
    /// naive and/or flash
    #[arg(long)]
    pub attention: Option<String>,
    /// Batch size(s), comma-separated: one profile per value
    #[arg(long)]
    pub batch_size: Option<String>,
    /// Sequence length(s) to profile, comma-separated
    #[arg(long, alias = "seq-len")]
    pub context_length: Option<String>,
    /// forward, inference and/or training (default: training)
    #[arg(long)]
    pub profile_type: Option<String>,
    /// Micro-batches per optimizer step (gradient accumulation)
    #[arg(long)]
    pub grad_accum_steps: Option<String>,
    /// fp32, bf16, fp16 and/or pure-bf16
    #[arg(long)]
    pub precision: Option<String>,
    /// none, blocks and/or every-N
    #[arg(long)]
    pub checkpoint: Option<String>,
    /// none and/or all
    #[arg(long)]
    pub fusion: Option<String>,
    /// Optimizer implementation(s) of the training step (as `profile --optimizer`)
    #[arg(long)]
    pub optimizer: Option<String>,
    /// clip_grad_norm_ max norm(s) before the step (as `profile --max-grad-norm`; 0 = off)
    #[arg(long)]
    pub max_grad_norm: Option<String>,
    /// Data-parallel layout(s) (as `profile --parallel`: ddp, zero1, fsdp, hsdp); needs --world-size
    #[arg(long)]
    pub parallel: Option<String>,
    /// Ranks in the job (with --parallel): each point profiles rank 0, so the table shows how
    /// one rank's memory falls as ranks are added
    #[arg(long)]
    pub world_size: Option<String>,
    /// hsdp's shard group size(s)
    #[arg(long)]
    pub gpus_per_node: Option<String>,
    /// FSDP2 MixedPrecisionPolicy param_dtype(s) (as `profile --fsdp-param-dtype`)
    #[arg(long)]
    pub fsdp_param_dtype: Option<String>,
    /// FSDP2 MixedPrecisionPolicy reduce_dtype(s)
    #[arg(long)]
    pub fsdp_reduce_dtype: Option<String>,
    /// FSDP units (as `profile --fsdp-unit`: block, every-N, root)
    #[arg(long)]
    pub fsdp_unit: Option<String>,
    /// Unrecorded steps run first, so optimizer state exists as in a steady-state step
    #[arg(long)]
    pub warmup_steps: Option<String>,
    /// Recorded steps after the warm-up
    #[arg(long)]
    pub measure_steps: Option<String>,
    /// GPU preset(s) bounding the allocator (an OOM at a point is recorded as a result)
    #[arg(long)]
    pub gpu: Option<String>,
    /// Device memory size(s) instead of --gpu (e.g. 24GiB)
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// Share of device memory the allocator may use (torch.cuda.set_per_process_memory_fraction); needs --gpu or --memory-limit
    #[arg(long)]
    pub memory_fraction: Option<String>,
    /// PYTORCH_CUDA_ALLOC_CONF string(s); separate several with ';' (a conf itself uses commas)
    #[arg(long)]
    pub allocator_conf: Option<String>,
    /// Random seed for the weights and the synthetic data
    #[arg(long)]
    pub seed: Option<String>,
    /// meta (shapes only, default) or cpu (real numerics)
    #[arg(long, default_value = "meta")]
    pub device: String,
    /// Also write each point's snapshot and HTML report (under <out-dir>/points/)
    #[arg(long)]
    pub snapshots: bool,
    /// Folder the outputs are written to (created if missing)
    #[arg(long, default_value = "vramscope-out/sweep")]
    pub out_dir: PathBuf,
    /// CPU threads for the cpu device (default: all cores)
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The sweepable flags: (profile flag, value list as given, separator). Adding an axis
/// (`--precision`, `--checkpoint`) is one field above and one line here.
fn axes(a: &SweepArgs) -> Vec<(&'static str, Option<&String>, char)> {
    vec![
        ("--model", a.preset.as_ref(), ','),
        ("--config", a.config.as_ref(), ','),
        ("--flavour", a.flavour.as_ref(), ','),
        ("--hidden-dim", a.hidden_dim.as_ref(), ','),
        ("--num-layers", a.num_layers.as_ref(), ','),
        ("--num-heads", a.num_heads.as_ref(), ','),
        ("--num-kv-heads", a.num_kv_heads.as_ref(), ','),
        ("--intermediate-dim", a.intermediate_dim.as_ref(), ','),
        ("--vocab-size", a.vocab_size.as_ref(), ','),
        ("--max-seq-len", a.max_seq_len.as_ref(), ','),
        ("--rope-theta", a.rope_theta.as_ref(), ','),
        ("--attention", a.attention.as_ref(), ','),
        ("--batch-size", a.batch_size.as_ref(), ','),
        ("--context-length", a.context_length.as_ref(), ','),
        ("--profile-type", a.profile_type.as_ref(), ','),
        ("--grad-accum-steps", a.grad_accum_steps.as_ref(), ','),
        ("--precision", a.precision.as_ref(), ','),
        ("--checkpoint", a.checkpoint.as_ref(), ','),
        ("--fusion", a.fusion.as_ref(), ','),
        ("--optimizer", a.optimizer.as_ref(), ','),
        ("--max-grad-norm", a.max_grad_norm.as_ref(), ','),
        ("--parallel", a.parallel.as_ref(), ','),
        ("--world-size", a.world_size.as_ref(), ','),
        ("--gpus-per-node", a.gpus_per_node.as_ref(), ','),
        ("--fsdp-param-dtype", a.fsdp_param_dtype.as_ref(), ','),
        ("--fsdp-reduce-dtype", a.fsdp_reduce_dtype.as_ref(), ','),
        ("--fsdp-unit", a.fsdp_unit.as_ref(), ','),
        ("--warmup-steps", a.warmup_steps.as_ref(), ','),
        ("--measure-steps", a.measure_steps.as_ref(), ','),
        ("--gpu", a.gpu.as_ref(), ','),
        ("--memory-limit", a.memory_limit.as_ref(), ','),
        ("--memory-fraction", a.memory_fraction.as_ref(), ','),
        ("--allocator-conf", a.allocator_conf.as_ref(), ';'),
        ("--seed", a.seed.as_ref(), ','),
    ]
}

/// One axis of the grid.
#[derive(Clone, Debug, Serialize)]
pub struct Axis {
    pub flag: &'static str,
    pub values: Vec<String>,
    /// Every value is a number (plots and fits use it as x).
    pub numeric: bool,
}

impl Axis {
    fn name(&self) -> &'static str {
        self.flag.trim_start_matches("--")
    }
}

/// The parsed grid: axes in flag order; points in row-major order (last axis fastest).
pub(crate) fn grid(a: &SweepArgs) -> Result<Vec<Axis>> {
    let mut out = Vec::new();
    for (flag, given, sep) in axes(a) {
        let Some(s) = given else { continue };
        let values: Vec<String> = s.split(sep).map(|v| v.trim().to_string()).collect();
        if values.iter().any(|v| v.is_empty()) {
            return Err(usage(flag, format!("'{s}' has an empty value (expected values separated by '{sep}')")));
        }
        let mut seen = Vec::new();
        for v in &values {
            if seen.contains(v) {
                return Err(usage(flag, format!("'{v}' appears twice in '{s}'")));
            }
            seen.push(v.clone());
        }
        let numeric = values.iter().all(|v| v.parse::<f64>().is_ok());
        out.push(Axis { flag, values, numeric });
    }
    Ok(out)
}

fn points(axes: &[Axis]) -> Vec<Vec<usize>> {
    let mut pts = vec![vec![]];
    for ax in axes {
        pts = pts.into_iter().flat_map(|p| (0..ax.values.len()).map(move |i| [p.clone(), vec![i]].concat())).collect();
    }
    pts
}

fn label(axes: &[Axis], idx: &[usize]) -> String {
    axes.iter().zip(idx).map(|(ax, &i)| format!("{} {}", ax.flag, ax.values[i])).collect::<Vec<_>>().join(" ")
}

/// A grid point as profile arguments, parsed and validated by profile's own code.
pub(crate) fn point_args(axes: &[Axis], idx: &[usize], device: &str, out_dir: &std::path::Path) -> Result<ProfileArgs> {
    let mut words: Vec<String> = vec!["--device".into(), device.into(), "--out-dir".into(), out_dir.display().to_string()];
    for (ax, &i) in axes.iter().zip(idx) {
        words.push(format!("{}={}", ax.flag, ax.values[i]));
    }
    ProfileArgs::parse_words(&words).map_err(|first| UsageError(format!("{first} (grid point: {})", label(axes, idx))).into())
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
fn along(ax: &Axis, k: usize, idx: &[Vec<usize>]) -> Option<BTreeMap<Vec<usize>, Vec<usize>>> {
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

fn fixed_label(f: &AxisFit) -> String {
    if f.fixed.is_empty() {
        "all points".into()
    } else {
        f.fixed.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    }
}

/// The fits as Markdown lines (printed and written to sweep.md).
pub fn fits_text(fits: &[AxisFit]) -> Vec<String> {
    let mut l = Vec::new();
    for f in fits {
        let x = if f.axis == "batch-size" { "B" } else if f.axis == "context-length" { "S" } else { "x" };
        l.push(format!("### peak allocated vs {} ({})", f.axis, fixed_label(f)));
        l.push(String::new());
        if let Some(p) = &f.linear {
            let per = if f.axis == "batch-size" { "per sample" } else if f.axis == "context-length" { "per token" } else { "per unit" };
            l.push(format!(
                "- linear: a + b·{x} with a = {:.3} GiB, b = {:.2} MiB {per} ({:.0} B), R² = {:.6}",
                p.coeff(0) / (1u64 << 30) as f64,
                p.coeff(1) / (1u64 << 20) as f64,
                p.coeff(1),
                p.r2
            ));
        }
        if let Some(r) = &f.reserved_linear {
            l.push(format!("- reserved, linear: b = {:.2} MiB per unit of {}, R² = {:.6}", r.coeff(1) / (1u64 << 20) as f64, f.axis, r.r2));
        }
        if f.peak_phases.len() > 1 {
            let s: Vec<String> = f.peak_phases.iter().map(|(ph, xs)| format!("{ph} at {x} = {}", xs.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", "))).collect();
            l.push(format!("- the peak is in different phases along the axis ({}): the curve is the larger of phase peaks that scale differently; read the per-phase fits", s.join("; ")));
        }
        if let Some(q) = &f.quadratic {
            if q.n == 3 && q.r2 > 1.0 - 1e-12 {
                l.push("- (three points: the quadratic passes through them exactly, R² = 1 says nothing)".to_string());
            }
            let x_max = f.x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let share = match f.quadratic_share {
                Some(s) => format!("at {x} = {x_max} the {x}² term is {:.1} % of the fitted peak", 100.0 * s),
                None => format!("R² under {MIN_R2}: no share of the {x}² term is given"),
            };
            l.push(format!(
                "- quadratic (coefficients ≥ 0): a + b·{x} + c·{x}² with a = {:.3} GiB, b = {:.1} KiB, c = {:.1} B, R² = {:.6}; {share}",
                q.coeff(0) / (1u64 << 30) as f64,
                q.coeff(1) / 1024.0,
                q.coeff(2),
                q.r2,
            ));
        }
        // One component as measured at the largest x, and the share of it its x² term
        // explains when it grows as x² (see ComponentFit::quadratic_share).
        let component = |c: &ComponentFit| -> String {
            let share = match c.quadratic_share {
                Some(s) if c.grows_quadratically => format!(" ({x}² term: {:.0} % of it)", 100.0 * s),
                _ => String::new(),
            };
            format!("{} {:.3} GiB{share}", c.name, c.bytes_at_max / (1u64 << 30) as f64)
        };
        if !f.steps.is_empty() {
            let s: Vec<String> = f.steps.iter().map(|s| format!("{}→{}: ×{:.3} (×{:.3} per doubling)", s.from, s.to, s.factor, s.per_doubling)).collect();
            l.push(format!("- scaling factor mem(next)/mem(this): {}", s.join("; ")));
        }
        if !f.phases.is_empty() {
            let s: Vec<String> = f.phases.iter().map(component).collect();
            l.push(format!("- peak allocated within each phase at the largest {x} (GiB 1024-based): {}", s.join(", ")));
        }
        if f.components.is_empty() && f.x.len() >= 2 {
            l.push(format!("- the peak moves between phases along {}; no two points share the largest {x}'s peak phase, so no breakdown fit", f.axis));
        } else if f.components_x.len() < f.x.len() {
            l.push(format!(
                "- the peak is in {} only for {x} = {}: the breakdown below fits those points",
                f.components_phase.as_deref().unwrap_or("-"),
                f.components_x.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
            ));
        }
        if !f.components.is_empty() {
            let s: Vec<String> = f.components.iter().map(component).collect();
            l.push(format!("- live at the peak by category (allocated blocks), at the largest {x} (GiB 1024-based): {}", s.join(", ")));
        }
        if !f.quadratic_ops.is_empty() {
            let s: Vec<String> = f
                .quadratic_ops
                .iter()
                .filter_map(|c| Some(format!("{} {:.1} MiB ({x}² term: {:.0} % of it)", c.name, c.bytes_at_max / (1u64 << 20) as f64, 100.0 * c.quadratic_share?)))
                .collect();
            l.push(format!("- activations (allocated blocks) that grow as {x}² at the peak, by op: {}", s.join(", ")));
        }
        l.push(String::new());
    }
    l
}

fn table(axes: &[Axis], res: &[PointResult]) -> Vec<String> {
    let mut head: Vec<String> = axes.iter().map(|a| a.name().to_string()).collect();
    head.extend(["peak allocated (GiB)", "peak reserved (GiB)", "peak phase", "activations at peak (GiB)", "OOM"].map(String::from));
    let mut l = vec![format!("| {} |", head.join(" | ")), format!("|{}", "---|".repeat(head.len()))];
    for r in res {
        let mut row: Vec<String> = axes.iter().map(|a| r.values[a.name()].clone()).collect();
        row.push(format!("{:.3}", r.peak_allocated_gib));
        row.push(format!("{:.3}", r.peak_reserved_gib));
        row.push(r.peak_phase.clone().unwrap_or_else(|| "-".into()));
        row.push(format!("{:.3}", gib(*r.at_peak_by_category.get("activation").unwrap_or(&0) as u64)));
        row.push(if r.oom.is_some() { "OOM".into() } else { String::new() });
        l.push(format!("| {} |", row.join(" | ")));
    }
    l
}

/// sweep.csv. It carries no run id (a comment line or an extra column would break CSV
/// readers); sweep.json, the plots and the set's all-or-nothing commit tie it to its run.
fn csv(axes: &[Axis], res: &[PointResult]) -> String {
    let q = |s: &str| if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() };
    let mut head: Vec<String> = axes.iter().map(|a| a.name().to_string()).collect();
    head.extend(["model", "batch_size", "context_length", "profile_type", "peak_allocated_bytes", "peak_allocated_gib", "peak_reserved_bytes", "peak_reserved_gib", "peak_phase", "oom"].map(String::from));
    head.extend(Category::ALL.iter().map(|c| format!("at_peak_{}_bytes", c.name())));
    head.push("at_peak_activation_requested_bytes".into());
    let mut s = head.join(",") + "\n";
    for r in res {
        let mut row: Vec<String> = axes.iter().map(|a| q(&r.values[a.name()])).collect();
        row.extend([
            q(&r.model),
            r.batch_size.to_string(),
            r.context_length.to_string(),
            r.profile_type.clone(),
            r.peak_allocated_bytes.to_string(),
            format!("{:.6}", r.peak_allocated_gib),
            r.peak_reserved_bytes.to_string(),
            format!("{:.6}", r.peak_reserved_gib),
            r.peak_phase.clone().unwrap_or_default(),
            q(r.oom.as_deref().unwrap_or("")),
        ]);
        row.extend(Category::ALL.iter().map(|c| r.at_peak_by_category.get(c.name()).copied().unwrap_or(0).to_string()));
        row.push(r.at_peak_requested_by_category.get("activation").copied().unwrap_or(0).to_string());
        s += &(row.join(",") + "\n");
    }
    s
}

/// One chart per swept numeric axis: peak allocated (solid) and reserved (dashed) in GiB, a
/// colour per combination of the other axes; each device memory limit as a line, and each
/// point that ran out of memory as a ✗ on its limit (its partial peaks are not drawn).
fn plots(axes: &[Axis], idx: &[Vec<usize>], res: &[PointResult]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, ax) in axes.iter().enumerate() {
        let Some(groups) = along(ax, k, idx) else { continue };
        let mut series = Vec::new();
        let mut extras = svg::Extras::default();
        for r in res {
            if let (Some(b), Some(l)) = (r.memory_limit_bytes, &r.memory_limit_label) {
                let label = format!("{l}: {:.2} GiB", gib(b as u64));
                if !extras.limits.iter().any(|x| x.label == label) {
                    extras.limits.push(svg::Limit { label, y: gib(b as u64) });
                }
            }
        }
        for (gi, (key, members)) in groups.iter().enumerate() {
            let others: Vec<String> = axes.iter().enumerate().filter(|(j, a)| *j != k && a.values.len() > 1).map(|(j, a)| {
                let jj = if j > k { j - 1 } else { j };
                format!("{} {}", a.name(), a.values[key[jj]])
            }).collect();
            let tag = if others.is_empty() { String::new() } else { format!(" ({})", others.join(", ")) };
            let ok: Vec<usize> = members.iter().copied().filter(|&m| res[m].oom.is_none()).collect();
            let x = |m: usize| ax.values[idx[m][k]].parse::<f64>().unwrap();
            for &m in members.iter().filter(|&&m| res[m].oom.is_some()) {
                let y = res[m].memory_limit_bytes.map_or(res[m].peak_reserved_gib, |b| gib(b as u64));
                extras.ooms.push(svg::Oom { x: x(m), y, colour: gi, label: format!("out of memory at {} {}{tag}", ax.name(), ax.values[idx[m][k]]) });
            }
            series.push(Series { label: format!("allocated{tag}"), points: ok.iter().map(|&m| (x(m), res[m].peak_allocated_gib)).collect(), colour: gi, dashed: false });
            series.push(Series { label: format!("reserved{tag}"), points: ok.iter().map(|&m| (x(m), res[m].peak_reserved_gib)).collect(), colour: gi, dashed: true });
        }
        let title = format!("Peak memory vs {} (solid: max allocated, dashed: max reserved)", ax.name());
        out.push((format!("sweep_{}.svg", ax.name()), svg::line_chart(&title, ax.name(), "peak memory (GiB, 1024³ bytes)", &series, &extras)));
    }
    out
}

pub fn run(a: SweepArgs) -> Result<()> {
    let axes = grid(&a)?;
    let idx = points(&axes);
    // Validate the whole grid before anything runs.
    let mut planned = Vec::with_capacity(idx.len());
    for p in &idx {
        let dir = if a.snapshots { a.out_dir.join("points").join(point_dir(&axes, p)) } else { a.out_dir.clone() };
        let args = point_args(&axes, p, &a.device, &dir)?;
        let mut plan = profile::plan(&args).map_err(|e| match e.downcast_ref::<UsageError>() {
            Some(u) => UsageError(format!("{} (grid point: {})", u.0, label(&axes, p))).into(),
            None => e,
        })?;
        plan.keep_trace = a.snapshots;
        if let Some(n) = profile::meta_if_host_too_small(&plan, &args.profile_type)? {
            println!("grid point {}: {n}", label(&axes, p));
            plan.device = crate::engine::Device::Meta;
        }
        planned.push((args, plan));
    }
    set_threads(a.threads)?;
    // The whole set (tables, plots, points/) appears at the end or not at all.
    let set = super::outputs::begin_set("--out-dir", &a.out_dir)?;
    super::quiet_oom_panics();
    if let Some(n) = planned.iter().find_map(|(_, p)| p.note.clone()) {
        eprintln!("note: {n}");
    }
    let bar = indicatif::ProgressBar::new(planned.len() as u64);
    bar.set_style(indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} points, {elapsed} [{msg}]").unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()));
    let mut res = Vec::with_capacity(planned.len());
    for (i, (args, plan)) in planned.iter().enumerate() {
        bar.set_message(label(&axes, &idx[i]));
        let kind = args.profile_type[0];
        let run = profile::profile_one(plan, args, plan.contexts[0], kind)?;
        let st = &run.stats;
        res.push(PointResult {
            values: axes.iter().zip(&idx[i]).map(|(ax, &j)| (ax.name().to_string(), ax.values[j].clone())).collect(),
            model: plan.model_name.clone(),
            batch_size: plan.batch,
            context_length: plan.contexts[0],
            profile_type: kind.name().to_string(),
            optimizer: (kind == profile::ProfileType::Training).then(|| plan.optim.clone()),
            peak_allocated_bytes: st.allocated_bytes.peak,
            peak_reserved_bytes: st.reserved_bytes.peak,
            peak_allocated_gib: gib(st.allocated_bytes.peak as u64),
            peak_reserved_gib: gib(st.reserved_bytes.peak as u64),
            oom: run.oom.clone(),
            memory_limit_bytes: (plan.capacity < usize::MAX / 4).then(|| args.memory_fraction.map_or(plan.capacity, |f| (f * plan.capacity as f64) as usize)),
            memory_limit_label: (plan.capacity < usize::MAX / 4).then(|| {
                let name = plan.gpu_name.clone().unwrap_or_else(|| "memory limit".into());
                args.memory_fraction.map_or(name.clone(), |f| format!("{name} × memory fraction {f}"))
            }),
            peak_phase: run.report.peak_phase.map(|p| p.to_string()),
            at_peak_by_category: run.report.by_category.iter().map(|(c, b)| (c.name().to_string(), *b)).collect(),
            at_peak_requested_by_category: run.report.by_category_requested.iter().map(|(c, b)| (c.name().to_string(), *b)).collect(),
            activations_by_op: run.report.activations_by_op.iter().cloned().collect(),
            phase_peaks: run.report.phase_peaks.iter().map(|(p, b)| (p.to_string(), *b)).collect(),
            snapshot: run.snapshot.clone(),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    let fits = fits(&axes, &idx, &res);
    let tab = table(&axes, &res);
    let fit_lines = fits_text(&fits);
    println!("sweep of {} points on {} (GiB/MiB/KiB are 1024-based; allocated = max_memory_allocated, reserved = max_memory_reserved)\n", res.len(), a.device);
    for l in &tab {
        println!("{l}");
    }
    if !fit_lines.is_empty() {
        println!("\n## Fits\n");
        for l in &fit_lines {
            println!("{l}");
        }
    }
    let mut md = vec![
        "# vramscope sweep".to_string(),
        String::new(),
        format!("{} points on {}; GiB/MiB/KiB are 1024-based; peak allocated = `torch.cuda.max_memory_allocated()`, reserved = `max_memory_reserved()`.", res.len(), a.device),
        String::new(),
    ];
    md.extend(tab);
    if !fit_lines.is_empty() {
        md.extend([String::new(), "## Fits".to_string(), String::new()]);
        md.extend(fit_lines);
    }
    let plots = plots(&axes, &idx, &res);
    let plot_names: Vec<String> = plots.iter().map(|p| p.0.clone()).collect();
    for (name, _) in &plots {
        md.push(format!("![{name}]({name})"));
    }
    let summary = json!({
        "run_id": set.run_id(),
        "device": a.device,
        "units": "bytes are integers; *_gib are 1024³-byte GiB; fit coefficients are bytes per unit of the axis (per unit² for the quadratic term)",
        "axes": axes,
        "points": res,
        "fits": fits,
    });
    write_atomic(&a.out_dir.join("sweep.csv"), csv(&axes, &res).as_bytes())?;
    write_json(&a.out_dir.join("sweep.json"), &summary)?;
    write_atomic(&a.out_dir.join("sweep.md"), (md.join("\n") + "\n").as_bytes())?;
    for (name, svg) in plots {
        write_atomic(&a.out_dir.join(&name), &with_run_id_comment(svg.into_bytes()))?;
    }
    set.commit()?;
    let mut written = vec!["sweep.csv".to_string(), "sweep.json".into(), "sweep.md".into()];
    written.extend(plot_names);
    println!("\nwrote {} in {}", written.join(", "), a.out_dir.display());
    let ooms = res.iter().filter(|r| r.oom.is_some()).count();
    if ooms > 0 {
        println!("{ooms} point(s) ran out of memory (marked OOM; left out of the fits; drawn as ✗ on the memory limit in the plots)");
    }
    Ok(())
}

fn point_dir(axes: &[Axis], idx: &[usize]) -> String {
    let s: Vec<String> = axes.iter().zip(idx).map(|(ax, &i)| format!("{}-{}", ax.name(), ax.values[i])).collect();
    s.join("_").chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}
