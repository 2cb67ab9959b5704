//! The engine test harness shared by tests/engine.rs and tests/spot.rs: a config from inline TOML, events at
//! chosen instants, the actions the engine asks for, and its invariants checked after every step.
#![allow(dead_code)]

use spillway_core::time::Time;
use spillway_core::{
    Action, Config, Decision, DecisionKind, Engine, Event, JobId, JobSpec, LaunchError, NodeId, StopReason,
};
use std::collections::BTreeMap;

/// Drives one engine: holds the current instant (seconds from `t0`) and checks invariants after every step.
pub struct Harness {
    pub e: Engine,
    pub t0: Time,
    pub now: Time,
    /// Decision records polled so far (drain keeps them out of the actions it returns).
    pub records: Vec<Decision>,
    /// For [`Harness::run_cloud`]: nodes booting (ready at, node), launches failing (fails at, node), attempts
    /// running (exit at, job, attempt), and the run time of jobs that have one.
    pub booting: Vec<(f64, NodeId)>,
    pub failing: Vec<(f64, NodeId)>,
    pub exits: Vec<(f64, JobId, u32)>,
    pub run_time: BTreeMap<JobId, f64>,
}

impl Harness {
    /// Returns a harness whose engine starts at the Unix epoch.
    pub fn new(toml: &str) -> Harness {
        let e = Engine::new(parse(toml), 0);
        let h = Harness {
            e,
            t0: 0,
            now: 0,
            records: Vec::new(),
            booting: Vec::new(),
            failing: Vec::new(),
            exits: Vec::new(),
            run_time: BTreeMap::new(),
        };
        h.check("new");
        h
    }

    /// Moves the clock to `t` seconds after the start (never backwards).
    pub fn at(&mut self, t: f64) -> &mut Self {
        let ms = self.t0 + (t * 1000.0).round() as i64;
        assert!(ms >= self.now, "the harness clock runs forward: {ms} < {}", self.now);
        self.now = ms;
        self
    }

    /// Returns the current instant in seconds from the start.
    pub fn t(&self) -> f64 {
        (self.now - self.t0) as f64 / 1000.0
    }

    /// Returns the instant `s` seconds from now, in engine time.
    pub fn in_s(&self, s: f64) -> Time {
        self.now + (s * 1000.0).round() as i64
    }

    pub fn check(&self, step: &str) {
        if let Err(m) = self.e.check_invariants() {
            panic!("invariant broken after {step} at t={} s: {m}", (self.now - self.t0) as f64 / 1000.0);
        }
    }

    pub fn submit(&mut self, spec: JobSpec) -> JobId {
        let id = self.e.submit(self.now, spec).unwrap_or_else(|e| panic!("submit refused: {e}"));
        self.check("submit");
        id
    }

    pub fn event(&mut self, ev: Event) {
        let what = format!("{ev:?}");
        self.e.handle_event(self.now, ev).unwrap_or_else(|e| panic!("event {what} refused: {e}"));
        self.check(&what);
    }

    /// Sends an interruption notice for `node` whose reclaim comes `notice_s` seconds from now.
    pub fn notice(&mut self, node: NodeId, notice_s: f64) {
        let deadline = self.in_s(notice_s);
        self.event(Event::InterruptionNotice { node, deadline });
    }

    pub fn timeout(&mut self) {
        self.e.handle_timeout(self.now);
        self.check("timeout");
    }

    /// Polls every action the engine has now; keeps decision records aside; checks invariants after each.
    pub fn drain(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(a) = self.e.poll_action() {
            self.check("poll_action");
            match a {
                Action::Record(d) => self.records.push(d),
                a => out.push(a),
            }
        }
        self.check("drain");
        out
    }

    /// Returns the engine's next wake-up, in seconds from the start.
    pub fn wake(&self) -> Option<f64> {
        self.e.poll_timeout().map(|t| (t - self.t0) as f64 / 1000.0)
    }

    /// Wakes the engine at every timeout it asks for up to `t` seconds (inclusive), then moves the clock to `t`
    /// and drains; returns every action asked for on the way.
    pub fn run_until(&mut self, t: f64) -> Vec<Action> {
        let mut out = self.drain();
        for _ in 0..10_000 {
            match self.wake() {
                Some(w) if w <= t => {
                    self.at(w.max(self.t()));
                    self.timeout();
                    out.extend(self.drain());
                }
                _ => break,
            }
        }
        self.at(t);
        self.timeout();
        out.extend(self.drain());
        out
    }

