//! Wire types shared by the daemon (`spillway-server`), the agent and the CLI: the JSON bodies of the HTTP API under
//! `/v1` and of the agent protocol. Times are seconds since the Unix epoch (f64). Every request struct rejects
//! unknown fields, so a typo in a field name is an error that names it, not a silently ignored value.
//!
//! Routes (all JSON, bearer token in `Authorization`):
//! - `POST /v1/jobs` [`JobSubmit`] -> [`JobView`] (201); `GET /v1/jobs?state=&team=&tier=&limit=` -> `[JobView]`;
//!   `GET /v1/jobs/{id}` -> [`JobView`]; `POST /v1/jobs/{id}/cancel` -> [`JobView`]; `GET /v1/jobs/{id}/logs` -> text.
//! - `GET /v1/nodes` -> `[NodeView]`; `POST /v1/nodes/{id}/interrupt` -> [`NodeView`];
//!   `POST /v1/nodes/{id}/protect` [`Protect`] -> [`NodeView`].
//! - `GET /v1/pools` -> `[PoolView]`; `POST /v1/pools/{name}/scale` [`PoolScale`] -> [`PoolView`];
//!   `POST /v1/pools/{name}/protect` [`Protect`] -> [`PoolView`].
//! - `GET /v1/events?job=&node=&pool=&kind=&limit=` -> `[EventView]`; `GET /v1/cost?since=&until=` -> [`CostView`].
//! - `POST /v1/agent/heartbeat` [`Heartbeat`] -> [`HeartbeatReply`] (node token only).
//! - `GET /v1/openapi.json`, `GET /healthz`, `GET /readyz`, `GET /metrics` (no token).
//! - Errors: 4xx/5xx with [`ErrorBody`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A job submission (`POST /v1/jobs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSubmit {
    /// A name for people; default `job`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tier name (`p0`, `p1`, `p2` by default).
    pub tier: String,
    /// Owning team; a team token may only submit for its own team (and defaults to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// GPUs per worker (>= 1).
    pub gpus: u32,
    /// Workers in the gang (>= 1; default 1). All start together or none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u32>,
    /// The command: program and arguments, never a shell string (write `sh -c` to get one).
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Working directory of the job's processes; default the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    /// Whether it may run on spot and be preempted; default the tier's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_s: Option<f64>,
    /// Deadline, seconds from submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<f64>,
    /// Expected run time without interruption, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_duration_s: Option<f64>,
}

/// A job as the API shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: u32,
    pub name: String,
    pub tier: String,
    pub team: String,
    /// `queued`, `running`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// Starts so far (the running attempt's number while running).
    pub attempt: u32,
    pub gpus: u32,
    pub workers: u32,
    pub argv: Vec<String>,
    pub submitted_at: f64,
    pub started_at: Option<f64>,
    pub ended_at: Option<f64>,
    /// Nodes of the current attempt.
    pub nodes: Vec<u32>,
    /// Why it waits (stable code), while queued.
    pub pending_reason: Option<String>,
    pub interruptions: u32,
    pub preemptions: u32,
}

/// A node as the API shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub id: u32,
    pub pool: String,
    pub instance_type: Option<String>,
    /// `fixed`, `on_demand` or `spot`.
    pub market: String,
    /// `requested`, `booting`, `ready`, `draining`, `terminated`, `failed` or `lost`.
    pub state: String,
    pub gpus: u32,
    pub free_gpus: u32,
    pub protected: bool,
    /// Jobs running on it.
    pub jobs: Vec<u32>,
}

/// A pool as the API shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolView {
    pub name: String,
    pub market: String,
    /// Nodes alive (requested, booting, ready or draining).
    pub nodes: u32,
    pub ready_nodes: u32,
    pub min_nodes: u32,
    pub max_nodes: u32,
    pub gpus: u32,
    pub busy_gpus: u32,
    pub protected: bool,
}

/// `POST /v1/pools/{name}/scale`: new bounds; an absent field keeps its value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolScale {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<u32>,
}

/// `POST /v1/nodes/{id}/protect` and `/v1/pools/{name}/protect`: scale-in protection on or off.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protect {
    pub protected: bool,
}

/// One recorded decision (the event log).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    pub seq: u64,
    pub at: f64,
    /// `job_started`, `scale_out`, `interruption`, ...
    pub kind: String,
    /// `job:17`, `node:9`, `pool:spot`.
    pub subject: String,
    /// Stable snake_case reason code.
    pub reason: String,
    pub detail: String,
}

/// Cost in USD: so far, or over the window `since..until` (`GET /v1/cost?since=&until=`, seconds since the epoch;
/// a past bound resolves to the last minute snapshot before it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CostView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<f64>,
    pub total_usd: f64,
    pub idle_usd: f64,
    pub by_team: BTreeMap<String, f64>,
    pub by_tier: BTreeMap<String, f64>,
    pub by_pool: BTreeMap<String, f64>,
    pub by_market: BTreeMap<String, f64>,
}

/// The body of every error response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    /// The request field at fault, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

// ---- The agent protocol: the agent pulls; the daemon never connects to agents. ----

/// One worker of one attempt of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkerRef {
    pub job: u32,
    pub attempt: u32,
    /// The worker's rank in the gang (0 for a single worker).
    pub rank: u32,
}

/// A worker that exited, reported until the daemon stops listing it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerExit {
    pub worker: WorkerRef,
    /// Exit code, or `None` when killed by a signal.
    pub code: Option<i32>,
    pub success: bool,
}

/// `POST /v1/agent/heartbeat`, every second or so, with the node's token. The first one registers the node (it is
/// then ready). `running` lists the workers alive now; `exited` the workers that ended and were not yet dropped by
/// the daemon; `checkpoints` the workers that finished a checkpoint since the last heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub node: u32,
    #[serde(default)]
    pub running: Vec<WorkerRef>,
    #[serde(default)]
    pub exited: Vec<WorkerExit>,
    #[serde(default)]
    pub checkpoints: Vec<WorkerRef>,
    /// Average GPU utilization (0-1) over the node's GPUs, where it can be measured (NVML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization: Option<f64>,
}

/// What a worker should run: the job contract of ARCHITECTURE.md section 5.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    pub worker: WorkerRef,
    pub world_size: u32,
    /// GPUs this worker gets on the node (the agent picks which and sets `CUDA_VISIBLE_DEVICES`).
    pub gpus: u32,
    pub argv: Vec<String>,
    /// The job's own environment; the agent adds `SPILLWAY_*`, `CUDA_VISIBLE_DEVICES` and the rank variables.
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    /// `SPILLWAY_CHECKPOINT_DIR`: the same directory on every attempt.
    pub checkpoint_dir: String,
    /// Where the worker's stdout and stderr go (appended, so attempts follow each other).
    pub log_path: String,
    /// `MASTER_ADDR` / `MASTER_PORT` for gangs.
    pub master_addr: String,
    pub master_port: u16,
}

/// Stop a worker: send `signal` (`SIGTERM` by default) to its process group, wait `grace_ms`, then kill it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopOrder {
    pub worker: WorkerRef,
    pub grace_ms: u64,
    pub signal: String,
}

/// The daemon's answer to a heartbeat: the workers the node should be running (start the ones it is not),
/// the ones to stop, and the exits the daemon has recorded (the agent may forget them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    pub run: Vec<Assignment>,
    pub stop: Vec<StopOrder>,
    pub acked_exits: Vec<WorkerRef>,
}

/// The header the daemon and the CLI use for tokens.
pub const AUTH_HEADER: &str = "authorization";
