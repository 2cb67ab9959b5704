//! The daemon: the state machine of [`crate::control`] on a real clock. Startup (data dir lock, store, replay,
//! tokens), the executor that runs provider calls concurrently, outside the state lock, and feeds their results
//! back, and the stop that follows a store failure.

use crate::datadir::{DataDir, Marker, TokenFile, ct_eq, new_token, token_hash};
use crate::state::{ApplyError, Effect, State, StateOptions};
use crate::store::{Entry, Store};
use crate::tokens::TokenUse;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use spillway_api::{Heartbeat, HeartbeatReply};
use spillway_core::{Config, Engine, Event, NodeId, Time};
use spillway_providers::{Provider, ProviderError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Daemon settings that are not part of the cluster config.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub data_dir: std::path::PathBuf,
    /// Where jobs' checkpoint and log directories live (`job-N/`); default `<data_dir>/jobs`.
    pub jobs_dir: Option<std::path::PathBuf>,
    /// A ready node whose agent is silent this long is lost (its jobs are requeued).
    pub heartbeat_timeout: Duration,
    /// A launched node whose agent has not registered this long after its expected boot is a failed launch.
    pub boot_grace: Duration,
    pub tick: Duration,
    /// Seed of the injected spot interruptions.
    pub seed: u64,
    /// Start over on a store that lost data (the old one is set aside), instead of refusing to start.
    pub reinit: bool,
    /// Run jobs as this Unix user (the daemon must run as root). Jobs' directories then live outside the data
    /// dir (default `<data_dir>-jobs`, traversable but not listable), since the data dir is the daemon's alone.
    pub run_as: Option<String>,
    /// When set, `GET /metrics` needs this bearer token (or the admin token): cost by team is not for everyone.
    /// Unset, `/metrics` is open to whoever reaches the listen address.
    pub metrics_token: Option<String>,
}

impl DaemonOptions {
    /// Returns where jobs' directories live: the given one, `<data_dir>-jobs` with `run_as`, else `<data_dir>/jobs`.
    pub fn jobs_dir(&self) -> std::path::PathBuf {
        match (&self.jobs_dir, &self.run_as) {
            (Some(d), _) => d.clone(),
            (None, Some(_)) => std::path::PathBuf::from(format!("{}-jobs", self.data_dir.display())),
            (None, None) => self.data_dir.join("jobs"),
        }
    }
}

/// Everything the HTTP handlers and the background tasks share.
pub struct Shared {
    state: Mutex<State>,
    pub provider: Arc<dyn Provider>,
    pub opts: DaemonOptions,
    pub cluster_id: String,
    /// SHA-256 of each user token -> who it is.
    principals: Vec<(String, Principal)>,
    /// The plain tokens, for the operator (also in `tokens.json`).
    pub tokens: TokenFile,
    pub data_dir: DataDir,
    rng: Mutex<ChaCha8Rng>,
    /// The wall clock at start and a monotonic clock since: `now_ms` never runs backwards.
    clock: (Time, Instant),
    /// Set when the daemon must stop (a store write failed for good).
    pub stop: tokio::sync::Notify,
    marker_seq: Mutex<i64>,
    /// Slurm, when the config has a `[slurm]` table.
    pub slurm: Option<crate::slurm::Slurm>,
    /// The budget alert webhook's sender, when `[alerts] webhook` is set.
    alerts: Option<crate::webhook::Webhook>,
}

/// Who a bearer token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Admin,
    Team(String),
}

