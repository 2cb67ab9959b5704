//! The autoscaler: queue-driven scale-out (bin-pack the demand that ready and booting nodes cannot hold onto the
//! cheapest new nodes, within max, step limit, cooldown and offering backoff), scale-in of nodes idle past the
//! pool's timeout (never below the effective min, never a protected node), and scheduled minimums.

use crate::config::{Config, Market};
use crate::engine::{Engine, WakeAt};
use crate::event::{Action, DecisionKind};
use crate::model::{Job, JobId, NodeId, NodeState, PendingReason};
use crate::schedule::{Access, job_pools, model_fits};
use crate::shape::Failed;
use crate::time::{Time, secs};
use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

/// Most ready nodes per pool whose free GPUs the scale-out estimate counts (the fullest-free first).
const VIRTUAL_READY_NODES: usize = 64;

/// Returns the pools `tier` may use in placement order: fixed first, then cheapest price per GPU-hour.
pub(crate) fn pool_order(cfg: &Config, tier: usize) -> Vec<usize> {
    let markets = &cfg.tiers[tier].markets;
    let mut pools: Vec<(bool, f64, usize)> = cfg
        .pools
        .iter()
        .enumerate()
        .filter(|(_, p)| markets.contains(&p.market))
        .map(|(i, p)| (p.market != Market::Fixed, gpu_price(cfg, i), i))
        .collect();
    pools.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    pools.into_iter().map(|(_, _, i)| i).collect()
}

/// Returns a pool's lowest price per GPU-hour.
pub(crate) fn gpu_price(cfg: &Config, pool: usize) -> f64 {
    let p = &cfg.pools[pool];
    if p.market == Market::Fixed {
        return p.gpu_usd_per_hour;
    }
    p.instance_types
        .iter()
        .filter_map(|n| cfg.instance_type_index(n))
        .filter_map(|i| {
            let it = &cfg.instance_types[i];
            it.price_usd_per_hour(p.market).map(|price| price / it.gpus as f64)
        })
        .fold(f64::INFINITY, f64::min)
}

/// A compiled scheduled policy: a cron window that sets a pool's min, max or desired nodes while open.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pool: usize,
    cron: croner::Cron,
    tz: chrono_tz::Tz,
    duration_ms: i64,
    min_nodes: Option<u32>,
    max_nodes: Option<u32>,
    desired_nodes: Option<u32>,
    /// The state last computed: (at, open, next change). It holds from `at` until the next change, so a pass
    /// evaluates the cron expression only when the window opened or closed since (see [`Window::refresh`]).
    known: Option<(Time, bool, Option<Time>)>,
}

impl Window {
    /// Compiles the config's schedules (validated already, so parsing cannot fail here; a failure skips it).
    pub fn compile(cfg: &Config) -> Vec<Window> {
        cfg.schedules
            .iter()
            .filter_map(|s| {
                Some(Window {
                    pool: cfg.pools.iter().position(|p| p.name == s.pool)?,
                    cron: croner::Cron::from_str(&s.cron).ok()?,
                    tz: chrono_tz::Tz::from_str(&s.timezone).ok()?,
                    duration_ms: secs(s.duration_s),
                    min_nodes: s.min_nodes,
                    max_nodes: s.max_nodes,
                    desired_nodes: s.desired_nodes,
                    known: None,
                })
            })
            .collect()
    }

    /// Returns whether the window is open at `now`, and the next time its state may change: the state kept by
    /// the last [`Window::refresh`] while it holds, else computed.
    fn state(&self, now: Time) -> (bool, Option<Time>) {
        match self.known {
            Some((_, open, next)) if self.holds(now) => (open, next),
            _ => self.compute(now),
        }
    }

    /// Returns whether the kept state is the state at `now`.
    fn holds(&self, now: Time) -> bool {
        matches!(self.known, Some((at, _, next)) if at <= now && next.is_none_or(|n| now < n))
    }

