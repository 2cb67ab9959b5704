//! The cluster configuration (TOML): tiers, teams, instance types, pools, scheduled policies and engine policy.
//! [`Config::parse`] reads and validates it; every error names the key and, where it can, the line.

mod budget;
mod finite;
mod keys;
mod locate;
mod network;
mod prometheus;
pub mod schema;
mod secs;
mod show;
mod validate;
mod warnings;

use serde::Deserialize;
use std::collections::BTreeMap;

pub use budget::{Alerts, Budget, Period};
pub use finite::{NonFinite, first_non_finite};
pub use network::{EgressPrice, EgressTable, MAX_TRANSFER_MS, Network, check_region};
pub use prometheus::Prometheus;
pub use secs::parse as parse_duration;
pub use validate::{ConfigError, MAX_POOL_NODES};

/// Where a pool's nodes come from and how they are paid for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Market {
    /// On-prem or reserved nodes listed in the config; their cost is amortized per GPU-hour.
    Fixed,
    /// Cloud nodes billed at the on-demand price.
    OnDemand,
    /// Cloud nodes billed at the spot price; they can be reclaimed.
    Spot,
}

impl Market {
    /// Returns the stable name used in reports and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Market::Fixed => "fixed",
            Market::OnDemand => "on_demand",
            Market::Spot => "spot",
        }
    }
    /// Returns the index of the market in `[fixed, on_demand, spot]` arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A tier as written in the config; absent fields take the built-in defaults of the tier of the same name
/// (`p0`, `p1`, `p2`), so `[tiers.p1] queue_wait_slo_s = 300` changes only that.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSpec {
    pub priority: Option<u32>,
    pub markets: Option<Vec<Market>>,
    #[serde(default, deserialize_with = "secs::de_opt")]
    pub queue_wait_slo_s: Option<f64>,
    pub interruptible: Option<bool>,
    pub preemptible: Option<bool>,
    #[serde(default, deserialize_with = "secs::de_opt")]
    pub checkpoint_interval_s: Option<f64>,
    #[serde(default, deserialize_with = "secs::de_opt")]
    pub burst_after_s: Option<f64>,
    #[serde(default, deserialize_with = "secs::de_opt")]
    pub burst_wait_per_gpu_hour_s: Option<f64>,
    #[serde(default, deserialize_with = "secs::de_opt")]
    pub burst_wait_max_s: Option<f64>,
    pub burst_early: Option<bool>,
    #[serde(default, deserialize_with = "secs::de_opt")]
    pub spot_fallback_after_s: Option<f64>,
    #[serde(default, deserialize_with = "secs::de_opt")]
    pub checkpoint_time_s: Option<f64>,
    pub max_spot_interruptions: Option<u32>,
}

/// A resolved tier: what the scheduler and autoscaler read.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Tier {
    #[serde(skip_serializing)]
    pub name: String,
    /// Lower runs first (`p0` = 0).
    pub priority: u32,
    /// Markets this tier may run on; spot only for interruptible jobs.
    pub markets: Vec<Market>,
    /// Queue wait after which a job of this tier counts as an SLO miss, and may preempt lower tiers.
    pub queue_wait_slo_s: f64,
    /// Whether jobs of this tier may run on spot and be preempted unless they say otherwise.
    pub interruptible: bool,
    /// Whether higher tiers may preempt this tier's jobs.
    pub preemptible: bool,
    /// How often jobs of this tier checkpoint unless they say otherwise; `None`: never (all work is lost).
    pub checkpoint_interval_s: Option<f64>,
    /// How long a job waits for fixed capacity before cloud capacity is bought for it (the fixed part of its
    /// waiting budget, which the `wait_budget` module works out).
    pub burst_after_s: f64,
    /// Further wait per GPU-hour of the job's expected work (GPUs x expected duration): large jobs wait longer for
    /// owned capacity, small ones burst sooner (0: every job waits `burst_after_s`).
    pub burst_wait_per_gpu_hour_s: f64,
    /// The most a job's waiting budget may reach (infinite by default: left out of `config show --effective`).
    #[serde(skip_serializing_if = "not_finite")]
    pub burst_wait_max_s: f64,
    /// A job inside its waiting budget stops waiting, and cloud capacity is bought for it, while no owned GPUs
    /// (free now, or of jobs expected to end by then) could hold all its workers before the budget ends, as if no
    /// job ahead of it came first: it would not get owned capacity in time anyway.
    pub burst_early: bool,
    /// How long an interruptible job waits for spot before on-demand capacity is bought for it (p2: never, an
    /// infinite wait, which TOML configs cannot write: left out of `config show --effective`).
    #[serde(skip_serializing_if = "not_finite")]
    pub spot_fallback_after_s: f64,
    /// Seconds a job needs to write a checkpoint when signalled (on an interruption notice or a migration).
    pub checkpoint_time_s: f64,
    /// After this many spot interruptions a job of a tier that may use on-demand moves there; `None`: never.
    pub max_spot_interruptions: Option<u32>,
}

