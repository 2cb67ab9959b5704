//! Property tests of nodes Slurm asks for, on random interleavings of what Slurm and the cloud do (resumes,
//! suspends, launches that fail or boot, interruption notices, lost nodes) with Spillway's own jobs on a pool
//! beside them. After every step the engine's invariants hold, and the rules as a Slurm admin states them:
//! - a node bought for a p0 job is never spot, one for a p2 job always spot;
//! - Slurm never has two machines behind one node name;
//! - every resume ends in a launch or in the node going back to Slurm with a reason, never in silence;
//! - Spillway never starts its own jobs on Slurm's nodes and never ends one Slurm did not release (a node it
//!   cannot keep, interrupted or lost, goes back to Slurm instead);
//! - every Spillway job still finishes.
//!
//! `PROPTEST_CASES` sets the number of cases (default 64).

use proptest::prelude::*;
use spillway_core::time::Time;
use spillway_core::{Action, Config, Engine, Event, JobSpec, JobState, LaunchError, Market, NodeId, NodeState};
use std::collections::BTreeSet;

const CONFIG: &str = r#"
[[instance_types]]
name = "h8"
gpus = 8
gpu_model = "H100"
on_demand_usd_per_hour = 98.0
spot_usd_per_hour = 39.0

[[instance_types]]
name = "h8b"
gpus = 8
gpu_model = "H100"
on_demand_usd_per_hour = 120.0
spot_usd_per_hour = 55.0

[[pools]]
name = "slurm-spot"
market = "spot"
instance_types = ["h8", "h8b"]
max_nodes = 3
scheduler = "slurm"

[[pools]]
name = "slurm-od"
market = "on_demand"
instance_types = ["h8", "h8b"]
max_nodes = 2
scheduler = "slurm"

[[pools]]
name = "own"
market = "on_demand"
instance_types = ["h8"]
max_nodes = 2
idle_timeout_s = 60
"#;

const NAMES: [&str; 5] = ["c1", "c2", "c3", "c4", "c5"];
const TIERS: [&str; 3] = ["p0", "p1", "p2"];

/// One thing Slurm, the cloud or a user does; node choices pick among live nodes by index.
#[derive(Debug, Clone)]
enum Op {
    Resume { name: usize, tier: usize },
    Suspend { name: usize },
    Boot { pick: usize },
    FailLaunch { pick: usize, capacity: bool },
    Notice { pick: usize },
    Lost { pick: usize },
    Submit { tier: usize },
    Wait { s: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..NAMES.len(), 0..TIERS.len()).prop_map(|(name, tier)| Op::Resume { name, tier }),
        2 => (0..NAMES.len()).prop_map(|name| Op::Suspend { name }),
        4 => (0..8_usize).prop_map(|pick| Op::Boot { pick }),
        2 => (0..8_usize, any::<bool>()).prop_map(|(pick, capacity)| Op::FailLaunch { pick, capacity }),
        1 => (0..8_usize).prop_map(|pick| Op::Notice { pick }),
        1 => (0..8_usize).prop_map(|pick| Op::Lost { pick }),
        2 => (0..TIERS.len()).prop_map(|tier| Op::Submit { tier }),
        3 => (1..900_u32).prop_map(|s| Op::Wait { s }),
    ]
}

struct World {
    e: Engine,
    now: Time,
    /// Nodes whose end Slurm asked for (a release) or the cloud caused (a notice's reclaim, a loss).
    may_end: BTreeSet<NodeId>,
}

impl World {
    /// Returns the live nodes held for Slurm, in id order.
    fn held(&self) -> Vec<NodeId> {
        self.e.cluster().nodes.iter().filter(|n| n.alive() && n.held.is_some()).map(|n| n.id).collect()
    }

    fn pick(&self, i: usize, state: Option<NodeState>) -> Option<NodeId> {
        let nodes: Vec<NodeId> = self
            .held()
            .into_iter()
            .filter(|n| state.is_none_or(|s| self.e.cluster().nodes[n.0 as usize].state == s))
            .collect();
        (!nodes.is_empty()).then(|| nodes[i % nodes.len()])
    }

