//! A single 40-hour, 8-GPU deadline job (60 h) with a checkpoint of 50 GB, 500 GB or 5 TB whose data starts in one
//! region, replayed
//! over multi-region spot sets: SkyNomad's 13 GCP H100 zones in 8 regions on 3 continents (each zone its own
//! spot pool at its own price, replayed from the file's `prices`), and the AWS V100 preemption set's 3 zones in
//! 3 US regions. A move between regions pays egress (AWS: the built-in price table, $0.01-0.02/GB in the US; GCP:
//! $0.02/GB within a continent and $0.08/GB between, GCP's published range) and its transfer time.
//!
//! For every checkpoint size and start window (one every 6 hours) it runs `safe`, `greedy` and always-on-demand through the simulator and
//! computes the offline optimum by dynamic programming over the ticks ([`optimum`]): it knows every zone's
//! availability, pays a boot on every start and the egress and transfer of every move between regions. It checks
//! that `safe` never misses, costs at most 1% above always-on-demand, and more than 2% above a `greedy` that met
//! the deadline in at most 1% of the windows, and that safe's mean cost is within 5% of the optimum with a 50 GB
//! checkpoint (the case); it prints the mean cost over the optimum
//! (`cargo test --release -p spillway-sim --test regions -- --nocapture`).

mod common;

use spillway_core::Config;
use spillway_core::time::{Millis, secs};
use spillway_sim::price::OfferingPrice;
use spillway_sim::sim::{SimOptions, simulate};
use spillway_sim::spot::{OfferingTrace, Polarity, SpotTrace, parse_json};
use std::path::Path;

const WORK_H: f64 = 40.0;
const DEADLINE_H: f64 = 60.0;
const BOOT_S: f64 = 600.0;
/// Checkpoint sizes (GB): the 50 GB, and 10x and 100x it.
const CHECKPOINT_GB: [f64; 3] = [50.0, 500.0, 5000.0];
const TRANSFER_GBPS: f64 = 10.0;
const WINDOW_EVERY_H: f64 = 6.0;

/// One zone: its trace, region, zone name and spot price per node-hour (and the file's price trace, if any).
struct Zone {
    trace: SpotTrace,
    prices: Option<spillway_sim::price::PriceTrace>,
    region: String,
    zone: String,
    spot: f64,
    gap_ms: Millis,
}

/// A multi-region set: its zones, instance type, on-demand price and region, where the data starts, and the
/// egress price between two regions (for the optimum; the config says the same to the engine).
struct Set {
    name: &'static str,
    zones: Vec<Zone>,
    instance_type: &'static str,
    on_demand: f64,
    od_region: &'static str,
    network: String,
    egress: fn(&str, &str) -> f64,
}

fn continent(region: &str) -> &str {
    region.split('-').next().unwrap_or(region)
}

fn gcp_egress(a: &str, b: &str) -> f64 {
    match (a == b, continent(a) == continent(b)) {
        (true, _) => 0.0,
        (false, true) => 0.02,
        (false, false) => 0.08,
    }
}

fn aws_egress(a: &str, b: &str) -> f64 {
    // Every pair here is in the US. AWS's price list (`prices/aws_egress_usd_per_gb.csv`, the engine's built-in
    // table): $0.01/GB between us-east-1 and us-east-2, $0.02/GB between other US regions.
    match (a, b) {
        _ if a == b => 0.0,
        ("us-east-1", "us-east-2") | ("us-east-2", "us-east-1") => 0.01,
        _ => 0.02,
    }
}

fn read(file: &Path) -> (String, serde_json::Value) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    (text, v)
}

fn zone_of(file: &Path, polarity: Polarity, spot: Option<f64>) -> Zone {
    let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let (text, v) = read(file);
    let zone = name.split('_').next().unwrap_or_default().to_string();
    // GCP zones end in `-a`, AWS zones in a letter: the region is the zone less its last part.
    let region = match zone.rsplit_once('-') {
        Some((r, z)) if z.len() == 1 => r.to_string(),
        _ => zone[..zone.len() - 1].to_string(),
    };
    Zone {
        trace: parse_json(&name, &text, polarity).unwrap_or_else(|e| panic!("{e}")),
        prices: spillway_sim::price::parse_json(&name, &text).unwrap_or_else(|e| panic!("{e}")),
        spot: spot.or_else(|| v["metadata"]["price_info"]["price"].as_f64()).unwrap_or(20.0),
        gap_ms: (v["metadata"]["gap_seconds"].as_f64().unwrap_or(600.0) * 1000.0).round() as Millis,
        region,
        zone,
    }
}

