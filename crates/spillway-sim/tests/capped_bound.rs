//! The capped bound is a lower bound: on random workloads over a config whose pools are capped tight enough to
//! bind, no policy that completes every job pays less than the bound for finishing by that policy's own end; and
//! where the caps bind it is above the instant-overflow bound, which ignores them.

use proptest::prelude::*;
use spillway_core::{Config, JobSpec};
use spillway_sim::capped_bound::capped_bound;
use spillway_sim::input::SimJob;
use spillway_sim::policies::{bound, config_for, policies_for};
use spillway_sim::run::run_report;
use spillway_sim::sim::{SimOptions, simulate};

const CONFIG: &str = r#"
[[instance_types]]
name = "g8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 6.0

[[instance_types]]
name = "g1"
gpus = 1
gpu_model = "V100"
on_demand_usd_per_hour = 3.5
spot_usd_per_hour = 0.9

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 1.0
nodes = [{ count = 1, gpus = 8 }]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["g1", "g8"]
max_nodes = 2

[[pools]]
name = "spot"
market = "spot"
instance_types = ["g8"]
max_nodes = 1
"#;

fn config() -> Config {
    Config::parse("capped.toml", CONFIG).unwrap_or_else(|e| panic!("{e}"))
}

fn job(i: usize, (tier, gpus, workers, minutes, submit_min): (usize, u32, u32, u32, u32)) -> SimJob {
    let spec = JobSpec {
        name: format!("j{i}").into(),
        tier: ["p0", "p1", "p2"][tier].into(),
        team: "default".into(),
        gpus_per_worker: gpus,
        workers,
        min_workers: None,
        gpu_model: None,
        interruptible: None,
        checkpoint_interval_ms: None,
        deadline: None,
        expected_duration_ms: Some(i64::from(minutes) * 60_000),
        checkpoint_gb: None,
        data_region: None,
    };
    SimJob {
        submit_ms: i64::from(submit_min) * 60_000,
        duration_ms: i64::from(minutes) * 60_000,
        spec,
        serial_fraction: 0.0,
    }
}

fn workload() -> impl Strategy<Value = Vec<SimJob>> {
    let one = (0usize..3, prop_oneof![Just(1u32), Just(2), Just(4), Just(8)], 1u32..3, 10u32..600, 0u32..2880);
    proptest::collection::vec(one, 1..40).prop_map(|v| {
        let mut jobs: Vec<SimJob> = v.into_iter().enumerate().map(|(i, j)| job(i, j)).collect();
        jobs.sort_by_key(|j| j.submit_ms);
        jobs
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn no_policy_that_finishes_every_job_pays_less_than_the_capped_bound(jobs in workload()) {
        let cfg = config();
        for policy in policies_for(&cfg) {
            let Some(pcfg) = config_for(policy, &cfg, &jobs) else { continue };
            let out = simulate(&pcfg, &jobs, &SimOptions::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let run = run_report(policy, &pcfg, &out);
            if run.jobs_completed < jobs.len() {
                continue;
            }
            let b = capped_bound(&pcfg, &jobs, out.makespan_ms).map_err(TestCaseError::fail)?;
            prop_assert!(
                b.cost_usd <= run.cost_usd * (1.0 + 1e-9) + 1e-6,
                "{policy}: bound {} above cost {} ({:?} vs {:?})", b.cost_usd, run.cost_usd, b.cost_by_market, run.cost_by_market
            );
        }
    }
}

#[test]
fn where_the_spot_cap_binds_the_capped_bound_is_above_the_instant_overflow_bound() {
    let cfg = config();
    // Twenty 8-GPU p2 jobs of 4 hours at once: p2 may use owned and spot nodes only, one of each, so the work takes
    // ten rounds of 4 hours; the instant-overflow bound prices all of it on spot at once.
    let jobs: Vec<SimJob> = (0..20).map(|i| job(i, (2, 8, 1, 240, 0))).collect();
    let instant = bound(&cfg, &jobs);
    let out = simulate(&cfg, &jobs, &SimOptions::default()).expect("simulates");
    let capped = capped_bound(&cfg, &jobs, out.makespan_ms).expect("a bound");
    assert!(capped.cost_usd > instant.cost_usd, "{capped:?} vs {instant:?}");
    let run = run_report("spillway", &cfg, &out);
    assert!(capped.cost_usd <= run.cost_usd, "{capped:?} vs {}", run.cost_usd);
    // By a horizon shorter than ten rounds (an hour, raised to the 4 hours every job would take at once) the caps
    // cannot serve the work: no bound, and the error says why.
    let short = capped_bound(&cfg, &jobs, 3_600_000);
    assert!(short.as_ref().is_err_and(|e| e.contains("caps cannot serve")), "{short:?}");
}
