//! The daemon: the engine on a real clock. Startup (store, replay, tokens, reconcile with the provider), the ticker
//! (wake-ups, lost heartbeats, spot reclaims, injected interruptions), agent heartbeats, and the executor that runs
//! provider calls concurrently, outside the state lock, and feeds their results back as events.

use crate::state::{Effect, State};
use crate::store::{Entry, Store};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use spillway_api::{Heartbeat, HeartbeatReply, StopOrder, WorkerRef};
use spillway_core::{Config, Engine, Event, JobId, JobState, LaunchError, Market, NodeId, NodeState, Time};
use spillway_providers::{LaunchSpec, Provider, ProviderError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Daemon settings that are not part of the cluster config.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub data_dir: std::path::PathBuf,
    /// A ready node whose agent is silent this long is lost (its jobs are requeued).
    pub heartbeat_timeout: Duration,
    /// A launched node whose agent has not registered this long after its expected boot is a failed launch.
    pub boot_grace: Duration,
    pub tick: Duration,
    /// Seed of the injected spot interruptions.
    pub seed: u64,
}

/// Everything the HTTP handlers and the background tasks share.
pub struct Shared {
    state: Mutex<State>,
    pub provider: Arc<dyn Provider>,
    pub opts: DaemonOptions,
    pub cluster_id: String,
    /// Bearer token -> who it is.
    pub principals: BTreeMap<String, Principal>,
    pub admin_token: String,
    rng: Mutex<ChaCha8Rng>,
    /// Shell-side clocks: last heartbeat per node, and when a launch came back.
    seen: Mutex<BTreeMap<u32, Instant>>,
    launched: Mutex<BTreeMap<u32, Instant>>,
    /// Provider instance id per node.
    instances: Mutex<BTreeMap<u32, String>>,
    last_metric: Mutex<BTreeMap<u32, Instant>>,
}

/// Who a bearer token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Admin,
    Team(String),
}

