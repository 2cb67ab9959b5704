//! The daemon's state machine on its own (no HTTP, no processes): what a node's agent is told to run after a
//! restart, and what a node's token may report.

use rand::SeedableRng;
use spillway_api::{Heartbeat, WorkerExit, WorkerRef};
use spillway_core::{Config, Engine, JobId, JobSpec, JobState, Time};
use spillway_server::state::{Effect, State, StateOptions};
use spillway_server::store::{Entry, JobCommand, Store};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const CONFIG: &str = include_str!("../../../examples/local.toml");
const T0: Time = 1_800_000_000_000;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spillway-control-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Opens the daemon's state on `dir` at `now` and replays its log (no reconcile).
fn replayed(dir: &Path, now: Time) -> State {
    replayed_with(dir, now, CONFIG)
}

/// Like [`replayed`], on the config `text`.
fn replayed_with(dir: &Path, now: Time, text: &str) -> State {
    let store = Store::open(&dir.join("spillway.db")).unwrap();
    let cfg = Config::parse("local.toml", text).unwrap();
    let opts = StateOptions {
        jobs_dir: dir.join("jobs"),
        cluster_id: "c".into(),
        heartbeat_timeout_ms: 3_000,
        boot_grace_ms: 5_000,
        reconcile_every_ms: 60_000,
        max_backlog: (3, 1 << 20),
    };
    let mut st = State::new(Engine::new(cfg, T0), store, opts, now);
    st.replay().unwrap();
    st
}

/// Opens the daemon's state on `dir` at `now`, replayed and reconciled against no instances; returns it and the
/// agent token each owned node's (re)launch got.
fn open(dir: &Path, now: Time) -> (State, BTreeMap<u32, String>) {
    open_with(dir, now, CONFIG)
}

/// Like [`open`], on the config `text`.
fn open_with(dir: &Path, now: Time, text: &str) -> (State, BTreeMap<u32, String>) {
    let mut st = replayed_with(dir, now, text);
    st.reconcile(now, &[], now, true).unwrap();
    let mut tokens = BTreeMap::new();
    for e in std::mem::take(&mut st.effects) {
        if let Effect::Launch { node, token } = e {
            tokens.insert(node, token);
            st.launch_result(now, node, Ok(format!("i-{node}"))).unwrap();
        }
    }
    (st, tokens)
}

