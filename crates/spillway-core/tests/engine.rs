//! Engine rules, one test per rule: a small harness builds a config from inline TOML, feeds the engine events at
//! chosen instants, collects the actions it asks for, and checks the engine's invariants after every step.

use spillway_core::{
    Action, DecisionKind, Event, JobId, JobSpec, JobState, LaunchError, Market, NodeId, NodeState, PendingReason,
    StopReason, SubmitError,
};

mod common;
use common::*;

// ---- Configs ----

const G8: &str = r#"
[[instance_types]]
name = "g8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 5.0
"#;

/// `count` fixed nodes of `gpus` GPUs as pool 0.
fn fixed(count: u32, gpus: u32) -> String {
    format!(
        "\n[[pools]]\nname = \"onprem\"\nmarket = \"fixed\"\ngpu_usd_per_hour = 1.0\nnodes = [{{ count = {count}, gpus = {gpus} }}]\n"
    )
}

/// A cloud pool of `g8` nodes with extra keys.
fn cloud(name: &str, market: &str, extra: &str) -> String {
    format!("\n[[pools]]\nname = \"{name}\"\nmarket = \"{market}\"\ninstance_types = [\"g8\"]\n{extra}\n")
}

/// An on-demand pool `od` of the given instance types with extra keys (one per line).
fn od_of(types: &[&str], extra: &[&str]) -> String {
    let types: Vec<String> = types.iter().map(|t| format!("\"{t}\"")).collect();
    format!(
        "\n[[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [{}]\n{}\n",
        types.join(", "),
        extra.join("\n")
    )
}

/// Describes the live nodes of pool `p` for failure messages.
fn live_nodes(h: &Harness, p: usize) -> Vec<String> {
    let nodes = h.e.cluster().nodes.iter().filter(|n| n.alive() && n.pool == p);
    nodes.map(|n| format!("node {} {:?} {}/{}", n.id.0, n.state, n.used, n.gpus)).collect()
}

// ---- Gangs and placement ----

#[test]
fn a_gang_of_4x8_gpus_is_not_partly_placed_when_only_3_nodes_fit() {
    let cfg = format!("{G8}{}{}", fixed(3, 8), cloud("od", "on_demand", "max_nodes = 8\nmin_step_nodes = 4"));
    let mut h = Harness::new(&cfg);
    let gang = h.submit(spec("p0", 8, 4));
    let a = h.drain();
    assert!(starts(&a).is_empty(), "no part of the gang starts: {a:?}");
    assert!(h.e.cluster().nodes.iter().all(|n| n.used == 0), "no GPU is bound to a partial gang");
    assert_eq!(h.job(gang).state, JobState::Queued);
    assert_eq!(h.job(gang).pending, PendingReason::WaitingForNodes);
    // The whole gang goes to one pool, so the missing capacity is 4 nodes of the on-demand pool.
    let l = launches(&a);
    assert_eq!(l.len(), 4, "{a:?}");
    assert!(l.iter().all(|&(_, pool, _)| pool == 1), "{l:?}");

    h.at(240.0);
    for &(n, _, _) in &l[..3] {
        h.event(Event::NodeReady { node: n });
    }
    assert!(starts(&h.drain()).is_empty(), "3 of 4 cloud nodes ready is still not enough");
    h.event(Event::NodeReady { node: l[3].0 });
    let a = h.drain();
    let p = started(&a, gang).expect("the gang starts once all 4 nodes are ready");
    assert_eq!(p.len(), 4);
    assert!(p.iter().all(|&(n, g)| g == 8 && h.node(n).pool == 1), "{p:?}");
}

#[test]
fn best_fit_puts_a_2_gpu_job_on_the_fuller_node() {
    let mut h = Harness::new(&fixed(2, 8));
    let a4 = h.submit(spec("p0", 4, 1));
    let first = started(&h.drain(), a4).expect("4-GPU job starts")[0].0;
    h.at(1.0);
    let b2 = h.submit(spec("p0", 2, 1));
    let second = started(&h.drain(), b2).expect("2-GPU job starts")[0].0;
    assert_eq!(second, first, "the 2-GPU job shares the half-full node and leaves the empty one whole");
    h.at(2.0);
    let c8 = h.submit(spec("p0", 8, 1));
    let third = started(&h.drain(), c8).expect("an 8-GPU job still fits the node kept whole")[0].0;
    assert_ne!(third, first);
}

#[test]
fn a_gang_spreads_workers_over_nodes_with_room_and_binds_each_worker_its_gpus() {
    let mut h = Harness::new(&fixed(2, 8));
    let id = h.submit(spec("p1", 4, 4));
    let p = started(&h.drain(), id).expect("4 workers of 4 GPUs fit two 8-GPU nodes");
    assert_eq!(p.len(), 4);
    assert!(h.e.cluster().nodes.iter().all(|n| n.used == 8));
}

#[test]
fn a_gang_whose_nodes_are_partly_ready_buys_no_more_nodes() {
    let cfg = format!("{G8}{}{}", fixed(1, 1), cloud("od", "on_demand", "max_nodes = 8\nmin_step_nodes = 4"));
    let mut h = Harness::new(&cfg);
    let gang = h.submit(spec("p0", 8, 4));
    let l = launches(&h.drain());
    assert_eq!(l.len(), 4);
    h.at(240.0);
    h.event(Event::NodeReady { node: l[0].0 });
    // One node ready and three booting hold the gang: nothing more to buy.
    let a = h.drain();
    assert!(
        launches(&a).is_empty(),
        "bought {} more nodes for a gang whose 4 nodes are ready or booting",
        launches(&a).len()
    );
    assert_eq!(h.job(gang).pending, PendingReason::WaitingForNodes);
}

/// Instance types of 1, 4 and 8 GPUs priced alike per GPU-hour (on-demand only).
const T148: &str = r#"
[[instance_types]]
name = "t1"
gpus = 1
gpu_model = "V100"
on_demand_usd_per_hour = 3.0

[[instance_types]]
name = "t4"
gpus = 4
gpu_model = "V100"
on_demand_usd_per_hour = 10.0

[[instance_types]]
name = "t8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
"#;

