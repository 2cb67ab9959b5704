//! Once no capacity is left that a job further on could start on or preempt for, a pass looks on only at jobs
//! that may buy and at timed ones. The jobs it passes by still get what they would have had: a wake-up when a
//! pool they may use leaves its cooldown, a pending reason, and a place in what-if answers.

mod common;

use common::{Harness, launches, spec, spec_of, started};
use spillway_core::{DecisionKind, PendingReason, PoolChange};

/// One owned 8-GPU node; an on-demand pool with a 10-minute scale-out cooldown; a spot pool with room.
const CONFIG: &str = r#"
[[instance_types]]
name = "v8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 20.0
spot_usd_per_hour = 5.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{ count = 1, gpus = 8 }]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["v8"]
max_nodes = 4
scale_out_cooldown_s = 600

[[pools]]
name = "spot"
market = "spot"
instance_types = ["v8"]
max_nodes = 4
"#;

#[test]
fn a_job_passed_by_in_a_cooldown_buys_when_it_ends() {
    let mut h = Harness::new(&format!("{CONFIG}\n[tiers.p2]\nburst_after_s = 300\n"));
    let world = |_: f64, _: usize, _: usize| Some(60.0);
    // The owned node runs one p0 job; on-demand buys a node for the second, and its cooldown runs to 600 s.
    h.submit(spec("p0", 8, 1));
    h.submit(spec("p0", 8, 1));
    let first = launches(&h.run_cloud(90.0, &world));
    assert_eq!(first.iter().filter(|l| l.1 == 1).count(), 1, "{first:?}");
    // A third p0 job can neither start nor buy until the cooldown ends.
    h.at(100.0);
    let waiting = h.submit(spec("p0", 8, 1));
    assert!(launches(&h.run_cloud(499.0, &world)).is_empty());
    assert_eq!(h.job(waiting).pending, PendingReason::NoCapacity);
    // A p2 job behind it may buy spot (after waiting 300 s for owned capacity), so the pass at 500 s looks on
    // past the p0 job (and passes it by); nothing else happens until 800 s.
    h.at(500.0);
    h.submit(spec("p2", 8, 1));
    assert!(launches(&h.run_cloud(599.0, &world)).is_empty());
    // What a higher max would buy counts the job passed by.
    let wi = h.e.what_if("od", PoolChange { max_nodes: Some(8), ignore_cooldown: true }).unwrap();
    assert_eq!(wi.launches.iter().map(|(_, n)| n).sum::<u32>(), 1, "{wi:?}");
    let after = launches(&h.run_cloud(601.0, &world));
    assert_eq!(after.iter().filter(|l| l.1 == 1).count(), 1, "on-demand buys for it at 600 s: {after:?}");
}

/// One owned 8-GPU node, an on-demand pool of one node, and a team with a quota of 8 GPUs; p1 waits `burst` s for
/// owned capacity.
fn quota_config(burst: u32) -> String {
    format!(
        r#"
[[instance_types]]
name = "v8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 20.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{{ count = 1, gpus = 8 }}]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["v8"]
max_nodes = 1

[[teams]]
name = "capped"
quota_gpus = 8

[tiers.p1]
burst_after_s = {burst}
"#
    )
}

/// Fills both nodes (the capped team at its quota on the owned one), then queues three p1 jobs of the capped team
/// and one of another; returns the other team's job and the capped team's.
fn fill_and_queue(h: &mut Harness) -> (spillway_core::JobId, Vec<spillway_core::JobId>) {
    h.submit(spec_of("p0", "capped", 8, 1));
    h.submit(spec_of("p0", "team-a", 8, 1));
    h.run_world(90.0, 60.0);
    h.at(100.0);
    let capped = (0..3).map(|_| h.submit(spec_of("p1", "capped", 8, 1))).collect();
    let other = h.submit(spec_of("p1", "team-a", 8, 1));
    h.run_world(200.0, 60.0);
    (other, capped)
}

