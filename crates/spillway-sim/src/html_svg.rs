//! Hand-written SVG primitives for the HTML report: scales, nice ticks, axes, lines, areas and legends.
//!
//! Everything is emitted as text with coordinates at fixed precision (one decimal), so the same input always gives
//! the same bytes. Callers pass data coordinates; a [`Frame`] maps them into the plot area.

/// Width of every chart's view box, in SVG user units.
pub const WIDTH: f64 = 960.0;

/// Colour-blind-friendly palette (Okabe-Ito order, black left out: it is kept for totals).
pub const PALETTE: [&str; 7] = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442"];

/// Escapes text for HTML and SVG (both element content and quoted attribute values).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A coordinate at one decimal; non-finite values become 0 and `-0.0` becomes `0.0` so output never varies by sign.
pub fn num(x: f64) -> String {
    let x = if x.is_finite() { x } else { 0.0 };
    let s = format!("{x:.1}");
    if s == "-0.0" { "0.0".to_string() } else { s }
}

/// One axis's data range; logarithmic axes need `lo > 0`.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
}

impl Scale {
    /// A linear scale; a degenerate range is widened so mapping never divides by zero.
    pub fn linear(lo: f64, hi: f64) -> Scale {
        let (lo, hi) = if lo.is_finite() && hi.is_finite() { (lo, hi) } else { (0.0, 1.0) };
        let hi = if hi > lo { hi } else { lo + 1.0 };
        Scale { lo, hi, log: false }
    }

    /// A log-10 scale over `[lo, hi]` (clamped to `lo >= 1e-9`, `hi > lo`).
    pub fn log(lo: f64, hi: f64) -> Scale {
        let lo = if lo.is_finite() && lo > 1e-9 { lo } else { 1.0 };
        let hi = if hi.is_finite() && hi > lo { hi } else { lo * 10.0 };
        Scale { lo, hi, log: true }
    }

    /// Position of `v` in the range as a fraction in `[0, 1]`; out-of-range values are clamped onto the edge.
    fn frac(&self, v: f64) -> f64 {
        let f = if self.log {
            let v = v.max(self.lo);
            (v / self.lo).ln() / (self.hi / self.lo).ln()
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        if f.is_finite() { f.clamp(0.0, 1.0) } else { 0.0 }
    }
}

/// A chart's plot area inside its view box, with the scales of both axes.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub right: f64,
    pub top: f64,
    pub bottom: f64,
    pub x: Scale,
    pub y: Scale,
}

impl Frame {
    /// A frame of the standard width whose top margin leaves room for `legend_rows` rows of legend.
    pub fn new(height: f64, legend_rows: usize, x: Scale, y: Scale) -> Frame {
        Frame::sized(WIDTH, height, legend_rows, x, y)
    }

    /// A frame `width` units wide (small multiples are narrower than [`WIDTH`]).
    pub fn sized(width: f64, height: f64, legend_rows: usize, x: Scale, y: Scale) -> Frame {
        let top = 14.0 + LEGEND_ROW * legend_rows as f64;
        Frame { width, height, left: 72.0, right: width - 20.0, top, bottom: height - 44.0, x, y }
    }

    /// Pixel x of data value `v`.
    pub fn px(&self, v: f64) -> f64 {
        self.left + self.x.frac(v) * (self.right - self.left)
    }

    /// Pixel y of data value `v` (SVG y grows downwards).
    pub fn py(&self, v: f64) -> f64 {
        self.bottom - self.y.frac(v) * (self.bottom - self.top)
    }
}

