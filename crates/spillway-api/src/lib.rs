//! Wire types shared by the daemon (`spillway-server`), the agent and the CLI: the JSON bodies of the HTTP API under
//! `/v1` and of the agent protocol. Times are seconds since the Unix epoch (f64). Every request struct rejects
//! unknown fields, so a typo in a field name is an error that names it, not a silently ignored value.
//!
//! Routes (all JSON, bearer token in `Authorization`):
//! - `POST /v1/jobs` [`JobSubmit`] -> [`JobView`] (201); `GET /v1/jobs?state=&team=&tier=&limit=&cursor=` ->
//!   `[JobView]`, newest first;
//!   `GET /v1/jobs/{id}` -> [`JobView`]; `POST /v1/jobs/{id}/cancel` -> [`JobView`]; `GET /v1/jobs/{id}/logs` -> text.
//! - `GET /v1/nodes` -> `[NodeView]`; `POST /v1/nodes/{id}/interrupt` -> [`NodeView`];
//!   `POST /v1/nodes/{id}/protect` [`Protect`] -> [`NodeView`].
//! - `GET /v1/pools` -> `[PoolView]`; `POST /v1/pools/{name}/scale` [`PoolScale`] -> [`PoolView`];
//!   `POST /v1/pools/{name}/protect` [`Protect`] -> [`PoolView`].
//! - `GET /v1/events?job=&node=&pool=&kind=&limit=&cursor=` -> `[EventView]`, oldest first;
//!   `GET /v1/cost?since=&until=` -> [`CostView`].
//!   `GET /v1/budgets` -> `[BudgetView]`.
//! - `POST /v1/agent/heartbeat` [`Heartbeat`] -> [`HeartbeatReply`] (node token only).
//! - `GET /v1/openapi.json`, `GET /healthz`, `GET /readyz`, `GET /metrics` (no token).
//! - Lists page: `limit` (default 100, at most 1000) and `cursor`; a page that is not the last carries
//!   `Link: <...>; rel="next"` and [`NEXT_CURSOR_HEADER`]. Job cursors are opaque. An event cursor is a sequence
//!   number: `cursor=N` starts at the first kept event with `seq >= N`, so a client tails the log by asking from
//!   one past the last `seq` it saw. Filter values that name nothing are refused (422), as are unknown parameters.
//! - Errors: every 4xx/5xx has an [`ErrorBody`] (`field` names the body field or query parameter at fault).
//!   Request bodies are at most 1 MiB (413) and must arrive within 10 s (408); JSON followed by anything but
//!   whitespace is refused (400).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A job submission (`POST /v1/jobs`).
///
/// The daemon refuses a submission outside these limits (the constants of [`limits`]) with 422 naming the field,
/// before anything is logged; [`JobSubmit::check`] is the same test:
/// - `name` at most 256 bytes; `tier`, `team` and `gpu_model` at most 128 bytes; `workdir` at most 4096 bytes;
/// - `argv` 1 to 1024 entries, each at most 16 KiB, 64 KiB in all, the program (`argv[0]`) not blank;
/// - `env` at most 256 entries, keys `[A-Za-z_][A-Za-z0-9_]*` of at most 256 bytes, values at most 16 KiB,
///   keys and values 64 KiB in all;
/// - no NUL byte in any string;
/// - `gpus` 1 to 1024, `workers` 1 to 4096;
/// - `checkpoint_interval_s` in [1, 31,536,000] (one year); `deadline_s` and `expected_duration_s` in
///   (0, 315,360,000] (ten years); every number finite.
///
/// The whole request body is at most 1 MiB ([`limits::MAX_BODY_BYTES`], 413 beyond).
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
    /// An elastic job's most workers (another name for `workers`; give one of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_workers: Option<u32>,
    /// An elastic job's fewest workers: it starts once these fit, grows toward its most into free capacity, and
    /// shrinks (restarting from its checkpoint) down to these when a node it uses goes. Absent: rigid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_workers: Option<u32>,
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
    /// Size of its checkpoint and data in GB: a start in a pool of another region moves them (egress, transfer
    /// time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_gb: Option<f64>,
    /// The region its data is in before its first start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_region: Option<String>,
}

