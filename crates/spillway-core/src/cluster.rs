//! The engine's mutable view of the cluster: jobs, nodes, teams, per-pool indexes, the ledger and counters,
//! with the few operations that keep them consistent (bind, unbind, node state changes).

use crate::config::{Config, Market};
use crate::ledger::Ledger;
use crate::model::{Job, JobId, JobState, Node, NodeId, NodeState};
use crate::time::Time;
use std::collections::{BTreeMap, BTreeSet};

/// A team as the engine tracks it: quota, weight and GPUs in use.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamState {
    pub name: String,
    pub quota_gpus: Option<u32>,
    pub weight: f64,
    pub used_gpus: u32,
}

impl TeamState {
    /// Returns whether starting `gpus` more GPUs of the team's work would take it past its quota.
    pub fn over_quota(&self, gpus: u32) -> bool {
        self.quota_gpus.is_some_and(|q| self.used_gpus.saturating_add(gpus) > q)
    }
}

/// Runtime state of a pool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolState {
    /// Nodes requested, ready or draining.
    pub alive: u32,
    /// Nodes requested and not yet ready.
    pub requested: BTreeSet<NodeId>,
    pub last_scale_out: Option<Time>,
    pub last_scale_in: Option<Time>,
    /// Ready nodes without jobs, by the time they became idle.
    pub idle: BTreeSet<(Time, NodeId)>,
    /// Ready nodes (so scans never walk nodes that are gone).
    pub ready: BTreeSet<NodeId>,
    /// The nodes metric policies (target tracking) want now; it raises the pool's min.
    pub policy_min: u32,
    /// GPUs bound on its nodes per tier index.
    pub tier_gpus: Vec<u32>,
    /// Of those, the GPUs of interruptible jobs, the only ones preemption may stop (a pass reads whether a job
    /// could find victims here).
    pub victim_gpus: Vec<u32>,
}

/// Counters reported at the end of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    pub scale_actions: u64,
    pub nodes_launched: u64,
    pub launch_failures: u64,
    pub preemptions: u64,
    pub requeues: u64,
    /// Passes that stopped at the queue scan limit or the blocked-job cap.
    pub scan_limit_hits: u64,
    /// Interruption notices received.
    pub interruptions: u64,
    /// Jobs stopped, checkpointed and requeued because of a notice.
    pub notices_acted_on: u64,
    /// Moves away from an offering or market: backoffs, jobs moved to on-demand.
    pub fallbacks: u64,
    /// Deadline jobs moved from spot to on-demand while running.
    pub migrations: u64,
    /// GPU-milliseconds of work lost by stopped attempts (time since their last checkpoint).
    pub lost_gpu_ms: i128,
    /// Starts that moved a job's data from another region.
    pub data_moves: u64,
}

/// Jobs, nodes, teams and indexes.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub jobs: Vec<Job>,
    pub nodes: Vec<Node>,
    pub teams: Vec<TeamState>,
    pub team_index: BTreeMap<String, usize>,
    /// Per pool: ready nodes with free GPUs, by (free GPUs, id), for best-fit search.
    pub free: Vec<BTreeSet<(u32, NodeId)>>,
    pub pools: Vec<PoolState>,
    pub ledger: Ledger,
    pub counters: Counters,
    /// Per (pool, instance type): launches held off until this time after failures, and the failure streak.
    pub backoff: BTreeMap<(usize, usize), (Time, u32)>,
    /// Per (pool, instance type): times of recent interruption notices (the last hour).
    pub interrupted: BTreeMap<(usize, usize), Vec<Time>>,
    /// Per (pool, instance type): (interruptions, node-milliseconds run) over the whole run, for risk estimates.
    pub offering_history: BTreeMap<(usize, usize), (u64, i64)>,
    /// Run times of succeeded jobs per team and tier: what sizes a job without a declared duration for its
    /// waiting budget.
    pub runs: crate::wait_budget::RunHistory,
}