/// A team: fair-share weight and an optional hard quota on GPUs in use.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Team {
    pub name: String,
    /// Most GPUs the team's jobs may hold at once; absent means no cap.
    pub quota_gpus: Option<u32>,
    /// Fair-share weight among teams of the same tier.
    #[serde(default = "one")]
    pub weight: f64,
}

/// A cloud instance type and its prices.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InstanceType {
    pub name: String,
    pub gpus: u32,
    pub gpu_model: String,
    pub on_demand_usd_per_hour: f64,
    /// Absent: no spot market for this type.
    pub spot_usd_per_hour: Option<f64>,
    /// vCPUs of one node, for the account quotas (`[[quotas]]`) that count this type.
    #[serde(default)]
    pub vcpus: Option<u32>,
}

/// An account limit on cloud capacity: at most `max_vcpus` vCPUs of nodes of `instance_types` in `market` alive
/// at once (a cloud's per-family quota; the scale-out planner never plans beyond it).
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    pub name: String,
    pub market: Market,
    pub instance_types: Vec<String>,
    pub max_vcpus: u32,
}

impl Pool {
    /// Returns whether the pool acts on GPU utilization (target tracking or step-scaling bands): the one rule by
    /// which the daemon and the simulator decide whose utilization samples to feed the engine.
    pub fn uses_utilization(&self) -> bool {
        self.target_gpu_utilization.is_some() || !self.step_scaling.is_empty()
    }
}

impl InstanceType {
    /// Returns whether one node of this type holds a worker of `g` GPUs of `model`.
    pub(crate) fn holds(&self, g: u32, model: Option<&str>) -> bool {
        self.gpus >= g && model_fits(model, &self.gpu_model)
    }

    /// Returns the hourly price of one node in `market`, if it is sold there.
    pub fn price_usd_per_hour(&self, market: Market) -> Option<f64> {
        match market {
            Market::OnDemand => Some(self.on_demand_usd_per_hour),
            Market::Spot => self.spot_usd_per_hour,
            Market::Fixed => None,
        }
    }
}

/// A group of identical fixed nodes.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FixedNodes {
    pub count: u32,
    pub gpus: u32,
    #[serde(default = "any_model")]
    pub gpu_model: String,
}

