//! The Slurm commands the daemon runs (`scontrol`, `squeue`) and the parsing of what they print. Output is read
//! in Slurm's one-line formats (`scontrol -o`, `squeue -o`), stable across releases since long before 22.05; a
//! line that does not parse is skipped with a message, never a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest the daemon waits for one Slurm command (Slurm's own `MessageTimeout` is 10 s by default).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);
/// The most output read from one command (a node table of tens of thousands of nodes fits).
const MAX_OUTPUT: u64 = 64 << 20;

/// A node as `scontrol -o show node` prints it: base state and flags (`IDLE+CLOUD+POWERED_DOWN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    pub name: String,
    pub base: String,
    pub flags: BTreeSet<String>,
}

impl SlurmNode {
    fn has(&self, flag: &str) -> bool {
        self.flags.contains(flag)
    }

    /// Returns whether Slurm asked for the node to be powered up and it has not registered yet.
    pub fn powering_up(&self) -> bool {
        self.has("POWERING_UP")
    }

    /// Returns whether Slurm has suspended the node or is suspending it (it wants no machine behind it).
    pub fn powered_off(&self) -> bool {
        !self.powering_up() && (self.has("POWERED_DOWN") || self.has("POWERING_DOWN"))
    }

    /// Returns whether Slurm counts the node as up (neither powering up nor powered down), answering or not.
    pub fn claims_up(&self) -> bool {
        !self.powering_up() && !self.powered_off()
    }

    /// Returns whether the node's slurmd is registered and answering.
    pub fn responding(&self) -> bool {
        !self.powering_up()
            && !self.powered_off()
            && !self.has("NOT_RESPONDING")
            && self.base != "DOWN"
            && !self.has("DOWN")
    }
}

/// A job as `squeue` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    pub id: u64,
    pub partition: String,
    pub account: String,
    pub state: String,
    /// The nodes it holds or will run on (expanded).
    pub nodes: Vec<String>,
}

/// Runs Slurm's client commands.
#[derive(Debug, Clone)]
pub struct SlurmClient {
    bin_dir: Option<PathBuf>,
    conf: Option<PathBuf>,
}

/// `squeue`'s format: id, partition, account, state, nodes (a hostlist).
const SQUEUE_FORMAT: &str = "%i|%P|%a|%T|%N";

impl SlurmClient {
    /// Returns a client for the commands in `bin_dir` (or on `PATH`) with `conf` as `SLURM_CONF`.
    pub fn new(bin_dir: Option<PathBuf>, conf: Option<PathBuf>) -> SlurmClient {
        SlurmClient { bin_dir, conf }
    }

    /// Runs one Slurm command and returns its stdout; a failure says the command and its stderr. A command that
    /// runs past [`COMMAND_TIMEOUT`] (a controller that does not answer) is killed: the daemon never waits on
    /// Slurm for longer.
    fn run(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let path = self.bin_dir.as_ref().map_or_else(|| PathBuf::from(program), |d| d.join(program));
        let mut cmd = Command::new(&path);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        if let Some(c) = &self.conf {
            cmd.env("SLURM_CONF", c);
        }
        let what = || format!("{program} {}", args.join(" "));
        let mut child = cmd.spawn().map_err(|e| format!("{}: {e}", path.display()))?;
        // Read both pipes while waiting: a long answer must not fill a pipe and stall the command.
        let read = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(p) = pipe {
                    let _ = p.take(MAX_OUTPUT).read_to_end(&mut buf);
                }
                buf
            })
        };
        let out = read(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
        let err = read(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if start.elapsed() < COMMAND_TIMEOUT => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("{}: no answer within {} s (killed)", what(), COMMAND_TIMEOUT.as_secs()));
                }
                Err(e) => return Err(format!("{}: {e}", what())),
            }
        };
        let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
        if !status.success() {
            return Err(format!("{}: {} ({status})", what(), String::from_utf8_lossy(&err).trim()));
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Returns Slurm's nodes by name.
    pub fn nodes(&self) -> Result<BTreeMap<String, SlurmNode>, String> {
        Ok(parse_nodes(&self.run("scontrol", &["-o", "show", "node"])?))
    }

    /// Returns Slurm's jobs (every partition, every state squeue lists).
    pub fn jobs(&self) -> Result<Vec<SlurmJob>, String> {
        Ok(parse_jobs(&self.run("squeue", &["-h", "-a", "-o", SQUEUE_FORMAT])?))
    }

    /// Hands node `name` back to Slurm: requeues the jobs running on it (a job that may not be requeued is
    /// reported), then powers it down by force with `reason`, so Slurm reschedules what ran there now.
    pub fn hand_back(&self, name: &str, reason: &str) -> Result<(), String> {
        let jobs = parse_jobs(&self.run("squeue", &["-h", "-a", "-w", name, "-t", "RUNNING", "-o", SQUEUE_FORMAT])?);
        let ids: Vec<String> = jobs.iter().map(|j| j.id.to_string()).collect();
        let mut errors = Vec::new();
        if !ids.is_empty()
            && let Err(e) = self.run("scontrol", &["requeue", &ids.join(",")])
        {
            // Not fatal: powering the node down still ends (or, if Slurm may, requeues) those jobs.
            errors.push(format!("requeue of jobs {}: {e}", ids.join(",")));
        }
        let reason = format!("reason=spillway: {reason}");
        let node = format!("nodename={name}");
        self.run("scontrol", &["update", &node, "state=POWER_DOWN_FORCE", &reason])?;
        if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
    }
}

