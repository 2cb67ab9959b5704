//! A single 40-hour, 8-GPU job with a deadline of 1.5x its run time (60 h), replayed over every single-zone spot
//! trace in ../shared/traces/spot (the AWS K80 and V100 sets, and SkyNomad's 13-zone GCP H100 set, whose 1 means
//! "not obtainable"), starting once a day across each trace (so one trace gives many windows). A node boots in
//! 10 minutes (one tick of most traces), the restart overhead of every start and move.
//!
//! For every window it runs the default `safe` deadline policy and `greedy` (spot until the slack runs out) through
//! the simulator, and computes the offline optimum by dynamic programming over the trace's ticks ([`optimum`]:
//! it knows the whole trace, pays the same boot on every start, and runs only through ticks where spot can be
//! had). It checks that `safe` never misses and costs at most 1% more than always-on-demand in every window, and
//! more than 2% above a `greedy` that met the deadline in at most 1% of them; it prints the mean cost over the
//! optimum of both (`cargo test --release -p spillway-sim --test deadline -- --nocapture`).

mod common;

use spillway_core::Config;
use spillway_core::time::{Millis, secs};
use spillway_sim::sim::{SimOptions, simulate};
use spillway_sim::spot::{OfferingTrace, Polarity, SpotTrace, parse_json};
use std::path::{Path, PathBuf};

const WORK_H: f64 = 40.0;
const DEADLINE_H: f64 = 60.0;
const BOOT_S: f64 = 600.0;
/// Windows start this far apart in each trace.
const WINDOW_EVERY_H: f64 = 24.0;

/// One zone's offering: its trace file, polarity, instance type and prices (USD per node-hour).
struct Offering {
    file: PathBuf,
    polarity: Polarity,
    instance_type: &'static str,
    on_demand: f64,
    spot: f64,
}

/// The AWS files (K80 and V100 availability, V100 preemption counts; each priced as a p3.16xlarge at us-east-1
/// list prices), and the GCP H100 zones (a3-highgpu-8g: on-demand
/// in us-central1 from `gpu_instance_prices.csv`, spot at the zone's catalog price in the file).
fn offerings() -> Option<Vec<Offering>> {
    let dir = spillway_sim::shared("traces/spot")?;
    let mut out = Vec::new();
    for sub in ["aws_2022-10-26_2week_k80_v100_availability", "aws_2023-08-03_4node_v100_preemption"] {
        for file in json_files(&dir.join(sub)) {
            let (instance_type, on_demand, spot) = ("p3.16xlarge", 24.48, 4.52);
            out.push(Offering { file, polarity: Polarity::Available, instance_type, on_demand, spot });
        }
    }
    for file in json_files(&dir.join("gcp_2025-10_h100_16node_multi_region")) {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let spot = v["metadata"]["price_info"]["price"].as_f64().unwrap_or(20.0);
        out.push(Offering {
            file,
            polarity: Polarity::Unavailable,
            instance_type: "a3-highgpu-8g",
            on_demand: 82.53,
            spot,
        });
    }
    Some(out)
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    files.sort();
    files
}

