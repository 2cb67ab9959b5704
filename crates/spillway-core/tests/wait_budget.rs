//! Waiting budgets by job size, as a user states them: a large job waits longer for owned capacity than a small
//! one; within its budget a job never runs on cloud capacity it would keep alive (an idle node it would outlast),
//! but owned capacity that frees up starts it at once, and so does cloud capacity it adds no spending to; after
//! its budget it bursts; a job without a declared duration is sized by its team's history.

use spillway_core::{Event, JobSpec, Market, PendingReason};

mod common;
use common::*;

/// One 8-GPU owned node and an on-demand pool of 8-GPU nodes; p1 waits 10 minutes per GPU-hour of size.
fn config(extra: &str) -> String {
    format!(
        r#"
[[instance_types]]
name = "g8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{{ count = 1, gpus = 8 }}]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["g8"]
max_nodes = 8
idle_timeout_s = 86400
{extra}

[tiers.p1]
markets = ["fixed", "on_demand"]
interruptible = false
burst_after_s = 0
burst_wait_per_gpu_hour_s = "10m"
"#
    )
}

/// [`config`] with `burst_early` on p1.
fn early_config() -> String {
    config("").replace("burst_wait_per_gpu_hour_s = \"10m\"", "burst_wait_per_gpu_hour_s = \"10m\"\nburst_early = true")
}

fn sized(gpus: u32, hours: Option<f64>) -> JobSpec {
    let mut s = spec("p1", gpus, 1);
    s.expected_duration_ms = hours.map(|h| (h * 3.6e6) as i64);
    s
}

#[test]
fn a_large_job_waits_longer_for_owned_capacity_than_a_small_one() {
    let mut h = Harness::new(&config(""));
    let filler = h.submit(sized(8, Some(100.0)));
    assert!(started(&h.drain(), filler).is_some(), "the owned node takes the first job");
    // 1 GPU x 1 h: a 10-minute budget. 8 GPUs x 2 h: 16 GPU-hours, a 160-minute budget.
    let small = h.submit(sized(1, Some(1.0)));
    let large = h.submit(sized(8, Some(2.0)));
    let a = h.drain();
    assert!(launches(&a).is_empty(), "nothing is bought inside either budget: {a:?}");
    assert_eq!(h.job(small).pending, PendingReason::WaitingForFixedCapacity);
    let a = h.run_until(599.0);
    assert!(launches(&a).is_empty(), "the small job's 10 minutes are not over: {a:?}");
    let a = h.run_until(600.0);
    assert_eq!(launches(&a).len(), 1, "the small job bursts at 10 minutes: {a:?}");
    let a = h.run_until(160.0 * 60.0 - 1.0);
    assert_eq!(launches(&a).len(), 0, "the large job still waits for owned capacity: {a:?}");
    assert_eq!(h.job(large).pending, PendingReason::WaitingForFixedCapacity);
    let a = h.run_until(160.0 * 60.0);
    assert_eq!(launches(&a).len(), 1, "the large job bursts when its 160 minutes are over: {a:?}");
}

#[test]
fn within_its_budget_a_job_takes_an_idle_cloud_node_only_if_it_ends_before_the_node_would_go() {
    let mut h = Harness::new(&config("").replace("idle_timeout_s = 86400", "idle_timeout_s = 1800"));
    let filler = h.submit(sized(8, Some(100.0)));
    h.drain();
    let first = h.submit(sized(8, Some(0.1)));
    // 0.8 GPU-hours: an 8-minute budget, then a node is bought and the job runs there.
    let a = h.run_until(480.0);
    let l = launches(&a);
    assert_eq!(l.len(), 1, "{a:?}");
    h.at(720.0);
    h.event(Event::NodeReady { node: l[0].0 });
    let p = started(&h.drain(), first).expect("the first job starts on its cloud node");
    let cloud_node = p[0].0;
    h.at(900.0);
    h.event(Event::JobExited { job: first, attempt: 1, success: true, exit: None });
    h.drain();
    // The cloud node is idle and goes at 900 + 1800 s. A 10-hour job inside its budget would keep it alive for
    // hours: it waits for owned capacity.
    let large = h.submit(sized(8, Some(10.0)));
    let a = h.run_until(1000.0);
    assert!(started(&a, large).is_none(), "the large job waits for owned capacity: {a:?}");
    // A 12-minute job ends before the node would go: it runs there at once, although its own budget has not run out.
    let short = h.submit(sized(8, Some(0.2)));
    let p = started(&h.drain(), short).expect("the short job takes the idle cloud node");
    assert_eq!(p[0].0, cloud_node);
    // Owned capacity frees up: the large job starts there at once.
    h.at(1100.0);
    h.event(Event::JobExited { job: filler, attempt: 1, success: true, exit: None });
    let p = started(&h.drain(), large).expect("the large job starts on the owned node");
    assert_eq!(h.node(p[0].0).market, Market::Fixed);
}

