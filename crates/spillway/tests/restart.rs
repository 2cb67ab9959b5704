//! A daemon you can leave running, with real processes: a finished job never runs again across a graceful stop and a
//! `kill -9`; a second daemon cannot take the data dir; a store that lost data is refused; nothing another user or a
//! job could read holds a token.

// A test of the shell: it reads the real clock.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[cluster]
name = "restart"
[[teams]]
name = "research"
[[instance_types]]
name = "vm4"
gpus = 4
gpu_model = "virtual"
on_demand_usd_per_hour = 12.0
[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 0.9
nodes = [{ count = 2, gpus = 4, gpu_model = "virtual" }]
[[pools]]
name = "od"
market = "on_demand"
instance_types = ["vm4"]
max_nodes = 2
boot_latency_s = 1
idle_timeout_s = 4
scale_out_cooldown_s = 1
scale_in_cooldown_s = 1
[tiers.p1]
burst_after_s = 1
"#;

/// Waits until every job in `ids` has ended; returns their states.
fn wait_ended(d: &Daemon, ids: &[u64]) -> BTreeMap<u64, String> {
    let t = Instant::now();
    loop {
        let states: BTreeMap<u64, String> = ids
            .iter()
            .map(|id| (*id, d.get(&format!("/v1/jobs/{id}"))["state"].as_str().unwrap_or("").to_string()))
            .collect();
        if states.values().all(|s| matches!(s.as_str(), "succeeded" | "failed" | "cancelled")) {
            return states;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "jobs did not end: {states:?}\n{}", d.log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Returns how many times each job appended its line to `runs`.
fn run_counts(runs: &Path) -> BTreeMap<u64, usize> {
    let mut out = BTreeMap::new();
    for line in std::fs::read_to_string(runs).unwrap_or_default().lines() {
        if let Some(id) =
            line.strip_prefix("job ").and_then(|r| r.split_whitespace().next()).and_then(|x| x.parse().ok())
        {
            *out.entry(id).or_insert(0) += 1;
        }
    }
    out
}

fn submit_counted(d: &Daemon, runs: &Path, gpus: u32) -> u64 {
    let line = format!("echo \"job $SPILLWAY_JOB_ID attempt $SPILLWAY_ATTEMPT\" >> {}", runs.display());
    let v = d.post("/v1/jobs", json!({"tier": "p1", "team": "research", "gpus": gpus, "argv": ["sh", "-c", line]}));
    v["id"].as_u64().unwrap()
}

fn assert_once(runs: &Path, ids: &[u64], when: &str) {
    let counts = run_counts(runs);
    for id in ids {
        assert_eq!(
            counts.get(id).copied().unwrap_or(0),
            1,
            "job {id} ran {:?} times {when}: {counts:?}",
            counts.get(id)
        );
    }
}

#[test]
fn a_finished_job_never_runs_again_across_a_graceful_stop_and_a_kill() {
    let mut d = Daemon::new("runs", CONFIG);
    let runs = d.dir.with_extension("runs");
    let _ = std::fs::remove_file(&runs);
    let first: Vec<u64> = (0..12).map(|i| submit_counted(&d, &runs, 1 + i % 3)).collect();
    let states = wait_ended(&d, &first);
    assert!(states.values().all(|s| s == "succeeded"), "{states:?}");
    assert_once(&runs, &first, "before any restart");

    // A graceful stop (Ctrl-C / SIGTERM) and a start: the finished jobs stay finished and never run again.
    d.stop();
    d.start();
    std::thread::sleep(Duration::from_secs(4));
    assert_once(&runs, &first, "after a graceful restart");
    for id in &first {
        assert_eq!(d.get(&format!("/v1/jobs/{id}"))["state"], "succeeded");
    }

    // More work, then kill -9 while the agents run on, and a start: still exactly once each.
    let second: Vec<u64> = (0..6).map(|_| submit_counted(&d, &runs, 2)).collect();
    wait_ended(&d, &second);
    d.kill9();
    d.start();
    std::thread::sleep(Duration::from_secs(4));
    let all: Vec<u64> = first.iter().chain(&second).copied().collect();
    assert_once(&runs, &all, "after a kill -9 and a restart");

    // A job submitted after the restarts runs, on an owned node that ran jobs before.
    let late = submit_counted(&d, &runs, 1);
    let states = wait_ended(&d, &[late]);
    assert_eq!(states[&late], "succeeded", "{}", d.log());
    assert_once(&runs, &[late], "for the job submitted after the restarts");
    let events = d.get(&format!("/v1/events?job={late}"));
    let started =
        events.as_array().unwrap().iter().find(|e| e["kind"] == "job_started").cloned().unwrap_or(Value::Null);
    assert!(started["detail"].as_str().unwrap_or("").contains("pool onprem"), "{started}");
}

#[test]
fn one_daemon_per_data_dir() {
    let d = Daemon::new("lock", CONFIG);
    let client_before = std::fs::read_to_string(d.dir.join("client.json")).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["server", "--config"])
        .arg(&d.config)
        .args(["--listen", &format!("127.0.0.1:{}", free_port()), "--data-dir"])
        .arg(&d.dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second daemon started on the same data dir");
    let pid = d.child.as_ref().unwrap().id();
    assert!(err.contains("in use by another spillway daemon") && err.contains(&format!("pid {pid}")), "{err}");
    assert_eq!(
        std::fs::read_to_string(d.dir.join("client.json")).unwrap(),
        client_before,
        "the second daemon touched client.json"
    );
    assert_eq!(d.raw("GET", "/healthz", None, None).0, 200, "the first daemon is unharmed");
}

/// Runs `spillway server` on `dir` expecting it to refuse to start; returns its stderr.
fn refused(d: &Daemon, extra: &[&str]) -> String {
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["server", "--config"])
        .arg(&d.config)
        .args(["--listen", &format!("127.0.0.1:{}", free_port()), "--data-dir"])
        .arg(&d.dir)
        .args(extra);
    let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert!(!status.success(), "the daemon started: {err}");
            return err;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("the daemon started on a store that lost data");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_store_that_lost_data_is_refused_unless_reinit() {
    let mut d = Daemon::new("lost", CONFIG);
    let runs = d.dir.with_extension("runs");
    let id = submit_counted(&d, &runs, 1);
    wait_ended(&d, &[id]);
    d.stop();
    // A zero-length database where a store was.
    std::fs::write(d.dir.join("spillway.db"), b"").unwrap();
    let _ = std::fs::remove_file(d.dir.join("spillway.db-wal"));
    let err = refused(&d, &[]);
    assert!(err.contains("refusing to start") && err.contains("--reinit"), "{err}");
    // With --reinit it starts anew and sets the old file aside.
    d.args = vec!["--reinit".into()];
    d.start();
    assert_eq!(d.get("/v1/jobs").as_array().unwrap().len(), 0);
    let aside =
        std::fs::read_dir(&d.dir).unwrap().flatten().any(|e| e.file_name().to_string_lossy().contains(".replaced-"));
    assert!(aside, "the old store was not set aside");
    d.args.clear();
    let id = submit_counted(&d, &runs, 1);
    wait_ended(&d, &[id]);
    // kill -9 and a deleted WAL: the log is shorter than it was.
    d.kill9();
    let _ = std::fs::remove_file(d.dir.join("spillway.db-wal"));
    let err = refused(&d, &[]);
    assert!(err.contains("refusing to start"), "{err}");
    // Nor does a store.json that cannot be read, or none at all, let that shorter log through.
    std::fs::write(d.dir.join("store.json"), b"garbage").unwrap();
    let err = refused(&d, &[]);
    assert!(err.contains("refusing to start") && err.contains("store.json is not a store marker"), "{err}");
    // (Here the WAL held the store's cluster id too, so it is refused as empty; a unit test of `check_store`
    // covers a missing marker beside a store that has one.)
    std::fs::remove_file(d.dir.join("store.json")).unwrap();
    let err = refused(&d, &[]);
    assert!(err.contains("refusing to start"), "{err}");
}

#[test]
fn no_file_another_user_or_a_job_can_read_holds_a_token() {
    let d = Daemon::new("secrets", CONFIG);
    let tokens = d.tokens();
    let mut secrets: Vec<String> = vec![tokens["admin"].as_str().unwrap().to_string()];
    secrets.extend(tokens["teams"].as_object().unwrap().values().map(|v| v.as_str().unwrap().to_string()));
    // A job that prints its environment and its agent's.
    let v = d.post("/v1/jobs", json!({"tier": "p1", "team": "research", "gpus": 1, "argv": ["sh", "-c", "env; echo; tr '\\0' '\\n' < /proc/$PPID/environ"]}));
    let id = v["id"].as_u64().unwrap();
    wait_ended(&d, &[id]);
    let (_, logs) = d.raw("GET", &format!("/v1/jobs/{id}/logs"), Some(&d.admin()), None);
    assert!(logs.contains("SPILLWAY_JOB_ID"), "the job's log is missing: {logs}");
    assert!(!logs.contains("SPILLWAY_AGENT_TOKEN"), "a job saw a node token variable:\n{logs}");
    for s in &secrets {
        assert!(!logs.contains(s.as_str()), "a job saw a user token");
    }
    // Data dir 0700, every file in it 0600 (or stricter), and the store holds no token in clear.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&d.dir), 0o700);
    let mut stack = vec![d.dir.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                assert_eq!(mode(&p) & 0o077, 0, "{} is {:o}", p.display(), mode(&p));
                stack.push(p);
            } else if m.is_file() {
                assert_eq!(mode(&p) & 0o077, 0, "{} is {:o}", p.display(), mode(&p));
                if p.to_string_lossy().contains("spillway.db") {
                    let bytes = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                    for s in &secrets {
                        assert!(!bytes.contains(s.as_str()), "{} holds a token in clear", p.display());
                    }
                }
            }
        }
    }
}

#[test]
fn jobs_that_finish_just_before_a_graceful_stop_do_not_run_again() {
    let mut d = Daemon::new("drain", CONFIG);
    let runs = d.dir.with_extension("runs");
    let _ = std::fs::remove_file(&runs);
    for round in 0..3 {
        let ids: Vec<u64> = (0..8).map(|_| submit_counted(&d, &runs, 1)).collect();
        // Stop while the jobs are finishing: their exits may not have been reported yet.
        std::thread::sleep(Duration::from_millis(700 + 150 * round));
        d.stop();
        d.start();
        wait_ended(&d, &ids);
        std::thread::sleep(Duration::from_secs(2));
        assert_once(&runs, &ids, &format!("after the graceful stop of round {round}"));
    }
}

#[test]
fn run_as_an_unknown_user_or_a_planted_jobs_dir_is_refused_at_start() {
    let base = std::env::temp_dir().join(format!("spillway-daemon-{}-runas", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let config = base.join("cluster.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let d = Daemon {
        dir: base.join("data"),
        config,
        port: free_port(),
        child: None,
        agent: ureq::Agent::new_with_defaults(),
        args: Vec::new(),
        env: Vec::new(),
    };
    let err = refused(&d, &["--run-as", "no-such-user-spillway"]);
    assert!(err.contains("no such user"), "{err}");
    // A jobs dir someone planted (here a symlink to another directory) is refused, and the target left alone.
    let target = base.join("victim");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    let planted = base.join("planted-jobs");
    std::os::unix::fs::symlink(&target, &planted).unwrap();
    let err = refused(&d, &["--jobs-dir", &planted.display().to_string()]);
    assert!(err.contains("not a directory of the daemon's user"), "{err}");
    assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o755);
}
