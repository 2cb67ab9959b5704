//! What `spillway cost --since/--until` promises a user: the cost of a window is what the cluster cost in it, to
//! the second, whatever the window's length or where the daemon's minute snapshots fall, and the same after a
//! restart. The built-in cluster: 2 owned nodes of 4 GPUs at 0.9 USD per GPU-hour (7.2 USD an hour in all).

use rand::SeedableRng;
use spillway_api::{CostView, Heartbeat, WorkerExit};
use spillway_core::{Config, Engine, JobId, JobSpec, JobState, Time};
use spillway_server::state::{Effect, State, StateOptions};
use spillway_server::store::{Entry, JobCommand, Store};
use spillway_server::views;
use std::path::{Path, PathBuf};

const CONFIG: &str = include_str!("../../../examples/local.toml");
const T0: Time = 1_800_000_000_000;
/// The owned pool's cost per second.
const POOL_USD_PER_S: f64 = 8.0 * 0.9 / 3600.0;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spillway-cost-window-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Opens the daemon's state on `dir` at `now`: replayed, reconciled, the owned nodes' launches answered.
fn open(dir: &Path, now: Time) -> State {
    let store = Store::open(&dir.join("spillway.db")).unwrap();
    let cfg = Config::parse("local.toml", CONFIG).unwrap();
    let opts = StateOptions {
        jobs_dir: dir.join("jobs"),
        cluster_id: "c".into(),
        heartbeat_timeout_ms: 60_000,
        boot_grace_ms: 60_000,
        reconcile_every_ms: 600_000,
        max_backlog: (10, 1 << 20),
    };
    let mut st = State::new(Engine::new(cfg, T0), store, opts, now);
    st.replay().unwrap();
    st.reconcile(now, &[], now, true).unwrap();
    for e in std::mem::take(&mut st.effects) {
        if let Effect::Launch { node, .. } = e {
            st.launch_result(now, node, Ok(format!("i-{node}"))).unwrap();
        }
    }
    st
}

fn spec() -> JobSpec {
    JobSpec {
        name: "j".into(),
        tier: "p0".into(),
        team: "research".into(),
        gpus_per_worker: 4,
        workers: 1,
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

/// Returns the cost of `since..until` as the API computes it at `now`.
fn window(st: &State, since: Time, until: Time, now: Time) -> CostView {
    let end = views::cost_at(st, until, now).unwrap();
    views::cost_minus(&end, &views::cost_at(st, since, now).unwrap())
}

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn a_cost_window_is_exact_to_the_second_and_survives_a_restart() {
    let d = dir("exact");
    let mut st = open(&d, T0);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    // A 4-GPU job for team research runs from T0 + 5 s to T0 + 25 s.
    st.apply(
        T0 + 5_000,
        Entry::Submit { spec: spec(), command: JobCommand { argv: vec!["true".into()], ..Default::default() } },
    )
    .unwrap();
    st.tick(T0 + 5_000, 100, &mut rng).unwrap();
    let job = st.engine.job(JobId(0)).unwrap();
    assert_eq!(job.state, JobState::Running);
    let node = job.placement[0].0.0;
    let hb = |seq, running, exited| Heartbeat { node, seq, applied: seq - 1, running, exited, ..Default::default() };
    let w = st.heartbeat(T0 + 5_000, &hb(1, vec![], vec![])).unwrap().unwrap().run[0].worker;
    let exit = WorkerExit { worker: w, code: Some(0), success: true, signal: None };
    st.heartbeat(T0 + 25_000, &hb(2, vec![], vec![exit])).unwrap();
    assert_eq!(st.engine.job(JobId(0)).unwrap().state, JobState::Succeeded);
    for t in (30..=90).step_by(10) {
        st.tick(T0 + t * 1000, 10_000, &mut rng).unwrap();
    }
    let now = T0 + 90_000;
    let check = |st: &State, when: &str| {
        // The whole pool, over windows of 10 s and 30 s with no change inside: the figures are 1:3.
        for (a, b) in [(30, 40), (30, 60), (41, 71), (10, 20)] {
            let v = window(st, T0 + a * 1000, T0 + b * 1000, now);
            let want = (b - a) as f64 * POOL_USD_PER_S;
            assert!(near(v.total_usd, want), "{when}: {a}..{b} s cost {} USD, want {want}", v.total_usd);
            assert!(near(v.by_pool["onprem"], want), "{when}: by pool {:?}", v.by_pool);
        }
        // Across the job's start and end: research pays for 4 of the 8 GPUs while it runs, and only then.
        let v = window(st, T0 + 2_000, T0 + 45_000, now);
        let research = 20.0 * POOL_USD_PER_S / 2.0;
        assert!(near(v.by_team["research"], research), "{when}: research {} want {research}", v.by_team["research"]);
        assert!(near(v.idle_usd, 43.0 * POOL_USD_PER_S - research), "{when}: idle {}", v.idle_usd);
        let v = window(st, T0 + 10_000, T0 + 15_000, now);
        assert!(near(v.by_team["research"], 5.0 * POOL_USD_PER_S / 2.0), "{when}: a window inside the job");
        // Up to now, the window ends at the live books.
        let v = window(st, T0 + 80_000, now, now);
        assert!(near(v.total_usd, 10.0 * POOL_USD_PER_S), "{when}: up to now {}", v.total_usd);
    };
    check(&st, "live");
    drop(st);
    let st = open(&d, now);
    check(&st, "after a restart");
}
