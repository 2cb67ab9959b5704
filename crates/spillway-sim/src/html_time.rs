//! The charts over time: capacity against demand, cumulative cost by market, spot nodes, queue waits, and one small
//! chart per run on shared scales so the reference policies read beside `spillway`.

use super::colors::{self, Colors, INK};
use super::svg::{self, Frame, LegendItem, Scale, Swatch, count, duration, esc};
use super::{MAX_POINTS, SECONDS_PER_DAY, SECONDS_PER_HOUR, usd};
use crate::report::{Report, TimeSeries, stats};
use std::collections::{BTreeMap, BTreeSet};

/// The time series prepared for drawing: the time column, the buckets rows are merged into, and the time unit.
/// Rows are taken in the order given (the simulator writes them in time order); buckets are runs of adjacent rows.
pub(super) struct Series<'a> {
    series: &'a TimeSeries,
    /// Sample times in x-axis units; empty when there is no `time_s` column or no rows.
    time: Vec<f64>,
    ranges: Vec<(usize, usize)>,
    /// Seconds per x-axis unit, and the unit's name.
    unit: (f64, &'static str),
    /// x-axis range in units.
    x: Scale,
}

impl<'a> Series<'a> {
    /// Returns the whole series, merged into at most [`MAX_POINTS`] buckets.
    pub(super) fn new(series: &'a TimeSeries) -> Series<'a> {
        let (lo, hi) = span(series);
        Series::windowed(series, MAX_POINTS, (lo, hi), unit_for(hi - lo))
    }

    /// Returns the rows up to `window.1` seconds (later ones are cut) on an x axis over `window` in `unit`, merged
    /// into at most `max_points` buckets.
    fn windowed(series: &'a TimeSeries, max_points: usize, window: (f64, f64), unit: (f64, &'static str)) -> Self {
        let mut time = column(series, "time_s").unwrap_or_default();
        // Rows are in time order: the window ends at the first row past its end.
        time.truncate(time.iter().position(|&t| t > window.1).unwrap_or(time.len()));
        let ranges = svg::buckets(time.len(), max_points);
        let time = time.into_iter().map(|s| s / unit.0).collect();
        Series { series, ranges, unit, x: Scale::linear(window.0 / unit.0, window.1 / unit.0), time }
    }

    /// Returns whether the run had spot nodes ready or requested at any sample.
    pub(super) fn has_spot(&self) -> bool {
        let any = |c: &str| self.get(c).is_some_and(|v| v.iter().any(|&x| x != 0.0));
        any("spot:ready_nodes") || any("spot:requested_nodes")
    }

    /// A column as values (the window's rows), `None` when absent.
    fn get(&self, name: &str) -> Option<Vec<f64>> {
        if self.time.is_empty() {
            return None;
        }
        column(self.series, name).map(|mut v| {
            v.truncate(self.time.len());
            v
        })
    }

    /// Total demand (queued plus running GPUs) per row, `None` without either column.
    fn demand(&self) -> Option<Vec<f64>> {
        let (q, r) = (self.get("demand:queued_gpus"), self.get("demand:running_gpus"));
        if q.is_none() && r.is_none() {
            return None;
        }
        let (q, r) = (q.unwrap_or_default(), r.unwrap_or_default());
        Some((0..self.time.len()).map(|i| q.get(i).unwrap_or(&0.0) + r.get(i).unwrap_or(&0.0)).collect())
    }

    /// A column as a step line held to the right edge, `None` when absent.
    fn steps(&self, name: &str) -> Option<Vec<(f64, f64)>> {
        self.get(name).map(|c| held(svg::step(&self.points(&c)), self.x.hi))
    }

    /// Downsampled points of `ys` against time in axis units.
    fn points(&self, ys: &[f64]) -> Vec<(f64, f64)> {
        svg::downsample_max(&self.time, ys, &self.ranges)
    }

    /// Labelled x ticks in the chosen unit.
    fn xticks(&self, target: usize) -> Vec<(f64, String)> {
        let step = svg::nice_step(self.x.hi - self.x.lo, target);
        let d = svg::decimals(step);
        svg::ticks_in(self.x.lo, self.x.hi, step).into_iter().map(|v| (v, format!("{v:.d$}"))).collect()
    }

