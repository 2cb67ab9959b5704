//! The agent's watch of the EC2 instance metadata service, against a fake one on loopback: IMDSv2 (a session
//! token from `PUT /latest/api/token`, sent with every read), a spot `instance-action` and a rebalance
//! recommendation become notices, each once; reads without the token get nothing.

// A test waits on the wall clock; the clock ban is for decision code.
#![allow(clippy::disallowed_methods)]

use spillway_agent::imds::watch;
use spillway_api::NodeNotice;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

/// Serves IMDSv2 with a spot interruption at 2026-12-01T17:45:13Z and a rebalance recommendation; answers 401
/// to reads without the session token.
fn fake_imds() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                request.push_str(&line);
                line.clear();
            }
            let has_token = request.to_ascii_lowercase().contains("x-aws-ec2-metadata-token: tok");
            let (status, body) = if request.starts_with("PUT /latest/api/token") {
                ("200 OK", "tok")
            } else if !has_token {
                ("401 Unauthorized", "")
            } else if request.starts_with("GET /latest/meta-data/spot/instance-action") {
                ("200 OK", r#"{"action": "terminate", "time": "2026-12-01T17:45:13Z"}"#)
            } else if request.starts_with("GET /latest/meta-data/events/recommendations/rebalance") {
                ("200 OK", r#"{"noticeTime": "2026-12-01T17:40:00Z"}"#)
            } else {
                ("404 Not Found", "")
            };
            let mut s = stream;
            let _ = write!(s, "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    url
}

#[test]
fn the_agent_sees_a_spot_interruption_and_a_rebalance_recommendation_through_imdsv2() {
    let seen = watch(&fake_imds(), 3);
    let t = Instant::now();
    while seen.get().len() < 2 {
        assert!(t.elapsed() < Duration::from_secs(10), "no notices seen: {:?}", seen.get());
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = seen.get();
    assert_eq!(got, vec![NodeNotice::Interruption { deadline_ms: Some(1_796_147_113_000) }, NodeNotice::Rebalance]);
    // Polled again later, each is still there once (the daemon acts on the first it hears of).
    std::thread::sleep(Duration::from_millis(5_500));
    assert_eq!(seen.get().len(), 2);
}

#[test]
fn no_metadata_service_means_no_notices() {
    let seen = watch("http://127.0.0.1:1", 4);
    std::thread::sleep(Duration::from_millis(300));
    assert!(seen.get().is_empty());
}
