//! Seeded synthetic workloads, for examples, tests and benchmarks when no real trace fits.
//!
//! [`Bursty`] mixes three kinds of jobs:
//! - background jobs (78% of the jobs), submitted one by one following a daily cycle (afternoon peak,
//!   quiet nights, quieter weekends; the trace starts on a Monday at 00:00), in every tier;
//! - hyperparameter sweeps (20%): 20-120 small `p2` trials launched within half an hour;
//! - pretraining pushes (2%): 2-5 large `p0` gangs (8 GPUs x 2-4 workers) launched within an hour.
//!
//! By count the tiers come out near 15% `p0`, 45% `p1`, 40% `p2`. Run times are log-normal, median about
//! 30 minutes for `p1`/`p2`, hours for `p0`, between 1 minute and 2 days, in whole seconds. The only
//! source of randomness is a `ChaCha8Rng` seeded from `seed`, so a seed always gives the same trace.

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

use super::{Trace, TraceJob};

const HOUR: f64 = 3_600.0;
const DAY: f64 = 86_400.0;
/// Run time bounds: shorter jobs are noise for a capacity manager, longer ones would dominate a week.
const MIN_RUN_S: f64 = 60.0;
const MAX_RUN_S: f64 = 2.0 * DAY;
/// Shares of all jobs that come from sweeps (all `p2`) and pretraining pushes (all `p0`).
const SWEEP_SHARE: f64 = 0.20;
const PUSH_SHARE: f64 = 0.02;
/// Tier odds for background jobs, chosen so that with the bursts the totals are about 15/45/40.
const BACKGROUND_P0: f64 = 0.13 / 0.78;
const BACKGROUND_P1: f64 = 0.45 / 0.78;

/// A bursty, daily-cycled synthetic workload of `jobs` jobs over `days` days.
#[derive(Debug, Clone, PartialEq)]
pub struct Bursty {
    /// How many jobs to generate.
    pub jobs: usize,
    /// The span of submissions in days; a value that is not a positive finite number counts as 1.
    pub days: f64,
    /// Seed of the random generator.
    pub seed: u64,
}

impl Default for Bursty {
    /// About a busy week of a mid-sized ML group: 3,000 jobs over 7 days, seed 1.
    fn default() -> Self {
        Self { jobs: 3_000, days: 7.0, seed: 1 }
    }
}

/// A job before it gets its name, which depends on its place in submit order.
pub(super) struct Draft {
    pub(super) submit_s: f64,
    pub(super) duration_s: f64,
    pub(super) gpus: u32,
    pub(super) workers: u32,
    pub(super) tier: &'static str,
    pub(super) team: &'static str,
}

impl Draft {
    /// Returns the trace record of the job at 0-based place `i` in submit order: named `job-` and its 1-based
    /// place in `digits` digits, `line` that place; gpu type, interruptible, checkpoints and deadline are left to
    /// the configuration's defaults.
    pub(super) fn into_job(self, i: usize, digits: usize) -> TraceJob {
        TraceJob {
            name: format!("job-{:0digits$}", i + 1),
            submit_s: self.submit_s,
            duration_s: self.duration_s,
            gpus: self.gpus,
            workers: self.workers,
            tier: Some(self.tier.to_string()),
            team: Some(self.team.to_string()),
            gpu_type: None,
            interruptible: None,
            checkpoint_interval_s: None,
            deadline_s: None,
            min_workers: None,
            serial_fraction: None,
            line: i + 1,
            checkpoint_gb: None,
            data_region: None,
        }
    }
}

/// Returns `drafts` as trace jobs: every submission kept inside `span` in whole seconds (bursts may start after
/// its end), sorted by submit time with ties in generation order, named in that order (see [`Draft::into_job`]).
pub(super) fn into_jobs(mut drafts: Vec<Draft>, span: f64, digits: usize) -> Vec<TraceJob> {
    for d in &mut drafts {
        d.submit_s = d.submit_s.min(span).floor();
    }
    drafts.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    drafts.into_iter().enumerate().map(|(i, d)| d.into_job(i, digits)).collect()
}

/// The generator's teams, in the order a config's teams take their place (see [`use_teams`]).
pub const ROLES: [&str; 3] = ["foundation", "research", "applied"];

/// Gives the generated jobs of each of [`ROLES`] a team of the config, so a user's own teams show in the report: a
/// role keeps its name where the config has that team; the other roles take the config's other teams in order
/// (cycling through all of them when it has too few). Without teams in the config the roles stay.
pub fn use_teams(trace: &mut Trace, teams: &[String]) {
    if teams.is_empty() {
        return;
    }
    let mut others = teams.iter().filter(|t| !ROLES.contains(&t.as_str())).chain(teams.iter().cycle());
    let map: Vec<String> = ROLES
        .iter()
        .map(|r| match teams.iter().find(|t| t == r) {
            Some(t) => t.clone(),
            None => others.next().cloned().unwrap_or_else(|| (*r).to_string()),
        })
        .collect();
    for j in &mut trace.jobs {
        if let Some(i) = j.team.as_deref().and_then(|t| ROLES.iter().position(|r| *r == t)) {
            j.team = Some(map[i].clone());
        }
    }
}

