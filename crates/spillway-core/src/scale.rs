//! The autoscaler: queue-driven scale-out (bin-pack the demand that ready and booting nodes cannot hold onto the
//! cheapest new nodes, within max, step limit, cooldown and offering backoff), scale-in of nodes idle past the
//! pool's timeout (never below the effective min, never a protected node), and scheduled minimums.

use crate::config::{Market, model_fits};
use crate::event::{Action, DecisionKind};
use crate::growth::NotGrown;
use crate::model::{Job, NodeId, NodeState};
use crate::state::{Engine, WakeAt};
use crate::time::{Time, secs};
use std::collections::{BTreeMap, BTreeSet};

/// What a new node is bought for: the type it must be, and how it is compared.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Want<'a> {
    /// Workers of a job: its GPUs and model; spot types compare on price per useful hour for its checkpoints.
    Job(&'a Job),
    /// The pool's min: its first type while it can launch, else the cheapest.
    Min,
    /// A node another scheduler named: at least `gpus` GPUs of `model`.
    Node { gpus: u32, model: Option<&'a str> },
}

impl Want<'_> {
    /// Returns the GPUs and model a node must hold.
    fn shape(&self) -> (u32, Option<&str>) {
        match self {
            Want::Job(j) => (j.spec.gpus_per_worker, j.spec.gpu_model.as_deref()),
            Want::Min => (1, None),
            Want::Node { gpus, model } => (*gpus, *model),
        }
    }
}

impl Engine {
    /// Returns the pool's (min, max) now: its configured values as set by open schedule windows (a window's
    /// min or desired raises the min, its max lowers the max; the min never exceeds the max).
    pub(crate) fn effective_bounds(&self, pool: usize, wake: &mut WakeAt) -> (u32, u32) {
        let p = &self.cfg.pools[pool];
        let (mut min, mut max) = (p.min_nodes.max(self.c.pools[pool].policy_min), p.max_nodes);
        for w in self.schedules.iter().filter(|w| w.pool == pool) {
            let (open, next) = w.state(self.now);
            if let Some(t) = next {
                wake.at(t.max(self.now + 1));
            }
            if open {
                min = min.max(w.min_nodes.unwrap_or(0)).max(w.desired_nodes.unwrap_or(0));
                max = max.min(w.max_nodes.unwrap_or(u32::MAX));
            }
        }
        (min.min(max), max)
    }

    /// Returns the pool's min now (see [`Engine::effective_bounds`]).
    pub(crate) fn effective_min(&self, pool: usize, wake: &mut WakeAt) -> u32 {
        self.effective_bounds(pool, wake).0
    }

    /// Returns the pool's max now (see [`Engine::effective_bounds`]).
    pub(crate) fn effective_max(&self, pool: usize) -> u32 {
        self.effective_bounds(pool, &mut WakeAt::default()).1
    }

    /// Returns the most workers of `g` GPUs (of `model`) one node of the pool's instance types holds.
    pub(crate) fn best_workers_per_node(&self, pool: usize, g: u32, model: Option<&str>) -> u32 {
        self.cfg
            .pool_types(pool)
            .map(|i| &self.cfg.instance_types[i])
            .filter(|it| model_fits(model, &it.gpu_model))
            .map(|it| it.gpus / g.max(1))
            .max()
            .unwrap_or(0)
    }

    /// Returns how many nodes a cloud pool may add now: 0 in cooldown or at max, else the step limit.
    pub(crate) fn pool_headroom(&self, pool: usize) -> u32 {
        self.headroom_within(pool, self.effective_max(pool), false)
    }

    /// Returns how many nodes a cloud pool may add now with `max` as its max: 0 at max or (unless
    /// `ignore_cooldown`) in its scale-out cooldown, else the step limit.
    pub(crate) fn headroom_within(&self, pool: usize, max: u32, ignore_cooldown: bool) -> u32 {
        let p = &self.cfg.pools[pool];
        let st = &self.c.pools[pool];
        if p.market == Market::Fixed || st.alive >= max {
            return 0;
        }
        if !ignore_cooldown && st.last_scale_out.is_some_and(|t| self.now < t + secs(p.scale_out_cooldown_s)) {
            return 0;
        }
        let step = ((st.alive as f64 * p.max_step_fraction).floor() as u32).max(p.min_step_nodes).max(1);
        step.min(max - st.alive)
    }

    /// Returns when pool `pool`'s scale-out cooldown ends, if it is in one and below its max (at its max, only an
    /// event gives it room).
    pub(crate) fn cooldown_end(&self, pool: usize) -> Option<Time> {
        let (p, st) = (&self.cfg.pools[pool], &self.c.pools[pool]);
        let end = st.last_scale_out? + secs(p.scale_out_cooldown_s);
        (end > self.now && st.alive < self.effective_max(pool)).then_some(end)
    }

