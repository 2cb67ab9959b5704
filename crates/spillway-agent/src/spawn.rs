//! Starting one worker process under the job contract (ARCHITECTURE.md section 5).

use anyhow::{Context, Result, bail};
use spillway_api::Assignment;
use std::ffi::OsString;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::gpus::visible_devices;
use crate::user::{RunAs, drop_privileges};

/// PATH for workers when the agent itself has none: enough to find `sh`, `python3` and the like.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The environment the agent adds on top of the job's own: the `SPILLWAY_*` variables, `CUDA_VISIBLE_DEVICES`
/// and the torch.distributed rank variables. These win over a job variable of the same name.
///
/// For torchrun (elastic or not): `SPILLWAY_MIN_WORKERS` / `SPILLWAY_MAX_WORKERS` (`--nnodes=MIN:MAX`),
/// `SPILLWAY_RDZV_ID` (stable for the job across attempts) and `SPILLWAY_RDZV_ENDPOINT` (`MASTER_ADDR:MASTER_PORT`:
/// the attempt's rank-0 node, which hosts the c10d store; every change of width is a new attempt, so the next
/// one's endpoint is a node that is still there).
///
/// Across regions: `SPILLWAY_REGION` (the pool's region) and, when this attempt moved the job's data from another
/// region, `SPILLWAY_DATA_FROM` (copy the checkpoint from there before resuming).
pub fn contract_env(a: &Assignment, node: u32, gpus: &[u32], checkpoint_dir: &Path) -> Vec<(String, String)> {
    let (least, most) = a.workers_range.unwrap_or((a.world_size, a.world_size));
    let place = [("SPILLWAY_REGION", &a.region), ("SPILLWAY_DATA_FROM", &a.data_from)];
    let mut env = vec![
        ("SPILLWAY_MIN_WORKERS".into(), least.to_string()),
        ("SPILLWAY_MAX_WORKERS".into(), most.to_string()),
        ("SPILLWAY_RDZV_ID".into(), format!("spillway-job-{}", a.worker.job)),
        ("SPILLWAY_RDZV_ENDPOINT".into(), endpoint(&a.master_addr, a.master_port)),
        ("SPILLWAY_JOB_ID".into(), a.worker.job.to_string()),
        ("SPILLWAY_ATTEMPT".into(), a.worker.attempt.to_string()),
        ("SPILLWAY_NODE".into(), node.to_string()),
        ("SPILLWAY_CHECKPOINT_DIR".into(), checkpoint_dir.to_string_lossy().into_owned()),
        ("CUDA_VISIBLE_DEVICES".into(), visible_devices(gpus)),
        ("RANK".into(), a.worker.rank.to_string()),
        // Each worker sees only its own GPUs (CUDA_VISIBLE_DEVICES), so its first is device 0 to it, even where
        // two workers of a job share a node: its local rank is always 0.
        ("LOCAL_RANK".into(), "0".into()),
        ("WORLD_SIZE".into(), a.world_size.to_string()),
        ("MASTER_ADDR".into(), a.master_addr.clone()),
        ("MASTER_PORT".into(), a.master_port.to_string()),
    ];
    // Only where the daemon says: a job without a region (or one that moved nothing) gets neither.
    env.extend(place.into_iter().filter_map(|(k, v)| Some((k.to_string(), v.clone()?))));
    env
}

/// Returns `host:port`, with an IPv6 address in brackets (`[fd00::1]:29500`), as torchrun parses it.
fn endpoint(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// The whole environment of a worker, later entries winning: `PATH` (`agent_path`, the agent's own, or
/// [`DEFAULT_PATH`] when it has none), the job's `env`, then [`contract_env`]. Nothing else of the agent's
/// environment: it is the daemon's, and may hold secrets a job must not see.
pub fn worker_env(
    a: &Assignment,
    node: u32,
    gpus: &[u32],
    checkpoint_dir: &Path,
    agent_path: Option<OsString>,
) -> Vec<(OsString, OsString)> {
    let path = agent_path.filter(|p| !p.is_empty()).unwrap_or_else(|| DEFAULT_PATH.into());
    let mut env = vec![(OsString::from("PATH"), path)];
    let own = a.env.iter().filter(|(k, _)| !spillway_api::RESERVED_ENV.contains(&k.as_str()));
    env.extend(own.map(|(k, v)| (k.into(), v.into())));
    env.extend(contract_env(a, node, gpus, checkpoint_dir).into_iter().map(|(k, v)| (k.into(), v.into())));
    env
}

/// Creates `dir` and its missing parents, each with mode 0700 (with that mode, so there is no moment they are
/// readable by others). Fine if it exists already.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Creates a worker's checkpoint directory with mode 0700, owned by `owner` when the worker runs as another
/// user. Missing parents are 0700 too, except for a `--run-as` worker: those are 0711 (others may pass through
/// but not list them), or the user could never reach its own directory below a root-only one.
pub fn create_checkpoint_dir(dir: &Path, owner: Option<&RunAs>) -> io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        let mode = if owner.is_some() { 0o711 } else { 0o700 };
        DirBuilder::new().recursive(true).mode(mode).create(parent)?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        other => other?,
    }
    if let Some(u) = owner {
        // lchown: if the path were a symlink, change the link, never what it points to.
        std::os::unix::fs::lchown(dir, Some(u.uid), Some(u.gid))?;
    }
    Ok(())
}

/// Opens the worker's log for appending: created with mode 0600 (parents 0700), owned by `owner` when the worker
/// runs as another user. A symlink as the log itself is refused, so a planted link cannot make the agent write
/// (or hand a job) some other file.
pub fn open_log(log_path: &Path, owner: Option<&RunAs>) -> Result<File> {
    if let Some(parent) = log_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dir(parent).with_context(|| format!("creating log directory {}", parent.display()))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(log_path)
        .with_context(|| format!("opening log file {}", log_path.display()))?;
    if let Some(u) = owner {
        std::os::unix::fs::fchown(&file, Some(u.uid), Some(u.gid))
            .with_context(|| format!("giving log file {} to user {}", log_path.display(), u.name))?;
    }
    Ok(file)
}