#[test]
fn jobs_a_pass_did_not_reach_say_why_they_wait_and_what_if_counts_only_the_blocked() {
    let mut h = Harness::new(&quota_config(0));
    let (other, capped) = fill_and_queue(&mut h);
    for id in capped {
        assert_eq!(h.job(id).pending, PendingReason::TeamQuota);
    }
    assert_eq!(h.job(other).pending, PendingReason::NoCapacity);
    // A higher max would buy for the one job its team's quota does not hold.
    let wi = h.e.what_if("od", PoolChange { max_nodes: Some(5), ignore_cooldown: true }).unwrap();
    assert_eq!((wi.launches.iter().map(|(_, n)| n).sum::<u32>(), wi.jobs), (1, 1), "{wi:?}");

    // Inside its waiting budget a job is not blocked yet: nothing to buy for. (It says it waits for capacity: it
    // could not buy once its budget ends either.)
    let mut h = Harness::new(&quota_config(600));
    let (other, _) = fill_and_queue(&mut h);
    assert_eq!(h.job(other).pending, PendingReason::NoCapacity);
    let wi = h.e.what_if("od", PoolChange { max_nodes: Some(5), ignore_cooldown: true }).unwrap();
    assert!(wi.launches.is_empty(), "{wi:?}");
}

#[test]
fn a_job_told_it_waits_for_owned_capacity_is_told_otherwise_when_its_budget_ends() {
    // The p1 job arrives while the owned node is free but is passed over for an older p0 job in the same pass.
    let mut h = Harness::new(&quota_config(600));
    h.submit(spec_of("p0", "team-a", 8, 1));
    h.run_world(90.0, 60.0);
    h.at(100.0);
    let od = h.submit(spec_of("p0", "team-a", 8, 1));
    let late = h.submit(spec_of("p1", "team-b", 8, 1));
    h.run_world(200.0, 60.0);
    assert!(h.job(od).attempt == 1, "the second p0 job runs on on-demand");
    let pending = h.job(late).pending;
    assert!(matches!(pending, PendingReason::WaitingForFixedCapacity | PendingReason::NoCapacity), "{pending:?}");
    // Its budget ends at 700 s; no pass reaches it then (nothing can start), yet it is not left saying it waits
    // for owned capacity.
    h.run_world(2.0 * 86_400.0, 60.0);
    assert_eq!(h.job(late).pending, PendingReason::NoCapacity);
}

#[test]
fn jobs_held_by_their_quota_do_not_count_as_blocked_in_a_pass_that_passes_them_by() {
    // 300 jobs of the capped team, held by its quota, queue ahead of another team's job; nothing can start or buy.
    let mut h = Harness::new(&quota_config(0));
    let (other, _) = fill_and_queue(&mut h);
    h.at(300.0);
    for _ in 0..300 {
        h.submit(spec_of("p0", "capped", 8, 1));
    }
    // A deadline job behind them has a timer of its own: the pass walks on to it.
    let mut timed = spec_of("p1", "team-b", 8, 1);
    timed.deadline = Some(h.in_s(86_400.0));
    let late = h.submit(timed);
    h.run_world(400.0, 60.0);
    // A full walk would find only two jobs blocked: no pass stops short at the cap of blocked jobs.
    assert_eq!(h.e.cluster().counters.scan_limit_hits, 0);
    assert_eq!(h.job(other).pending, PendingReason::NoCapacity);
    assert_eq!(h.job(late).pending, PendingReason::NoCapacity);
}

