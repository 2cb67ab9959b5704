//! What-if questions about a pool's limits, and why a pool did not grow: a what-if answer is what the engine
//! then does when the change is made for real, and a pool that stops growing says why (at max, cooldown, step
//! limit, backed off) in a `scale_out_blocked` decision and in the pending detail of the jobs it leaves waiting.

mod common;

use common::{Harness, launches, spec};
use spillway_core::{Action, DecisionKind, Event, LaunchError, NotGrown, PendingReason, PoolChange};

/// A spot pool of 8-GPU nodes capped at 3, for p2 jobs (spot only), beside 1 owned 8-GPU node.
const CAPPED: &str = r#"
[[instance_types]]
name = "g8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 5.0

[[instance_types]]
name = "g4"
gpus = 4
gpu_model = "V100"
on_demand_usd_per_hour = 12.0
spot_usd_per_hour = 2.6

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{ count = 1, gpus = 8 }]

[[pools]]
name = "spot"
market = "spot"
instance_types = ["g8"]
max_nodes = 3
min_step_nodes = 16
scale_out_cooldown_s = 60
"#;

/// Submits `n` p2 jobs of 8 GPUs each, boots every launch, and returns the harness at `t` seconds.
fn capped_with(n: usize, t: f64) -> Harness {
    let mut h = Harness::new(CAPPED);
    for _ in 0..n {
        h.submit(spec("p2", 8, 1));
    }
    h.run_world(t, 30.0);
    // A what-if answers at the engine's last instant: bring it to `t`.
    h.timeout();
    h.drain();
    h
}

#[test]
fn what_if_a_larger_max_is_what_the_pool_then_launches() {
    let mut h = capped_with(20, 600.0);
    assert_eq!(h.alive(1), 3, "the spot pool is at its max of 3");
    let at_max = h.e.what_if("spot", PoolChange::default()).expect("spot is a cloud pool");
    assert!(at_max.launches.is_empty(), "at max it buys nothing: {at_max:?}");
    assert_eq!(at_max.not_grown, Some(NotGrown::AtMax { max_nodes: 3, nodes: 3 }));
    assert_eq!(at_max.jobs, 16, "16 of the 20 jobs wait (1 owned + 3 spot nodes run 4)");

    let answer = h.e.what_if("spot", PoolChange { max_nodes: Some(12), ..PoolChange::default() }).expect("pool");
    assert_eq!(answer.launches, vec![("g8".to_string(), 9)], "{answer:?}");
    assert_eq!(answer.not_grown, Some(NotGrown::AtMax { max_nodes: 12, nodes: 12 }), "7 jobs still wait at 12");
    // The question changed nothing: asking again gives the same answer, and no action is pending.
    assert_eq!(h.e.what_if("spot", PoolChange { max_nodes: Some(12), ..PoolChange::default() }), Some(answer.clone()));
    assert!(h.drain().is_empty());

    // Made for real, the change launches exactly what the what-if said.
    h.event(Event::SetPoolBounds { pool: 1, min_nodes: None, max_nodes: Some(12) });
    let acts = h.drain();
    let launched = launches(&acts);
    assert_eq!(launched.len(), 9, "{acts:?}");
    assert!(launched.iter().all(|&(_, pool, it)| pool == 1 && it == 0), "{launched:?}");
}

#[test]
fn a_max_past_any_pool_is_answered_in_a_what_if_and_refused_as_a_change() {
    let mut h = capped_with(20, 600.0);
    // Asked of the largest max there is, the pool buys for every waiting job (its scarcity test once overflowed).
    let answer = h.e.what_if("spot", PoolChange { max_nodes: Some(u32::MAX), ..PoolChange::default() }).expect("pool");
    assert_eq!(answer.launches, vec![("g8".to_string(), 16)], "{answer:?}");
    // As a change it is refused, as a config would refuse it: a min that high would launch them all.
    let huge = Event::SetPoolBounds { pool: 1, min_nodes: Some(2_000_000), max_nodes: Some(2_000_000) };
    assert!(h.e.handle_event(h.now, huge).is_err());
    assert!(h.drain().is_empty());
}

#[test]
fn what_if_answers_none_for_unknown_and_fixed_pools() {
    let h = capped_with(2, 60.0);
    assert_eq!(h.e.what_if("nope", PoolChange::default()), None);
    assert_eq!(h.e.what_if("onprem", PoolChange::default()), None);
}

#[test]
fn a_cooldown_is_part_of_the_answer_unless_asked_to_look_past_it() {
    let mut h = Harness::new(&CAPPED.replace("min_step_nodes = 16", "min_step_nodes = 1"));
    for _ in 0..6 {
        h.submit(spec("p2", 8, 1));
    }
    // p2 waits for owned capacity first (its tier's burst delay), then buys one node (the step limit).
    let first = launches(&h.run_until(330.0));
    assert_eq!(first.len(), 1, "the step limit allows one node at a time: {first:?}");
    let now = h.e.what_if("spot", PoolChange::default()).expect("pool");
    assert!(now.launches.is_empty(), "{now:?}");
    let last = h.e.cluster().pools[1].last_scale_out.expect("it launched");
    assert!(matches!(now.not_grown, Some(NotGrown::Cooldown { until }) if until == last + 60_000), "{now:?}");
    let later = h.e.what_if("spot", PoolChange { ignore_cooldown: true, ..PoolChange::default() }).expect("pool");
    assert_eq!(later.launches, vec![("g8".to_string(), 1)], "one step past the cooldown: {later:?}");
}