/// Returns the wall clock in ms since the epoch (the shell reads the clock; the core never does).
pub fn now_ms() -> Time {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    d.as_millis() as Time
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    DataDir(#[from] crate::datadir::DataDirError),
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

impl Shared {
    /// Opens the locked data dir, checks the store against what the directory remembers and the config against
    /// the one the store was created with, rebuilds the engine by replaying the log, and loads or creates the user
    /// tokens (their hashes in the store, the tokens in `tokens.json` and `client.json`, with `url`).
    pub fn open(
        data_dir: DataDir,
        opts: DaemonOptions,
        config_name: &str,
        config_text: &str,
        provider: Arc<dyn Provider>,
        url: &str,
    ) -> Result<Shared, StartError> {
        if let Err(e) = data_dir.check_db_file()
            && !opts.reinit
        {
            return Err(e.into());
        }
        let mut store = Store::open(&data_dir.db_path())?;
        if let Err(e) = data_dir.check_store(store.meta("cluster_id")?.as_deref(), store.last_seq()) {
            if !opts.reinit {
                return Err(e.into());
            }
            eprintln!("spillway: --reinit: {e}");
            drop(store);
            data_dir.set_aside_store().map_err(|e| StartError::Config(format!("setting the old store aside: {e}")))?;
            store = Store::open(&data_dir.db_path())?;
        }
        let (text, start) = stored_config(&store, &opts, config_name, config_text)?;
        let cfg = Config::parse(config_name, &text).map_err(|e| StartError::Config(e.to_string()))?;
        for w in cfg.warnings() {
            eprintln!("spillway: {config_name}: warning: {w}");
        }
        let slurm = crate::slurm::Slurm::from_config(config_name, &text, &cfg).map_err(StartError::Config)?;
        let alerts = cfg.alerts.webhook.clone().map(crate::webhook::Webhook::start);
        let cluster_id = match store.meta("cluster_id")? {
            Some(id) => id,
            None => {
                let suffix = new_token().map_err(|e| StartError::Config(format!("no randomness: {e}")))?;
                let id = format!("{}-{}", cfg.cluster.name, &suffix[..8]);
                store.set_meta("cluster_id", &id)?;
                // The marker comes before the tokens: a directory with tokens and a store always has one (a start
                // that stopped in between would otherwise be refused as a store whose length cannot be checked).
                data_dir
                    .write_marker(&Marker { cluster_id: id.clone(), log_seq: store.last_seq() })
                    .map_err(|e| StartError::Config(format!("writing {}/store.json: {e}", opts.data_dir.display())))?;
                id
            }
        };
        let (principals, tokens) = user_tokens(&store, &data_dir, &cfg, url)?;
        let jobs_dir = opts.jobs_dir();
        make_jobs_dir(&jobs_dir, opts.run_as.is_some())
            .map_err(|e| StartError::Config(format!("creating {}: {e}", jobs_dir.display())))?;
        let sopts = StateOptions {
            jobs_dir,
            cluster_id: cluster_id.clone(),
            heartbeat_timeout_ms: opts.heartbeat_timeout.as_millis() as Time,
            boot_grace_ms: opts.boot_grace.as_millis() as Time,
            reconcile_every_ms: 60_000,
            max_backlog: (crate::state::MAX_BACKLOG_JOBS, crate::state::MAX_BACKLOG_BYTES),
        };
        let now = now_ms();
        let mut state = State::new(Engine::new(cfg, start), store, sopts, now);
        // A node Slurm says does not answer, in three syncs and for the heartbeat timeout at least, is lost.
        let heartbeat = opts.heartbeat_timeout.as_millis() as Time;
        state.slurm_liveness_ms = slurm.as_ref().map_or(0, |s| ((s.opts.sync_every_s * 3000.0) as Time).max(heartbeat));
        state.replay()?;
        let seq = state.store.last_seq();
        data_dir
            .write_marker(&Marker { cluster_id: cluster_id.clone(), log_seq: seq })
            .map_err(|e| StartError::Config(format!("writing {}/store.json: {e}", opts.data_dir.display())))?;
        Ok(Shared {
            state: Mutex::new(state),
            provider,
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(opts.seed)),
            opts,
            cluster_id,
            principals,
            tokens,
            data_dir,
            clock: (now, Instant::now()),
            stop: tokio::sync::Notify::new(),
            marker_seq: Mutex::new(seq),
            slurm,
            alerts,
        })
    }

    /// Returns the daemon's clock: wall time at start plus monotonic time since, in ms since the epoch.
    pub fn now(&self) -> Time {
        self.clock.0 + self.clock.1.elapsed().as_millis() as Time
    }

    /// Locks the state (a poisoned lock is taken over: the state is consistent between statements that log).
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns who a user bearer token belongs to (admin or a team), or `None` for an unknown token. Compares
    /// digests in constant time.
    pub fn principal(&self, token: &str) -> Option<Principal> {
        let hash = token_hash(token);
        let mut found = None;
        for (h, p) in &self.principals {
            if ct_eq(h, &hash) {
                found = Some(p.clone());
            }
        }
        found
    }

    /// Returns whether `token` may read `/metrics`: any request when no metrics token is set, else the metrics
    /// token or the admin token (compared in constant time).
    pub fn may_read_metrics(&self, token: Option<&str>) -> bool {
        let Some(want) = &self.opts.metrics_token else { return true };
        let Some(token) = token else { return false };
        ct_eq(&token_hash(want), &token_hash(token)) || self.principal(token) == Some(Principal::Admin)
    }

    /// Returns the teams of this daemon (the config's, and `default` where the config names none), sorted.
    pub fn team_names(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .principals
            .iter()
            .filter_map(|(_, p)| match p {
                Principal::Team(t) => Some(t.as_str()),
                Principal::Admin => None,
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Returns whether `team` is a team of this daemon.
    pub fn has_team(&self, team: &str) -> bool {
        self.principals.iter().any(|(_, p)| matches!(p, Principal::Team(t) if t == team))
    }

    /// Returns the node an agent token belongs to (the node of the launch it was issued for), if any.
    pub fn node_of_token(&self, token: &str) -> Option<u32> {
        self.state().node_of_token(token)
    }

    /// Returns the directory of job `id` (its `checkpoints/` and `logs/`).
    pub fn job_dir(&self, id: u32) -> std::path::PathBuf {
        self.state().opts.jobs_dir.join(format!("job-{id}"))
    }

    /// Returns every team's token, for the operator.
    pub fn team_tokens(&self) -> BTreeMap<String, String> {
        self.tokens.teams.clone()
    }

    /// Stops the daemon when the state hit a store failure it cannot go on from.
    pub(crate) fn check_fatal(&self, st: &State) {
        if st.fatal.is_some() {
            self.stop.notify_one();
        }
    }

    /// Reconciles the replayed state with the provider at startup (see [`State::reconcile`]).
    pub fn reconcile(self: &Arc<Self>) -> Result<(), ProviderError> {
        let asked = self.now();
        let listed = self.provider.list(&self.cluster_id)?;
        let mut st = self.state();
        let done = st.reconcile(self.now(), &listed, asked, true);
        self.check_fatal(&st);
        drop(st);
        done.map_err(|e| ProviderError::Transient(e.to_string()))?;
        self.flush();
        Ok(())
    }

    /// One tick of the ticker; records the log's length in the data dir's marker when it grew.
    pub fn tick(self: &Arc<Self>, dt: Duration) {
        let mut st = self.state();
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = st.tick(self.now(), dt.as_millis() as Time, &mut *rng) {
            eprintln!("spillway: tick: {e}");
        }
        drop(rng);
        self.check_fatal(&st);
        let seq = st.store.last_seq();
        drop(st);
        let mut marked = self.marker_seq.lock().unwrap_or_else(|p| p.into_inner());
        if seq != *marked {
            match self.data_dir.write_marker(&Marker { cluster_id: self.cluster_id.clone(), log_seq: seq }) {
                Ok(()) => *marked = seq,
                Err(e) => eprintln!("spillway: writing the store marker: {e}"),
            }
        }
        drop(marked);
        self.flush();
    }

    /// Polls the provider's spot prices for the config's spot types and hands the changes to the engine.
    pub fn refresh_spot_prices(self: &Arc<Self>) {
        let types: Vec<String> = {
            let st = self.state();
            let cfg = st.engine.config();
            cfg.instance_types.iter().filter(|t| t.spot_usd_per_hour.is_some()).map(|t| t.name.clone()).collect()
        };
        if types.is_empty() {
            return;
        }
        match self.provider.spot_prices(&types) {
            Ok(prices) => {
                let mut st = self.state();
                if let Err(e) = st.spot_prices(self.now(), &prices) {
                    eprintln!("spillway: spot prices: {e}");
                }
                self.check_fatal(&st);
                drop(st);
                self.flush();
            }
            // The config's prices (or the last ones polled) stand.
            Err(e) => eprintln!("spillway: polling spot prices: {e}"),
        }
    }

    /// Acts on a notice from the provider (see [`State::notice`]).
    pub fn notice(self: &Arc<Self>, notice: &spillway_providers::Notice) {
        let mut st = self.state();
        if let Err(e) = st.notice(self.now(), notice) {
            eprintln!("spillway: notice for instance {}: {e}", notice.instance_id);
        }
        self.check_fatal(&st);
        drop(st);
        self.flush();
    }

    /// Handles a heartbeat whose token (`token`) was checked to be node `hb.node`'s; the reply may hand the agent
    /// its session token (see `tokens`).
    pub fn heartbeat(self: &Arc<Self>, hb: &Heartbeat, token: &str) -> Result<Option<HeartbeatReply>, ApplyError> {
        let mut st = self.state();
        let now = self.now();
        // The token moves first: a heartbeat on the session token retires the launch token and may get work in
        // this reply; one still on the launch token gets its session token and no work, so no job runs on a
        // node whose launch token (readable there, as cloud user-data) still counts.
        let reply = match st.rotate_token(now, hb.node, &token_hash(token), hb.session_tokens) {
            Err(e) => Err(e),
            Ok(TokenUse::Void) => Ok(None),
            Ok(TokenUse::Launch(session)) => {
                st.heartbeat_with(now, hb, false).map(|r| r.map(|r| HeartbeatReply { new_token: Some(session), ..r }))
            }
            Ok(TokenUse::Current) => st.heartbeat_with(now, hb, true),
        };
        self.check_fatal(&st);
        drop(st);
        self.flush();
        reply
    }

    /// Runs the pending provider calls, each on its own blocking thread; results come back into the state.
    pub fn flush(self: &Arc<Self>) {
        let effects = std::mem::take(&mut self.state().effects);
        for effect in effects {
            let me = self.clone();
            let spec = match &effect {
                Effect::Launch { node, token } => self.state().launch_spec(*node, token),
                _ => None,
            };
            tokio::task::spawn_blocking(move || me.execute(effect, spec));
        }
    }

    /// Carries out one effect and reports its result.
    fn execute(self: &Arc<Self>, effect: Effect, spec: Option<spillway_providers::LaunchSpec>) {
        match effect {
            Effect::Launch { node, .. } => {
                let Some(spec) = spec else { return };
                let result = self.provider.launch(&spec).map(|i| i.id);
                let mut st = self.state();
                let _ = st.launch_result(self.now(), node, result);
                self.check_fatal(&st);
            }
            Effect::Terminate { node } => {
                if self.terminate_node(node) {
                    self.state().terminated(node);
                }
            }
            Effect::Fence { node } => {
                let done = self.terminate_node(node);
                let mut st = self.state();
                let _ = st.fenced(self.now(), node, done);
                self.check_fatal(&st);
            }
            Effect::TerminateInstance { id } => match self.provider.terminate(&id) {
                Ok(()) | Err(ProviderError::NotFound(_)) => {}
                Err(e) => eprintln!("spillway: terminating orphan instance {id}: {e}"),
            },
            Effect::SlurmHandBack { name, reason } => self.slurm_hand_back(&name, &reason),
            Effect::Alert { body } => {
                if let Some(w) = &self.alerts {
                    w.send(body);
                }
            }
            Effect::List => {
                let asked = self.now();
                match self.provider.list(&self.cluster_id) {
                    Ok(listed) => {
                        let mut st = self.state();
                        let _ = st.reconcile(self.now(), &listed, asked, false);
                        self.check_fatal(&st);
                    }
                    Err(e) => eprintln!("spillway: listing instances: {e}"),
                }
            }
        }
        self.flush();
    }

    /// Terminates what the provider holds for `node`; returns whether nothing of it is left.
    fn terminate_node(&self, node: u32) -> bool {
        // The instance id is the provider's business: when the launch's answer was lost (a restart), ask the
        // provider which instance is this node's.
        let known = self.state().instances.get(&node).cloned();
        let id = match known {
            Some(id) => Some(id),
            None => match self.provider.list(&self.cluster_id) {
                Ok(list) => list.into_iter().find(|i| i.node == node).map(|i| i.id),
                Err(e) => {
                    eprintln!("spillway: listing instances to terminate node {node}: {e}");
                    return false;
                }
            },
        };
        let Some(id) = id else { return true };
        match self.provider.terminate(&id) {
            Ok(()) | Err(ProviderError::NotFound(_)) => true,
            Err(e) => {
                eprintln!("spillway: terminating node {node} ({id}): {e}");
                false
            }
        }
    }

    /// Before a graceful stop that terminates the nodes: hands out no more work and waits (at most `limit`) until
    /// every live node has sent two heartbeats since, so exits of jobs that just finished are logged, not lost
    /// with the nodes (a finished job whose exit was lost would run again after the restart).
    pub async fn drain_exits(&self, limit: Duration) {
        let since: BTreeMap<u32, u64> = {
            let mut st = self.state();
            st.stopping = true;
            let alive: Vec<u32> = st.engine.cluster().nodes.iter().filter(|n| n.alive()).map(|n| n.id.0).collect();
            alive.into_iter().map(|n| (n, st.beat_seq_of(n))).collect()
        };
        let start = Instant::now();
        while start.elapsed() < limit {
            let done = {
                let st = self.state();
                // Slurm's nodes run no agent: Slurm has their jobs' exits.
                since.iter().all(|(&n, &s)| !st.alive(n) || st.held(n) || st.beat_seq_of(n) >= s + 2)
            };
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("spillway: some agents did not report within {} s of the stop", limit.as_secs());
    }

    /// Terminates every live instance of this cluster (graceful shutdown of `spillway up`).
    pub fn terminate_all(&self) {
        let Ok(list) = self.provider.list(&self.cluster_id) else { return };
        let handles: Vec<_> = list
            .into_iter()
            .map(|i| {
                let p = self.provider.clone();
                std::thread::spawn(move || (i.node, p.terminate(&i.id)))
            })
            .collect();
        let mut stopped = Vec::new();
        for h in handles {
            if let Ok((node, Ok(()) | Err(ProviderError::NotFound(_)))) = h.join() {
                stopped.push(node);
            }
        }
        // Their jobs stop now, in the log, so no job is billed or counted as running while the daemon is down; the
        // cloud nodes end now too. Owned nodes stay: the restarted daemon starts their agents again.
        let mut st = self.state();
        let now = self.now();
        for node in stopped {
            if st.engine.cluster().nodes.get(node as usize).is_some_and(|n| n.alive()) {
                let _ = st.apply(now, Entry::Event(Event::NodeStopped { node: NodeId(node) }));
            }
        }
    }
}

/// Creates the jobs' directory root: owner-only, or with `run_as` traversable (0711) so each job's own directory
/// (created by the agent, owned by the job's user, 0700) can be reached but the root not listed.
fn make_jobs_dir(dir: &std::path::Path, run_as: bool) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // The path may be guessable (`<data-dir>-jobs`): one someone else made, or a symlink, is refused, not used.
    if let Ok(m) = std::fs::symlink_metadata(dir) {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if m.file_type().is_symlink() || !m.is_dir() || m.uid() != me {
            return Err(std::io::Error::other(format!(
                "{} exists and is not a directory of the daemon's user (a symlink, a file, or owned by uid {});                  remove it or pass another --jobs-dir",
                dir.display(),
                m.uid()
            )));
        }
    }
    crate::datadir::private_dir(dir)?;
    if run_as {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))?;
    }
    Ok(())
}

/// Returns the config and start time the store was created with (recording them on first use); refuses another
/// config than the store's.
fn stored_config(
    store: &Store,
    opts: &DaemonOptions,
    config_name: &str,
    config_text: &str,
) -> Result<(String, Time), StartError> {
    match (store.meta("config")?, store.meta("start_ms")?) {
        (Some(stored), Some(start)) => {
            if stored != config_text {
                return Err(StartError::Config(format!(
                    "{}: the data directory {} was created with another config; use that config, or a new --data-dir",
                    config_name,
                    opts.data_dir.display()
                )));
            }
            let start = start.parse::<Time>().map_err(|e| StartError::Config(format!("stored start_ms: {e}")))?;
            Ok((stored, start))
        }
        _ => {
            let start = now_ms();
            store.set_meta("config", config_text)?;
            store.set_meta("start_ms", &start.to_string())?;
            Ok((config_text.to_string(), start))
        }
    }
}

/// Loads the user tokens: a token from `tokens.json` whose hash the store holds is kept; a missing one is created
/// (its hash stored). Plain tokens an older version kept in the store move to the files. Writes the token files.
fn user_tokens(
    store: &Store,
    dir: &DataDir,
    cfg: &Config,
    url: &str,
) -> Result<(Vec<(String, Principal)>, TokenFile), StartError> {
    let file = dir.read_tokens();
    let mut teams: BTreeSet<String> = cfg.teams.iter().map(|t| t.name.clone()).collect();
    teams.insert("default".into());
    let mut out = TokenFile { server: url.to_string(), ..Default::default() };
    let mut principals = Vec::new();
    let admin = one_token(store, "admin", Some(&file.admin))?;
    principals.push((token_hash(&admin), Principal::Admin));
    out.admin = admin;
    for t in teams {
        let tok = one_token(store, &format!("team:{t}"), file.teams.get(&t))?;
        principals.push((token_hash(&tok), Principal::Team(t.clone())));
        out.teams.insert(t, tok);
    }
    dir.write_tokens(&out)
        .map_err(|e| StartError::Config(format!("writing the token files in {}: {e}", dir.path.display())))?;
    Ok((principals, out))
}

/// Returns the token of `who`: the file's when its hash matches the store's, else the plain one an older version
/// stored (moved out of the store), else a new one (and a warning when it replaces a stored hash).
fn one_token(store: &Store, who: &str, from_file: Option<&String>) -> Result<String, StartError> {
    let key = format!("token_hash:{who}");
    let stored = store.meta(&key)?;
    if let (Some(h), Some(t)) = (&stored, from_file)
        && ct_eq(h, &token_hash(t))
    {
        return Ok(t.clone());
    }
    let legacy_key = if who == "admin" {
        "admin_token".to_string()
    } else {
        format!("team_token:{}", who.trim_start_matches("team:"))
    };
    let token = match (store.meta(&legacy_key)?, &stored) {
        (Some(plain), None) => plain,
        _ => {
            if stored.is_some() {
                eprintln!("spillway: the {who} token is not in tokens.json; issuing a new one");
            }
            new_token().map_err(|e| StartError::Config(format!("no randomness for a token: {e}")))?
        }
    };
    store.set_meta(&key, &token_hash(&token))?;
    store.delete_meta(&legacy_key)?;
    Ok(token)
}
