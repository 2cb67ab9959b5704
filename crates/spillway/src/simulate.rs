//! `spillway simulate`: load a config and a trace (or generate a workload), run every policy, print the summary
//! and write the report files.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use spillway_core::Config;
use spillway_sim::report::InputReport;
use spillway_sim::run::{EventWriter, compare, summary_table, write_outputs};
use spillway_sim::sim::{Check, SimOptions};
use spillway_sim::trace::{self, TraceFormat, workload::Bursty};
use std::path::{Path, PathBuf};

/// The config `simulate` uses when none is given.
const BUILTIN_CONFIG: &str = include_str!("../../../examples/hybrid.toml");

#[derive(clap::Args)]
pub struct Args {
    /// Cluster config (TOML); default: the built-in hybrid cluster (examples/hybrid.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Job trace to replay; default: a seeded synthetic workload.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Trace format (helios: a demand series replayed as p1 jobs).
    #[arg(long, default_value = "native", value_parser = ["native", "alibaba2023", "tiresias", "helios"])]
    format: String,
    /// Synthetic workload when no trace is given (bursty: a seeded week of mixed-tier bursts).
    #[arg(long, default_value = "bursty", value_parser = ["bursty"])]
    workload: String,
    /// Jobs of the synthetic workload.
    #[arg(long, default_value_t = 2000)]
    jobs: usize,
    /// Days of the synthetic workload.
    #[arg(long, default_value_t = 7.0, value_parser = parse_days)]
    days: f64,
    /// Seed of the synthetic workload and of every random draw (boot times, interruptions): a run reproduces
    /// from it.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory for report.json, timeseries.csv, events.jsonl and report.html.
    #[arg(long, default_value = "out")]
    out: PathBuf,
    /// Drive a spot offering's capacity from a trace: POOL:INSTANCE_TYPE=FILE (spot-traces JSON, or a Bamboo
    /// `.csv` event log). Repeatable.
    #[arg(long = "spot-trace")]
    spot_trace: Vec<String>,
    /// Run the engine's full invariant check after every step (slow; for debugging).
    #[arg(long)]
    check_full: bool,
}

/// Returns the config at `path`, or the built-in one.
pub fn load_config(path: Option<&Path>) -> Result<Config> {
    let (name, text) = match path {
        Some(p) => (
            p.display().to_string(),
            std::fs::read_to_string(p).with_context(|| format!("reading config {}", p.display()))?,
        ),
        None => ("<built-in examples/hybrid.toml>".to_string(), BUILTIN_CONFIG.to_string()),
    };
    Ok(Config::parse(&name, &text)?)
}

