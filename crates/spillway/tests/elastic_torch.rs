//! An elastic PyTorch job end to end: `spillway server` with the local provider, a 2-node spot pool, and
//! `torchrun --nnodes=1:2` running `examples/elastic_train.py` (gloo all-reduce on CPU, a checkpoint every few
//! steps). An interruption of one of its spot nodes leaves it running on the other; when the pool's minimum brings
//! a replacement, it grows back to two; it ends where the same training in one process ends.
//!
//! Needs PyTorch: a venv at `$SPILLWAY_TORCH_VENV`, default `target/ci-torch-venv` (`.ci/run` makes it with
//! `pip install torch`). Without one the test skips, except under `SPILLWAY_REQUIRE_SHARED=1` (CI), where it fails.

// A test of the shell: it reads the real clock.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[cluster]
name = "elastic-torch"
[[teams]]
name = "research"
[[instance_types]]
name = "vm1"
gpus = 1
gpu_model = "virtual"
on_demand_usd_per_hour = 4.0
spot_usd_per_hour = 1.2
[[pools]]
name = "spot"
market = "spot"
instance_types = ["vm1"]
min_nodes = 2
max_nodes = 2
boot_latency_s = 1
interruption_notice_s = 3
# Only for p0, which may not run on spot; this job never goes there.
[[pools]]
name = "od"
market = "on_demand"
instance_types = ["vm1"]
max_nodes = 1
[tiers.p1]
burst_after_s = 0
spot_fallback_after_s = 3600
checkpoint_time_s = 2
[policy]
elastic_resize_interval_s = 8
"#;

const STEPS: u32 = 200;

/// The venv with torch, or `None` (skip) where there is none and CI does not require it.
fn torch_venv() -> Option<PathBuf> {
    let venv = std::env::var_os("SPILLWAY_TORCH_VENV").map_or_else(|| repo("target/ci-torch-venv"), PathBuf::from);
    let ok = Command::new(venv.join("bin/python"))
        .args(["-c", "import torch.distributed"])
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(venv);
    }
    if std::env::var("SPILLWAY_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("SPILLWAY_REQUIRE_SHARED=1 but there is no venv with torch at {} (.ci/run makes it)", venv.display());
    }
    println!("skipping: no venv with torch at {} (set SPILLWAY_TORCH_VENV)", venv.display());
    None
}

/// What rank 0 printed, by attempt: the step it started from and its width, its steps, its checkpoints.
#[derive(Default, Debug)]
struct Attempt {
    start: Option<(u32, u32)>,
    steps: Vec<u32>,
    checkpoints: Vec<u32>,
}

fn parse(logs: &str) -> (BTreeMap<u32, Attempt>, Option<String>) {
    let mut by: BTreeMap<u32, Attempt> = BTreeMap::new();
    let mut done = None;
    let num = |s: &str| s.trim_matches(|c: char| !c.is_ascii_digit()).parse::<u32>().unwrap();
    for l in logs.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["starting" | "resumed", .., "step", s, "(world", width, "attempt", a] => {
                by.entry(num(a)).or_default().start = Some((num(s), num(width)));
            }
            ["step", s, "world", _, "attempt", a, "loss", _] => by.entry(num(a)).or_default().steps.push(num(s)),
            ["checkpoint", "at", "step", s, "(attempt", a] => by.entry(num(a)).or_default().checkpoints.push(num(s)),
            ["done:", ..] => done = Some(l.to_string()),
            _ => {}
        }
    }
    (by, done)
}

/// The numbers of a `done:` line.
fn numbers(done: &str) -> Vec<f64> {
    done.split([' ', ',', '[', ']']).filter_map(|t| t.parse().ok()).collect()
}

