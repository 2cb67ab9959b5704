//! The daemon's state around the engine. Every input goes through [`State::apply`], which logs it, hands it to
//! the engine and turns the engine's actions into effects (provider calls). The same path rebuilds everything on
//! startup by replaying the log with effects off.
//!
//! What an agent runs is never kept beside the log: it is derived from the replayed engine on every heartbeat
//! ([`State::desired`]): the workers of the current attempt of each running job placed on the node. A finished
//! job is not running, so no replay can hand it out again. The user-facing guarantees, and where they hold:
//! - a finished (succeeded, failed or cancelled) job never runs again: desired work is only running jobs';
//! - an attempt runs at most once: a worker goes only to the agent holding the node's current token (the launch's
//!   incarnation, a log entry), the agent never starts a worker twice, and a node whose agent is replaced first
//!   has its attempts requeued as new ones ([`spillway_core::Event::AttemptLost`]);
//! - no two attempts of a job run at once: an attempt is handed out only while no agent reports another attempt
//!   of the job, after every node alive at startup has reported (or timed out), and a silent node is fenced
//!   (its instance terminated) before its jobs move;
//! - a submission answered 2xx is never lost: it is committed to the log before the answer.

use crate::store::{Entry, JobCommand, Store, StoreError};
use spillway_api::{Assignment, EventView, WorkerRef};
use spillway_core::{Action, Engine, Event, Exit, JobId, JobState, NodeId, NodeState, Time};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;

/// The most unfinished (queued or running) jobs a team may have, and the most bytes their commands may hold.
pub const MAX_BACKLOG_JOBS: usize = 100_000;
pub const MAX_BACKLOG_BYTES: usize = 256 << 20;

/// The most decisions kept in memory for `GET /v1/events`.
const MAX_DECISIONS: usize = 200_000;

/// A provider call the daemon must make once the state lock is released.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Launch `node` with an agent holding `token`.
    Launch { node: u32, token: String },
    /// Terminate what the provider holds for `node` (by its recorded instance, or by listing).
    Terminate { node: u32 },
    /// Terminate `node`'s instance and report back ([`State::fenced`]): its jobs move only once it is gone.
    Fence { node: u32 },
    /// Terminate an instance the engine has no live node for.
    TerminateInstance { id: String },
    /// List the provider's instances and reconcile ([`State::reconcile`]).
    List,
    /// Hand Slurm's node `name` back to Slurm: requeue its jobs and power it down, giving `reason`.
    SlurmHandBack { name: String, reason: String },
    /// Post a budget alert (JSON) to the alert webhook.
    Alert { body: String },
}

/// Per rank of one attempt: whether it succeeded and how its process ended.
pub(crate) type RankExits = BTreeMap<u32, (bool, Option<Exit>)>;

/// How `/metrics` counts decisions: kind and reason, and the pool or tier of their subject ("" when none).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DecisionKey {
    pub kind: String,
    pub reason: String,
    pub pool: String,
    pub tier: String,
}

/// Settings of the state that are not part of the cluster config.
#[derive(Debug, Clone)]
pub struct StateOptions {
    /// Checkpoint and log directories of jobs live under `jobs_dir/job-N/`.
    pub jobs_dir: PathBuf,
    pub cluster_id: String,
    /// A ready node whose agent is silent this long is fenced and its jobs requeued.
    pub heartbeat_timeout_ms: Time,
    /// A launched node whose agent has not registered this long after its expected boot is a failed launch.
    pub boot_grace_ms: Time,
    /// How often the provider's instances are listed and reconciled.
    pub reconcile_every_ms: Time,
    /// The most unfinished jobs a team may have, and the most bytes their commands may hold
    /// ([`MAX_BACKLOG_JOBS`], [`MAX_BACKLOG_BYTES`] by default).
    pub max_backlog: (usize, usize),
}