fn sets() -> Option<Vec<Set>> {
    let dir = spillway_sim::shared("traces/spot")?;
    let gcp: Vec<Zone> = common::json_files(&dir.join("gcp_2025-10_h100_16node_multi_region"))
        .iter()
        .map(|f| zone_of(f, Polarity::Unavailable, None))
        .collect();
    let mut regions: Vec<&str> = gcp.iter().map(|z| z.region.as_str()).collect();
    regions.dedup();
    let mut network = format!("[network]\ntransfer_gbps = {TRANSFER_GBPS}\n");
    for a in &regions {
        for b in regions.iter().filter(|b| *b != a) {
            network +=
                &format!("[[network.egress]]\nfrom = \"{a}\"\nto = \"{b}\"\nusd_per_gb = {}\n", gcp_egress(a, b));
        }
    }
    let aws: Vec<Zone> = common::json_files(&dir.join("aws_2023-08-03_4node_v100_preemption"))
        .iter()
        .map(|f| zone_of(f, Polarity::Available, Some(4.52)))
        .collect();
    Some(vec![
        Set {
            name: "GCP H100, 13 zones",
            zones: gcp,
            instance_type: "a3-highgpu-8g",
            on_demand: 82.53,
            od_region: "us-central1",
            network,
            egress: gcp_egress,
        },
        Set {
            name: "AWS V100, 3 zones",
            zones: aws,
            instance_type: "p3.16xlarge",
            on_demand: 24.48,
            od_region: "us-east-1",
            network: format!("[network]\ntransfer_gbps = {TRANSFER_GBPS}\n"),
            egress: aws_egress,
        },
    ])
}

/// Returns the config of `set`: a token owned GPU (the job never fits it), an on-demand pool in the data's
/// region and a spot pool per zone at its own price.
fn config(set: &Set, policy: &str) -> Config {
    let it = set.instance_type;
    let mut text = format!(
        "[[instance_types]]\nname = \"{it}\"\ngpus = 8\ngpu_model = \"G\"\non_demand_usd_per_hour = {}\n\n\
         [[pools]]\nname = \"onprem\"\nmarket = \"fixed\"\ngpu_usd_per_hour = 0.0\nnodes = [{{ count = 1, gpus = 1 }}]\n\n\
         [[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"{it}\"]\nmax_nodes = 2\n\
         boot_latency_s = {BOOT_S}\nidle_timeout_s = 0\nregion = \"{}\"\n\n",
        set.on_demand, set.od_region
    );
    if policy != "on-demand" {
        for z in &set.zones {
            text += &format!(
                "[[pools]]\nname = \"{}\"\nmarket = \"spot\"\ninstance_types = [\"{it}\"]\nmax_nodes = 2\n\
                 boot_latency_s = {BOOT_S}\nidle_timeout_s = 0\nregion = \"{}\"\nzone = \"{}\"\n\
                 spot_usd_per_hour = {{ \"{it}\" = {} }}\n\n",
                z.zone, z.region, z.zone, z.spot
            );
        }
    }
    text += &set.network;
    text += if policy == "greedy" { "[policy]\ndeadline_policy = \"greedy\"\n" } else { "" };
    let mut cfg = Config::parse("regions.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    if policy == "on-demand" {
        cfg.tiers.iter_mut().for_each(|t| t.markets.retain(|m| *m != spillway_core::Market::Spot));
    }
    cfg
}

/// Returns (cost USD with egress, met the deadline, data moves) of one policy on the window starting `start` ms
/// into the traces.
fn run(set: &Set, policy: &str, start: Millis, gb: f64) -> (f64, bool, usize) {
    let cfg = config(set, policy);
    let duration = secs(WORK_H * 3600.0);
    let mut job = common::deadline_job(cfg.start_ms, DEADLINE_H, duration);
    (job.spec.checkpoint_gb, job.spec.data_region) = (Some(gb), Some(set.od_region.into()));
    let jobs = vec![job];
    let it = set.instance_type.to_string();
    let spot_traces = set
        .zones
        .iter()
        .map(|z| OfferingTrace { pool: z.zone.clone(), instance_type: it.clone(), trace: z.trace.shifted(start) })
        .collect();
    let spot_prices = set
        .zones
        .iter()
        .filter_map(|z| {
            let trace = z.prices.as_ref()?.shifted(start);
            Some(OfferingPrice { pool: z.zone.clone(), instance_type: it.clone(), trace })
        })
        .collect();
    let opts = SimOptions { spot_traces, spot_prices, ..SimOptions::default() };
    let out = simulate(&cfg, &jobs, &opts).unwrap_or_else(|e| panic!("{e}"));
    let c = out.engine.cluster();
    let j = &c.jobs[0];
    let met = j.ended.is_some_and(|e| Some(e) <= j.spec.deadline);
    let l = &c.ledger;
    (l.by_market[1] + l.by_market[2] + l.egress_usd, met, c.counters.data_moves as usize)
}

