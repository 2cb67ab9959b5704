//! What the benches share: the in-run reference, loading configs by repository path, running every
//! policy the way `spillway simulate` does, the queue a run had, and the process's peak memory.

// Each bench uses a part of this module.
#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use spillway_core::Config;
use spillway_core::time::Time;
use spillway_sim::input::SimJob;
use spillway_sim::policies::{bound, config_for, policies_for};
use spillway_sim::run::run_report;
use spillway_sim::sim::{SimOptions, SimOutcome, simulate};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Returns the seconds it takes to sort 1,000,000 seeded u64s, the median of 5 sorts: the reference every figure
/// is divided by, since absolute times are noisy on shared machines.
pub fn reference_s() -> f64 {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let input: Vec<u64> = (0..1_000_000).map(|_| rng.random()).collect();
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let mut v = input.clone();
            let t = Instant::now();
            v.sort_unstable();
            std::hint::black_box(&v);
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Returns the path of `rel`, relative to the repository root.
pub fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// Returns the config at `rel` (relative to the repository root), or an error naming the file.
pub fn load_config(rel: &str) -> Result<Config, String> {
    let path = repo(rel);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Config::parse(rel, &text).map_err(|e| e.to_string())
}

/// Returns the job count a bench should run: `SPILLWAY_BENCH_JOBS` when it is set to a whole number >= 1 (capped
/// at `full`), else `full`.
pub fn job_count(full: usize) -> Result<usize, String> {
    match std::env::var("SPILLWAY_BENCH_JOBS") {
        Err(_) => Ok(full),
        Ok(s) => match s.trim().replace('_', "").parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n.min(full)),
            _ => Err(format!("SPILLWAY_BENCH_JOBS=`{s}` is not a whole number >= 1")),
        },
    }
}

/// The options `spillway simulate` runs with (seed 1, decisions recorded for the `spillway` run, cheap checks
/// every step), without its progress bar.
pub fn cli_options() -> SimOptions {
    SimOptions { record: true, ..SimOptions::default() }
}

/// The queue one run had: jobs waiting to start (from the engine's job records: from submission to first start,
/// so waits after a preemption are not counted), time-weighted over the run, and queued GPUs (from the
/// simulator's own counter, sampled into its time series; these include requeued jobs).
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueStats {
    pub mean_jobs: f64,
    pub max_jobs: u64,
    pub mean_gpus: f64,
    pub max_gpus: f64,
}

impl std::fmt::Display for QueueStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "queue mean {:.1} max {} jobs, queued GPUs mean {:.1} max {:.0}",
            self.mean_jobs, self.max_jobs, self.mean_gpus, self.max_gpus
        )
    }
}

/// Returns the queue `out` had over its run (see [`QueueStats`]).
pub fn queue_stats(out: &SimOutcome) -> QueueStats {
    let (mean_jobs, max_jobs) = queued_jobs(out);
    let (mean_gpus, max_gpus) = queued_gpus(out);
    QueueStats { mean_jobs, max_jobs, mean_gpus, max_gpus }
}

/// Returns the time-weighted mean and the max of the jobs waiting for their first start, over the run: a job waits
/// from its submission to its first start, or to its end if it never started (refused), or to the run's end.
fn queued_jobs(out: &SimOutcome) -> (f64, u64) {
    let c = out.engine.cluster();
    let Some(t0) = c.jobs.iter().map(|j| j.submitted).min() else { return (0.0, 0) };
    let end: Time = out.engine.cluster().jobs.iter().filter_map(|j| j.ended).max().unwrap_or(t0).max(t0);
    let mut edges: Vec<(Time, i64)> = Vec::with_capacity(c.jobs.len() * 2);
    for j in &c.jobs {
        let left = j.first_start.or(j.ended).unwrap_or(end);
        edges.push((j.submitted, 1));
        edges.push((left, -1));
    }
    // Leaving sorts before arriving at the same instant, so a job started at once never counts.
    edges.sort_unstable();
    let (mut cur, mut max, mut area, mut last) = (0i64, 0i64, 0f64, t0);
    for (t, d) in edges {
        area += cur as f64 * (t - last) as f64;
        last = t;
        cur += d;
        max = max.max(cur);
    }
    let span = (end - t0) as f64;
    (if span > 0.0 { area / span } else { 0.0 }, max.max(0) as u64)
}

