//! Spot rules, one test per rule: interruption notices (checkpoint on the signal, drain, replacement capacity in
//! the same decision pass, no restart before the checkpoint is written), notice storms, notices for nodes still
//! booting, duplicate notices, offering backoff after repeated interruptions, the move of p1 jobs to on-demand
//! after too many interruptions, spot launch failures, and p0 never on spot. The harness is the one of
//! tests/engine.rs: inline TOML, events at chosen instants, invariants checked after every step.

use spillway_core::{
    Action, DecisionKind, Event, JobId, JobState, LaunchError, Market, NodeId, NodeState, PendingReason, StopReason,
};

mod common;
use common::*;

// ---- Config ----

/// Pools of [`SPOT`]: a 1-GPU fixed node (no 8-GPU job fits it), on-demand, and a spot pool of two types.
const FIXED: usize = 0;
const OD: usize = 1;
const SPOT_POOL: usize = 2;
/// The second spot pool of [`SPOT2`].
const SPOT2_POOL: usize = 3;
/// Instance types: `a8` is the cheaper spot type, `b8` the dearer one.
const A8: usize = 0;
const B8: usize = 1;

const SPOT: &str = r#"
[[instance_types]]
name = "a8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 5.0

[[instance_types]]
name = "b8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 7.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{ count = 1, gpus = 1 }]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["a8"]
max_nodes = 8

[[pools]]
name = "spot"
market = "spot"
instance_types = ["a8", "b8"]
max_nodes = 8
min_step_nodes = 8
"#;

/// [`SPOT`] plus a second spot pool of `a8` nodes.
fn spot2() -> String {
    format!(
        "{SPOT}\n[[pools]]\nname = \"spot2\"\nmarket = \"spot\"\ninstance_types = [\"a8\"]\nmax_nodes = 8\nmin_step_nodes = 8\n"
    )
}

/// Submits `n` p1 jobs of 8 GPUs now, lets them buy spot nodes (after the tier's 60 s burst delay), makes those
/// ready 300 s after submission and returns (job, node) per job, in submission order.
fn on_spot(h: &mut Harness, n: usize) -> Vec<(JobId, NodeId)> {
    let t = h.t();
    let jobs: Vec<JobId> = (0..n).map(|_| h.submit(spec("p1", 8, 1))).collect();
    let a = h.run_until(t + 60.0);
    let l = launches(&a);
    assert_eq!(l.len(), n, "one spot node per job: {a:?}");
    assert!(l.iter().all(|&(_, p, it)| p == SPOT_POOL && it == A8), "the cheaper spot offering first: {l:?}");
    h.at(t + 300.0);
    for &(node, _, _) in &l {
        h.event(Event::NodeReady { node });
    }
    let a = h.drain();
    jobs.into_iter()
        .map(|j| {
            let p = started(&a, j).unwrap_or_else(|| panic!("job {} starts on its spot node: {a:?}", j.0));
            assert_eq!(h.node(p[0].0).market, Market::Spot);
            (j, p[0].0)
        })
        .collect()
}

// ---- Notices ----