    /// Returns the cheapest instance type of `pool` that holds workers of `gpus` GPUs of `model`, is not backed
    /// off and (in spot pools) is under its share cap, with the nodes `workers` workers need. Cost is nodes x
    /// price, and on spot the price per useful hour: price / (1 - expected lost fraction), from the offering's
    /// observed interruption rate and the job's checkpoint interval. Ties go to the earlier type.
    /// Types that need more than `room` nodes (what the pool's max still allows), or more than the account quotas
    /// still allow (`quota`: vCPUs left per quota, see `quota`), are skipped.
    pub(crate) fn pick_instance_type(
        &self,
        pool: usize,
        want: Want<'_>,
        workers: u32,
        room: u32,
        quota: &[u32],
        wake: &mut WakeAt,
    ) -> Option<(usize, u32)> {
        let (gpus, model) = want.shape();
        let job = match want {
            Want::Job(j) => Some(j),
            Want::Min | Want::Node { .. } => None,
        };
        let p = &self.cfg.pools[pool];
        // Near the pool's max (3/4 of its nodes alive) node slots are scarce: a slot filled with a small node is
        // capacity the pool can never have, so types compete on price per GPU (the larger wins a tie), not on the
        // price of the few nodes this one job needs.
        let scarce = u64::from(self.c.pools[pool].alive) * 4 >= u64::from(p.max_nodes.max(1)) * 3;
        // Nodes bought for a pool's min (job `None`) are of its first type while it can launch: target tracking and
        // forecasts size the min in nodes of that type.
        let first = match want {
            Want::Min => p.instance_types.first().and_then(|n| self.cfg.instance_type_index(n)),
            Want::Job(_) | Want::Node { .. } => None,
        };
        let mut best: Option<(f64, usize, u32, u32)> = None;
        for name in &p.instance_types {
            let Some(i) = self.cfg.instance_type_index(name) else { continue };
            let it = &self.cfg.instance_types[i];
            if !it.holds(gpus, model) {
                continue;
            }
            if let Some(&(until, _)) = self.c.backoff.get(&(pool, i))
                && until > self.now
            {
                wake.at(until);
                continue;
            }
            if p.market == Market::Spot && !self.under_offering_cap(pool, i) {
                continue;
            }
            let Some(price) = self.cfg.offer_price(pool, i) else { continue };
            let nodes = workers.div_ceil(it.gpus / gpus);
            if nodes > room || nodes > crate::quota::quota_nodes(&self.cfg, i, p.market, quota) {
                continue;
            }
            let useful = if p.market == Market::Spot { 1.0 - self.expected_loss(pool, i, job) } else { 1.0 };
            let cost = if first == Some(i) {
                0.0
            } else if scarce {
                price / it.gpus as f64 / useful
            } else {
                price * nodes as f64 / useful
            };
            if best.is_none_or(|(c, _, _, g)| {
                cost < c * (1.0 - 1e-9) || (scarce && cost <= c * (1.0 + 1e-9) && it.gpus > g)
            }) {
                best = Some((cost, i, nodes, it.gpus));
            }
        }
        best.map(|(_, i, n, _)| (i, n))
    }

    /// Returns why no instance type of `pool` can be bought for workers of `g` GPUs of `model` now: none holds
    /// one, or every one that does is backed off (until the first returns) or at its share of the pool.
    /// `workers` is what is left to buy for and `quota` the vCPUs left per quota: types it cannot buy within the
    /// quotas make the reason `quota` when nothing else stops them.
    pub(crate) fn why_no_type(
        &self,
        pool: usize,
        g: u32,
        model: Option<&str>,
        workers: u32,
        quota: &[u32],
    ) -> NotGrown {
        let market = self.cfg.pools[pool].market;
        let fitting: Vec<usize> = self
            .cfg
            .pool_types(pool)
            .filter(|&i| self.cfg.instance_types[i].holds(g, model))
            .filter(|&i| self.cfg.offer_price(pool, i).is_some())
            .collect();
        if fitting.is_empty() {
            return NotGrown::NoFittingType;
        }
        let backed: Vec<Time> = fitting
            .iter()
            .filter_map(|&i| self.c.backoff.get(&(pool, i)).map(|b| b.0).filter(|&t| t > self.now))
            .collect();
        let backed_off = |i: usize| self.c.backoff.get(&(pool, i)).is_some_and(|b| b.0 > self.now);
        let over_quota = |i: usize| {
            let nodes = workers.div_ceil((self.cfg.instance_types[i].gpus / g.max(1)).max(1));
            nodes > crate::quota::quota_nodes(&self.cfg, i, market, quota)
        };
        match backed.iter().min() {
            Some(&until) if backed.len() == fitting.len() => NotGrown::BackedOff { until },
            // Quota only when it is what stops every fitting type that is not backed off.
            _ if fitting.iter().all(|&i| over_quota(i) || backed_off(i)) => NotGrown::Quota,
            _ => NotGrown::OfferingShare,
        }
    }