/// A pool of one market. Fixed pools list `nodes` and `gpu_usd_per_hour`; cloud pools list `instance_types`.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub name: String,
    pub market: Market,
    /// Fixed pools: the nodes.
    #[serde(default)]
    pub nodes: Vec<FixedNodes>,
    /// Fixed pools: amortized price per GPU-hour, paid whether used or not.
    #[serde(default)]
    pub gpu_usd_per_hour: f64,
    /// Cloud pools: allowed instance types, in preference order (ties in price go to the earlier one).
    #[serde(default)]
    pub instance_types: Vec<String>,
    #[serde(default)]
    pub min_nodes: u32,
    #[serde(default)]
    pub max_nodes: u32,
    /// Expected seconds from launch to a usable node (the simulator's median).
    #[serde(default = "default_boot_s", deserialize_with = "secs::de")]
    pub boot_latency_s: f64,
    /// Seconds a node stays idle before it is removed.
    #[serde(default = "default_idle_s", deserialize_with = "secs::de")]
    pub idle_timeout_s: f64,
    #[serde(default = "default_out_cooldown_s", deserialize_with = "secs::de")]
    pub scale_out_cooldown_s: f64,
    #[serde(default = "default_in_cooldown_s", deserialize_with = "secs::de")]
    pub scale_in_cooldown_s: f64,
    /// Largest scale-out per action as a fraction of the pool's current nodes.
    #[serde(default = "half")]
    pub max_step_fraction: f64,
    /// Scale-out per action may always reach this many nodes, so a pool grows from zero.
    #[serde(default = "two")]
    pub min_step_nodes: u32,
    /// Protect every node of the pool from scale-in.
    #[serde(default)]
    pub scale_in_protection: bool,
    /// Simulator: most nodes of each instance type the cloud will run at once (absent: unlimited).
    #[serde(default)]
    pub capacity: BTreeMap<String, u32>,
    /// Simulator: probability that a launch fails for a transient reason.
    #[serde(default)]
    pub launch_failure_rate: f64,
    /// Simulator: log-normal sigma of the boot latency around its median.
    #[serde(default = "default_jitter")]
    pub boot_jitter: f64,
    /// Spot pools: seconds between an interruption notice and the reclaim (AWS 120, GCP and Azure 30).
    #[serde(default = "default_notice_s", deserialize_with = "secs::de")]
    pub interruption_notice_s: f64,
    /// Simulator: Poisson interruptions per node-hour of each spot node (0: none unless a trace drives them).
    #[serde(default)]
    pub interruption_rate_per_hour: f64,
    /// Target tracking: hold the pool's average GPU utilization (0-1, from `MetricSample` events) at this value;
    /// its proposal raises the pool's min (queue-driven scaling still adds what waiting jobs need).
    #[serde(default)]
    pub target_gpu_utilization: Option<f64>,
    /// Seconds after a node is ready before its utilization counts for target tracking.
    #[serde(default = "default_warmup_s", deserialize_with = "secs::de")]
    pub utilization_warmup_s: f64,
    /// Where target tracking and step scaling read utilization: a PromQL query against `[prometheus]` (its
    /// series name nodes by `node_label`, or it is one value for the pool; shares 0-1). Absent: the agents'
    /// samples. A failed or stale query never scales the pool in.
    #[serde(default)]
    pub utilization_query: Option<String>,
    /// Step scaling on the pool's average GPU utilization: bands held for a period add or remove nodes.
    #[serde(default)]
    pub step_scaling: Vec<StepBandConfig>,
    /// Predictive scaling from a forecast of the pool's GPU demand.
    #[serde(default)]
    pub predictive: Option<PredictiveConfig>,
    /// Who asks for this pool's nodes: Spillway's own queue (the default), or Slurm, whose `ResumeProgram`
    /// names the nodes it wants ([`crate::Event::NodeRequested`]); such a pool runs none of Spillway's jobs.
    #[serde(default)]
    pub scheduler: PoolScheduler,
    /// The cloud region its nodes run in (`us-east-1`): a job whose data or last checkpoint is in another region
    /// pays `[network]` egress and transfer time to start here. Absent: moves to and from it are free.
    #[serde(default)]
    pub region: Option<String>,
    /// The zone within the region (reports and the provider's launch placement; moves between zones are free).
    #[serde(default)]
    pub zone: Option<String>,
    /// Spot pools: this pool's own spot price per node-hour of an instance type (a zone's price), over the
    /// instance type's `spot_usd_per_hour`.
    #[serde(default)]
    pub spot_usd_per_hour: BTreeMap<String, f64>,
}

/// Who asks for a pool's nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolScheduler {
    /// Spillway's queue: nodes come and go with its jobs.
    #[default]
    Spillway,
    /// Slurm: a node is launched when Slurm resumes it by name and goes when Slurm suspends it.
    Slurm,
}

impl Pool {
    /// Returns whether another scheduler drives this pool (its nodes are bought and released at its request).
    pub fn external(&self) -> bool {
        self.scheduler != PoolScheduler::Spillway
    }
    /// Returns whether Spillway itself launches and retires this pool's nodes: a cloud pool no other scheduler
    /// drives (scale-in, the min and the scale-out planner act only on these).
    pub fn launched(&self) -> bool {
        self.market != Market::Fixed && !self.external()
    }
}