/// The daemon's state. One lock guards it; provider calls run outside it and come back as method calls.
pub struct State {
    pub engine: Engine,
    pub store: Store,
    pub opts: StateOptions,
    /// True while the log is being replayed: nothing is logged and no effect is produced.
    pub(crate) replaying: bool,
    /// What each job runs, by job id.
    pub commands: Vec<JobCommand>,
    pub decisions: VecDeque<EventView>,
    /// Decisions so far by (kind, reason, pool, tier), for `/metrics` (rebuilt by replay, so they survive a
    /// restart); a decision about a node or pool has its pool, one about a job its tier, else "".
    pub decision_counts: BTreeMap<DecisionKey, u64>,
    /// The highest value `/metrics` served per float counter series (they must never go down).
    pub metric_floor: BTreeMap<String, f64>,
    next_decision: u64,
    /// SHA-256 of each node's current agent token (from `NodeToken` log entries).
    pub token_hashes: BTreeMap<u32, String>,
    /// The same, by hash: how a heartbeat's token finds its node (launch tokens not yet retired included).
    pub(crate) token_nodes: BTreeMap<String, u32>,
    /// Per node whose agent has not moved to a session token yet: its launch token's hash (see `tokens`).
    pub(crate) launch_tokens: BTreeMap<u32, String>,

    /// Grace of each stopped attempt, from the engine's `StopJob` actions.
    pub(crate) stop_grace: BTreeMap<(u32, u32), u64>,
    /// Workers each node reported running in its last heartbeat, and the attempts per job they make up.
    pub(crate) running: BTreeMap<u32, BTreeSet<WorkerRef>>,
    pub(crate) attempts_running: BTreeMap<u32, BTreeMap<u32, u32>>,
    /// Workers handed to a node and not yet seen gone there, with the heartbeat `seq` whose reply handed them out:
    /// until a later heartbeat that applied that reply shows them absent, they may be running.
    pub(crate) handed: BTreeMap<u32, BTreeMap<WorkerRef, u64>>,
    pub(crate) attempts_handed: BTreeMap<u32, BTreeMap<u32, u32>>,
    /// The `seq` of the last heartbeat handled per node: an older one (a delayed or duplicated request) is stale.
    pub(crate) beat_seq: BTreeMap<u32, u64>,
    /// Set on a graceful stop: no work is handed out while the agents report their last exits.
    pub stopping: bool,
    /// Per team, the jobs that may still be unfinished (pruned by [`State::backlog`]).
    backlog: BTreeMap<String, (Vec<u32>, usize)>,
    /// Nodes whose launch is in flight (not yet answered).
    pub(crate) launching: BTreeSet<u32>,
    /// Every attempt of every job: where, when, how it ended, what it cost.
    pub(crate) attempts: crate::attempts::Attempts,
    /// Exits reported so far by (job, attempt).
    pub(crate) exits: BTreeMap<(u32, u32), RankExits>,
    /// Spot nodes under an interruption notice, and when the cloud takes them.
    pub reclaim_at: BTreeMap<u32, Time>,
    /// Provider calls to make.
    pub effects: Vec<Effect>,
    /// Submissions the engine has not decided on yet (the next tick decides them in one batch). Also true after
    /// the replay at start (see [`State::replay`]).
    pub undecided: bool,
    /// The minute of the last cost snapshot.
    pub cost_minute: Option<i64>,
    /// The hourly cost rate of the last snapshot: a new one is taken whenever the rate changes.
    pub cost_rate: Option<spillway_api::CostView>,
    /// Shell clocks (ms): last heartbeat per node, when a launch came back, last logged utilization sample.
    pub(crate) seen: BTreeMap<u32, Time>,
    /// The address each node's agent says other nodes reach it at (its heartbeats' `addr`): a job's
    /// `MASTER_ADDR` is its rank-0 node's. In memory only: every node alive at a start reports before any work
    /// is handed out, and a node runs nothing before its first heartbeat.
    pub(crate) addrs: BTreeMap<u32, String>,
    pub(crate) launched: BTreeMap<u32, Time>,
    pub(crate) last_metric: BTreeMap<u32, Time>,
    /// Provider instance id per node, as the provider answered.
    pub instances: BTreeMap<u32, String>,
    /// Notices about instances not known yet (the notice came before the launch's answer), with when they came:
    /// acted on when the instance's node is known, forgotten after [`EARLY_NOTICE_MS`].
    pub(crate) early_notices: Vec<(Time, spillway_providers::Notice)>,
    /// Nodes being fenced (their instance terminated before their jobs move), since when.
    pub(crate) fencing: BTreeMap<u32, Time>,
    /// Nodes alive at startup that have not reported yet: no work is handed out until they have (or timed out).
    pub(crate) awaiting: BTreeSet<u32>,
    pub(crate) next_reconcile: Time,
    /// Slurm nodes handed back to Slurm: when, and why (see [`crate::slurm::sync::RETURN_QUIET_MS`]).
    pub(crate) slurm_returned: BTreeMap<String, (Time, String)>,
    /// How long Slurm may say a node it asked for does not answer before the node is taken for lost.
    pub slurm_liveness_ms: Time,
    /// Per node Slurm asked for: since when Slurm has said it does not answer.
    pub(crate) slurm_down_since: BTreeMap<u32, Time>,
    /// Launches the engine asked for during the current drain; they get tokens once it is over.
    new_launches: Vec<u32>,
    /// Set when a write to the store failed for good: nothing is applied any more and the daemon stops.
    pub fatal: Option<String>,
}

