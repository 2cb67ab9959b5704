//! Benchmarks that print figures: simulated events per second and wall time for the Alibaba trace (all policies)
//! and for a generated 1,000,000-job trace, and the time of one scheduling + scaling decision with 100,000
//! queued jobs over 10,000 nodes. Each figure comes with a ratio against a reference measured in the same run
//! (sorting 1,000,000 seeded u64s), since absolute times are noisy on shared machines.
//!
//! Run: `cargo bench -p spillway-sim --bench sim` (add `-- --quick` for 100,000 generated jobs instead of 1M).
//! The hard cases (long queues) are in the `hard` and `overload` benches.

// A benchmark measures wall time; the clock ban is for the functional core and the simulator.
#![allow(clippy::disallowed_methods)]

mod common;

use rand::{Rng, SeedableRng};
use spillway_core::{Config, Engine, JobSpec};
use spillway_sim::input::to_sim_jobs;
use spillway_sim::report::InputReport;
use spillway_sim::sim::{SimOptions, simulate};
use spillway_sim::trace::{self, TraceFormat, workload::Bursty};
use std::path::Path;
use std::time::Instant;

fn reference_s() -> f64 {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut v: Vec<u64> = (0..1_000_000).map(|_| rng.random()).collect();
    let t = Instant::now();
    v.sort_unstable();
    std::hint::black_box(&v);
    t.elapsed().as_secs_f64()
}

fn config(path: &str) -> Config {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {}: {e}", full.display()));
    Config::parse(path, &text).unwrap_or_else(|e| panic!("{e}"))
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let r = reference_s();
    println!("reference: sort 1,000,000 u64 = {:.4} s", r);

    let alibaba = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/jobs/openb_pod_list_default.csv");
    if alibaba.exists() {
        let cfg = config("examples/alibaba-16gpu.toml");
        let trace = trace::load(&alibaba, TraceFormat::Alibaba2023).unwrap_or_else(|e| panic!("{e}"));
        let jobs = to_sim_jobs(&trace, &cfg).unwrap_or_else(|e| panic!("{e}"));
        let t = Instant::now();
        let cmp = spillway_sim::run::compare(&cfg, &jobs, InputReport::default(), &SimOptions::default(), |_| {})
            .unwrap_or_else(|e| panic!("{e}"));
        let wall = t.elapsed().as_secs_f64();
        let events: u64 = cmp.report.runs.iter().map(|r| r.events).sum();
        println!(
            "alibaba v2023 ({} jobs), {} policies + bound: {:.3} s wall, {} steps, {:.0} steps/s, {:.1}x reference",
            jobs.len(),
            cmp.report.runs.len(),
            wall,
            events,
            events as f64 / wall,
            wall / r
        );
    } else {
        println!("skipping alibaba: {} not found", alibaba.display());
    }

    let n = if quick { 100_000 } else { 1_000_000 };
    let cfg = config("examples/hybrid.toml");
    let t = Instant::now();
    // The default week's load (2,000 jobs a week) stretched over as many weeks as it takes.
    let trace = Bursty { jobs: n, days: n as f64 / 2000.0 * 7.0, seed: 1 }.generate();
    let jobs = to_sim_jobs(&trace, &cfg).unwrap_or_else(|e| panic!("{e}"));
    let gen_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let out = simulate(&cfg, &jobs, &SimOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let wall = t.elapsed().as_secs_f64();
    println!(
        "generated {n} jobs ({gen_s:.2} s to generate), spillway policy: {:.2} s wall, {} steps, {:.0} steps/s, {:.1}x reference",
        wall,
        out.events,
        out.events as f64 / wall,
        wall / r
    );
    println!("  {}", common::queue_stats(&out));

    big_decision(r);
}

/// One decision pass with 100,000 queued jobs over 10,000 busy 8-GPU nodes (and cloud pools at their max).
fn big_decision(r: f64) {
    let text = r#"
[[instance_types]]
name = "g8"
gpus = 8
gpu_model = "A100"
on_demand_usd_per_hour = 20.0
spot_usd_per_hour = 6.0
[[pools]]
name = "fixed"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{ count = 10000, gpus = 8, gpu_model = "A100" }]
[[pools]]
name = "od"
market = "on_demand"
instance_types = ["g8"]
max_nodes = 100
[[pools]]
name = "spot"
market = "spot"
instance_types = ["g8"]
max_nodes = 100
"#;
    let cfg = Config::parse("bench", text).unwrap_or_else(|e| panic!("{e}"));
    let mut e = Engine::new(cfg, 0);
    e.set_recording(false);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let spec = |i: usize, tier: &str, gpus: u32| JobSpec {
        name: format!("j{i}").into(),
        tier: tier.into(),
        team: format!("team{}", i % 8).into(),
        gpus_per_worker: gpus,
        workers: 1,
        min_workers: None,
        gpu_model: None,
        interruptible: None,
        checkpoint_interval_ms: None,
        deadline: None,
        expected_duration_ms: None,
        checkpoint_gb: None,
        data_region: None,
    };
    // Fill every node with p2 work so nothing fits without preemption.
    for i in 0..10_000 {
        let _ = e.submit(0, spec(i, "p2", 8));
    }
    // A pass examines at most `scan_limit` jobs; pass until the fill is placed.
    while e.queued() > 0 {
        e.handle_timeout(0);
        while e.poll_action().is_some() {}
    }
    for i in 0..100_000 {
        let tier = ["p0", "p1", "p2"][rng.random_range(0..3)];
        let gpus = [1, 2, 4, 8][rng.random_range(0..4)];
        let _ = e.submit(1_000 + i as i64, spec(10_000 + i, tier, gpus));
    }
    // The same pass on 9 copies of the engine (`SPILLWAY_BENCH_DECISIONS=N`: N, for a profiler): one pass is
    // short and this machine is noisy, so the median.
    let runs = std::env::var("SPILLWAY_BENCH_DECISIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(9usize).max(1);
    let mut times = Vec::new();
    let mut actions = 0;
    for _ in 0..runs {
        let mut e = e.clone();
        // A clone's node table has no room to spare, unlike a running engine's, whose table grows by doubling:
        // without this the pass's first launch would copy all 10,000 nodes, once per clone.
        e.reserve_nodes(256);
        let t = Instant::now();
        e.handle_timeout(1_000_000);
        actions = 0;
        while e.poll_action().is_some() {
            actions += 1;
        }
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let (d, lo, hi) = (times[runs / 2], times[0], times[runs - 1]);
    println!(
        "one scheduling + scaling decision, {} queued jobs over 10,000 nodes: {:.2} ms median of {runs} ({:.2}-{:.2}; \
         {actions} actions), {:.3}x reference (target: under 1 ms)",
        e.queued(),
        d * 1000.0,
        lo * 1000.0,
        hi * 1000.0,
        d / r
    );
}