/// Whether predictive scaling acts or only records what it would do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PredictiveMode {
    #[default]
    Act,
    ForecastOnly,
}

/// Predictive scaling of a pool: demand is bucketed, forecast (chosen by validation error against a
/// seasonal-naive reference) and acted on one boot latency plus `buffer_s` ahead, after a day of history.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PredictiveConfig {
    #[serde(default)]
    pub mode: PredictiveMode,
    #[serde(default = "default_buffer_s", deserialize_with = "secs::de")]
    pub buffer_s: f64,
    #[serde(default = "default_bucket_s", deserialize_with = "secs::de")]
    pub bucket_s: f64,
}

/// A step-scaling band: when the pool's average GPU utilization stays `above` (or `below`) a value for `hold_s`,
/// add `adjust_nodes` nodes (negative: remove).
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StepBandConfig {
    pub above: Option<f64>,
    pub below: Option<f64>,
    #[serde(default = "default_hold_s", deserialize_with = "secs::de")]
    pub hold_s: f64,
    pub adjust_nodes: i32,
}

/// A scheduled policy: a cron window (in an IANA time zone) that sets a pool's min, max and/or desired nodes
/// while it is open; when it closes the pool's own values apply again.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    pub pool: String,
    /// Five-field cron expression: when the window opens.
    pub cron: String,
    #[serde(default = "utc")]
    pub timezone: String,
    /// How long the window stays open.
    #[serde(deserialize_with = "secs::de")]
    pub duration_s: f64,
    /// The pool keeps at least this many nodes in the window.
    #[serde(default)]
    pub min_nodes: Option<u32>,
    /// The pool holds at most this many nodes in the window (idle nodes above it go at once).
    #[serde(default)]
    pub max_nodes: Option<u32>,
    /// The pool is brought to at least this many nodes when the window opens (other policies may add more).
    #[serde(default)]
    pub desired_nodes: Option<u32>,
}

/// Engine-wide policy switches and limits.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Whether higher tiers may preempt strictly lower, preemptible tiers.
    #[serde(default = "yes")]
    pub preemption: bool,
    /// Whether small jobs may start on nodes held back for a waiting larger job (off: strict reservation).
    #[serde(default = "yes")]
    pub backfill: bool,
    /// Most queued jobs examined per scheduling pass.
    #[serde(default = "default_scan_limit")]
    pub scan_limit: usize,
    /// Most blocked jobs that hold back nodes for themselves per pass.
    #[serde(default = "default_reservations")]
    pub max_reservations: usize,
    /// Most nodes examined per job when looking for preemption victims.
    #[serde(default = "default_victim_nodes")]
    pub preemption_node_limit: usize,
    /// Target share of spot among cloud GPUs bought for interruptible work (e.g. 0.8); absent: spot first always.
    #[serde(default)]
    pub spot_share: Option<f64>,
    /// Most of a spot pool's nodes one instance type may hold, so one reclaim cannot take everything.
    #[serde(default = "one")]
    pub max_offering_share: f64,
    /// Extra seconds of slack a deadline job keeps before it moves to on-demand (the `safe` policy; `greedy`
    /// keeps none).
    #[serde(default = "default_deadline_margin_s", deserialize_with = "secs::de")]
    pub deadline_margin_s: f64,
    /// How deadline jobs leave spot. Both spend their slack on spot first (waiting for it while it cannot be had)
    /// and move to on-demand for good when the slack runs out: `safe` keeps room for an on-demand boot, a
    /// checkpoint, the work one more interruption can lose and `deadline_margin_s`; `greedy` only for the boot
    /// (the naive spot-until-late reference).
    #[serde(default)]
    pub deadline_policy: DeadlinePolicy,
    /// Trips to on-demand and back to spot a `safe` deadline job keeps slack for: once its slack is down to that
    /// many times what it keeps at its pin (plus the pin's own), it stops waiting for spot, runs on on-demand
    /// while spot cannot be had and moves back to spot when spot can take it. 0: it waits for spot until its
    /// slack pins it to on-demand for good.
    #[serde(default = "default_reserve_trips")]
    pub deadline_reserve_trips: u32,
    /// Spot interruptions of one offering within an hour that make it back off like a capacity failure.
    #[serde(default = "default_interruption_backoff")]
    pub interruption_backoff_after: u32,
    /// An elastic job grows no sooner than this after its last start or change of width (each change restarts
    /// it from its checkpoint).
    #[serde(default = "default_elastic_interval_s", deserialize_with = "secs::de")]
    pub elastic_resize_interval_s: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            preemption: true,
            backfill: true,
            scan_limit: default_scan_limit(),
            max_reservations: default_reservations(),
            preemption_node_limit: default_victim_nodes(),
            spot_share: None,
            max_offering_share: 1.0,
            deadline_margin_s: default_deadline_margin_s(),
            interruption_backoff_after: default_interruption_backoff(),
            deadline_policy: DeadlinePolicy::Safe,
            deadline_reserve_trips: default_reserve_trips(),
            elastic_resize_interval_s: default_elastic_interval_s(),
        }
    }
}