#[test]
fn a_notice_checkpoints_the_job_drains_the_node_and_buys_a_replacement_in_the_same_pass() {
    let mut h = Harness::new(SPOT);
    let [(job, node)] = on_spot(&mut h, 1)[..] else { unreachable!() };
    h.at(1000.0);
    h.notice(node, 120.0);
    let a = h.drain();
    // p1's checkpoint_time_s is 60 s by default: the job may write its checkpoint for that long.
    assert_eq!(stops_with_grace(&a), vec![(job, 1, StopReason::Interrupted { checkpoint: true }, 60_000)]);
    assert_eq!(h.node(node).state, NodeState::Draining);
    assert_eq!(h.node(node).used, 0);
    assert!(started(&a, job).is_none(), "no restart while the checkpoint is written: {a:?}");
    assert_eq!(h.job(job).state, JobState::Queued);
    assert_eq!(h.job(job).not_before, Some(h.in_s(60.0)));
    assert_eq!(h.job(job).interruptions, 1);
    // Replacement capacity is asked for in this very pass, not when the node is gone (spot first: the job has
    // waited less than spot_fallback_after_s since its requeue).
    let l = launches(&a);
    assert_eq!(l.len(), 1, "{a:?}");
    assert_eq!(l[0].1, SPOT_POOL, "{l:?}");
    let stop_at = a.iter().position(|x| matches!(x, Action::StopJob { .. })).unwrap();
    let launch_at = a.iter().position(|x| matches!(x, Action::Launch { .. })).unwrap();
    assert!(stop_at < launch_at, "the stop is asked for before the replacement: {a:?}");
    assert_eq!(h.e.cluster().counters.notices_acted_on, 1);

    // The replacement is ready before the checkpoint is written: the job still waits for its not_before.
    let replacement = l[0].0;
    h.at(1030.0);
    h.event(Event::NodeReady { node: replacement });
    let a = h.drain();
    assert!(started(&a, job).is_none(), "started before its checkpoint was written: {a:?}");
    assert_eq!(h.wake(), Some(1060.0), "the engine wakes when the checkpoint is written");
    let a = h.run_until(1059.999);
    assert!(starts(&a).is_empty(), "1 ms early: {a:?}");
    let a = h.run_until(1060.0);
    let s = starts(&a);
    assert_eq!(s.len(), 1, "{a:?}");
    assert_eq!((s[0].0, s[0].1, s[0].2[0].0), (job, 2, replacement), "attempt 2 on the replacement");

    // Until its reclaim the draining node takes no new work, though it has 8 free GPUs.
    h.at(1061.0);
    let other = h.submit(spec("p1", 8, 1));
    let a = h.run_until(1119.0);
    assert!(started(&a, other).is_none(), "{a:?}");
    assert!(h.node(node).jobs.is_empty());
    h.at(1120.0);
    h.event(Event::NodeLost { node });
    let a = h.drain();
    assert!(stops(&a).is_empty(), "the reclaimed node ran nothing: {a:?}");
    assert_eq!(h.node(node).state, NodeState::Lost);
    assert_eq!((h.job(job).state, h.job(job).attempt), (JobState::Running, 2), "the job ran once at a time");
}

#[test]
fn a_notice_shorter_than_the_checkpoint_time_stops_the_job_without_a_checkpoint() {
    // (seconds between notice and reclaim, whether the job checkpoints); p1 needs 60 s to checkpoint.
    for (notice_s, checkpoint) in
        [(30.0, false), (59.999, false), (0.0, false), (-10.0, false), (60.0, true), (120.0, true)]
    {
        let mut h = Harness::new(SPOT);
        let [(job, node)] = on_spot(&mut h, 1)[..] else { unreachable!() };
        h.at(1000.0);
        h.notice(node, notice_s);
        let a = h.drain();
        let grace = if checkpoint { 60_000 } else { 0 };
        assert_eq!(
            stops_with_grace(&a),
            vec![(job, 1, StopReason::Interrupted { checkpoint }, grace)],
            "notice {notice_s} s"
        );
        // Without a checkpoint the work since the last interval checkpoint (1800 s for p1) is lost: 700 s x 8 GPUs.
        let lost = if checkpoint { 0 } else { 700_000 * 8 };
        assert_eq!(h.e.cluster().counters.lost_gpu_ms, lost, "notice {notice_s} s");
        assert_eq!(h.job(job).not_before, checkpoint.then(|| h.in_s(60.0)), "notice {notice_s} s");
        assert_eq!(h.node(node).state, NodeState::Draining, "notice {notice_s} s");
        assert_eq!(h.job(job).state, JobState::Queued, "notice {notice_s} s");
        // Replacement capacity is asked for in the same pass, checkpoint or not.
        assert_eq!(launches(&a).len(), 1, "notice {notice_s} s: {a:?}");
    }
}

