//! The engine's state: what it knows (config, queue, cluster, per-pool policy state) and the actions it has
//! queued for the shell. The decision passes (`schedule`, `rebalance`, `scale`, `scale_out`, `policies`) and the
//! engine's API (`engine`) are `impl Engine` blocks over it; this module depends on none of them.

use crate::cluster::Cluster;
use crate::config::Config;
use crate::event::Action;
use crate::model::JobId;
use crate::queue::Queue;
use crate::time::Time;
use std::collections::VecDeque;

/// The engine. Deterministic: the same config, start time and event sequence give the same actions.
#[derive(Clone)]
pub struct Engine {
    pub(crate) cfg: Config,
    pub(crate) now: Time,
    pub(crate) queue: Queue,
    pub(crate) c: Cluster,
    pub(crate) actions: VecDeque<Action>,
    /// Whether decisions are recorded as `Action::Record` (a simulator may turn this off for speed).
    pub(crate) record: bool,
    /// Per tier: pools the tier may use, fixed first, then cheapest price per GPU-hour first.
    pub(crate) pool_order: Vec<Vec<usize>>,
    pub(crate) schedules: Vec<crate::window::Window>,
    /// Per pool: step-scaling policy and its band state (pools without bands have none).
    pub(crate) steps:
        Vec<Option<(crate::autoscale::step_scaling::StepScaling, crate::autoscale::step_scaling::StepState)>>,
    /// Per pool: demand history and forecaster for predictive scaling.
    pub(crate) history: Vec<crate::autoscale::history::DemandHistory>,
    /// Per pool: whether a utilization sample came since step scaling last looked. Step-scaling bands are held
    /// over samples, so they are observed once per batch of samples, not at every pass (a pass that an unrelated
    /// wake-up causes would otherwise start or finish a hold).
    pub(crate) fresh_samples: Vec<bool>,
    /// Per pool: what step scaling proposed at its last batch of samples (it stands until the next).
    pub(crate) step_proposals: Vec<Option<crate::autoscale::Proposal>>,
    /// Per pool with a utilization query: the error of its last answer, if it was one (see
    /// [`crate::Event::PoolMetric`]), and why its signal was missing at the last pass (`None`: it was there).
    pub(crate) signal_error: Vec<Option<String>>,
    pub(crate) signal_lost: Vec<Option<String>>,
    /// Per pool: why it did not grow for the demand of the last pass (a `scale_out_blocked` decision is recorded
    /// when that changes).
    pub(crate) not_grown: Vec<Option<crate::growth::NotGrown>>,
    /// The blocked jobs (in queue order) and the spot demand of running jobs the last pass planned scale-out
    /// for: the snapshot what-if questions are asked about.
    pub(crate) last_blocked: Vec<JobId>,
    /// How many of `last_blocked` the scheduling walk found (the rest are running jobs that move).
    pub(crate) last_walked: usize,
    pub(crate) last_shadow: Vec<(JobId, crate::access::Access)>,
    /// The nodes the last scheduling pass held back for blocked jobs before it turned quiet, (job, pool, node)
    /// sorted by job: the scale-out planner counts no job after one of them on its nodes, as the next pass holds
    /// them for it again (see `Pass::planner_holds`).
    pub(crate) holds: Vec<(JobId, usize, crate::model::NodeId)>,
    /// Which blocked jobs that pass held nodes back for: once the nodes booting for one are ready, the next pass
    /// holds them for it.
    pub(crate) reserving: Reserving,
    /// The last pass stopped where no job further on could start, preempt or buy: the jobs it did not reach
    /// wait for capacity as much as the blocked ones it did.
    pub(crate) last_settled: bool,
    /// This pass started jobs that change the fair-share order of blocked jobs it met before its last start.
    pub(crate) blocked_reordered: bool,
    /// Jobs a pass told they wait for owned capacity, by when their waiting budget ends: a job no pass reaches
    /// after that is told it waits for capacity.
    pub(crate) budget_ends: std::collections::BTreeSet<(Time, JobId)>,
    /// By job index: the entry of `budget_ends` it has, so a pass that tells it again adds none (a long queue
    /// waiting inside its budgets would otherwise search the set for every job at every pass).
    pub(crate) budget_noted: Vec<Option<Time>>,
    /// Nodes the cloud recommended moving off (rebalance recommendations), until they end or get their notice,
    /// each with when that came and the instant until which jobs that left it may still be writing their
    /// checkpoint there.
    pub(crate) at_risk: std::collections::BTreeMap<crate::model::NodeId, (Time, Time)>,
    /// For tests: search afresh for every job instead of remembering the shapes that found no room in a pass
    /// (see `shape`); the results must be the same.
    pub(crate) exhaustive: bool,
    pub(crate) dirty: bool,
    /// Jobs that entered the queue (submitted or requeued) since the last scheduling pass: one that pass never
    /// reached because nothing could start any more is told it waits for capacity.
    pub(crate) entered: Vec<crate::model::JobId>,
    pub(crate) next_wake: Option<Time>,
    /// Per `Config::budgets`: its period, opening spend and alerts raised (see `budget`).
    pub(crate) budgets: Vec<BudgetState>,
    /// Per team (index): a budget's hard cap holds, so no cloud capacity is bought for its work.
    pub(crate) capped: Vec<bool>,
    /// Elastic jobs started and perhaps still running (see `elastic`; ended ones are dropped when next looked at).
    pub(crate) elastic: std::collections::BTreeSet<JobId>,
}

