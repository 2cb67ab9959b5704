//! Applying a scheduling pass: the engine runs the walk ([`Pass`]), asks for the wake-ups the next pass needs,
//! and carries out the plan (requeues of victims, starts, pins, pending reasons and their records).

use super::*;

impl Engine {
    /// Runs one scheduling pass: walks the queue, then applies what it decided. Returns the blocked jobs (in
    /// queue order) for the autoscaler.
    pub(crate) fn schedule(&mut self, wake: &mut WakeAt) -> Vec<JobId> {
        let (shares, weights) = self.shares();
        let grows: Vec<bool> = (0..self.cfg.pools.len()).map(|p| self.pool_headroom(p) > 0).collect();
        let cloud_room: Vec<bool> =
            (0..self.cfg.pools.len()).map(|p| self.headroom_within(p, self.effective_max(p), true) > 0).collect();
        let now = self.now;
        let wanting = crate::elastic::queued_per_pool(&self.queue, &self.pool_order, self.cfg.pools.len());
        self.queue.expire_budgets(now);
        let mut pass = Pass::new(&self.cfg, &self.pool_order, now, !self.exhaustive, grows, wanting);
        pass.cloud_room = cloud_room;
        // Between the walk and the planner an elastic job may widen into free GPUs, and a job on a spot pool or
        // falling back from one may move (its GPUs come free, its node may turn idle): a probe would see neither.
        let spot = self.cfg.pools.iter().any(|p| p.market == crate::config::Market::Spot);
        pass.probe = Probe::new(!self.exhaustive && self.elastic.is_empty() && !spot);
        let mut walker = Walker::new(&self.queue, self.pool_order.len(), shares, weights);
        let cut = loop {
            if let Some(cut) = pass.walk(&mut walker, &self.queue, &mut self.c, wake) {
                break cut;
            }
            let elastic_started = pass.plan.started.iter().any(|(id, _)| self.c.jobs[id.0 as usize].is_elastic());
            // The planner sees the nodes the walk holds as free: they are returned before it plans.
            let returned = return_held(&mut self.c, &pass.reserved);
            (self.holds, self.reserving) = pass.planner_holds();
            let settles = !elastic_started && self.probe(pass.blocked(), &pass.probe_pools());
            for (pool, entry) in returned {
                self.c.free[pool].remove(&entry);
            }
            pass.probed(settles);
        };
        return_held(&mut self.c, &pass.reserved);
        (self.holds, self.reserving) = pass.planner_holds();
        let end = PassEnd {
            cut,
            scanned: pass.scanned,
            due_without_victims: pass.due_without_victims,
            first_hold: pass.first_hold,
            last_start: pass.last_start,
            first_block: pass.first_block,
            budget_room: pass.budget_room,
        };
        let mut plan = pass.plan;
        self.last_settled = end.cut.settled;
        self.wake_after(&plan, &end, wake);
        for (at, id) in std::mem::take(&mut plan.budgets) {
            let i = id.0 as usize;
            if self.budget_noted.len() <= i {
                self.budget_noted.resize(i + 1, None);
            }
            if self.budget_noted[i] != Some(at) {
                self.budget_ends.insert((at, id));
                self.budget_noted[i] = Some(at);
            }
            let j = &self.c.jobs[i];
            if !self.queue.is_timed(id) && reach::budget_is_own(&self.cfg, j) {
                let noted = reach::noted(&self.c, &self.cfg, j, at);
                self.queue.wait_in_budget(id, noted);
            }
        }
        self.apply_schedule(plan, &end)
    }

    /// Tells a job that was told it waits for owned capacity, and that no pass reached since its budget ended,
    /// that it waits for capacity (one a pass reached was told why afresh, by the scale-out planner too, so this
    /// comes after it); asks to be woken when the next such budget ends (a pass that passes the job by would not
    /// ask).
    pub(crate) fn budgets_ended(&mut self, wake: &mut WakeAt) {
        // Entries of jobs that started, ended or were told otherwise since, and entries replaced by a later one, go
        // without a wake-up of their own.
        while let Some((at, id)) = self.budget_ends.pop_first() {
            let j = &self.c.jobs[id.0 as usize];
            // An entry a later pass replaced (the job's budget end moved: its team's run times did) says nothing.
            let current = self.budget_noted.get(id.0 as usize) == Some(&Some(at));
            let told = current
                && j.state == crate::model::JobState::Queued
                && j.pending == PendingReason::WaitingForFixedCapacity;
            if told && at > self.now {
                self.budget_ends.insert((at, id));
                wake.at(at);
                return;
            }
            // The entry is gone: a pass that tells the job again adds it anew.
            if let Some(noted) = self.budget_noted.get_mut(id.0 as usize).filter(|n| **n == Some(at)) {
                *noted = None;
            }
            if told {
                self.tell_unreached(id);
            }
        }
    }

