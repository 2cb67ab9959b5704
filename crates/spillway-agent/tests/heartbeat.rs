//! The heartbeat loop against a fake daemon on a `TcpListener`.

#![allow(clippy::disallowed_methods)] // tests time graces and deadlines with the real clock

mod common;

use common::*;
use spillway_agent::agent::{Limits, run_loop};
use spillway_agent::{AgentArgs, run};
use spillway_api::{Heartbeat, HeartbeatReply, StopOrder};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn heartbeat_assign_run_then_gone() {
    let dir = scratch("heartbeat");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let pidfile = dir.join("pid");
    let assignment = sh(9, 1, &dir, &format!("echo $$ > '{}'; exec sleep 30", pidfile.display()));
    let (tx, rx) = mpsc::channel::<Heartbeat>();
    let server = std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            let (auth, body) = read_request(&mut stream);
            assert_eq!(auth, "Bearer node-secret");
            let hb: Heartbeat = serde_json::from_str(&body).unwrap();
            let running = hb.running.contains(&assignment.worker);
            tx.send(hb).unwrap();
            if running {
                respond(&mut stream, "410 Gone", r#"{"error":"node terminated"}"#);
                return;
            }
            let reply = HeartbeatReply {
                // Sent until the agent runs it; an agent must not start it twice.
                run: vec![assignment.clone()],
                stop: vec![],
                acked_exits: vec![],
                new_token: None,
            };
            respond(&mut stream, "200 OK", &serde_json::to_string(&reply).unwrap());
        }
    });
    let args = AgentArgs {
        server: format!("http://{addr}/"),
        node: 3,
        token: "node-secret".into(),
        gpus: 2,
        data_dir: dir.join("data"),
        boot_delay_s: 0.05,
        heartbeat_ms: 50,
        run_as: None,
        imds_url: None,
        advertise_addr: None,
    };
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || done_tx.send(run(args)).unwrap());
    let result = done_rx.recv_timeout(Duration::from_secs(10)).expect("agent returns after 410");
    assert!(result.is_ok(), "{result:?}");
    server.join().unwrap();

    let beats: Vec<Heartbeat> = rx.try_iter().collect();
    assert!(beats.len() >= 2, "{beats:?}");
    assert_eq!(beats[0].node, 3);
    assert!(beats[0].running.is_empty() && beats[0].exited.is_empty());
    let last = beats.last().unwrap();
    assert_eq!(last.running, vec![worker(9)]);
    assert!(last.exited.is_empty());
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(!alive(pid), "worker {pid} killed and reaped after 410");
    assert!(dir.join("data").is_dir());
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(dir.join("data")).unwrap().mode() & 0o777, 0o700, "the data dir is private");
}

#[test]
fn run_as_an_unknown_user_refuses_to_start() {
    let dir = scratch("hb-run-as");
    // Nothing listens: an agent that started would heartbeat into the void instead of failing at once.
    let mut a = args("http://127.0.0.1:1".into(), &dir.join("data"));
    a.run_as = Some("spillway-no-such-user".into());
    let err = format!("{:#}", run(a).expect_err("refuses"));
    // As root the user is unknown; as anyone else --run-as is refused before the lookup.
    assert!(err.contains("no such user") || err.contains("needs the agent to run as root"), "{err}");
    assert!(err.contains("spillway-no-such-user"), "{err}");
    assert!(!dir.join("data").exists(), "touched its data dir before refusing");
}

/// A fake daemon answering every heartbeat with `answer(n, heartbeat)` until it returns None (then it stops).
fn fake_daemon(
    mut answer: impl FnMut(usize, &Heartbeat) -> Option<(&'static str, String)> + Send + 'static,
) -> (String, std::thread::JoinHandle<Vec<Heartbeat>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut beats = Vec::new();
        for (n, stream) in listener.incoming().enumerate() {
            let mut stream = stream.unwrap();
            let (_, body) = read_request(&mut stream);
            let hb: Heartbeat = serde_json::from_str(&body).unwrap();
            let a = answer(n, &hb);
            beats.push(hb);
            match a {
                Some((status, body)) => {
                    respond(&mut stream, status, &body);
                    // The agent ends on 410: stop listening so the test can join this thread.
                    if status.starts_with("410") {
                        return beats;
                    }
                }
                None => return beats,
            }
        }
        beats
    });
    (url, handle)
}