/// Returns the mean and the max of the `demand:queued_gpus` column of the run's time series (0 without one).
fn queued_gpus(out: &SimOutcome) -> (f64, f64) {
    let Some(col) = out.series.columns.iter().position(|c| c == "demand:queued_gpus") else { return (0.0, 0.0) };
    let values: Vec<f64> = out.series.rows.iter().filter_map(|r| r.get(col).copied()).collect();
    if values.is_empty() {
        return (0.0, 0.0);
    }
    (values.iter().sum::<f64>() / values.len() as f64, values.iter().copied().fold(0.0, f64::max))
}

/// Returns the process's peak resident memory in MiB (`VmHWM` of `/proc/self/status`), or `None` where it
/// cannot be read.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// One policy's run within [`run_policies`].
pub struct PolicyRun {
    pub policy: &'static str,
    pub wall_s: f64,
    pub steps: u64,
    pub jobs_completed: usize,
    pub queue: QueueStats,
    /// Each tier's p95 queue wait, in hours, over the jobs that started.
    pub p95_wait_h: Vec<(String, f64)>,
    /// What the run cost, in USD (the same figure with and without a speed-up shows the results did not move).
    pub cost_usd: f64,
}

/// All the policies `spillway simulate` compares on one input, and the time it took.
pub struct PolicyRuns {
    pub runs: Vec<PolicyRun>,
    /// Seconds for the instant-overflow bound.
    pub bound_s: f64,
    /// Seconds for the bound and every run with its report: what `spillway_sim::run::compare` does, without
    /// writing files. The queue figures are computed outside it.
    pub total_s: f64,
}

/// Runs the instant-overflow bound and every policy of `policies_for(cfg)` on `jobs` as `compare` does (each
/// simulated, then summed up in its run report); returns each run's time, steps and queue, or the first error.
/// `SPILLWAY_BENCH_POLICY=NAME` runs that policy alone (for a profiler).
pub fn run_policies(cfg: &Config, jobs: &[SimJob], opts: &SimOptions) -> Result<PolicyRuns, String> {
    let t = Instant::now();
    std::hint::black_box(bound(cfg, jobs));
    let bound_s = t.elapsed().as_secs_f64();
    let mut runs = Vec::new();
    let mut total_s = bound_s;
    let only = std::env::var("SPILLWAY_BENCH_POLICY").ok();
    for policy in policies_for(cfg) {
        if only.as_deref().is_some_and(|o| o != policy) {
            continue;
        }
        let Some(pcfg) = config_for(policy, cfg, jobs) else { continue };
        let popts = SimOptions { record: opts.record && policy == "spillway", ..opts.clone() };
        let t = Instant::now();
        let out = simulate(&pcfg, jobs, &popts).map_err(|e| format!("{policy}: {e}"))?;
        let report = run_report(policy, &pcfg, &out);
        let wall_s = t.elapsed().as_secs_f64();
        total_s += wall_s;
        let queue = queue_stats(&out);
        let p95_wait_h = report.tiers.iter().map(|(t, r)| (t.clone(), r.queue_wait_s.p95 / 3600.0)).collect();
        let jobs_completed = report.jobs_completed;
        let cost_usd = report.cost_usd;
        runs.push(PolicyRun { policy, wall_s, steps: out.events, jobs_completed, queue, p95_wait_h, cost_usd });
    }
    Ok(PolicyRuns { runs, bound_s, total_s })
}

/// Prints one line per run of `runs`, then the bound and the total against the reference `r`.
pub fn print_runs(runs: &PolicyRuns, jobs: usize, r: f64) {
    for p in &runs.runs {
        let waits: Vec<String> = p.p95_wait_h.iter().map(|(t, h)| format!("{t} {h:.1}h")).collect();
        println!(
            "  {:<20} {:>8.3} s {:>9} steps {:>9.0} steps/s  {}/{} done  ${:.0}  {}; p95 wait {}",
            p.policy,
            p.wall_s,
            p.steps,
            p.steps as f64 / p.wall_s.max(1e-9),
            p.jobs_completed,
            jobs,
            p.cost_usd,
            p.queue,
            waits.join(" ")
        );
    }
    println!("  {:<20} {:>8.3} s", "instant-overflow bound", runs.bound_s);
    let steps: u64 = runs.runs.iter().map(|p| p.steps).sum();
    println!(
        "  all {} policies + bound: {:.3} s wall, {} steps, {:.1}x reference",
        runs.runs.len(),
        runs.total_s,
        steps,
        runs.total_s / r
    );
}