pub fn run(args: Args) -> Result<()> {
    let cfg = load_config(args.config.as_deref())?;
    let trace = match &args.trace {
        Some(path) => {
            let format: TraceFormat = args.format.parse().map_err(anyhow::Error::msg)?;
            trace::load(path, format)?
        }
        None => match args.workload.as_str() {
            "bursty" => {
                let mut t = Bursty { jobs: args.jobs, days: args.days, seed: args.seed }.generate();
                let teams: Vec<String> = cfg.teams.iter().map(|t| t.name.clone()).collect();
                trace::workload::use_teams(&mut t, &teams);
                let largest = |tier: &str| cfg.tier_index(tier).map_or(0, |i| cfg.largest_node_gpus(i, None));
                let widest = |tier: &str, g: u32| {
                    let i = cfg.tier_index(tier);
                    let room = i.and_then(|i| cfg.largest_gang(i, g, None, cfg.tiers[i].interruptible));
                    room.map_or(u32::MAX, |r| r.workers)
                };
                let changed = trace::workload::fit_gangs(&mut t, largest, widest);
                if changed > 0 {
                    eprintln!(
                        "note: {changed} generated jobs were reshaped to fit this config's nodes and pool maxes \
                         (more workers of the largest node; gangs cut to the widest their tier can hold)"
                    );
                }
                t
            }
            other => anyhow::bail!("unknown workload `{other}` (expected bursty)"),
        },
    };
    let jobs = spillway_sim::input::to_sim_jobs(&trace, &cfg)?;
    let pool_markets = cfg.pools.iter().map(|p| (p.name.clone(), p.market.as_str().to_string())).collect();
    let input = InputReport {
        pool_markets,
        source: trace.source.clone(),
        config: args.config.as_ref().map_or("built-in hybrid".into(), |p| p.display().to_string()),
        jobs: jobs.len(),
        skipped: trace.skipped.iter().cloned().collect(),
        total_gpu_hours: jobs
            .iter()
            .map(|j| (j.spec.gpus_per_worker * j.spec.workers) as f64 * j.duration_ms as f64 / 3.6e6)
            .sum(),
    };
    let bar = ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} jobs {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let tick = bar.clone();
    let progress =
        spillway_sim::sim::Progress(Some(std::sync::Arc::new(move |done, _| tick.set_position(done as u64))));
    let spot_traces =
        args.spot_trace.iter().map(|a| spillway_sim::spot::resolve(&cfg, a)).collect::<Result<Vec<_>, _>>()?;
    // Decisions go to events.jsonl as they are made: a long trace's records are never all held in memory.
    // They go to `events.jsonl.partial`, renamed when the run has ended and every other output is written; the
    // outputs of an earlier run in the same dir are removed first, so a dir never mixes two runs.
    if args.out.exists() && !args.out.is_dir() {
        anyhow::bail!("--out {} is not a directory", args.out.display());
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    for old in ["report.json", "timeseries.csv", "events.jsonl", "report.html"] {
        let path = args.out.join(old);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing the earlier {}", path.display()));
            }
            _ => {}
        }
    }
    let events_path = args.out.join("events.jsonl.partial");
    let events = std::fs::File::create(&events_path).with_context(|| format!("creating {}", events_path.display()))?;
    let (writer, decisions_to) = EventWriter::new(std::io::BufWriter::new(events), cfg.start_ms).into_sink();
    let opts = SimOptions {
        seed: args.seed,
        record: true,
        check: if args.check_full { Check::Full } else { Check::Step },
        spot_traces,
        progress,
        decisions_to,
        ..SimOptions::default()
    };
    // The shell may read the clock (only the core may not): this times the run for the user.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let cmp = compare(&cfg, &jobs, input, &opts, |policy| {
        bar.set_position(0);
        bar.set_message(format!("simulating {policy}"));
    })?;
    bar.finish_and_clear();
    // The source names the seed of a generated workload already; a trace's run still says which seed it used.
    let seed = if args.trace.is_some() { format!(" (seed {})", args.seed) } else { String::new() };
    say(&format!(
        "{} jobs from {} on {}{seed}, {:.2} s\n\n",
        jobs.len(),
        trace.source,
        cmp.report.input.config,
        started.elapsed().as_secs_f64()
    ));
    say(&summary_table(&cmp.report));
    writer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .finish()
        .with_context(|| format!("writing {}", events_path.display()))?;
    write_outputs(&args.out, &cmp, cfg.start_ms)
        .with_context(|| format!("writing reports to {}", args.out.display()))?;
    let done = args.out.join("events.jsonl");
    std::fs::rename(&events_path, &done)
        .with_context(|| format!("renaming {} to {}", events_path.display(), done.display()))?;
    say(&format!(
        "\nwrote {0}/report.json, {0}/timeseries.csv, {0}/events.jsonl, {0}/report.html\n",
        args.out.display()
    ));
    Ok(())
}

/// Prints `text` to stdout; a reader that went away (`simulate | head`) is no error, so the outputs are still
/// written.
fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Parses `--days`: a number of days above 0 and at most ten years (the generator has no meaning for others).
fn parse_days(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(d) if d.is_finite() && d > 0.0 && d <= 3650.0 => Ok(d),
        _ => Err(format!("`{s}` is not a number of days above 0 and at most 3650")),
    }
}
