//! A seeded whole-system fault simulation of the daemon (TigerBeetle's VOPR idea): the real state machine
//! (`State` and its control methods), the real SQLite store and the real engine, with simulated agents, provider,
//! network and clock. Faults strike at random points: the daemon is killed at any log position (an append fails
//! and everything in memory is dropped, also between a write and its effect), agents die or hang while their jobs
//! keep running, heartbeats are duplicated, delayed and reordered, launches fail, provider calls fail or finish
//! after the daemon died. A liveness phase without faults follows, in which all work must finish.
//!
//! The invariants are the users' words, checked after every step:
//! - an attempt runs at most once, ever;
//! - a job that succeeded, failed or was cancelled never runs again (and keeps its outcome across restarts);
//! - a submission answered 2xx is never lost;
//! - no two attempts of a job run at once;
//! - at the end every instance the provider holds is a live node the daemon knows, and every job is finished.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spillway_api::{Heartbeat, HeartbeatReply, WorkerExit, WorkerRef};
use spillway_core::{Config, Engine, Event, JobId, JobSpec, JobState, Time};
use spillway_providers::{Instance, LaunchSpec};
use spillway_server::state::{Effect, State, StateOptions};
use spillway_server::store::{Entry, JobCommand, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

const CONFIG: &str = include_str!("../../../../examples/local.toml");
const T0: Time = 1_800_000_000_000;
const STEP_MS: Time = 100;
const CHAOS_MS: Time = 150_000;
const LIVENESS_MS: Time = 900_000;

/// A worker process on a simulated agent.
struct Proc {
    end_at: Time,
    stop_at: Option<Time>,
    gpus: u32,
}

/// A simulated agent: runs what the daemon says, reports what it sees, never starts a worker twice.
struct Agent {
    node: u32,
    token: String,
    free: u32,
    up_at: Time,
    hung_until: Time,
    next_beat: Time,
    procs: BTreeMap<WorkerRef, Proc>,
    exited: Vec<WorkerExit>,
    ever: BTreeSet<WorkerRef>,
    /// Heartbeats are sequential, as the real agent's: one in flight at a time, counted.
    seq: u64,
    applied: u64,
    in_flight: bool,
}

/// What one seed found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub violations: Vec<String>,
    pub jobs: u32,
    pub crashes: u32,
    pub steps: u64,
}

struct World {
    rng: ChaCha8Rng,
    now: Time,
    db: PathBuf,
    dir: PathBuf,
    faults: bool,
    daemon: Option<State>,
    /// The provider: instance id -> (instance, its agent).
    instances: BTreeMap<String, (Instance, Agent)>,
    next_instance: u64,
    /// Provider calls in flight: (due, effect, launch spec).
    pending: Vec<(Time, Effect, Option<LaunchSpec>)>,
    /// Heartbeats in flight: (due, token, heartbeat).
    net: Vec<(Time, String, Heartbeat)>,
    starts: BTreeMap<WorkerRef, u32>,
    ended: BTreeMap<u32, JobState>,
    acked: Vec<(u32, String)>,
    /// Per job: run time of an attempt and whether it fails.
    work: BTreeMap<u32, (Time, bool)>,
    out: Outcome,
    down_until: Option<Time>,
}

fn opts(dir: &std::path::Path) -> StateOptions {
    StateOptions {
        jobs_dir: dir.join("jobs"),
        cluster_id: "sim".into(),
        heartbeat_timeout_ms: 3_000,
        boot_grace_ms: 5_000,
        reconcile_every_ms: 10_000,
        max_backlog: (spillway_server::state::MAX_BACKLOG_JOBS, spillway_server::state::MAX_BACKLOG_BYTES),
    }
}