    /// Keeps the state at `now` (time never runs backwards in the engine, so it holds until its next change).
    pub(crate) fn refresh(&mut self, now: Time) {
        if !self.holds(now) {
            let (open, next) = self.compute(now);
            self.known = Some((now, open, next));
        }
    }

    /// Evaluates the cron expression: whether the window is open at `now`, and when that next changes.
    fn compute(&self, now: Time) -> (bool, Option<Time>) {
        use chrono::TimeZone;
        let at = |t: Time| self.tz.timestamp_millis_opt(t).single();
        // Whole seconds: the cron library carries the start's fraction of a second into the occurrence it finds,
        // and cron times fall on whole minutes anyway.
        let Some(from) = at((now - self.duration_ms).div_euclid(1000) * 1000) else { return (false, None) };
        match self.cron.find_next_occurrence(&from, false) {
            Ok(fire) if fire.timestamp_millis() <= now => (true, Some(fire.timestamp_millis() + self.duration_ms)),
            Ok(fire) => (false, Some(fire.timestamp_millis())),
            Err(_) => (false, None),
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
    fn best_workers_per_node(&self, pool: usize, g: u32, model: Option<&str>) -> u32 {
        let types = self.cfg.pools[pool].instance_types.iter().filter_map(|n| self.cfg.instance_type_index(n));
        types
            .map(|i| &self.cfg.instance_types[i])
            .filter(|it| model_fits(model, &it.gpu_model))
            .map(|it| it.gpus / g.max(1))
            .max()
            .unwrap_or(0)
    }

    /// Returns how many nodes a cloud pool may add now: 0 in cooldown or at max, else the step limit.
    pub(crate) fn pool_headroom(&self, pool: usize) -> u32 {
        let p = &self.cfg.pools[pool];
        let st = &self.c.pools[pool];
        let max = self.effective_max(pool);
        if p.market == Market::Fixed || st.alive >= max {
            return 0;
        }
        if st.last_scale_out.is_some_and(|t| self.now < t + secs(p.scale_out_cooldown_s)) {
            return 0;
        }
        let step = ((st.alive as f64 * p.max_step_fraction).floor() as u32).max(p.min_step_nodes).max(1);
        step.min(max - st.alive)
    }

    /// Returns the cheapest instance type of `pool` that holds workers of `gpus` GPUs of `model`, is not backed
    /// off and (in spot pools) is under its share cap, with the nodes `workers` workers need. Cost is nodes x
    /// price, and on spot the price per useful hour: price / (1 - expected lost fraction), from the offering's
    /// observed interruption rate and the job's checkpoint interval. Ties go to the earlier type.
    /// Types that need more than `room` nodes (what the pool's max still allows) are skipped.
    fn pick_instance_type(
        &self,
        pool: usize,
        job: Option<&Job>,
        workers: u32,
        room: u32,
        wake: &mut WakeAt,
    ) -> Option<(usize, u32)> {
        let gpus = job.map_or(1, |j| j.spec.gpus_per_worker);
        let model = job.and_then(|j| j.spec.gpu_model.as_deref());
        let p = &self.cfg.pools[pool];
        // Near the pool's max (3/4 of its nodes alive) node slots are scarce: a slot filled with a small node is
        // capacity the pool can never have, so types compete on price per GPU (the larger wins a tie), not on the
        // price of the few nodes this one job needs.
        let scarce = self.c.pools[pool].alive * 4 >= p.max_nodes.max(1) * 3;
        // Nodes bought for a pool's min (job `None`) are of its first type while it can launch: target tracking and
        // forecasts size the min in nodes of that type.
        let first =
            if job.is_none() { p.instance_types.first().and_then(|n| self.cfg.instance_type_index(n)) } else { None };
        let mut best: Option<(f64, usize, u32, u32)> = None;
        for name in &p.instance_types {
            let Some(i) = self.cfg.instance_type_index(name) else { continue };
            let it = &self.cfg.instance_types[i];
            if it.gpus < gpus || !model_fits(model, &it.gpu_model) {
                continue;
            }
            if let Some(&(until, _)) = self.c.backoff.get(&(pool, i)) {
                if until > self.now {
                    wake.at(until);
                    continue;
                }
            }
            if p.market == Market::Spot && !self.under_offering_cap(pool, i) {
                continue;
            }
            let Some(price) = it.price_usd_per_hour(p.market) else { continue };
            let nodes = workers.div_ceil(it.gpus / gpus);
            if nodes > room {
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

    /// Buys cloud nodes for blocked jobs that booting nodes will not hold, and for pools below their min.
    /// Returns the ready nodes blocked jobs count on (scale-in keeps them) and the pools at max that still have
    /// demand they cannot hold (scale-in may swap an idle node there even at min).
    /// `shadow` are running jobs that want spot capacity to move to (make before break): spot pools only, no
    /// pending reasons.
    pub(crate) fn scale_out(
        &mut self,
        blocked: &[JobId],
        shadow: &[JobId],
        wake: &mut WakeAt,
    ) -> (BTreeSet<NodeId>, BTreeMap<usize, (u32, u32)>) {
        let now = self.now;
        let pools = self.cfg.pools.len();
        // Free GPUs per pool that blocked jobs may count on before buying more: ready nodes with the most free
        // GPUs (a gang may need them plus new nodes), nodes still booting, and nodes planned in this pass.
        let mut virt: Vec<Vec<(u32, String, Option<NodeId>)>> = (0..pools)
            .map(|p| {
                let ready = self.c.free[p].iter().rev().take(VIRTUAL_READY_NODES).map(|&(f, n)| (f, n, Some(n)));
                let booting = self.c.pools[p].requested.iter().map(|&n| (self.c.nodes[n.0 as usize].gpus, n, None));
                ready.chain(booting).map(|(f, n, r)| (f, self.c.nodes[n.0 as usize].gpu_model.clone(), r)).collect()
            })
            .collect();
        let mut claimed: BTreeSet<NodeId> = BTreeSet::new();
        // Pools at max with demand they cannot hold, and the GPUs per worker of the first job starving there.
        let mut starved: BTreeMap<usize, (u32, u32)> = BTreeMap::new();
        let mut planned: Vec<u32> = vec![0; pools];
        let mut headroom: Vec<u32> = (0..pools).map(|p| self.pool_headroom(p)).collect();
        // Each pool's max for this pass (schedule windows evaluated once, not per blocked job).
        let maxes: Vec<u32> = (0..pools).map(|p| self.effective_max(p)).collect();
        // Planned launches per pool: instance type -> nodes; and the demand behind them.
        let mut plan: BTreeMap<usize, BTreeMap<usize, u32>> = BTreeMap::new();
        let mut demand: BTreeMap<usize, (u32, i64, u32)> = BTreeMap::new();
        let mut reasons: Vec<(JobId, PendingReason)> = Vec::new();
        let share = self.cfg.policy.spot_share;
        let (mut spot_gpus, mut od_gpus) = if share.is_some() { self.interruptible_cloud_gpus() } else { (0.0, 0.0) };
        let mut fallbacks: Vec<JobId> = Vec::new();
        // Shapes that found neither room on the nodes counted on nor a launch since the last launch planned (see
        // `shape`), with whether they were held to spot until their fallback time.
        let mut no_room: Failed<bool> = Failed::default();
        // Per tier: how long a job waits for spot before it may fall back to on-demand.
        let fallback_after: Vec<Time> =
            self.cfg.tiers.iter().map(|t| secs(t.spot_fallback_after_s.min(1e12))).collect();
        let wanted = blocked.iter().map(|&id| (id, false)).chain(shadow.iter().map(|&id| (id, true)));
        for (id, is_shadow) in wanted {
            let job = &self.c.jobs[id.0 as usize];
            // Its reason stays `checkpointing` until the checkpoint is written; a running job has none.
            let job_checkpointing = is_shadow || job.not_before.is_some_and(|t| t > now);
            let (g, w, model) = (job.spec.gpus_per_worker, job.spec.workers, job.spec.gpu_model.as_deref());
            let waited = now - job.queued_since;
            let tier = &self.cfg.tiers[job.tier];
            let has_spot = job.interruptible && tier.markets.contains(&Market::Spot);
            // A job with a deadline leaves spot when its slack says so (the scheduler pins it), not after a wait.
            let deadline_governs = job.deadline_governs();
            let fallback_at = job.queued_since + if deadline_governs { secs(1e12) } else { fallback_after[job.tier] };
            let access = if is_shadow { Access::spot_only() } else { Access::of(job, now) };
            let key = u8::from(is_shadow) | u8::from(now < fallback_at) << 1;
            if let Some(held_to_spot) = no_room.get(job, access, key) {
                if held_to_spot {
                    wake.at(fallback_at);
                }
                if !job_checkpointing {
                    reasons.push((id, PendingReason::NoCapacity));
                }
                continue;
            }
            let mut held_to_spot = false;
            let mut cands: Vec<usize> = job_pools(&self.cfg, &self.pool_order[job.tier], access)
                .filter(|&p| self.cfg.pools[p].market != Market::Fixed)
                .collect();
            let is_spot = |p: &usize| self.cfg.pools[*p].market == Market::Spot;
            if has_spot && cands.iter().any(|p| !is_spot(p)) {
                let spot_open = cands.iter().any(|&p| {
                    is_spot(&p)
                        && headroom[p] > 0
                        && self
                            .pick_instance_type(p, Some(job), job.spec.workers, u32::MAX, &mut WakeAt::default())
                            .is_some()
                });
                if share.is_some_and(|target| spot_gpus >= target * (spot_gpus + od_gpus)) {
                    // The spot share of interruptible capacity is at its target: this one goes on-demand first.
                    cands.sort_by_key(|p| is_spot(p));
                } else if spot_open && now < fallback_at {
                    cands.retain(|p| is_spot(p));
                    wake.at(fallback_at);
                    held_to_spot = true;
                }
            }
            // Takes the job's workers out of the virtual free GPUs if all fit; returns the workers that do not fit
            // and the entries it would use (even when only part of a gang fits), as (index, GPUs).
            let fits_virtual = |v: &mut Vec<(u32, String, Option<NodeId>)>| -> (u32, Vec<(usize, u32)>) {
                let mut left = w;
                let mut used: Vec<(usize, u32)> = Vec::new();
                for (i, (free, m, _)) in v.iter().enumerate() {
                    if left == 0 {
                        break;
                    }
                    if model_fits(model, m) && *free >= g {
                        let k = (free / g).min(left);
                        used.push((i, k * g));
                        left -= k;
                    }
                }
                if left == 0 {
                    for &(i, take) in &used {
                        v[i].0 -= take;
                    }
                }
                (left, used)
            };
            // The ready nodes among entries `used` of a pool's virtual free GPUs.
            let ready = |v: &[(u32, String, Option<NodeId>)], used: &[(usize, u32)]| -> Vec<NodeId> {
                used.iter().filter_map(|&(i, _)| v[i].2).collect()
            };
            let mut reason = PendingReason::NoCapacity;
            for &p in &cands {
                // Workers that ready, booting and planned nodes cannot hold: what new nodes must. A gang claims the
                // ready nodes it counts on (so scale-in does not remove them under it) only where the pool can
                // still grow for the rest, and not in a pool an earlier job is starving in (there scale-in must be
                // free to swap nodes). Only a gang assembles across ready nodes; a single worker that fits a ready
                // node was held back for another reason (strict queue order, a reservation) and must not pin it.
                // Claims and starving are judged on what the pool holds after this job's own launch, as the next
                // pass would judge them.
                let room = maxes[p].saturating_sub(self.c.pools[p].alive + planned[p]);
                let free_pool = !starved.contains_key(&p);
                let claims = |left: u32, room: u32| w > 1 && free_pool && (left == 0 || room > 0);
                let best = self.best_workers_per_node(p, g, model);
                let starving = |left: u32, room: u32| best == 0 || room < left.div_ceil(best);
                let (left, used) = fits_virtual(&mut virt[p]);
                if left == 0 {
                    if claims(0, room) {
                        claimed.extend(ready(&virt[p], &used));
                    }
                    reason = PendingReason::WaitingForNodes;
                    break;
                }
                // Prefer a type whose nodes fit in the room left; else make progress with the best type.
                let pick = if room == 0 {
                    None
                } else if headroom[p] == 0 {
                    // Below max, so in its scale-out cooldown (from this very pass if it launched here already):
                    // the job may buy here once it ends.
                    let cooldown = secs(self.cfg.pools[p].scale_out_cooldown_s);
                    let last = if planned[p] > 0 { Some(now) } else { self.c.pools[p].last_scale_out };
                    wake.at(last.map_or(now, |t| t + cooldown).max(now));
                    None
                } else {
                    let pick = self.pick_instance_type(p, Some(job), left, room, wake);
                    pick.or_else(|| self.pick_instance_type(p, Some(job), left, u32::MAX, wake))
                };
                let Some((it, nodes)) = pick else {
                    if claims(left, room) {
                        claimed.extend(ready(&virt[p], &used));
                    }
                    if starving(left, room) {
                        // A pool whose max cannot hold the rest of this job beside the nodes it has is starving:
                        // scale-in may swap its idle nodes that are too small.
                        starved.entry(p).or_insert((g, best));
                    }
                    continue;
                };
                let n = nodes.min(headroom[p]).min(room);
                if n < nodes.min(room) {
                    // The step limit cut this launch short: the rest may come when the cooldown this launch
                    // starts ends.
                    wake.at(now + secs(self.cfg.pools[p].scale_out_cooldown_s));
                }
                headroom[p] -= n;
                planned[p] += n;
                *plan.entry(p).or_default().entry(it).or_default() += n;
                let d = demand.entry(p).or_default();
                *d = (d.0.saturating_add(g.saturating_mul(w)), d.1.max(waited), d.2 | (1 << job.tier));
                let itx = &self.cfg.instance_types[it];
                let added = f64::from(n) * f64::from(itx.gpus);
                if self.cfg.pools[p].market == Market::Spot {
                    spot_gpus += added;
                } else if job.interruptible {
                    od_gpus += added;
                    // A fallback only where spot was an option: the tier allows it and a spot pool exists.
                    if self.cfg.tiers[job.tier].markets.contains(&Market::Spot)
                        && self.cfg.pools.iter().any(|p| p.market == Market::Spot)
                    {
                        fallbacks.push(id);
                    }
                }
                virt[p].extend((0..n).map(|_| (itx.gpus, itx.gpu_model.clone(), None)));
                let (left, used) = fits_virtual(&mut virt[p]);
                if claims(left, room - n) {
                    claimed.extend(ready(&virt[p], &used));
                }
                if left > 0 && starving(left, room - n) {
                    starved.entry(p).or_insert((g, best));
                }
                // Nodes were added: a shape that found no room may find some on them.
                no_room.clear();
                reason = PendingReason::WaitingForNodes;
                break;
            }
            if reason == PendingReason::NoCapacity {
                no_room.insert(&self.c.jobs[id.0 as usize], access, key, held_to_spot);
            }
            if !job_checkpointing {
                reasons.push((id, reason));
            }
        }
        for (id, reason) in reasons {
            self.set_pending(id, reason);
        }
        for id in fallbacks {
            self.c.counters.fallbacks += 1;
            self.record(DecisionKind::Fallback, || crate::event::job_subject(id), "spot_unavailable_or_share", || {
                "interruptible job gets on-demand capacity: spot is backed off, full, slow to come or at its share target".into()
            });
        }
        for p in 0..pools {
            if self.cfg.pools[p].market == Market::Fixed {
                continue;
            }
            let min = self.effective_min(p, wake);
            let have = self.c.pools[p].alive + plan.get(&p).map_or(0, |m| m.values().sum());
            if have < min {
                if let Some((it, _)) = self.pick_instance_type(p, None, 1, u32::MAX, wake) {
                    *plan.entry(p).or_default().entry(it).or_default() += min - have;
                }
            }
        }
        for (p, types) in plan {
            self.launch(p, types, demand.get(&p).copied());
        }
        (claimed, starved)
    }

    fn launch(&mut self, pool: usize, types: BTreeMap<usize, u32>, demand: Option<(u32, i64, u32)>) {
        let now = self.now;
        let market = self.cfg.pools[pool].market;
        let mut what = Vec::new();
        for (it, count) in types {
            let itx = &self.cfg.instance_types[it];
            let price = itx.price_usd_per_hour(market).unwrap_or(0.0);
            let (gpus, model) = (itx.gpus, itx.gpu_model.clone());
            what.push(format!("{count} x {}", itx.name));
            for _ in 0..count {
                let node = self.c.add_node(pool, market, Some(it), model.clone(), gpus, price, now);
                self.c.counters.nodes_launched += 1;
                self.actions.push_back(Action::Launch { node, pool, instance_type: it });
            }
        }
        self.c.counters.scale_actions += 1;
        self.c.pools[pool].last_scale_out = Some(now);
        let name = self.cfg.pools[pool].name.clone();
        let tiers: Vec<&str> = self
            .cfg
            .tiers
            .iter()
            .enumerate()
            .filter(|(i, _)| demand.is_some_and(|d| d.2 & (1 << i) != 0))
            .map(|(_, t)| t.name.as_str())
            .collect();
        let (reason, detail) = match demand {
            Some((gpus, waited, _)) => (
                "queued_demand",
                format!(
                    "launch {}: {gpus} GPUs of {} demand waiting up to {} s",
                    what.join(", "),
                    tiers.join("/"),
                    waited / 1000
                ),
            ),
            None => ("below_min", format!("launch {}: pool below its (scheduled) min", what.join(", "))),
        };
        self.record(DecisionKind::ScaleOut, || format!("pool:{name}"), reason, || detail);
    }

    /// Returns (GPUs of live spot nodes, GPUs of interruptible jobs on on-demand nodes), for the spot share.
    fn interruptible_cloud_gpus(&self) -> (f64, f64) {
        let (mut spot, mut od) = (0.0, 0.0);
        for (p, pool) in self.cfg.pools.iter().enumerate() {
            let st = &self.c.pools[p];
            let nodes = st.ready.iter().chain(st.requested.iter()).map(|n| &self.c.nodes[n.0 as usize]);
            match pool.market {
                Market::Spot => spot += nodes.map(|n| n.gpus as f64).sum::<f64>(),
                Market::OnDemand => {
                    for n in nodes {
                        od += n
                            .jobs
                            .iter()
                            .map(|j| &self.c.jobs[j.0 as usize])
                            .filter(|j| j.interruptible)
                            .map(|j| j.spec.gpus_per_worker as f64)
                            .sum::<f64>();
                    }
                }
                Market::Fixed => {}
            }
        }
        (spot, od)
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
            if cfg.market == Market::Fixed || self.c.pools[p].idle.is_empty() {
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
            let count = remove.len();
            let idle_s = remove.iter().map(|(_, i)| i / 1000).min().unwrap_or(0);
            self.record(
                DecisionKind::ScaleIn,
                || format!("pool:{name}"),
                "idle_timeout",
                || format!("remove {count} node(s) idle for at least {idle_s} s"),
            );
        }
    }
}
