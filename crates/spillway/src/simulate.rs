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
    /// Jobs of the synthetic workload (at most 2,000,000).
    #[arg(long, default_value_t = 2000, value_parser = parse_jobs)]
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
    /// Drive a spot offering's capacity from a trace: POOL:INSTANCE_TYPE[:POLARITY]=FILE (spot-traces JSON, or a
    /// Bamboo `.csv` event log; POLARITY `available` or `unavailable` for a 0/1 file that does not say its own).
    /// Repeatable.
    /// A trace file with a `prices` array (as SkyNomad's GCP set) also drives the offering's spot price.
    #[arg(long = "spot-trace")]
    spot_trace: Vec<String>,
    /// Drive a spot offering's price from a trace: POOL:INSTANCE_TYPE=FILE (JSON with `metadata.gap_seconds` and a
    /// `prices` array, or a `.csv` of `seconds,usd_per_hour` rows). Every live node of the offering is billed at
    /// the price of the moment; a trace shorter than the run repeats. Repeatable, once per offering; it wins over
    /// prices inside a `--spot-trace` file.
    #[arg(long = "spot-price")]
    spot_price: Vec<String>,
    /// Which value of a 0/1 spot trace means a node can be had, for files whose `metadata.polarity` and
    /// `--spot-trace` argument do not say:
    /// `available` (1 is obtainable, as in the AWS spot-traces sets) or `unavailable` (1 is preempted or
    /// unavailable, as in SkyNomad's GCP H100 set).
    #[arg(long, default_value = "available")]
    spot_trace_polarity: spillway_sim::spot::Polarity,
    /// Run the engine's full invariant check after every step (slow; for debugging).
    #[arg(long)]
    check_full: bool,
    /// Also run a waiting-budget sweep: the same input at no wait (bursting at once), constant waits and waits
    /// per GPU-hour of job size; prints a cost-JCT table and writes sweep.json and a chart in report.html.
    #[arg(long)]
    sweep_wait: bool,
    /// Tiers the sweep varies (comma-separated); default: every tier but the first (p0 never waits).
    #[arg(long, value_delimiter = ',', requires = "sweep_wait")]
    sweep_tiers: Vec<String>,
    /// Own N GPUs, or the input's mean demand (`mean`), before every run: the first fixed pool gets the nearest
    /// whole number of nodes of its largest node size; its other node groups and other fixed pools' nodes go.
    #[arg(long, value_parser = parse_fixed_gpus)]
    fixed_gpus: Option<FixedGpus>,
    /// Jobs do not declare their run time (deadline jobs still do), as in a daemon whose users declare none:
    /// waiting budgets size a job by its team's mean run time for the tier, or an hour before the first.
    #[arg(long)]
    hide_durations: bool,
    /// Make this share (0-1) of the jobs with 2 or more GPUs elastic: G GPUs become G workers of 1 GPU that may
    /// run on as few as half of them (picked by --seed; each restart of one costs --elastic-restart). Whenever
    /// any job is elastic, the spillway run is also compared with the same jobs rigid (printed, and in the
    /// reports).
    #[arg(long, value_parser = parse_share)]
    elastic: Option<f64>,
    /// With --elastic: give the same jobs the same shape but keep them rigid (the whole report of the comparison
    /// run).
    #[arg(long, requires = "elastic")]
    elastic_rigid: bool,
    /// What each restart of an elastic job costs before it makes progress again (re-forming its group, loading
    /// its checkpoint).
    #[arg(long, default_value = "60s", value_parser = parse_nonnegative)]
    elastic_restart: f64,
}

/// Parses a share from 0 to 1.
fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a share from 0 to 1")),
    }
}

/// Parses a duration that may be zero (`60s`, `2m`, `0`).
fn parse_nonnegative(s: &str) -> Result<f64, String> {
    match spillway_core::config::parse_duration(s) {
        Ok(v) if (0.0..=86_400.0).contains(&v) => Ok(v),
        Ok(_) => Err(format!("`{s}` is not a duration from 0 to 1 day")),
        Err(e) => Err(e),
    }
}