#[test]
fn a_gang_gets_an_instance_type_that_holds_it_within_max_nodes() {
    let cfg = format!("{T148}{}{}", fixed(1, 1), od_of(&["t4", "t8"], &["max_nodes = 1"]));
    let mut h = Harness::new(&cfg);
    let gang = h.submit(spec("p0", 4, 2));
    let a = h.run_world(86_400.0, 240.0);
    let bought: Vec<usize> = launches(&a).iter().map(|x| x.2).collect();
    assert!(
        started(&a, gang).is_some(),
        "the gang never starts; launched types {bought:?}, pending {:?}",
        h.job(gang).pending
    );
}

#[test]
fn removing_an_idle_node_from_a_full_pool_lets_a_blocked_job_buy_at_once() {
    let cfg = format!("{T148}{}{}", fixed(1, 1), od_of(&["t1", "t8"], &["max_nodes = 1", "idle_timeout_s = 600"]));
    let t8 = parse(&cfg).instance_type_index("t8").unwrap();
    let mut h = Harness::new(&cfg);
    let filler = h.submit(spec("p0", 1, 1));
    let small = h.submit(spec("p0", 1, 1));
    let a = h.run_world(300.0, 240.0);
    assert!(started(&a, filler).is_some() && started(&a, small).is_some(), "{a:?}");
    let big = h.submit(spec("p0", 8, 1));
    assert!(launches(&h.drain()).is_empty(), "the pool is at max");
    h.at(1000.0);
    h.event(Event::JobExited { job: small, attempt: 1, success: true, exit: None });
    // The 1-GPU node idles out at 1600 s; from then on the pool has room for an 8-GPU node.
    let a = h.run_world(86_400.0, 240.0);
    assert_eq!(terminates(&a).len(), 1, "{a:?}");
    assert!(
        launches(&a).iter().any(|x| x.2 == t8),
        "no 8-GPU node was bought after the pool emptied; job pending {:?}, next wake {:?}",
        h.job(big).pending,
        h.wake()
    );
}

#[test]
fn nodes_ready_for_a_waiting_gang_are_not_scaled_in() {
    let cfg = format!(
        "{G8}{}{}",
        fixed(1, 1),
        cloud(
            "od",
            "on_demand",
            "max_nodes = 2\nmin_step_nodes = 1\nmax_step_fraction = 0.25\nscale_out_cooldown_s = 120\nidle_timeout_s = 60"
        )
    );
    let mut h = Harness::new(&cfg);
    let gang = h.submit(spec("p0", 8, 2));
    let a = h.run_world(86_400.0, 240.0);
    assert!(
        started(&a, gang).is_some(),
        "the 8x2 gang never starts: {} launches, {} nodes terminated while it waited",
        launches(&a).len(),
        terminates(&a).len()
    );
}

#[test]
fn a_pools_minimum_does_not_starve_jobs_that_need_a_larger_type() {
    let cfg = format!("{T148}{}{}", fixed(1, 1), od_of(&["t1", "t8"], &["min_nodes = 2", "max_nodes = 2"]));
    let mut h = Harness::new(&cfg);
    let warm = h.run_world(600.0, 240.0);
    assert_eq!(launches(&warm).len(), 2);
    let big = h.submit(spec("p0", 8, 1));
    let a = h.run_world(86_400.0, 240.0);
    assert!(started(&a, big).is_some(), "the 8-GPU job never starts; pending {:?}", h.job(big).pending);
}

#[test]
fn a_starved_pool_swaps_an_idle_too_small_node_without_waiting_its_idle_timeout() {
    // Pool od holds at most 2 nodes; two 1-GPU jobs bought two 1-GPU nodes and ended. An 8-GPU job then needs a
    // t8 node: the idle t1 nodes go at once (not after the hour-long idle timeout) to make room.
    let cfg = format!("{T148}{}{}", fixed(1, 1), od_of(&["t1", "t8"], &["max_nodes = 2", "idle_timeout_s = 3600"]));
    let mut h = Harness::new(&cfg);
    let small: Vec<JobId> = (0..3).map(|_| h.submit(spec("p0", 1, 1))).collect();
    for &j in &small {
        h.runs_for(j, 600.0);
    }
    let first = h.run_world(1200.0, 240.0);
    assert_eq!(launches(&first).len(), 2, "two 1-GPU nodes for the jobs the fixed node cannot hold");
    h.at(1200.0);
    let big = h.submit(spec("p0", 8, 1));
    let a = h.run_world(1200.0 + 3000.0, 240.0);
    assert!(started(&a, big).is_some(), "the 8-GPU job never starts; pending {:?}", h.job(big).pending);
    let j = h.job(big);
    let wait = j.first_start.map(|s| (s - j.submitted) as f64 / 1000.0);
    assert!(wait.is_some_and(|w| w < 900.0), "waited {wait:?} s: the swap waited out the idle timeout");
}

#[test]
fn near_its_max_a_pool_buys_capacity_per_node_slot() {
    // Pool od holds at most 4 nodes of t1 or t8 (same price per GPU). With 3 of them alive, one more 1-GPU job gets
    // a t8 node: a fourth t1 would cap the pool at 4 GPUs for good.
    let cfg = format!("{T148}{}{}", fixed(1, 1), od_of(&["t1", "t8"], &["max_nodes = 4"]));
    let mut h = Harness::new(&cfg);
    let first: Vec<JobId> = (0..4).map(|_| h.submit(spec("p0", 1, 1))).collect();
    let a = h.run_world(600.0, 240.0);
    let t1 = h.e.config().instance_type_index("t1").unwrap();
    let t8 = h.e.config().instance_type_index("t8").unwrap();
    assert_eq!(
        launches(&a).iter().map(|l| l.2).collect::<Vec<_>>(),
        vec![t1; 3],
        "three 1-GPU jobs on the cheapest nodes"
    );
    assert!(first.iter().all(|&j| h.job(j).state == spillway_core::JobState::Running));
    h.submit(spec("p0", 1, 1));
    let b = h.run_world(1200.0, 240.0);
    assert_eq!(launches(&b).iter().map(|l| l.2).collect::<Vec<_>>(), vec![t8], "the last slot gets the most GPUs");
}

