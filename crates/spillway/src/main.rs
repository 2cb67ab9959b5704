//! The `spillway` command line: `up`, `server`, `agent`, the API client commands (`submit`, `jobs`, `nodes`, `pools`,
//! `events`, `cost`), `simulate`, `config check`, `trace convert`, `forecast`.

mod daemon_cmd;
mod demo;
mod forecast;
mod simulate;
mod slurm_cmd;
// CLI over the daemon's HTTP API (submit, jobs, nodes, pools, events, cost).
mod client;
mod ctl;
mod window;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Spillway: elastic GPU capacity for ML training. Keeps the owned baseline busy and spills peaks onto cloud
/// on-demand and spot capacity by priority and within budget.
#[derive(Parser)]
#[command(name = "spillway", version, after_help = client::EXIT_CODES_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a job trace (or a built-in synthetic workload) through the engine beside reference policies.
    Simulate(simulate::Args),
    /// Work with cluster configurations.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Work with job traces.
    Trace {
        #[command(subcommand)]
        command: TraceCommand,
    },
    /// Start the daemon on embedded defaults (SQLite store, local provider, API on 127.0.0.1); --demo shows it work.
    Up(daemon_cmd::UpArgs),
    /// Run the daemon with a config: the engine on a real clock, the store, the API, the provider.
    Server(daemon_cmd::ServerArgs),
    /// Run a node agent (the local provider starts these; not for direct use).
    #[command(hide = true)]
    Agent(daemon_cmd::AgentArgs),
    /// Forecast a demand series: fit on all but its last week, score that week at 10m-2h against persistence and
    /// seasonal-naive (overall and on rising buckets).
    Forecast(forecast::Args),
    /// Print a shell completion script: `source <(spillway completions bash)`, or save it where your shell looks.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Slurm's power-saving programs: `slurm resume HOSTLIST`, `slurm suspend HOSTLIST` (see docs/slurm.md).
    Slurm {
        #[command(subcommand)]
        command: slurm_cmd::SlurmCommand,
    },
    // ---- CLI over the daemon's HTTP API: submit, jobs, nodes, pools, events, cost (see ctl.rs). ----
    #[command(flatten)]
    Ctl(ctl::CtlCommand),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a config file: every unknown key and wrong type at once (with line, column and "did you mean"),
    /// then the first semantic error; prints warnings for settings that are valid but likely wrong.
    Check {
        /// The config file (TOML; examples/*.toml, docs/config.md has every key).
        file: PathBuf,
    },
    /// Print a config as the engine reads it: the file's own keys, or with --effective every default filled in.
    Show {
        /// The config file (TOML).
        file: PathBuf,
        /// Fill in every default (tiers merged with the built-in p0, p1, p2).
        #[arg(long)]
        effective: bool,
    },
    /// Print the reference of every config key, its type, default and meaning (docs/config.md).
    Reference,
}

#[derive(Subcommand)]
enum TraceCommand {
    /// Convert a trace in any supported format to the native CSV format (stdout unless --out).
    Convert {
        /// The trace file to read.
        file: PathBuf,
        /// The format of FILE (the output is always native CSV).
        #[arg(long, default_value = "native", value_parser = ["native", "alibaba2023", "tiresias", "helios"])]
        format: String,
        /// Where to write the native CSV (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            // Daemon commands carry their exit code (see client::EXIT_CODES_HELP); everything else exits 1.
            match e.chain().find_map(|c| c.downcast_ref::<client::CliError>()) {
                Some(c) => ExitCode::from(c.code),
                None => ExitCode::FAILURE,
            }
        }
    }
}

