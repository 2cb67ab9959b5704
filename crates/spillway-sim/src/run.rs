//! Runs every policy on one input, builds the [`Report`], and writes `report.json`, `timeseries.csv`,
//! `events.jsonl` and `report.html`.

use crate::input::SimJob;
use crate::policies::{bound, config_for, policies_for};
use crate::report::{
    InputReport, MarketCost, PredictiveReport, Report, RunReport, Stats, TierReport, TimeSeries, stats,
};
use crate::sim::{DecisionSink, SimError, SimOptions, SimOutcome, simulate};
use spillway_core::time::{secs, to_secs};
use spillway_core::{Config, Decision, JobState};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Everything one `simulate` produced: the report, for the `spillway` run its samples, queue waits per tier and
/// decisions, and the other runs' samples.
pub struct Comparison {
    pub report: Report,
    pub series: TimeSeries,
    /// The samples of every run but `spillway`, by policy (for the report's small multiples).
    pub others: BTreeMap<String, TimeSeries>,
    pub waits_by_tier: BTreeMap<String, Vec<f64>>,
    /// The `spillway` run's decisions, unless they went to `SimOptions::decisions_to` as they were made.
    pub decisions: Vec<Decision>,
    /// Whether the decisions went to `SimOptions::decisions_to` (then `events.jsonl` is the caller's).
    pub streamed: bool,
    /// A waiting-budget sweep run on the same input, when one was asked for (`sweep.json`, a report section).
    pub sweep: Option<crate::sweep::Sweep>,
}

/// Runs `spillway` and every reference on `jobs`; `progress(policy)` is called before each run.
pub fn compare(
    cfg: &Config,
    jobs: &[SimJob],
    input: InputReport,
    opts: &SimOptions,
    mut progress: impl FnMut(&str),
) -> Result<Comparison, SimError> {
    let bound = bound(cfg, jobs);
    let mut report = Report {
        seed: opts.seed,
        input,
        runs: Vec::new(),
        bound,
        capped_bound: None,
        capped_bound_skipped: None,
        spot: Default::default(),
        predictive: None,
        skipped_policies: Vec::new(),
        elastic: None,
    };
    report.skipped_policies = crate::policies::skipped_for(cfg)
        .into_iter()
        .map(|(p, why)| crate::report::SkippedPolicy { policy: p.to_string(), why: why.to_string() })
        .collect();
    let too_large = crate::policies::static_peak_too_large(cfg, jobs);
    if let Some(why) = &too_large {
        report.skipped_policies.push(crate::report::SkippedPolicy { policy: "static-peak".into(), why: why.clone() });
    }
    let mut main: Option<(SimOutcome, Config)> = None;
    let mut others = BTreeMap::new();
    for policy in policies_for(cfg) {
        if policy == "static-peak" && too_large.is_some() {
            continue;
        }
        progress(policy);
        let Some(pcfg) = config_for(policy, cfg, jobs) else { continue };
        let popts = SimOptions { record: opts.record && policy == "spillway", ..opts.clone() };
        let out = simulate(&pcfg, jobs, &popts)?;
        let mut run = run_report(policy, &pcfg, &out);
        run.cost_vs_bound = if report.bound.cost_usd > 0.0 { run.cost_usd / report.bound.cost_usd } else { 0.0 };
        report.runs.push(run);
        if policy == "spillway" {
            match crate::capped_bound::capped_bound(&pcfg, jobs, out.makespan_ms) {
                Ok(b) => report.capped_bound = Some(b),
                Err(why) => report.capped_bound_skipped = Some(why),
            }
            report.elastic = crate::elastic_cmp::compare(&pcfg, jobs, &out, opts)?;
            main = Some((out, pcfg));
        } else {
            others.insert(policy.to_string(), out.series);
        }
    }
    let cost = |name: &str| report.runs.iter().find(|r| r.policy == name).map(|r| r.cost_usd);
    if let (Some(with), Some(without)) = (cost("spillway"), cost("spillway-no-spot")) {
        let saved = without - with;
        let bound_without =
            config_for("spillway-no-spot", cfg, jobs).map_or(0.0, |c| crate::policies::bound(&c, jobs).cost_usd);
        report.spot = crate::report::SpotReport {
            no_spot_cost_usd: without,
            saved_usd: saved,
            saved_fraction: if without > 0.0 { saved / without } else { 0.0 },
            bound_no_spot_cost_usd: bound_without,
            bound_saved_fraction: if bound_without > 0.0 { 1.0 - report.bound.cost_usd / bound_without } else { 0.0 },
        };
    }
    let run = |name: &str| report.runs.iter().find(|r| r.policy == name);
    if let (Some(with), Some(without)) = (run("spillway"), run("spillway-reactive")) {
        let p1 = |r: &RunReport| r.peak_hour_wait_s.get("p1").cloned().unwrap_or_default();
        report.predictive = Some(PredictiveReport {
            reactive_cost_usd: without.cost_usd,
            added_usd: with.cost_usd - without.cost_usd,
            p1_peak_wait_mean_s: p1(with).mean,
            reactive_p1_peak_wait_mean_s: p1(without).mean,
            p1_peak_wait_p95_s: p1(with).p95,
            reactive_p1_peak_wait_p95_s: p1(without).p95,
        });
    }
    let Some((out, pcfg)) = main else {
        return Ok(Comparison {
            report,
            series: TimeSeries::default(),
            others,
            waits_by_tier: BTreeMap::new(),
            decisions: Vec::new(),
            streamed: opts.decisions_to.0.is_some(),
            sweep: None,
        });
    };
    let waits_by_tier = waits(&pcfg, &out);
    let streamed = opts.decisions_to.0.is_some();
    Ok(Comparison {
        report,
        series: out.series,
        others,
        waits_by_tier,
        decisions: out.decisions,
        streamed,
        sweep: None,
    })
}

