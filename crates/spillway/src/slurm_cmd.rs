//! `spillway slurm resume|suspend HOSTLIST`: the programs Slurm calls (`ResumeProgram`, `SuspendProgram`). Each
//! hands the hostlist to the daemon and returns at once, as Slurm expects; what became of each node is printed on
//! stderr and appended to `--log`, where Slurm's admin looks (slurmctld keeps no output of these programs).

use crate::client::{CliError, Conn, EXIT_OTHER, connect};
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum SlurmCommand {
    /// Slurm's ResumeProgram: buy a node for each name of HOSTLIST, by the tier of the job that asked for it.
    Resume(Request),
    /// Slurm's SuspendProgram: give back the node of each name of HOSTLIST.
    Suspend(Request),
}

#[derive(Args)]
pub struct Request {
    /// The hostlist Slurm passes (`c[1-2],gpu7`).
    hosts: String,
    /// File holding the daemon's admin token (keep it 0600, owned by SlurmUser); default: --token or client.json.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Append one line per node to this file (the admin's log of every resume and suspend).
    #[arg(long)]
    log: Option<PathBuf>,
    #[command(flatten)]
    conn: Conn,
}

/// Runs `spillway slurm resume|suspend`: one request to the daemon, one log line per name. Fails (non-zero exit)
/// when the daemon refused the request or any name of it.
pub fn run(cmd: SlurmCommand) -> anyhow::Result<()> {
    let (verb, req) = match cmd {
        SlurmCommand::Resume(r) => ("resume", r),
        SlurmCommand::Suspend(r) => ("suspend", r),
    };
    let result = send(verb, &req);
    let lines = match &result {
        Ok(reply) => reply
            .nodes
            .iter()
            .map(|n| match (&n.node, &n.error) {
                (Some(id), _) => format!("{verb} {}: node {id}", n.name),
                (None, e) => format!("{verb} {}: not done: {}", n.name, e.as_deref().unwrap_or("unknown")),
            })
            .collect(),
        Err(e) => vec![format!("{verb} {}: refused: {e:#}", spillway_server::slurm::hostlist::shown(&req.hosts))],
    };
    let stamp = crate::ctl::fmt_time(crate::ctl::now());
    for line in &lines {
        eprintln!("spillway slurm: {line}");
    }
    if let Some(path) = &req.log
        && let Err(e) = append(path, &stamp, &lines)
    {
        eprintln!("spillway slurm: writing {}: {e}", path.display());
    }
    let reply = result?;
    if let Some(bad) = reply.nodes.iter().find(|n| n.node.is_none()) {
        let why = bad.error.clone().unwrap_or_default();
        return Err(CliError::new(EXIT_OTHER, format!("{verb} {}: {why}", bad.name)).into());
    }
    Ok(())
}

/// Sends the hostlist to the daemon and returns its reply.
fn send(verb: &str, req: &Request) -> anyhow::Result<spillway_api::SlurmReply> {
    let mut conn = req.conn.clone();
    if let Some(f) = &req.token_file {
        conn.token =
            Some(read_token(f).map_err(|e| CliError::new(EXIT_OTHER, format!("token file {}: {e}", f.display())))?);
    }
    let client = connect(&conn)?;
    let body = serde_json::json!({ "hosts": req.hosts });
    let bytes = client.post_bytes(&format!("/v1/slurm/{verb}"), Some(&body))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| CliError::new(EXIT_OTHER, format!("bad answer from the server to {verb}: {e}")).into())
}

/// Reads a token from `path`: a regular file only its owner may read, of one short line of printable ASCII.
pub(crate) fn read_token(path: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    // The type first: opening a FIFO would block.
    if !std::fs::metadata(path).map_err(|e| e.to_string())?.is_file() {
        return Err("not a regular file".into());
    }
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!("mode {:o} lets others read the token; chmod 600 it", meta.permissions().mode() & 0o777));
    }
    let mut text = String::new();
    f.take(4096).read_to_string(&mut text).map_err(|e| e.to_string())?;
    let token = text.trim();
    if token.is_empty() || !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err("must hold one token on one line".into());
    }
    Ok(token.to_string())
}

/// Appends `lines` to the log at `path` (created 0600), each stamped.
fn append(path: &Path, stamp: &str, lines: &[String]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    let text: String = lines.iter().map(|l| format!("{stamp} {l}\n")).collect();
    f.write_all(text.as_bytes())
}
