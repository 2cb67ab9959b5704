//! What the daemon does with what it observes: agent heartbeats, the ticker (lost heartbeats, launches that never
//! registered, spot reclaims, injected interruptions, wake-ups), provider results and reconciles. Time is a value
//! here and provider calls are [`Effect`]s, so the real daemon ([`crate::daemon`]) and the seeded fault simulation
//! (`tests/fault_sim.rs`) drive the very same code.

use crate::state::{ApplyError, Effect, State};
use crate::store::Entry;
use rand::Rng;
use spillway_api::{Heartbeat, HeartbeatReply, NodeNotice, StopOrder, WorkerRef};
use spillway_core::{Event, Exit, JobId, LaunchError, Market, NodeId, NodeState, Time};
use spillway_providers::{Instance, LaunchSpec, Notice, NoticeKind, ProviderError, SpotQuote};
use std::collections::{BTreeMap, BTreeSet};

/// Grace of a stop order for a worker no stop action named (one nobody asked for).
const DEFAULT_STOP_GRACE_MS: u64 = 5_000;
/// Utilization samples are logged at most this often per node, to keep the log small.
const METRIC_EVERY_MS: Time = 15_000;
/// How long a notice about an instance no node is known to own yet is kept, and how many such notices at most.
pub const EARLY_NOTICE_MS: Time = 600_000;
const EARLY_NOTICES: usize = 1024;
pub use crate::spot_quotes::PRICE_STEP;

impl State {
    /// Reconciles the engine with the provider's instances (`listed`, asked for at `asked_at`): adopts live
    /// instances of alive nodes, terminates instances of ended or unknown nodes, loses nodes whose instance
    /// vanished (and restarts fixed nodes' agents). At `startup` a launch that never came back failed, and every
    /// adopted node must report before work is handed out (its agent may still run stopped attempts).
    pub fn reconcile(
        &mut self,
        now: Time,
        listed: &[Instance],
        asked_at: Time,
        startup: bool,
    ) -> Result<(), ApplyError> {
        // One instance per node: the one recorded for it, else the first listed. Any other instance tagged for the
        // same node (a copy of its tags, a double buy) is an orphan: terminated, never taken for the node.
        let mut by_node: BTreeMap<u32, &Instance> = BTreeMap::new();
        for i in listed {
            let recorded = self.instances.get(&i.node).is_some_and(|id| *id == i.id);
            match by_node.get(&i.node) {
                Some(kept) if !recorded => {
                    if kept.id != i.id {
                        self.effects.push(Effect::TerminateInstance { id: i.id.clone() });
                    }
                }
                Some(kept) => {
                    self.effects.push(Effect::TerminateInstance { id: kept.id.clone() });
                    by_node.insert(i.node, i);
                }
                None => {
                    by_node.insert(i.node, i);
                }
            }
        }
        let nodes: Vec<(u32, NodeState, Market)> =
            self.engine.cluster().nodes.iter().map(|n| (n.id.0, n.state, n.market)).collect();
        for &(id, state, market) in &nodes {
            let alive = matches!(state, NodeState::Requested | NodeState::Ready | NodeState::Draining);
            match (by_node.get(&id), alive) {
                (Some(inst), true) => {
                    self.instances.insert(id, inst.id.clone());
                    self.early_notices_for(now, id, &inst.id)?;
                    if startup {
                        // Adopted: its agent gets a full timeout to heartbeat the restarted daemon. A node Slurm
                        // asked for runs none of Spillway's work, so it holds back no hand-out.
                        self.seen.insert(id, now);
                        self.launched.insert(id, now);
                        if !self.held(id) {
                            self.awaiting.insert(id);
                        }
                    }
                }
                (None, true) if self.fencing.contains_key(&id) || self.launching.contains(&id) => {}
                // A launch may be in flight, or a node may have come up after the listing was asked for.
                (None, true)
                    if !startup
                        && (state == NodeState::Requested || self.launched.get(&id).is_none_or(|&t| t >= asked_at)) => {
                }
                (None, true) => self.vanished(now, id, state, market)?,
                (Some(inst), false) => self.effects.push(Effect::TerminateInstance { id: inst.id.clone() }),
                (None, false) => {}
            }
        }
        // Instances of nodes the engine never had (a launch logged nowhere): orphans.
        let known = nodes.len() as u32;
        for inst in listed.iter().filter(|i| i.node >= known) {
            self.effects.push(Effect::TerminateInstance { id: inst.id.clone() });
        }
        Ok(())
    }

