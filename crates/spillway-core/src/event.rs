//! What goes into the engine (events), what comes out (actions), and the record of every decision.

use crate::model::{Exit, JobId, NodeId, PendingReason};
use crate::time::Time;
use serde::{Deserialize, Serialize};

/// Why a provider could not launch a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchError {
    /// The cloud has no capacity for this offering now.
    InsufficientCapacity,
    /// An account limit was reached.
    Quota,
    /// Anything that may work on a retry.
    Transient(String),
}

/// Something that happened, handed to [`crate::Engine::handle_event`] with the time it happened. Serializable so a
/// shell can log its inputs and rebuild the engine by replaying them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A requested node booted and is usable.
    NodeReady { node: NodeId },
    /// A requested node could not be launched.
    LaunchFailed { node: NodeId, error: LaunchError },
    /// The cloud will reclaim a (spot) node at `deadline`; its jobs should checkpoint and move.
    InterruptionNotice { node: NodeId, deadline: Time },
    /// The cloud says a (spot) node is at elevated risk of interruption: it takes no new work, and its jobs move
    /// once capacity that holds them is ready elsewhere (bought for them first).
    RebalanceRecommendation { node: NodeId },
    /// A node vanished without notice (heartbeat gone); its jobs must be requeued.
    NodeLost { node: NodeId },
    /// The daemon stopped this node's processes as it stopped: its jobs are requeued (`StopReason::Shutdown`); a
    /// cloud node ends now (its billing stops), an owned node stays (its agent comes back with the daemon).
    /// Nothing is decided until the next input, so no replacement is bought while the daemon is down.
    NodeStopped { node: NodeId },
    /// A job's attempt exited on its own; `success` is its exit status, `exit` how its process ended when known
    /// (a gang's first failed rank, else rank 0).
    JobExited {
        job: JobId,
        attempt: u32,
        success: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit: Option<Exit>,
    },
    /// The process running a job's attempt is gone though its node is fine (its agent was replaced, say): the
    /// job is requeued as on a lost node (`StopReason::NodeLost`) if that attempt is still its running one;
    /// otherwise the event is ignored.
    AttemptLost { job: JobId, attempt: u32 },
    /// A job reported a finished checkpoint in its current attempt.
    CheckpointDone { job: JobId, attempt: u32 },
    /// A node reported its GPU utilization (0-1), for metric-driven scaling.
    MetricSample { node: NodeId, gpu_utilization: f64 },
    /// What a pool's utilization query (`utilization_query`, PromQL) answered: a share (0-1) for each ready node
    /// of the pool it named, or `error`, why there is no answer (the query failed or timed out, or its values
    /// were unusable). Nodes it does not name have no sample. A pool whose signal is missing (an error, or a warm
    /// ready node without a sample) holds its size until the signal is back: no evidence never scales in.
    PoolMetric {
        pool: usize,
        samples: Vec<(NodeId, f64)>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A user protected (or unprotected) a node from scale-in.
    SetNodeProtection { node: NodeId, protected: bool },
    /// A user cancelled a job.
    CancelJob { job: JobId },
    /// A user changed a cloud pool's bounds (index into `Config::pools`); `None` keeps a bound.
    SetPoolBounds { pool: usize, min_nodes: Option<u32>, max_nodes: Option<u32> },
    /// The cloud's current spot price of an instance type (polled by the daemon, or a price trace): from now on
    /// every spot node of the offering costs this (running ones too: spot is billed at the current price), and
    /// offerings compare on it. With `pool`, the price of that pool's offering only (a zone's price); without, of
    /// every pool that sets no price of its own. Ignored for a type the config sells no spot of.
    SpotPrice {
        instance_type: String,
        usd_per_hour: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
    },
    /// A user protected (or unprotected) every node of a pool from scale-in.
    SetPoolProtection { pool: usize, protected: bool },
    /// Another scheduler (Slurm) asks for its node `name`: the engine buys the cheapest offering `tier` may use
    /// among `pools` (pools with `scheduler` set) with at least `gpus` GPUs of `gpu_model`, and books the node's
    /// whole cost to `team` and `tier`. A request it cannot meet comes back as [`Action::ReturnNode`]; `why` says
    /// what asked, for records. Refused for a name that already has a live node.
    NodeRequested {
        name: String,
        pools: Vec<String>,
        gpus: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpu_model: Option<String>,
        tier: String,
        team: String,
        why: String,
    },
    /// The scheduler gave its node `name` back (Slurm suspended it): the node is terminated. Refused for a name
    /// with no live node.
    NodeReleased { name: String },
}

/// Why a node goes back to the scheduler that asked for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReturnWhy {
    /// The cloud reclaims it at `deadline`: the jobs there should checkpoint and be requeued now.
    Interrupted { deadline: Time },
    /// It vanished (its instance or its heartbeat is gone).
    Lost,
    /// No offering it may use could be launched; the text says why.
    CannotLaunch(String),
}

impl std::fmt::Display for ReturnWhy {
    /// Says why, for people (the scheduler's node reason, records).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReturnWhy::Interrupted { .. } => write!(f, "spot interruption"),
            ReturnWhy::Lost => write!(f, "node lost"),
            ReturnWhy::CannotLaunch(why) => write!(f, "cannot launch: {why}"),
        }
    }
}