#[test]
fn a_job_passed_by_says_its_quota_no_longer_holds_it() {
    let mut h = Harness::new(&quota_config(0));
    h.submit(spec_of("p0", "team-a", 8, 1));
    let capped_run = h.submit(spec_of("p0", "capped", 8, 1));
    h.runs_for(capped_run, 400.0);
    h.run_world(90.0, 60.0);
    h.at(100.0);
    let held = h.submit(spec_of("p1", "capped", 8, 1));
    h.run_world(200.0, 60.0);
    assert_eq!(h.job(held).pending, PendingReason::TeamQuota);
    // Another team's p0 job, queued before it, takes the owned node when the capped team's job ends at 400 s:
    // the capped team's p1 job is no longer held by its quota, but by capacity. (A deadline job behind it keeps
    // the pass walking past it: a pass that ends where no job further on can do anything leaves the reasons of
    // jobs it never reached as they were.)
    h.at(300.0);
    h.submit(spec_of("p0", "team-a", 8, 1));
    let mut timed = spec_of("p1", "team-b", 8, 1);
    timed.deadline = Some(h.in_s(86_400.0));
    h.submit(timed);
    h.run_world(900.0, 60.0);
    assert!(h.job(capped_run).state != spillway_core::JobState::Running);
    assert_eq!(h.job(held).pending, PendingReason::NoCapacity);
}

/// Two on-demand pools of 8-GPU nodes (V100 in `od`, A100 in `od2`), two nodes each, no cooldown.
const HELD: &str = r#"
[[instance_types]]
name = "v8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 20.0

[[instance_types]]
name = "a8"
gpus = 8
gpu_model = "A100"
on_demand_usd_per_hour = 30.0

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["v8"]
max_nodes = 2
scale_out_cooldown_s = 0

[[pools]]
name = "od2"
market = "on_demand"
instance_types = ["a8"]
max_nodes = 2
scale_out_cooldown_s = 0

[tiers.p2]
markets = ["on_demand"]
"#;

#[test]
fn a_job_after_a_gang_is_not_told_to_wait_for_the_nodes_held_for_the_gang() {
    let mut h = Harness::new(HELD);
    // A long job runs on a node of `od`; a 2-node V100 gang buys the pool's second node, which is held for it
    // once ready (the gang waits for the first node too), idle.
    let mut v100 = spec("p0", 8, 1);
    v100.gpu_model = Some("V100".into());
    let long = h.submit(v100.clone());
    h.run_world(100.0, 60.0);
    v100.workers = 2;
    let gang = h.submit(v100);
    h.run_world(200.0, 60.0);
    assert_eq!(h.alive(0), 2);
    assert_eq!(h.job(gang).pending, PendingReason::NoCapacity, "od is at its max with the gang not in it");
    // A 1-GPU job behind the gang cannot start on the held node (the next pass holds it for the gang again):
    // it buys a node of `od2` instead of waiting for a node it will not get.
    let small = h.submit(spec("p0", 1, 1));
    let acts = h.run_world(300.0, 60.0);
    let bought: Vec<usize> = launches(&acts).iter().map(|l| l.1).collect();
    assert_eq!(bought, vec![1], "{acts:?}");
    assert!(started(&acts, small).is_some(), "{acts:?}");
    assert!(h.job(long).state == spillway_core::JobState::Running);
}

/// One on-demand pool of at most three 8-GPU nodes, idle nodes removed after 10 minutes; p1 on on-demand.
const GANG_BEHIND: &str = r#"
[[instance_types]]
name = "v8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 20.0

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["v8"]
max_nodes = 3
scale_out_cooldown_s = 0
idle_timeout_s = 600

[tiers.p1]
markets = ["on_demand"]

[tiers.p2]
markets = ["on_demand"]
"#;

#[test]
fn a_job_behind_a_gang_is_not_told_it_waits_for_the_nodes_booting_for_the_gang() {
    let mut h = Harness::new(GANG_BEHIND);
    // A long job takes one node; a 3-node gang buys the two the pool has left and cannot start. A 4-GPU job
    // behind it can never count on those two: once ready they are held for the gang (and idle out, and are
    // bought again for it, in a loop). It is told it waits for capacity throughout, not for nodes, then
    // capacity, at every launch for the gang.
    let long = h.submit(spec("p0", 8, 1));
    h.run_world(100.0, 60.0);
    let gang = h.submit(spec("p1", 8, 3));
    let small = h.submit(spec("p1", 4, 1));
    h.run_world(3.0 * 3600.0, 60.0);
    assert!(h.job(long).state == spillway_core::JobState::Running);
    assert_eq!(h.job(gang).pending, PendingReason::NoCapacity);
    let subject = format!("job:{}", small.0);
    let told: Vec<&str> = h.records.iter().filter(|d| d.subject == subject).map(|d| d.reason).collect();
    assert!(!told.contains(&"waiting_for_nodes"), "{told:?}");
    assert!(told.contains(&"no_capacity"), "{told:?}");
}

