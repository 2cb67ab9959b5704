//! Spillway behind a real Slurm 22.05 (Debian's packages): slurmctld with two fixed nodes and four CLOUD nodes
//! `c[1-4]` (8 GPUs each) whose `ResumeProgram` and `SuspendProgram` are `spillway slurm resume|suspend`; the
//! local provider boots a cloud node by starting `slurmd -N <name>` (tests/slurm/cluster.sh sets it all up).
//!
//! Needs root and `slurmctld`/`slurmd`/`scontrol` (`.ci/run` installs them); without them the test skips with a
//! message, except under `SPILLWAY_REQUIRE_SHARED=1`, where it fails.
#![allow(clippy::disallowed_methods)]

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_spillway");

/// Returns whether Slurm can run here (root, and its daemons installed).
fn slurm_available() -> bool {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let installed = ["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/scontrol", "/usr/bin/sbatch"]
        .iter()
        .all(|p| Path::new(p).exists());
    if root && installed {
        return true;
    }
    if std::env::var("SPILLWAY_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("SPILLWAY_REQUIRE_SHARED=1 but Slurm cannot run here (root: {root}, installed: {installed})");
    }
    println!("skipping: the Slurm test needs root and Debian's slurmctld, slurmd and slurm-client (.ci/run has them)");
    false
}

/// The Slurm cluster of one test; stopped when dropped.
struct Slurm {
    base: PathBuf,
}

impl Slurm {
    fn start(base: &Path, url: &str, token_file: &Path) -> Slurm {
        let port = free_ports(8);
        let script = repo("crates/spillway/tests/slurm/cluster.sh");
        let out = Command::new("bash")
            .arg(&script)
            .args(["start", &base.display().to_string(), &port.to_string(), BIN, url])
            .arg(token_file)
            .output()
            .unwrap();
        let s = Slurm { base: base.to_path_buf() };
        assert!(out.status.success(), "cluster.sh: {}{}", String::from_utf8_lossy(&out.stderr), s.logs());
        s
    }

    /// Runs a Slurm client command against this cluster; returns its stdout.
    fn cmd(&self, program: &str, args: &[&str]) -> String {
        let out = Command::new(program).args(args).env("SLURM_CONF", self.base.join("slurm.conf")).output().unwrap();
        assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Submits a batch job; returns its id.
    fn sbatch(&self, args: &[&str], script: &str) -> u64 {
        let mut all = vec!["--parsable", "-o", "/dev/null"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--wrap", script]);
        self.cmd("sbatch", &all).trim().parse().unwrap()
    }

    /// Returns a job's (state, restarts).
    fn job(&self, id: u64) -> (String, u32) {
        let line = self.cmd("scontrol", &["-o", "show", "job", &id.to_string()]);
        let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)).unwrap_or_default().to_string();
        (field("JobState="), field("Restarts=").parse().unwrap_or(0))
    }

    /// Returns each node's state (`IDLE+CLOUD+POWERED_DOWN`).
    fn node_state(&self, name: &str) -> String {
        let line = self.cmd("scontrol", &["-o", "show", "node", name]);
        line.split_whitespace().find_map(|w| w.strip_prefix("State=")).unwrap_or_default().to_string()
    }

    fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.base.join("log").join(f)).unwrap_or_default();
        format!(
            "\n--- power.log\n{}\n--- slurmctld.log (tail)\n{}",
            read("power.log"),
            tail(&read("slurmctld.log"), 40)
        )
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let script = repo("crates/spillway/tests/slurm/cluster.sh");
        let _ = Command::new("bash").arg(script).arg("stop").arg(&self.base).status();
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Returns the first of `n` consecutive free TCP ports.
fn free_ports(n: u16) -> u16 {
    let mut base = 20_000 + (std::process::id() % 20_000) as u16;
    loop {
        if (base..base + n).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
        base += n;
    }
}

/// Waits until `f` holds, failing with `what` and the logs after `secs`.
fn wait(what: &str, secs: u64, d: &Daemon, s: &Slurm, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(secs), "timed out: {what}\n--- daemon log\n{}{}", d.log(), s.logs());
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The daemon's live nodes, as (Slurm name, market, instance type, id).
fn live(d: &Daemon) -> Vec<(String, String, String, u64)> {
    let nodes = d.get("/v1/nodes");
    let mut out = Vec::new();
    for n in nodes.as_array().unwrap() {
        if ["requested", "booting", "ready", "draining"].contains(&n["state"].as_str().unwrap_or_default()) {
            let s = |k: &str| n[k].as_str().unwrap_or_default().to_string();
            out.push((s("slurm_name"), s("market"), s("instance_type"), n["id"].as_u64().unwrap()));
        }
    }
    out
}