/// Why an input was refused; nothing was logged.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Engine(String),
    #[error("the daemon is stopping: {0}")]
    Stopped(String),
}

impl State {
    /// Returns a state over `engine` (fresh, at its start time) and `store`; call [`State::replay`] next.
    pub fn new(engine: Engine, store: Store, opts: StateOptions, now: Time) -> State {
        State {
            engine,
            store,
            opts,
            replaying: false,
            commands: Vec::new(),
            decisions: VecDeque::new(),
            decision_counts: BTreeMap::new(),
            metric_floor: BTreeMap::new(),
            next_decision: 0,
            token_hashes: BTreeMap::new(),
            token_nodes: BTreeMap::new(),
            launch_tokens: BTreeMap::new(),

            stop_grace: BTreeMap::new(),
            running: BTreeMap::new(),
            attempts_running: BTreeMap::new(),
            handed: BTreeMap::new(),
            attempts_handed: BTreeMap::new(),
            beat_seq: BTreeMap::new(),
            launching: BTreeSet::new(),
            backlog: BTreeMap::new(),
            stopping: false,
            exits: BTreeMap::new(),
            attempts: Default::default(),
            reclaim_at: BTreeMap::new(),
            effects: Vec::new(),
            undecided: false,
            cost_minute: None,
            cost_rate: None,
            seen: BTreeMap::new(),
            addrs: BTreeMap::new(),
            launched: BTreeMap::new(),
            last_metric: BTreeMap::new(),
            instances: BTreeMap::new(),
            early_notices: Vec::new(),
            fencing: BTreeMap::new(),
            awaiting: BTreeSet::new(),
            next_reconcile: now,
            slurm_returned: BTreeMap::new(),
            slurm_liveness_ms: 0,
            slurm_down_since: BTreeMap::new(),
            new_launches: Vec::new(),
            fatal: None,
        }
    }

    /// Rebuilds the state by replaying the store's log with effects off. Returns the number of entries replayed.
    /// A submission the engine now refuses (an entry an older version accepted) becomes a failed job with the
    /// reason recorded, so later job ids stay those of the log; a refused event was refused when it was first
    /// applied too (the same engine, the same input) and changes nothing.
    pub fn replay(&mut self) -> Result<usize, ApplyError> {
        let log = self.store.load_log()?;
        self.replaying = true;
        for (seq, at, entry) in &log {
            if let Err(e) = self.apply_entry(*at, entry.clone())
                && matches!(entry, Entry::Submit { .. })
            {
                eprintln!("spillway: replay: log entry {seq}: {e}");
            }
        }
        self.replaying = false;
        // The first tick decides once, whatever the log held: a config started with a higher `min_nodes` (or a
        // new data dir) brings its nodes up without waiting for a job or a timer.
        self.undecided = true;
        // The books as of the last entry (the start, for a new data dir), so a cost window reaching back before
        // the first change since this start is exact too.
        self.snapshot_cost(self.engine.now(), false);
        Ok(log.len())
    }