/// Returns the pending reasons job `id` was told, in order.
fn told(h: &Harness, id: spillway_core::JobId) -> Vec<&'static str> {
    let subject = format!("job:{}", id.0);
    h.records.iter().filter(|d| d.subject == subject && d.kind == DecisionKind::JobPending).map(|d| d.reason).collect()
}

#[test]
fn without_backfill_a_job_behind_a_gang_is_told_the_same_while_the_gangs_nodes_boot_and_once_they_are_ready() {
    // Without backfill the walk holds no node for the gang: the job behind it may count on the gang's nodes
    // booting and ready alike (it starts after the gang, in queue order).
    let mut h = Harness::new(&format!("{GANG_BEHIND}\n[policy]\nbackfill = false\n"));
    h.submit(spec("p0", 8, 1));
    h.run_world(100.0, 60.0);
    h.submit(spec("p1", 8, 3));
    let small = h.submit(spec("p1", 4, 1));
    h.run_world(3.0 * 3600.0, 60.0);
    let told = told(&h, small);
    assert!(!told.contains(&"no_capacity"), "{told:?}");
}

/// Three on-demand pools of 8-GPU V100 nodes, cheapest first: `a` and `b` of at most two nodes, `c` of five.
const THREE_POOLS: &str = r#"
[[instance_types]]
name = "a8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 20.0

[[instance_types]]
name = "b8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 25.0

[[instance_types]]
name = "c8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 30.0

[[pools]]
name = "a"
market = "on_demand"
instance_types = ["a8"]
max_nodes = 2
scale_out_cooldown_s = 0

[[pools]]
name = "b"
market = "on_demand"
instance_types = ["b8"]
max_nodes = 2
scale_out_cooldown_s = 0

[[pools]]
name = "c"
market = "on_demand"
instance_types = ["c8"]
max_nodes = 5
scale_out_cooldown_s = 0

[tiers.p1]
markets = ["on_demand"]

[tiers.p2]
markets = ["on_demand"]
"#;

#[test]
fn a_gang_that_finds_room_in_a_later_pool_keeps_nothing_from_the_jobs_behind_it_in_the_earlier_ones() {
    let mut h = Harness::new(THREE_POOLS);
    let long = h.submit(spec("p0", 8, 1));
    h.runs_for(long, 20_000.0);
    h.run_world(100.0, 60.0);
    let gang = h.submit(spec("p1", 8, 3));
    h.runs_for(gang, 3600.0);
    let small = h.submit(spec("p1", 4, 1));
    h.runs_for(small, 600.0);
    // The gang buys what `a` and `b` have left, and cannot start in either; it buys three nodes of `c`. The
    // job behind it counts on a node booting in `a` or `b` (no pass holds those for the gang), and buys none.
    let acts = h.run_world(7200.0, 60.0);
    let in_c = launches(&acts).iter().filter(|l| l.1 == 2).count();
    assert_eq!(in_c, 3, "{acts:?}");
    assert_eq!(told(&h, small), vec!["waiting_for_fixed_capacity", "waiting_for_nodes"]);
    assert!(started(&acts, gang).is_some() && started(&acts, small).is_some());
}

/// A spot pool of one 8-GPU node that boots in 10 minutes, and an on-demand pool of three that boot in 4; p1 and
/// p2 burst at once, p1 falls back to on-demand at once.
const SPOT_THEN_OD: &str = r#"
[[instance_types]]
name = "v8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 4.5

[[pools]]
name = "spot"
market = "spot"
instance_types = ["v8"]
max_nodes = 1
scale_out_cooldown_s = 0
idle_timeout_s = 600

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["v8"]
max_nodes = 3
scale_out_cooldown_s = 0
idle_timeout_s = 300

