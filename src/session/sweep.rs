//! A sweep: one profile per grid point, then the table, the scaling fits and the plots of
//! peak memory against each swept numeric axis (analyse/sweep.rs, export/sweep.rs).
use super::profile::{profile_one, ProfileOptions, ProfileType, Run};
use crate::analyse::sweep::{fits, AxisFit, Axis, PointResult};
use crate::export::gib;
use crate::export::sweep::{csv, fits_text, plots, table};
use anyhow::Result;
use serde_json::{json, Value};
use std::path::PathBuf;

/// One grid point, planned.
pub struct Point {
    /// The axes' value indices.
    pub idx: Vec<usize>,
    /// `--batch-size 2 --context-length 128`.
    pub label: String,
    /// Where the point's files go when its trace is kept.
    pub dir: PathBuf,
    pub options: ProfileOptions,
    pub kind: ProfileType,
    /// Why the point runs on meta though cpu was asked (host memory).
    pub host_note: Option<String>,
}

impl Point {
    /// The point's snapshot and report under its folder, when it keeps its trace.
    pub fn save(&self, r: &mut Run) -> Result<()> {
        if self.options.keep_trace {
            r.save_files(&self.options, &self.options.snapshot_path(&self.dir, r))?;
        }
        Ok(())
    }
}

/// The sweep's results: a row per point and a fit per swept numeric axis.
pub struct Sweep {
    pub axes: Vec<Axis>,
    pub idx: Vec<Vec<usize>>,
    pub points: Vec<PointResult>,
    pub fits: Vec<AxisFit>,
}

/// Profile every point in order; `each` sees each point's run as it is made (to write its
/// files, or to tick a progress bar).
pub fn sweep(axes: Vec<Axis>, planned: &[Point], mut each: impl FnMut(&Point, &mut Run) -> Result<()>) -> Result<Sweep> {
    let mut res = Vec::with_capacity(planned.len());
    for pt in planned {
        let plan = &pt.options;
        let mut run = profile_one(plan, plan.contexts[0], pt.kind)?;
        each(pt, &mut run)?;
        res.push(result(&axes, pt, &run));
    }
    let idx: Vec<Vec<usize>> = planned.iter().map(|p| p.idx.clone()).collect();
    let fits = fits(&axes, &idx, &res);
    Ok(Sweep { axes, idx, points: res, fits })
}

fn result(axes: &[Axis], pt: &Point, run: &Run) -> PointResult {
    let (plan, kind, st) = (&pt.options, pt.kind, &run.stats);
    let limited = plan.capacity < usize::MAX / 4;
    PointResult {
        values: axes.iter().zip(&pt.idx).map(|(ax, &j)| (ax.name().to_string(), ax.values[j].clone())).collect(),
        model: plan.model_name.clone(),
        batch_size: plan.batch,
        context_length: plan.contexts[0],
        profile_type: kind.name().to_string(),
        optimizer: (kind == ProfileType::Training).then(|| plan.optim.clone()),
        peak_allocated_bytes: st.allocated_bytes.peak,
        peak_reserved_bytes: st.reserved_bytes.peak,
        peak_allocated_gib: gib(st.allocated_bytes.peak as u64),
        peak_reserved_gib: gib(st.reserved_bytes.peak as u64),
        oom: run.oom.clone(),
        oom_phase: run.oom.as_ref().and(run.oom_phase).map(|p| p.to_string()),
        memory_limit_bytes: limited.then(|| plan.fraction.map_or(plan.capacity, |f| (f * plan.capacity as f64) as usize)),
        memory_limit_label: limited.then(|| {
            let name = plan.device_label();
            plan.fraction.map_or(name.clone(), |f| format!("{name} × memory fraction {f}"))
        }),
        peak_phase: run.report.peak_phase.map(|p| p.to_string()),
        at_peak_by_category: run.report.by_category.iter().map(|(c, b)| (c.name().to_string(), *b)).collect(),
        at_peak_requested_by_category: run.report.by_category_requested.iter().map(|(c, b)| (c.name().to_string(), *b)).collect(),
        activations_by_op: run.report.activations_by_op.iter().cloned().collect(),
        phase_peaks: run.report.phase_peaks.iter().map(|(p, b)| (p.to_string(), *b)).collect(),
        snapshot: run.snapshot.clone(),
        generate: run.generate.clone(),
    }
}

impl Sweep {
    /// sweep.json's object; `device` as given, `run_id` the output set's when written.
    pub fn json(&self, device: &str, run_id: Option<&str>) -> Value {
        json!({
            "run_id": run_id,
            "device": device,
            "units": "bytes are integers; *_gib are 1024³-byte GiB; fit coefficients are bytes per unit of the axis (per unit² for the quadratic term)",
            "axes": self.axes,
            "points": self.points,
            "fits": self.fits,
        })
    }

    /// What the command line prints: the table, then the fits.
    pub fn text(&self, device: &str) -> String {
        let mut s = format!(
            "sweep of {} points on {device} (GiB/MiB/KiB are 1024-based; allocated = max_memory_allocated, reserved = max_memory_reserved)\n\n",
            self.points.len()
        );
        for l in table(&self.axes, &self.points) {
            out!(s, "{l}");
        }
        let fit_lines = fits_text(&self.fits);
        if !fit_lines.is_empty() {
            out!(s, "\n## Fits\n");
            for l in &fit_lines {
                out!(s, "{l}");
            }
        }
        s
    }

    /// The files of a sweep, by name: sweep.csv, sweep.md and one SVG plot per swept numeric
    /// axis (sweep.json is [`Sweep::json`]).
    pub fn files(&self, device: &str) -> Vec<(String, Vec<u8>)> {
        let fit_lines = fits_text(&self.fits);
        let mut md = vec![
            "# vramscope sweep".to_string(),
            String::new(),
            format!("{} points on {device}; GiB/MiB/KiB are 1024-based; peak allocated = `torch.cuda.max_memory_allocated()`, reserved = `max_memory_reserved()`.", self.points.len()),
            String::new(),
        ];
        md.extend(table(&self.axes, &self.points));
        if !fit_lines.is_empty() {
            md.extend([String::new(), "## Fits".to_string(), String::new()]);
            md.extend(fit_lines);
        }
        let plots = plots(&self.axes, &self.idx, &self.points);
        for (name, _) in &plots {
            md.push(format!("![{name}]({name})"));
        }
        let mut files = vec![("sweep.csv".to_string(), csv(&self.axes, &self.points).into_bytes()), ("sweep.md".to_string(), (md.join("\n") + "\n").into_bytes())];
        files.extend(plots.into_iter().map(|(n, svg)| (n, svg.into_bytes())));
        files
    }
}