    /// Applies `ev` (a refusal is fine: it must change nothing) and checks the actions that follow.
    fn event(&mut self, ev: Event, resumed: Option<&str>) -> Result<(), String> {
        let what = format!("{ev:?}");
        let before = self.e.cluster().nodes.len();
        if self.e.handle_event(self.now, ev).is_err() {
            return match self.drain()?.is_empty() && self.e.cluster().nodes.len() == before {
                true => Ok(()),
                false => Err(format!("{what} was refused but changed something")),
            };
        }
        let acts = self.drain()?;
        if let Some(name) = resumed {
            let answered = acts.iter().any(|a| match a {
                Action::Launch { node, .. } => self.is(*node, name),
                Action::ReturnNode { name: n, .. } => n == name,
                _ => false,
            });
            if !answered {
                return Err(format!("{what}: neither launched nor handed back: {acts:?}"));
            }
        }
        Ok(())
    }

    fn is(&self, node: NodeId, name: &str) -> bool {
        self.e.cluster().nodes[node.0 as usize].held.as_ref().is_some_and(|h| h.name == name)
    }

    /// Drains the engine's actions, checking each against the rules; returns those that are not records.
    fn drain(&mut self) -> Result<Vec<Action>, String> {
        let mut out = Vec::new();
        while let Some(a) = self.e.poll_action() {
            self.e.check_invariants().map_err(|m| format!("invariant: {m}"))?;
            match &a {
                Action::StartJob { job, placement, .. } => {
                    if let Some((n, _)) =
                        placement.iter().find(|(n, _)| self.e.cluster().nodes[n.0 as usize].held.is_some())
                    {
                        return Err(format!("job {} started on Slurm's node {}", job.0, n.0));
                    }
                }
                Action::Terminate { node } => {
                    let n = &self.e.cluster().nodes[node.0 as usize];
                    if n.held.is_some() && !self.may_end.contains(node) {
                        return Err(format!("Slurm's node {} ended though Slurm did not release it", node.0));
                    }
                }
                Action::Record(_) => continue,
                _ => {}
            }
            out.push(a);
        }
        self.rules()?;
        Ok(out)
    }