impl JobSubmit {
    /// Returns `Ok` when the submission is within [`limits`], else an [`ErrorBody`] naming the first field at fault
    /// (`name`, `argv`, `argv[3]`, `env`, `env.KEY`, `deadline_s`, ...). Checks shape only: whether the tier, team
    /// or GPU model exist is the daemon's business.
    pub fn check(&self) -> Result<(), ErrorBody> {
        use limits::*;
        let opt =
            |field: &str, v: &Option<String>, max: usize| v.as_deref().map_or(Ok(()), |v| check_str(field, v, max));
        let label =
            |field: &str, v: &Option<String>, max: usize| v.as_deref().map_or(Ok(()), |v| check_label(field, v, max));
        label("name", &self.name, MAX_NAME_BYTES)?;
        check_label("tier", &self.tier, MAX_LABEL_BYTES)?;
        label("team", &self.team, MAX_LABEL_BYTES)?;
        label("gpu_model", &self.gpu_model, MAX_LABEL_BYTES)?;
        label("data_region", &self.data_region, MAX_LABEL_BYTES)?;
        opt("workdir", &self.workdir, MAX_WORKDIR_BYTES)?;
        check_count("gpus", self.gpus, MAX_GPUS_PER_WORKER)?;
        check_count("workers", self.workers.unwrap_or(1), MAX_WORKERS)?;
        if let Some(most) = self.max_workers {
            check_count("max_workers", most, MAX_WORKERS)?;
        }
        if let Some(least) = self.min_workers {
            check_count("min_workers", least, MAX_WORKERS)?;
        }
        check_argv(&self.argv)?;
        check_env(&self.env)?;
        check_secs(
            "checkpoint_interval_s",
            self.checkpoint_interval_s,
            MIN_CHECKPOINT_INTERVAL_S,
            true,
            MAX_CHECKPOINT_INTERVAL_S,
        )?;
        check_secs("deadline_s", self.deadline_s, 0.0, false, MAX_DURATION_S)?;
        check_secs("expected_duration_s", self.expected_duration_s, 0.0, false, MAX_DURATION_S)?;
        match self.checkpoint_gb {
            Some(gb) if !(0.0..=1.0e6).contains(&gb) => {
                Err(refuse("checkpoint_gb", format!("checkpoint_gb {gb} is not a size from 0 to 1000000 GB")))
            }
            _ => Ok(()),
        }
    }
}

/// Returns the refusal of `field`.
fn refuse(field: &str, error: String) -> ErrorBody {
    ErrorBody { error, field: Some(field.to_string()) }
}

/// Checks one string: at most `max` bytes, no NUL (a NUL cannot reach `execve` and truncates C strings).
fn check_str(field: &str, v: &str, max: usize) -> Result<(), ErrorBody> {
    if v.len() > max {
        return Err(refuse(field, format!("{field} is {} bytes, more than the limit of {max}", v.len())));
    }
    if v.contains('\0') {
        return Err(refuse(field, format!("{field} contains a NUL byte")));
    }
    Ok(())
}

/// Checks a label shown in tables and logs (name, tier, team, GPU model): [`check_str`], and no control
/// characters, so a name cannot break a table or send escape sequences to the terminal of whoever lists jobs.
fn check_label(field: &str, v: &str, max: usize) -> Result<(), ErrorBody> {
    check_str(field, v, max)?;
    match v.chars().find(|c| c.is_control()) {
        Some(c) => Err(refuse(field, format!("{field} contains the control character {:?}", c))),
        None => Ok(()),
    }
}

/// Checks a count in 1..=max (0 is left to the daemon, which names the field the same way).
fn check_count(field: &str, v: u32, max: u32) -> Result<(), ErrorBody> {
    if v > max {
        return Err(refuse(field, format!("{field} is {v}, more than the limit of {max}")));
    }
    Ok(())
}

/// Checks the command: 1..=MAX_ARGV entries, each and all within their byte limits, the program not blank.
fn check_argv(argv: &[String]) -> Result<(), ErrorBody> {
    use limits::*;
    if argv.first().is_none_or(|p| p.trim().is_empty()) {
        return Err(refuse("argv", "argv is empty: give the program and its arguments".into()));
    }
    if argv.len() > MAX_ARGV {
        return Err(refuse("argv", format!("argv has {} entries, more than the limit of {MAX_ARGV}", argv.len())));
    }
    for (i, a) in argv.iter().enumerate() {
        check_str(&format!("argv[{i}]"), a, MAX_ARG_BYTES)?;
    }
    let total: usize = argv.iter().map(String::len).sum();
    if total > MAX_ARGV_BYTES {
        return Err(refuse("argv", format!("argv is {total} bytes in all, more than the limit of {MAX_ARGV_BYTES}")));
    }
    Ok(())
}