/// A "nice" step (1, 2, 2.5 or 5 times a power of ten) splitting `span` into about `target` intervals.
pub fn nice_step(span: f64, target: usize) -> f64 {
    let span = if span.is_finite() && span > 0.0 { span } else { 1.0 };
    let raw = span / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 2.5 {
        2.5
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Multiples of `step` inside `[lo, hi]` (with a little slack so the end points survive rounding).
pub fn ticks_in(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    if step.is_nan() || step <= 0.0 || !lo.is_finite() || !hi.is_finite() {
        return Vec::new();
    }
    let eps = step * 1e-6;
    let first = ((lo - eps) / step).ceil() as i64;
    let last = ((hi + eps) / step).floor() as i64;
    // Bounded because `step` came from `nice_step` over this same range; the cap guards against misuse.
    (first..=last.min(first + 1000)).map(|k| k as f64 * step).collect()
}

/// A value axis from 0 to a nice ceiling of `max`: returns the ceiling, the ticks and the step.
pub fn zero_based_axis(max: f64) -> (f64, Vec<f64>, f64) {
    let max = if max.is_finite() && max > 0.0 { max } else { 1.0 };
    let step = nice_step(max, 5);
    let hi = (max / step - 1e-9).ceil().max(1.0) * step;
    (hi, ticks_in(0.0, hi, step), step)
}

/// Decimals needed to print multiples of `step` exactly (at most 4).
pub fn decimals(step: f64) -> usize {
    (0..4)
        .find(|&d| {
            let scaled = step * 10f64.powi(d as i32);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.abs().max(1.0)
        })
        .unwrap_or(4)
}

/// An axis label in dollars with a k/M suffix chosen by the axis top, so all labels of one axis share a unit.
pub fn usd_tick(v: f64, top: f64, step: f64) -> String {
    let (div, suffix) = if top >= 1e6 {
        (1e6, "M")
    } else if top >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    if v == 0.0 {
        return "$0".to_string();
    }
    let d = decimals(step / div);
    format!("${:.d$}{suffix}", v / div)
}

/// Opens a chart's `<svg>` element; `label` is plain text (escaped here).
pub fn open(out: &mut String, frame: &Frame, label: &str) {
    out.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\">\n",
        num(frame.width),
        num(frame.height),
        esc(label)
    ));
}

/// Grid lines, tick labels and axis titles. Tick labels are plain text (escaped here).
pub fn axes(
    out: &mut String,
    f: &Frame,
    xticks: &[(f64, String)],
    yticks: &[(f64, String)],
    xtitle: &str,
    ytitle: &str,
) {
    out.push_str("<g class=\"grid\">\n");
    for (v, label) in yticks {
        let y = num(f.py(*v));
        out.push_str(&format!(
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\"/><text x=\"{}\" y=\"{y}\" dy=\"0.32em\" text-anchor=\"end\">{}</text>\n",
            num(f.left),
            num(f.right),
            num(f.left - 6.0),
            esc(label)
        ));
    }
    for (v, label) in xticks {
        let x = num(f.px(*v));
        out.push_str(&format!(
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\"/><text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            num(f.top),
            num(f.bottom),
            num(f.bottom + 16.0),
            esc(label)
        ));
    }
    out.push_str("</g>\n");
    out.push_str(&format!(
        "<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n",
        num(f.left),
        num(f.top),
        num(f.right - f.left),
        num(f.bottom - f.top)
    ));
    out.push_str(&format!(
        "<text class=\"title\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
        num((f.left + f.right) / 2.0),
        num(f.height - 8.0),
        esc(xtitle)
    ));
    let cy = num((f.top + f.bottom) / 2.0);
    out.push_str(&format!(
        "<text class=\"title\" x=\"16\" y=\"{cy}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {cy})\">{}</text>\n",
        esc(ytitle)
    ));
}

/// A centred note in the plot area, for charts without data.
pub fn message(out: &mut String, f: &Frame, text: &str) {
    out.push_str(&format!(
        "<text class=\"empty\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
        num((f.left + f.right) / 2.0),
        num((f.top + f.bottom) / 2.0),
        esc(text)
    ));
}

/// Turns samples into a step line: each value holds until the next sample's time.
pub fn step(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, &(x, y)) in points.iter().enumerate() {
        if i > 0 {
            out.push((x, points[i - 1].1));
        }
        out.push((x, y));
    }
    out
}

