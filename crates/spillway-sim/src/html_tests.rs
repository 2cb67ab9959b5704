//! Tests of the HTML report.
use super::*;
use crate::report::{BoundReport, InputReport, MarketCost, Stats, TierReport};

fn run(policy: &str, cost: f64) -> RunReport {
    let tier = |p95: f64, misses: usize| TierReport {
        jobs: 100,
        queue_wait_s: Stats { mean: p95 / 3.0, p50: p95 / 4.0, p95, p99: p95 * 1.5 },
        slo_misses: misses,
        ..TierReport::default()
    };
    RunReport {
        policy: policy.into(),
        cost_usd: cost,
        cost_by_market: MarketCost { fixed: cost * 0.6, on_demand: cost * 0.3, spot: cost * 0.1 },
        cost_vs_bound: cost / 80_000.0,
        jobs_submitted: 1200,
        jobs_completed: 1187,
        idle_gpu_hours: 431.25,
        scale_actions: 57,
        tiers: [("p0".into(), tier(250.0, 1)), ("p1".into(), tier(8280.0, 4)), ("p2".into(), tier(30.0, 0))]
            .into_iter()
            .collect(),
        ..RunReport::default()
    }
}

fn report() -> Report {
    Report {
        seed: 42,
        input: InputReport {
            source: "traces/<philly>&.csv".into(),
            config: "examples/spillway.toml".into(),
            jobs: 1200,
            skipped: BTreeMap::new(),
            total_gpu_hours: 15_321.5,
            pool_markets: BTreeMap::new(),
        },
        runs: vec![run("spillway", 91_234.5), run("static-peak", 160_000.0), run("fixed-only", 70_000.0)],
        bound: BoundReport {
            cost_usd: 80_000.0,
            cost_by_market: MarketCost { fixed: 60_000.0, on_demand: 15_000.0, spot: 5_000.0 },
            peak_gpus: 512,
        },
        spot: Default::default(),
        predictive: None,
    }
}

/// A week of samples with a daily demand wave, two pools (one named hostilely) and growing costs.
fn series(rows: usize) -> TimeSeries {
    let columns = "time_s demand:queued_gpus demand:running_gpus pool:<script>alert(1)</script>:capacity_gpus \
        pool:<script>alert(1)</script>:busy_gpus pool:aws-spot:capacity_gpus pool:aws-spot:busy_gpus cost:fixed \
        cost:on_demand cost:spot";
    let columns = columns.split_whitespace().map(String::from).collect();
    let span = 7.0 * SECONDS_PER_DAY;
    let (mut fixed, mut od, mut spot) = (0.0, 0.0, 0.0);
    let rows = (0..rows)
        .map(|i| {
            let t = span * i as f64 / rows.max(2) as f64 - 1.0;
            let wave = (t / SECONDS_PER_DAY * std::f64::consts::TAU).sin();
            let demand = (160.0 + 120.0 * wave).max(0.0);
            let burst = if i % 997 == 0 { 40.0 } else { 0.0 };
            let spot_cap = ((demand - 128.0).max(0.0) / 8.0).ceil() * 8.0;
            let running = demand.min(128.0 + spot_cap);
            fixed += 128.0 * 2.0 * span / rows as f64 / 3600.0;
            od += if demand > 250.0 { 5.0 } else { 0.0 };
            spot += spot_cap * 0.01;
            let (spot_busy, queued) = ((running - 128.0).max(0.0), demand - running + burst);
            vec![t.max(0.0), queued, running, 128.0, running.min(128.0), spot_cap, spot_busy, fixed, od, spot]
        })
        .collect();
    TimeSeries { columns, rows }
}

fn waits() -> BTreeMap<String, Vec<f64>> {
    let mut m = BTreeMap::new();
    m.insert("p0".to_string(), (0..500).map(|i| if i < 200 { 0.0 } else { f64::from(i) * 0.7 }).collect());
    m.insert("p1".to_string(), (0..800).map(|i| f64::from(i * i) * 0.05).collect());
    m.insert("p2".to_string(), (0..300).map(|i| f64::from(i) * 600.0).collect());
    m
}

