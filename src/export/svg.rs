//! A small hand-written SVG line chart (no dependencies): axes with ticks, labelled axes,
//! a title, one polyline per series with markers, and a legend; optionally horizontal limit
//! lines (a GPU's capacity) and ✗ markers for runs that ran out of memory. An x axis whose
//! values double (1, 2, 4, 8 … or 128, 256, 512 …) is drawn on a log₂ scale, so the points
//! are evenly spaced. Elements carry classes (`x-tick`, `y-tick`, `limit`, `oom`) so tests
//! and scripts can read the chart back.
use std::fmt::Write;

pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Index into the palette (series that belong together share a colour).
    pub colour: usize,
    pub dashed: bool,
}

/// A horizontal line across the plot: a device's capacity.
pub struct Limit {
    pub label: String,
    pub y: f64,
}

/// A run that did not finish: drawn as a ✗ at (x, y), in its series' colour.
pub struct Oom {
    pub x: f64,
    pub y: f64,
    pub colour: usize,
    /// Drawn beside the ✗ ("OOM in backward").
    pub text: String,
    /// The tooltip: the point and what failed.
    pub label: String,
}

/// What a chart draws besides its series.
#[derive(Default)]
pub struct Extras {
    pub limits: Vec<Limit>,
    pub ooms: Vec<Oom>,
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

/// Three or more distinct positive values, each the smallest times a power of two: a
/// doubling sweep, read best on a log₂ axis.
pub fn is_doubling(xs: &[f64]) -> bool {
    let mut v: Vec<f64> = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.dedup();
    if v.len() < 3 || v[0] <= 0.0 {
        return false;
    }
    v.iter().all(|x| {
        let k = (x / v[0]).log2();
        (k - k.round()).abs() < 1e-9
    })
}

/// A line chart; the y axis starts at 0 and reaches the highest point, limit line or OOM
/// marker; the x axis is log₂ for a doubling sweep ([`is_doubling`]), else linear.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series], extras: &Extras) -> String {
    let (w, h) = (900.0, 560.0);
    let legend_w = 300.0;
    let (left, right, top, bottom) = (80.0, w - legend_w, 50.0, h - 60.0);
    // Every x drawn: the series' points and the OOM markers.
    let mut data_x: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).chain(extras.ooms.iter().map(|o| o.x)).collect();
    data_x.sort_by(f64::total_cmp);
    data_x.dedup();
    let log2 = is_doubling(&data_x);
    // Positions along x: log₂ of the value on a doubling axis.
    let fx = |x: f64| if log2 { x.log2() } else { x };
    let (mut x0, mut x1) = data_x.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(fx(x)), b.max(fx(x))));
    let y1 = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(extras.limits.iter().map(|l| l.y))
        .chain(extras.ooms.iter().map(|o| o.y))
        .fold(0.0f64, f64::max);
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    // x ticks at the data's own values when there are few (1, 2, 4, 8 … read better); a
    // log₂ axis always ticks its own values.
    let xt = if !data_x.is_empty() && (log2 || data_x.len() <= 12) { data_x.clone() } else { ticks(x0, x1, 8) };
    let mut yt = ticks(0.0, if y1 > 0.0 { y1 * 1.05 } else { 1.0 }, 6);
    // The y axis ends on a tick at or above the data.
    if let (Some(&last), true) = (yt.last(), yt.len() >= 2) {
        let step = yt[1] - yt[0];
        if last < y1 {
            yt.push(last + step);
        }
    }
    let y_top = yt.last().copied().unwrap_or(1.0).max(y1).max(1e-12);
    let sx = |x: f64| left + (fx(x) - x0) / (x1 - x0) * (right - left);
    let sy = |y: f64| bottom - y / y_top * (bottom - top);
    let mut s = String::new();
    let _ = writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#);
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="25" text-anchor="middle" font-size="15">{}</text>"#, (left + right) / 2.0, esc(title));
    for &t in &yt {
        let y = sy(t);
        let _ = writeln!(s, r##"<line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#e5e5e5"/><text class="y-tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"##, left - 6.0, y + 4.0, fmt_tick(t));
    }
    for &t in &xt {
        let x = sx(t);
        let _ = writeln!(s, r##"<line x1="{x:.1}" y1="{bottom}" x2="{x:.1}" y2="{}" stroke="#333"/><text class="x-tick" x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##, bottom + 5.0, bottom + 20.0, fmt_tick(t));
    }
    let _ = writeln!(s, r##"<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/><line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#333"/>"##);
    let x_label = if log2 { format!("{x_label} (log₂ scale)") } else { x_label.to_string() };
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#, (left + right) / 2.0, h - 20.0, esc(&x_label));
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
    let mut legend_row = series.len();
    for l in &extras.limits {
        let y = sy(l.y);
        let _ = writeln!(
            s,
            r##"<g class="limit" data-y="{}"><title>{}</title><line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#000" stroke-width="1.5" stroke-dasharray="2 3"/><text x="{}" y="{:.1}">{}</text></g>"##,
            l.y,
            esc(&l.label),
            left + 6.0,
            y - 4.0,
            esc(&l.label)
        );
    }
    for o in &extras.ooms {
        let colour = PALETTE[o.colour % PALETTE.len()];
        let (x, y, r) = (sx(o.x), sy(o.y), 6.0);
        let _ = writeln!(
            s,
            r#"<g class="oom" data-x="{}"><title>{}</title><path d="M{:.1},{:.1}L{:.1},{:.1}M{:.1},{:.1}L{:.1},{:.1}" stroke="{colour}" stroke-width="3"/><text class="oom-label" x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="{colour}">{}</text></g>"#,
            o.x,
            esc(&o.label),
            x - r,
            y - r,
            x + r,
            y + r,
            x - r,
            y + r,
            x + r,
            y - r,
            x,
            y + r + 12.0,
            esc(&o.text)
        );
    }
    if !extras.ooms.is_empty() {
        let ly = top + 10.0 + legend_row as f64 * 18.0;
        // The distinct "OOM in <phase>" texts, in order of first appearance.
        let mut kinds: Vec<&str> = Vec::new();
        for o in &extras.ooms {
            if !o.text.is_empty() && !kinds.contains(&o.text.as_str()) {
                kinds.push(&o.text);
            }
        }
        let what = if kinds.is_empty() { "out of memory".to_string() } else { format!("out of memory: {}", kinds.join(", ")) };
        let _ = writeln!(s, r#"<text x="{}" y="{:.1}" font-weight="bold">✗</text><text class="oom-legend" x="{}" y="{:.1}">{} (drawn at the limit)</text>"#, right + 25.0, ly + 4.0, right + 50.0, ly + 4.0, esc(&what));
        legend_row += 1;
    }
    if !extras.limits.is_empty() {
        let ly = top + 10.0 + legend_row as f64 * 18.0;
        let _ = writeln!(s, r##"<line x1="{}" y1="{ly:.1}" x2="{}" y2="{ly:.1}" stroke="#000" stroke-width="1.5" stroke-dasharray="2 3"/><text x="{}" y="{:.1}">device memory limit</text>"##, right + 15.0, right + 45.0, right + 50.0, ly + 4.0);
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
            &Extras::default(),
        );
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("peak &lt;memory&gt;"));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }

    /// The x-tick labels and their x positions.
    fn x_ticks(svg: &str) -> Vec<(f64, String)> {
        svg.lines()
            .filter_map(|l| {
                let t = &l[l.find(r#"<text class="x-tick" x=""#)? + 24..];
                let x: f64 = t[..t.find('"')?].parse().ok()?;
                let label = &t[t.find('>')? + 1..t.find("</text>")?];
                Some((x, label.to_string()))
            })
            .collect()
    }

    #[test]
    fn doubling_x_is_log2_with_even_ticks_and_limits_and_ooms_are_drawn() {
        let pts: Vec<(f64, f64)> = [1.0, 2.0, 4.0, 8.0, 16.0].iter().map(|&b| (b, 10.0 + b)).collect();
        let extras = Extras {
            limits: vec![Limit { label: "H100-80GB 79.65 GiB".into(), y: 79.65 }],
            ooms: vec![Oom { x: 32.0, y: 79.65, colour: 0, text: "OOM in backward".into(), label: "OOM at 32".into() }],
        };
        let svg = line_chart("t", "batch-size", "GiB", &[Series { label: "allocated".into(), points: pts, colour: 0, dashed: false }], &extras);
        let t = x_ticks(&svg);
        assert_eq!(t.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>(), ["1", "2", "4", "8", "16", "32"], "{svg}");
        let gaps: Vec<f64> = t.windows(2).map(|w| w[1].0 - w[0].0).collect();
        assert!(gaps.iter().all(|g| (g - gaps[0]).abs() < 0.15), "log₂ axis: evenly spaced doublings {gaps:?}");
        assert!(svg.contains("batch-size (log₂ scale)"));
        assert_eq!(svg.matches(r#"<g class="limit""#).count(), 1);
        assert!(svg.contains("H100-80GB 79.65 GiB"));
        assert_eq!(svg.matches(r#"<g class="oom" data-x="32""#).count(), 1);
        assert_eq!(svg.matches(r##"fill="#1f77b4">OOM in backward</text>"##).count(), 1, "the ✗ is labelled with its phase: {svg}");
        assert!(svg.contains(r#"class="oom-legend""#) && svg.contains("out of memory: OOM in backward (drawn at the limit)"), "{svg}");
        // The y axis reaches the limit line.
        let top_tick: f64 = svg.lines().filter_map(|l| Some(l[l.find("class=\"y-tick\"")?..].split('>').nth(1)?.split('<').next()?.parse::<f64>().ok()?)).fold(0.0, f64::max);
        assert!(top_tick >= 79.65, "{top_tick}");
        // Not a doubling: a linear axis (uneven gaps), no log₂ note.
        let lin = line_chart("t", "x", "y", &[Series { label: "a".into(), points: vec![(1.0, 1.0), (2.0, 1.0), (3.0, 1.0), (10.0, 1.0)], colour: 0, dashed: false }], &Extras::default());
        let t = x_ticks(&lin);
        assert!((t[1].0 - t[0].0 - (t[2].0 - t[1].0)).abs() < 0.15 && (t[3].0 - t[2].0) > 5.0 * (t[1].0 - t[0].0), "{t:?}");
        assert!(!lin.contains("log₂"));
    }

    #[test]
    fn doubling_detection() {
        assert!(is_doubling(&[128.0, 256.0, 512.0]));
        assert!(is_doubling(&[1.0, 4.0, 16.0, 2.0]));
        assert!(!is_doubling(&[1.0, 2.0]), "two points: too few to call a doubling");
        assert!(!is_doubling(&[1.0, 2.0, 3.0]));
        assert!(!is_doubling(&[0.0, 1.0, 2.0]));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    }
}
