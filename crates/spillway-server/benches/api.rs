//! API load: job submissions per second the daemon sustains with its SQLite store (every submission one logged,
//! committed transaction before the engine sees it), and their latency, measured with concurrent keep-alive
//! clients on loopback. The reference, measured in the same run by the same clients, is `GET /healthz` (same HTTP
//! stack, no lock, no store, no engine), so the ratio says what the store and the engine cost per request.
//!
//! `cargo bench -p spillway-server --bench api [-- CLIENTS REQUESTS_PER_CLIENT]` (default 4 x 5000).

use spillway_server::{DaemonOptions, ServeOptions};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[cluster]
name = "bench"
[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 0.9
nodes = [{ count = 1, gpus = 8 }]
"#;

/// Runs `n` requests on each of `clients` threads; returns (requests per second, p50 ms, p99 ms, failures).
fn load(url: &str, token: &str, clients: usize, n: usize, submit: bool) -> (f64, f64, f64, usize) {
    #[allow(clippy::disallowed_methods)]
    let t0 = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let (url, token) = (url.to_string(), token.to_string());
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
                let mut lat = Vec::with_capacity(n);
                let mut failed = 0;
                for i in 0..n {
                    #[allow(clippy::disallowed_methods)]
                    let t = Instant::now();
                    let ok = if submit {
                        let body = format!(r#"{{"name": "b{c}-{i}", "tier": "p2", "gpus": 1, "argv": ["true"]}}"#);
                        agent
                            .post(format!("{url}/v1/jobs"))
                            .header("Authorization", format!("Bearer {token}"))
                            .header("Content-Type", "application/json")
                            .send(body.as_str())
                            .map(|r| r.status().as_u16() == 201)
                            .unwrap_or(false)
                    } else {
                        agent.get(format!("{url}/healthz")).call().map(|r| r.status().is_success()).unwrap_or(false)
                    };
                    lat.push(t.elapsed().as_secs_f64() * 1000.0);
                    failed += usize::from(!ok);
                }
                (lat, failed)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut failed = 0;
    for h in handles {
        let (l, f) = h.join().unwrap_or_default();
        all.extend(l);
        failed += f;
    }
    let secs = t0.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    let q = |p: f64| all.get(((p * all.len() as f64).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0);
    (all.len() as f64 / secs, q(0.50), q(0.99), failed)
}

/// A daemon started by the bench: (url, admin token, seconds to start, stop handle, thread).
type Running = (String, String, f64, tokio::sync::oneshot::Sender<()>, std::thread::JoinHandle<anyhow::Result<()>>);

/// Starts the daemon on `dir` in its own thread.
fn start(dir: &std::path::Path) -> Option<Running> {
    let opts = ServeOptions {
        daemon: DaemonOptions {
            data_dir: dir.to_path_buf(),
            heartbeat_timeout: Duration::from_secs(3600),
            boot_grace: Duration::from_secs(60),
            tick: Duration::from_millis(200),
            seed: 1,
            jobs_dir: None,
            reinit: false,
            run_as: None,
            metrics_token: None,
        },
        config_name: "bench.toml".into(),
        config_text: CONFIG.into(),
        listen: "127.0.0.1:0".parse().ok()?,
        // The owned node's agent is a stand-in process: this bench measures the API, the store and the engine.
        agent_command: vec!["/bin/sh".into(), "-c".into(), "exec sleep 3600".into(), "agent".into()],
        stop_nodes_on_exit: true,
        provider: None,
    };
    let (tx_info, rx_info) = std::sync::mpsc::channel();
    let (tx_stop, rx_stop) = tokio::sync::oneshot::channel::<()>();
    #[allow(clippy::disallowed_methods)]
    let t0 = Instant::now();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(spillway_server::serve(
            opts,
            move |s| {
                let _ = tx_info.send((s.url.clone(), s.admin_token.clone()));
            },
            async move {
                let _ = rx_stop.await;
            },
        ))
    });
    match rx_info.recv() {
        Ok((url, token)) => Some((url, token, t0.elapsed().as_secs_f64(), tx_stop, server)),
        Err(_) => {
            eprintln!("the daemon did not start: {:?}", server.join());
            None
        }
    }
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (clients, n) = (args.first().copied().unwrap_or(4), args.get(1).copied().unwrap_or(5000));
    let dir = std::env::temp_dir().join(format!("spillway-bench-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let Some((url, token, _, tx_stop, server)) = start(&dir) else { return };
    let _warm = load(&url, &token, clients, 200, false);
    let (href, h50, h99, hf) = load(&url, &token, clients, n, false);
    let (rate, p50, p99, failed) = load(&url, &token, clients, n, true);
    println!("api bench: {clients} keep-alive clients on loopback, {n} requests each");
    println!("  GET /healthz (reference)   {href:>8.0} req/s   p50 {h50:.2} ms   p99 {h99:.2} ms   failed {hf}");
    println!("  POST /v1/jobs (SQLite log) {rate:>8.0} req/s   p50 {p50:.2} ms   p99 {p99:.2} ms   failed {failed}");
    println!("  submissions run at {:.2}x the reference rate; {} jobs queued at the end", rate / href, clients * n);
    let _ = tx_stop.send(());
    let _ = server.join();
    // A restart rebuilds the engine by replaying the whole input log.
    let Some((_, _, secs, tx_stop, server)) = start(&dir) else { return };
    println!("  restart: the store's {} submissions replayed and the daemon serving in {secs:.2} s", clients * n);
    let _ = tx_stop.send(());
    let _ = server.join();
    let db = dir.join("spillway.db");
    let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0)
        + std::fs::metadata(dir.join("spillway.db-wal")).map(|m| m.len()).unwrap_or(0);
    println!("  store: {:.1} MB for {} submissions", size as f64 / 1e6, clients * n);
    let _ = std::fs::remove_dir_all(&dir);
}
