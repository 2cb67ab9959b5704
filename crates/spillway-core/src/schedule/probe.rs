//! Asking the scale-out planner where a walk may settle. Past the point where no job could start or preempt
//! (`quiet`), a walk settles on its own only where no cloud node is booting or idle (see [`Pass::settles`]): the
//! planner could count a later job on a booting node, and scale-in may swap an idle one too small for the first
//! job that starves its pool. Whether either happens is known only once the planner has planned the jobs blocked
//! before, so the walk pauses ([`Pass::wants_probe`]) and the engine plans the blocked jobs so far as the planner
//! will after the walk ([`Engine::probe`]): where no node the planner could count a later job on has room for
//! the smallest worker queued from there on, and every such pool with idle nodes already starves, the jobs
//! after it change nothing the planner decides, and the walk settles. Probes come at blocked counts that double,
//! and only where the visits they could save outnumber the jobs they plan.

use super::Pass;
use crate::config::Market;
use crate::model::JobId;
use crate::state::Engine;

/// When a walk asks the planner next, and what it answered.
pub(super) struct Probe {
    /// The count of blocked jobs at which the walk pauses for a probe (`usize::MAX`: never again).
    next: usize,
    /// The tier of the job the walk looked at last: a probe answers for it and the tiers after it.
    pub(super) tier: usize,
    /// The first tier from which the planner counts no job further on.
    settled_from: Option<usize>,
}

impl Probe {
    /// A probe schedule that asks first as soon as the walk is quiet, or never (`on` false).
    pub(super) fn new(on: bool) -> Probe {
        Probe { next: if on { 0 } else { usize::MAX }, tier: 0, settled_from: None }
    }
}

/// Fewest blocked jobs a probe after the first waits for.
const FIRST_RETRY: usize = 8;
/// Fewest job visits a probe must be able to save to be worth a planner of its own.
const MIN_SAVED: usize = 16;

impl Pass<'_> {
    /// Returns whether the walk should pause for a probe: it is quiet, not settled, its blocked jobs reached the
    /// next probe's count, and a probe could pay: it plans every blocked job so far, and could save at most the
    /// visits (and plans) of the `left` jobs not walked past yet, up to the cap for jobs no pool can grow for.
    pub(super) fn wants_probe(&self, left: usize) -> bool {
        let blocked = self.plan.blocked.len();
        let could_save = left.min(super::BLOCKED_CAP_NO_SCALE.saturating_sub(self.stuck));
        let worth = could_save >= MIN_SAVED && blocked <= could_save;
        self.quiet && !self.settled && blocked >= self.probe.next && worth
    }

    /// Returns whether a probe found that the planner counts no job of `tier` or a later one (see the module).
    pub(super) fn probe_settles(&self, tier: usize) -> bool {
        self.quiet && self.probe.settled_from.is_some_and(|t| tier >= t)
    }

    /// Returns what a probe checks: each cloud pool a job of the probe's tier or a later one may count on
    /// without buying (one that cannot grow now), with the fewest GPUs per worker queued in a tier that may use it.
    /// Jobs that may use a pool able to grow are visited in any case.
    pub(super) fn probe_pools(&self) -> Vec<(usize, u32)> {
        let mut pools: Vec<(usize, u32)> = Vec::new();
        for t in self.probe.tier..self.pool_order.len() {
            let Some(least) = self.least_gpus[t] else { continue };
            for &p in &self.pool_order[t] {
                if self.cfg.pools[p].market == Market::Fixed || self.grows[p] {
                    continue;
                }
                match pools.iter_mut().find(|(q, _)| *q == p) {
                    Some((_, g)) => *g = (*g).min(least),
                    None => pools.push((p, least)),
                }
            }
        }
        pools
    }

    /// Takes a probe's answer: settle from the probe's tier on, or ask again once the blocked jobs doubled.
    pub(super) fn probed(&mut self, settles: bool) {
        if settles {
            self.probe.settled_from = Some(self.probe.tier);
            self.probe.next = usize::MAX;
        } else {
            self.probe.next = self.plan.blocked.len().saturating_mul(2).max(FIRST_RETRY);
        }
    }

    /// The blocked jobs so far, for a probe.
    pub(super) fn blocked(&self) -> &[JobId] {
        &self.plan.blocked
    }
}

impl Engine {
    /// Returns whether the scale-out planner, having planned `blocked` (in queue order, as after the walk),
    /// could count no later job on a node of the `pools` (each with the fewest GPUs per worker a later job there
    /// needs), and every one of them with idle nodes already starves.
    pub(super) fn probe(&self, blocked: &[JobId], pools: &[(usize, u32)]) -> bool {
        let mut planner = self.planner(self.limits());
        let mut wake = crate::state::WakeAt::default();
        for &id in blocked {
            planner.job(id, None, &mut wake);
        }
        pools.iter().all(|&(p, least)| {
            let idle = !self.c.pools[p].idle.is_empty() && self.cfg.pools[p].launched();
            planner.most_free(p) < least && (!idle || planner.starves(p))
        })
    }
}
