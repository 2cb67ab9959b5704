//! The process runner: starts, stops and watches the node's workers. It knows nothing of HTTP, so tests drive it
//! directly; the heartbeat loop (`agent.rs`) feeds it the daemon's orders and reports what it saw.

use spillway_api::{Assignment, StopOrder, WorkerExit, WorkerRef};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant, SystemTime};

use crate::checkpoint::newest_mtime;
use crate::escaped::{Scope, signal_escaped, start_ticks, worker_tag};
use crate::gpus::{GpuPool, visible_devices};
use crate::history::History;
use crate::signals::{parse_signal, signal_group};
use crate::spawn::{Placement, append_log_line, spawn_worker};
use crate::user::RunAs;

/// Exit code reported for a worker that could not be started (as a shell reports a missing command).
pub const SPAWN_FAILED_CODE: i32 = 127;

/// A live worker process.
struct Worker {
    child: Child,
    /// The worker's process group id (its pid: it leads its own group).
    pgid: i32,
    gpus: Vec<u32>,
    checkpoint_dir: PathBuf,
    /// The newest checkpoint modification time already reported (initially the start time, so files left by an
    /// earlier attempt do not count).
    last_checkpoint: SystemTime,
    /// When a stop order's grace runs out: SIGKILL the group then.
    kill_at: Option<Instant>,
    /// The grace ran out and everything of the worker was killed (once: a leader that moved out of its group
    /// is killed by its pid then, so its reaping is not waited for with a scan at every poll).
    killed: bool,
    /// The tag its processes carry in their environment, its user and its leader's start (see
    /// [`crate::escaped`]).
    tag: String,
    uid: u32,
    since: u64,
    /// The process groups of its own it started, found by earlier signals (see [`signal_escaped`]).
    groups: BTreeSet<i32>,
}

impl Worker {
    /// Sends `sig` to the worker's process group and to the processes it started that left the group; returns
    /// whether any process got it.
    fn signal(&mut self, sig: libc::c_int) -> bool {
        let group = signal_group(self.pgid, sig);
        self.signal_escaped(sig) || group
    }

    /// Sends `sig` to the processes the worker started that left its group (see [`signal_escaped`]); returns
    /// whether any process got it.
    fn signal_escaped(&mut self, sig: libc::c_int) -> bool {
        let scope = Scope { tag: &self.tag, uid: self.uid, pgid: self.pgid, since: self.since };
        signal_escaped(&scope, sig, &mut self.groups) > 0
    }
}

/// Returns whether process `pid`, a child of the agent, has exited, without reaping it (until it is reaped its
/// pid, and so the id of the group it leads, cannot be reused), or `None` where waitid fails.
fn exited_unreaped(pid: i32) -> Option<bool> {
    // SAFETY: siginfo_t is plain data; waitid writes it and reads nothing else.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: waitid only writes `info`.
    let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) };
    // SAFETY: si_pid is set by waitid (0 when nothing exited).
    (r == 0).then(|| unsafe { info.si_pid() } != 0)
}

/// What [`Runner::start`] did with an assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartOutcome {
    /// A new process runs with these virtual GPUs.
    Started { pid: u32, gpus: Vec<u32> },
    /// The worker is running already: nothing to do.
    AlreadyRunning,
    /// The worker exited and the daemon has not acked it yet: it must not run again.
    AlreadyExited,
    /// This worker (or a later attempt of its job) was started before and its exit acked: a stale assignment,
    /// never run again.
    AlreadyRan,
    /// Fewer free virtual GPUs than it needs: not started (the daemon keeps sending it).
    NoGpus { needed: u32, free: u32 },
    /// It could not be started; recorded as an exit with code 127.
    Failed(String),
}

/// What one [`Runner::poll`] saw for the first time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PollReport {
    pub exits: Vec<WorkerExit>,
    pub checkpoints: Vec<WorkerRef>,
}

/// The node's workers: running processes, the virtual GPUs they hold, and the exits not yet acked by the daemon.
pub struct Runner {
    node: u32,
    data_dir: PathBuf,
    gpus: GpuPool,
    running: BTreeMap<WorkerRef, Worker>,
    exited: Vec<WorkerExit>,
    /// Every worker ever started by this runner, so none starts twice.
    history: History,
    /// The user workers run as (`--run-as`); `None`: as the agent.
    run_as: Option<RunAs>,
}

fn name(w: &WorkerRef) -> String {
    format!("job {} attempt {} rank {}", w.job, w.attempt, w.rank)
}

/// A path from an assignment: absolute as given, relative ones under the agent's data directory.
fn resolve(data_dir: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { data_dir.join(p) }
}

fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "unknown status".into(),
    }
}

impl Runner {
    /// A runner for node `node` with virtual GPUs `0..gpus`; relative checkpoint and log paths go under `data_dir`.
    pub fn new(node: u32, gpus: u32, data_dir: impl Into<PathBuf>) -> Self {
        Runner {
            node,
            data_dir: data_dir.into(),
            gpus: GpuPool::new(gpus),
            running: BTreeMap::new(),
            exited: Vec::new(),
            history: History::default(),
            run_as: None,
        }
    }

