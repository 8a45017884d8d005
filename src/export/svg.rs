//! A small hand-written SVG line chart (no dependencies): axes with ticks, labelled axes,
//! a title, one polyline per series with markers, and a legend.
use std::fmt::Write;

pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Index into the palette (series that belong together share a colour).
    pub colour: usize,
    pub dashed: bool,
}

const PALETTE: [&str; 10] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// "Nice" tick positions covering [lo, hi].
fn ticks(lo: f64, hi: f64, want: usize) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / want as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| span / s <= want as f64).unwrap_or(10.0 * mag);
    let start = (lo / step).ceil() * step;
    let mut v = Vec::new();
    let mut t = start;
    while t <= hi + step * 1e-9 {
        v.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    v
}

fn fmt_tick(v: f64) -> String {
    if v == v.round() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A line chart; the y axis starts at 0.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let (w, h) = (900.0, 560.0);
    let legend_w = 300.0;
    let (left, right, top, bottom) = (80.0, w - legend_w, 50.0, h - 60.0);
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (mut x0, mut x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
    let y1 = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0f64, f64::max);
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    // x ticks at the data's own values when there are few (1, 2, 4, 8 … read better).
    let mut data_x: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    data_x.sort_by(f64::total_cmp);
    data_x.dedup();
    let xt = if !data_x.is_empty() && data_x.len() <= 12 { data_x } else { ticks(x0, x1, 8) };
    let mut yt = ticks(0.0, if y1 > 0.0 { y1 * 1.05 } else { 1.0 }, 6);
    // The y axis ends on a tick at or above the data.
    if let (Some(&last), true) = (yt.last(), yt.len() >= 2) {
        let step = yt[1] - yt[0];
        if last < y1 {
            yt.push(last + step);
        }
    }
    let y_top = yt.last().copied().unwrap_or(1.0).max(y1).max(1e-12);
    let sx = |x: f64| left + (x - x0) / (x1 - x0) * (right - left);
    let sy = |y: f64| bottom - y / y_top * (bottom - top);
    let mut s = String::new();
    let _ = writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#);
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="25" text-anchor="middle" font-size="15">{}</text>"#, (left + right) / 2.0, esc(title));
    for &t in &yt {
        let y = sy(t);
        let _ = writeln!(s, r##"<line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##, left - 6.0, y + 4.0, fmt_tick(t));
    }
    for &t in &xt {
        let x = sx(t);
        let _ = writeln!(s, r##"<line x1="{x:.1}" y1="{bottom}" x2="{x:.1}" y2="{}" stroke="#333"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##, bottom + 5.0, bottom + 20.0, fmt_tick(t));
    }
    let _ = writeln!(s, r##"<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/><line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#333"/>"##);
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#, (left + right) / 2.0, h - 20.0, esc(x_label));
    let _ = writeln!(s, r#"<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">{}</text>"#, (top + bottom) / 2.0, (top + bottom) / 2.0, esc(y_label));
    for (i, se) in series.iter().enumerate() {
        let colour = PALETTE[se.colour % PALETTE.len()];
        let mut pts = se.points.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts.iter().map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y))).collect();
        let dash = if se.dashed { r#" stroke-dasharray="6 4""# } else { "" };
        let _ = writeln!(s, r#"<g><title>{}</title><polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{}"/>"#, esc(&se.label), path.join(" "));
        for &(x, y) in &pts {
            let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{}: {} → {:.3}</title></circle>"#, sx(x), sy(y), esc(&se.label), fmt_tick(x), y);
        }
        let _ = writeln!(s, "</g>");
        let ly = top + 10.0 + i as f64 * 18.0;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly:.1}" x2="{}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{}" y="{:.1}">{}</text>"#,
            right + 15.0,
            right + 45.0,
            right + 50.0,
            ly + 4.0,
            esc(&se.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_a_polyline_per_series_and_escapes_labels() {
        let svg = line_chart(
            "peak <memory>",
            "batch size",
            "GiB",
            &[
                Series { label: "allocated".into(), points: vec![(1.0, 1.0), (2.0, 2.0)], colour: 0, dashed: false },
                Series { label: "reserved".into(), points: vec![(1.0, 1.5), (2.0, 2.5)], colour: 0, dashed: true },
            ],
        );
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("peak &lt;memory&gt;"));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    }
}