#[test]
fn a_partly_fitting_gang_does_not_pin_a_too_small_node_in_a_full_pool() {
    // Found by tests/proptest_engine.rs. The pool's min keeps one 1-GPU node; a 1x2 gang fits one 4-GPU node.
    let cfg = format!(
        "{T148}{}{}",
        fixed(1, 1),
        od_of(&["t1", "t4"], &["min_nodes = 1", "max_nodes = 1", "idle_timeout_s = 0"])
    );
    let mut h = Harness::new(&cfg);
    let warm = h.run_world(600.0, 60.0);
    assert_eq!(launches(&warm).len(), 1);
    let gang = h.submit(spec("p0", 1, 2));
    let a = h.run_world(86_400.0, 60.0);
    let nodes = live_nodes(&h, 1);
    assert!(
        started(&a, gang).is_some(),
        "the 1x2 gang never starts; pending {:?}; od nodes: {nodes:?}",
        h.job(gang).pending
    );
}

#[test]
fn a_gang_behind_a_larger_blocked_gang_does_not_deadlock_the_pool() {
    // Found by tests/proptest_engine.rs. Pool od may hold 2 nodes of 4 or 8 GPUs; an 8x2 gang, then a 4x2 one.
    let cfg = format!(
        "{T148}{}{}",
        fixed(1, 1),
        od_of(
            &["t4", "t8"],
            &[
                "max_nodes = 2",
                "boot_latency_s = 30",
                "idle_timeout_s = 1800",
                "scale_out_cooldown_s = 0",
                "scale_in_cooldown_s = 0",
                "max_step_fraction = 0.25",
                "min_step_nodes = 1",
            ]
        )
    );
    let mut h = Harness::new(&cfg);
    let mut jobs = Vec::new();
    for (tier, gpus, workers, run_s) in
        [("p0", 1, 1, 60.0), ("p0", 1, 1, 60.0), ("p0", 2, 1, 1071.0), ("p0", 8, 2, 60.0)]
    {
        let id = h.submit(spec(tier, gpus, workers));
        h.runs_for(id, run_s);
        jobs.push(id);
    }
    h.run_world(1225.0, 155.0);
    let id = h.submit(spec("p0", 4, 2));
    h.runs_for(id, 2983.0);
    jobs.push(id);
    h.run_world(2526.0, 155.0);
    let id = h.submit(spec("p1", 2, 3));
    h.runs_for(id, 60.0);
    jobs.push(id);
    h.run_world(10.0 * 86_400.0, 155.0);
    let left: Vec<String> = jobs
        .iter()
        .map(|&j| h.job(j))
        .filter(|j| j.state != JobState::Succeeded)
        .map(|j| format!("job {} {}x{} {:?} {:?}", j.id.0, j.spec.gpus_per_worker, j.spec.workers, j.state, j.pending))
        .collect();
    let nodes = live_nodes(&h, 1);
    assert!(left.is_empty(), "after 10 days, not done: {left:?}; od nodes: {nodes:?}");
}

#[test]
fn a_pools_minimum_of_small_nodes_makes_room_for_a_gang_of_large_ones() {
    // Found by tests/proptest_engine.rs. The min keeps two 4-GPU nodes; an 8x3 gang needs all 3 nodes as 8-GPU ones.
    let cfg = format!(
        "{T148}{}{}",
        fixed(1, 1),
        od_of(&["t4", "t8"], &["min_nodes = 2", "max_nodes = 3", "idle_timeout_s = 0"])
    );
    let mut h = Harness::new(&cfg);
    let warm = h.run_world(600.0, 60.0);
    assert_eq!(launches(&warm).len(), 2);
    let gang = h.submit(spec("p0", 8, 3));
    let a = h.run_world(86_400.0, 60.0);
    let nodes = live_nodes(&h, 1);
    let bought: Vec<usize> = launches(&a).iter().map(|x| x.2).collect();
    assert!(
        started(&a, gang).is_some(),
        "the 8x3 gang never starts; pending {:?}; launched types {bought:?}, {} terminated; od nodes: {nodes:?}",
        h.job(gang).pending,
        terminates(&a).len()
    );
}

/// A fixed node too small for the tests' jobs, a warm on-demand node (min 1) and an empty spot pool.
fn return_to_spot_cfg() -> String {
    return_to_spot_cfg_with("max_nodes = 2")
}

/// [`return_to_spot_cfg`] with the spot pool's own settings.
fn return_to_spot_cfg_with(spot: &str) -> String {
    format!(
        "{G8}{}{}{}",
        fixed(1, 1),
        cloud("od", "on_demand", "max_nodes = 2\nmin_nodes = 1"),
        cloud("spot", "spot", spot)
    )
}

#[test]
fn a_job_on_on_demand_moves_back_to_spot_after_a_checkpoint_without_other_events() {
    let mut h = Harness::new(&return_to_spot_cfg());
    h.run_world(300.0, 240.0);
    let job = h.submit(spec("p1", 8, 1));
    h.runs_for(job, 86_400.0);
    let a = h.run_world(6.0 * 3600.0, 240.0);
    assert_eq!(started(&a, job).map(|p| h.node(p[0].0).market), Some(Market::OnDemand), "the warm node takes it");
    let moves = stops(&a).iter().filter(|s| s.2 == StopReason::Migrated).count();
    assert!(moves >= 1, "never moved back to spot in 6 hours (next wake {:?})", h.wake());
}

#[test]
fn a_job_moved_back_to_spot_restarts_without_other_events() {
    let mut h = Harness::new(&return_to_spot_cfg());
    h.run_world(300.0, 240.0);
    let job = h.submit(spec("p1", 8, 1));
    h.runs_for(job, 86_400.0);
    let a = h.run_world(6.0 * 3600.0, 240.0);
    let markets: Vec<Market> = starts(&a).iter().map(|(_, _, p)| h.node(p[0].0).market).collect();
    assert!(stops(&a).iter().any(|s| s.2 == StopReason::Migrated), "never moved back to spot");
    assert_eq!(
        h.job(job).state,
        JobState::Running,
        "after its move the job waits ({:?}) with nothing to wake the engine (next wake {:?}); attempts ran on {markets:?}",
        h.job(job).pending,
        h.wake()
    );
    assert_eq!(markets.last(), Some(&Market::Spot), "attempts ran on {markets:?}");
}

