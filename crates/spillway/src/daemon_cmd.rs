//! `spillway up`, `spillway server` and `spillway agent`: the daemon on embedded defaults (or a config), and the node
//! agent the local provider starts.

use anyhow::{Context, Result};
use spillway_providers::Provider;
use spillway_server::{DaemonOptions, ServeOptions, Started};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The built-in cluster of `spillway up`.
const LOCAL_CONFIG: &str = include_str!("../../../examples/local.toml");
/// The demo's training script, written into the data directory.
const TRAIN_PY: &str = include_str!("../../../examples/train.py");

#[derive(clap::Args, Clone)]
pub struct ServerArgs {
    /// Cluster config (TOML); default: the built-in local cluster (examples/local.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address of the API; loopback unless you choose otherwise.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Where the store (SQLite), logs, checkpoints and agent records live.
    #[arg(long, env = "SPILLWAY_DATA_DIR", default_value = ".spillway")]
    data_dir: PathBuf,
    /// Seconds without a heartbeat before a node is lost and its jobs requeued.
    #[arg(long, default_value_t = 10.0)]
    heartbeat_timeout_s: f64,
    /// Seed of injected spot interruptions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// On a graceful stop leave the nodes running (a restarted daemon adopts them); default: terminate them.
    #[arg(long)]
    keep_nodes: bool,
    /// Start over when the store lost data (empty, replaced, or shorter than the data directory remembers); the
    /// old store is set aside as spillway.db.replaced-PID. Without it the daemon refuses to start on such a store.
    #[arg(long)]
    reinit: bool,
    /// Run jobs as this Unix user (the daemon must run as root): jobs cannot read the daemon's data dir or its
    /// tokens (all jobs share the user, so they can read each other's files). Without it jobs run as the daemon's
    /// user and can read what it can.
    #[arg(long, value_name = "USER")]
    run_as: Option<String>,
    /// Where jobs' checkpoint and log directories live (default: <data-dir>/jobs, or <data-dir>-jobs with --run-as).
    #[arg(long, value_name = "DIR")]
    jobs_dir: Option<PathBuf>,
    /// Make GET /metrics need this token (a 0600 file of one line; Prometheus reads the same file with
    /// `authorization: {credentials_file: FILE}`); the admin token works too. Default: /metrics is open.
    #[arg(long, value_name = "FILE")]
    metrics_token_file: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct UpArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Also submit a burst of mixed-tier jobs running examples/train.py and narrate what happens.
    #[arg(long)]
    demo: bool,
    /// With --demo: stop the daemon once the demo is over (jobs done, cloud pools back to zero).
    #[arg(long)]
    exit_after_demo: bool,
    /// Do not print the decisions as they are made (without --demo, `up` streams them to the terminal).
    #[arg(long)]
    quiet: bool,
}

#[derive(clap::Args)]
pub struct AgentArgs {
    #[arg(long)]
    server: String,
    #[arg(long)]
    node: u32,
    /// Read the node token from the first line of stdin (as the local provider passes it). The only way in: the
    /// agent's command line and environment are readable by its jobs.
    #[arg(long)]
    token_stdin: bool,
    #[arg(long)]
    gpus: u32,
    #[arg(long)]
    data_dir: PathBuf,
    #[arg(long, default_value_t = 0.0)]
    boot_delay_s: f64,
    #[arg(long, default_value_t = 500)]
    heartbeat_ms: u64,
    /// Run jobs as this Unix user (the agent must run as root).
    #[arg(long)]
    run_as: Option<String>,
    /// Poll the EC2 instance metadata service at this URL for spot interruption and rebalance notices (the AWS
    /// provider's user-data passes it).
    #[arg(long, value_name = "URL")]
    imds_url: Option<String>,
    /// The address other nodes reach this node at, for the jobs whose rank 0 runs here (`MASTER_ADDR`, the
    /// rendezvous endpoint). Default: the local address of this machine's route to --server.
    #[arg(long, value_name = "ADDR")]
    advertise_addr: Option<String>,
}

