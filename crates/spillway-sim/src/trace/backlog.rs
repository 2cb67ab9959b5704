//! Seeded workloads that build long queues: the hard cases for the engine, for benchmarks.
//!
//! - [`Overload`]: sustained overload. Jobs arrive as a Poisson stream sized against the GPUs a cluster can run
//!   (`gpus`, the fixed GPUs plus the cloud pools' max): 2.5x that for the first 36 hours, which builds a backlog of
//!   some 15,000 jobs, then every week 0.95x on the five weekdays (about what the cluster gets done once packing
//!   and the tiers' market rules are paid for) and 0.2x on the weekend, so the backlog stays for the whole trace
//!   instead of draining or growing without end. Tiers 20% `p0`, 40% `p1`, 40% `p2`; run times log-normal with a
//!   median of 10 minutes. Jobs are drawn one after another from one random stream, so the
//!   first `n` jobs of a longer trace are exactly the trace of `n` jobs: a benchmark may replay a prefix.
//! - [`CappedSpot`]: the pattern where low-tier work may only use a capped spot pool. Half the jobs are `p2`
//!   hyperparameter sweeps (100-300 one- or two-GPU trials of about 2 hours, launched within an hour, over the first
//!   three quarters of the span), more than a small spot pool can hold, so thousands of them wait for days; the rest
//!   are `p0` (15%) and `p1` (35%) jobs on a daily cycle that the fixed and on-demand pools serve at once.
//!
//! Both draw every value from a `ChaCha8Rng` seeded from `seed`: a seed always gives the same trace. The jobs come
//! sorted by submit time, in whole seconds, named `job-0000001`, ... in that order, with `line` their 1-based
//! position; tier, team, GPUs and workers are set, everything else is left to the configuration's defaults.

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::Trace;
use super::workload::{Draft, into_jobs, run_time, submit_time};

/// Job names carry 7 digits (`job-0000001`): these traces reach a million jobs.
const NAME_DIGITS: usize = 7;
const HOUR: f64 = 3_600.0;
const DAY: f64 = 86_400.0;
const WEEK: f64 = 7.0 * DAY;

/// [`Overload`]: how long the opening surge lasts, and its load as a multiple of the cluster's GPUs.
const SURGE_S: f64 = 36.0 * HOUR;
const SURGE_LOAD: f64 = 2.5;
/// [`Overload`]: after the surge, every week five days at `WEEKDAY_LOAD` then two at `WEEKEND_LOAD` (the trace starts
/// on a Monday at 00:00). Weekdays ask for about what the cluster can run, weekends let part of the backlog drain;
/// measured on `examples/overload.toml`, the two balance within a few thousand jobs over 1,000,000.
const WEEKDAY_LOAD: f64 = 0.95;
const WEEKEND_LOAD: f64 = 0.2;
/// [`Overload`]: tier shares (`p0`, then `p1`; the rest is `p2`) and GPUs per worker with their odds.
const OVERLOAD_P0: f64 = 0.2;
const OVERLOAD_P1: f64 = 0.4;
const OVERLOAD_GPUS: [(u32, f64); 4] = [(1, 0.55), (2, 0.25), (4, 0.12), (8, 0.08)];
/// [`Overload`]: run times, log-normal: median and log-space spread.
const OVERLOAD_MEDIAN_S: f64 = 10.0 * 60.0;
const OVERLOAD_SIGMA: f64 = 1.0;

/// [`CappedSpot`]: shares of the jobs in `p2` sweeps and in `p0`; the rest is `p1`.
const SWEEP_SHARE: f64 = 0.50;
const CAPPED_P0: f64 = 0.15 / (1.0 - SWEEP_SHARE);
/// [`CappedSpot`]: sweeps start within this fraction of the span.
const SWEEP_SPAN: f64 = 0.75;

/// A sustained-overload workload of `jobs` jobs, its arrival rate sized against `gpus` GPUs (see the module
/// doc). Its span follows from the rate: about 210 days for 1,000,000 jobs against 160 GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct Overload {
    /// How many jobs to generate.
    pub jobs: usize,
    /// GPUs the arrival rate is sized against: at load 1.0 the jobs ask for this many GPUs on average. Pass the
    /// cluster's fixed GPUs plus its cloud pools' max (the loads allow for what packing and market rules waste);
    /// 0 counts as 1.
    pub gpus: u32,
    /// Seed of the random generator.
    pub seed: u64,
}

impl Default for Overload {
    /// The benchmark's size: 1,000,000 jobs against 160 GPUs, seed 1.
    fn default() -> Self {
        Self { jobs: 1_000_000, gpus: 160, seed: 1 }
    }
}

