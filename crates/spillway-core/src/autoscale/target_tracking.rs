//! Target tracking: keep a per-node metric (GPU utilization) near a target by resizing the pool in proportion,
//! `ceil(current * metric / target)` (the AWS rule), with the metric averaged over nodes past their warm-up and
//! cooldowns that keep one action's effect from triggering the next. The cooldown gate is shared by all policies.

use super::Proposal;
use crate::time::{Time, secs};

/// Ratios within this of a whole node count round down, so float noise at the target does not add a node.
const RATIO_EPSILON: f64 = 1e-9;

/// A target-tracking policy for one pool and one per-node metric.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetTracking {
    /// The metric's name, e.g. `gpu_util` (per node, averaged).
    pub metric: String,
    /// The value to hold the average at (> 0), e.g. 0.7.
    pub target: f64,
    /// Seconds after launch before a node's metric counts: a booting or loading node reports a misleading 0.
    pub warmup_s: f64,
    pub scale_in_cooldown_s: f64,
    pub scale_out_cooldown_s: f64,
}

/// One node's latest metric value and when it was launched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeSample {
    pub launched_at: Time,
    /// The metric's value; a non-finite value means the node did not report.
    pub value: f64,
}

/// The metric averaged over warm nodes, and how many nodes were counted and left out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmAverage {
    /// `None` when no warm node reported.
    pub mean: Option<f64>,
    pub warm: usize,
    pub warming: usize,
}

/// Returns the mean metric over the nodes past warm-up at `now` (launched at least `warmup_s` ago) that reported a
/// finite value. Nodes still warming are counted apart: their metric does not yet show the load they will take.
pub fn warm_average(nodes: &[NodeSample], now: Time, warmup_s: f64) -> WarmAverage {
    let warm_at = secs(warmup_s);
    let (mut sum, mut warm, mut warming) = (0.0, 0usize, 0usize);
    for n in nodes {
        if now - n.launched_at < warm_at {
            warming += 1;
        } else if n.value.is_finite() {
            sum += n.value;
            warm += 1;
        }
    }
    WarmAverage { mean: (warm > 0).then(|| sum / warm as f64), warm, warming }
}

/// Returns the node count that brings the average metric to `target`: `ceil(current * metric / target)`. An
/// unusable input (non-finite or negative metric, target not > 0) returns `current`: no evidence, no change.
pub fn desired_nodes(current: u32, metric: f64, target: f64) -> u32 {
    if !metric.is_finite() || metric < 0.0 || !target.is_finite() || target <= 0.0 {
        return current;
    }
    // `as` saturates, so an absurd ratio asks for u32::MAX and the pool's max clips it later.
    (current as f64 * metric / target - RATIO_EPSILON).ceil().max(0.0) as u32
}

impl TargetTracking {
    /// Returns this policy's proposal for a pool of `current` nodes (warming ones included), or `None` when it has
    /// nothing to say: an empty pool (a per-node metric says nothing about it; queued demand grows it) or no warm
    /// node reporting. While a node warms up the policy never proposes scale-in: the load it will take is not yet
    /// in the metric, and removing capacity on that evidence would undo the scale-out that launched it.
    pub fn propose(&self, current: u32, nodes: &[NodeSample], now: Time) -> Option<Proposal> {
        if current == 0 {
            return None;
        }
        let avg = warm_average(nodes, now, self.warmup_s);
        let mean = avg.mean?;
        let mut desired = desired_nodes(current, mean, self.target);
        let mut detail = format!("{} {mean:.3} over {} warm node(s), target {}", self.metric, avg.warm, self.target);
        if desired < current && avg.warming > 0 {
            desired = current;
            detail.push_str(&format!("; no scale-in while {} node(s) warm up", avg.warming));
        }
        Some(Proposal { policy: format!("target_tracking:{}", self.metric), desired_nodes: desired, detail })
    }
}

/// When a pool last scaled out and in, as the engine records it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScaleTimes {
    pub last_out: Option<Time>,
    pub last_in: Option<Time>,
}

/// A change held back by a cooldown: until when, and the stable reason code.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cooldown {
    pub until: Time,
    /// `scale_out_cooldown` or `scale_in_cooldown`.
    pub code: &'static str,
}

