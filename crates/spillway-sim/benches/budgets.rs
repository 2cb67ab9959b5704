//! The waiting-budget benchmark: the overload workload (a 2.5x surge, then weekdays at about what the cluster runs)
//! sized against a 3,200-GPU owned pool whose `p1` and `p2` jobs wait an hour plus 10 minutes per GPU-hour for
//! owned capacity before on-demand capacity is bought (`examples/budgets-queue.toml`), so thousands of jobs wait
//! inside their budgets at once (a pass passes them by only where no job could start any more, and every pass looks
//! at those of a `burst_early` tier). Runs the `spillway` policy with
//! the budgets, then on the same trace with every budget 0 (bursting at once, a short queue) as the in-run
//! reference for what the budgets cost, then with `burst_early` on `p1` and `p2`; prints each run's wall time,
//! steps, queue and cost, and the ratios to the no-budget run and to sorting 1,000,000 seeded u64s.
//!
//! Run: `cargo bench -p spillway-sim --bench budgets`. `SPILLWAY_BENCH_JOBS=N` generates N jobs (default 100,000).

// A benchmark measures wall time; the clock ban is for the functional core and the simulator.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{job_count, load_config, queue_stats, reference_s};
use spillway_core::Config;
use spillway_sim::input::{SimJob, to_sim_jobs};
use spillway_sim::sim::{SimOptions, simulate};
use spillway_sim::trace::backlog::Overload;
use std::time::Instant;

const JOBS: usize = 100_000;
const CONFIG: &str = "examples/budgets-queue.toml";
/// The GPUs the arrival rate is sized against: the owned pool's 400 nodes of 8 GPUs.
const SIZED_GPUS: u32 = 3_200;

fn main() {
    if let Err(e) = run() {
        eprintln!("budgets bench: {e}");
        std::process::exit(1);
    }
}

/// Generates the trace, runs the three configurations and prints the figures; returns the first error.
fn run() -> Result<(), String> {
    let r = reference_s();
    println!("reference: sort 1,000,000 u64 = {r:.4} s (median of 5)");
    let budgets = load_config(CONFIG)?;
    let n = job_count(JOBS)?;
    let trace = Overload { jobs: n, gpus: SIZED_GPUS, seed: 1 }.generate();
    let jobs = to_sim_jobs(&trace, &budgets).map_err(|e| e.to_string())?;
    println!("overload: {n} jobs sized against {SIZED_GPUS} GPUs, seed 1, on {CONFIG}:");
    let mut at_once = budgets.clone();
    let mut early = budgets.clone();
    for t in &mut at_once.tiers {
        (t.burst_after_s, t.burst_wait_per_gpu_hour_s) = (0.0, 0.0);
    }
    for t in early.tiers.iter_mut().skip(1) {
        t.burst_early = true;
    }
    let base = run_one("no budgets (bursting at once)", &at_once, &jobs, (r, None))?;
    run_one("waiting budgets", &budgets, &jobs, (r, Some(base)))?;
    run_one("waiting budgets, burst_early", &early, &jobs, (r, Some(base)))?;
    Ok(())
}

/// Runs the `spillway` policy on `cfg` and prints one line, with its wall time over the reference `r` and over the
/// no-budget run's `base`; returns the wall time.
fn run_one(label: &str, cfg: &Config, jobs: &[SimJob], (r, base): (f64, Option<f64>)) -> Result<f64, String> {
    let t = Instant::now();
    let out = simulate(cfg, jobs, &SimOptions::default()).map_err(|e| format!("{label}: {e}"))?;
    let wall = t.elapsed().as_secs_f64();
    let cost = out.engine.cluster().ledger.total_usd();
    let ratio = base.map_or(String::new(), |b| format!(", {:.1}x the no-budget run", wall / b));
    println!(
        "  {label:<30} {wall:>7.2} s ({:.0}x reference{ratio}) {:>9} steps  ${cost:.0}  {}",
        wall / r,
        out.events,
        queue_stats(&out)
    );
    Ok(wall)
}
