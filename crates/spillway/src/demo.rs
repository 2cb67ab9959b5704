//! `spillway up --demo`: submits a burst of mixed-tier jobs running `train.py` through the API, narrates the
//! decisions as they happen (scale-out, spot interruption, checkpoint and resume, scale-in to zero), and ends with
//! the cost summary.

// The demo narrates in wall-clock time (a shell may read the clock; the core may not).
#![allow(clippy::disallowed_methods)]

use anyhow::{Context, Result, bail};
use spillway_api::{CostView, EventView, JobSubmit, JobView, NodeView, PoolView};
use std::path::Path;
use std::time::{Duration, Instant};

struct Api {
    url: String,
    token: String,
    agent: ureq::Agent,
}

impl Api {
    fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T> {
        let mut r = self
            .agent
            .get(format!("{}{path}", self.url))
            .header("Authorization", format!("Bearer {}", self.token))
            .call()?;
        if !r.status().is_success() {
            bail!("GET {path}: {}", r.status());
        }
        Ok(r.body_mut().read_json()?)
    }
    fn post<T: serde::de::DeserializeOwned>(&self, path: &str, body: &impl serde::Serialize) -> Result<T> {
        let mut r = self
            .agent
            .post(format!("{}{path}", self.url))
            .header("Authorization", format!("Bearer {}", self.token))
            .send_json(body)?;
        if !r.status().is_success() {
            bail!("POST {path}: {}: {}", r.status(), r.body_mut().read_to_string().unwrap_or_default());
        }
        Ok(r.body_mut().read_json()?)
    }
}

/// Prints the daemon's decisions as they are made (all but the pending notes, which repeat), one line each with
/// its UTC time, until the daemon stops answering: what `spillway up` shows in its terminal. Decisions from
/// before this start (a restarted daemon's history) are passed over, not printed again.
pub fn stream(url: &str, token: &str) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let api = Api { url: url.into(), token: token.into(), agent };
    let mut seen = 0u64;
    // A little before now: the daemon's first decisions may come before this stream's first look.
    let from = crate::ctl::now() - 5.0;
    let mut full = false;
    loop {
        if !full {
            std::thread::sleep(Duration::from_secs(1));
        }
        let Ok(events) = api.get::<Vec<EventView>>(&format!("/v1/events?limit=1000&cursor={seen}")) else { return };
        // A full page means more are waiting (a long history): read on at once.
        full = events.len() >= 1000;
        for e in events.iter().filter(|e| e.seq >= seen && e.at >= from) {
            if e.kind != "job_pending" {
                let at = crate::ctl::fmt_time(e.at);
                println!("{at}  {:<17} {:<10} {:<20} {}", e.kind, e.subject, e.reason, e.detail);
            }
        }
        seen = events.iter().map(|e| e.seq + 1).max().unwrap_or(seen).max(seen);
    }
}

/// One kind of demo job: (tier, team, GPUs, workers, steps, how many).
const MIX: [(&str, &str, u32, u32, u32, usize); 4] = [
    ("p0", "research", 4, 1, 40, 2),
    ("p1", "research", 2, 1, 60, 5),
    ("p1", "applied", 2, 2, 40, 1),
    ("p2", "applied", 1, 1, 50, 6),
];

/// Runs the demo against the daemon at `url`.
pub fn run(url: &str, token: &str, data_dir: &Path) -> Result<()> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let api = Api { url: url.into(), token: token.into(), agent };
    let script = data_dir.join("train.py").display().to_string();
    let mut ids = Vec::new();
    for (tier, team, gpus, workers, steps, n) in MIX {
        for i in 0..n {
            let job = JobSubmit {
                name: Some(format!("{tier}-{team}-{i}")),
                tier: tier.into(),
                team: Some(team.into()),
                gpus,
                workers: Some(workers),
                argv: vec![
                    "python3".into(),
                    script.clone(),
                    "--steps".into(),
                    steps.to_string(),
                    "--step-time".into(),
                    "0.5".into(),
                ],
                ..JobSubmit::default()
            };
            let v: JobView = api.post("/v1/jobs", &job).context("submitting a demo job")?;
            ids.push(v.id);
        }
    }
    println!(
        "demo: submitted {} jobs (p0 training, p1 experiments incl. a 2-worker gang, p2 evaluation) for 8 owned GPUs",
        ids.len()
    );
    let started = Instant::now();
    let mut seen = 0u64;
    let mut interrupted = false;
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let events: Vec<EventView> = api.get(&format!("/v1/events?limit=1000&cursor={seen}"))?;
        let from = seen;
        for e in events.iter().filter(|e| e.seq >= from) {
            if matches!(e.kind.as_str(), "scale_out" | "scale_in" | "interruption" | "job_requeued" | "fallback")
                || e.kind == "job_started" && e.detail.contains("attempt 2")
            {
                println!("  [{:>4.0}s] {:<13} {:<10} {}", started.elapsed().as_secs_f64(), e.kind, e.subject, e.detail);
            }
            seen = seen.max(e.seq + 1);
        }
        // Make sure the newcomer sees one interruption: reclaim a busy spot node once jobs have run a while.
        if !interrupted && started.elapsed() > Duration::from_secs(12) {
            let nodes: Vec<NodeView> = api.get("/v1/nodes")?;
            if let Some(n) = nodes.iter().find(|n| n.market == "spot" && n.state == "ready" && !n.jobs.is_empty()) {
                println!(
                    "demo: interrupting spot node {} (jobs {:?}): they get SIGTERM, checkpoint, and resume elsewhere",
                    n.id, n.jobs
                );
                let _: NodeView = api.post(&format!("/v1/nodes/{}/interrupt", n.id), &serde_json::json!({}))?;
                interrupted = true;
            }
        }
        let jobs: Vec<JobView> = api.get("/v1/jobs?limit=1000")?;
        let done = jobs
            .iter()
            .filter(|j| ids.contains(&j.id))
            .all(|j| matches!(j.state.as_str(), "succeeded" | "failed" | "cancelled"));
        let pools: Vec<PoolView> = api.get("/v1/pools")?;
        let cloud_nodes: u32 = pools.iter().filter(|p| p.market != "fixed").map(|p| p.nodes).sum();
        if done && cloud_nodes == 0 {
            let ok = jobs.iter().filter(|j| ids.contains(&j.id) && j.state == "succeeded").count();
            println!(
                "demo: {ok}/{} jobs succeeded; cloud pools back to zero after {:.0} s",
                ids.len(),
                started.elapsed().as_secs_f64()
            );
            break;
        }
        if started.elapsed() > Duration::from_secs(900) {
            bail!("the demo did not finish in 15 minutes");
        }
    }
    let cost: CostView = api.get("/v1/cost")?;
    println!("demo: cost so far ${:.2} (idle ${:.2})", cost.total_usd, cost.idle_usd);
    for (what, map) in [("market", &cost.by_market), ("team", &cost.by_team), ("tier", &cost.by_tier)] {
        let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k} ${v:.2}")).collect();
        println!("  by {what}: {}", parts.join(", "));
    }
    println!("demo: read a job's output with `spillway jobs logs ID`, the decisions with `spillway events`");
    Ok(())
}