/// Maps data points to pixel strings, dropping repeats and the middle of straight horizontal or vertical runs:
/// step lines that rarely change then cost a few bytes instead of thousands.
fn pixel_points(f: &Frame, points: &[(f64, f64)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(points.len());
    for &(x, y) in points {
        let p = (num(f.px(x)), num(f.py(y)));
        if out.last() == Some(&p) {
            continue;
        }
        if out.len() >= 2 {
            let a = &out[out.len() - 2];
            let b = &out[out.len() - 1];
            if (a.0 == b.0 && b.0 == p.0) || (a.1 == b.1 && b.1 == p.1) {
                out.pop();
            }
        }
        out.push(p);
    }
    out
}

/// Joins pixel points as `M x y L x y ...` path data.
fn path_data(points: &[(String, String)]) -> String {
    let mut d = String::with_capacity(points.len() * 14);
    for (i, (x, y)) in points.iter().enumerate() {
        d.push_str(if i == 0 { "M" } else { "L" });
        d.push_str(x);
        d.push(' ');
        d.push_str(y);
    }
    d
}

/// The ` data-key="..."` attribute naming what a mark stands for (`pool:spot`, `team:research`), so the page can be
/// checked for one colour per key; empty when `key` is.
pub fn key_attr(key: &str) -> String {
    if key.is_empty() { String::new() } else { format!(" data-key=\"{}\"", esc(key)) }
}

/// A stroked line through `points`; `dash` is an SVG dash array such as `"6 4"`; `key` as in [`key_attr`].
pub fn line(
    out: &mut String,
    f: &Frame,
    points: &[(f64, f64)],
    color: &str,
    width: f64,
    dash: Option<&str>,
    key: &str,
) {
    let px = pixel_points(f, points);
    if px.is_empty() {
        return;
    }
    let dash = dash.map(|d| format!(" stroke-dasharray=\"{}\"", esc(d))).unwrap_or_default();
    out.push_str(&format!(
        "<path{} d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-linejoin=\"round\"{dash}/>\n",
        key_attr(key),
        path_data(&px),
        esc(color),
        num(width)
    ));
}

/// A filled area between `points` and the bottom of the plot; `key` as in [`key_attr`].
pub fn area(out: &mut String, f: &Frame, points: &[(f64, f64)], color: &str, opacity: f64, key: &str) {
    let mut px = pixel_points(f, points);
    let (Some(first), Some(last)) = (px.first().cloned(), px.last().cloned()) else {
        return;
    };
    let base = num(f.bottom);
    px.push((last.0, base.clone()));
    px.push((first.0, base));
    out.push_str(&format!(
        "<path{} d=\"{}Z\" fill=\"{}\" fill-opacity=\"{:.2}\" stroke=\"none\"/>\n",
        key_attr(key),
        path_data(&px),
        esc(color),
        opacity.clamp(0.0, 1.0)
    ));
}

/// A horizontal bar over data values `xs.0..xs.1` in the pixel band `band` (top, height), with `title` (plain text)
/// as its tooltip; `key` as in [`key_attr`].
pub fn hbar(out: &mut String, f: &Frame, xs: (f64, f64), band: (f64, f64), color: &str, key: &str, title: &str) {
    let (a, b) = (f.px(xs.0), f.px(xs.1));
    out.push_str(&format!(
        "<rect{} x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>\n",
        key_attr(key),
        num(a.min(b)),
        num(band.0),
        num((b - a).abs()),
        num(band.1),
        esc(color),
        esc(title)
    ));
}

/// Text (plain, escaped here) at pixel `(x, y)`, vertically centred; `anchor` is `start`, `middle` or `end`.
pub fn text(out: &mut String, (x, y): (f64, f64), anchor: &str, text: &str) {
    out.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" dy=\"0.32em\" text-anchor=\"{}\">{}</text>\n",
        num(x),
        num(y),
        esc(anchor),
        esc(text)
    ));
}

/// How a legend entry's swatch is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Swatch {
    Line,
    Dashed,
    /// A filled box at the given fill opacity, matching the area it stands for.
    Area(f64),
}

/// One legend entry.
#[derive(Debug, Clone, PartialEq)]
pub struct LegendItem {
    pub color: String,
    /// Plain text.
    pub label: String,
    pub swatch: Swatch,
    /// What the entry stands for, as in [`key_attr`]; empty for none.
    pub key: String,
}

impl LegendItem {
    /// Returns an entry without a key.
    pub fn new(color: &str, label: impl Into<String>, swatch: Swatch) -> LegendItem {
        LegendItem { color: color.to_string(), label: label.into(), swatch, key: String::new() }
    }

    /// Returns the entry with `key`.
    pub fn keyed(self, key: impl Into<String>) -> LegendItem {
        LegendItem { key: key.into(), ..self }
    }
}

const LEGEND_ROW: f64 = 18.0;

/// Left x and row of each legend entry, wrapping at the chart width; label widths are estimated from their length
/// (no font metrics are available without a browser).
fn legend_layout(items: &[LegendItem], width: f64) -> Vec<(f64, usize)> {
    let (mut x, mut row) = (72.0, 0);
    let mut out = Vec::with_capacity(items.len());
    for LegendItem { label, .. } in items {
        let w = 40.0 + 7.2 * label.chars().count().min(60) as f64;
        if x + w > width - 20.0 && x > 72.0 {
            x = 72.0;
            row += 1;
        }
        out.push((x, row));
        x += w;
    }
    out
}

/// Rows the legend of `items` needs in a chart `width` wide (0 when empty).
pub fn legend_rows(items: &[LegendItem], width: f64) -> usize {
    legend_layout(items, width).last().map_or(0, |&(_, row)| row + 1)
}

