//! The sustained-overload benchmark: a generated 1,000,000-job trace whose demand exceeds what the clouds may run
//! for weeks, so 10,000+ jobs stay queued, run with one policy (`spillway`). Prints the wall time, jobs/s and
//! steps/s, the ratio to the in-run reference (sorting 1,000,000 seeded u64s), the process's peak memory (VmHWM;
//! targets: under 60 s and 1 GB) and the queue the run had.
//!
//! Run: `cargo bench -p spillway-sim --bench overload`. `SPILLWAY_BENCH_JOBS=N` replays only the first N jobs of the
//! same trace (the generator draws jobs in order, so that prefix is exactly the trace of N jobs) and also prints the
//! wall time extrapolated linearly to 1,000,000 jobs. `SPILLWAY_BENCH_RECORD=1` keeps the engine's decision records
//! and streams them to `target/overload-events.jsonl` as `spillway simulate` streams `events.jsonl`, which shows
//! that recording them costs time and disk, not memory.

// A benchmark measures wall time; the clock ban is for the functional core and the simulator.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{job_count, load_config, peak_rss_mib, queue_stats, reference_s};
use spillway_sim::input::to_sim_jobs;
use spillway_sim::run::EventWriter;
use spillway_sim::sim::{DecisionSink, SimOptions, simulate};
use spillway_sim::trace::backlog::Overload;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where `SPILLWAY_BENCH_RECORD=1` streams the decisions, as `spillway simulate` streams `events.jsonl`.
const EVENTS: &str = "target/overload-events.jsonl";

/// The events writer of a recorded run, shared with its sink.
type Events = Arc<Mutex<EventWriter<std::io::BufWriter<std::fs::File>>>>;

const FULL_JOBS: usize = 1_000_000;
const CONFIG: &str = "examples/overload.toml";
/// The GPUs the arrival rate is sized against: the config's 32 fixed GPUs and 2 x 8 cloud nodes of 8 GPUs.
const SIZED_GPUS: u32 = 160;

fn main() {
    if let Err(e) = run() {
        eprintln!("overload bench: {e}");
        std::process::exit(1);
    }
}

/// Generates the trace, runs it and prints the figures; returns the first error.
fn run() -> Result<(), String> {
    let r = reference_s();
    println!("reference: sort 1,000,000 u64 = {r:.4} s (median of 5)");
    let cfg = load_config(CONFIG)?;
    let n = job_count(FULL_JOBS)?;
    let t = Instant::now();
    let trace = Overload { jobs: n, gpus: SIZED_GPUS, seed: 1 }.generate();
    let jobs = to_sim_jobs(&trace, &cfg).map_err(|e| e.to_string())?;
    let span_days = jobs.last().map_or(0.0, |j| j.submit_ms as f64 / 86_400_000.0);
    drop(trace);
    println!(
        "overload: {n} jobs (of {FULL_JOBS}) submitted over {span_days:.1} days, sized against {SIZED_GPUS} GPUs, \
         seed 1, on {CONFIG}; generated in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let record = std::env::var("SPILLWAY_BENCH_RECORD").is_ok_and(|v| v == "1");
    let (writer, sink) = if record { stream_events(cfg.start_ms)? } else { (None, DecisionSink::default()) };
    let opts = SimOptions { record, decisions_to: sink, ..SimOptions::default() };
    let out = simulate(&cfg, &jobs, &opts).map_err(|e| e.to_string())?;
    let wall = t.elapsed().as_secs_f64();
    let recorded = match &writer {
        Some(w) => {
            let mut w = w.lock().map_err(|_| "the events writer panicked".to_string())?;
            w.finish().map_err(|e| format!("writing {EVENTS}: {e}"))?;
            w.bytes()
        }
        None => 0,
    };
    // Read before the queue figures allocate their own buffers.
    let peak = peak_rss_mib().map_or("unknown".to_string(), |m| format!("{m:.0} MiB"));
    let done = out.engine.cluster().jobs.iter().filter(|j| j.state == spillway_core::JobState::Succeeded).count();
    println!(
        "spillway policy{}: {wall:.2} s wall, {} steps, {:.0} steps/s, {:.0} jobs/s, {:.1}x reference, peak memory \
         (VmHWM) {peak}; {done}/{n} jobs done, makespan {:.1} days",
        if record { format!(" (decisions streamed to {EVENTS}: {recorded} bytes)") } else { String::new() },
        out.events,
        out.events as f64 / wall,
        n as f64 / wall,
        wall / r,
        out.makespan_ms as f64 / 86_400_000.0
    );
    println!("  {}", queue_stats(&out));
    if n < FULL_JOBS {
        let scale = FULL_JOBS as f64 / n as f64;
        println!(
            "  extrapolated to {FULL_JOBS} jobs (linear in jobs, SPILLWAY_BENCH_JOBS={n}): about {:.0} s ({:.1} min), \
             {:.0}x reference",
            wall * scale,
            wall * scale / 60.0,
            wall * scale / r
        );
    }
    Ok(())
}

/// Returns a writer of `events.jsonl` lines to [`EVENTS`] (to finish and read after the run) and its sink.
fn stream_events(t0_ms: i64) -> Result<(Option<Events>, DecisionSink), String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(EVENTS);
    let file = std::fs::File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    let (writer, sink) = EventWriter::new(std::io::BufWriter::new(file), t0_ms).into_sink();
    Ok((Some(writer), sink))
}
