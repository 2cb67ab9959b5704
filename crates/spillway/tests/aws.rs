//! The daemon on the AWS provider, end to end against moto (an EC2-compatible server) behind a small proxy that
//! injects what moto cannot (capacity errors, a lost CreateFleet answer). No VM boots here, so the harness plays
//! the instances: for every live instance of the cluster it runs the instance's user-data as a local process (the
//! agent, with the node token on its stdin), and kills that agent when the instance is terminated.
//!
//! Needs `SPILLWAY_MOTO_URL` and `SPILLWAY_MOTO_PYTHON` (moto's venv python, with boto3), which `.ci/run` sets;
//! without them every test skips with a message, except under `SPILLWAY_REQUIRE_SHARED=1`, where they fail.
#![cfg(feature = "aws")]
#![allow(clippy::disallowed_methods)]

mod common;
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where moto runs, and the python that has boto3.
#[derive(Clone)]
struct Moto {
    url: String,
    python: String,
}

fn moto() -> Option<Moto> {
    match (std::env::var("SPILLWAY_MOTO_URL"), std::env::var("SPILLWAY_MOTO_PYTHON")) {
        (Ok(url), Ok(python)) => Some(Moto { url, python }),
        _ if std::env::var("SPILLWAY_REQUIRE_SHARED").is_ok_and(|v| v == "1") => {
            panic!("SPILLWAY_MOTO_URL and SPILLWAY_MOTO_PYTHON must be set in CI (.ci/run starts moto)")
        }
        _ => {
            println!("skipping: SPILLWAY_MOTO_URL / SPILLWAY_MOTO_PYTHON not set (no moto server; .ci/run starts one)");
            None
        }
    }
}