    /// The same runner, starting its workers as `user` (the caller checked the agent may: it must be root).
    pub fn with_run_as(mut self, user: RunAs) -> Self {
        self.run_as = Some(user);
        self
    }

    /// Starts `a` unless its worker is running, has an unacked exit or was ever started before (see
    /// [`StartOutcome`]), or the node lacks free GPUs for it. A spawn failure becomes an exit with code 127
    /// (reported like any other) and its text goes to the worker's log.
    pub fn start(&mut self, a: &Assignment) -> StartOutcome {
        let w = a.worker;
        if self.running.contains_key(&w) {
            return StartOutcome::AlreadyRunning;
        }
        if self.exited.iter().any(|e| e.worker == w) {
            return StartOutcome::AlreadyExited;
        }
        if self.history.ran(&w) {
            return StartOutcome::AlreadyRan;
        }
        let Some(gpus) = self.gpus.take(a.gpus, w) else {
            return StartOutcome::NoGpus { needed: a.gpus, free: self.gpus.free() };
        };
        // Recorded before the spawn: a failed start is reported as an exit, and a stale copy must not retry it.
        self.history.record(&w);
        let checkpoint_dir = resolve(&self.data_dir, &a.checkpoint_dir);
        let log_path = resolve(&self.data_dir, &a.log_path);
        // Taken before the spawn: a checkpoint the new process writes at once must count as newer.
        let started = SystemTime::now();
        let user = self.run_as.as_ref();
        let tag = worker_tag(self.node, &w);
        let (node, log_path) = (self.node, log_path.as_path());
        let placement = Placement { node, gpus: &gpus, checkpoint_dir: &checkpoint_dir, log_path, user, tag: &tag };
        match spawn_worker(a, &placement) {
            Ok(child) => {
                let pid = child.id();
                let who = self.run_as.as_ref().map(|u| format!(" as user {}", u.name)).unwrap_or_default();
                self.log(&format!("started {} pid {pid} gpus {}{who}", name(&w), visible_devices(&gpus)));
                // SAFETY: geteuid has no preconditions.
                let uid = self.run_as.as_ref().map_or_else(|| unsafe { libc::geteuid() }, |u| u.uid);
                let worker = Worker {
                    since: start_ticks(pid as i32).unwrap_or(0),
                    uid,
                    killed: false,
                    groups: BTreeSet::new(),
                    child,
                    pgid: pid as i32,
                    gpus: gpus.clone(),
                    checkpoint_dir,
                    last_checkpoint: started,
                    kill_at: None,
                    tag,
                };
                self.running.insert(w, worker);
                StartOutcome::Started { pid, gpus }
            }
            Err(e) => {
                self.gpus.release(w);
                let text = format!("{e:#}");
                let line = format!("spillway agent node {}: cannot start worker: {text}", self.node);
                append_log_line(log_path, self.run_as.as_ref(), &line);
                self.log(&format!("could not start {}: {text}", name(&w)));
                self.record_exit(WorkerExit { worker: w, code: Some(SPAWN_FAILED_CODE), success: false, signal: None });
                StartOutcome::Failed(text)
            }
        }
    }

    /// Sends the order's signal (SIGTERM when it names none or one we do not know) to the worker's process group
    /// and arms the SIGKILL deadline `grace_ms` later, checked by [`Runner::poll`]. Returns whether it signalled:
    /// false when the worker is not running or already stopping (the daemon repeats orders every heartbeat).
    pub fn stop(&mut self, order: &StopOrder) -> bool {
        let node = self.node;
        let Some(worker) = self.running.get_mut(&order.worker) else { return false };
        if worker.kill_at.is_some() {
            return false;
        }
        let sig = parse_signal(&order.signal).unwrap_or_else(|| {
            eprintln!("agent node {node}: unknown signal {:?} in stop order, sending SIGTERM", order.signal);
            libc::SIGTERM
        });
        worker.signal(sig);
        worker.kill_at = Some(Instant::now() + Duration::from_millis(order.grace_ms));
        self.log(&format!("stopping {} with signal {sig} (grace {} ms)", name(&order.worker), order.grace_ms));
        true
    }