/// The offline optimum of one window over several zones: the least cost to do `work` ticks by tick `deadline`,
/// knowing whether each zone's spot can be had in every tick (`avail[k][t]`). A start pays `boot` ticks at the
/// market's price without progress; a start in a region other than the data's pays `egress` per GB and the
/// node's price over the transfer; a spot node runs only through ticks its zone can be had; a node may be let go
/// at any tick, leaving the data in its region. Prices per tick. `None` when no schedule meets the deadline.
struct Problem<'a> {
    avail: &'a [Vec<bool>],
    price: &'a [f64],
    zone_region: &'a [usize],
    od_price: f64,
    od_region: usize,
    /// Per (from, to) region: (USD, ticks of transfer as a fraction) of a move.
    moves: Vec<Vec<(f64, f64)>>,
    regions: usize,
}

fn optimum(pb: &Problem, work: usize, deadline: usize, boot: usize, data_at: usize) -> Option<f64> {
    const INF: f64 = f64::INFINITY;
    let (k, r) = (pb.avail.len(), pb.regions);
    let w = work + 1;
    // State index: idle in region 0..r, running in zone r..r+k, running on-demand r+k.
    let states = r + k + 1;
    let at = |t: usize, p: usize, s: usize| (t * w + p) * states + s;
    let mut v = vec![INF; (deadline + 1) * w * states];
    for t in (0..=deadline).rev() {
        for p in (0..=work).rev() {
            if p == work {
                (0..states).for_each(|s| v[at(t, p, s)] = 0.0);
                continue;
            }
            for from in 0..r {
                let mut best = if t < deadline { v[at(t + 1, p, from)] } else { INF };
                if t + boot <= deadline {
                    for z in 0..k {
                        if pb.avail[z][t..t + boot].iter().all(|&a| a) {
                            let (usd, ticks) = pb.moves[from][pb.zone_region[z]];
                            let c = pb.price[z] * (boot as f64 + ticks) + usd + v[at(t + boot, p, r + z)];
                            best = best.min(c);
                        }
                    }
                    let (usd, ticks) = pb.moves[from][pb.od_region];
                    best = best.min(pb.od_price * (boot as f64 + ticks) + usd + v[at(t + boot, p, r + k)]);
                }
                v[at(t, p, from)] = best;
            }
            for z in 0..k {
                let stop = v[at(t, p, pb.zone_region[z])];
                let go = if t < deadline && pb.avail[z][t] { pb.price[z] + v[at(t + 1, p + 1, r + z)] } else { INF };
                v[at(t, p, r + z)] = stop.min(go);
            }
            let stop = v[at(t, p, pb.od_region)];
            let go = if t < deadline { pb.od_price + v[at(t + 1, p + 1, r + k)] } else { INF };
            v[at(t, p, r + k)] = stop.min(go);
        }
    }
    let best = v[at(0, 0, data_at)];
    best.is_finite().then_some(best)
}

#[test]
fn the_optimum_moves_only_when_the_price_difference_pays_the_egress() {
    // Two regions; spot only in region 1, at 1 per tick, while on-demand (region 0, the data's) costs 3.
    let avail = vec![vec![true; 20]];
    let mk = |usd: f64| Problem {
        avail: &avail,
        price: &[1.0],
        zone_region: &[1],
        od_price: 3.0,
        od_region: 0,
        moves: vec![vec![(0.0, 0.0), (usd, 0.0)], vec![(usd, 0.0), (0.0, 0.0)]],
        regions: 2,
    };
    // 5 ticks of work, 1 boot: spot costs 6 + the move, on-demand 18.
    assert_eq!(optimum(&mk(2.0), 5, 20, 1, 0), Some(8.0));
    assert_eq!(optimum(&mk(20.0), 5, 20, 1, 0), Some(18.0));
    // Data already in region 1: no move to pay.
    assert_eq!(optimum(&mk(20.0), 5, 20, 1, 1), Some(6.0));
}

#[test]
fn a_deadline_job_across_regions_never_misses_and_weighs_egress() {
    let Some(sets) = sets() else { return };
    for gb in CHECKPOINT_GB {
        let safe_x = size(&sets, gb);
        // 1.038x when written (500 GB 1.084x, 5 TB 1.070x; 90 windows): the target is 5% of the optimum at 50 GB.
        let bound = if gb <= 50.0 { 1.05 } else { 1.15 };
        assert!(safe_x <= bound, "{gb} GB: safe's mean cost is {safe_x:.3}x the optimum");
    }
}

