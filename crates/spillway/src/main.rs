//! The `spillway` command line: `simulate`, `config check`, `trace convert`, `forecast`.

mod forecast;
mod simulate;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Spillway: elastic GPU capacity for ML training. Keeps the owned baseline busy and spills peaks onto cloud
/// on-demand and spot capacity by priority and within budget.
#[derive(Parser)]
#[command(name = "spillway", version)]
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
    /// Forecast a demand series: fit on all but its last week, score that week against seasonal-naive.
    Forecast(forecast::Args),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a config file; every error names the key and the line.
    Check { file: PathBuf },
}

#[derive(Subcommand)]
enum TraceCommand {
    /// Convert a trace in any supported format to the native CSV format (stdout unless --out).
    Convert {
        file: PathBuf,
        #[arg(long, default_value = "native")]
        format: String,
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    match Cli::parse().command {
        Command::Simulate(args) => simulate::run(args),
        Command::Forecast(args) => forecast::run(args),
        Command::Config { command: ConfigCommand::Check { file } } => {
            let cfg = simulate::load_config(Some(&file))?;
            let nodes: u32 = cfg.pools.iter().flat_map(|p| &p.nodes).map(|n| n.count).sum();
            println!(
                "{}: ok ({} tiers, {} teams, {} instance types, {} pools, {} fixed nodes, {} schedules)",
                file.display(),
                cfg.tiers.len(),
                cfg.teams.len(),
                cfg.instance_types.len(),
                cfg.pools.len(),
                nodes,
                cfg.schedules.len()
            );
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