#[test]
fn an_elastic_torchrun_job_shrinks_through_an_interruption_and_grows_back() {
    let Some(venv) = torch_venv() else { return };
    let d = Daemon::new("elastic-torch", CONFIG);
    let script = repo("examples/elastic_train.py").display().to_string();
    let torchrun = venv.join("bin/torchrun").display().to_string();
    // Short rendezvous timeouts keep the test short; --max-restarts=0 because a change of membership is a new
    // attempt that Spillway starts, not a restart inside torchrun.
    // Both spot nodes the pool's minimum keeps are up before the job comes, so it starts on both.
    let t = Instant::now();
    while d.get("/v1/nodes").as_array().unwrap().iter().filter(|n| n["pool"] == "spot" && n["state"] == "ready").count()
        < 2
    {
        assert!(t.elapsed() < Duration::from_secs(60), "the spot pool's two nodes did not come up: {}", d.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let cmd = "exec \"$0\" --nnodes=$SPILLWAY_MIN_WORKERS:$SPILLWAY_MAX_WORKERS --nproc-per-node=1 \
               --rdzv-backend=c10d --rdzv-endpoint=$SPILLWAY_RDZV_ENDPOINT --rdzv-id=$SPILLWAY_RDZV_ID \
               --rdzv-conf=join_timeout=60,last_call_timeout=1,close_timeout=5 --max-restarts=0 \
               \"$1\" --steps $2 --step-time 0.25 --checkpoint-every 8";
    let job = d.post(
        "/v1/jobs",
        json!({"tier": "p1", "team": "research", "gpus": 1, "min_workers": 1, "max_workers": 2,
               "checkpoint_interval_s": 2, "argv": ["sh", "-c", cmd, torchrun, script, STEPS.to_string()]}),
    );
    let id = job["id"].as_u64().unwrap();
    let logs = |d: &Daemon| d.raw("GET", &format!("/v1/jobs/{id}/logs"), Some(&d.admin()), None).1;

    // Once it is past a checkpoint on two workers, its rank-0 node is interrupted (the node whose torchrun may
    // host the c10d store).
    let t = Instant::now();
    let node = loop {
        assert!(t.elapsed() < Duration::from_secs(120), "no checkpoint on two workers:\n{}\n{}", logs(&d), d.log());
        std::thread::sleep(Duration::from_millis(500));
        let j = d.get(&format!("/v1/jobs/{id}"));
        let (by, _) = parse(&logs(&d));
        let wide = by.get(&1).is_some_and(|a| a.start.map(|s| s.1) == Some(2) && a.checkpoints.len() >= 2);
        if wide && j["state"] == "running" {
            break j["nodes"][0].as_u64().unwrap_or_else(|| panic!("no nodes in {j}"));
        }
    };
    d.post(&format!("/v1/nodes/{node}/interrupt"), json!({}));

    let t = Instant::now();
    loop {
        let j = d.get(&format!("/v1/jobs/{id}"));
        if j["state"] != "running" && j["state"] != "queued" {
            assert_eq!(j["state"], "succeeded", "{j}\n{}\n{}", logs(&d), d.log());
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(240), "job did not finish: {j}\n{}\n{}", logs(&d), d.log());
        std::thread::sleep(Duration::from_millis(500));
    }
    let text = logs(&d);
    let (by, done) = parse(&text);
    let widths: Vec<u32> = by.values().filter_map(|a| a.start.map(|s| s.1)).collect();
    // Two workers, one after the interruption, two again once the replacement node was there.
    assert_eq!(widths.first(), Some(&2), "{by:?}");
    assert_eq!(widths.get(1), Some(&1), "it did not go on on the node it had left: {by:?}\n{text}");
    assert!(widths[2..].contains(&2), "it never grew back to two workers: {by:?}\n{text}");
    // The step counter never goes back past a checkpoint: each attempt resumes from the latest one written, and
    // counts on from there one step at a time.
    let mut latest = 0;
    for (a, at) in &by {
        let (from, _) = at.start.unwrap_or_else(|| panic!("attempt {a} printed no start:\n{text}"));
        assert!(from >= latest, "attempt {a} resumed from step {from}, before checkpoint {latest}:\n{text}");
        let expected: Vec<u32> = (from + 1..=from + at.steps.len() as u32).collect();
        assert_eq!(at.steps, expected, "attempt {a} did not count on from {from}");
        latest = at.checkpoints.iter().copied().max().unwrap_or(latest).max(latest);
    }
    // The result is the one the same training reaches in one process.
    let done = done.unwrap_or_else(|| panic!("no done: line:\n{text}"));
    let reference_dir = d.dir.with_extension("reference");
    let out = Command::new(venv.join("bin/python"))
        .args([&repo("examples/elastic_train.py").display().to_string(), "--steps", &STEPS.to_string()])
        .args(["--step-time", "0", "--single"])
        .env("SPILLWAY_CHECKPOINT_DIR", &reference_dir)
        .output()
        .unwrap();
    let reference = String::from_utf8_lossy(&out.stdout).lines().find(|l| l.starts_with("done:")).unwrap().to_string();
    let (got, want) = (numbers(&done), numbers(&reference));
    assert_eq!(got.len(), want.len(), "{done} vs {reference}");
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "final state differs from one process: {done} vs {reference}");
    }
    // The job's attempts show the same widths, and the decision log says why it grew.
    let j = d.get(&format!("/v1/jobs/{id}"));
    let nodes: Vec<usize> =
        j["attempts"].as_array().unwrap().iter().map(|a| a["nodes"].as_array().unwrap().len()).collect();
    assert_eq!(nodes, widths.iter().map(|&w| w as usize).collect::<Vec<_>>(), "{j}");
    let grown: Value = d.get(&format!("/v1/events?job={id}&kind=job_resized"));
    assert!(grown.as_array().is_some_and(|g| !g.is_empty()), "no job_resized decision: {grown}");
    println!("widths by attempt: {widths:?}; {done}");
}