    fn xtitle(&self) -> String {
        format!("time since start of trace ({})", self.unit.1)
    }
}

/// Returns the first and last sample time of a series in seconds (0 to 0 without samples).
fn span(series: &TimeSeries) -> (f64, f64) {
    let time = column(series, "time_s").unwrap_or_default();
    let lo = time.iter().copied().fold(0.0, f64::min);
    (lo, time.iter().copied().fold(lo, f64::max))
}

/// Returns the x-axis unit for a span of seconds: days read better than hundreds of hours; below three days hours
/// keep the ticks meaningful.
fn unit_for(span_s: f64) -> (f64, &'static str) {
    if span_s >= 3.0 * SECONDS_PER_DAY { (SECONDS_PER_DAY, "days") } else { (SECONDS_PER_HOUR, "hours") }
}

/// Values of the named column, one per row; cells missing from short rows and non-finite cells read as 0.
fn column(series: &TimeSeries, name: &str) -> Option<Vec<f64>> {
    let idx = series.columns.iter().position(|c| c == name)?;
    Some(series.rows.iter().map(|r| r.get(idx).copied().filter(|v| v.is_finite()).unwrap_or(0.0)).collect())
}

/// Pool names found in `pool:<name>:capacity_gpus` / `pool:<name>:busy_gpus` columns (names may contain colons).
pub(super) fn pools(series: &TimeSeries) -> BTreeSet<String> {
    series
        .columns
        .iter()
        .filter_map(|c| {
            let rest = c.strip_prefix("pool:")?;
            rest.strip_suffix(":capacity_gpus").or_else(|| rest.strip_suffix(":busy_gpus")).map(str::to_string)
        })
        .collect()
}

/// Largest y of several point sets.
fn max_y<'p>(sets: impl IntoIterator<Item = &'p Vec<(f64, f64)>>) -> f64 {
    sets.into_iter().flatten().map(|p| p.1).fold(0.0, f64::max)
}

/// Holds the last value to the right edge of the plot, so a single sample still shows as a line.
fn held(mut pts: Vec<(f64, f64)>, x_hi: f64) -> Vec<(f64, f64)> {
    if let Some(&(x, y)) = pts.last()
        && x < x_hi
    {
        pts.push((x_hi, y));
    }
    pts
}

/// Points of a line in data units.
type Points = Vec<(f64, f64)>;

/// Returns chart 1: capacity (step lines) and busy GPUs (shaded) per pool, and total demand, of one run.
pub(super) fn capacity_chart(data: &Series, colors: &Colors) -> String {
    let layers: Vec<(String, Option<Points>, Option<Points>)> = pools(data.series)
        .into_iter()
        .map(|pool| {
            let busy = data.steps(&format!("pool:{pool}:busy_gpus"));
            let cap = data.steps(&format!("pool:{pool}:capacity_gpus"));
            (pool, busy, cap)
        })
        .collect();
    let demand = data.demand().map(|d| held(svg::step(&data.points(&d)), data.x.hi));

    let mut legend: Vec<LegendItem> = Vec::new();
    if demand.is_some() {
        legend.push(LegendItem::new(INK, "total demand (queued + running)", Swatch::Line).keyed("demand"));
    }
    for (pool, busy, cap) in &layers {
        let (color, key) = (colors.pool(pool), format!("pool:{pool}"));
        if cap.is_some() {
            legend.push(LegendItem::new(color, format!("{pool} capacity"), Swatch::Line).keyed(key.clone()));
        }
        if busy.is_some() {
            legend.push(LegendItem::new(color, format!("{pool} busy"), Swatch::Area(0.25)).keyed(key));
        }
    }
    let all = layers.iter().flat_map(|(_, b, c)| [b, c]).chain([&demand]).flatten();
    let (y_hi, yticks) = gpu_axis(max_y(all));
    let f = Frame::new(360.0, svg::legend_rows(&legend, svg::WIDTH), data.x, Scale::linear(0.0, y_hi));

    let mut out = String::new();
    svg::open(&mut out, &f, "GPUs provisioned, busy and demanded over time, per pool");
    svg::axes(&mut out, &f, &data.xticks(8), &yticks, &data.xtitle(), "GPUs");
    svg::legend(&mut out, &f, &legend);
    // Shading first, lines over it, demand on top: the comparison the reader makes is demand against capacity.
    for (pool, busy, _) in &layers {
        if let Some(b) = busy {
            svg::area(&mut out, &f, b, colors.pool(pool), 0.25, &format!("pool:{pool}"));
        }
    }
    for (pool, _, cap) in &layers {
        if let Some(c) = cap {
            svg::line(&mut out, &f, c, colors.pool(pool), 2.2, None, &format!("pool:{pool}"));
        }
    }
    if let Some(dm) = &demand {
        svg::line(&mut out, &f, dm, INK, 1.4, None, "demand");
    }
    if legend.is_empty() {
        svg::message(&mut out, &f, "No capacity or demand samples");
    }
    out.push_str("</svg>\n");
    out
}

