//! The daemon's side of Slurm on its own (no Slurm, no processes): Slurm's view is handed in as `scontrol` would
//! print it. What a Slurm admin expects of it: a controller that cannot be asked costs no running node; a node
//! Slurm says is dead is fenced and handed back; a resume logged before a crash is launched after the restart, and
//! a release logged before a crash leaves no machine running.

use spillway_core::{Config, Engine, NodeState, Time};
use spillway_server::slurm::SlurmOptions;
use spillway_server::slurm::client::{parse_jobs, parse_nodes};
use spillway_server::state::{Effect, State, StateOptions};
use spillway_server::store::Store;
use std::path::{Path, PathBuf};

const T0: Time = 1_800_000_000_000;
const CONFIG: &str = r#"
[[teams]]
name = "ml"

[[instance_types]]
name = "h8"
gpus = 8
gpu_model = "H100"
on_demand_usd_per_hour = 98.0
spot_usd_per_hour = 39.0

[[pools]]
name = "slurm-spot"
market = "spot"
instance_types = ["h8"]
max_nodes = 4
scheduler = "slurm"

[[pools]]
name = "slurm-od"
market = "on_demand"
instance_types = ["h8"]
max_nodes = 4
scheduler = "slurm"

[slurm]
team = "ml"
sync_every_s = 2
nodes = [{ names = "c[1-4]", pools = ["slurm-spot", "slurm-od"], gpus = 8 }]
partitions = [{ name = "exp", tier = "p1" }]
"#;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spillway-slurm-state-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Opens (and replays) the state on `dir`, as the daemon does, with a 10 s heartbeat timeout.
fn open(dir: &Path, now: Time) -> (State, SlurmOptions) {
    let cfg = Config::parse("slurm.toml", CONFIG).unwrap();
    let slurm = SlurmOptions::from_config("slurm.toml", CONFIG, &cfg).unwrap().unwrap();
    let opts = StateOptions {
        jobs_dir: dir.join("jobs"),
        cluster_id: "c".into(),
        heartbeat_timeout_ms: 10_000,
        boot_grace_ms: 5_000,
        reconcile_every_ms: 600_000,
        max_backlog: (100, 1 << 20),
    };
    let mut st = State::new(Engine::new(cfg, T0), Store::open(&dir.join("spillway.db")).unwrap(), opts, now);
    st.replay().unwrap();
    st.slurm_liveness_ms = 10_000;
    (st, slurm)
}

/// Slurm's node table with every node of `c[1-4]` in `state` but those given.
fn view(default: &str, some: &[(&str, &str)]) -> std::collections::BTreeMap<String, spillway_server::slurm::SlurmNode> {
    let text: String = (1..=4)
        .map(|i| {
            let name = format!("c{i}");
            let state = some.iter().find(|(n, _)| *n == name).map_or(default, |(_, s)| s);
            format!("NodeName={name} State={state}\n")
        })
        .collect();
    parse_nodes(&text)
}

/// Runs the launch effects as a provider that always succeeds; returns the node ids launched.
fn launch_all(st: &mut State, now: Time) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::mem::take(&mut st.effects) {
        if let Effect::Launch { node, .. } = e {
            st.launch_result(now, node, Ok(format!("i-{node}"))).unwrap();
            out.push(node);
        }
    }
    out
}

fn tick(st: &mut State, now: Time) {
    st.tick(now, 1_000, &mut <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(1)).unwrap();
}

/// A p1 job on c[1-2]: resumed, launched, registered, ready.
fn burst(st: &mut State, slurm: &SlurmOptions, now: Time) -> Vec<u32> {
    let jobs = parse_jobs("7|exp|ml|CONFIGURING|c[1-2]\n");
    let out = st.slurm_resume(now, slurm, &["c1".into(), "c2".into()], &jobs).unwrap();
    assert!(out.iter().all(|(_, r)| r.is_ok()), "{out:?}");
    let nodes = launch_all(st, now);
    st.slurm_sync(
        now + 2_000,
        slurm,
        &view("IDLE+CLOUD+POWERED_DOWN", &[("c1", "MIXED+CLOUD"), ("c2", "MIXED+CLOUD")]),
        &jobs,
    )
    .unwrap();
    for &n in &nodes {
        assert_eq!(st.node_state(n), Some(NodeState::Ready));
    }
    nodes
}