/// Returns each tier's queue waits (seconds) of the jobs that started.
fn waits(cfg: &Config, out: &SimOutcome) -> BTreeMap<String, Vec<f64>> {
    let mut w: BTreeMap<String, Vec<f64>> = cfg.tiers.iter().map(|t| (t.name.clone(), Vec::new())).collect();
    for j in &out.engine.cluster().jobs {
        if let (Some(s), Some(v)) = (j.first_start, w.get_mut(&cfg.tiers[j.tier].name)) {
            v.push(to_secs(s - j.submitted));
        }
    }
    w
}

/// Returns the figures of one run.
pub fn run_report(policy: &str, cfg: &Config, out: &SimOutcome) -> RunReport {
    let c = out.engine.cluster();
    let l = &c.ledger;
    let mut r = RunReport {
        policy: policy.into(),
        cost_usd: l.total_usd(),
        egress_usd: l.egress_usd,
        data_moves: c.counters.data_moves as usize,
        cost_by_market: MarketCost { fixed: l.by_market[0], on_demand: l.by_market[1], spot: l.by_market[2] },
        idle_cost_usd: l.idle_usd(),
        jobs_submitted: out.submitted,
        busy_gpu_hours: l.busy_gpu_hours(),
        idle_gpu_hours: l.idle_gpu_hours(),
        scale_actions: c.counters.scale_actions as usize,
        nodes_launched: c.counters.nodes_launched as usize,
        launch_failures: c.counters.launch_failures as usize,
        preemptions: c.counters.preemptions as usize,
        lost_gpu_hours: out.lost_gpu_ms as f64 / 3_600_000.0,
        makespan_s: to_secs(out.makespan_ms),
        events: out.events,
        interruptions: c.counters.interruptions as usize,
        notices_acted_on: c.counters.notices_acted_on as usize,
        fallback_events: c.counters.fallbacks as usize,
        ..RunReport::default()
    };
    for (i, p) in cfg.pools.iter().enumerate() {
        r.cost_by_pool.insert(p.name.clone(), l.by_pool[i]);
    }
    for (i, t) in c.teams.iter().enumerate() {
        r.cost_by_team.insert(t.name.clone(), l.by_team.get(i).copied().unwrap_or(0.0));
    }
    for (i, t) in cfg.tiers.iter().enumerate() {
        r.cost_by_tier.insert(t.name.clone(), l.by_tier[i]);
    }
    let mut per_tier: Vec<(usize, Vec<f64>, Vec<f64>, usize)> = vec![(0, Vec::new(), Vec::new(), 0); cfg.tiers.len()];
    for j in &c.jobs {
        let slo = secs(cfg.tiers[j.tier].queue_wait_slo_s);
        if j.spec.deadline.is_some_and(|d| j.ended.is_none_or(|e| e > d)) {
            r.deadline_misses += 1;
        }
        let t = &mut per_tier[j.tier];
        t.0 += 1;
        match j.first_start {
            Some(s) => {
                t.1.push(to_secs(s - j.submitted));
                if s - j.submitted > slo {
                    t.3 += 1;
                }
            }
            None => t.3 += 1,
        }
        match j.state {
            JobState::Succeeded => {
                r.jobs_completed += 1;
                if let Some(e) = j.ended {
                    t.2.push(to_secs(e - j.submitted));
                }
            }
            JobState::Failed => r.jobs_failed += 1,
            JobState::Queued | JobState::Running => r.jobs_unfinished += 1,
            JobState::Cancelled => {}
        }
    }
    let accounted = r.jobs_completed
        + r.jobs_failed
        + r.jobs_unfinished
        + c.jobs.iter().filter(|j| j.state == JobState::Cancelled).count();
    r.jobs_lost = out.submitted.saturating_sub(accounted);
    for (i, (jobs, w, jct, misses)) in per_tier.into_iter().enumerate() {
        r.tiers.insert(
            cfg.tiers[i].name.clone(),
            TierReport { jobs, started: w.len(), queue_wait_s: stats(&w), jct_s: stats(&jct), slo_misses: misses },
        );
    }
    r.peak_hour_wait_s = peak_hour_waits(cfg, out);
    r
}