    /// Logs `entry` at `now`, applies it to the engine and turns the resulting actions into effects. Returns the
    /// new job's id for a submission. A submission the engine would refuse is refused before anything is logged;
    /// a write that fails for good stops the daemon (nothing is applied that is not in the log).
    pub fn apply(&mut self, now: Time, entry: Entry) -> Result<Option<JobId>, ApplyError> {
        if let Some(f) = &self.fatal {
            return Err(ApplyError::Stopped(f.clone()));
        }
        if let Entry::Submit { spec, .. } = &entry {
            spillway_core::check_new_spec(self.engine.config(), spec).map_err(|e| ApplyError::Engine(e.to_string()))?;
        }
        self.log(now, &entry)?;
        let result = self.apply_entry(now, entry);
        self.snapshot_cost(now, false);
        result
    }

    /// Appends `entry` to the log (not while replaying); a failure is fatal.
    fn log(&mut self, now: Time, entry: &Entry) -> Result<(), ApplyError> {
        if self.replaying {
            return Ok(());
        }
        if let Err(e) = self.store.append(now, entry) {
            eprintln!("spillway: {e}; the daemon stops (nothing unlogged is acted on)");
            self.fatal = Some(e.to_string());
            return Err(e.into());
        }
        Ok(())
    }

    /// Applies a logged entry. Submissions are decided in batches at the next tick (a logged wake), not one by
    /// one: a decision scans the queue, so deciding per submission would make a burst of N jobs cost N scans.
    /// Replay follows the same rule, so it rebuilds the same state.
    fn apply_entry(&mut self, now: Time, entry: Entry) -> Result<Option<JobId>, ApplyError> {
        let result = match entry {
            Entry::Submit { spec, command } => {
                let team = spec.team.to_string();
                let id = match self.engine.submit(now, spec.clone()) {
                    Ok(id) => Ok(id),
                    Err(e) => {
                        // Logged but refused: keep the job (failed) so the ids of later entries stay aligned.
                        let reason = e.to_string();
                        let id = self.engine.submit_refused(now, spec, reason.clone());
                        self.commands.resize(id.0 as usize, JobCommand::default());
                        self.commands.push(command.clone());
                        // Its record (refused_on_replay) goes to the event log.
                        self.drain(now);
                        Err(ApplyError::Engine(format!("job {}: {reason}", id.0)))
                    }
                }?;
                // Job ids come from a counter, so the command's index is the id.
                self.commands.resize(id.0 as usize, JobCommand::default());
                let tally = self.backlog.entry(team).or_default();
                tally.0.push(id.0);
                tally.1 += command.bytes();
                self.commands.push(command);
                self.undecided = true;
                return Ok(Some(id));
            }
            Entry::NodeToken { node, hash } => {
                self.launch_token(node, hash);
                return Ok(None);
            }
            Entry::NodeSession { node, hash } => {
                self.set_token_hash(node, hash);
                return Ok(None);
            }
            Entry::NodeTokenRetired { node } => {
                self.retire_launch_token(node);
                return Ok(None);
            }
            Entry::Event(event) => {
                if let Event::InterruptionNotice { node, deadline } = &event {
                    self.reclaim_at.insert(node.0, *deadline);
                }
                let exited = match &event {
                    Event::JobExited { job, attempt, .. } => Some((*job, *attempt)),
                    _ => None,
                };
                let r =
                    self.engine.handle_event(now, event).map(|_| None).map_err(|e| ApplyError::Engine(e.to_string()));
                // The exit ended the job if the engine took it: that attempt is its last.
                if let Some((job, attempt)) = exited
                    && let Some(j) = self.engine.job(job).filter(|j| j.attempt == attempt && j.ended.is_some())
                {
                    let success = j.state == JobState::Succeeded;
                    self.attempts.exited(now, job, attempt, success, j.exit);
                }
                r
            }
            Entry::Wake => {
                self.engine.handle_timeout(now);
                Ok(None)
            }
        };
        self.drain(now);
        result
    }