    /// Plays a simple world until `t` seconds: each launch either boots (ready `boot_s` later) or fails with
    /// insufficient capacity 10 s later, as `cloud(now, pool, instance type)` says (`Some(boot_s)` or `None`);
    /// jobs given a run time exit that long after each start; the engine is woken whenever it asks. Nodes
    /// booting, launches failing and attempts running at `t` carry over. Returns every action.
    pub fn run_cloud(&mut self, t: f64, cloud: &dyn Fn(f64, usize, usize) -> Option<f64>) -> Vec<Action> {
        let mut out = Vec::new();
        let mut fresh = self.drain();
        for _ in 0..100_000 {
            let now = self.t();
            for (n, pool, it) in launches(&fresh) {
                match cloud(now, pool, it) {
                    Some(boot_s) => self.booting.push((now + boot_s, n)),
                    None => self.failing.push((now + 10.0, n)),
                }
            }
            for (job, attempt, _) in starts(&fresh) {
                if let Some(d) = self.run_time.get(&job) {
                    self.exits.push((now + d, job, attempt));
                }
            }
            for (job, attempt, _) in stops(&fresh) {
                self.exits.retain(|x| (x.1, x.2) != (job, attempt));
            }
            out.append(&mut fresh);
            let first = |v: &[(f64, NodeId)]| v.iter().map(|b| b.0).fold(f64::INFINITY, f64::min);
            let (ready_at, fail_at) = (first(&self.booting), first(&self.failing));
            let exit_at = self.exits.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
            let wake = self.wake().unwrap_or(f64::INFINITY);
            let next = ready_at.min(fail_at).min(exit_at).min(wake);
            if next > t {
                break;
            }
            self.at(next.max(now));
            let (due, later): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.booting).into_iter().partition(|b| b.0 <= next);
            self.booting = later;
            for (_, node) in due {
                self.event(Event::NodeReady { node });
            }
            let (due, later): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.failing).into_iter().partition(|b| b.0 <= next);
            self.failing = later;
            for (_, node) in due {
                self.event(Event::LaunchFailed { node, error: LaunchError::InsufficientCapacity });
            }
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.exits).into_iter().partition(|x| x.0 <= next);
            self.exits = later;
            for (_, job, attempt) in due {
                self.event(Event::JobExited { job, attempt, success: true, exit: None });
            }
            if wake <= next {
                self.timeout();
            }
            fresh = self.drain();
        }
        self.at(t);
        out
    }

    /// Plays a world where every launch boots in `boot_s` (see [`Harness::run_cloud`]).
    pub fn run_world(&mut self, t: f64, boot_s: f64) -> Vec<Action> {
        self.run_cloud(t, &|_, _, _| Some(boot_s))
    }

    /// Hands the launches among `actions` (polled outside [`Harness::run_cloud`]) to its world: they boot in
    /// `boot_s` from now.
    pub fn boot(&mut self, actions: &[Action], boot_s: f64) {
        let now = self.t();
        self.booting.extend(launches(actions).into_iter().map(|(n, _, _)| (now + boot_s, n)));
    }

    /// Gives `job` a run time for [`Harness::run_cloud`].
    pub fn runs_for(&mut self, job: JobId, secs: f64) {
        self.run_time.insert(job, secs);
    }

    pub fn job(&self, id: JobId) -> &spillway_core::Job {
        self.e.job(id).expect("job exists")
    }

    pub fn node(&self, id: NodeId) -> &spillway_core::Node {
        &self.e.cluster().nodes[id.0 as usize]
    }

    /// Returns the number of live (requested, ready or draining) nodes of pool `p`.
    pub fn alive(&self, p: usize) -> usize {
        self.e.cluster().nodes.iter().filter(|n| n.pool == p && n.alive()).count()
    }

    /// Returns the records of `kind` with `reason` polled so far.
    pub fn records_of(&self, kind: DecisionKind, reason: &str) -> Vec<&Decision> {
        self.records.iter().filter(|d| d.kind == kind && d.reason == reason).collect()
    }
}

pub fn parse(toml: &str) -> Config {
    Config::parse("test.toml", toml).unwrap_or_else(|e| panic!("test config does not parse: {e}"))
}

pub fn spec(tier: &str, gpus: u32, workers: u32) -> JobSpec {
    spec_of(tier, "team-a", gpus, workers)
}

pub fn spec_of(tier: &str, team: &str, gpus: u32, workers: u32) -> JobSpec {
    JobSpec {
        name: format!("{tier}-{gpus}x{workers}").into(),
        tier: tier.into(),
        team: team.into(),
        gpus_per_worker: gpus,
        workers,
        min_workers: None,
        gpu_model: None,
        interruptible: None,
        checkpoint_interval_ms: None,
        deadline: None,
        expected_duration_ms: None,
        checkpoint_gb: None,
        data_region: None,
    }
}

pub fn launches(actions: &[Action]) -> Vec<(NodeId, usize, usize)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch { node, pool, instance_type } => Some((*node, *pool, *instance_type)),
            _ => None,
        })
        .collect()
}

/// A start: (job, attempt, placement).
pub type Start = (JobId, u32, Vec<(NodeId, u32)>);

pub fn starts(actions: &[Action]) -> Vec<Start> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::StartJob { job, attempt, placement } => Some((*job, *attempt, placement.clone())),
            _ => None,
        })
        .collect()
}

pub fn stops(actions: &[Action]) -> Vec<(JobId, u32, StopReason)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::StopJob { job, attempt, reason, .. } => Some((*job, *attempt, *reason)),
            _ => None,
        })
        .collect()
}

/// A stop with its grace: (job, attempt, reason, grace_ms).
pub type Stop = (JobId, u32, StopReason, i64);

pub fn stops_with_grace(actions: &[Action]) -> Vec<Stop> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::StopJob { job, attempt, reason, grace_ms } => Some((*job, *attempt, *reason, *grace_ms)),
            _ => None,
        })
        .collect()
}

/// Returns the placement of `job`'s start among `actions`.
pub fn started(actions: &[Action], job: JobId) -> Option<Vec<(NodeId, u32)>> {
    starts(actions).into_iter().find(|(j, _, _)| *j == job).map(|(_, _, p)| p)
}

/// Returns the actions that are not decision records.
pub fn non_records(actions: &[Action]) -> Vec<&Action> {
    actions.iter().filter(|a| !matches!(a, Action::Record(_))).collect()
}

pub fn terminates(actions: &[Action]) -> Vec<NodeId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Terminate { node } => Some(*node),
            _ => None,
        })
        .collect()
}
