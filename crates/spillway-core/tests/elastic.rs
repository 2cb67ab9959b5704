//! Elastic jobs, as a user states what they expect: a job starts wide when GPUs are free, narrow when that ends
//! sooner than waiting for all its workers (or when no cloud pool can give them), and cloud capacity is bought for
//! all its workers, as for its rigid twin; it grows into owned GPUs that free up, but not sooner than the resize interval, only at a
//! checkpoint, and never into GPUs a waiting job could use; a reclaimed spot node shrinks it (it goes on at once
//! on the node it has left) instead of leaving it waiting for a replacement; preemption stops an elastic job
//! above its fewest workers before a rigid one.

use spillway_core::{Action, DecisionKind, JobId, JobSpec, NodeId, StopReason};

mod common;
use common::*;

/// `owned` owned 8-GPU nodes, a spot pool of 8-GPU nodes that keeps `spot_min` of them, and tiers whose
/// checkpoints take 60 s.
fn config_min(owned: u32, spot_min: u32) -> String {
    format!(
        r#"
[policy]
elastic_resize_interval_s = "10m"

[[instance_types]]
name = "g8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 7.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{{ count = {owned}, gpus = 8 }}]

[[pools]]
name = "spot"
market = "spot"
instance_types = ["g8"]
max_nodes = 4
min_nodes = {spot_min}
boot_latency_s = 240

[tiers.p0]
markets = ["fixed"]
queue_wait_slo_s = 60

[tiers.p1]
markets = ["fixed"]

[tiers.p2]
markets = ["fixed", "spot"]
burst_after_s = 0
checkpoint_time_s = 60
"#
    )
}

fn config(owned: u32) -> String {
    config_min(owned, 0)
}

/// An elastic job of `min..=max` workers of 8 GPUs that checkpoints every 5 minutes.
fn elastic(tier: &str, min: u32, max: u32) -> JobSpec {
    let mut s = spec(tier, 8, max);
    s.min_workers = Some(min);
    s.checkpoint_interval_ms = Some(300_000);
    s
}

fn widths(actions: &[Action], job: JobId) -> Vec<usize> {
    starts(actions).into_iter().filter(|s| s.0 == job).map(|s| s.2.len()).collect()
}

#[test]
fn an_elastic_job_starts_wide_when_owned_gpus_are_free() {
    let mut h = Harness::new(&config(2));
    let job = h.submit(elastic("p1", 1, 2));
    assert_eq!(widths(&h.drain(), job), vec![2], "both owned nodes are free: it takes both");
}

#[test]
fn an_elastic_job_starts_on_its_fewest_workers_and_grows_at_a_checkpoint_after_the_interval() {
    let mut h = Harness::new(&config(2));
    let filler = h.submit(spec("p1", 8, 1));
    // Half an hour: on one worker it ends before the filler's node is expected to drain (an hour).
    let mut half_hour = elastic("p1", 1, 2);
    half_hour.expected_duration_ms = Some(1_800_000);
    let job = h.submit(half_hour);
    let a = h.drain();
    assert_eq!(widths(&a, job), vec![1], "one owned node is taken: it starts on one worker at once");
    h.at(100.0);
    h.event(spillway_core::Event::JobExited { job: filler, attempt: 1, success: true, exit: None });
    let a = h.run_until(599.0);
    assert!(stops(&a).is_empty(), "no change of width before the 10-minute interval: {a:?}");
    assert_eq!(h.wake(), Some(600.0), "it asks to be woken at the first checkpoint after the interval");
    let why = width_reason(&h, job);
    assert_eq!((why.code, why.until), ("elastic_grows", Some(600_000)), "{}", why.text);
    assert!(why.text.contains("runs on 1 of its 1 to 2 workers: grows to 2"), "{}", why.text);
    let a = h.run_until(600.0);
    assert_eq!(stops(&a), vec![(job, 1, StopReason::Resized { from: 1, to: 2 })]);
    assert_eq!(widths(&a, job), vec![2], "it restarts at once on both nodes");
    assert_eq!(h.job(job).attempt, 2);
    assert_eq!(h.records_of(DecisionKind::JobResized, "grown").len(), 1);
    assert_eq!(width_reason(&h, job).code, "elastic_at_most");
    // At its most: nothing more to do, however often the engine is woken.
    let a = h.run_until(5_000.0);
    assert!(stops(&a).is_empty(), "{a:?}");
}

/// What `explain job` says of a running elastic job's width.
fn width_reason(h: &Harness, job: JobId) -> spillway_core::explain::Reason {
    let reasons = h.e.explain_job(job).unwrap();
    reasons.into_iter().find(|r| r.code.starts_with("elastic_")).expect("no reason for the job's width")
}

