//! Rebalance recommendations, as a user states them: a job on a spot node the cloud says is at risk keeps
//! running until a replacement is ready, then moves there with a checkpoint; the node takes no new work and goes
//! once empty; an interruption notice that comes before the replacement still checkpoints the job.

use spillway_core::{DecisionKind, Event, JobState, NodeId, NodeState, StopReason};

mod common;
use common::*;

const SPOT: &str = r#"
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

[[pools]]
name = "spot"
market = "spot"
instance_types = ["a8"]
max_nodes = 4
"#;

/// Starts one 8-GPU p1 job on a spot node; returns (job, node).
fn running(h: &mut Harness) -> (spillway_core::JobId, NodeId) {
    let job = h.submit(spec("p1", 8, 1));
    let a = h.run_until(60.0);
    let l = launches(&a);
    assert_eq!(l.len(), 1, "{a:?}");
    h.at(300.0);
    h.event(Event::NodeReady { node: l[0].0 });
    let a = h.drain();
    assert!(started(&a, job).is_some(), "{a:?}");
    (job, l[0].0)
}

#[test]
fn a_job_on_a_node_at_risk_keeps_running_until_its_replacement_is_ready_then_moves_there() {
    let mut h = Harness::new(SPOT);
    let (job, node) = running(&mut h);
    h.at(1000.0);
    h.event(Event::RebalanceRecommendation { node });
    let a = h.drain();
    // Make before break: a replacement is bought and the job is not stopped.
    assert!(stops(&a).is_empty(), "the job keeps running while nothing can take it: {a:?}");
    let l = launches(&a);
    assert_eq!(l.len(), 1, "a replacement is bought at once: {a:?}");
    assert_eq!(h.node(node).state, NodeState::Draining);
    assert_eq!(h.job(job).state, JobState::Running);
    assert_eq!(h.records_of(DecisionKind::Interruption, "rebalance_recommendation").len(), 1);
    // New work does not go to the node at risk.
    let other = h.submit(spec("p1", 1, 1));
    let a = h.drain();
    assert!(started(&a, other).is_none(), "{a:?}");
    h.event(Event::CancelJob { job: other });

    h.at(1240.0);
    h.event(Event::NodeReady { node: l[0].0 });
    let a = h.drain();
    assert_eq!(stops(&a), vec![(job, 1, StopReason::Migrated)], "it moves once the replacement is ready: {a:?}");
    let a = h.run_until(1299.0);
    assert!(!terminates(&a).contains(&node), "not while the job writes its checkpoint there (60 s): {a:?}");
    let a = h.run_until(1400.0);
    assert_eq!(started(&a, job).map(|p| p[0].0), Some(l[0].0), "attempt 2 runs on the replacement: {a:?}");
    assert!(terminates(&a).contains(&node), "the emptied node at risk goes: {a:?}");
    assert_eq!(h.node(node).state, NodeState::Terminated);
}

#[test]
fn an_interruption_notice_before_the_replacement_is_ready_still_checkpoints_the_job() {
    let mut h = Harness::new(SPOT);
    let (job, node) = running(&mut h);
    h.at(1000.0);
    h.event(Event::RebalanceRecommendation { node });
    h.drain();
    h.at(1010.0);
    h.notice(node, 120.0);
    let a = h.drain();
    assert_eq!(stops(&a), vec![(job, 1, StopReason::Interrupted { checkpoint: true })], "{a:?}");
    assert_eq!(h.job(job).interruptions, 1);
    // A second notice for the same node changes nothing.
    h.at(1011.0);
    h.notice(node, 120.0);
    assert!(stops(&h.drain()).is_empty());
    assert_eq!(h.job(job).interruptions, 1);
}

#[test]
fn a_recommendation_for_an_empty_or_unknown_node_is_harmless() {
    let mut h = Harness::new(SPOT);
    let (job, node) = running(&mut h);
    h.at(500.0);
    // Recommendations for a node twice: the second changes nothing.
    h.event(Event::RebalanceRecommendation { node });
    h.event(Event::RebalanceRecommendation { node });
    assert!(h.e.handle_event(h.now, Event::RebalanceRecommendation { node: NodeId(999) }).is_err());
    assert_eq!(h.job(job).state, JobState::Running);
}