impl Overload {
    /// Generates the workload: exactly `jobs` jobs in submit order (see the module doc for names and fields).
    pub fn generate(&self) -> Trace {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        // Jobs per second at load 1.0: the GPUs divided by one job's expected GPU-seconds.
        let base_rate = self.gpus.max(1) as f64 / (overload_mean_gpus() * overload_mean_run_s());
        let peak_rate = base_rate * SURGE_LOAD.max(WEEKDAY_LOAD).max(WEEKEND_LOAD);
        let mut t = 0.0f64;
        let mut jobs = Vec::with_capacity(self.jobs);
        while jobs.len() < self.jobs {
            t = next_arrival(&mut rng, t, peak_rate, |at| base_rate * overload_load(at));
            let tier = pick_tier(&mut rng, OVERLOAD_P0, OVERLOAD_P1);
            let (gpus, workers) = overload_shape(&mut rng, tier);
            let duration_s = run_time(&mut rng, OVERLOAD_MEDIAN_S, OVERLOAD_SIGMA);
            let team = team_of(&mut rng, tier);
            let draft = Draft { submit_s: t.floor(), duration_s, gpus, workers, tier, team };
            jobs.push(draft.into_job(jobs.len(), NAME_DIGITS));
        }
        let source =
            format!("overload workload: {} jobs sized against {} GPUs, seed {}", self.jobs, self.gpus, self.seed);
        Trace { source, jobs, skipped: Vec::new(), columns: &[] }
    }
}

/// Returns the load at `t` seconds from the start, as a multiple of the GPUs the arrival rate is sized against.
pub fn overload_load(t: f64) -> f64 {
    if t < SURGE_S {
        return SURGE_LOAD;
    }
    if t % WEEK < 5.0 * DAY { WEEKDAY_LOAD } else { WEEKEND_LOAD }
}

/// Returns the next arrival after `t` of a Poisson stream with rate `rate(at)` (jobs per second, at most
/// `peak_rate`), by thinning: candidates at `peak_rate`, each kept with probability `rate / peak_rate`.
fn next_arrival(rng: &mut ChaCha8Rng, mut t: f64, peak_rate: f64, rate: impl Fn(f64) -> f64) -> f64 {
    loop {
        // 1 - u lies in (0, 1], so the logarithm is finite.
        t += -(1.0 - rng.random::<f64>()).ln() / peak_rate;
        if rng.random::<f64>() * peak_rate < rate(t) {
            return t;
        }
    }
}

/// Returns the expected GPUs of an [`Overload`] job (all workers together), from the tier and shape tables.
fn overload_mean_gpus() -> f64 {
    let per_worker: f64 = OVERLOAD_GPUS.iter().map(|&(g, p)| g as f64 * p).sum();
    // `p0` jobs of 8 GPUs per worker have 1 or 2 workers, half and half.
    let eight = OVERLOAD_GPUS.iter().find(|(g, _)| *g == 8).map_or(0.0, |&(_, p)| p);
    per_worker + OVERLOAD_P0 * eight * 0.5 * 8.0
}

/// Returns the expected run time of an [`Overload`] job: the log-normal mean (the clamp changes it by under 1%).
fn overload_mean_run_s() -> f64 {
    OVERLOAD_MEDIAN_S * (OVERLOAD_SIGMA * OVERLOAD_SIGMA / 2.0).exp()
}

/// Returns an [`Overload`] job's GPUs per worker and workers: only `p0` runs gangs (two 8-GPU workers, half of
/// its 8-GPU jobs).
fn overload_shape(rng: &mut ChaCha8Rng, tier: &str) -> (u32, u32) {
    let gpus = pick_gpus(rng, &OVERLOAD_GPUS);
    let gang = gpus == 8 && tier == "p0" && rng.random::<f64>() < 0.5;
    (gpus, if gang { 2 } else { 1 })
}

/// A capped-spot workload of `jobs` jobs over `days` days (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct CappedSpot {
    /// How many jobs to generate.
    pub jobs: usize,
    /// The span of submissions in days; a value that is not a positive finite number counts as 1.
    pub days: f64,
    /// Seed of the random generator.
    pub seed: u64,
}

impl Default for CappedSpot {
    /// The benchmark's size: 15,000 jobs over 28 days, seed 1.
    fn default() -> Self {
        Self { jobs: 15_000, days: 28.0, seed: 1 }
    }
}