/// Returns a GPU axis from 0 to a nice ceiling of `max`, and its labelled ticks.
fn gpu_axis(max: f64) -> (f64, Vec<(f64, String)>) {
    let (y_hi, yt, step) = svg::zero_based_axis(max);
    let d = svg::decimals(step);
    (y_hi, yt.into_iter().map(|v| (v, format!("{v:.d$}"))).collect())
}

/// Returns the chart of spot nodes ready against spot nodes requested but not ready, over time. Both lines are the
/// spot market's colour (solid and dashed), so no other pool's or market's colour stands for spot here.
pub(super) fn spot_chart(data: &Series) -> String {
    let spot = colors::market("spot").unwrap_or(INK);
    let ready = data.steps("spot:ready_nodes").unwrap_or_default();
    let asked = data.steps("spot:requested_nodes").unwrap_or_default();
    let legend: Vec<LegendItem> = vec![
        LegendItem::new(spot, "spot nodes ready", Swatch::Line).keyed("market:spot"),
        LegendItem::new(spot, "spot nodes requested, not ready", Swatch::Dashed).keyed("market:spot"),
    ];
    let (y_hi, yticks) = gpu_axis(max_y([&ready, &asked]));
    let f = Frame::new(260.0, svg::legend_rows(&legend, svg::WIDTH), data.x, Scale::linear(0.0, y_hi));
    let mut out = String::new();
    svg::open(&mut out, &f, "Spot nodes ready and requested over time");
    svg::axes(&mut out, &f, &data.xticks(8), &yticks, &data.xtitle(), "nodes");
    svg::legend(&mut out, &f, &legend);
    svg::line(&mut out, &f, &ready, spot, 2.0, None, "market:spot");
    svg::line(&mut out, &f, &asked, spot, 1.6, Some("5 3"), "market:spot");
    out.push_str("</svg>\n");
    out
}

/// Returns whether the series has the elastic jobs' columns.
pub(super) fn has_elastic(data: &Series) -> bool {
    data.get("elastic:gpus").is_some()
}

/// Returns the chart of GPUs elastic jobs held over time, against what they would hold at their fewest and at
/// their most workers.
pub(super) fn elastic_chart(data: &Series) -> String {
    let held = data.steps("elastic:gpus").unwrap_or_default();
    let fewest = data.steps("elastic:fewest_gpus").unwrap_or_default();
    let most = data.steps("elastic:most_gpus").unwrap_or_default();
    let legend: Vec<LegendItem> = vec![
        LegendItem::new(INK, "GPUs elastic jobs hold", Swatch::Line).keyed("elastic:held"),
        LegendItem::new(INK, "at their fewest workers", Swatch::Dashed).keyed("elastic:fewest"),
        LegendItem::new(colors::IDLE, "at their most workers", Swatch::Dashed).keyed("elastic:most"),
    ];
    let (y_hi, yticks) = gpu_axis(max_y([&held, &fewest, &most]));
    let f = Frame::new(260.0, svg::legend_rows(&legend, svg::WIDTH), data.x, Scale::linear(0.0, y_hi));
    let mut out = String::new();
    svg::open(&mut out, &f, "GPUs elastic jobs hold over time, against their fewest and most workers");
    svg::axes(&mut out, &f, &data.xticks(8), &yticks, &data.xtitle(), "GPUs");
    svg::legend(&mut out, &f, &legend);
    svg::line(&mut out, &f, &most, colors::IDLE, 1.4, Some("5 3"), "elastic:most");
    svg::line(&mut out, &f, &fewest, INK, 1.4, Some("5 3"), "elastic:fewest");
    svg::line(&mut out, &f, &held, INK, 2.0, None, "elastic:held");
    out.push_str("</svg>\n");
    out
}