impl Engine {
    /// Returns an engine for a validated config whose fixed nodes are ready at `now`.
    pub fn new(cfg: Config, now: Time) -> Engine {
        let c = Cluster::new(&cfg, now);
        let pool_order = (0..cfg.tiers.len()).map(|t| crate::access::pool_order(&cfg, t)).collect();
        let schedules = crate::window::Window::compile(&cfg);
        let steps = cfg.pools.iter().map(crate::config::Pool::step_policy).collect();
        let history = vec![crate::autoscale::history::DemandHistory::default(); cfg.pools.len()];
        let cfg_pools = cfg.pools.len();
        let cfg_budgets = cfg.budgets.len();
        Engine {
            queue: Queue::new(cfg.tiers.len()),
            cfg,
            now,
            c,
            actions: VecDeque::new(),
            record: true,
            pool_order,
            schedules,
            steps,
            history,
            fresh_samples: vec![false; cfg_pools],
            step_proposals: vec![None; cfg_pools],
            signal_error: vec![None; cfg_pools],
            signal_lost: vec![None; cfg_pools],
            not_grown: vec![None; cfg_pools],
            last_blocked: Vec::new(),
            last_walked: 0,
            holds: Vec::new(),
            reserving: Reserving::default(),
            last_shadow: Vec::new(),
            last_settled: false,
            blocked_reordered: false,
            budget_ends: std::collections::BTreeSet::new(),
            budget_noted: Vec::new(),
            at_risk: std::collections::BTreeMap::new(),
            exhaustive: false,
            dirty: true,
            entered: Vec::new(),
            next_wake: None,
            budgets: vec![BudgetState::default(); cfg_budgets],
            capped: Vec::new(),
            elastic: std::collections::BTreeSet::new(),
        }
    }
}

/// The earliest time the engine must wake, accumulated during a decision pass.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WakeAt(pub Option<Time>);

impl WakeAt {
    /// Asks to wake at `t` (keeps the earliest).
    pub fn at(&mut self, t: Time) {
        self.0 = Some(self.0.map_or(t, |w| w.min(t)));
    }
}

/// Where one budget stands: the period it is in, the team's cost when that began, and how many of its alert shares
/// were crossed in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BudgetState {
    pub period_start: Option<Time>,
    pub start_usd: f64,
    pub alerted: usize,
    /// The hard cap's start was announced in this period.
    pub cap_raised: bool,
}

/// Which blocked jobs a scheduling pass held nodes back for, as the scale-out planner can tell in a walk that
/// remembers and in one that searches afresh alike: exactly, for the jobs it found before it turned quiet; past
/// that point (where the two walks part), each multi-GPU blocked job in turn while reservations are left.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reserving {
    /// The jobs held for (or that would have been, where no node was free) before the walk turned quiet, sorted.
    pub jobs: Vec<JobId>,
    /// How many blocked jobs the walk had found, and how many reservations it had made, when it turned quiet
    /// (at its end, if it never did).
    pub blocked: usize,
    pub reservations: usize,
}
