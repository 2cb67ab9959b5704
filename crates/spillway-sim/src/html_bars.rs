//! The bar charts, one bar per run: cost by team and by tier (stacked), and interruptions and lost work.

use super::colors::{self, Colors, IDLE, INK};
use super::svg::{self, Frame, LegendItem, Scale, Swatch, count};
use super::{hours, usd};
use crate::report::{Report, RunReport};
use std::collections::BTreeSet;

/// Pixels per bar row and bar thickness.
const ROW: f64 = 26.0;
const BAR: f64 = 16.0;
/// Left margin, wide enough for a policy name.
const LABELS: f64 = 150.0;

/// One segment of a stacked bar: value, colour, key (as in [`svg::key_attr`]) and tooltip.
struct Segment {
    value: f64,
    color: String,
    key: String,
    title: String,
}

/// Returns the frame of a bar chart of `rows` bars over `0..x_hi` with a legend of `legend_rows` rows.
fn bar_frame(width: f64, rows: usize, legend_rows: usize, x_hi: f64) -> Frame {
    let height = 14.0 + 18.0 * legend_rows as f64 + ROW * rows.max(1) as f64 + 50.0;
    let mut f = Frame::sized(width, height, legend_rows, Scale::linear(0.0, x_hi), Scale::linear(0.0, 1.0));
    f.left = LABELS;
    f
}

/// Returns an SVG of one stacked horizontal bar per row (label, segments, end label) on a shared x axis from 0 to
/// the largest total, with `legend` above and `xtitle` below; `usd_axis` labels the axis in dollars.
fn stacked(
    label: &str,
    rows: &[(String, Vec<Segment>, String)],
    legend: &[LegendItem],
    (width, xtitle, usd_axis): (f64, &str, bool),
) -> String {
    let total = |segs: &[Segment]| segs.iter().map(|s| s.value.max(0.0)).sum::<f64>();
    let max = rows.iter().map(|(_, s, _)| total(s)).fold(0.0, f64::max);
    // A fifth more than the longest bar leaves room for its end label.
    let (x_hi, ticks, step) = svg::zero_based_axis(max * 1.2);
    let d = svg::decimals(step);
    let xticks: Vec<(f64, String)> = ticks
        .into_iter()
        .map(|v| (v, if usd_axis { svg::usd_tick(v, x_hi, step) } else { format!("{v:.d$}") }))
        .collect();
    let f = bar_frame(width, rows.len(), svg::legend_rows(legend, width), x_hi);
    let mut out = String::new();
    svg::open(&mut out, &f, label);
    svg::axes(&mut out, &f, &xticks, &[], xtitle, "");
    svg::legend(&mut out, &f, legend);
    for (i, (name, segs, end)) in rows.iter().enumerate() {
        let y = f.top + ROW * i as f64 + (ROW - BAR) / 2.0;
        svg::text(&mut out, (f.left - 8.0, y + BAR / 2.0), "end", name);
        let mut x = 0.0;
        for s in segs.iter().filter(|s| s.value > 0.0) {
            svg::hbar(&mut out, &f, (x, x + s.value), (y, BAR), &s.color, &s.key, &s.title);
            x += s.value;
        }
        let at = (f.px(x) + 6.0).min(f.right - 4.0);
        svg::text(&mut out, (at, y + BAR / 2.0), if at >= f.right - 4.0 { "end" } else { "start" }, end);
    }
    if rows.is_empty() {
        svg::message(&mut out, &f, "No runs");
    }
    out.push_str("</svg>\n");
    out
}

