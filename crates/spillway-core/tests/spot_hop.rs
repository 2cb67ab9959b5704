//! Moving to cheaper spot, as a user states it: a job that an outage sent to a dear spot zone moves to a cheaper
//! one once it has capacity, when what that zone saves over the job's remaining work pays the move of its data
//! and a restart; it keeps running until the new node is ready (make before break), and loses no work. A job
//! whose data would cost more to move than the cheaper zone saves stays where it is.

use spillway_core::{Action, DecisionKind, JobId, StopReason};

mod common;
use common::*;

const REGIONS: &str = r#"
[tiers.p1]
burst_after_s = 0

[[instance_types]]
name = "a8"
gpus = 8
gpu_model = "H100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 12.0

[[pools]]
name = "od-east"
market = "on_demand"
instance_types = ["a8"]
max_nodes = 4
region = "us-east-1"

[[pools]]
name = "spot-east"
market = "spot"
instance_types = ["a8"]
max_nodes = 4
region = "us-east-1"
zone = "us-east-1a"
spot_usd_per_hour = { a8 = 10.0 }

[[pools]]
name = "spot-west"
market = "spot"
instance_types = ["a8"]
max_nodes = 4
region = "us-west-2"
zone = "us-west-2b"
spot_usd_per_hour = { a8 = 9.0 }
"#;

const EAST: usize = 1;
const WEST: usize = 2;

/// Runs an 8-GPU p1 job of 100 hours with `gb` of data in us-east-1 for two hours while the cheaper west zone has
/// no capacity for its first 10 minutes (launches there fail; elsewhere nodes boot in a minute).
fn run(gb: f64) -> (Harness, JobId, Vec<Action>) {
    let mut h = Harness::new(REGIONS);
    let mut s = spec("p1", 8, 1);
    s.expected_duration_ms = Some(100 * 3_600_000);
    s.checkpoint_gb = Some(gb);
    s.data_region = Some("us-east-1".into());
    let job = h.submit(s);
    let a = h.run_cloud(7_200.0, &|now, pool, _| if pool == WEST && now < 600.0 { None } else { Some(60.0) });
    (h, job, a)
}

/// Returns the pools job `job` started in, in order.
fn started_in(h: &Harness, a: &[Action], job: JobId) -> Vec<usize> {
    starts(a).iter().filter(|s| s.0 == job).map(|s| h.node(s.2[0].0).pool).collect()
}

#[test]
fn a_job_on_a_dear_spot_zone_moves_to_a_cheaper_one_once_it_has_capacity() {
    // 50 GB: $1 of egress and 40 s of transfer against $1 an hour saved over 100 hours.
    let (h, job, a) = run(50.0);
    assert_eq!(started_in(&h, &a, job), vec![EAST, WEST], "{a:?}");
    let moved: Vec<_> = stops(&a).into_iter().filter(|s| s.0 == job).collect();
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert_eq!(moved[0].2, StopReason::Migrated, "a move by choice checkpoints first: {moved:?}");
    assert_eq!(h.records_of(DecisionKind::Fallback, "cheaper_spot").len(), 1);
    // Make before break: the west node was ready before the job left east, so it waited only its checkpoint.
    let j = h.job(job);
    assert_eq!(j.attempt, 2);
    assert!(j.queued_since > 600_000, "it moved after west had capacity");
    assert_eq!(h.e.cluster().counters.lost_gpu_ms, 0, "no work lost");
    assert_eq!(j.data_at(), Some("us-west-2"));
}

#[test]
fn a_job_whose_data_costs_more_to_move_than_the_cheaper_zone_saves_stays() {
    // 5,000 GB: $100 of egress and 4,000 s of transfer against at most $100 saved over 100 hours.
    let (h, job, a) = run(5_000.0);
    assert_eq!(started_in(&h, &a, job), vec![EAST], "{a:?}");
    assert!(h.records_of(DecisionKind::Fallback, "cheaper_spot").is_empty());
    let west_launches = launches(&a).iter().filter(|l| l.1 == WEST).count();
    // Its first start tries west (cheaper, and the move spread over 100 hours pays), then nothing asks again.
    assert!(west_launches <= 1, "no node is bought in west for a move that does not pay: {west_launches}");
}