/// Returns each tier's queue-wait stats over the jobs submitted in each UTC day's peak hour: the hour in which the
/// most GPUs were submitted (ties: the earliest). Jobs that never started are left out.
fn peak_hour_waits(cfg: &Config, out: &SimOutcome) -> BTreeMap<String, Stats> {
    const HOUR_MS: i64 = 3_600_000;
    let jobs = &out.engine.cluster().jobs;
    let mut gpus_by_hour: BTreeMap<i64, u64> = BTreeMap::new();
    for j in jobs {
        *gpus_by_hour.entry(j.submitted.div_euclid(HOUR_MS)).or_default() +=
            (j.spec.gpus_per_worker * j.spec.workers) as u64;
    }
    // Day -> (GPUs, hour) of its peak hour; iteration is in hour order, so a tie keeps the earliest.
    let mut peak: BTreeMap<i64, (u64, i64)> = BTreeMap::new();
    for (&hour, &g) in &gpus_by_hour {
        let e = peak.entry(hour.div_euclid(24)).or_insert((g, hour));
        if g > e.0 {
            *e = (g, hour);
        }
    }
    let peak_hours: std::collections::BTreeSet<i64> = peak.values().map(|&(_, h)| h).collect();
    let mut w: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for j in jobs.iter().filter(|j| peak_hours.contains(&j.submitted.div_euclid(HOUR_MS))) {
        if let Some(s) = j.first_start {
            w.entry(cfg.tiers[j.tier].name.clone()).or_default().push(to_secs(s - j.submitted));
        }
    }
    w.into_iter().map(|(t, v)| (t, stats(&v))).collect()
}

/// Returns a decision as its `events.jsonl` line (without the newline); `t0_ms` is the trace's start.
fn event_line(d: &Decision, t0_ms: i64) -> String {
    serde_json::json!({
        "time_s": to_secs(d.at - t0_ms),
        "kind": d.kind,
        "subject": d.subject,
        "reason": d.reason,
        "detail": d.detail,
    })
    .to_string()
}

/// Writes decisions as `events.jsonl` lines, during a run (as a [`DecisionSink`], which cannot fail) or after it.
/// The first write error is kept for [`EventWriter::finish`], and nothing more is written after it.
pub struct EventWriter<W: Write> {
    out: W,
    t0_ms: i64,
    bytes: u64,
    error: Option<std::io::Error>,
}

impl<W: Write> EventWriter<W> {
    /// Returns a writer to `out`; `t0_ms` is the trace's start (lines carry seconds from it).
    pub fn new(out: W, t0_ms: i64) -> Self {
        EventWriter { out, t0_ms, bytes: 0, error: None }
    }

    /// Writes one decision's line.
    pub fn write(&mut self, d: &Decision) {
        if self.error.is_some() {
            return;
        }
        let line = event_line(d, self.t0_ms);
        match writeln!(self.out, "{line}") {
            Ok(()) => self.bytes += line.len() as u64 + 1,
            Err(e) => self.error = Some(e),
        }
    }