/// Returns the charts of cost by team and by tier: per run, one bar stacked by team and one by tier, each ending
/// in the idle cost (paid-for GPUs that ran no job), so a bar's length is the run's total cost and both charts share
/// one scale. Empty when no run has a cost by team or tier.
pub(super) fn cost_split(report: &Report, colors: &Colors) -> String {
    let teams: BTreeSet<&String> = report.runs.iter().flat_map(|r| r.cost_by_team.keys()).collect();
    let tiers: BTreeSet<&String> = report.runs.iter().flat_map(|r| r.cost_by_tier.keys()).collect();
    if teams.is_empty() && tiers.is_empty() {
        return String::new();
    }
    let chart = |what: &str, names: &BTreeSet<&String>, color: &dyn Fn(&str) -> String, get: GetCost| {
        let mut legend: Vec<LegendItem> = names
            .iter()
            .map(|n| LegendItem::new(&color(n), format!("{what} {n}"), Swatch::Area(1.0)).keyed(format!("{what}:{n}")))
            .collect();
        legend.push(LegendItem::new(IDLE, "idle (no job)", Swatch::Area(1.0)).keyed("idle"));
        let rows: Vec<(String, Vec<Segment>, String)> = report
            .runs
            .iter()
            .map(|r| {
                let mut segs: Vec<Segment> = names
                    .iter()
                    .map(|n| {
                        let v = get(r, n);
                        let title = format!("{}: {what} {n} {}", r.policy, usd(v));
                        Segment { value: v, color: color(n), key: format!("{what}:{n}"), title }
                    })
                    .collect();
                let idle = r.idle_cost_usd;
                let title = format!("{}: idle {}", r.policy, usd(idle));
                segs.push(Segment { value: idle, color: IDLE.into(), key: "idle".into(), title });
                (r.policy.clone(), segs, usd(r.cost_usd))
            })
            .collect();
        let label = format!("Cost by {what} of each run, stacked, with the idle cost last");
        stacked(&label, &rows, &legend, (svg::WIDTH, "cost (USD)", true))
    };
    let team_cost: GetCost = |r, n| r.cost_by_team.get(n).copied().unwrap_or(0.0);
    let tier_cost: GetCost = |r, n| r.cost_by_tier.get(n).copied().unwrap_or(0.0);
    let mut out = chart("team", &teams, &|n| colors.team(n).to_string(), team_cost);
    out.push_str(&chart("tier", &tiers, &|n| colors.tier(n), tier_cost));
    out
}

/// Reads one team's or tier's cost of a run.
type GetCost = fn(&RunReport, &str) -> f64;

/// Returns the interruptions and lost-work charts: per run, the spot interruption notices and preemptions it
/// received (one stacked bar of stops), and beside it the GPU-hours of work it redone.
pub(super) fn interruptions(report: &Report) -> String {
    let spot = colors::market("spot").unwrap_or(INK);
    let stops: Vec<(String, Vec<Segment>, String)> = report
        .runs
        .iter()
        .map(|r| {
            let n = (r.interruptions as f64, r.preemptions as f64);
            let segs = vec![
                Segment {
                    value: n.0,
                    color: spot.into(),
                    key: "market:spot".into(),
                    title: format!("{}: {} spot interruption notices", r.policy, count(r.interruptions)),
                },
                Segment {
                    value: n.1,
                    color: PREEMPTED.into(),
                    key: "preempted".into(),
                    title: format!("{}: {} preemptions", r.policy, count(r.preemptions)),
                },
            ];
            (r.policy.clone(), segs, stops_label(r))
        })
        .collect();
    let legend = [
        LegendItem::new(spot, "spot interruption notices", Swatch::Area(1.0)).keyed("market:spot"),
        LegendItem::new(PREEMPTED, "preemptions by a higher tier", Swatch::Area(1.0)).keyed("preempted"),
    ];
    let mut out = String::from("<div class=\"pair\">\n");
    out.push_str(&stacked(
        "Stops per run: spot interruptions and preemptions",
        &stops,
        &legend,
        (PAIR, "stops", false),
    ));
    let redone: Vec<(String, Vec<Segment>, String)> = report
        .runs
        .iter()
        .map(|r| {
            let title = format!("{}: {} GPU-hours redone", r.policy, hours(r.lost_gpu_hours));
            let seg = Segment { value: r.lost_gpu_hours, color: REDONE.into(), key: "redone".into(), title };
            (r.policy.clone(), vec![seg], hours(r.lost_gpu_hours))
        })
        .collect();
    let legend = [LegendItem::new(REDONE, "GPU-hours of work redone", Swatch::Area(1.0)).keyed("redone")];
    out.push_str(&stacked("GPU-hours of work redone per run", &redone, &legend, (PAIR, "GPU-hours", false)));
    out.push_str("</div>\n");
    out
}

/// Returns the end label of a run's stops bar: `3 spot + 69 preempted`, or the one kind there was, or `none`.
fn stops_label(r: &RunReport) -> String {
    match (r.interruptions, r.preemptions) {
        (0, 0) => "none".into(),
        (i, 0) => format!("{} spot", count(i)),
        (0, p) => format!("{} preempted", count(p)),
        (i, p) => format!("{} spot + {} preempted", count(i), count(p)),
    }
}

/// View-box width of each of two charts side by side.
const PAIR: f64 = 470.0;
/// Work redone: a slate apart from the demand's near-black.
const REDONE: &str = "#5b6b7f";
/// Preemptions: a dark purple apart from every market's, pool's and tier's colour.
const PREEMPTED: &str = "#7f3c8d";