    /// Returns each team's share (GPUs in use divided by its weight) and weight, as a walk of the queue starts.
    fn shares(&self) -> (Vec<f64>, Vec<f64>) {
        let shares = self.c.teams.iter().map(|t| t.used_gpus as f64 / t.weight).collect();
        (shares, self.c.teams.iter().map(|t| t.weight).collect())
    }

    /// Returns the first `limit` queued jobs in scheduling order (as a pass would walk them now).
    pub(crate) fn queued_in_order(&self, limit: usize) -> Vec<JobId> {
        let (shares, weights) = self.shares();
        self.queue.cursor(shares, weights).take(limit).collect()
    }

    /// Tells queued job `id`, which no pass reached since something changed, why it waits (see
    /// [`reach::passed_by_reason`]).
    fn tell_unreached(&mut self, id: JobId) {
        let reason = reach::passed_by_reason(&self.c, &self.c.jobs[id.0 as usize], self.now);
        self.set_pending(id, reason);
    }

    /// Returns whether queued job `id` would be found blocked by a pass that stopped where nothing could start:
    /// neither its team's quota nor its waiting budget holds it.
    pub(crate) fn blocked_if_unreached(&self, id: JobId) -> bool {
        let job = &self.c.jobs[id.0 as usize];
        reach::passed_by_reason(&self.c, job, self.now) != PendingReason::TeamQuota
            && !reach::in_budget(
                &self.c,
                &self.cfg,
                &self.pool_order[job.tier],
                job,
                self.now,
                &mut crate::budget_place::FitCache::default(),
            )
    }

    /// Asks for the passes that decisions this one could not take need: a pass depends only on the state and
    /// the time, so without a wake-up of their own they would wait for whatever woke the engine next.
    /// Victims go back to the queue after the pass; a pass that stopped at the scan limit reaches further once
    /// jobs it scanned started; a job due to preempt finds the lower-tier jobs this pass started; and the jobs
    /// this pass started change their teams' GPUs in use, so where teams interleave (fair share) or a team with a
    /// quota started one, the next pass may take the jobs before the last of them in another order or skip one
    /// for its quota, and capacity held back for one blocked job there goes to another, or another job comes
    /// before the blocked cap (after the last start, the pass saw what the next one would).
    fn wake_after(&mut self, plan: &SchedulePlan, end: &PassEnd, wake: &mut WakeAt) {
        let progressed = !plan.started.is_empty() || !plan.preempted.is_empty();
        let jobs = || plan.started.iter().map(|(id, _)| &self.c.jobs[id.0 as usize]);
        let quota_started = jobs().any(|j| self.c.teams[j.team].quota_gpus.is_some());
        let reorder = progressed && (self.queue.teams_interleave() || quota_started);
        let before_last_start = |at: Option<usize>| at.is_some_and(|h| end.last_start.is_some_and(|s| h < s));
        let held_back = reorder && before_last_start(end.first_hold);
        // The scale-out planner reads the blocked jobs in this pass's order (see `decide`).
        self.blocked_reordered = reorder && before_last_start(end.first_block);
        let victim_started = end.due_without_victims.is_some_and(|prio| {
            jobs().any(|j| {
                let t = &self.cfg.tiers[j.tier];
                t.priority > prio && t.preemptible && j.interruptible
            })
        });
        let cut_short = (end.cut.scan && progressed) || (end.cut.limit_hit && reorder);
        if !plan.preempted.is_empty() || cut_short || victim_started || held_back || end.budget_room {
            wake.at(self.now);
        }
        if end.cut.stuck {
            // The pass stopped at the cap for jobs no pool can grow for, or passed such jobs by: a pool may grow
            // for them when its cooldown ends.
            if let Some(at) = self.next_growth_at() {
                wake.at(at);
            }
        }
    }