#[test]
fn a_notice_too_short_to_checkpoint_still_buys_a_replacement_in_the_same_pass() {
    let mut late = Vec::new();
    for tier in ["p1", "p2"] {
        let mut h = Harness::new(SPOT);
        let job = h.submit(spec(tier, 8, 1));
        let l = launches(&h.run_until(300.0));
        assert_eq!(l.len(), 1, "{tier}");
        h.at(500.0);
        h.event(Event::NodeReady { node: l[0].0 });
        assert!(started(&h.drain(), job).is_some(), "{tier}");
        h.at(1000.0);
        h.notice(l[0].0, 30.0);
        let a = h.drain();
        assert_eq!(stops(&a), vec![(job, 1, StopReason::Interrupted { checkpoint: false })], "{tier}");
        if launches(&a).is_empty() {
            let pending = h.job(job).pending;
            h.run_until(2000.0);
            let first =
                h.records.iter().find(|d| d.kind == DecisionKind::ScaleOut && d.at >= 1_000_000).map(|d| d.at / 1000);
            late.push(format!("{tier}: no launch in the notice's pass at 1000 s (pending {pending:?}; node reclaimed at 1030 s); first scale-out at {first:?} s"));
        }
    }
    assert!(late.is_empty(), "{late:#?}");
}

#[test]
fn the_replacement_bought_for_a_checkpointing_job_is_not_taken_by_a_lower_tier_job() {
    let mut h = Harness::new(SPOT);
    let [(job, node)] = on_spot(&mut h, 1)[..] else { unreachable!() };
    h.at(1000.0);
    h.notice(node, 120.0);
    let replacement = launches(&h.drain())[0].0;
    h.at(1010.0);
    let low = h.submit(spec("p2", 8, 1));
    assert!(starts(&h.drain()).is_empty());
    h.at(1030.0);
    h.event(Event::NodeReady { node: replacement });
    let a = h.drain();
    assert!(started(&a, low).is_none(), "the p2 job took the node bought to replace the p1 job's: {a:?}");
    let a = h.run_until(1060.0);
    assert_eq!(started(&a, job).map(|p| p[0].0), Some(replacement), "{a:?}");
}

#[test]
fn a_late_ready_report_for_a_node_ended_by_a_notice_does_not_lift_its_offerings_backoff() {
    let mut h = Harness::new(SPOT);
    let [(_, node)] = on_spot(&mut h, 1)[..] else { unreachable!() };
    h.at(1000.0);
    h.notice(node, 120.0);
    let r = launches(&h.drain())[0];
    assert_eq!((r.1, r.2), (SPOT_POOL, A8));
    // The replacement, still booting, gets a notice too: the second a8 interruption within the hour.
    h.at(1001.0);
    h.notice(r.0, 120.0);
    h.drain();
    assert_eq!(h.node(r.0).state, NodeState::Lost);
    assert!(h.e.cluster().backoff.get(&(SPOT_POOL, A8)).is_some_and(|&(until, _)| until > h.now), "a8 is backed off");
    // The cloud still reports the boot it had started.
    h.at(1005.0);
    h.event(Event::NodeReady { node: r.0 });
    h.drain();
    assert_eq!(h.node(r.0).state, NodeState::Lost);
    let a = h.run_until(1010.0);
    assert_eq!(
        launches(&a).iter().map(|x| (x.1, x.2)).collect::<Vec<_>>(),
        vec![(SPOT_POOL, B8)],
        "the backed-off a8 was bought again: {a:?}"
    );
}

#[test]
fn a_job_writing_its_checkpoint_says_so() {
    let mut h = Harness::new(SPOT);
    let [(job, node)] = on_spot(&mut h, 1)[..] else { unreachable!() };
    h.at(1000.0);
    h.notice(node, 120.0);
    let a = h.drain();
    let replacement = launches(&a)[0].0;
    h.at(1030.0);
    h.event(Event::NodeReady { node: replacement });
    let a = h.drain();
    assert!(started(&a, job).is_none());
    // A free, ready node fits it: the only reason it waits is its checkpoint.
    let said: Vec<&str> = h
        .records
        .iter()
        .filter(|d| d.kind == DecisionKind::JobPending && d.subject == "job:0" && d.at >= 1_000_000)
        .map(|d| d.reason)
        .collect();
    assert_eq!(h.job(job).pending, PendingReason::Checkpointing, "records since the notice: {said:?}");
}

