//! The daemon's state around the engine: every input goes through [`State::apply`], which logs it, hands it to
//! the engine and turns the engine's actions into desired state (what each node's agent should run or stop) and
//! provider calls to make. The same path rebuilds everything on startup by replaying the log with effects off.

use crate::store::{Entry, JobCommand, Store, StoreError};
use spillway_api::{Assignment, EventView, StopOrder, WorkerRef};
use spillway_core::{Action, Engine, Event, JobId, JobState, NodeId, NodeState, Time};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;

/// The most decisions kept in memory for `GET /v1/events`.
const MAX_DECISIONS: usize = 200_000;

/// A provider call the daemon must make once the state lock is released.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Launch { node: u32 },
    Terminate { node: u32 },
}

/// The daemon's state. One lock guards it; provider calls run outside it and come back as events.
pub struct State {
    pub engine: Engine,
    pub store: Store,
    pub data_dir: PathBuf,
    /// True while the log is being replayed: nothing is logged and no effect is produced.
    replaying: bool,
    /// What each job runs, by job id.
    pub commands: Vec<JobCommand>,
    pub decisions: VecDeque<EventView>,
    next_decision: u64,
    /// Agent tokens by node.
    pub tokens: BTreeMap<u32, String>,
    /// Workers each node should be running.
    pub assignments: BTreeMap<u32, BTreeMap<WorkerRef, Assignment>>,
    /// Workers each node should stop.
    pub stops: BTreeMap<u32, BTreeMap<WorkerRef, StopOrder>>,
    /// Workers each node reported running in its last heartbeat.
    pub running: BTreeMap<u32, BTreeSet<WorkerRef>>,
    /// Exits reported so far by (job, attempt): rank -> success.
    pub exits: BTreeMap<(u32, u32), BTreeMap<u32, bool>>,
    /// Spot nodes under an interruption notice, and when the cloud takes them.
    pub reclaim_at: BTreeMap<u32, Time>,
    /// Provider calls to make.
    pub effects: Vec<Effect>,
    /// Submissions the engine has not decided on yet (the next tick decides them in one batch).
    pub undecided: bool,
    /// The minute of the last cost snapshot.
    pub cost_minute: Option<i64>,
}

/// Why an input was refused; nothing was logged.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Engine(String),
}

impl State {
    /// Returns a state whose engine starts at `t0` with `cfg`, over `store`.
    pub fn new(engine: Engine, store: Store, data_dir: PathBuf) -> Result<State, StoreError> {
        let tokens = store.tokens()?;
        Ok(State {
            engine,
            store,
            data_dir,
            replaying: false,
            commands: Vec::new(),
            decisions: VecDeque::new(),
            next_decision: 0,
            tokens,
            assignments: BTreeMap::new(),
            stops: BTreeMap::new(),
            running: BTreeMap::new(),
            exits: BTreeMap::new(),
            reclaim_at: BTreeMap::new(),
            effects: Vec::new(),
            undecided: false,
            cost_minute: None,
        })
    }

    /// Rebuilds the state by replaying the store's log with effects off. Returns the number of entries replayed.
    pub fn replay(&mut self) -> Result<usize, ApplyError> {
        let log = self.store.load_log()?;
        self.replaying = true;
        for (at, entry) in &log {
            // A refusal during replay was a refusal when it was first applied too: the same engine, the same input.
            let _ = self.apply(*at, entry.clone());
        }
        self.replaying = false;
        Ok(log.len())
    }

    /// Logs `entry` at `now` (unless replaying), applies it to the engine and carries out the resulting actions into
    /// desired state and effects. Returns the new job's id for a submission.
    pub fn apply(&mut self, now: Time, entry: Entry) -> Result<Option<JobId>, ApplyError> {
        if !self.replaying {
            self.store.append(now, &entry)?;
        }
        // Submissions are decided in batches at the next tick (a logged wake), not one by one: a decision scans
        // the queue, so deciding per submission would make a burst of N jobs cost N scans. Replay follows the
        // same rule, so it rebuilds the same state.
        let decide = !matches!(entry, Entry::Submit { .. });
        let result = match entry {
            Entry::Submit { spec, command } => match self.engine.submit(now, spec) {
                Ok(id) => {
                    // Job ids come from a counter, so the command's index is the id.
                    self.commands.resize(id.0 as usize, JobCommand::default());
                    self.commands.push(command);
                    Ok(Some(id))
                }
                Err(e) => Err(ApplyError::Engine(e.to_string())),
            },
            Entry::Event(event) => {
                if let Event::InterruptionNotice { node, deadline } = &event {
                    self.reclaim_at.insert(node.0, *deadline);
                }
                self.engine.handle_event(now, event).map(|_| None).map_err(|e| ApplyError::Engine(e.to_string()))
            }
            Entry::Wake => {
                self.engine.handle_timeout(now);
                Ok(None)
            }
        };
        if decide {
            self.drain();
        } else {
            self.undecided = true;
        }
        result
    }

