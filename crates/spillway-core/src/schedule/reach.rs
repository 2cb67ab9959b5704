//! How far a scheduling walk reaches: past the point where no job further on could start or preempt (see
//! [`Pass::settles`]) it looks only at jobs that may buy capacity and jobs with timers of their own, and it ends
//! where none of those is left ([`buyers_beyond`]).

use super::Pass;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::queue::Queue;

impl Pass<'_> {
    /// Returns whether no job queued in `tier` or a later one could start in this pass any more: in every pool
    /// such a job may use, no ready node outside the pass's holds has as many free GPUs as the smallest worker
    /// queued in its tier, no node is idle (scale-in may swap one too small for a blocked job, which it learns
    /// from the scale-out planner), no node is booting (the planner would count a job on it), and no job of a
    /// tier it may preempt runs. Within a walk capacity only shrinks until a preemption, so this stays true for
    /// the rest of it; the jobs passed by then would have been blocked with no capacity to count on.
    pub(super) fn settles(&self, c: &Cluster, tier: usize) -> bool {
        let tiers = &self.cfg.tiers;
        let victims = |t: usize, p: usize| {
            let prio = tiers[t].priority;
            let lower = |(u, &g): (usize, &u32)| g > 0 && tiers[u].priority > prio && tiers[u].preemptible;
            self.cfg.policy.preemption && c.pools[p].tier_gpus.iter().enumerate().any(lower)
        };
        let closed = |t: usize, p: usize, least: u32| {
            let st = &c.pools[p];
            c.free[p].last().is_none_or(|&(free, _)| free < least)
                && st.idle.is_empty()
                && st.requested.is_empty()
                && !victims(t, p)
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