/// Reshapes generated gangs to a config of smaller nodes: a worker larger than any node its tier may use
/// (`largest(tier)`, 0 when none) becomes more workers of the largest node's size, keeping the job's GPUs (rounded
/// up to whole workers); then a gang wider than its tier could ever hold at once (`widest(tier, gpus)`) is cut to
/// that width. Returns how many jobs changed.
pub fn fit_gangs(trace: &mut Trace, largest: impl Fn(&str) -> u32, widest: impl Fn(&str, u32) -> u32) -> usize {
    let mut changed = 0;
    for j in &mut trace.jobs {
        let tier = j.tier.clone().unwrap_or_default();
        let most = largest(&tier);
        let before = (j.gpus, j.workers);
        if most > 0 && j.gpus > most {
            let total = u64::from(j.gpus) * u64::from(j.workers);
            j.workers = u32::try_from(total.div_ceil(u64::from(most))).unwrap_or(u32::MAX);
            j.gpus = most;
        }
        j.workers = j.workers.min(widest(&tier, j.gpus).max(1));
        changed += usize::from((j.gpus, j.workers) != before);
    }
    changed
}

impl Bursty {
    /// Generates the workload. Returns exactly `jobs` jobs sorted by submit time (ties keep generation
    /// order), named `job-000001`, `job-000002`, ... in that order, with `line` their 1-based position and
    /// `skipped` empty. Tier, team and GPUs are set; `gpu_type`, `interruptible`, checkpoint interval and
    /// deadline are left to the configuration's defaults.
    pub fn generate(&self) -> Trace {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let span = if self.days.is_finite() && self.days > 0.0 { self.days * DAY } else { DAY };
        let n = self.jobs;
        let n_sweep = (n as f64 * SWEEP_SHARE).round() as usize;
        let n_push = ((n as f64 * PUSH_SHARE).round() as usize).min(n - n_sweep);
        let mut drafts = Vec::with_capacity(n);

        while drafts.len() < n_sweep {
            // One sweep: one team, one trial shape and a typical trial length shared by its trials.
            let start = submit_time(&mut rng, span);
            let size = rng.random_range(20..=120).min(n_sweep - drafts.len());
            let team = if rng.random::<f64>() < 0.8 { "research" } else { "applied" };
            let gpus = if rng.random::<f64>() < 0.8 { 1 } else { 2 };
            let median = rng.random_range(10.0 * 60.0..40.0 * 60.0);
            for _ in 0..size {
                let submit_s = start + rng.random::<f64>() * 0.5 * HOUR;
                let duration_s = run_time(&mut rng, median, 0.6);
                drafts.push(Draft { submit_s, duration_s, gpus, workers: 1, tier: "p2", team });
            }
        }
        while drafts.len() < n_sweep + n_push {
            let start = submit_time(&mut rng, span);
            let size = rng.random_range(2..=5).min(n_sweep + n_push - drafts.len());
            for _ in 0..size {
                let submit_s = start + rng.random::<f64>() * HOUR;
                let workers = rng.random_range(2..=4);
                let duration_s = run_time(&mut rng, 6.0 * HOUR, 0.7);
                drafts.push(Draft { submit_s, duration_s, gpus: 8, workers, tier: "p0", team: "foundation" });
            }
        }
        for _ in drafts.len()..n {
            let submit_s = submit_time(&mut rng, span);
            drafts.push(background(&mut rng, submit_s));
        }

        let jobs = into_jobs(drafts, span, 6);
        let days = span / DAY;
        let unit = if days == 1.0 { "day" } else { "days" };
        let source = format!("bursty workload: {n} jobs over {days} {unit}, seed {}", self.seed);
        Trace { source, jobs, skipped: Vec::new(), columns: &[] }
    }
}