#[test]
fn a_storm_of_notices_requeues_every_job_once_and_all_finish_on_replacements() {
    let mut h = Harness::new(&SPOT.replace("max_nodes = 8\nmin_step_nodes = 8", "max_nodes = 12\nmin_step_nodes = 8"));
    let placed = on_spot(&mut h, 4);
    let jobs: Vec<JobId> = placed.iter().map(|x| x.0).collect();
    h.at(1000.0);
    for &(_, node) in &placed {
        h.notice(node, 120.0);
    }
    let a = h.drain();
    let mut stopped: Vec<JobId> = stops(&a).iter().map(|x| x.0).collect();
    stopped.sort();
    assert_eq!(stopped, jobs, "every job stopped exactly once: {a:?}");
    assert!(stops(&a).iter().all(|x| x.2 == StopReason::Interrupted { checkpoint: true }));
    // Replacements for all 32 GPUs are asked for in the same pass.
    let bought: u32 = launches(&a).iter().map(|&(_, _, it)| h.e.config().instance_types[it].gpus).sum();
    assert!(bought >= 32, "only {bought} GPUs bought for 32 GPUs of interrupted work: {a:?}");
    for &j in &jobs {
        assert_eq!(h.job(j).state, JobState::Queued);
        assert_eq!(h.job(j).pending, PendingReason::Checkpointing, "job {}", j.0);
    }
    assert_eq!(h.e.queued(), 4);
    assert_eq!(h.e.cluster().counters.interruptions, 4);
    assert_eq!(h.e.cluster().counters.notices_acted_on, 4);

    // The cloud reclaims the nodes at the deadline; the replacements boot; every job runs to its end.
    h.at(1120.0);
    for &(_, node) in &placed {
        h.event(Event::NodeLost { node });
    }
    let mut all = h.drain();
    assert!(stops(&all).is_empty(), "the drained nodes ran nothing: {all:?}");
    h.at(1240.0);
    for (node, _, _) in launches(&a) {
        h.event(Event::NodeReady { node });
    }
    for &j in &jobs {
        h.runs_for(j, 3600.0);
    }
    all.extend(h.run_world(86_400.0, 240.0));
    for &j in &jobs {
        assert_eq!(h.job(j).state, JobState::Succeeded, "job {}: {:?}", j.0, h.job(j).pending);
        assert_eq!(h.job(j).attempt, 2, "job {} requeued once, started twice", j.0);
        assert!(stops(&all).iter().all(|x| x.0 != j), "job {} stopped again", j.0);
        let ran_on = started(&all, j).expect("restarted");
        assert!(ran_on.iter().all(|(n, _)| !placed.iter().any(|p| p.1 == *n)), "job {} back on a reclaimed node", j.0);
    }
    assert_eq!(h.e.queued(), 0);
}

#[test]
fn a_notice_for_a_node_still_booting_ends_it_and_the_pool_launches_again() {
    let mut h = Harness::new(SPOT);
    let job = h.submit(spec("p1", 8, 1));
    let l = launches(&h.run_until(60.0));
    assert_eq!(l.len(), 1);
    let (node, pool, it) = l[0];
    assert_eq!(pool, SPOT_POOL);
    h.at(61.0);
    h.notice(node, 120.0);
    let a = h.drain();
    assert!(stops(&a).is_empty(), "no job was bound to a booting node: {a:?}");
    assert_eq!(h.node(node).state, NodeState::Lost);
    assert_eq!(h.node(node).used, 0);
    assert_eq!(h.job(job).state, JobState::Queued);
    assert_eq!(h.job(job).interruptions, 0, "the job was never interrupted");
    assert_eq!(h.e.cluster().counters.interruptions, 1);
    // The spot pool buys again once its 10 s scale-out cooldown (from the launch at 60 s) is over.
    let a = h.run_until(70.0);
    let again = launches(&a);
    assert_eq!(again.iter().map(|x| (x.1, x.2)).collect::<Vec<_>>(), vec![(SPOT_POOL, it)], "{a:?}");
    // The cloud may still report the dead launch: it stays dead and takes no job.
    h.at(200.0);
    h.event(Event::NodeReady { node });
    h.event(Event::LaunchFailed { node, error: LaunchError::InsufficientCapacity });
    let a = h.drain();
    assert!(started(&a, job).is_none(), "{a:?}");
    assert_eq!(h.node(node).state, NodeState::Lost);
    assert_eq!(h.e.cluster().counters.launch_failures, 0, "a failure report for a dead node is not counted");
    h.at(300.0);
    h.event(Event::NodeReady { node: again[0].0 });
    assert_eq!(started(&h.drain(), job).map(|p| p[0].0), Some(again[0].0));
}