/// Returns chart 2: cumulative cost by market as stacked areas.
pub(super) fn cost_chart(data: &Series) -> String {
    const MARKETS: [(&str, &str); 3] = [("fixed", "fixed"), ("on_demand", "on-demand"), ("spot", "spot")];
    let cols: Vec<Option<Vec<f64>>> = MARKETS.iter().map(|(m, _)| data.get(&format!("cost:{m}"))).collect();
    let any = cols.iter().any(Option::is_some);
    // Running sums per row give each band's top edge; max-downsampling keeps their order because it is row-wise.
    let mut acc = vec![0.0; if any { data.time.len() } else { 0 }];
    let mut tops = Vec::new();
    for col in &cols {
        if let Some(c) = col {
            for (a, v) in acc.iter_mut().zip(c) {
                *a += v;
            }
        }
        tops.push(held(data.points(&acc), data.x.hi));
    }
    let (y_hi, yt, step) = svg::zero_based_axis(max_y(&tops));
    let yticks: Vec<(f64, String)> = yt.into_iter().map(|v| (v, svg::usd_tick(v, y_hi, step))).collect();
    let legend: Vec<LegendItem> = MARKETS
        .iter()
        .zip(&cols)
        .filter(|(_, c)| c.is_some())
        .map(|((m, name), _)| {
            LegendItem::new(colors::market(m).unwrap_or(INK), *name, Swatch::Area(1.0)).keyed(format!("market:{m}"))
        })
        .collect();
    let f = Frame::new(320.0, svg::legend_rows(&legend, svg::WIDTH), data.x, Scale::linear(0.0, y_hi));

    let mut out = String::new();
    svg::open(&mut out, &f, "Cumulative cost by market over time");
    svg::axes(&mut out, &f, &data.xticks(8), &yticks, &data.xtitle(), "cumulative cost (USD)");
    svg::legend(&mut out, &f, &legend);
    // Painted from the total down, each band covering the ones below it: stacked without computing lower edges.
    for (i, ((m, _), col)) in MARKETS.iter().zip(&cols).enumerate().rev() {
        if col.is_some()
            && let Some(top) = tops.get(i)
        {
            svg::area(&mut out, &f, top, colors::market(m).unwrap_or(INK), 1.0, &format!("market:{m}"));
        }
    }
    if let Some(total) = tops.last() {
        svg::line(&mut out, &f, total, INK, 1.0, None, "total");
    }
    if !any {
        svg::message(&mut out, &f, "No cost samples");
    }
    out.push_str("</svg>\n");
    out
}

