//! How far a scheduling walk reaches: past the point where no job further on could start or preempt (see
//! [`Pass::settles`]) it looks only at jobs that may buy capacity and jobs with timers of their own, and it ends
//! where none of those is left ([`buyers_beyond`]); the jobs it passes by say why they wait as a visit would
//! ([`passed_by_reason`]).

use super::Pass;
use crate::budget_place::FitCache;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::model::{Job, JobId, PendingReason};
use crate::queue::{Noted, Queue};
use crate::time::Time;

impl Pass<'_> {
    /// Returns whether no job queued in `tier` or a later one could start or preempt in this pass any more
    /// (`quiet`), and whether beyond that the scale-out planner could count none of them on a node (`settled`).
    ///
    /// Quiet: in every pool such a job may use, no node could give the smallest worker queued in its tier its
    /// GPUs, neither from free GPUs on a ready node outside the pass's holds nor, by preempting, from free GPUs
    /// plus those of the interruptible jobs of tiers it may preempt (bounded per node by the most free GPUs on any
    /// ready node plus all such jobs' GPUs in the pool). Settled, besides: no node of a cloud pool is idle (scale-in may swap one too
    /// small for a blocked job, which it learns from the scale-out planner), and none is booting (the planner
    /// would count a job on it). Within a walk capacity only shrinks until a preemption, so both stay true for the
    /// rest of it; the jobs passed by then would have been blocked with no capacity to count on.
    pub(super) fn settles(&self, c: &Cluster, tier: usize) -> (bool, bool) {
        let tiers = &self.cfg.tiers;
        let victim_gpus = |t: usize, p: usize| self.victim_gpus(c, t, p);
        // Per pool a job of tier `t` may use: (no room for its smallest worker, nothing the planner counts on).
        let closed = |t: usize, p: usize, least: u32| {
            let st = &c.pools[p];
            let free = c.free[p].last().map_or(0, |&(free, _)| free);
            let victims = victim_gpus(t, p);
            // Preemption may use a held node too: its free GPUs count beside the victims'.
            let room = if victims == 0 { free } else { self.held_free(c, p).max(free).saturating_add(victims) };
            // Scale-in acts only on cloud pools that Spillway launches (an owned node held for a gang stays idle).
            let swaps = !st.idle.is_empty() && self.cfg.pools[p].launched();
            (room < least, !swaps && st.requested.is_empty())
        };
        let (mut quiet, mut settled) = (true, true);
        for t in tier..tiers.len() {
            let Some(least) = self.least_gpus[t] else { continue };
            for &p in &self.pool_order[t] {
                let (no_room, nothing_counted) = closed(t, p, least);
                quiet &= no_room;
                settled &= nothing_counted;
                if !quiet {
                    return (false, false);
                }
            }
        }
        (quiet, settled)
    }

    /// Returns [`Pass::settles`] for `tier`, asked again only where the tier changed or the pass started a job
    /// or held nodes back since (nothing else in a walk changes what it reads).
    pub(super) fn settles_now(&mut self, c: &Cluster, tier: usize) -> (bool, bool) {
        match self.settles_memo {
            Some((t, answer)) if t == tier => answer,
            _ => {
                let answer = self.settles(c, tier);
                self.settles_memo = Some((tier, answer));
                answer
            }
        }
    }

    /// Returns the GPUs of running jobs that a job of tier `t` may preempt in pool `p` (0 with preemption off).
    pub(super) fn victim_gpus(&self, c: &Cluster, t: usize, p: usize) -> u32 {
        let tiers = &self.cfg.tiers;
        let prio = tiers[t].priority;
        let lower = |&(u, _): &(usize, &u32)| tiers[u].priority > prio && tiers[u].preemptible;
        let gpus = c.pools[p].victim_gpus.iter().enumerate().filter(lower).map(|(_, &g)| g);
        if self.cfg.policy.preemption { gpus.fold(0, u32::saturating_add) } else { 0 }
    }

    /// Returns the most free GPUs on a node of pool `p` that the walk holds (0: none held there).
    fn held_free(&self, c: &Cluster, p: usize) -> u32 {
        let held = self.reserved.iter().filter(|r| r.0 == p);
        held.map(|r| c.nodes[r.2.0 as usize].free()).max().unwrap_or(0)
    }

    /// Notes that queued job `id`, which found no room and whose [`burst_at`] is now, stopped waiting for owned
    /// capacity before its budget ended (`burst_early`), where it was told it waits for owned capacity or
    /// nothing yet (said once).
    pub(super) fn note_burst_early(&mut self, c: &Cluster, id: JobId) {
        let job = &c.jobs[id.0 as usize];
        let told_to_wait =
            matches!(job.pending, PendingReason::WaitingForFixedCapacity | PendingReason::NotScheduledYet);
        if told_to_wait && stopped_early(c, self.cfg, job, self.now) {
            self.plan.burst_early.push(id);
        }
    }

    /// Tells job `id` of `team`, known to wait inside its budget and passed by once the walk is quiet (see
    /// [`Queue::wait_in_budget`]), that its team's quota holds it where it does (a visit would say so; the job
    /// is then no longer known to wait inside its budget). The job is read only where the team has a quota.
    pub(super) fn quota_holds(&mut self, c: &Cluster, id: JobId, team: usize) {
        if c.teams[team].quota_gpus.is_none() {
            return;
        }
        let job = &c.jobs[id.0 as usize];
        // Looking only at jobs that may buy, a visit would end before the quota.
        let looked_at = !self.buyers_only || self.may_buy(job.tier, crate::access::Access::of(job, self.now));
        if looked_at && c.teams[team].over_quota(job.total_gpus()) {
            self.plan.reasons.push((id, PendingReason::TeamQuota));
        }
    }

    /// Passes job `id` by once the walk settled: tells it why it waits where that changed, and counts it toward
    /// the blocked jobs that can do nothing as a visit would (one held by its team's quota or inside its waiting
    /// budget is not blocked).
    pub(super) fn pass_by(&mut self, c: &Cluster, id: JobId) {
        let job = &c.jobs[id.0 as usize];
        let reason = passed_by_reason(c, job, self.now);
        if reason != job.pending {
            self.plan.reasons.push((id, reason));
        }
        let order = &self.pool_order[job.tier];
        if reason != PendingReason::TeamQuota && !in_budget(c, self.cfg, order, job, self.now, &mut self.fits) {
            self.stuck += 1;
        }
    }
}

