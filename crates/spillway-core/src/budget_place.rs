//! Where a job inside its waiting budget may start, and its budget. Inside its budget a job waits for owned
//! capacity, so it starts only where it buys no cloud time of its own: owned nodes; a cloud pool whose every node
//! its minimum keeps; a busy cloud node whose other jobs are expected to run past its own end (the node stays up
//! for them anyway); or a cloud node already up and idle that it is expected to leave before the node's idle
//! time-out would have ended. That last one is not free: the node idles out one time-out after the job instead of
//! now. But a short job there costs a short run on a node already up, where waiting would often end in a fresh
//! boot and a fresh time-out once the budget runs out (a pool would boot a node for each short job). Anywhere
//! else the job would keep a cloud node up for the length of its run, the spending its budget is there to avoid.

use crate::access::{Need, job_pools};
use crate::cluster::Cluster;
use crate::config::{Config, Market};
use crate::model::{Job, JobId, Node, NodeId};
use crate::place::{ReadyGpus, Slot, place};
use crate::time::{Time, secs};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Returns whether pool `p`'s nodes cost nothing more whoever runs there: owned, or all kept by its minimum.
pub(crate) fn kept(cfg: &Config, c: &Cluster, p: usize) -> bool {
    cfg.pools[p].market == Market::Fixed || c.pools[p].alive <= cfg.pools[p].min_nodes
}

/// Returns when a ready cloud node would leave if no other job came: its idle time-out after its jobs' expected
/// ends (or after it became idle), or `None` when one of its jobs has no known duration (it may stay for long).
fn leaves_at(node: &Node, jobs: &[Job], idle_timeout: Time, now: Time) -> Option<Time> {
    if node.jobs.is_empty() {
        return Some(node.idle_since.unwrap_or(now).saturating_add(idle_timeout));
    }
    let mut end = now;
    for j in &node.jobs {
        end = end.max(jobs.get(j.0 as usize)?.declared_end(now)?);
    }
    Some(end.saturating_add(idle_timeout))
}

/// Returns whether some ready node of pool `p` has `g` free GPUs or more and would admit a job inside its budget
/// expected to end at `end` (see [`find`]; nodes held for waiting gangs and GPU models aside, so a `false` is
/// certain and a `true` may not be).
pub(crate) fn may_admit(c: &Cluster, cfg: &Config, p: usize, g: u32, (end, now): (Time, Time)) -> bool {
    let mut roomy = c.free[p].range((g, NodeId(0))..).map(|&(_, n)| &c.nodes[n.0 as usize]);
    if kept(cfg, c, p) {
        return roomy.next().is_some();
    }
    let idle_timeout = secs(cfg.pools[p].idle_timeout_s.min(1e12));
    roomy.any(|n| leaves_at(n, &c.jobs, idle_timeout, now).is_some_and(|t| end <= t))
}

/// Which nodes a job whose placement depends on its expected end may use (see the module doc).
pub(crate) struct Admit<'a> {
    /// When the job is expected to end, and now.
    pub end: Time,
    pub now: Time,
    /// Inside its waiting budget: the cloud rules apply.
    pub in_wait: bool,
    /// Nodes held for waiting gangs, with when the gang could start there.
    pub shadows: &'a [(NodeId, Time)],
}

/// Finds nodes for every worker of a job under `rule`, in the first pool of `order` where the gang fits; leaves
/// `c` as it was.
pub(crate) fn find(
    c: &mut Cluster,
    cfg: &Config,
    order: &[usize],
    need: &Need,
    rule: Admit<'_>,
    slots: &mut Vec<(Slot, u32)>,
) -> Option<Vec<(NodeId, u32)>> {
    let Admit { end, now, in_wait, shadows } = rule;
    for pool in job_pools(cfg, order, need.access) {
        let keeps = !in_wait || kept(cfg, c, pool);
        let idle_timeout = secs(cfg.pools[pool].idle_timeout_s.min(1e12));
        let Cluster { free, nodes, jobs, .. } = &mut *c;
        let jobs: &[Job] = jobs;
        let admit = move |n: &Node| {
            let shadow_ok = shadows.iter().filter(|(s, _)| *s == n.id).all(|&(_, t)| end <= t);
            shadow_ok && (keeps || leaves_at(n, jobs, idle_timeout, now).is_some_and(|t| end <= t))
        };
        let mut ready = ReadyGpus { free: &mut free[pool], nodes, admit: Some(&admit) };
        place(&mut ready, need.g, need.w, need.model.as_deref(), false, slots);
        if slots.len() == need.w as usize {
            return Some(slots.iter().filter_map(|(s, _)| s.ready()).map(|n| (n, need.g)).collect());
        }
    }
    None
}

