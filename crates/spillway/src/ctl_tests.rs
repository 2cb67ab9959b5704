//! Unit tests of `ctl.rs`: job files, flag overrides, tables, times.

use super::*;
use crate::window::parse_time;
use spillway_api::AttemptView;

const GOOD: &str = "name = \"train\"\ntier = \"p0\"\ngpus = 4\nworkers = 2\nargv = [\"python3\", \"train.py\"]\n\
                    interruptible = false\n[env]\nA = \"1\"\nB = \"2\"\n";

#[test]
fn a_good_job_file_parses() {
    let f = parse_job_file(Path::new("job.toml"), GOOD).unwrap_or_default();
    assert_eq!(f.tier.as_deref(), Some("p0"));
    assert_eq!((f.gpus, f.workers, f.interruptible), (Some(4), Some(2), Some(false)));
    let s = build_submit(&SubmitArgs::default(), f).ok().unwrap_or_default();
    assert_eq!(s.argv, ["python3", "train.py"]);
    assert_eq!(s.env.get("B").map(String::as_str), Some("2"));
    assert_eq!(s.name.as_deref(), Some("train"));
}

#[test]
fn unknown_fields_and_bad_types_are_named() {
    let e = parse_job_file(Path::new("job.toml"), "tier = \"p1\"\ngpuz = 2\n").err().map(|e| e.to_string());
    let e = e.unwrap_or_default();
    assert!(e.contains("job.toml") && e.contains("gpuz") && e.contains("line 2"), "{e}");
    let e = parse_job_file(Path::new("j.toml"), "gpus = \"two\"\n").err().map(|e| e.to_string());
    let e = e.unwrap_or_default();
    assert!(e.contains("j.toml") && e.contains("`gpus`"), "{e}");
}

#[test]
fn non_finite_numbers_are_refused_not_dropped() {
    for (text, field, what) in [
        ("tier = \"p1\"\ncheckpoint_interval_s = nan\n", "checkpoint_interval_s", "nan is not a number"),
        ("deadline_s = inf\n", "deadline_s", "inf is not a finite number"),
        ("expected_duration_s = -inf\n", "expected_duration_s", "-inf is not a finite number"),
    ] {
        let e = parse_job_file(Path::new("job.toml"), text).err().map(|e| e.to_string()).unwrap_or_default();
        let line = text.lines().position(|l| l.starts_with(field)).map_or(0, |i| i + 1);
        assert_eq!(e, format!("job.toml: line {line}, field `{field}`: {what}"));
    }
}

#[test]
fn a_checkpoint_size_flag_must_be_a_finite_size() {
    for bad in ["nan", "inf", "-inf", "-5", "x"] {
        assert!(gigabytes(bad).is_err(), "{bad} accepted");
    }
    assert_eq!((gigabytes("0"), gigabytes(" 50.5 ")), (Ok(0.0), Ok(50.5)));
}

#[test]
fn flags_override_the_file() {
    let f = parse_job_file(Path::new("job.toml"), GOOD).unwrap_or_default();
    let args = SubmitArgs {
        tier: Some("p2".into()),
        gpus: Some(1),
        env: vec![("B".into(), "x".into()), ("C".into(), "3".into())],
        interruptible: Some(true),
        argv: vec!["sleep".into(), "1".into()],
        ..Default::default()
    };
    let s = build_submit(&args, f).ok().unwrap_or_default();
    assert_eq!((s.tier.as_str(), s.gpus, s.workers, s.interruptible), ("p2", 1, Some(2), Some(true)));
    assert_eq!(s.argv, ["sleep", "1"]);
    let env: Vec<_> = s.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(env, ["A=1", "B=x", "C=3"]);
}

#[test]
fn defaults_and_missing_argv() {
    let args = SubmitArgs { argv: vec!["true".into()], ..Default::default() };
    let s = build_submit(&args, JobFile::default()).ok().unwrap_or_default();
    assert_eq!((s.tier.as_str(), s.gpus), ("p1", 1));
    let here = std::env::current_dir().ok().and_then(|d| d.to_str().map(String::from));
    assert_eq!(s.workdir, here, "the job starts where it was submitted from, as with sbatch");
    let file = JobFile { workdir: Some("/data".into()), ..JobFile::default() };
    let s = build_submit(&args, file).ok().unwrap_or_default();
    assert_eq!(s.workdir.as_deref(), Some("/data"), "a job file's workdir wins over the default");
    let e = build_submit(&SubmitArgs::default(), JobFile::default()).err().map(|e| e.to_string());
    assert!(e.unwrap_or_default().contains("no command"));
}

