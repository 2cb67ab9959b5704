//! Waiting budgets: how long a queued job waits for owned capacity before cloud capacity is bought for it.
//!
//! A tier's budget has a fixed part (`burst_after_s`) and a part that grows with the job's size in GPU-hours
//! (`burst_wait_per_gpu_hour_s`), capped at `burst_wait_max_s`. Large jobs wait longer for the owned cluster: the
//! wait is small beside their run time, and buying cloud capacity for them costs the most. Small jobs burst sooner:
//! a wait would double their completion time, and their cloud bill is small. This is Starburst's compute-weighted
//! wait (Luo et al., USENIX ATC '24), beside the constant wait the fixed part alone gives.
//!
//! A job's GPU-hours use its declared duration; without one, the mean run time of its team's succeeded jobs of
//! the same tier; without that history, [`ASSUMED_RUN_MS`]. [`Budget::source`] says which, so `explain` can.

use crate::config::Tier;
use crate::time::Millis;
use crate::time::secs;
use std::collections::BTreeMap;

/// The run time assumed for a job that declares none when its team has no succeeded job of its tier yet.
pub const ASSUMED_RUN_MS: Millis = 3_600_000;

/// Where the duration behind a job's waiting budget came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationSource {
    /// The job declared its expected duration.
    Declared,
    /// The mean run time of this many succeeded jobs of the same team and tier.
    TeamHistory(u64),
    /// Neither: [`ASSUMED_RUN_MS`].
    Assumed,
    /// The tier's budget does not grow with size, so no duration was needed.
    Unused,
}

/// A job's waiting budget: how long it waits for owned capacity, and what that was worked out from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub wait_ms: Millis,
    /// GPUs x expected hours (0 when the size part is off).
    pub gpu_hours: f64,
    pub source: DurationSource,
}

/// Returns the waiting budget of a job of `tier` with `gpus` GPUs in all, a declared duration (if any) and its
/// team's history for the tier (`(mean run ms, succeeded jobs)`, if any).
pub fn budget(tier: &Tier, gpus: u32, declared: Option<Millis>, history: Option<(Millis, u64)>) -> Budget {
    if let Some(wait_ms) = fixed_wait(tier) {
        return Budget { wait_ms, gpu_hours: 0.0, source: DurationSource::Unused };
    }
    let fixed = tier.burst_after_s.max(0.0);
    let (run_ms, source) = expected_run(declared, history);
    let gpu_hours = f64::from(gpus) * run_ms.max(0) as f64 / 3.6e6;
    let wait_s = (fixed + tier.burst_wait_per_gpu_hour_s * gpu_hours).min(tier.burst_wait_max_s);
    // Capped far beyond any run (about 31 years) so the sum with a queue time cannot overflow.
    Budget { wait_ms: secs(wait_s.min(1e9)), gpu_hours, source }
}

/// Returns the waiting budget every job of `tier` gets whatever its size, when the tier's budget does not grow
/// with size (`burst_wait_per_gpu_hour_s` is 0).
pub fn fixed_wait(tier: &Tier) -> Option<Millis> {
    let fixed = tier.burst_after_s.max(0.0);
    (tier.burst_wait_per_gpu_hour_s <= 0.0).then(|| secs(fixed.min(tier.burst_wait_max_s).min(1e12)))
}

/// Returns how long a job is expected to run, and where that came from: its declared duration, else its team's
/// mean for the tier (`(mean ms, succeeded jobs)`), else [`ASSUMED_RUN_MS`].
pub fn expected_run(declared: Option<Millis>, history: Option<(Millis, u64)>) -> (Millis, DurationSource) {
    match (declared, history) {
        (Some(d), _) => (d, DurationSource::Declared),
        (None, Some((mean, n))) if n > 0 => (mean, DurationSource::TeamHistory(n)),
        _ => (ASSUMED_RUN_MS, DurationSource::Assumed),
    }
}

/// Run times of succeeded jobs, per (team, tier): the estimate a job without a declared duration is sized by.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunHistory {
    /// (team, tier) -> (sum of run milliseconds, succeeded jobs).
    runs: BTreeMap<(usize, usize), (u128, u64)>,
}

