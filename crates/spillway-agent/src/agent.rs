//! The heartbeat loop: report to the daemon, apply its reply to the [`Runner`], and decide when to give up.

use anyhow::{Context, Result};
use spillway_api::{Heartbeat, HeartbeatReply, WorkerRef};
use std::collections::HashSet;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::AgentArgs;
use crate::client::{Client, Outcome};
use crate::nvml::UtilizationSampler;
use crate::runner::{Runner, StartOutcome};
use crate::signals::{install_stop_handlers, stop_requested};
use crate::spawn::create_private_dir;
use crate::user;

/// When the agent gives up. Fixed in production; shorter in tests.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Continuous connection failures for longer than this: kill the workers and fail (no orphan jobs).
    pub unreachable: Duration,
    /// Continuous 401/403 answers for longer than this: kill the workers and fail.
    pub denied: Duration,
    /// How long workers get between SIGTERM and SIGKILL when the agent itself is told to stop.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            unreachable: Duration::from_secs(600),
            denied: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(2),
        }
    }
}

/// A heartbeat being sent on its own thread, so a slow daemon never delays reaping, stop deadlines or signals.
struct InFlight {
    handle: JoinHandle<Outcome>,
    /// The checkpoints it reports: forgotten only once the daemon has answered.
    checkpoints: Vec<WorkerRef>,
    /// Its `seq`.
    seq: u64,
}

/// The loop's memory between iterations.
struct State {
    node: u32,
    pending_checkpoints: Vec<WorkerRef>,
    unreachable_since: Option<Instant>,
    denied_since: Option<Instant>,
    /// Assignments already logged as waiting for GPUs (one line each, not one per heartbeat).
    waiting_logged: HashSet<WorkerRef>,
    /// Stale assignments already logged as refused (one line each).
    refused_logged: HashSet<WorkerRef>,
    /// The last heartbeat's `seq`, and the `seq` of the last one whose reply was applied.
    seq: u64,
    applied: u64,
}

