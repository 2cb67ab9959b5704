//! Starting one worker process under the job contract (ARCHITECTURE.md section 5).

use anyhow::{Context, Result, bail};
use spillway_api::Assignment;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::gpus::visible_devices;

/// The environment the agent adds on top of the job's own: the `SPILLWAY_*` variables, `CUDA_VISIBLE_DEVICES`
/// and the torch.distributed rank variables. These win over a job variable of the same name.
pub fn contract_env(a: &Assignment, node: u32, gpus: &[u32], checkpoint_dir: &Path) -> Vec<(String, String)> {
    vec![
        ("SPILLWAY_JOB_ID".into(), a.worker.job.to_string()),
        ("SPILLWAY_ATTEMPT".into(), a.worker.attempt.to_string()),
        ("SPILLWAY_NODE".into(), node.to_string()),
        ("SPILLWAY_CHECKPOINT_DIR".into(), checkpoint_dir.to_string_lossy().into_owned()),
        ("CUDA_VISIBLE_DEVICES".into(), visible_devices(gpus)),
        ("RANK".into(), a.worker.rank.to_string()),
        // One worker per node per job: its local rank is always 0.
        ("LOCAL_RANK".into(), "0".into()),
        ("WORLD_SIZE".into(), a.world_size.to_string()),
        ("MASTER_ADDR".into(), a.master_addr.clone()),
        ("MASTER_PORT".into(), a.master_port.to_string()),
    ]
}

/// Opens the worker's log for appending, creating it and its parent directories.
pub fn open_log(log_path: &Path) -> Result<File> {
    if let Some(parent) = log_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating log directory {}", parent.display()))?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .with_context(|| format!("opening log file {}", log_path.display()))
}

/// Appends one line to the worker's log, best effort: used to tell the job's owner why the worker never ran.
pub fn append_log_line(log_path: &Path, line: &str) {
    if let Ok(mut f) = open_log(log_path) {
        let _ = writeln!(f, "{line}");
    }
}

/// Starts the worker: `argv` run directly (never through a shell), in its own process group (so a stop reaches
/// everything it forked), stdin from /dev/null, stdout and stderr appended to `log_path`, the agent's environment
/// plus the job's plus [`contract_env`]. Creates `checkpoint_dir`. Returns the child, or an error naming what failed
/// (the caller reports it as exit code 127).
pub fn spawn_worker(a: &Assignment, node: u32, gpus: &[u32], checkpoint_dir: &Path, log_path: &Path) -> Result<Child> {
    let Some((program, args)) = a.argv.split_first() else {
        bail!("the job's argv is empty");
    };
    std::fs::create_dir_all(checkpoint_dir)
        .with_context(|| format!("creating checkpoint directory {}", checkpoint_dir.display()))?;
    let stdout = open_log(log_path)?;
    let stderr = stdout.try_clone().with_context(|| format!("duplicating log file {}", log_path.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        // The node's token must not reach the job: a job could act for its node with it.
        .env_remove("SPILLWAY_AGENT_TOKEN")
        .envs(&a.env)
        .envs(contract_env(a, node, gpus, checkpoint_dir))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    if let Some(dir) = a.workdir.as_deref().filter(|d| !d.is_empty()) {
        cmd.current_dir(dir);
    }
    cmd.spawn().with_context(|| match &a.workdir {
        Some(dir) => format!("starting {program:?} in {dir:?}"),
        None => format!("starting {program:?}"),
    })
}
