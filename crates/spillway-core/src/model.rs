//! Domain types the engine keeps: jobs and nodes with their states, and the reasons a job waits.

use crate::config::Market;
use crate::time::{Millis, Time};
use serde::{Deserialize, Serialize};

/// A job's id: assigned by the engine from a counter, in submission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub u32);

/// A node's id: assigned by the engine from a counter, fixed nodes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u32);

/// A job's name, tier or team: kept inline up to 24 bytes, so a job's labels cost no allocation of their own
/// (a replay of 1M jobs held two copies of each, the input's and the engine's: ~190 MB).
pub type Label = compact_str::CompactString;

/// What a user asks to run. Tier and team are names; the engine resolves and checks them on submit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: Label,
    pub tier: Label,
    pub team: Label,
    pub gpus_per_worker: u32,
    /// Workers a rigid job always runs; an elastic job's most (`max_workers` in the API and job files).
    #[serde(alias = "max_workers")]
    pub workers: u32,
    /// An elastic job's fewest workers: it starts once these fit, grows toward `workers` into free capacity and
    /// shrinks no further than this. `None`: rigid (`workers` always).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_workers: Option<u32>,
    /// A GPU model the job needs; `None`: any.
    pub gpu_model: Option<String>,
    /// `None`: the tier's default.
    pub interruptible: Option<bool>,
    /// `None`: the tier's default.
    pub checkpoint_interval_ms: Option<Millis>,
    pub deadline: Option<Time>,
    /// How long the job runs without interruption, when the user knows (needed for deadline-aware placement).
    pub expected_duration_ms: Option<Millis>,
    /// Size of its checkpoint (and data) in GB: what a move to a pool in another region carries, paying
    /// `[network]` egress and transfer time. `None`: nothing moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_gb: Option<f64>,
    /// The region its data is in before its first start (`None`: wherever it first runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_region: Option<String>,
}

impl JobSpec {
    /// Returns the GPUs the whole gang asks for (GPUs per worker x workers), or `None` when that overflows a
    /// `u32` (a spec no cluster can hold; `check_spec` refuses it).
    pub fn checked_total_gpus(&self) -> Option<u32> {
        self.gpus_per_worker.checked_mul(self.workers)
    }

    /// Returns the fewest workers the job runs on: `min_workers` for an elastic job, else `workers`.
    pub fn fewest_workers(&self) -> u32 {
        self.min_workers.unwrap_or(self.workers).min(self.workers)
    }

    /// Returns whether the job may run on fewer workers than it asks for.
    pub fn is_elastic(&self) -> bool {
        self.fewest_workers() < self.workers
    }
}