/// Returns the cooldown that blocks resizing from `current` to `desired` at `now`, or `None` when the change may
/// go ahead. Scale-out waits `out_cooldown_s` after the last scale-out (the nodes it bought are still booting and
/// the metric has not seen them). Scale-in waits `in_cooldown_s` after the last scale-in AND after the last
/// scale-out: nodes just bought are not given back within the cooldown, because flapping pays a boot each time.
/// Holding the size is never blocked.
pub fn cooldown(
    current: u32,
    desired: u32,
    last: ScaleTimes,
    now: Time,
    out_cooldown_s: f64,
    in_cooldown_s: f64,
) -> Option<Cooldown> {
    let (since, wait, code) = if desired > current {
        (last.last_out, out_cooldown_s, "scale_out_cooldown")
    } else if desired < current {
        (last.last_in.max(last.last_out), in_cooldown_s, "scale_in_cooldown")
    } else {
        return None;
    };
    let until = since? + secs(wait);
    (now < until).then_some(Cooldown { until, code })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Time = 60_000;

    fn policy() -> TargetTracking {
        TargetTracking {
            metric: "gpu_util".into(),
            target: 0.6,
            warmup_s: 300.0,
            scale_in_cooldown_s: 600.0,
            scale_out_cooldown_s: 120.0,
        }
    }

    #[test]
    fn the_proposed_size_is_ceil_of_current_times_metric_over_target() {
        let cases = [
            ("at target holds", 10, 0.6, 0.6, 10),
            ("above target scales out in proportion", 10, 0.9, 0.6, 15),
            ("below target scales in in proportion", 10, 0.3, 0.6, 5),
            ("a little above target adds a whole node", 10, 0.61, 0.6, 11),
            ("float noise at target does not add a node", 3, 0.9, 0.3, 9),
            ("an idle pool proposes zero", 4, 0.0, 0.6, 0),
            ("a non-finite metric changes nothing", 4, f64::NAN, 0.6, 4),
            ("a target of zero changes nothing", 4, 0.5, 0.0, 4),
            ("a huge ratio saturates instead of wrapping", 4_000_000_000, 1e9, 1e-9, u32::MAX),
        ];
        for (rule, current, metric, target, want) in cases {
            assert_eq!(desired_nodes(current, metric, target), want, "{rule}");
        }
    }

    #[test]
    fn warm_up_excludes_new_nodes() {
        let now = 10 * MIN;
        let warm = |v| NodeSample { launched_at: 0, value: v };
        let new = |v| NodeSample { launched_at: now - MIN, value: v };
        let cases: [(&str, Vec<NodeSample>, Option<u32>); 5] = [
            // Counting the booting node's 0 would average 0.675 and ask for 5 nodes, not 6.
            (
                "a booting node's zero does not dilute the average",
                vec![warm(0.9), warm(0.9), warm(0.9), new(0.0)],
                Some(6),
            ),
            (
                "a node exactly at its warm-up counts",
                vec![warm(0.9), NodeSample { launched_at: now - 5 * MIN, value: 0.0 }],
                Some(2),
            ),
            ("no scale-in while a node warms up", vec![warm(0.1), warm(0.1), new(0.0), new(0.0)], Some(4)),
            ("only warming nodes: no proposal", vec![new(0.0), new(0.0)], None),
            ("a node that did not report is left out", vec![warm(0.9), warm(f64::NAN)], Some(3)),
        ];
        for (rule, nodes, want) in cases {
            let current = nodes.len() as u32;
            let got = policy().propose(current, &nodes, now).map(|p| p.desired_nodes);
            assert_eq!(got, want, "{rule}");
        }
        assert_eq!(policy().propose(0, &[], now), None, "an empty pool: no proposal");
        let avg = warm_average(&[warm(0.5), new(0.0)], now, 300.0);
        assert_eq!((avg.mean, avg.warm, avg.warming), (Some(0.5), 1, 1));
    }

    #[test]
    fn cooldown_blocks_scale_in_after_any_action_and_scale_out_after_scale_out() {
        let p = policy();
        let t = |out: Option<i64>, inn: Option<i64>| ScaleTimes {
            last_out: out.map(|m| m * MIN),
            last_in: inn.map(|m| m * MIN),
        };
        let cases = [
            ("cooldown blocks scale-in after a scale-in", 10, 8, t(None, Some(0)), 5, Some((10, "scale_in_cooldown"))),
            (
                "scale-in waits out its cooldown after a scale-out too",
                10,
                8,
                t(Some(3), Some(0)),
                12,
                Some((13, "scale_in_cooldown")),
            ),
            ("scale-in goes once the cooldown has passed", 10, 8, t(Some(0), Some(0)), 10, None),
            ("scale-out cooldown blocks scale-out", 10, 12, t(Some(0), None), 1, Some((2, "scale_out_cooldown"))),
            ("a scale-in cooldown does not block scale-out", 10, 12, t(None, Some(0)), 1, None),
            ("a pool that never scaled is not blocked", 10, 2, t(None, None), 0, None),
            ("holding the size is never blocked", 10, 10, t(Some(0), Some(0)), 0, None),
        ];
        for (rule, current, desired, last, now_min, want) in cases {
            let got = cooldown(current, desired, last, now_min * MIN, p.scale_out_cooldown_s, p.scale_in_cooldown_s);
            assert_eq!(got.map(|c| (c.until / MIN, c.code)), want, "{rule}");
        }
    }
}