    /// Reaps exited workers (freeing their GPUs and recording their exits), SIGKILLs groups whose stop grace ran
    /// out, and looks for new checkpoints of rank-0 workers. Returns the exits and checkpoints seen for the first
    /// time; the exits also stay in [`Runner::exited`] until acked.
    pub fn poll(&mut self) -> PollReport {
        let mut report = PollReport::default();
        let now = Instant::now();
        let mut finished = Vec::new();
        for (w, worker) in self.running.iter_mut() {
            let status = match exited_unreaped(worker.pgid) {
                Some(false) => Ok(None),
                Some(true) => {
                    // Whatever the leader left behind in its group would hold GPUs it no longer owns: killed while
                    // the unreaped leader keeps the group's id from being reused.
                    signal_group(worker.pgid, libc::SIGKILL);
                    worker.child.try_wait()
                }
                None => worker.child.try_wait(),
            };
            match status {
                Ok(Some(status)) => finished.push((*w, Some(status))),
                Ok(None) => {
                    if !worker.killed && worker.kill_at.is_some_and(|t| now >= t) {
                        worker.killed = true;
                        worker.signal(libc::SIGKILL);
                        // The leader too, in case it moved itself out of its group.
                        let _ = worker.child.kill();
                        eprintln!("agent node {}: grace over, killed {}", self.node, name(w));
                    }
                }
                Err(e) => {
                    eprintln!("agent node {}: cannot wait for {}: {e}; counting it as gone", self.node, name(w));
                    finished.push((*w, None));
                }
            }
            if w.rank == 0 && check_checkpoint(worker) {
                report.checkpoints.push(*w);
            }
        }
        for (w, status) in finished {
            let Some(mut worker) = self.running.remove(&w) else { continue };
            // Likewise what it left out of its group (its group was killed before it was reaped).
            worker.signal_escaped(libc::SIGKILL);
            self.gpus.release(w);
            let (code, signal) = (status.and_then(|s| s.code()), status.and_then(|s| s.signal()));
            let how = status.map(|s| describe(&s)).unwrap_or_else(|| "unknown status".into());
            self.log(&format!("{} exited with {how}", name(&w)));
            let exit = WorkerExit { worker: w, code, success: code == Some(0), signal };
            self.exited.push(exit.clone());
            report.exits.push(exit);
        }
        for w in &report.checkpoints {
            self.log(&format!("checkpoint of {}", name(w)));
        }
        report
    }

    /// The workers alive now (including those being stopped).
    pub fn running(&self) -> Vec<WorkerRef> {
        self.running.keys().copied().collect()
    }

    /// The exits not yet acked by the daemon, oldest first.
    pub fn exited(&self) -> &[WorkerExit] {
        &self.exited
    }

    /// Forgets the exits the daemon has recorded.
    pub fn ack(&mut self, acked: &[WorkerRef]) {
        self.exited.retain(|e| !acked.contains(&e.worker));
    }

    /// The virtual GPUs a running worker holds.
    pub fn gpus_of(&self, w: &WorkerRef) -> Option<&[u32]> {
        self.running.get(w).map(|x| x.gpus.as_slice())
    }

    /// The process group (= pid of the leader) of a running worker.
    pub fn pgid_of(&self, w: &WorkerRef) -> Option<i32> {
        self.running.get(w).map(|x| x.pgid)
    }

    /// SIGKILLs every worker's group and reaps it; the exits are recorded (code `None`).
    pub fn kill_all(&mut self) {
        let workers = std::mem::take(&mut self.running);
        for (w, mut worker) in workers {
            worker.signal(libc::SIGKILL);
            // The leader too, in case it moved itself out of its group.
            let _ = worker.child.kill();
            let (code, signal) = match worker.child.wait() {
                Ok(status) => (status.code(), status.signal()),
                Err(e) => {
                    eprintln!("agent node {}: cannot reap {}: {e}", self.node, name(&w));
                    (None, None)
                }
            };
            self.gpus.release(w);
            self.log(&format!("killed {}", name(&w)));
            self.record_exit(WorkerExit { worker: w, code, success: code == Some(0), signal });
        }
    }

    /// The agent's own orderly end: SIGTERM every group not already being stopped, wait up to `grace` for them to
    /// exit, then SIGKILL what is left.
    pub fn shutdown(&mut self, grace: Duration) {
        for (w, worker) in self.running.iter_mut() {
            if worker.kill_at.is_none() {
                worker.signal(libc::SIGTERM);
                eprintln!("agent node {}: stopping {} with SIGTERM (agent shutting down)", self.node, name(w));
            }
        }
        let deadline = Instant::now() + grace;
        while !self.running.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            self.poll();
        }
        self.kill_all();
    }

    fn record_exit(&mut self, exit: WorkerExit) {
        self.exited.retain(|e| e.worker != exit.worker);
        self.exited.push(exit);
    }

    fn log(&self, msg: &str) {
        eprintln!("agent node {}: {msg}", self.node);
    }
}

/// Whether the worker's checkpoint directory holds something newer than the last checkpoint reported; if so,
/// remembers it so each checkpoint is reported once.
fn check_checkpoint(worker: &mut Worker) -> bool {
    match newest_mtime(&worker.checkpoint_dir) {
        Some(t) if t > worker.last_checkpoint => {
            worker.last_checkpoint = t;
            true
        }
        _ => false,
    }
}

impl Drop for Runner {
    /// No orphan jobs: whatever way the agent ends, its workers end with it.
    fn drop(&mut self) {
        if !self.running.is_empty() {
            self.kill_all();
        }
    }
}