    /// Turns the engine's pending actions into desired state and effects.
    fn drain(&mut self) {
        self.undecided = false;
        while let Some(action) = self.engine.poll_action() {
            match action {
                Action::Launch { node, .. } => {
                    if !self.tokens.contains_key(&node.0) {
                        let token = new_token();
                        // A token that cannot be saved would lock the agent out after a restart; the launch then
                        // fails at registration and the engine relaunches, so log and go on.
                        if let Err(e) = self.store.put_token(node.0, &token) {
                            eprintln!("spillway: {e}");
                        }
                        self.tokens.insert(node.0, token);
                    }
                    if !self.replaying {
                        self.effects.push(Effect::Launch { node: node.0 });
                    }
                }
                Action::Terminate { node } => {
                    self.assignments.remove(&node.0);
                    if !self.replaying {
                        self.effects.push(Effect::Terminate { node: node.0 });
                    }
                }
                Action::StartJob { job, attempt, placement } => self.start(job, attempt, &placement),
                Action::StopJob { job, attempt, grace_ms, .. } => self.stop_attempt(job.0, attempt, grace_ms.max(0) as u64),
                Action::Record(d) => {
                    let view = EventView {
                        seq: self.next_decision,
                        at: d.at as f64 / 1000.0,
                        kind: serde_json::to_value(d.kind).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
                        subject: d.subject,
                        reason: d.reason.to_string(),
                        detail: d.detail,
                    };
                    self.next_decision += 1;
                    if self.decisions.len() == MAX_DECISIONS {
                        self.decisions.pop_front();
                    }
                    self.decisions.push_back(view);
                }
            }
        }
    }

    /// Records the assignments of a started attempt, one worker per placement entry.
    fn start(&mut self, job: JobId, attempt: u32, placement: &[(NodeId, u32)]) {
        let command = self.commands.get(job.0 as usize).cloned().unwrap_or_default();
        let dir = |sub: &str| self.data_dir.join(sub).join(format!("job-{}", job.0)).display().to_string();
        for (rank, &(node, gpus)) in placement.iter().enumerate() {
            let worker = WorkerRef { job: job.0, attempt, rank: rank as u32 };
            let a = Assignment {
                worker,
                world_size: placement.len() as u32,
                gpus,
                argv: command.argv.clone(),
                env: command.env.clone(),
                workdir: command.workdir.clone(),
                checkpoint_dir: dir("checkpoints"),
                log_path: format!("{}/rank-{rank}.log", dir("logs")),
                master_addr: "127.0.0.1".into(),
                // A port per job, away from the well-known range, so gangs on one machine do not collide.
                master_port: 29_500 + (job.0 % 20_000) as u16,
            };
            self.assignments.entry(node.0).or_default().insert(worker, a);
        }
    }

    /// Moves every worker of `(job, attempt)` from the assignments to the stop orders of its node.
    pub fn stop_attempt(&mut self, job: u32, attempt: u32, grace_ms: u64) {
        for (node, workers) in self.assignments.iter_mut() {
            let mine: Vec<WorkerRef> = workers.keys().filter(|w| w.job == job && w.attempt == attempt).copied().collect();
            for w in mine {
                workers.remove(&w);
                self.stops.entry(*node).or_default().insert(w, StopOrder { worker: w, grace_ms, signal: "SIGTERM".into() });
            }
        }
    }

    /// Records a worker's exit; when the attempt is over (every rank exited, or one failed) logs `JobExited` and
    /// stops the ranks still running. Returns whether the exit can be acknowledged (it is recorded for good).
    pub fn worker_exited(&mut self, now: Time, w: WorkerRef, success: bool) -> Result<bool, ApplyError> {
        let Some(job) = self.engine.job(JobId(w.job)) else { return Ok(true) };
        if job.state != JobState::Running || job.attempt != w.attempt {
            // A stopped or finished attempt: its exit changes nothing.
            self.exits.remove(&(w.job, w.attempt));
            return Ok(true);
        }
        let world = job.spec.workers;
        let ranks = self.exits.entry((w.job, w.attempt)).or_default();
        ranks.insert(w.rank, success);
        let failed = ranks.values().any(|ok| !ok);
        if failed || ranks.len() as u32 >= world {
            self.exits.remove(&(w.job, w.attempt));
            self.apply(now, Entry::Event(Event::JobExited { job: JobId(w.job), attempt: w.attempt, success: !failed }))?;
            self.stop_attempt(w.job, w.attempt, 5_000);
            return Ok(true);
        }
        // Not acknowledged until the whole attempt is logged, so a restart cannot lose a gang's earlier exits.
        Ok(false)
    }

    /// Returns whether node `n` is alive in the engine (requested, ready or draining).
    pub fn alive(&self, n: u32) -> bool {
        self.engine.cluster().nodes.get(n as usize).is_some_and(|x| x.alive())
    }

    /// Returns a node's state, if the node exists.
    pub fn node_state(&self, n: u32) -> Option<NodeState> {
        self.engine.cluster().nodes.get(n as usize).map(|x| x.state)
    }
}

/// Returns a fresh random token (128 bits from the OS, hex).
pub fn new_token() -> String {
    use std::io::Read;
    let mut buf = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).is_ok();
    if !ok {
        // No urandom: fall back to time and address entropy (still unguessable enough for a loopback daemon).
        #[allow(clippy::disallowed_methods)]
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let salt = std::process::id() as u128;
        buf.copy_from_slice(&(t ^ (salt << 64)).to_le_bytes());
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}