#[test]
fn a_flag_for_the_most_workers_overrides_the_file_under_either_name() {
    let file = || JobFile { max_workers: Some(2), min_workers: Some(1), ..JobFile::default() };
    let args = SubmitArgs { argv: vec!["true".into()], workers: Some(5), ..Default::default() };
    let s = build_submit(&args, file()).ok().unwrap_or_default();
    assert_eq!((s.workers, s.max_workers, s.min_workers), (Some(5), None, Some(1)));
    let file = JobFile { workers: Some(3), ..JobFile::default() };
    let args = SubmitArgs { argv: vec!["true".into()], max_workers: Some(4), ..Default::default() };
    let s = build_submit(&args, file).ok().unwrap_or_default();
    assert_eq!((s.workers, s.max_workers), (None, Some(4)));
}

#[test]
fn the_job_file_covers_every_submit_field() {
    // A field added to JobSubmit but not to JobFile makes this fail (deny_unknown_fields).
    let full = JobSubmit {
        name: Some("n".into()),
        tier: "p1".into(),
        team: Some("t".into()),
        gpus: 1,
        workers: Some(1),
        max_workers: Some(1),
        min_workers: Some(1),
        argv: vec!["x".into()],
        env: BTreeMap::from([("K".into(), "V".into())]),
        workdir: Some("/".into()),
        gpu_model: Some("h100".into()),
        interruptible: Some(true),
        checkpoint_interval_s: Some(1.0),
        deadline_s: Some(1.0),
        expected_duration_s: Some(1.0),
        checkpoint_gb: None,
        data_region: None,
    };
    let v = serde_json::to_value(&full).unwrap_or_default();
    assert!(serde_json::from_value::<JobFile>(v).is_ok());
}

#[test]
fn the_jobs_table_says_apart_how_long_a_job_waited_and_ran() {
    let job = |state: &str, started: Option<f64>, ended: Option<f64>| JobView {
        state: state.into(),
        submitted_at: 1000.0,
        started_at: started,
        ended_at: ended,
        ..Default::default()
    };
    let cells = |j: JobView| -> Vec<String> {
        let t = jobs_table(&[j], 2000.0);
        let row: Vec<String> = t.lines().nth(1).unwrap_or_default().split_whitespace().map(String::from).collect();
        row[row.len() - 3..row.len() - 1].to_vec()
    };
    assert_eq!(cells(job("queued", None, None)), ["16m40s", "-"], "waiting so far, never ran");
    assert_eq!(cells(job("running", Some(1060.0), None)), ["1m00s", "15m40s"], "waited, running so far");
    assert_eq!(cells(job("succeeded", Some(1060.0), Some(1360.0))), ["1m00s", "5m00s"], "waited, ran");
    assert_eq!(cells(job("cancelled", None, Some(1300.0))), ["5m00s", "-"], "cancelled while waiting");
    // Requeued after an attempt: it waits again, and its last attempt's run time is not shown as current.
    assert_eq!(cells(job("queued", Some(1060.0), Some(1360.0)))[1], "-");
}

#[test]
fn tables_have_their_columns() {
    let job = JobView {
        id: 17,
        name: "train".into(),
        tier: "p1".into(),
        team: "research".into(),
        state: "queued".into(),
        gpus: 2,
        workers: 4,
        submitted_at: 1000.0,
        pending_reason: Some("no_capacity".into()),
        ..Default::default()
    };
    let t = jobs_table(&[job], 1300.0);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["ID", "NAME", "TIER", "TEAM", "STATE", "ATTEMPT", "GPUS", "NODES", "WAITED", "RAN", "REASON"]
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["17", "train", "p1", "research", "queued", "0", "4x2", "-", "5m00s", "-", "no_capacity"]
    );
    // Columns line up: each header starts where its cells start.
    assert_eq!(lines[0].find("TEAM"), lines[1].find("research"));
    let node = NodeView {
        id: 3,
        pool: "spot".into(),
        market: "spot".into(),
        state: "ready".into(),
        gpus: 8,
        free_gpus: 6,
        jobs: vec![17, 18],
        ..Default::default()
    };
    let t = nodes_table(&[node]);
    assert!(t.starts_with("ID  POOL  TYPE  MARKET  STATE  GPUS  FREE  JOBS\n"), "{t}");
    assert!(t.contains("17,18"));
    let t = pools_table(&[PoolView { name: "spot".into(), protected: true, ..Default::default() }]);
    assert!(t.starts_with("NAME") && t.contains("spot (protected)") && t.contains("BUSY"), "{t}");
    let t = events_table(&[EventView { at: 86400.0 * 365.0, kind: "scale_out".into(), ..Default::default() }]);
    assert!(t.contains("TIME") && t.contains("DETAIL") && t.contains("1971-01-01T00:00:00Z"), "{t}");
    let c = CostView { total_usd: 12.5, by_team: BTreeMap::from([("research".into(), 10.0)]), ..Default::default() };
    let t = cost_table(&c);
    assert!(t.contains("total") && t.contains("12.50") && t.contains("research") && t.contains("10.00"), "{t}");
    let t = cost_table(&CostView { egress_usd: 1.25, ..c });
    assert!(t.lines().any(|l| l.starts_with("egress") && l.contains("1.25")), "{t}");
}