#[test]
fn a_pool_that_stops_growing_says_why_in_decisions_and_pending_details() {
    let mut h = capped_with(20, 600.0);
    let blocked = h.records_of(DecisionKind::ScaleOutBlocked, "at_max");
    assert!(!blocked.is_empty(), "a scale_out_blocked decision names the max: {:?}", h.records);
    assert!(blocked.iter().all(|d| d.subject == "pool:spot" && d.detail.contains("max of 3")), "{blocked:?}");
    let waiting: Vec<_> = h.e.cluster().jobs.iter().filter(|j| j.pending == PendingReason::NoCapacity).collect();
    assert_eq!(waiting.len(), 16);
    assert!(waiting.iter().all(|j| j.not_grown == Some((1, NotGrown::AtMax { max_nodes: 3, nodes: 3 }))));
    let pending = h.records_of(DecisionKind::JobPending, "no_capacity");
    assert!(pending.iter().any(|d| d.detail.contains("pool spot: at its max of 3 nodes")), "{pending:?}");
    // The same reason is not recorded again on every pass.
    let before = h.records_of(DecisionKind::ScaleOutBlocked, "at_max").len();
    h.run_world(1200.0, 30.0);
    assert_eq!(h.records_of(DecisionKind::ScaleOutBlocked, "at_max").len(), before);
}

#[test]
fn a_pool_whose_types_failed_to_launch_says_it_is_backed_off() {
    let mut h = Harness::new(CAPPED);
    h.submit(spec("p2", 8, 1));
    h.submit(spec("p2", 8, 1));
    let acts = h.run_until(400.0);
    let (node, ..) = *launches(&acts).first().expect("p2 buys spot after its burst delay");
    h.at(401.0);
    h.event(Event::LaunchFailed { node, error: LaunchError::InsufficientCapacity });
    h.timeout();
    let acts: Vec<Action> = h.drain();
    assert!(launches(&acts).is_empty(), "the only type is backed off: {acts:?}");
    let job = h.e.cluster().jobs.iter().find(|j| j.pending == PendingReason::NoCapacity).expect("a waiting job");
    assert!(matches!(job.not_grown, Some((1, NotGrown::BackedOff { until })) if until > h.now), "{:?}", job.not_grown);
}

#[test]
fn a_pool_no_waiting_job_may_use_says_so_in_its_answer() {
    // p2 may use owned and spot capacity only: an on-demand pool, however large, launches nothing for it.
    let od = "\n[[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"g8\"]\nmax_nodes = 2\n";
    let mut h = Harness::new(&format!("{CAPPED}{od}"));
    for _ in 0..20 {
        h.submit(spec("p2", 8, 1));
    }
    h.run_world(600.0, 30.0);
    h.timeout();
    h.drain();
    let od =
        h.e.what_if("od", PoolChange { max_nodes: Some(12), ..PoolChange::default() }).expect("od is a cloud pool");
    assert!(od.launches.is_empty(), "{od:?}");
    assert_eq!((od.jobs, od.may_use), (16, 0), "16 jobs wait and none may use od: {od:?}");
    let spot = h.e.what_if("spot", PoolChange::default()).expect("spot is a cloud pool");
    assert_eq!((spot.jobs, spot.may_use), (16, 16), "{spot:?}");
}

#[test]
fn operator_changes_and_the_nodes_of_each_decision_are_in_the_log() {
    let mut h = capped_with(3, 600.0);
    let launched = h.records_of(DecisionKind::ScaleOut, "queued_demand");
    assert!(launched.iter().all(|d| d.detail.contains("(node(s) ")), "launch records name their nodes: {launched:?}");
    let started = h.records_of(DecisionKind::JobStarted, "placed");
    assert!(started.iter().any(|d| d.detail.contains("on node(s) 0 of pool onprem")), "{started:?}");
    h.event(Event::SetPoolBounds { pool: 1, min_nodes: None, max_nodes: Some(5) });
    h.event(Event::SetPoolProtection { pool: 1, protected: true });
    h.event(Event::SetNodeProtection { node: spillway_core::NodeId(0), protected: true });
    h.drain();
    let bounds = h.records_of(DecisionKind::Admin, "set_pool_bounds");
    assert!(
        bounds.len() == 1 && bounds[0].subject == "pool:spot" && bounds[0].detail.contains("max 3 -> 5"),
        "{bounds:?}"
    );
    assert_eq!(h.records_of(DecisionKind::Admin, "set_pool_protection").len(), 1);
    // A change that changes nothing is not recorded.
    h.event(Event::SetPoolProtection { pool: 1, protected: true });
    h.event(Event::SetPoolBounds { pool: 1, min_nodes: None, max_nodes: Some(5) });
    h.drain();
    assert_eq!(h.records_of(DecisionKind::Admin, "set_pool_protection").len(), 1);
    assert_eq!(h.records_of(DecisionKind::Admin, "set_pool_bounds").len(), 1);
    let node = h.records_of(DecisionKind::Admin, "set_node_protection");
    assert!(node.len() == 1 && node[0].subject == "node:0", "{node:?}");
}