/// Runs the node agent until its node is terminated.
pub fn agent(a: AgentArgs) -> Result<()> {
    if !a.token_stdin {
        anyhow::bail!("the node token comes on stdin: pass --token-stdin and write the token and a newline");
    }
    let token = spillway_agent::read_token(std::io::stdin().lock())?;
    spillway_agent::run(spillway_agent::AgentArgs {
        server: a.server,
        node: a.node,
        token,
        gpus: a.gpus,
        data_dir: a.data_dir,
        boot_delay_s: a.boot_delay_s,
        heartbeat_ms: a.heartbeat_ms,
        run_as: a.run_as,
        imds_url: a.imds_url,
        advertise_addr: a.advertise_addr,
    })
}

/// `spillway server`: the daemon, until SIGINT or SIGTERM.
pub fn server(a: ServerArgs) -> Result<()> {
    run_daemon(a, |s, _| {
        println!("spillway server listening on {} (replayed {} jobs from the store)", s.url, s.replayed);
    })
}

/// `spillway up`: the daemon on embedded defaults, with how to use it; `--demo` drives a demo against it.
pub fn up(a: UpArgs) -> Result<()> {
    let (demo, exit_after, quiet) = (a.demo, a.exit_after_demo, a.quiet);
    let data_dir = a.server.data_dir.clone();
    run_daemon(a.server, move |s, stop| {
        let dir = data_dir.display();
        println!("spillway is up: API {} (store {dir}/spillway.db, local provider: nodes are agent processes)", s.url);
        println!("  admin token in {dir}/client.json (the CLI reads it); team tokens in {dir}/tokens.json");
        println!("  submit a job:  spillway submit --tier p1 --gpus 1 -- python3 -c 'print(\"hello\")'");
        println!("  watch:         spillway jobs ls; spillway nodes ls; spillway events; spillway cost");
        println!("  stop:          Ctrl-C (terminates the nodes)");
        if !demo && !quiet {
            println!("decisions as they are made (--quiet: none):");
            let (url, token) = (s.url.clone(), s.admin_token.clone());
            std::thread::spawn(move || crate::demo::stream(&url, &token));
        }
        if demo {
            let (url, token, dir) = (s.url.clone(), s.admin_token.clone(), data_dir.clone());
            std::thread::spawn(move || {
                if let Err(e) = crate::demo::run(&url, &token, &dir) {
                    eprintln!("demo: {e:#}");
                }
                if exit_after {
                    stop();
                }
            });
        }
    })
}

/// Starts the daemon; `started(info, stop)` runs once it serves (`stop` ends it like Ctrl-C would).
fn run_daemon(a: ServerArgs, started: impl FnOnce(&Started, Box<dyn Fn() + Send>) + Send + 'static) -> Result<()> {
    let (name, text) = match &a.config {
        Some(p) => (
            p.display().to_string(),
            spillway_sim::trace::read_text(p).map_err(|e| anyhow::anyhow!("reading config {}: {e}", p.display()))?,
        ),
        None => ("<built-in examples/local.toml>".to_string(), LOCAL_CONFIG.to_string()),
    };
    // Check the config before anything starts, so a typo is a clear error and not a half-started daemon.
    let cfg = spillway_core::Config::parse(&name, &text)?;
    let provider = provider(&cfg, &name, &text)?;
    spillway_server::datadir::private_dir(&a.data_dir).with_context(|| format!("creating {}", a.data_dir.display()))?;
    let data_dir = std::fs::canonicalize(&a.data_dir).with_context(|| format!("resolving {}", a.data_dir.display()))?;
    let exe = std::env::current_exe().context("locating the spillway binary for agents")?;
    let opts = ServeOptions {
        daemon: DaemonOptions {
            data_dir: data_dir.clone(),
            heartbeat_timeout: Duration::from_secs_f64(a.heartbeat_timeout_s.max(1.0)),
            boot_grace: Duration::from_secs(60),
            tick: Duration::from_millis(200),
            seed: a.seed,
            jobs_dir: a.jobs_dir.clone(),
            reinit: a.reinit,
            run_as: a.run_as.clone(),
            metrics_token: match &a.metrics_token_file {
                Some(f) => Some(
                    crate::slurm_cmd::read_token(f)
                        .map_err(|e| anyhow::anyhow!("--metrics-token-file {}: {e}", f.display()))?,
                ),
                None => None,
            },
        },
        config_name: name,
        config_text: text,
        listen: a.listen,
        agent_command: vec![exe.display().to_string(), "agent".into()],
        stop_nodes_on_exit: !a.keep_nodes,
        provider,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    rt.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let shutdown = async move {
            let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return,
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                Some(()) = rx.recv() => {}
            }
            eprintln!("spillway: stopping");
        };
        let dir = data_dir.clone();
        spillway_server::serve(
            opts,
            move |s| {
                // Written once the daemon holds the data dir (a refused second daemon writes nothing there).
                if let Err(e) = spillway_server::datadir::write_private(&dir.join("train.py"), TRAIN_PY.as_bytes()) {
                    eprintln!("spillway: writing train.py into the data directory: {e}");
                }
                let stop: Box<dyn Fn() + Send> = Box::new(move || {
                    let _ = tx.send(());
                });
                started(s, stop);
            },
            shutdown,
        )
        .await
    })
}