    /// Returns the bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Flushes the output; returns the first error of the writes, if one failed.
    pub fn finish(&mut self) -> std::io::Result<()> {
        match self.error.take() {
            Some(e) => Err(e),
            None => self.out.flush(),
        }
    }
}

impl<W: Write + Send + 'static> EventWriter<W> {
    /// Returns the writer, shared (to read and finish it after the run), and a sink that writes each decision.
    pub fn into_sink(self) -> (Arc<Mutex<Self>>, DecisionSink) {
        let shared = Arc::new(Mutex::new(self));
        let writer = shared.clone();
        // A writer whose lock was poisoned by a panicking write still takes the rest (it keeps its own error).
        let sink = move |d: Decision| writer.lock().unwrap_or_else(|e| e.into_inner()).write(&d);
        (shared, DecisionSink(Some(Arc::new(Mutex::new(sink)))))
    }
}

/// Writes `report.json`, `timeseries.csv`, `events.jsonl` (unless the decisions were streamed there) and
/// `report.html` into `dir` (created if needed).
pub fn write_outputs(dir: &Path, cmp: &Comparison, t0_ms: i64) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(&cmp.report).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("report.json"), json + "\n")?;
    let mut ts = std::io::BufWriter::new(std::fs::File::create(dir.join("timeseries.csv"))?);
    writeln!(ts, "{}", cmp.series.columns.join(","))?;
    for row in &cmp.series.rows {
        let cells: Vec<String> = row.iter().map(|v| format!("{v:.3}")).collect();
        writeln!(ts, "{}", cells.join(","))?;
    }
    ts.flush()?;
    if !cmp.streamed {
        let mut ev = EventWriter::new(std::io::BufWriter::new(std::fs::File::create(dir.join("events.jsonl"))?), t0_ms);
        cmp.decisions.iter().for_each(|d| ev.write(d));
        ev.finish()?;
    }
    if let Some(sweep) = &cmp.sweep {
        let json = serde_json::to_string_pretty(sweep).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("sweep.json"), json + "\n")?;
    }
    let html = crate::html::render(&cmp.report, &cmp.series, &cmp.others, &cmp.waits_by_tier, cmp.sweep.as_ref());
    std::fs::write(dir.join("report.html"), html)
}

/// Returns the summary's line for the capped bound: its cost and split, and spillway's cost over it (or why it is
/// missing).
fn capped_line(report: &Report) -> String {
    let spillway = report.runs.iter().find(|r| r.policy == "spillway" && report.comparable(r));
    match (&report.capped_bound, &report.capped_bound_skipped) {
        (Some(b), _) => {
            // A bound under a cent (an empty input) gives no ratio worth printing.
            let ratio = spillway
                .filter(|r| b.cost_usd >= 0.01 && r.cost_usd > 0.0)
                .map_or("-".into(), |r| format!("{:.2}", r.cost_usd / b.cost_usd));
            format!(
                "{:<22} {:>12.0} {:>8} {:>11.0} {:>11.0} {:>11.0}  (pool caps and tier markets, work free to wait \
                 until spillway's end, {}, gangs divisible; /bound here is spillway's cost over it)\n",
                "capped bound",
                b.cost_usd.max(0.0),
                ratio,
                b.cost_by_market.fixed.max(0.0),
                b.cost_by_market.on_demand.max(0.0),
                b.cost_by_market.spot.max(0.0),
                spillway_core::time::fmt_ms(b.horizon_ms)
            )
        }
        (None, Some(why)) => format!("{:<22} not computed: {why}\n", "capped bound"),
        (None, None) => String::new(),
    }
}