#[test]
fn notices_during_a_checkpoint_and_duplicate_notices_are_idempotent() {
    let mut h = Harness::new(SPOT);
    let [(job, first)] = on_spot(&mut h, 1)[..] else { unreachable!() };
    h.at(1000.0);
    h.notice(first, 120.0);
    let a = h.drain();
    assert_eq!(stops(&a), vec![(job, 1, StopReason::Interrupted { checkpoint: true })]);
    let r1 = launches(&a)[0].0;
    let counters = h.e.cluster().counters.clone();

    // The same notice again, and one with another deadline: nothing changes.
    h.at(1001.0);
    h.notice(first, 119.0);
    h.notice(first, 30.0);
    let a = h.drain();
    assert!(non_records(&a).is_empty(), "a duplicate notice acts again: {a:?}");
    assert_eq!(h.e.cluster().counters, counters);
    assert_eq!(h.job(job).not_before, Some(1_060_000));
    assert_eq!(h.job(job).interruptions, 1);

    // The replacement boots, then gets a notice while the job's checkpoint is still being written: the
    // replacement drains, the job (not running) is not stopped again nor counted, and capacity is bought again.
    h.at(1030.0);
    h.event(Event::NodeReady { node: r1 });
    assert!(starts(&h.drain()).is_empty());
    h.at(1040.0);
    h.notice(r1, 120.0);
    let a = h.drain();
    assert!(stops(&a).is_empty(), "{a:?}");
    assert_eq!(h.node(r1).state, NodeState::Draining);
    assert_eq!(
        (h.job(job).state, h.job(job).interruptions, h.job(job).not_before),
        (JobState::Queued, 1, Some(1_060_000))
    );
    let l = launches(&a);
    assert_eq!(l.len(), 1, "new capacity for the job: {a:?}");
    let r2 = l[0].0;
    h.at(1050.0);
    h.event(Event::NodeReady { node: r2 });
    assert!(starts(&h.drain()).is_empty());
    let a = h.run_until(1060.0);
    assert_eq!(starts(&a).iter().map(|x| (x.0, x.1, x.2[0].0)).collect::<Vec<_>>(), vec![(job, 2, r2)], "{a:?}");

    // A second notice after the restart stops attempt 2 once; repeats of it, and of older notices, do nothing.
    h.at(1100.0);
    h.notice(r2, 120.0);
    let a = h.drain();
    assert_eq!(stops(&a), vec![(job, 2, StopReason::Interrupted { checkpoint: true })]);
    assert_eq!((h.job(job).interruptions, h.job(job).not_before), (2, Some(1_160_000)));
    let counters = h.e.cluster().counters.clone();
    for node in [r2, r1, first] {
        h.notice(node, 120.0);
    }
    assert!(non_records(&h.drain()).is_empty());
    assert_eq!(h.e.cluster().counters, counters);
    // The reclaims arrive: nothing runs there, nothing is stopped again; the reclaims repeat: still nothing.
    h.at(1120.0);
    h.event(Event::NodeLost { node: first });
    h.at(1160.0);
    h.event(Event::NodeLost { node: r1 });
    h.event(Event::NodeLost { node: r1 });
    let a = h.drain();
    assert!(stops(&a).is_empty(), "{a:?}");
    assert_eq!(h.job(job).attempt, 2);
    assert_eq!(h.e.cluster().counters.requeues, 2);
}

// ---- Offerings ----