#[test]
fn a_node_at_risk_whose_jobs_can_go_nowhere_returns_to_service_after_half_an_hour() {
    // The spot pool is at its max of one node, and p2 may use spot only: no replacement can be bought.
    let mut h = Harness::new(
        &SPOT
            .replace("max_nodes = 4\n\"#", "max_nodes = 4\n")
            .replace("instance_types = [\"a8\"]\nmax_nodes = 4\n", "instance_types = [\"a8\"]\nmax_nodes = 1\n"),
    );
    let job = h.submit(spec("p2", 8, 1));
    let a = h.run_until(7200.0);
    let l = launches(&a);
    assert_eq!(l.len(), 1, "{a:?}");
    let t = h.t();
    h.at(t + 240.0);
    h.event(Event::NodeReady { node: l[0].0 });
    assert!(started(&h.drain(), job).is_some());
    let node = l[0].0;
    let t = h.t() + 1000.0;
    h.at(t);
    h.event(Event::RebalanceRecommendation { node });
    let a = h.drain();
    assert!(launches(&a).is_empty() && stops(&a).is_empty(), "nowhere to go, nothing bought: {a:?}");
    assert_eq!(h.node(node).state, NodeState::Draining);
    let a = h.run_until(t + 1799.0);
    assert!(stops(&a).is_empty());
    assert_eq!(h.node(node).state, NodeState::Draining, "still at risk before the half hour");
    h.run_until(t + 1800.0);
    assert_eq!(h.node(node).state, NodeState::Ready, "back in service");
    assert!(!h.node(node).at_risk);
    assert_eq!(h.records_of(DecisionKind::Interruption, "rebalance_expired").len(), 1);
    assert_eq!((h.job(job).state, h.job(job).attempt), (JobState::Running, 1), "the job never stopped");
}

#[test]
fn a_deadline_job_that_no_spot_pool_can_hold_takes_on_demand_at_once() {
    // An interruptible deadline job whose GPU model no spot pool sells, and one whose tier has no spot market:
    // neither waits for spot until its slack runs out.
    let toml = format!(
        "{SPOT}\n[[instance_types]]\nname = \"h8\"\ngpus = 8\ngpu_model = \"H100\"\non_demand_usd_per_hour = 40.0\n\n\
         [[pools]]\nname = \"od-h100\"\nmarket = \"on_demand\"\ninstance_types = [\"h8\"]\nmax_nodes = 2\n\n\
         [tiers.p2]\nmarkets = [\"fixed\", \"on_demand\"]\ninterruptible = true\n"
    );
    let mut h = Harness::new(&toml);
    let with_deadline = |tier: &str, model: Option<&str>| {
        let mut s = spec(tier, 8, 1);
        s.gpu_model = model.map(str::to_string);
        s.interruptible = Some(true);
        s.expected_duration_ms = Some(3_600_000);
        s.deadline = Some(h.in_s(86_400.0));
        s
    };
    let (h100, no_spot) = (with_deadline("p1", Some("H100")), with_deadline("p2", None));
    let jobs = [h.submit(h100), h.submit(no_spot)];
    // Within their tiers' waiting budgets (minutes), not near their deadlines' pins (hours).
    let a = h.run_until(900.0);
    let l = launches(&a);
    assert_eq!(l.len(), 2, "on-demand is bought for both: {a:?}");
    assert!(l.iter().all(|&(_, pool, _)| pool != 1), "nothing from the spot pool: {l:?}");
    h.at(1200.0);
    for (node, ..) in l {
        h.event(Event::NodeReady { node });
    }
    let a = h.drain();
    for j in jobs {
        assert!(started(&a, j).is_some(), "job {j:?} starts on on-demand: {a:?}");
    }
}