[tiers.p1]
spot_fallback_after_s = 0
burst_after_s = 0

[tiers.p2]
burst_after_s = 0
"#;

/// Boots spot nodes in 10 minutes and on-demand ones in 4.
fn spot_slow(_: f64, pool: usize, _: usize) -> Option<f64> {
    Some(if pool == 0 { 600.0 } else { 240.0 })
}

#[test]
fn a_spot_job_behind_a_gang_that_buys_on_demand_short_is_not_told_two_things_at_one_instant() {
    // A long job takes one on-demand node; a 3-node interruptible gang buys the spot node and the two on-demand
    // nodes left, and cannot start. The spot job behind it may count on none of them: once ready, the walk holds
    // the spot node (first in the gang's order) for the gang. It is told so once per instant, not
    // `waiting_for_nodes` and then `no_capacity` by the next pass at the same instant.
    let mut h = Harness::new(SPOT_THEN_OD);
    let long = h.submit(spec("p0", 8, 1));
    h.runs_for(long, 20_000.0);
    h.run_cloud(10.0, &spot_slow);
    let mut gang = spec("p1", 8, 3);
    gang.interruptible = Some(true);
    let gang = h.submit(gang);
    h.runs_for(gang, 3600.0);
    h.run_cloud(20.0, &spot_slow);
    let small = h.submit(spec("p2", 8, 1));
    h.runs_for(small, 600.0);
    h.run_cloud(4.0 * 3600.0, &spot_slow);
    let subject = format!("job:{}", small.0);
    let mut told: Vec<(spillway_core::Time, &str)> = h
        .records
        .iter()
        .filter(|d| d.subject == subject && d.kind == DecisionKind::JobPending)
        .map(|d| (d.at, d.reason))
        .collect();
    let all = told.len();
    told.dedup_by_key(|r| r.0);
    assert_eq!(told.len(), all, "{:?}", told);
}

/// As [`SPOT_THEN_OD`], with idle nodes kept an hour, a third pool, of A100 nodes, on-demand, and p2 on both markets.
const SPOT_OD_A100: &str = r#"
[[instance_types]]
name = "v8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 4.5

[[instance_types]]
name = "a8"
gpus = 8
gpu_model = "A100"
on_demand_usd_per_hour = 32.0

[[pools]]
name = "spot"
market = "spot"
instance_types = ["v8"]
max_nodes = 1
idle_timeout_s = 3600

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["v8"]
max_nodes = 3
idle_timeout_s = 3600

[[pools]]
name = "od2"
market = "on_demand"
instance_types = ["a8"]
max_nodes = 2

[tiers.p1]
burst_after_s = 0
spot_fallback_after_s = 0

[tiers.p2]
burst_after_s = 0
markets = ["spot", "on_demand"]
"#;

#[test]
fn a_gang_held_in_one_pool_keeps_nothing_booting_in_another_from_the_jobs_behind_it() {
    // The walk holds the gang's two ready on-demand nodes while its spot node boots (15 minutes); once that is
    // ready it holds the spot node and lets one on-demand node go. The job behind it waits for that: it buys
    // no A100 node it would never use.
    let mut h = Harness::new(SPOT_OD_A100);
    let boot = |_: f64, pool: usize, _: usize| Some(if pool == 1 { 240.0 } else { 900.0 });
    let long = h.submit(spec("p0", 8, 1));
    h.runs_for(long, 20_000.0);
    h.run_cloud(5.0, &boot);
    let mut gang = spec("p1", 8, 3);
    (gang.interruptible, gang.gpu_model) = (Some(true), Some("V100".into()));
    let gang = h.submit(gang);
    h.runs_for(gang, 3600.0);
    h.run_cloud(400.0, &boot);
    let small = h.submit(spec("p2", 8, 1));
    h.runs_for(small, 1800.0);
    let acts = h.run_cloud(1200.0, &boot);
    assert!(launches(&acts).iter().all(|l| l.1 != 2), "{acts:?}");
    assert!(started(&acts, small).is_some(), "{acts:?}");
}
