//! The local provider against the conformance suite, plus the process-management cases the suite cannot see:
//! SIGKILL after the grace, the session backstop, dead records and the PID-reuse guard. Every test checks that
//! no process it started is left running.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

use spillway_providers::{
    Instance, LaunchSpec, LocalOptions, LocalProvider, Provider, ProviderError, check_capacity, run_conformance,
};

/// An agent that exits on SIGTERM and otherwise idles; extra args become positional parameters.
const AGENT: &str = "trap 'exit 0' TERM; while :; do sleep 0.2; done";

/// A fresh directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("spillway-providers-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn provider(dir: &Path, script: &str, capacity: &[(&str, u32)], grace_ms: u64) -> LocalProvider {
    let command = ["/bin/sh", "-c", script, "agent"].map(String::from).to_vec();
    let mut opts = LocalOptions::new(dir, command, "http://127.0.0.1:1");
    opts.capacity = capacity.iter().map(|&(t, n)| (t.to_string(), n)).collect::<BTreeMap<_, _>>();
    opts.terminate_grace = Duration::from_millis(grace_ms);
    LocalProvider::new(opts).unwrap()
}

fn spec(cluster: &str, node: u32, instance_type: &str) -> LaunchSpec {
    LaunchSpec {
        cluster: cluster.to_string(),
        node,
        pool: "gpu".to_string(),
        instance_type: instance_type.to_string(),
        gpus: 2,
        spot: node.is_multiple_of(2),
        token: format!("tok-{node}"),
        boot_delay_s: 1.5,
        slurm_node: None,
        zone: None,
    }
}

/// (state, pgid, session) of `pid` from `/proc/<pid>/stat`, `None` if it does not exist.
fn proc_stat(pid: i32) -> Option<(char, i32, i32)> {
    let line = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = line[line.rfind(')')? + 1..].split_whitespace().collect();
    Some((f[0].chars().next()?, f[2].parse().ok()?, f[3].parse().ok()?))
}

/// Whether `pid` still runs: `kill(pid, 0)` succeeds and it is not a zombie. Zombies count as gone: orphaned
/// grandchildren are reparented to PID 1, and some container inits never reap them.
fn running(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence.
    let exists = unsafe { libc::kill(pid, 0) == 0 };
    exists && proc_stat(pid).is_some_and(|(state, _, _)| state != 'Z')
}

/// Running processes whose session id is `sid` (an agent and everything it started).
fn session_of(sid: i32) -> Vec<i32> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| proc_stat(pid).is_some_and(|(state, _, sid2)| sid2 == sid && state != 'Z'))
        .collect()
}

