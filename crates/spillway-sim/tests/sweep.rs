//! Waiting-budget sweeps: every point is a real run of the same input that changes only the swept tiers' budgets,
//! bursting at once is the baseline every point is measured against, and a longer budget makes jobs wait longer.

use spillway_core::Config;
use spillway_sim::input::{SimJob, to_sim_jobs};
use spillway_sim::policies::{mean_gpus, with_fixed_gpus};
use spillway_sim::sim::{SimOptions, simulate};
use spillway_sim::sweep::{PER_GPU_HOUR_S, PointKind, default_tiers, sweep};
use spillway_sim::trace::workload::Bursty;
use std::path::Path;

fn burst_config() -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/burst.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    Config::parse(&path.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"))
}

/// Two bursty days on the burst example, its owned pool sized to their mean demand.
fn input() -> (Config, Vec<SimJob>) {
    let cfg = burst_config();
    let trace = Bursty { jobs: 300, days: 2.0, seed: 5 }.generate();
    let jobs = to_sim_jobs(&trace, &cfg).unwrap_or_else(|e| panic!("{e}"));
    let cfg = with_fixed_gpus(&cfg, mean_gpus(&jobs).round() as u64).unwrap_or_else(|e| panic!("{e}"));
    (cfg, jobs)
}

#[test]
fn each_point_is_the_run_of_its_budget_against_bursting_at_once() {
    let (cfg, jobs) = input();
    let tiers = default_tiers(&cfg);
    assert_eq!(tiers, ["p1", "p2"], "p0 never waits, so it is not swept by default");
    let s = sweep(&cfg, &jobs, &tiers, &SimOptions::default(), |_| {}).unwrap_or_else(|e| panic!("{e}"));
    let at_once = &s.points[0];
    assert_eq!(at_once.kind, PointKind::AtOnce);
    assert_eq!((at_once.cloud_saved, at_once.jct_increase), (0.0, 0.0));
    for p in &s.points {
        assert_eq!(p.jobs_completed, jobs.len(), "{}: every job completes", p.label);
    }
    // The config point is the config as given: the same cost as a plain run of it.
    let plain = simulate(&cfg, &jobs, &SimOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let l = &plain.engine.cluster().ledger;
    let config = s.points.iter().find(|p| p.kind == PointKind::Config).expect("a config point");
    assert!((config.cloud_usd - (l.by_market[1] + l.by_market[2])).abs() < 1e-6);
    // Bursting at once is a plain run with every swept tier's budget at zero.
    let mut zero = cfg.clone();
    for t in &tiers {
        let i = zero.tier_index(t).expect("tier");
        zero.tiers[i].burst_after_s = 0.0;
        zero.tiers[i].burst_wait_per_gpu_hour_s = 0.0;
    }
    let z = simulate(&zero, &jobs, &SimOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let zl = &z.engine.cluster().ledger;
    assert!((at_once.cloud_usd - (zl.by_market[1] + zl.by_market[2])).abs() < 1e-6);
    // An hour per GPU-hour makes jobs wait far longer than bursting at once, and longer than a minute per
    // GPU-hour does. (Whether it buys less depends on the input: see the stop note of issue 14.)
    let by_size: Vec<_> = s.points.iter().filter(|p| p.kind == PointKind::BySize).collect();
    let (shortest, longest) = (by_size[0], by_size[by_size.len() - 1]);
    assert_eq!(longest.per_gpu_hour_s, PER_GPU_HOUR_S[PER_GPU_HOUR_S.len() - 1]);
    assert!(longest.mean_wait_s > at_once.mean_wait_s + 60.0, "{longest:?} vs {at_once:?}");
    assert!(longest.mean_wait_s > shortest.mean_wait_s, "{longest:?} vs {shortest:?}");
}

#[test]
fn a_sweep_of_one_seed_is_reproducible() {
    let (cfg, jobs) = input();
    let tiers = vec!["p1".to_string()];
    let a = sweep(&cfg, &jobs, &tiers, &SimOptions::default(), |_| {}).unwrap_or_else(|e| panic!("{e}"));
    let b = sweep(&cfg, &jobs, &tiers, &SimOptions::default(), |_| {}).unwrap_or_else(|e| panic!("{e}"));
    let json = |s| serde_json::to_string(s).unwrap_or_default();
    assert_eq!(json(&a), json(&b));
}
