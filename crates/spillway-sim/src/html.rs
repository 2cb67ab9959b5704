//! The HTML report: one self-contained page (inline CSS and SVG, no scripts or external resources) showing the runs
//! of every policy side by side with the bound, capacity against demand over time (the spillway run's, and one small
//! chart per run on shared scales), cumulative cost by market, cost by team and tier, interruptions and lost work,
//! and the queue-wait distribution per tier. Every pool, market, team and tier has one colour on the whole page
//! ([`colors::Colors`]), and every mark that stands for one carries its `data-key`.
//!
//! Output is deterministic: maps are ordered, floats are printed at fixed precision and nothing depends on the clock,
//! so the same inputs give the same bytes.

use crate::report::{Report, RunReport, TimeSeries};
use std::collections::{BTreeMap, BTreeSet};

#[path = "html_bars.rs"]
mod bars;
#[path = "html_colors.rs"]
mod colors;
#[path = "html_svg.rs"]
mod svg;
#[path = "html_sweep.rs"]
mod sweep;
#[path = "html_time.rs"]
mod time;

use colors::Colors;
use svg::{count, duration, esc, group};

/// Most points drawn per line: enough for a smooth 1000-pixel chart while keeping 100,000-row series small.
const MAX_POINTS: usize = 1500;
/// Tiers always shown in the table, even when a run has none of their jobs.
const BASE_TIERS: [&str; 3] = ["p0", "p1", "p2"];
const SECONDS_PER_HOUR: f64 = 3600.0;
const SECONDS_PER_DAY: f64 = 86_400.0;

const CSS: &str = "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1d2430;\
margin:24px auto;max-width:1120px;padding:0 16px}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:0 0 6px}\
.summary{color:#4a5360;margin:0 0 18px}.scroll{overflow-x:auto}\
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums;font-size:13px}\
th,td{padding:5px 8px;border-bottom:1px solid #e3e6ea;text-align:right;white-space:nowrap}\
th{background:#f4f6f8;font-weight:600;white-space:normal;vertical-align:bottom}\
th:first-child,td:first-child{text-align:left}\
tr.hl td{background:#fff1c2;font-weight:600}\
tr.bound td{color:#4a5360;font-style:italic;border-top:2px solid #9aa3ad}\
tr.unfinished td{color:#8a929c;font-style:italic}\
dl.defs{font-size:13px;color:#4a5360;display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:10px 0}\
dl.defs dt{font-weight:600}dl.defs dd{margin:0}\
section{margin-top:30px}.note{color:#4a5360;font-size:13px;margin:6px 0 0}\
svg{width:100%;height:auto;display:block;border:1px solid #e3e6ea;border-radius:4px;background:#fff}\
svg text{font-size:12px;font-family:system-ui,sans-serif;fill:#333}\
svg .grid line{stroke:#e8ebef;stroke-width:1}svg .frame{fill:none;stroke:#9aa3ad}\
svg .title{fill:#4a5360;font-size:12.5px}svg .empty{fill:#8a929c;font-size:15px}\
.multiples,.pair{display:grid;grid-template-columns:repeat(auto-fill,minmax(440px,1fr));gap:12px}\
figure{margin:0}figcaption{font-size:13px;color:#4a5360;margin:0 0 2px}\
.legend{font-size:13px;margin:0 0 8px}.legend .item{margin-right:14px;white-space:nowrap}\
.legend i{display:inline-block;vertical-align:middle;margin-right:6px;width:20px}\
.legend i.bar{height:3px}.legend i.box{height:10px;opacity:.6}";