    /// Acts on an alive node the provider no longer has: its processes are gone with it (fenced by definition).
    fn vanished(&mut self, now: Time, id: u32, state: NodeState, market: Market) -> Result<(), ApplyError> {
        self.instances.remove(&id);
        self.awaiting.remove(&id);
        self.forget_node(id);
        if market == Market::Fixed {
            return self.restart_fixed(now, id);
        }
        if state == NodeState::Requested {
            let error = LaunchError::Transient("the daemon restarted before the launch finished".into());
            return self.observe(now, Entry::Event(Event::LaunchFailed { node: NodeId(id), error }));
        }
        self.observe(now, Entry::Event(Event::NodeLost { node: NodeId(id) }))
    }

    /// Starts a new agent for an owned node whose agent is gone: its attempts are lost first (they run again as
    /// new attempts, from their checkpoints), then the launch gets a fresh token, so the old agent's token is void.
    fn restart_fixed(&mut self, now: Time, id: u32) -> Result<(), ApplyError> {
        for (job, attempt) in self.attempts_on(id) {
            self.observe(now, Entry::Event(Event::AttemptLost { job, attempt }))?;
        }
        let token = self.issue_token(now, id)?;
        self.seen.insert(id, now);
        self.launched.insert(id, now);
        self.launching.insert(id);
        self.effects.push(Effect::Launch { node: id, token });
        Ok(())
    }

    /// Reports a fence's outcome: once the node's instance is gone its jobs move (a lost cloud node, or a fixed
    /// node with a new agent). A failed fence is retried by the next tick.
    pub fn fenced(&mut self, now: Time, node: u32, done: bool) -> Result<(), ApplyError> {
        self.fencing.remove(&node);
        if !done {
            return Ok(());
        }
        let Some(n) = self.engine.cluster().nodes.get(node as usize) else { return Ok(()) };
        let (state, market) = (n.state, n.market);
        if !n.alive() {
            self.instances.remove(&node);
            self.awaiting.remove(&node);
            self.forget_node(node);
            return Ok(());
        }
        self.vanished(now, node, state, market)
    }

    /// Reports a launch's result: the instance is recorded (the node becomes ready when its agent registers), or
    /// the typed error goes to the engine so it backs off that offering only.
    pub fn launch_result(
        &mut self,
        now: Time,
        node: u32,
        result: Result<String, ProviderError>,
    ) -> Result<(), ApplyError> {
        self.launching.remove(&node);
        match result {
            Ok(id) => {
                self.instances.insert(node, id.clone());
                self.launched.insert(node, now);
                if !self.alive(node) {
                    // Ended while it launched (cancelled demand): give it back at once.
                    self.effects.push(Effect::Terminate { node });
                }
                self.early_notices_for(now, node, &id)
            }
            Err(e) => {
                let error = match e {
                    ProviderError::InsufficientCapacity { .. } => LaunchError::InsufficientCapacity,
                    ProviderError::Quota(_) => LaunchError::Quota,
                    other => LaunchError::Transient(other.to_string()),
                };
                if self.node_state(node) == Some(NodeState::Requested) {
                    self.observe(now, Entry::Event(Event::LaunchFailed { node: NodeId(node), error }))?;
                }
                // An owned node whose new agent did not start stays silent; the ticker fences and restarts it again.
                Ok(())
            }
        }
    }

    /// Reports that a terminate of `node`'s instance went through (or found nothing).
    pub fn terminated(&mut self, node: u32) {
        self.instances.remove(&node);
        // Whatever ran there is gone with the instance: no attempt is held back as still running on it.
        self.forget_node(node);
    }

