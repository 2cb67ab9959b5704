//! Moving to cheaper spot: a job running on a spot pool moves to a cheaper spot pool it may use (another zone or
//! region) when what that pool saves over the job's remaining work pays the restart (the new node's boot and a
//! checkpoint) and the move of its data. Prices are the job's own ([`crate::data_move::price_for`]: a pool's
//! price plus moving its data there and the moves its interruptions are expected to force). Make before break,
//! as return to spot: the job asks for a node in a cheaper pool (shadow demand limited to the pools its order
//! puts before its own) while it keeps running, and moves once one is ready. A deadline job moves only while its
//! slack covers the checkpoint, the transfer and a boot. Without this a job an outage sent to a dear zone pays
//! that zone's price for the rest of its run.

use crate::access::{Access, job_pools};
use crate::config::{Market, model_fits};
use crate::event::{DecisionKind, StopReason, job_subject};
use crate::model::{JobId, JobState, NodeId};
use crate::state::{Engine, WakeAt};
use crate::time::{HOUR_MS, Millis, Time, secs};

/// Most jobs moved or asking for a node in one pass.
const MAX_HOPS_PER_PASS: usize = 8;
/// A job moves only if it has at least this much work left (it must have declared its duration).
const MIN_REMAINING_MS: Millis = 3_600_000;

/// What one running job could do: move now onto a ready node, or ask for one.
enum Hop {
    Now,
    Ask,
}

impl Engine {
    /// Returns (jobs that move now, jobs that want a node bought in a cheaper spot pool with the access that
    /// limits them to such pools, whether some job would move: launches later in the pass change what it may
    /// move to, so the pass that sees them comes at this instant). Asks to be woken when a cheaper pool that
    /// pays comes out of its cooldown or back-off, and when a job's data has arrived.
    pub(crate) fn hop_to_cheaper_spot(&mut self, wake: &mut WakeAt) -> (Vec<JobId>, Vec<(JobId, Access)>, bool) {
        let (mut moves, mut shadow, mut watching) = (Vec::new(), Vec::new(), false);
        let spot_pools = self.cfg.pools.iter().filter(|p| p.market == Market::Spot && !p.external()).count();
        if spot_pools < 2 {
            return (moves, shadow, watching);
        }
        for p in 0..self.cfg.pools.len() {
            if self.cfg.pools[p].market != Market::Spot || self.cfg.pools[p].external() {
                continue;
            }
            let jobs: Vec<JobId> =
                self.c.pools[p].ready.iter().flat_map(|n| self.c.nodes[n.0 as usize].jobs.iter().copied()).collect();
            for id in jobs {
                if moves.contains(&id) || shadow.iter().any(|&(s, _)| s == id) {
                    continue;
                }
                match self.hop_of(id, p, wake) {
                    Some(Hop::Now) => moves.push(id),
                    Some(Hop::Ask) => shadow.push((id, Access { spot: true, on_demand: false, before: Some(p) })),
                    None => continue,
                }
                watching = true;
            }
        }
        if moves.len() > MAX_HOPS_PER_PASS {
            // The rest move in the next pass, at this instant.
            wake.at(self.now);
        }
        moves.truncate(MAX_HOPS_PER_PASS);
        shadow.truncate(MAX_HOPS_PER_PASS);
        for &id in &moves {
            self.c.counters.fallbacks += 1;
            self.record(
                DecisionKind::Fallback,
                || job_subject(id),
                "cheaper_spot",
                || "a node of a cheaper spot pool is ready and the saving pays the restart: checkpoint and move".into(),
            );
            self.requeue(id, StopReason::Migrated);
            let j = &mut self.c.jobs[id.0 as usize];
            j.data_mut().hopping = true;
            if let Some(t) = j.not_before {
                wake.at(t);
            }
        }
        if !moves.is_empty() {
            // Their GPUs are free after this pass's scheduling: the next pass may place jobs there.
            wake.at(self.now);
        }
        (moves, shadow, watching)
    }

