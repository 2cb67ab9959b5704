//! The local provider: each node is a `spillway agent` process on this machine, started in its own session so
//! it survives the daemon (even `kill -9`), and recorded on disk so a restarted daemon finds it again. Everything
//! it writes is private to the daemon's user: directories 0700, files 0600, created with those modes.

use std::collections::BTreeMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use crate::procfs;
use crate::records::{Record, Store};
use crate::{Instance, LaunchSpec, Provider, ProviderError};

/// How long to wait for an agent and its session to die after SIGKILL before giving up.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// Configuration of a [`LocalProvider`].
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Instance records live in `data_dir/instances`, agent logs and data in `data_dir/agents`.
    pub data_dir: PathBuf,
    /// Program and leading args, e.g. `["/path/to/spillway", "agent"]`.
    pub command: Vec<String>,
    /// Passed to the agent as `--server`.
    pub server_url: String,
    /// Most live instances per instance type, across all clusters of this data dir (absent: unlimited).
    pub capacity: BTreeMap<String, u32>,
    /// On terminate: SIGTERM, wait this long, then SIGKILL.
    pub terminate_grace: Duration,
    /// Run jobs as this Unix user: passed to agents as `--run-as`. Needs the daemon (and so its agents) to run
    /// as root; [`LocalProvider::new`] refuses it otherwise.
    pub run_as: Option<String>,
    /// For nodes Slurm asked for: the `slurmd` to run and the `slurm.conf` it reads (absent: its default).
    pub slurmd: Option<(PathBuf, Option<PathBuf>)>,
}

impl LocalOptions {
    /// Options with unlimited capacity, the default 5 s terminate grace, and jobs run as the daemon's user.
    pub fn new(data_dir: impl Into<PathBuf>, command: Vec<String>, server_url: impl Into<String>) -> Self {
        LocalOptions {
            data_dir: data_dir.into(),
            command,
            server_url: server_url.into(),
            capacity: BTreeMap::new(),
            terminate_grace: Duration::from_secs(5),
            run_as: None,
            slurmd: None,
        }
    }
}

/// Runs nodes as local agent processes. Safe to share between threads and between daemons using the same data
/// dir: record changes are serialized by a mutex plus an `flock` on `data_dir/instances.lock`.
pub struct LocalProvider {
    opts: LocalOptions,
    store: Store,
    lock: Mutex<File>,
}

/// Holds the provider's lock (thread mutex + file lock); releases both when dropped, also on panic.
struct Locked<'a> {
    _guard: MutexGuard<'a, File>,
    fd: i32,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: fd belongs to the File the mutex guard keeps alive.
        unsafe { libc::flock(self.fd, libc::LOCK_UN) };
    }
}

/// The instance id of (`cluster`, `node`); unique because the node (a number) is after the last `-`.
fn instance_id(cluster: &str, node: u32) -> String {
    format!("local-{cluster}-{node}")
}

/// Creates `dir` and its missing parents with mode 0700 (fine if it exists).
fn create_private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Opens (creating with mode 0600) `path` for appending.
fn open_private_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).mode(0o600).open(path)
}

/// Refuses `run_as` unless the daemon's effective uid `euid` is root: its agents could not switch users, and
/// each would fail at start instead of this one clear error.
fn check_run_as(run_as: Option<&str>, euid: u32) -> io::Result<()> {
    match run_as {
        Some(user) if euid != 0 => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("local provider: run_as {user:?} needs the daemon to run as root (it runs as uid {euid})"),
        )),
        _ => Ok(()),
    }
}

/// Writes the node token and a newline to the agent's stdin and closes it: the token never appears in the
/// agent's command line or environment, which its jobs could read (`/proc/<pid>/cmdline`, `environ`).
fn send_token(stdin: Option<ChildStdin>, token: &str) -> io::Result<()> {
    let mut stdin = stdin.ok_or_else(|| io::Error::other("the agent has no stdin pipe"))?;
    // One short write into an empty pipe: it cannot block on an agent that has not read yet.
    stdin.write_all(format!("{token}\n").as_bytes())
}

