//! Budgets on the real daemon, as a finance lead uses them: a webhook receiver (run by the test) gets the 50%,
//! 80% and 100% alerts of a team's budget in order, even when it fails the first POST; once the capped team has
//! spent its budget, its next job buys nothing and says why, while another team's job still gets its node.
#![allow(clippy::disallowed_methods)]

mod common;

use common::Daemon;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An on-demand node costs 3,600 USD/h: a 4-GPU job spends 1 USD a second, so a 12 USD budget goes in 12 s.
fn config(hook_port: u16) -> String {
    format!(
        r#"
[[teams]]
name = "a"
[[teams]]
name = "b"

[[instance_types]]
name = "vm4"
gpus = 4
gpu_model = "virtual"
on_demand_usd_per_hour = 3600.0
spot_usd_per_hour = 1800.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 0.01
nodes = [{{ count = 1, gpus = 1, gpu_model = "virtual" }}]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["vm4"]
max_nodes = 3
boot_latency_s = 1
scale_out_cooldown_s = 0
idle_timeout_s = 600

[[pools]]
name = "spot"
market = "spot"
instance_types = ["vm4"]
max_nodes = 1

[tiers.p0]
burst_after_s = 0

[[budgets]]
team = "a"
period = "month"
usd = 12.0
hard_cap = true

[alerts]
webhook = "http://127.0.0.1:{hook_port}/hook"
"#
    )
}

/// A webhook receiver: answers the first POST with a 500 and every later one with a 200; keeps the bodies of the
/// accepted ones, in order.
fn receiver() -> (u16, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { continue };
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            let status = if n == 0 { "500 Internal Server Error" } else { "200 OK" };
            let _ = conn
                .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes());
            if n > 0 {
                keep.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            }
        }
    });
    (port, got)
}

fn until(secs: u64, what: &str, d: &Daemon, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}; log:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn budget_alerts_reach_the_webhook_in_order_and_the_hard_cap_stops_only_that_team() {
    let (port, got) = receiver();
    let d = Daemon::new("budget", &config(port));
    let submit = |team: &str| {
        let b = d.post("/v1/jobs", json!({"tier": "p0", "team": team, "gpus": 4, "argv": ["sleep", "120"]}));
        b["id"].as_u64().unwrap()
    };
    let a1 = submit("a");
    until(30, "team a's first job to run", &d, || d.get(&format!("/v1/jobs/{a1}"))["state"] == "running");
    until(60, "three alerts at the webhook", &d, || got.lock().unwrap().len() >= 3);
    let alerts = got.lock().unwrap().clone();
    let shares: Vec<f64> = alerts.iter().map(|a| a["share"].as_f64().unwrap()).collect();
    assert_eq!(shares, [0.5, 0.8, 1.0], "{alerts:?}");
    let capping: Vec<bool> = alerts.iter().map(|a| a["capping"].as_bool().unwrap()).collect();
    assert_eq!(capping, [false, false, true]);
    for a in &alerts {
        assert_eq!(
            (a["team"].as_str(), a["period"].as_str(), a["limit_usd"].as_f64()),
            (Some("a"), Some("month"), Some(12.0))
        );
        let spent = a["spent_usd"].as_f64().unwrap();
        assert!(
            spent >= a["share"].as_f64().unwrap() * 12.0 - 1e-9 && spent < a["share"].as_f64().unwrap() * 12.0 + 0.5,
            "{a}"
        );
        assert!(a["text"].as_str().is_some_and(|t| t.contains("team a")), "{a}");
    }
    let budgets = d.get("/v1/budgets");
    assert_eq!(budgets[0]["capping"], true, "{budgets}");
    // Capped: team a's next job waits and says why; team b's job gets a node.
    let a2 = submit("a");
    let b1 = submit("b");
    until(30, "team b's job to run", &d, || d.get(&format!("/v1/jobs/{b1}"))["state"] == "running");
    std::thread::sleep(Duration::from_secs(2));
    let j = d.get(&format!("/v1/jobs/{a2}"));
    assert_eq!(j["state"], "queued", "{j}");
    assert!(j["pending_detail"].as_str().is_some_and(|s| s.contains("hard cap")), "{j}");
    // explain says it too, in words and as a code; and a team token explains only its own team's jobs.
    let why = d.get(&format!("/v1/explain/job/{a2}"));
    let codes: Vec<&str> = why["reasons"].as_array().unwrap().iter().filter_map(|r| r["code"].as_str()).collect();
    assert!(codes.contains(&"budget_cap"), "{why}");
    let b_token = d.tokens()["teams"]["b"].as_str().unwrap().to_string();
    assert_eq!(d.raw("GET", &format!("/v1/explain/job/{a2}"), Some(&b_token), None).0, 403);
    let pool = d.get("/v1/explain/pool/od");
    assert_eq!(pool["subject"], "pool:od", "{pool}");
    assert_eq!(d.raw("GET", "/v1/explain/pool/nope", Some(&d.admin()), None).0, 404);
    let od = d.get("/v1/pools").as_array().unwrap().iter().find(|p| p["name"] == "od").cloned().unwrap();
    assert_eq!(od["nodes"], 2, "one node for team a's first job, one for team b's: {od}");
    let events = d.get("/v1/events?kind=budget");
    let reasons: Vec<&str> = events.as_array().unwrap().iter().filter_map(|e| e["reason"].as_str()).collect();
    assert_eq!(reasons, ["budget_alert", "budget_alert", "budget_cap"], "{events}");
    let (_, metrics) = d.raw("GET", "/metrics", None, None);
    assert!(metrics.contains("spillway_budget_capping{team=\"a\",period=\"month\"} 1"), "{metrics}");
}

