//! The scheduling pass: walks the queue in order (tier, team fair share, age), places gangs all-or-nothing with
//! best-fit bin-packing (the fullest node that still fits, so whole nodes stay free for large gangs), holds nodes
//! back for blocked multi-GPU jobs so smaller jobs backfill only around them, and preempts strictly lower tiers
//! when a job would otherwise miss its queue-wait SLO.

use crate::access::{Access, job_pools, uniform_progress_at};
use crate::cluster::Cluster;
use crate::config::{Config, DeadlinePolicy, Market, model_fits};
use crate::event::{DecisionKind, StopReason, job_subject};
use crate::model::{Job, JobId, JobState, NodeId, NodeState, PendingReason};
use crate::place::{ReadyGpus, place};
use crate::queue::Queue;
use crate::shape::Failed;
use crate::state::{Engine, WakeAt};
use crate::time::{Time, secs};

/// Most jobs one pass preempts for.
const MAX_PREEMPTING_JOBS: usize = 16;
/// Blocked jobs a pass collects that no pool they may use can grow for now (enough to find preemption
/// candidates); once it has that many, the pass ends.
const BLOCKED_CAP_NO_SCALE: usize = 256;
/// Blocked jobs a pass collects for the autoscaler (jobs some pool they may use can grow for).
const BLOCKED_CAP: usize = 2048;

/// What a job asks of a node, copied out of the job so the cluster can be edited while it is in hand.
pub(crate) struct Need {
    pub g: u32,
    pub w: u32,
    pub model: Option<String>,
    pub access: Access,
    pub tier: usize,
}

impl Need {
    pub(crate) fn of(job: &Job, now: Time) -> Need {
        Need {
            g: job.spec.gpus_per_worker,
            w: job.spec.workers,
            model: job.spec.gpu_model.clone(),
            access: Access::of(job, now),
            tier: job.tier,
        }
    }
}

/// Finds nodes for every worker of `job` inside one pool (the first in its order where the whole gang fits, see
/// [`place`]), or `None`. Leaves `c` as it was.
fn find_placement(c: &mut Cluster, cfg: &Config, order: &[usize], job: &Need) -> Option<Vec<(NodeId, u32)>> {
    let Cluster { free, nodes, .. } = c;
    for pool in job_pools(cfg, order, job.access) {
        let mut ready = ReadyGpus { free: &mut free[pool], nodes };
        let taken = place(&mut ready, job.g, job.w, job.model.as_deref(), false);
        if taken.len() == job.w as usize {
            return Some(taken.into_iter().filter_map(|(s, _)| s.ready()).map(|n| (n, job.g)).collect());
        }
    }
    None
}

/// Holds back up to `workers` nodes with the most free GPUs for a blocked job, so later, smaller jobs do not
/// take them; returns what it removed from the free index.
fn reserve(c: &mut Cluster, cfg: &Config, order: &[usize], job: &Need) -> Vec<(usize, u32, NodeId)> {
    let (g, w) = (job.g, job.w);
    let want = job.model.as_deref();
    for pool in job_pools(cfg, order, job.access) {
        let picks: Vec<(u32, NodeId)> = c.free[pool]
            .iter()
            .rev()
            .filter(|(_, n)| {
                let node = &c.nodes[n.0 as usize];
                node.gpus >= g && model_fits(want, &node.gpu_model)
            })
            .take(w as usize)
            .copied()
            .collect();
        if !picks.is_empty() {
            return picks
                .into_iter()
                .map(|(f, n)| {
                    c.free[pool].remove(&(f, n));
                    (pool, f, n)
                })
                .collect();
        }
    }
    Vec::new()
}

