//! SIGTERM to the agent: it stops its workers (TERM, then KILL after 2 s) and returns Ok. Its own test binary,
//! because the signal flag is process-wide.

#![allow(clippy::disallowed_methods)] // tests time graces and deadlines with the real clock

mod common;

use common::*;
use spillway_agent::{AgentArgs, run};
use spillway_api::{Heartbeat, HeartbeatReply};
use std::net::TcpListener;
use std::time::{Duration, Instant};

#[test]
fn sigterm_stops_workers_and_returns_ok() {
    let dir = scratch("signal");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let polite = sh(
        1,
        0,
        &dir,
        &format!("echo $$ > '{}'; trap 'exit 0' TERM; while true; do sleep 0.1; done", dir.join("p1").display()),
    );
    let stubborn = sh(
        2,
        0,
        &dir,
        &format!("echo $$ > '{}'; trap '' TERM; while true; do sleep 0.1; done", dir.join("p2").display()),
    );
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (_, body) = read_request(&mut stream);
            let _hb: Heartbeat = serde_json::from_str(&body).unwrap();
            let r = HeartbeatReply { run: vec![polite.clone(), stubborn.clone()], ..Default::default() };
            respond(&mut stream, "200 OK", &serde_json::to_string(&r).unwrap());
        }
    });
    let args = AgentArgs {
        server: url,
        node: 1,
        token: "t".into(),
        gpus: 0,
        data_dir: dir.clone(),
        boot_delay_s: 0.0,
        heartbeat_ms: 50,
        run_as: None,
        imds_url: None,
        advertise_addr: None,
    };
    let agent = std::thread::spawn(move || run(args));
    let read_pid = |name: &str| std::fs::read_to_string(dir.join(name)).ok()?.trim().parse::<i32>().ok();
    let pids = wait_for(Duration::from_secs(5), || Some((read_pid("p1")?, read_pid("p2")?))).expect("both started");
    std::thread::sleep(Duration::from_millis(200)); // traps installed
    // The handlers are installed before the first heartbeat, so this reaches the flag, not the default action.
    let t0 = Instant::now();
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    let result = agent.join().unwrap();
    assert!(result.is_ok(), "{result:?}");
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(1900) && took < Duration::from_secs(4), "TERM, 2 s, KILL: took {took:?}");
    assert!(!alive(pids.0) && !alive(pids.1));
}