impl Moto {
    /// Runs the helper (tests/aws/moto_helper.py) against moto; returns its stdout.
    fn helper(&self, args: &[&str]) -> String {
        let out = Command::new(&self.python)
            .arg(repo("crates/spillway/tests/aws/moto_helper.py"))
            .arg(&self.url)
            .args(args)
            .output()
            .expect("running the moto helper");
        assert!(out.status.success(), "moto helper {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn instances(&self, prefix: &str) -> Vec<Value> {
        serde_json::from_str::<Value>(&self.helper(&["instances", prefix])).unwrap().as_array().unwrap().clone()
    }
}

/// The fault-injecting proxy (tests/aws/ec2_proxy.py) in front of moto.
struct Proxy {
    child: Child,
    url: String,
}

impl Proxy {
    fn start(m: &Moto, extra: &[&str]) -> Proxy {
        let port = free_port();
        let child = Command::new(&m.python)
            .arg(repo("crates/spillway/tests/aws/ec2_proxy.py"))
            .arg(port.to_string())
            .arg(&m.url)
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(10), "the proxy did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Proxy { child, url: format!("http://127.0.0.1:{port}") }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The instances, played by local agent processes (see the module doc).
struct Fleet {
    stop: Arc<AtomicBool>,
    /// Every instance seen, by id: its last description from moto.
    seen: Arc<Mutex<BTreeMap<String, Value>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Fleet {
    /// Starts playing the instances of clusters named `prefix`; agents' data dirs go under `dir`, replacing
    /// `data_dir` (the one in the user-data) per instance.
    fn start(m: &Moto, prefix: &str, dir: &std::path::Path, data_dir: &str) -> Fleet {
        let stop = Arc::new(AtomicBool::new(false));
        let seen: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
        let (m, prefix, dir, data_dir) = (m.clone(), prefix.to_string(), dir.to_path_buf(), data_dir.to_string());
        let (stop2, seen2) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            let mut agents: BTreeMap<String, Child> = BTreeMap::new();
            while !stop2.load(Ordering::Relaxed) {
                for i in m.instances(&prefix) {
                    let id = i["id"].as_str().unwrap().to_string();
                    let live = matches!(i["state"].as_str(), Some("pending" | "running"));
                    if live && !agents.contains_key(&id) {
                        let script =
                            i["user_data"].as_str().unwrap().replace(&data_dir, &dir.join(&id).display().to_string());
                        let path = dir.join(format!("{id}.sh"));
                        std::fs::write(&path, script).unwrap();
                        let log = std::fs::File::create(dir.join(format!("{id}.log"))).unwrap();
                        let child =
                            Command::new("sh").arg(&path).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
                        agents.insert(id.clone(), child);
                    }
                    if !live && let Some(mut c) = agents.remove(&id) {
                        // The instance is gone, and its agent with it.
                        unsafe { libc_kill(c.id() as i32, 15) };
                        std::thread::sleep(Duration::from_millis(300));
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    seen2.lock().unwrap().insert(id, i);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            for (_, mut c) in agents {
                unsafe { libc_kill(c.id() as i32, 15) };
                std::thread::sleep(Duration::from_millis(200));
                let _ = c.kill();
                let _ = c.wait();
            }
        });
        Fleet { stop, seen, thread: Some(thread) }
    }

    fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().values().cloned().collect()
    }

    /// Returns the instance of `node`, once seen.
    fn instance_of(&self, node: u64) -> Option<Value> {
        self.seen().into_iter().find(|i| i["tags"]["spillway:node"] == node.to_string().as_str())
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One test's world: moto set up (launch template, queue, rules), a proxy, the daemon, the fleet.
struct World {
    m: Moto,
    name: String,
    d: Daemon,
    fleet: Fleet,
    _proxy: Proxy,
}

impl World {
    fn new(name: &str, proxy_args: &[&str]) -> Option<World> {
        World::placed(name, proxy_args, "", "")
    }

    /// Writes the world's config (`spot_extra`: lines for the spot pool, `provider_extra`: for `[provider]`) and
    /// starts the daemon on it; `None` without moto.
    fn placed(name: &str, proxy_args: &[&str], spot_extra: &str, provider_extra: &str) -> Option<World> {
        let m = moto()?;
        let name = format!("{name}{}", std::process::id());
        let setup: Value = serde_json::from_str(&m.helper(&["setup", &name])).unwrap();
        let proxy = Proxy::start(&m, proxy_args);
        let mut d = Daemon::unstarted(&name, "");
        let agents = d.dir.with_extension("agents");
        std::fs::create_dir_all(&agents).unwrap();
        let data_dir = "/var/lib/spillway-agent-under-test";
        let config = format!(
            r#"
[cluster]
name = "{name}"

[tiers.p1]
burst_after_s = 0
checkpoint_time_s = 2

[[instance_types]]
name = "p3.2xlarge"
gpus = 1
gpu_model = "V100"
on_demand_usd_per_hour = 3.06
spot_usd_per_hour = 0.92

[[instance_types]]
name = "p3.8xlarge"
gpus = 4
gpu_model = "V100"
on_demand_usd_per_hour = 12.24
spot_usd_per_hour = 4.0

[[pools]]
name = "spot"
market = "spot"
instance_types = ["p3.2xlarge", "p3.8xlarge"]
max_nodes = 3
boot_latency_s = 5
idle_timeout_s = 3
scale_out_cooldown_s = 0
scale_in_cooldown_s = 0
{spot_extra}
[[pools]]
name = "od"
market = "on_demand"
instance_types = ["p3.2xlarge"]
max_nodes = 2
boot_latency_s = 5
idle_timeout_s = 3

[provider]
kind = "aws"
region = "us-east-1"
endpoint_url = "{proxy}"
launch_template = "{name}"
image_id = "{image}"
interruption_queue_url = "{queue}"
server_url = "http://127.0.0.1:{port}"
agent_path = "{bin}"
agent_data_dir = "{data_dir}"
imds_url = "http://127.0.0.1:1"
{provider_extra}
"#,
            proxy = proxy.url,
            image = setup["image_id"].as_str().unwrap(),
            queue = setup["queue_url"].as_str().unwrap(),
            port = d.port,
            bin = BIN,
        );
        std::fs::write(&d.config, config).unwrap();
        d.env = aws_env();
        d.start();
        let fleet = Fleet::start(&m, &name, &agents, data_dir);
        Some(World { m, name, d, fleet, _proxy: proxy })
    }

    /// Submits a p1 job of `steps` training steps (0.3 s each, a checkpoint every 3); returns its id.
    fn submit(&self, steps: u32) -> u64 {
        let argv = json!([
            "python3",
            repo("examples/train.py").display().to_string(),
            "--steps",
            steps.to_string(),
            "--step-time",
            "0.3",
            "--checkpoint-every",
            "3"
        ]);
        self.d.post("/v1/jobs", json!({"tier": "p1", "gpus": 1, "argv": argv}))["id"].as_u64().unwrap()
    }

    fn job(&self, id: u64) -> Value {
        self.d.get(&format!("/v1/jobs/{id}"))
    }

    /// Waits up to `secs` for `cond`, failing with `what` and the daemon's log.
    fn wait(&self, secs: u64, what: &str, mut cond: impl FnMut(&World) -> bool) {
        let t = Instant::now();
        while !cond(self) {
            assert!(
                t.elapsed() < Duration::from_secs(secs),
                "timed out waiting for {what}; daemon log:\n{}",
                self.d.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until job `id` runs; returns its node.
    fn running_on(&self, id: u64) -> u64 {
        self.wait(60, &format!("job {id} to run"), |w| w.job(id)["state"] == "running");
        self.job(id)["nodes"][0].as_u64().unwrap_or_else(|| panic!("job {id} runs on no node: {}", self.job(id)))
    }

    fn events(&self) -> String {
        self.d.get("/v1/events?limit=1000").to_string()
    }
}

/// The AWS credentials moto takes, and no instance metadata lookups.
fn aws_env() -> Vec<(String, String)> {
    [("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_EC2_METADATA_DISABLED", "true")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Returns moto's default subnets as (id, zone), by zone.
fn default_subnets(m: &Moto) -> Vec<(String, String)> {
    let v: Value = serde_json::from_str(&m.helper(&["subnets"])).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap().into(), s["zone"].as_str().unwrap().into()))
        .collect()
}

fn python_ok() -> bool {
    if !python() {
        println!("skipping: python3 not found (the jobs run examples/train.py)");
        return false;
    }
    true
}

#[test]
fn a_pool_scales_out_through_create_fleet_and_back_to_zero_through_terminate_with_tagged_instances() {
    let Some(w) = World::new("awsscale", &[]).filter(|_| python_ok()) else { return };
    let id = w.submit(10);
    let node = w.running_on(id);
    let inst = w.fleet.instance_of(node).expect("the node's instance was seen");
    assert_eq!(inst["tags"]["spillway:pool"], "spot", "{inst}");
    assert!(inst["tags"]["spillway:cluster"].as_str().unwrap().starts_with(&w.name), "{inst}");
    assert_eq!((inst["lifecycle"].as_str(), inst["type"].as_str()), (Some("spot"), Some("p3.2xlarge")), "{inst}");
    // The token in the user-data (which any process on the instance can read back) is void once the job runs.
    let log = w.d.dir.join(format!("jobs/job-{id}/logs/rank-0.log"));
    w.wait(30, "the job's process to start", |_| log.exists());
    let ud = inst["user_data"].as_str().unwrap();
    let token =
        ud.split("printf '%s\\n' '").nth(1).and_then(|t| t.split('\'').next()).expect("the token in the user-data");
    let (status, body) = w.d.raw("POST", "/v1/agent/heartbeat", Some(token), Some(&json!({"node": node}).to_string()));
    assert_eq!(status, 401, "the launch token still works: {body}");
    w.wait(60, "the job to finish", |w| w.job(id)["state"] == "succeeded");
    // Idle for the pool's timeout: the node goes, and its instance is terminated.
    w.wait(30, "the instance to be terminated", |w| {
        w.m.instances(&w.name).iter().all(|i| matches!(i["state"].as_str(), Some("shutting-down" | "terminated")))
    });
    let nodes = w.d.get("/v1/nodes");
    assert!(nodes.as_array().unwrap().iter().all(|n| n["state"] != "ready"), "{nodes}");
}

#[test]
fn an_interruption_warning_through_eventbridge_and_sqs_checkpoints_the_job_and_it_resumes_on_a_replacement() {
    let Some(w) = World::new("awsintr", &[]).filter(|_| python_ok()) else { return };
    let id = w.submit(40);
    let node = w.running_on(id);
    std::thread::sleep(Duration::from_secs(3)); // a checkpoint or two
    let inst = w.fleet.instance_of(node).expect("instance seen");
    w.m.helper(&["event", "interruption", inst["id"].as_str().unwrap()]);
    w.wait(30, "the interruption notice", |w| w.events().contains("interruption_notice"));
    w.wait(60, "the job to run again", |w| w.job(id)["attempt"].as_u64() >= Some(2) && w.job(id)["state"] == "running");
    let j = w.job(id);
    assert_ne!(j["nodes"][0].as_u64(), Some(node), "attempt 2 runs on a replacement: {j}");
    w.wait(90, "the job to finish on the replacement", |w| w.job(id)["state"] == "succeeded");
    let log = std::fs::read_to_string(w.d.dir.join(format!("jobs/job-{id}/logs/rank-0.log"))).unwrap_or_default();
    assert!(log.lines().any(|l| l.starts_with("resumed from step") && !l.starts_with("resumed from step 0 ")), "{log}");
}

#[test]
fn a_rebalance_recommendation_starts_a_replacement_before_the_job_moves() {
    let Some(w) = World::new("awsreb", &[]).filter(|_| python_ok()) else { return };
    let id = w.submit(60);
    let node = w.running_on(id);
    let inst = w.fleet.instance_of(node).expect("instance seen");
    w.m.helper(&["event", "rebalance", inst["id"].as_str().unwrap()]);
    w.wait(30, "a replacement instance", |w| w.fleet.seen().len() >= 2);
    // The replacement was launched while the job still ran on the node at risk, in its first attempt.
    let j = w.job(id);
    assert!(
        j["state"] == "running" && j["attempt"] == 1 && j["nodes"][0].as_u64() == Some(node)
            || w.events().contains("rebalance_move"),
        "the job left before a replacement was bought: {j}"
    );
    w.wait(60, "the job to move", |w| {
        let j = w.job(id);
        j["attempt"].as_u64() >= Some(2) && j["nodes"][0].as_u64().is_some_and(|n| n != node)
    });
    let events = w.events();
    let (rec, moved) = (events.find("rebalance_recommendation"), events.find("rebalance_move"));
    assert!(rec.is_some() && moved.is_some(), "{events}");
    w.wait(30, "the node at risk to be terminated", |w| {
        w.m.instances(&w.name)
            .iter()
            .any(|i| i["id"] == inst["id"] && i["state"] != "running" && i["state"] != "pending")
    });
    w.wait(90, "the job to finish", |w| w.job(id)["state"] == "succeeded");
}

#[test]
fn a_daemon_killed_between_create_fleet_and_its_store_write_leaves_no_orphan_after_the_restart() {
    // The proxy forwards the first CreateFleet (moto launches the instance) and never answers it.
    let Some(mut w) = World::new("awskill", &["--hold-once", "/dev/null"]).filter(|_| python_ok()) else { return };
    let id = w.submit(10);
    w.wait(30, "CreateFleet to launch an instance", |w| !w.m.instances(&w.name).is_empty());
    std::thread::sleep(Duration::from_millis(500));
    w.d.kill9();
    w.d.start();
    // The restart's reconcile adopts the instance (its node is known, its answer was lost): nothing bought twice.
    w.wait(90, "the job to finish after the restart", |w| w.job(id)["state"] == "succeeded");
    let all = w.m.instances(&w.name);
    assert_eq!(all.len(), 1, "exactly one instance was bought for the node: {all:?}");
    // An instance tagged for this cluster that no node owns (a launch the store never heard of) is an orphan.
    let marker: Value = serde_json::from_str(&std::fs::read_to_string(w.d.dir.join("store.json")).unwrap()).unwrap();
    let cluster = marker["cluster_id"].as_str().unwrap().to_string();
    let orphan = w.m.helper(&["orphan", &cluster, "999"]).trim().to_string();
    w.d.kill9();
    w.d.start();
    w.wait(60, "the restart's reconcile to terminate the orphan", |w| {
        w.m.instances(&w.name)
            .iter()
            .any(|i| i["id"] == orphan.as_str() && matches!(i["state"].as_str(), Some("shutting-down" | "terminated")))
    });
}

#[test]
fn no_capacity_for_one_instance_type_backs_off_that_offering_only_and_the_pool_falls_back_to_the_next() {
    let Some(w) = World::new("awsice", &["--ice", "p3.2xlarge"]).filter(|_| python_ok()) else { return };
    let id = w.submit(10);
    let node = w.running_on(id);
    let inst = w.fleet.instance_of(node).expect("instance seen");
    assert_eq!((inst["type"].as_str(), inst["lifecycle"].as_str()), (Some("p3.8xlarge"), Some("spot")), "{inst}");
    assert_eq!(inst["tags"]["spillway:pool"], "spot", "the same pool, the next offering: {inst}");
    let events = w.events();
    assert!(events.contains("no capacity for this offering") || events.contains("insufficient"), "{events}");
    assert!(w.fleet.seen().iter().all(|i| i["lifecycle"] == "spot"), "nothing went to on-demand: {:?}", w.fleet.seen());
    w.wait(60, "the job to finish", |w| w.job(id)["state"] == "succeeded");
}

#[test]
fn a_spot_pool_with_a_zone_launches_its_nodes_in_that_zone() {
    let Some(m) = moto() else { return };
    let subnets = default_subnets(&m);
    let ((sa, _), (sb, zb)) = (&subnets[0], &subnets[1]);
    let (spot, provider) = (format!("zone = \"{zb}\"\n"), format!("subnets = [\"{sa}\", \"{sb}\"]\n"));
    let Some(w) = World::placed("awszone", &[], &spot, &provider).filter(|_| python_ok()) else { return };
    let id = w.submit(3);
    let node = w.running_on(id);
    let inst = w.fleet.instance_of(node).expect("the node's instance was seen");
    assert_eq!(inst["zone"], zb.as_str(), "the spot pool's node runs in its zone: {inst}");
    w.wait(60, "the job to finish", |w| w.job(id)["state"] == "succeeded");
}

#[test]
fn a_daemon_whose_pool_cannot_launch_in_its_zone_or_region_refuses_to_start_naming_the_pool() {
    let Some(m) = moto() else { return };
    let subnets = default_subnets(&m);
    let ((sa, _), (_, zc)) = (&subnets[0], &subnets[2]);
    let name = format!("awsbadzone{}", std::process::id());
    let setup: Value = serde_json::from_str(&m.helper(&["setup", &name])).unwrap();
    let dir = std::env::temp_dir().join(&name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (pool_place, want) in
        [(format!("zone = \"{zc}\""), zc.as_str()), ("region = \"eu-west-1\"".to_string(), "eu-west-1")]
    {
        let config = format!(
            "[cluster]\nname = \"{name}\"\n\n[[instance_types]]\nname = \"p3.2xlarge\"\ngpus = 1\ngpu_model = \"V100\"\n\
             on_demand_usd_per_hour = 3.06\nspot_usd_per_hour = 0.92\n\n[[pools]]\nname = \"far\"\n\
             market = \"spot\"\ninstance_types = [\"p3.2xlarge\"]\nmax_nodes = 1\n{pool_place}\n\n[[pools]]\n\
             name = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"p3.2xlarge\"]\nmax_nodes = 1\n\n[provider]\n\
             kind = \"aws\"\nregion = \"us-east-1\"\nendpoint_url = \"{url}\"\nlaunch_template = \"{name}\"\n\
             image_id = \"{image}\"\nserver_url = \"http://127.0.0.1:1\"\nsubnets = [\"{sa}\"]\n",
            url = m.url,
            image = setup["image_id"].as_str().unwrap(),
        );
        let path = dir.join("c.toml");
        std::fs::write(&path, config).unwrap();
        let out = Command::new(BIN)
            .args(["server", "--config"])
            .arg(&path)
            .args(["--listen", &format!("127.0.0.1:{}", free_port()), "--data-dir"])
            .arg(dir.join("data"))
            .envs(aws_env())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "the daemon started with pool {pool_place}: {err}");
        assert!(err.contains("\"far\"") && err.contains(want), "the error names the pool and its place: {err}");
    }
}
