//! Spot faults through the whole simulator: a zone whose spot capacity is gone for six hours (a spot trace),
//! and Poisson interruption storms. Every job must still complete, with the engine's full invariant check after
//! every step, no p0 job may ever start on spot, and a seed always gives the same report.

use spillway_core::time::secs;
use spillway_core::{Config, DecisionKind, JobState, Market, NodeState};
use spillway_sim::input::{SimJob, to_sim_jobs};
use spillway_sim::report::RunReport;
use spillway_sim::run::run_report;
use spillway_sim::sim::{Check, SimError, SimOptions, SimOutcome, simulate};
use spillway_sim::spot::{OfferingTrace, parse_json};
use spillway_sim::trace::{native, workload::Bursty};
use std::time::Duration;

/// 32 owned GPUs, and on-demand and spot pools of 8-GPU and 1-GPU V100 instances. `{spot}` takes extra keys of
/// the spot pool.
const CONFIG: &str = r#"
[cluster]
start = "2025-01-06T00:00:00Z"

[[instance_types]]
name = "p3.16xlarge"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.48
spot_usd_per_hour = 4.52

[[instance_types]]
name = "p3.2xlarge"
gpus = 1
gpu_model = "V100"
on_demand_usd_per_hour = 3.06
spot_usd_per_hour = 0.64

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 0.90
nodes = [{ count = 4, gpus = 8, gpu_model = "V100" }]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["p3.16xlarge", "p3.2xlarge"]
max_nodes = 64

[[pools]]
name = "spot"
market = "spot"
instance_types = ["p3.16xlarge", "p3.2xlarge"]
max_nodes = 48
{spot}
"#;