fn epoch_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

#[test]
fn a_cloud_node_stopped_with_the_daemon_costs_nothing_while_it_is_down() {
    let (port, _) = receiver();
    let mut d = Daemon::new("downtime", &config(port));
    let b = d.post("/v1/jobs", json!({"tier": "p0", "team": "b", "gpus": 4, "argv": ["sleep", "120"]}));
    let id = b["id"].as_u64().unwrap();
    // And one on the owned node.
    let a = d.post("/v1/jobs", json!({"tier": "p0", "team": "a", "gpus": 1, "argv": ["sleep", "120"]}));
    let owned = a["id"].as_u64().unwrap();
    until(30, "team b's job to run", &d, || d.get(&format!("/v1/jobs/{id}"))["state"] == "running");
    until(30, "team a's job to run", &d, || d.get(&format!("/v1/jobs/{owned}"))["state"] == "running");
    std::thread::sleep(Duration::from_secs(1));
    // A graceful stop terminates the on-demand node (1 USD a second); four seconds later the daemon is back.
    d.stop();
    let stopped = epoch_s();
    std::thread::sleep(Duration::from_secs(4));
    let restarted = epoch_s();
    d.start();
    let w = d.get(&format!("/v1/cost?since={}&until={}", stopped + 0.2, restarted - 0.2));
    assert!(w["by_market"]["on_demand"].as_f64().unwrap() < 0.01, "the stopped node was billed while down: {w}");
    assert!(w["by_team"]["b"].as_f64().unwrap() < 0.01, "{w}");
    assert!(w["by_market"]["fixed"].as_f64().unwrap() > 0.0, "owned GPUs are paid for anyway: {w}");
    assert!(w["by_team"]["a"].as_f64().unwrap() == 0.0, "the owned node's job was billed while down: {w}");
    // The jobs' attempts ended when the daemon stopped them, and say so.
    for job in [id, owned] {
        let v = d.get(&format!("/v1/jobs/{job}"));
        let first = &v["attempts"][0];
        assert_eq!(first["end"], "the daemon stopped", "{v}");
        assert!(first["ended_at"].as_f64().unwrap() <= stopped + 0.5, "{v}");
    }
    // Its job was requeued at the stop, and runs again after the restart.
    until(30, "the job to run again", &d, || d.get(&format!("/v1/jobs/{id}"))["state"] == "running");
    assert_eq!(d.get(&format!("/v1/jobs/{id}"))["attempt"], 2);
}
