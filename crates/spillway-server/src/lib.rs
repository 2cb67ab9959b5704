//! The daemon shell around the engine (ARCHITECTURE.md sections 3-5): the SQLite store and log replay
//! ([`store`], [`state`]), the real clock, provider calls and agent heartbeats ([`daemon`]), and the HTTP API
//! ([`api`], [`views`], [`openapi`]). [`serve`] runs it all until a shutdown signal.

// The daemon is a shell: it reads the real clock (clippy.toml bans that for the decision code, which gets time as a
// value from here).
#![allow(clippy::disallowed_methods)]

pub mod api;
mod api_insight;
mod attempts;
pub mod control;
pub mod daemon;
pub mod datadir;
pub mod http;
pub mod metrics;
pub mod openapi;
pub mod promql;
pub mod slurm;
pub mod spot_quotes;
pub mod state;
pub mod store;
pub mod tokens;
pub mod views;
pub mod webhook;

pub use daemon::{DaemonOptions, Shared};

use anyhow::Context;
use std::net::SocketAddr;
use std::sync::Arc;

/// How often the provider's spot prices are polled.
const SPOT_PRICES_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// Everything `spillway server` needs.
pub struct ServeOptions {
    pub daemon: DaemonOptions,
    pub config_name: String,
    pub config_text: String,
    pub listen: SocketAddr,
    /// Program and leading args that start an agent (`[spillway, agent]`).
    pub agent_command: Vec<String>,
    /// On a graceful stop, terminate every node (no agent left behind). A killed daemon leaves them to be adopted.
    pub stop_nodes_on_exit: bool,
    /// Where nodes come from; `None`: the local provider (agent processes on this machine).
    pub provider: Option<Arc<dyn spillway_providers::Provider>>,
}

/// What a started daemon tells its caller.
#[derive(Debug, Clone)]
pub struct Started {
    pub url: String,
    pub admin_token: String,
    pub team_tokens: std::collections::BTreeMap<String, String>,
    pub replayed: usize,
}

/// Starts the daemon: store, replay, provider reconcile, API on `listen`, ticker. Calls `started` once it accepts
/// requests, then serves until `shutdown` resolves.
pub async fn serve(
    opts: ServeOptions,
    started: impl FnOnce(&Started),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // The data dir first: a second daemon on it fails here, naming the first's pid, before it touches anything.
    let data_dir = datadir::DataDir::lock(&opts.daemon.data_dir)?;
    if let Some(user) = &opts.daemon.run_as {
        datadir::check_run_as(user)?;
    }
    let listener =
        tokio::net::TcpListener::bind(opts.listen).await.with_context(|| format!("binding {}", opts.listen))?;
    let addr = listener.local_addr()?;
    let url = format!("http://{addr}");
    let provider = match opts.provider.clone() {
        Some(p) => p,
        None => local_provider(&opts, &url)?,
    };
    let shared =
        Arc::new(Shared::open(data_dir, opts.daemon.clone(), &opts.config_name, &opts.config_text, provider, &url)?);
    let replayed = shared.state().engine.cluster().jobs.len();
    let me = shared.clone();
    tokio::task::spawn_blocking(move || me.reconcile()).await?.context("listing the provider's instances")?;
    let ticker = {
        let me = shared.clone();
        let tick = opts.daemon.tick;
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(tick);
            iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                iv.tick().await;
                // A tick that panics (a bug in the decision code) stops the daemon as a store failure does: with its
                // ticker gone it would answer its API and decide nothing, idle nodes costing money.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| me.tick(tick))).is_err() {
                    me.state().fatal.get_or_insert_with(|| "a decision pass panicked (printed above)".into());
                    me.stop.notify_one();
                    return;
                }
            }
        })
    };
    let notices = {
        let me = shared.clone();
        tokio::spawn(async move {
            loop {
                let p = me.provider.clone();
                match tokio::task::spawn_blocking(move || p.notices()).await {
                    Ok(Ok(found)) => found.iter().for_each(|n| me.notice(n)),
                    Ok(Err(e)) => {
                        eprintln!("spillway: reading the provider's notices: {e}");
                        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                    }
                    Err(_) => return,
                }
            }
        })
    };
    let prices = {
        let me = shared.clone();
        tokio::spawn(async move {
            loop {
                let p = me.clone();
                if tokio::task::spawn_blocking(move || p.refresh_spot_prices()).await.is_err() {
                    return;
                }
                tokio::time::sleep(SPOT_PRICES_EVERY).await;
            }
        })
    };
    let slurm_sync = shared.slurm.as_ref().map(|sl| {
        let me = shared.clone();
        let every = std::time::Duration::from_secs_f64(sl.opts.sync_every_s);
        tokio::spawn(async move {
            loop {
                let p = me.clone();
                if tokio::task::spawn_blocking(move || p.slurm_sync()).await.is_err() {
                    return;
                }
                tokio::time::sleep(every).await;
            }
        })
    });
    let prometheus = shared.prometheus_loop();
    started(&Started { url, admin_token: shared.tokens.admin.clone(), team_tokens: shared.team_tokens(), replayed });
    // A store failure the daemon cannot go on from stops it like a signal would, with the error printed.
    let fatal = shared.clone();
    let drain = opts.stop_nodes_on_exit;
    let shutdown = async move {
        let graceful = tokio::select! {
            _ = shutdown => true,
            _ = fatal.stop.notified() => {
                eprintln!("spillway: stopping after a store failure");
                false
            }
        };
        // The API keeps answering heartbeats while the agents report their last exits.
        if graceful && drain {
            fatal.drain_exits(std::time::Duration::from_secs(5)).await;
        }
    };
    let app = api::router(shared.clone());
    let served = http::serve(listener, app, http::Limits::default(), shutdown).await;
    ticker.abort();
    notices.abort();
    prices.abort();
    for t in slurm_sync.into_iter().chain(prometheus) {
        t.abort();
    }
    if opts.stop_nodes_on_exit {
        let me = shared.clone();
        tokio::task::spawn_blocking(move || me.terminate_all()).await?;
    }
    served.context("serving the API")?;
    if let Some(f) = shared.state().fatal.clone() {
        anyhow::bail!("the daemon stopped: {f}");
    }
    Ok(())
}

/// Returns the local provider for `opts`: agent processes on this machine, with each pool's simulated capacity
/// per instance type.
fn local_provider(opts: &ServeOptions, url: &str) -> anyhow::Result<Arc<dyn spillway_providers::Provider>> {
    let mut capacity = std::collections::BTreeMap::new();
    let cfg = spillway_core::Config::parse(&opts.config_name, &opts.config_text)?;
    for p in &cfg.pools {
        for (t, n) in &p.capacity {
            *capacity.entry(t.clone()).or_insert(0) += *n;
        }
    }
    let mut local = spillway_providers::LocalOptions::new(
        opts.daemon.data_dir.join("provider"),
        opts.agent_command.clone(),
        url.to_string(),
    );
    local.capacity = capacity;
    local.run_as = opts.daemon.run_as.clone();
    // Slurm's nodes run slurmd; a bad [slurm] table is reported when the daemon opens its state.
    if let Ok(Some(sl)) = slurm::SlurmOptions::from_config(&opts.config_name, &opts.config_text, &cfg) {
        local.slurmd = Some((sl.slurmd, sl.conf));
    }
    Ok(Arc::new(spillway_providers::LocalProvider::new(local).context("starting the local provider")?))
}
