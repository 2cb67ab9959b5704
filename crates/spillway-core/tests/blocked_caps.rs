//! A pass stops after 256 blocked jobs that no pool can grow for (enough to find preemption candidates), but a
//! job that could buy capacity is never left behind them: past that cap the pass looks on for jobs that can.

mod common;

use common::{Harness, launches};
use spillway_core::JobSpec;

/// A spot pool capped at one node and an on-demand pool with room; with `greedy` deadlines a p1 job with a
/// deadline waits for spot (until its slack runs out), so once spot is full it can neither start nor buy.
const SPOT_FULL: &str = r#"
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
max_nodes = 8

[[pools]]
name = "spot"
market = "spot"
instance_types = ["v8"]
max_nodes = 1

[policy]
deadline_policy = "greedy"
"#;

/// A p1 job of 8 GPUs, with a deadline ten days out for an hour of work when `deadline`.
fn job(deadline: bool) -> JobSpec {
    let mut j = common::spec("p1", 8, 1);
    if deadline {
        j.deadline = Some(10 * 86_400_000);
        j.expected_duration_ms = Some(3_600_000);
    }
    j
}

#[test]
fn a_job_that_can_buy_is_reached_past_300_that_cannot() {
    let mut h = Harness::new(SPOT_FULL);
    h.submit(job(false));
    for _ in 0..300 {
        h.submit(job(true));
    }
    // The owned node runs the first; the spot pool buys its one node; 299 deadline jobs wait for spot.
    let first = launches(&h.run_until(120.0));
    assert!(first.iter().all(|&(_, pool, _)| pool == 2) && first.len() == 1, "{first:?}");
    h.at(121.0);
    let late = h.submit(job(false));
    let acts = h.run_until(300.0);
    let bought = launches(&acts);
    assert!(
        bought.iter().any(|&(_, pool, _)| pool == 1),
        "a job without a deadline, behind 299 that wait for spot, buys on-demand: {acts:?}"
    );
    assert_eq!(h.job(late).pending, spillway_core::PendingReason::WaitingForNodes);
}