/// Appends one line to the worker's log, best effort: used to tell the job's owner why the worker never ran.
pub fn append_log_line(log_path: &Path, owner: Option<&RunAs>, line: &str) {
    if let Ok(mut f) = open_log(log_path, owner) {
        let _ = writeln!(f, "{line}");
    }
}

/// Where and as whom a worker runs: the paths resolved against the agent's data dir, and the `--run-as` user.
pub struct Placement<'a> {
    pub node: u32,
    pub gpus: &'a [u32],
    pub checkpoint_dir: &'a Path,
    pub log_path: &'a Path,
    pub user: Option<&'a RunAs>,
    /// The worker's tag ([`crate::escaped::TAG_VAR`]), so a process that leaves its group can still be stopped.
    pub tag: &'a str,
}

/// Starts the worker: `argv` run directly (never through a shell), in its own process group (so a stop reaches
/// everything it forked), tagged (so a stop reaches what leaves the group too), stdin from /dev/null, stdout and stderr appended to its log, with [`worker_env`] only,
/// and as `p.user` when given. Creates the checkpoint directory and log (see [`create_checkpoint_dir`],
/// [`open_log`]). Returns the child, or an error naming what failed (the caller reports it as exit code 127).
pub fn spawn_worker(a: &Assignment, p: &Placement) -> Result<Child> {
    let Some((program, args)) = a.argv.split_first() else {
        bail!("the job's argv is empty");
    };
    create_checkpoint_dir(p.checkpoint_dir, p.user)
        .with_context(|| format!("creating checkpoint directory {}", p.checkpoint_dir.display()))?;
    let stdout = open_log(p.log_path, p.user)?;
    let stderr = stdout.try_clone().with_context(|| format!("duplicating log file {}", p.log_path.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        // A clean slate: the agent's environment is the daemon's (and held the node token once).
        .env_clear()
        .envs(worker_env(a, p.node, p.gpus, p.checkpoint_dir, std::env::var_os("PATH")))
        .env(crate::escaped::TAG_VAR, p.tag)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    let workdir = a.workdir.as_deref().filter(|d| !d.is_empty());
    match p.user {
        // Entered after dropping privileges, as the user. Without a workdir the job starts where the agent is,
        // re-entered as the user too: inheriting the directory root entered would skip the user's access check.
        Some(user) => {
            let dir = workdir.map(PathBuf::from).or_else(|| std::env::current_dir().ok());
            drop_privileges(&mut cmd, user, dir.as_deref())?
        }
        None => {
            if let Some(dir) = workdir {
                cmd.current_dir(dir);
            }
        }
    }
    cmd.spawn().with_context(|| match workdir {
        Some(dir) => format!("starting {program:?} in {dir:?}"),
        None => format!("starting {program:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_api::WorkerRef;
    use std::collections::BTreeMap;

    fn assignment() -> Assignment {
        Assignment {
            worker: WorkerRef { job: 3, attempt: 1, rank: 0 },
            world_size: 1,
            gpus: 0,
            argv: vec!["true".into()],
            env: BTreeMap::from([("PATH".to_string(), "/job/bin".to_string()), ("RANK".into(), "9".into())]),
            workdir: None,
            checkpoint_dir: "c".into(),
            log_path: "l".into(),
            master_addr: "127.0.0.1".into(),
            master_port: 1,
            workers_range: None,
            region: None,
            data_from: None,
        }
    }

    fn get<'a>(env: &'a [(OsString, OsString)], key: &str) -> Vec<&'a OsString> {
        env.iter().filter(|(k, _)| k == key).map(|(_, v)| v).collect()
    }

    #[test]
    fn path_defaults_and_later_entries_win() {
        let mut a = assignment();
        let env = worker_env(&a, 1, &[], Path::new("/c"), None);
        // Command::envs keeps the last value of a key: the job's PATH beats the agent's, the contract beats both.
        assert_eq!(get(&env, "PATH"), vec![DEFAULT_PATH, "/job/bin"]);
        assert_eq!(get(&env, "RANK"), vec!["9", "0"]);
        a.env.clear();
        let env = worker_env(&a, 1, &[], Path::new("/c"), Some("/agent/bin".into()));
        assert_eq!(get(&env, "PATH"), vec!["/agent/bin"]);
        let env = worker_env(&a, 1, &[], Path::new("/c"), Some("".into()));
        assert_eq!(get(&env, "PATH"), vec![DEFAULT_PATH], "an empty PATH finds nothing");
    }

    #[test]
    fn the_region_and_where_to_copy_the_checkpoint_from_come_only_when_the_daemon_says() {
        let mut a = assignment();
        // A job's own value (from before the API refused it) would read as "copy from there": dropped.
        a.env.insert("SPILLWAY_DATA_FROM".into(), "fake".into());
        let env = worker_env(&a, 1, &[], Path::new("/c"), None);
        assert!(get(&env, "SPILLWAY_REGION").is_empty() && get(&env, "SPILLWAY_DATA_FROM").is_empty());
        (a.region, a.data_from) = (Some("us-west-2".into()), Some("us-east-1".into()));
        let env = worker_env(&a, 1, &[], Path::new("/c"), None);
        assert_eq!(get(&env, "SPILLWAY_REGION"), vec!["us-west-2"]);
        assert_eq!(get(&env, "SPILLWAY_DATA_FROM"), vec!["us-east-1"]);
    }
}