/// Holds nodes softly for a gang inside its budget, EASY-style: in the first pool of `order` it may wait for
/// (owned, or kept by a minimum) that could ever hold it, the nodes expected to drain first, enough of them for
/// every worker, each marked with when the last of them drains (when the gang could start). Jobs that end by then
/// may still use them. A gang no such pool can hold holds nothing. `drains`: the pools' nodes in drain order, as
/// far as known (see [`Drains`]).
///
/// Also returns the first instant after `now` at which a node of that pool reaches its expected drain: from then
/// on a job past its estimate counts as ending at every `now`, which may change which nodes are held and when the
/// gang could start with nothing but time passing (so the caller asks to be woken then).
pub(crate) fn shadow_hold(
    c: &Cluster,
    cfg: &Config,
    (order, drains): (&[usize], &mut Drains),
    need: &Need,
    now: Time,
) -> (Vec<(NodeId, Time)>, Option<Time>) {
    let want = need.model.as_deref();
    let g = need.g.max(1);
    for pool in job_pools(cfg, order, need.access).filter(|&p| kept(cfg, c, p)) {
        let fits = |node: &Node| node.gpus >= g && crate::config::model_fits(want, &node.gpu_model);
        let nodes = drains.of(c, pool, now).iter().map(|&(at, n)| (at, &c.nodes[n.0 as usize]));
        let nodes = nodes.filter(|(_, n)| fits(n));
        let next = nodes.clone().map(|(at, _)| at).find(|&at| at > now);
        let (mut workers, mut held) = (0u32, Vec::new());
        for (at, n) in nodes {
            held.push(n.id);
            workers = workers.saturating_add(n.gpus / g);
            if workers >= need.w {
                return (held.into_iter().map(|n| (n, at)).collect(), next);
            }
        }
    }
    (Vec::new(), None)
}

/// Per pool, its ready nodes by when they are expected to drain ([`drained_at`]), then by id; worked out when
/// first asked for in a pass and kept up to date as the pass binds GPUs ([`Drains::bound`]).
#[derive(Default)]
pub(crate) struct Drains {
    pools: Vec<Option<Vec<(Time, NodeId)>>>,
}

impl Drains {
    /// Returns pool `pool`'s ready nodes in drain order.
    fn of(&mut self, c: &Cluster, pool: usize, now: Time) -> &[(Time, NodeId)] {
        if self.pools.len() <= pool {
            self.pools.resize(pool + 1, None);
        }
        self.pools[pool].get_or_insert_with(|| {
            let ready = c.pools[pool].ready.iter().map(|n| &c.nodes[n.0 as usize]);
            let mut nodes: Vec<(Time, NodeId)> = ready.map(|n| (drained_at(c, n, now), n.id)).collect();
            nodes.sort_unstable();
            nodes
        })
    }

    /// Notes that the pass bound GPUs on `node` to a job: the node drains when that job is expected to end, if
    /// later.
    pub(crate) fn bound(&mut self, c: &Cluster, node: NodeId, now: Time) {
        let Some(n) = c.nodes.get(node.0 as usize) else { return };
        let Some(Some(nodes)) = self.pools.get_mut(n.pool) else { return };
        let Some(i) = nodes.iter().position(|&(_, id)| id == node) else { return };
        nodes.remove(i);
        let entry = (drained_at(c, n, now), node);
        let at = nodes.partition_point(|e| *e < entry);
        nodes.insert(at, entry);
    }

    /// Forgets every pool's order: the pass freed GPUs.
    pub(crate) fn freed(&mut self) {
        self.pools.clear();
    }
}

/// Returns when every job on `node` is expected to have ended (see [`expected_end`]).
fn drained_at(c: &Cluster, node: &Node, now: Time) -> Time {
    let mut at = now;
    for j in &node.jobs {
        let Some(job) = c.jobs.get(j.0 as usize) else { continue };
        at = at.max(expected_end(c, job, now));
    }
    at
}

/// Returns when running `job` is expected to end: its declared duration, else its team's estimate; a job past
/// its estimate is taken to end now.
fn expected_end(c: &Cluster, job: &Job, now: Time) -> Time {
    match job.declared_end(now) {
        Some(end) => end,
        None => job.attempt_start.unwrap_or(now).saturating_add(expected_run(c, job)).max(now),
    }
}