#[test]
fn a_job_moved_back_to_spot_does_not_bounce_between_markets() {
    let mut h = Harness::new(&return_to_spot_cfg());
    h.run_world(300.0, 240.0);
    let job = h.submit(spec("p1", 8, 1));
    h.runs_for(job, 86_400.0);
    // Wake the engine every minute, as a daemon's reconcile loop would, so the move is looked at.
    let mut a = Vec::new();
    for minute in 6..=360 {
        a.extend(h.run_world(minute as f64 * 60.0, 240.0));
        h.timeout();
    }
    let markets: Vec<Market> = starts(&a).iter().map(|(_, _, p)| h.node(p[0].0).market).collect();
    let moves = stops(&a).iter().filter(|s| s.2 == StopReason::Migrated).count();
    assert!(moves >= 1, "never moved back to spot");
    assert!(moves <= 1, "moved {moves} times in 6 hours; attempts ran on {markets:?}");
    assert_eq!(markets.last(), Some(&Market::Spot), "attempts ran on {markets:?}");
}

#[test]
fn a_job_on_on_demand_moves_back_to_a_spot_pool_at_its_max_once_a_job_there_ends() {
    // The spot pool is at its max and full: no job can move (and the engine stops looking early), until the job on
    // the spot node ends and leaves room there.
    let mut h = Harness::new(&return_to_spot_cfg_with("max_nodes = 1\nmin_nodes = 1"));
    h.run_world(300.0, 240.0);
    let on_spot = h.submit(spec("p1", 8, 1));
    h.runs_for(on_spot, 2.0 * 3600.0);
    let a = h.run_world(360.0, 240.0);
    assert_eq!(started(&a, on_spot).map(|p| h.node(p[0].0).market), Some(Market::Spot), "the warm spot node takes it");
    let job = h.submit(spec("p1", 8, 1));
    h.runs_for(job, 86_400.0);
    let a = h.run_world(7000.0, 240.0);
    assert_eq!(started(&a, job).map(|p| h.node(p[0].0).market), Some(Market::OnDemand), "spot is full and at its max");
    assert!(!stops(&a).iter().any(|s| s.2 == StopReason::Migrated), "it moved while spot had no room");
    let a = h.run_world(6.0 * 3600.0, 240.0);
    let moves = stops(&a).iter().filter(|s| s.0 == job && s.2 == StopReason::Migrated).count();
    assert_eq!(moves, 1, "it should move back once, when the spot job's end leaves room (next wake {:?})", h.wake());
    let markets: Vec<Market> = starts(&a).iter().map(|(_, _, p)| h.node(p[0].0).market).collect();
    assert_eq!(markets.last(), Some(&Market::Spot), "attempts ran on {markets:?}");
}

// ---- Preemption ----

#[test]
fn p0_preempts_a_running_p2_job_on_a_full_fixed_pool() {
    let mut h = Harness::new(&fixed(1, 8));
    let low = h.submit(spec("p2", 8, 1));
    assert!(started(&h.drain(), low).is_some());
    h.at(10.0);
    let high = h.submit(spec("p0", 8, 1));
    let a = h.drain();
    let stop = a.iter().position(|x| matches!(x, Action::StopJob { job, .. } if *job == low)).expect("p2 stopped");
    let start = a.iter().position(|x| matches!(x, Action::StartJob { job, .. } if *job == high)).expect("p0 started");
    assert!(stop < start, "the victim is stopped before the p0 job starts: {a:?}");
    assert_eq!(stops(&a), vec![(low, 1, StopReason::Preempted { by: high })]);
    assert_eq!(h.job(low).state, JobState::Queued);
    assert_eq!(h.job(low).preemptions, 1);
    assert_eq!(h.job(high).state, JobState::Running);
}

#[test]
fn p0_never_preempts_a_p0_job() {
    let mut h = Harness::new(&fixed(1, 8));
    let first = h.submit(spec("p0", 8, 1));
    assert!(started(&h.drain(), first).is_some());
    h.at(10.0);
    let second = h.submit(spec("p0", 8, 1));
    let a = h.run_until(2.0 * 86_400.0);
    assert!(stops(&a).is_empty(), "{a:?}");
    assert_eq!(h.job(first).state, JobState::Running);
    assert_eq!(h.job(second).state, JobState::Queued);
    // A p1 job neither preempts p0.
    let p1 = h.submit(spec("p1", 1, 1));
    let a = h.run_until(3.0 * 86_400.0);
    assert!(stops(&a).is_empty(), "{a:?}");
    assert_eq!(h.job(p1).state, JobState::Queued);
}

#[test]
fn a_p1_job_preempts_p2_but_a_p2_job_never_preempts_p1() {
    let mut h = Harness::new(&fixed(1, 8));
    let p1 = h.submit(spec("p1", 8, 1));
    assert!(started(&h.drain(), p1).is_some());
    h.at(1.0);
    let p2 = h.submit(spec("p2", 8, 1));
    let a = h.run_until(86_400.0);
    assert!(stops(&a).is_empty(), "a lower tier never preempts: {a:?}");
    assert_eq!(h.job(p2).state, JobState::Queued);
    h.event(Event::JobExited { job: p1, attempt: 1, success: true, exit: None });
    assert!(started(&h.drain(), p2).is_some());
    let p1b = h.submit(spec("p1", 8, 1));
    let a = h.run_until(86_400.0 + 3600.0);
    assert_eq!(stops(&a), vec![(p2, 1, StopReason::Preempted { by: p1b })]);
}

#[test]
fn preemption_is_off_when_the_policy_says_so() {
    let cfg = format!("{}\n[policy]\npreemption = false\n", fixed(1, 8));
    let mut h = Harness::new(&cfg);
    let low = h.submit(spec("p2", 8, 1));
    assert!(started(&h.drain(), low).is_some());
    let high = h.submit(spec("p0", 8, 1));
    let a = h.run_until(86_400.0);
    assert!(stops(&a).is_empty(), "{a:?}");
    assert_eq!(h.job(high).state, JobState::Queued);
}

// ---- Markets per tier ----