/// Sleeps `d` in short slices; returns false as soon as the agent is told to stop.
fn sleep_unless_stopped(d: Duration) -> bool {
    let end = Instant::now() + d;
    loop {
        if stop_requested() {
            return false;
        }
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

/// The runner for `args`: the data directory created (0700), the `--run-as` user checked and resolved. Fails
/// when the agent must not start: `--run-as` without root, an unknown user, no data directory.
fn prepare(args: &AgentArgs) -> Result<Runner> {
    // Checked first: an agent that cannot run jobs as asked must not touch anything.
    let run_as = args.run_as.as_deref().map(user::for_agent).transpose()?;
    create_private_dir(&args.data_dir)
        .with_context(|| format!("creating agent data directory {}", args.data_dir.display()))?;
    let runner = Runner::new(args.node, args.gpus, &args.data_dir);
    Ok(match run_as {
        Some(u) => {
            eprintln!("agent node {}: running workers as user {} (uid {}, gid {})", args.node, u.name, u.uid, u.gid);
            runner.with_run_as(u)
        }
        None => runner,
    })
}

/// Runs the agent until the daemon says the node is gone (Ok), the agent gets SIGTERM/SIGINT (Ok), or it gives
/// up on the daemon (Err), or cannot start at all (Err, see `prepare`). Every way out leaves no worker running.
pub fn run_loop(args: &AgentArgs, limits: Limits) -> Result<()> {
    let node = args.node;
    let mut runner = prepare(args)?;
    install_stop_handlers();
    let mut client = Client::new(&args.server, &args.token);
    let mut on_session = false;
    let mut util = UtilizationSampler::new(args.gpus);
    let cloud = args.imds_url.as_deref().map(|url| crate::imds::watch(url, node));
    let addr = args.advertise_addr.clone().or_else(|| crate::route_addr(&args.server));
    eprintln!(
        "agent node {node}: {} GPUs, daemon {}, first heartbeat in {:.1} s",
        args.gpus, args.server, args.boot_delay_s
    );
    if !sleep_unless_stopped(Duration::from_secs_f64(args.boot_delay_s.max(0.0))) {
        eprintln!("agent node {node}: stopped before the first heartbeat");
        return Ok(());
    }
    let period = Duration::from_millis(args.heartbeat_ms.max(1));
    let tick = period.min(Duration::from_millis(50));
    let mut state = State {
        node,
        pending_checkpoints: Vec::new(),
        unreachable_since: None,
        denied_since: None,
        waiting_logged: HashSet::new(),
        refused_logged: HashSet::new(),
        seq: 0,
        applied: 0,
    };
    let mut in_flight: Option<InFlight> = None;
    let mut next_beat = Instant::now();
    loop {
        if stop_requested() {
            eprintln!("agent node {node}: signalled, stopping {} workers", runner.running().len());
            runner.shutdown(limits.shutdown_grace);
            return Ok(());
        }
        for w in runner.poll().checkpoints {
            if !state.pending_checkpoints.contains(&w) {
                state.pending_checkpoints.push(w);
            }
        }
        if let Some(f) = in_flight.take_if(|f| f.handle.is_finished()) {
            let outcome = f.handle.join().unwrap_or_else(|_| Outcome::Failed("heartbeat thread panicked".into()));
            let replied = matches!(outcome, Outcome::Reply(_));
            if let Outcome::Reply(HeartbeatReply { new_token: Some(token), .. }) = &outcome {
                // The session token replaces the launch token, which the next heartbeat voids.
                client = Client::new(&args.server, token);
                on_session = true;
            } else if matches!(outcome, Outcome::Denied(..)) && on_session {
                // The daemon lost the session token (a store that lost its last writes): the launch token is
                // valid again there, unless it was retired for good.
                client = Client::new(&args.server, &args.token);
                on_session = false;
            }
            if let Some(result) = state.handle(outcome, &f.checkpoints, &mut runner, &limits) {
                return result;
            }
            if replied {
                state.applied = f.seq;
            }
        }
        let now = Instant::now();
        if in_flight.is_none() && now >= next_beat {
            next_beat = now + period;
            state.seq += 1;
            let hb = Heartbeat {
                node,
                seq: state.seq,
                applied: state.applied,
                running: runner.running(),
                exited: runner.exited().to_vec(),
                checkpoints: state.pending_checkpoints.clone(),
                gpu_utilization: util.get(),
                notices: cloud.as_ref().map(crate::imds::Seen::get).unwrap_or_default(),
                session_tokens: true,
                addr: addr.clone(),
            };
            let c = client.clone();
            match std::thread::Builder::new().name("spillway-heartbeat".into()).spawn(move || c.heartbeat(&hb)) {
                Ok(handle) => {
                    in_flight =
                        Some(InFlight { handle, checkpoints: state.pending_checkpoints.clone(), seq: state.seq })
                }
                Err(e) => eprintln!("agent node {node}: cannot start heartbeat thread: {e}"),
            }
        }
        std::thread::sleep(tick);
    }
}

impl State {
    /// Acts on one heartbeat's outcome. Returns `Some` when the agent must end (its workers already killed).
    fn handle(
        &mut self,
        outcome: Outcome,
        sent: &[WorkerRef],
        runner: &mut Runner,
        limits: &Limits,
    ) -> Option<Result<()>> {
        let node = self.node;
        let now = Instant::now();
        match outcome {
            Outcome::Reply(reply) => {
                self.unreachable_since = None;
                self.denied_since = None;
                self.pending_checkpoints.retain(|w| !sent.contains(w));
                self.apply(reply, runner);
            }
            Outcome::Gone => {
                eprintln!("agent node {node}: the daemon terminated this node (410); killing workers");
                runner.kill_all();
                return Some(Ok(()));
            }
            Outcome::Denied(status, body) => {
                self.unreachable_since = None;
                let since = *self.denied_since.get_or_insert(now);
                eprintln!("agent node {node}: heartbeat refused ({status}): {body}");
                if now.duration_since(since) > limits.denied {
                    runner.kill_all();
                    return Some(Err(anyhow::anyhow!(
                        "node {node}: the daemon refused the node token ({status}) for over {} s",
                        limits.denied.as_secs()
                    )));
                }
            }
            Outcome::Failed(msg) => {
                self.unreachable_since = None;
                self.denied_since = None;
                eprintln!("agent node {node}: heartbeat failed: {msg}");
            }
            Outcome::Unreachable(msg) => {
                let since = *self.unreachable_since.get_or_insert(now);
                eprintln!("agent node {node}: daemon unreachable: {msg}");
                if now.duration_since(since) > limits.unreachable {
                    runner.kill_all();
                    let err =
                        format!("node {node}: daemon unreachable for over {} s ({msg})", limits.unreachable.as_secs());
                    return Some(Err(anyhow::anyhow!(err)));
                }
            }
        }
        None
    }

    /// Applies a reply: forget acked exits, stop what the daemon stops, start what it runs and we do not.
    fn apply(&mut self, reply: HeartbeatReply, runner: &mut Runner) {
        runner.ack(&reply.acked_exits);
        for order in &reply.stop {
            runner.stop(order);
        }
        for a in &reply.run {
            match runner.start(a) {
                StartOutcome::NoGpus { needed, free } => {
                    if self.waiting_logged.insert(a.worker) {
                        eprintln!(
                            "agent node {}: job {} attempt {} rank {} needs {needed} GPUs, {free} free; waiting",
                            self.node, a.worker.job, a.worker.attempt, a.worker.rank
                        );
                    }
                }
                StartOutcome::Started { .. } | StartOutcome::Failed(_) => {
                    self.waiting_logged.remove(&a.worker);
                }
                StartOutcome::AlreadyRan => {
                    if self.refused_logged.insert(a.worker) {
                        eprintln!(
                            "agent node {}: refusing job {} attempt {} rank {}: it already ran here (stale assignment)",
                            self.node, a.worker.job, a.worker.attempt, a.worker.rank
                        );
                    }
                }
                StartOutcome::AlreadyRunning | StartOutcome::AlreadyExited => {}
            }
        }
    }
}