/// Returns whether `k` is a portable environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
fn env_name(k: &str) -> bool {
    let mut b = k.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Variables of the job contract that are set only on some attempts, so a job's own value would be read as
/// Spillway's: a job may not set them (the agent drops them from older jobs' environments too).
pub const RESERVED_ENV: [&str; 2] = ["SPILLWAY_REGION", "SPILLWAY_DATA_FROM"];

/// The prefix of the job contract's variables: a submitted job may set none of them.
pub const CONTRACT_ENV_PREFIX: &str = "SPILLWAY_";

/// Checks the environment: entry count, names, value sizes, reserved names and the total.
fn check_env(env: &BTreeMap<String, String>) -> Result<(), ErrorBody> {
    use limits::*;
    if env.len() > MAX_ENV {
        return Err(refuse("env", format!("env has {} entries, more than the limit of {MAX_ENV}", env.len())));
    }
    for (k, v) in env {
        if k.len() > MAX_ENV_KEY_BYTES {
            return Err(refuse(
                "env",
                format!("an env name is {} bytes, more than the limit of {MAX_ENV_KEY_BYTES}", k.len()),
            ));
        }
        if !env_name(k) {
            // The name goes into the message escaped, so a control character cannot garble a terminal.
            return Err(refuse("env", format!("env name {k:?} is not [A-Za-z_][A-Za-z0-9_]*")));
        }
        if k.starts_with(CONTRACT_ENV_PREFIX) {
            // Spillway sets these for each attempt: a job's own value would be overridden without a word, or (for
            // the ones set only on some attempts) read as Spillway's.
            return Err(refuse(
                "env",
                format!("{k}: names starting with {CONTRACT_ENV_PREFIX} are the job contract's, set by Spillway"),
            ));
        }
        check_str(&format!("env.{k}"), v, MAX_ENV_VALUE_BYTES)?;
    }
    let total: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_ENV_BYTES {
        return Err(refuse("env", format!("env is {total} bytes in all, more than the limit of {MAX_ENV_BYTES}")));
    }
    Ok(())
}

/// Checks a duration in seconds: finite, above `min` (or at least `min` when `min_inclusive`), at most `max`.
fn check_secs(field: &str, v: Option<f64>, min: f64, min_inclusive: bool, max: f64) -> Result<(), ErrorBody> {
    let Some(x) = v else { return Ok(()) };
    let above = if min_inclusive { x >= min } else { x > min };
    if !(x.is_finite() && above && x <= max) {
        let low = if min_inclusive { format!("[{min}") } else { format!("({min}") };
        return Err(refuse(field, format!("{field} must be a number of seconds in {low}, {max}], got {x}")));
    }
    Ok(())
}

/// The limits of the API, in one place: what a submission may hold ([`JobSubmit::check`]), how large a request
/// body may be, and how list endpoints page. The OpenAPI document (`GET /v1/openapi.json`) lists them too.
pub mod limits {
    /// The largest request body, bytes (1 MiB; 413 beyond).
    pub const MAX_BODY_BYTES: usize = 1 << 20;
    /// `name`, bytes.
    pub const MAX_NAME_BYTES: usize = 256;
    /// `tier`, `team` and `gpu_model`, bytes.
    pub const MAX_LABEL_BYTES: usize = 128;
    /// `workdir`, bytes (Linux `PATH_MAX`).
    pub const MAX_WORKDIR_BYTES: usize = 4096;
    /// Entries of `argv`.
    pub const MAX_ARGV: usize = 1024;
    /// One `argv` entry, bytes.
    pub const MAX_ARG_BYTES: usize = 16 << 10;
    /// All of `argv`, bytes.
    pub const MAX_ARGV_BYTES: usize = 64 << 10;
    /// Entries of `env`.
    pub const MAX_ENV: usize = 256;
    /// One `env` name, bytes.
    pub const MAX_ENV_KEY_BYTES: usize = 256;
    /// One `env` value, bytes.
    pub const MAX_ENV_VALUE_BYTES: usize = 16 << 10;
    /// All `env` names and values, bytes.
    pub const MAX_ENV_BYTES: usize = 64 << 10;
    /// `gpus` (per worker).
    pub const MAX_GPUS_PER_WORKER: u32 = 1024;
    /// `workers` (in one gang).
    pub const MAX_WORKERS: u32 = 4096;
    /// `checkpoint_interval_s`, the shortest (a checkpoint more often than each second is a busy loop).
    pub const MIN_CHECKPOINT_INTERVAL_S: f64 = 1.0;
    /// `checkpoint_interval_s`, the longest (one year).
    pub const MAX_CHECKPOINT_INTERVAL_S: f64 = 31_536_000.0;
    /// `deadline_s` and `expected_duration_s`, the longest (ten years); both must be above zero.
    pub const MAX_DURATION_S: f64 = 315_360_000.0;
    /// Items in one page of `GET /v1/jobs` and `GET /v1/events` when `limit` is not given.
    pub const DEFAULT_PAGE_LIMIT: usize = 100;
    /// The largest `limit` (422 beyond).
    pub const MAX_PAGE_LIMIT: usize = 1000;
    /// About the most bytes of names and argv in one page of `GET /v1/jobs`: a page of large jobs ends early (with
    /// a next cursor), so no page is much larger than this (one job beyond it at most).
    pub const MAX_PAGE_BYTES: usize = 4 << 20;
}

/// The response header with the cursor of the next page of a list (absent on the last page); the `Link` header
/// carries the same page as `<...>; rel="next"`.
pub const NEXT_CURSOR_HEADER: &str = "x-next-cursor";

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
    /// Its most workers (all of them for a rigid job).
    pub workers: u32,
    /// An elastic job's fewest workers; absent for a rigid job. A running job's width is `nodes`' placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_workers: Option<u32>,
    pub argv: Vec<String>,
    pub submitted_at: f64,
    pub started_at: Option<f64>,
    pub ended_at: Option<f64>,
    /// Nodes of the current attempt.
    pub nodes: Vec<u32>,
    /// Why it waits (stable code), while queued.
    pub pending_reason: Option<String>,
    /// More about why, for people: while it waits for capacity, the first pool it may buy in and why that pool
    /// does not grow (`pool spot: at its max of 3 nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_detail: Option<String>,
    pub interruptions: u32,
    pub preemptions: u32,
    /// Once it ended by itself: the exit code of the attempt that ended it (a gang's first failed rank, else rank
    /// 0), or the signal that killed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// Every attempt so far, in order.
    #[serde(default)]
    pub attempts: Vec<AttemptView>,
    /// What it has cost so far: each attempt's share of its nodes' price (its GPUs over theirs), plus the egress
    /// of its moves of data (`egress_usd`).
    #[serde(default)]
    pub cost_usd: f64,
    /// Egress its moves of data between regions have cost so far (part of `cost_usd`).
    #[serde(default)]
    pub egress_usd: f64,
    /// Size of its checkpoint and data in GB, when it declared one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_gb: Option<f64>,
    /// The region its data is in now (its `data_region`, then where it last started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_region: Option<String>,
    /// Where it stands with spot, when it no longer simply may use it: `deadline_reserve` (a deadline job down
    /// to its reserve of slack: on-demand while spot cannot be had, back to spot when spot can take it) or
    /// `pinned_on_demand` (on on-demand for good: its deadline, or too many interruptions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_state: Option<String>,
}