#[test]
fn a_controller_that_cannot_be_asked_costs_no_running_node() {
    let d = dir("down");
    let (mut st, slurm) = open(&d, T0);
    let nodes = burst(&mut st, &slurm, T0);
    // Ten minutes without a sync that got through (slurmctld down): the nodes keep running.
    for s in (3..600).step_by(1) {
        tick(&mut st, T0 + s * 1000);
    }
    assert!(
        st.effects.iter().all(|e| !matches!(e, Effect::Fence { .. } | Effect::Terminate { .. })),
        "{:?}",
        st.effects
    );
    for &n in &nodes {
        assert!(st.alive(n), "node {n} kept");
    }
}

#[test]
fn a_node_slurm_says_is_dead_is_fenced_then_handed_back() {
    let d = dir("dead");
    let (mut st, slurm) = open(&d, T0);
    let nodes = burst(&mut st, &slurm, T0);
    let dead = view("IDLE+CLOUD+POWERED_DOWN", &[("c1", "MIXED+CLOUD"), ("c2", "DOWN+CLOUD+NOT_RESPONDING")]);
    // Slurm says so for less than the liveness time: nothing yet.
    st.slurm_sync(T0 + 4_000, &slurm, &dead, &[]).unwrap();
    st.slurm_sync(T0 + 10_000, &slurm, &dead, &[]).unwrap();
    assert!(st.effects.is_empty(), "{:?}", st.effects);
    st.slurm_sync(T0 + 14_000, &slurm, &dead, &[]).unwrap();
    assert_eq!(std::mem::take(&mut st.effects), [Effect::Fence { node: nodes[1] }]);
    st.fenced(T0 + 15_000, nodes[1], true).unwrap();
    let back: Vec<Effect> = std::mem::take(&mut st.effects);
    assert!(
        back.iter()
            .any(|e| matches!(e, Effect::SlurmHandBack { name, reason } if name == "c2" && reason == "node lost")),
        "{back:?}"
    );
    assert!(st.alive(nodes[0]) && !st.alive(nodes[1]));
}

#[test]
fn a_resume_logged_before_a_crash_is_launched_after_the_restart() {
    let d = dir("crash-resume");
    let (mut st, slurm) = open(&d, T0);
    let jobs = parse_jobs("7|exp|ml|CONFIGURING|c1\n");
    st.slurm_resume(T0, &slurm, &["c1".into()], &jobs).unwrap();
    drop(st); // killed before the launch ran
    let (mut st, _) = open(&d, T0 + 5_000);
    st.reconcile(T0 + 5_000, &[], T0 + 5_000, true).unwrap();
    let relaunched = launch_all(&mut st, T0 + 5_000);
    assert_eq!(relaunched.len(), 1, "the resume is not lost: {:?}", st.engine.cluster().nodes);
    assert_eq!(st.engine.held_node("c1").map(|n| n.0), Some(relaunched[0]));
}

#[test]
fn a_release_logged_before_a_crash_leaves_no_machine_running() {
    let d = dir("crash-release");
    let (mut st, slurm) = open(&d, T0);
    let nodes = burst(&mut st, &slurm, T0);
    st.slurm_suspend(T0 + 60_000, &["c1".into()]).unwrap();
    drop(st); // killed before the terminate ran
    let (mut st, _) = open(&d, T0 + 70_000);
    let listed: Vec<spillway_providers::Instance> = nodes
        .iter()
        .map(|&n| spillway_providers::Instance {
            id: format!("i-{n}"),
            cluster: "c".into(),
            node: n,
            pool: "slurm-spot".into(),
            instance_type: "h8".into(),
            gpus: 8,
            spot: true,
        })
        .collect();
    st.reconcile(T0 + 70_000, &listed, T0 + 70_000, true).unwrap();
    let gone: Vec<&Effect> = st
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::TerminateInstance { id } if *id == format!("i-{}", nodes[0])))
        .collect();
    assert_eq!(gone.len(), 1, "{:?}", st.effects);
    assert!(st.alive(nodes[1]));
}

#[test]
fn a_node_slurm_has_up_with_no_machine_goes_back_to_slurm_once_a_while() {
    let d = dir("orphan");
    let (mut st, slurm) = open(&d, T0);
    let up = view("IDLE+CLOUD+POWERED_DOWN", &[("c3", "ALLOCATED+CLOUD")]);
    st.slurm_sync(T0, &slurm, &up, &[]).unwrap();
    assert_eq!(
        std::mem::take(&mut st.effects),
        [Effect::SlurmHandBack { name: "c3".into(), reason: "no machine behind the node".into() }]
    );
    // Not again while Slurm powers it down, but again if it is still up a minute later (the hand-back failed).
    st.slurm_sync(T0 + 30_000, &slurm, &up, &[]).unwrap();
    assert!(st.effects.is_empty());
    st.slurm_sync(T0 + 61_000, &slurm, &up, &[]).unwrap();
    assert_eq!(st.effects.len(), 1);
}
