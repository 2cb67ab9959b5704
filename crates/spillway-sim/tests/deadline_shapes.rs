//! A deadline job never misses under `safe`, whatever its shape, as a user states it: wherever always-on-demand
//! meets the deadline, so does `safe`. Jobs from 1 h to 40 h of work with 3% to 400% slack, boots of 1-20 min,
//! checkpoint times inside and past the notice, a declared checkpoint interval or none, over every single-zone
//! spot trace in ../shared/traces/spot (a window every 4 days).

mod common;

use spillway_core::Config;
use spillway_core::time::secs;
use spillway_sim::sim::{SimOptions, simulate};
use spillway_sim::spot::{OfferingTrace, Polarity, SpotTrace, parse_json};

/// One job shape: hours of work, deadline hours, boot seconds, p1 checkpoint seconds, interval seconds.
type Shape = (f64, f64, f64, f64, Option<f64>);

const SHAPES: &[Shape] = &[
    (1.0, 1.5, 600.0, 60.0, None),
    (2.0, 2.3, 60.0, 60.0, None),
    (8.0, 8.25, 300.0, 60.0, Some(1800.0)),
    (10.0, 50.0, 600.0, 300.0, Some(3600.0)),
    (20.0, 21.0, 1200.0, 60.0, None),
    (40.0, 41.5, 600.0, 180.0, Some(900.0)),
    (40.0, 60.0, 60.0, 60.0, None),
    (24.0, 120.0, 600.0, 60.0, None),
];

/// Every single-zone trace, parsed, with its file name.
fn traces() -> Option<Vec<(String, SpotTrace)>> {
    let dir = spillway_sim::shared("traces/spot")?;
    let mut out = Vec::new();
    for (sub, polarity) in [
        ("aws_2022-10-26_2week_k80_v100_availability", Polarity::Available),
        ("aws_2023-08-03_4node_v100_preemption", Polarity::Available),
        ("gcp_2025-10_h100_16node_multi_region", Polarity::Unavailable),
    ] {
        for file in common::json_files(&dir.join(sub)) {
            let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            let trace = parse_json(&name, &text, polarity).unwrap_or_else(|e| panic!("{e}"));
            out.push((name, trace));
        }
    }
    Some(out)
}

fn config(shape: &Shape, spot: bool) -> Config {
    let (_, _, boot, ck, _) = shape;
    let mut text = format!(
        "[[instance_types]]\nname = \"g8\"\ngpus = 8\ngpu_model = \"G\"\non_demand_usd_per_hour = 24.48\n\
         spot_usd_per_hour = 4.52\n\n\
         [[pools]]\nname = \"onprem\"\nmarket = \"fixed\"\ngpu_usd_per_hour = 0.0\nnodes = [{{ count = 1, gpus = 1 }}]\n\n\
         [[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"g8\"]\nmax_nodes = 2\n\
         boot_latency_s = {boot}\nidle_timeout_s = 0\n\n\
         [tiers.p1]\ncheckpoint_time_s = {ck}\n"
    );
    if spot {
        text += &format!(
            "\n[[pools]]\nname = \"spot\"\nmarket = \"spot\"\ninstance_types = [\"g8\"]\nmax_nodes = 2\n\
             boot_latency_s = {boot}\nidle_timeout_s = 0\n"
        );
    }
    Config::parse("shapes.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

/// Returns whether the job of `shape` met its deadline on `trace` (None: no spot pool).
fn met(shape: &Shape, trace: Option<&SpotTrace>) -> bool {
    let mut cfg = config(shape, trace.is_some());
    if trace.is_none() {
        cfg.tiers.iter_mut().for_each(|t| t.markets.retain(|m| *m != spillway_core::Market::Spot));
    }
    let duration = secs(shape.0 * 3600.0);
    let mut job = common::deadline_job(cfg.start_ms, shape.1, duration);
    job.spec.checkpoint_interval_ms = shape.4.map(secs);
    let spot_traces = trace
        .map(|t| vec![OfferingTrace { pool: "spot".into(), instance_type: "g8".into(), trace: t.clone() }])
        .unwrap_or_default();
    let opts = SimOptions { spot_traces, ..SimOptions::default() };
    let out = simulate(&cfg, &[job], &opts).unwrap_or_else(|e| panic!("{e}"));
    let j = &out.engine.cluster().jobs[0];
    j.ended.is_some_and(|e| Some(e) <= j.spec.deadline)
}

#[test]
fn a_deadline_job_of_any_shape_never_misses_where_on_demand_alone_would_not() {
    let Some(traces) = traces() else { return };
    let (mut windows, mut missed) = (0usize, Vec::new());
    for shape in SHAPES {
        if !met(shape, None) {
            continue;
        }
        for (name, trace) in &traces {
            let mut start = 0;
            while start + secs(shape.1 * 3600.0) <= trace.period_ms {
                windows += 1;
                if !met(shape, Some(&trace.shifted(start))) {
                    missed.push(format!("{shape:?} on {name} from hour {}", start / 3_600_000));
                }
                start += secs(96.0 * 3600.0);
            }
        }
    }
    println!("{windows} windows, {} missed", missed.len());
    assert!(missed.is_empty(), "safe missed:\n  {}", missed.join("\n  "));
}