#[test]
fn a_p2_job_never_gets_a_launch_in_an_on_demand_pool() {
    // Only an on-demand cloud pool: p2 may not buy there at all.
    let cfg = format!("{G8}{}{}", fixed(1, 8), cloud("od", "on_demand", "max_nodes = 4"));
    let mut h = Harness::new(&cfg);
    let busy = h.submit(spec("p2", 8, 1));
    let waiting = h.submit(spec("p2", 8, 1));
    let a = h.run_until(2.0 * 86_400.0);
    assert!(started(&a, busy).is_some());
    assert!(launches(&a).is_empty(), "{a:?}");
    assert_eq!(h.job(waiting).pending, PendingReason::NoCapacity);

    // With a spot pool beside it, p2 buys spot (after its burst delay) and still never on-demand.
    let cfg = format!(
        "{G8}{}{}{}",
        fixed(1, 8),
        cloud("od", "on_demand", "max_nodes = 4"),
        cloud("spot", "spot", "max_nodes = 4")
    );
    let mut h = Harness::new(&cfg);
    h.submit(spec("p2", 8, 1));
    let waiting = h.submit(spec("p2", 8, 1));
    let early = h.run_until(299.0);
    assert!(launches(&early).is_empty(), "p2 waits burst_after_s = 300 s for fixed capacity: {early:?}");
    assert_eq!(h.job(waiting).pending, PendingReason::WaitingForFixedCapacity);
    let a = h.run_until(300.0);
    let l = launches(&a);
    assert_eq!(l.len(), 1, "{a:?}");
    assert!(l.iter().all(|&(_, pool, _)| pool == 2), "p2 launches go to the spot pool: {l:?}");
    h.at(540.0);
    h.event(Event::NodeReady { node: l[0].0 });
    let a = h.run_until(2.0 * 86_400.0);
    assert_eq!(started(&a, waiting).map(|p| h.node(p[0].0).market), Some(Market::Spot));
    assert!(launches(&a).iter().all(|&(_, pool, _)| pool == 2), "{a:?}");
}

/// Tier sections under which `p0` must still never run on spot.
const P0_TIERS: [(&str, &str); 2] = [
    ("default tiers", ""),
    ("p0 listing spot among its markets", "\n[tiers.p0]\nmarkets = [\"fixed\", \"spot\", \"on_demand\"]\n"),
];

#[test]
fn p0_never_lands_on_spot() {
    for (rule, tiers) in P0_TIERS {
        let cfg = format!(
            "{G8}{}{}{}{tiers}",
            fixed(1, 8),
            cloud("od", "on_demand", "max_nodes = 4"),
            cloud("spot", "spot", "max_nodes = 4\nmin_nodes = 1\nidle_timeout_s = 86400")
        );
        let mut h = Harness::new(&cfg);
        let warm = launches(&h.drain());
        assert_eq!(warm.len(), 1, "{rule}: the spot pool's min launches one node");
        assert_eq!(warm[0].1, 2);
        h.at(240.0);
        h.event(Event::NodeReady { node: warm[0].0 });
        assert!(h.drain().is_empty());
        let filler = h.submit(spec("p0", 8, 1));
        assert!(started(&h.drain(), filler).is_some(), "{rule}");
        // Fixed is full, a spot node is ready and empty: p0 still buys on-demand.
        let p0 = h.submit(spec("p0", 8, 1));
        let a = h.drain();
        assert!(started(&a, p0).is_none(), "{rule}: p0 does not start on the idle spot node: {a:?}");
        let l = launches(&a);
        assert_eq!(l.iter().map(|x| x.1).collect::<Vec<_>>(), vec![1], "{rule}: {a:?}");
        h.at(480.0);
        h.event(Event::NodeReady { node: l[0].0 });
        let p = started(&h.drain(), p0).expect("p0 starts on the on-demand node");
        assert_eq!(h.node(p[0].0).market, Market::OnDemand, "{rule}");
        // The idle spot node was usable all along: a p1 job takes it at once.
        let p1 = h.submit(spec("p1", 8, 1));
        let p = started(&h.drain(), p1).expect("p1 starts on the spot node");
        assert_eq!(h.node(p[0].0).market, Market::Spot, "{rule}");
    }
}

// ---- Quota ----

#[test]
fn team_quota_blocks_a_job_without_launching() {
    let cfg = format!(
        "{G8}{}{}\n[[teams]]\nname = \"capped\"\nquota_gpus = 8\n",
        fixed(2, 8),
        cloud("od", "on_demand", "max_nodes = 4")
    );
    let mut h = Harness::new(&cfg);
    let first = h.submit(spec_of("p0", "capped", 8, 1));
    assert!(started(&h.drain(), first).is_some());
    let second = h.submit(spec_of("p0", "capped", 4, 1));
    let a = h.run_until(3600.0);
    assert!(started(&a, second).is_none(), "{a:?}");
    assert!(launches(&a).is_empty(), "a quota-blocked job buys nothing: {a:?}");
    assert_eq!(h.job(second).pending, PendingReason::TeamQuota);
    // The free fixed node was there all along: another team's job takes it.
    let other = h.submit(spec_of("p0", "free", 8, 1));
    assert!(started(&h.drain(), other).is_some());
    h.event(Event::JobExited { job: first, attempt: 1, success: true, exit: None });
    let a = h.drain();
    assert!(started(&a, second).is_some(), "the quota has room again: {a:?}");
    assert!(launches(&a).is_empty());
    // A gang larger than the whole quota is refused at submission, naming the field.
    let err = h.e.submit(h.now, spec_of("p0", "capped", 8, 2)).unwrap_err();
    assert!(matches!(err, SubmitError::OverQuota { need: 16, quota: 8, .. }), "{err:?}");
    assert!(err.to_string().starts_with("workers:"), "{err}");
}

// ---- Scale-out ----

