//! Step scaling: bands on a metric that must hold for a period before they act (above 0.8 for 300 s: +1 node;
//! below 0.3 for 300 s: -1 node), so a spike shorter than the period does nothing, with the shared cooldowns.

use super::Proposal;
use super::target_tracking::{Cooldown, ScaleTimes, cooldown};
use crate::time::{Millis, Time, secs};

/// Which side of a threshold a band covers (strictly).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    Above(f64),
    Below(f64),
}

impl Bound {
    /// Returns whether `value` lies in the band.
    fn holds(self, value: f64) -> bool {
        match self {
            Bound::Above(t) => value > t,
            Bound::Below(t) => value < t,
        }
    }
}

/// One band: when the metric stays in it for `hold_s`, resize by `adjust_nodes`.
#[derive(Debug, Clone, PartialEq)]
pub struct StepBand {
    pub when: Bound,
    pub hold_s: f64,
    /// Positive adds nodes, negative removes them.
    pub adjust_nodes: i32,
}

/// A step-scaling policy for one pool and one metric.
#[derive(Debug, Clone, PartialEq)]
pub struct StepScaling {
    pub metric: String,
    pub bands: Vec<StepBand>,
    pub scale_out_cooldown_s: f64,
    pub scale_in_cooldown_s: f64,
}

/// What one sample led to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepOutcome {
    /// No band has held for its period.
    Quiet,
    /// Band `band` has held for `held_ms`: resize by `adjust_nodes`.
    Adjust { band: usize, adjust_nodes: i32, held_ms: Millis },
    /// Band `band` has held for its period, but a cooldown blocks it; it acts after the cooldown if it still holds.
    CoolingDown { band: usize, cooldown: Cooldown },
}

/// The per-pool memory of a step policy: since when each band has held without a break.
#[derive(Debug, Clone, PartialEq)]
pub struct StepState {
    held_since: Vec<Option<Time>>,
}

impl StepState {
    /// Returns the state of a policy that has seen no samples.
    pub fn new(policy: &StepScaling) -> StepState {
        StepState { held_since: vec![None; policy.bands.len()] }
    }

    /// Feeds the sample `value` taken at `now` (samples in time order); `last` is when the pool last scaled (by any
    /// policy). Returns the adjustment of the band that has held for its period: the largest scale-out if any
    /// holds, else the largest scale-in. A non-finite sample breaks every band (no evidence is not evidence of a
    /// level). After an adjustment every band starts over: the metric must show the new size for a full period.
    pub fn observe(&mut self, policy: &StepScaling, now: Time, value: f64, last: ScaleTimes) -> StepOutcome {
        let mut best: Option<(usize, i32, Millis)> = None;
        for (i, band) in policy.bands.iter().enumerate() {
            let since = match self.held_since.get_mut(i) {
                Some(s) if value.is_finite() && band.when.holds(value) => *s.get_or_insert(now),
                Some(s) => {
                    *s = None;
                    continue;
                }
                None => continue,
            };
            let held = now - since;
            if held < secs(band.hold_s) || band.adjust_nodes == 0 {
                continue;
            }
            // Out before in; within a direction, the larger step.
            let rank = |a: i32| (a > 0, a.unsigned_abs());
            if best.is_none_or(|(_, a, _)| rank(band.adjust_nodes) > rank(a)) {
                best = Some((i, band.adjust_nodes, held));
            }
        }
        let Some((band, adjust_nodes, held_ms)) = best else { return StepOutcome::Quiet };
        // The gate only needs the direction, so a one-node pool stands in for the current size.
        let desired = if adjust_nodes > 0 { 2 } else { 0 };
        if let Some(cd) = cooldown(1, desired, last, now, policy.scale_out_cooldown_s, policy.scale_in_cooldown_s) {
            return StepOutcome::CoolingDown { band, cooldown: cd };
        }
        self.held_since.iter_mut().for_each(|s| *s = None);
        StepOutcome::Adjust { band, adjust_nodes, held_ms }
    }
}