impl CappedSpot {
    /// Generates the workload: exactly `jobs` jobs sorted by submit time, ties in generation order (see the
    /// module doc for names and fields).
    pub fn generate(&self) -> Trace {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let span = if self.days.is_finite() && self.days > 0.0 { self.days * DAY } else { DAY };
        let n_sweep = (self.jobs as f64 * SWEEP_SHARE).round() as usize;
        let mut drafts = Vec::with_capacity(self.jobs);
        while drafts.len() < n_sweep {
            let size = rng.random_range(100..=300).min(n_sweep - drafts.len());
            sweep(&mut rng, span, size, &mut drafts);
        }
        while drafts.len() < self.jobs {
            let submit_s = submit_time(&mut rng, span);
            drafts.push(interactive(&mut rng, submit_s));
        }
        let jobs = into_jobs(drafts, span, NAME_DIGITS);
        let source = format!("capped-spot workload: {} jobs over {} days, seed {}", self.jobs, span / DAY, self.seed);
        Trace { source, jobs, skipped: Vec::new(), columns: &[] }
    }
}

/// Adds one `p2` sweep of `size` trials to `out`: one team and one trial shape, launched within an hour of a
/// start on the daily cycle in the first [`SWEEP_SPAN`] of `span`.
fn sweep(rng: &mut ChaCha8Rng, span: f64, size: usize, out: &mut Vec<Draft>) {
    let start = submit_time(rng, span * SWEEP_SPAN);
    let team = if rng.random::<f64>() < 0.8 { "research" } else { "applied" };
    let gpus = if rng.random::<f64>() < 0.8 { 1 } else { 2 };
    let median = rng.random_range(1.5 * HOUR..3.0 * HOUR);
    for _ in 0..size {
        let submit_s = start + rng.random::<f64>() * HOUR;
        let duration_s = run_time(rng, median, 0.5);
        out.push(Draft { submit_s, duration_s, gpus, workers: 1, tier: "p2", team });
    }
}

/// Returns one `p0` or `p1` job submitted at `submit_s`: `p0` runs about 2 hours and sometimes as a gang of
/// 8-GPU workers, `p1` about 40 minutes.
fn interactive(rng: &mut ChaCha8Rng, submit_s: f64) -> Draft {
    let tier = if rng.random::<f64>() < CAPPED_P0 { "p0" } else { "p1" };
    let gpus = pick_gpus(rng, &[(1, 0.5), (2, 0.25), (4, 0.15), (8, 0.10)]);
    let workers = if gpus == 8 && tier == "p0" { rng.random_range(1..=2) } else { 1 };
    let median = if tier == "p0" { 2.0 * HOUR } else { 40.0 * 60.0 };
    let duration_s = run_time(rng, median, 1.0);
    let team = team_of(rng, tier);
    Draft { submit_s, duration_s, gpus, workers, tier, team }
}

/// Returns a tier: `p0` with odds `p0`, `p1` with odds `p1`, otherwise `p2`.
fn pick_tier(rng: &mut ChaCha8Rng, p0: f64, p1: f64) -> &'static str {
    let u = rng.random::<f64>();
    if u < p0 {
        "p0"
    } else if u < p0 + p1 {
        "p1"
    } else {
        "p2"
    }
}

/// Returns GPUs per worker drawn from `(gpus, odds)` pairs whose odds sum to 1 (the last absorbs rounding).
fn pick_gpus(rng: &mut ChaCha8Rng, table: &[(u32, f64)]) -> u32 {
    let mut u = rng.random::<f64>();
    for &(g, p) in table {
        if u < p {
            return g;
        }
        u -= p;
    }
    table.last().map_or(1, |&(g, _)| g)
}