/// Picks nodes for every worker of `job` by stopping jobs of strictly lower, preemptible tiers, choosing the
/// nodes whose victims lose the least work. Returns (node per worker, victims), or `None`.
fn find_victims(
    c: &Cluster,
    cfg: &Config,
    order: &[usize],
    job: &Need,
    now: Time,
) -> Option<(Vec<NodeId>, Vec<JobId>)> {
    let (g, w) = (job.g, job.w as usize);
    let want = job.model.as_deref();
    let prio = cfg.tiers[job.tier].priority;
    // One buffer for every node's candidates (a pass may look at hundreds of nodes for each of 16 jobs).
    let mut cands: Vec<(i128, JobId, u32)> = Vec::new();
    for pool in job_pools(cfg, order, job.access) {
        // (lost GPU-ms, node) per candidate node; its victims are found again for the nodes chosen.
        let mut options: Vec<(i128, NodeId)> = Vec::new();
        let nodes = c.pools[pool].ready.iter().map(|n| &c.nodes[n.0 as usize]).filter(|n| n.gpus >= g);
        for node in nodes.filter(|n| model_fits(want, &n.gpu_model)).take(cfg.policy.preemption_node_limit) {
            if let Some((cost, victims)) = node_victims(c, cfg, prio, node, g, now, &mut cands)
                && (victims > 0 || node.free() >= g)
            {
                options.push((cost, node.id));
            }
        }
        if options.len() >= w {
            options.sort();
            let chosen = &options[..w];
            let mut victims: Vec<JobId> = Vec::new();
            for &(_, n) in chosen {
                node_victims(c, cfg, prio, &c.nodes[n.0 as usize], g, now, &mut cands);
                victims.extend(cands.iter().map(|&(_, v, _)| v));
            }
            victims.sort();
            victims.dedup();
            if victims.is_empty() {
                continue;
            }
            return Some((chosen.iter().map(|&(_, n)| n).collect(), victims));
        }
    }
    None
}

/// Finds the jobs to stop on `node` so it has `g` free GPUs: running jobs of tiers below priority `prio` that
/// are preemptible and interruptible, those that lose the least work first. Returns (work lost in GPU-ms, how
/// many), leaving the victims in `cands`; `None` when stopping every candidate does not free enough. A node
/// with `g` GPUs free already needs none.
fn node_victims(
    c: &Cluster,
    cfg: &Config,
    prio: u32,
    node: &crate::model::Node,
    g: u32,
    now: Time,
    cands: &mut Vec<(i128, JobId, u32)>,
) -> Option<(i128, usize)> {
    cands.clear();
    if node.free() >= g {
        return Some((0, 0));
    }
    cands.extend(
        node.jobs
            .iter()
            .map(|&v| &c.jobs[v.0 as usize])
            .filter(|v| {
                let t = &cfg.tiers[v.tier];
                // Jobs bound earlier in this pass are not running yet and are never victims.
                v.state == JobState::Running && t.priority > prio && t.preemptible && v.interruptible
            })
            .map(|v| {
                let held: u32 = v.placement.iter().filter(|(n, _)| *n == node.id).map(|(_, x)| x).sum();
                (v.unsaved_work_ms(now) as i128 * v.total_gpus() as i128, v.id, held)
            }),
    );
    cands.sort();
    let (mut free, mut cost, mut taken) = (node.free(), 0i128, 0usize);
    for &(lost, _, held) in cands.iter() {
        if free >= g {
            break;
        }
        free += held;
        cost += lost;
        taken += 1;
    }
    cands.truncate(taken);
    (free >= g).then_some((cost, taken))
}