/// Returns why queued `job` waits where a walk that found nothing could start passed it by (see
/// [`Pass::settles`]): its team's quota, its last attempt's checkpoint, else capacity. (A visit inside its waiting
/// budget would say it waits for owned capacity, and ask to be woken when the budget ends; no capacity it could
/// buy either then, so capacity is what it waits for, without a wake-up that would change nothing.)
pub(crate) fn passed_by_reason(c: &Cluster, job: &Job, now: Time) -> PendingReason {
    if c.teams[job.team].over_quota(job.total_gpus()) {
        return PendingReason::TeamQuota;
    }
    if job.not_before.is_some_and(|t| t > now) {
        return PendingReason::Checkpointing;
    }
    PendingReason::NoCapacity
}

/// Returns when queued `job` stops waiting for owned capacity: when its waiting budget ends (`fixed`: its tier's
/// size-independent budget, if it has one), or `now` for a job that already ran (interrupted, preempted, lost),
/// which does not wait for owned capacity again, and for one that no owned capacity could take before its budget
/// ends (`burst_early`, see [`crate::budget_place::owned_too_late`]; `order`: the pools its tier may use).
pub(crate) fn burst_at(
    c: &Cluster,
    cfg: &Config,
    (order, fixed): (&[usize], Option<Time>),
    job: &Job,
    now: Time,
    fits: &mut FitCache,
) -> Time {
    if job.attempt > 0 {
        return now;
    }
    let end = budget_end(c, cfg, fixed, job);
    if crate::budget_place::owned_too_late(c, cfg, order, job, (end, now), fits) { now } else { end }
}