    /// Turns the engine's pending actions into effects, then gives each new launch its token.
    fn drain(&mut self, now: Time) {
        self.undecided = false;
        while let Some(action) = self.engine.poll_action() {
            match action {
                Action::Launch { node, .. } if !self.replaying => self.new_launches.push(node.0),
                Action::Terminate { node } if !self.replaying => self.effects.push(Effect::Terminate { node: node.0 }),
                Action::StartJob { job, attempt, placement } => {
                    self.attempts.started(now, job, attempt, &placement);
                }
                Action::Launch { .. } | Action::Terminate { .. } => {}
                Action::StopJob { job, attempt, grace_ms, reason } => {
                    self.attempts.stopped(now, job, attempt, &reason);
                    self.stop_grace.insert((job.0, attempt), grace_ms.max(0) as u64);
                }
                Action::ReturnNode { name, why } => {
                    self.slurm_returned.insert(name.clone(), (now, why.to_string()));
                    if !self.replaying {
                        self.effects.push(Effect::SlurmHandBack { name, reason: why.to_string() });
                    }
                }
                Action::BudgetAlert(a) if !self.replaying => {
                    let body = crate::webhook::body(&a, now, &self.opts.cluster_id);
                    self.effects.push(Effect::Alert { body });
                }
                Action::BudgetAlert(_) => {}
                Action::Record(d) => self.record(d),
            }
        }
        for node in std::mem::take(&mut self.new_launches) {
            if let Ok(token) = self.issue_token(now, node) {
                self.launching.insert(node);
                self.effects.push(Effect::Launch { node, token });
            }
        }
    }

    /// Keeps a decision for `GET /v1/events`.
    fn record(&mut self, d: spillway_core::Decision) {
        let view = EventView {
            seq: self.next_decision,
            at: d.at as f64 / 1000.0,
            kind: serde_json::to_value(d.kind).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
            subject: d.subject,
            reason: d.reason.to_string(),
            detail: d.detail,
        };
        self.next_decision += 1;
        let key = self.decision_key(&view);
        *self.decision_counts.entry(key).or_default() += 1;
        if self.decisions.len() == MAX_DECISIONS {
            self.decisions.pop_front();
        }
        self.decisions.push_back(view);
    }

    /// Returns the counting key of a decision: its kind and reason, and the pool or tier its subject belongs to.
    fn decision_key(&self, v: &EventView) -> DecisionKey {
        let cfg = self.engine.config();
        let c = self.engine.cluster();
        let (scope, id) = v.subject.split_once(':').unwrap_or(("", ""));
        let index = id.parse::<usize>().ok();
        let (pool, tier) = match scope {
            "pool" => (id.to_string(), String::new()),
            "node" => (
                index.and_then(|i| c.nodes.get(i)).map(|n| cfg.pools[n.pool].name.clone()).unwrap_or_default(),
                String::new(),
            ),
            "job" => (
                String::new(),
                index.and_then(|i| c.jobs.get(i)).map(|j| cfg.tiers[j.tier].name.clone()).unwrap_or_default(),
            ),
            _ => (String::new(), String::new()),
        };
        DecisionKey { kind: v.kind.clone(), reason: v.reason.clone(), pool, tier }
    }

    /// Issues a fresh agent token for a launch of `node` and logs its hash (voiding the node's earlier tokens).
    pub(crate) fn issue_token(&mut self, now: Time, node: u32) -> Result<String, ApplyError> {
        let token = crate::datadir::new_token().map_err(|e| {
            eprintln!("spillway: no randomness for a node token: {e}");
            ApplyError::Engine(format!("no randomness for a node token: {e}"))
        })?;
        let hash = crate::datadir::token_hash(&token);
        self.log(now, &Entry::NodeToken { node, hash: hash.clone() })?;
        self.launch_token(node, hash);
        Ok(token)
    }

