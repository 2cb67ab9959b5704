//! How far a scheduling walk reaches: past the point where no job further on could start or preempt (see
//! [`Pass::settles`]) it looks only at jobs that may buy capacity and jobs with timers of their own, and it ends
//! where none of those is left ([`buyers_beyond`]).

use super::Pass;
use crate::cluster::Cluster;
use crate::config::{Config, Market};
use crate::queue::Queue;

impl Pass<'_> {
    /// Returns whether no job queued in `tier` or a later one could start in this pass any more: in every pool
    /// such a job may use, no node could give the smallest worker queued in its tier its GPUs, neither from free
    /// GPUs on a ready node outside the pass's holds nor, by preempting, from free GPUs plus those of the jobs
    /// of tiers it may preempt (bounded per node by the most free GPUs on any ready node plus all such jobs'
    /// GPUs in the pool); no node of a pool that scale-in acts on is idle (it may swap one too small for a
    /// blocked job, which it learns from the scale-out planner), and none is booting (the planner would count a job on it). Within a walk
    /// capacity only shrinks until a preemption, so this stays true for the rest of it; the jobs passed by then
    /// would have been blocked with no capacity to count on.
    pub(super) fn settles(&self, c: &Cluster, tier: usize) -> bool {
        let tiers = &self.cfg.tiers;
        // GPUs of running jobs that a job of tier `t` may preempt in pool `p`.
        let victim_gpus = |t: usize, p: usize| -> u32 {
            let prio = tiers[t].priority;
            let lower = |&(u, _): &(usize, &u32)| tiers[u].priority > prio && tiers[u].preemptible;
            let gpus = c.pools[p].tier_gpus.iter().enumerate().filter(lower).map(|(_, &g)| g);
            if self.cfg.policy.preemption { gpus.fold(0, u32::saturating_add) } else { 0 }
        };
        let closed = |t: usize, p: usize, least: u32| {
            let st = &c.pools[p];
            let free = c.free[p].last().map_or(0, |&(free, _)| free);
            let victims = victim_gpus(t, p);
            // Preemption may use a held node too: its free GPUs count beside the victims'.
            let room = if victims == 0 {
                free
            } else {
                let held = self.reserved.iter().filter(|r| r.0 == p).map(|r| c.nodes[r.2.0 as usize].free());
                held.fold(free, u32::max).saturating_add(victims)
            };
            // Scale-in acts only on cloud pools that Spillway launches (an owned node held for a gang stays idle).
            let swaps =
                !st.idle.is_empty() && self.cfg.pools[p].market != Market::Fixed && !self.cfg.pools[p].external();
            room < least && !swaps && st.requested.is_empty()
        };
        (tier..tiers.len())
            .all(|t| self.least_gpus[t].is_none_or(|least| self.pool_order[t].iter().all(|&p| closed(t, p, least))))
    }
}

/// Returns whether a job queued in tier `from` or a lower one may be one that can buy: its kind (GPUs per worker,
/// GPU model) fits an instance type of a pool its tier may use that can launch a node now (`grows`).
pub(super) fn buyers_beyond(
    queue: &Queue,
    cfg: &Config,
    pool_order: &[Vec<usize>],
    grows: &[bool],
    from: usize,
) -> bool {
    (from..pool_order.len()).any(|t| {
        queue
            .kinds(t)
            .any(|(g, model)| pool_order[t].iter().filter(|&&p| grows[p]).any(|&p| cfg.pool_holds(p, g, model)))
    })
}