/// Runs every window of every set with a checkpoint of `gb` GB; checks each window; returns safe's mean cost
/// over the optimum.
fn size(sets: &[Set], gb: f64) -> f64 {
    println!("== checkpoint {gb} GB");
    let (mut windows, mut safe_over, mut greedy_over, mut over_greedy) = (0usize, 0.0, 0.0, Vec::new());
    for set in sets {
        assert!(!set.zones.is_empty(), "{}: no zones found", set.name);
        let gap = set.zones[0].gap_ms;
        assert!(set.zones.iter().all(|z| z.gap_ms == gap), "{}: zones tick at different rates", set.name);
        let mut regions: Vec<String> = set.zones.iter().map(|z| z.region.clone()).collect();
        regions.push(set.od_region.into());
        regions.sort();
        regions.dedup();
        let idx = |r: &str| regions.iter().position(|x| x == r).unwrap_or(0);
        let per_tick = |usd_h: f64| usd_h * gap as f64 / 3_600_000.0;
        let transfer_ticks = gb * 8.0 / TRANSFER_GBPS * 1000.0 / gap as f64;
        let moves: Vec<Vec<(f64, f64)>> = regions
            .iter()
            .map(|a| {
                regions
                    .iter()
                    .map(|b| if a == b { (0.0, 0.0) } else { (gb * (set.egress)(a, b), transfer_ticks) })
                    .collect()
            })
            .collect();
        let (work, deadline) = ((secs(WORK_H * 3600.0) / gap) as usize, (secs(DEADLINE_H * 3600.0) / gap) as usize);
        let boot = (secs(BOOT_S) as f64 / gap as f64).ceil() as usize;
        let period = set.zones.iter().map(|z| z.trace.period_ms).min().unwrap_or(0);
        let price: Vec<f64> = set.zones.iter().map(|z| per_tick(z.spot)).collect();
        let zone_region: Vec<usize> = set.zones.iter().map(|z| idx(&z.region)).collect();
        let (mut sums, mut n, mut hops) = ([0.0f64; 4], 0usize, 0usize);
        println!("{}: {} zones in {} regions", set.name, set.zones.len(), regions.len());
        let mut start = 0;
        while start + secs(DEADLINE_H * 3600.0) <= period {
            let avail: Vec<Vec<bool>> = set
                .zones
                .iter()
                .map(|z| {
                    let s = z.trace.shifted(start);
                    (0..deadline).map(|t| s.at(t as Millis * gap + gap / 2).0 != Some(0)).collect()
                })
                .collect();
            let pb = Problem {
                avail: &avail,
                price: &price,
                zone_region: &zone_region,
                od_price: per_tick(set.on_demand),
                od_region: idx(set.od_region),
                moves: moves.clone(),
                regions: regions.len(),
            };
            let at = format!("{} from hour {}", set.name, start / 3_600_000);
            let best = optimum(&pb, work, deadline, boot, idx(set.od_region))
                .unwrap_or_else(|| panic!("{at}: no schedule meets the deadline"));
            let (od, od_met, _) = run(set, "on-demand", start, gb);
            let (safe, met, moved) = run(set, "safe", start, gb);
            let (greedy, greedy_met, _) = run(set, "greedy", start, gb);
            assert!(od_met, "{at}: always-on-demand missed");
            assert!(met, "{at}: the safe deadline policy missed its deadline");
            assert!(safe <= od * 1.01, "{at}: safe ${safe:.0} > always-on-demand ${od:.0} by more than 1%");
            if greedy_met && safe > greedy * 1.02 + 1e-6 {
                over_greedy.push(format!("{at}: safe ${safe:.0} vs greedy ${greedy:.0}"));
            }
            for (s, x) in sums.iter_mut().zip([od, best, safe, greedy]) {
                *s += x;
            }
            (safe_over, greedy_over, hops) = (safe_over + safe / best, greedy_over + greedy / best, hops + moved);
            n += 1;
            start += secs(WINDOW_EVERY_H * 3600.0);
        }
        let mean = |s: f64| s / n.max(1) as f64;
        println!(
            "  {n} windows, mean USD: on-demand {:.0}, optimum {:.0}, safe {:.0}, greedy {:.0}; safe moved data {:.1} times a window",
            mean(sums[0]),
            mean(sums[1]),
            mean(sums[2]),
            mean(sums[3]),
            hops as f64 / n.max(1) as f64
        );
        windows += n;
    }
    let (safe_x, greedy_x) = (safe_over / windows as f64, greedy_over / windows as f64);
    println!("{windows} windows: mean cost over the optimum: safe {safe_x:.3}x, greedy {greedy_x:.3}x");
    println!(
        "safe above a greedy that met the deadline by more than 2%: {}\n  {}",
        over_greedy.len(),
        over_greedy.join("\n  ")
    );
    assert!(over_greedy.len() * 100 <= windows.max(1), "safe above greedy by more than 2% in over 1% of the windows");
    safe_x
}