#[test]
fn two_interruptions_of_an_offering_within_an_hour_back_it_off_and_the_next_launch_uses_the_other_type() {
    let mut h = Harness::new(SPOT);
    let placed = on_spot(&mut h, 2);
    h.at(1000.0);
    h.notice(placed[0].1, 120.0);
    let a = h.drain();
    assert_eq!(
        launches(&a).iter().map(|x| (x.1, x.2)).collect::<Vec<_>>(),
        vec![(SPOT_POOL, A8)],
        "one interruption backs nothing off"
    );
    h.at(1100.0);
    h.notice(placed[1].1, 120.0);
    let a = h.drain();
    let l = launches(&a);
    assert_eq!(l.len(), 1, "{a:?}");
    assert_eq!((l[0].1, l[0].2), (SPOT_POOL, B8), "the pool's other type: {a:?}");
    assert_eq!(h.records_of(DecisionKind::Fallback, "interruption_rate").len(), 1);

    // With a second spot pool the next launch may go there instead; never to the backed-off offering.
    let mut h = Harness::new(&spot2());
    let placed = on_spot(&mut h, 2);
    h.at(1000.0);
    h.notice(placed[0].1, 120.0);
    h.drain();
    h.at(1100.0);
    h.notice(placed[1].1, 120.0);
    let l = launches(&h.drain());
    assert_eq!(l.len(), 1);
    assert!(matches!((l[0].1, l[0].2), (SPOT_POOL, B8) | (SPOT2_POOL, A8)), "{l:?}");
}

#[test]
fn interruptions_an_hour_or_more_apart_do_not_back_an_offering_off() {
    let mut h = Harness::new(SPOT);
    let placed = on_spot(&mut h, 2);
    h.at(1000.0);
    h.notice(placed[0].1, 120.0);
    h.drain();
    h.at(4600.0);
    h.notice(placed[1].1, 120.0);
    let a = h.drain();
    let types: Vec<(usize, usize)> = launches(&a).iter().map(|x| (x.1, x.2)).collect();
    assert!(types.contains(&(SPOT_POOL, A8)), "the cheaper offering is still used: {a:?}");
    assert!(h.records_of(DecisionKind::Fallback, "interruption_rate").is_empty());
}

/// Sends a notice for `node` now, boots every node launched for it 30 s later, and returns the node `job`
/// restarts on once its checkpoint is written.
fn interrupt_and_restart(h: &mut Harness, job: JobId, node: NodeId) -> NodeId {
    let t = h.t();
    h.notice(node, 120.0);
    let a = h.drain();
    assert!(stops(&a).iter().any(|x| x.0 == job), "{a:?}");
    h.at(t + 30.0);
    for (n, _, _) in launches(&a) {
        h.event(Event::NodeReady { node: n });
    }
    let a = h.run_until(t + 60.0);
    started(&a, job).unwrap_or_else(|| panic!("job {} restarts at {} s: {a:?}", job.0, t + 60.0))[0].0
}

#[test]
fn a_p1_job_interrupted_max_spot_interruptions_times_moves_to_on_demand() {
    let mut h = Harness::new(&spot2());
    let [(job, mut node)] = on_spot(&mut h, 1)[..] else { unreachable!() };
    // p1's max_spot_interruptions is 3: two interruptions leave the job on spot.
    for t in [1000.0, 2000.0] {
        h.at(t);
        node = interrupt_and_restart(&mut h, job, node);
        assert_eq!(h.node(node).market, Market::Spot, "after the interruption at {t} s");
    }
    assert!(!h.job(job).pinned_on_demand);
    // An idle ready spot node is there when the third notice comes.
    h.at(2500.0);
    let filler = h.submit(spec("p1", 8, 1));
    h.runs_for(filler, 300.0);
    h.run_world(3000.0, 60.0);
    assert_eq!(h.job(filler).state, JobState::Succeeded);
    let idle: Vec<NodeId> =
        h.e.cluster()
            .nodes
            .iter()
            .filter(|n| n.market == Market::Spot && n.state == NodeState::Ready && n.jobs.is_empty())
            .map(|n| n.id)
            .collect();
    assert!(!idle.is_empty(), "an idle spot node is ready");

    h.notice(node, 120.0);
    let a = h.drain();
    assert_eq!(stops(&a), vec![(job, 3, StopReason::Interrupted { checkpoint: true })]);
    assert!(h.job(job).pinned_on_demand);
    assert_eq!(h.records_of(DecisionKind::Fallback, "too_many_interruptions").len(), 1);
    let l = launches(&a);
    assert_eq!(l.iter().map(|x| x.1).collect::<Vec<_>>(), vec![OD], "only on-demand is bought for it now: {a:?}");
    h.boot(&a, 240.0);
    h.runs_for(job, 7200.0);
    let a = h.run_world(5.0 * 86_400.0, 240.0);
    let s: Vec<_> = starts(&a).into_iter().filter(|x| x.0 == job).collect();
    assert_eq!(s.len(), 1, "{a:?}");
    assert!(s[0].2.iter().all(|(n, _)| h.node(*n).market == Market::OnDemand), "attempt 4 runs on {:?}", s[0].2);
    assert!(launches(&a).iter().all(|x| x.1 == OD), "nothing bought on spot for it: {a:?}");
    assert_eq!(h.job(job).state, JobState::Succeeded);
}