    /// Makes `hash` node `n`'s current agent token; the node's earlier current token is void (its launch token
    /// stays valid until retired).
    pub(crate) fn set_token_hash(&mut self, n: u32, hash: String) {
        if let Some(old) = self.token_hashes.insert(n, hash.clone())
            && self.launch_tokens.get(&n) != Some(&old)
        {
            self.token_nodes.remove(&old);
        }
        self.token_nodes.insert(hash, n);
    }

    /// Applies an input the daemon itself observed (a lost heartbeat, a launch result). An engine refusal is
    /// logged and ignored (the input changes nothing); a store failure is fatal and reported to the caller.
    pub(crate) fn observe(&mut self, now: Time, entry: Entry) -> Result<(), ApplyError> {
        match self.apply(now, entry) {
            Err(ApplyError::Engine(e)) => {
                eprintln!("spillway: {e}");
                Ok(())
            }
            other => other.map(|_| ()),
        }
    }

    /// Returns the workers node `n` should be running: one per placement entry on `n` of each running job's
    /// current attempt. Derived from the engine alone, so a replay rebuilds it exactly.
    pub fn desired(&self, n: u32) -> BTreeMap<WorkerRef, Assignment> {
        let mut out = BTreeMap::new();
        let Some(node) = self.engine.cluster().nodes.get(n as usize) else { return out };
        for &id in &node.jobs {
            let Some(j) = self.engine.job(id).filter(|j| j.state == JobState::Running) else { continue };
            for (rank, &(on, gpus)) in j.placement.iter().enumerate() {
                if on.0 == n {
                    let a = self.assignment(j, rank as u32, gpus);
                    out.insert(a.worker, a);
                }
            }
        }
        out
    }

    /// Returns worker `rank` of a running job's current attempt.
    fn assignment(&self, j: &spillway_core::Job, rank: u32, gpus: u32) -> Assignment {
        let command = self.commands.get(j.id.0 as usize).cloned().unwrap_or_default();
        let dir = self.opts.jobs_dir.join(format!("job-{}", j.id.0));
        Assignment {
            worker: WorkerRef { job: j.id.0, attempt: j.attempt, rank },
            world_size: j.placement.len() as u32,
            gpus,
            argv: command.argv,
            env: command.env,
            workdir: command.workdir,
            checkpoint_dir: dir.join("checkpoints").display().to_string(),
            log_path: dir.join("logs").join(format!("rank-{rank}.log")).display().to_string(),
            // Rank 0's node hosts the group (and torchrun's c10d store); an agent that never said its address
            // (an older one) is taken to share the daemon's machine, as the local provider's do.
            master_addr: j
                .placement
                .first()
                .and_then(|&(n, _)| self.addrs.get(&n.0))
                .cloned()
                .unwrap_or_else(|| "127.0.0.1".into()),
            // A port per job, away from the well-known range, so gangs on one machine do not collide.
            master_port: 29_500 + (j.id.0 % 20_000) as u16,
            workers_range: Some((j.gang.workers, j.gang.max_workers)),
            region: self.attempt_region(j),
            // Set only when this attempt's start moved the data (its transfer time is the engine's estimate of
            // the copy); a start where a current copy is moves nothing.
            data_from: j.data_copy().filter(|_| j.transfer_ms() > 0).map(str::to_string),
        }
    }

    /// Returns the region of the pool a running job's attempt is in, when the pool names one.
    fn attempt_region(&self, j: &spillway_core::Job) -> Option<String> {
        let node = j.placement.first()?.0;
        let pool = self.engine.cluster().nodes.get(node.0 as usize)?.pool;
        self.engine.config().pools.get(pool)?.region.clone()
    }