/// Returns the wall clock in ms since the epoch (the shell reads the clock; the core never does).
pub fn now_ms() -> Time {
    #[allow(clippy::disallowed_methods)]
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    d.as_millis() as Time
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Apply(#[from] crate::state::ApplyError),
}

impl Shared {
    /// Opens the store in `opts.data_dir`, checks the config against the one it was created with, rebuilds the
    /// engine by replaying the log, and loads or creates the tokens. `config_text` is the config as given.
    pub fn open(opts: DaemonOptions, config_name: &str, config_text: &str, provider: Arc<dyn Provider>) -> Result<Shared, StartError> {
        std::fs::create_dir_all(&opts.data_dir).map_err(|e| StartError::Config(format!("creating {}: {e}", opts.data_dir.display())))?;
        let store = Store::open(&opts.data_dir.join("spillway.db"))?;
        let (text, start) = match (store.meta("config")?, store.meta("start_ms")?) {
            (Some(stored), Some(start)) => {
                if stored != config_text {
                    return Err(StartError::Config(format!(
                        "{}: the data directory {} was created with another config; use that config, or a new --data-dir",
                        config_name,
                        opts.data_dir.display()
                    )));
                }
                (stored, start.parse::<Time>().map_err(|e| StartError::Config(format!("stored start_ms: {e}")))?)
            }
            _ => {
                let start = now_ms();
                store.set_meta("config", config_text)?;
                store.set_meta("start_ms", &start.to_string())?;
                (config_text.to_string(), start)
            }
        };
        let cfg = Config::parse(config_name, &text).map_err(|e| StartError::Config(e.to_string()))?;
        let cluster_id = match store.meta("cluster_id")? {
            Some(id) => id,
            None => {
                let id = format!("{}-{}", cfg.cluster.name, &crate::state::new_token()[..8]);
                store.set_meta("cluster_id", &id)?;
                id
            }
        };
        let mut principals = BTreeMap::new();
        let admin_token = token(&store, "admin_token")?;
        principals.insert(admin_token.clone(), Principal::Admin);
        let mut teams: BTreeSet<String> = cfg.teams.iter().map(|t| t.name.clone()).collect();
        teams.insert("default".into());
        for t in &teams {
            principals.insert(token(&store, &format!("team_token:{t}"))?, Principal::Team(t.clone()));
        }
        let mut state = State::new(Engine::new(cfg, start), store, opts.data_dir.clone())?;
        state.replay()?;
        let seed = opts.seed;
        Ok(Shared {
            state: Mutex::new(state),
            provider,
            opts,
            cluster_id,
            principals,
            admin_token,
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
            seen: Mutex::default(),
            launched: Mutex::default(),
            instances: Mutex::default(),
            last_metric: Mutex::default(),
        })
    }

    /// Locks the state (a poisoned lock is taken over: the state is consistent between statements that log).
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns who a user bearer token belongs to (admin or a team), or `None` for an unknown token.
    pub fn principal(&self, token: &str) -> Option<Principal> {
        self.principals.get(token).cloned()
    }

    /// Returns whether `team` is a team of this daemon.
    pub fn has_team(&self, team: &str) -> bool {
        self.principals.values().any(|p| matches!(p, Principal::Team(t) if t == team))
    }

    /// Returns the node an agent token belongs to (the node of the launch it was issued for), if any.
    pub fn node_of_token(&self, token: &str) -> Option<u32> {
        self.state().tokens.iter().find(|(_, t)| t.as_str() == token).map(|(&n, _)| n)
    }

    /// Returns every team's token, for the operator.
    pub fn team_tokens(&self) -> BTreeMap<String, String> {
        self.principals.iter().filter_map(|(tok, p)| if let Principal::Team(t) = p { Some((t.clone(), tok.clone())) } else { None }).collect()
    }

    /// Reconciles the replayed state with the provider: adopts live instances of alive nodes, fails launches and
    /// loses nodes the provider no longer has, terminates orphans, and starts the fixed nodes' agents.
    pub fn reconcile(self: &Arc<Self>) -> Result<(), ProviderError> {
        let listed = self.provider.list(&self.cluster_id)?;
        let by_node: BTreeMap<u32, String> = listed.iter().map(|i| (i.node, i.id.clone())).collect();
        let now = now_ms();
        let mut st = self.state();
        let nodes: Vec<(u32, NodeState, Market)> = st.engine.cluster().nodes.iter().map(|n| (n.id.0, n.state, n.market)).collect();
        // Fixed nodes exist from the engine's start, without a launch action: give their agents tokens here.
        for &(id, _, market) in &nodes {
            if market == Market::Fixed && !st.tokens.contains_key(&id) {
                let token = crate::state::new_token();
                st.store.put_token(id, &token).map_err(|e| ProviderError::Transient(e.to_string()))?;
                st.tokens.insert(id, token);
            }
        }
        for (id, state, market) in nodes {
            let alive = matches!(state, NodeState::Requested | NodeState::Ready | NodeState::Draining);
            match (by_node.get(&id), alive) {
                (Some(inst), true) => {
                    self.instances_mut().insert(id, inst.clone());
                    // Adopted: its agent gets a full timeout to heartbeat the restarted daemon.
                    self.seen_mut().insert(id, Instant::now());
                    self.launched_mut().insert(id, Instant::now());
                }
                (None, true) if market == Market::Fixed => st.effects.push(Effect::Launch { node: id }),
                (None, true) if state == NodeState::Requested => {
                    let error = LaunchError::Transient("the daemon restarted before the launch finished".into());
                    let _ = st.apply(now, Entry::Event(Event::LaunchFailed { node: NodeId(id), error }));
                }
                (None, true) => {
                    let _ = st.apply(now, Entry::Event(Event::NodeLost { node: NodeId(id) }));
                }
                (Some(inst), false) => {
                    self.instances_mut().insert(id, inst.clone());
                    st.effects.push(Effect::Terminate { node: id });
                }
                (None, false) => {}
            }
        }
        // Instances of nodes the engine never had (a launch logged nowhere): orphans.
        let known = st.engine.cluster().nodes.len() as u32;
        for inst in listed.iter().filter(|i| i.node >= known) {
            let (provider, id) = (self.provider.clone(), inst.id.clone());
            std::thread::spawn(move || provider.terminate(&id));
        }
        drop(st);
        self.flush();
        Ok(())
    }

    fn seen_mut(&self) -> MutexGuard<'_, BTreeMap<u32, Instant>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn launched_mut(&self) -> MutexGuard<'_, BTreeMap<u32, Instant>> {
        self.launched.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn instances_mut(&self) -> MutexGuard<'_, BTreeMap<u32, String>> {
        self.instances.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs the pending provider calls, each on its own blocking thread; results come back as engine events.
    pub fn flush(self: &Arc<Self>) {
        let (effects, specs) = {
            let mut st = self.state();
            let effects = std::mem::take(&mut st.effects);
            let specs: Vec<Option<LaunchSpec>> = effects.iter().map(|e| self.launch_spec(&st, e)).collect();
            (effects, specs)
        };
        for (effect, spec) in effects.into_iter().zip(specs) {
            let me = self.clone();
            tokio::task::spawn_blocking(move || match (effect, spec) {
                (Effect::Launch { node }, Some(spec)) => me.launched(node, me.provider.launch(&spec)),
                (Effect::Terminate { node }, _) => {
                    // The instance id is the provider's business: when the launch's answer was lost (a restart),
                    // ask the provider which instance is this node's.
                    let known = me.instances_mut().remove(&node);
                    let id = known.or_else(|| me.provider.list(&me.cluster_id).ok()?.into_iter().find(|i| i.node == node).map(|i| i.id));
                    let Some(id) = id else { return };
                    match me.provider.terminate(&id) {
                        Ok(()) | Err(ProviderError::NotFound(_)) => {}
                        Err(e) => eprintln!("spillway: terminating node {node} ({id}): {e}"),
                    }
                }
                (Effect::Launch { .. }, None) => {}
            });
        }
    }

    /// Returns the launch spec of a node.
    fn launch_spec(&self, st: &State, e: &Effect) -> Option<LaunchSpec> {
        let Effect::Launch { node } = e else { return None };
        let n = st.engine.cluster().nodes.get(*node as usize)?;
        let cfg = st.engine.config();
        let pool = &cfg.pools[n.pool];
        Some(LaunchSpec {
            cluster: self.cluster_id.clone(),
            node: *node,
            pool: pool.name.clone(),
            instance_type: n.instance_type.map_or_else(|| "fixed".to_string(), |i| cfg.instance_types[i].name.clone()),
            gpus: n.gpus,
            spot: n.market == Market::Spot,
            token: st.tokens.get(node).cloned().unwrap_or_default(),
            boot_delay_s: if n.market == Market::Fixed { 0.0 } else { pool.boot_latency_s },
        })
    }

    /// Handles a launch's result: the instance is recorded (the node becomes ready when its agent registers), or the
    /// typed error goes to the engine so it backs off that offering only.
    fn launched(self: &Arc<Self>, node: u32, result: Result<spillway_providers::Instance, ProviderError>) {
        let now = now_ms();
        match result {
            Ok(inst) => {
                self.instances_mut().insert(node, inst.id);
                self.launched_mut().insert(node, Instant::now());
                if !self.state().alive(node) {
                    // Ended while it launched (cancelled demand): give it back at once.
                    self.state().effects.push(Effect::Terminate { node });
                }
            }
            Err(e) => {
                let error = match e {
                    ProviderError::InsufficientCapacity { .. } => LaunchError::InsufficientCapacity,
                    ProviderError::Quota(_) => LaunchError::Quota,
                    other => LaunchError::Transient(other.to_string()),
                };
                let mut st = self.state();
                if st.node_state(node) == Some(NodeState::Requested) {
                    let _ = st.apply(now, Entry::Event(Event::LaunchFailed { node: NodeId(node), error }));
                }
            }
        }
        self.flush();
    }

    /// One tick: wake the engine when it asked, lose silent nodes, fail launches that never registered, reclaim
    /// interrupted spot nodes at their deadline, and inject spot interruptions at each pool's configured rate.
    pub fn tick(self: &Arc<Self>, dt: Duration) {
        let now = now_ms();
        let mut st = self.state();
        let nodes: Vec<(u32, NodeState, Market, usize)> =
            st.engine.cluster().nodes.iter().filter(|n| n.alive()).map(|n| (n.id.0, n.state, n.market, n.pool)).collect();
        for &(id, state, market, pool) in &nodes {
            let seen = *self.seen_mut().entry(id).or_insert_with(Instant::now);
            match state {
                NodeState::Ready | NodeState::Draining if seen.elapsed() > self.opts.heartbeat_timeout => {
                    if market == Market::Fixed {
                        // An owned node's agent died: start it again; it re-runs the node's workers from their
                        // checkpoints.
                        self.seen_mut().insert(id, Instant::now());
                        st.effects.push(Effect::Launch { node: id });
                    } else {
                        let _ = st.apply(now, Entry::Event(Event::NodeLost { node: NodeId(id) }));
                        st.effects.push(Effect::Terminate { node: id });
                    }
                }
                NodeState::Requested => {
                    let boot = Duration::from_secs_f64(st.engine.config().pools[pool].boot_latency_s.max(0.0)) + self.opts.boot_grace;
                    let late = self.launched_mut().get(&id).is_some_and(|t| t.elapsed() > boot);
                    if late {
                        self.launched_mut().remove(&id);
                        let error = LaunchError::Transient("the agent never registered".into());
                        let _ = st.apply(now, Entry::Event(Event::LaunchFailed { node: NodeId(id), error }));
                        st.effects.push(Effect::Terminate { node: id });
                    }
                }
                _ => {}
            }
        }
        let due: Vec<u32> = st.reclaim_at.iter().filter(|&(_, &t)| t <= now).map(|(&n, _)| n).collect();
        for id in due {
            st.reclaim_at.remove(&id);
            if st.alive(id) {
                let _ = st.apply(now, Entry::Event(Event::NodeLost { node: NodeId(id) }));
            }
            st.effects.push(Effect::Terminate { node: id });
        }
        // Injected interruptions (the local provider's stand-in for the cloud reclaiming spot capacity).
        let mut victims = Vec::new();
        {
            let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
            for &(id, state, market, pool) in &nodes {
                let rate = st.engine.config().pools[pool].interruption_rate_per_hour;
                if market == Market::Spot && state == NodeState::Ready && rate > 0.0 && !st.reclaim_at.contains_key(&id) {
                    let p = 1.0 - (-rate * dt.as_secs_f64() / 3600.0).exp();
                    if rng.random::<f64>() < p {
                        victims.push(id);
                    }
                }
            }
        }
        for id in victims {
            let _ = interrupt(&mut st, now, id);
        }
        if st.undecided || st.engine.poll_timeout().is_some_and(|t| t <= now) {
            let _ = st.apply(now, Entry::Wake);
        }
        // A cumulative cost snapshot each minute, so `GET /v1/cost?since=&until=` can answer windows.
        let minute = now.div_euclid(60_000);
        if st.cost_minute != Some(minute) {
            st.cost_minute = Some(minute);
            let cost = crate::views::cost(&st, now);
            match serde_json::to_string(&cost) {
                Ok(json) => {
                    if let Err(e) = st.store.put_cost_snapshot(now, &json) {
                        eprintln!("spillway: {e}");
                    }
                }
                Err(e) => eprintln!("spillway: cost snapshot: {e}"),
            }
        }
        drop(st);
        self.flush();
    }

    /// Handles an agent's heartbeat (the token was checked to be this node's). Returns `None` when the node is gone
    /// (the agent should stop), else what the node should run and stop.
    pub fn heartbeat(self: &Arc<Self>, hb: &Heartbeat) -> Result<Option<HeartbeatReply>, crate::state::ApplyError> {
        let now = now_ms();
        let node = hb.node;
        let mut st = self.state();
        if !st.alive(node) {
            return Ok(None);
        }
        self.seen_mut().insert(node, Instant::now());
        if st.node_state(node) == Some(NodeState::Requested) {
            st.apply(now, Entry::Event(Event::NodeReady { node: NodeId(node) }))?;
        }
        let running: BTreeSet<WorkerRef> = hb.running.iter().copied().collect();
        st.running.insert(node, running.clone());
        let mut acked = Vec::new();
        for exit in &hb.exited {
            if st.worker_exited(now, exit.worker, exit.success)? {
                acked.push(exit.worker);
            }
        }
        for w in hb.checkpoints.iter().filter(|w| w.rank == 0) {
            let current = st.engine.job(JobId(w.job)).is_some_and(|j| j.state == JobState::Running && j.attempt == w.attempt);
            if current {
                st.apply(now, Entry::Event(Event::CheckpointDone { job: JobId(w.job), attempt: w.attempt }))?;
            }
        }
        // Only pools with metric policies act on utilization; for the others a logged sample would only grow the log.
        let metric_pool = st.engine.cluster().nodes.get(node as usize).map(|n| &st.engine.config().pools[n.pool]).is_some_and(|p| p.target_gpu_utilization.is_some() || !p.step_scaling.is_empty());
        if let Some(u) = hb.gpu_utilization.filter(|_| metric_pool) {
            // Metrics are logged inputs too; sample them at most every 15 s per node to keep the log small.
            let due = {
                let mut m = self.last_metric.lock().unwrap_or_else(|p| p.into_inner());
                let due = m.get(&node).is_none_or(|t| t.elapsed() > Duration::from_secs(15));
                if due {
                    m.insert(node, Instant::now());
                }
                due
            };
            if due {
                st.apply(now, Entry::Event(Event::MetricSample { node: NodeId(node), gpu_utilization: u }))?;
            }
        }
        // Stop orders last until the worker is gone; workers nobody asked for are stopped too.
        let stops = st.stops.entry(node).or_default();
        stops.retain(|w, _| running.contains(w));
        let mut stop: Vec<StopOrder> = stops.values().cloned().collect();
        let assigned = st.assignments.get(&node).cloned().unwrap_or_default();
        let unknown: Vec<WorkerRef> =
            running.iter().filter(|w| !assigned.contains_key(w) && !stop.iter().any(|s| s.worker == **w)).copied().collect();
        for w in unknown {
            stop.push(StopOrder { worker: w, grace_ms: 5_000, signal: "SIGTERM".into() });
        }
        // Never two attempts of one job at once: an attempt starts only when no other attempt of the job is
        // reported running anywhere (a stopped attempt may still be writing its checkpoint).
        let run = assigned
            .into_values()
            .filter(|a| !st.running.iter().any(|(_, ws)| ws.iter().any(|w| w.job == a.worker.job && w.attempt != a.worker.attempt)))
            .collect();
        drop(st);
        self.flush();
        Ok(Some(HeartbeatReply { run, stop, acked_exits: acked }))
    }

    /// Terminates every live instance of this cluster (graceful shutdown of `spillway up`).
    pub fn terminate_all(&self) {
        if let Ok(list) = self.provider.list(&self.cluster_id) {
            let handles: Vec<_> = list
                .into_iter()
                .map(|i| {
                    let p = self.provider.clone();
                    std::thread::spawn(move || p.terminate(&i.id))
                })
                .collect();
            for h in handles {
                let _ = h.join();
            }
        }
    }
}

/// Sends an interruption notice for a ready spot node: its jobs checkpoint and move; the node is reclaimed at the
/// deadline (now + the pool's notice). Returns an error for a node that is not a live spot node.
pub fn interrupt(st: &mut State, now: Time, node: u32) -> Result<(), String> {
    let n = st.engine.cluster().nodes.get(node as usize).ok_or_else(|| format!("no node {node}"))?;
    if n.market != Market::Spot || !n.alive() {
        return Err(format!("node {node} is not a live spot node (market {}, state {:?})", n.market.as_str(), n.state));
    }
    if st.reclaim_at.contains_key(&node) {
        return Err(format!("node {node} already has an interruption notice"));
    }
    let notice = (st.engine.config().pools[n.pool].interruption_notice_s * 1000.0) as Time;
    st.apply(now, Entry::Event(Event::InterruptionNotice { node: NodeId(node), deadline: now + notice })).map_err(|e| e.to_string())?;
    Ok(())
}

/// Returns the stored token under `key`, creating it on first use.
fn token(store: &Store, key: &str) -> Result<String, crate::store::StoreError> {
    match store.meta(key)? {
        Some(t) => Ok(t),
        None => {
            let t = crate::state::new_token();
            store.set_meta(key, &t)?;
            Ok(t)
        }
    }
}