/// What `--fixed-gpus` asks for.
#[derive(Debug, Clone, Copy)]
enum FixedGpus {
    Count(u64),
    Mean,
}

/// Parses `--fixed-gpus`: a whole number of GPUs, or `mean`.
fn parse_fixed_gpus(s: &str) -> Result<FixedGpus, String> {
    match s.trim() {
        "mean" => Ok(FixedGpus::Mean),
        n => n
            .parse::<u64>()
            .ok()
            .filter(|&g| g <= 1_000_000)
            .map(FixedGpus::Count)
            .ok_or_else(|| format!("`{s}` is not a whole number of GPUs (at most 1000000) or `mean`")),
    }
}

/// Returns the config at `path`, or the built-in one.
pub fn load_config(path: Option<&Path>) -> Result<Config> {
    let (name, text) = match path {
        Some(p) => (
            p.display().to_string(),
            spillway_sim::trace::read_text(p).map_err(|e| anyhow::anyhow!("reading config {}: {e}", p.display()))?,
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
    let mut jobs = spillway_sim::input::to_sim_jobs(&trace, &cfg)?;
    if args.hide_durations {
        for j in jobs.iter_mut().filter(|j| j.spec.deadline.is_none()) {
            j.spec.expected_duration_ms = None;
        }
    }
    if let Some(share) = args.elastic {
        let n = spillway_sim::input::make_elastic(&mut jobs, share, args.elastic_rigid, args.seed);
        let kind = if args.elastic_rigid { "rigid (the comparison run)" } else { "elastic" };
        eprintln!("note: {n} jobs reshaped to 1-GPU workers, {kind}");
    }
    let cfg = match args.fixed_gpus {
        None => cfg,
        Some(f) => {
            let mean = spillway_sim::policies::mean_gpus(&jobs);
            let gpus = match f {
                FixedGpus::Count(n) => n,
                FixedGpus::Mean => mean.round() as u64,
            };
            let c = spillway_sim::policies::with_fixed_gpus(&cfg, gpus).map_err(anyhow::Error::msg)?;
            let owned: u64 =
                c.pools.iter().flat_map(|p| &p.nodes).map(|n| u64::from(n.count) * u64::from(n.gpus)).sum();
            eprintln!("note: the owned pools have {owned} GPUs (asked {gpus}; the input's mean demand is {mean:.1})");
            c
        }
    };
    let sweep_tiers = sweep_tiers(&cfg, &args)?;
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
    let polarity = args.spot_trace_polarity;
    let spot_traces = args
        .spot_trace
        .iter()
        .map(|a| spillway_sim::spot::resolve(&cfg, a, polarity))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, t) in spot_traces.iter().enumerate() {
        // Two traces of one offering would be merged by their order on the command line, not by anything in them.
        if spot_traces[..i].iter().any(|u| u.pool == t.pool && u.instance_type == t.instance_type) {
            anyhow::bail!(
                "--spot-trace {}: {}:{} already has a spot trace",
                args.spot_trace[i],
                t.pool,
                t.instance_type
            );
        }
    }
    let spot_prices = spot_prices(&cfg, &args, &spot_traces)?;
    // Decisions go to events.jsonl as they are made: a long trace's records are never all held in memory.
    // They go to `events.jsonl.partial`, renamed when the run has ended and every other output is written; the
    // outputs of an earlier run in the same dir are removed first, so a dir never mixes two runs.
    if args.out.exists() && !args.out.is_dir() {
        anyhow::bail!("--out {} is not a directory", args.out.display());
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    for old in ["report.json", "timeseries.csv", "events.jsonl", "report.html", "sweep.json"] {
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
        spot_prices,
        progress,
        decisions_to,
        elastic_restart_ms: (args.elastic_restart * 1000.0).round() as i64,
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
    if let Some(e) = &cmp.report.elastic {
        say(&format!("\n{}", spillway_sim::elastic_cmp::table(e)));
    }
    let mut cmp = cmp;
    if let Some(tiers) = &sweep_tiers {
        let sweep = spillway_sim::sweep::sweep(&cfg, &jobs, tiers, &opts, |label| {
            bar.set_position(0);
            bar.set_message(format!("sweep: {label}"));
        })?;
        bar.finish_and_clear();
        say(&format!("\n{}", spillway_sim::sweep::table(&sweep)));
        cmp.sweep = Some(sweep);
    }
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
    let sweep_file = if cmp.sweep.is_some() { format!(", {}/sweep.json", args.out.display()) } else { String::new() };
    say(&format!(
        "\nwrote {0}/report.json, {0}/timeseries.csv, {0}/events.jsonl, {0}/report.html{sweep_file}\n",
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

/// Returns the tiers a sweep varies (`None` without `--sweep-wait`); an unknown name is an error listing the
/// config's tiers.
fn sweep_tiers(cfg: &Config, args: &Args) -> Result<Option<Vec<String>>> {
    if !args.sweep_wait {
        return Ok(None);
    }
    if args.sweep_tiers.is_empty() {
        return Ok(Some(spillway_sim::sweep::default_tiers(cfg)));
    }
    let mut asked = Vec::new();
    for t in args.sweep_tiers.iter().map(|t| t.trim()) {
        match cfg.tier_index(t) {
            Some(i) => asked.push(i),
            None => {
                let known: Vec<&str> = cfg.tiers.iter().map(|t| t.name.as_str()).collect();
                anyhow::bail!("--sweep-tiers: no tier `{t}` in the config (tiers: {})", known.join(", "));
            }
        }
    }
    // In the config's tier order, each once: the same set of tiers always names the same sweep.
    asked.sort_unstable();
    asked.dedup();
    Ok(Some(asked.into_iter().map(|i| cfg.tiers[i].name.clone()).collect()))
}

/// Parses `--jobs`: 1 to 2,000,000 jobs (a replay holds every job in memory, about 1.7 KB each with its reports:
/// ten million took more memory than this machine has).
fn parse_jobs(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=2_000_000).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a number of jobs from 1 to 2000000")),
    }
}

/// Parses `--days`: a number of days above 0 and at most ten years (the generator has no meaning for others).
fn parse_days(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(d) if d.is_finite() && d > 0.0 && d <= 3650.0 => Ok(d),
        _ => Err(format!("`{s}` is not a number of days above 0 and at most 3650")),
    }
}

/// Returns the price traces of a run: each `--spot-price`, and the `prices` array of each JSON `--spot-trace` file
/// (`traces` holds the resolved offerings of `args.spot_trace`, in order) whose offering no `--spot-price` names.
fn spot_prices(
    cfg: &spillway_core::Config,
    args: &Args,
    traces: &[spillway_sim::spot::OfferingTrace],
) -> anyhow::Result<Vec<spillway_sim::price::OfferingPrice>> {
    let mut out: Vec<spillway_sim::price::OfferingPrice> = Vec::new();
    for arg in &args.spot_price {
        let p = spillway_sim::price::resolve(cfg, arg)?;
        if out.iter().any(|q| q.pool == p.pool && q.instance_type == p.instance_type) {
            anyhow::bail!("--spot-price {arg}: {}:{} already has a price trace", p.pool, p.instance_type);
        }
        out.push(p);
    }
    for (arg, t) in args.spot_trace.iter().zip(traces) {
        let file = arg.split_once('=').map_or("", |(_, f)| f);
        if file.ends_with(".csv") || out.iter().any(|p| p.pool == t.pool && p.instance_type == t.instance_type) {
            continue;
        }
        let text =
            spillway_sim::trace::read_text(Path::new(file)).map_err(|e| anyhow::anyhow!("reading {file}: {e}"))?;
        if let Some(trace) = spillway_sim::price::parse_json(file, &text)? {
            let (pool, instance_type) = (t.pool.clone(), t.instance_type.clone());
            out.push(spillway_sim::price::OfferingPrice { pool, instance_type, trace });
        }
    }
    Ok(out)
}