impl LocalProvider {
    /// Creates the provider, its directories (0700) and its lock file (0600). Fails if `command` is empty, if
    /// `run_as` is set but the daemon is not root, or if the data dir cannot be set up.
    pub fn new(mut opts: LocalOptions) -> io::Result<Self> {
        if opts.command.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "local provider: command is empty"));
        }
        // SAFETY: geteuid has no preconditions.
        check_run_as(opts.run_as.as_deref(), unsafe { libc::geteuid() })?;
        // Absolute, because agents get paths inside it and the daemon may change directory.
        opts.data_dir = std::path::absolute(&opts.data_dir)?;
        let instances = opts.data_dir.join("instances");
        create_private_dir(&instances)?;
        create_private_dir(&opts.data_dir.join("agents"))?;
        let lock_path = opts.data_dir.join("instances.lock");
        let lock =
            OpenOptions::new().create(true).truncate(false).read(true).write(true).mode(0o600).open(&lock_path)?;
        Ok(LocalProvider { opts, store: Store::new(instances), lock: Mutex::new(lock) })
    }

    /// Takes the provider's lock: the mutex for threads of this process, `flock` for other daemons.
    fn lock(&self) -> Result<Locked<'_>, ProviderError> {
        // A panic while holding the lock leaves nothing half-done in memory (the state is on disk), so a
        // poisoned mutex is still usable.
        let guard = self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let fd = guard.as_raw_fd();
        loop {
            // SAFETY: fd is an open file kept alive by the guard.
            if unsafe { libc::flock(fd, libc::LOCK_EX) } == 0 {
                return Ok(Locked { _guard: guard, fd });
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                let path = self.opts.data_dir.join("instances.lock");
                return Err(ProviderError::Transient(format!("lock {}: {err}", path.display())));
            }
        }
    }

    /// The records whose agents still run; deletes the others (call with the lock held). A dead agent's
    /// leftover jobs are SIGKILLed first: once its record is gone nothing could ever stop them.
    fn live_records(&self) -> Result<Vec<Record>, ProviderError> {
        let mut live = Vec::new();
        for record in self.store.all()? {
            if procfs::is_live(record.pid, record.start_time) {
                live.push(record);
            } else {
                procfs::kill_session(record.pid, record.start_time, Duration::ZERO);
                self.store.remove(&record.instance.id)?;
            }
        }
        Ok(live)
    }

    /// The agent's data directory for `node`.
    fn agent_dir(&self, node: u32) -> PathBuf {
        self.opts.data_dir.join("agents").join(format!("node-{node}"))
    }

    /// The agent command line for `spec`. No token: the agent reads it from stdin (`--token-stdin`).
    fn agent_command(&self, spec: &LaunchSpec) -> Command {
        let mut cmd = Command::new(&self.opts.command[0]);
        cmd.args(&self.opts.command[1..])
            .arg("--server")
            .arg(&self.opts.server_url)
            .arg("--node")
            .arg(spec.node.to_string())
            .arg("--gpus")
            .arg(spec.gpus.to_string())
            .arg("--data-dir")
            .arg(self.agent_dir(spec.node))
            .arg("--boot-delay-s")
            .arg(spec.boot_delay_s.to_string())
            // Not on the command line (world-readable in `ps`) nor in the environment (readable by the jobs).
            .arg("--token-stdin");
        if let Some(user) = &self.opts.run_as {
            cmd.arg("--run-as").arg(user);
        }
        cmd
    }

    /// The command that boots Slurm node `name` on this machine: after the boot delay, `slurmd -D -N name` in a
    /// fresh PID namespace and a fresh time namespace whose boot clock starts near zero. That is what a new cloud machine looks like to
    /// slurmctld, which ignores the registration of a node that booted before it asked for it (on a shared host
    /// the boot clock is the host's).
    fn slurmd_command(&self, name: &str, spec: &LaunchSpec) -> Result<Command, ProviderError> {
        let Some((slurmd, conf)) = &self.opts.slurmd else {
            return Err(ProviderError::Transient(format!("node {name} is Slurm's, and no slurmd is configured")));
        };
        // At least 1 s: slurmctld compares boot and request times in whole seconds.
        let delay = spec.boot_delay_s.clamp(1.0, 3600.0);
        // Its own PID namespace too, as a machine of its own: slurmstepd leaves slurmd's session, but not the
        // namespace, so ending the node ends its jobs with it.
        // A shell is the namespace's init: slurmd runs under it, and the shell reaps the job steps that slurmd
        // orphans there (slurmd as init would leave them zombies).
        let script = "sleep \"$0\"; up=$(cut -d. -f1 /proc/uptime); \
            exec unshare --time --boottime \"-$up\" --pid --fork --kill-child --mount-proc \
            /bin/sh -c '\"$@\"; exit $?' node \"$@\"";
        let mut cmd = Command::new("/bin/sh");
        // Nothing of the daemon's environment (a token in SPILLWAY_TOKEN, say) reaches slurmd or its jobs.
        cmd.env_clear().env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        cmd.arg("-c").arg(script).arg(format!("{delay:.3}")).arg(slurmd).args(["-D", "-N", name]);
        if let Some(c) = conf {
            cmd.arg("-f").arg(c);
        }
        Ok(cmd)
    }

    /// Creates the agent's data directory (0700) and opens its log (0600) twice, for stdout and stderr.
    fn agent_files(&self, node: u32) -> Result<(File, File), ProviderError> {
        let dir = self.agent_dir(node);
        create_private_dir(&dir)
            .map_err(|e| ProviderError::Transient(format!("create agent directory {}: {e}", dir.display())))?;
        let log_path = self.opts.data_dir.join("agents").join(format!("node-{node}.log"));
        let open_err = |e: io::Error| ProviderError::Transient(format!("open agent log {}: {e}", log_path.display()));
        let log = open_private_append(&log_path).map_err(open_err)?;
        let log2 = log.try_clone().map_err(open_err)?;
        Ok((log, log2))
    }

    /// Spawns the agent for `spec` in a new session with its output appended to its log, hands it the token on
    /// stdin, starts a thread that reaps it, and returns its (pid, start time).
    fn spawn_agent(&self, spec: &LaunchSpec) -> Result<(i32, u64), ProviderError> {
        let (log, log2) = self.agent_files(spec.node)?;
        let mut cmd = match &spec.slurm_node {
            Some(name) => self.slurmd_command(name, spec)?,
            None => self.agent_command(spec),
        };
        // A Slurm node gets no token: nothing of it runs Spillway's agent, and its jobs must not inherit one.
        let stdin = if spec.slurm_node.is_some() { Stdio::null() } else { Stdio::piped() };
        cmd.stdin(stdin).stdout(log).stderr(log2);
        // SAFETY: the closure runs between fork and exec and only calls async-signal-safe functions.
        unsafe {
            cmd.pre_exec(|| {
                // Own session: no controlling terminal, its own process group (so the daemon's death or a ^C
                // to the daemon's group does not reach it), and a session id that tags everything it starts.
                if libc::setsid() == -1 {
                    return Err(io::Error::last_os_error());
                }
                // Dispositions set to "ignore" survive exec; the agent must be stoppable by SIGTERM.
                for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let program = &self.opts.command[0];
        let mut child = cmd
            .spawn()
            .map_err(|e| ProviderError::Transient(format!("spawn agent {program} for node {}: {e}", spec.node)))?;
        let pid = child.id() as i32;
        // Read before the reaper thread exists: until it waits, the pid cannot be reaped and reused.
        let start_time = procfs::stat(pid).map(|s| s.start_time);
        let stdin = child.stdin.take();
        let reaper = thread::Builder::new().name(format!("reap-agent-{pid}")).spawn(move || {
            // The daemon may run for days; an unreaped agent would stay a zombie.
            let _ = child.wait();
        });
        let fail = |what: String| {
            // SAFETY: pid is our unreaped child (or the reaper's), so it cannot be a stranger.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            ProviderError::Transient(what)
        };
        if let Err(e) = reaper {
            return Err(fail(format!("start reaper thread for agent pid {pid}: {e}")));
        }
        if spec.slurm_node.is_none()
            && let Err(e) = send_token(stdin, &spec.token)
        {
            return Err(fail(format!("hand the node token to agent pid {pid} for node {}: {e}", spec.node)));
        }
        match start_time {
            Some(start_time) => Ok((pid, start_time)),
            None => Err(fail(format!("read /proc/{pid}/stat of the new agent for node {}", spec.node))),
        }
    }

    /// Stops the agent of `record` (SIGTERM to its group, grace, SIGKILL) and SIGKILLs whatever is left of its
    /// session. Returns an error naming the survivors if anything outlives SIGKILL.
    fn stop(&self, record: &Record) -> Result<(), ProviderError> {
        let (pid, start) = (record.pid, record.start_time);
        if procfs::signal_group_of(pid, start, libc::SIGTERM) {
            let exited =
                procfs::poll(self.opts.terminate_grace, || if procfs::is_live(pid, start) { Err(()) } else { Ok(()) });
            if exited.is_err() {
                procfs::signal_group_of(pid, start, libc::SIGKILL);
            }
        }
        // Backstop: jobs run in their own process groups but stay in the agent's session.
        let survivors = procfs::kill_session(pid, start, KILL_WAIT);
        if survivors.is_empty() {
            Ok(())
        } else {
            Err(ProviderError::Transient(format!(
                "instance {}: processes {survivors:?} of agent pid {pid} survived SIGKILL",
                record.instance.id
            )))
        }
    }
}

impl Provider for LocalProvider {
    fn launch(&self, spec: &LaunchSpec) -> Result<Instance, ProviderError> {
        let id = instance_id(&spec.cluster, spec.node);
        let _lock = self.lock()?;
        let live = self.live_records()?;
        if let Some(existing) = live.iter().find(|r| r.instance.id == id) {
            return Ok(existing.instance.clone());
        }
        if let Some(&limit) = self.opts.capacity.get(&spec.instance_type) {
            let used = live.iter().filter(|r| r.instance.instance_type == spec.instance_type).count();
            if used >= limit as usize {
                return Err(ProviderError::InsufficientCapacity { instance_type: spec.instance_type.clone() });
            }
        }
        let (pid, start_time) = self.spawn_agent(spec)?;
        let instance = spec.instance(id, spec.spot);
        let record = Record { instance: instance.clone(), pid, start_time };
        if let Err(e) = self.store.write(&record) {
            // An agent without a record could never be listed or stopped: do not leave it running.
            procfs::kill_session(pid, start_time, KILL_WAIT);
            return Err(e);
        }
        Ok(instance)
    }

    fn terminate(&self, instance_id: &str) -> Result<(), ProviderError> {
        let record = {
            let _lock = self.lock()?;
            self.store.read(instance_id)?
        };
        let Some(record) = record else {
            return Err(ProviderError::NotFound(instance_id.to_string()));
        };
        let was_live = procfs::is_live(record.pid, record.start_time);
        // Not under the lock: the grace can take seconds and launches must not wait for it.
        self.stop(&record)?;
        let _lock = self.lock()?;
        // Delete only the record we stopped: a concurrent relaunch may have replaced it.
        if self.store.read(instance_id)?.is_some_and(|r| r.pid == record.pid && r.start_time == record.start_time) {
            self.store.remove(instance_id)?;
        }
        if was_live { Ok(()) } else { Err(ProviderError::NotFound(instance_id.to_string())) }
    }

    fn list(&self, cluster: &str) -> Result<Vec<Instance>, ProviderError> {
        let live = {
            let _lock = self.lock()?;
            self.live_records()?
        };
        let mut instances: Vec<Instance> =
            live.into_iter().map(|r| r.instance).filter(|i| i.cluster == cluster).collect();
        instances.sort_by_key(|i| i.node);
        Ok(instances)
    }

    fn name(&self) -> &'static str {
        "local"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_as_needs_root() {
        assert!(check_run_as(None, 1000).is_ok());
        assert!(check_run_as(Some("nobody"), 0).is_ok());
        let err = check_run_as(Some("nobody"), 1000).unwrap_err().to_string();
        assert!(err.contains("nobody") && err.contains("root") && err.contains("1000"), "{err}");
    }
}
