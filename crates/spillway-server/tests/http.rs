//! The HTTP layer: the serve loop's limits (header and body timeouts, keep-alive idle, connection limit, body size,
//! graceful shutdown) on a small router with short limits, over raw TCP where a request must be half-sent; and the
//! API's rules on a real daemon: the token before any parsing, every error an `ErrorBody`, trailing input refused,
//! submission limits naming the field, paged lists with next-page headers and pages bounded in bytes.

// Timeouts are the subject here: the tests read the clock (clippy.toml bans that for the decision code).
#![allow(clippy::disallowed_methods)]

use serde_json::{Value, json};
use spillway_server::http::Limits;
use spillway_server::{DaemonOptions, ServeOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

// ---- A small router under the serve loop, with limits short enough to test. ----

/// A serve loop on 127.0.0.1:0 in its own runtime; dropping it stops it.
struct Loop {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Loop {
    fn start(limits: Limits) -> Loop {
        let (tx_addr, rx_addr) = std::sync::mpsc::channel();
        let (stop, rx_stop) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let _ = tx_addr.send(listener.local_addr()?);
                let app = axum::Router::new().route("/ok", axum::routing::get(|| async { "ok" })).route(
                    "/echo",
                    axum::routing::post(|b: axum::body::Bytes| async move { axum::Json(json!({"len": b.len()})) }),
                );
                spillway_server::http::serve(listener, app, limits, async move {
                    let _ = rx_stop.await;
                })
                .await
            })
        });
        let addr = rx_addr.recv_timeout(Duration::from_secs(10)).expect("the serve loop did not start");
        Loop { addr, stop: Some(stop), thread: Some(thread) }
    }

    /// Stops the loop; returns how long `serve` took to return.
    fn shutdown(&mut self) -> Duration {
        let t = Instant::now();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
        t.elapsed()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn short_limits() -> Limits {
    Limits {
        header_read_timeout: Duration::from_secs(1),
        max_header_bytes: 8192,
        body_read_timeout: Duration::from_secs(1),
        max_body_bytes: 1024,
        max_connections: 4,
        max_rejecting: 4,
        shutdown_grace: Duration::from_secs(2),
    }
}

/// Connects to `addr` with a read timeout of `read_timeout`.
fn connect(addr: SocketAddr, read_timeout: Duration) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connecting");
    s.set_read_timeout(Some(read_timeout)).expect("read timeout");
    s
}

/// Reads until the server closes the connection or `s`'s read timeout passes. Returns what arrived and whether
/// the server closed.
fn read_until_close(s: &mut TcpStream) -> (String, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&out).into_owned(), true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // A reset is a close too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&out).into_owned(), true);
            }
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), false),
        }
    }
}