impl Engine {
    /// Runs one scheduling pass. Returns the blocked jobs (in queue order) that may buy cloud capacity now.
    pub(crate) fn schedule(&mut self, wake: &mut WakeAt) -> Vec<JobId> {
        let now = self.now;
        let shares: Vec<f64> = self.c.teams.iter().map(|t| t.used_gpus as f64 / t.weight).collect();
        let weights: Vec<f64> = self.c.teams.iter().map(|t| t.weight).collect();
        // Whether each pool could launch a node now: a blocked job that may use one goes to the autoscaler under
        // the large cap, one that may use none under the small cap (it can only wait or preempt).
        let grows: Vec<bool> = (0..self.cfg.pools.len()).map(|p| self.pool_headroom(p) > 0).collect();
        let (mut buying, mut stuck) = (0usize, 0usize);
        // Shapes that found no placement, or no victims, in this pass (see `shape`).
        let (mut no_room, mut no_victims) = (Failed::default(), Failed::default());
        // Per tier: how long a new job waits for fixed capacity before it may buy cloud capacity.
        let burst_after: Vec<Time> = self.cfg.tiers.iter().map(|t| secs(t.burst_after_s)).collect();
        // Per tier and access: when after entering the queue a job may preempt (see `preemption_offset`).
        let mut due_offsets: Vec<Option<Option<Time>>> = vec![None; self.cfg.tiers.len() * 4];
        let mut started: Vec<(JobId, Vec<(NodeId, u32)>)> = Vec::new();
        let mut preempted: Vec<(JobId, JobId)> = Vec::new();
        let mut blocked: Vec<JobId> = Vec::new();
        let mut reasons: Vec<(JobId, PendingReason)> = Vec::new();
        let mut reserved: Vec<(usize, u32, NodeId)> = Vec::new();
        let (mut reservations, mut preempting, mut scanned) = (0usize, 0usize, 0usize);
        let (mut strict_block, mut limit_hit, mut scan_cut, mut stuck_cut) = (false, false, false, false);
        let mut pinned: Vec<JobId> = Vec::new();
        // The highest priority (lowest value) of a job whose preemption was due but that found no victims: a job
        // of a lower, preemptible tier started later in this pass is a victim the next pass would find.
        let mut due_without_victims: Option<u32> = None;
        // Where in the scan a blocked job first held capacity back from the jobs behind it (a reservation, strict
        // order), and where the last job started.
        let (mut first_hold, mut last_start): (Option<usize>, Option<usize>) = (None, None);
        {
            let Engine { queue, c, cfg, pool_order, exhaustive, .. } = self;
            let remember = !*exhaustive;
            let cfg: &Config = cfg;
            let mut cursor = queue.cursor(shares, weights);
            // Past the cap for jobs that cannot buy, the pass goes on only while a job that can may be further on
            // (a kind of job queued here or below that a pool able to grow could hold), and looks only at those.
            let mut buyers_only = false;
            while let Some(id) = cursor.next() {
                scanned += 1;
                if !buyers_only && stuck >= BLOCKED_CAP_NO_SCALE {
                    buyers_only = buyers_beyond(queue, cfg, pool_order, &grows, cursor.tier());
                }
                let stuck_full = stuck >= BLOCKED_CAP_NO_SCALE && !buyers_only;
                if scanned > cfg.policy.scan_limit || buying >= BLOCKED_CAP || stuck_full {
                    limit_hit = true;
                    scan_cut = scanned > cfg.policy.scan_limit;
                    stuck_cut = stuck_full;
                    break;
                }
                if buyers_only {
                    let job = &c.jobs[id.0 as usize];
                    if !may_buy(cfg, &pool_order[job.tier], &grows, Access::of(job, now)) {
                        continue;
                    }
                }
                let job = &c.jobs[id.0 as usize];
                let team = &c.teams[job.team];
                if team.quota_gpus.is_some_and(|q| team.used_gpus.saturating_add(job.total_gpus()) > q) {
                    reasons.push((id, PendingReason::TeamQuota));
                    continue;
                }
                if let Some(at) = job.not_before.filter(|&t| t > now) {
                    // Its last attempt is still checkpointing: not placeable yet, but replacement capacity is
                    // bought now (it goes to the autoscaler as blocked), and nodes are held back for it so a job
                    // behind it does not take the replacement.
                    wake.at(at);
                    reasons.push((id, PendingReason::Checkpointing));
                    blocked.push(id);
                    let count = if may_buy(cfg, &pool_order[job.tier], &grows, Access::of(job, now)) {
                        &mut buying
                    } else {
                        &mut stuck
                    };
                    *count += 1;
                    if reservations < cfg.policy.max_reservations {
                        reservations += 1;
                        let need = Need::of(job, now);
                        let held = reserve(c, cfg, &pool_order[need.tier], &need);
                        if !held.is_empty() {
                            first_hold.get_or_insert(scanned);
                        }
                        reserved.extend(held);
                    }
                    continue;
                }
                let od_tier = cfg.tiers[job.tier].markets.contains(&Market::OnDemand);
                if let Some(at) = job.spot_only_until.filter(|&t| t > now && job.interruptible && od_tier) {
                    // Just moved back to spot: on-demand opens to it again then.
                    wake.at(at);
                }
                if job.interruptible {
                    if let Some(at) = uniform_progress_at(job).filter(|&t| t > now) {
                        // Falling behind uniform progress lets it take on-demand: look again then.
                        wake.at(at);
                    }
                    if let Some(at) = deadline_pin_at(cfg, &pool_order[job.tier], job, now) {
                        if at <= now {
                            let j = &mut c.jobs[id.0 as usize];
                            j.interruptible = false;
                            j.pinned_on_demand = true;
                            c.counters.fallbacks += 1;
                            pinned.push(id);
                        } else {
                            wake.at(at);
                        }
                    }
                }
                let job = &c.jobs[id.0 as usize];
                let order = &pool_order[job.tier];
                let access = Access::of(job, now);
                let (g, w, tier) = (job.spec.gpus_per_worker, job.spec.workers, job.tier);
                let known_full = remember && no_room.contains(job, access);
                if !strict_block && !known_full {
                    if let Some(placement) = find_placement(c, cfg, order, &Need::of(job, now)) {
                        for &(n, g) in &placement {
                            c.bind(id, n, g);
                        }
                        started.push((id, placement));
                        last_start = Some(scanned);
                        continue;
                    }
                    no_room.insert(&c.jobs[id.0 as usize], access, 0, ());
                }
                if cfg.policy.preemption && preempting < MAX_PREEMPTING_JOBS {
                    let slot =
                        &mut due_offsets[tier * 4 + usize::from(access.spot) * 2 + usize::from(access.on_demand)];
                    let offset = *slot.get_or_insert_with(|| preemption_offset(cfg, c, order, tier, access));
                    if let Some(at) = offset.map(|o| c.jobs[id.0 as usize].queued_since + o) {
                        let job = &c.jobs[id.0 as usize];
                        let victims = if at > now || (remember && no_victims.contains(job, access)) {
                            None
                        } else {
                            find_victims(c, cfg, order, &Need::of(job, now), now)
                        };
                        if at > now {
                            wake.at(at);
                        } else if victims.is_none() {
                            let prio = cfg.tiers[tier].priority;
                            due_without_victims = Some(due_without_victims.map_or(prio, |p| p.min(prio)));
                            no_victims.insert(&c.jobs[id.0 as usize], access, 0, ());
                        }
                        if let Some((nodes, victims)) = victims {
                            preempting += 1;
                            for &v in &victims {
                                // Free the victim's GPUs now so this job binds them in the same pass; the
                                // victim is requeued right after the pass.
                                c.release(v, now);
                                preempted.push((v, id));
                            }
                            // GPUs came free: a shape that found no room (or no victims) may find some now.
                            no_room.clear();
                            no_victims.clear();
                            let placement: Vec<(NodeId, u32)> = nodes.into_iter().map(|n| (n, g)).collect();
                            for &(n, g) in &placement {
                                c.bind(id, n, g);
                            }
                            started.push((id, placement));
                            last_start = Some(scanned);
                            continue;
                        }
                    }
                }
                let job = &c.jobs[id.0 as usize];
                // A job that already ran (interrupted, preempted, lost) does not wait for fixed capacity again.
                let burst_at = if job.attempt > 0 { now } else { job.queued_since + burst_after[job.tier] };
                if now < burst_at {
                    wake.at(burst_at);
                    reasons.push((id, PendingReason::WaitingForFixedCapacity));
                } else {
                    blocked.push(id);
                    let count = if may_buy(cfg, order, &grows, access) { &mut buying } else { &mut stuck };
                    *count += 1;
                }
                if !cfg.policy.backfill {
                    strict_block = true;
                    first_hold.get_or_insert(scanned);
                } else if (w > 1 || g > 1) && reservations < cfg.policy.max_reservations {
                    reservations += 1;
                    let held = reserve(c, cfg, order, &Need::of(job, now));
                    if !held.is_empty() {
                        first_hold.get_or_insert(scanned);
                    }
                    reserved.extend(held);
                }
            }
            for (pool, _, n) in reserved {
                // The node may have changed while held (a victim released there); reinsert its current free GPUs.
                let node = &c.nodes[n.0 as usize];
                if node.state == NodeState::Ready && node.free() > 0 {
                    c.free[pool].insert((node.free(), n));
                }
            }
        }
        // Decisions this pass could not take that the next pass would (a pass depends only on the state and the
        // time, so without a wake-up of their own they would wait for whatever woke the engine next):
        // victims go back to the queue after the pass; a pass that stopped at the scan limit reaches further once
        // jobs it scanned started; a job due to preempt finds the lower-tier jobs this pass started; and the jobs
        // this pass started change their teams' GPUs in use, so where teams interleave (fair share) or a team
        // with a quota started one, the next pass may take the jobs before the last of them in another order or
        // skip one for its quota, and capacity held back for one blocked job there goes to another, or another
        // job comes before the blocked cap (after the last start, the pass saw what the next one would).
        let progressed = !started.is_empty() || !preempted.is_empty();
        let quota_started =
            started.iter().any(|(id, _)| self.c.teams[self.c.jobs[id.0 as usize].team].quota_gpus.is_some());
        let reorder = progressed && (self.queue.teams_interleave() || quota_started);
        let held_back = reorder && first_hold.is_some_and(|h| last_start.is_some_and(|s| h < s));
        let victim_started = due_without_victims.is_some_and(|prio| {
            started.iter().map(|(id, _)| &self.c.jobs[id.0 as usize]).any(|j| {
                let t = &self.cfg.tiers[j.tier];
                t.priority > prio && t.preemptible && j.interruptible
            })
        });
        let cut_short = (scan_cut && progressed) || (limit_hit && reorder);
        if !preempted.is_empty() || cut_short || victim_started || held_back {
            wake.at(now);
        }
        if stuck_cut {
            // The pass stopped at the cap for jobs no pool can grow for: a pool may grow for them when its
            // cooldown ends.
            if let Some(at) = self.next_growth_at() {
                wake.at(at);
            }
        }
        if limit_hit {
            self.c.counters.scan_limit_hits += 1;
            let (queued, limit) = (self.queue.len(), self.cfg.policy.scan_limit);
            self.record(
                DecisionKind::JobPending,
                || "queue".into(),
                PendingReason::QueueScanLimit.code(),
                || {
                    format!(
                        "pass stopped after {} jobs ({} blocked; scan limit {limit}); {queued} queued",
                        scanned - 1,
                        blocked.len()
                    )
                },
            );
        }
        for id in pinned {
            self.record(
                DecisionKind::Fallback,
                || job_subject(id),
                "deadline",
                || {
                    "remaining slack no longer covers a spot interruption plus an on-demand restart: on-demand from now"
                        .into()
                },
            );
        }
        for (victim, by) in preempted {
            self.c.counters.preemptions += 1;
            let (vt, bt) = (self.c.jobs[victim.0 as usize].tier, self.c.jobs[by.0 as usize].tier);
            let (vn, bn) = (self.cfg.tiers[vt].name.clone(), self.cfg.tiers[bt].name.clone());
            self.record(
                DecisionKind::JobPreempted,
                || job_subject(victim),
                "higher_tier_slo",
                || format!("{vn} job preempted for {bn} job {} that would otherwise miss its queue-wait SLO", by.0),
            );
            self.requeue(victim, StopReason::Preempted { by });
        }
        for (id, placement) in started {
            self.start_job(id, placement);
        }
        for (id, reason) in reasons {
            self.set_pending(id, reason);
        }
        blocked
    }

