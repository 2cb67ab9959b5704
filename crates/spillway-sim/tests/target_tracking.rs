//! Target tracking in the simulator: on a synthetic ramp of long 8-GPU jobs, a pool with a GPU-utilization target
//! holds its average utilization near the target by adding nodes beyond what the queue needs; without a target
//! the pool holds one node per job.

use spillway_core::time::secs;
use spillway_core::{Config, JobId, JobSpec};
use spillway_sim::input::SimJob;
use spillway_sim::sim::{SimOptions, job_utilization, simulate};

const CONFIG: &str = "[[instance_types]]\nname = \"g8\"\ngpus = 8\ngpu_model = \"V100\"\non_demand_usd_per_hour = 24.0\n\
[[pools]]\nname = \"onprem\"\nmarket = \"fixed\"\ngpu_usd_per_hour = 1.0\nnodes = [{ count = 1, gpus = 1 }]\n\
[[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"g8\"]\nmax_nodes = 60\n";

/// Twenty 8-GPU p0 jobs, one every 30 minutes, each running two days.
fn ramp() -> Vec<SimJob> {
    (0..20)
        .map(|i| SimJob {
            submit_ms: secs(1800.0 * i as f64),
            duration_ms: secs(48.0 * 3600.0),
            spec: JobSpec {
                name: format!("train-{i}").into(),
                tier: "p0".into(),
                team: "default".into(),
                gpus_per_worker: 8,
                workers: 1,
                min_workers: None,
                gpu_model: None,
                interruptible: None,
                checkpoint_interval_ms: None,
                deadline: None,
                expected_duration_ms: None,
                checkpoint_gb: None,
                data_region: None,
            },
            serial_fraction: 0.0,
        })
        .collect()
}

/// Returns the od pool's nodes 30 hours in (all 20 jobs running), from the run's time series.
fn nodes_at_30h(text: &str) -> f64 {
    let cfg = Config::parse("tt.toml", text).unwrap();
    let out = simulate(&cfg, &ramp(), &SimOptions::default()).unwrap();
    let col = out.series.columns.iter().position(|c| c == "pool:od:nodes").unwrap();
    let row = out.series.rows.iter().find(|r| r[0] >= 30.0 * 3600.0).unwrap();
    assert_eq!(out.engine.cluster().jobs.iter().filter(|j| j.state == spillway_core::JobState::Succeeded).count(), 20);
    row[col]
}

#[test]
fn a_pool_tracks_its_utilization_target_on_a_ramp() {
    let target = 0.5;
    let plain = nodes_at_30h(CONFIG);
    let tracked = nodes_at_30h(&format!("{CONFIG}target_gpu_utilization = {target}\n"));
    // Each job fills a node; its GPUs run at the job's utilization (seeded, 0.5-0.95).
    let busy: f64 = (0..20).map(|i| job_utilization(1, JobId(i))).sum();
    let (plain_util, tracked_util) = (busy / plain, busy / tracked);
    println!("nodes {plain} -> {tracked}; average utilization {plain_util:.3} -> {tracked_util:.3} (target {target})");
    assert_eq!(plain, 20.0, "queue-driven alone: one node per job");
    assert!(tracked > plain, "target tracking adds nodes beyond the queue's need");
    assert!(
        (tracked_util - target).abs() <= 0.05,
        "average utilization {tracked_util:.3} is not near the target {target}"
    );
}

/// A pool with step-scaling bands alone (no utilization target) gets utilization samples in simulation, as in the
/// daemon (one rule of the core decides whose samples are sent), so its bands act: busy nodes above the band add a
/// node beyond what the queue needs.
#[test]
fn a_pool_with_step_bands_alone_acts_in_simulation() {
    let plain = nodes_at_30h(CONFIG);
    let banded = nodes_at_30h(&format!("{CONFIG}step_scaling = [{{ above = 0.4, hold_s = 300, adjust_nodes = 1 }}]\n"));
    println!("nodes {plain} -> {banded} with a band above 40% utilization");
    assert!(banded > plain, "the step band never acted: {banded} nodes vs {plain}");
}