// ---- Launch failures ----

#[test]
fn insufficient_capacity_on_every_spot_offering_sends_p1_to_on_demand_at_once() {
    let mut h = Harness::new(&spot2());
    let job = h.submit(spec("p1", 8, 1));
    let mut tried = Vec::new();
    let mut l = launches(&h.run_until(60.0));
    for t in [70.0, 80.0, 90.0] {
        assert_eq!(l.len(), 1, "at {t} s: {l:?}");
        tried.push((l[0].1, l[0].2));
        h.at(t);
        h.event(Event::LaunchFailed { node: l[0].0, error: LaunchError::InsufficientCapacity });
        l = launches(&h.drain());
    }
    // a8 then b8 in the first spot pool, then a8 in the second; each fails.
    assert_eq!(tried, vec![(SPOT_POOL, A8), (SPOT_POOL, B8), (SPOT2_POOL, A8)]);
    // At 90 s, long before spot_fallback_after_s (300 s after submission), on-demand is bought.
    assert_eq!(l.iter().map(|x| x.1).collect::<Vec<_>>(), vec![OD], "{l:?}");
    assert_eq!(h.job(job).pending, PendingReason::WaitingForNodes);
    let fell = h.records_of(DecisionKind::Fallback, "spot_unavailable_or_share");
    assert_eq!(fell.len(), 1);
    // It names why each spot pool did not grow, not a list of possible causes.
    let why = &fell[0].detail;
    assert!(why.contains("types are backed off for"), "{why}");
    assert!(!why.contains("slow to come") && !why.contains("or at its share target"), "{why}");
    h.at(330.0);
    h.event(Event::NodeReady { node: l[0].0 });
    let p = started(&h.drain(), job).expect("starts on the on-demand node");
    assert_eq!(h.node(p[0].0).market, Market::OnDemand);
}

#[test]
fn a_p2_job_waits_out_spot_capacity_failures_and_never_gets_on_demand() {
    let mut h = Harness::new(&spot2());
    let jobs: Vec<JobId> = (0..2).map(|_| h.submit(spec("p2", 8, 1))).collect();
    // Every spot launch fails for six hours.
    let a = h.run_cloud(6.0 * 3600.0, &|_, pool, _| (pool == OD).then_some(240.0));
    let l = launches(&a);
    assert!(l.len() >= 6, "spot is tried again as backoffs expire: {l:?}");
    assert!(l.iter().all(|x| x.1 != OD), "p2 bought on-demand: {l:?}");
    assert!(starts(&a).is_empty());
    for &j in &jobs {
        assert_eq!(h.job(j).state, JobState::Queued);
        assert!(
            matches!(h.job(j).pending, PendingReason::NoCapacity | PendingReason::WaitingForNodes),
            "{:?}",
            h.job(j).pending
        );
    }
    // Spot comes back: the jobs start there.
    for &j in &jobs {
        h.runs_for(j, 600.0);
    }
    let a = h.run_world(2.0 * 86_400.0, 240.0);
    assert!(launches(&a).iter().all(|x| x.1 != OD), "{a:?}");
    for &j in &jobs {
        assert_eq!(h.job(j).state, JobState::Succeeded);
        assert_eq!(started(&a, j).map(|p| h.node(p[0].0).market), Some(Market::Spot));
    }
}