#[test]
fn durations_and_times() {
    assert_eq!(fmt_duration(45.2), "45s");
    assert_eq!(fmt_duration(3725.0), "1h02m");
    assert_eq!(fmt_duration(2.0 * 86400.0 + 7200.0), "2d02h");
    assert_eq!(fmt_time(1_700_000_000.0), "2023-11-14T22:13:20Z");
}

#[test]
fn a_what_if_answer_says_when_no_waiting_job_may_use_the_pool() {
    let w = WhatIfView { pool: "od".into(), max_nodes: 12, jobs: 16, may_use: 0, ..WhatIfView::default() };
    let text = what_if_text(&w);
    assert!(text.contains("would launch nothing for 16 waiting jobs"), "{text}");
    assert!(text.contains("none of them may use pool od"), "{text}");
    let some = WhatIfView { may_use: 3, ..w.clone() };
    assert!(what_if_text(&some).contains("for 16 waiting jobs (3 of them may use pool od)"), "{}", what_if_text(&some));
    let all = WhatIfView { may_use: 16, ..w };
    assert!(!what_if_text(&all).contains("of them"), "{}", what_if_text(&all));
}

#[test]
fn a_job_that_exited_shows_its_code_or_signal() {
    let failed = JobView { id: 4, state: "failed".into(), exit_code: Some(3), ..JobView::default() };
    assert!(jobs_table(std::slice::from_ref(&failed), 0.0).contains("exit code 3"));
    assert!(job_detail(&failed, 0.0).contains("State=failed ExitCode=3"), "{}", job_detail(&failed, 0.0));
    let killed = JobView { exit_code: None, exit_signal: Some(9), ..failed };
    assert!(job_detail(&killed, 0.0).contains("Signal=9"));
    let queued = JobView { state: "queued".into(), pending_reason: Some("no_capacity".into()), ..JobView::default() };
    assert!(job_detail(&queued, 0.0).contains("State=queued Reason=no_capacity"), "{}", job_detail(&queued, 0.0));
    assert!(!job_detail(&queued, 0.0).contains("ExitCode"));
}

#[test]
fn jobs_show_tells_where_a_jobs_data_is() {
    let j = JobView {
        checkpoint_gb: Some(50.0),
        data_region: Some("us-east-1".into()),
        egress_usd: 1.0,
        ..JobView::default()
    };
    assert!(job_detail(&j, 0.0).contains("Data=50GB DataRegion=us-east-1 Egress=$1.00"), "{}", job_detail(&j, 0.0));
    assert!(!job_detail(&JobView::default(), 0.0).contains("Data="));
}

#[test]
fn jobs_show_tells_a_deadline_job_on_its_reserve() {
    let j = JobView { spot_state: Some("deadline_reserve".into()), ..JobView::default() };
    assert!(job_detail(&j, 0.0).contains("   Spot=deadline_reserve\n"), "{}", job_detail(&j, 0.0));
    assert!(!job_detail(&JobView::default(), 0.0).contains("Spot="));
}

#[test]
fn jobs_show_tells_every_attempt() {
    let a = |attempt, end: &str, code| AttemptView {
        attempt,
        nodes: vec![attempt + 2, attempt + 3],
        started_at: 100.0 * attempt as f64,
        ended_at: Some(100.0 * attempt as f64 + 50.0),
        end: Some(end.into()),
        exit_code: code,
        exit_signal: None,
        cost_usd: 1.5,
    };
    let j = JobView {
        id: 7,
        state: "failed".into(),
        attempt: 2,
        exit_code: Some(3),
        attempts: vec![a(1, "spot interruption, checkpointed", None), a(2, "failed", Some(3))],
        cost_usd: 3.0,
        ..JobView::default()
    };
    let text = job_detail(&j, 0.0);
    assert!(text.contains("Attempt=1 Nodes=3,4 Start=1970-01-01T00:01:40Z End=1970-01-01T00:02:30Z"), "{text}");
    assert!(text.contains("Ended=spot interruption, checkpointed Cost=$1.50"), "{text}");
    assert!(text.contains("Attempt=2 Nodes=4,5") && text.contains("Ended=failed ExitCode=3"), "{text}");
    assert!(text.contains("Cost=$3.00"), "{text}");
}

