//! The commands that talk to the daemon over its HTTP API: `submit`, `jobs`, `nodes`, `pools`, `events`, `cost`,
//! `explain`, `budgets`.
//! Argument parsing, request building and table rendering; the transport is in [`crate::client`].

use crate::client::{CliError, Client, Conn, EXIT_OTHER, connect, query, segment, show};
use crate::window::instant;
use anyhow::{Context, Result};
use clap::{ArgAction, Args, Subcommand};
use serde_json::Value;
use spillway_api::{
    BudgetView, CostView, EventView, ExplainView, JobSubmit, JobView, NodeView, PoolScale, PoolView, Protect,
    WhatIfView,
};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum CtlCommand {
    /// Submit a job (a TOML job file with the fields of the API's JobSubmit, flags override it); prints
    /// `submitted job ID (tier, team)`, or the job as JSON with -o json.
    Submit(Box<SubmitArgs>),
    /// List, show, cancel jobs and read their logs.
    Jobs {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// List nodes, interrupt them, protect them from scale-in.
    Nodes {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: NodesCommand,
    },
    /// List pools, change their bounds, protect them from scale-in.
    Pools {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        command: PoolsCommand,
    },
    /// The event log: every decision the daemon made, newest last.
    Events {
        #[command(flatten)]
        conn: Conn,
        /// Only the events of this job id (at most one of --job, --node, --pool).
        #[arg(long, value_name = "ID")]
        job: Option<u32>,
        /// Only the events of this node id.
        #[arg(long, value_name = "ID")]
        node: Option<u32>,
        /// Only the events of this pool (by name).
        #[arg(long, value_name = "NAME")]
        pool: Option<String>,
        /// Only events of this kind.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(decision_kinds()))]
        kind: Option<String>,
        /// At most this many events, oldest first (the server's pages are followed up to it).
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
    /// Cost so far (or over a window), in USD, broken down by team, tier, pool and market.
    Cost {
        #[command(flatten)]
        conn: Conn,
        /// Start of the window: a time like 2026-12-02T05:40:00Z, seconds since the epoch, or an age like 30m,
        /// 1h30m, 1d.
        #[arg(long)]
        since: Option<String>,
        /// End of the window (same forms); default now.
        #[arg(long)]
        until: Option<String>,
    },
    /// Why a job waits (or ran where it ran), or why a pool has its size and what would change it.
    Explain {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        what: ExplainCommand,
    },
    /// Each team budget ([[budgets]] in the config): spend in its current UTC day or month, and whether its hard
    /// cap holds.
    Budgets {
        #[command(flatten)]
        conn: Conn,
    },
}

/// Node states `nodes ls` shows without --all.
const LIVE_NODE_STATES: [&str; 4] = ["requested", "booting", "ready", "draining"];

/// The job states a filter may name.
fn job_states() -> Vec<&'static str> {
    spillway_server::views::JOB_STATES.iter().map(|s| spillway_server::views::job_state(*s)).collect()
}

/// The decision kinds a filter may name.
fn decision_kinds() -> Vec<&'static str> {
    spillway_server::views::DECISION_KINDS.iter().map(|k| spillway_server::views::decision_kind(*k)).collect()
}