    /// Returns whether worker `w` is part of the current attempt of a running job and placed on node `n`: the
    /// only workers node `n`'s token may report exits and checkpoints for.
    pub fn owns(&self, n: u32, w: WorkerRef) -> bool {
        self.engine.job(JobId(w.job)).is_some_and(|j| {
            j.state == JobState::Running
                && j.attempt == w.attempt
                && j.placement.get(w.rank as usize).is_some_and(|&(on, _)| on.0 == n)
        })
    }

    /// Records the workers node `n` reports running.
    pub(crate) fn set_running(&mut self, n: u32, workers: BTreeSet<WorkerRef>) {
        if let Some(old) = self.running.remove(&n) {
            for w in old {
                count(&mut self.attempts_running, w, false);
            }
        }
        for &w in &workers {
            count(&mut self.attempts_running, w, true);
        }
        if !workers.is_empty() {
            self.running.insert(n, workers);
        }
    }

    /// Records that worker `w` was handed to node `n` in the reply to heartbeat `seq`.
    pub(crate) fn hand_out(&mut self, n: u32, w: WorkerRef, seq: u64) {
        if self.handed.entry(n).or_default().insert(w, seq).is_none() {
            count(&mut self.attempts_handed, w, true);
        }
    }

    /// Forgets handed workers of node `n` that `keep` rejects (they are known gone there).
    pub(crate) fn settle_handed(&mut self, n: u32, mut keep: impl FnMut(&WorkerRef, u64) -> bool) {
        let Some(map) = self.handed.get_mut(&n) else { return };
        let gone: Vec<WorkerRef> = map.iter().filter(|&(w, &s)| !keep(w, s)).map(|(w, _)| *w).collect();
        for w in gone {
            map.remove(&w);
            count(&mut self.attempts_handed, w, false);
        }
        if map.is_empty() {
            self.handed.remove(&n);
        }
    }

    /// Forgets everything node `n` ran: its processes are gone (fenced, vanished or ended).
    pub(crate) fn forget_node(&mut self, n: u32) {
        self.set_running(n, BTreeSet::new());
        self.settle_handed(n, |_, _| false);
        self.beat_seq.remove(&n);
    }

    /// Returns whether another attempt of `job` than `attempt` may be running: reported by an agent, or handed
    /// out and not yet seen gone.
    pub fn other_attempt_running(&self, job: u32, attempt: u32) -> bool {
        let other =
            |m: &BTreeMap<u32, BTreeMap<u32, u32>>| m.get(&job).is_some_and(|a| a.keys().any(|&k| k != attempt));
        other(&self.attempts_running) || other(&self.attempts_handed)
    }

    /// Records a worker's exit; when the attempt is over (every rank exited, or one failed) logs `JobExited`.
    /// Returns whether the exit can be acknowledged (it is recorded for good).
    /// The attempt's exit is its first failed rank's, or rank 0's when all succeeded.
    pub(crate) fn worker_exited(
        &mut self,
        now: Time,
        w: WorkerRef,
        success: bool,
        exit: Option<Exit>,
    ) -> Result<bool, ApplyError> {
        let Some(job) = self.engine.job(JobId(w.job)) else { return Ok(true) };
        if job.state != JobState::Running || job.attempt != w.attempt {
            // A stopped or finished attempt: its exit changes nothing.
            self.exits.remove(&(w.job, w.attempt));
            return Ok(true);
        }
        let world = job.placement.len();
        let ranks = self.exits.entry((w.job, w.attempt)).or_default();
        ranks.insert(w.rank, (success, exit));
        let failed = ranks.values().find(|(ok, _)| !ok).copied();
        if failed.is_some() || ranks.len() >= world {
            let exit = failed.map_or_else(|| ranks.get(&0).and_then(|r| r.1), |(_, x)| x);
            self.exits.remove(&(w.job, w.attempt));
            let (job, attempt, success) = (JobId(w.job), w.attempt, failed.is_none());
            self.apply(now, Entry::Event(Event::JobExited { job, attempt, success, exit }))?;
            return Ok(true);
        }
        // Not acknowledged until the whole attempt is logged, so a restart cannot lose a gang's earlier exits.
        Ok(false)
    }