    /// Returns the fraction of a spot node's time a job would expect to redo: the offering's interruption rate
    /// (observed, with a weak prior of one per 50 node-hours) times the work each interruption costs (half a
    /// checkpoint interval, or a whole hour without checkpoints, plus a boot), at most 0.9.
    fn expected_loss(&self, pool: usize, it: usize, job: Option<&Job>) -> f64 {
        let (k, ms) = self.c.offering_history.get(&(pool, it)).copied().unwrap_or((0, 0));
        let rate = (k as f64 + 0.2) / (ms as f64 / 3_600_000.0 + 10.0);
        let per_hit_h = job.and_then(|j| j.checkpoint_interval_ms).map_or(1.0, |c| c as f64 / 7_200_000.0)
            + self.cfg.pools[pool].boot_latency_s / 3600.0;
        (rate * per_hit_h).min(0.9)
    }

    /// Returns whether one more node of instance type `it` keeps it within the policy's share of the pool.
    pub(crate) fn under_offering_cap(&self, pool: usize, it: usize) -> bool {
        let share = self.cfg.policy.max_offering_share;
        if share >= 1.0 {
            return true;
        }
        let st = &self.c.pools[pool];
        let mine = st
            .ready
            .iter()
            .chain(st.requested.iter())
            .filter(|n| self.c.nodes[n.0 as usize].instance_type == Some(it))
            .count() as f64;
        mine + 1.0 <= (share * (st.alive as f64 + 1.0)).floor().max(1.0)
    }

    /// Removes nodes idle past their pool's timeout, down to the effective min, outside the scale-in cooldown.
    /// Keeps `claimed` nodes (blocked jobs count on them). In `starved` pools (at max, with a job that does not
    /// fit; the map holds its GPUs per worker and the most workers the pool's best type holds), an idle node that
    /// holds fewer workers than that may go even at min and before its idle timeout, so the next pass can buy one
    /// that fits.
    pub(crate) fn scale_in(
        &mut self,
        claimed: &BTreeSet<NodeId>,
        starved: &BTreeMap<usize, (u32, u32)>,
        wake: &mut WakeAt,
    ) {
        let now = self.now;
        for p in 0..self.cfg.pools.len() {
            let cfg = &self.cfg.pools[p];
            // A pool another scheduler drives gives nodes back only when it releases them.
            if !cfg.launched() || self.c.pools[p].idle.is_empty() {
                continue;
            }
            let swap_below = starved.get(&p).copied();
            let swap = swap_below.is_some();
            let (pool_min, pool_max) = self.effective_bounds(p, wake);
            let min = if swap { pool_min.min(self.c.pools[p].alive.saturating_sub(1)) } else { pool_min };
            let st = &self.c.pools[p];
            // Idle nodes above a scheduled max go at once (no idle timeout, no cooldown).
            let over_max = st.alive.saturating_sub(pool_max) as usize;
            if st.alive <= min || cfg.scale_in_protection {
                continue;
            }
            if let Some(end) =
                st.last_scale_in.map(|t| t + secs(cfg.scale_in_cooldown_s)).filter(|&e| e > now && over_max == 0)
            {
                wake.at(end);
                continue;
            }
            let timeout = secs(cfg.idle_timeout_s);
            let mut remove = Vec::new();
            for &(since, n) in &st.idle {
                let node = &self.c.nodes[n.0 as usize];
                // A node too small for the job starving this pool goes without waiting out its idle timeout: the job
                // waits for the room, and small jobs would otherwise keep the node busy for ever.
                let too_small = swap_below.is_some_and(|(g, best)| node.gpus / g < best);
                if since + timeout > now && remove.len() >= over_max && !too_small {
                    wake.at(since + timeout);
                    if swap {
                        continue;
                    }
                    break;
                }
                if node.protected || node.state != NodeState::Ready || !node.jobs.is_empty() || claimed.contains(&n) {
                    continue;
                }
                if swap && st.alive <= pool_min && !too_small {
                    // Below the min only to swap a node that is too small for the job starving here.
                    continue;
                }
                if st.alive - remove.len() as u32 <= min {
                    break;
                }
                remove.push((n, now - since));
            }
            if remove.is_empty() {
                continue;
            }
            for &(n, _) in &remove {
                self.c.node_end(n, NodeState::Terminated, now);
                self.actions.push_back(Action::Terminate { node: n });
            }
            self.c.counters.scale_actions += 1;
            self.c.pools[p].last_scale_in = Some(now);
            let name = self.cfg.pools[p].name.clone();
            let idle = remove.iter().map(|&(_, i)| i).min().unwrap_or(0);
            self.record(
                DecisionKind::ScaleIn,
                || format!("pool:{name}"),
                "idle_timeout",
                || {
                    let ids = crate::engine::node_list(remove.iter().map(|&(n, _)| n));
                    format!("remove node(s) {ids}, idle for at least {}", crate::time::fmt_ms(idle))
                },
            );
        }
    }
}
