//! Extra wake-ups never change a decision, on real inputs: every shared job trace (`../shared/traces/jobs/*.csv`,
//! each through the simulator's loader for its format), the Alibaba trace again with spot capacity traces, the
//! Helios demand series replayed as jobs, and the default synthetic week, each replayed through every policy of a report, once waking the engine only when it
//! asks and again with a few thousand extra `handle_timeout` calls (at instants where it acted, just after them,
//! and anywhere in the run). The actions it asks for (launches, terminations, starts and stops) and the instants
//! it asks for them must be the same. Decision records are left out: some are notes about a pass (the queue-scan
//! limit) and their text carries the time of the pass that wrote it (`queued 42s`), so an extra pass may add or
//! move one without any decision changing. `crates/spillway-core/tests/proptest_engine.rs` checks the same
//! property on random small clusters.
//!
//! Without `../shared` the shared inputs are skipped with a message (a failure with `SPILLWAY_REQUIRE_SHARED=1`).

use spillway_core::time::{Millis, Time};
use spillway_core::{Action, Config};
use spillway_sim::input::{SimJob, to_sim_jobs};
use spillway_sim::policies::{config_for, policies_for};
use spillway_sim::sim::{SimOptions, simulate};
use spillway_sim::trace::{self, TraceFormat, workload::Bursty};
use std::path::Path;

fn example(name: &str) -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    Config::parse(&path.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"))
}

/// A small deterministic generator (splitmix64), so the extra wake-ups are the same on every run.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// Returns `n` extra wake-ups (ms from the start) for a run whose actions came at `acted` (ms from the start) and
/// that spans `span_ms`: a third at instants where the engine acted (after its own pass there), a third shortly
/// after them (1 ms to about an hour, log-uniform), a third anywhere.
fn extra_wakes(acted: &[Millis], span_ms: Millis, n: usize, seed: u64) -> Vec<Millis> {
    let mut rng = Mix(seed);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let at = acted.get(rng.below(acted.len() as u64) as usize).copied().unwrap_or(0);
        out.push(match i % 3 {
            0 => at,
            1 => at + (1i64 << rng.below(22)) + rng.below(1000) as i64,
            _ => rng.below(span_ms.max(1) as u64) as i64,
        });
    }
    out
}

/// Replays `jobs` on every policy of `cfg`, with and without extra wake-ups, and returns what differs.
fn check(label: &str, cfg: &Config, jobs: &[SimJob], wakes: usize) -> Vec<String> {
    check_with(label, cfg, jobs, wakes, &SimOptions::default())
}

/// [`check`] with options (spot capacity traces).
fn check_with(label: &str, cfg: &Config, jobs: &[SimJob], wakes: usize, opts: &SimOptions) -> Vec<String> {
    let mut failures = Vec::new();
    let mut seen: Vec<Config> = Vec::new();
    for policy in policies_for(cfg) {
        let Some(pcfg) = config_for(policy, cfg, jobs) else { continue };
        if seen.contains(&pcfg) {
            // The same config as a policy already checked (spillway-no-spot without spot pools).
            continue;
        }
        seen.push(pcfg.clone());
        let opts = SimOptions { keep_actions: true, ..opts.clone() };
        let base = simulate(&pcfg, jobs, &opts).unwrap_or_else(|e| panic!("{label} {policy}: {e}"));
        let t0 = pcfg.start_ms;
        let acted: Vec<Millis> = base.actions.iter().map(|(t, _)| t - t0).collect();
        let extra = extra_wakes(&acted, base.makespan_ms, wakes, 0x5EED ^ jobs.len() as u64);
        let woken = simulate(&pcfg, jobs, &SimOptions { extra_wakes_ms: extra.clone(), ..opts })
            .unwrap_or_else(|e| panic!("{label} {policy} with extra wake-ups: {e}"));
        println!(
            "{label} {policy}: {} actions, {} steps; with {} extra wake-ups {} actions",
            base.actions.len(),
            base.events,
            extra.len(),
            woken.actions.len()
        );
        if let Some(why) = first_difference(&base.actions, &woken.actions, &extra, t0) {
            failures.push(format!("{label} {policy}: {why}"));
        }
    }
    failures
}

/// Describes the first place where two action streams differ (with the extra wake-ups just before it), or `None`.
fn first_difference(a: &[(Time, Action)], b: &[(Time, Action)], extra: &[Millis], t0: Time) -> Option<String> {
    let i = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let show = |v: &[(Time, Action)]| -> String {
        v[i.saturating_sub(2)..(i + 3).min(v.len())]
            .iter()
            .map(|(t, a)| format!("\n      t={:.3} s {a:?}", (t - t0) as f64 / 1000.0))
            .collect()
    };
    let at = a.get(i).map_or(Time::MAX, |x| x.0).min(b.get(i).map_or(Time::MAX, |x| x.0)) - t0;
    let since = i.checked_sub(1).and_then(|j| a.get(j)).map_or(0, |x| x.0 - t0);
    let mut before: Vec<f64> = extra.iter().filter(|&&x| x >= since && x <= at).map(|&x| x as f64 / 1000.0).collect();
    before.sort_by(f64::total_cmp);
    before.dedup();
    Some(format!(
        "action {i} differs; extra wake-ups at {before:?} s since the action before it\n    as asked:{}\n    with extra wake-ups:{}",
        show(a),
        show(b)
    ))
}

