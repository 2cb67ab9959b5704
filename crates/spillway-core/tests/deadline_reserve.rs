//! A deadline job's reserve, as a user states it: a job that spent its slack waiting for spot does not stay on
//! on-demand for good; it runs on on-demand while spot cannot be had and goes back to spot when spot returns,
//! and it still meets its deadline. With no reserve it waits for spot longer and then stays on on-demand.

use spillway_core::{DecisionKind, JobId, JobState, Market, StopReason};

mod common;
use common::*;

const CONFIG: &str = r#"
[[instance_types]]
name = "a8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 5.0

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["a8"]
max_nodes = 4
boot_latency_s = 240
idle_timeout_s = 0

[[pools]]
name = "spot"
market = "spot"
instance_types = ["a8"]
max_nodes = 4
boot_latency_s = 240
idle_timeout_s = 0
"#;

const OD: usize = 0;
const WORK_S: f64 = 4.0 * 3600.0;
const DEADLINE_S: f64 = 6.0 * 3600.0;
/// Spot launches fail until then.
const SPOT_BACK_S: f64 = 9000.0;

/// Submits a 4-hour, 8-GPU p1 job due in 6 hours; returns it.
fn deadline_job(h: &mut Harness) -> JobId {
    let mut s = spec("p1", 8, 1);
    s.interruptible = Some(true);
    s.deadline = Some(h.in_s(DEADLINE_S));
    s.expected_duration_ms = Some((WORK_S * 1000.0) as i64);
    let job = h.submit(s);
    h.runs_for(job, WORK_S);
    job
}

/// Plays the world until `t`: on-demand boots in 240 s, spot only from [`SPOT_BACK_S`] on.
fn play(h: &mut Harness, t: f64) -> Vec<spillway_core::Action> {
    h.run_cloud(t, &|now, pool, _| (pool == OD || now >= SPOT_BACK_S).then_some(240.0))
}

/// Returns how many on-demand launches `actions` hold.
fn od_launches(actions: &[spillway_core::Action]) -> usize {
    launches(actions).iter().filter(|l| l.1 == OD).count()
}

#[test]
fn a_deadline_job_on_its_reserve_uses_on_demand_only_while_spot_is_out_and_meets_its_deadline() {
    let mut h = Harness::new(CONFIG);
    let job = deadline_job(&mut h);
    // It keeps 900 s at its pin (a 240 s boot, a 60 s checkpoint, the 600 s margin) and four trips' worth more:
    // it waits for spot while its slack (7,200 s) is above 4,500 s.
    let a = play(&mut h, 2650.0);
    assert_eq!(od_launches(&a), 0, "waits for spot while its slack is above its reserve: {a:?}");
    let a = play(&mut h, 2750.0);
    assert_eq!(od_launches(&a), 1, "on its reserve, it takes on-demand while spot is out: {a:?}");
    assert_eq!(h.records_of(DecisionKind::Fallback, "deadline_reserve").len(), 1);
    assert!(h.records_of(DecisionKind::Fallback, "deadline").is_empty(), "not pinned");

    // Spot is back at 9,000 s; the job asks for it after its next checkpoint and moves once a node is ready.
    let mut moved = Vec::new();
    while moved.is_empty() && h.t() < 12_000.0 {
        let t = h.t() + 60.0;
        moved = stops(&play(&mut h, t)).into_iter().filter(|s| s.0 == job).collect();
    }
    assert_eq!(moved, vec![(job, 1, StopReason::Migrated)], "it went back to spot by 12,000 s");
    assert!(h.t() > SPOT_BACK_S);
    assert_eq!(h.records_of(DecisionKind::Fallback, "return_to_spot").len(), 1);
    // The test's world runs an attempt for the given time from its start: what is left of the work.
    let left = h.job(job).remaining_work_ms(h.in_s(0.0)).expect("declared duration");
    h.runs_for(job, left as f64 / 1000.0);
    let a = play(&mut h, 30_000.0);
    let last = starts(&a).into_iter().rfind(|s| s.0 == job).expect("restarted");
    assert!(last.2.iter().all(|(n, _)| h.node(*n).market == Market::Spot), "restarts on spot: {last:?}");
    let j = h.job(job);
    assert_eq!(j.state, JobState::Succeeded, "{a:?}");
    assert!(j.ended.is_some_and(|e| Some(e) <= j.spec.deadline), "met its deadline");
    assert!(!j.pinned_on_demand);
    assert_eq!(od_launches(&a), 0, "no more on-demand: {a:?}");
}

#[test]
fn with_no_reserve_a_deadline_job_waits_for_spot_until_pinned_then_stays_on_on_demand() {
    let mut h = Harness::new(&format!("{CONFIG}\n[policy]\ndeadline_reserve_trips = 0\n"));
    let job = deadline_job(&mut h);
    let a = play(&mut h, 6250.0);
    assert_eq!(od_launches(&a), 0, "waits for spot until its slack is 900 s: {a:?}");
    let a = play(&mut h, 30_000.0);
    assert_eq!(od_launches(&a), 1, "{a:?}");
    let j = h.job(job);
    assert_eq!(j.state, JobState::Succeeded);
    assert!(j.ended.is_some_and(|e| Some(e) <= j.spec.deadline), "met its deadline");
    assert!(j.pinned_on_demand);
    assert!(stops(&a).iter().all(|s| s.0 != job), "never moved back to spot: {a:?}");
    assert!(h.records_of(DecisionKind::Fallback, "deadline_reserve").is_empty());
}