    /// One tick at `now` (`dt_ms` since the last): fence silent nodes, fail launches that never registered, fence
    /// reclaimed spot nodes at their deadline, inject spot interruptions at each pool's rate, wake the engine when
    /// it asked, snapshot the cost each minute, and list the provider's instances now and then.
    pub fn tick(&mut self, now: Time, dt_ms: Time, rng: &mut impl Rng) -> Result<(), ApplyError> {
        if let Some(f) = &self.fatal {
            return Err(ApplyError::Stopped(f.clone()));
        }
        let nodes: Vec<(u32, NodeState, Market, usize)> = self
            .engine
            .cluster()
            .nodes
            .iter()
            .filter(|n| n.alive())
            .map(|n| (n.id.0, n.state, n.market, n.pool))
            .collect();
        // A node that ended (scaled in, failed, lost) will never report: it holds back nothing.
        let awaiting = std::mem::take(&mut self.awaiting);
        self.awaiting = awaiting.into_iter().filter(|&n| self.alive(n)).collect();
        for &(id, state, _, pool) in &nodes {
            let seen = *self.seen.entry(id).or_insert(now);
            match state {
                // Slurm's nodes run no agent: the Slurm sync judges them (`slurm::sync`), only on Slurm's word.
                NodeState::Ready | NodeState::Draining if self.held(id) => {}
                NodeState::Ready | NodeState::Draining if now - seen > self.opts.heartbeat_timeout_ms => {
                    self.fence(now, id)
                }
                NodeState::Requested => {
                    let boot = (self.engine.config().pools[pool].boot_latency_s.max(0.0) * 1000.0) as Time
                        + self.opts.boot_grace_ms;
                    if self.launched.get(&id).is_some_and(|&t| now - t > boot) {
                        self.launched.remove(&id);
                        let error = LaunchError::Transient("the agent never registered".into());
                        self.observe(now, Entry::Event(Event::LaunchFailed { node: NodeId(id), error }))?;
                        self.effects.push(Effect::Terminate { node: id });
                    }
                }
                _ => {}
            }
        }
        let due: Vec<u32> = self.reclaim_at.iter().filter(|&(_, &t)| t <= now).map(|(&n, _)| n).collect();
        for id in due {
            self.reclaim_at.remove(&id);
            if self.alive(id) {
                self.fence(now, id);
            }
        }
        self.inject_interruptions(now, dt_ms, &nodes, rng)?;
        if self.undecided || self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.observe(now, Entry::Wake)?;
        }
        self.snapshot_cost(now, true);
        if now >= self.next_reconcile {
            self.next_reconcile = now + self.opts.reconcile_every_ms;
            self.effects.push(Effect::List);
        }
        Ok(())
    }

    /// Starts fencing `node` unless it is already being fenced.
    pub(crate) fn fence(&mut self, now: Time, node: u32) {
        if let std::collections::btree_map::Entry::Vacant(e) = self.fencing.entry(node) {
            e.insert(now);
            self.effects.push(Effect::Fence { node });
        }
    }

    /// Injected interruptions (the local provider's stand-in for the cloud reclaiming spot capacity).
    fn inject_interruptions(
        &mut self,
        now: Time,
        dt_ms: Time,
        nodes: &[(u32, NodeState, Market, usize)],
        rng: &mut impl Rng,
    ) -> Result<(), ApplyError> {
        let mut victims = Vec::new();
        for &(id, state, market, pool) in nodes {
            let rate = self.engine.config().pools[pool].interruption_rate_per_hour;
            if market == Market::Spot && state == NodeState::Ready && rate > 0.0 && !self.reclaim_at.contains_key(&id) {
                let p = 1.0 - (-rate * dt_ms as f64 / 3_600_000.0).exp();
                if rng.random::<f64>() < p {
                    victims.push(id);
                }
            }
        }
        for id in victims {
            match self.interrupt(now, id) {
                Err(ApplyError::Engine(_)) | Ok(()) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends an interruption notice for a ready spot node: its jobs checkpoint and move; the node is reclaimed at
    /// the deadline (now + the pool's notice). Refuses a node that is not a live spot node.
    pub fn interrupt(&mut self, now: Time, node: u32) -> Result<(), ApplyError> {
        let n = self
            .engine
            .cluster()
            .nodes
            .get(node as usize)
            .ok_or_else(|| ApplyError::Engine(format!("no node {node}")))?;
        if n.market != Market::Spot || !n.alive() {
            let state =
                serde_json::to_value(n.state).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
            return Err(ApplyError::Engine(format!(
                "node {node} is not a live spot node (market {}, state {state})",
                n.market.as_str()
            )));
        }
        if self.reclaim_at.contains_key(&node) {
            return Err(ApplyError::Engine(format!("node {node} already has an interruption notice")));
        }
        let notice = (self.engine.config().pools[n.pool].interruption_notice_s * 1000.0) as Time;
        self.apply(now, Entry::Event(Event::InterruptionNotice { node: NodeId(node), deadline: now + notice }))?;
        Ok(())
    }

    /// Acts on what the cloud said about an instance of this cluster (instances of other clusters, or of nodes
    /// already gone, are ignored: the queue may be shared). An interruption warning is the engine's interruption
    /// notice, with the cloud's deadline (once per node: the agent may have reported it first); a rebalance
    /// recommendation moves the node's jobs once a replacement is ready; an instance that left the running states
    /// is fenced at once, so its jobs move without waiting for a missed heartbeat.
    pub fn notice(&mut self, now: Time, notice: &Notice) -> Result<(), ApplyError> {
        let Some(node) = self.instances.iter().find(|(_, id)| **id == notice.instance_id).map(|(&n, _)| n) else {
            // Maybe an instance whose launch has not answered yet (its agent can be up first): kept for a while,
            // and only while a launch is in flight (otherwise it is some other cluster's instance).
            self.early_notices.retain(|(at, _)| now - at <= EARLY_NOTICE_MS);
            if self.launching.is_empty() {
                return Ok(());
            }
            if self.early_notices.len() >= EARLY_NOTICES {
                self.early_notices.remove(0);
            }
            self.early_notices.push((now, notice.clone()));
            return Ok(());
        };
        self.node_notice(now, node, &notice.kind)
    }

    /// Acts on the notices that came early for `instance`, now known to be `node`'s.
    fn early_notices_for(&mut self, now: Time, node: u32, instance: &str) -> Result<(), ApplyError> {
        self.early_notices.retain(|(at, _)| now - at <= EARLY_NOTICE_MS);
        let (mine, rest) =
            std::mem::take(&mut self.early_notices).into_iter().partition(|(_, n)| n.instance_id == instance);
        self.early_notices = rest;
        for (_, n) in mine {
            self.node_notice(now, node, &n.kind)?;
        }
        Ok(())
    }

    /// Acts on a notice about `node` (from the provider or the node's own agent), once: a repeat changes nothing
    /// and logs nothing.
    fn node_notice(&mut self, now: Time, node: u32, kind: &NoticeKind) -> Result<(), ApplyError> {
        let market = self.engine.cluster().nodes.get(node as usize).map(|n| n.market);
        if !self.alive(node) || market.is_none_or(|m| m == Market::Fixed) {
            return Ok(());
        }
        // Interruptions and rebalance recommendations are about spot capacity; any cloud instance can go away.
        if market != Some(Market::Spot) && !matches!(kind, NoticeKind::Gone { .. }) {
            return Ok(());
        }
        match kind {
            NoticeKind::Interruption { deadline_ms } => {
                if self.reclaim_at.contains_key(&node) {
                    return Ok(());
                }
                let deadline = match deadline_ms {
                    Some(d) => (*d).max(now),
                    None => now + self.notice_ms(node),
                };
                self.apply(now, Entry::Event(Event::InterruptionNotice { node: NodeId(node), deadline }))?;
            }
            NoticeKind::Rebalance => {
                // Only a ready node can be at risk: one draining already (at risk, or noticed) is past that.
                if self.node_state(node) == Some(NodeState::Ready) {
                    self.apply(now, Entry::Event(Event::RebalanceRecommendation { node: NodeId(node) }))?;
                }
            }
            NoticeKind::Gone { .. } => self.fence(now, node),
        }
        Ok(())
    }

    /// Hands the engine the spot prices the provider quoted, as a price per spot pool (see
    /// [`crate::spot_quotes`]). A quote that is not a finite number > 0 is skipped with a line on stderr; the
    /// others still count.
    pub fn spot_prices(&mut self, now: Time, quotes: &[SpotQuote]) -> Result<(), ApplyError> {
        for q in quotes.iter().filter(|q| !crate::spot_quotes::valid(q)) {
            let zone = q.zone.as_deref().map_or(String::new(), |z| format!(" in {z}"));
            eprintln!("spillway: ignoring spot price {} of {}{zone}", q.usd_per_hour, q.instance_type);
        }
        for event in crate::spot_quotes::events(self.engine.config(), quotes) {
            self.apply(now, Entry::Event(event))?;
        }
        Ok(())
    }

    /// Returns the interruption notice of `node`'s pool in ms.
    fn notice_ms(&self, node: u32) -> Time {
        let cfg = self.engine.config();
        let pool = self.engine.cluster().nodes.get(node as usize).map_or(0, |n| n.pool);
        cfg.pools.get(pool).map_or(120_000, |p| (p.interruption_notice_s * 1000.0) as Time)
    }

    /// Records the cumulative cost and its hourly rate whenever the rate changed (so `GET /v1/cost?since=&until=`
    /// is exact to the millisecond: between two changes cost grows at the rate), and at least each minute with
    /// `minutely`. Nothing is recorded while replaying: those snapshots are already stored.
    pub(crate) fn snapshot_cost(&mut self, now: Time, minutely: bool) {
        if self.replaying {
            return;
        }
        let rate = crate::views::cost_rate(self);
        let minute = now.div_euclid(60_000);
        let due = minutely && self.cost_minute != Some(minute);
        if !due && self.cost_rate.as_ref() == Some(&rate) {
            return;
        }
        self.cost_minute = Some(minute);
        let cost = crate::views::cost(self, now);
        match (serde_json::to_string(&cost), serde_json::to_string(&rate)) {
            (Ok(cost), Ok(rate_json)) => {
                // A lost snapshot only coarsens cost windows; it decides nothing, so it is not fatal.
                match self.store.put_cost_snapshot(now, &cost, &rate_json) {
                    Ok(()) => self.cost_rate = Some(rate),
                    Err(e) => eprintln!("spillway: {e}"),
                }
            }
            (Err(e), _) | (_, Err(e)) => eprintln!("spillway: cost snapshot: {e}"),
        }
    }

    /// Handles a heartbeat whose token is node `hb.node`'s current one. Returns `None` when the node is gone or
    /// being replaced (its agent should stop), else what it should run and stop. Exits and checkpoints count only
    /// for workers of the node's own current attempts.
    pub fn heartbeat(&mut self, now: Time, hb: &Heartbeat) -> Result<Option<HeartbeatReply>, ApplyError> {
        self.heartbeat_with(now, hb, true)
    }

    /// [`State::heartbeat`], handing out new work only with `hand_out` (not to an agent still on its launch
    /// token: it gets its session token first, see `tokens`).
    pub fn heartbeat_with(
        &mut self,
        now: Time,
        hb: &Heartbeat,
        hand_out: bool,
    ) -> Result<Option<HeartbeatReply>, ApplyError> {
        if let Some(f) = &self.fatal {
            return Err(ApplyError::Stopped(f.clone()));
        }
        let node = hb.node;
        if !self.alive(node) || self.fencing.contains_key(&node) {
            return Ok(None);
        }
        if hb.seq != 0 && self.beat_seq.get(&node).is_some_and(|&last| hb.seq <= last) {
            // A delayed or duplicated request: what it says is older than what the daemon knows.
            return Ok(Some(HeartbeatReply::default()));
        }
        self.beat_seq.insert(node, hb.seq);
        self.seen.insert(node, now);
        if let Some(a) = hb.addr.as_deref().filter(|a| valid_addr(a))
            && self.addrs.get(&node).is_none_or(|old| old != a)
        {
            self.addrs.insert(node, a.to_string());
        }
        self.awaiting.remove(&node);
        if self.node_state(node) == Some(NodeState::Requested) {
            self.observe(now, Entry::Event(Event::NodeReady { node: NodeId(node) }))?;
        }
        if !hand_out {
            // On its launch token: registered, nothing else counts (whoever holds that token may not report
            // exits, checkpoints or notices, nor get work).
            return Ok(Some(HeartbeatReply::default()));
        }
        for n in &hb.notices {
            let kind = match n {
                NodeNotice::Interruption { deadline_ms } => NoticeKind::Interruption { deadline_ms: *deadline_ms },
                NodeNotice::Rebalance => NoticeKind::Rebalance,
            };
            self.node_notice(now, node, &kind)?;
        }
        let running: BTreeSet<WorkerRef> = hb.running.iter().copied().collect();
        let exited: BTreeSet<WorkerRef> = hb.exited.iter().map(|e| e.worker).collect();
        // Only workers placed on this node count as running here (a node's token cannot hold back other jobs by
        // claiming to run them); every reported worker that should not run is still told to stop.
        let own: BTreeSet<WorkerRef> = running.iter().copied().filter(|&w| self.placed_on(node, w)).collect();
        self.set_running(node, own);
        // A handed-out worker is known gone once a heartbeat that applied the reply handing it out lists it as
        // neither running nor exited (the agent never started it, or its exit was acknowledged), or as exited.
        let applied = hb.applied;
        self.settle_handed(node, |w, s| running.contains(w) || (!exited.contains(w) && applied < s));
        let mut acked = Vec::new();
        for exit in &hb.exited {
            // Another node's worker, or an attempt already over: nothing to record; the agent may forget it.
            if !self.owns(node, exit.worker)
                || self.worker_exited(now, exit.worker, exit.success, Exit::of(exit.code, exit.signal))?
            {
                acked.push(exit.worker);
            }
        }
        for &w in hb.checkpoints.iter().filter(|w| w.rank == 0) {
            if self.owns(node, w) {
                self.observe(now, Entry::Event(Event::CheckpointDone { job: JobId(w.job), attempt: w.attempt }))?;
            }
        }
        self.sample_metric(now, node, hb.gpu_utilization)?;
        let reply = self.orders(node, &running, acked, hand_out);
        for a in reply.run.iter().filter(|a| !running.contains(&a.worker)) {
            self.hand_out(node, a.worker, hb.seq);
        }
        Ok(Some(reply))
    }

    /// Logs a utilization sample when the node's pool acts on one, at most every [`METRIC_EVERY_MS`].
    fn sample_metric(&mut self, now: Time, node: u32, u: Option<f64>) -> Result<(), ApplyError> {
        let metric_pool = self
            .engine
            .cluster()
            .nodes
            .get(node as usize)
            .map(|n| &self.engine.config().pools[n.pool])
            // A pool with a utilization query reads Prometheus, not the agents.
            .is_some_and(|p| p.uses_utilization() && p.utilization_query.is_none());
        let Some(u) = u.filter(|u| metric_pool && u.is_finite()) else { return Ok(()) };
        if self.last_metric.get(&node).is_some_and(|&t| now - t < METRIC_EVERY_MS) {
            return Ok(());
        }
        self.last_metric.insert(node, now);
        self.observe(now, Entry::Event(Event::MetricSample { node: NodeId(node), gpu_utilization: u }))
    }

    /// Returns a node's orders: stop every worker it runs that is not desired; run the desired ones once every
    /// node alive at startup has reported, and only while no other attempt of the same job is reported anywhere
    /// (a stopped attempt may still be writing its checkpoint).
    fn orders(
        &self,
        node: u32,
        running: &BTreeSet<WorkerRef>,
        acked_exits: Vec<WorkerRef>,
        hand_out: bool,
    ) -> HeartbeatReply {
        let desired = self.desired(node);
        let stop = running
            .iter()
            .filter(|w| !desired.contains_key(w))
            .map(|&w| StopOrder {
                worker: w,
                grace_ms: self.stop_grace.get(&(w.job, w.attempt)).copied().unwrap_or(DEFAULT_STOP_GRACE_MS),
                signal: "SIGTERM".into(),
            })
            .collect();
        let run = if hand_out && self.awaiting.is_empty() && !self.stopping {
            desired.into_values().filter(|a| !self.other_attempt_running(a.worker.job, a.worker.attempt)).collect()
        } else {
            Vec::new()
        };
        HeartbeatReply { run, stop, acked_exits, new_token: None }
    }

    /// Returns the launch spec of `node` with its agent token.
    pub fn launch_spec(&self, node: u32, token: &str) -> Option<LaunchSpec> {
        let n = self.engine.cluster().nodes.get(node as usize)?;
        let cfg = self.engine.config();
        let pool = &cfg.pools[n.pool];
        Some(LaunchSpec {
            cluster: self.opts.cluster_id.clone(),
            node,
            pool: pool.name.clone(),
            instance_type: n.instance_type.map_or_else(|| "fixed".to_string(), |i| cfg.instance_types[i].name.clone()),
            gpus: n.gpus,
            spot: n.market == Market::Spot,
            token: token.to_string(),
            boot_delay_s: if n.market == Market::Fixed { 0.0 } else { pool.boot_latency_s },
            slurm_node: n.held.as_ref().map(|h| h.name.clone()),
            zone: pool.zone.clone(),
        })
    }
}

/// Returns whether `a` may be a node's address in a job's environment: an IP address, or a host name of letters,
/// digits, `-` and `.` (at most 253 bytes). Anything else (spaces, shell characters, a URL) is ignored.
pub(crate) fn valid_addr(a: &str) -> bool {
    a.parse::<std::net::IpAddr>().is_ok()
        || (!a.is_empty()
            && a.len() <= 253
            && !a.starts_with(['-', '.'])
            && a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'))
}