/// Returns the config for `o`: a token owned GPU (the job never fits it), an on-demand and a spot pool of one type.
fn config(o: &Offering, policy: &str) -> Config {
    let mut text = format!(
        "[[instance_types]]\nname = \"{it}\"\ngpus = 8\ngpu_model = \"G\"\non_demand_usd_per_hour = {od}\nspot_usd_per_hour = {sp}\n\n\
         [[pools]]\nname = \"onprem\"\nmarket = \"fixed\"\ngpu_usd_per_hour = 0.0\nnodes = [{{ count = 1, gpus = 1 }}]\n\n\
         [[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"{it}\"]\nmax_nodes = 2\n\
         boot_latency_s = {BOOT_S}\nidle_timeout_s = 0\n\n\
         [[pools]]\nname = \"spot\"\nmarket = \"spot\"\ninstance_types = [\"{it}\"]\nmax_nodes = 2\n\
         boot_latency_s = {BOOT_S}\nidle_timeout_s = 0\n",
        it = o.instance_type,
        od = o.on_demand,
        sp = o.spot
    );
    if policy == "greedy" {
        text += "[policy]\ndeadline_policy = \"greedy\"\n";
    }
    Config::parse("deadline.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

/// Returns (cloud cost USD, finished by the deadline) of one policy on one window.
fn run(o: &Offering, policy: &str, trace: &SpotTrace) -> (f64, bool) {
    let mut cfg = config(o, policy);
    if policy == "on-demand" {
        cfg.pools.retain(|p| p.name != "spot");
        cfg.tiers.iter_mut().for_each(|t| t.markets.retain(|m| *m != spillway_core::Market::Spot));
    }
    let duration = secs(WORK_H * 3600.0);
    let jobs = vec![common::deadline_job(cfg.start_ms, DEADLINE_H, duration)];
    let t = OfferingTrace { pool: "spot".into(), instance_type: o.instance_type.into(), trace: trace.clone() };
    let opts = SimOptions { spot_traces: vec![t], ..SimOptions::default() };
    let out = simulate(&cfg, &jobs, &opts).unwrap_or_else(|e| panic!("{e}"));
    let c = out.engine.cluster();
    let j = &c.jobs[0];
    let met = j.ended.is_some_and(|e| Some(e) <= j.spec.deadline);
    (c.ledger.by_market[1] + c.ledger.by_market[2], met)
}

/// The offline optimum of one window: the least cost to do `work` ticks of work by tick `deadline`, knowing
/// whether spot can be had in every tick (`spot[t]`). Each start (on spot or on-demand) first pays `boot` ticks
/// at that market's price without progress; a spot node runs only through ticks where spot can be had; a node
/// may be let go at any tick. Prices are per tick. Returns `None` when no schedule meets the deadline.
fn optimum(spot: &[bool], work: usize, deadline: usize, boot: usize, od: f64, sp: f64) -> Option<f64> {
    const INF: f64 = f64::INFINITY;
    let w = work + 1;
    // Per tick t and progress p: the least cost from there while idle, on spot, on on-demand.
    let (mut idle, mut on_spot, mut on_od) =
        (vec![INF; (deadline + 1) * w], vec![INF; (deadline + 1) * w], vec![INF; (deadline + 1) * w]);
    let at = |t: usize, p: usize| t * w + p;
    for t in (0..=deadline).rev() {
        for p in (0..=work).rev() {
            if p == work {
                (idle[at(t, p)], on_spot[at(t, p)], on_od[at(t, p)]) = (0.0, 0.0, 0.0);
                continue;
            }
            let mut best_idle = if t < deadline { idle[at(t + 1, p)] } else { INF };
            if t + boot <= deadline {
                if spot[t..t + boot].iter().all(|&a| a) {
                    best_idle = best_idle.min(sp * boot as f64 + on_spot[at(t + boot, p)]);
                }
                best_idle = best_idle.min(od * boot as f64 + on_od[at(t + boot, p)]);
            }
            idle[at(t, p)] = best_idle;
            let run_spot = if t < deadline && spot[t] { sp + on_spot[at(t + 1, p + 1)] } else { INF };
            on_spot[at(t, p)] = best_idle.min(run_spot);
            let run_od = if t < deadline { od + on_od[at(t + 1, p + 1)] } else { INF };
            on_od[at(t, p)] = best_idle.min(run_od);
        }
    }
    let v = idle[at(0, 0)];
    v.is_finite().then_some(v)
}

/// Returns the tick length of a spot-traces JSON file, in ms.
fn gap_ms(file: &Path) -> Millis {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    (v["metadata"]["gap_seconds"].as_f64().unwrap_or(600.0) * 1000.0).round() as Millis
}

#[test]
fn the_optimum_pays_boots_and_uses_spot_only_where_it_can_be_had() {
    // Always spot: one boot then all work on spot.
    assert_eq!(optimum(&[true; 10], 5, 10, 1, 10.0, 1.0), Some(6.0));
    // Never spot: on-demand with one boot.
    assert_eq!(optimum(&[false; 10], 5, 10, 1, 10.0, 1.0), Some(60.0));
    // Spot only late: wait for it when the deadline allows, else on-demand.
    let late = [false, false, false, false, true, true, true, true, true, true];
    assert_eq!(optimum(&late, 5, 10, 1, 10.0, 1.0), Some(6.0));
    assert_eq!(optimum(&late, 5, 8, 1, 10.0, 1.0), Some(1.0 + 3.0 + 10.0 + 10.0 * 2.0));
    // Too little time for work and a boot.
    assert_eq!(optimum(&[true; 5], 5, 5, 1, 10.0, 1.0), None);
}

#[test]
fn a_deadline_job_never_misses_and_spends_its_slack_on_spot_first() {
    let Some(offerings) = offerings() else { return };
    assert!(!offerings.is_empty(), "no spot traces found");
    let (mut safe_over, mut greedy_over, mut windows) = (0.0, 0.0, 0usize);
    let (mut over_greedy, mut greedy_missed): (Vec<String>, usize) = (Vec::new(), 0);
    println!("{:<36} {:>7} {:>10} {:>10} {:>10} {:>10}", "trace", "windows", "od USD", "optimum", "safe", "greedy");
    for o in &offerings {
        let text = std::fs::read_to_string(&o.file).unwrap_or_else(|e| panic!("{}: {e}", o.file.display()));
        let name = o.file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let trace = parse_json(&name, &text, o.polarity).unwrap_or_else(|e| panic!("{e}"));
        let gap = gap_ms(&o.file);
        let (work, deadline) = ((secs(WORK_H * 3600.0) / gap) as usize, (secs(DEADLINE_H * 3600.0) / gap) as usize);
        let boot = (secs(BOOT_S) as f64 / gap as f64).ceil() as usize;
        let per_tick = |usd_h: f64| usd_h * gap as f64 / 3_600_000.0;
        let (mut sums, mut n) = ([0.0f64; 4], 0usize);
        let mut start = 0;
        while start + secs(DEADLINE_H * 3600.0) <= trace.period_ms {
            let shifted = trace.shifted(start);
            let spot: Vec<bool> = (0..deadline).map(|t| shifted.at(t as Millis * gap + gap / 2).0 != Some(0)).collect();
            let best = optimum(&spot, work, deadline, boot, per_tick(o.on_demand), per_tick(o.spot))
                .unwrap_or_else(|| panic!("{name} at {start} ms: no schedule meets the deadline"));
            let (od, od_met) = run(o, "on-demand", &shifted);
            let (safe, met) = run(o, "safe", &shifted);
            let (greedy, greedy_met) = run(o, "greedy", &shifted);
            let at = format!("{name} from hour {}", start / 3_600_000);
            assert!(od_met, "{at}: always-on-demand missed");
            assert!(met, "{at}: the safe deadline policy missed its deadline");
            // A try on spot that an interruption ends at once costs a boot and a notice more than on-demand alone.
            assert!(safe <= od * 1.01, "{at}: safe ${safe:.0} > always-on-demand ${od:.0} by more than 1%");
            greedy_missed += usize::from(!greedy_met);
            if greedy_met && safe > greedy * 1.02 + 1e-6 {
                over_greedy.push(format!("{at}: safe ${safe:.0} vs greedy ${greedy:.0}"));
            }
            for (s, v) in sums.iter_mut().zip([od, best, safe, greedy]) {
                *s += v;
            }
            safe_over += safe / best;
            greedy_over += greedy / best;
            n += 1;
            start += secs(WINDOW_EVERY_H * 3600.0);
        }
        windows += n;
        let mean = |s: f64| s / n.max(1) as f64;
        println!(
            "{name:<36} {n:>7} {:>10.0} {:>10.0} {:>10.0} {:>10.0}",
            mean(sums[0]),
            mean(sums[1]),
            mean(sums[2]),
            mean(sums[3])
        );
    }
    let (safe_x, greedy_x) = (safe_over / windows as f64, greedy_over / windows as f64);
    println!("{windows} windows: mean cost over the optimum: safe {safe_x:.3}x, greedy {greedy_x:.3}x");
    println!("greedy missed the deadline in {greedy_missed} windows, safe in none");
    println!(
        "windows where safe costs more than 2% above a greedy that met the deadline: {}\n  {}",
        over_greedy.len(),
        over_greedy.join("\n  ")
    );
    // Safe keeps a margin greedy does not: where spot comes back just after safe left it for good, greedy (lucky)
    // is far cheaper. That may happen, but rarely.
    assert!(over_greedy.len() * 100 <= windows, "safe above greedy by more than 2% in over 1% of the windows");
    // A guard on the distance from the optimum (1.16x when written; greedy 1.16x).
    assert!(safe_x <= 1.25, "safe's mean cost is {safe_x:.3}x the optimum");
}