#[derive(Subcommand, Debug)]
pub enum JobsCommand {
    /// List jobs.
    Ls {
        /// Only jobs in this state.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(job_states()))]
        state: Option<String>,
        /// Only jobs of this team (a team token sees only its own).
        #[arg(long, value_name = "NAME")]
        team: Option<String>,
        /// Only jobs of this tier (p0, p1, p2 unless the config names others).
        #[arg(long, value_name = "NAME")]
        tier: Option<String>,
        /// At most this many jobs, newest first (the server's pages are followed up to it).
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
    /// Show one job.
    Show {
        /// The job's id (from `submit` or `jobs ls`).
        id: u32,
    },
    /// Cancel a job.
    Cancel {
        /// The job's id.
        id: u32,
    },
    /// Print a job's output; with --follow, keep printing new output until the job ends.
    Logs {
        /// The job's id.
        id: u32,
        /// Keep printing new output until the job ends.
        #[arg(short, long)]
        follow: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum NodesCommand {
    /// List live nodes (requested, booting, ready, draining); --all for those that ended too.
    Ls {
        /// Also the nodes that ended (terminated, failed, lost).
        #[arg(long)]
        all: bool,
    },
    /// Interrupt a node (as a spot reclaim would): its jobs are requeued and it is drained.
    Interrupt {
        /// The node's id (from `nodes ls`).
        id: u32,
    },
    /// Protect a node from scale-in (or lift the protection with --off).
    Protect {
        /// The node's id.
        id: u32,
        /// Lift the protection instead.
        #[arg(long)]
        off: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ExplainCommand {
    /// The chain of reasons a job waits (quota, tier SLO, gang fit, pool at max, cooldown, backoff, budget cap),
    /// or where and why it ran.
    Job {
        /// The job's id (as `submit` printed it; `jobs ls` lists them).
        id: u32,
    },
    /// A pool's size, why it did not grow, its idle nodes, and what it would launch with a higher max or out of
    /// its cooldown.
    Pool {
        /// The pool's name, as in the config (`pools ls` lists them).
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum PoolsCommand {
    /// List pools.
    Ls,
    /// Change a pool's node bounds; an absent bound keeps its value.
    #[command(group(clap::ArgGroup::new("bounds").required(true).multiple(true).args(["min", "max"])))]
    Scale {
        /// The cloud pool's name, as in the config (`pools ls` lists them).
        name: String,
        /// The pool's new min nodes (at least one of --min and --max).
        #[arg(long)]
        min: Option<u32>,
        /// The pool's new max nodes; below its nodes now, idle ones go first as scale-in allows.
        #[arg(long)]
        max: Option<u32>,
    },
    /// Protect a pool's nodes from scale-in (or lift the protection with --off).
    Protect {
        /// The pool's name, as in the config (`pools ls` lists them).
        name: String,
        /// Lift the protection instead: idle nodes may go again.
        #[arg(long)]
        off: bool,
    },
    /// Show what a pool would launch now for the waiting jobs were its max --max (changes nothing).
    WhatIf {
        /// The cloud pool's name, as in the config (`pools ls` lists them).
        name: String,
        /// The max nodes to ask about (default: the pool's max now).
        #[arg(long)]
        max: Option<u32>,
        /// Answer as if the pool were out of its scale-out cooldown.
        #[arg(long)]
        ignore_cooldown: bool,
    },
}

/// `spillway submit`: tier defaults to p1 and gpus to 1 when neither the file nor a flag gives them.
#[derive(Args, Debug, Default)]
pub struct SubmitArgs {
    #[command(flatten)]
    conn: Conn,
    /// A TOML job file with the fields of JobSubmit (name, tier, team, gpus, workers, argv, env, ...).
    #[arg(long)]
    file: Option<PathBuf>,
    /// The job's name (shown in tables and events).
    #[arg(long)]
    name: Option<String>,
    /// Its tier: p0 (never waits, never on spot), p1 (spot with fallback), p2 (spot only), or the config's own.
    #[arg(long)]
    tier: Option<String>,
    /// Its team (an admin token only; a team token submits for its own team).
    #[arg(long)]
    team: Option<String>,
    /// GPUs per worker.
    #[arg(long)]
    gpus: Option<u32>,
    /// Workers in the gang (all start together).
    #[arg(long)]
    workers: Option<u32>,
    /// An elastic job's most workers (another name for --workers).
    #[arg(long)]
    max_workers: Option<u32>,
    /// An elastic job's fewest workers: it starts once these fit, grows toward its most into free capacity, and
    /// shrinks to these (restarting from its checkpoint) when a node it uses goes.
    #[arg(long)]
    min_workers: Option<u32>,
    /// An environment variable of the job (repeatable).
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Directory the job starts in (default: the directory you submit from, as sbatch does; it must exist on
    /// the nodes, so give --workdir when the daemon runs elsewhere).
    #[arg(long)]
    workdir: Option<String>,
    /// A GPU model the job needs (matched against the instance types' gpu_model), default: any.
    #[arg(long)]
    gpu_model: Option<String>,
    /// Whether it may run on spot and be preempted (default: the tier's).
    #[arg(long, action = ArgAction::Set, value_name = "true|false")]
    interruptible: Option<bool>,
    /// Seconds between the job's checkpoints (default: the tier's).
    #[arg(long, value_parser = positive_secs)]
    checkpoint_interval_s: Option<f64>,
    /// Deadline, seconds from submission.
    #[arg(long, value_parser = positive_secs)]
    deadline_s: Option<f64>,
    /// How long the job runs without interruption, seconds (for deadline-aware placement).
    #[arg(long, value_parser = positive_secs)]
    expected_duration_s: Option<f64>,
    /// Size of its checkpoint and data in GB: a start in a pool of another region moves them (egress, transfer).
    #[arg(long, value_parser = gigabytes)]
    checkpoint_gb: Option<f64>,
    /// The region its data is in before its first start (`us-east-1`).
    #[arg(long)]
    data_region: Option<String>,
    /// Wait until the job ends and exit with its status: 0 when it succeeded, its exit code when it failed (128 +
    /// the signal when one killed it), 1 when it was cancelled.
    #[arg(long)]
    wait: bool,
    /// Print the job's output as it comes until the job ends (implies --wait).
    #[arg(long)]
    follow: bool,
    /// The command, after `--`: program and arguments (overrides the file's argv).
    #[arg(last = true, value_name = "ARGV")]
    argv: Vec<String>,
}

/// Returns `K=V` split at the first `=`, or an error when there is none.
fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected K=V, got `{s}`")),
    }
}

/// A job file: the fields of [`JobSubmit`], all optional (flags may supply them); unknown fields are errors.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    name: Option<String>,
    tier: Option<String>,
    team: Option<String>,
    gpus: Option<u32>,
    workers: Option<u32>,
    max_workers: Option<u32>,
    min_workers: Option<u32>,
    argv: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    workdir: Option<String>,
    gpu_model: Option<String>,
    interruptible: Option<bool>,
    checkpoint_interval_s: Option<f64>,
    deadline_s: Option<f64>,
    expected_duration_s: Option<f64>,
    checkpoint_gb: Option<f64>,
    data_region: Option<String>,
}

/// Returns the job file parsed from `text`; errors name `path`, the line and the field at fault. A NaN or
/// infinite number is refused: JSON has no such numbers, so it would reach the daemon as `null` and the field
/// would be silently dropped.
pub fn parse_job_file(path: &Path, text: &str) -> Result<JobFile> {
    let file: JobFile = toml::from_str(text).map_err(|e| {
        let at = e.span().map(|s| {
            let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
            let key = text.lines().nth(line - 1).and_then(|l| l.split_once('=')).map(|(k, _)| k.trim().to_string());
            match key {
                Some(k) if !k.is_empty() => format!("line {line}, field `{k}`: "),
                _ => format!("line {line}: "),
            }
        });
        CliError::new(EXIT_OTHER, format!("{}: {}{}", path.display(), at.unwrap_or_default(), e.message()))
    })?;
    if let Some(bad) = spillway_core::config::first_non_finite(text) {
        let msg = format!("{}: line {}, field `{}`: {}", path.display(), bad.line, bad.key, bad.message());
        return Err(CliError::new(EXIT_OTHER, msg).into());
    }
    Ok(file)
}

/// Returns the submission: the job file (if any) with the flags laid over it.
pub fn build_submit(args: &SubmitArgs, file: JobFile) -> Result<JobSubmit> {
    let mut env = file.env;
    env.extend(args.env.iter().cloned());
    let argv = if args.argv.is_empty() { file.argv.unwrap_or_default() } else { args.argv.clone() };
    if argv.is_empty() {
        return Err(CliError::new(
            2,
            "no command: give it after `--` (spillway submit -- python3 train.py) or as argv in --file",
        )
        .into());
    }
    // `workers` and `max_workers` name one thing: a flag under either name overrides the file's under either.
    let (workers, max_workers) = if args.workers.is_some() || args.max_workers.is_some() {
        (args.workers, args.max_workers)
    } else {
        (file.workers, file.max_workers)
    };
    Ok(JobSubmit {
        name: args.name.clone().or(file.name),
        tier: args.tier.clone().or(file.tier).unwrap_or_else(|| "p1".to_string()),
        team: args.team.clone().or(file.team),
        gpus: args.gpus.or(file.gpus).unwrap_or(1),
        workers,
        max_workers,
        min_workers: args.min_workers.or(file.min_workers),
        argv,
        env,
        // Relative paths in the command mean what they mean where it was typed (Slurm's default too).
        workdir: match args.workdir.clone().or(file.workdir) {
            Some(dir) => Some(dir),
            None => Some(submit_dir()?),
        },
        gpu_model: args.gpu_model.clone().or(file.gpu_model),
        interruptible: args.interruptible.or(file.interruptible),
        checkpoint_interval_s: args.checkpoint_interval_s.or(file.checkpoint_interval_s),
        deadline_s: args.deadline_s.or(file.deadline_s),
        expected_duration_s: args.expected_duration_s.or(file.expected_duration_s),
        checkpoint_gb: args.checkpoint_gb.or(file.checkpoint_gb),
        data_region: args.data_region.clone().or(file.data_region),
    })
}

/// Reads a job file, refusing one larger than a job can be (the server takes 1 MiB; a job file may hold comments,
/// so 16 MiB): reading `/dev/zero` grew without end.
fn read_job_file(p: &std::path::Path) -> Result<String> {
    use std::io::Read;
    const MOST: u64 = 16 << 20;
    let f = std::fs::File::open(p).with_context(|| format!("reading {}", p.display()))?;
    let mut bytes = Vec::new();
    f.take(MOST + 1).read_to_end(&mut bytes).with_context(|| format!("reading {}", p.display()))?;
    if bytes.len() as u64 > MOST {
        anyhow::bail!("{}: a job file is at most 16 MiB", p.display());
    }
    String::from_utf8(bytes).map_err(|e| anyhow::anyhow!("{}: not UTF-8 text: {e}", p.display()))
}

/// Returns the directory `submit` runs in, as a job's default workdir; an error when it is gone or its path is
/// not UTF-8 (the job would otherwise start somewhere the user did not mean).
fn submit_dir() -> Result<String> {
    let dir = std::env::current_dir()
        .map_err(|e| anyhow::anyhow!("the current directory cannot be read ({e}); pass --workdir"))?;
    dir.to_str()
        .map(String::from)
        .ok_or_else(|| anyhow::anyhow!("the current directory {} is not UTF-8; pass --workdir", dir.display()))
}

/// Runs one daemon command; errors carry their exit code as a [`CliError`].
pub fn run(cmd: CtlCommand) -> Result<()> {
    match cmd {
        CtlCommand::Submit(args) => {
            let file = match &args.file {
                Some(p) => parse_job_file(p, &read_job_file(p)?)?,
                None => JobFile::default(),
            };
            let submit = build_submit(&args, file)?;
            let client = connect(&args.conn)?;
            let v: Value = client.post_json("/v1/jobs", Some(&submit))?;
            let id = v["id"].as_u64().unwrap_or_default() as u32;
            let said = |j: JobView| format!("submitted job {} ({}, team {})\n", j.id, j.tier, j.team);
            if args.follow && args.conn.output == crate::client::Output::Table {
                // Its output follows on stdout: `submit --follow ... > out` keeps only the job's.
                eprint!("{}", said(serde_json::from_value(v)?));
            } else {
                show(v, args.conn.output, said)?;
            }
            if args.follow {
                logs(&client, id, true)?;
            }
            if args.wait || args.follow {
                return wait_for_job(&client, id);
            }
            Ok(())
        }
        CtlCommand::Jobs { conn, command } => {
            let client = connect(&conn)?;
            let now = now();
            match command {
                JobsCommand::Ls { state, team, tier, limit } => {
                    let q = query(&[("state", state), ("team", team), ("tier", tier)]);
                    let jobs = client.get_list("/v1/jobs", &q, limit as usize)?;
                    show(Value::Array(jobs), conn.output, |js: Vec<JobView>| jobs_table(&js, now))
                }
                JobsCommand::Show { id } => {
                    show(client.get_json(&format!("/v1/jobs/{id}"), &[])?, conn.output, |j: JobView| {
                        job_detail(&j, now)
                    })
                }
                JobsCommand::Cancel { id } => {
                    let v: Value = client.post_json::<(), _>(&format!("/v1/jobs/{id}/cancel"), None)?;
                    show(v, conn.output, |j: JobView| format!("job {}: {}\n", j.id, j.state))
                }
                JobsCommand::Logs { id, follow } => logs(&client, id, follow),
            }
        }
        CtlCommand::Nodes { conn, command } => {
            let client = connect(&conn)?;
            let (path, body) = match command {
                NodesCommand::Ls { all } => {
                    let mut v: Value = client.get_json("/v1/nodes", &[])?;
                    if let (false, Some(list)) = (all, v.as_array_mut()) {
                        list.retain(|n| LIVE_NODE_STATES.contains(&n["state"].as_str().unwrap_or_default()));
                    }
                    return show(v, conn.output, |n: Vec<NodeView>| nodes_table(&n));
                }
                NodesCommand::Interrupt { id } => (format!("/v1/nodes/{id}/interrupt"), None),
                NodesCommand::Protect { id, off } => {
                    (format!("/v1/nodes/{id}/protect"), Some(Protect { protected: !off }))
                }
            };
            let v: Value = client.post_json(&path, body.as_ref())?;
            show(v, conn.output, |n: NodeView| {
                format!("node {} ({}): {}{}\n", n.id, n.pool, n.state, if n.protected { ", protected" } else { "" })
            })
        }
        CtlCommand::Pools { conn, command } => {
            let client = connect(&conn)?;
            let v: Value = match command {
                PoolsCommand::Ls => {
                    return show(client.get_json("/v1/pools", &[])?, conn.output, |p: Vec<PoolView>| pools_table(&p));
                }
                PoolsCommand::Scale { name, min, max } => {
                    let v: Value = client.post_json(
                        &format!("/v1/pools/{}/scale", segment(&name)),
                        Some(&PoolScale { min_nodes: min, max_nodes: max }),
                    )?;
                    // Lowering max below the pool's nodes removes some: say which, so it is not a surprise.
                    if let Ok(p) = serde_json::from_value::<PoolView>(v.clone())
                        && p.nodes > p.max_nodes
                    {
                        let (gone, max) = (p.nodes - p.max_nodes, p.max_nodes);
                        eprintln!(
                            "warning: pool {} has {} live, above its new max of {max}: {} {}, the idle ones now and \
                             the busy ones as their jobs end",
                            p.name,
                            if p.nodes == 1 { "1 node".to_string() } else { format!("{} nodes", p.nodes) },
                            gone,
                            if gone == 1 { "goes" } else { "go" }
                        );
                    }
                    v
                }
                PoolsCommand::Protect { name, off } => client
                    .post_json(&format!("/v1/pools/{}/protect", segment(&name)), Some(&Protect { protected: !off }))?,
                PoolsCommand::WhatIf { name, max, ignore_cooldown } => {
                    let mut q = query(&[("max_nodes", max.map(|m| m.to_string()))]);
                    if ignore_cooldown {
                        q.push(("ignore_cooldown", "true".to_string()));
                    }
                    let v = client.get_json(&format!("/v1/pools/{}/what-if", segment(&name)), &q)?;
                    return show(v, conn.output, |w: WhatIfView| what_if_text(&w));
                }
            };
            show(v, conn.output, |p: PoolView| pools_table(&[p]))
        }
        CtlCommand::Events { conn, job, node, pool, kind, limit } => {
            let client = connect(&conn)?;
            let q = query(&[
                ("job", job.map(|j| j.to_string())),
                ("node", node.map(|n| n.to_string())),
                ("pool", pool),
                ("kind", kind),
            ]);
            let events = client.get_list("/v1/events", &q, limit as usize)?;
            show(Value::Array(events), conn.output, |e: Vec<EventView>| events_table(&e))
        }
        CtlCommand::Cost { conn, since, until } => {
            let client = connect(&conn)?;
            let q = query(&[
                ("since", since.map(|s| instant(&s)).transpose()?),
                ("until", until.map(|s| instant(&s)).transpose()?),
            ]);
            show(client.get_json("/v1/cost", &q)?, conn.output, |c: CostView| cost_table(&c))
        }
        CtlCommand::Explain { conn, what } => {
            let client = connect(&conn)?;
            let path = match what {
                ExplainCommand::Job { id } => format!("/v1/explain/job/{id}"),
                ExplainCommand::Pool { name } => format!("/v1/explain/pool/{}", segment(&name)),
            };
            show(client.get_json(&path, &[])?, conn.output, |e: ExplainView| explain_text(&e))
        }
        CtlCommand::Budgets { conn } => {
            let client = connect(&conn)?;
            show(client.get_json("/v1/budgets", &[])?, conn.output, |b: Vec<BudgetView>| budgets_table(&b))
        }
    }
}

/// Polls job `id` until it ends; prints how, and fails with the job's status as the exit code (see `--wait`).
fn wait_for_job(client: &Client, id: u32) -> Result<()> {
    loop {
        let job: JobView = client.get_json(&format!("/v1/jobs/{id}"), &[])?;
        let code: u8 = match (job.state.as_str(), job.exit_code, job.exit_signal) {
            ("succeeded", ..) => {
                eprintln!("job {id} succeeded");
                return Ok(());
            }
            ("failed", Some(c), _) => c.clamp(1, 255) as u8,
            ("failed", None, Some(sig)) => (128 + sig).clamp(1, 255) as u8,
            ("failed", None, None) | ("cancelled", ..) => 1,
            _ => {
                std::thread::sleep(std::time::Duration::from_secs(1));
                continue;
            }
        };
        let how = match (job.exit_code, job.exit_signal) {
            (Some(c), _) => format!(" with exit code {c}"),
            (None, Some(s)) => format!(" by signal {s}"),
            _ => String::new(),
        };
        return Err(crate::client::CliError::new(code, format!("job {id} {}{how}", job.state)).into());
    }
}

/// Prints a job's log; with `follow`, polls every second and prints the new bytes until the job is final.
fn logs(client: &Client, id: u32, follow: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    // Each rank's log is read on its own, byte for byte, from where the last read ended. Followed, a gang's ranks
    // are printed a whole line at a time, each line with its rank, so they never split each other's lines; a
    // single rank's bytes go out as they come (progress bars and prompts have no newline).
    let mut ranks: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut line_start = true;
    loop {
        // The state is read before the logs, so the last read happens after the job was seen final.
        let job: JobView = client.get_json(&format!("/v1/jobs/{id}"), &[])?;
        let done = !follow || matches!(job.state.as_str(), "succeeded" | "failed" | "cancelled");
        ranks.resize(job.workers.max(1) as usize, (0, Vec::new()));
        let gang = ranks.len() > 1;
        for (rank, (from, partial)) in ranks.iter_mut().enumerate() {
            loop {
                let q = [("rank", rank.to_string()), ("from", from.to_string())];
                let chunk = client.get_bytes(&format!("/v1/jobs/{id}/logs"), &q)?;
                if chunk.is_empty() {
                    break;
                }
                *from += chunk.len() as u64;
                partial.extend_from_slice(&chunk);
            }
            if !follow || !gang {
                if !follow && gang {
                    // Each rank's header on a line of its own, whatever the rank before ended with.
                    let sep = if line_start { "" } else { "\n" };
                    writeln!(out, "{sep}==> rank {rank} <==")?;
                }
                out.write_all(partial)?;
                line_start = partial.last().is_none_or(|&b| b == b'\n');
                partial.clear();
                continue;
            }
            let whole = partial.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let rest = partial.split_off(whole);
            // A gang job that ended may leave a last line without its newline.
            let tail = if done && !rest.is_empty() { [rest.as_slice(), b"\n"].concat() } else { Vec::new() };
            for line in partial.split_inclusive(|&b| b == b'\n').chain(tail.split_inclusive(|&b| b == b'\n')) {
                write!(out, "[rank {rank}] ")?;
                out.write_all(line)?;
            }
            *partial = if done { Vec::new() } else { rest };
        }
        out.flush()?;
        if done {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Parses a positive, finite number of seconds (`nan` and `inf` would reach the daemon as JSON `null`).
fn positive_secs(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(x) => Err(format!("{x} is not a positive, finite number of seconds")),
        Err(e) => Err(format!("`{s}`: {e}")),
    }
}

/// Parses a size in GB: a finite number >= 0 (a non-finite one would reach the daemon as `null`, dropping the size).
fn gigabytes(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        Ok(x) => Err(format!("{x} is not a size in GB (a finite number >= 0)")),
        Err(e) => Err(format!("`{s}`: {e}")),
    }
}

/// Returns the seconds since the Unix epoch (the CLI, unlike the core, may read the clock: ages are shown against it).
#[allow(clippy::disallowed_methods)]
pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Returns `rows` under `headers` with columns padded to their widest cell, one line each.
pub fn render_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// Returns a duration as `45s`, `12m05s`, `3h04m` or `2d03h` (the style of every output, from the core).
pub fn fmt_duration(secs: f64) -> String {
    spillway_core::time::fmt_duration(secs.max(0.0))
}

/// Returns an epoch time in RFC 3339, UTC (`2026-12-02T05:40:00Z`): one token, with its zone.
pub fn fmt_time(at: f64) -> String {
    let secs = at.floor() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (y, m, d) = spillway_core::time::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn list(ids: &[u32]) -> String {
    if ids.is_empty() { "-".into() } else { ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",") }
}

/// Returns how long a job waited in the queue before its (last) start, or has waited so far, as of `now`.
fn job_waited(j: &JobView, now: f64) -> String {
    // When the wait before attempt `i` began: its submission, or the end of the attempt before it.
    let since = |i: usize| match i.checked_sub(1).and_then(|k| j.attempts.get(k)) {
        Some(a) => a.ended_at.unwrap_or(a.started_at),
        None => j.submitted_at,
    };
    let n = j.attempts.len();
    let waited = match j.attempts.last() {
        // Requeued: waiting again since its last attempt ended.
        Some(_) if j.state == "queued" => now - since(n),
        Some(a) => a.started_at - since(n - 1),
        None => match j.started_at {
            // A view without its attempts: from its first start.
            Some(s) if j.state != "queued" => s - j.submitted_at,
            // Cancelled before it ever started: it waited until it ended.
            _ => j.ended_at.unwrap_or(now) - j.submitted_at,
        },
    };
    fmt_duration(waited.max(0.0))
}

/// Returns how long a job's (last) attempt has run or ran, as of `now`; `-` while it waits or if it never ran.
fn job_ran(j: &JobView, now: f64) -> String {
    if j.state == "queued" {
        return "-".into();
    }
    // From its last attempt's start (a job requeued once has a first start long before), where the view has it.
    let last = j.attempts.last().map(|a| (a.started_at, a.ended_at));
    match last.or(j.started_at.map(|s| (s, None))) {
        Some((s, end)) => fmt_duration((end.or(j.ended_at).unwrap_or(now) - s).max(0.0)),
        None => "-".into(),
    }
}

/// Returns the jobs table: ID NAME TIER TEAM STATE ATTEMPT GPUS NODES WAITED RAN REASON.
pub fn jobs_table(jobs: &[JobView], now: f64) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let gpus = if j.workers > 1 { format!("{}x{}", j.workers, j.gpus) } else { j.gpus.to_string() };
            // A job that ended by itself says how; one waiting says why.
            let reason = j.pending_reason.clone().or_else(|| exit_text(j)).unwrap_or_else(|| "-".into());
            vec![
                j.id.to_string(),
                j.name.clone(),
                j.tier.clone(),
                j.team.clone(),
                j.state.clone(),
                j.attempt.to_string(),
                gpus,
                list(&j.nodes),
                job_waited(j, now),
                job_ran(j, now),
                reason,
            ]
        })
        .collect();
    let head = ["ID", "NAME", "TIER", "TEAM", "STATE", "ATTEMPT", "GPUS", "NODES", "WAITED", "RAN", "REASON"];
    render_table(&head, &rows)
}

/// Returns one job in detail: the table row plus its command, times and interruptions.
fn job_detail(j: &JobView, now: f64) -> String {
    let t = |at: Option<f64>| at.map(fmt_time).unwrap_or_else(|| "-".into());
    let exit = |code: Option<i32>, signal: Option<i32>| match (code, signal) {
        (Some(c), _) => format!(" ExitCode={c}"),
        (None, Some(s)) => format!(" Signal={s}"),
        _ => String::new(),
    };
    let mut out = format!(
        "JobId={} Name={} Tier={} Team={}\n   State={}{}{} Attempts={} Interruptions={} Preemptions={}\n   \
         Gpus={} Workers={} Nodes={} Cost=${:.2}\n   SubmitTime={} StartTime={} EndTime={} Waited={}\n   Command={}\n",
        j.id,
        if j.name.is_empty() { "-" } else { &j.name },
        j.tier,
        j.team,
        j.state,
        j.pending_reason.as_ref().map_or(String::new(), |r| format!(" Reason={r}")),
        exit(j.exit_code, j.exit_signal),
        j.attempt,
        j.interruptions,
        j.preemptions,
        j.gpus,
        j.workers,
        list(&j.nodes),
        j.cost_usd,
        fmt_time(j.submitted_at),
        t(j.started_at),
        t(j.ended_at),
        job_waited(j, now),
        j.argv.iter().map(|a| visible(a)).collect::<Vec<_>>().join(" ")
    );
    if let Some(d) = &j.pending_detail {
        out += &format!("   Waiting={d}\n");
    }
    if let Some(s) = &j.spot_state {
        out += &format!("   Spot={s}\n");
    }
    if j.checkpoint_gb.is_some() || j.data_region.is_some() {
        let gb = j.checkpoint_gb.map_or("-".into(), |g| format!("{g}GB"));
        let region = j.data_region.as_deref().unwrap_or("-");
        out += &format!("   Data={gb} DataRegion={region} Egress=${:.2}\n", j.egress_usd);
    }
    for a in &j.attempts {
        out += &format!(
            "   Attempt={} Nodes={} Start={} End={} Ended={}{} Cost=${:.2}\n",
            a.attempt,
            list(&a.nodes),
            fmt_time(a.started_at),
            t(a.ended_at),
            a.end.as_deref().unwrap_or("running"),
            exit(a.exit_code, a.exit_signal),
            a.cost_usd
        );
    }
    out
}

/// Returns `s` with its control characters escaped (`\n`, `\u{1b}`): a job's command may hold any of them (a
/// script's newlines), and printed raw an escape sequence would act on the terminal of whoever looks at the job.
fn visible(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// Returns how a job that ended by itself exited (`exit code 3`, `signal 9`), when its agent reported it.
fn exit_text(j: &JobView) -> Option<String> {
    spillway_core::Exit::of(j.exit_code, j.exit_signal).map(|e| e.to_string())
}

/// Returns a what-if answer for people: the launches, and why the pool would still buy less than asked.
fn what_if_text(w: &WhatIfView) -> String {
    let launches: Vec<String> = w.launches.iter().map(|l| format!("{} x {}", l.nodes, l.instance_type)).collect();
    let what = if launches.is_empty() { "nothing".to_string() } else { launches.join(", ") };
    let why = w.not_grown_detail.as_ref().map_or(String::new(), |d| format!("; still short: {d}"));
    let usable = match (w.may_use, w.jobs) {
        (_, 0) => String::new(),
        (0, _) => format!("; none of them may use pool {} (tier, market or GPU model)", w.pool),
        (u, j) if u < j => format!(" ({u} of them may use pool {})", w.pool),
        _ => String::new(),
    };
    format!("pool {} at max {}: would launch {what} for {} waiting jobs{usable}{why}\n", w.pool, w.max_nodes, w.jobs)
}

/// Returns the nodes table: ID POOL TYPE MARKET STATE GPUS FREE JOBS (a protected node's state says so).
pub fn nodes_table(nodes: &[NodeView]) -> String {
    // The Slurm name only when some node has one (a cluster behind Slurm).
    let slurm = nodes.iter().any(|n| n.slurm_name.is_some());
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let state = if n.protected { format!("{} (protected)", n.state) } else { n.state.clone() };
            let mut row = vec![
                n.id.to_string(),
                n.pool.clone(),
                n.instance_type.clone().unwrap_or_else(|| "-".into()),
                n.market.clone(),
                state,
                n.gpus.to_string(),
                n.free_gpus.to_string(),
                list(&n.jobs),
            ];
            if slurm {
                row.push(n.slurm_name.clone().unwrap_or_else(|| "-".into()));
            }
            row
        })
        .collect();
    let mut headers = vec!["ID", "POOL", "TYPE", "MARKET", "STATE", "GPUS", "FREE", "JOBS"];
    if slurm {
        headers.push("SLURM");
    }
    render_table(&headers, &rows)
}

/// Returns the pools table: NAME MARKET NODES READY MIN MAX GPUS BUSY (a protected pool's name says so).
pub fn pools_table(pools: &[PoolView]) -> String {
    let rows: Vec<Vec<String>> = pools
        .iter()
        .map(|p| {
            let name = if p.protected { format!("{} (protected)", p.name) } else { p.name.clone() };
            vec![
                name,
                p.market.clone(),
                p.nodes.to_string(),
                p.ready_nodes.to_string(),
                p.min_nodes.to_string(),
                p.max_nodes.to_string(),
                p.gpus.to_string(),
                p.busy_gpus.to_string(),
            ]
        })
        .collect();
    render_table(&["NAME", "MARKET", "NODES", "READY", "MIN", "MAX", "GPUS", "BUSY"], &rows)
}

/// Returns the events table: TIME (UTC) KIND SUBJECT REASON DETAIL.
pub fn events_table(events: &[EventView]) -> String {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| vec![fmt_time(e.at), e.kind.clone(), e.subject.clone(), e.reason.clone(), e.detail.clone()])
        .collect();
    render_table(&["TIME", "KIND", "SUBJECT", "REASON", "DETAIL"], &rows)
}

/// Returns the cost breakdown: one row per (group, key) with USD, total, idle and egress first (egress is in no
/// pool's or market's row); market rows also give the node-hours paid for.
pub fn cost_table(c: &CostView) -> String {
    let usd = |v: f64| format!("{v:.2}");
    let dash = || "-".to_string();
    let mut rows = vec![
        vec!["total".to_string(), dash(), usd(c.total_usd), dash()],
        vec!["idle".to_string(), dash(), usd(c.idle_usd), dash()],
        vec!["egress".to_string(), dash(), usd(c.egress_usd), dash()],
    ];
    for (group, map) in [("team", &c.by_team), ("tier", &c.by_tier), ("pool", &c.by_pool), ("market", &c.by_market)] {
        rows.extend(map.iter().map(|(k, v)| {
            let hours = match group {
                "market" => c.node_hours_by_market.get(k).map_or_else(dash, |h| format!("{h:.3}")),
                _ => dash(),
            };
            vec![group.to_string(), k.clone(), usd(*v), hours]
        }));
    }
    render_table(&["GROUP", "KEY", "USD", "NODE_HOURS"], &rows)
}

/// Renders an explanation: the subject, then one reason a line (with until when, in UTC).
pub fn explain_text(e: &ExplainView) -> String {
    let mut out = format!("{}\n", e.subject);
    for r in &e.reasons {
        let until = r.until.map(|u| format!(" (until {})", fmt_time(u))).unwrap_or_default();
        out += &format!("  - {}{until} [{}]\n", r.text, r.code);
    }
    out
}

/// Renders budgets as a table.
pub fn budgets_table(budgets: &[BudgetView]) -> String {
    if budgets.is_empty() {
        return "no budgets ([[budgets]] in the config sets them)\n".into();
    }
    let rows: Vec<Vec<String>> = budgets
        .iter()
        .map(|b| {
            let share = if b.limit_usd > 0.0 { b.spent_usd / b.limit_usd * 100.0 } else { 0.0 };
            let cap = match (b.hard_cap, b.capping) {
                (_, true) => "capping",
                (true, false) => "set",
                (false, _) => "-",
            };
            vec![
                b.team.clone(),
                b.period.clone(),
                format!("{:.2}", b.spent_usd),
                format!("{:.2}", b.limit_usd),
                format!("{share:.1}%"),
                cap.into(),
            ]
        })
        .collect();
    render_table(&["TEAM", "PERIOD", "SPENT_USD", "LIMIT_USD", "SPENT", "HARD_CAP"], &rows)
}

#[cfg(test)]
#[path = "ctl_tests.rs"]
mod tests;