    /// Sets a job's pending reason, recording the change.
    pub(crate) fn set_pending(&mut self, id: JobId, reason: PendingReason) {
        let j = &mut self.c.jobs[id.0 as usize];
        if j.pending == reason {
            return;
        }
        j.pending = reason;
        let (waited, why) = (self.now - j.queued_since, j.not_grown.filter(|_| reason == PendingReason::NoCapacity));
        // Why its pool does not grow, when that is why it waits (the name is looked up only when recording).
        let why = why.map(|(p, why)| (self.cfg.pools.get(p).map_or(String::new(), |x| x.name.clone()), why));
        let now = self.now;
        self.record(
            DecisionKind::JobPending,
            || job_subject(id),
            reason.code(),
            || match why {
                Some((pool, why)) => format!("queued {} s; pool {pool}: {}", waited / 1000, why.describe(now)),
                None => format!("queued {} s", waited / 1000),
            },
        );
    }

    /// Returns when the first cloud pool below its max leaves its scale-out cooldown, if one is in it.
    fn next_growth_at(&self) -> Option<Time> {
        (0..self.cfg.pools.len())
            .filter(|&p| self.cfg.pools[p].market != Market::Fixed && self.c.pools[p].alive < self.effective_max(p))
            .filter_map(|p| self.c.pools[p].last_scale_out.map(|t| t + secs(self.cfg.pools[p].scale_out_cooldown_s)))
            .filter(|&t| t > self.now)
            .min()
    }
}