// ---- p0 ----

/// Tier sections and job-level interruptibility under which p0 must still never touch spot.
const P0_CASES: [(&str, &str, Option<bool>); 3] = [
    ("default tiers", "", None),
    ("p0 listing spot among its markets", "\n[tiers.p0]\nmarkets = [\"fixed\", \"spot\", \"on_demand\"]\n", None),
    ("a p0 job that says it is interruptible", "", Some(true)),
];

#[test]
fn p0_never_gets_a_spot_launch_whatever_happens() {
    for (rule, tiers, interruptible) in P0_CASES {
        let cfg = format!(
            "{}{tiers}",
            spot2().replace(
                "name = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"a8\"]\nmax_nodes = 8",
                "name = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"a8\", \"b8\"]\nmax_nodes = 2"
            )
        );
        let mut h = Harness::new(&cfg);
        let p0 = |h: &mut Harness| {
            let mut s = spec("p0", 8, 1);
            s.interruptible = interruptible;
            h.submit(s)
        };
        let first = p0(&mut h);
        h.runs_for(first, 4.0 * 3600.0);
        // On-demand has no capacity for two hours: p0 waits, it does not go to spot.
        let mut all = h.run_cloud(2.0 * 3600.0, &|_, pool, _| (pool != OD).then_some(240.0));
        assert_eq!(h.job(first).state, JobState::Queued, "{rule}");
        all.extend(h.run_world(3.0 * 3600.0, 240.0));
        assert_eq!(h.job(first).state, JobState::Running, "{rule}");
        // Its on-demand node gets a notice (whatever the cloud says): it is replaced on-demand only, and the
        // cloud reclaims the node at the deadline.
        let node = h.job(first).placement[0].0;
        let t = h.t();
        h.notice(node, 120.0);
        let a = h.drain();
        assert_eq!(stops(&a).len(), 1, "{rule}: {a:?}");
        h.boot(&a, 240.0);
        all.extend(a);
        // Meanwhile a second p0 job waits for the on-demand pool (at its max) while a p1 job buys a spot node.
        let second = p0(&mut h);
        h.runs_for(second, 3600.0);
        let p1 = h.submit(spec("p1", 8, 1));
        h.runs_for(p1, 60.0);
        all.extend(h.run_world(t + 120.0, 240.0));
        h.event(Event::NodeLost { node });
        all.extend(h.run_world(t + 600.0, 240.0));
        // A third p0 job waits past its SLO for on-demand room while the p1 job's spot node is idle and ready.
        assert!(
            h.e.cluster()
                .nodes
                .iter()
                .any(|n| n.market == Market::Spot && n.state == NodeState::Ready && n.jobs.is_empty()),
            "{rule}"
        );
        let third = p0(&mut h);
        h.runs_for(third, 600.0);
        let a = h.drain();
        assert!(started(&a, third).is_none(), "{rule}: {a:?}");
        all.extend(a);
        all.extend(h.run_world(t + 86_400.0, 240.0));
        for j in [first, second, third] {
            assert_eq!(h.job(j).state, JobState::Succeeded, "{rule}: job {} {:?}", j.0, h.job(j).pending);
        }
        let p0_jobs = [first, second, third];
        for (job, _, p) in starts(&all) {
            if p0_jobs.contains(&job) {
                assert!(
                    p.iter().all(|(n, _)| h.node(*n).market != Market::Spot),
                    "{rule}: p0 job {} started on spot: {p:?}",
                    job.0
                );
            }
        }
        // Every spot launch is one the p1 job asked for (it bought one node).
        let spot: Vec<_> = launches(&all).into_iter().filter(|x| h.node(x.0).market == Market::Spot).collect();
        assert!(spot.len() <= 1, "{rule}: spot launched for p0: {spot:?}");
        assert!(
            h.records
                .iter()
                .filter(|d| d.kind == DecisionKind::ScaleOut && d.subject.starts_with("pool:spot"))
                .all(|d| !d.detail.contains("p0")),
            "{rule}: a spot scale-out for p0 demand"
        );
    }
    let _ = FIXED;
}