#[test]
fn scale_out_respects_max_nodes_and_the_step_limit() {
    let cfg = format!(
        "{G8}{}{}",
        fixed(1, 1),
        cloud(
            "od",
            "on_demand",
            "max_nodes = 10\nmin_step_nodes = 2\nmax_step_fraction = 0.5\nscale_out_cooldown_s = 30"
        )
    );
    let mut h = Harness::new(&cfg);
    for _ in 0..12 {
        h.submit(spec("p0", 8, 1));
    }
    // From zero: the floor of 2 nodes; then +50% of the live nodes (at least 2), capped by max_nodes.
    let mut steps = Vec::new();
    for k in 0..6 {
        let a = h.run_until(30.0 * k as f64);
        let l = launches(&a);
        assert!(l.iter().all(|x| x.1 == 1));
        steps.push(l.len());
        assert!(h.alive(1) <= 10, "pool over max: {}", h.alive(1));
    }
    assert_eq!(steps, vec![2, 2, 2, 3, 1, 0]);
    assert_eq!(h.alive(1), 10);
    assert!(launches(&h.run_until(86_400.0)).is_empty(), "a pool at max launches nothing more");
}

#[test]
fn scale_out_cooldown_delays_the_next_launch() {
    let cfg = format!("{G8}{}{}", fixed(1, 1), cloud("od", "on_demand", "max_nodes = 10\nscale_out_cooldown_s = 120"));
    let mut h = Harness::new(&cfg);
    h.submit(spec("p0", 8, 1));
    assert_eq!(launches(&h.drain()).len(), 1);
    h.at(10.0);
    let second = h.submit(spec("p0", 8, 1));
    let a = h.drain();
    assert!(launches(&a).is_empty(), "in cooldown: {a:?}");
    assert_eq!(h.job(second).pending, PendingReason::NoCapacity);
    assert_eq!(h.wake(), Some(120.0), "poll_timeout returns the cooldown end");
    h.at(119.999);
    h.timeout();
    assert!(launches(&h.drain()).is_empty(), "still in cooldown 1 ms before its end");
    h.at(120.0);
    h.timeout();
    assert_eq!(launches(&h.drain()).len(), 1, "the launch comes at the cooldown end");
    assert_eq!(h.job(second).pending, PendingReason::WaitingForNodes);
}

#[test]
fn booting_nodes_are_counted_before_buying_more() {
    let cfg = format!("{G8}{}{}", fixed(1, 1), cloud("od", "on_demand", "max_nodes = 10\nscale_out_cooldown_s = 0"));
    let mut h = Harness::new(&cfg);
    h.submit(spec("p0", 4, 1));
    assert_eq!(launches(&h.drain()).len(), 1);
    h.at(5.0);
    // The booting 8-GPU node holds this 4-GPU job too.
    let second = h.submit(spec("p0", 4, 1));
    assert!(launches(&h.drain()).is_empty());
    assert_eq!(h.job(second).pending, PendingReason::WaitingForNodes);
}

// ---- Scale-in ----

/// A config with an on-demand pool (pool 1) of 8-GPU nodes and `extra` keys; the fixed pool is too small for them.
fn scale_in_cfg(extra: &str) -> String {
    let cooldown = if extra.contains("scale_in_cooldown_s") { "" } else { "scale_in_cooldown_s = 60\n" };
    format!(
        "{G8}{}{}",
        fixed(1, 1),
        cloud("od", "on_demand", &format!("max_nodes = 10\nidle_timeout_s = 600\n{cooldown}{extra}"))
    )
}

/// Runs `jobs` 8-GPU p0 jobs on fresh on-demand nodes ready at 240 s that all exit at 1000 s; returns the nodes.
fn run_and_idle(h: &mut Harness, jobs: usize) -> Vec<NodeId> {
    let ids: Vec<JobId> = (0..jobs).map(|_| h.submit(spec("p0", 8, 1))).collect();
    let nodes: Vec<NodeId> = launches(&h.drain()).into_iter().map(|x| x.0).collect();
    h.at(240.0);
    for &n in &nodes {
        h.event(Event::NodeReady { node: n });
    }
    assert_eq!(starts(&h.drain()).len(), jobs);
    h.at(1000.0);
    for id in ids {
        h.event(Event::JobExited { job: id, attempt: 1, success: true, exit: None });
    }
    nodes
}

#[test]
fn an_idle_node_is_terminated_only_after_idle_timeout() {
    let mut h = Harness::new(&scale_in_cfg(""));
    let nodes = run_and_idle(&mut h, 1);
    assert_eq!(nodes.len(), 1);
    assert!(terminates(&h.drain()).is_empty());
    assert_eq!(h.wake(), Some(1600.0), "poll_timeout returns the idle deadline");
    h.at(1599.999);
    h.timeout();
    assert!(terminates(&h.drain()).is_empty(), "1 ms early");
    h.at(1600.0);
    h.timeout();
    assert_eq!(terminates(&h.drain()), nodes);
    assert_eq!(h.node(nodes[0]).state, NodeState::Terminated);
    assert_eq!(h.alive(1), 0);
    assert_eq!(h.wake(), None, "nothing left to wake for");
}

#[test]
fn a_node_that_gets_work_again_restarts_its_idle_clock() {
    let mut h = Harness::new(&scale_in_cfg(""));
    let nodes = run_and_idle(&mut h, 1);
    h.at(1500.0);
    let job = h.submit(spec("p0", 8, 1));
    assert_eq!(started(&h.drain(), job).map(|p| p[0].0), Some(nodes[0]));
    h.at(1550.0);
    h.event(Event::JobExited { job, attempt: 1, success: true, exit: None });
    assert!(terminates(&h.run_until(2149.0)).is_empty(), "idle since 1550 s");
    assert_eq!(terminates(&h.run_until(2150.0)), nodes);
}

#[test]
fn scale_in_never_goes_below_min_nodes() {
    let mut h = Harness::new(&scale_in_cfg("min_nodes = 1"));
    let nodes = run_and_idle(&mut h, 2);
    assert_eq!(nodes.len(), 2, "two jobs buy two nodes; the min of 1 is covered by them");
    let a = h.run_until(86_400.0);
    assert_eq!(terminates(&a).len(), 1, "{a:?}");
    assert_eq!(h.alive(1), 1);
}

#[test]
fn scale_in_protection_keeps_every_node_of_the_pool() {
    let mut h = Harness::new(&scale_in_cfg("scale_in_protection = true"));
    run_and_idle(&mut h, 2);
    let a = h.run_until(86_400.0);
    assert!(terminates(&a).is_empty(), "{a:?}");
    assert_eq!(h.alive(1), 2);
}