/// How deadline jobs leave spot (see [`Policy::deadline_policy`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadlinePolicy {
    #[default]
    Safe,
    Greedy,
}

/// Cluster identity and the simulator's calendar.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    #[serde(default = "default_cluster_name")]
    pub name: String,
    /// RFC 3339 instant that second 0 of a trace maps to (cron windows use it).
    #[serde(default = "default_start")]
    pub start: String,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection { name: default_cluster_name(), start: default_start() }
    }
}

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    cluster: ClusterSection,
    #[serde(default)]
    tiers: BTreeMap<String, TierSpec>,
    #[serde(default)]
    teams: Vec<Team>,
    #[serde(default)]
    instance_types: Vec<InstanceType>,
    #[serde(default)]
    pools: Vec<Pool>,
    #[serde(default)]
    schedules: Vec<Schedule>,
    #[serde(default)]
    policy: Policy,
    #[serde(default)]
    quotas: Vec<Quota>,
    #[serde(default)]
    budgets: Vec<Budget>,
    #[serde(default)]
    alerts: Alerts,
    #[serde(default)]
    prometheus: Option<Prometheus>,
    #[serde(default)]
    provider: Option<toml::Table>,
    #[serde(default)]
    slurm: Option<toml::Table>,
    #[serde(default)]
    network: Network,
}

/// A validated configuration. Tiers are sorted by priority; names are unique; every reference resolves.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub cluster: ClusterSection,
    /// Start of the simulated calendar, ms since the Unix epoch.
    pub start_ms: i64,
    pub tiers: Vec<Tier>,
    pub teams: Vec<Team>,
    pub instance_types: Vec<InstanceType>,
    pub pools: Vec<Pool>,
    pub schedules: Vec<Schedule>,
    pub policy: Policy,
    /// Account quotas on cloud capacity.
    pub quotas: Vec<Quota>,
    /// Team budgets per UTC day or month (`[[budgets]]`).
    pub budgets: Vec<Budget>,
    /// Where budget alerts go besides the event log (`[alerts]`, read by the daemon's shell).
    pub alerts: Alerts,
    /// The Prometheus server pools with a `utilization_query` read (`[prometheus]`, queried by the daemon's shell).
    pub prometheus: Option<Prometheus>,
    /// The `[provider]` table: where nodes come from (`kind = "local"`, the default, or `"aws"`), read by the
    /// daemon's shell, never by the engine; absent: the local provider.
    pub provider: Option<toml::Table>,
    /// The `[slurm]` table: how the daemon talks to Slurm and maps its partitions to tiers, read by the daemon's
    /// shell, never by the engine; absent: no Slurm.
    pub slurm: Option<toml::Table>,
    /// `[network]`: egress prices and bandwidth between regions.
    pub network: Network,
    /// What a move between two pools' regions costs (built from `network` when some pool names a region).
    pub egress: EgressTable,
}

