//! A sweep's outputs: the Markdown table and fit text (sweep.md), sweep.csv, and one SVG
//! chart of peak memory per swept numeric axis.
use crate::analyse::sweep::{along, AxisFit, Axis, ComponentFit, PointResult, MIN_R2};
use crate::export::gib;
use crate::export::svg::{self, Series};
use crate::record::Category;

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

/// "OOM in <phase>" for a point that ran out of memory ("OOM" when the phase is unknown).
pub fn oom_cell(r: &PointResult) -> String {
    match (&r.oom, &r.oom_phase) {
        (Some(_), Some(p)) => format!("OOM in {p}"),
        (Some(_), None) => "OOM".into(),
        (None, _) => String::new(),
    }
}

/// The Markdown table of the points (printed and written to sweep.md).
pub fn table(axes: &[Axis], res: &[PointResult]) -> Vec<String> {
    let mut head: Vec<String> = axes.iter().map(|a| a.name().to_string()).collect();
    head.extend(["peak allocated (GiB)", "peak reserved (GiB)", "peak phase", "activations at peak (GiB)", "OOM"].map(String::from));
    let mut l = vec![format!("| {} |", head.join(" | ")), format!("|{}", "---|".repeat(head.len()))];
    for r in res {
        let mut row: Vec<String> = axes.iter().map(|a| r.values[a.name()].clone()).collect();
        row.push(format!("{:.3}", r.peak_allocated_gib));
        row.push(format!("{:.3}", r.peak_reserved_gib));
        row.push(r.peak_phase.clone().unwrap_or_else(|| "-".into()));
        row.push(format!("{:.3}", gib(*r.at_peak_by_category.get("activation").unwrap_or(&0) as u64)));
        row.push(oom_cell(r));
        l.push(format!("| {} |", row.join(" | ")));
    }
    l
}

/// sweep.csv. It carries no run id (a comment line or an extra column would break CSV
/// readers); sweep.json, the plots and the set's all-or-nothing commit tie it to its run.
pub fn csv(axes: &[Axis], res: &[PointResult]) -> String {
    let q = |s: &str| if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() };
    let mut head: Vec<String> = axes.iter().map(|a| a.name().to_string()).collect();
    head.extend(["model", "batch_size", "context_length", "profile_type", "peak_allocated_bytes", "peak_allocated_gib", "peak_reserved_bytes", "peak_reserved_gib", "peak_phase", "oom", "oom_phase"].map(String::from));
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
            r.oom_phase.clone().unwrap_or_default(),
        ]);
        row.extend(Category::ALL.iter().map(|c| r.at_peak_by_category.get(c.name()).copied().unwrap_or(0).to_string()));
        row.push(r.at_peak_requested_by_category.get("activation").copied().unwrap_or(0).to_string());
        s += &(row.join(",") + "\n");
    }
    s
}

/// One chart per swept numeric axis: peak allocated (solid) and reserved (dashed) in GiB, a
/// colour per combination of the other axes; each device memory limit as a line, and each
/// point that ran out of memory as a ✗ on its limit labelled "OOM in <phase>" (its partial
/// peaks are not drawn; the legend names the phases).
pub fn plots(axes: &[Axis], idx: &[Vec<usize>], res: &[PointResult]) -> Vec<(String, String)> {
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
                let what = oom_cell(&res[m]);
                extras.ooms.push(svg::Oom { x: x(m), y, colour: gi, text: what.clone(), label: format!("{what} at {} {}{tag} (out of memory)", ax.name(), ax.values[idx[m][k]]) });
            }
            series.push(Series { label: format!("allocated{tag}"), points: ok.iter().map(|&m| (x(m), res[m].peak_allocated_gib)).collect(), colour: gi, dashed: false });
            series.push(Series { label: format!("reserved{tag}"), points: ok.iter().map(|&m| (x(m), res[m].peak_reserved_gib)).collect(), colour: gi, dashed: true });
        }
        let title = format!("Peak memory vs {} (solid: max allocated, dashed: max reserved)", ax.name());
        out.push((format!("sweep_{}.svg", ax.name()), svg::line_chart(&title, ax.name(), "peak memory (GiB, 1024³ bytes)", &series, &extras)));
    }
    out
}

