//! Return to spot: an interruptible job that fell back to on-demand (spot was out, full or backed off) moves
//! back to spot once spot can take it again. Make before break: at a checkpoint the job asks for a spot node
//! (shadow demand for the autoscaler) while it keeps running on on-demand, and moves (checkpoint, stop, restart)
//! only when a spot node that fits is ready. (A deadline job pinned to on-demand by its slack stays there; one on
//! its reserve moves back while its slack beyond what it keeps pays the move.) Without
//! this, a long job that fell back once would pay the on-demand price for the rest of its run.

use crate::access::Access;
use crate::config::Market;
use crate::config::model_fits;
use crate::event::{DecisionKind, StopReason, job_subject};
use crate::model::{JobId, JobState};
use crate::state::{Engine, WakeAt};
use crate::time::{Millis, Time, secs};

/// Most jobs moved or asking for spot in one pass.
const MAX_MOVES_PER_PASS: usize = 8;
/// A job asks for spot only this soon after a checkpoint (at most once per checkpoint interval).
const AFTER_CHECKPOINT_MS: Millis = 300_000;
/// A job moves only if it has at least this much work left (when it declared its duration).
const MIN_REMAINING_MS: Millis = 3_600_000;

/// Per pool, the instance types a spot pool could launch and the earliest instant each could (see
/// [`Engine::spot_launchable`]).
type Launchable = Vec<Vec<(usize, Time)>>;