/// Returns the trace in `path` with its format, trying the job-trace loaders in turn, or `None` when none reads
/// it (the Alibaba node list beside the pod list is not a job trace).
fn load_jobs_trace(path: &Path) -> Option<(trace::Trace, TraceFormat)> {
    [TraceFormat::Alibaba2023, TraceFormat::Tiresias, TraceFormat::Native]
        .into_iter()
        .find_map(|f| trace::load(path, f).ok().filter(|t| !t.jobs.is_empty()).map(|t| (t, f)))
}

#[test]
fn extra_wake_ups_change_no_action_on_any_shared_job_trace() {
    let Some(dir) = spillway_sim::shared("traces/jobs") else { return };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    files.sort();
    let mut failures = Vec::new();
    let mut checked = 0;
    for path in &files {
        let name = path.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let Some((trace, format)) = load_jobs_trace(path) else {
            println!("skipping {name}: no job-trace loader reads it (not a job trace)");
            continue;
        };
        let cfg = example(if format == TraceFormat::Alibaba2023 { "alibaba-16gpu.toml" } else { "hybrid.toml" });
        let jobs = to_sim_jobs(&trace, &cfg).unwrap_or_else(|e| panic!("{e}"));
        failures.extend(check(&name, &cfg, &jobs, 3000));
        checked += 1;
    }
    assert!(checked > 0, "no job trace in {}", dir.display());
    assert!(failures.is_empty(), "extra wake-ups changed decisions:\n  {}", failures.join("\n  "));
}

#[test]
fn extra_wake_ups_change_no_action_with_spot_capacity_traces() {
    // The Alibaba trace with the README's V100 availability traces driving the spot pool: interruption notices,
    // checkpoints written on notice, fallbacks, backoffs and returns to spot.
    let Some(jobs_path) = spillway_sim::shared("traces/jobs/openb_pod_list_default.csv") else { return };
    let Some(dir) = spillway_sim::shared("traces/spot/aws_2022-10-26_2week_k80_v100_availability") else { return };
    let cfg = example("alibaba-16gpu.toml");
    let trace = trace::load(&jobs_path, TraceFormat::Alibaba2023).unwrap_or_else(|e| panic!("{e}"));
    let jobs = to_sim_jobs(&trace, &cfg).unwrap_or_else(|e| panic!("{e}"));
    let spot_traces = [("p3.2xlarge", "us-west-2a_v100_1.json"), ("p3.16xlarge", "us-west-2a_v100_8.json")]
        .into_iter()
        .map(|(it, file)| {
            let arg = format!("spot:{it}={}", dir.join(file).display());
            spillway_sim::spot::resolve(&cfg, &arg, spillway_sim::spot::Polarity::Available)
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    let opts = SimOptions { spot_traces, ..SimOptions::default() };
    let failures = check_with("alibaba with V100 spot traces", &cfg, &jobs, 3000, &opts);
    assert!(failures.is_empty(), "extra wake-ups changed decisions:\n  {}", failures.join("\n  "));
}

#[test]
fn extra_wake_ups_change_no_action_on_the_helios_demand_series() {
    let Some(dir) = spillway_sim::shared("traces/demand") else { return };
    let cfg = example("helios.toml");
    let mut failures = Vec::new();
    for series in ["earth_vc6YE", "earth_vcMod", "earth_vchbv", "earth_vcpDC"] {
        let path = dir.join(format!("{series}.csv"));
        let trace = trace::load(&path, TraceFormat::Helios).unwrap_or_else(|e| panic!("{e}"));
        let jobs = to_sim_jobs(&trace, &cfg).unwrap_or_else(|e| panic!("{e}"));
        failures.extend(check(series, &cfg, &jobs, 2000));
    }
    assert!(failures.is_empty(), "extra wake-ups changed decisions:\n  {}", failures.join("\n  "));
}

#[test]
fn extra_wake_ups_change_no_action_on_the_default_synthetic_week() {
    let cfg = example("hybrid.toml");
    let trace = Bursty { jobs: 2000, days: 7.0, seed: 1 }.generate();
    let jobs = to_sim_jobs(&trace, &cfg).unwrap_or_else(|e| panic!("{e}"));
    let failures = check("bursty-2000", &cfg, &jobs, 3000);
    assert!(failures.is_empty(), "extra wake-ups changed decisions:\n  {}", failures.join("\n  "));
}
