//! The waiting-budget sweep's section: cloud spending saved against the rise in mean JCT, both against bursting
//! at once, one line per kind of budget (constant waits, waits per GPU-hour), with Starburst's JCT bar, and a
//! table of every point.

use super::svg::{self, Frame, LegendItem, Scale, Swatch};
use crate::sweep::{JCT_BAR, PointKind, Sweep, SweepPoint};

const CONSTANT: &str = "#1f77b4";
const BY_SIZE: &str = "#d62728";
const MARK: &str = "#222222";

/// Returns the chart: x the mean JCT increase (%), y the share of cloud spending saved (%).
pub fn chart(s: &Sweep) -> String {
    let pct = |v: f64| 100.0 * v;
    let xs: Vec<f64> = s.points.iter().map(|p| pct(p.jct_increase)).collect();
    let ys: Vec<f64> = s.points.iter().map(|p| pct(p.cloud_saved)).collect();
    let x_hi = xs.iter().copied().fold(pct(JCT_BAR) * 1.5, f64::max);
    let x_lo = xs.iter().copied().fold(0.0, f64::min);
    let (y_lo, y_hi) = (ys.iter().copied().fold(0.0, f64::min), ys.iter().copied().fold(10.0, f64::max));
    let legend = [
        LegendItem::new(CONSTANT, "constant wait", Swatch::Line).keyed("sweep:constant"),
        LegendItem::new(BY_SIZE, "wait per GPU-hour of size", Swatch::Line).keyed("sweep:by_size"),
        LegendItem::new(MARK, format!("+{:.1}% mean JCT (Starburst's bar)", pct(JCT_BAR)), Swatch::Dashed),
    ];
    let rows = svg::legend_rows(&legend, svg::WIDTH);
    let f = Frame::new(380.0, rows, Scale::linear(x_lo, x_hi), Scale::linear(y_lo, y_hi));
    let ticks = |lo: f64, hi: f64| -> Vec<(f64, String)> {
        let step = svg::nice_step(hi - lo, 6);
        svg::ticks_in(lo, hi, step).into_iter().map(|v| (v, format!("{v:.0}%"))).collect()
    };
    let mut out = String::new();
    svg::open(&mut out, &f, "Cloud spending saved against the rise in mean JCT, per waiting budget");
    svg::axes(
        &mut out,
        &f,
        &ticks(x_lo, x_hi),
        &ticks(y_lo, y_hi),
        "mean JCT above bursting at once",
        "cloud spending saved",
    );
    svg::legend(&mut out, &f, &legend);
    svg::line(&mut out, &f, &[(pct(JCT_BAR), y_lo), (pct(JCT_BAR), y_hi)], MARK, 1.0, Some("6 4"), "");
    for (kind, color, key) in
        [(PointKind::Constant, CONSTANT, "sweep:constant"), (PointKind::BySize, BY_SIZE, "sweep:by_size")]
    {
        let mut pts: Vec<(f64, f64)> = Vec::new();
        // Each kind's points in budget order, from bursting at once.
        for p in s.points.iter().filter(|p| p.kind == kind || p.kind == PointKind::AtOnce) {
            pts.push((pct(p.jct_increase), pct(p.cloud_saved)));
        }
        svg::line(&mut out, &f, &pts, color, 2.0, None, key);
        for p in s.points.iter().filter(|p| p.kind == kind) {
            dot(&mut out, &f, p, color, false);
        }
    }
    for p in s.points.iter().filter(|p| matches!(p.kind, PointKind::AtOnce | PointKind::Config)) {
        dot(&mut out, &f, p, MARK, true);
    }
    out.push_str("</svg>\n");
    out
}

/// A point with its label as a tooltip; `labelled` also writes the label beside it.
fn dot(out: &mut String, f: &Frame, p: &SweepPoint, color: &str, labelled: bool) {
    let (x, y) = (f.px(100.0 * p.jct_increase), f.py(100.0 * p.cloud_saved));
    out.push_str(&format!(
        "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\"><title>{}: {:.1}% saved, {:+.1}% mean JCT</title></circle>\n",
        svg::num(x),
        svg::num(y),
        svg::esc(color),
        svg::esc(&p.label),
        100.0 * p.cloud_saved,
        100.0 * p.jct_increase
    ));
    if labelled {
        svg::text(out, (x + 8.0, y - 10.0), "start", &p.label);
    }
}

/// Returns the table of every point.
pub fn table(s: &Sweep) -> String {
    let mut out = String::from(
        "<table>\n<tr><th>budget</th><th>cloud USD</th><th>saved</th><th>mean JCT</th><th>+JCT</th>\
         <th>mean wait</th><th>done</th></tr>\n",
    );
    for p in &s.points {
        out.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{:.1}%</td><td>{}</td><td>{:+.1}%</td><td>{}</td><td>{}</td></tr>\n",
            svg::esc(&p.label),
            super::usd(p.cloud_usd),
            crate::sweep::pct(p.cloud_saved),
            svg::duration(p.mean_jct_s),
            crate::sweep::pct(p.jct_increase),
            svg::duration(p.mean_wait_s),
            svg::count(p.jobs_completed)
        ));
    }
    out.push_str("</table>\n");
    out
}