impl Engine {
    /// Returns (jobs moved now, jobs that want spot capacity bought for them, whether a job may move: then a
    /// launch or removal of nodes later in the pass, which changes what spot can take, calls for another pass).
    /// Asks to be woken when a job's standing here may change with time alone (it has run a checkpoint interval,
    /// it gets ahead of uniform progress, its next checkpoint opens the window in which it asks for spot, the
    /// window closes, spot leaves its cooldown or backoff within the window), and only for jobs of a tier with a
    /// spot pool that spot could take at all (a job no spot pool could take waits for an event, not a timer).
    pub(crate) fn return_to_spot(&mut self, wake: &mut WakeAt) -> (Vec<JobId>, Vec<JobId>, bool) {
        let now = self.now;
        let (mut moves, mut shadow): (Vec<JobId>, Vec<JobId>) = (Vec::new(), Vec::new());
        let mut watching = false;
        // Per spot pool, what it could launch, and whether no spot pool could launch or has room: built once per
        // pass, when a job first needs it.
        let mut launchable: Option<(Launchable, bool)> = None;
        // Per tier: whether it may use a spot pool (a job of a tier without one never moves, and nothing here
        // needs a wake-up for it).
        let spot_tier: Vec<bool> =
            self.pool_order.iter().map(|o| o.iter().any(|&q| self.cfg.pools[q].market == Market::Spot)).collect();
        if !spot_tier.contains(&true) {
            return (moves, shadow, watching);
        }
        'pools: for (p, pool) in self.cfg.pools.iter().enumerate() {
            if pool.market != Market::OnDemand {
                continue;
            }
            for n in &self.c.pools[p].ready {
                for &id in &self.c.nodes[n.0 as usize].jobs {
                    let j = &self.c.jobs[id.0 as usize];
                    if j.state != JobState::Running
                        || !j.interruptible
                        || !spot_tier[j.tier]
                        || j.pinned_on_demand
                        || moves.contains(&id)
                        || shadow.contains(&id)
                    {
                        continue;
                    }
                    let (Some(start), Some(iv)) = (j.work_start(), j.checkpoint_interval_ms) else { continue };
                    let remaining = j.remaining_work_ms(now);
                    if remaining.is_some_and(|r| r < MIN_REMAINING_MS) {
                        // Only falls further: it never moves again in this attempt.
                        continue;
                    }
                    // It may move: a launch or removal later in this pass changes what spot can take, and a
                    // removal books the node's hours into its offering's interruption rate, which the price of
                    // moving below reads.
                    watching = true;
                    if !crate::data_move::spot_move_pays(&self.c, &self.cfg, &self.pool_order[j.tier], j, p, now) {
                        // Moving its data costs more than spot saves over its remaining work; with less work
                        // left it saves less still, so only a price change (an event) can turn this.
                        continue;
                    }
                    // Spot can take it now or after a cooldown or backoff (`None`: only an event changes that),
                    // or a spot node that fits is ready.
                    let (launchable, none_take) = launchable.get_or_insert_with(|| {
                        let launchable = self.spot_launchable();
                        let none = launchable.iter().all(Vec::is_empty) && self.no_spot_room();
                        (launchable, none)
                    });
                    if *none_take {
                        // No spot pool could launch, now or later, and none has a free GPU: no job here can move
                        // or ask for spot, and the rest of the loop would find that job by job.
                        break 'pools;
                    }
                    let take_at = self.spot_take_at(id, launchable);
                    let ready = self.spot_node_ready_for(id);
                    if take_at.is_none() && !ready {
                        continue;
                    }
                    if now - start < iv {
                        // Runs here since less than a checkpoint interval (maybe since this very pass).
                        wake.at(start + iv);
                        continue;
                    }
                    let move_cost = secs(2.0 * (pool.boot_latency_s + self.cfg.tiers[j.tier].checkpoint_time_s));
                    if j.on_reserve {
                        // Its slack beyond what it keeps pays the move (slack never grows: no wake-up).
                        let order = &self.pool_order[j.tier];
                        let pin = crate::access::deadline_pin_at(&self.cfg, order, j, now);
                        if pin.is_none_or(|pin| pin - now < move_cost) {
                            continue;
                        }
                    } else if !Access::ahead_of_uniform(j, now, move_cost) {
                        if let Some(t) = ahead_at(j, now, move_cost) {
                            wake.at(t);
                        }
                        continue;
                    }
                    if ready {
                        moves.push(id);
                        continue;
                    }
                    let since = j.unsaved_work_ms(now);
                    if since <= AFTER_CHECKPOINT_MS {
                        // In the window after a checkpoint in which it asks for spot.
                        let closes = now + AFTER_CHECKPOINT_MS - since + 1;
                        let closes = remaining.map_or(closes, |r| closes.min(now + r - MIN_REMAINING_MS + 1));
                        match take_at {
                            Some(t) if t <= now => {
                                shadow.push(id);
                                wake.at(closes);
                            }
                            Some(t) if t < closes => wake.at(t),
                            _ => {}
                        }
                    }
                    if j.last_checkpoint.is_none() && !j.reports_checkpoints {
                        // Checkpoints are estimated from the interval: the next one opens the window again (a
                        // reported one is an event).
                        wake.at(now + iv - since);
                    }
                }
            }
        }
        if moves.len() > MAX_MOVES_PER_PASS {
            // The rest move in the next pass, at this instant.
            wake.at(now);
        }
        moves.truncate(MAX_MOVES_PER_PASS);
        shadow.truncate(MAX_MOVES_PER_PASS);
        if !moves.is_empty() {
            // Their on-demand GPUs are free after this pass's scheduling: the next pass may place jobs there.
            wake.at(now);
        }
        for &id in &moves {
            self.c.counters.fallbacks += 1;
            self.record(
                DecisionKind::Fallback,
                || job_subject(id),
                "return_to_spot",
                || "a spot node that fits is ready: checkpoint on on-demand and move back to spot".into(),
            );
            self.requeue(id, StopReason::Migrated);
            let j = &mut self.c.jobs[id.0 as usize];
            // The planner counts it on the ready spot node it leaves for (and keeps that node from scale-in).
            j.data_mut().hopping = true;
            // A deadline job on its reserve goes back to on-demand as soon as spot is lost: its slack, not a
            // timer, bounds how often it bounces.
            if !j.on_reserve {
                j.spot_only_until =
                    Some(now + secs(self.cfg.tiers[j.tier].spot_fallback_after_s.clamp(600.0, 86_400.0)));
            }
            if let Some(t) = j.not_before {
                wake.at(t);
            }
        }
        (moves, shadow, watching)
    }

    /// Returns the spot pools job `j` may move to now, in its tier's order: those its deadline lets it move its
    /// data to ([`crate::access::deadline_allows`]).
    fn spot_pools_for<'a>(&'a self, j: &'a crate::model::Job) -> impl Iterator<Item = usize> + 'a {
        let order = &self.pool_order[j.tier];
        order.iter().copied().filter(move |&p| {
            self.cfg.pools[p].market == Market::Spot && crate::access::deadline_allows(&self.cfg, order, j, p, self.now)
        })
    }

    /// Returns whether no ready node of any spot pool has a free GPU (the free index of every spot pool is empty).
    fn no_spot_room(&self) -> bool {
        let spot = |p: &usize| self.cfg.pools[*p].market == Market::Spot;
        (0..self.cfg.pools.len()).filter(spot).all(|p| self.c.free.get(p).is_none_or(|f| f.is_empty()))
    }

    /// Returns whether a ready spot node the job may use has room for every worker of it.
    fn spot_node_ready_for(&self, id: JobId) -> bool {
        let j = &self.c.jobs[id.0 as usize];
        let (g, w, model) = (j.spec.gpus_per_worker, j.gang.workers, j.spec.gpu_model.as_deref());
        self.spot_pools_for(j).any(|p| {
            let slots: u32 = self.c.free[p]
                .range((g, crate::model::NodeId(0))..)
                .filter(|(_, n)| model_fits(model, &self.c.nodes[n.0 as usize].gpu_model))
                .map(|(f, _)| f / g)
                .sum();
            slots >= w
        })
    }

    /// Returns, per pool, the instance types a spot pool below its max could launch if nothing happens meanwhile,
    /// each with the earliest instant from now it could (past the pool's scale-out cooldown and the type's
    /// backoff; see [`Engine::pick_instance_type`]); empty for other pools. Schedule windows are evaluated once.
    fn spot_launchable(&self) -> Launchable {
        let now = self.now;
        (0..self.cfg.pools.len())
            .map(|p| {
                let (pool, st) = (&self.cfg.pools[p], &self.c.pools[p]);
                if pool.market != Market::Spot || pool.external() || st.alive >= self.effective_max(p) {
                    return Vec::new();
                }
                let cooldown = secs(pool.scale_out_cooldown_s);
                let free_at = st.last_scale_out.map_or(now, |t| (t + cooldown).max(now));
                self.cfg
                    .pool_types(p)
                    .filter(|&i| {
                        self.cfg.instance_types[i].spot_usd_per_hour.is_some() && self.under_offering_cap(p, i)
                    })
                    .map(|i| (i, self.c.backoff.get(&(p, i)).map_or(free_at, |&(until, _)| until.max(free_at))))
                    .collect()
            })
            .collect()
    }

    /// Returns the earliest time from now at which a spot pool the job may use could launch a node for it if
    /// nothing happens meanwhile (`now` when one can now), from [`Engine::spot_launchable`]; `None` when no
    /// spot pool below its max has a type that holds a worker of it.
    fn spot_take_at(&self, id: JobId, launchable: &[Vec<(usize, Time)>]) -> Option<Time> {
        let j = &self.c.jobs[id.0 as usize];
        let (g, model) = (j.spec.gpus_per_worker, j.spec.gpu_model.as_deref());
        let fits = |&&(i, _): &&(usize, Time)| self.cfg.instance_types[i].holds(g, model);
        let pools = self.spot_pools_for(j).flat_map(|p| launchable[p].iter());
        pools.filter(fits).map(|&(_, t)| t).min()
    }
}

/// Returns the first instant after `now` at which a running job is ahead of uniform progress by `slack_ms` (see
/// [`Access::ahead_of_uniform`]), or `None` when it never gets there while it runs (its duration does not fit
/// before its deadline, or it ends first).
fn ahead_at(j: &crate::model::Job, now: Time, slack_ms: Millis) -> Option<Time> {
    let (Some(deadline), Some(total)) = (j.spec.deadline, j.spec.expected_duration_ms) else { return Some(now) };
    if total >= (deadline - j.submitted).max(1) {
        // Uniform progress moves at least as fast as the job: it never gains on it.
        return None;
    }
    let ahead = |t: Time| Access::ahead_of_uniform(j, t, slack_ms);
    // Running, the job gains on the line at a constant rate: grow a bound until it is ahead, then bisect.
    let end = now.saturating_add(j.remaining_work_ms(now).unwrap_or(0).max(1));
    let (mut lo, mut hi) = (now, now.saturating_add(1));
    while !ahead(hi) {
        if hi >= end {
            return None;
        }
        lo = hi;
        hi = now.saturating_add((hi - now).saturating_mul(2)).min(end);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ahead(mid) { hi = mid } else { lo = mid }
    }
    Some(hi)
}
