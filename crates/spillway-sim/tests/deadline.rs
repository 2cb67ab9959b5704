//! A single 40-hour, 8-GPU job with a deadline of 1.5x its run time, replayed over every spot trace in
//! ../shared/traces/spot: the deadline-aware policy never misses, and never costs more than always-on-demand.
//! Prints its cloud cost beside always-on-demand and greedy spot-until-late.

use spillway_core::Config;
use spillway_core::time::secs;
use spillway_sim::input::SimJob;
use spillway_sim::sim::{SimOptions, simulate};
use spillway_sim::spot::{OfferingTrace, load_json};
use std::path::{Path, PathBuf};

const CONFIG: &str = r#"
[[instance_types]]
name = "p3.16xlarge"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.48
spot_usd_per_hour = 4.52

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 0.0
nodes = [{ count = 1, gpus = 1 }]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["p3.16xlarge"]
max_nodes = 2

[[pools]]
name = "spot"
market = "spot"
instance_types = ["p3.16xlarge"]
max_nodes = 2
"#;

fn traces() -> Option<Vec<PathBuf>> {
    let dir = spillway_sim::shared("traces/spot")?;
    let mut files = Vec::new();
    for sub in ["aws_2022-10-26_2week_k80_v100_availability", "aws_2023-08-03_4node_v100_preemption"] {
        let Ok(rd) = std::fs::read_dir(dir.join(sub)) else { continue };
        files
            .extend(rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")));
    }
    files.sort();
    Some(files)
}

/// Returns (cloud cost USD, finished by the deadline) for one policy over one trace.
fn run(policy: &str, trace: &Path) -> (f64, bool) {
    let mut text = CONFIG.to_string();
    if policy == "greedy" {
        text += "[policy]\ndeadline_policy = \"greedy\"\n";
    }
    let mut cfg = Config::parse("deadline.toml", &text).unwrap();
    if policy == "on-demand" {
        cfg.pools.retain(|p| p.name != "spot");
        cfg.tiers.iter_mut().for_each(|t| t.markets.retain(|m| *m != spillway_core::Market::Spot));
    }
    let duration = secs(40.0 * 3600.0);
    let spec = spillway_core::JobSpec {
        name: "train".into(),
        tier: "p1".into(),
        team: "default".into(),
        gpus_per_worker: 8,
        workers: 1,
        min_workers: None,
        gpu_model: None,
        interruptible: Some(true),
        checkpoint_interval_ms: None,
        deadline: Some(cfg.start_ms + duration * 3 / 2),
        expected_duration_ms: Some(duration),
    };
    let jobs = vec![SimJob { submit_ms: 0, duration_ms: duration, spec, serial_fraction: 0.0 }];
    let t =
        OfferingTrace { pool: "spot".into(), instance_type: "p3.16xlarge".into(), trace: load_json(trace).unwrap() };
    let opts = SimOptions { spot_traces: vec![t], ..SimOptions::default() };
    let out = simulate(&cfg, &jobs, &opts).unwrap();
    let c = out.engine.cluster();
    let j = &c.jobs[0];
    let met = j.ended.is_some_and(|e| e <= j.spec.deadline.unwrap());
    (c.ledger.by_market[1] + c.ledger.by_market[2], met)
}

#[test]
fn a_deadline_job_never_misses_and_never_costs_more_than_on_demand() {
    let Some(files) = traces() else { return };
    assert!(!files.is_empty(), "no spot traces found");
    println!("{:<40} {:>14} {:>14} {:>18}", "trace", "on-demand USD", "spillway USD", "greedy USD (met)");
    for f in files {
        let (od, od_met) = run("on-demand", &f);
        let (ours, met) = run("spillway", &f);
        let (greedy, greedy_met) = run("greedy", &f);
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        println!("{name:<40} {od:>14.0} {ours:>14.0} {greedy:>12.0} ({greedy_met})");
        assert!(od_met, "{name}: always-on-demand missed");
        assert!(met, "{name}: the deadline-aware policy missed its deadline");
        assert!(ours <= od + 1e-6, "{name}: {ours} > always-on-demand {od}");
    }
}
