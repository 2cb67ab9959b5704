//! Prometheus scrapes the daemon while a workload runs, the way an operator would watch it: Debian's `prometheus`
//! (and its `promtool`) on a free loopback port, scraping `/metrics` every second with the metrics token. The test
//! checks the series against the API (allocated GPUs, a queue-wait histogram that counts the jobs started,
//! scale-out actions), that `promtool check metrics` finds nothing to say, and that every panel query of the
//! Grafana dashboard (`docs/grafana/spillway.json`) runs without error and returns data.
//!
//! Without the binaries it skips with a message, except under `SPILLWAY_REQUIRE_SHARED=1` (CI), where it fails.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{Daemon, free_port, repo};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[[teams]]
name = "research"

[[instance_types]]
name = "vm4"
gpus = 4
gpu_model = "virtual"
on_demand_usd_per_hour = 12.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 0.9
nodes = [{ count = 2, gpus = 4, gpu_model = "virtual" }]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["vm4"]
max_nodes = 2
boot_latency_s = 1
scale_out_cooldown_s = 1

[tiers.p0]
burst_after_s = 0

[[budgets]]
team = "research"
period = "month"
usd = 1000000.0
"#;

/// Returns the path of `name` if Debian's package put it there.
fn tool(name: &str) -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin").join(name);
    p.exists().then_some(p)
}

/// A Prometheus server of the test's own, stopped on drop.
struct Prometheus {
    child: Child,
    port: u16,
    http: ureq::Agent,
}