/// Returns the provider the config's `[provider]` table names; `None` for the local provider (the default).
fn provider(cfg: &spillway_core::Config, file: &str, text: &str) -> Result<Option<Arc<dyn Provider>>> {
    let Some(table) = &cfg.provider else { return Ok(None) };
    match table.get("kind").and_then(|k| k.as_str()) {
        Some("aws") => aws_provider(cfg, file, text),
        _ => Ok(None),
    }
}

/// Checks the config's `[provider]` table the way the daemon would read it, without connecting anywhere; returns
/// what `config check` says of it.
pub fn check_provider(cfg: &spillway_core::Config, file: &str, text: &str) -> Result<String> {
    let Some(table) = &cfg.provider else { return Ok("local provider".into()) };
    match table.get("kind").and_then(|k| k.as_str()) {
        Some("aws") => check_aws(cfg, file, text),
        _ => Ok("local provider".into()),
    }
}

#[cfg(feature = "aws")]
fn check_aws(cfg: &spillway_core::Config, file: &str, text: &str) -> Result<String> {
    let o = spillway_aws::AwsOptions::from_config(file, text).map_err(anyhow::Error::msg)?;
    // The region the daemon would launch in: the table's, else the SDK's environment variables (a profile's
    // region is only known to the SDK, at startup).
    let env_region = || std::env::var("AWS_REGION").or_else(|_| std::env::var("AWS_DEFAULT_REGION")).ok();
    if let Some(region) = o.region.clone().or_else(env_region).filter(|r| !r.is_empty()) {
        spillway_aws::zones::check_regions(&region, &pool_places(cfg)).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    }
    Ok(format!("aws provider, launch template {}", o.launch_template))
}

#[cfg(not(feature = "aws"))]
fn check_aws(_cfg: &spillway_core::Config, _file: &str, _text: &str) -> Result<String> {
    Ok("aws provider (its settings are checked by a spillway built with --features aws)".into())
}

/// Returns where the config's cloud pools run (fixed pools are not the provider's).
#[cfg(feature = "aws")]
fn pool_places(cfg: &spillway_core::Config) -> Vec<spillway_aws::PoolPlace> {
    cfg.pools
        .iter()
        .filter(|p| p.market != spillway_core::config::Market::Fixed)
        .map(|p| spillway_aws::PoolPlace { name: p.name.clone(), region: p.region.clone(), zone: p.zone.clone() })
        .collect()
}

/// Builds the AWS provider (it checks the credentials, the launch template, the subnets and where each pool
/// launches before the daemon starts).
#[cfg(feature = "aws")]
fn aws_provider(cfg: &spillway_core::Config, file: &str, text: &str) -> Result<Option<Arc<dyn Provider>>> {
    let opts = spillway_aws::AwsOptions::from_config(file, text).map_err(anyhow::Error::msg)?;
    let p = spillway_aws::AwsProvider::new(opts).map_err(|e| anyhow::anyhow!("{file}: the AWS provider: {e}"))?;
    p.check_pools(&pool_places(cfg)).map_err(|e| anyhow::anyhow!("{file}: the AWS provider: {e}"))?;
    Ok(Some(Arc::new(p)))
}

#[cfg(not(feature = "aws"))]
fn aws_provider(_cfg: &spillway_core::Config, file: &str, _text: &str) -> Result<Option<Arc<dyn Provider>>> {
    anyhow::bail!(
        "{file}: [provider] kind = \"aws\", but this spillway was built without AWS support \
         (build it with: cargo build --release -p spillway --features aws)"
    )
}
