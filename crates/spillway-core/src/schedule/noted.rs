//! Jobs known to wait inside their waiting budgets ([`crate::queue::Queue::wait_in_budget`]): a pass leaves one waiting without
//! reading it where a visit would do nothing else ([`Pass::wait_noted`]), and past the point where no job could
//! start or preempt it passes them by (see `Pass::walk`).

use super::Pass;
use crate::access::Access;
use crate::cluster::Cluster;
use crate::queue::{Cursor, Noted, Queue};
use crate::shape::key_of;
use crate::state::WakeAt;

impl Pass<'_> {
    /// Leaves job `n` (noted as waiting inside its budget) of `team` waiting without reading it, as a visit would
    /// where nothing else comes of it: it declared its run time, its team has no quota (a visit reads the job for
    /// it), it would hold no nodes for itself (a gang's soft hold), this pass already found no room for its shape
    /// that ends as late (or holds jobs in strict order), and no preemption is due for it, or its shape found no
    /// victims; a job of a `burst_early` tier besides only while owned capacity could still take it in time. Then
    /// it asks the wake-ups a visit would (its preemption coming due, its budget's end), and without backfill it
    /// stops the jobs behind it. Returns whether it did; otherwise the job is visited.
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
        let access = noted_access(n.spot);
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
        }
        match self.preemption_due_at(c, (n.tier, access), n.queued_since) {
            Some(at) if at > now => wake.at(at),
            Some(_) if self.no_victims.get_shape(shape(0)).is_some() => self.due_without_victims(n.tier),
            Some(_) => return false,
            None => {}
        }
        wake.at(n.until);
        // A later start on owned capacity may take what it counted on (see `waiting_early`).
        self.waiting_early |= n.early;
        if !cfg.policy.backfill {
            self.strict_block = true;
            self.first_hold.get_or_insert(self.scanned);
        }
        true
    }

    /// Returns whether the walk may end at a job known to wait inside its budget in `tier`, where only such jobs
    /// are left (in this tier and the ones after) and none of them could do more than wait, and if so, whether the
    /// walk would have settled (`Some(settled)`, see [`Pass::settled_after`]). That needs: what it reads of them is
    /// remembered (not an exhaustive walk); it looks at every job (not only those that may buy); no team has a
    /// quota (a visit would tell one over it so); no job started on a cloud node whose data moves in (see
    /// `late_end`); the scan limit lies beyond them; and in every tier from `tier` on, [`Pass::noted_closed`].
    /// Each of them would be left waiting: it asks its budget's end (the engine wakes for that anyway, see
    /// `Engine::budgets_ended`) and a preemption coming due (nothing to preempt in any pool it may use; a job
    /// that could be one starts in a pass, which looks again), and holds nodes for no job after it.
    pub(super) fn noted_end(
        &mut self,
        (c, queue): (&Cluster, &Queue),
        (tier, cursor): (usize, &Cursor<'_>),
    ) -> Option<bool> {
        let ok = self.remember && !self.buyers_only && !self.late_end;
        if !ok || c.teams.iter().any(|t| t.quota_gpus.is_some()) {
            return None;
        }
        let tiers = self.pool_order.len();
        if self.closed_noted.len() < tiers {
            self.closed_noted.resize(tiers, None);
        }
        for u in tier..tiers {
            let closed = match self.closed_noted[u] {
                Some(closed) => closed,
                None => {
                    let closed = self.noted_closed(c, queue, u);
                    self.closed_noted[u] = Some(closed);
                    closed
                }
            };
            if !closed {
                return None;
            }
        }
        let rest = (tier + 1..tiers).fold(cursor.left_in_tier(), |n, u| n.saturating_add(queue.tier_len(u)));
        if self.scanned.saturating_add(rest) > self.cfg.policy.scan_limit {
            return None;
        }
        if (tier..tiers).any(|u| queue.early_ends(u).next().is_some()) {
            // The walk would look at a `burst_early` job whatever it passed by, so where it would stop is not known:
            // end here only where no later tier could turn the walk quiet (then it would have run to its end).
            let last = (tier + 1..tiers).rev().find(|&u| queue.tier_len(u) > 0);
            return (!last.is_some_and(|u| self.settles(c, u).0)).then_some(false);
        }
        Some(self.settled_after(c, queue, tier))
    }

    /// Returns whether no job of `tier` known to wait inside its budget could do more than wait now: in every pool
    /// the tier may use there is nothing to preempt; for each kind of them, no ready node with room for its worker
    /// that would admit the shortest of their runs ([`crate::budget_place::may_admit`]); and owned capacity could
    /// still take each `burst_early` one before its budget ends (checked for the earliest end of each shape).
    fn noted_closed(&mut self, c: &Cluster, queue: &Queue, tier: usize) -> bool {
        let order = &self.pool_order[tier];
        let mut kinds = queue.noted_kinds(tier).peekable();
        if kinds.peek().is_none() {
            return true;
        }
        if order.iter().any(|&p| self.victim_gpus(c, tier, p) > 0) {
            return false;
        }
        let now = self.now;
        let admits = |(g, run): (u32, crate::time::Time)| {
            let end = now.saturating_add(run);
            order.iter().any(|&p| crate::budget_place::may_admit(c, self.cfg, p, g, (end, now)))
        };
        if kinds.any(admits) {
            return false;
        }
        let cfg = self.cfg;
        !queue.early_ends(tier).any(|(kind, workers, spot, until)| {
            let shape = (kind, queue.kind_gpus(kind), workers, queue.kind_model(kind));
            crate::budget_place::shape_too_late(
                c,
                cfg,
                (order, noted_access(spot), shape),
                (until, now),
                &mut self.fits,
            )
        })
    }

    /// Returns whether the walk, ended early by [`Pass::noted_end`] in `tier`, would have settled (see
    /// `Pass::settles`) at a later tier: capacity does not change past that point, so the walk would have stepped
    /// through the later tiers with queued jobs, settling at the first that settles, and ending at the first that is
    /// only quiet (where only noted jobs are left, a quiet walk ends).
    pub(super) fn settled_after(&self, c: &Cluster, queue: &Queue, tier: usize) -> bool {
        if self.settled {
            return true;
        }
        for u in (tier + 1..self.pool_order.len()).filter(|&u| queue.tier_len(u) > 0) {
            match self.settles(c, u) {
                (_, true) => return true,
                (true, false) => return false,
                (false, false) => {}
            }
        }
        false
    }
}

/// Returns the access of a job known to wait inside its budget (see `reach::noted`): spot where it may run there
/// (`spot`), and on-demand (such a job has no timer that would hold it on spot).
fn noted_access(spot: bool) -> Access {
    Access { spot, on_demand: true, before: None }
}