/// Draws the legend in the top margin of the chart `f`.
pub fn legend(out: &mut String, f: &Frame, items: &[LegendItem]) {
    for (LegendItem { color, label, swatch, key }, (x, row)) in items.iter().zip(legend_layout(items, f.width)) {
        let y = 12.0 + LEGEND_ROW * row as f64;
        let color = esc(color);
        let key = key_attr(key);
        match swatch {
            Swatch::Area(opacity) => out.push_str(&format!(
                "<rect{key} x=\"{}\" y=\"{}\" width=\"20\" height=\"10\" fill=\"{color}\" fill-opacity=\"{:.2}\"/>",
                num(x),
                num(y - 5.0),
                opacity.clamp(0.0, 1.0)
            )),
            Swatch::Line | Swatch::Dashed => out.push_str(&format!(
                "<line{key} x1=\"{}\" y1=\"{y0}\" x2=\"{}\" y2=\"{y0}\" stroke=\"{color}\" stroke-width=\"2.5\"{}/>",
                num(x),
                num(x + 20.0),
                if *swatch == Swatch::Dashed { " stroke-dasharray=\"5 3\"" } else { "" },
                y0 = num(y)
            )),
        }
        let label: String = label.chars().take(60).collect();
        out.push_str(&format!("<text x=\"{}\" y=\"{}\" dy=\"0.32em\">{}</text>\n", num(x + 26.0), num(y), esc(&label)));
    }
}

/// Index ranges splitting `n` rows into at most `max` contiguous buckets of near-equal size.
pub fn buckets(n: usize, max: usize) -> Vec<(usize, usize)> {
    let k = n.min(max.max(1));
    (0..k).map(|i| (i * n / k, (i + 1) * n / k)).filter(|(a, b)| b > a).collect()
}

/// One point per bucket: the bucket's first time with the bucket's maximum value, so short peaks stay visible
/// however many rows were merged. When the last bucket merged rows, its maximum is held to its last row's time so the
/// line reaches the end of the series without a spurious drop.
pub fn downsample_max(ts: &[f64], ys: &[f64], ranges: &[(usize, usize)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &(a, b) in ranges {
        let (Some(&t), Some(slice)) = (ts.get(a), ys.get(a..b)) else {
            continue;
        };
        let max = slice.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        out.push((t, max));
    }
    if let Some(&(a, b)) = ranges.last()
        && b > a + 1
        && let (Some(&t), Some(&(_, y))) = (ts.get(b - 1), out.last())
    {
        out.push((t, y));
    }
    out
}

// Text formatting shared by chart labels and the table.

/// An integer with thousands separators.
pub fn count(n: usize) -> String {
    group(&n.to_string())
}

/// Inserts commas every three digits of a string of digits.
pub fn group(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration for people: `42s`, `4m 10s`, `2.3h`, `3.5d`.
pub fn duration(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "—".into();
    }
    spillway_core::time::fmt_duration(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_and_ticks() {
        assert_eq!(nice_step(10.0, 5), 2.0);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(nice_step(1200.0, 5), 250.0);
        let (hi, ticks, _) = zero_based_axis(37.0);
        assert_eq!(hi, 40.0);
        assert_eq!(ticks, vec![0.0, 10.0, 20.0, 30.0, 40.0]);
        assert_eq!(zero_based_axis(0.0).0, 1.0);
        assert_eq!(decimals(0.25), 2);
        assert_eq!(decimals(5.0), 0);
        assert_eq!(usd_tick(2500.0, 10_000.0, 2500.0), "$2.5k");
        assert_eq!(usd_tick(2_000_000.0, 4_000_000.0, 1_000_000.0), "$2M");
        assert_eq!(duration(250.0), "4m10s");
        assert_eq!(duration(8280.0), "2h18m");
        assert_eq!(duration(0.0), "0s");
        assert_eq!(duration(3.0 * 86_400.0), "3d00h");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(usd_tick(0.0, 4_000_000.0, 1_000_000.0), "$0");
    }

    #[test]
    fn downsampling_keeps_peaks() {
        let ts: Vec<f64> = (0..10_000).map(f64::from).collect();
        let mut ys = vec![1.0; 10_000];
        ys[4321] = 99.0;
        let pts = downsample_max(&ts, &ys, &buckets(ts.len(), 100));
        assert!(pts.len() <= 101);
        assert!(pts.iter().any(|&(_, y)| y == 99.0));
        assert_eq!(pts.last(), Some(&(9999.0, 1.0)));
    }

    #[test]
    fn straight_runs_collapse() {
        let f = Frame::new(300.0, 0, Scale::linear(0.0, 100.0), Scale::linear(0.0, 10.0));
        let pts: Vec<(f64, f64)> = (0..=100).map(|x| (f64::from(x), 5.0)).collect();
        assert_eq!(pixel_points(&f, &pts).len(), 2);
    }
}