impl RunHistory {
    /// Counts a succeeded job of `team` and `tier` that did `ran_ms` of work.
    pub fn record(&mut self, team: usize, tier: usize, ran_ms: Millis) {
        let e = self.runs.entry((team, tier)).or_insert((0, 0));
        e.0 = e.0.saturating_add(ran_ms.max(0) as u128);
        e.1 = e.1.saturating_add(1);
    }

    /// Returns (mean run milliseconds, succeeded jobs) of `team` and `tier`, or `None` before the first.
    pub fn mean(&self, team: usize, tier: usize) -> Option<(Millis, u64)> {
        let &(sum, n) = self.runs.get(&(team, tier))?;
        let mean = sum.checked_div(u128::from(n))?;
        Some((Millis::try_from(mean).unwrap_or(Millis::MAX), n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::default_tiers;

    fn p1(per_gpu_hour_s: f64, max_s: f64) -> Tier {
        let mut t = default_tiers().remove(1);
        t.burst_after_s = 60.0;
        t.burst_wait_per_gpu_hour_s = per_gpu_hour_s;
        t.burst_wait_max_s = max_s;
        t
    }

    #[test]
    fn a_larger_job_waits_longer_and_a_small_one_bursts_sooner() {
        let t = p1(300.0, f64::INFINITY);
        let hour = 3_600_000;
        // 1 GPU for 1 hour: 60 s + 5 min x 1 GPU-hour.
        let small = budget(&t, 1, Some(hour), None);
        assert_eq!((small.wait_ms, small.source), (360_000, DurationSource::Declared));
        // 8 GPUs for 10 hours: 60 s + 5 min x 80 GPU-hours = 60 s + 400 min.
        let large = budget(&t, 8, Some(10 * hour), None);
        assert_eq!(large.wait_ms, 60_000 + 400 * 60_000);
        assert!((large.gpu_hours - 80.0).abs() < 1e-9);
    }

    #[test]
    fn the_cap_bounds_every_budget_and_zero_keeps_the_fixed_wait() {
        let capped = budget(&p1(300.0, 7200.0), 64, Some(100 * 3_600_000), None);
        assert_eq!(capped.wait_ms, 7_200_000);
        let fixed = budget(&p1(0.0, f64::INFINITY), 64, Some(100 * 3_600_000), None);
        assert_eq!((fixed.wait_ms, fixed.source), (60_000, DurationSource::Unused));
        // A cap below the fixed part caps it too.
        assert_eq!(budget(&p1(0.0, 10.0), 1, None, None).wait_ms, 10_000);
    }

    #[test]
    fn without_a_declared_duration_the_team_history_then_an_hour_sizes_the_job() {
        let t = p1(600.0, f64::INFINITY);
        let mut h = RunHistory::default();
        assert_eq!(budget(&t, 2, None, h.mean(0, 1)).source, DurationSource::Assumed);
        assert_eq!(budget(&t, 2, None, h.mean(0, 1)).wait_ms, 60_000 + 2 * 600_000);
        h.record(0, 1, 2 * 3_600_000);
        h.record(0, 1, 4 * 3_600_000);
        // Another team's or tier's history is not this job's.
        h.record(1, 1, 100 * 3_600_000);
        h.record(0, 2, 100 * 3_600_000);
        let b = budget(&t, 2, None, h.mean(0, 1));
        assert_eq!(b.source, DurationSource::TeamHistory(2));
        // 2 GPUs x 3 h mean = 6 GPU-hours x 10 min.
        assert_eq!(b.wait_ms, 60_000 + 6 * 600_000);
    }

    #[test]
    fn absurd_sizes_saturate_instead_of_overflowing() {
        let b = budget(&p1(1e6, f64::INFINITY), u32::MAX, Some(Millis::MAX), None);
        assert_eq!(b.wait_ms, secs(1e9));
        let mut h = RunHistory::default();
        h.record(0, 0, Millis::MAX);
        h.record(0, 0, Millis::MAX);
        assert_eq!(h.mean(0, 0), Some((Millis::MAX, 2)));
    }
}