/// Returns the whole report page.
///
/// `series` is the time series of the `spillway` run (columns as documented on [`TimeSeries`]; missing columns are
/// simply not drawn), `others` those of the other runs by policy (drawn as small multiples beside it), and
/// `waits_by_tier` the queue wait of every started job of the `spillway` run, in seconds, by tier; `sweep_run` a
/// waiting-budget sweep on the same input, when one ran.
pub fn render(
    report: &Report,
    series: &TimeSeries,
    others: &BTreeMap<String, TimeSeries>,
    waits_by_tier: &BTreeMap<String, Vec<f64>>,
    sweep_run: Option<&crate::sweep::Sweep>,
) -> String {
    let mut out = String::with_capacity(256 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<title>Spillway simulation report</title>\n");
    out.push_str(&format!("<style>{CSS}</style>\n</head>\n<body>\n"));
    out.push_str("<h1>Spillway simulation report</h1>\n");
    out.push_str(&summary(report));
    out.push_str(&runs_table(report));
    let mut runs: BTreeMap<&str, &TimeSeries> = others.iter().map(|(p, s)| (p.as_str(), s)).collect();
    if report.runs.iter().any(|r| r.policy == "spillway") {
        runs.insert("spillway", series);
    }
    let colors = Colors::new(report, runs.values().copied().chain([series]));
    time_sections(&mut out, report, series, &runs, &colors);
    section(
        &mut out,
        "Interruptions and lost work, every run",
        &bars::interruptions(report),
        "Left: how often each run's jobs were stopped before they finished: spot interruption notices (the cloud \
         reclaiming a spot node, with a short warning) and preemptions (a job stopped to make room for a higher \
         tier's). Right: GPU-hours of work redone, the GPU time stopped attempts had run since their last \
         checkpoint (after interruptions, preemptions or lost nodes), which had to run again.",
    );
    section(
        &mut out,
        "Queue wait by tier, spillway run",
        &time::wait_chart(waits_by_tier, &colors),
        "Share of started jobs of each tier that waited at most the time on the x axis (log scale). Jobs that \
         started immediately sit at the left edge; a curve further left is better.",
    );
    if let Some(s) = sweep_run {
        let chart = format!("{}{}", sweep::chart(s), sweep::table(s));
        section(
            &mut out,
            &format!("Waiting budgets against bursting at once (tiers {})", s.tiers.join(", ")),
            &chart,
            "Each point is one run of the same input with a different waiting budget for the swept tiers: how long \
             a job waits for owned capacity before cloud capacity is bought for it. Blue: every job waits the same \
             time. Red: a job waits in proportion to its size in GPU-hours (Starburst's compute-weighted wait), so \
             large jobs wait for the owned cluster and small ones burst soon. Up is cheaper, right is slower; the \
             dashed line is Starburst's bar of 5.8% more mean job completion time. `config` is the config as given.",
        );
    }
    out.push_str("<p class=\"note\">Generated by spillway-sim.</p>\n</body>\n</html>\n");
    out
}

/// Appends the charts over time (the spillway run's, and the small multiples of every run) and the cost split.
fn time_sections(
    out: &mut String,
    report: &Report,
    series: &TimeSeries,
    runs: &BTreeMap<&str, &TimeSeries>,
    colors: &Colors,
) {
    let data = time::Series::new(series);
    section(
        out,
        "Demand and capacity, spillway run",
        &time::capacity_chart(&data, colors),
        "Lines: GPUs provisioned in each pool (steps change when nodes join or leave). Shaded: GPUs of that pool \
         running jobs. Black: total demand, GPUs of queued plus running jobs; where it rises above the pools' \
         capacity, jobs wait.",
    );
    if !runs.is_empty() {
        section(
            out,
            "Capacity and queue, every run",
            &time::multiples(report, runs, colors),
            "One chart per run, on the same time and GPU scales and in the same colours: lines are the GPUs \
             provisioned in each pool, the shaded area the GPUs of queued jobs, black the total demand (queued plus \
             running). Each line is drawn from at most 400 points (the highest value of each stretch of samples, so \
             short peaks stay); the time axis is the spillway run's, and a run that went on longer says where it was \
             cut.",
        );
    }
    section(
        out,
        "Cumulative cost by market, spillway run",
        &time::cost_chart(&data),
        "Stacked areas: money spent so far on fixed (reserved) capacity, on-demand and spot instances. The top edge \
         is the total; a steep slope means expensive hours.",
    );
    let split = bars::cost_split(report, colors);
    if !split.is_empty() {
        section(
            out,
            "Cost by team and tier, every run",
            &split,
            "One bar per run, split by what each team's (top) and each tier's (bottom) jobs cost: their GPUs' share \
             of the nodes they ran on. The grey end is idle cost, GPUs paid for that ran no job, so a bar is the \
             run's total cost (printed after it) and both charts share one scale.",
        );
    }
    if data.has_spot() {
        section(
            out,
            "Spot nodes: ready vs requested, spillway run",
            &time::spot_chart(&data),
            "Solid: spot nodes ready to run work. Dashed: spot nodes asked for and not ready yet (booting, or \
             launches the cloud has not filled). A wide gap means spot capacity is scarce or slow.",
        );
    }
    if time::has_elastic(&data) {
        let table = report.elastic.as_ref().map(elastic_table).unwrap_or_default();
        section(
            out,
            "Elastic jobs: width over time, and against the same jobs rigid, spillway run",
            &format!("{}{table}", time::elastic_chart(&data)),
            "Solid: GPUs that running elastic jobs hold. Dashed: what the same attempts would hold at their fewest \
             workers (black) and at their most (grey); the solid line between them is how far they grew into free \
             capacity. The table runs the same input again with every job rigid at its most workers: cost, and each \
             elastic job's completion time (JCT) against its rigid twin. A restart costs elastic jobs the set \
             restart time and rigid ones nothing.",
        );
    }
}

/// The elastic-against-rigid figures as a table.
fn elastic_table(c: &crate::elastic_cmp::ElasticVsRigid) -> String {
    let d = |s: f64| esc(&svg::duration(s));
    let row = |k: &str, e: String, r: String| format!("<tr><td>{k}</td><td>{e}</td><td>{r}</td></tr>\n");
    let mut out = String::from("<table>\n<tr><th></th><th>elastic</th><th>rigid</th></tr>\n");
    out.push_str(&row("cost", usd(c.cost_usd.elastic), usd(c.cost_usd.rigid)));
    out.push_str(&row("mean JCT of the elastic jobs", d(c.mean_jct_s.elastic), d(c.mean_jct_s.rigid)));
    out.push_str("</table>\n");
    out.push_str(&format!(
        "<p class=\"note\">{} jobs elastic ({} finished in both runs). JCT elastic / rigid per job: {} by more \
         than 1%. Widths: {}.</p>\n",
        c.jobs,
        c.finished_in_both,
        crate::elastic_cmp::ratios_text(c),
        crate::elastic_cmp::widths_text(c)
    ));
    out
}

/// The one-line description of the input.
fn summary(report: &Report) -> String {
    let input = &report.input;
    let mut parts = vec![
        format!("Source <b>{}</b>", or_dash(&input.source)),
        format!("config <b>{}</b>", or_dash(&input.config)),
        format!("{} jobs", count(input.jobs)),
        format!("{} GPU-hours", hours(input.total_gpu_hours)),
        format!("seed {}", report.seed),
    ];
    let skipped: usize = input.skipped.values().sum();
    if skipped > 0 {
        let reasons: Vec<String> = input.skipped.iter().map(|(why, n)| format!("{} {}", esc(why), count(*n))).collect();
        parts.push(format!("{} rows skipped ({})", count(skipped), reasons.join(", ")));
    }
    format!("<p class=\"summary\">{}</p>\n", parts.join(" · "))
}

/// Escaped text, or a dash when empty so the summary never shows a bare label.
fn or_dash(s: &str) -> String {
    if s.is_empty() { "—".to_string() } else { esc(s) }
}

/// Tiers shown in the table: p0–p2 always, plus any other tier a run reports.
fn table_tiers(report: &Report) -> Vec<String> {
    let mut tiers: BTreeSet<String> = BASE_TIERS.iter().map(|t| (*t).to_string()).collect();
    for run in &report.runs {
        tiers.extend(run.tiers.keys().cloned());
    }
    tiers.into_iter().collect()
}

/// The table of runs, with the bound as its last row.
fn runs_table(report: &Report) -> String {
    let tiers = table_tiers(report);
    let mut t = String::from(
        "<div class=\"scroll\"><table>\n<thead><tr><th>Policy</th><th>Total cost</th>\
        <th>Cost / bound</th><th>Fixed</th><th>On-demand</th><th>Spot</th><th>Idle GPU-hours</th>\
        <th>Jobs completed / submitted</th>",
    );
    for tier in &tiers {
        t.push_str(&format!("<th>p95 wait {}</th>", esc(tier)));
    }
    t.push_str(
        "<th>SLO misses</th><th>Scale actions</th><th>Spot interruptions</th><th>GPU-hours redone</th></tr></thead>\n\
         <tbody>\n",
    );
    for run in &report.runs {
        t.push_str(&run_row(run, &tiers, report.comparable(run)));
    }
    let b = &report.bound;
    t.push_str(&format!(
        "<tr class=\"bound\"><td>bound (instant overflow)</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td><td>0.0</td><td>—</td>",
        usd(b.cost_usd),
        if b.cost_usd > 0.0 { "1.00×" } else { "—" },
        usd(b.cost_by_market.fixed),
        usd(b.cost_by_market.on_demand),
        usd(b.cost_by_market.spot)
    ));
    for _ in &tiers {
        t.push_str("<td>—</td>");
    }
    t.push_str("<td>0</td><td>—</td><td>—</td><td>0.0</td></tr>\n</tbody>\n</table></div>\n");
    t.push_str(&format!(
        "<p class=\"note\">The bound starts every job at submission on the cheapest market its tier allows, with no \
         boot latency, idle GPUs or fragmentation (peak demand {} GPUs): no policy that starts jobs when they are \
         submitted can cost less. A run below it (†) paid less by making jobs wait: read its waits beside its cost. \
         A run that left jobs unfinished (greyed) did less work than the others, so its cost is not compared.</p>\n",
        count(usize::try_from(b.peak_gpus).unwrap_or(usize::MAX))
    ));
    t.push_str(&capped_note(report));
    for k in &report.skipped_policies {
        t.push_str(&format!("<p class=\"note\">{} not run: {}.</p>\n", esc(&k.policy), esc(&k.why)));
    }
    t.push_str(DEFINITIONS);
    t.push_str(&team_tier_table(report));
    t
}

/// The note on the capped bound under the runs table: its cost, spillway's over it, and what it assumes (or why
/// it is missing).
fn capped_note(report: &Report) -> String {
    let text = match (&report.capped_bound, &report.capped_bound_skipped) {
        (Some(b), _) => {
            let spillway = report.runs.iter().find(|r| r.policy == "spillway" && report.comparable(r));
            let ratio = spillway
                .filter(|r| b.cost_usd >= 0.01 && r.cost_usd > 0.0)
                .map_or(String::new(), |r| format!(" Spillway cost {} of it.", ratio(r.cost_usd / b.cost_usd)));
            format!(
                "Capped bound: {} (fixed {}, on-demand {}, spot {}), the least any policy could pay to finish all the \
                 work by the spillway run's end ({}) within each pool's cap and each tier's markets, with work free to \
                 wait until then and gangs split freely. Because work may wait, it can be well below the \
                 instant-overflow bound; it rises above it where caps force work onto dearer pools.{ratio}",
                usd(b.cost_usd),
                usd(b.cost_by_market.fixed),
                usd(b.cost_by_market.on_demand),
                usd(b.cost_by_market.spot),
                duration(b.horizon_ms as f64 / 1000.0)
            )
        }
        (None, Some(why)) => format!("The capped bound was not computed: {why}."),
        (None, None) => return String::new(),
    };
    format!("<p class=\"note\">{}</p>\n", esc(&text))
}

/// What each column of the runs table counts.
const DEFINITIONS: &str = "<dl class=\"defs\">\
<dt>Total cost</dt><dd>What the run paid: owned GPUs at their amortized rate for the whole run, cloud nodes from \
launch to end.</dd>\
<dt>Cost / bound</dt><dd>Total cost over the instant-overflow bound's.</dd>\
<dt>Fixed, On-demand, Spot</dt><dd>Total cost by market.</dd>\
<dt>Idle GPU-hours</dt><dd>GPU-hours paid for that ran no job.</dd>\
<dt>Jobs completed / submitted</dt><dd>Jobs that ended successfully, of those submitted.</dd>\
<dt>p95 wait</dt><dd>95th percentile of the time from submission to first start, over the tier's started jobs \
(— when the tier has none).</dd>\
<dt>SLO misses</dt><dd>Jobs whose first start came later than their tier's <code>queue_wait_slo_s</code>, or that \
never started.</dd>\
<dt>Scale actions</dt><dd>Scale-out and scale-in decisions, one per pool per decision.</dd>\
<dt>Spot interruptions</dt><dd>Interruption notices of spot nodes the run received.</dd>\
<dt>GPU-hours redone</dt><dd>Work lost when attempts stopped after their last checkpoint (interruptions, \
preemptions, lost nodes) and done again.</dd></dl>\n";

/// The table of cost by team and by tier, one row per run.
fn team_tier_table(report: &Report) -> String {
    let teams: BTreeSet<&String> = report.runs.iter().flat_map(|r| r.cost_by_team.keys()).collect();
    let tiers: BTreeSet<&String> = report.runs.iter().flat_map(|r| r.cost_by_tier.keys()).collect();
    if teams.is_empty() && tiers.is_empty() {
        return String::new();
    }
    let mut t = String::from(
        "<section>\n<h2>Cost by team and tier</h2>\n<div class=\"scroll\"><table>\n<thead><tr><th>Policy</th>",
    );
    for team in &teams {
        t.push_str(&format!("<th>team {}</th>", esc(team)));
    }
    for tier in &tiers {
        t.push_str(&format!("<th>tier {}</th>", esc(tier)));
    }
    t.push_str("</tr></thead>\n<tbody>\n");
    for run in &report.runs {
        t.push_str(&format!("<tr><td>{}</td>", esc(&run.policy)));
        for team in &teams {
            t.push_str(&format!("<td>{}</td>", usd(run.cost_by_team.get(*team).copied().unwrap_or(0.0))));
        }
        for tier in &tiers {
            t.push_str(&format!("<td>{}</td>", usd(run.cost_by_tier.get(*tier).copied().unwrap_or(0.0))));
        }
        t.push_str("</tr>\n");
    }
    t.push_str(
        "</tbody>\n</table></div>\n<p class=\"note\">What each team's and tier's jobs cost: their GPUs' share of \
         the nodes they ran on. Idle capacity is in no team's figure.</p>\n</section>\n",
    );
    t
}

/// One run's table row; the `spillway` row is highlighted because it is the one the reader compares.
fn run_row(run: &RunReport, tiers: &[String], comparable: bool) -> String {
    // A run that left jobs unfinished, or completed fewer, did less work: its cost is not comparable, so it gets
    // no ratio.
    let unfinished = !comparable;
    let class = match (run.policy == "spillway", unfinished) {
        (_, true) => " class=\"unfinished\"",
        (true, false) => " class=\"hl\"",
        _ => "",
    };
    let vs_bound = if unfinished {
        format!("not comparable ({} of {} done)", count(run.jobs_completed), count(run.jobs_submitted))
    } else if run.cost_vs_bound > 0.0 && run.cost_vs_bound < 1.0 {
        format!("{} †", ratio(run.cost_vs_bound))
    } else {
        ratio(run.cost_vs_bound)
    };
    let mut r = format!(
        "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} / {}</td>",
        esc(&run.policy),
        usd(run.cost_usd),
        vs_bound,
        usd(run.cost_by_market.fixed),
        usd(run.cost_by_market.on_demand),
        usd(run.cost_by_market.spot),
        hours(run.idle_gpu_hours),
        count(run.jobs_completed),
        count(run.jobs_submitted)
    );
    for tier in tiers {
        match run.tiers.get(tier) {
            Some(tr) if tr.started > 0 => r.push_str(&format!("<td>{}</td>", duration(tr.queue_wait_s.p95))),
            _ => r.push_str("<td>—</td>"),
        }
    }
    let misses: usize = run.tiers.values().map(|t| t.slo_misses).sum();
    r.push_str(&format!(
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        count(misses),
        count(run.scale_actions),
        count(run.interruptions),
        hours(run.lost_gpu_hours)
    ));
    r
}

/// A titled chart with its explanation.
fn section(out: &mut String, title: &str, chart: &str, note: &str) {
    out.push_str(&format!(
        "<section>\n<h2>{}</h2>\n{chart}<p class=\"note\">{}</p>\n</section>\n",
        esc(title),
        esc(note)
    ));
}

/// Dollars: cents below $1,000, whole dollars with separators above.
fn usd(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    let sign = if v < -0.005 { "-" } else { "" };
    let a = v.abs();
    if a < 1000.0 { format!("{sign}${a:.2}") } else { format!("{sign}${}", group(&format!("{a:.0}"))) }
}

/// GPU-hours with one decimal and separators.
fn hours(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    let s = format!("{:.1}", v.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, "0"));
    format!("{}{}.{frac}", if v < -0.05 { "-" } else { "" }, group(int))
}

/// A multiple such as `1.23×`.
fn ratio(v: f64) -> String {
    if v.is_finite() { format!("{v:.2}×") } else { "—".into() }
}

#[cfg(test)]
#[path = "html_tests.rs"]
mod tests;