/// One background job submitted at `submit_s`: tier first, then a team and a shape that suit the tier.
fn background(rng: &mut ChaCha8Rng, submit_s: f64) -> Draft {
    let u = rng.random::<f64>();
    let v = rng.random::<f64>();
    let (tier, team, big_odds, median) = if u < BACKGROUND_P0 {
        ("p0", if v < 0.6 { "foundation" } else { "applied" }, 0.2, 2.0 * HOUR)
    } else if u < BACKGROUND_P0 + BACKGROUND_P1 {
        let team = if v < 0.5 {
            "applied"
        } else if v < 0.7 {
            "foundation"
        } else {
            "research"
        };
        ("p1", team, 0.12, 0.5 * HOUR)
    } else {
        ("p2", if v < 0.7 { "research" } else { "applied" }, 0.04, 0.4 * HOUR)
    };
    // Full 8-GPU workers only for big jobs, which also run longer; the rest use part of a node.
    let (gpus, workers, median) = if rng.random::<f64>() < big_odds {
        (8, rng.random_range(1..=if tier == "p0" { 4 } else { 2 }), median * 2.0)
    } else {
        let g = rng.random::<f64>();
        (
            if g < 0.6 {
                1
            } else if g < 0.85 {
                2
            } else {
                4
            },
            1,
            median,
        )
    };
    let duration_s = run_time(rng, median, 1.1);
    Draft { submit_s, duration_s, gpus, workers, tier, team }
}

/// A submission time in `[0, span)` drawn from the daily cycle by rejection: a uniform time is kept with
/// probability equal to the cycle's relative intensity then, which is at least 0.07, so few draws are wasted.
pub(super) fn submit_time(rng: &mut ChaCha8Rng, span: f64) -> f64 {
    loop {
        let t = rng.random::<f64>() * span;
        if rng.random::<f64>() < intensity(t) {
            return t;
        }
    }
}

/// Relative submission rate at time `t` (seconds from Monday 00:00), in (0, 1]: a raised cosine over the
/// day from 0.2 at 02:00 to 1 at 14:00, times 0.35 on Saturdays and Sundays.
fn intensity(t: f64) -> f64 {
    let hour = (t % DAY) / HOUR;
    let daily = 0.2 + 0.8 * 0.5 * (1.0 - (std::f64::consts::TAU * (hour - 2.0) / 24.0).cos());
    let weekday = (t / DAY) as u64 % 7;
    if weekday >= 5 { daily * 0.35 } else { daily }
}

