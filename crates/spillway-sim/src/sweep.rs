//! Waiting-budget sweeps (`spillway simulate --sweep-wait`): the same input run at several waiting budgets, for a
//! cost-JCT curve. Each point rewrites the waiting budget of the swept tiers (see `spillway_core::wait_budget`) and
//! nothing else: bursting at once (no wait), constant waits (`burst_after_s` alone, today's knob), and waits that
//! grow with job size (`burst_wait_per_gpu_hour_s`, Starburst's compute-weighted wait), beside the config as given.
//! Every point is compared with bursting at once, the strongest simple baseline for job completion time.

use crate::input::SimJob;
use crate::sim::{SimError, SimOptions, simulate};
use serde::Serialize;
use spillway_core::Config;
use spillway_core::model::JobState;

/// Constant waits a sweep tries (seconds).
pub const CONSTANT_WAITS_S: [f64; 5] = [300.0, 900.0, 3600.0, 4.0 * 3600.0, 12.0 * 3600.0];
/// Waits per GPU-hour of expected work a sweep tries (seconds).
pub const PER_GPU_HOUR_S: [f64; 9] = [10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0];
/// Starburst's reported bar: at most this much more mean JCT than bursting at once.
pub const JCT_BAR: f64 = 0.058;

/// What a sweep point sets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PointKind {
    /// No wait at all: the baseline.
    AtOnce,
    /// The config as given.
    Config,
    /// A constant wait for every job.
    Constant,
    /// A wait that grows with the job's GPU-hours.
    BySize,
}

/// One run of a sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    pub kind: PointKind,
    /// `at once`, `config`, `wait 15m`, `5m per GPU-hour`.
    pub label: String,
    /// The swept tiers' `burst_after_s` and `burst_wait_per_gpu_hour_s` in this run (for `config`, the config's
    /// own values of the first swept tier in the config's tier order; the others may differ).
    pub burst_after_s: f64,
    pub per_gpu_hour_s: f64,
    /// On-demand and spot spending.
    pub cloud_usd: f64,
    pub total_usd: f64,
    /// Mean time from submission to completion over completed jobs.
    pub mean_jct_s: f64,
    /// Mean time from submission to first start over started jobs.
    pub mean_wait_s: f64,
    pub jobs_completed: usize,
    /// Against bursting at once: the share of its cloud spending saved, and the rise in mean JCT (fractions).
    pub cloud_saved: f64,
    pub jct_increase: f64,
}

/// A whole sweep: the tiers it varied and its points (bursting at once first, then the config, then by kind).
#[derive(Debug, Clone, Serialize)]
pub struct Sweep {
    pub tiers: Vec<String>,
    pub points: Vec<SweepPoint>,
}

impl Sweep {
    /// Returns the point that saves the most cloud spending with a mean JCT at most `bar` above bursting at once,
    /// or `None` when none saves any (the earliest of equal points: the shorter budget).
    pub fn best_within(&self, bar: f64) -> Option<&SweepPoint> {
        let ok = self.points.iter().filter(|p| p.jct_increase <= bar + 1e-12 && p.kind != PointKind::AtOnce);
        let best = ok.fold(None::<&SweepPoint>, |b, p| match b {
            Some(b) if b.cloud_saved >= p.cloud_saved => Some(b),
            _ => Some(p),
        });
        best.filter(|p| p.cloud_saved > 1e-9)
    }
}

/// Returns the tiers a sweep varies by default: every tier but the first (`p0` never waits for owned capacity).
pub fn default_tiers(cfg: &Config) -> Vec<String> {
    cfg.tiers.iter().skip(1).map(|t| t.name.clone()).collect()
}