impl Prometheus {
    /// Starts Prometheus on `port`, scraping every second what `scrape_configs` (YAML list items) say.
    fn start(dir: &Path, port: u16, scrape_configs: &str) -> Prometheus {
        let config =
            format!("global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n{scrape_configs}");
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(tool("prometheus").unwrap())
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let http = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let p = Prometheus { child, port, http };
        let t = Instant::now();
        while p.http.get(format!("http://127.0.0.1:{port}/-/ready")).call().map_or(true, |r| r.status() != 200) {
            assert!(t.elapsed() < Duration::from_secs(30), "prometheus did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    /// Runs an instant query; returns its result vector (panics on an error status).
    fn query(&self, q: &str) -> Vec<Value> {
        let url = format!("http://127.0.0.1:{}/api/v1/query", self.port);
        let mut r = self.http.get(&url).query("query", q).call().unwrap();
        let body: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        assert_eq!(body["status"], "success", "query {q}: {body}");
        body["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Returns the single value of a query that yields one series (None when it yields none).
    fn value(&self, q: &str) -> Option<f64> {
        let r = self.query(q);
        r.first().and_then(|s| s["value"][1].as_str()).and_then(|v| v.parse().ok())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` until it returns `Some`, for at most `secs`.
fn until<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Returns promtool's path when Prometheus and promtool are installed; `None` (the test skips) when they are not,
/// except under `SPILLWAY_REQUIRE_SHARED=1`, where that fails.
fn installed() -> Option<PathBuf> {
    let (Some(_), Some(promtool)) = (tool("prometheus"), tool("promtool")) else {
        if std::env::var("SPILLWAY_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
            panic!("SPILLWAY_REQUIRE_SHARED=1 but prometheus/promtool are not installed (apt-get install prometheus)");
        }
        eprintln!("skipped: prometheus is not installed (apt-get install prometheus)");
        return None;
    };
    Some(promtool)
}

#[test]
fn prometheus_scrapes_the_daemon_and_every_dashboard_query_returns_data() {
    let Some(promtool) = installed() else { return };
    let mut d = Daemon::unstarted("prometheus", CONFIG);
    let base = d.dir.parent().unwrap().to_path_buf();
    let token_file = base.join("metrics.token");
    std::fs::write(&token_file, "metrics-secret-0123456789\n").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    d.args = vec!["--metrics-token-file".into(), token_file.display().to_string()];
    d.start();
    // The metrics token (or the admin token) reads /metrics; nothing else does.
    assert_eq!(d.raw("GET", "/metrics", None, None).0, 401);
    assert_eq!(d.raw("GET", "/metrics", Some("wrong"), None).0, 401);
    assert_eq!(d.raw("GET", "/metrics", Some(&d.admin()), None).0, 200);
    let scrape = format!(
        "  - job_name: spillway\n    authorization: {{credentials_file: {}}}\n    static_configs:\n      - \
         targets: ['127.0.0.1:{}']\n",
        token_file.display(),
        d.port
    );
    let prom = Prometheus::start(&base, free_port(), &scrape);
    until(30, "the daemon's target to be up", || (prom.value("up{job=\"spillway\"}") == Some(1.0)).then_some(()));

    // 4 one-node jobs of 4 GPUs: two fit the owned pool, two make the on-demand pool grow.
    let ids: Vec<u64> = (0..4)
        .map(|_| {
            let b = d.post("/v1/jobs", json!({"tier": "p0", "team": "research", "gpus": 4, "argv": ["sleep", "25"]}));
            b["id"].as_u64().unwrap()
        })
        .collect();
    until(60, "all 4 jobs to run", || {
        ids.iter().all(|id| d.get(&format!("/v1/jobs/{id}"))["state"] == "running").then_some(())
    });
    // While they run, allocation is steady: Prometheus's figure equals the API's.
    let api_allocated: u64 =
        d.get("/v1/pools").as_array().unwrap().iter().map(|p| p["busy_gpus"].as_u64().unwrap()).sum();
    assert_eq!(api_allocated, 16);
    until(20, "Prometheus to see 16 allocated GPUs", || {
        (prom.value("sum(spillway_gpus_allocated)") == Some(api_allocated as f64)).then_some(())
    });
    let started = ids.iter().filter(|id| d.get(&format!("/v1/jobs/{id}"))["started_at"].is_number()).count();
    until(20, "the queue-wait histogram to count every job started", || {
        (prom.value("sum(spillway_queue_wait_seconds_count)") == Some(started as f64)).then_some(())
    });
    let out = until(20, "a scale-out of pool od", || {
        prom.value("sum(spillway_scaling_actions_total{pool=\"od\",direction=\"out\"})").filter(|v| *v >= 1.0)
    });
    assert!(out >= 1.0);
    assert_eq!(prom.value("sum(spillway_nodes{pool=\"od\",state=\"ready\"})"), Some(2.0));

    // promtool has nothing to say about the exposition.
    let (_, text) = d.raw("GET", "/metrics", Some(&d.admin()), None);
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut check.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let res = check.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&res.stdout), String::from_utf8_lossy(&res.stderr));
    assert!(res.status.success() && said.trim().is_empty(), "promtool check metrics: {said}");

    // Every panel query of the dashboard runs and returns data (a few scrapes in, so rates have two points).
    let dash: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("docs/grafana/spillway.json")).unwrap()).unwrap();
    let exprs: Vec<String> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(|e| e.replace("$__rate_interval", "1m")))
        .collect();
    assert!(exprs.len() >= 10, "the dashboard has {} queries", exprs.len());
    for e in &exprs {
        until(20, &format!("data from `{e}`"), || (!prom.query(e).is_empty()).then_some(()));
    }
}

/// A DCGM-style exporter of the test's own: `DCGM_FI_DEV_GPU_UTIL` (a percentage, as DCGM reports it) for nodes
/// 0-15, each labelled with its Spillway node id, as a relabelling of EC2 tags or file-based discovery would do;
/// while `down`, every scrape gets a 503 (so Prometheus marks its series stale).
struct Exporter {
    port: u16,
    /// (down, utilization percent)
    state: std::sync::Arc<std::sync::Mutex<(bool, f64)>>,
}

impl Exporter {
    fn start() -> Exporter {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = std::sync::Arc::new(std::sync::Mutex::new((false, 100.0)));
        let shared = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut buf = [0u8; 4096];
                let _ = std::io::Read::read(&mut conn, &mut buf);
                let (down, util) = *shared.lock().unwrap();
                let reply = if down {
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
                } else {
                    let body: String = (0..16)
                        .map(|n| {
                            format!(
                                "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",Hostname=\"gpu-host\",spillway_node=\"{n}\"}} {util}\n"
                            )
                        })
                        .collect();
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
                         Connection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                let _ = std::io::Write::write_all(&mut conn, reply.as_bytes());
            }
        });
        Exporter { port, state }
    }

    fn set(&self, down: bool, util: f64) {
        *self.state.lock().unwrap() = (down, util);
    }
}

/// Returns pool `od`'s (alive, ready) nodes as the API reports them.
fn od_nodes(d: &Daemon) -> (u64, u64) {
    let pools = d.get("/v1/pools");
    let od = pools.as_array().unwrap().iter().find(|p| p["name"] == "od").unwrap().clone();
    (od["nodes"].as_u64().unwrap(), od["ready_nodes"].as_u64().unwrap())
}

#[test]
fn a_pool_scales_on_a_promql_query_and_holds_while_its_signal_is_missing() {
    if installed().is_none() {
        return;
    }
    let exporter = Exporter::start();
    let prom_port = free_port();
    let config = format!(
        r#"
[[teams]]
name = "research"

[[instance_types]]
name = "vm4"
gpus = 4
gpu_model = "virtual"
on_demand_usd_per_hour = 12.0

[[pools]]
name = "onprem"
market = "fixed"
gpu_usd_per_hour = 0.9
nodes = [{{ count = 1, gpus = 1, gpu_model = "virtual" }}]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["vm4"]
min_nodes = 1
max_nodes = 3
boot_latency_s = 1
scale_out_cooldown_s = 1
scale_in_cooldown_s = 1
idle_timeout_s = 1
target_gpu_utilization = 0.5
utilization_warmup_s = 1
utilization_query = 'avg by (spillway_node) (DCGM_FI_DEV_GPU_UTIL) / 100'

[prometheus]
url = "http://127.0.0.1:{prom_port}"
interval_s = 1
timeout_s = 1
"#
    );
    let mut d = Daemon::unstarted("promql", &config);
    let base = d.dir.parent().unwrap().to_path_buf();
    d.start();
    let scrape = format!("  - job_name: dcgm\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n", exporter.port);
    let mut prom = Prometheus::start(&base, prom_port, &scrape);

    // Busy GPUs (100%, target 50%): the pool grows from its one node to its max of 3.
    until(90, "pool od to grow to 3 ready nodes on the query", || (od_nodes(&d) == (3, 3)).then_some(()));
    let events = d.get("/v1/events?limit=1000").to_string();
    assert!(events.contains("target_tracking:gpu_utilization"), "no target-tracking decision: {events}");

    // The exporter stops answering, then the GPUs go idle: Prometheus marks the series stale, the query returns
    // nothing for the pool's warm nodes, and the pool holds.
    exporter.set(true, 5.0);
    until(20, "Prometheus to see the exporter down", || (prom.value("up{job=\"dcgm\"}") == Some(0.0)).then_some(()));
    until(20, "a metric_lost decision", || {
        d.get("/v1/events?limit=1000").to_string().contains("metric_lost").then_some(())
    });
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(od_nodes(&d), (3, 3), "the pool scaled in without a signal");

    // Prometheus itself goes away while the exporter is back with idle GPUs: the query fails; still no scale-in.
    drop(prom);
    exporter.set(false, 5.0);
    until(20, "the failed query in the daemon's log", || {
        d.log().contains("pool od: utilization signal missing (no scale-in): asking").then_some(())
    });
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(od_nodes(&d), (3, 3), "the pool scaled in on a failed query");

    // Prometheus is back with the idle GPUs (5%): now the pool scales in, to its min of one node.
    prom = Prometheus::start(&base, prom_port, &scrape);
    until(90, "pool od to scale in to its min on the query", || (od_nodes(&d).0 == 1).then_some(()));
    let events = d.get("/v1/events?limit=1000").to_string();
    assert!(events.contains("metric_restored"), "no metric_restored decision: {events}");
    drop(prom);
}