#[test]
fn an_elastic_job_never_grows_into_gpus_a_waiting_job_could_use() {
    let mut h = Harness::new(&config(3));
    let filler = h.submit(spec("p1", 8, 2));
    // A short job: on one worker it still ends before the filler's nodes are expected to drain (an hour).
    let mut short = elastic("p1", 1, 2);
    short.expected_duration_ms = Some(600_000);
    let job = h.submit(short);
    assert_eq!(widths(&h.drain(), job), vec![1]);
    // A rigid 2-node job waits: one node frees up, which it cannot use alone.
    let waiting = h.submit(spec("p1", 8, 2));
    h.drain();
    let why = width_reason(&h, job);
    assert_eq!(why.code, "elastic_not_wider");
    assert!(why.text.contains("1 queued job(s) may use pool onprem"), "{}", why.text);
    h.at(100.0);
    h.event(spillway_core::Event::JobExited { job: filler, attempt: 1, success: true, exit: None });
    let a = h.run_until(3_600.0);
    assert!(stops(&a).iter().all(|s| s.0 != job), "the elastic job kept its width: {a:?}");
    assert_eq!(widths(&a, waiting), vec![2], "the waiting job got both free nodes");
}

#[test]
fn a_reclaimed_spot_node_shrinks_an_elastic_job_which_goes_on_at_once_on_the_node_it_has_left() {
    // The spot pool keeps two nodes: the job may use both (they cost the same whoever runs there).
    let mut h = Harness::new(&config_min(0, 2));
    let job = h.submit(elastic("p2", 1, 2));
    h.run_world(300.0, 240.0);
    assert_eq!(h.job(job).placement.len(), 2, "it runs on both kept spot nodes");
    let (lost, kept) = (h.job(job).placement[0].0, h.job(job).placement[1].0);
    h.notice(lost, 120.0);
    let a = h.drain();
    assert_eq!(stops(&a).len(), 1, "the attempt stops to checkpoint: {a:?}");
    // A replacement for the node it loses is bought at once.
    assert_eq!(launches(&a).len(), 1, "{a:?}");
    h.boot(&a, 240.0);
    // Once its checkpoint is written (60 s), it restarts on the node it still has, without waiting for a
    // replacement to boot (240 s).
    let a = h.run_until(361.0);
    let restarted = starts(&a).into_iter().find(|s| s.0 == job).map(|s| s.2);
    assert_eq!(restarted, Some(vec![(kept, 8)]), "{a:?}");
    // The cloud takes the node at the end of its notice; the job widens onto the new node once its interval has
    // passed.
    h.at(420.0);
    h.event(spillway_core::Event::NodeLost { node: lost });
    let a = h.run_world(3_600.0, 240.0);
    assert_eq!(widths(&a, job), vec![2], "{a:?}");
    assert!(stops(&a).iter().all(|s| s.2 == StopReason::Resized { from: 1, to: 2 }), "{a:?}");
}

#[test]
fn scale_out_buys_for_an_elastic_jobs_most_workers_as_for_its_rigid_twin() {
    let mut h = Harness::new(&config(0));
    let job = h.submit(elastic("p2", 1, 3));
    let a = h.run_world(1_000.0, 240.0);
    assert_eq!(launches(&a).len(), 3, "{a:?}");
    assert_eq!(widths(&a, job), vec![3], "it waits for the nodes bought for it rather than start narrow: {a:?}");
}

#[test]
fn an_elastic_job_starts_narrow_at_once_when_no_cloud_pool_can_give_it_all_its_workers() {
    // The spot pool is at its max (two nodes), one of them busy: its full width may never come.
    let cfg = config(0).replace("max_nodes = 4", "max_nodes = 2");
    let mut h = Harness::new(&cfg);
    let (busy, done) = (h.submit(spec("p2", 8, 1)), h.submit(spec("p2", 8, 1)));
    h.run_world(300.0, 240.0);
    assert!(h.job(busy).placement.len() == 1 && h.job(done).placement.len() == 1);
    h.event(spillway_core::Event::JobExited { job: done, attempt: 1, success: true, exit: None });
    let job = h.submit(elastic("p2", 1, 2));
    let a = h.drain();
    assert!(launches(&a).is_empty(), "{a:?}");
    assert_eq!(widths(&a, job), vec![1], "{a:?}");
}

#[test]
fn an_elastic_job_starts_narrow_on_owned_gpus_only_when_that_ends_sooner_than_waiting_for_all() {
    // One owned node is free; the spot pool could give it a second node after its waiting budget and a boot.
    let cfg = config(1).replace("[tiers.p2]\n", "[tiers.p2]\nburst_after_s = 600\n").replace("burst_after_s = 0\n", "");
    // A 1-hour job: running on half its workers would take an hour longer than waiting 14 minutes for all.
    let mut h = Harness::new(&cfg);
    let mut long = elastic("p2", 1, 2);
    long.expected_duration_ms = Some(3_600_000);
    let job = h.submit(long);
    assert!(widths(&h.drain(), job).is_empty(), "it waits for all its workers");
    let reasons = h.e.explain_job(job).unwrap();
    let onprem = reasons.iter().find(|r| r.pool.as_deref() == Some("onprem")).expect("no reason for onprem");
    assert_eq!(onprem.code, "room_for_fewest", "{}", onprem.text);
    assert!(onprem.text.contains("room for 1 of the gang's 1 to 2 workers"), "{}", onprem.text);
    // A 5-minute job: narrow now ends sooner.
    let mut h = Harness::new(&cfg);
    let mut short = elastic("p2", 1, 2);
    short.expected_duration_ms = Some(300_000);
    let job = h.submit(short);
    assert_eq!(widths(&h.drain(), job), vec![1]);
}