/// Reads one response whose head and `content-length` body arrive on a kept-alive connection.
fn read_response(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&out).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end].lines().find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0))
            });
            if out.len() >= end + 4 + len.unwrap_or(0) {
                return text;
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return text,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Returns the status of a raw response and its body parsed as JSON (`Null` when it is not JSON).
fn status_and_json(resp: &str) -> (u16, Value) {
    let status = resp.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = resp.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn half_sent_headers_are_dropped_after_the_header_timeout() {
    let l = Loop::start(short_limits());
    let mut s = connect(l.addr, Duration::from_secs(8));
    s.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    let t = Instant::now();
    let (got, closed) = read_until_close(&mut s);
    assert!(closed, "a half-sent request was kept open for {:?}", t.elapsed());
    assert!(t.elapsed() >= Duration::from_millis(800), "closed before the timeout: {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(4), "closed only after {:?}", t.elapsed());
    assert!(got.is_empty(), "no request, so no answer: {got}");
}

#[test]
fn oversized_headers_are_refused() {
    let l = Loop::start(short_limits());
    let mut s = connect(l.addr, Duration::from_secs(5));
    let big = "h".repeat(16 << 10);
    // The server may close while this is still being written.
    let _ = s.write_all(format!("GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n").as_bytes());
    let (got, closed) = read_until_close(&mut s);
    assert!(closed, "headers over the limit were kept open");
    assert!(got.is_empty() || got.starts_with("HTTP/1.1 431"), "{got}");
}

#[test]
fn idle_keep_alive_connections_are_closed() {
    let l = Loop::start(short_limits());
    let mut s = connect(l.addr, Duration::from_secs(8));
    s.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(read_response(&mut s).starts_with("HTTP/1.1 200"));
    let t = Instant::now();
    let (_, closed) = read_until_close(&mut s);
    assert!(closed && t.elapsed() < Duration::from_secs(4), "an idle connection stayed open {:?}", t.elapsed());
}

#[test]
fn connections_beyond_the_limit_get_a_503_json_error() {
    let mut limits = short_limits();
    limits.header_read_timeout = Duration::from_secs(20);
    let l = Loop::start(limits);
    // Four held connections, each with a request served so that it surely holds its slot.
    let mut held: Vec<TcpStream> = (0..4).map(|_| connect(l.addr, Duration::from_secs(5))).collect();
    for s in &mut held {
        s.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(read_response(s).starts_with("HTTP/1.1 200"));
    }
    let mut extra = connect(l.addr, Duration::from_secs(5));
    extra.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (got, closed) = read_until_close(&mut extra);
    let (status, body) = status_and_json(&got);
    assert_eq!(status, 503, "{got}");
    assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "not an ErrorBody: {got}");
    assert!(closed, "the refused connection was left open");
    // A freed slot serves again.
    drop(held.pop());
    let t = Instant::now();
    loop {
        let mut s = connect(l.addr, Duration::from_secs(5));
        s.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let (got, _) = read_until_close(&mut s);
        if got.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "no slot came free: {got}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn bodies_over_the_limit_get_a_413_json_error() {
    let l = Loop::start(short_limits());
    // Declared far too large: refused before any of the body is sent.
    let mut s = connect(l.addr, Duration::from_secs(5));
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n").unwrap();
    let t = Instant::now();
    let (got, _) = read_until_close(&mut s);
    let (status, body) = status_and_json(&got);
    assert_eq!(status, 413, "{got}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("1024")), "{got}");
    assert!(t.elapsed() < Duration::from_millis(500), "waited {:?} for a body it refuses", t.elapsed());
    // Declared a little too large and sent in full: read and dropped, so the answer arrives.
    let mut s = connect(l.addr, Duration::from_secs(5));
    let body = "c".repeat(2048);
    s.write_all(format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2048\r\n\r\n{body}").as_bytes()).unwrap();
    let (got, _) = read_until_close(&mut s);
    assert_eq!(status_and_json(&got).0, 413, "{got}");
    // Declared a little too large, never sent: still a 413, after the body timeout.
    let mut s = connect(l.addr, Duration::from_secs(5));
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2048\r\n\r\n").unwrap();
    let (got, _) = read_until_close(&mut s);
    assert_eq!(status_and_json(&got).0, 413, "{got}");
    // Chunked past the limit.
    let mut s = connect(l.addr, Duration::from_secs(5));
    let chunk = "a".repeat(600);
    let req = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let (got, _) = read_until_close(&mut s);
    assert_eq!(status_and_json(&got).0, 413, "{got}");
    // At the limit is fine.
    let mut s = connect(l.addr, Duration::from_secs(5));
    let body = "b".repeat(1024);
    s.write_all(
        format!("POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 1024\r\n\r\n{body}").as_bytes(),
    )
    .unwrap();
    let (got, _) = read_until_close(&mut s);
    assert_eq!(status_and_json(&got), (200, json!({"len": 1024})), "{got}");
}

#[test]
fn slow_bodies_get_a_408_json_error() {
    let l = Loop::start(short_limits());
    let mut s = connect(l.addr, Duration::from_secs(8));
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789").unwrap();
    let t = Instant::now();
    let (got, closed) = read_until_close(&mut s);
    let (status, body) = status_and_json(&got);
    assert_eq!(status, 408, "{got}");
    assert!(body["error"].is_string(), "{got}");
    assert!(closed && t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
}

#[test]
fn shutdown_closes_the_listener_and_idle_connections() {
    let mut limits = short_limits();
    limits.header_read_timeout = Duration::from_secs(30);
    let mut l = Loop::start(limits);
    let mut idle = connect(l.addr, Duration::from_secs(5));
    idle.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(read_response(&mut idle).starts_with("HTTP/1.1 200"));
    let took = l.shutdown();
    assert!(took < Duration::from_secs(2), "shutdown waited {took:?} on an idle connection");
    assert!(read_until_close(&mut idle).1, "the idle connection was left open");
    assert!(TcpStream::connect(l.addr).is_err(), "still accepting after shutdown");
}

// ---- The daemon. ----

const CONFIG: &str = r#"
[cluster]
name = "http"
[[teams]]
name = "research"
[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 0.9
nodes = [{ count = 1, gpus = 8 }]
"#;

/// A daemon on 127.0.0.1:0 with a stand-in agent (nothing ever runs); dropping it stops it.
struct Daemon {
    url: String,
    addr: SocketAddr,
    admin: String,
    research: String,
    dir: std::path::PathBuf,
    agent: ureq::Agent,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

/// One answer: status, body, and the next-page headers.
struct Reply {
    status: u16,
    body: String,
    link: Option<String>,
    next: Option<String>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body.chars().take(300).collect::<String>()))
    }

    /// Returns the start of the body, for messages (bodies here can be megabytes).
    fn head(&self) -> String {
        self.body.chars().take(300).collect()
    }

    /// Asserts an `ErrorBody` with `status` naming `field` (when given).
    fn assert_error(&self, status: u16, field: Option<&str>, what: &str) {
        assert_eq!(self.status, status, "{what}: {}", self.head());
        let e: Value = serde_json::from_str(&self.body).unwrap_or(Value::Null);
        assert!(e["error"].as_str().is_some_and(|m| !m.is_empty()), "{what}: not an ErrorBody: {}", self.head());
        if let Some(f) = field {
            assert_eq!(e["field"].as_str(), Some(f), "{what}: {}", self.head());
        }
    }
}

impl Daemon {
    fn start(name: &str) -> Daemon {
        Daemon::start_with(name, CONFIG)
    }

    /// A daemon on `config` (TOML).
    fn start_with(name: &str, config: &str) -> Daemon {
        let dir = std::env::temp_dir().join(format!("spillway-http-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let opts = ServeOptions {
            daemon: DaemonOptions {
                data_dir: dir.clone(),
                jobs_dir: None,
                heartbeat_timeout: Duration::from_secs(3600),
                boot_grace: Duration::from_secs(3600),
                tick: Duration::from_millis(100),
                seed: 1,
                reinit: false,
                run_as: None,
                metrics_token: None,
            },
            config_name: "http.toml".into(),
            config_text: config.into(),
            listen: "127.0.0.1:0".parse().expect("an address"),
            agent_command: vec!["/bin/sh".into(), "-c".into(), "exec sleep 3600".into(), "agent".into()],
            stop_nodes_on_exit: true,
            provider: None,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, rx_stop) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            rt.block_on(spillway_server::serve(
                opts,
                move |s| {
                    let _ = tx.send(s.clone());
                },
                async move {
                    let _ = rx_stop.await;
                },
            ))
        });
        let Ok(s) = rx.recv_timeout(Duration::from_secs(30)) else {
            panic!("the daemon did not start: {:?}", thread.join())
        };
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        let addr = s.url.trim_start_matches("http://").parse().expect("the daemon's address");
        let research = s.team_tokens.get("research").cloned().expect("a research token");
        Daemon { url: s.url, addr, admin: s.admin_token, research, dir, agent, stop: Some(stop), thread: Some(thread) }
    }

    /// Sends `method path` with `token` and `body` (raw text); returns the answer.
    fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Reply {
        let url = format!("{}{path}", self.url);
        let auth = token.map(|t| format!("Bearer {t}"));
        let res = match method {
            "GET" | "DELETE" => {
                let mut r = if method == "GET" { self.agent.get(&url) } else { self.agent.delete(&url) };
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            _ => {
                let mut r = self.agent.post(&url).header("Content-Type", "application/json");
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                match body {
                    Some(b) => r.send(b),
                    None => r.send_empty(),
                }
            }
        };
        let mut r = res.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let header = |n: &str| r.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
        let (link, next) = (header("link"), header("x-next-cursor"));
        let body = r.body_mut().with_config().limit(64 << 20).read_to_string().unwrap_or_default();
        Reply { status: r.status().as_u16(), body, link, next }
    }

    fn get(&self, path: &str) -> Reply {
        self.call("GET", path, Some(&self.admin), None)
    }

    fn submit(&self, body: &Value) -> Reply {
        self.call("POST", "/v1/jobs", Some(&self.admin), Some(&body.to_string()))
    }

    /// Returns the ids of every job, following the next-page links from `first`.
    fn all_job_ids(&self, first: &str) -> (Vec<u64>, usize) {
        let (mut ids, mut pages, mut path) = (Vec::new(), 0, first.to_string());
        loop {
            let r = self.get(&path);
            assert_eq!(r.status, 200, "{path}: {}", r.head());
            pages += 1;
            ids.extend(r.json().as_array().into_iter().flatten().filter_map(|j| j["id"].as_u64()));
            match r.link {
                Some(link) => path = link_path(&link),
                None => return (ids, pages),
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Returns the target of a `Link: <target>; rel="next"` header.
fn link_path(link: &str) -> String {
    assert!(link.ends_with("; rel=\"next\""), "{link}");
    link.trim_start_matches('<').split_once('>').map(|(p, _)| p.to_string()).unwrap_or_default()
}

fn job(name: &str) -> Value {
    json!({"name": name, "tier": "p1", "gpus": 1, "argv": ["true"]})
}

#[test]
fn daemon_drops_a_half_sent_request() {
    let d = Daemon::start("half");
    let mut s = connect(d.addr, Duration::from_secs(20));
    s.write_all(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ").unwrap();
    let t = Instant::now();
    let (_, closed) = read_until_close(&mut s);
    assert!(closed, "a half-sent request was kept open for {:?}", t.elapsed());
    assert!(
        t.elapsed() >= Duration::from_secs(9) && t.elapsed() < Duration::from_secs(15),
        "closed after {:?}",
        t.elapsed()
    );
}

#[test]
fn daemon_refuses_a_body_over_1_mib_with_413_json() {
    let d = Daemon::start("big");
    let big = format!(r#"{{"tier": "p1", "gpus": 1, "argv": ["true"], "name": "{}"}}"#, "x".repeat(1 << 20));
    d.call("POST", "/v1/jobs", Some(&d.admin), Some(&big)).assert_error(413, None, "a 1 MiB body");
}

#[test]
fn the_token_is_checked_before_anything_is_parsed() {
    let d = Daemon::start("auth");
    for (method, path, body) in [
        ("GET", "/v1/jobs/abc", None),
        ("POST", "/v1/jobs/abc/cancel", None),
        ("GET", "/v1/jobs/abc/logs", None),
        ("GET", "/v1/jobs?limit=abc", None),
        ("GET", "/v1/jobs?state=bogus", None),
        ("POST", "/v1/jobs", Some("not json")),
        ("POST", "/v1/nodes/abc/interrupt", None),
        ("POST", "/v1/nodes/abc/protect", Some("not json")),
        ("POST", "/v1/pools/%FF/scale", Some("not json")),
        ("POST", "/v1/pools/onprem/protect", Some("not json")),
        ("GET", "/v1/events?limit=abc", None),
        ("GET", "/v1/cost?since=abc", None),
        ("POST", "/v1/agent/heartbeat", Some("not json")),
    ] {
        let what = format!("{method} {path} without a token");
        d.call(method, path, None, body).assert_error(401, None, &what);
        let what = format!("{method} {path} with a wrong token");
        d.call(method, path, Some("wrong"), body).assert_error(401, None, &what);
    }
    // The heartbeat wants a node token: a user token with a malformed body is still 401, not 400.
    d.call("POST", "/v1/agent/heartbeat", Some(&d.admin), Some("{")).assert_error(
        401,
        None,
        "heartbeat with a user token",
    );
    // With a token, the same requests fail on what they carry.
    d.get("/v1/jobs/abc").assert_error(400, Some("id"), "a bad job id");
    d.call("POST", "/v1/nodes/abc/protect", Some(&d.admin), Some("{}")).assert_error(400, Some("id"), "a bad node id");
    d.call("POST", "/v1/nodes/0/protect", Some(&d.admin), Some("not json")).assert_error(400, None, "a bad body");
}

#[test]
fn every_error_is_an_error_body() {
    let d = Daemon::start("errors");
    d.get("/v1/nope").assert_error(404, None, "an unknown route");
    d.call("DELETE", "/v1/jobs", Some(&d.admin), None).assert_error(405, None, "a wrong method");
    d.call("GET", "/v1/jobs/0/cancel", Some(&d.admin), None).assert_error(405, None, "GET on a POST route");
    d.get("/v1/jobs/99").assert_error(404, None, "a missing job");
    d.get("/v1/jobs?limit=abc").assert_error(422, Some("limit"), "limit=abc");
    d.get("/v1/jobs?bogus=1").assert_error(422, Some("bogus"), "an unknown parameter");
    d.get("/v1/cost?since=abc").assert_error(422, Some("since"), "since=abc");
    d.get("/v1/events?job=abc").assert_error(422, Some("job"), "job=abc");
    d.call("GET", "/v1/cost", Some(&d.research), None).assert_error(403, None, "a team token on an admin route");
    d.call("POST", "/v1/jobs", Some(&d.admin), Some(r#"{"tier": "p1", "gpus"#)).assert_error(
        400,
        None,
        "truncated JSON",
    );
}

#[test]
fn json_followed_by_anything_but_whitespace_is_refused() {
    let d = Daemon::start("trailing");
    let ok = job("a").to_string();
    for trailing in [" garbage", "{}", r#" {"tier": "p0"}"#, "]", "\u{0}"] {
        let body = format!("{ok}{trailing}");
        d.call("POST", "/v1/jobs", Some(&d.admin), Some(&body)).assert_error(
            400,
            None,
            &format!("JSON then {trailing:?}"),
        );
    }
    d.call("POST", "/v1/nodes/0/protect", Some(&d.admin), Some(r#"{"protected": true} x"#)).assert_error(
        400,
        None,
        "protect with trailing input",
    );
    d.call("POST", "/v1/pools/onprem/scale", Some(&d.admin), Some(r#"{} {}"#)).assert_error(
        400,
        None,
        "scale with trailing input",
    );
    assert_eq!(d.get("/v1/jobs").json(), json!([]), "a refused job was stored");
    assert_eq!(
        d.call("POST", "/v1/jobs", Some(&d.admin), Some(&format!("{ok} \n\t "))).status,
        201,
        "trailing whitespace is fine"
    );
}

#[test]
fn submissions_outside_the_limits_are_refused_naming_the_field() {
    let d = Daemon::start("limits");
    let base = job("j");
    let with = |k: &str, v: Value| {
        let mut j = base.clone();
        j[k] = v;
        j
    };
    let many_env = |n: usize, value: usize| {
        Value::Object((0..n).map(|i| (format!("K{i}"), Value::from("v".repeat(value)))).collect())
    };
    let cases: Vec<(Value, &str)> = vec![
        (with("name", json!("n".repeat(257))), "name"),
        (with("name", json!("a\u{0}b")), "name"),
        (with("tier", json!("t".repeat(129))), "tier"),
        (with("team", json!("t".repeat(129))), "team"),
        (with("gpu_model", json!("g".repeat(129))), "gpu_model"),
        (with("workdir", json!("/".repeat(4097))), "workdir"),
        (with("argv", json!(vec!["x"; 1025])), "argv"),
        (with("argv", json!(["true", "a".repeat(16 * 1024 + 1)])), "argv[1]"),
        (with("argv", json!(vec!["a".repeat(16 * 1024); 5])), "argv"),
        (with("argv", json!(["  "])), "argv"),
        (with("argv", json!(["true", "a\u{0}"])), "argv[1]"),
        (with("env", many_env(257, 1)), "env"),
        (with("env", json!({"1X": "v"})), "env"),
        (with("env", json!({"A-B": "v"})), "env"),
        (with("env", json!({"": "v"})), "env"),
        (with("env", Value::Object([("K".repeat(257), json!("v"))].into_iter().collect())), "env"),
        (with("env", json!({"K": "v".repeat(16 * 1024 + 1)})), "env.K"),
        (with("env", json!({"K": "a\u{0}"})), "env.K"),
        (with("env", many_env(5, 16 * 1024)), "env"),
        (with("workers", json!(5000)), "workers"),
        (with("gpus", json!(2000)), "gpus"),
        (with("deadline_s", json!(1e300)), "deadline_s"),
        (with("deadline_s", json!(0)), "deadline_s"),
        (with("deadline_s", json!(-5)), "deadline_s"),
        (with("deadline_s", json!(315_360_001.0)), "deadline_s"),
        (with("expected_duration_s", json!(1e300)), "expected_duration_s"),
        (with("expected_duration_s", json!(0)), "expected_duration_s"),
        (with("checkpoint_interval_s", json!(1e-300)), "checkpoint_interval_s"),
        (with("checkpoint_interval_s", json!(0.5)), "checkpoint_interval_s"),
        (with("checkpoint_interval_s", json!(31_536_001)), "checkpoint_interval_s"),
        (with("checkpoint_gb", json!(-1)), "checkpoint_gb"),
        (with("checkpoint_gb", json!(1e300)), "checkpoint_gb"),
        (with("data_region", json!("  ")), "data_region"),
        (with("data_region", json!("US-EAST-1")), "data_region"),
        // A region without a size would never be weighed.
        (with("data_region", json!("us-east-1")), "data_region"),
    ];
    for (body, field) in &cases {
        let shown: String = body.to_string().chars().take(120).collect();
        d.submit(body).assert_error(422, Some(field), &shown);
    }
    assert_eq!(d.get("/v1/jobs").json(), json!([]), "a refused job was stored");
    // At the limits is fine.
    let edge = json!({
        "name": "n".repeat(256), "tier": "p1", "gpus": 1, "argv": vec!["a".repeat(16 * 1024); 4],
        "env": many_env(4, 16 * 1024 - 2), "workdir": "/".repeat(4096),
        "checkpoint_interval_s": 1, "deadline_s": 315_360_000, "expected_duration_s": 1e-9
    });
    let r = d.submit(&edge);
    assert_eq!(r.status, 201, "{}", r.head());
    // A job's data size and region come back in its view.
    let r = d.submit(&with("checkpoint_gb", json!(50)).as_object().map_or(json!({}), |o| {
        let mut o = o.clone();
        o.insert("data_region".into(), json!("us-east-1"));
        Value::Object(o)
    }));
    assert_eq!(r.status, 201, "{}", r.head());
    let view = r.json();
    assert_eq!((view["checkpoint_gb"].as_f64(), view["data_region"].as_str()), (Some(50.0), Some("us-east-1")));
}

#[test]
fn jobs_page_newest_first_with_next_page_headers() {
    let d = Daemon::start("jobs");
    for i in 0..7 {
        assert_eq!(d.submit(&job(&format!("j{i}"))).status, 201);
    }
    let r = d.get("/v1/jobs?limit=3");
    assert_eq!(r.status, 200, "{}", r.head());
    let ids: Vec<u64> = r.json().as_array().unwrap().iter().filter_map(|j| j["id"].as_u64()).collect();
    assert_eq!(ids, [6, 5, 4]);
    let (link, next) = (r.link.clone().expect("a Link header"), r.next.clone().expect("an X-Next-Cursor header"));
    assert!(link.contains(&format!("cursor={next}")) && link.contains("limit=3"), "{link}");
    assert_eq!(d.all_job_ids("/v1/jobs?limit=3"), ((0..7).rev().collect(), 3));
    // The last page has no next-page headers; nor does a list that fits one page.
    let r = d.get("/v1/jobs");
    assert_eq!((r.json().as_array().map(Vec::len), r.link, r.next), (Some(7), None, None));
    // Filters carry over to the next page.
    let (ids, pages) = d.all_job_ids("/v1/jobs?tier=p1&team=default&limit=2");
    assert_eq!((ids.len(), pages), (7, 4));
    assert_eq!(d.get("/v1/jobs?tier=p0").json(), json!([]));
    assert_eq!(d.get("/v1/jobs?state=cancelled").json(), json!([]));
    // A team sees its own jobs only.
    assert_eq!(d.call("GET", "/v1/jobs", Some(&d.research), None).json(), json!([]));
    for (q, field) in [
        ("limit=1001", "limit"),
        ("limit=0", "limit"),
        ("limit=-1", "limit"),
        ("cursor=zz", "cursor"),
        ("state=bogus", "state"),
        ("tier=p9", "tier"),
        ("team=nobody", "team"),
        ("limit=1&limit=2", "limit"),
    ] {
        d.get(&format!("/v1/jobs?{q}")).assert_error(422, Some(field), q);
    }
    assert_eq!(d.get("/v1/jobs?limit=1000").status, 200);
}

#[test]
fn pages_of_large_jobs_end_early() {
    let d = Daemon::start("bytes");
    // 70 jobs of 64 KiB of argv each: 4.4 MiB in all, more than one page's byte budget.
    let argv = vec!["a".repeat(16 * 1024); 4];
    for i in 0..70 {
        let r = d.submit(&json!({"name": format!("big{i}"), "tier": "p1", "gpus": 1, "argv": argv}));
        assert_eq!(r.status, 201, "{}", r.head());
    }
    let first = d.get("/v1/jobs?limit=1000");
    let n = first.json().as_array().map_or(0, Vec::len);
    assert!(n > 0 && n < 70, "one page held {n} jobs of 64 KiB");
    assert!(first.body.len() < 5 << 20, "a page of {} bytes", first.body.len());
    assert!(first.next.is_some(), "no next page after {n} jobs");
    let (ids, pages) = d.all_job_ids("/v1/jobs?limit=1000");
    assert_eq!((ids, pages), ((0..70).rev().collect(), 2));
}

#[test]
fn events_page_oldest_first_and_refuse_unknown_filters() {
    let d = Daemon::start("events");
    for i in 0..6 {
        assert_eq!(d.submit(&job(&format!("e{i}"))).status, 201);
    }
    // The ticker decides the submissions within a tick or two; wait for a few decisions.
    let t = Instant::now();
    let all = loop {
        let all = d.get("/v1/events?limit=1000").json();
        if all.as_array().map_or(0, Vec::len) >= 4 {
            break all;
        }
        assert!(t.elapsed() < Duration::from_secs(15), "no decisions recorded: {all}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let all: Vec<Value> = all.as_array().cloned().unwrap_or_default();
    let seqs: Vec<u64> = all.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "not oldest first: {seqs:?}");
    // Two at a time, following X-Next-Cursor, gives the same decisions in the same order.
    let (mut paged, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/events?limit=2&cursor={c}"),
            None => "/v1/events?limit=2".to_string(),
        };
        let r = d.get(&path);
        pages += 1;
        paged.extend(r.json().as_array().cloned().unwrap_or_default());
        match r.next {
            Some(c) if paged.len() < all.len() => cursor = Some(c),
            _ => break,
        }
    }
    assert!(paged.len() >= all.len(), "{} events in {pages} pages of 2, {} in one page", paged.len(), all.len());
    assert_eq!(paged[..all.len()], all[..], "after {pages} pages");
    assert!(pages >= 2);
    let kind = all[0]["kind"].as_str().unwrap_or_default().to_string();
    let r = d.get(&format!("/v1/events?kind={kind}&limit=1000"));
    assert!(
        r.json().as_array().is_some_and(|v| !v.is_empty() && v.iter().all(|e| e["kind"] == kind.as_str())),
        "{}",
        r.head()
    );
    for (q, field) in [
        ("kind=bogus", "kind"),
        ("pool=nope", "pool"),
        ("node=x", "node"),
        ("node=999", "node"),
        ("job=999", "job"),
        ("job=1&node=1", "node"),
        ("limit=5000", "limit"),
        ("cursor=-1", "cursor"),
    ] {
        d.get(&format!("/v1/events?{q}")).assert_error(422, Some(field), q);
    }
    assert_eq!(d.get("/v1/events?pool=onprem&kind=scale_out").status, 200);
}

#[test]
fn the_openapi_document_lists_the_limits_and_paging() {
    let d = Daemon::start("openapi");
    let doc = d.call("GET", "/v1/openapi.json", None, None).json();
    assert_eq!(doc["x-spillway-limits"]["MAX_ARGV"], 1024);
    assert_eq!(doc["x-spillway-limits"]["MAX_BODY_BYTES"], 1 << 20);
    let submit = &doc["components"]["schemas"]["JobSubmit"]["properties"];
    assert_eq!(submit["name"]["maxLength"], 256);
    assert_eq!(submit["argv"]["maxItems"], 1024);
    assert_eq!(submit["checkpoint_interval_s"]["minimum"], 1.0);
    let params = doc["paths"]["/v1/jobs"]["get"]["parameters"].as_array().cloned().unwrap_or_default();
    assert!(
        params.iter().any(|p| p["name"] == "cursor")
            && params.iter().any(|p| p["name"] == "limit" && p["schema"]["maximum"] == 1000)
    );
    assert!(doc["paths"]["/v1/events"]["get"]["responses"]["200"]["headers"]["X-Next-Cursor"].is_object());
}

#[test]
fn what_if_answers_for_a_cloud_pool_and_refuses_bad_questions() {
    // Nothing ever boots here (the agent is a stand-in), so an 8-GPU job past the owned node waits on `cloud`.
    let cloud = r#"
[[instance_types]]
name = "g8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 20.0

[[pools]]
name = "cloud"
market = "on_demand"
instance_types = ["g8"]
max_nodes = 1
min_step_nodes = 8
"#;
    let config = format!("{CONFIG}{cloud}");
    let d = Daemon::start_with("what-if", &config);
    for name in ["a", "b", "c", "d"] {
        let mut j = job(name);
        j["gpus"] = json!(8);
        j["tier"] = json!("p0");
        assert_eq!(d.submit(&j).status, 201);
    }
    // The stand-in agents never report, so the jobs wait; the cloud pool's one node (booting) is counted on for
    // one of them. Asked with a max of 4 past its cooldown, it would buy a node for each of the others.
    let ask = "/v1/pools/cloud/what-if?max_nodes=4&ignore_cooldown=true";
    let (mut w, mut last) = (Value::Null, Value::Null);
    for _ in 0..100 {
        w = d.get(ask).json();
        if w == last && w["jobs"].as_u64().is_some_and(|j| j >= 3) {
            break;
        }
        last = w.clone();
        std::thread::sleep(Duration::from_millis(50));
    }
    let jobs = w["jobs"].as_u64().expect("a job count");
    assert!((3..=4).contains(&jobs), "{w}");
    assert_eq!(w["max_nodes"], json!(4));
    assert_eq!(w["launches"], json!([{"instance_type": "g8", "nodes": jobs - 1}]), "{w}");
    assert_eq!(w["may_use"], json!(jobs), "every waiting job may use the cloud pool: {w}");
    let now = d.get("/v1/pools/cloud/what-if").json();
    assert_eq!(now["launches"], json!([]), "at its max of 1 it buys nothing: {now}");
    assert!(now["not_grown"] == json!("at_max") || now["not_grown"] == json!("cooldown"), "{now}");
    let pools = d.get("/v1/pools").json();
    assert_eq!(pools[1]["max_nodes"], json!(1), "asking changed nothing: {pools}");

    d.get("/v1/pools/onprem/what-if").assert_error(409, None, "a fixed pool");
    d.get("/v1/pools/nope/what-if").assert_error(404, None, "an unknown pool");
    let abc = d.get("/v1/pools/cloud/what-if?max_nodes=abc");
    assert!(abc.body.contains("whole number from 0 to 4294967295"), "the error says what is allowed: {}", abc.body);
    abc.assert_error(422, Some("max_nodes"), "max_nodes=abc");
    d.get("/v1/pools/cloud/what-if?max_nodes=-1").assert_error(422, Some("max_nodes"), "max_nodes=-1");
    d.get("/v1/pools/cloud/what-if?max_nodes=4294967296").assert_error(422, Some("max_nodes"), "past u32");
    d.get("/v1/pools/cloud/what-if?ignore_cooldown=maybe").assert_error(422, Some("ignore_cooldown"), "maybe");
    d.get("/v1/pools/cloud/what-if?bogus=1").assert_error(422, Some("bogus"), "an unknown parameter");
    // Setting a max no pool may have is refused as the config would refuse it (a min that high launched them all).
    let huge = r#"{"min_nodes": 2000000, "max_nodes": 2000000}"#;
    d.call("POST", "/v1/pools/cloud/scale", Some(&d.admin), Some(huge)).assert_error(422, Some("max_nodes"), "huge");
    d.call("GET", "/v1/pools/cloud/what-if", None, None).assert_error(401, None, "no token");
    // It counts every team's waiting jobs: a team token may not ask.
    d.call("GET", "/v1/pools/cloud/what-if", Some(&d.research), None).assert_error(403, None, "a team token");
}

#[test]
fn a_deadline_jobs_view_says_where_it_stands_with_spot() {
    // Nothing ever boots here, so the jobs wait; each one's slack alone decides. An on-demand trip keeps a 60 s
    // boot, p1's 60 s checkpoint (inside the notice: no lost work) and a 60 s margin: 180 s; `safe` pins a job
    // with less and puts one with less than five trips' worth (its pin's and four more) on its reserve.
    let cloud = r#"
[policy]
deadline_margin_s = 60

[[instance_types]]
name = "g8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 20.0
spot_usd_per_hour = 6.0

[[pools]]
name = "spot"
market = "spot"
instance_types = ["g8"]
max_nodes = 4
boot_latency_s = 60

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["g8"]
max_nodes = 4
boot_latency_s = 60
"#;
    let d = Daemon::start_with("spot-state", &format!("{CONFIG}{cloud}"));
    let mut ids = Vec::new();
    for slack in [100, 600, 36_000] {
        let mut j = job(&format!("slack-{slack}"));
        j["gpus"] = json!(8);
        j["expected_duration_s"] = json!(3600);
        j["deadline_s"] = json!(3600 + slack);
        let r = d.submit(&j);
        assert_eq!(r.status, 201, "{}", r.head());
        ids.push(r.json()["id"].as_u64().expect("an id"));
    }
    let state = |id: u64| d.get(&format!("/v1/jobs/{id}")).json()["spot_state"].clone();
    let want = [json!("pinned_on_demand"), json!("deadline_reserve"), Value::Null];
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = ids.iter().map(|&id| state(id)).collect();
        if seen == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(seen, want);
}