/// The node a job runs on, from the daemon's nodes (the one whose Slurm name squeue gives the job).
fn market_of(d: &Daemon, s: &Slurm, job: u64) -> String {
    let nodes = s.cmd("squeue", &["-h", "-j", &job.to_string(), "-o", "%N"]);
    let name = nodes.trim().to_string();
    live(d).into_iter().find(|n| n.0 == name).map(|n| n.1).unwrap_or_default()
}

/// Pids of slurmd processes of the cloud nodes still running.
fn cloud_slurmds(base: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = stat.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z'));
        if !zombie && cmd.contains("slurmd") && cmd.contains(" -N c") && cmd.contains(&base.display().to_string()) {
            out.push(cmd);
        }
    }
    out
}

/// Returns how many zombie processes named `comm` there are.
fn zombies(comm: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let named = stat.split_once('(').and_then(|(_, r)| r.rsplit_once(')')).is_some_and(|(c, _)| c == comm);
        if named && stat.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z')) {
            n += 1;
        }
    }
    n
}

/// Pids of live processes named `comm`.
fn named(comm: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let c = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = stat.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z'));
        if c.trim() == comm && !zombie {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

fn config(base: &Path) -> String {
    format!(
        r#"
[cluster]
name = "slurmtest"

[[teams]]
name = "research"

[[instance_types]]
name = "h100x8"
gpus = 8
gpu_model = "h100"
on_demand_usd_per_hour = 98.32
spot_usd_per_hour = 39.33

[[instance_types]]
name = "h100x8-premium"
gpus = 8
gpu_model = "h100"
on_demand_usd_per_hour = 120.0
spot_usd_per_hour = 55.0

[[pools]]
name = "slurm-spot"
market = "spot"
instance_types = ["h100x8-premium", "h100x8"]
max_nodes = 4
boot_latency_s = 1
scheduler = "slurm"

[[pools]]
name = "slurm-od"
market = "on_demand"
instance_types = ["h100x8-premium", "h100x8"]
max_nodes = 4
boot_latency_s = 1
scheduler = "slurm"

[slurm]
conf = "{conf}"
slurmd = "/usr/sbin/slurmd"
team = "research"
sync_every_s = 1
nodes = [{{ names = "c[1-4]", pools = ["slurm-spot", "slurm-od"], gpus = 8, gpu_model = "h100" }}]
partitions = [
  {{ name = "cloud-p0", tier = "p0", team = "research" }},
  {{ name = "cloud-p1", tier = "p1", team = "research" }},
  {{ name = "cloud-p2", tier = "p2" }},
]
"#,
        conf = base.join("slurm.conf").display()
    )
}

/// A training step loop that checkpoints each step and resumes from its checkpoint when Slurm requeues it.
fn training(base: &Path, steps: u32) -> String {
    let ck = base.join("ckpt-$SLURM_JOB_ID").display().to_string();
    let runs = base.join("runs-$SLURM_JOB_ID").display().to_string();
    let steps_log = base.join("steps-$SLURM_JOB_ID").display().to_string();
    format!(
        "n=$(cat {ck} 2>/dev/null || echo 0); echo \"restart=${{SLURM_RESTART_COUNT:-0}} from=$n nodes=$SLURM_JOB_NODELIST\" >> {runs}; \
         while [ $n -lt {steps} ]; do sleep 1; n=$((n+1)); echo $n > {ck}; echo \"$n ${{SLURM_RESTART_COUNT:-0}}\" >> {steps_log}; done"
    )
}

#[test]
fn a_slurm_burst_survives_an_interruption_restarts_and_lost_calls() {
    if !slurm_available() {
        return;
    }
    let base = std::env::temp_dir().join(format!("spillway-slurm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let mut d = Daemon::unstarted("slurm", &config(&base));
    // The daemon checks that slurm.conf exists; cluster.sh writes it once the daemon's URL is known.
    std::fs::write(base.join("slurm.conf"), "").unwrap();
    d.start();
    let token = base.join("admin.token");
    std::fs::write(&token, d.admin()).unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let url = format!("http://127.0.0.1:{}", d.port);
    let s = Slurm::start(&base, &url, &token);

    // A 2-node p1 job: two nodes of the cheapest offering p1 may use (spot, the cheaper type). By its own record,
    // not by JobState: sbatch starts the script once the batch host is up, and the job may read CONFIGURING until
    // slurmctld's 30 s periodic check sees every node of it booted (a short run can end without ever reading
    // RUNNING).
    let job = s.sbatch(&["-p", "cloud-p1", "-N2", "--gres=gpu:h100:8", "--requeue"], &training(&base, 30));
    let read = |name: &str| std::fs::read_to_string(base.join(format!("{name}-{job}"))).unwrap_or_default();
    let runs = || read("runs").lines().count();
    let ckpt = || read("ckpt").trim().parse::<u32>().unwrap_or(0);
    wait("the 2-node p1 job runs", 120, &d, &s, || runs() == 1);
    let first = live(&d);
    assert_eq!(first.len(), 2, "{first:?}");
    for (name, market, it, _) in &first {
        assert!(name.starts_with('c'), "{first:?}");
        assert_eq!((market.as_str(), it.as_str()), ("spot", "h100x8"), "{first:?}");
    }
    wait("a few steps are checkpointed", 30, &d, &s, || ckpt() >= 3);

    // A spot interruption of one node: Slurm requeues the job at once, and it resumes on a replacement.
    let victim = first[1].clone();
    d.post(&format!("/v1/nodes/{}/interrupt", victim.3), serde_json::json!({}));
    wait("Slurm requeues the job", 30, &d, &s, || s.job(job).1 >= 1);
    // The first run ends with the requeue: a node that is still up must not go on training beside the rerun.
    let first_run = || read("steps").lines().filter(|l| l.ends_with(" 0")).count();
    let at_requeue = first_run();
    std::thread::sleep(Duration::from_secs(3));
    assert!(first_run() <= at_requeue + 1, "the first run went on after its requeue:\n{}{}", d.log(), s.logs());
    wait("the requeued job runs again", 150, &d, &s, || {
        runs() == 2 && matches!(s.job(job), (state, 1) if state == "RUNNING" || state == "CONFIGURING")
    });
    // The daemon dies mid-burst and comes back: the job goes on, on the nodes it adopted.
    d.kill9();
    d.start();
    wait("the job completes", 120, &d, &s, || s.job(job).0 == "COMPLETED");
    // Its finished job steps are reaped on the nodes it ran on (a node's init reaps what slurmd orphans).
    wait("no zombie job step is left", 20, &d, &s, || zombies("slurmstepd") == 0);
    let runs = read("runs");
    let lines: Vec<&str> = runs.lines().collect();
    assert_eq!(lines.len(), 2, "{runs}");
    assert!(lines[0].starts_with("restart=0 from=0"), "{runs}");
    assert!(lines[1].starts_with("restart=1 from=") && !lines[1].starts_with("restart=1 from=0 "), "{runs}");
    let nodes = d.get("/v1/nodes");
    let victim_state = nodes.as_array().unwrap().iter().find(|n| n["id"] == victim.3).unwrap()["state"].clone();
    assert_eq!(victim_state, "interrupted", "the interrupted node is gone, and says why");

    // The daemon is down while Slurm suspends the idle nodes and resumes one for a p0 job: the restarted
    // daemon releases the suspended ones and launches the resumed one (on-demand: p0 never runs on spot).
    d.kill9();
    let used: Vec<String> = live_names_from_log(&d);
    wait("Slurm powers the idle nodes down", 90, &d, &s, || {
        used.iter().all(|n| s.node_state(n).contains("POWERED_DOWN"))
    });
    assert!(!cloud_slurmds(&base).is_empty(), "the suspended nodes still run: nobody heard the suspend");
    let p0 = s.sbatch(&["-p", "cloud-p0", "-N1", "--gres=gpu:h100:8"], "sleep 20");
    let power = || std::fs::read_to_string(base.join("log/power.log")).unwrap_or_default();
    let missed = |log: &str| log.lines().filter(|l| l.contains("resume c") && l.contains("cannot reach")).count();
    wait("Slurm's resume for the p0 job finds no daemon", 30, &d, &s, || missed(&power()) > 0);
    assert_eq!(s.job(p0).0, "CONFIGURING", "the p0 job waits for its node");
    d.start();
    wait("the p0 job runs", 120, &d, &s, || s.job(p0).0 == "RUNNING");
    assert_eq!(market_of(&d, &s, p0), "on_demand", "a p0 job is never on spot");
    wait("the suspended nodes are released", 30, &d, &s, || live(&d).len() == 1);
    assert!(!d.log().contains("node lost"), "no node was taken for lost through the restart:\n{}", d.log());

    // A p2 job runs on spot. While it runs, bad input from Slurm's side changes nothing.
    let p2 = s.sbatch(&["-p", "cloud-p2", "-N1", "--gres=gpu:h100:8"], "sleep 25");
    wait("the p2 job runs", 120, &d, &s, || s.job(p2).0 == "RUNNING");
    assert_eq!(market_of(&d, &s, p2), "spot");
    let before = live(&d);
    let p2_node = s.cmd("squeue", &["-h", "-j", &p2.to_string(), "-o", "%N"]).trim().to_string();
    for (verb, hosts, says) in [
        ("resume", "c[1-", "`[` without `]`"),
        ("resume", "c1,nosuch7", "not in any [[slurm.nodes]] set: nosuch7"),
        ("resume", p2_node.as_str(), "already up"),
        ("suspend", "c[1-2]x]", "`]` without `[`"),
    ] {
        let out = Command::new(BIN)
            .args(["slurm", verb, hosts, "--server", &url, "--token-file"])
            .arg(&token)
            .arg("--log")
            .arg(base.join("log/power.log"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{verb} {hosts}: {err}");
        assert_eq!(live(&d), before, "{verb} {hosts} changed nothing");
    }
    let log = std::fs::read_to_string(base.join("log/power.log")).unwrap();
    assert!(log.contains("resume c[1-: refused") && log.contains("already up"), "{log}");

    // A suspend that Slurm did not ask for, while the p2 job runs there: the machine goes with its job steps,
    // and the node Slurm still has up with nothing behind it goes back to Slurm.
    // Slurm requeues the job when the node comes back, and may start it at once on another idle node, so
    // what must die is the step processes that ran when the machine went, not every step.
    let steps = named("slurmstepd");
    assert!(!steps.is_empty(), "the p2 job's step runs");
    let out = Command::new(BIN)
        .args(["slurm", "suspend", &p2_node, "--server", &url, "--token-file"])
        .arg(&token)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait("the job step dies with its machine", 20, &d, &s, || {
        let now = named("slurmstepd");
        steps.iter().all(|pid| !now.contains(pid))
    });
    wait("Slurm gets the node back", 90, &d, &s, || s.node_state(&p2_node).contains("POWER"));
    assert!(d.log().contains(&format!("{p2_node} is up in Slurm with no machine behind it")), "{}", d.log());
    s.cmd("scancel", &[&p2.to_string()]);

    // After the idle time every node is suspended and gone; the cost report has the node-time by market.
    wait("every cloud node is released", 150, &d, &s, || live(&d).is_empty());
    wait("no cloud slurmd is left", 20, &d, &s, || cloud_slurmds(&base).is_empty());
    wait("no job step outlives its node", 20, &d, &s, || named("slurmstepd").is_empty());
    let cost = d.get("/v1/cost");
    let hours = |m: &str| cost["node_hours_by_market"][m].as_f64().unwrap_or(0.0);
    assert!(hours("spot") > 0.0 && hours("on_demand") > 0.0, "{cost}");
    for tier in ["p0", "p1", "p2"] {
        assert!(cost["by_tier"][tier].as_f64().unwrap_or(0.0) > 0.0, "tier {tier} billed: {cost}");
    }
    assert!(cost["by_team"]["research"].as_f64().unwrap_or(0.0) > 0.0, "{cost}");
    let events: Value = d.get("/v1/events?limit=1000");
    let text = events.to_string();
    assert!(text.contains("scheduler_request") && text.contains("scheduler_release"), "{text}");
    drop(s);
    let _ = std::fs::remove_dir_all(&base);
}

/// The Slurm names of nodes the daemon launched so far (from its log: `slurm resume cN: node M`).
fn live_names_from_log(d: &Daemon) -> Vec<String> {
    let mut names: Vec<String> = d
        .log()
        .lines()
        .filter_map(|l| l.strip_prefix("spillway: slurm resume "))
        .filter_map(|l| l.split(':').next())
        .map(String::from)
        .collect();
    names.sort();
    names.dedup();
    names
}
