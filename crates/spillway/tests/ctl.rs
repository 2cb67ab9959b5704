//! The daemon commands end to end against a fake HTTP server: submit (exit 0, id printed, request body and token
//! checked), a 403 (exit 4 with the server's message), a 422 (exit 5 naming the field), a 404 (exit 3), an
//! unreachable server (exit 6), and `-o json`.

// A test of the shell: it reads the real clock.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

/// One request the fake server saw: request line, authorization header, body.
#[derive(Debug, Clone)]
struct Seen {
    line: String,
    auth: String,
    body: String,
}

const JOB: &str = r#"{"id":17,"name":"job","tier":"p1","team":"research","state":"queued","attempt":0,"gpus":1,
"workers":1,"argv":["python3","x.py"],"submitted_at":1700000000.0,"started_at":null,"ended_at":null,"nodes":[],
"pending_reason":"no_capacity","interruptions":0,"preemptions":0}"#;

/// Returns the status and body the fake server answers `line` with, the `n`th time it is asked (from 0).
fn answer(line: &str, n: usize) -> (u16, &'static str, String) {
    match line {
        // Job 21 runs, then succeeds on the second look; its log grows by one line per read.
        "GET /v1/jobs/21 HTTP/1.1" => {
            let state = if n == 0 { "running" } else { "succeeded" };
            (200, "OK", JOB.replace("\"id\":17", "\"id\":21").replace("queued", state))
        }
        "GET /v1/jobs/21/logs HTTP/1.1" => (200, "OK", "one\ntwo\nthree\n".into()),
        // Rank 0's log read from an offset, as `logs --follow` reads it: "one\nt" at first, "wo\nthr" more once
        // the job has ended (its last line has no newline).
        "GET /v1/jobs/21/logs?rank=0&from=0 HTTP/1.1" => (200, "OK", "one\nt".into()),
        "GET /v1/jobs/21/logs?rank=0&from=5 HTTP/1.1" if n >= 1 => (200, "OK", "wo\nthr".into()),
        l if l.starts_with("GET /v1/jobs/21/logs?rank=0&from=") => (200, "OK", String::new()),
        // Job 22, a gang of two that ended; rank 0's output ends without a newline.
        "GET /v1/jobs/22 HTTP/1.1" => (
            200,
            "OK",
            JOB.replace("\"id\":17", "\"id\":22")
                .replace("queued", "succeeded")
                .replace("\"workers\":1", "\"workers\":2"),
        ),
        "GET /v1/jobs/22/logs?rank=0&from=0 HTTP/1.1" => (200, "OK", "a\nnonl".into()),
        "GET /v1/jobs/22/logs?rank=1&from=0 HTTP/1.1" => (200, "OK", "b\n".into()),
        l if l.starts_with("GET /v1/jobs/22/logs?rank=") => (200, "OK", String::new()),
        "POST /v1/jobs HTTP/1.1" => (201, "Created", JOB.to_string()),
        "GET /v1/jobs/17 HTTP/1.1" => (200, "OK", JOB.to_string()),
        "GET /v1/jobs/99 HTTP/1.1" => (403, "Forbidden", r#"{"error":"job 99 belongs to team vision"}"#.into()),
        "POST /v1/pools/spot/scale HTTP/1.1" => {
            (422, "Unprocessable Entity", r#"{"error":"min above max","field":"min_nodes"}"#.into())
        }
        _ => (404, "Not Found", r#"{"error":"no such thing"}"#.into()),
    }
}

fn serve_one(stream: TcpStream, seen: &Mutex<Vec<Seen>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end().to_string();
    let (mut len, mut auth) = (0usize, String::new());
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => len = v.trim().parse().unwrap_or(0),
                "authorization" => auth = v.trim().to_string(),
                _ => {}
            }
        }
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    let mut seen = seen.lock().map_err(|_| std::io::Error::other("poisoned"))?;
    let (status, reason, out) = answer(&line, seen.iter().filter(|s| s.line == line).count());
    seen.push(Seen { line, auth, body: String::from_utf8_lossy(&body).into_owned() });
    drop(seen);
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{out}",
        out.len()
    )?;
    stream.flush()
}

