//! Helpers shared by the agent's integration tests.
#![allow(dead_code)]

use spillway_api::{Assignment, WorkerRef};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A fresh, empty directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-agent-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn worker(job: u32) -> WorkerRef {
    WorkerRef { job, attempt: 1, rank: 0 }
}

/// An assignment running `sh -c script` with checkpoints and logs under `dir`.
pub fn sh(job: u32, gpus: u32, dir: &Path, script: &str) -> Assignment {
    Assignment {
        worker: worker(job),
        world_size: 1,
        gpus,
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: BTreeMap::new(),
        workdir: None,
        checkpoint_dir: dir.join(format!("ckpt-{job}")).to_string_lossy().into_owned(),
        log_path: dir.join(format!("logs/{job}.log")).to_string_lossy().into_owned(),
        master_addr: "127.0.0.1".into(),
        master_port: 29500,
        workers_range: Some((1, 2)),
        region: None,
        data_from: None,
    }
}

/// Polls `f` every 20 ms until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process with this pid exists (a zombie counts).
pub fn alive(pid: i32) -> bool {
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Processes of process group `pgid` that are not zombies (a zombie is dead; only its parent or init can reap it,
/// and in a container init may be slow to).
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut live = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return live };
    for e in entries.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        // pid (comm) state ppid pgrp ...: comm may hold spaces, so split after the last ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let pid = head.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if fields.len() > 2 && fields[2].parse::<i32>().ok() == Some(pgid) && fields[0] != "Z" {
            live.push(pid);
        }
    }
    live
}

/// Reads one HTTP request; returns its Authorization header and body.
pub fn read_request(stream: &mut TcpStream) -> (String, String) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut len = 0usize;
    let mut auth = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => len = v.trim().parse().unwrap(),
                "authorization" => auth = v.trim().to_string(),
                _ => {}
            }
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    (auth, String::from_utf8(body).unwrap())
}

pub fn respond(stream: &mut TcpStream, status: &str, body: &str) {
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(msg.as_bytes()).unwrap();
}