/// Returns whether queued `job`, whose waiting budget ends at `budget_end` (after `now`), stops waiting for owned
/// capacity now: its tier bursts early ([`crate::config::Tier::burst_early`]) and in no pool of `order` it may
/// wait in (owned, or kept by a minimum) would enough GPUs for all its workers be free before the budget ends
/// ([`FitCache::owned_fit_at`]). Waiting on would add its budget to its completion time and save nothing.
///
/// The estimate leaves out the jobs queued ahead of it, which would take some of that capacity first, so a job
/// that stops waiting could not have started in time. It is a function of the state alone: a job's expected end
/// is fixed, or `now` once it is past its estimate, and `now` is before `budget_end`, so time passing between
/// events does not change the answer.
pub(crate) fn owned_too_late(
    c: &Cluster,
    cfg: &Config,
    order: &[usize],
    job: &Job,
    (budget_end, now): (Time, Time),
    fits: &mut FitCache,
) -> bool {
    if !cfg.tiers[job.tier].burst_early {
        return false;
    }
    let shape = (job.gang.kind, job.spec.gpus_per_worker, job.gang.workers, job.spec.gpu_model.as_deref());
    let access = crate::access::Access::of(job, now);
    shape_too_late(c, cfg, (order, access, shape), (budget_end, now), fits)
}

/// Returns [`owned_too_late`] for a job of a `burst_early` tier that may use the pools of `order` its `access`
/// allows, of `shape`.
pub(crate) fn shape_too_late(
    c: &Cluster,
    cfg: &Config,
    (order, access, shape): (&[usize], crate::access::Access, FitShape<'_>),
    (budget_end, now): (Time, Time),
    fits: &mut FitCache,
) -> bool {
    if now >= budget_end {
        return false;
    }
    let mut pools = job_pools(cfg, order, access).filter(|&p| kept(cfg, c, p));
    !pools.any(|p| fits.at(c, p, shape, now).is_some_and(|at| at <= budget_end))
}

/// What a scheduling pass learned of [`FitCache::owned_fit_at`]: answers by pool and job shape, forgotten when it binds GPUs
/// in the pool or frees any; and per pool, when the jobs on its ready nodes are expected to end, kept up to date
/// as the pass binds.
#[derive(Default)]
pub(crate) struct FitCache {
    /// By (pool, job kind, workers).
    answers: BTreeMap<(usize, u32, u32), Option<Time>>,
    ends: Vec<Option<PoolEnds>>,
    /// GPUs the pass bound to jobs on nodes, which the jobs' placements show only once the pass is applied.
    bound: Vec<(JobId, NodeId, u32)>,
}

/// A pool's ready nodes (by id), and the GPUs each job there gives back when it is expected to end ([`expected_end`]):
/// (when, index of the node, GPUs), in time order as far as asked for (most answers need only the first few), the
/// rest in a heap.
struct PoolEnds {
    nodes: Vec<NodeId>,
    ends: Vec<End>,
    rest: BinaryHeap<Reverse<End>>,
}

/// When a job is expected to end, the index of its node in [`PoolEnds::nodes`], and the GPUs it gives back there.
type End = (Time, usize, u32);

impl PoolEnds {
    /// Returns the `k`-th end in time order, if there are that many.
    fn nth(&mut self, k: usize) -> Option<End> {
        while self.ends.len() <= k {
            let Reverse(next) = self.rest.pop()?;
            self.ends.push(next);
        }
        self.ends.get(k).copied()
    }

    /// Adds an end.
    fn insert(&mut self, end: End) {
        if self.ends.last().is_some_and(|last| end <= *last) {
            // Not after the ends in order so far, so before every one in the heap.
            let at = self.ends.partition_point(|e| *e < end);
            self.ends.insert(at, end);
        } else {
            self.rest.push(Reverse(end));
        }
    }
}

/// A job shape as [`FitCache`] reads it: its kind (GPUs per worker and GPU model, see [`crate::queue::Queue::kind`]),
/// GPUs per worker, workers, GPU model.
pub(crate) type FitShape<'a> = (u32, u32, u32, Option<&'a str>);

impl FitCache {
    /// Returns [`FitCache::owned_fit_at`] for pool `pool` and a job `shape`, computed once per shape until the pass binds
    /// GPUs in the pool or frees any ([`FitCache::bound`], [`FitCache::freed`]).
    fn at(&mut self, c: &Cluster, pool: usize, shape: FitShape<'_>, now: Time) -> Option<Time> {
        let key = (pool, shape.0, shape.2);
        if let Some(&at) = self.answers.get(&key) {
            return at;
        }
        let at = self.owned_fit_at(c, pool, shape, now);
        self.answers.insert(key, at);
        at
    }