/// Panics unless none of `agents` nor anything in their sessions runs (allowing a moment for reaping).
fn assert_no_leftovers(agents: &[i32]) {
    for _ in 0..100 {
        if agents.iter().all(|&pid| !running(pid) && session_of(pid).is_empty()) {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<(i32, bool, Vec<i32>)> = agents.iter().map(|&p| (p, running(p), session_of(p))).collect();
    panic!("processes left running (agent, agent running, session members): {left:?}");
}

/// SIGKILLs the given processes and their sessions when dropped, so a failing test leaves nothing behind
/// either (on success they are already gone and this does nothing).
#[derive(Default)]
struct KillOnDrop(Mutex<Vec<i32>>);

impl KillOnDrop {
    fn add(&self, pid: i32) {
        self.0.lock().unwrap().push(pid);
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let pids = self.0.lock().map(|p| p.clone()).unwrap_or_default();
        for pid in pids {
            for member in session_of(pid).into_iter().chain([pid]).filter(|&p| p > 1 && running(p)) {
                // SAFETY: kill(2) has no memory-safety preconditions; these are processes this test started.
                unsafe { libc::kill(member, libc::SIGKILL) };
            }
        }
    }
}

/// The agent pid in the record of `id`.
fn record_pid(dir: &Path, id: &str) -> i32 {
    let text = fs::read_to_string(dir.join("instances").join(format!("{id}.json"))).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["pid"].as_i64().unwrap() as i32
}

/// A provider wrapper that remembers the pid of every agent launched, for the leftover check.
struct Recording {
    inner: LocalProvider,
    dir: PathBuf,
    pids: KillOnDrop,
}

impl Provider for Recording {
    fn launch(&self, spec: &LaunchSpec) -> Result<Instance, ProviderError> {
        let instance = self.inner.launch(spec)?;
        self.pids.add(record_pid(&self.dir, &instance.id));
        Ok(instance)
    }
    fn terminate(&self, id: &str) -> Result<(), ProviderError> {
        self.inner.terminate(id)
    }
    fn list(&self, cluster: &str) -> Result<Vec<Instance>, ProviderError> {
        self.inner.list(cluster)
    }
    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

#[test]
fn local_provider_conforms() {
    let tmp = TempDir::new("conf");
    let p = Recording { inner: provider(&tmp.0, AGENT, &[], 2000), dir: tmp.0.clone(), pids: KillOnDrop::default() };
    run_conformance(&p, "conf", |node| spec("conf", node, "gpu-small"));
    assert_eq!(p.name(), "local");
    let pids = p.pids.0.lock().unwrap().clone();
    assert!(pids.len() >= 3, "expected at least 3 agents, got {pids:?}");
    assert_no_leftovers(&pids);
}

#[test]
fn local_provider_enforces_capacity_per_type() {
    let tmp = TempDir::new("cap");
    let p = Recording {
        inner: provider(&tmp.0, AGENT, &[("gpu-small", 2)], 2000),
        dir: tmp.0.clone(),
        pids: KillOnDrop::default(),
    };
    // Another cluster's instance of another type neither counts nor is blocked.
    let other = p.launch(&spec("other", 1, "gpu-large")).unwrap();
    check_capacity(&p, "cap", |node| spec("cap", node, "gpu-small"), 2);
    p.terminate(&other.id).unwrap();
    assert_no_leftovers(&p.pids.0.lock().unwrap().clone());
}

#[test]
fn agent_gets_its_arguments_and_a_log() {
    let tmp = TempDir::new("args");
    let script = format!("read -r token; echo \"args: $* token: $token\"; {AGENT}");
    let p = provider(&tmp.0, &script, &[], 2000);
    let instance = p.launch(&spec("args", 7, "gpu-small")).unwrap();
    assert_eq!(instance.id, "local-args-7");
    let pid = record_pid(&tmp.0, &instance.id);
    let guard = KillOnDrop::default();
    guard.add(pid);
    let (_, pgid, sid) = proc_stat(pid).unwrap();
    assert_eq!((pgid, sid), (pid, pid), "the agent must lead its own session and group");
    let log = tmp.0.join("agents/node-7.log");
    let expected = format!(
        "args: --server http://127.0.0.1:1 --node 7 --gpus 2 --data-dir {} --boot-delay-s 1.5 --token-stdin token: tok-7",
        tmp.0.join("agents/node-7").display()
    );
    let mut text = String::new();
    for _ in 0..100 {
        text = fs::read_to_string(&log).unwrap_or_default();
        if text.contains("args:") {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(text.trim(), expected);
    p.terminate(&instance.id).unwrap();
    assert_no_leftovers(&[pid]);
}

/// Waits up to 2 s for `path` to contain `needle`; returns its text.
fn wait_for_text(path: &Path, needle: &str) -> String {
    let mut text = String::new();
    for _ in 0..100 {
        text = fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    text
}

#[test]
fn token_reaches_the_agent_on_stdin_only() {
    let tmp = TempDir::new("token");
    // The agent reads its token, then stays up so its /proc entries can be inspected.
    let script = format!("read -r token; echo \"got $token\"; {AGENT}");
    let p = provider(&tmp.0, &script, &[], 2000);
    let mut s = spec("token", 3, "gpu-small");
    s.token = "secret-node-token-3f9a".into();
    let instance = p.launch(&s).unwrap();
    let pid = record_pid(&tmp.0, &instance.id);
    let guard = KillOnDrop::default();
    guard.add(pid);
    let log = wait_for_text(&tmp.0.join("agents/node-3.log"), "got ");
    assert_eq!(log.trim(), "got secret-node-token-3f9a", "the token arrives on stdin");
    let environ = fs::read(format!("/proc/{pid}/environ")).unwrap();
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let has = |hay: &[u8]| hay.windows(s.token.len()).any(|w| w == s.token.as_bytes());
    assert!(!has(&environ), "the token is in the agent's environment");
    assert!(!has(&cmdline), "the token is on the agent's command line");
    assert!(String::from_utf8_lossy(&cmdline).contains("--token-stdin"));
    p.terminate(&instance.id).unwrap();
    assert_no_leftovers(&[pid]);
}

/// Whether this test process is root.
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn run_as_is_passed_to_the_agent_and_needs_root() {
    let tmp = TempDir::new("runas");
    let command = ["/bin/sh", "-c", &format!("echo \"args: $*\"; {AGENT}"), "agent"].map(String::from).to_vec();
    let mut opts = LocalOptions::new(&tmp.0, command, "http://127.0.0.1:1");
    opts.run_as = Some("nobody".into());
    if !root() {
        let err = LocalProvider::new(opts).err().expect("run_as refused without root").to_string();
        assert!(err.contains("root"), "{err}");
        println!("run_as_is_passed_to_the_agent_and_needs_root: not root, checked the refusal only");
        return;
    }
    let p = LocalProvider::new(opts).unwrap();
    let instance = p.launch(&spec("runas", 2, "gpu-small")).unwrap();
    let pid = record_pid(&tmp.0, &instance.id);
    let guard = KillOnDrop::default();
    guard.add(pid);
    let log = wait_for_text(&tmp.0.join("agents/node-2.log"), "args:");
    assert!(log.trim().ends_with("--token-stdin --run-as nobody"), "{log}");
    p.terminate(&instance.id).unwrap();
    assert_no_leftovers(&[pid]);
}

/// Every path under `dir` (not `dir` itself), depth first.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if fs::symlink_metadata(&path).unwrap().is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

#[test]
fn everything_under_the_data_dir_is_private() {
    use std::os::unix::fs::MetadataExt;
    // The usual umask: without explicit modes, directories would be 0755 and files 0644.
    // SAFETY: umask has no memory-safety preconditions.
    unsafe { libc::umask(0o022) };
    let tmp = TempDir::new("modes");
    let data = tmp.0.join("data");
    let p = provider(&data, &format!("echo started; {AGENT}"), &[], 2000);
    let instance = p.launch(&spec("modes", 1, "gpu-small")).unwrap();
    let pid = record_pid(&data, &instance.id);
    let guard = KillOnDrop::default();
    guard.add(pid);
    wait_for_text(&data.join("agents/node-1.log"), "started");
    let mut paths = walk(&data);
    paths.push(data.clone());
    for want in ["instances", "instances/local-modes-1.json", "agents", "agents/node-1", "agents/node-1.log"] {
        assert!(paths.contains(&data.join(want)), "missing {want} in {paths:?}");
    }
    assert!(paths.contains(&data.join("instances.lock")));
    for path in &paths {
        let meta = fs::symlink_metadata(path).unwrap();
        let want = if meta.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(meta.mode() & 0o7777, want, "{} is {:o}", path.display(), meta.mode() & 0o7777);
    }
    p.terminate(&instance.id).unwrap();
    assert_no_leftovers(&[pid]);
}

#[test]
#[allow(clippy::disallowed_methods)] // measuring the grace needs a clock; the ban is for the functional core
fn agent_ignoring_sigterm_is_killed_after_the_grace() {
    let tmp = TempDir::new("stubborn");
    let p = provider(&tmp.0, "trap '' TERM; echo trapped; while :; do sleep 0.2; done", &[], 300);
    let instance = p.launch(&spec("stubborn", 1, "gpu-small")).unwrap();
    let pid = record_pid(&tmp.0, &instance.id);
    let guard = KillOnDrop::default();
    guard.add(pid);
    // Terminate only once the trap is in place: a SIGTERM that lands before it kills the shell at once.
    let log = tmp.0.join("agents/node-1.log");
    for _ in 0..250 {
        if fs::read_to_string(&log).unwrap_or_default().contains("trapped") {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let started = std::time::Instant::now();
    p.terminate(&instance.id).unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "SIGKILL came before the grace ended: {took:?}");
    assert!(took < Duration::from_secs(5), "terminate took too long: {took:?}");
    assert!(p.list("stubborn").unwrap().is_empty());
    assert_no_leftovers(&[pid]);
}

#[test]
fn terminate_kills_grandchildren_in_the_agent_session() {
    let tmp = TempDir::new("grandchild");
    let pids = tmp.0.join("gc");
    // A grandchild that ignores SIGTERM (so only the session backstop can stop it); with perl available,
    // also one in its own process group, as the agent's jobs are.
    let own_group = if Path::new("/usr/bin/perl").exists() {
        "/usr/bin/perl -e 'setpgrp(0,0); $SIG{TERM}=\"IGNORE\"; sleep 1000' & echo $! >> \"$GC\";"
    } else {
        ""
    };
    let script =
        format!("GC={}; (trap '' TERM; exec sleep 1000) & echo $! >> \"$GC\"; {own_group} {AGENT}", pids.display());
    let p = provider(&tmp.0, &script, &[], 2000);
    let instance = p.launch(&spec("gc", 1, "gpu-small")).unwrap();
    let agent = record_pid(&tmp.0, &instance.id);
    let guard = KillOnDrop::default();
    guard.add(agent);
    let want = if own_group.is_empty() { 1 } else { 2 };
    let mut grandchildren = Vec::new();
    for _ in 0..200 {
        grandchildren = fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse::<i32>().ok())
            .collect();
        // Wait until each has set itself up (perl's setpgrp), so the test sees the real layout.
        let settled = grandchildren.len() == want
            && (own_group.is_empty() || proc_stat(grandchildren[1]).is_some_and(|(_, pg, _)| pg != agent));
        if settled {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    grandchildren.iter().for_each(|&gc| guard.add(gc));
    assert_eq!(grandchildren.len(), want, "grandchildren did not start: {grandchildren:?}");
    for &gc in &grandchildren {
        assert!(running(gc));
        assert_eq!(proc_stat(gc).unwrap().2, agent, "grandchild {gc} must be in the agent's session");
    }
    p.terminate(&instance.id).unwrap();
    for &gc in &grandchildren {
        assert!(!running(gc), "grandchild {gc} survived terminate");
    }
    assert_no_leftovers(&[agent]);
}

/// Writes a record for `pid` with start time `start_time` as the provider would.
fn write_record(dir: &Path, id: &str, node: u32, pid: i32, start_time: u64) {
    let record = serde_json::json!({
        "id": id, "cluster": "manual", "node": node, "pool": "gpu", "instance_type": "gpu-small",
        "gpus": 1, "spot": false, "pid": pid, "start_time": start_time,
    });
    fs::write(dir.join("instances").join(format!("{id}.json")), record.to_string()).unwrap();
}

fn start_time(pid: i32) -> u64 {
    let line = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    line[line.rfind(')').unwrap() + 1..].split_whitespace().nth(19).unwrap().parse().unwrap()
}

#[test]
fn list_drops_records_of_dead_agents() {
    let tmp = TempDir::new("dead");
    let p = provider(&tmp.0, AGENT, &[], 2000);
    let mut child = Command::new("/bin/true").spawn().unwrap();
    let pid = child.id() as i32;
    let start = start_time(pid);
    child.wait().unwrap();
    write_record(&tmp.0, "local-manual-1", 1, pid, start);
    write_record(&tmp.0, "local-manual-2", 2, pid, start);
    assert!(p.list("manual").unwrap().is_empty());
    assert!(!tmp.0.join("instances/local-manual-1.json").exists(), "dead record was not deleted");
    assert!(!tmp.0.join("instances/local-manual-2.json").exists(), "dead record was not deleted");
    write_record(&tmp.0, "local-manual-1", 1, pid, start);
    assert_eq!(p.terminate("local-manual-1"), Err(ProviderError::NotFound("local-manual-1".into())));
    assert!(!tmp.0.join("instances/local-manual-1.json").exists(), "dead record was not deleted");
}

#[test]
fn pid_reuse_guard_never_lists_or_signals_a_stranger() {
    let tmp = TempDir::new("reuse");
    let p = provider(&tmp.0, AGENT, &[], 200);
    // A live process standing in for whoever got the dead agent's pid.
    let mut stranger = Command::new("/bin/sleep").arg("30").spawn().unwrap();
    let pid = stranger.id() as i32;
    let guard = KillOnDrop::default();
    guard.add(pid);
    let wrong = start_time(pid) + 1;
    write_record(&tmp.0, "local-manual-1", 1, pid, wrong);
    assert_eq!(p.terminate("local-manual-1"), Err(ProviderError::NotFound("local-manual-1".into())));
    assert!(running(pid), "terminate signalled a process whose start time does not match");
    write_record(&tmp.0, "local-manual-1", 1, pid, wrong);
    assert!(p.list("manual").unwrap().is_empty(), "a reused pid was listed as the agent");
    assert!(!tmp.0.join("instances/local-manual-1.json").exists(), "stale record was not deleted");
    assert!(running(pid), "list signalled a process whose start time does not match");
    stranger.kill().unwrap();
    stranger.wait().unwrap();
    assert!(!running(pid));
}

#[test]
fn agents_outlive_the_provider_and_are_found_again() {
    let tmp = TempDir::new("restart");
    let first = provider(&tmp.0, AGENT, &[], 2000);
    let instance = first.launch(&spec("restart", 4, "gpu-small")).unwrap();
    let pid = record_pid(&tmp.0, &instance.id);
    let guard = KillOnDrop::default();
    guard.add(pid);
    drop(first);
    let second = provider(&tmp.0, AGENT, &[], 2000);
    assert_eq!(second.list("restart").unwrap(), vec![instance.clone()]);
    assert_eq!(second.launch(&spec("restart", 4, "gpu-small")).unwrap(), instance, "relaunch must be idempotent");
    assert_eq!(record_pid(&tmp.0, &instance.id), pid, "relaunch must not start a second agent");
    second.terminate(&instance.id).unwrap();
    assert_no_leftovers(&[pid]);
}

#[test]
fn spawn_failure_is_transient_and_leaves_no_record() {
    let tmp = TempDir::new("nospawn");
    let opts = LocalOptions::new(&tmp.0, vec!["/nonexistent/spillway".into(), "agent".into()], "http://x");
    let p = LocalProvider::new(opts).unwrap();
    match p.launch(&spec("nospawn", 1, "gpu-small")) {
        Err(ProviderError::Transient(msg)) => assert!(msg.contains("/nonexistent/spillway"), "{msg}"),
        other => panic!("expected Transient, got {other:?}"),
    }
    assert!(p.list("nospawn").unwrap().is_empty());
    assert!(LocalProvider::new(LocalOptions::new(&tmp.0, vec![], "http://x")).is_err(), "empty command accepted");
}