/// Returns when queued `job`'s waiting budget ends (`fixed`: its tier's size-independent budget, if it has one).
fn budget_end(c: &Cluster, cfg: &Config, fixed: Option<Time>, job: &Job) -> Time {
    job.queued_since.saturating_add(fixed.unwrap_or_else(|| crate::budget_place::budget_of(c, cfg, job)))
}

/// Returns whether queued `job`, whose [`burst_at`] is `now`, stopped waiting for owned capacity before its
/// budget ended (`burst_early`).
fn stopped_early(c: &Cluster, cfg: &Config, job: &Job, now: Time) -> bool {
    let tier = &cfg.tiers[job.tier];
    tier.burst_early && job.attempt == 0 && now < budget_end(c, cfg, crate::wait_budget::fixed_wait(tier), job)
}

/// Returns whether queued `job`'s budget ends at an instant that depends on nothing but the job: its first
/// attempt, and a budget that grows with size only by a declared duration (not its team's run times, which change
/// as jobs end). Only such a job, left waiting inside its budget, may be noted so ([`Queue::wait_in_budget`]); one
/// of a `burst_early` tier may stop waiting before then, which a pass asks each time ([`Noted::early`]).
pub(crate) fn budget_is_own(cfg: &Config, job: &Job) -> bool {
    let tier = &cfg.tiers[job.tier];
    let sized_by_history = tier.burst_wait_per_gpu_hour_s > 0.0 && job.spec.expected_duration_ms.is_none();
    !sized_by_history && job.attempt == 0
}

/// Returns what a pass reads of queued `job`, left waiting inside its budget until `until` (see
/// [`Queue::wait_in_budget`]; only for a job [`budget_is_own`] holds for and that has no timer of its own, whose
/// access is then spot, if it is interruptible, and on-demand).
pub(crate) fn noted(c: &Cluster, cfg: &Config, job: &Job, until: Time) -> Noted {
    Noted {
        early: cfg.tiers[job.tier].burst_early,
        until,
        tier: job.tier,
        queued_since: job.queued_since,
        run: job.spec.expected_duration_ms.map(|_| crate::budget_place::expected_run(c, job)),
        kind: job.gang.kind,
        per_worker: job.gang.gpus_per_worker,
        workers: job.gang.workers,
        spot: job.interruptible,
    }
}

/// Returns whether queued `job` is still inside its waiting budget for owned capacity (a visit leaves it waiting,
/// not blocked; `order`: the pools its tier may use).
pub(crate) fn in_budget(c: &Cluster, cfg: &Config, order: &[usize], job: &Job, now: Time, fits: &mut FitCache) -> bool {
    now < burst_at(c, cfg, (order, crate::wait_budget::fixed_wait(&cfg.tiers[job.tier])), job, now, fits)
}

/// Returns whether a job queued in tier `from` or a lower one may be one that can buy: its kind (GPUs per worker,
/// GPU model) fits an instance type of a pool its tier may use that can launch a node now (`grows`). With
/// `past_budgets`, jobs known to wait inside their budgets ([`Queue::wait_in_budget`]) do not count: they buy
/// nothing before their budgets end.
pub(super) fn buyers_beyond(
    queue: &Queue,
    (cfg, pool_order): (&Config, &[Vec<usize>]),
    grows: &[bool],
    from: usize,
    past_budgets: bool,
) -> bool {
    let holds = |t: usize, (g, model): (u32, Option<&str>)| {
        pool_order[t].iter().filter(|&&p| grows[p]).any(|&p| cfg.pool_holds(p, g, model))
    };
    (from..pool_order.len()).any(|t| {
        if past_budgets { queue.kinds_to_visit(t).any(|k| holds(t, k)) } else { queue.kinds(t).any(|k| holds(t, k)) }
    })
}