    /// Returns the earliest time, `now` or later, at which the ready nodes of pool `pool` could hold every worker
    /// of a job of `shape`: on each node that fits a worker, its free GPUs and those of its jobs expected to have
    /// ended by then ([`expected_end`]); `None` when even all of them could not.
    fn owned_fit_at(&mut self, c: &Cluster, pool: usize, shape: FitShape<'_>, now: Time) -> Option<Time> {
        let (_, g, w, want) = shape;
        let g = g.max(1);
        let fit = |n: &Node| n.gpus >= g && crate::config::model_fits(want, &n.gpu_model);
        let fits: Vec<bool> = c.pools[pool].ready.iter().map(|n| fit(&c.nodes[n.0 as usize])).collect();
        let free_of = |(n, &f): (&NodeId, &bool)| if f { c.nodes[n.0 as usize].free() } else { 0 };
        let mut free: Vec<u32> = c.pools[pool].ready.iter().zip(&fits).map(free_of).collect();
        let mut workers = free.iter().fold(0u32, |w, f| w.saturating_add(f / g));
        if workers >= w {
            return Some(now);
        }
        let ends = self.ends_of(c, pool, now);
        let mut k = 0;
        while let Some((at, i, gpus)) = ends.nth(k) {
            k += 1;
            if !fits[i] {
                continue;
            }
            let before = free[i] / g;
            free[i] = free[i].saturating_add(gpus);
            workers = workers.saturating_add(free[i] / g - before);
            if workers >= w {
                return Some(at);
            }
        }
        None
    }

    /// Returns pool `pool`'s [`PoolEnds`], worked out when first asked for in a pass.
    fn ends_of(&mut self, c: &Cluster, pool: usize, now: Time) -> &mut PoolEnds {
        if self.ends.len() <= pool {
            self.ends.resize_with(pool + 1, || None);
        }
        let bound = &self.bound;
        self.ends[pool].get_or_insert_with(|| {
            let nodes: Vec<NodeId> = c.pools[pool].ready.iter().copied().collect();
            let mut ends = Vec::new();
            for (i, node) in nodes.iter().map(|n| &c.nodes[n.0 as usize]).enumerate() {
                for (&id, job) in node.jobs.iter().filter_map(|j| Some(j).zip(c.jobs.get(j.0 as usize))) {
                    // A job the pass started has no placement yet: the pass's own binds say where its GPUs are.
                    let gpus: u32 = if job.placement.is_empty() {
                        bound.iter().filter(|&&(j, n, _)| j == id && n == node.id).map(|&(.., g)| g).sum()
                    } else {
                        job.placement.iter().filter(|(n, _)| *n == node.id).map(|&(_, g)| g).sum()
                    };
                    ends.push(Reverse((expected_end(c, job, now), i, gpus)));
                }
            }
            PoolEnds { nodes, ends: Vec::new(), rest: BinaryHeap::from(ends) }
        })
    }

    /// Notes that the pass freed job `id`'s GPUs and forgets everything else.
    pub(crate) fn freed(&mut self, id: JobId) {
        self.bound.retain(|&(j, ..)| j != id);
        self.answers.clear();
        self.ends.clear();
    }

    /// Notes that the pass bound `placement` to job `id` (its placement shows it once the pass is applied):
    /// forgets the answers for the pools it is in (a start on a cloud node changes nothing owned) and adds the
    /// job's expected end to their nodes' ends.
    pub(crate) fn bound(&mut self, c: &Cluster, id: JobId, placement: &[(NodeId, u32)], now: Time) {
        self.bound.extend(placement.iter().map(|&(n, g)| (id, n, g)));
        let pool_of = |n: NodeId| c.nodes.get(n.0 as usize).map(|n| n.pool);
        self.answers.retain(|&(p, ..), _| !placement.iter().any(|&(n, _)| pool_of(n) == Some(p)));
        let Some(job) = c.jobs.get(id.0 as usize) else { return };
        for &(n, g) in placement {
            let Some(pool) = pool_of(n) else { continue };
            let Some(Some(pe)) = self.ends.get_mut(pool) else { continue };
            let Ok(i) = pe.nodes.binary_search(&n) else { continue };
            pe.insert((expected_end(c, job, now), i, g));
        }
    }
}

/// Returns how long `job` is expected to run (see [`crate::wait_budget::expected_run`]).
pub(crate) fn expected_run(c: &Cluster, job: &Job) -> Time {
    let declared = job.spec.expected_duration_ms;
    let history = if declared.is_none() { c.runs.mean(job.team, job.tier) } else { None };
    crate::wait_budget::expected_run(declared, history).0
}

/// Returns how long `job` waits for owned capacity before cloud capacity is bought for it (its tier's waiting
/// budget for its size, see [`crate::wait_budget`]).
pub(crate) fn budget_of(c: &Cluster, cfg: &Config, job: &Job) -> Time {
    wait_budget_of(c, cfg, job).wait_ms
}

/// Returns `job`'s waiting budget and what it was worked out from (the team's history is read only when the size
/// part needs it).
pub(crate) fn wait_budget_of(c: &Cluster, cfg: &Config, job: &Job) -> crate::wait_budget::Budget {
    let tier = &cfg.tiers[job.tier];
    let declared = job.spec.expected_duration_ms;
    let needs_history = tier.burst_wait_per_gpu_hour_s > 0.0 && declared.is_none();
    let history = if needs_history { c.runs.mean(job.team, job.tier) } else { None };
    crate::wait_budget::budget(tier, job.total_gpus(), declared, history)
}