/// Parses `scontrol -o show node`: one node per line, `Key=Value` words.
pub fn parse_nodes(text: &str) -> BTreeMap<String, SlurmNode> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let field = |key: &str| line.split_whitespace().find_map(|w| w.strip_prefix(key));
        let (Some(name), Some(state)) = (field("NodeName="), field("State=")) else {
            eprintln!("spillway: slurm: skipping a node line without NodeName= and State=: {}", cut(line));
            continue;
        };
        let mut parts = state.split('+');
        let base = parts.next().unwrap_or_default().trim_end_matches('*').to_string();
        let flags = parts.map(String::from).collect();
        out.insert(name.to_string(), SlurmNode { name: name.to_string(), base, flags });
    }
    out
}

/// Parses `squeue -o` lines in [`SQUEUE_FORMAT`].
pub fn parse_jobs(text: &str) -> Vec<SlurmJob> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.trim().split('|').collect();
        let (Some(id), [_, partition, account, state, nodes]) = (f.first().and_then(|i| i.parse().ok()), f.as_slice())
        else {
            eprintln!("spillway: slurm: skipping a squeue line that does not parse: {}", cut(line));
            continue;
        };
        // A pending job has no nodes yet (an empty hostlist, or `(null)` on some releases).
        let nodes = match *nodes {
            "" | "(null)" => Vec::new(),
            list => super::hostlist::expand(list).unwrap_or_default(),
        };
        out.push(SlurmJob {
            id,
            partition: partition.to_string(),
            account: account.to_string(),
            state: state.to_string(),
            nodes,
        });
    }
    out
}

/// Returns the first 200 bytes of a line for a message.
fn cut(s: &str) -> &str {
    let mut end = s.len().min(200);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_states_read_as_slurm_means_them() {
        let text = "NodeName=c1 Arch=x86_64 State=IDLE+CLOUD+POWERED_DOWN Partitions=a\n\
                    NodeName=c2 State=MIXED+CLOUD+NOT_RESPONDING+POWERING_UP Reason=x y\n\
                    NodeName=c3 State=ALLOCATED+CLOUD Partitions=a\n\
                    NodeName=c4 State=IDLE+CLOUD+POWERING_DOWN\n\
                    NodeName=c5 State=DOWN*+CLOUD\n\
                    garbage line\n";
        let n = parse_nodes(text);
        assert_eq!(n.len(), 5);
        assert!(n["c1"].powered_off() && !n["c1"].responding());
        assert!(n["c2"].powering_up() && !n["c2"].responding());
        assert!(n["c3"].responding());
        assert!(n["c4"].powered_off());
        assert!(!n["c5"].responding());
    }

    #[test]
    fn jobs_parse_with_their_nodes_expanded() {
        let j = parse_jobs("12|cloud-p1|ml|CONFIGURING|c[1-2]\n13|cloud-p2|(null)|PENDING|\nbad\n14|x|y|R\n");
        assert_eq!(j.len(), 2);
        assert_eq!(j[0].nodes, ["c1", "c2"]);
        assert_eq!((j[1].id, j[1].nodes.len()), (13, 0));
    }
}