/// One attempt of a job: where and when it ran, and how it ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AttemptView {
    /// 1 for the first start.
    pub attempt: u32,
    /// Its nodes, one entry per node (a node holding several workers appears once).
    pub nodes: Vec<u32>,
    pub started_at: f64,
    /// Absent while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<f64>,
    /// Why it ended: `succeeded`, `failed`, or why the engine stopped it (`preempted for job 7`, `cancelled`,
    /// `its node was lost`, `spot interruption, told to checkpoint`, `the daemon stopped`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// Its GPUs' share of its nodes' price over its run.
    pub cost_usd: f64,
}

/// A node as the API shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub id: u32,
    pub pool: String,
    pub instance_type: Option<String>,
    /// `fixed`, `on_demand` or `spot`.
    pub market: String,
    /// `requested`, `booting`, `ready`, `draining`, `terminated`, `failed`, `lost` or `interrupted` (a spot node
    /// that ended after its interruption notice).
    pub state: String,
    pub gpus: u32,
    /// GPUs not bound to a job (0 once the node has ended).
    pub free_gpus: u32,
    pub protected: bool,
    /// Jobs running on it.
    pub jobs: Vec<u32>,
    /// Its name in Slurm, for a node Slurm asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_name: Option<String>,
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

/// `GET /v1/pools/{name}/what-if?max_nodes=N[&ignore_cooldown=true]`: what the pool would launch now for the
/// jobs the last decision pass left waiting, were its max `N`; nothing is changed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WhatIfView {
    pub pool: String,
    /// The max the answer assumes.
    pub max_nodes: u32,
    /// Nodes it would launch now, per instance type.
    pub launches: Vec<WhatIfLaunch>,
    /// Why it would still buy less than the waiting demand asks (stable code), if it would.
    pub not_grown: Option<String>,
    /// The same, for people.
    pub not_grown_detail: Option<String>,
    /// Jobs the answer looked at (waiting, or running and wanting spot capacity to move to).
    pub jobs: usize,
    /// Of those, the jobs that may use this pool now (tier, market, GPU model): with none, no max helps.
    #[serde(default)]
    pub may_use: usize,
}