/// Returns whether a job queued in tier `from` or a lower one may be one that can buy: its kind (GPUs per worker,
/// GPU model) fits an instance type of a pool its tier may use that can launch a node now (`grows`).
fn buyers_beyond(queue: &Queue, cfg: &Config, pool_order: &[Vec<usize>], grows: &[bool], from: usize) -> bool {
    (from..pool_order.len()).any(|t| {
        queue.kinds(t).any(|(g, model)| {
            pool_order[t]
                .iter()
                .filter(|&&p| grows[p])
                .any(|&p| cfg.pool_types(p).any(|i| cfg.instance_types[i].holds(g, model)))
        })
    })
}

/// Returns whether a job with `access` may use a pool in `order` that can launch a node now (`grows`).
fn may_buy(cfg: &Config, order: &[usize], grows: &[bool], access: Access) -> bool {
    job_pools(cfg, order, access).any(|p| grows[p])
}

/// Returns when a deadline job must leave spot for on-demand: its deadline minus its remaining work minus the
/// slack it must keep (an on-demand boot plus, with the safe policy, a checkpoint, the work one interruption can
/// lose and a margin). `None` when the job has no deadline or duration, or its tier has no on-demand pool.
fn deadline_pin_at(cfg: &Config, order: &[usize], job: &Job, now: Time) -> Option<Time> {
    let deadline = job.spec.deadline?;
    let remaining = job.remaining_work_ms(now)?;
    let od_boot = order
        .iter()
        .filter(|&&p| cfg.pools[p].market == Market::OnDemand)
        .map(|&p| secs(cfg.pools[p].boot_latency_s))
        .min()?;
    let tier = &cfg.tiers[job.tier];
    let keep = match cfg.policy.deadline_policy {
        DeadlinePolicy::Greedy => od_boot,
        DeadlinePolicy::Safe => {
            let ck = secs(tier.checkpoint_time_s);
            let notice = order
                .iter()
                .filter(|&&p| cfg.pools[p].market == Market::Spot)
                .map(|&p| secs(cfg.pools[p].interruption_notice_s))
                .min()
                .unwrap_or(0);
            // With time to checkpoint inside the notice an interruption loses nothing; otherwise up to an interval.
            let loss = if ck <= notice { 0 } else { job.checkpoint_interval_ms.unwrap_or(remaining) };
            od_boot + ck + loss + secs(cfg.policy.deadline_margin_s)
        }
    };
    Some(deadline - remaining - keep)
}

/// Returns how long after entering the queue a job of `tier` with `access` may start preempting (its SLO minus
/// the time new capacity would take), or `None` when its tier has nothing to preempt. The same for every job of
/// the tier and access in one pass (pool sizes do not change within it).
fn preemption_offset(cfg: &Config, c: &Cluster, order: &[usize], tier: usize, access: Access) -> Option<Time> {
    let prio = cfg.tiers[tier].priority;
    if !cfg.tiers.iter().any(|t| t.priority > prio && t.preemptible) {
        return None;
    }
    let slo = secs(cfg.tiers[tier].queue_wait_slo_s);
    // The soonest a new node could hold it: the boot latency of an allowed cloud pool with room to grow.
    let boot = job_pools(cfg, order, access)
        .filter(|&p| cfg.pools[p].market != Market::Fixed && c.pools[p].alive < cfg.pools[p].max_nodes)
        .map(|p| secs(cfg.pools[p].boot_latency_s))
        .min();
    // With no pool able to grow, capacity can only come from jobs ending: wait for that until the SLO itself.
    Some(match boot {
        Some(b) => slo - b,
        None => slo,
    })
}
