//! The simulation report: the figures of every policy run on one input, side by side with the bound.
//! `report.json` is this structure serialized; maps are `BTreeMap` so the bytes are reproducible.

use serde::Serialize;
use std::collections::BTreeMap;

/// Mean and percentiles of a sample, in seconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Stats {
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

/// Per-tier outcome of a run.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TierReport {
    /// Jobs of this tier submitted.
    pub jobs: usize,
    /// Of them, the jobs that started (the ones `queue_wait_s` is over; 0: no wait to show).
    #[serde(default)]
    pub started: usize,
    /// Time from submission to first start, over started jobs.
    pub queue_wait_s: Stats,
    /// Time from submission to completion, over completed jobs.
    pub jct_s: Stats,
    /// Jobs whose first start came later than the tier's queue-wait SLO (or that never started).
    pub slo_misses: usize,
}

/// Cost split by market.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct MarketCost {
    pub fixed: f64,
    pub on_demand: f64,
    pub spot: f64,
}

/// The outcome of one policy on the input.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RunReport {
    /// `spillway`, `static-peak`, `fixed-only` or `on-demand-reactive`.
    pub policy: String,
    /// Nodes and egress.
    pub cost_usd: f64,
    pub cost_by_market: MarketCost,
    /// Moving jobs' data between regions (in `cost_usd`, `cost_by_team` and `cost_by_tier`, not in any market's).
    pub egress_usd: f64,
    /// Starts that moved a job's data from another region.
    pub data_moves: usize,
    pub cost_by_team: BTreeMap<String, f64>,
    pub cost_by_tier: BTreeMap<String, f64>,
    pub cost_by_pool: BTreeMap<String, f64>,
    /// Cost of GPUs that were paid for and ran nothing.
    pub idle_cost_usd: f64,
    /// `cost_usd / bound.cost_usd`.
    pub cost_vs_bound: f64,
    pub jobs_submitted: usize,
    pub jobs_completed: usize,
    /// Jobs that ended by their own failing exit.
    pub jobs_failed: usize,
    /// Jobs neither completed, failed nor still queued: always 0 unless the engine has a bug.
    pub jobs_lost: usize,
    /// Jobs still queued or running when the run stopped.
    pub jobs_unfinished: usize,
    pub busy_gpu_hours: f64,
    pub idle_gpu_hours: f64,
    /// Scale-out and scale-in decisions (one per pool per decision).
    pub scale_actions: usize,
    pub nodes_launched: usize,
    pub launch_failures: usize,
    pub preemptions: usize,
    /// GPU-hours of work redone because a job was stopped after its last checkpoint.
    pub lost_gpu_hours: f64,
    /// Simulated seconds from the start of the trace to the last job's end.
    pub makespan_s: f64,
    /// Simulated events the run processed.
    pub events: u64,
    /// Spot interruption notices received.
    pub interruptions: usize,
    /// Jobs checkpointed and requeued on a notice.
    pub notices_acted_on: usize,
    /// Offerings backed off for interruptions and jobs moved from spot to on-demand.
    pub fallback_events: usize,
    /// Jobs with a deadline that ended after it (or never).
    pub deadline_misses: usize,
    pub tiers: BTreeMap<String, TierReport>,
    /// Queue wait by tier of the jobs submitted in each day's peak hour (UTC day; the hour in which the most
    /// GPUs were submitted), where scaling ahead of demand matters most.
    pub peak_hour_wait_s: BTreeMap<String, Stats>,
}

/// The instant-overflow bound: every job starts at submission; the fixed pool serves demand in tier order; each
/// tier's overflow runs on the cheapest market it allows, with no boot latency, no idle GPU, no fragmentation.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct BoundReport {
    pub cost_usd: f64,
    pub cost_by_market: MarketCost,
    /// Peak concurrent GPU demand if every job starts at submission.
    pub peak_gpus: u64,
}

