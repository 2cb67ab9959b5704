//! Jobs known to wait inside their waiting budgets ([`crate::queue::Queue::wait_in_budget`]): a pass leaves one waiting without
//! reading it where a visit would do nothing else ([`Pass::wait_noted`]), and past the point where no job could
//! start or preempt it passes them by (see `Pass::walk`).

use super::Pass;
use crate::access::Access;
use crate::cluster::Cluster;
use crate::queue::Noted;
use crate::shape::key_of;
use crate::state::WakeAt;

impl Pass<'_> {
    /// Leaves job `n` (noted as waiting inside its budget) of `team` waiting without reading it, as a visit would
    /// where nothing else comes of it: it declared its run time, its team has no quota (a visit reads the job for
    /// it), it would hold no nodes for itself (a gang's soft hold), this pass already found no room for its shape
    /// that ends as late (or holds jobs in strict order), and no preemption is due for it, or its shape found no
    /// victims. Then it asks the wake-ups a visit would (its preemption coming due, its budget's end), and without
    /// backfill it stops the jobs behind it. Returns whether it did; otherwise the job is visited.
    pub(super) fn wait_noted(
        &mut self,
        c: &Cluster,
        (n, model): (&Noted, Option<&str>),
        team: usize,
        wake: &mut WakeAt,
    ) -> bool {
        let (cfg, now) = (self.cfg, self.now);
        if !self.remember || c.teams[team].quota_gpus.is_some() {
            return false;
        }
        let access = Access { spot: n.spot, on_demand: true, before: None };
        if self.buyers_only && !self.may_buy(n.tier, access) {
            // Looking only at jobs that may buy, a visit ends here.
            return true;
        }
        let multi = n.workers > 1 || n.per_worker > 1;
        if cfg.policy.backfill && multi && self.reservations < cfg.policy.max_reservations {
            return false;
        }
        let Some(run) = n.run else { return false };
        let shape = |extra| key_of((n.kind, n.workers, n.tier), access, extra);
        let end = now.saturating_add(run);
        let known_full = self.no_room_by_end.get_shape(shape(1)).is_some_and(|failed| end >= failed);
        if !self.strict_block && !known_full {
            return false;
        }
        if n.early {
            // Whether owned capacity could still take it in time changes with every start and end there.
            let order = &self.pool_order[n.tier];
            let shape = (n.kind, n.per_worker, n.workers, model);
            if crate::budget_place::shape_too_late(c, cfg, (order, access, shape), (n.until, now), &mut self.fits) {
                return false;
            }
            self.waiting_early = true;
        }
        match self.preemption_due_at(c, (n.tier, access), n.queued_since) {
            Some(at) if at > now => wake.at(at),
            Some(_) if self.no_victims.get_shape(shape(0)).is_some() => self.due_without_victims(n.tier),
            Some(_) => return false,
            None => {}
        }
        wake.at(n.until);
        if !cfg.policy.backfill {
            self.strict_block = true;
            self.first_hold.get_or_insert(self.scanned);
        }
        true
    }
}