    /// Returns the `seq` of the last heartbeat handled from node `n` (0 before any).
    pub fn beat_seq_of(&self, n: u32) -> u64 {
        self.beat_seq.get(&n).copied().unwrap_or(0)
    }

    /// Checks that a team may add a job whose command holds `extra` bytes: its unfinished jobs stay under
    /// `max_backlog`'s jobs and their commands under its bytes. The tally is pruned of finished jobs
    /// only when it looks full, so a submission costs O(1) amortized. Returns the (jobs, bytes) in the way.
    pub fn backlog_room(&mut self, team: &str, extra: usize) -> Result<(), (usize, usize)> {
        let (max_jobs, max_bytes) = self.opts.max_backlog;
        let over = |(jobs, bytes): (usize, usize)| jobs >= max_jobs || bytes + extra > max_bytes;
        let Some((ids, bytes)) = self.backlog.get_mut(team) else { return Ok(()) };
        if !over((ids.len(), *bytes)) {
            return Ok(());
        }
        let (engine, commands) = (&self.engine, &self.commands);
        ids.retain(|&id| {
            engine.job(JobId(id)).is_some_and(|j| matches!(j.state, JobState::Queued | JobState::Running))
        });
        *bytes = ids.iter().filter_map(|&id| commands.get(id as usize)).map(JobCommand::bytes).sum();
        if over((ids.len(), *bytes)) { Err((ids.len(), *bytes)) } else { Ok(()) }
    }

    /// Returns whether worker `w` was ever placed on node `n` (by any attempt's placement, as `attempts` keeps it
    /// from the engine's `StartJob` actions, so a replay rebuilds it): a node's report that it runs a worker counts
    /// only for a worker placed on it.
    pub fn placed_on(&self, n: u32, w: WorkerRef) -> bool {
        self.attempts.node_of(w.job, w.attempt, w.rank) == Some(NodeId(n))
    }

    /// Returns whether node `n` is one another scheduler (Slurm) asked for.
    pub fn held(&self, n: u32) -> bool {
        self.engine.cluster().nodes.get(n as usize).is_some_and(|x| x.held.is_some())
    }

    /// Returns whether node `n` is alive (requested, ready or draining).
    pub fn alive(&self, n: u32) -> bool {
        self.engine.cluster().nodes.get(n as usize).is_some_and(|x| x.alive())
    }

    /// Returns a node's state, if the node exists.
    pub fn node_state(&self, n: u32) -> Option<NodeState> {
        self.engine.cluster().nodes.get(n as usize).map(|x| x.state)
    }

    /// Returns the node whose current agent token is `token`.
    pub fn node_of_token(&self, token: &str) -> Option<u32> {
        // Looked up by digest: timing can reveal at most something of a digest, never of a token.
        self.token_nodes.get(&crate::datadir::token_hash(token)).copied()
    }

    /// Returns the running jobs with a worker on node `n`, with their current attempts.
    pub(crate) fn attempts_on(&self, n: u32) -> Vec<(JobId, u32)> {
        let Some(node) = self.engine.cluster().nodes.get(n as usize) else { return Vec::new() };
        node.jobs
            .iter()
            .filter_map(|&id| self.engine.job(id))
            .filter(|j| j.state == JobState::Running && j.placement.iter().any(|&(on, _)| on == NodeId(n)))
            .map(|j| (j.id, j.attempt))
            .collect()
    }
}

/// Counts worker `w` in (`add`) or out of a per-job, per-attempt tally.
fn count(tally: &mut BTreeMap<u32, BTreeMap<u32, u32>>, w: WorkerRef, add: bool) {
    let per_job = tally.entry(w.job).or_default();
    let c = per_job.entry(w.attempt).or_insert(0);
    if add {
        *c += 1;
    } else {
        *c = c.saturating_sub(1);
        if *c == 0 {
            per_job.remove(&w.attempt);
        }
    }
    if per_job.is_empty() {
        tally.remove(&w.job);
    }
}