/// One instance type of a [`WhatIfView`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WhatIfLaunch {
    pub instance_type: String,
    pub nodes: u32,
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

/// `POST /v1/slurm/resume` and `/v1/slurm/suspend`: what Slurm's `ResumeProgram` or `SuspendProgram` got.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmRequest {
    /// A Slurm hostlist (`c[1-2],gpu7`).
    pub hosts: String,
}

/// What became of each name of a Slurm request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlurmReply {
    pub nodes: Vec<SlurmOutcome>,
}

/// One name of a Slurm request: the node now behind it, or why nothing changed for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlurmOutcome {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
    /// Egress paid for moving jobs' data between regions (in the total and the team and tier rows, in no pool's
    /// or market's).
    #[serde(default)]
    pub egress_usd: f64,
    pub by_team: BTreeMap<String, f64>,
    pub by_tier: BTreeMap<String, f64>,
    pub by_pool: BTreeMap<String, f64>,
    pub by_market: BTreeMap<String, f64>,
    /// Node-hours paid for, by market.
    #[serde(default)]
    pub node_hours_by_market: BTreeMap<String, f64>,
}

/// A team budget's standing now (`GET /v1/budgets`): what the team spent in the current UTC day or month.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetView {
    pub team: String,
    /// `day` or `month`.
    pub period: String,
    /// Seconds since the epoch.
    pub period_start: f64,
    pub limit_usd: f64,
    pub spent_usd: f64,
    /// The budget's hard cap is set; `capping`: it holds now (nothing is bought for the team's work).
    pub hard_cap: bool,
    pub capping: bool,
}

/// Why a job waits, ran where it ran or ended, or why a pool has its size and what would change it
/// (`GET /v1/explain/job/{id}`, `GET /v1/explain/pool/{name}`): reasons, most decisive first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExplainView {
    /// `job:17` or `pool:spot`.
    pub subject: String,
    pub reasons: Vec<ReasonView>,
}

/// One reason: a stable code (`at_max`, `cooldown`, `budget_cap`, `tier_slo`, ...), the pool it is about, until when
/// it holds (seconds since the epoch), and a sentence.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReasonView {
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<f64>,
    pub text: String,
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
    /// The signal that killed it, when one did (agents before this field send none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// `POST /v1/agent/heartbeat`, every second or so, with the node's token. The first one registers the node (it is
/// then ready). `running` lists the workers alive now; `exited` the workers that ended and were not yet dropped by
/// the daemon; `checkpoints` the workers that finished a checkpoint since the last heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub node: u32,
    /// This agent's heartbeat counter (1, 2, ... over its life). The daemon ignores a heartbeat no newer than the
    /// last one it handled for the node (a delayed or duplicated request). 0: not counted (older agents).
    #[serde(default)]
    pub seq: u64,
    /// The `seq` of the latest heartbeat whose reply the agent has applied: workers that reply handed out and
    /// that this heartbeat lists neither as running nor as exited are known not to run.
    #[serde(default)]
    pub applied: u64,
    #[serde(default)]
    pub running: Vec<WorkerRef>,
    #[serde(default)]
    pub exited: Vec<WorkerExit>,
    #[serde(default)]
    pub checkpoints: Vec<WorkerRef>,
    /// Average GPU utilization (0-1) over the node's GPUs, where it can be measured (NVML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization: Option<f64>,
    /// The agent switches to a session token when a reply hands it one (see the daemon's `tokens`).
    #[serde(default)]
    pub session_tokens: bool,
    /// What the cloud's instance metadata service told the node (sent until the node ends; the daemon acts once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<NodeNotice>,
    /// The address other nodes reach this node at: a job's `MASTER_ADDR` (and rendezvous endpoint) when its rank
    /// 0 runs here. An IP address or a host name; the daemon ignores anything else (and uses 127.0.0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
}

