//! A deadline job whose data is far from spot, as a user states it: it never goes where moving its data would
//! leave it too little slack to reach its deadline, neither on its first start nor on a move back to spot from
//! its reserve. On-demand is in us-east-1 with the job's 5 TB checkpoint; spot only in us-east-2; every move
//! takes 4,000 s (10 Gbit/s); a 20 h job is due in 23 h; spot is up for a while mid-run, then gone for good.

mod common;

use spillway_core::Config;
use spillway_core::time::secs;
use spillway_sim::sim::{SimOptions, simulate};
use spillway_sim::spot::{OfferingTrace, Polarity, parse_json};

const CONFIG: &str = r#"
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
max_nodes = 2
boot_latency_s = 600
idle_timeout_s = 0
region = "us-east-1"

[[pools]]
name = "sb"
market = "spot"
instance_types = ["a8"]
max_nodes = 2
boot_latency_s = 600
idle_timeout_s = 0
region = "us-east-2"

[network]
transfer_gbps = 10
"#;

/// Returns (finished by its deadline, GPU-hours bought on spot) for the job when spot in us-east-2 can be had
/// from `up_s` to `down_s` only, under the default policy or with `trips` reserve trips.
fn run(up_s: u32, down_s: u32, trips: Option<u32>) -> (bool, f64) {
    let text = match trips {
        Some(t) => format!("{CONFIG}\n[policy]\ndeadline_reserve_trips = {t}\n"),
        None => CONFIG.to_string(),
    };
    let cfg = Config::parse("regions.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    let ticks: Vec<String> =
        (0..1666u32).map(|i| if (up_s..down_s).contains(&(i * 60)) { "1" } else { "0" }.to_string()).collect();
    let json = format!("{{\"metadata\": {{\"gap_seconds\": 60}}, \"data\": [{}]}}", ticks.join(","));
    let trace = parse_json("sb.json", &json, Polarity::Available).unwrap_or_else(|e| panic!("{e}"));
    let mut job = common::deadline_job(cfg.start_ms, 23.0, secs(20.0 * 3600.0));
    job.spec.checkpoint_gb = Some(5000.0);
    job.spec.data_region = Some("us-east-1".into());
    let t = OfferingTrace { pool: "sb".into(), instance_type: "a8".into(), trace };
    let opts = SimOptions { spot_traces: vec![t], ..SimOptions::default() };
    let out = simulate(&cfg, &[job], &opts).unwrap_or_else(|e| panic!("{e}"));
    let c = out.engine.cluster();
    let j = &c.jobs[0];
    (j.ended.is_some_and(|e| Some(e) <= j.spec.deadline), c.ledger.node_ms_by_market[2] as f64 / 3_600_000.0 * 8.0)
}

#[test]
fn a_deadline_job_never_moves_its_data_where_the_move_would_make_it_miss() {
    // Spot comes back after the job has spent most of its slack (on reserve, it is on on-demand then), or
    // early enough that a first start there looks cheap: either way the two moves (there, and back when spot
    // goes) cost 8,000 s of its 10,800 s of slack.
    for (up, down) in [(10_020, 17_040), (6_000, 17_040)] {
        for trips in [None, Some(0)] {
            let (met, _) = run(up, down, trips);
            assert!(met, "spot from {up} s to {down} s, reserve trips {trips:?}: missed its deadline");
        }
    }
}

#[test]
fn a_deadline_job_with_slack_for_the_moves_still_uses_far_spot() {
    // Spot from the start, for good: moving there once and staying fits its slack.
    let (met, spot_gpu_h) = run(0, 99_960, None);
    assert!(met);
    assert!(spot_gpu_h > 100.0, "it ran on spot: {spot_gpu_h:.0} GPU-hours");
}
