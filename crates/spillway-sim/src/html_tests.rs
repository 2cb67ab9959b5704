//! Tests of the HTML report.
use super::*;
use crate::report::{BoundReport, InputReport, MarketCost, Stats, TierReport};
use std::collections::BTreeSet;

fn run(policy: &str, cost: f64) -> RunReport {
    let tier = |p95: f64, misses: usize| TierReport {
        jobs: 100,
        started: 100,
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
        skipped_policies: Vec::new(),
        elastic: None,
        capped_bound: None,
        capped_bound_skipped: None,
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
    let html = render(&report(), &series(5000), &BTreeMap::new(), &waits(), None);
    // Capacity, the one small chart (only spillway has a series), cost, the two of interruptions, waits; no cost split
    // (no team or tier costs) and no spot chart (no spot columns).
    assert_eq!(html.matches("<svg").count(), 6);
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
    let html = render(&report(), &series(100), &BTreeMap::new(), &waits(), None);
    assert!(!html.contains("<script>"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; capacity"));
    assert!(html.contains("traces/&lt;philly&gt;&amp;.csv"));
}

#[test]
fn empty_and_degenerate_inputs_render() {
    let empty = render(&Report::default(), &TimeSeries::default(), &BTreeMap::new(), &BTreeMap::new(), None);
    // Capacity, cost, the two of interruptions (saying there are no runs), waits.
    assert_eq!(empty.matches("<svg").count(), 5);
    assert!(!empty.contains("NaN") && !empty.contains("inf"));
    let one = TimeSeries { rows: vec![vec![0.0, 1.0, 2.0]], ..series(0) };
    let zeros = TimeSeries { rows: vec![vec![0.0; 10]; 50], ..series(0) };
    let ragged = TimeSeries { columns: vec!["time_s".into(), "cost:spot".into()], rows: vec![vec![], vec![5.0]] };
    let mut tiers = BTreeMap::new();
    tiers.insert("p0".to_string(), vec![0.0, 0.0, f64::NAN]);
    tiers.insert("p1".to_string(), Vec::new());
    for s in [one, zeros, ragged] {
        let html = render(&report(), &s, &BTreeMap::new(), &tiers, None);
        assert_eq!(html.matches("<svg").count(), 6);
        assert!(!html.contains("NaN"));
    }
}

#[test]
fn huge_series_stays_small() {
    let others = ["static-peak", "fixed-only"].map(|p| (p.to_string(), series(200_000))).into();
    let html = render(&report(), &series(200_000), &others, &waits(), None);
    assert!(html.len() < 1_000_000, "page is {} bytes", html.len());
    assert_eq!(html.matches("<svg").count(), 8);
    // Every drawn line or area holds at most about MAX_POINTS samples, stepped (x2) plus closing points.
    let longest = html.split("d=\"").skip(1).map(|p| p.split('"').next().unwrap_or("").matches('L').count());
    assert!(longest.max().unwrap_or(0) <= 2 * MAX_POINTS + 4);
}

#[test]
fn rendering_is_deterministic() {
    let (r, s, w) = (report(), series(20_000), waits());
    assert_eq!(render(&r, &s, &BTreeMap::new(), &w, None), render(&r, &s, &BTreeMap::new(), &w, None));
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
    let page = render(&r, &series(10), &BTreeMap::new(), &waits(), None);
    assert!(page.contains("<tr class=\"unfinished\"><td>fixed-only</td>"), "the unfinished run is greyed");
    assert!(page.contains("not comparable (12 of 1,200 done)"), "its ratio is withheld");
    assert!(page.contains("<h2>Cost by team and tier</h2>") && page.contains("team &lt;vision&gt;"));
    assert!(page.contains("<dt>SLO misses</dt>"), "the columns are defined");
    let text = crate::run::summary_table(&r);
    let row = text.lines().find(|l| l.starts_with("fixed-only")).unwrap();
    assert!(row.contains("n/a*") && text.contains("* fixed-only completed 12 of 1200 jobs (1188 unfinished"), "{text}");
    // A tier none of whose jobs started has no wait to show, in the summary or on the page (it showed `0s`).
    for t in r.runs[2].tiers.values_mut() {
        (t.started, t.queue_wait_s) = (0, Stats::default());
    }
    let row = crate::run::summary_table(&r).lines().find(|l| l.starts_with("fixed-only")).unwrap().to_string();
    assert!(!row.contains("0s") && row.matches(" - ").count() >= 1, "{row}");
    let page = render(&r, &series(10), &BTreeMap::new(), &waits(), None);
    let fixed = &page[page.find("<td>fixed-only</td>").unwrap()..];
    assert!(!fixed[..fixed.find("</tr>").unwrap()].contains("<td>0s</td>"), "{fixed}");
    // A finished run below the bound is marked: it paid less by making jobs wait.
    (r.runs[2].jobs_unfinished, r.runs[2].jobs_completed) = (0, 1187);
    let page = render(&r, &series(10), &BTreeMap::new(), &waits(), None);
    assert!(page.contains("0.88× †"), "a run below the bound is marked");
    assert!(crate::run::summary_table(&r).contains("0.88+"));
}

/// Returns each `data-key` on the page with every colour (`fill`, `stroke` or CSS `background`) of a tag that carries
/// it.
fn key_colors(html: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (at, _) in html.match_indices(" data-key=\"") {
        let start = html[..at].rfind('<').unwrap_or(0);
        let tag = &html[start..at + html[at..].find('>').unwrap_or(0)];
        let key = tag.split(" data-key=\"").nth(1).and_then(|k| k.split('"').next()).unwrap_or("").to_string();
        let color = ["fill=\"", "stroke=\"", "background:"]
            .iter()
            .filter_map(|attr| tag.split(attr).nth(1))
            .map(|v| v.split(['"', ';']).next().unwrap_or("").to_string())
            .find(|c| c != "none");
        out.entry(key).or_default().extend(color);
    }
    out
}

/// A report with teams, tiers and three runs, each with its own series.
fn three_runs() -> (Report, BTreeMap<String, TimeSeries>) {
    let mut r = report();
    for (i, run) in r.runs.iter_mut().enumerate() {
        let k = i as f64 + 1.0;
        run.cost_by_team = [("research".to_string(), 100.0 * k), ("vision".to_string(), 50.0 * k)].into();
        run.cost_by_tier = [("p0".to_string(), 90.0 * k), ("p1".to_string(), 60.0 * k)].into();
        run.idle_cost_usd = 10.0 * k;
    }
    let others = r.runs[1..].iter().map(|run| (run.policy.clone(), series(300))).collect();
    (r, others)
}

#[test]
fn every_run_gets_a_small_chart_on_shared_scales() {
    let (mut r, mut others) = three_runs();
    let page = render(&r, &series(500), &others, &waits(), None);
    for policy in ["spillway", "static-peak", "fixed-only"] {
        let label = format!("aria-label=\"{policy}: GPUs provisioned per pool");
        assert_eq!(page.matches(&label).count(), 1, "one small chart for {policy}");
    }
    assert_eq!(page.matches("<figure>").count(), 3);
    // Same y axis in every small chart: the same top tick label in each.
    let svgs: Vec<&str> = page.split("<figure>").skip(1).collect();
    let top = |s: &str| s.split("text-anchor=\"end\">").nth(1).and_then(|t| t.split('<').next()).map(String::from);
    assert!(svgs.iter().all(|s| top(s) == top(svgs[0]) && top(s).is_some()));
    // A report of two runs has two.
    r.runs.truncate(2);
    others.remove("fixed-only");
    let page = render(&r, &series(500), &others, &waits(), None);
    assert_eq!(page.matches("<figure>").count(), 2);
    assert!(page.contains("Each line is drawn from at most 400 points"), "the downsampling is said");
}

#[test]
fn a_name_has_one_colour_in_every_chart() {
    let (r, others) = three_runs();
    let page = render(&r, &series(500), &others, &waits(), None);
    let keys = key_colors(&page);
    for (key, colors) in &keys {
        assert_eq!(colors.len(), 1, "{key} is drawn in {colors:?}");
    }
    // The pools, teams, tiers and markets are keyed in the charts where they appear.
    for key in ["pool:aws-spot", "team:research", "team:vision", "tier:p0", "tier:p1", "market:spot", "idle"] {
        assert!(keys.contains_key(key), "{key} is not keyed: {:?}", keys.keys());
    }
    let charts_with = |key: &str| page.split("<svg").filter(|s| s.contains(&format!("data-key=\"{key}\""))).count();
    assert!(charts_with("pool:aws-spot") >= 4, "the pool is in the big chart and every small one");
    assert!(charts_with("tier:p0") >= 2, "the tier is in the cost chart and the wait chart");
    // Pools, teams and tiers that share a chart differ.
    let color = |k: &str| keys.get(k).and_then(|c| c.first()).cloned();
    assert_ne!(color("team:research"), color("team:vision"));
    assert_ne!(color("tier:p0"), color("tier:p1"));
    assert_ne!(color("pool:aws-spot"), color("pool:<script>alert(1)</script>"));
    // The check itself catches a swap.
    let swapped = "<path data-key=\"pool:a\" stroke=\"#111\"/><rect data-key=\"pool:a\" fill=\"#222\"/>";
    assert_eq!(key_colors(swapped).get("pool:a").map(BTreeSet::len), Some(2));
}

#[test]
fn a_pool_takes_its_markets_colour_everywhere() {
    let (mut r, others) = three_runs();
    r.input.pool_markets = [("aws-spot".to_string(), "spot".to_string())].into();
    let keys = key_colors(&render(&r, &series(500), &others, &waits(), None));
    assert_eq!(keys.get("pool:aws-spot"), keys.get("market:spot"));
}

#[test]
fn interruptions_and_lost_work_are_charted_and_defined() {
    let (mut r, others) = three_runs();
    (r.runs[0].interruptions, r.runs[0].preemptions, r.runs[0].lost_gpu_hours) = (7, 3, 12.5);
    let page = render(&r, &series(500), &others, &waits(), None);
    let section = page.split("<h2>Interruptions and lost work").nth(1).and_then(|s| s.split("</section>").next());
    let section = section.expect("an interruptions section");
    assert_eq!(section.matches("<svg").count(), 2);
    assert!(section.contains("<title>spillway: 7 spot interruption notices</title>"));
    assert!(section.contains("<title>spillway: 12.5 GPU-hours redone</title>"));
    assert!(section.contains("7 spot + 3 preempted"));
    assert!(section.contains("<p class=\"note\">") && section.contains("since their last"), "defined in words");
}

#[test]
fn cost_by_team_and_tier_is_charted_per_run() {
    let (r, others) = three_runs();
    let page = render(&r, &series(500), &others, &waits(), None);
    let section = page.split("<h2>Cost by team and tier, every run").nth(1).and_then(|s| s.split("</section>").next());
    let section = section.expect("a cost split section");
    assert_eq!(section.matches("<svg").count(), 2, "one chart by team, one by tier");
    for policy in ["spillway", "static-peak", "fixed-only"] {
        assert!(section.contains(&format!("<title>{policy}: team research")), "{policy} has a team bar");
        assert!(section.contains(&format!("<title>{policy}: tier p1")), "{policy} has a tier bar");
    }
}

#[test]
fn every_chart_has_a_caption() {
    let (mut r, others) = three_runs();
    r.runs[0].interruptions = 1;
    for page in [
        render(&r, &series(500), &others, &waits(), None),
        render(&Report::default(), &TimeSeries::default(), &BTreeMap::new(), &BTreeMap::new(), None),
    ] {
        let sections: Vec<&str> = page.split("<section>").skip(1).collect();
        let charts: usize = sections.iter().map(|s| s.matches("<svg").count()).sum();
        assert_eq!(charts, page.matches("<svg").count(), "every chart is in a section");
        for s in sections.iter().filter(|s| s.contains("<svg")) {
            let note = s.split("<p class=\"note\">").nth(1).and_then(|n| n.split("</p>").next()).unwrap_or("");
            assert!(note.len() > 60, "a chart without a caption: {}", &s[..s.len().min(80)]);
            assert!(s.contains("<h2>"), "a chart without a title");
        }
    }
}