fn args(server: String, dir: &std::path::Path) -> AgentArgs {
    AgentArgs {
        server,
        node: 5,
        token: "t".into(),
        gpus: 1,
        data_dir: dir.to_path_buf(),
        boot_delay_s: 0.0,
        heartbeat_ms: 30,
        run_as: None,
        imds_url: None,
        advertise_addr: None,
    }
}

fn reply(r: &HeartbeatReply) -> String {
    serde_json::to_string(r).unwrap()
}

#[test]
fn exits_reported_until_acked_and_stop_orders_obeyed() {
    let dir = scratch("hb-ack");
    let quick = sh(1, 0, &dir, "echo started; exit 4");
    let long = sh(2, 1, &dir, "trap 'exit 0' TERM; while true; do sleep 0.1; done");
    let (q, l) = (quick.clone(), long.clone());
    let mut acked_at = None;
    let (url, server) = fake_daemon(move |n, hb| {
        let mut r = HeartbeatReply { run: vec![q.clone(), l.clone()], ..Default::default() };
        if hb.exited.iter().any(|e| e.worker == q.worker) {
            // The first time we see it, keep listing it in `run` (a stale view): it must not be restarted.
            if acked_at.is_none() {
                acked_at = Some(n);
            } else {
                r.acked_exits = vec![q.worker];
            }
        }
        if acked_at.is_some_and(|a| n > a) {
            r.run.retain(|a| a.worker != q.worker);
        }
        if acked_at.is_some_and(|a| n > a + 3) {
            r.run.clear();
            r.stop = vec![StopOrder { worker: l.worker, grace_ms: 5000, signal: "SIGTERM".into() }];
        }
        if hb.exited.iter().any(|e| e.worker == l.worker) {
            r.acked_exits.push(l.worker);
        }
        if n > 200 || (acked_at.is_some() && hb.running.is_empty() && hb.exited.is_empty()) {
            return Some(("410 Gone", "{}".into()));
        }
        Some(("200 OK", reply(&r)))
    });
    let result = run(args(url, &dir));
    assert!(result.is_ok(), "{result:?}");
    let beats = server.join().unwrap();
    let quick_exits: Vec<_> = beats.iter().filter(|b| b.exited.iter().any(|e| e.worker == quick.worker)).collect();
    assert!(quick_exits.len() >= 2, "reported until acked");
    let e = &quick_exits[0].exited[0];
    assert_eq!((e.code, e.success), (Some(4), false));
    // After the ack it is never reported again, and never restarted.
    let first_unreported = beats.iter().rposition(|b| b.exited.iter().any(|e| e.worker == quick.worker)).unwrap();
    assert!(beats[first_unreported + 1..].iter().all(|b| !b.exited.iter().any(|e| e.worker == quick.worker)));
    let log = std::fs::read_to_string(dir.join("logs/1.log")).unwrap_or_default();
    assert_eq!(log, "started\n", "started once although `run` listed it until acked");
    let stopped = beats.iter().find_map(|b| b.exited.iter().find(|e| e.worker == long.worker)).expect("long stopped");
    assert_eq!((stopped.code, stopped.success), (Some(0), true), "exited through its TERM trap");
    assert!(beats.len() < 200, "ended by the stop, not the cap");
}

#[test]
fn gives_up_after_continuous_denials() {
    let dir = scratch("hb-denied");
    let pidfile = dir.join("pid");
    let w = sh(1, 0, &dir, &format!("echo $$ > '{}'; exec sleep 30", pidfile.display()));
    let (url, _server) = fake_daemon(move |n, hb| {
        if hb.running.is_empty() && n < 50 {
            let r = HeartbeatReply { run: vec![w.clone()], ..Default::default() };
            return Some(("200 OK", reply(&r)));
        }
        Some(("401 Unauthorized", r#"{"error":"bad token"}"#.into()))
    });
    let limits = Limits { denied: Duration::from_millis(300), ..Limits::default() };
    let t0 = std::time::Instant::now();
    let err = run_loop(&args(url, &dir), limits).expect_err("gives up");
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    // The worker started by the first reply is dead: the agent leaves no orphans.
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(!alive(pid), "worker {pid} killed");
}

#[test]
fn gives_up_when_daemon_unreachable() {
    let dir = scratch("hb-unreachable");
    // A port nobody listens on: bind, learn it, close.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let limits = Limits { unreachable: Duration::from_millis(300), ..Limits::default() };
    let err = run_loop(&args(format!("http://127.0.0.1:{port}"), &dir), limits).expect_err("gives up");
    assert!(err.to_string().contains("unreachable"), "{err}");
}