#[test]
fn a_node_protected_by_event_is_never_terminated_until_unprotected() {
    let mut h = Harness::new(&scale_in_cfg(""));
    let nodes = run_and_idle(&mut h, 2);
    h.event(Event::SetNodeProtection { node: nodes[0], protected: true });
    let a = h.run_until(86_400.0);
    assert_eq!(terminates(&a), vec![nodes[1]], "only the unprotected node goes");
    assert_eq!(h.node(nodes[0]).state, NodeState::Ready);
    h.event(Event::SetNodeProtection { node: nodes[0], protected: false });
    assert_eq!(terminates(&h.drain()), vec![nodes[0]], "idle long past its timeout, it goes at once");
}

#[test]
fn scale_in_cooldown_spaces_removals() {
    let mut h = Harness::new(&scale_in_cfg("scale_in_cooldown_s = 300"));
    let nodes = run_and_idle(&mut h, 2);
    // One node gets work from 1001 s to 1100 s: idle deadlines 1600 s (the other) and 1700 s (this one).
    h.at(1001.0);
    let job = h.submit(spec("p0", 8, 1));
    let on = started(&h.drain(), job).expect("starts")[0].0;
    let other = *nodes.iter().find(|&&n| n != on).unwrap();
    h.at(1100.0);
    h.event(Event::JobExited { job, attempt: 1, success: true, exit: None });
    let a = h.run_until(1600.0);
    assert_eq!(terminates(&a), vec![other], "{a:?}");
    // `on` is idle past its timeout from 1700 s, but the scale-in cooldown holds it until 1600 + 300 = 1900 s.
    let a = h.run_until(1899.0);
    assert!(terminates(&a).is_empty(), "{a:?}");
    assert_eq!(h.wake(), Some(1900.0), "the engine wakes at the cooldown end");
    assert_eq!(terminates(&h.run_until(1900.0)), vec![on]);
}

// ---- Scheduled windows ----

#[test]
fn a_scheduled_window_raises_min_and_launches_nodes_inside_the_window_only() {
    // 09:00 in Los Angeles on 1970-01-01 (PST, UTC-8) is 17:00 UTC, 61,200 s after the epoch.
    let cfg = format!(
        "{G8}{}{}\n[[schedules]]\npool = \"od\"\ncron = \"0 9 * * *\"\ntimezone = \"America/Los_Angeles\"\nduration_s = 3600\nmin_nodes = 2\n",
        fixed(1, 1),
        cloud("od", "on_demand", "max_nodes = 4\nidle_timeout_s = 600")
    );
    let mut h = Harness::new(&cfg);
    assert!(h.drain().is_empty());
    assert_eq!(h.wake(), Some(61_200.0), "the engine wakes when the window opens");
    let before = h.run_until(61_199.0);
    assert!(launches(&before).is_empty(), "{before:?}");
    let open = h.run_until(61_200.0);
    let l = launches(&open);
    assert_eq!(l.len(), 2, "{open:?}");
    h.at(61_440.0);
    for &(n, _, _) in &l {
        h.event(Event::NodeReady { node: n });
    }
    // Idle past its timeout inside the window: kept for the window's min.
    let inside = h.run_until(64_799.0);
    assert!(terminates(&inside).is_empty(), "{inside:?}");
    assert_eq!(h.alive(1), 2);
    let closed = h.run_until(64_800.0);
    assert_eq!(terminates(&closed).len(), 2, "the window closed at 10:00 local: {closed:?}");
    let next_day = h.run_until(86_400.0 + 61_199.0);
    assert!(launches(&next_day).is_empty(), "{next_day:?}");
    assert_eq!(launches(&h.run_until(86_400.0 + 61_200.0)).len(), 2, "the window opens again the next day");
}

// ---- Faults ----

#[test]
fn insufficient_capacity_backs_off_that_instance_type_and_the_next_launch_uses_the_other() {
    let cfg = r#"
[[instance_types]]
name = "cheap8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 20.0

[[instance_types]]
name = "dear8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 30.0

[[pools]]
name = "onprem"
market = "fixed"
nodes = [{ count = 1, gpus = 1 }]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["cheap8", "dear8"]
max_nodes = 4
scale_out_cooldown_s = 0
"#;
    let mut h = Harness::new(cfg);
    let type_index = |name: &str| h.e.config().instance_type_index(name).unwrap();
    let (cheap, dear) = (type_index("cheap8"), type_index("dear8"));
    let job = h.submit(spec("p0", 8, 1));
    let l = launches(&h.drain());
    assert_eq!(l.iter().map(|x| x.2).collect::<Vec<_>>(), vec![cheap], "the cheaper type first");
    h.at(10.0);
    h.event(Event::LaunchFailed { node: l[0].0, error: LaunchError::InsufficientCapacity });
    let l2 = launches(&h.drain());
    assert_eq!(l2.iter().map(|x| x.2).collect::<Vec<_>>(), vec![dear], "the backed-off type is skipped");
    assert_eq!(h.node(l[0].0).state, NodeState::Failed);
    // Both types out: nothing to buy until the first backoff (30 s) ends, then the cheap type again.
    h.at(20.0);
    h.event(Event::LaunchFailed { node: l2[0].0, error: LaunchError::InsufficientCapacity });
    assert!(launches(&h.drain()).is_empty());
    assert_eq!(h.job(job).pending, PendingReason::NoCapacity);
    assert_eq!(h.wake(), Some(40.0), "the engine wakes when the first backoff ends");
    let a = h.run_until(40.0);
    assert_eq!(launches(&a).iter().map(|x| x.2).collect::<Vec<_>>(), vec![cheap], "{a:?}");
}