#[test]
fn page_has_charts_and_rows() {
    let html = render(&report(), &series(5000), &waits());
    assert_eq!(html.matches("<svg").count(), 3);
    for policy in ["spillway", "static-peak", "fixed-only"] {
        assert!(html.contains(&format!("<td>{policy}</td>")), "{policy} row missing");
    }
    assert!(html.contains("<tr class=\"hl\"><td>spillway</td>"));
    assert!(html.contains("bound (instant overflow)"));
    assert!(html.contains("4m10s") && html.contains("2h18m"));
    assert!(html.ends_with("</html>\n"));
    // A page to look at in a browser, only on request so ordinary test runs write nothing.
    if let Some(path) = std::env::var_os("SPILLWAY_HTML_SAMPLE") {
        std::fs::write(path, &html).expect("write sample page");
    }
}

#[test]
fn input_text_is_escaped() {
    let html = render(&report(), &series(100), &waits());
    assert!(!html.contains("<script>"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; capacity"));
    assert!(html.contains("traces/&lt;philly&gt;&amp;.csv"));
}

#[test]
fn empty_and_degenerate_inputs_render() {
    let empty = render(&Report::default(), &TimeSeries::default(), &BTreeMap::new());
    assert_eq!(empty.matches("<svg").count(), 3);
    assert!(!empty.contains("NaN") && !empty.contains("inf"));
    let one = TimeSeries { rows: vec![vec![0.0, 1.0, 2.0]], ..series(0) };
    let zeros = TimeSeries { rows: vec![vec![0.0; 10]; 50], ..series(0) };
    let ragged = TimeSeries { columns: vec!["time_s".into(), "cost:spot".into()], rows: vec![vec![], vec![5.0]] };
    let mut tiers = BTreeMap::new();
    tiers.insert("p0".to_string(), vec![0.0, 0.0, f64::NAN]);
    tiers.insert("p1".to_string(), Vec::new());
    for s in [one, zeros, ragged] {
        let html = render(&report(), &s, &tiers);
        assert_eq!(html.matches("<svg").count(), 3);
        assert!(!html.contains("NaN"));
    }
}

#[test]
fn huge_series_stays_small() {
    let html = render(&report(), &series(200_000), &waits());
    assert!(html.len() < 1_000_000, "page is {} bytes", html.len());
    assert_eq!(html.matches("<svg").count(), 3);
    // Every drawn line or area holds at most about MAX_POINTS samples, stepped (x2) plus closing points.
    let longest = html.split("d=\"").skip(1).map(|p| p.split('"').next().unwrap_or("").matches('L').count());
    assert!(longest.max().unwrap_or(0) <= 2 * MAX_POINTS + 4);
}

#[test]
fn rendering_is_deterministic() {
    let (r, s, w) = (report(), series(20_000), waits());
    assert_eq!(render(&r, &s, &w), render(&r, &s, &w));
}

#[test]
fn formats_read_well() {
    assert_eq!(usd(1_234_567.4), "$1,234,567");
    assert_eq!(usd(12.5), "$12.50");
    assert_eq!(hours(1234.56), "1,234.6");
}

#[test]
fn a_run_that_left_jobs_unfinished_is_flagged_and_not_compared() {
    let mut r = report();
    (r.runs[2].jobs_unfinished, r.runs[2].jobs_completed) = (1188, 12);
    r.runs[0].cost_by_team = [("research".to_string(), 12.5), ("<vision>".to_string(), 3.0)].into_iter().collect();
    r.runs[0].cost_by_tier = [("p0".to_string(), 15.5)].into_iter().collect();
    let page = render(&r, &series(10), &waits());
    assert!(page.contains("<tr class=\"unfinished\"><td>fixed-only</td>"), "the unfinished run is greyed");
    assert!(page.contains("not comparable (12 of 1,200 done)"), "its ratio is withheld");
    assert!(page.contains("<h2>Cost by team and tier</h2>") && page.contains("team &lt;vision&gt;"));
    assert!(page.contains("<dt>SLO misses</dt>"), "the columns are defined");
    let text = crate::run::summary_table(&r);
    let row = text.lines().find(|l| l.starts_with("fixed-only")).unwrap();
    assert!(row.contains("n/a*") && text.contains("* fixed-only completed 12 of 1200 jobs (1188 unfinished"), "{text}");
    // A finished run below the bound is marked: it paid less by making jobs wait.
    (r.runs[2].jobs_unfinished, r.runs[2].jobs_completed) = (0, 1187);
    let page = render(&r, &series(10), &waits());
    assert!(page.contains("0.88× †"), "a run below the bound is marked");
    assert!(crate::run::summary_table(&r).contains("0.88+"));
}