fn spec(workers: u32) -> JobSpec {
    JobSpec {
        name: "j".into(),
        tier: "p0".into(),
        team: "research".into(),
        gpus_per_worker: 4,
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

fn beat(
    st: &mut State,
    now: Time,
    node: u32,
    seq: u64,
    running: Vec<WorkerRef>,
    exited: Vec<WorkerExit>,
) -> spillway_api::HeartbeatReply {
    let hb = Heartbeat { node, seq, applied: seq.saturating_sub(1), running, exited, ..Default::default() };
    st.heartbeat(now, &hb).unwrap().expect("the node is alive")
}

#[test]
fn an_attempt_that_moved_its_data_is_told_its_region_and_where_its_checkpoint_is() {
    let d = dir("region");
    let config = CONFIG.replace("market = \"fixed\"\n", "market = \"fixed\"\nregion = \"us-west-2\"\n");
    let (mut st, _) = open_with(&d, T0, &config);
    let command = || JobCommand { argv: vec!["true".into()], ..Default::default() };
    let moved = JobSpec { checkpoint_gb: Some(50.0), data_region: Some("us-east-1".into()), ..spec(1) };
    let here = JobSpec { checkpoint_gb: Some(50.0), data_region: Some("us-west-2".into()), ..spec(1) };
    st.apply(T0, Entry::Submit { spec: moved, command: command() }).unwrap();
    st.apply(T0, Entry::Submit { spec: here, command: command() }).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    st.tick(T0 + 100, 100, &mut rng).unwrap();
    let mut told = BTreeMap::new();
    for id in [0, 1] {
        let job = st.engine.job(JobId(id)).unwrap();
        assert_eq!(job.state, JobState::Running, "job {id} runs on the owned pool");
        let node = job.placement[0].0.0;
        let reply = beat(&mut st, T0 + 200, node, 1, vec![], vec![]);
        for a in reply.run {
            told.insert(a.worker.job, (a.region, a.data_from));
        }
    }
    let west = Some("us-west-2".to_string());
    assert_eq!(told[&0], (west.clone(), Some("us-east-1".into())), "job 0 copies its checkpoint from us-east-1");
    assert_eq!(told[&1], (west, None), "job 1's data is where it runs: nothing to copy");
    // The move's egress shows in the cost breakdown (and in the total), not hidden in a team's row alone.
    let cost = spillway_server::views::cost(&st, T0 + 200);
    let egress = st.engine.cluster().ledger.egress_usd;
    assert!(egress > 0.0 && cost.egress_usd == egress, "egress {egress}, cost view {}", cost.egress_usd);
    // And in the job's own cost.
    let view = spillway_server::views::job(&st, st.engine.job(JobId(0)).unwrap(), T0 + 200);
    assert!(view.egress_usd == egress && view.cost_usd >= egress, "{view:?}");
    assert!(cost.total_usd >= egress, "{cost:?}");
}

#[test]
fn a_finished_job_is_never_handed_out_again_after_a_restart() {
    let d = dir("finished");
    let (mut st, tokens) = open(&d, T0);
    assert_eq!(tokens.len(), 2, "both owned nodes get an agent with a fresh token");
    st.apply(
        T0,
        Entry::Submit { spec: spec(1), command: JobCommand { argv: vec!["true".into()], ..Default::default() } },
    )
    .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    st.tick(T0 + 100, 100, &mut rng).unwrap();
    let job = st.engine.job(JobId(0)).unwrap();
    assert_eq!(job.state, JobState::Running);
    let node = job.placement[0].0.0;
    let reply = beat(&mut st, T0 + 200, node, 1, vec![], vec![]);
    let w = reply.run.first().expect("the job is handed to its node").worker;
    beat(&mut st, T0 + 300, node, 2, vec![w], vec![]);
    let reply = beat(
        &mut st,
        T0 + 400,
        node,
        3,
        vec![],
        vec![WorkerExit { worker: w, code: Some(0), success: true, signal: None }],
    );
    assert_eq!(reply.acked_exits, vec![w]);
    assert_eq!(st.engine.job(JobId(0)).unwrap().state, JobState::Succeeded);
    drop(st);
    // The restarted daemon (new agents, as after `spillway up` stops and starts) never hands the job out again.
    let (mut st, _) = open(&d, T0 + 10_000);
    assert_eq!(st.engine.job(JobId(0)).unwrap().state, JobState::Succeeded);
    for n in 0..2 {
        let reply = beat(&mut st, T0 + 10_100, n, 1, vec![], vec![]);
        assert!(reply.run.is_empty(), "node {n} was told to run {:?}", reply.run);
    }
}

#[test]
fn a_node_reports_only_for_the_workers_placed_on_it() {
    let d = dir("others");
    let (mut st, tokens) = open(&d, T0);
    st.apply(
        T0,
        Entry::Submit { spec: spec(1), command: JobCommand { argv: vec!["sleep".into()], ..Default::default() } },
    )
    .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    st.tick(T0 + 100, 100, &mut rng).unwrap();
    let node = st.engine.job(JobId(0)).unwrap().placement[0].0.0;
    let other = 1 - node;
    assert_eq!(st.node_of_token(&tokens[&other]), Some(other));
    let w = WorkerRef { job: 0, attempt: 1, rank: 0 };
    // The other node's token reports the job's worker as failed: acknowledged, and nothing changes.
    let reply = beat(
        &mut st,
        T0 + 200,
        other,
        1,
        vec![],
        vec![WorkerExit { worker: w, code: Some(1), success: false, signal: None }],
    );
    assert_eq!(reply.acked_exits, vec![w]);
    assert_eq!(st.engine.job(JobId(0)).unwrap().state, JobState::Running);
    // Its checkpoint reports are ignored too, and it is told to stop a worker it runs that is not its own.
    let reply = beat(&mut st, T0 + 300, other, 2, vec![w], vec![]);
    assert_eq!(reply.stop.iter().map(|s| s.worker).collect::<Vec<_>>(), vec![w]);
    assert_eq!(st.engine.job(JobId(0)).unwrap().state, JobState::Running);
    // A stale heartbeat (an older seq) is ignored.
    let reply = beat(
        &mut st,
        T0 + 350,
        other,
        1,
        vec![],
        vec![WorkerExit { worker: w, code: Some(1), success: false, signal: None }],
    );
    assert!(reply.acked_exits.is_empty() && reply.run.is_empty());
}

#[test]
fn a_replayed_submission_the_engine_now_refuses_becomes_a_failed_job_and_ids_stay_aligned() {
    let d = dir("refused");
    {
        // An older version logged a job no pool could ever hold, then a good one.
        let mut store = Store::open(&d.join("spillway.db")).unwrap();
        let cmd = JobCommand { argv: vec!["true".into()], ..Default::default() };
        store.append(T0, &Entry::Submit { spec: spec(u32::MAX), command: cmd.clone() }).unwrap();
        store.append(T0, &Entry::Submit { spec: spec(1), command: cmd }).unwrap();
    }
    let (st, _) = open(&d, T0 + 1_000);
    assert_eq!(st.engine.job(JobId(0)).unwrap().state, JobState::Failed);
    assert_eq!(st.engine.job(JobId(1)).unwrap().state, JobState::Queued);
    assert!(
        st.decisions.iter().any(|e| e.reason == "refused_on_replay" && e.subject == "job:0"),
        "no event records the refusal"
    );
}

#[test]
fn a_write_that_fails_for_good_stops_the_daemon_and_nothing_unlogged_is_acted_on() {
    let d = dir("storefail");
    let (mut st, _) = open(&d, T0);
    st.store.inject_crash_after(Some(0));
    let submit =
        Entry::Submit { spec: spec(1), command: JobCommand { argv: vec!["true".into()], ..Default::default() } };
    assert!(st.apply(T0, submit.clone()).is_err());
    assert!(st.fatal.is_some(), "the failure is not remembered");
    assert!(st.engine.cluster().jobs.is_empty(), "the engine saw a submission the log does not hold");
    // Everything after it is refused too: no tick, heartbeat or input acts any more.
    st.store.inject_crash_after(None);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    assert!(st.tick(T0 + 100, 100, &mut rng).is_err());
    assert!(st.heartbeat(T0 + 200, &Heartbeat { node: 0, seq: 1, ..Default::default() }).is_err());
    assert!(st.apply(T0 + 300, submit).is_err());
    drop(st);
    let (st, _) = open(&d, T0 + 1_000);
    assert!(st.engine.cluster().jobs.is_empty());
}

#[test]
fn a_node_claiming_to_run_other_nodes_workers_holds_back_nothing() {
    let d = dir("claims");
    let (mut st, _) = open(&d, T0);
    st.apply(
        T0,
        Entry::Submit { spec: spec(1), command: JobCommand { argv: vec!["sleep".into()], ..Default::default() } },
    )
    .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    st.tick(T0 + 100, 100, &mut rng).unwrap();
    let node = st.engine.job(JobId(0)).unwrap().placement[0].0.0;
    let other = 1 - node;
    // The other node claims to run an older attempt of the job: it is told to stop it, and it does not block the
    // job's real node from getting its worker.
    let fake = WorkerRef { job: 0, attempt: 0, rank: 0 };
    let reply = beat(&mut st, T0 + 200, other, 1, vec![fake], vec![]);
    assert_eq!(reply.stop.iter().map(|s| s.worker).collect::<Vec<_>>(), vec![fake]);
    let reply = beat(&mut st, T0 + 300, node, 1, vec![], vec![]);
    assert_eq!(reply.run.len(), 1, "a foreign claim held the job back");
}

#[test]
fn a_team_backlog_is_bounded_and_frees_up_as_jobs_end() {
    let d = dir("backlog");
    let (mut st, _) = open(&d, T0);
    let cmd = JobCommand { argv: vec!["true".into()], ..Default::default() };
    for _ in 0..3 {
        assert!(st.backlog_room("research", cmd.bytes()).is_ok());
        st.apply(T0, Entry::Submit { spec: spec(1), command: cmd.clone() }).unwrap();
    }
    assert_eq!(st.backlog_room("research", cmd.bytes()), Err((3, 12)), "a fourth unfinished job fits");
    assert!(st.backlog_room("applied", cmd.bytes()).is_ok(), "another team is not held back");
    st.apply(T0 + 1, Entry::Event(spillway_core::Event::CancelJob { job: JobId(0) })).unwrap();
    assert!(st.backlog_room("research", cmd.bytes()).is_ok(), "an ended job frees its place");
    let big = JobCommand { argv: vec!["x".repeat(2 << 20)], ..Default::default() };
    assert!(st.backlog_room("research", big.bytes()).is_err(), "the bytes are bounded too");
}

#[test]
fn a_launch_token_buys_a_session_token_and_is_void_once_the_agent_uses_it_even_after_a_restart() {
    use spillway_server::tokens::TokenUse;
    let d = dir("session");
    let (mut st, tokens) = open(&d, T0);
    let launch = tokens[&0].clone();
    let hash = |t: &str| spillway_server::datadir::token_hash(t);
    beat(&mut st, T0 + 100, 0, 1, vec![], vec![]);
    // An agent that takes no session tokens (an older one) keeps its launch token.
    assert_eq!(st.rotate_token(T0 + 100, 0, &hash(&launch), false).unwrap(), TokenUse::Current);
    let TokenUse::Launch(first) = st.rotate_token(T0 + 100, 0, &hash(&launch), true).unwrap() else {
        panic!("a session token on the launch token")
    };
    // The reply was lost: the agent is still on the launch token and gets another; the first is void.
    let TokenUse::Launch(session) = st.rotate_token(T0 + 200, 0, &hash(&launch), true).unwrap() else {
        panic!("a new session token")
    };
    assert_ne!(first, session);
    assert_eq!(st.rotate_token(T0 + 250, 0, &hash(&first), true).unwrap(), TokenUse::Void);
    assert_eq!((st.node_of_token(&launch), st.node_of_token(&session)), (Some(0), Some(0)));
    // The agent's first heartbeat on the session token voids the launch token (read back from user-data, say).
    assert_eq!(st.rotate_token(T0 + 300, 0, &hash(&session), true).unwrap(), TokenUse::Current);
    assert_eq!((st.node_of_token(&launch), st.node_of_token(&session)), (None, Some(0)));
    assert_eq!(st.rotate_token(T0 + 350, 0, &hash(&launch), true).unwrap(), TokenUse::Void);
    let seq = st.store.last_seq();
    assert_eq!(st.rotate_token(T0 + 400, 0, &hash(&session), true).unwrap(), TokenUse::Current);
    assert_eq!(st.store.last_seq(), seq, "heartbeats on the session token log nothing");
    drop(st);
    let st = replayed(&d, T0 + 1_000);
    assert_eq!((st.node_of_token(&launch), st.node_of_token(&session)), (None, Some(0)), "the restart agrees");
}

#[test]
fn a_heartbeat_on_the_launch_token_registers_the_node_and_reports_nothing() {
    let d = dir("launchbeat");
    let (mut st, _) = open(&d, T0);
    st.apply(
        T0,
        Entry::Submit { spec: spec(1), command: JobCommand { argv: vec!["true".into()], ..Default::default() } },
    )
    .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    st.tick(T0 + 100, 100, &mut rng).unwrap();
    let node = st.engine.job(JobId(0)).unwrap().placement[0].0.0;
    let w = WorkerRef { job: 0, attempt: 1, rank: 0 };
    let exit = WorkerExit { worker: w, code: Some(0), success: true, signal: None };
    let hb = Heartbeat { node, seq: 1, exited: vec![exit], ..Default::default() };
    let reply = st.heartbeat_with(T0 + 200, &hb, false).unwrap().expect("alive");
    assert!(reply.run.is_empty() && reply.acked_exits.is_empty(), "{reply:?}");
    assert_eq!(st.engine.job(JobId(0)).unwrap().state, JobState::Running, "a claimed exit counted for nothing");
}

#[test]
fn a_pools_minimum_comes_up_at_the_first_tick_with_no_job_in_sight() {
    let d = dir("min-nodes");
    let cfg = CONFIG.replace("[[pools]]\nname = \"spot\"", "[[pools]]\nname = \"spot\"\nmin_nodes = 2");
    assert_ne!(cfg, CONFIG, "examples/local.toml has no pool named spot");
    let open_with = |now: Time| {
        let store = Store::open(&d.join("spillway.db")).unwrap();
        let opts = StateOptions {
            jobs_dir: d.join("jobs"),
            cluster_id: "c".into(),
            heartbeat_timeout_ms: 3_000,
            boot_grace_ms: 5_000,
            reconcile_every_ms: 60_000,
            max_backlog: (3, 1 << 20),
        };
        let mut st = State::new(Engine::new(Config::parse("local.toml", &cfg).unwrap(), T0), store, opts, now);
        st.replay().unwrap();
        st
    };
    let spot = |st: &State| {
        let pool = st.engine.config().pools.iter().position(|p| p.name == "spot").unwrap();
        st.engine.cluster().nodes.iter().filter(|n| n.pool == pool && n.alive()).count()
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    // A new data dir: nothing is submitted and no timer is due, yet the first tick launches the minimum.
    let mut st = open_with(T0);
    st.tick(T0 + 1_000, 1_000, &mut rng).unwrap();
    assert_eq!(spot(&st), 2, "the pool's minimum did not come up");
    drop(st);
    // After a restart the replayed nodes count: nothing more is launched.
    let mut st = open_with(T0 + 5_000);
    st.tick(T0 + 6_000, 1_000, &mut rng).unwrap();
    assert_eq!(spot(&st), 2);
}

#[test]
fn a_gangs_workers_are_told_the_address_its_rank_0_node_gave_and_never_garbage() {
    let d = dir("addrs");
    let (mut st, _) = open(&d, T0);
    // Node 0's agent sends something that is no address (ignored: 127.0.0.1 stands in), node 1's a real one.
    let addr = |node: u32| if node == 0 { "10.0.0.10; rm -rf /" } else { "10.0.0.11" };
    let said = |node: u32| if node == 0 { "127.0.0.1" } else { "10.0.0.11" };
    for node in [0, 1] {
        let hb = Heartbeat { node, seq: 1, addr: Some(addr(node).into()), ..Default::default() };
        st.heartbeat(T0 + 10, &hb).unwrap();
    }
    st.apply(
        T0 + 20,
        Entry::Submit { spec: spec(2), command: JobCommand { argv: vec!["sleep".into()], ..Default::default() } },
    )
    .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    st.tick(T0 + 100, 100, &mut rng).unwrap();
    let placement = st.engine.job(JobId(0)).unwrap().placement.clone();
    assert_eq!(placement.len(), 2, "the gang spans both owned nodes");
    let rank0 = placement[0].0.0;
    let mut handed = Vec::new();
    for node in [0, 1] {
        let hb = Heartbeat { node, seq: 2, applied: 1, addr: Some(addr(node).into()), ..Default::default() };
        handed.extend(st.heartbeat(T0 + 200, &hb).unwrap().unwrap().run);
    }
    assert_eq!(handed.len(), 2, "{handed:?}");
    for a in &handed {
        assert_eq!(a.master_addr, said(rank0), "worker {:?}", a.worker);
    }
}