impl Config {
    /// Parses and validates a TOML config; `file` names it in errors. A NaN or infinite number anywhere is
    /// refused with its key path (`pools[1].idle_timeout_s: nan is not a number`).
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
        // Every unknown key and wrong type at once, before serde stops at the first.
        if let Some(all) = ConfigError::all(keys::check(file, text)) {
            return Err(all);
        }
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::from_toml(file, text, &e))?;
        if let Some(bad) = first_non_finite(text) {
            let (message, line) = (bad.message(), Some(bad.line));
            return Err(ConfigError { file: file.into(), message, key: bad.key, line, column: None, also: Vec::new() });
        }
        validate::resolve(file, text, raw)
    }

    /// Returns the price per node-hour of instance type `it` in `pool`: the pool's own spot price when it sets
    /// one, else the type's price in the pool's market (`None`: not sold there).
    pub fn offer_price(&self, pool: usize, it: usize) -> Option<f64> {
        let (p, t) = (&self.pools[pool], &self.instance_types[it]);
        match p.spot_usd_per_hour.get(&t.name) {
            Some(&price) if p.market == Market::Spot => Some(price),
            _ => t.price_usd_per_hour(p.market),
        }
    }

    /// Returns (USD, ms) to move `gb` GB of a job's data from region `from` into `pool`; nothing when either
    /// region is unknown or they are the same.
    pub fn move_cost(&self, from: Option<&str>, pool: usize, gb: f64) -> (f64, i64) {
        match (from, self.pools[pool].region.as_deref()) {
            (Some(a), Some(b)) => self.egress.cost(a, b, gb),
            _ => (0.0, 0),
        }
    }

    /// Returns the tier with `name`.
    pub fn tier_index(&self, name: &str) -> Option<usize> {
        self.tiers.iter().position(|t| t.name == name)
    }

    /// Returns the indices of pool `pool`'s instance types, in its order of preference (validation refuses a name
    /// the config does not define; one would be skipped).
    pub(crate) fn pool_types(&self, pool: usize) -> impl Iterator<Item = usize> + '_ {
        self.pools[pool].instance_types.iter().filter_map(|n| self.instance_type_index(n))
    }

    /// Returns whether some instance type of `pool` holds a worker of `g` GPUs of `model`.
    pub(crate) fn pool_holds(&self, pool: usize, g: u32, model: Option<&str>) -> bool {
        self.pool_types(pool).any(|i| self.instance_types[i].holds(g, model))
    }

    /// Returns the index of the instance type with `name`.
    pub fn instance_type_index(&self, name: &str) -> Option<usize> {
        self.instance_types.iter().position(|t| t.name == name)
    }

    /// Returns the largest GPU count of any node a job of `tier` could ever run on, for `gpu_model` (or any).
    pub fn largest_node_gpus(&self, tier: usize, gpu_model: Option<&str>) -> u32 {
        let markets = &self.tiers[tier].markets;
        let fits = |model: &str| model_fits(gpu_model, model);
        let mut best = 0;
        for (i, pool) in self.pools.iter().enumerate().filter(|(_, p)| markets.contains(&p.market) && !p.external()) {
            for n in pool.nodes.iter().filter(|n| fits(&n.gpu_model)) {
                best = best.max(n.gpus);
            }
            for ix in self.pool_types(i) {
                let it = &self.instance_types[ix];
                if fits(&it.gpu_model) && self.offer_price(i, ix).is_some() {
                    best = best.max(it.gpus);
                }
            }
        }
        best
    }
}

/// The largest gang one pool could ever hold, from [`Config::largest_gang`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GangRoom {
    /// Workers the pool could hold at once with all its nodes empty (saturated at `u32::MAX`).
    pub workers: u32,
    /// Index into `Config::pools`.
    pub pool: usize,
    /// Nodes counted: a fixed pool's nodes of a matching model that hold a worker; a cloud pool's `max_nodes`.
    pub nodes: u32,
    /// A cloud pool's workers per node (its best instance type); `None` for a fixed pool, whose nodes may differ.
    pub per_node: Option<u32>,
}