fn config(spot_keys: &str) -> Config {
    let text = CONFIG.replace("{spot}", spot_keys);
    Config::parse("spot_faults.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

/// The bursty day of 300 jobs, seed 3.
fn workload(cfg: &Config) -> Vec<SimJob> {
    let trace = Bursty { jobs: 300, days: 1.0, seed: 3 }.generate();
    to_sim_jobs(&trace, cfg).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs the simulator on another thread and fails the test if it has not returned within `limit` (a job that
/// never ends would otherwise keep the event loop sampling forever).
fn simulate_within(cfg: &Config, jobs: &[SimJob], opts: &SimOptions, limit: Duration) -> SimOutcome {
    let (cfg, jobs, opts) = (cfg.clone(), jobs.to_vec(), opts.clone());
    let (tx, rx) = std::sync::mpsc::channel::<Result<SimOutcome, SimError>>();
    std::thread::spawn(move || {
        let _ = tx.send(simulate(&cfg, &jobs, &opts));
    });
    match rx.recv_timeout(limit) {
        Ok(r) => r.unwrap_or_else(|e| panic!("simulation failed: {e}")),
        Err(_) => panic!("the simulation did not finish within {limit:?}: some job never completes"),
    }
}

/// Checks that every submitted job completed and none was lost.
fn assert_all_complete(r: &RunReport, what: &str) {
    assert_eq!(r.jobs_lost, 0, "{what}");
    assert_eq!(r.jobs_failed, 0, "{what}");
    assert_eq!(r.jobs_unfinished, 0, "{what}");
    assert_eq!(r.jobs_completed, r.jobs_submitted, "{what}");
}

/// Checks from the decision records that no p0 job ever started on a spot pool: every `job_started` record
/// names its pool, and each job has one record per attempt.
fn assert_no_p0_on_spot(cfg: &Config, out: &SimOutcome, what: &str) {
    let c = out.engine.cluster();
    let spot_pools: Vec<&str> =
        cfg.pools.iter().filter(|p| p.market == Market::Spot).map(|p| p.name.as_str()).collect();
    let mut starts = vec![0u32; c.jobs.len()];
    let mut p0_starts = 0;
    for d in out.decisions.iter().filter(|d| d.kind == DecisionKind::JobStarted) {
        let id: usize = d
            .subject
            .strip_prefix("job:")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{what}: subject {}", d.subject));
        let pool = d
            .detail
            .split_once(" of pool ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{what}: a job_started record that names no pool: {}", d.detail));
        assert!(cfg.pools.iter().any(|p| p.name == pool), "{what}: unknown pool `{pool}` in {}", d.detail);
        starts[id] += 1;
        let job = &c.jobs[id];
        if cfg.tiers[job.tier].name == "p0" {
            p0_starts += 1;
            assert!(
                !spot_pools.contains(&pool),
                "{what}: p0 job {id} started on spot pool {pool} at {}: {}",
                d.at,
                d.detail
            );
        }
    }
    for j in &c.jobs {
        assert_eq!(
            starts[j.id.0 as usize], j.attempt,
            "{what}: job {} has {} start records for {} attempts",
            j.id.0, starts[j.id.0 as usize], j.attempt
        );
        if cfg.tiers[j.tier].name == "p0" {
            assert_eq!(j.interruptions, 0, "{what}: p0 job {} was interrupted on spot", j.id.0);
        }
    }
    assert!(p0_starts > 0, "{what}: the workload has p0 jobs");
}

// ---- A zone without spot capacity ----

/// A day of 10-minute ticks: spot obtainable except from 10:00 to 16:00 (ticks 60..96), repeating.
fn empty_zone_trace() -> spillway_sim::spot::SpotTrace {
    let data: Vec<String> = (0..144).map(|i| if (60..96).contains(&i) { "0" } else { "1" }.to_string()).collect();
    let text = format!(r#"{{"metadata": {{"gap_seconds": 600}}, "data": [{}]}}"#, data.join(", "));
    parse_json("empty-zone.json", &text, spillway_sim::spot::Polarity::Available).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_zone_empty_for_six_hours_interrupts_spot_and_every_job_still_completes() {
    let cfg = config("");
    let jobs = workload(&cfg);
    let trace = empty_zone_trace();
    let spot_traces = ["p3.16xlarge", "p3.2xlarge"]
        .into_iter()
        .map(|it| OfferingTrace { pool: "spot".into(), instance_type: it.into(), trace: trace.clone() })
        .collect();
    let opts = SimOptions { seed: 7, record: true, check: Check::Full, spot_traces, ..SimOptions::default() };
    let out = simulate_within(&cfg, &jobs, &opts, Duration::from_secs(600));
    let r = run_report("spillway", &cfg, &out);
    println!(
        "empty zone: {} interruptions, {} launch failures, {:.1} GPU-hours lost, {} fallbacks, cost {:?}",
        r.interruptions, r.launch_failures, r.lost_gpu_hours, r.fallback_events, r.cost_by_market
    );
    assert_all_complete(&r, "empty zone");
    assert!(r.interruptions > 0, "the zone emptied under running spot nodes: {} interruptions", r.interruptions);
    assert!(r.launch_failures > 0, "launches into the empty zone fail: {}", r.launch_failures);
    assert!(r.cost_by_market.spot > 0.0 && r.cost_by_market.on_demand > 0.0, "{:?}", r.cost_by_market);
    assert_no_p0_on_spot(&cfg, &out, "empty zone");

    // No spot node is up while the zone is empty: every one alive at 10:00 got its notice then and was
    // reclaimed 120 s later, and none became ready before 16:00.
    let c = out.engine.cluster();
    let (gone, back) = (cfg.start_ms + secs(10.0 * 3600.0 + 120.0), cfg.start_ms + secs(16.0 * 3600.0));
    for n in c.nodes.iter().filter(|n| n.market == Market::Spot) {
        let Some(ready) = n.ready_at else { continue };
        let end = n.ended_at.unwrap_or(i64::MAX);
        assert!(
            end <= gone || ready >= back,
            "spot node {} up from {} to {} s inside the empty window",
            n.id.0,
            (ready - cfg.start_ms) / 1000,
            (end - cfg.start_ms) / 1000
        );
    }
    assert!(c.nodes.iter().any(|n| n.market == Market::Spot && n.state == NodeState::Lost), "reclaimed spot nodes");
}

// ---- Poisson storms ----

/// Spot nodes interrupted twice an hour on average, with 30 s notices (GCP, Azure): too short for a checkpoint
/// on the signal, so interrupted attempts lose their work since the last interval checkpoint.
const STORMY: &str = "interruption_rate_per_hour = 2.0\ninterruption_notice_s = 30";

fn stormy_run(seed: u64) -> (Config, SimOutcome) {
    let cfg = config(STORMY);
    let jobs = workload(&cfg);
    let opts = SimOptions { seed, record: true, check: Check::Full, ..SimOptions::default() };
    let out = simulate_within(&cfg, &jobs, &opts, Duration::from_secs(600));
    (cfg, out)
}

#[test]
fn poisson_interruption_storms_lose_work_but_every_job_completes() {
    let (cfg, out) = stormy_run(4);
    let r = run_report("spillway", &cfg, &out);
    println!(
        "storms: {} interruptions, {:.1} GPU-hours lost, {} fallbacks, cost {:?}",
        r.interruptions, r.lost_gpu_hours, r.fallback_events, r.cost_by_market
    );
    assert_all_complete(&r, "storms");
    assert!(r.interruptions > 0, "no interruption at 2 per node-hour");
    assert!(r.notices_acted_on > 0);
    assert!(r.lost_gpu_hours > 0.0, "30 s notices leave no time to checkpoint, yet no work was lost");
    assert!(r.fallback_events > 0, "p1 jobs move to on-demand after 3 interruptions, offerings back off");
    assert_no_p0_on_spot(&cfg, &out, "storms");
    let c = out.engine.cluster();
    assert!(c.jobs.iter().all(|j| j.state == JobState::Succeeded));
    // A p1 job interrupted max_spot_interruptions times ran its last attempt on-demand.
    for j in c.jobs.iter().filter(|j| j.pinned_on_demand && j.spec.deadline.is_none()) {
        let last = j.placement.first().map(|(n, _)| c.nodes[n.0 as usize].market);
        assert!(last.is_none_or(|m| m != Market::Spot), "job {} pinned on-demand but ended on spot", j.id.0);
    }
}

#[test]
fn poisson_storms_with_the_same_seed_give_the_same_report() {
    let run = |seed| {
        let (cfg, out) = stormy_run(seed);
        serde_json::to_string(&run_report("spillway", &cfg, &out)).unwrap()
    };
    let (a, b) = (run(9), run(9));
    assert!(a == b, "two runs of seed 9 differ:\n{a}\n{b}");
    assert!(a != run(10), "another seed draws other interruptions");
}

// ---- Deadlines given by a trace ----

#[test]
fn a_trace_deadline_counts_from_the_trace_start() {
    let cfg = config("");
    // One 8-GPU p1 job of an hour with a day of slack: spot is fine for it.
    let text = "job_id,submit_s,duration_s,gpus,tier,deadline_s\ntrain,0,3600,8,p1,86400\n";
    let trace = native::parse_str("deadline.csv", text).unwrap();
    let jobs = to_sim_jobs(&trace, &cfg).unwrap();
    let filler: Vec<SimJob> = (0..4)
        .map(|i| {
            let mut j = jobs[0].clone();
            j.spec.name = format!("filler-{i}").into();
            j.spec.tier = "p0".into();
            j.spec.deadline = None;
            j
        })
        .collect();
    // The four fillers take the fixed nodes first, so the deadline job needs cloud capacity.
    let mut all = filler;
    all.extend(jobs.iter().cloned());
    let opts = SimOptions { record: true, check: Check::Full, ..SimOptions::default() };
    let out = simulate_within(&cfg, &all, &opts, Duration::from_secs(120));
    let r = run_report("spillway", &cfg, &out);
    assert_all_complete(&r, "deadline");
    let job = out.engine.cluster().jobs.iter().find(|j| j.spec.name == "train").unwrap();
    assert_eq!(
        job.spec.deadline,
        Some(cfg.start_ms + secs(86_400.0)),
        "deadline_s 86400 is a day after the trace start (the job pinned on-demand: {}, deadline misses {})",
        job.pinned_on_demand,
        r.deadline_misses
    );
    assert!(!job.pinned_on_demand, "a day of slack for an hour of work: pinned to on-demand at submission");
    assert_eq!(
        r.deadline_misses,
        0,
        "the job ended {} s after the start",
        job.ended.map_or(-1, |e| (e - cfg.start_ms) / 1000)
    );
}