#[test]
fn a_stale_job_exit_of_an_old_attempt_is_ignored() {
    let mut h = Harness::new(&fixed(1, 8));
    let low = h.submit(spec("p2", 8, 1));
    assert_eq!(starts(&h.drain()).len(), 1);
    h.at(10.0);
    let high = h.submit(spec("p0", 8, 1));
    assert_eq!(stops(&h.drain()), vec![(low, 1, StopReason::Preempted { by: high })]);
    h.at(20.0);
    h.event(Event::JobExited { job: high, attempt: 1, success: true, exit: None });
    let p = starts(&h.drain());
    assert_eq!(p.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>(), vec![(low, 2)], "second attempt of the p2 job");
    h.at(30.0);
    h.event(Event::JobExited { job: low, attempt: 1, success: true, exit: None });
    assert!(h.drain().is_empty());
    assert_eq!(h.job(low).state, JobState::Running, "the exit of attempt 1 is stale");
    assert_eq!(h.job(low).attempt, 2);
    h.event(Event::JobExited { job: low, attempt: 2, success: true, exit: None });
    assert_eq!(h.job(low).state, JobState::Succeeded);
    // A repeat of an exit already applied changes nothing either.
    h.event(Event::JobExited { job: low, attempt: 2, success: false, exit: None });
    assert_eq!(h.job(low).state, JobState::Succeeded);
}

#[test]
fn a_lost_node_requeues_its_jobs_and_they_start_again_elsewhere() {
    let mut h = Harness::new(&fixed(2, 8));
    let job = h.submit(spec("p1", 8, 1));
    let on = started(&h.drain(), job).unwrap()[0].0;
    h.at(60.0);
    h.event(Event::NodeLost { node: on });
    let a = h.drain();
    assert_eq!(stops(&a), vec![(job, 1, StopReason::NodeLost)]);
    let p = started(&a, job).expect("restarts on the other node");
    assert_ne!(p[0].0, on);
    assert_eq!(h.job(job).attempt, 2);
    assert_eq!(h.node(on).state, NodeState::Lost);
    // The node's loss is on record, before the requeue it caused, naming the job.
    let lost = h.records_of(DecisionKind::NodeLost, "node_lost");
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].subject, format!("node:{}", on.0));
    assert!(lost[0].detail.contains(&format!("({})", job.0)), "{}", lost[0].detail);
    let kinds: Vec<DecisionKind> = h.records.iter().map(|d| d.kind).collect();
    let (l, r) = (
        kinds.iter().position(|&k| k == DecisionKind::NodeLost),
        kinds.iter().position(|&k| k == DecisionKind::JobRequeued),
    );
    assert!(l < r, "{kinds:?}");
    // A repeat of the loss records nothing more.
    h.event(Event::NodeLost { node: on });
    assert_eq!(h.records_of(DecisionKind::NodeLost, "node_lost").len(), 1);
}

#[test]
fn a_lost_attempt_requeues_its_job_on_a_node_that_stays() {
    let mut h = Harness::new(&fixed(1, 8));
    let job = h.submit(spec("p1", 4, 1));
    let on = started(&h.drain(), job).expect("starts")[0].0;
    h.at(60.0);
    h.event(Event::AttemptLost { job, attempt: 1 });
    let a = h.drain();
    assert_eq!(stops(&a), vec![(job, 1, StopReason::NodeLost)]);
    // The node is fine: it stays ready and takes the next attempt.
    assert_eq!(h.node(on).state, NodeState::Ready);
    assert_eq!(started(&a, job).expect("restarts at once"), vec![(on, 4)]);
    assert_eq!((h.job(job).attempt, h.job(job).state), (2, JobState::Running));
    assert_eq!(h.e.cluster().counters.requeues, 1);
    // A report about the attempt already replaced, or about a job that ended, changes nothing.
    h.event(Event::AttemptLost { job, attempt: 1 });
    assert!(non_records(&h.drain()).is_empty());
    assert_eq!(h.job(job).attempt, 2);
    h.event(Event::JobExited { job, attempt: 2, success: true, exit: None });
    h.event(Event::AttemptLost { job, attempt: 2 });
    assert!(non_records(&h.drain()).is_empty());
    assert_eq!(h.job(job).state, JobState::Succeeded);
    assert!(h.e.handle_event(h.now, Event::AttemptLost { job: JobId(9), attempt: 1 }).is_err());
}

#[test]
fn attempt_lost_is_logged_like_the_other_events() {
    let ev = Event::AttemptLost { job: JobId(3), attempt: 2 };
    let text = serde_json::to_string(&ev).unwrap_or_default();
    assert_eq!(text, r#"{"attempt_lost":{"job":3,"attempt":2}}"#);
    assert_eq!(serde_json::from_str::<Event>(&text).ok(), Some(ev));
}

#[test]
fn cancelling_a_running_job_stops_it_and_frees_its_gpus() {
    let mut h = Harness::new(&fixed(1, 8));
    let a = h.submit(spec("p1", 8, 1));
    let b = h.submit(spec("p1", 8, 1));
    assert_eq!(starts(&h.drain()).len(), 1);
    h.at(5.0);
    h.event(Event::CancelJob { job: a });
    let acts = h.drain();
    assert_eq!(stops(&acts), vec![(a, 1, StopReason::Cancelled)]);
    assert!(started(&acts, b).is_some());
    assert_eq!(h.job(a).state, JobState::Cancelled);
    h.event(Event::CancelJob { job: b });
    assert_eq!(h.job(b).state, JobState::Cancelled);
}

#[test]
fn events_about_unknown_nodes_and_jobs_are_refused() {
    let mut h = Harness::new(&fixed(1, 8));
    assert!(h.e.handle_event(0, Event::NodeReady { node: NodeId(99) }).is_err());
    assert!(h.e.handle_event(0, Event::JobExited { job: JobId(7), attempt: 1, success: true, exit: None }).is_err());
    h.check("refused events");
}

#[test]
fn submissions_are_checked_and_name_the_field() {
    let mut h = Harness::new(&fixed(1, 8));
    let cases: [(&str, JobSpec, &str); 4] = [
        ("an unknown tier", spec("p7", 1, 1), "tier:"),
        ("zero gpus", spec("p1", 0, 1), "gpus:"),
        ("zero workers", spec("p1", 1, 0), "workers:"),
        ("a worker larger than any node", spec("p1", 16, 1), "gpus:"),
    ];
    for (rule, s, prefix) in cases {
        let err = h.e.submit(0, s).expect_err(rule).to_string();
        assert!(err.starts_with(prefix), "{rule}: {err}");
    }
    assert_eq!(h.e.cluster().jobs.len(), 0);
    h.check("refused submissions");
}
