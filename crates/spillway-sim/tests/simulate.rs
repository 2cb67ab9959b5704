//! Whole-simulator tests: a seed and an input always give the same report bytes, every run finishes every job,
//! bad traces are refused with the file, line and column, and on the real Alibaba trace spillway beats the
//! references it is meant to beat.

use spillway_core::Config;
use spillway_sim::input::{SimJob, to_sim_jobs};
use spillway_sim::report::InputReport;
use spillway_sim::run::{Comparison, compare, write_outputs};
use spillway_sim::sim::{Check, SimOptions};
use spillway_sim::trace::{self, TraceFormat, alibaba, native, workload::Bursty};
use std::path::{Path, PathBuf};

fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

fn example(name: &str) -> Config {
    let path = repo_path("examples").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    Config::parse(&path.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"))
}

/// A fresh, empty directory under the system temp dir, unique to this process and `name`.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-sim-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

/// A small bursty day: sweeps, pretraining pushes and background jobs on the hybrid example.
fn bursty_day(cfg: &Config) -> Vec<SimJob> {
    let trace = Bursty { jobs: 150, days: 1.0, seed: 11 }.generate();
    to_sim_jobs(&trace, cfg).unwrap_or_else(|e| panic!("{e}"))
}

fn run(cfg: &Config, jobs: &[SimJob], seed: u64) -> Comparison {
    let input = InputReport { source: "bursty-150".into(), jobs: jobs.len(), ..InputReport::default() };
    let opts = SimOptions { seed, record: true, check: Check::Full, ..SimOptions::default() };
    compare(cfg, jobs, input, &opts, |_| {}).unwrap_or_else(|e| panic!("simulation failed: {e}"))
}

#[test]
fn the_same_seed_and_input_give_a_byte_identical_report() {
    let cfg = example("hybrid.toml");
    let jobs = bursty_day(&cfg);
    let (a, b) = (run(&cfg, &jobs, 5), run(&cfg, &jobs, 5));
    let (ja, jb) = (serde_json::to_string(&a.report).unwrap(), serde_json::to_string(&b.report).unwrap());
    assert!(ja == jb, "reports differ between two runs of seed 5");

    let (da, db) = (temp_dir("det-a"), temp_dir("det-b"));
    write_outputs(&da, &a, cfg.start_ms).unwrap();
    write_outputs(&db, &b, cfg.start_ms).unwrap();
    for file in ["report.json", "timeseries.csv", "events.jsonl", "report.html"] {
        let (x, y) = (std::fs::read(da.join(file)).unwrap(), std::fs::read(db.join(file)).unwrap());
        assert!(!x.is_empty(), "{file} is empty");
        assert!(x == y, "{file} differs between two runs of seed 5");
    }
    let _ = std::fs::remove_dir_all(&da);
    let _ = std::fs::remove_dir_all(&db);
}

#[test]
fn every_run_completes_every_job_and_loses_none() {
    let cfg = example("hybrid.toml");
    let jobs = bursty_day(&cfg);
    let cmp = run(&cfg, &jobs, 2);
    assert!(cmp.report.runs.iter().any(|r| r.policy == "spillway"));
    let policies: Vec<&str> = cmp.report.runs.iter().map(|r| r.policy.as_str()).collect();
    assert!(policies.len() >= 4, "spillway and the references: {policies:?}");
    for r in &cmp.report.runs {
        assert_eq!(r.jobs_submitted, jobs.len(), "{}", r.policy);
        assert_eq!(r.jobs_lost, 0, "{}", r.policy);
        let why = format!("{}: {} unfinished, {} failed", r.policy, r.jobs_unfinished, r.jobs_failed);
        assert_eq!(r.jobs_completed, r.jobs_submitted, "{why}");
        assert!(r.cost_usd > 0.0, "{}", r.policy);
    }
}

#[test]
fn a_gang_a_reference_policy_can_never_hold_fails_there_and_the_comparison_goes_on() {
    // 4 x 8 GPUs fits the cloud pools, not the 16 owned GPUs fixed-only keeps: that run fails it at submission
    // (it would wait for ever, holding the owned nodes back from the job behind it) and still reports.
    let cfg = example("alibaba-16gpu.toml");
    let text = "job_id,submit_s,duration_s,gpus,workers,tier\ngang,0,600,8,4,p0\nsmall,10,600,1,1,p0\n";
    let jobs = to_sim_jobs(&native::parse_str("jobs.csv", text).unwrap(), &cfg).unwrap_or_else(|e| panic!("{e}"));
    let cmp = run(&cfg, &jobs, 1);
    let report =
        |name: &str| cmp.report.runs.iter().find(|r| r.policy == name).unwrap_or_else(|| panic!("no {name} run"));
    let fixed_only = report("fixed-only");
    assert_eq!((fixed_only.jobs_failed, fixed_only.jobs_completed, fixed_only.jobs_unfinished), (1, 1, 0));
    assert_eq!(fixed_only.tiers["p0"].queue_wait_s.p99, 0.0, "the small job starts at once");
    let main = report("spillway");
    assert_eq!((main.jobs_failed, main.jobs_completed), (0, 2));
}

// ---- Bad input ----

/// The config the bad-input cases are checked against (largest node: 8 GPUs).
fn hybrid() -> Config {
    example("hybrid.toml")
}

#[test]
fn an_unknown_tier_in_a_native_trace_names_file_line_and_column() {
    let text = "job_id,submit_s,duration_s,gpus,tier\na,0,60,1,p1\n# a comment\nb,5,60,1,p9\n";
    let trace = native::parse_str("jobs.csv", text).expect("the loader leaves tier names to the config");
    let err = to_sim_jobs(&trace, &hybrid()).expect_err("p9 is not a tier of the config").to_string();
    assert!(err.starts_with("jobs.csv:4: column `tier`: "), "{err}");
    assert!(err.contains("p9"), "{err}");
}

#[test]
fn a_job_larger_than_any_instance_type_names_the_gpus_column() {
    let text = "job_id,submit_s,duration_s,gpus,workers,tier\na,0,60,8,4,p0\nhuge,10,60,16,1,p1\n";
    let trace = native::parse_str("jobs.csv", text).unwrap();
    let err = to_sim_jobs(&trace, &hybrid()).expect_err("16 GPUs per worker fit no node").to_string();
    assert!(err.starts_with("jobs.csv:3: column `gpus`: "), "{err}");
}

#[test]
fn a_malformed_row_names_the_line_and_column() {
    let cases = [
        ("a number that is not one", "job_id,submit_s,duration_s,gpus\na,0,60,1\nb,soon,60,1\n", 3, "submit_s"),
        ("a row missing fields", "job_id,submit_s,duration_s,gpus\na,0,60,1\nb,0,60\n", 3, "gpus"),
        ("zero GPUs", "job_id,submit_s,duration_s,gpus\na,0,60,0\n", 2, "gpus"),
        ("a negative duration", "job_id,submit_s,duration_s,gpus\n\na,0,-60,1\n", 3, "duration_s"),
    ];
    for (rule, text, line, column) in cases {
        let err = native::parse_str("jobs.csv", text).expect_err(rule).to_string();
        let want = format!("jobs.csv:{line}: column `{column}`: ");
        assert!(err.starts_with(&want), "{rule}: got {err}, want {want}...");
    }
}

/// The header of an Alibaba v2023 pod list, and a good row.
const ALIBABA_HEADER: &str =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";
const ALIBABA_ROW: &str = "p0,1000,1024,1,1000,,LS,Succeeded,0,100,10";

#[test]
fn trace_files_with_bad_rows_name_the_file_path() {
    let dir = temp_dir("bad-traces");
    let native_path = dir.join("jobs.csv");
    std::fs::write(&native_path, "job_id,submit_s,duration_s,gpus,tier\na,0,60,1,p1\nb,0,60,x,p1\n").unwrap();
    let err = trace::load(&native_path, TraceFormat::Native).unwrap_err().to_string();
    assert!(err.starts_with(&format!("{}:3: column `gpus`", native_path.display())), "{err}");

    let ali_path = dir.join("pods.csv");
    let pods = format!("{ALIBABA_HEADER}\n{ALIBABA_ROW}\np1,1000,1024,1,1000,,Gold,Succeeded,0,100,10\n");
    std::fs::write(&ali_path, pods).unwrap();
    let err = trace::load(&ali_path, TraceFormat::Alibaba2023).unwrap_err().to_string();
    assert!(err.starts_with(&format!("{}:3: column `qos`", ali_path.display())), "{err}");

    let missing = dir.join("absent.csv");
    let err = trace::load(&missing, TraceFormat::Native).unwrap_err().to_string();
    assert!(err.contains("absent.csv"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_alibaba_row_with_an_unknown_qos_names_line_and_column() {
    let text = format!("{ALIBABA_HEADER}\n{ALIBABA_ROW}\np1,1000,1024,1,1000,,Platinum,Running,5,100,10\n");
    let err = alibaba::parse_str("pods.csv", &text).unwrap_err().to_string();
    assert!(err.starts_with("pods.csv:3: column `qos`: "), "{err}");
}

// ---- The real Alibaba trace ----

#[test]
fn on_the_alibaba_trace_spillway_beats_static_peak_and_on_demand_reactive() {
    let Some(path) = spillway_sim::shared("traces/jobs/openb_pod_list_default.csv") else { return };
    let cfg = example("alibaba-16gpu.toml");
    let trace = trace::load(&path, TraceFormat::Alibaba2023).unwrap_or_else(|e| panic!("{e}"));
    let jobs = to_sim_jobs(&trace, &cfg).unwrap_or_else(|e| panic!("{e}"));
    let input = InputReport { source: path.display().to_string(), jobs: jobs.len(), ..InputReport::default() };
    let opts = SimOptions { seed: 1, ..SimOptions::default() };
    let cmp = compare(&cfg, &jobs, input, &opts, |_| {}).unwrap_or_else(|e| panic!("simulation failed: {e}"));
    let runs = &cmp.report.runs;
    let by = |name: &str| runs.iter().find(|r| r.policy == name).unwrap_or_else(|| panic!("no {name} run"));
    let (sw, peak, odr) = (by("spillway"), by("static-peak"), by("on-demand-reactive"));
    let p0_p95 = |r: &spillway_sim::report::RunReport| r.tiers.get("p0").map_or(0.0, |t| t.queue_wait_s.p95);
    let figures: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "{}: cost {:.0} USD, p0 p95 wait {:.0} s, completed {}/{}, lost {}",
                r.policy,
                r.cost_usd,
                p0_p95(r),
                r.jobs_completed,
                r.jobs_submitted,
                r.jobs_lost
            )
        })
        .collect();
    let figures = figures.join("\n  ");
    println!("alibaba-16gpu on {} jobs:\n  {figures}", jobs.len());
    for r in runs {
        assert_eq!(r.jobs_lost, 0, "{}: jobs lost\n  {figures}", r.policy);
    }
    assert!(sw.cost_usd < peak.cost_usd, "spillway costs no less than static-peak\n  {figures}");
    assert!(sw.cost_usd < odr.cost_usd, "spillway costs no less than on-demand-reactive\n  {figures}");
    assert!(p0_p95(sw) <= p0_p95(odr), "spillway's p0 p95 queue wait exceeds on-demand-reactive's\n  {figures}");
}

#[test]
fn a_tier_that_can_never_get_capacity_ends_the_run_with_its_jobs_unfinished() {
    // p2 may use only spot, and the cloud never fills a spot launch: its jobs can never start.
    let path = repo_path("examples/hybrid.toml");
    let text = std::fs::read_to_string(&path).unwrap() + "\n[tiers.p2]\nmarkets = [\"spot\"]\n";
    let text =
        text.replace("capacity = { \"p3.16xlarge\" = 24 }", "capacity = { \"p3.16xlarge\" = 0, \"p3.2xlarge\" = 0 }");
    let cfg = Config::parse("nospot.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    assert!(cfg.warnings().iter().any(|w| w.starts_with("tier p2:")), "{:?}", cfg.warnings());
    let jobs = bursty_day(&cfg);
    let out = run(&cfg, &jobs, 1);
    let spillway = out.report.runs.iter().find(|r| r.policy == "spillway").unwrap();
    let p2 = jobs.iter().filter(|j| j.spec.tier == "p2").count();
    assert!(p2 > 0);
    assert_eq!(spillway.jobs_unfinished, p2, "p2's jobs are reported unfinished, and the run ends");
    assert!(!out.report.comparable(spillway));
}

/// A cloud-only team's config (no fixed pool) simulates: the references that keep or grow owned capacity are not
/// run and the report says why, and every run that is made completes every job.
#[test]
fn a_cloud_only_config_skips_the_owned_references_and_says_why() {
    let mut cfg = hybrid();
    cfg.pools.retain(|p| p.market != spillway_core::Market::Fixed);
    for t in &mut cfg.tiers {
        t.markets.retain(|m| *m != spillway_core::Market::Fixed);
    }
    let jobs = bursty_day(&cfg);
    let cmp = run(&cfg, &jobs, 3);
    let ran: Vec<&str> = cmp.report.runs.iter().map(|r| r.policy.as_str()).collect();
    assert!(!ran.contains(&"static-peak") && !ran.contains(&"fixed-only"), "{ran:?}");
    assert!(ran.contains(&"spillway") && ran.contains(&"on-demand-reactive"), "{ran:?}");
    let skipped: Vec<&str> = cmp.report.skipped_policies.iter().map(|k| k.policy.as_str()).collect();
    assert_eq!(skipped, ["static-peak", "fixed-only"]);
    let text = spillway_sim::run::summary_table(&cmp.report);
    assert!(text.contains("static-peak not run: the config has no fixed pool"), "{text}");
    for r in &cmp.report.runs {
        assert_eq!((r.jobs_completed, r.jobs_unfinished), (jobs.len(), 0), "{}", r.policy);
    }
    // A hybrid config runs every reference and skips none.
    assert!(run(&hybrid(), &bursty_day(&hybrid()), 3).report.skipped_policies.is_empty());
}

#[test]
fn elastic_jobs_are_compared_with_their_rigid_twins_and_their_width_is_charted() {
    let cfg = example("hybrid.toml");
    let mut jobs = bursty_day(&cfg);
    let n = spillway_sim::input::make_elastic(&mut jobs, 0.5, false, 3);
    assert!(n > 0, "no job was made elastic");
    let cmp = run(&cfg, &jobs, 3);
    let e = cmp.report.elastic.as_ref().expect("no comparison with the rigid twins");
    assert_eq!(e.jobs, n);
    assert_eq!(e.finished_in_both, n, "every elastic job and its twin finish");
    assert!(e.cost_usd.elastic > 0.0 && e.cost_usd.rigid > 0.0);
    assert!(e.jct_ratio_p10 <= e.jct_ratio_p50 && e.jct_ratio_p50 <= e.jct_ratio_p90);
    assert!(e.width_share > 0.0 && e.width_share <= 1.0 + 1e-9, "{}", e.width_share);
    for col in ["elastic:gpus", "elastic:fewest_gpus", "elastic:most_gpus"] {
        assert!(cmp.series.columns.iter().any(|c| c == col), "no {col} column");
    }
    // At every sample, elastic jobs hold between their fewest and their most workers' GPUs.
    let at = |c: &str| cmp.series.columns.iter().position(|x| x == c).unwrap();
    let (held, fewest, most) = (at("elastic:gpus"), at("elastic:fewest_gpus"), at("elastic:most_gpus"));
    assert!(cmp.series.rows.iter().any(|r| r[held] > 0.0), "no elastic job ever ran");
    for r in &cmp.series.rows {
        assert!(r[fewest] <= r[held] && r[held] <= r[most], "{} <= {} <= {}", r[fewest], r[held], r[most]);
    }
    let dir = temp_dir("elastic");
    write_outputs(&dir, &cmp, cfg.start_ms).unwrap();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("Elastic jobs: width over time"), "no elastic section in report.html");
    let _ = std::fs::remove_dir_all(&dir);
    // The same jobs rigid have no comparison and no elastic columns.
    let rigid = spillway_sim::elastic_cmp::rigid_copy(&jobs);
    let cmp = run(&cfg, &rigid, 3);
    assert!(cmp.report.elastic.is_none());
    assert!(!cmp.series.columns.iter().any(|c| c.starts_with("elastic:")));
}