impl Config {
    /// Returns the largest gang of workers of `gpus_per_worker` GPUs (of `gpu_model`, or any) that a job of `tier`
    /// could ever run, with the pool that holds it (the earlier pool on a tie), or `None` when no pool the job may
    /// use holds even one worker (also for an unknown tier or 0 GPUs). It mirrors the scheduler's placement: a gang
    /// runs within one pool and several workers may share a node, so a fixed pool holds the sum over its nodes of
    /// a matching model of floor(node GPUs / gpus_per_worker), and a cloud pool `max_nodes` times the best
    /// floor(GPUs / gpus_per_worker) of its instance types sold in its market with a matching model. Spot pools
    /// count only for an `interruptible` job. The bounds are the config's as they stand (a shell's
    /// `SetPoolBounds` changes them in the engine's copy), not those of schedule windows, which close again.
    pub fn largest_gang(
        &self,
        tier: usize,
        gpus_per_worker: u32,
        gpu_model: Option<&str>,
        interruptible: bool,
    ) -> Option<GangRoom> {
        let markets = &self.tiers.get(tier)?.markets;
        if gpus_per_worker == 0 {
            return None;
        }
        let usable = |m: Market| markets.contains(&m) && (m != Market::Spot || interruptible);
        let mut best: Option<GangRoom> = None;
        for (i, pool) in self.pools.iter().enumerate().filter(|(_, p)| usable(p.market) && !p.external()) {
            let room = match pool.market {
                Market::Fixed => self.fixed_gang_room(i, gpus_per_worker, gpu_model),
                _ => self.cloud_gang_room(i, gpus_per_worker, gpu_model),
            };
            if room.workers > 0 && best.is_none_or(|b| room.workers > b.workers) {
                best = Some(room);
            }
        }
        best
    }

    /// Returns what fixed pool `pool` holds of workers of `g` (> 0) GPUs of `model`, all its nodes empty.
    fn fixed_gang_room(&self, pool: usize, g: u32, model: Option<&str>) -> GangRoom {
        // Counts in u64: a group's count times its workers per node can pass u32 in a hostile config.
        let (mut workers, mut nodes) = (0u64, 0u64);
        for n in self.pools[pool].nodes.iter().filter(|n| model_fits(model, &n.gpu_model)) {
            let per = u64::from(n.gpus / g);
            if per > 0 {
                workers = workers.saturating_add(u64::from(n.count).saturating_mul(per));
                nodes = nodes.saturating_add(u64::from(n.count));
            }
        }
        GangRoom { workers: saturate(workers), pool, nodes: saturate(nodes), per_node: None }
    }

    /// Returns what cloud pool `pool` could hold of workers of `g` (> 0) GPUs of `model` at its max, all of its
    /// nodes of its best type for them.
    fn cloud_gang_room(&self, pool: usize, g: u32, model: Option<&str>) -> GangRoom {
        let p = &self.pools[pool];
        let per_node = self
            .pool_types(pool)
            .filter(|&i| self.offer_price(pool, i).is_some())
            .map(|i| &self.instance_types[i])
            .filter(|it| model_fits(model, &it.gpu_model))
            .map(|it| it.gpus / g)
            .max()
            .unwrap_or(0);
        let workers = u64::from(p.max_nodes) * u64::from(per_node);
        GangRoom { workers: saturate(workers), pool, nodes: p.max_nodes, per_node: Some(per_node) }
    }
}

/// Returns `n` as a `u32`, saturating.
fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The model name fixed nodes get when the config names none; jobs of any GPU type fit it.
pub const ANY_MODEL: &str = "any";