/// Returns the team of a job of `tier`: `foundation` mostly runs `p0`, `research` mostly `p2`.
fn team_of(rng: &mut ChaCha8Rng, tier: &str) -> &'static str {
    let v = rng.random::<f64>();
    match tier {
        "p0" if v < 0.6 => "foundation",
        "p0" => "applied",
        "p1" if v < 0.5 => "applied",
        "p1" if v < 0.7 => "foundation",
        "p1" => "research",
        _ if v < 0.7 => "research",
        _ => "applied",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(t: &Trace) -> Vec<u8> {
        let mut out = Vec::new();
        super::super::native::write(t, &mut out).unwrap();
        out
    }

    fn share(t: &Trace, tier: &str) -> f64 {
        t.jobs.iter().filter(|j| j.tier.as_deref() == Some(tier)).count() as f64 / t.jobs.len() as f64
    }

    /// GPU-seconds asked for by the jobs submitted in `[from, to)`, per second of that window.
    fn gpus_asked(t: &Trace, from: f64, to: f64) -> f64 {
        let work: f64 = t
            .jobs
            .iter()
            .filter(|j| (from..to).contains(&j.submit_s))
            .map(|j| (j.gpus * j.workers) as f64 * j.duration_s)
            .sum();
        work / (to - from)
    }

    #[test]
    fn the_same_seed_gives_the_same_traces_byte_for_byte() {
        let o = Overload { jobs: 5_000, gpus: 160, seed: 4 };
        assert_eq!(written(&o.generate()), written(&o.generate()));
        assert_ne!(written(&o.generate()), written(&Overload { seed: 5, ..o }.generate()));
        let c = CappedSpot { jobs: 3_000, days: 7.0, seed: 4 };
        assert_eq!(written(&c.generate()), written(&c.generate()));
        assert_ne!(written(&c.generate()), written(&CappedSpot { seed: 5, ..c }.generate()));
    }

    #[test]
    fn an_overload_prefix_is_the_shorter_trace() {
        let long = Overload { jobs: 20_000, gpus: 160, seed: 2 }.generate();
        let short = Overload { jobs: 7_000, gpus: 160, seed: 2 }.generate();
        assert_eq!(short.jobs[..], long.jobs[..7_000]);
    }

    #[test]
    fn overload_asks_for_its_load_times_the_gpus() {
        let t = Overload { jobs: 200_000, gpus: 160, seed: 1 }.generate();
        assert_eq!(t.jobs.len(), 200_000);
        assert!(t.jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
        assert_eq!(t.jobs[199_999].name, "job-0200000");
        // The surge, the rest of the first week's weekdays, its weekend; measured within 10%.
        let surge = gpus_asked(&t, 0.0, SURGE_S);
        assert!((surge / (160.0 * SURGE_LOAD) - 1.0).abs() < 0.1, "surge asks for {surge:.0} GPUs");
        let weekdays = gpus_asked(&t, SURGE_S, 5.0 * DAY);
        assert!((weekdays / (160.0 * WEEKDAY_LOAD) - 1.0).abs() < 0.1, "weekdays ask for {weekdays:.0} GPUs");
        let weekend = gpus_asked(&t, 5.0 * DAY, WEEK);
        assert!((weekend / (160.0 * WEEKEND_LOAD) - 1.0).abs() < 0.1, "the weekend asks for {weekend:.0} GPUs");
        for (tier, want) in [("p0", 0.2), ("p1", 0.4), ("p2", 0.4)] {
            assert!((share(&t, tier) - want).abs() < 0.01, "{tier}: {}", share(&t, tier));
        }
    }

    #[test]
    fn overload_load_follows_surge_then_cycles() {
        assert_eq!(overload_load(0.0), SURGE_LOAD);
        assert_eq!(overload_load(SURGE_S + HOUR), WEEKDAY_LOAD);
        assert_eq!(overload_load(5.0 * DAY + HOUR), WEEKEND_LOAD);
        assert_eq!(overload_load(WEEK + 3.0 * DAY), WEEKDAY_LOAD);
        assert_eq!(overload_load(2.0 * WEEK - HOUR), WEEKEND_LOAD);
    }

    #[test]
    fn capped_spot_is_half_p2_sweeps_in_the_first_three_quarters() {
        let t = CappedSpot::default().generate();
        assert_eq!(t.jobs.len(), 15_000);
        assert!(t.jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
        assert!((share(&t, "p2") - 0.50).abs() < 0.001);
        assert!((share(&t, "p0") - 0.15).abs() < 0.02, "p0 {}", share(&t, "p0"));
        let span = 28.0 * DAY;
        // Trials start within an hour of their sweep's start.
        let late = span * SWEEP_SPAN + HOUR;
        assert!(t.jobs.iter().filter(|j| j.tier.as_deref() == Some("p2")).all(|j| j.submit_s <= late));
        assert!(t.jobs.iter().all(|j| j.submit_s <= span));
        // Gangs of several workers always use whole 8-GPU nodes.
        assert!(t.jobs.iter().all(|j| j.workers == 1 || j.gpus == 8));
    }

    #[test]
    fn odd_sizes_and_spans_still_give_exactly_the_jobs_asked_for() {
        for (jobs, days) in [(0, 7.0), (1, 7.0), (7, 0.5), (101, -1.0), (50, f64::NAN)] {
            assert_eq!(CappedSpot { jobs, days, seed: 3 }.generate().jobs.len(), jobs, "{jobs} jobs, {days} days");
        }
        for (jobs, gpus) in [(0, 160), (1, 0), (33, 1)] {
            assert_eq!(Overload { jobs, gpus, seed: 3 }.generate().jobs.len(), jobs, "{jobs} jobs, {gpus} GPUs");
        }
    }
}