#[test]
fn a_rigid_gang_in_the_same_place_waits_for_a_replacement_node() {
    // The contrast to the test above: the same reclaim stops a rigid 2-node job until a new node boots.
    let mut h = Harness::new(&config(0));
    let mut rigid = spec("p2", 8, 2);
    rigid.checkpoint_interval_ms = Some(300_000);
    let job = h.submit(rigid);
    h.run_world(300.0, 240.0);
    let lost = h.job(job).placement[0].0;
    h.notice(lost, 120.0);
    let a = h.run_world(361.0, 240.0);
    assert!(widths(&a, job).is_empty(), "no start before a replacement boots: {a:?}");
}

#[test]
fn preemption_stops_an_elastic_job_above_its_fewest_workers_before_a_rigid_one() {
    let mut h = Harness::new(&config(3));
    let rigid = h.submit(spec("p2", 8, 1));
    let job = h.submit(elastic("p2", 1, 2));
    let a = h.drain();
    assert_eq!((widths(&a, rigid), widths(&a, job)), (vec![1], vec![2]));
    let urgent = h.submit(spec("p0", 8, 1));
    let a = h.run_until(61.0);
    let stopped: Vec<JobId> = stops(&a).iter().map(|s| s.0).collect();
    assert_eq!(stopped, vec![job], "the elastic job gives way, the rigid one runs on: {a:?}");
    assert_eq!(widths(&a, urgent), vec![1]);
    let node_of = |id: JobId, h: &Harness| -> Vec<NodeId> { h.job(id).placement.iter().map(|p| p.0).collect() };
    assert_eq!(widths(&a, job), vec![1], "it restarts at once on one worker");
    assert!(node_of(job, &h).iter().all(|n| !node_of(urgent, &h).contains(n)));
}

#[test]
fn a_job_with_fewest_workers_above_its_most_is_refused_naming_the_field() {
    let mut h = Harness::new(&config(2));
    let mut s = spec("p1", 8, 2);
    s.min_workers = Some(3);
    let err = h.e.submit(0, s).err().map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(err, "min_workers: 3 is more than max_workers (2)");
    let mut s = spec("p1", 8, 2);
    s.min_workers = Some(0);
    let err = h.e.submit(0, s).err().map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(err, "min_workers: must be at least 1");
    // More workers than the tier could ever run: the field at fault is named, fewest or most. (p1 may use the
    // two owned 8-GPU nodes only.)
    let mut s = spec("p1", 8, 1_000);
    s.min_workers = Some(1);
    let err = h.e.submit(0, s).expect_err("refused");
    assert_eq!(err.field(), "max_workers", "{err}");
    let mut s = spec("p1", 8, 8);
    s.min_workers = Some(3);
    let err = h.e.submit(0, s).expect_err("refused");
    assert_eq!(err.field(), "min_workers", "{err}");
    assert!(err.to_string().starts_with("min_workers: 3 workers of 8 GPUs cannot run"), "{err}");
}

#[test]
fn an_elastic_job_neither_starts_nor_grows_past_its_teams_gpu_quota() {
    // Three free owned nodes, a team quota of 16 GPUs: at most two 8-GPU workers, however wide the job may go.
    let text = format!("{}\n[[teams]]\nname = \"team-a\"\nquota_gpus = 16\n", config(3));
    let mut h = Harness::new(&text);
    let job = h.submit(elastic("p1", 1, 3));
    assert_eq!(widths(&h.drain(), job), vec![2], "it starts on two workers, the team's quota");
    let a = h.run_until(3_600.0);
    assert!(stops(&a).is_empty(), "it never grows onto the third node: {a:?}");
    assert!(h.e.cluster().teams.iter().all(|t| t.quota_gpus.is_none_or(|q| t.used_gpus <= q)));
    let why = width_reason(&h, job);
    assert!(why.text.contains("quota"), "it says the quota keeps it narrow: {}", why.text);
}

#[test]
fn an_elastic_job_held_on_its_fewest_buys_for_the_rest_when_its_pools_cooldown_ends() {
    // One node per launch, then 10 minutes of cooldown; nodes boot for 15 minutes, so the job is still queued
    // (held on its fewest, on the node booting) when the cooldown ends, and buys for the rest then.
    let cfg = config(0).replace(
        "boot_latency_s = 240",
        "boot_latency_s = 900\nscale_out_cooldown_s = 600\nmax_step_fraction = 0.25\nmin_step_nodes = 1",
    );
    let mut h = Harness::new(&cfg);
    h.submit(elastic("p2", 1, 3));
    h.run_world(700.0, 900.0);
    let at: Vec<i64> = h.records_of(DecisionKind::ScaleOut, "queued_demand").iter().map(|d| d.at).collect();
    assert_eq!(at, vec![0, 600_000], "a launch at the start and one when the cooldown ends");
}