#[test]
fn a_cloud_node_kept_by_the_pools_minimum_is_used_within_the_budget() {
    let mut h = Harness::new(&config("min_nodes = 1"));
    let warm = launches(&h.drain());
    assert_eq!(warm.len(), 1, "the pool's minimum launches one node");
    h.at(240.0);
    h.event(Event::NodeReady { node: warm[0].0 });
    h.drain();
    let filler = h.submit(sized(8, Some(100.0)));
    assert!(started(&h.drain(), filler).is_some());
    // The minimum's node is paid for whatever happens: a job inside its budget may run there.
    let large = h.submit(sized(8, Some(10.0)));
    let p = started(&h.drain(), large).expect("the large job starts on the kept node at once");
    assert_eq!(h.node(p[0].0).market, Market::OnDemand);
}

#[test]
fn without_a_declared_duration_the_teams_history_sizes_the_budget() {
    // No history: an assumed hour, so an 8-GPU job waits 8 x 1 h x 10 min = 80 minutes.
    let mut h = Harness::new(&config(""));
    let filler = h.submit(sized(8, Some(100.0)));
    assert!(started(&h.drain(), filler).is_some());
    h.submit(sized(8, None));
    assert!(launches(&h.run_until(80.0 * 60.0 - 1.0)).is_empty());
    assert_eq!(launches(&h.run_until(80.0 * 60.0)).len(), 1, "an assumed hour: 80 minutes");

    // A job of the team that ran 3 hours and succeeded: the team's mean is 3 h, so the next undeclared 8-GPU job
    // waits 8 x 3 h x 10 min = 240 minutes.
    let mut h = Harness::new(&config(""));
    let short = h.submit(sized(8, None));
    assert!(started(&h.drain(), short).is_some());
    h.at(3.0 * 3600.0);
    h.event(Event::JobExited { job: short, attempt: 1, success: true, exit: None });
    h.drain();
    let filler = h.submit(sized(8, Some(100.0)));
    assert!(started(&h.drain(), filler).is_some());
    let probe = h.submit(sized(8, None));
    let t0 = h.t();
    let a = h.run_until(t0 + 240.0 * 60.0 - 1.0);
    assert!(launches(&a).is_empty(), "{a:?}");
    assert_eq!(h.job(probe).pending, PendingReason::WaitingForFixedCapacity);
    assert_eq!(launches(&h.run_until(t0 + 240.0 * 60.0)).len(), 1, "three hours of history: 240 minutes");
}

#[test]
fn a_gang_inside_its_budget_holds_owned_gpus_that_only_jobs_ending_before_it_may_use() {
    let mut h = Harness::new(&config(""));
    // The owned node's 8 GPUs: 4 taken for 2 hours.
    let filler = h.submit(sized(4, Some(2.0)));
    assert!(started(&h.drain(), filler).is_some());
    // An 8-GPU gang of 2 hours waits inside its budget (160 minutes) for the owned node, which drains at 2 hours:
    // it holds it.
    let gang = h.submit(sized(8, Some(2.0)));
    h.drain();
    assert_eq!(h.job(gang).pending, PendingReason::WaitingForFixedCapacity);
    // A 3-hour job would still run when the gang could start: it may not take the held GPUs.
    let long = h.submit(sized(2, Some(3.0)));
    let a = h.drain();
    assert!(started(&a, long).is_none(), "the long job does not take the held GPUs: {a:?}");
    // A 1-hour job ends before the filler does: it backfills the held node.
    let short = h.submit(sized(2, Some(1.0)));
    let p = started(&h.drain(), short).expect("the short job backfills");
    assert_eq!(h.node(p[0].0).market, Market::Fixed);
}