/// What was simulated.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct InputReport {
    /// Trace file or generator.
    pub source: String,
    pub config: String,
    /// Jobs replayed.
    pub jobs: usize,
    /// Rows the loader skipped on purpose, by reason.
    pub skipped: BTreeMap<String, usize>,
    pub total_gpu_hours: f64,
    /// Each pool's market (`fixed`, `on_demand`, `spot`), so charts colour a pool as its market.
    pub pool_markets: BTreeMap<String, String>,
}

/// What spot bought: the `spillway` run beside the same policy with spot disabled (`spillway-no-spot`: spot
/// pools bought on demand).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SpotReport {
    pub no_spot_cost_usd: f64,
    pub saved_usd: f64,
    /// `saved_usd / no_spot_cost_usd`.
    pub saved_fraction: f64,
    /// The ceiling on what spot can save on this input: the instant-overflow bound with spot against the bound of
    /// the same config with spot disabled (every spot-eligible GPU-hour on spot, nothing lost, nothing idle).
    pub bound_no_spot_cost_usd: f64,
    pub bound_saved_fraction: f64,
}

/// What predictive scaling bought: the `spillway` run beside `spillway-reactive` (the same config with
/// predictive scaling off); present only when a pool acts on a forecast.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PredictiveReport {
    pub reactive_cost_usd: f64,
    /// `spillway` cost minus `spillway-reactive` cost.
    pub added_usd: f64,
    /// Mean p1 queue wait in the daily peak hours, with and without predictive scaling.
    pub p1_peak_wait_mean_s: f64,
    pub reactive_p1_peak_wait_mean_s: f64,
    pub p1_peak_wait_p95_s: f64,
    pub reactive_p1_peak_wait_p95_s: f64,
}

/// The whole report.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Report {
    pub seed: u64,
    pub input: InputReport,
    pub runs: Vec<RunReport>,
    pub bound: BoundReport,
    /// The bound that honors pool caps and tier markets, for finishing by the `spillway` run's end (see
    /// `capped_bound`), or why it was not computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capped_bound: Option<crate::capped_bound::CappedBoundReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capped_bound_skipped: Option<String>,
    pub spot: SpotReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predictive: Option<PredictiveReport>,
    /// References not run on this config, with why (see `policies::skipped_for`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped_policies: Vec<SkippedPolicy>,
    /// When any job is elastic: the `spillway` run against the same jobs rigid (`elastic_cmp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elastic: Option<crate::elastic_cmp::ElasticVsRigid>,
}

/// A reference a report left out, and why.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SkippedPolicy {
    pub policy: String,
    pub why: String,
}

/// A table of samples over time. The first column is `time_s` (seconds from the start of the trace); the others
/// are named `demand:queued_gpus`, `demand:running_gpus`, `pool:<name>:capacity_gpus`, `pool:<name>:busy_gpus`,
/// `pool:<name>:nodes`, `cost:fixed`, `cost:on_demand`, `cost:spot` (cumulative USD), `spot:ready_nodes`,
/// `spot:requested_nodes`, and, when any job is elastic, `elastic:gpus`, `elastic:fewest_gpus` and
/// `elastic:most_gpus` (GPUs running elastic attempts hold, and would hold at their fewest and at their most
/// workers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimeSeries {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<f64>>,
}

impl Report {
    /// Returns whether `run`'s cost compares with the others': it finished every job it was given, and completed as
    /// many as the run that completed most (a run that refused or failed jobs did less work).
    pub fn comparable(&self, run: &RunReport) -> bool {
        let most = self.runs.iter().map(|r| r.jobs_completed).max().unwrap_or(0);
        run.jobs_unfinished == 0 && run.jobs_completed >= most
    }
}

/// Mean and percentiles (nearest rank) of `values`; all zero when empty.
pub fn stats(values: &[f64]) -> Stats {
    if values.is_empty() {
        return Stats::default();
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        let rank = (q * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    };
    Stats { mean: v.iter().sum::<f64>() / v.len() as f64, p50: pick(0.50), p95: pick(0.95), p99: pick(0.99) }
}
