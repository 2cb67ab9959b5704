//! The daemon with real processes: `spillway server` on a temp data dir, agents started by the local provider, jobs
//! running `examples/train.py`. End to end (interruptions, `kill -9` and restart), security and bad input.

// A test of the shell: it reads the real clock.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

const E2E_CONFIG: &str = r#"
[cluster]
name = "e2e"
[[teams]]
name = "research"
[[teams]]
name = "applied"
[[instance_types]]
name = "vm4"
gpus = 4
gpu_model = "virtual"
on_demand_usd_per_hour = 12.0
spot_usd_per_hour = 3.6
[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 0.9
nodes = [{ count = 2, gpus = 4, gpu_model = "virtual" }]
[[pools]]
name = "od"
market = "on_demand"
instance_types = ["vm4"]
max_nodes = 4
boot_latency_s = 1
idle_timeout_s = 6
scale_out_cooldown_s = 1
scale_in_cooldown_s = 1
[[pools]]
name = "spot"
market = "spot"
instance_types = ["vm4"]
max_nodes = 6
boot_latency_s = 1
idle_timeout_s = 6
scale_out_cooldown_s = 1
scale_in_cooldown_s = 1
interruption_notice_s = 4
[tiers.p1]
burst_after_s = 1
spot_fallback_after_s = 15
checkpoint_time_s = 2
[tiers.p2]
burst_after_s = 1
checkpoint_time_s = 2
"#;

/// A guard around train.py: holds an exclusive lock per (job, rank) while it runs, so two attempts of one worker
/// running at once is caught (the second prints DOUBLE RUN and fails).
const GUARD: &str = r#"
import fcntl, os, sys
d = os.environ["SPILLWAY_CHECKPOINT_DIR"]
os.makedirs(d, exist_ok=True)
f = open(os.path.join(d, ".lock-rank" + os.environ.get("RANK", "0")), "w")
try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    print("DOUBLE RUN", flush=True)
    sys.exit(3)
os.set_inheritable(f.fileno(), True)
os.execvp(sys.argv[1], sys.argv[1:])
"#;

#[test]
fn end_to_end_jobs_survive_interruptions_and_a_daemon_kill() {
    if !python() {
        println!("skipping: python3 not found (the jobs run examples/train.py)");
        return;
    }
    let mut d = Daemon::new("e2e", E2E_CONFIG);
    let guard = d.dir.with_extension("guard.py");
    std::fs::write(&guard, GUARD).unwrap();
    let train = repo("examples/train.py").display().to_string();
    let argv = |steps: u32| {
        json!([
            "python3",
            guard.display().to_string(),
            "python3",
            train,
            "--steps",
            steps.to_string(),
            "--step-time",
            "0.3",
            "--checkpoint-every",
            "3"
        ])
    };
    let mut ids = Vec::new();
    let mix: [(&str, &str, u32, u32, usize); 5] = [
        ("p0", "research", 2, 1, 4),
        ("p1", "research", 2, 1, 6),
        ("p1", "applied", 2, 2, 1),
        ("p1", "applied", 1, 1, 2),
        ("p2", "applied", 1, 1, 7),
    ];
    for (tier, team, gpus, workers, n) in mix {
        for _ in 0..n {
            let v = d.post(
                "/v1/jobs",
                json!({"tier": tier, "team": team, "gpus": gpus, "workers": workers, "argv": argv(40)}),
            );
            ids.push(v["id"].as_u64().unwrap());
        }
    }
    assert_eq!(ids.len(), 20);
    // Two interruptions of busy spot nodes, a few seconds apart, once their jobs have checkpointed.
    let (mut interrupted_jobs, mut interrupted_nodes): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    let t = Instant::now();
    while interrupted_jobs.len() < 2 {
        assert!(t.elapsed() < Duration::from_secs(90), "no busy spot node to interrupt; log: {}", d.log());
        std::thread::sleep(Duration::from_millis(500));
        let nodes = d.get("/v1/nodes");
        let busy = nodes.as_array().unwrap().iter().find(|n| {
            n["market"] == "spot"
                && n["state"] == "ready"
                && n["jobs"].as_array().is_some_and(|j| {
                    !j.is_empty() && j.iter().all(|x| !interrupted_jobs.contains(&x.as_u64().unwrap()))
                })
        });
        let Some(n) = busy else { continue };
        interrupted_nodes.push(n["id"].as_u64().unwrap());
        let jobs: Vec<u64> = n["jobs"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        // Let the jobs get past a checkpoint first (3 steps of 0.3 s plus the start-up).
        std::thread::sleep(Duration::from_secs(3));
        d.post(&format!("/v1/nodes/{}/interrupt", n["id"]), json!({}));
        interrupted_jobs.extend(jobs);
        std::thread::sleep(Duration::from_secs(2));
    }
    // The daemon dies without warning and comes back: jobs and nodes are adopted from the store and the provider.
    std::thread::sleep(Duration::from_secs(2));
    d.kill9();
    std::thread::sleep(Duration::from_secs(1));
    d.start();
    let t = Instant::now();
    loop {
        let jobs = d.get("/v1/jobs?limit=1000");
        let states: Vec<(u64, String)> = jobs
            .as_array()
            .unwrap()
            .iter()
            .map(|j| (j["id"].as_u64().unwrap(), j["state"].as_str().unwrap().to_string()))
            .collect();
        if states.iter().all(|(_, s)| s == "succeeded" || s == "failed" || s == "cancelled") {
            assert!(states.iter().all(|(_, s)| s == "succeeded"), "{states:?}\n{}", d.log());
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(240), "jobs did not finish: {states:?}\n{}", d.log());
        std::thread::sleep(Duration::from_millis(500));
    }
    let all_done = Instant::now();
    // Each interrupted job resumed from its checkpoint: a later attempt started past step 0.
    for id in &interrupted_jobs {
        let (s, logs) = d.raw("GET", &format!("/v1/jobs/{id}/logs"), Some(&d.admin()), None);
        assert_eq!(s, 200);
        let resumed =
            logs.lines().any(|l| l.starts_with("resumed from step") && !l.starts_with("resumed from step 0 "));
        assert!(resumed, "job {id} did not resume from a checkpoint:\n{logs}");
        assert!(d.get(&format!("/v1/jobs/{id}"))["attempt"].as_u64().unwrap() >= 2);
    }
    // No job ever ran twice at once (the guard would have failed the job and printed DOUBLE RUN).
    for id in &ids {
        let (_, logs) = d.raw("GET", &format!("/v1/jobs/{id}/logs"), Some(&d.admin()), None);
        assert!(!logs.contains("DOUBLE RUN"), "job {id} ran twice at once:\n{logs}");
        assert!(logs.contains("done:"), "job {id} did not finish its steps:\n{logs}");
    }
    // Cloud pools return to min (0) within the idle timeout plus a cycle or two.
    loop {
        let pools = d.get("/v1/pools");
        let cloud: u64 = pools
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["market"] != "fixed")
            .map(|p| p["nodes"].as_u64().unwrap())
            .sum();
        if cloud == 0 {
            break;
        }
        assert!(all_done.elapsed() < Duration::from_secs(6 + 10), "cloud pools not back at min: {pools}");
        std::thread::sleep(Duration::from_millis(250));
    }
    println!("cloud pools at min {:.1} s after the last job ended", all_done.elapsed().as_secs_f64());
    let events = d.get("/v1/events?kind=interruption");
    assert!(!events.as_array().unwrap().is_empty(), "no interruption recorded");
    // A reclaimed spot node says so: it was interrupted, not lost, and has no free GPUs left.
    let nodes = d.get("/v1/nodes");
    for id in &interrupted_nodes {
        let n = nodes.as_array().unwrap().iter().find(|n| n["id"] == *id).unwrap();
        assert_eq!((n["state"].as_str(), n["free_gpus"].as_u64()), (Some("interrupted"), Some(0)), "{n}");
    }
    d.stop();
    std::thread::sleep(Duration::from_millis(500));
    assert!(d.agents_alive().is_empty(), "agent processes left behind: {:?}", d.agents_alive());
}

const SMALL_CONFIG: &str = r#"
[cluster]
name = "sec"
[[teams]]
name = "research"
[[teams]]
name = "applied"
[[instance_types]]
name = "vm4"
gpus = 4
gpu_model = "virtual"
on_demand_usd_per_hour = 12.0
[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 0.9
nodes = [{ count = 2, gpus = 2, gpu_model = "virtual" }]
[[pools]]
name = "od"
market = "on_demand"
instance_types = ["vm4"]
max_nodes = 2
boot_latency_s = 1
"#;

#[test]
fn a_job_that_fails_tells_how_in_its_view_the_cli_and_the_event_log() {
    let d = Daemon::new("exit", SMALL_CONFIG);
    let submit = |argv: Value| {
        let b = d.post("/v1/jobs", json!({"tier": "p0", "team": "research", "gpus": 1, "argv": argv}));
        b["id"].as_u64().expect("a job id")
    };
    let three = submit(json!(["sh", "-c", "exit 3"]));
    let killed = submit(json!(["sh", "-c", "kill -9 $$"]));
    let fine = submit(json!(["true"]));
    let t = Instant::now();
    let ended = |id: u64| d.get(&format!("/v1/jobs/{id}"))["ended_at"].is_number();
    while !(ended(three) && ended(killed) && ended(fine)) {
        assert!(t.elapsed() < Duration::from_secs(30), "jobs did not end: {}", d.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (j3, j9, ok) =
        (d.get(&format!("/v1/jobs/{three}")), d.get(&format!("/v1/jobs/{killed}")), d.get(&format!("/v1/jobs/{fine}")));
    assert_eq!((j3["state"].as_str(), j3["exit_code"].as_i64()), (Some("failed"), Some(3)), "{j3}");
    assert_eq!((j9["state"].as_str(), j9["exit_signal"].as_i64()), (Some("failed"), Some(9)), "{j9}");
    assert_eq!((ok["state"].as_str(), ok["exit_code"].as_i64()), (Some("succeeded"), Some(0)), "{ok}");
    // The job's story ends with how it ended, in the event log.
    let events = d.get(&format!("/v1/events?job={three}"));
    let finished: Vec<&Value> =
        events.as_array().expect("events").iter().filter(|e| e["kind"] == "job_finished").collect();
    assert_eq!(finished.len(), 1, "{events}");
    assert_eq!(finished[0]["reason"], "failed");
    assert!(finished[0]["detail"].as_str().is_some_and(|s| s.contains("exit code 3")), "{events}");
    let cancelled = submit(json!(["sleep", "60"]));
    assert_eq!(d.raw("POST", &format!("/v1/jobs/{cancelled}/cancel"), Some(&d.admin()), None).0, 200);
    let events = d.get(&format!("/v1/events?job={cancelled}"));
    assert!(
        events.as_array().expect("events").iter().any(|e| e["kind"] == "job_finished" && e["reason"] == "cancelled"),
        "{events}"
    );
    // And in `spillway jobs show`.
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args([
            "jobs",
            "show",
            &three.to_string(),
            "--server",
            &format!("http://127.0.0.1:{}", d.port),
            "--token",
            &d.admin(),
        ])
        .output()
        .expect("runs spillway");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("State=failed ExitCode=3"), "{shown}{}", String::from_utf8_lossy(&out.stderr));
    assert!(shown.contains("Attempt=1 ") && shown.contains("Ended=failed ExitCode=3"), "{shown}");
    // And in `spillway jobs show -o json`, as a script reads it.
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["jobs", "show", &three.to_string(), "-o", "json", "--server"])
        .arg(format!("http://127.0.0.1:{}", d.port))
        .args(["--token", &d.admin()])
        .output()
        .expect("runs spillway");
    let shown_json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("jobs show -o json: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!((shown_json["state"].as_str(), shown_json["exit_code"].as_i64()), (Some("failed"), Some(3)));
    assert_eq!(shown_json["attempts"][0]["exit_code"], 3, "{shown_json}");
    assert_eq!(shown_json["attempts"][0]["end"], "failed", "{shown_json}");
    // `submit --wait` exits with the job's status; `--follow` prints its output on the way.
    let url = format!("http://127.0.0.1:{}", d.port);
    let run = |flag: &str, argv: &[&str]| {
        let mut args = vec!["submit", flag, "--tier", "p0", "--team", "research", "--server", &url];
        let admin = d.admin();
        args.extend_from_slice(&["--token", &admin, "--"]);
        args.extend_from_slice(argv);
        Command::new(env!("CARGO_BIN_EXE_spillway")).args(&args).output().expect("runs spillway")
    };
    let out = run("--wait", &["sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed with exit code 3"));
    let out = run("--wait", &["sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137));
    let out = run("--follow", &["sh", "-c", "echo from-the-job"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("from-the-job"));
}

#[test]
fn tokens_scope_what_a_caller_can_see_and_do() {
    let d = Daemon::new("sec", SMALL_CONFIG);
    let tokens = d.tokens();
    let (research, applied) = (
        tokens["teams"]["research"].as_str().unwrap().to_string(),
        tokens["teams"]["applied"].as_str().unwrap().to_string(),
    );
    assert_eq!(d.raw("GET", "/v1/jobs", None, None).0, 401);
    assert_eq!(d.raw("GET", "/v1/jobs", Some("wrong"), None).0, 401);
    let job = json!({"tier": "p1", "gpus": 1, "argv": ["sleep", "30"]}).to_string();
    let (s, b) = d.raw("POST", "/v1/jobs", Some(&research), Some(&job));
    assert_eq!(s, 201, "{b}");
    let id = serde_json::from_str::<Value>(&b).unwrap()["id"].as_u64().unwrap();
    assert_eq!(serde_json::from_str::<Value>(&b).unwrap()["team"], "research");
    // Another team can neither see nor cancel it, nor submit in research's name.
    assert_eq!(d.raw("GET", &format!("/v1/jobs/{id}"), Some(&applied), None).0, 403);
    assert_eq!(d.raw("POST", &format!("/v1/jobs/{id}/cancel"), Some(&applied), None).0, 403);
    let (_, list) = d.raw("GET", "/v1/jobs", Some(&applied), None);
    assert_eq!(list.trim(), "[]");
    let as_research = json!({"tier": "p1", "team": "research", "gpus": 1, "argv": ["true"]}).to_string();
    assert_eq!(d.raw("POST", "/v1/jobs", Some(&applied), Some(&as_research)).0, 403);
    // Team tokens cannot act as admin.
    assert_eq!(d.raw("POST", "/v1/pools/od/scale", Some(&research), Some(r#"{"max_nodes": 1}"#)).0, 403);
    assert_eq!(d.raw("GET", &format!("/v1/jobs/{id}"), Some(&research), None).0, 200);
    assert_eq!(d.raw("POST", &format!("/v1/jobs/{id}/cancel"), Some(&research), None).0, 200);
    // Node tokens exist only in their agent (handed over on its stdin) and as hashes in the store: an unknown token
    // and a user token are refused by the agent endpoint (tests/control.rs in spillway-server shows a node token acts
    // only for the workers placed on its node).
    assert_eq!(
        d.raw("POST", "/v1/agent/heartbeat", Some("0123456789abcdef0123456789abcdef"), Some(r#"{"node": 0}"#)).0,
        401
    );
    assert_eq!(d.raw("POST", "/v1/agent/heartbeat", Some(&research), Some(r#"{"node": 0}"#)).0, 401);
    // Nothing listens beyond loopback: the daemon's socket is bound to 127.0.0.1.
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = format!(":{:04X}", d.port);
    let listening: Vec<&str> = tcp
        .lines()
        .filter(|l| {
            l.split_whitespace().nth(1).is_some_and(|a| a.ends_with(&port)) && l.split_whitespace().nth(3) == Some("0A")
        })
        .collect();
    assert!(!listening.is_empty(), "no listening socket on {port}");
    for l in listening {
        assert!(l.split_whitespace().nth(1).unwrap().starts_with("0100007F:"), "listens beyond loopback: {l}");
    }
    // A job never sees its node's token (the agent gets it in its environment, out of `ps`).
    let leak = json!({"tier": "p0", "gpus": 1, "argv": ["sh", "-c", "echo token=[$SPILLWAY_AGENT_TOKEN]"]}).to_string();
    let (s, b) = d.raw("POST", "/v1/jobs", Some(&research), Some(&leak));
    assert_eq!(s, 201, "{b}");
    let leak_id = serde_json::from_str::<Value>(&b).unwrap()["id"].as_u64().unwrap();
    let t = Instant::now();
    while d.get(&format!("/v1/jobs/{leak_id}"))["state"] != "succeeded" {
        assert!(t.elapsed() < Duration::from_secs(30), "job {leak_id} did not finish: {}", d.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, out) = d.raw("GET", &format!("/v1/jobs/{leak_id}/logs"), Some(&d.admin()), None);
    assert!(out.contains("token=[]"), "the node token reached the job: {out}");
    // Cost: cumulative, and over a window (snapshots each minute; before the first one counts as zero).
    std::thread::sleep(Duration::from_millis(500));
    let total = d.get("/v1/cost")["total_usd"].as_f64().unwrap();
    assert!(total > 0.0, "owned nodes cost from the start");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let window = d.get(&format!("/v1/cost?since={}&until={}", now - 3600.0, now + 1.0));
    let recent = d.get(&format!("/v1/cost?since={now}"));
    assert!(
        window["total_usd"].as_f64().unwrap() >= total
            && recent["total_usd"].as_f64().unwrap() < window["total_usd"].as_f64().unwrap(),
        "{window} {recent}"
    );
    assert_eq!(d.raw("GET", &format!("/v1/cost?since={}&until={}", now, now - 60.0), Some(&d.admin()), None).0, 422);
    assert_eq!(d.raw("GET", "/v1/cost", Some(&research), None).0, 403);
    let (s, metrics) = d.raw("GET", "/metrics", None, None);
    assert_eq!(s, 200);
    for want in [
        "spillway_jobs{tier=\"p1\",state=\"cancelled\"} 1",
        "spillway_nodes{pool=\"onprem\",market=\"fixed\",state=\"ready\"} 2",
        "spillway_market_cost_usd_total{market=\"fixed\"}",
        "spillway_queued_gpus{tier=\"p0\"} 0",
    ] {
        assert!(metrics.contains(want), "missing `{want}` in:\n{metrics}");
    }
    let openapi = d.get("/v1/openapi.json");
    assert_eq!(openapi["openapi"], "3.1.0");
    assert!(openapi["paths"]["/v1/jobs"]["post"].is_object());
}

#[test]
fn bad_requests_are_refused_with_the_field_and_store_nothing() {
    let d = Daemon::new("bad", SMALL_CONFIG);
    let admin = d.admin();
    let cases: [(&str, u16, Option<&str>); 12] = [
        (r#"{"tier": "p1", "gpus": 1, "argv": ["true"]"#, 400, None),
        (r#"{"tier": "p1", "gpus": 64, "argv": ["true"]}"#, 422, Some("gpus")),
        (r#"{"tier": "p1", "gpus": 1, "argv": []}"#, 422, Some("argv")),
        (r#"{"tier": "p9", "gpus": 1, "argv": ["true"]}"#, 422, Some("tier")),
        (r#"{"tier": "p1", "team": "nobody", "gpus": 1, "argv": ["true"]}"#, 422, Some("team")),
        (r#"{"tier": "p1", "gpus": "two", "argv": ["true"]}"#, 422, Some("gpus")),
        (r#"{"tier": "p1", "gpu": 1, "argv": ["true"]}"#, 422, Some("gpu")),
        // Gangs no pool could ever hold, and sizes that would overflow, are refused naming the workers.
        (r#"{"tier": "p1", "gpus": 2, "workers": 100, "argv": ["true"]}"#, 422, Some("workers")),
        (r#"{"tier": "p1", "gpus": 1, "workers": 4294967295, "argv": ["true"]}"#, 422, Some("workers")),
        (r#"{"tier": "p1", "gpus": 1, "deadline_s": 1e300, "argv": ["true"]}"#, 422, Some("deadline_s")),
        (
            r#"{"tier": "p1", "gpus": 1, "checkpoint_interval_s": 1e-300, "argv": ["true"]}"#,
            422,
            Some("checkpoint_interval_s"),
        ),
        (r#"{"tier": "p1", "gpus": 1, "argv": ["true"]} garbage"#, 400, None),
    ];
    for (body, status, field) in cases {
        let (s, b) = d.raw("POST", "/v1/jobs", Some(&admin), Some(body));
        assert_eq!(s, status, "{body} -> {b}");
        let e: Value = serde_json::from_str(&b).unwrap_or_else(|_| panic!("not an error body: {b}"));
        assert!(!e["error"].as_str().unwrap().is_empty());
        if let Some(f) = field {
            assert_eq!(e["field"], f, "{body} -> {b}");
        }
    }
    assert_eq!(d.get("/v1/jobs").as_array().unwrap().len(), 0, "a refused job was stored");
    let db = rusqlite::Connection::open(d.dir.join("spillway.db")).unwrap();
    let submits: i64 =
        db.query_row("SELECT count(*) FROM log WHERE entry LIKE '{\"submit\"%'", [], |r| r.get(0)).unwrap();
    assert_eq!(submits, 0);
    let (s, b) = d.raw("POST", "/v1/pools/od/scale", Some(&admin), Some(r#"{"min_nodes": 3, "max_nodes": 1}"#));
    assert_eq!((s, serde_json::from_str::<Value>(&b).unwrap()["field"].as_str()), (422, Some("min_nodes")));
    // A filter naming a tier, team or pool the daemon does not have is a usage error (exit 2) that lists the
    // names it has.
    for (args, allowed) in [
        (&["jobs", "ls", "--tier", "p9"][..], "one of p0, p1, p2"),
        (&["jobs", "ls", "--team", "nobody"][..], "research"),
        (&["events", "--pool", "nope"][..], "od"),
    ] {
        let out = Command::new(BIN)
            .args(args)
            .args(["--server", &format!("http://127.0.0.1:{}", d.port), "--token", &admin])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(allowed), "{args:?}: {err}");
    }
}

/// `spillway up --demo` on the built-in cluster: the burst scales out, a spot node is interrupted and its jobs resume,
/// the cloud pools go back to zero, the cost is printed, and nothing is left running.
#[test]
fn up_demo_runs_to_the_end_on_embedded_defaults() {
    if !python() {
        println!("skipping: python3 not found (the demo runs examples/train.py)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("spillway-daemon-{}-demo", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(BIN)
        .args(["up", "--demo", "--exit-after-demo", "--listen", &format!("127.0.0.1:{}", free_port()), "--data-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    for want in
        ["spillway is up", "scale_out", "interruption", "14/14 jobs succeeded; cloud pools back to zero", "by market:"]
    {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
    let resumed = (0..14).any(|id| {
        std::fs::read_to_string(dir.join(format!("jobs/job-{id}/logs/rank-0.log"))).is_ok_and(|l| {
            l.lines().any(|x| x.starts_with("resumed from step") && !x.starts_with("resumed from step 0 "))
        })
    });
    assert!(resumed, "no job resumed from a checkpoint:\n{text}");
    let d = Daemon {
        dir: dir.clone(),
        config: dir.join("none"),
        port: 0,
        child: None,
        agent: ureq::Agent::new_with_defaults(),
        args: Vec::new(),
        env: Vec::new(),
    };
    assert!(d.agents_alive().is_empty(), "agents left behind: {:?}", d.agents_alive());
}

#[test]
fn logs_follow_of_a_gang_prints_whole_lines_with_their_rank() {
    let d = Daemon::new("gang-logs", SMALL_CONFIG);
    // Each rank writes half a line, waits, and finishes it, so lines of the two ranks are in flight at once.
    let script = "for i in 1 2 3; do printf \"rank $RANK line $i \"; sleep 0.3; echo end; done";
    let b = d.post(
        "/v1/jobs",
        json!({"tier": "p0", "team": "research", "gpus": 2, "workers": 2, "argv": ["sh", "-c", script]}),
    );
    let id = b["id"].as_u64().expect("a job id").to_string();
    let url = format!("http://127.0.0.1:{}", d.port);
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["jobs", "logs", &id, "--follow", "--server", &url, "--token", &d.admin()])
        .output()
        .expect("runs spillway");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for rank in 0..2 {
        for i in 1..=3 {
            let line = format!("[rank {rank}] rank {rank} line {i} end");
            assert_eq!(text.lines().filter(|l| *l == line).count(), 1, "`{line}` once, whole, in:\n{text}");
        }
    }
    assert_eq!(text.lines().count(), 6, "{text}");
}