impl Cluster {
    /// Returns a cluster with the fixed pools' nodes ready at `now` and no jobs.
    pub fn new(cfg: &Config, now: Time) -> Cluster {
        let mut c = Cluster {
            jobs: Vec::new(),
            nodes: Vec::new(),
            teams: Vec::new(),
            team_index: BTreeMap::new(),
            free: vec![BTreeSet::new(); cfg.pools.len()],
            pools: vec![PoolState::default(); cfg.pools.len()],
            ledger: Ledger::new(cfg.pools.len(), cfg.tiers.len()),
            counters: Counters::default(),
            backoff: BTreeMap::new(),
            interrupted: BTreeMap::new(),
            offering_history: BTreeMap::new(),
            runs: Default::default(),
        };
        for t in &cfg.teams {
            c.team(&t.name, t.quota_gpus, t.weight);
        }
        for (p, pool) in cfg.pools.iter().enumerate().filter(|(_, p)| p.market == Market::Fixed) {
            for group in &pool.nodes {
                for _ in 0..group.count {
                    let price = pool.gpu_usd_per_hour * group.gpus as f64;
                    let id = c.add_node(p, Market::Fixed, None, group.gpu_model.clone(), group.gpus, price, now);
                    c.node_ready(id, now);
                }
            }
        }
        c
    }

    /// Returns the index of team `name`, adding it (no quota, weight 1) when the config does not list it.
    pub fn team(&mut self, name: &str, quota: Option<u32>, weight: f64) -> usize {
        if let Some(&i) = self.team_index.get(name) {
            return i;
        }
        self.teams.push(TeamState { name: name.into(), quota_gpus: quota, weight, used_gpus: 0 });
        self.team_index.insert(name.into(), self.teams.len() - 1);
        self.teams.len() - 1
    }