#[test]
fn a_gang_whose_budget_ends_before_the_owned_node_drains_holds_nothing() {
    let mut h = Harness::new(&config(""));
    let filler = h.submit(sized(4, Some(2.0)));
    assert!(started(&h.drain(), filler).is_some());
    // 8 GPUs for an hour: an 80-minute budget, over before the node drains at 2 hours. It will burst, so holding
    // the node would only keep other work off it.
    let gang = h.submit(sized(8, Some(1.0)));
    h.drain();
    assert_eq!(h.job(gang).pending, PendingReason::WaitingForFixedCapacity);
    let long = h.submit(sized(2, Some(3.0)));
    assert!(started(&h.drain(), long).is_some(), "the long job takes the free GPUs");
}

#[test]
fn a_job_past_its_estimate_frees_the_nodes_a_waiting_gang_held_at_that_instant_not_at_the_next_event() {
    // Four owned 1-GPU nodes. A 2-GPU job with no declared run time is expected to end after an hour; a 3-GPU
    // gang inside its budget holds the nodes expected to drain first (the two free ones and one of the job's),
    // so a 1-GPU job may not take the free ones. Once the first job is past its estimate, every node counts as
    // draining now, the gang holds nodes 0-2 and node 3 is free: the engine looks again at that instant.
    let toml = r#"
[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{ count = 4, gpus = 1 }]

[tiers.p2]
burst_after_s = 7200
"#;
    let mut h = Harness::new(toml);
    let first = h.submit(spec("p0", 1, 2));
    assert!(started(&h.drain(), first).is_some());
    h.at(3300.0);
    let gang = h.submit(spec("p2", 1, 3));
    h.drain();
    h.at(3480.0);
    let single = h.submit(spec("p2", 1, 1));
    let a = h.drain();
    assert!(started(&a, single).is_none(), "the free nodes are held for the gang: {a:?}");
    assert_eq!(h.job(gang).pending, PendingReason::WaitingForFixedCapacity);
    // Only the wake-ups the engine asks for, up to the first job's estimated end.
    let mut starts = Vec::new();
    while let Some(w) = h.wake().filter(|&w| w <= 3600.0) {
        h.at(w.max(h.t()));
        h.timeout();
        starts.extend(started(&h.drain(), single).map(|p| (h.t(), p)));
    }
    assert_eq!(starts.len(), 1, "the 1-GPU job starts when the estimate passes, on its own wake-up: {starts:?}");
    assert_eq!(starts[0].0, 3600.0);
}

#[test]
fn with_burst_early_a_job_owned_capacity_cannot_take_in_time_bursts_at_once() {
    let early = early_config();
    for (text, bursts_at_once) in [(config(""), false), (early, true)] {
        let mut h = Harness::new(&text);
        // The owned node is busy for 100 h; a job of 8 GPUs x 2 h has a 160-minute budget it cannot use there.
        let filler = h.submit(sized(8, Some(100.0)));
        assert!(started(&h.drain(), filler).is_some());
        let job = h.submit(sized(8, Some(2.0)));
        let a = h.drain();
        assert_eq!(launches(&a).len(), usize::from(bursts_at_once), "burst_early {bursts_at_once}: {a:?}");
        if !bursts_at_once {
            assert_eq!(h.job(job).pending, PendingReason::WaitingForFixedCapacity);
            assert_eq!(launches(&h.run_until(160.0 * 60.0)).len(), 1, "it bursts once its budget is over");
        } else {
            let said = h.records_of(spillway_core::DecisionKind::JobPending, "owned_capacity_too_late");
            assert_eq!(said.len(), 1, "the decision says why it stopped waiting");
        }
    }
    // Where the owned node frees within the budget, the job waits for it even with burst_early.
    let early = early_config();
    let mut h = Harness::new(&early);
    let filler = h.submit(sized(8, Some(1.0)));
    h.drain();
    let job = h.submit(sized(8, Some(2.0)));
    assert!(launches(&h.drain()).is_empty(), "the owned node frees in 1 h, inside the 160-minute budget");
    assert!(launches(&h.run_until(3600.0)).is_empty(), "it still waits for the owned node");
    h.event(Event::JobExited { job: filler, attempt: 1, success: true, exit: None });
    let a = h.drain();
    assert!(launches(&a).is_empty() && started(&a, job).is_some(), "{a:?}");
}