/// Starts the fake server on 127.0.0.1:0; returns its URL and the requests it records.
fn fake_server() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding the fake server");
    let url = format!("http://{}", listener.local_addr().expect("local addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = serve_one(stream, &s);
        }
    });
    (url, seen)
}

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .env_remove("SPILLWAY_SERVER")
        .env_remove("SPILLWAY_TOKEN")
        .env("SPILLWAY_DATA_DIR", std::env::temp_dir().join("spillway-ctl-test-no-such-dir"))
        .output()
        .unwrap_or_else(|e| panic!("running spillway {args:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn daemon_commands_map_answers_to_output_and_exit_codes() {
    let (url, seen) = fake_server();

    let out = spillway(&["submit", "--server", &url, "--token", "t", "--gpus", "1", "--", "python3", "x.py"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "submitted job 17 (p1, team research)");
    let req = seen.lock().expect("lock")[0].clone();
    assert_eq!(req.line, "POST /v1/jobs HTTP/1.1");
    assert_eq!(req.auth, "Bearer t");
    let body: serde_json::Value = serde_json::from_str(&req.body).expect("the body is JSON");
    let here = std::env::current_dir().expect("cwd").display().to_string();
    assert_eq!(body, serde_json::json!({"tier": "p1", "gpus": 1, "argv": ["python3", "x.py"], "workdir": here}));

    let out = spillway(&["jobs", "show", "99", "--server", &url, "--token", "t"]);
    assert_eq!(out.status.code(), Some(4), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("job 99 belongs to team vision"), "{}", text(&out.stderr));

    let out = spillway(&["pools", "scale", "spot", "--min", "9", "--max", "2", "--server", &url, "--token", "t"]);
    assert_eq!(out.status.code(), Some(5), "stderr: {}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("min above max") && err.contains("min_nodes"), "{err}");
    let scale = seen.lock().expect("lock").last().expect("a request").body.clone();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&scale).ok(),
        Some(serde_json::json!({"min_nodes": 9, "max_nodes": 2}))
    );

    let out = spillway(&["jobs", "cancel", "5", "--server", &url, "--token", "t"]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));

    let out = spillway(&["jobs", "show", "17", "-o", "json", "--server", &url, "--token", "t"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("-o json prints JSON");
    assert_eq!(v["id"], 17);

    let out = spillway(&["jobs", "show", "17", "--server", &url, "--token", "t"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(
        t.starts_with("JobId=17 ") && t.contains("Reason=no_capacity") && t.contains("Command=python3 x.py"),
        "{t}"
    );
}

#[test]
fn logs_follow_prints_each_byte_once_until_the_job_ends() {
    let (url, _) = fake_server();
    let out = spillway(&["jobs", "logs", "21", "--follow", "--server", &url, "--token", "t"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    // One rank's bytes as they come (a partial line is not held back), each once, nothing added.
    assert_eq!(text(&out.stdout), "one\ntwo\nthr", "each byte once, the last line as the job left it");
    // Without --follow the same rank reads, byte for byte (the whole log, not the server's text tail).
    let out = spillway(&["jobs", "logs", "21", "--server", &url, "--token", "t"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "one\ntwo\nthr");
    // A gang's ranks each under a header of their own line, even after a rank whose output has no final newline.
    let out = spillway(&["jobs", "logs", "22", "--server", &url, "--token", "t"]);
    assert_eq!(text(&out.stdout), "==> rank 0 <==\na\nnonl\n==> rank 1 <==\nb\n");
}

#[test]
fn an_unreachable_server_exits_6_naming_it() {
    let out = spillway(&["jobs", "ls", "--server", "http://127.0.0.1:1", "--token", "t"]);
    assert_eq!(out.status.code(), Some(6), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("http://127.0.0.1:1"), "{}", text(&out.stderr));
}

#[test]
fn no_server_anywhere_is_an_error() {
    let out = spillway(&["cost"]);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no server: pass --server or run spillway up"), "{}", text(&out.stderr));
}

#[test]
fn pools_scale_without_a_bound_is_a_usage_error() {
    let out = spillway(&["pools", "scale", "spot", "--server", "http://127.0.0.1:9", "--token", "t"]);
    assert_eq!(out.status.code(), Some(2), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--min"), "{}", text(&out.stderr));
}