    /// Returns what running job `id` on spot pool `here` does: `None` when no cheaper spot pool it may use pays
    /// the move (or it may not move: not interruptible, on on-demand for its deadline, little work left, no
    /// checkpoints, its data still arriving, run here less than a checkpoint interval, its slack too short),
    /// `Now` when a ready node of such a pool holds it, `Ask` when one can launch now.
    fn hop_of(&self, id: JobId, here: usize, wake: &mut WakeAt) -> Option<Hop> {
        let now = self.now;
        let j = &self.c.jobs[id.0 as usize];
        if j.state != JobState::Running || !j.interruptible || j.pinned_on_demand || j.is_elastic() {
            return None;
        }
        let on = |n: &NodeId| self.c.nodes[n.0 as usize].pool == here && !self.c.nodes[n.0 as usize].at_risk;
        if !j.placement.iter().all(|(n, _)| on(n)) {
            return None;
        }
        let remaining = j.remaining_work_ms(now).filter(|&r| r >= MIN_REMAINING_MS)?;
        let (Some(start), Some(iv)) = (j.work_start(), j.checkpoint_interval_ms) else { return None };
        if now < start.saturating_add(iv) {
            // Its data is still arriving (leaving would waste the transfer), or it has run here less than a
            // checkpoint interval: a job is never moved by the pass that placed it, and a move pays only after
            // the work it has done here is saved once.
            wake.at(start.saturating_add(iv));
            return None;
        }
        let order = crate::data_move::order_for(&self.c, &self.cfg, &self.pool_order[j.tier], j, now)
            .map_or_else(|| self.pool_order[j.tier].clone(), |(o, _)| o);
        let cheaper: Vec<usize> = self.cheaper_pools(id, here, &order, remaining);
        if cheaper.is_empty() {
            return None;
        }
        if self.node_ready_in(id, &cheaper) {
            return Some(Hop::Now);
        }
        let mut at: Option<Time> = None;
        for &q in &cheaper {
            if let Some(t) = self.launchable_at(q, j.spec.gpus_per_worker, j.spec.gpu_model.as_deref()) {
                at = Some(at.map_or(t, |a: Time| a.min(t)));
            }
        }
        match at {
            Some(t) if t <= now => Some(Hop::Ask),
            Some(t) => {
                wake.at(t);
                None
            }
            None => None,
        }
    }

    /// Returns the spot pools job `id` (on pool `here`, `remaining` ms of work left) may use that its `order`
    /// puts before `here` and whose price for it, plus the restart spread over its remaining work, is below
    /// `here`'s; for a deadline job, only while its slack covers the checkpoint, the transfer there and a boot.
    fn cheaper_pools(&self, id: JobId, here: usize, order: &[usize], remaining: Millis) -> Vec<usize> {
        let (now, j) = (self.now, &self.c.jobs[id.0 as usize]);
        let hours = remaining as f64 / HOUR_MS as f64;
        let ck = secs(self.cfg.tiers[j.tier].checkpoint_time_s);
        let price = |q: usize| crate::data_move::price_for(&self.c, &self.cfg, order, j, q, now);
        let stay = price(here);
        let list = |q: usize| crate::access::gpu_price(&self.cfg, q);
        let slack = if j.deadline_governs() {
            crate::access::deadline_pin_at(&self.cfg, order, j, now).map_or(Millis::MAX, |pin| pin - now)
        } else {
            Millis::MAX
        };
        let access = Access { spot: true, on_demand: false, before: Some(here) };
        job_pools(&self.cfg, order, access)
            .filter(|&q| self.cfg.pools[q].market == Market::Spot && q != here)
            .filter(|&q| {
                let boot = secs(self.cfg.pools[q].boot_latency_s);
                let gb = j.spec.checkpoint_gb.unwrap_or(0.0);
                let transfer = self.cfg.move_cost(j.data_at(), q, gb).1;
                // The new node boots while the job runs, and both are paid while it writes its checkpoint.
                let restart_h = (boot as f64 * list(q) + ck as f64 * (list(q) + list(here))) / HOUR_MS as f64;
                let pays = price(q) + restart_h / hours < stay;
                pays && slack > ck.saturating_add(transfer).saturating_add(boot)
                    && crate::access::deadline_allows(&self.cfg, order, j, q, now)
            })
            .collect()
    }

    /// Returns whether a ready node of one of `pools` has room for every worker of job `id`.
    fn node_ready_in(&self, id: JobId, pools: &[usize]) -> bool {
        let j = &self.c.jobs[id.0 as usize];
        let (g, w, model) = (j.spec.gpus_per_worker, j.gang.workers, j.spec.gpu_model.as_deref());
        pools.iter().any(|&p| {
            let slots: u32 = self.c.free[p]
                .range((g, NodeId(0))..)
                .filter(|(_, n)| model_fits(model, &self.c.nodes[n.0 as usize].gpu_model))
                .map(|(f, _)| f / g)
                .sum();
            slots >= w
        })
    }

    /// Returns the earliest instant from now at which spot pool `p` could launch a node holding a worker of
    /// `g` GPUs of `model` (past its scale-out cooldown and the type's back-off), `None` when it is at its max
    /// or has no such type.
    fn launchable_at(&self, p: usize, g: u32, model: Option<&str>) -> Option<Time> {
        let (now, pool, st) = (self.now, &self.cfg.pools[p], &self.c.pools[p]);
        if st.alive >= self.effective_max(p) {
            return None;
        }
        let free_at = st.last_scale_out.map_or(now, |t| (t + secs(pool.scale_out_cooldown_s)).max(now));
        self.cfg
            .pool_types(p)
            .filter(|&i| self.cfg.instance_types[i].holds(g, model) && self.under_offering_cap(p, i))
            .filter(|&i| self.cfg.offer_price(p, i).is_some())
            .map(|i| self.c.backoff.get(&(p, i)).map_or(free_at, |&(until, _)| until.max(free_at)))
            .min()
    }
}