    /// Adds a node in state `Requested` and returns its id.
    #[allow(clippy::too_many_arguments)]
    pub fn add_node(
        &mut self,
        pool: usize,
        market: Market,
        instance_type: Option<usize>,
        gpu_model: String,
        gpus: u32,
        price_usd_per_hour: f64,
        now: Time,
    ) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(Node {
            id,
            pool,
            market,
            instance_type,
            gpu_model,
            gpus,
            used: 0,
            jobs: Vec::new(),
            state: NodeState::Requested,
            price_usd_per_hour,
            requested_at: now,
            billed_from: now,
            ready_at: None,
            ended_at: None,
            idle_since: None,
            gpu_utilization: None,
            protected: false,
            at_risk: false,
            interrupted: false,
            held: None,
        });
        self.pools[pool].alive += 1;
        self.pools[pool].requested.insert(id);
        id
    }

    /// Marks a requested node ready and empty.
    pub fn node_ready(&mut self, id: NodeId, now: Time) {
        let n = &mut self.nodes[id.0 as usize];
        if n.state != NodeState::Requested {
            return;
        }
        n.state = NodeState::Ready;
        n.ready_at = Some(now);
        n.idle_since = Some(now);
        let (pool, gpus) = (n.pool, n.gpus);
        self.pools[pool].requested.remove(&id);
        self.pools[pool].ready.insert(id);
        self.pools[pool].idle.insert((now, id));
        self.free[pool].insert((gpus, id));
    }

    /// Ends a node's life in `state` (terminated, failed or lost) and books its cost. It must run no job.
    pub fn node_end(&mut self, id: NodeId, state: NodeState, now: Time) {
        let n = &mut self.nodes[id.0 as usize];
        if !n.alive() {
            return;
        }
        let was = n.state;
        n.state = state;
        n.ended_at = Some(now);
        let (pool, free) = (n.pool, n.free());
        // A failed launch is not billed: the instance never ran.
        let ran = if state == NodeState::Failed { 0 } else { now - n.requested_at };
        let billed = if state == NodeState::Failed { 0 } else { now - n.billed_from };
        if let Some(since) = n.idle_since.take() {
            self.pools[pool].idle.remove(&(since, id));
        }
        self.free[pool].remove(&(free, id));
        self.pools[pool].ready.remove(&id);
        self.pools[pool].alive -= 1;
        if was == NodeState::Requested {
            self.pools[pool].requested.remove(&id);
        }
        self.book_billed(id, billed);
        if let Some(it) = self.nodes[id.0 as usize].instance_type {
            self.offering_history.entry((pool, it)).or_default().1 += ran;
        }
    }

    /// Books `billed` ms of node `id` by its pool and market; a node another scheduler asked for is billed whole
    /// to the team and tier of the job that asked (that scheduler, not Spillway, knows what ran on it).
    pub fn book_billed(&mut self, id: NodeId, billed: Time) {
        let n = &self.nodes[id.0 as usize];
        let (pool, market, price, gpus) = (n.pool, n.market, n.price_usd_per_hour, n.gpus);
        self.ledger.book_node(pool, market, price, gpus, billed);
        if let Some(h) = &n.held {
            self.ledger.book_job(h.team, h.tier, gpus, gpus, price, billed);
        }
    }

    /// Returns the books as they would close at `now`: what is booked, plus what every live node and running job
    /// has accrued since it started, exactly as [`crate::Engine::finish`] would book it. Changes nothing.
    pub fn books_at(&self, now: Time) -> Ledger {
        let mut l = self.ledger.clone();
        self.accrue(&mut l, |since| now - since);
        l
    }

    /// Returns what one hour of the present costs: every live node and running job booked for an hour on empty
    /// books. Between two changes of the cluster, cost grows by exactly this rate.
    pub fn hourly_books(&self) -> Ledger {
        let mut l = Ledger::new(self.ledger.by_pool.len(), self.ledger.by_tier.len());
        self.accrue(&mut l, |_| crate::time::HOUR_MS);
        l
    }

    /// Books into `l` each live node for `span(billed_from)` and each running job's share of it for
    /// `span(attempt start, or billed_from when later)`: the bookings that are still open.
    fn accrue(&self, l: &mut Ledger, span: impl Fn(Time) -> Time) {
        // One entry per team, booked or not, so two books line up key by key.
        l.by_team.resize(self.teams.len().max(l.by_team.len()), 0.0);
        for n in self.nodes.iter().filter(|n| n.alive()) {
            self.book_segment(l, n, &span);
        }
    }

    /// Books node `n`'s open segment into `l`: the node for `span(billed_from)`, a scheduler's hold and each
    /// running job's share from the later of its attempt's start and `billed_from`, at the node's price.
    fn book_segment(&self, l: &mut Ledger, n: &crate::model::Node, span: &impl Fn(Time) -> Time) {
        let (price, gpus, from) = (n.price_usd_per_hour, n.gpus, n.billed_from);
        l.book_node(n.pool, n.market, price, gpus, span(from));
        if let Some(h) = &n.held {
            l.book_job(h.team, h.tier, gpus, gpus, price, span(from));
        }
        for &job in &n.jobs {
            let j = &self.jobs[job.0 as usize];
            let Some(start) = j.attempt_start.filter(|_| j.state == JobState::Running) else { continue };
            for &(_, used) in j.placement.iter().filter(|(at, _)| *at == n.id) {
                l.book_job(j.team, j.tier, used, gpus, price, span(start.max(from)));
            }
        }
    }

    /// Re-prices every live node of offering (`pool`, `it`) at `usd_per_hour` from `now`: the segment each has
    /// open is booked at its old price and a new one opens.
    pub fn reprice(&mut self, pool: usize, it: usize, usd_per_hour: f64, now: Time) {
        let ids: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| {
                let n = &self.nodes[i];
                n.alive() && n.pool == pool && n.instance_type == Some(it) && n.market == Market::Spot
            })
            .collect();
        let mut l = std::mem::take(&mut self.ledger);
        for i in ids {
            self.book_segment(&mut l, &self.nodes[i], &|since| now - since);
            let n = &mut self.nodes[i];
            (n.price_usd_per_hour, n.billed_from) = (usd_per_hour, now);
        }
        self.ledger = l;
    }

    /// Marks a ready node draining: it keeps its running jobs (until they stop) but takes no new work and is
    /// no candidate for scale-in or preemption.
    pub fn drain(&mut self, id: NodeId) {
        let n = &mut self.nodes[id.0 as usize];
        if n.state != NodeState::Ready {
            return;
        }
        n.state = NodeState::Draining;
        let (pool, free) = (n.pool, n.free());
        if let Some(since) = n.idle_since.take() {
            self.pools[pool].idle.remove(&(since, id));
        }
        self.free[pool].remove(&(free, id));
        self.pools[pool].ready.remove(&id);
    }

    /// Returns a draining node to service: it takes new work again and may go by scale-in once idle.
    pub fn undrain(&mut self, id: NodeId, now: Time) {
        let n = &mut self.nodes[id.0 as usize];
        if n.state != NodeState::Draining {
            return;
        }
        n.state = NodeState::Ready;
        let (pool, free, empty) = (n.pool, n.free(), n.jobs.is_empty());
        if empty {
            n.idle_since = Some(now);
            self.pools[pool].idle.insert((now, id));
        }
        self.pools[pool].ready.insert(id);
        if free > 0 {
            self.free[pool].insert((free, id));
        }
    }

    /// Binds `gpus` GPUs of `node` to `job`.
    pub fn bind(&mut self, job: JobId, node: NodeId, gpus: u32) {
        let n = &mut self.nodes[node.0 as usize];
        let pool = n.pool;
        self.free[pool].remove(&(n.free(), node));
        if let Some(since) = n.idle_since.take() {
            self.pools[pool].idle.remove(&(since, node));
        }
        n.used += gpus;
        if !n.jobs.contains(&job) {
            n.jobs.push(job);
        }
        if n.free() > 0 {
            self.free[pool].insert((n.free(), node));
        }
        let j = &self.jobs[job.0 as usize];
        let (team, tier, interruptible) = (j.team, j.tier, j.interruptible);
        self.teams[team].used_gpus += gpus;
        let st = &mut self.pools[pool];
        for (by_tier, counts) in [(&mut st.tier_gpus, true), (&mut st.victim_gpus, interruptible)] {
            if by_tier.len() <= tier {
                by_tier.resize(tier + 1, 0);
            }
            by_tier[tier] += if counts { gpus } else { 0 };
        }
    }

    /// Makes `job` uninterruptible (no longer a job preemption may stop), wherever it holds GPUs.
    pub fn make_uninterruptible(&mut self, job: JobId) {
        let j = &mut self.jobs[job.0 as usize];
        if std::mem::replace(&mut j.interruptible, false) {
            for &(node, gpus) in &j.placement {
                let pool = self.nodes[node.0 as usize].pool;
                if let Some(n) = self.pools[pool].victim_gpus.get_mut(j.tier) {
                    *n -= gpus;
                }
            }
        }
    }

    /// Releases every GPU a job holds, books its cost for the attempt, and clears its placement.
    pub fn release(&mut self, job: JobId, now: Time) {
        let j = &mut self.jobs[job.0 as usize];
        let placement = std::mem::take(&mut j.placement);
        let (team, tier, interruptible) = (j.team, j.tier, j.interruptible);
        for (node, gpus) in placement {
            let n = &mut self.nodes[node.0 as usize];
            let pool = n.pool;
            // Earlier segments of this node were booked when its price changed.
            let held_ms = j.attempt_start.map_or(0, |s| now - s.max(n.billed_from));
            self.ledger.book_job(team, tier, gpus, n.gpus, n.price_usd_per_hour, held_ms);
            if n.free() > 0 {
                self.free[pool].remove(&(n.free(), node));
            }
            n.used -= gpus;
            n.jobs.retain(|&x| x != job);
            let usable = n.state == NodeState::Ready;
            if usable && n.free() > 0 {
                self.free[pool].insert((n.free(), node));
            }
            if usable && n.jobs.is_empty() {
                n.idle_since = Some(now);
                self.pools[pool].idle.insert((now, node));
            }
            self.teams[team].used_gpus -= gpus;
            if let Some(used) = self.pools[pool].tier_gpus.get_mut(tier) {
                *used -= gpus;
            }
            if let Some(used) = self.pools[pool].victim_gpus.get_mut(tier).filter(|_| interruptible) {
                *used -= gpus;
            }
        }
    }
}