#[test]
fn cost_windows_take_times_epochs_and_ages() {
    assert_eq!(parse_time("2026-12-02T05:40:00Z"), Some(1_796_190_000.0));
    assert_eq!(parse_time(&fmt_time(1_796_190_000.5)), Some(1_796_190_000.0), "what the tables print reads back");
    assert_eq!(parse_time("2024-02-29T23:59:59.5Z"), Some(1_709_251_199.5), "a leap day");
    assert_eq!(parse_time("2026-12-02T06:40:00+01:00"), Some(1_796_190_000.0), "an offset");
    assert_eq!(parse_time("2026-12-02T00:40:00-05:00"), Some(1_796_190_000.0));
    for bad in [
        "2026-13-02T05:40:00Z",
        "2026-12-02T05:40:00",
        "2026-12-02",
        "yesterday",
        "2026-12-02T25:00:00Z",
        "2026-02-30T00:00:00Z",
        "2025-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "0000-01-01T00:00:00Z",
        "99999-01-01T00:00:00Z",
    ] {
        assert_eq!(parse_time(bad), None, "{bad}");
    }
    let now = now();
    let age = |s: &str| instant(s).ok().and_then(|x| x.parse::<f64>().ok()).map(|t| (now - t).round());
    assert_eq!(age("1h30m"), Some(5400.0));
    assert_eq!(age("90s"), Some(90.0));
    assert_eq!(instant("1796190000").ok().as_deref(), Some("1796190000"));
    for bad in ["90", "0", "-5m", "999999999999h", "5x"] {
        let e = instant(bad).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
    }
}

#[test]
fn a_job_file_carries_its_data_size_and_region() {
    let text = "tier = \"p1\"\nargv = [\"true\"]\ncheckpoint_gb = 50.0\ndata_region = \"us-east-1\"\n";
    let f = parse_job_file(Path::new("job.toml"), text).unwrap_or_default();
    let args = SubmitArgs { data_region: Some("us-west-2".into()), ..Default::default() };
    let s = build_submit(&args, f).ok().unwrap_or_default();
    assert_eq!((s.checkpoint_gb, s.data_region.as_deref()), (Some(50.0), Some("us-west-2")), "the flag wins");
}

#[test]
fn a_jobs_command_is_shown_with_its_control_characters_escaped() {
    let argv = vec!["sh".into(), "-c".into(), "echo a\nprintf '\u{1b}[2J'".into(), "naïve".into()];
    let j = JobView { id: 1, state: "queued".into(), argv, ..JobView::default() };
    let text = job_detail(&j, 0.0);
    assert!(!text.contains('\u{1b}'), "an escape sequence reached the terminal: {text:?}");
    assert!(text.contains(r"Command=sh -c echo a\nprintf '\u{1b}[2J' naïve"), "{text}");
}

#[test]
fn waited_and_ran_count_from_the_last_attempt_not_the_first() {
    let a = |attempt, started_at: f64, ended_at: f64| AttemptView {
        attempt,
        nodes: vec![1],
        started_at,
        ended_at: Some(ended_at),
        end: None,
        exit_code: None,
        exit_signal: None,
        cost_usd: 0.0,
    };
    // Ran 5 s, was requeued and waited 41 s, then ran 14 s.
    let j = JobView {
        id: 3,
        state: "succeeded".into(),
        submitted_at: 90.0,
        started_at: Some(100.0),
        ended_at: Some(160.0),
        attempts: vec![a(1, 100.0, 105.0), a(2, 146.0, 160.0)],
        ..JobView::default()
    };
    let table = jobs_table(std::slice::from_ref(&j), 200.0);
    assert!(table.lines().nth(1).is_some_and(|row| row.contains(" 41s ") && row.contains(" 14s ")), "{table}");
    // Requeued and waiting again: since its attempt ended, not since it was submitted.
    let again = JobView { state: "queued".into(), ended_at: None, attempts: vec![a(1, 100.0, 105.0)], ..j };
    let table = jobs_table(std::slice::from_ref(&again), 120.0);
    assert!(table.lines().nth(1).is_some_and(|row| row.contains(" 15s ")), "{table}");
}