    /// Applies a pass's plan: the scan-limit record, deadline pins, victims requeued, jobs started, pending
    /// reasons. Returns the blocked jobs.
    fn apply_schedule(&mut self, plan: SchedulePlan, end: &PassEnd) -> Vec<JobId> {
        if end.cut.limit_hit {
            self.c.counters.scan_limit_hits += 1;
            let (queued, limit, blocked) = (self.queue.len(), self.cfg.policy.scan_limit, plan.blocked.len());
            let scanned = end.scanned - 1;
            self.record(
                DecisionKind::JobPending,
                || "queue".into(),
                PendingReason::QueueScanLimit.code(),
                || {
                    format!(
                        "pass stopped after {scanned} jobs ({blocked} blocked; scan limit {limit}); {queued} queued"
                    )
                },
            );
        }
        for id in plan.burst_early {
            self.record(
                DecisionKind::JobPending,
                || job_subject(id),
                "owned_capacity_too_late",
                || {
                    "no owned GPUs enough for all its workers, free or of jobs expected to end, before its waiting \
                     budget ends, even with no job ahead of it: it stops waiting for owned capacity (burst_early)"
                        .to_string()
                },
            );
        }
        for id in plan.on_reserve {
            self.record(
                DecisionKind::Fallback,
                || job_subject(id),
                "deadline_reserve",
                || {
                    "slack is down to the reserve `safe` keeps for trips to on-demand and back: on-demand while spot \
                    cannot be had, back to spot when it can"
                        .into()
                },
            );
        }
        for id in plan.pinned {
            self.record(
                DecisionKind::Fallback,
                || job_subject(id),
                "deadline",
                || {
                    "remaining slack is what its deadline policy keeps (an on-demand boot, with `safe` also a \
                    checkpoint, one interruption's loss and the margin): on-demand from now"
                        .into()
                },
            );
        }
        for (victim, by) in plan.preempted {
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
        for (id, placement) in plan.started {
            self.start_job(id, placement);
        }
        for (id, reason) in plan.reasons {
            self.set_pending(id, reason);
        }
        let entered = std::mem::take(&mut self.entered);
        // The walk stopped before the jobs it did not reach since nothing further on could start: those that
        // entered the queue since the last pass say why they wait as a visit would have.
        for &id in entered.iter().filter(|_| end.cut.settled) {
            let j = &self.c.jobs[id.0 as usize];
            if j.state == crate::model::JobState::Queued && j.pending == PendingReason::NotScheduledYet {
                self.tell_unreached(id);
            }
        }
        self.entered = entered;
        self.entered.clear();
        plan.blocked
    }

    /// Sets a job's pending reason, recording the change.
    pub(crate) fn set_pending(&mut self, id: JobId, reason: PendingReason) {
        if reason != PendingReason::WaitingForFixedCapacity {
            self.queue.leave_budget(id);
        }
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
                Some((pool, why)) => format!("queued {}; pool {pool}: {}", fmt_ms(waited), why.describe(now)),
                None => format!("queued {}", fmt_ms(waited)),
            },
        );
    }

    /// Returns when the first cloud pool below its max leaves its scale-out cooldown, if one is in it.
    fn next_growth_at(&self) -> Option<Time> {
        (0..self.cfg.pools.len())
            .filter(|&p| self.cfg.pools[p].market != Market::Fixed)
            .filter_map(|p| self.cooldown_end(p))
            .min()
    }
}

/// Puts the nodes a walk held back (`reserved`) into the free index again, with the free GPUs they have now (a
/// victim may have been released on one while it was held); returns the entries it added.
fn return_held(c: &mut Cluster, reserved: &[(usize, u32, NodeId, JobId)]) -> Vec<(usize, (u32, NodeId))> {
    let mut added = Vec::new();
    for &(pool, _, n, _) in reserved {
        let node = &c.nodes[n.0 as usize];
        if node.state == NodeState::Ready && node.free() > 0 && c.free[pool].insert((node.free(), n)) {
            added.push((pool, (node.free(), n)));
        }
    }
    added
}