/// Returns chart 3: the empirical CDF of queue waits per tier on a log-seconds axis.
pub(super) fn wait_chart(waits_by_tier: &BTreeMap<String, Vec<f64>>, colors: &Colors) -> String {
    const TICKS: [(f64, &str); 10] = [
        (1.0, "1s"),
        (10.0, "10s"),
        (60.0, "1m"),
        (600.0, "10m"),
        (3600.0, "1h"),
        (21_600.0, "6h"),
        (86_400.0, "1d"),
        (604_800.0, "1w"),
        (2_592_000.0, "30d"),
        (31_536_000.0, "1y"),
    ];
    let max_wait = waits_by_tier.values().flatten().copied().filter(|v| v.is_finite()).fold(0.0, f64::max);
    let x = Scale::log(1.0, max_wait.max(60.0));
    let mut legend: Vec<LegendItem> = Vec::new();
    let mut lines = Vec::new();
    for (tier, waits) in waits_by_tier {
        let color = colors.tier(tier);
        let key = format!("tier:{tier}");
        let mut v: Vec<f64> = waits.iter().map(|w| if w.is_finite() { w.max(0.0) } else { 0.0 }).collect();
        if v.is_empty() {
            legend.push(LegendItem::new(&color, format!("{tier}: no started jobs"), Swatch::Line).keyed(key));
            continue;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        // Bucket ends: the highest point of each bucket, so the curve is never drawn below the true CDF.
        let mut pts = vec![(1.0, 0.0)];
        for (_, b) in svg::buckets(n, MAX_POINTS) {
            pts.push((v[b - 1].max(1.0), b as f64 / n as f64));
        }
        let p95 = stats(&v).p95;
        let label = format!("{tier}: {} jobs, p95 {}", count(n), duration(p95));
        legend.push(LegendItem::new(&color, label, Swatch::Line).keyed(key.clone()));
        lines.push((color, key, held(svg::step(&pts), x.hi)));
    }
    let f = Frame::new(340.0, svg::legend_rows(&legend, svg::WIDTH), x, Scale::linear(0.0, 1.0));
    let xticks: Vec<(f64, String)> =
        TICKS.iter().filter(|(v, _)| *v <= x.hi * 1.0001).map(|(v, l)| (*v, (*l).to_string())).collect();
    let yticks: Vec<(f64, String)> =
        (0..=4).map(|k| (f64::from(k) * 0.25, format!("{:.2}", f64::from(k) * 0.25))).collect();

    let mut out = String::new();
    svg::open(&mut out, &f, "Cumulative distribution of queue wait per tier");
    svg::axes(&mut out, &f, &xticks, &yticks, "queue wait (log scale; 0 s at the left edge)", "fraction of jobs");
    svg::legend(&mut out, &f, &legend);
    for (color, key, pts) in &lines {
        svg::line(&mut out, &f, pts, color, 2.0, None, key);
    }
    if lines.is_empty() {
        svg::message(&mut out, &f, "No queue waits recorded");
    }
    out.push_str("</svg>\n");
    out
}

/// Most points per line of a small multiple: a chart a third of the page wide shows no more.
const SMALL_POINTS: usize = 400;
/// View-box size of a small multiple.
const SMALL: (f64, f64) = (470.0, 230.0);

/// Returns the small multiples: one chart per run with a time series (in the report's order), each showing its
/// pools' capacity, its queued GPUs and its total demand on the same x and y scales and in the same colours, with a
/// shared legend above them. Runs without a series are left out.
pub(super) fn multiples(report: &Report, runs: &BTreeMap<&str, &TimeSeries>, colors: &Colors) -> String {
    let runs: Vec<(&str, &TimeSeries)> =
        report.runs.iter().filter_map(|r| runs.get(r.policy.as_str()).map(|s| (r.policy.as_str(), *s))).collect();
    // The window is the spillway run's (the trace's): a run that took far longer is cut, and says so, rather than
    // squeezing every other chart into a corner.
    let window = match runs.iter().find(|(p, _)| *p == "spillway") {
        Some((_, s)) => span(s),
        None => runs.iter().map(|(_, s)| span(s)).fold((0.0_f64, 0.0_f64), |a, b| (a.0.min(b.0), a.1.max(b.1))),
    };
    let unit = unit_for(window.1 - window.0);
    let data: Vec<(&str, Series)> =
        runs.iter().map(|(p, s)| (*p, Series::windowed(s, SMALL_POINTS, window, unit))).collect();
    let (y_hi, peaks) = shared_y(&data, colors);
    let (_, yticks) = gpu_axis(y_hi);
    let mut out = String::from("<div class=\"legend\">");
    for pool in data.iter().flat_map(|(_, d)| pools(d.series)).collect::<BTreeSet<_>>() {
        out.push_str(&swatch(colors.pool(&pool), &format!("pool:{pool}"), &format!("{pool} capacity"), false));
    }
    out.push_str(&swatch(INK, "demand", "total demand (queued + running)", false));
    out.push_str(&swatch(QUEUED, "queued", "queued GPUs", true));
    out.push_str("</div>\n<div class=\"multiples\">\n");
    for (((policy, d), (_, s)), peak) in data.iter().zip(&runs).zip(peaks) {
        let f = Frame::sized(SMALL.0, SMALL.1, 0, d.x, Scale::linear(0.0, y_hi));
        let cost = report.runs.iter().find(|r| r.policy == *policy).map_or(0.0, |r| r.cost_usd);
        let mut caption = format!("<b>{}</b> · {}", esc(policy), usd(cost));
        let end = span(s).1;
        if end > window.1 * 1.001 {
            caption += &format!(" · cut at {:.1} {}; it ran to {:.1}", window.1 / unit.0, unit.1, end / unit.0);
        }
        if peak > y_hi {
            caption += &format!(" · off the scale: demand peaks at {} GPUs", count(peak as usize));
        }
        out.push_str(&format!("<figure><figcaption>{caption}</figcaption>\n"));
        svg::open(&mut out, &f, &format!("{policy}: GPUs provisioned per pool, queued and demanded over time"));
        svg::axes(&mut out, &f, &d.xticks(5), &yticks, &d.xtitle(), "GPUs");
        for (color, key, area, pts) in small_lines(d, colors) {
            match area {
                true => svg::area(&mut out, &f, &pts, &color, 0.3, &key),
                false => svg::line(&mut out, &f, &pts, &color, if key == "demand" { 1.2 } else { 2.0 }, None, &key),
            }
        }
        if d.time.is_empty() {
            svg::message(&mut out, &f, "No samples");
        }
        out.push_str("</svg>\n</figure>\n");
    }
    out.push_str("</div>\n");
    out
}

/// Returns the GPU-axis top the small multiples share, and each run's peak demand. The axis reaches every run's
/// capacity and demand, except the demand of a run whose queue grew past four times the median run's peak demand
/// (a policy that could not keep up): that one would flatten every other chart, so it runs off the top and its
/// caption gives its peak.
fn shared_y(data: &[(&str, Series)], colors: &Colors) -> (f64, Vec<f64>) {
    let mut capacity: f64 = 0.0;
    let mut peaks = Vec::with_capacity(data.len());
    for (_, d) in data {
        let lines = small_lines(d, colors);
        let (pools, demand): (Vec<_>, Vec<_>) = lines.iter().partition(|(_, key, _, _)| key.starts_with("pool:"));
        capacity = capacity.max(max_y(pools.iter().map(|(_, _, _, pts)| pts)));
        peaks.push(max_y(demand.iter().map(|(_, _, _, pts)| pts)));
    }
    let mut sorted = peaks.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    let limit = if median > 0.0 { 4.0 * median } else { f64::INFINITY };
    let demand = peaks.iter().copied().filter(|&p| p <= limit).fold(0.0, f64::max);
    (svg::zero_based_axis(capacity.max(demand)).0, peaks)
}

/// Queued GPUs in the small multiples: a warm grey, apart from every pool's and market's colour.
const QUEUED: &str = "#b5651d";

/// Returns what one small multiple draws, in paint order: (colour, key, filled?, points) for the queued GPUs, each
/// pool's capacity and the total demand. Pools are coloured by name, so a pool has the same colour in every run.
fn small_lines(d: &Series, colors: &Colors) -> Vec<(String, String, bool, Points)> {
    let mut out = Vec::new();
    if let Some(q) = d.steps("demand:queued_gpus") {
        out.push((QUEUED.to_string(), "queued".to_string(), true, q));
    }
    for pool in pools(d.series) {
        if let Some(c) = d.steps(&format!("pool:{pool}:capacity_gpus")) {
            out.push((colors.pool(&pool).to_string(), format!("pool:{pool}"), false, c));
        }
    }
    if let Some(dm) = d.demand() {
        out.push((INK.to_string(), "demand".to_string(), false, held(svg::step(&d.points(&dm)), d.x.hi)));
    }
    out
}

/// Returns one HTML legend entry: a swatch (a box when `filled`, else a bar) in `color` keyed `key`, and its label.
pub(super) fn swatch(color: &str, key: &str, label: &str, filled: bool) -> String {
    format!(
        "<span class=\"item\"><i class=\"{}\"{} style=\"background:{}\"></i>{}</span>",
        if filled { "box" } else { "bar" },
        svg::key_attr(key),
        esc(color),
        esc(label)
    )
}
