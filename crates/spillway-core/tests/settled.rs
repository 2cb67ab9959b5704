//! Once no capacity is left that a job further on could start on or preempt for, a pass looks on only at jobs
//! that may buy and at timed ones. The jobs it passes by still get what they would have had: a wake-up when a
//! pool they may use leaves its cooldown, a pending reason, and a place in what-if answers.

mod common;

use common::{Harness, launches, spec};
use spillway_core::{PendingReason, PoolChange};

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