/// Why a job is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A job of a strictly higher tier needs its GPUs; it is requeued.
    Preempted { by: JobId },
    /// A user cancelled it.
    Cancelled,
    /// Its node was lost; it is requeued.
    NodeLost,
    /// Its spot node got an interruption notice; `checkpoint` says whether it can checkpoint within the notice.
    Interrupted { checkpoint: bool },
    /// Moved after a checkpoint to another market: off spot to on-demand because its deadline no longer leaves
    /// room for spot, or back to spot from on-demand.
    Migrated,
    /// The daemon stopped and ended its node's processes; it is requeued and runs again after the restart.
    Shutdown,
    /// An elastic job changes width: this attempt stops and the next starts at once on `to` workers.
    Resized { from: u32, to: u32 },
}

impl std::fmt::Display for StopReason {
    /// Says why an attempt stopped, for people (records, logs).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Preempted { by } => write!(f, "preempted for job {}", by.0),
            StopReason::Cancelled => write!(f, "cancelled"),
            StopReason::NodeLost => write!(f, "its node was lost"),
            StopReason::Interrupted { checkpoint: true } => write!(f, "spot interruption, told to checkpoint"),
            StopReason::Interrupted { checkpoint: false } => write!(f, "spot interruption, no time to checkpoint"),
            StopReason::Migrated => write!(f, "moved to another market (on-demand for its deadline, or back to spot)"),
            StopReason::Shutdown => write!(f, "the daemon stopped"),
            StopReason::Resized { from, to } => write!(f, "resized from {from} to {to} workers"),
        }
    }
}

impl std::fmt::Display for LaunchError {
    /// Says why a launch failed, for people.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchError::InsufficientCapacity => write!(f, "no capacity for this offering"),
            LaunchError::Quota => write!(f, "an account limit was reached"),
            LaunchError::Transient(why) => write!(f, "{why}"),
        }
    }
}

/// An effect the shell must carry out, read with [`crate::Engine::poll_action`].
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Launch one node of `instance_type` in `pool`; answer with `NodeReady` or `LaunchFailed`.
    Launch { node: NodeId, pool: usize, instance_type: usize },
    /// Give a node back.
    Terminate { node: NodeId },
    /// Start attempt `attempt` of a job, one worker per placement entry (node, GPUs).
    StartJob { job: JobId, attempt: u32, placement: Vec<(NodeId, u32)> },
    /// Stop a running attempt (signal, grace, kill); the engine has already requeued or ended the job.
    /// `grace_ms` is how long the job may take to checkpoint before it is killed.
    StopJob { job: JobId, attempt: u32, reason: StopReason, grace_ms: i64 },
    /// Hand node `name` back to the scheduler that asked for it now (so it requeues what it runs there); the
    /// node itself goes when the scheduler releases it, or when the cloud takes it.
    ReturnNode { name: String, why: ReturnWhy },
    /// A team's spend crossed a share of its budget (the daemon posts it to the alert webhook).
    BudgetAlert(BudgetAlert),
    /// A decision to record (event log, API, metrics).
    Record(Decision),
}

/// A crossed share of a team's budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetAlert {
    pub team: String,
    pub period: crate::config::Period,
    /// The share of the budget crossed (0.8: 80%).
    pub share: f64,
    pub spent_usd: f64,
    pub limit_usd: f64,
    /// The budget's hard cap now holds: no cloud capacity is bought for the team's work.
    pub capping: bool,
}

impl BudgetAlert {
    /// Returns the alert in words, one line (the decision's detail and the webhook's `text`).
    pub fn describe(&self) -> String {
        let cap = if self.capping {
            "; hard cap: no cloud capacity is bought for its work until the period ends"
        } else {
            ""
        };
        format!(
            "team {} spent {:.2} USD of its {} budget of {:.2} USD ({}%){cap}",
            self.team,
            self.spent_usd,
            self.period.as_str(),
            self.limit_usd,
            (self.share * 100.0).round()
        )
    }
}

/// What kind of decision a [`Decision`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    JobStarted,
    JobPending,
    JobPreempted,
    JobRequeued,
    /// An elastic job changed width.
    JobResized,
    JobFinished,
    ScaleOut,
    ScaleOutBlocked,
    ScaleIn,
    LaunchFailed,
    NodeKept,
    /// A node went away without Spillway removing it (its agent fell silent, the provider or scheduler lost it).
    NodeLost,
    Interruption,
    Fallback,
    /// An operator changed a pool's bounds or protection, or a node's protection.
    Admin,
    /// A team's spend crossed a share of its budget (`budget_alert`), or spent it under a hard cap (`budget_cap`).
    Budget,
}

/// One decision with its time and machine-readable reason, e.g. `scale_out` of pool `spot` because
/// `queued_demand`, detail `24 GPUs of p1 demand waiting 240 s (SLO 600 s)`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Milliseconds since the Unix epoch.
    pub at: Time,
    pub kind: DecisionKind,
    /// The job, node or pool the decision is about (`job:17`, `node:9`, `pool:spot`).
    pub subject: String,
    /// Stable snake_case code of the reason.
    pub reason: &'static str,
    /// A sentence for people.
    pub detail: String,
}

impl Decision {
    /// Returns a pending-job record.
    pub fn pending(at: Time, job: JobId, reason: PendingReason, detail: String) -> Decision {
        Decision { at, kind: DecisionKind::JobPending, subject: job_subject(job), reason: reason.code(), detail }
    }
}

/// Returns the subject string of a job.
pub fn job_subject(job: JobId) -> String {
    format!("job:{}", job.0)
}