/// How a job's process ended: its exit code, or the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    /// Returns how a process ended from its exit code and signal as reported (the code wins), if either is known.
    pub fn of(code: Option<i32>, signal: Option<i32>) -> Option<Exit> {
        code.map(Exit::Code).or(signal.map(Exit::Signal))
    }

    /// Returns (exit code, signal): one of them, as an API shows them.
    pub fn parts(exit: Option<Exit>) -> (Option<i32>, Option<i32>) {
        match exit {
            Some(Exit::Code(c)) => (Some(c), None),
            Some(Exit::Signal(s)) => (None, Some(s)),
            None => (None, None),
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

/// A job as the engine tracks it.
///
/// Laid out in declaration order (`repr(C)`) with what a scheduling pass reads of every queued job first (tier,
/// team, access, timers, the gang), so a pass over a long queue touches two or three
/// cache lines per job instead of most of its ~330 bytes.
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Job {
    /// Index into `Config::tiers`.
    pub tier: usize,
    /// Index into the engine's team table.
    pub team: usize,
    /// When the job last entered the queue (submission, or its last requeue).
    pub queued_since: Time,
    /// A stopped attempt is still writing its checkpoint: do not start the next one before this time.
    pub not_before: Option<Time>,
    /// Moved back from on-demand to spot: it does not take on-demand again before this time.
    pub spot_only_until: Option<Time>,
    pub id: JobId,
    /// Starts so far; a requeue after preemption or a lost node makes the next start attempt `attempt + 1`.
    pub attempt: u32,
    pub state: JobState,
    pub pending: PendingReason,
    pub interruptible: bool,
    /// Moved to on-demand (too many interruptions, or its deadline no longer leaves room for spot).
    pub pinned_on_demand: bool,
    /// A deadline job whose slack is down to its reserve (the `safe` policy's `deadline_reserve_trips`): it no
    /// longer waits for spot; it runs on on-demand while spot cannot be had and moves back to spot when spot can
    /// take it again, until its slack pins it to on-demand.
    pub on_reserve: bool,
    /// While it waits for capacity (`NoCapacity`): the first pool it may buy in and why that pool did not grow.
    pub not_grown: Option<(usize, crate::growth::NotGrown)>,
    pub gang: Gang,
    pub spec: JobSpec,
    pub checkpoint_interval_ms: Option<Millis>,
    pub submitted: Time,
    pub first_start: Option<Time>,
    pub attempt_start: Option<Time>,
    pub ended: Option<Time>,
    /// Nodes and GPUs the current attempt holds, one entry per worker.
    pub placement: Vec<(NodeId, u32)>,
    /// Last checkpoint reported by the job in this attempt; otherwise estimated from the interval.
    pub last_checkpoint: Option<Time>,
    /// It reported a checkpoint in some attempt: its checkpoints are known, not estimated, so an attempt that has
    /// reported none yet has saved nothing since it started.
    pub reports_checkpoints: bool,
    pub preemptions: u32,
    /// Spot interruptions (notices) the job has gone through.
    pub interruptions: u32,
    /// Work saved by checkpoints over all attempts so far.
    pub saved_work_ms: Millis,
    /// How the attempt that ended the job exited, when its process reported it.
    pub exit: Option<Exit>,
    /// Where its data is and what its current attempt's move of it costs: only a job with a data region or one
    /// that has moved data has it, kept out of line because every pass reads the fields above of every queued job.
    pub data: Option<Box<JobData>>,
}

/// Where a job's data is, and the move its current attempt makes (see `data_move`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobData {
    /// The region its data and latest checkpoint are in: the spec's `data_region`, then where it last started.
    pub at: Option<String>,
    /// A region that still holds a copy identical to `at`'s: where the last move came from, until the job
    /// writes a checkpoint after it (a start there moves nothing).
    pub copy: Option<String>,
    /// Time at the start of the current attempt spent moving its data in from another region (no progress).
    pub transfer_ms: Millis,
    /// Egress booked for that move (USD), for the part never sent when the attempt ends before it arrived.
    pub transfer_usd: f64,
    /// Egress booked for all its moves so far, less what transfers cut short never sent (USD).
    pub egress_usd: f64,
    /// It left its node by choice for a ready or coming one elsewhere (a cheaper spot pool, see `spot_hop`; spot
    /// again, from on-demand, see `rebalance`) and has not started since: the scale-out planner counts it on
    /// that node, and it does not wait for spot where its data is, as a job an interruption stopped may.
    pub hopping: bool,
}

/// What a decision pass reads of every job's spec, copied when it is submitted (a spec never changes after) so a
/// pass over a long queue finds it beside the job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gang {
    pub gpus_per_worker: u32,
    /// Workers the job needs to start: all of them for a rigid job, its fewest for an elastic one (what
    /// placement, scale-out and the queue's sizes count).
    pub workers: u32,
    /// Workers it runs on at most (equal to `workers` for a rigid job).
    pub max_workers: u32,
    /// The engine's number for (GPUs per worker, GPU model): equal numbers, equal needs.
    pub kind: u32,
    /// The spec has a deadline and a duration.
    pub deadline_governs: bool,
}

impl Job {
    /// Returns the GPUs the whole gang needs, saturating at `u32::MAX`: a job recorded by
    /// [`crate::Engine::submit_refused`] may carry sizes whose product overflows.
    pub fn total_gpus(&self) -> u32 {
        self.gang.gpus_per_worker.saturating_mul(self.gang.workers)
    }

    /// Returns the GPUs its current attempt holds (what it books and loses per ms; none while queued).
    pub fn held_gpus(&self) -> u32 {
        self.placement.iter().map(|&(_, g)| g).sum()
    }

    /// Returns whether the job may run on fewer workers than its most (an elastic job).
    pub fn is_elastic(&self) -> bool {
        self.gang.workers < self.gang.max_workers
    }

