//! Predictive scaling in the simulator: a pool whose demand peaks at 09:00 every day buys nodes ahead of the peak
//! once it has a day of history, so the peak's jobs wait less than with queue-driven scaling alone.

use spillway_core::time::secs;
use spillway_core::{Config, JobSpec};
use spillway_sim::input::SimJob;
use spillway_sim::sim::{SimOptions, simulate};

const CONFIG: &str = "[cluster]\nstart = \"2025-01-06T00:00:00Z\"\n\
[[instance_types]]\nname = \"g8\"\ngpus = 8\ngpu_model = \"V100\"\non_demand_usd_per_hour = 24.0\n\
[[pools]]\nname = \"onprem\"\nmarket = \"fixed\"\ngpu_usd_per_hour = 1.0\nnodes = [{ count = 1, gpus = 1 }]\n\
[[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"g8\"]\nmax_nodes = 40\nmin_step_nodes = 20\n";

/// Ten 8-GPU p1 jobs at 09:00 every day for five days, three hours each.
fn daily_peaks() -> Vec<SimJob> {
    let mut jobs = Vec::new();
    for day in 0..5 {
        for i in 0..10 {
            jobs.push(SimJob {
                submit_ms: secs(day as f64 * 86_400.0 + 9.0 * 3600.0),
                duration_ms: secs(3.0 * 3600.0),
                spec: JobSpec {
                    name: format!("d{day}-{i}").into(),
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
            });
        }
    }
    jobs
}

/// Returns the mean queue wait (s) of the last day's jobs.
fn last_day_wait(text: &str) -> f64 {
    let cfg = Config::parse("p.toml", text).unwrap();
    let out = simulate(&cfg, &daily_peaks(), &SimOptions::default()).unwrap();
    let c = out.engine.cluster();
    let last: Vec<f64> = c.jobs[40..].iter().map(|j| (j.first_start.unwrap() - j.submitted) as f64 / 1000.0).collect();
    last.iter().sum::<f64>() / last.len() as f64
}

#[test]
fn predictive_scaling_buys_ahead_of_a_daily_peak() {
    let reactive = last_day_wait(CONFIG);
    let predictive = last_day_wait(&format!("{CONFIG}predictive = {{ buffer_s = 300 }}\n"));
    println!("mean wait of the last peak: queue-driven {reactive:.0} s, predictive + queue-driven {predictive:.0} s");
    assert!(reactive > 120.0, "queue-driven alone waits for a boot: {reactive}");
    assert!(predictive < reactive / 2.0, "predictive {predictive} s vs queue-driven {reactive} s");
}

#[test]
fn forecast_only_mode_changes_nothing() {
    let reactive = last_day_wait(CONFIG);
    let dry = last_day_wait(&format!("{CONFIG}predictive = {{ mode = \"forecast_only\" }}\n"));
    assert_eq!(reactive, dry);
}

/// The four Helios demand series replayed as p1 jobs on `examples/helios.toml`: predictive + queue-driven scaling
/// cuts the p1 queue wait in the daily peak hours against queue-driven alone, at a cost the report shows.
#[test]
fn helios_series_predictive_cuts_peak_hour_waits() {
    use spillway_sim::policies::config_for;
    use spillway_sim::run::run_report;
    use spillway_sim::trace::{TraceFormat, load};
    let Some(dir) = spillway_sim::shared("traces/demand") else { return };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("examples/helios.toml")).unwrap();
    let cfg = Config::parse("helios.toml", &text).unwrap();
    for vc in ["vc6YE", "vcMod", "vchbv", "vcpDC"] {
        let trace = load(&dir.join(format!("earth_{vc}.csv")), TraceFormat::Helios).unwrap();
        // The replay's GPU-hours are the series' integral: running + pending GPUs, one minute per row.
        let series_gpu_hours: f64 = ["running_gpu_num", "pending_gpu_num"]
            .iter()
            .map(|c| {
                spillway_sim::demand::load(&dir.join(format!("earth_{vc}.csv")), c).unwrap().values.iter().sum::<f64>()
                    / 60.0
            })
            .sum();
        let trace_gpu_hours: f64 = trace.jobs.iter().map(|j| j.gpus as f64 * j.duration_s / 3600.0).sum();
        assert!(
            (trace_gpu_hours - series_gpu_hours).abs() < 1e-6 * series_gpu_hours,
            "{vc}: {trace_gpu_hours} vs {series_gpu_hours}"
        );
        let jobs = spillway_sim::input::to_sim_jobs(&trace, &cfg).unwrap();
        let peak = |policy: &str| {
            let pcfg = config_for(policy, &cfg, &jobs).unwrap();
            let out = simulate(&pcfg, &jobs, &SimOptions::default()).unwrap();
            let r = run_report(policy, &pcfg, &out);
            assert_eq!((r.jobs_completed, r.jobs_lost), (jobs.len(), 0), "{vc} {policy}");
            (r.peak_hour_wait_s["p1"].mean, r.cost_usd)
        };
        let ((with, cost), (without, reactive_cost)) = (peak("spillway"), peak("spillway-reactive"));
        println!(
            "{vc}: p1 peak-hour wait {with:.0} s vs {without:.0} s queue-driven alone; cost {cost:.0} vs {reactive_cost:.0} USD"
        );
        assert!(with < without, "{vc}: predictive {with} s vs queue-driven {without} s");
    }
}