#[test]
fn with_burst_early_gpus_freed_beside_a_job_that_runs_on_count_and_only_a_job_left_waiting_is_told() {
    let early = early_config();
    let mut h = Harness::new(&early);
    // The owned node runs a 4-GPU job for 1 h and another for 100 h: 4 of its GPUs free in 1 h.
    let short = h.submit(sized(4, Some(1.0)));
    h.submit(sized(4, Some(100.0)));
    h.drain();
    // 4 GPUs x 2 h: an 80-minute budget, longer than the hour the short job has left: it waits.
    let job = h.submit(sized(4, Some(2.0)));
    assert!(launches(&h.drain()).is_empty(), "half the owned node frees inside its budget");
    assert_eq!(h.job(job).pending, PendingReason::WaitingForFixedCapacity);
    h.run_until(3000.0);
    h.event(Event::JobExited { job: short, attempt: 1, success: true, exit: None });
    let a = h.drain();
    assert!(launches(&a).is_empty() && started(&a, job).is_some(), "it starts on the owned node: {a:?}");
    // Beside a 100 h job, a 4-GPU job finds room at once: it is not told it stopped waiting for owned capacity,
    // though no more owned GPUs free inside its budget.
    let mut h = Harness::new(&early);
    h.submit(sized(4, Some(100.0)));
    h.drain();
    let job = h.submit(sized(4, Some(2.0)));
    let a = h.drain();
    assert!(launches(&a).is_empty() && started(&a, job).is_some(), "{a:?}");
    let said = h.records_of(spillway_core::DecisionKind::JobPending, "owned_capacity_too_late");
    assert!(said.is_empty(), "nobody stopped waiting: {said:?}");
}

#[test]
fn with_burst_early_a_job_started_earlier_in_the_same_pass_frees_its_gpus_when_expected() {
    let early = early_config();
    let mut h = Harness::new(&early);
    // Submitted together: the 4-GPU job takes the owned node for an hour; the 8-GPU job (a 160-minute budget)
    // could have the whole node after that hour, so it waits, though the pass that started the first is the one
    // that weighs it.
    let first = h.submit(sized(4, Some(1.0)));
    let second = h.submit(sized(8, Some(2.0)));
    let a = h.drain();
    assert!(started(&a, first).is_some() && launches(&a).is_empty(), "{a:?}");
    assert_eq!(h.job(second).pending, PendingReason::WaitingForFixedCapacity);
}

#[test]
fn a_job_whose_budget_grew_with_its_teams_history_is_not_told_its_old_budget_ended() {
    let mut h = Harness::new(&config(""));
    let first = h.submit(sized(4, None));
    h.submit(sized(4, Some(100.0)));
    h.drain();
    // No history yet: an assumed hour, so the 8-GPU job's budget ends at 80 minutes.
    let job = h.submit(sized(8, None));
    h.drain();
    // The first job ends after 70 minutes: the team's mean is 70 minutes, the budget now ends at 93 min 20 s.
    h.run_until(70.0 * 60.0);
    h.event(Event::JobExited { job: first, attempt: 1, success: true, exit: None });
    h.drain();
    // The pass at 80 minutes, which the old budget end asked for, finds it still inside its budget.
    let a = h.run_until(80.0 * 60.0);
    assert!(launches(&a).is_empty(), "{a:?}");
    assert_eq!(h.job(job).pending, PendingReason::WaitingForFixedCapacity, "its budget has 13 minutes left");
    assert!(launches(&h.run_until(93.0 * 60.0 + 19.0)).is_empty());
    let told = h.records_of(spillway_core::DecisionKind::JobPending, "no_capacity");
    assert!(told.is_empty(), "never told it waits for capacity inside its budget: {told:?}");
    assert_eq!(launches(&h.run_until(93.0 * 60.0 + 20.0)).len(), 1, "it bursts when the new budget ends");
}