    /// Returns whether the job's deadline decides its use of spot (it has a deadline and a declared duration),
    /// rather than waits and interruption counts.
    pub fn deadline_governs(&self) -> bool {
        self.gang.deadline_governs
    }

    /// Returns the work still to do, when the job declared its duration.
    pub fn remaining_work_ms(&self, now: Time) -> Option<Millis> {
        let running = self.attempt_progress_ms(now);
        self.spec.expected_duration_ms.map(|d| (d - self.saved_work_ms - running).max(0))
    }

    /// Returns when a running job that declared its duration is expected to end: its remaining work counted from
    /// when its work starts (once its data is in), or from `now` once it has. While its data moves in, the end
    /// does not move with time alone.
    pub fn declared_end(&self, now: Time) -> Option<Time> {
        let from = self.work_start().map_or(now, |s| s.max(now));
        self.remaining_work_ms(now).map(|left| from.saturating_add(left))
    }

    /// Returns the work its current attempt has done by `now`: its time running less the move of its data.
    pub fn attempt_progress_ms(&self, now: Time) -> Millis {
        self.work_start().map_or(0, |s| (now - s).max(0))
    }

    /// Returns when its current attempt's work starts: once its data is in (its checkpoints count from there).
    pub fn work_start(&self) -> Option<Time> {
        self.attempt_start.map(|s| s.saturating_add(self.transfer_ms()))
    }

    /// Returns the region its data is in, if known.
    pub fn data_at(&self) -> Option<&str> {
        self.data.as_ref()?.at.as_deref()
    }

    /// Returns the region that still holds a current copy of its data, if any.
    pub fn data_copy(&self) -> Option<&str> {
        self.data.as_ref()?.copy.as_deref()
    }

    /// Returns the egress its moves of data have cost so far (USD).
    pub fn egress_usd(&self) -> f64 {
        self.data.as_ref().map_or(0.0, |d| d.egress_usd)
    }

    /// Returns the time its current attempt spends moving data in (0 when it moves none).
    pub fn transfer_ms(&self) -> Millis {
        self.data.as_ref().map_or(0, |d| d.transfer_ms)
    }

    /// Returns its data's place, made empty when it had none.
    pub fn data_mut(&mut self) -> &mut JobData {
        self.data.get_or_insert_with(Box::default)
    }

    /// Returns the work the current attempt would lose if stopped at `now`: time since its last checkpoint
    /// (reported, or estimated from the checkpoint interval), or the whole attempt when it never checkpoints.
    pub fn unsaved_work_ms(&self, now: Time) -> Millis {
        if self.attempt_start.is_none() {
            return 0;
        }
        // Time spent moving its data in was no work, so none of it is lost.
        let elapsed = self.attempt_progress_ms(now);
        let since_interval = match self.checkpoint_interval_ms {
            Some(iv) if iv > 0 => elapsed % iv,
            _ => elapsed,
        };
        match self.last_checkpoint {
            Some(c) => (now - c).clamp(0, elapsed),
            None if self.reports_checkpoints => elapsed,
            None => since_interval,
        }
    }
}

/// Why a queued job is not running. Stable snake_case codes go to the event log, the API and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingReason {
    /// Not yet looked at by a scheduling pass.
    NotScheduledYet,
    /// Examining it would pass the per-pass queue scan limit.
    QueueScanLimit,
    /// Starting it would put its team over its GPU quota.
    TeamQuota,
    /// Waiting for fixed capacity before cloud capacity is bought (the tier's `burst_after_s`).
    WaitingForFixedCapacity,
    /// Nodes that will hold it are booting.
    WaitingForNodes,
    /// No pool it may use has room, and no pool may grow now (max, cooldown, step limit, backoff).
    NoCapacity,
    /// The nodes it could use are held back for a waiting job of the same or higher tier.
    HeldForLargerJob,
    /// Its last attempt is writing a checkpoint after an interruption notice; replacement capacity is coming.
    Checkpointing,
}