/// What a node heard from its cloud about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NodeNotice {
    /// The instance will be reclaimed at `deadline_ms` (ms since the epoch; absent: the pool's notice from now).
    Interruption {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline_ms: Option<i64>,
    },
    /// The instance is at elevated risk of interruption.
    Rebalance,
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
    /// The job's fewest and most workers (equal for a rigid job): `SPILLWAY_MIN_WORKERS` / `SPILLWAY_MAX_WORKERS`,
    /// for `torchrun --nnodes=MIN:MAX`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers_range: Option<(u32, u32)>,
    /// The region of the pool the attempt runs in (`SPILLWAY_REGION`), when the pool names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Where the job's latest checkpoint is when this attempt moved it from another region
    /// (`SPILLWAY_DATA_FROM`): the engine booked the egress and gave the attempt its transfer time; the job copies
    /// its checkpoint from there before it resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_from: Option<String>,
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
    /// The session token to use from the next heartbeat on (given while the agent is on its launch token, which
    /// its next heartbeat with this one voids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_token: Option<String>,
}

/// The header the daemon and the CLI use for tokens.
pub const AUTH_HEADER: &str = "authorization";

#[cfg(test)]
mod tests {
    use super::*;

    fn submit() -> JobSubmit {
        JobSubmit { tier: "p1".into(), gpus: 1, argv: vec!["true".into()], ..JobSubmit::default() }
    }

    fn field_of(j: &JobSubmit) -> Option<String> {
        j.check().err().and_then(|e| e.field)
    }

    #[test]
    fn env_names_are_portable_identifiers() {
        for ok in ["A", "_", "PATH", "a_1", "_X9"] {
            assert!(env_name(ok), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A B", "A=B", "É"] {
            assert!(!env_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_job_may_not_set_the_job_contracts_variables() {
        for name in ["SPILLWAY_NODE", "SPILLWAY_DATA_FROM", "SPILLWAY_CHECKPOINT_DIR", "SPILLWAY_ANYTHING"] {
            let mut j = submit();
            j.env.insert(name.into(), "mine".into());
            let e = j.check().unwrap_err();
            assert_eq!(e.field.as_deref(), Some("env"), "{name}");
            assert!(e.error.contains(name), "{}", e.error);
        }
        let mut j = submit();
        j.env.insert("spillway_node".into(), "mine".into());
        assert_eq!(j.check(), Ok(()), "another variable (names are case-sensitive)");
    }

    #[test]
    fn limits_are_inclusive_and_name_the_field() {
        assert_eq!(submit().check(), Ok(()));
        let mut j = submit();
        j.name = Some("n".repeat(limits::MAX_NAME_BYTES));
        assert_eq!(j.check(), Ok(()));
        j.name = Some("n".repeat(limits::MAX_NAME_BYTES + 1));
        assert_eq!(field_of(&j).as_deref(), Some("name"));
        let mut j = submit();
        j.checkpoint_interval_s = Some(limits::MIN_CHECKPOINT_INTERVAL_S);
        j.deadline_s = Some(limits::MAX_DURATION_S);
        assert_eq!(j.check(), Ok(()));
        for bad in [f64::NAN, f64::INFINITY, 0.0, -1.0, limits::MAX_DURATION_S * 2.0] {
            j.deadline_s = Some(bad);
            assert_eq!(field_of(&j).as_deref(), Some("deadline_s"), "{bad}");
        }
        let mut j = submit();
        j.env.insert("K".into(), "a\0b".into());
        assert_eq!(field_of(&j).as_deref(), Some("env.K"));
    }

    #[test]
    fn labels_with_control_characters_are_refused() {
        for bad in ["\u{1b}[31mred", "two\nlines", "tab\there", "\u{7f}"] {
            let mut j = submit();
            j.name = Some(bad.into());
            assert_eq!(field_of(&j).as_deref(), Some("name"), "{bad:?}");
            let mut j = submit();
            j.team = Some(bad.into());
            assert_eq!(field_of(&j).as_deref(), Some("team"), "{bad:?}");
        }
        let mut j = submit();
        j.name = Some("résumé — run 3".into());
        assert_eq!(j.check(), Ok(()), "non-ASCII text is fine");
    }
}