/// Returns the built-in tier defaults: `p0` core training, `p1` experiments, `p2` preprocessing and evaluation.
pub fn default_tiers() -> Vec<Tier> {
    vec![
        Tier {
            name: "p0".into(),
            priority: 0,
            markets: vec![Market::Fixed, Market::OnDemand],
            queue_wait_slo_s: 0.0,
            interruptible: false,
            preemptible: false,
            checkpoint_interval_s: Some(3600.0),
            burst_after_s: 0.0,
            burst_wait_per_gpu_hour_s: 0.0,
            burst_wait_max_s: f64::INFINITY,
            burst_early: false,
            spot_fallback_after_s: 0.0,
            checkpoint_time_s: 120.0,
            max_spot_interruptions: None,
        },
        Tier {
            name: "p1".into(),
            priority: 1,
            markets: vec![Market::Fixed, Market::Spot, Market::OnDemand],
            queue_wait_slo_s: 600.0,
            interruptible: true,
            preemptible: true,
            checkpoint_interval_s: Some(1800.0),
            burst_after_s: 60.0,
            burst_wait_per_gpu_hour_s: 0.0,
            burst_wait_max_s: f64::INFINITY,
            burst_early: false,
            spot_fallback_after_s: 300.0,
            checkpoint_time_s: 60.0,
            max_spot_interruptions: Some(3),
        },
        Tier {
            name: "p2".into(),
            priority: 2,
            markets: vec![Market::Fixed, Market::Spot],
            queue_wait_slo_s: 3600.0,
            interruptible: true,
            preemptible: true,
            checkpoint_interval_s: Some(900.0),
            burst_after_s: 300.0,
            burst_wait_per_gpu_hour_s: 0.0,
            burst_wait_max_s: f64::INFINITY,
            burst_early: false,
            spot_fallback_after_s: f64::INFINITY,
            checkpoint_time_s: 60.0,
            max_spot_interruptions: None,
        },
    ]
}

fn not_finite(v: &f64) -> bool {
    !v.is_finite()
}
fn one() -> f64 {
    1.0
}
fn half() -> f64 {
    0.5
}
fn two() -> u32 {
    2
}
fn yes() -> bool {
    true
}
fn any_model() -> String {
    ANY_MODEL.into()
}
fn utc() -> String {
    "UTC".into()
}
fn default_boot_s() -> f64 {
    240.0
}
fn default_idle_s() -> f64 {
    600.0
}
fn default_out_cooldown_s() -> f64 {
    10.0
}
fn default_in_cooldown_s() -> f64 {
    60.0
}
fn default_jitter() -> f64 {
    0.25
}
fn default_buffer_s() -> f64 {
    300.0
}
fn default_bucket_s() -> f64 {
    600.0
}
fn default_hold_s() -> f64 {
    300.0
}
fn default_warmup_s() -> f64 {
    300.0
}
fn default_notice_s() -> f64 {
    120.0
}
fn default_elastic_interval_s() -> f64 {
    600.0
}

fn default_deadline_margin_s() -> f64 {
    600.0
}
fn default_reserve_trips() -> u32 {
    4
}
fn default_interruption_backoff() -> u32 {
    2
}
fn default_scan_limit() -> usize {
    5000
}
fn default_reservations() -> usize {
    8
}
fn default_victim_nodes() -> usize {
    256
}
fn default_cluster_name() -> String {
    "spillway".into()
}
fn default_start() -> String {
    "2025-01-06T00:00:00Z".into()
}

/// Returns whether a node of `model` can hold a job asking for `want` (one model, or alternatives separated by
/// `|`, such as `A100|H100`).
pub(crate) fn model_fits(want: Option<&str>, model: &str) -> bool {
    model == ANY_MODEL || want.is_none_or(|w| w.split('|').any(|m| m.trim() == model))
}

impl Pool {
    /// Returns the pool's step-scaling policy (cooldowns from the pool) with fresh band state, or `None` without bands.
    pub(crate) fn step_policy(
        &self,
    ) -> Option<(crate::autoscale::step_scaling::StepScaling, crate::autoscale::step_scaling::StepState)> {
        use crate::autoscale::step_scaling::{Bound, StepBand, StepScaling, StepState};
        let pool = self;
        if pool.step_scaling.is_empty() {
            return None;
        }
        let bands = pool
            .step_scaling
            .iter()
            .map(|b| StepBand {
                when: b.above.map_or_else(|| Bound::Below(b.below.unwrap_or(0.0)), Bound::Above),
                hold_s: b.hold_s,
                adjust_nodes: b.adjust_nodes,
            })
            .collect();
        let policy = StepScaling {
            metric: "gpu_utilization".into(),
            bands,
            scale_out_cooldown_s: pool.scale_out_cooldown_s,
            scale_in_cooldown_s: pool.scale_in_cooldown_s,
        };
        let state = StepState::new(&policy);
        Some((policy, state))
    }
}