impl PendingReason {
    /// Returns the stable code of the reason.
    pub fn code(self) -> &'static str {
        match self {
            PendingReason::NotScheduledYet => "not_scheduled_yet",
            PendingReason::QueueScanLimit => "queue_scan_limit",
            PendingReason::TeamQuota => "team_quota",
            PendingReason::WaitingForFixedCapacity => "waiting_for_fixed_capacity",
            PendingReason::WaitingForNodes => "waiting_for_nodes",
            PendingReason::NoCapacity => "no_capacity",
            PendingReason::HeldForLargerJob => "held_for_larger_job",
            PendingReason::Checkpointing => "checkpointing",
        }
    }
}

/// Where a node is in its life. Only `Ready` nodes count as capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// A launch was asked for; not usable yet.
    Requested,
    Ready,
    /// Being given back; runs nothing new.
    Draining,
    Terminated,
    /// The launch failed.
    Failed,
    /// Stopped heartbeating or vanished; its jobs were requeued.
    Lost,
}

/// A node as the engine tracks it.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: NodeId,
    /// Index into `Config::pools`.
    pub pool: usize,
    pub market: Market,
    /// Index into `Config::instance_types`; `None` for fixed nodes.
    pub instance_type: Option<usize>,
    pub gpu_model: String,
    pub gpus: u32,
    /// GPUs bound to running jobs.
    pub used: u32,
    pub jobs: Vec<JobId>,
    pub state: NodeState,
    /// What the node costs per hour now (spot: the price since `billed_from`).
    pub price_usd_per_hour: f64,
    pub requested_at: Time,
    /// Start of the node's open billing segment: its request, or the last change of its spot price (the segment
    /// before was booked at the price then).
    pub billed_from: Time,
    pub ready_at: Option<Time>,
    pub ended_at: Option<Time>,
    /// When the node last became empty (while ready).
    pub idle_since: Option<Time>,
    /// The node's last reported GPU utilization (0-1).
    pub gpu_utilization: Option<f64>,
    pub protected: bool,
    /// The cloud recommended moving off this node (see [`crate::Event::RebalanceRecommendation`]).
    pub at_risk: bool,
    /// The cloud gave the node an interruption notice: once it ends, it was reclaimed (not lost).
    pub interrupted: bool,
    /// Set for a node another scheduler asked for by name ([`crate::Event::NodeRequested`]).
    pub held: Option<Box<Hold>>,
}

/// A node another scheduler (Slurm) asked for: its name there, who it is billed to, and what it must hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    /// The node's name in that scheduler.
    pub name: String,
    /// Indexes of the team and tier the node's whole cost is booked to.
    pub team: usize,
    pub tier: usize,
    /// The pools (indexes) it may come from, and the GPUs (of `model`) it must have.
    pub pools: Vec<usize>,
    pub gpus: u32,
    pub model: Option<String>,
    /// What asked for it, for records (`Slurm job 12 (partition gpu)`).
    pub why: String,
    /// Launches tried for this request so far.
    pub tries: u32,
}

impl Node {
    /// Returns the GPUs not bound to any job.
    pub fn free(&self) -> u32 {
        self.gpus - self.used
    }
    /// Returns whether the node is billed and counted against its pool (requested, ready or draining).
    pub fn alive(&self) -> bool {
        matches!(self.state, NodeState::Requested | NodeState::Ready | NodeState::Draining)
    }
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;

    /// A replay keeps every job it has seen (1M in the overload bench, whose peak memory is a target), so what a
    /// job costs beyond its own bytes matters too: its labels take no allocation up to 24 bytes (the names of
    /// traces and tiers and teams are shorter), and neither `Job` nor `JobSpec` grows past today's size (a field
    /// that fits in their padding, 7 bytes in `JobSpec`, is not caught; one that makes them larger is).
    #[test]
    fn a_job_costs_no_more_than_it_did() {
        let label = |s: &str| Label::from(s);
        for short in ["job-000123", "p2", "foundation", "a-team-name-of-24-bytes!"] {
            assert!(!label(short).is_heap_allocated(), "{short:?} took an allocation");
        }
        assert!(label("a-much-longer-job-name-than-24-bytes").is_heap_allocated());
        assert!(size_of::<JobSpec>() <= 208, "JobSpec grew to {} bytes", size_of::<JobSpec>());
        assert!(size_of::<Job>() <= 480, "Job grew to {} bytes", size_of::<Job>());
    }
}