fn run() -> Result<()> {
    match Cli::parse().command {
        Command::Simulate(args) => simulate::run(args),
        Command::Forecast(args) => forecast::run(args),
        Command::Up(args) => daemon_cmd::up(args),
        Command::Server(args) => daemon_cmd::server(args),
        Command::Agent(args) => daemon_cmd::agent(args),
        Command::Ctl(cmd) => ctl::run(cmd),
        Command::Slurm { command } => slurm_cmd::run(command),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            use std::io::Write;
            // Into a buffer first: the generator panics on a write error (a closed pipe), this does not.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "spillway", &mut script);
            match std::io::stdout().write_all(&script) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(()),
            }
        }
        Command::Config { command: ConfigCommand::Check { file } } => config_check(&file),
        Command::Config { command: ConfigCommand::Show { file, effective } } => config_show(&file, effective),
        Command::Config { command: ConfigCommand::Reference } => {
            print!("{}", spillway_core::config::schema::reference());
            Ok(())
        }
        Command::Trace { command: TraceCommand::Convert { file, format, out } } => {
            let format: spillway_sim::trace::TraceFormat = format.parse().map_err(anyhow::Error::msg)?;
            let trace = spillway_sim::trace::load(&file, format)?;
            match out {
                Some(path) => {
                    let f = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
                    spillway_sim::trace::native::write(&trace, std::io::BufWriter::new(f))?;
                }
                None => spillway_sim::trace::native::write(&trace, std::io::stdout().lock())?,
            }
            Ok(())
        }
    }
}

/// `spillway config show FILE [--effective]`: the file's keys re-written as TOML, or the effective config.
fn config_show(file: &std::path::Path, effective: bool) -> Result<()> {
    let cfg = simulate::load_config(Some(file))?;
    let text = if effective {
        cfg.effective_toml().map_err(anyhow::Error::msg)?
    } else {
        let raw = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let table: toml::Table = toml::from_str(&raw).with_context(|| format!("reading {}", file.display()))?;
        toml::to_string(&table)?
    };
    print!("{text}");
    Ok(())
}

/// `spillway config check FILE`: the engine's config, the `[provider]` and `[slurm]` tables; prints a summary.
fn config_check(file: &std::path::Path) -> Result<()> {
    let cfg = simulate::load_config(Some(file))?;
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let provider = daemon_cmd::check_provider(&cfg, &file.display().to_string(), &text)?;
    let name = file.display().to_string();
    let slurm = match spillway_server::slurm::SlurmOptions::from_config(&name, &text, &cfg) {
        Ok(Some(s)) => format!("; slurm: {} nodes in {} sets", s.node_names().len(), s.nodes.len()),
        Ok(None) => String::new(),
        Err(e) => anyhow::bail!(e),
    };
    for w in cfg.warnings() {
        eprintln!("{}: warning: {w}", file.display());
    }
    let nodes = cfg.pools.iter().flat_map(|p| &p.nodes).map(|n| n.count).fold(0u32, u32::saturating_add);
    let counted = [
        (cfg.tiers.len(), "tier"),
        (cfg.teams.len(), "team"),
        (cfg.instance_types.len(), "instance type"),
        (cfg.pools.len(), "pool"),
        (nodes as usize, "fixed node"),
        (cfg.schedules.len(), "schedule"),
    ];
    let counted: Vec<String> = counted.iter().map(|&(n, what)| plural(n, what)).collect();
    println!("{}: ok ({}; {provider}{slurm})", file.display(), counted.join(", "));
    Ok(())
}

/// Returns `n` and `noun`, plural unless `n` is 1 (`1 pool`, `3 pools`).
fn plural(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Returns `path: --arg` for every argument of `cmd` and its subcommands that has no help text.
    fn without_help(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        let path = format!("{path} {}", cmd.get_name());
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") || arg.is_hide_set() {
                continue;
            }
            if arg.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                out.push(format!("{path}: {id}"));
            }
        }
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
            if sub.get_about().is_none() {
                out.push(format!("{path} {}: (no about)", sub.get_name()));
            }
            without_help(sub, &path, out);
        }
    }

    #[test]
    fn every_command_and_argument_has_help() {
        let mut missing = Vec::new();
        without_help(&Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "no help on:\n{}", missing.join("\n"));
    }
}