/// A log-normal run time with the given median and log-space spread, kept within the bounds, whole seconds.
pub(super) fn run_time(rng: &mut ChaCha8Rng, median: f64, sigma: f64) -> f64 {
    let z: f64 = rng.sample(StandardNormal);
    (median * (sigma * z).exp()).clamp(MIN_RUN_S, MAX_RUN_S).round()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(t: &Trace) -> Vec<u8> {
        let mut out = Vec::new();
        super::super::native::write(t, &mut out).unwrap();
        out
    }

    #[test]
    fn gangs_larger_than_the_nodes_become_more_workers_of_the_same_gpus() {
        let mut t = Bursty::default().generate();
        let before: Vec<u64> = t.jobs.iter().map(|j| u64::from(j.gpus) * u64::from(j.workers)).collect();
        // p0 may only use 4-GPU nodes; p1 has none at all (left as is: nothing to fit to).
        let largest = |tier: &str| match tier {
            "p0" => 4,
            "p1" => 0,
            _ => 8,
        };
        let changed = fit_gangs(&mut t, largest, |_, _| u32::MAX);
        assert!(changed > 0);
        for (j, total) in t.jobs.iter().zip(&before) {
            let now = u64::from(j.gpus) * u64::from(j.workers);
            match j.tier.as_deref() {
                Some("p0") => assert!(j.gpus <= 4 && now == *total, "{j:?}: {total} GPUs kept"),
                _ => assert_eq!(now, *total),
            }
        }
        // A tier that can hold at most 2 workers at once gets gangs of at most 2.
        let mut t = Bursty::default().generate();
        fit_gangs(&mut t, largest, |tier, _| if tier == "p0" { 2 } else { u32::MAX });
        assert!(t.jobs.iter().filter(|j| j.tier.as_deref() == Some("p0")).all(|j| j.workers <= 2 && j.gpus <= 4));
    }

    #[test]
    fn the_same_seed_gives_the_same_trace_byte_for_byte() {
        let a = Bursty::default().generate();
        let b = Bursty::default().generate();
        assert_eq!(written(&a), written(&b));
        let c = Bursty { seed: 2, ..Bursty::default() }.generate();
        assert_ne!(written(&a), written(&c));
    }

    #[test]
    fn the_tier_mix_is_about_15_45_40() {
        let t = Bursty::default().generate();
        assert_eq!(t.jobs.len(), 3_000);
        let share = |tier: &str| t.jobs.iter().filter(|j| j.tier.as_deref() == Some(tier)).count() as f64 / 3_000.0;
        for (tier, want) in [("p0", 0.15), ("p1", 0.45), ("p2", 0.40)] {
            assert!((share(tier) - want).abs() < 0.03, "{tier}: {}", share(tier));
        }
    }

    #[test]
    fn jobs_are_named_in_submit_order_within_the_span() {
        let t = Bursty { jobs: 500, days: 2.0, seed: 9 }.generate();
        assert_eq!(t.jobs.len(), 500);
        assert_eq!(t.jobs[0].name, "job-000001");
        assert_eq!(t.jobs[499].name, "job-000500");
        assert!(t.jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
        assert!(t.jobs.iter().all(|j| (0.0..=2.0 * DAY).contains(&j.submit_s)));
        assert!(t.jobs.iter().enumerate().all(|(i, j)| j.line == i + 1));
    }

    #[test]
    fn the_configs_teams_take_the_roles_in_order() {
        let mut t = Bursty { jobs: 300, days: 1.0, seed: 3 }.generate();
        use_teams(&mut t, &["ml".to_string(), "vision".to_string()]);
        let seen: std::collections::BTreeSet<&str> = t.jobs.iter().filter_map(|j| j.team.as_deref()).collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["ml", "vision"]);
        // A config that has the roles' teams keeps them as they are, whatever their order.
        let mut same = Bursty { jobs: 300, days: 1.0, seed: 3 }.generate();
        let before: Vec<Option<String>> = same.jobs.iter().map(|j| j.team.clone()).collect();
        use_teams(&mut same, &["research".into(), "applied".into(), "foundation".into()]);
        assert_eq!(same.jobs.iter().map(|j| j.team.clone()).collect::<Vec<_>>(), before);
        // Partly: `research` stays, the others take `ml` and then cycle.
        let mut part = Bursty { jobs: 300, days: 1.0, seed: 3 }.generate();
        use_teams(&mut part, &["research".into(), "ml".into()]);
        let seen: std::collections::BTreeSet<&str> = part.jobs.iter().filter_map(|j| j.team.as_deref()).collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["ml", "research"]);
    }

    #[test]
    fn shapes_teams_and_run_times_follow_the_description() {
        let t = Bursty::default().generate();
        let teams = ["foundation", "applied", "research"];
        assert!(t.jobs.iter().all(|j| teams.contains(&j.team.as_deref().unwrap_or(""))));
        assert!(t.jobs.iter().all(|j| [1, 2, 4, 8].contains(&j.gpus) && (1..=4).contains(&j.workers)));
        // Gangs of several workers always use whole 8-GPU nodes.
        assert!(t.jobs.iter().all(|j| j.workers == 1 || j.gpus == 8));
        assert!(t.jobs.iter().any(|j| j.tier.as_deref() == Some("p0") && j.workers >= 2));
        assert!(t.jobs.iter().all(|j| (MIN_RUN_S..=MAX_RUN_S).contains(&j.duration_s)));
        let median = |tier: &str| {
            let mut d: Vec<f64> =
                t.jobs.iter().filter(|j| j.tier.as_deref() == Some(tier)).map(|j| j.duration_s).collect();
            d.sort_by(f64::total_cmp);
            d[d.len() / 2]
        };
        assert!((15.0 * 60.0..60.0 * 60.0).contains(&median("p1")), "p1 median {}", median("p1"));
        assert!(median("p0") > 2.0 * median("p1"), "p0 median {}", median("p0"));
    }

    #[test]
    fn working_hours_are_busier_than_nights_and_sweeps_burst() {
        let t = Bursty::default().generate();
        let hour = |j: &TraceJob| (j.submit_s % DAY) / HOUR;
        let day = t.jobs.iter().filter(|j| (10.0..16.0).contains(&hour(j))).count();
        let night = t.jobs.iter().filter(|j| hour(j) < 6.0).count();
        assert!(day > 2 * night, "day {day} night {night}");
        // Some half hour holds at least 20 p2 submissions: a sweep.
        let p2: Vec<f64> = t.jobs.iter().filter(|j| j.tier.as_deref() == Some("p2")).map(|j| j.submit_s).collect();
        assert!(p2.windows(20).any(|w| w[19] - w[0] <= 0.5 * HOUR));
    }

    #[test]
    fn odd_sizes_and_spans_still_give_exactly_the_jobs_asked_for() {
        for (jobs, days) in [(0, 7.0), (1, 7.0), (7, 0.5), (101, -1.0), (50, f64::NAN)] {
            let t = Bursty { jobs, days, seed: 3 }.generate();
            assert_eq!(t.jobs.len(), jobs, "{jobs} jobs, {days} days");
        }
    }

    /// Timing check: run with `cargo test --release -- --ignored a_million_jobs --nocapture`.
    #[test]
    #[ignore]
    #[allow(clippy::disallowed_methods)] // a timing check reads the clock; the generator itself does not
    fn a_million_jobs_generate_in_well_under_two_seconds() {
        let start = std::time::Instant::now();
        let t = Bursty { jobs: 1_000_000, ..Bursty::default() }.generate();
        let elapsed = start.elapsed();
        println!("generated {} jobs in {elapsed:?}", t.jobs.len());
        assert_eq!(t.jobs.len(), 1_000_000);
        assert!(elapsed.as_secs_f64() < 2.0);
    }
}