    /// The rules that hold at every instant.
    fn rules(&self) -> Result<(), String> {
        let cfg = self.e.config();
        let mut names = BTreeSet::new();
        for n in self.e.cluster().nodes.iter().filter(|n| n.held.is_some()) {
            let h = n.held.as_ref().map(|h| (h.name.clone(), h.tier)).unwrap_or_default();
            let tier = cfg.tiers[h.1].name.as_str();
            if (tier == "p0" && n.market == Market::Spot) || (tier == "p2" && n.market != Market::Spot) {
                return Err(format!("node {} for a {tier} job is on {}", n.id.0, n.market.as_str()));
            }
            if n.alive() && !names.insert(h.0.clone()) {
                return Err(format!("two live nodes for Slurm's {}", h.0));
            }
        }
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Resume { name, tier } => {
                let ev = Event::NodeRequested {
                    name: NAMES[name].into(),
                    pools: vec!["slurm-spot".into(), "slurm-od".into()],
                    gpus: 8,
                    gpu_model: None,
                    tier: TIERS[tier].into(),
                    team: "slurm".into(),
                    why: "property".into(),
                };
                let up = self.e.held_node(NAMES[name]).is_some();
                self.event(ev, (!up).then_some(NAMES[name]))?;
            }
            Op::Suspend { name } => {
                if let Some(n) = self.e.held_node(NAMES[name]) {
                    self.may_end.insert(n);
                }
                self.event(Event::NodeReleased { name: NAMES[name].into() }, None)?;
            }
            Op::Boot { pick } => {
                if let Some(node) = self.pick(pick, Some(NodeState::Requested)) {
                    self.event(Event::NodeReady { node }, None)?;
                }
            }
            Op::FailLaunch { pick, capacity } => {
                if let Some(node) = self.pick(pick, Some(NodeState::Requested)) {
                    let error = if capacity { LaunchError::InsufficientCapacity } else { LaunchError::Quota };
                    self.event(Event::LaunchFailed { node, error }, None)?;
                }
            }
            Op::Notice { pick } => {
                if let Some(node) = self.pick(pick, None) {
                    self.may_end.insert(node);
                    self.event(Event::InterruptionNotice { node, deadline: self.now + 120_000 }, None)?;
                }
            }
            Op::Lost { pick } => {
                if let Some(node) = self.pick(pick, None) {
                    self.may_end.insert(node);
                    self.event(Event::NodeLost { node }, None)?;
                }
            }
            Op::Submit { tier } => {
                // p0 and p1 may use the on-demand pool of Spillway's own.
                let spec = JobSpec {
                    name: "own".into(),
                    tier: TIERS[tier % 2].into(),
                    team: "own".into(),
                    gpus_per_worker: 8,
                    workers: 1,
                    min_workers: None,
                    gpu_model: None,
                    interruptible: None,
                    checkpoint_interval_ms: None,
                    deadline: None,
                    expected_duration_ms: Some(600_000),
                    checkpoint_gb: None,
                    data_region: None,
                };
                self.e.submit(self.now, spec).map_err(|e| format!("submit: {e}"))?;
                self.drain()?;
            }
            Op::Wait { s } => self.run_to(self.now + i64::from(s) * 1000)?,
        }
        Ok(())
    }

    /// Runs the engine's own wake-ups up to `t`, booting its own pool's launches and finishing its jobs.
    fn run_to(&mut self, t: Time) -> Result<(), String> {
        for _ in 0..10_000 {
            let own: Vec<NodeId> = self
                .e
                .cluster()
                .nodes
                .iter()
                .filter(|n| n.held.is_none() && n.state == NodeState::Requested)
                .map(|n| n.id)
                .collect();
            for node in own {
                self.e.handle_event(self.now, Event::NodeReady { node }).map_err(|e| e.to_string())?;
            }
            let running: Vec<(spillway_core::JobId, u32)> = self
                .e
                .cluster()
                .jobs
                .iter()
                .filter(|j| j.state == JobState::Running && j.attempt_start.is_some_and(|s| s + 600_000 <= self.now))
                .map(|j| (j.id, j.attempt))
                .collect();
            for (job, attempt) in running {
                let ev = Event::JobExited { job, attempt, success: true, exit: None };
                self.e.handle_event(self.now, ev).map_err(|e| e.to_string())?;
            }
            self.drain()?;
            match self.e.poll_timeout() {
                Some(w) if w <= t => {
                    self.now = self.now.max(w);
                    self.e.handle_timeout(self.now);
                }
                _ => {
                    // Jobs finish on time even when the engine sleeps: step by their run time.
                    let next = (self.now + 600_000).min(t);
                    if next <= self.now {
                        self.now = t;
                        return Ok(());
                    }
                    self.now = next;
                    self.e.handle_timeout(self.now);
                }
            }
        }
        Err("the engine kept waking without end".into())
    }
}

fn drive(ops: &[Op]) -> Result<(), String> {
    let cfg = Config::parse("slurm.toml", CONFIG).map_err(|e| e.to_string())?;
    let mut w = World { e: Engine::new(cfg, 0), now: 0, may_end: BTreeSet::new() };
    for (i, op) in ops.iter().enumerate() {
        w.step(op).map_err(|m| format!("step {i} ({op:?}) at t={} s: {m}", w.now / 1000))?;
    }
    // Every Spillway job finishes.
    w.run_to(w.now + 86_400_000)?;
    if let Some(j) = w.e.cluster().jobs.iter().find(|j| j.state != JobState::Succeeded) {
        return Err(format!("job {} is {:?} a day after the last step", j.id.0, j.state));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
    ))]

    #[test]
    fn slurm_nodes_keep_their_rules_beside_spillway_jobs(ops in proptest::collection::vec(op(), 1..80)) {
        if let Err(m) = drive(&ops) {
            return Err(TestCaseError::fail(m));
        }
    }
}