/// Runs one seed; the same seed always runs the same way.
pub fn run_seed(seed: u64) -> Outcome {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let dir = base.join(format!("spillway-faultsim-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut w = World {
        rng: ChaCha8Rng::seed_from_u64(seed),
        now: T0,
        db: dir.join("spillway.db"),
        dir: dir.clone(),
        faults: true,
        daemon: None,
        instances: BTreeMap::new(),
        next_instance: 0,
        pending: Vec::new(),
        net: Vec::new(),
        starts: BTreeMap::new(),
        ended: BTreeMap::new(),
        acked: Vec::new(),
        work: BTreeMap::new(),
        out: Outcome::default(),
        down_until: None,
    };
    w.start_daemon();
    while w.now < T0 + CHAOS_MS {
        w.step(true);
    }
    w.faults = false;
    if w.daemon.is_none() {
        w.start_daemon();
    }
    let end = w.now + LIVENESS_MS;
    while w.now < end && !w.all_done() {
        w.step(false);
    }
    w.final_checks();
    let _ = std::fs::remove_dir_all(&dir);
    w.out
}

impl World {
    fn violate(&mut self, what: String) {
        if self.out.violations.len() < 20 {
            self.out.violations.push(format!("t={} s: {what}", (self.now - T0) / 1000));
        }
    }

    /// (Re)starts the daemon: open the store, replay, reconcile with the provider, check what survived.
    fn start_daemon(&mut self) {
        let store = Store::open(&self.db).expect("store opens");
        let cfg = Config::parse("local.toml", CONFIG).expect("config");
        let mut st = State::new(Engine::new(cfg, T0), store, opts(&self.dir), self.now);
        st.replay().expect("replay");
        let listed: Vec<Instance> = self.instances.values().map(|(i, _)| i.clone()).collect();
        if let Err(e) = st.reconcile(self.now, &listed, self.now, true) {
            self.violate(format!("reconcile at startup failed: {e}"));
        }
        for &(id, ref name) in &self.acked.clone() {
            match st.engine.job(JobId(id)) {
                Some(j) if j.spec.name == *name => {}
                _ => self.violate(format!("acknowledged submission {id} ({name}) lost after a restart")),
            }
        }
        self.daemon = Some(st);
        self.down_until = None;
        self.check_outcomes();
        self.take_effects();
    }

    /// Kills the daemon: memory is gone; provider calls already made may still finish, unreported.
    fn crash(&mut self) {
        self.out.crashes += 1;
        self.daemon = None;
        for (_, effect, spec) in std::mem::take(&mut self.pending) {
            if self.rng.random_bool(0.5) {
                self.execute_unreported(effect, spec);
            }
        }
        self.down_until = Some(self.now + self.rng.random_range(0..3_000));
    }

    /// Moves the daemon's new effects into flight (delayed and reordered while faults are on).
    fn take_effects(&mut self) {
        let Some(st) = self.daemon.as_mut() else { return };
        if st.fatal.is_some() {
            self.crash();
            return;
        }
        for e in std::mem::take(&mut st.effects) {
            let spec = match &e {
                Effect::Launch { node, token } => st.launch_spec(*node, token),
                _ => None,
            };
            let delay = if self.faults { self.rng.random_range(0..1_500) } else { 0 };
            self.pending.push((self.now + delay, e, spec));
        }
    }

    fn step(&mut self, chaos: bool) {
        self.now += STEP_MS;
        self.out.steps += 1;
        if self.daemon.is_none() {
            if self.down_until.is_some_and(|t| self.now >= t) {
                self.start_daemon();
            }
        } else if chaos {
            self.user_actions();
            self.inject_faults();
        }
        if self.out.steps.is_multiple_of(2)
            && let Some(st) = self.daemon.as_mut()
        {
            let _ = st.tick(self.now, 200, &mut self.rng);
            self.take_effects();
        }
        self.run_effects();
        self.run_agents();
        self.deliver();
        self.check_outcomes();
    }

    fn user_actions(&mut self) {
        if self.rng.random_bool(0.12) {
            self.submit();
        }
        if self.rng.random_bool(0.01) && self.out.jobs > 0 {
            let job = self.rng.random_range(0..self.out.jobs);
            if let Some(st) = self.daemon.as_mut() {
                let _ = st.apply(self.now, Entry::Event(Event::CancelJob { job: JobId(job) }));
            }
            self.take_effects();
        }
    }

    fn submit(&mut self) {
        let n = self.out.jobs;
        let tier = ["p0", "p1", "p2"][self.rng.random_range(0..3)];
        let workers = if self.rng.random_bool(0.2) { 2 } else { 1 };
        let gpus = self.rng.random_range(1..=4);
        let run_ms = self.rng.random_range(2_000..20_000);
        let spec = JobSpec {
            name: format!("job-{n}-{}", self.rng.random::<u32>()).into(),
            tier: tier.into(),
            team: "research".into(),
            gpus_per_worker: gpus,
            workers,
            min_workers: None,
            gpu_model: None,
            interruptible: None,
            checkpoint_interval_ms: Some(5_000),
            deadline: None,
            expected_duration_ms: None,
            checkpoint_gb: None,
            data_region: None,
        };
        let Some(st) = self.daemon.as_mut() else { return };
        let name = spec.name.to_string();
        let command = JobCommand { argv: vec!["train".into()], ..Default::default() };
        match st.apply(self.now, Entry::Submit { spec, command }) {
            Ok(Some(id)) => {
                self.acked.push((id.0, name));
                self.work.insert(id.0, (run_ms, id.0 % 11 == 5));
                self.out.jobs = self.out.jobs.max(id.0 + 1);
            }
            Ok(None) => self.violate("a submission returned no id".into()),
            Err(_) => {}
        }
        self.take_effects();
    }

    fn inject_faults(&mut self) {
        let r: f64 = self.rng.random();
        if r < 0.004 {
            self.crash();
            return;
        }
        if r < 0.008 {
            // Killed a few log writes from now: in the middle of whatever it does next.
            let k = self.rng.random_range(0..4);
            if let Some(st) = self.daemon.as_mut() {
                st.store.inject_crash_after(Some(k));
            }
        }
        let ids: Vec<String> = self.instances.keys().cloned().collect();
        for id in ids {
            let r: f64 = self.rng.random();
            if r < 0.0015 {
                // The agent (and with it, for the local provider, the instance) dies; its processes die too.
                self.instances.remove(&id);
            } else if r < 0.003 {
                let hang = self.rng.random_range(1_000..8_000);
                if let Some((_, a)) = self.instances.get_mut(&id) {
                    a.hung_until = self.now + hang;
                }
            }
        }
    }

    /// Executes the provider calls that are due, in random order, and reports results to the daemon.
    fn run_effects(&mut self) {
        let mut due = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].0 <= self.now {
                due.push(self.pending.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|d| d.0);
        while !due.is_empty() {
            let k = if self.faults { self.rng.random_range(0..due.len()) } else { 0 };
            let (_, effect, spec) = due.remove(k);
            self.execute(effect, spec);
            self.take_effects();
            if self.daemon.is_none() {
                return;
            }
        }
    }

    fn fails(&mut self, p: f64) -> bool {
        self.faults && self.rng.random_bool(p)
    }

    fn execute(&mut self, effect: Effect, spec: Option<LaunchSpec>) {
        let now = self.now;
        match effect {
            Effect::Launch { node, .. } => {
                let result = match spec {
                    Some(_) if self.fails(0.1) => {
                        Err(spillway_providers::ProviderError::InsufficientCapacity { instance_type: "t".into() })
                    }
                    Some(_) if self.fails(0.05) => Err(spillway_providers::ProviderError::Transient("api down".into())),
                    Some(spec) => Ok(self.create_instance(&spec)),
                    None => return,
                };
                if let Some(st) = self.daemon.as_mut() {
                    let _ = st.launch_result(now, node, result);
                }
            }
            Effect::Terminate { node } => {
                if !self.fails(0.05) {
                    self.instances.retain(|_, (i, _)| i.node != node);
                    if let Some(st) = self.daemon.as_mut() {
                        st.terminated(node);
                    }
                }
            }
            Effect::Fence { node } => {
                let done = !self.fails(0.1);
                if done {
                    self.instances.retain(|_, (i, _)| i.node != node);
                }
                if let Some(st) = self.daemon.as_mut() {
                    let _ = st.fenced(now, node, done);
                }
            }
            Effect::TerminateInstance { id } => {
                self.instances.remove(&id);
            }
            Effect::List => {
                let listed: Vec<Instance> = self.instances.values().map(|(i, _)| i.clone()).collect();
                if let Some(st) = self.daemon.as_mut() {
                    let _ = st.reconcile(now, &listed, now, false);
                }
            }
            // No Slurm in this simulation (its configs have no Slurm pools).
            Effect::SlurmHandBack { .. } | Effect::Alert { .. } => {}
        }
    }

    /// A call the dead daemon made: it happens, nobody hears of it.
    fn execute_unreported(&mut self, effect: Effect, spec: Option<LaunchSpec>) {
        match effect {
            Effect::Launch { .. } => {
                if let Some(spec) = spec {
                    self.create_instance(&spec);
                }
            }
            Effect::Terminate { node } | Effect::Fence { node } => self.instances.retain(|_, (i, _)| i.node != node),
            Effect::TerminateInstance { id } => {
                self.instances.remove(&id);
            }
            Effect::List | Effect::SlurmHandBack { .. } | Effect::Alert { .. } => {}
        }
    }

    /// Launches are idempotent per node, as the local provider's (and a cloud's client token): a node that has
    /// an instance gets that one back.
    fn create_instance(&mut self, spec: &LaunchSpec) -> String {
        if let Some(id) = self.instances.iter().find(|(_, (i, _))| i.node == spec.node).map(|(id, _)| id.clone()) {
            return id;
        }
        self.next_instance += 1;
        let id = format!("i-{}", self.next_instance);
        let inst = Instance {
            id: id.clone(),
            cluster: spec.cluster.clone(),
            node: spec.node,
            pool: spec.pool.clone(),
            instance_type: spec.instance_type.clone(),
            gpus: spec.gpus,
            spot: spec.spot,
        };
        let up_at = self.now + (spec.boot_delay_s * 1000.0) as Time + self.rng.random_range(0..500);
        let agent = Agent {
            node: spec.node,
            token: spec.token.clone(),
            free: spec.gpus,
            up_at,
            hung_until: 0,
            next_beat: up_at,
            procs: BTreeMap::new(),
            exited: Vec::new(),
            ever: BTreeSet::new(),
            seq: 0,
            applied: 0,
            in_flight: false,
        };
        self.instances.insert(id.clone(), (inst, agent));
        id
    }

    /// Advances every agent's processes and sends the heartbeats that are due.
    fn run_agents(&mut self) {
        let now = self.now;
        let mut beats = Vec::new();
        for (_, a) in self.instances.values_mut() {
            if now < a.up_at {
                continue;
            }
            let done: Vec<WorkerRef> = a
                .procs
                .iter()
                .filter(|(_, p)| p.stop_at.is_some_and(|t| t <= now) || p.end_at <= now)
                .map(|(w, _)| *w)
                .collect();
            for w in done {
                if let Some(p) = a.procs.remove(&w) {
                    a.free += p.gpus;
                    let stopped = p.stop_at.is_some_and(|t| t <= now) && p.end_at > now;
                    let fails = self.work.get(&w.job).is_some_and(|&(_, f)| f);
                    let success = !stopped && !fails;
                    a.exited.push(WorkerExit {
                        worker: w,
                        code: if stopped { None } else { Some(i32::from(!success)) },
                        success,
                        signal: stopped.then_some(15),
                    });
                }
            }
            if now >= a.next_beat && now >= a.hung_until && !a.in_flight {
                a.next_beat = now + 500;
                a.seq += 1;
                a.in_flight = true;
                let hb = Heartbeat {
                    node: a.node,
                    seq: a.seq,
                    applied: a.applied,
                    running: a.procs.keys().copied().collect(),
                    exited: a.exited.clone(),
                    checkpoints: Vec::new(),
                    gpu_utilization: None,
                    notices: Vec::new(),
                    session_tokens: false,
                    addr: Some(format!("10.0.{}.{}", a.node / 250, a.node % 250 + 1)),
                };
                beats.push((a.token.clone(), hb));
            }
        }
        for (token, hb) in beats {
            let r: f64 = self.rng.random();
            if self.faults && r < 0.2 {
                let d = self.rng.random_range(0..2_500);
                self.net.push((now + d, token, hb));
            } else if self.faults && r < 0.3 {
                // Duplicated on the way (a retrying proxy): both copies arrive.
                let d = self.rng.random_range(0..1_000);
                self.net.push((now, token.clone(), hb.clone()));
                self.net.push((now + d, token, hb));
            } else {
                self.net.push((now, token, hb));
            }
        }
    }

    /// Delivers the heartbeats that are due, in random order, and applies the replies to their agents.
    fn deliver(&mut self) {
        let now = self.now;
        let (mut due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.net).into_iter().partition(|m| m.0 <= now);
        self.net = later;
        while !due.is_empty() {
            let k = if self.faults { self.rng.random_range(0..due.len()) } else { 0 };
            let (_, token, hb) = due.remove(k);
            // The agent waits for this request (a duplicate's reply goes nowhere).
            let waiting =
                self.instances.values_mut().find(|(_, a)| a.token == token && a.seq == hb.seq && a.in_flight).map(
                    |(_, a)| {
                        a.in_flight = false;
                    },
                );
            let Some(st) = self.daemon.as_mut() else { continue };
            if st.node_of_token(&token) != Some(hb.node) {
                continue;
            }
            let reply = st.heartbeat(now, &hb);
            self.take_effects();
            match reply {
                Ok(Some(r)) if waiting.is_some() => self.apply_reply(&token, hb.seq, r),
                Ok(None) if waiting.is_some() => self.instances.retain(|_, (_, a)| a.token != token),
                _ => {}
            }
        }
    }

    fn apply_reply(&mut self, token: &str, seq: u64, r: HeartbeatReply) {
        let now = self.now;
        let Some(id) = self.instances.iter().find(|(_, (_, a))| a.token == token).map(|(id, _)| id.clone()) else {
            return;
        };
        let mut started = Vec::new();
        if let Some((_, a)) = self.instances.get_mut(&id) {
            a.applied = seq;
            a.exited.retain(|e| !r.acked_exits.contains(&e.worker));
            for s in &r.stop {
                if let Some(p) = a.procs.get_mut(&s.worker) {
                    p.stop_at.get_or_insert(now + (s.grace_ms as Time).min(300));
                }
            }
            for asg in &r.run {
                let w = asg.worker;
                if a.ever.contains(&w) || a.procs.contains_key(&w) || a.free < asg.gpus {
                    continue;
                }
                a.ever.insert(w);
                a.free -= asg.gpus;
                let run_ms = self.work.get(&w.job).map_or(5_000, |&(ms, _)| ms);
                a.procs.insert(w, Proc { end_at: now + run_ms, stop_at: None, gpus: asg.gpus });
                started.push(w);
            }
        }
        for w in started {
            self.check_start(w);
        }
    }

    /// The invariants at the moment a worker starts.
    fn check_start(&mut self, w: WorkerRef) {
        let n = {
            let c = self.starts.entry(w).or_insert(0);
            *c += 1;
            *c
        };
        if n > 1 {
            self.violate(format!("job {} attempt {} rank {} started {} times", w.job, w.attempt, w.rank, n));
        }
        if let Some(s) = self.ended.get(&w.job) {
            self.violate(format!("job {} ran again after it ended {s:?}", w.job));
        }
        let others: BTreeSet<u32> = self
            .instances
            .values()
            .flat_map(|(_, a)| a.procs.keys())
            .filter(|x| x.job == w.job && x.attempt != w.attempt)
            .map(|x| x.attempt)
            .collect();
        if !others.is_empty() {
            self.violate(format!("job {} attempt {} started while attempts {others:?} still run", w.job, w.attempt));
        }
    }

    /// A finished job keeps its outcome; none comes back to life.
    fn check_outcomes(&mut self) {
        let Some(st) = self.daemon.as_ref() else { return };
        let mut bad = Vec::new();
        let mut newly = Vec::new();
        for j in &st.engine.cluster().jobs {
            let terminal = matches!(j.state, JobState::Succeeded | JobState::Failed | JobState::Cancelled);
            match self.ended.get(&j.id.0) {
                Some(&s) if s != j.state => bad.push(format!("job {} ended {s:?} and is now {:?}", j.id.0, j.state)),
                None if terminal => newly.push((j.id.0, j.state)),
                _ => {}
            }
        }
        self.ended.extend(newly);
        for b in bad {
            self.violate(b);
        }
    }

    fn all_done(&self) -> bool {
        let Some(st) = self.daemon.as_ref() else { return false };
        let jobs_done =
            st.engine.cluster().jobs.iter().all(|j| !matches!(j.state, JobState::Queued | JobState::Running));
        let cloud_idle =
            st.engine.cluster().nodes.iter().all(|n| !n.alive() || n.market == spillway_core::Market::Fixed);
        jobs_done && cloud_idle && self.pending.is_empty() && self.instances.values().all(|(i, _)| st.alive(i.node))
    }

    fn final_checks(&mut self) {
        let Some(st) = self.daemon.as_ref() else {
            self.violate("the daemon is down at the end".into());
            return;
        };
        let mut v = Vec::new();
        for j in &st.engine.cluster().jobs {
            if matches!(j.state, JobState::Queued | JobState::Running) {
                v.push(format!(
                    "job {} never finished ({:?}, attempt {}, pending {:?})",
                    j.id.0, j.state, j.attempt, j.pending
                ));
            }
        }
        for (i, _) in self.instances.values() {
            if !st.alive(i.node) {
                v.push(format!("instance {} of node {} is held but the node is not alive (leaked)", i.id, i.node));
            }
        }
        let per_node: BTreeMap<u32, usize> = self.instances.values().fold(BTreeMap::new(), |mut m, (i, _)| {
            *m.entry(i.node).or_insert(0) += 1;
            m
        });
        for (n, c) in per_node.into_iter().filter(|&(_, c)| c > 1) {
            v.push(format!("node {n} has {c} instances (leaked)"));
        }
        for x in v {
            self.violate(x);
        }
    }
}