/// Runs the sweep on `jobs`: each point is one simulation of `cfg` with the budgets of `tiers` rewritten.
/// `progress(label)` is called before each run.
pub fn sweep(
    cfg: &Config,
    jobs: &[SimJob],
    tiers: &[String],
    opts: &SimOptions,
    mut progress: impl FnMut(&str),
) -> Result<Sweep, SimError> {
    let swept: Vec<usize> = tiers.iter().filter_map(|t| cfg.tier_index(t)).collect();
    let own = swept.first().map(|&i| &cfg.tiers[i]);
    let mut plan = vec![(PointKind::AtOnce, "at once".to_string(), 0.0, 0.0)];
    let (own_after, own_rate) = own.map_or((0.0, 0.0), |t| (t.burst_after_s, t.burst_wait_per_gpu_hour_s));
    plan.push((PointKind::Config, "config".to_string(), own_after, own_rate));
    for w in CONSTANT_WAITS_S {
        plan.push((PointKind::Constant, format!("wait {}", spillway_core::time::fmt_duration(w)), w, 0.0));
    }
    for r in PER_GPU_HOUR_S {
        plan.push((PointKind::BySize, format!("{} per GPU-hour", spillway_core::time::fmt_duration(r)), 0.0, r));
    }
    let opts = SimOptions { record: false, ..opts.clone() };
    let mut points = Vec::with_capacity(plan.len());
    for (kind, label, after, rate) in plan {
        progress(&label);
        let mut c = cfg.clone();
        if kind != PointKind::Config {
            for &i in &swept {
                c.tiers[i].burst_after_s = after;
                c.tiers[i].burst_wait_per_gpu_hour_s = rate;
                // The point's budget, not the config's cap on it.
                c.tiers[i].burst_wait_max_s = f64::INFINITY;
            }
        }
        let out = simulate(&c, jobs, &opts)?;
        points.push(measure(kind, label, after, rate, &out));
    }
    let (base_cloud, base_jct) = (points[0].cloud_usd, points[0].mean_jct_s);
    for p in &mut points {
        p.cloud_saved = if base_cloud > 0.0 { 1.0 - p.cloud_usd / base_cloud } else { 0.0 };
        p.jct_increase = if base_jct > 0.0 { p.mean_jct_s / base_jct - 1.0 } else { 0.0 };
    }
    Ok(Sweep { tiers: tiers.to_vec(), points })
}

/// Returns one point's figures from its run.
fn measure(
    kind: PointKind,
    label: String,
    burst_after_s: f64,
    per_gpu_hour_s: f64,
    out: &crate::sim::SimOutcome,
) -> SweepPoint {
    let c = out.engine.cluster();
    let l = &c.ledger;
    let done: Vec<_> = c.jobs.iter().filter(|j| j.state == JobState::Succeeded).collect();
    let jct: f64 = done.iter().filter_map(|j| j.ended.map(|e| (e - j.submitted) as f64 / 1000.0)).sum();
    let started: Vec<f64> =
        c.jobs.iter().filter_map(|j| j.first_start.map(|s| (s - j.submitted) as f64 / 1000.0)).collect();
    SweepPoint {
        kind,
        label,
        burst_after_s,
        per_gpu_hour_s,
        // The ledger's markets: fixed, on-demand, spot.
        cloud_usd: l.by_market[1] + l.by_market[2],
        total_usd: l.total_usd(),
        mean_jct_s: jct / done.len().max(1) as f64,
        mean_wait_s: started.iter().sum::<f64>() / started.len().max(1) as f64,
        jobs_completed: done.len(),
        cloud_saved: 0.0,
        jct_increase: 0.0,
    }
}

/// Returns the sweep as a text table, with the best point within Starburst's JCT bar named under it.
pub fn table(s: &Sweep) -> String {
    let mut out = format!(
        "waiting-budget sweep over tiers {} (against bursting at once)\n{:<22} {:>12} {:>8} {:>10} {:>8} {:>10} {:>8}\n",
        s.tiers.join(", "),
        "budget",
        "cloud USD",
        "saved",
        "mean JCT",
        "+JCT",
        "mean wait",
        "done"
    );
    for p in &s.points {
        out.push_str(&format!(
            "{:<22} {:>12.0} {:>7.1}% {:>10} {:>7.1}% {:>10} {:>8}\n",
            p.label,
            p.cloud_usd,
            pct(p.cloud_saved),
            spillway_core::time::fmt_duration(p.mean_jct_s),
            pct(p.jct_increase),
            spillway_core::time::fmt_duration(p.mean_wait_s),
            p.jobs_completed
        ));
    }
    match s.best_within(JCT_BAR) {
        Some(b) => out.push_str(&format!(
            "best within +{:.1}% mean JCT: {} saves {:.1}% of the cloud spending of bursting at once (+{:.1}% JCT)\n",
            100.0 * JCT_BAR,
            b.label,
            100.0 * b.cloud_saved,
            100.0 * b.jct_increase
        )),
        None => out.push_str(&format!(
            "no budget saves cloud spending within +{:.1}% mean JCT of bursting at once\n",
            100.0 * JCT_BAR
        )),
    }
    out
}

/// Returns a fraction in percent, with what would print as `-0.0` printed as `0.0`.
pub fn pct(v: f64) -> f64 {
    let x = 100.0 * v;
    if x.abs() < 0.05 { 0.0 } else { x }
}