/// Returns the terminal summary: one line per run and the bound.
pub fn summary_table(report: &Report) -> String {
    let mut s = format!(
        "{:<22} {:>12} {:>8} {:>11} {:>11} {:>11} {:>10} {:>10} {:>10} {:>9}\n",
        "policy", "cost USD", "/bound", "fixed", "on-demand", "spot", "p0 p95", "p1 p95", "p2 p95", "done/sub"
    );
    // A tier none of whose jobs started has no wait to show (not `0s`).
    let wait = |r: &RunReport, t: &str| {
        r.tiers.get(t).filter(|x| x.started > 0).map_or("-".to_string(), |x| human(x.queue_wait_s.p95))
    };
    // A run that left jobs unfinished did less work: its cost is not comparable, so it gets no ratio.
    let ratio = |r: &RunReport| match r.cost_vs_bound {
        _ if !report.comparable(r) => "n/a*".to_string(),
        v if v > 0.0 && v < 1.0 => format!("{v:.2}+"),
        v => format!("{v:.2}"),
    };
    for r in &report.runs {
        s += &format!(
            "{:<22} {:>12.0} {:>8} {:>11.0} {:>11.0} {:>11.0} {:>10} {:>10} {:>10} {:>9}\n",
            r.policy,
            r.cost_usd,
            ratio(r),
            r.cost_by_market.fixed,
            r.cost_by_market.on_demand,
            r.cost_by_market.spot,
            wait(r, "p0"),
            wait(r, "p1"),
            wait(r, "p2"),
            format!("{}/{}", r.jobs_completed, r.jobs_submitted)
        );
    }
    let b = &report.bound;
    s += &format!(
        "{:<22} {:>12.0} {:>8.2} {:>11.0} {:>11.0} {:>11.0}\n",
        "instant-overflow bound",
        b.cost_usd.max(0.0),
        1.0,
        // A cost is never below 0: a rounding residue just under it would print as `-0`.
        b.cost_by_market.fixed.max(0.0),
        b.cost_by_market.on_demand.max(0.0),
        b.cost_by_market.spot.max(0.0)
    );
    s += &capped_line(report);
    if report.runs.iter().any(|r| report.comparable(r) && r.cost_vs_bound > 0.0 && r.cost_vs_bound < 1.0) {
        s += "+ below the bound, which starts every job at submission: it paid less by making jobs wait\n";
    }
    for r in report.runs.iter().filter(|r| !report.comparable(r)) {
        // Submitted jobs it did not complete were either still queued or running at the end, or never ran (refused,
        // or failed for good).
        let never = r.jobs_submitted.saturating_sub(r.jobs_completed + r.jobs_unfinished);
        s += &format!(
            "* {} completed {} of {} jobs ({} unfinished when the run ended, {never} refused or failed): it did less \
             work, so its cost is not comparable\n",
            r.policy, r.jobs_completed, r.jobs_submitted, r.jobs_unfinished
        );
    }
    for k in &report.skipped_policies {
        s += &format!("- {} not run: {}\n", k.policy, k.why);
    }
    if let Some(r) = report.runs.iter().find(|r| r.policy == "spillway") {
        s += &format!(
            "\nspot: saved {:.0} USD ({:.1}%) against spillway-no-spot (the instant-overflow bound saves {:.1}% with spot)\n\
             spillway run: {} spot interruption notices (nodes; {} job stops on them, requeued), {} fallbacks, \
             {} deadline misses, {} preemptions; \
             {:.1} GPU-hours of work redone after stops (interruptions, preemptions, lost nodes)\n",
            report.spot.saved_usd,
            report.spot.saved_fraction * 100.0,
            report.spot.bound_saved_fraction * 100.0,
            r.interruptions,
            r.notices_acted_on,
            r.fallback_events,
            r.deadline_misses,
            r.preemptions,
            r.lost_gpu_hours
        );
    }
    // Egress is in each run's cost but in no market's column.
    for r in report.runs.iter().filter(|r| r.data_moves > 0) {
        s += &format!(
            "{}: {} data moves between regions, {:.0} USD of egress (in cost USD, not in the market columns)\n",
            r.policy, r.data_moves, r.egress_usd
        );
    }
    if let Some(p) = &report.predictive {
        s += &format!(
            "predictive: p1 wait in the daily peak hours mean {} / p95 {} against {} / {} with queue-driven scaling alone (spillway-reactive); adds {:.0} USD ({:+.1}%)\n",
            human(p.p1_peak_wait_mean_s),
            human(p.p1_peak_wait_p95_s),
            human(p.reactive_p1_peak_wait_mean_s),
            human(p.reactive_p1_peak_wait_p95_s),
            p.added_usd,
            if p.reactive_cost_usd > 0.0 { p.added_usd / p.reactive_cost_usd * 100.0 } else { 0.0 }
        );
    }
    s
}

/// Returns seconds in the one duration style of every output (`42s`, `7m05s`, `3h06m`).
fn human(s: f64) -> String {
    spillway_core::time::fmt_duration(s)
}