impl StepScaling {
    /// Returns the policy's proposal for a pool of `current` nodes after `outcome`: the adjusted size (not below
    /// zero) when a band acted, else the current size. A quiet step policy proposes to hold, so under
    /// [`super::combine`] it vetoes scale-in by other policies until its own scale-in band has held.
    pub fn propose(&self, current: u32, outcome: StepOutcome) -> Proposal {
        let policy = format!("step:{}", self.metric);
        let (desired_nodes, detail) = match outcome {
            StepOutcome::Adjust { band, adjust_nodes, held_ms } => {
                let when = self.bands.get(band).map_or(String::new(), |b| match b.when {
                    Bound::Above(t) => format!("above {t}"),
                    Bound::Below(t) => format!("below {t}"),
                });
                (
                    current.saturating_add_signed(adjust_nodes),
                    format!("{} {when} for {} s: {adjust_nodes:+} node(s)", self.metric, held_ms / 1000),
                )
            }
            StepOutcome::CoolingDown { cooldown, .. } => {
                (current, format!("band held, {} until {}", cooldown.code, cooldown.until))
            }
            StepOutcome::Quiet => (current, format!("{} in no band long enough", self.metric)),
        };
        Proposal { policy, desired_nodes, detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> StepScaling {
        let band = |when, adjust_nodes| StepBand { when, hold_s: 300.0, adjust_nodes };
        StepScaling {
            metric: "gpu_util".into(),
            bands: vec![band(Bound::Above(0.8), 1), band(Bound::Above(0.95), 3), band(Bound::Below(0.3), -1)],
            scale_out_cooldown_s: 120.0,
            scale_in_cooldown_s: 600.0,
        }
    }

    /// Feeds `(seconds, value)` samples and returns one token per sample: `.` quiet, `+1`/`-1` an adjustment,
    /// `cd` a cooldown.
    fn run(samples: &[(i64, f64)], last: ScaleTimes) -> String {
        let p = policy();
        let mut st = StepState::new(&p);
        let tokens: Vec<String> = samples
            .iter()
            .map(|&(t, v)| match st.observe(&p, t * 1000, v, last) {
                StepOutcome::Quiet => ".".into(),
                StepOutcome::Adjust { adjust_nodes, .. } => format!("{adjust_nodes:+}"),
                StepOutcome::CoolingDown { .. } => "cd".into(),
            })
            .collect();
        tokens.join(" ")
    }

    /// Samples every 60 s from time 0 with the given values.
    fn every_minute(values: &[f64]) -> Vec<(i64, f64)> {
        values.iter().enumerate().map(|(i, &v)| (i as i64 * 60, v)).collect()
    }

    #[test]
    #[allow(clippy::type_complexity)] // a table of cases reads best inline
    fn a_band_acts_only_after_holding_for_its_period() {
        let none = ScaleTimes::default();
        let recent_out = ScaleTimes { last_out: Some(200_000), last_in: None };
        let cases: [(&str, Vec<(i64, f64)>, ScaleTimes, &str); 8] = [
            (
                "a spike shorter than the period does nothing",
                every_minute(&[0.9, 0.9, 0.9, 0.9, 0.9, 0.5, 0.9]),
                none,
                ". . . . . . .",
            ),
            ("held for the period: +1 at 300 s", every_minute(&[0.9, 0.9, 0.9, 0.9, 0.9, 0.9]), none, ". . . . . +1"),
            ("low for the period: -1", every_minute(&[0.1, 0.1, 0.1, 0.1, 0.1, 0.1]), none, ". . . . . -1"),
            (
                "after acting, the band must hold a full period again",
                every_minute(&[0.9; 12]),
                none,
                ". . . . . +1 . . . . . +1",
            ),
            ("the largest scale-out band that held wins", every_minute(&[0.97; 6]), none, ". . . . . +3"),
            (
                "a missing sample restarts the hold",
                every_minute(&[0.1, 0.1, 0.1, f64::NAN, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]),
                none,
                ". . . . . . . . . -1",
            ),
            ("sparse samples count the time between them", vec![(0, 0.9), (299, 0.9), (300, 0.9)], none, ". . +1"),
            ("a cooldown after a scale-out blocks scale-in", every_minute(&[0.1; 8]), recent_out, ". . . . . cd cd cd"),
        ];
        for (rule, samples, last, want) in cases {
            assert_eq!(run(&samples, last), want, "{rule}");
        }
    }

    #[test]
    fn a_cooled_down_band_acts_when_the_cooldown_ends() {
        let p = policy();
        let mut st = StepState::new(&p);
        let last = ScaleTimes { last_out: None, last_in: Some(0) };
        for t in (0..=540).step_by(60) {
            assert!(matches!(
                st.observe(&p, t * 1000, 0.1, last),
                StepOutcome::Quiet | StepOutcome::CoolingDown { .. }
            ));
        }
        assert_eq!(
            st.observe(&p, 600_000, 0.1, last),
            StepOutcome::Adjust { band: 2, adjust_nodes: -1, held_ms: 600_000 }
        );
    }

    #[test]
    fn the_proposal_applies_the_step_and_holds_otherwise() {
        let p = policy();
        let out = StepOutcome::Adjust { band: 0, adjust_nodes: 1, held_ms: 300_000 };
        let prop = p.propose(4, out);
        assert_eq!((prop.policy.as_str(), prop.desired_nodes), ("step:gpu_util", 5));
        assert_eq!(prop.detail, "gpu_util above 0.8 for 300 s: +1 node(s)");
        assert_eq!(p.propose(0, StepOutcome::Adjust { band: 2, adjust_nodes: -1, held_ms: 0 }).desired_nodes, 0);
        assert_eq!(p.propose(4, StepOutcome::Quiet).desired_nodes, 4);
    }
}
