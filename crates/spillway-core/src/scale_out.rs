//! Queue-driven scale-out as a plan: [`Engine::plan_scale_out`] reads the engine's state after scheduling and
//! returns a [`ScalePlan`] (what to launch, which ready nodes blocked jobs count on, the pending reasons, why each
//! pool bought less than asked) without changing anything; [`Engine::scale_out`] applies it. The same plan under
//! other limits answers what-if questions ([`Engine::what_if`]) at the cost of one estimate, with no copy of the
//! engine.

use crate::access::{Access, job_pools};
use crate::cluster::Cluster;
use crate::config::Market;
use crate::event::{Action, DecisionKind};
use crate::growth::NotGrown;
use crate::model::{Job, JobId, JobState, NodeId, PendingReason};
use crate::place::{Fork, Slot, place};
use crate::scale::Want;
use crate::shape::Failed;
use crate::state::{Engine, WakeAt};
use crate::time::{Time, secs};

use std::collections::{BTreeMap, BTreeSet};

mod keep;

/// A pool (index) and why it did not grow.
type PoolWhy = (usize, NotGrown);

/// What one scale-out estimate decided, before anything is applied.
#[derive(Debug, Default)]
pub(crate) struct ScalePlan {
    /// Ready nodes blocked gangs count on (scale-in keeps them).
    pub claimed: BTreeSet<NodeId>,
    /// Pools at max with demand they cannot hold: the GPUs per worker of the first job starving there and the
    /// most workers the pool's best type holds (scale-in may swap nodes too small for it).
    pub starved: BTreeMap<usize, (u32, u32)>,
    /// Pending reasons, with why the job's first pool did not grow when it waits for capacity.
    pub reasons: Vec<(JobId, PendingReason, Option<PoolWhy>)>,
    /// Interruptible jobs given on-demand capacity where spot was an option.
    pub fallbacks: Vec<JobId>,
    /// Nodes to launch per pool and instance type.
    pub launches: BTreeMap<usize, BTreeMap<usize, u32>>,
    /// Per pool launched for: (GPUs of the demand, longest wait, tiers as a bit set).
    pub demand: BTreeMap<usize, (u32, i64, u32)>,
    /// Per pool that bought less than the demand asked of it: why (the first reason met).
    pub not_grown: BTreeMap<usize, NotGrown>,
}

/// Per pool, the limits one estimate works within: its max now and the nodes it may add now.
pub(crate) struct Limits {
    pub maxes: Vec<u32>,
    pub headroom: Vec<u32>,
}

/// The running state of one estimate: what is planned so far and what the jobs already seen take.
pub(crate) struct Planner<'e> {
    e: &'e Engine,
    limits: Limits,
    /// Per pool: the free GPUs jobs may count on before buying (ready, booting and planned nodes), placed onto
    /// by the scheduler's own placement.
    forks: Vec<Fork<'e>>,
    planned: Vec<u32>,
    /// vCPUs left per account quota, less what this plan launches.
    quota_left: Vec<u32>,
    spot_gpus: f64,
    od_gpus: f64,
    /// Shapes that found neither room nor a launch since the last launch planned (see `shape`), with whether
    /// they were held to spot until their fallback time, why their first pool did not grow, the pools it tried
    /// (a bit each), what [`Planner::taken_in`] them said then, and the workers it was bought for (an elastic
    /// job's most, which its shape does not say).
    no_room: Failed<(bool, Option<PoolWhy>, u64, u64, u32)>,
    /// Per pool: how many jobs took its virtual free GPUs so far. A gang that found no room may still claim
    /// ready nodes, and which ones depends on what earlier jobs took there: a remembered gang counts only while
    /// nothing was taken since in the pools it tried.
    taken: Vec<u64>,
    /// Whether the jobs planned now are the walk's blocked ones (not movers or shadows): a gang of those may
    /// keep the booting and planned nodes it partly fits on (see [`Planner::keep_for_gang`]).
    walk_order: bool,
    /// How many of the walk's blocked jobs were planned so far, and how many of those past the point where the
    /// walk turned quiet it would hold nodes for (see [`Planner::note_reserved`]).
    walked: usize,
    reserving_past_quiet: usize,
    /// Whether the walk held nodes back for the job planned now; whether that job is held to spot until its
    /// fallback time; whether it bought in a pool whose max still cannot hold it.
    reserved: bool,
    held_to_spot: bool,
    bought_short: bool,
    /// The pool where the job planned now would keep the slots in `kept` if it finds no room anywhere.
    keep: Option<usize>,
    kept: Vec<(Slot, u32)>,
    /// Whether the job planned now hid a slot (its memo would say less than a fresh search).
    hid: bool,
    /// Per tier: how long a job waits for spot before it may fall back to on-demand.
    fallback_after: Vec<Time>,
    /// Buffers kept across jobs: the slots the last placement took, the pools a job tries.
    slots: Vec<(Slot, u32)>,
    cands: Vec<usize>,
    out: ScalePlan,
}

/// What one job does in one pool: counts on nodes there, buys there, or neither.
enum InPool {
    Fits,
    Buys,
    No(Option<NotGrown>),
}

impl Engine {
    /// Returns each pool's max and the nodes it may add now (see [`Engine::pool_headroom`]).
    pub(crate) fn limits(&self) -> Limits {
        let maxes: Vec<u32> = (0..self.cfg.pools.len()).map(|p| self.effective_max(p)).collect();
        let headroom = maxes.iter().enumerate().map(|(p, &max)| self.headroom_within(p, max, false)).collect();
        Limits { maxes, headroom }
    }

    /// Buys cloud nodes for blocked jobs that booting nodes will not hold, and for pools below their min.
    /// Returns the ready nodes blocked jobs count on (scale-in keeps them) and the pools at max that still have
    /// demand they cannot hold (scale-in may swap an idle node there even at min).
    /// `blocked` are the blocked jobs with how many of them the scheduling walk found (the rest move, see
    /// [`Engine::plan_scale_out`]); `shadow` are running jobs that want capacity to move to (make before break),
    /// each with the markets it may use for it (spot only to return to spot; its own to leave a node at risk);
    /// they get no pending reason.
    pub(crate) fn scale_out(
        &mut self,
        blocked: (&[JobId], usize),
        shadow: &[(JobId, Access)],
        wake: &mut WakeAt,
    ) -> (BTreeSet<NodeId>, BTreeMap<usize, (u32, u32)>) {
        let plan = self.plan_scale_out(blocked, shadow, self.limits(), wake);
        self.apply_scale_out(plan)
    }

    /// Plans scale-out for `blocked` jobs (the first `walked` of them in queue order, as the scheduling walk
    /// found them; the rest running jobs that move) and `shadow` jobs (spot demand ahead of a move) within
    /// `limits`, and the launches that bring pools to their min. Changes nothing; asks to be woken when a
    /// decision here may change with time alone (fallback to on-demand, cooldown end, backoff end).
    pub(crate) fn plan_scale_out(
        &self,
        (blocked, walked): (&[JobId], usize),
        shadow: &[(JobId, Access)],
        limits: Limits,
        wake: &mut WakeAt,
    ) -> ScalePlan {
        let mut planner = self.planner(limits);
        // One pending reason per job at most: sized once, not grown job by job.
        planner.out.reasons.reserve(blocked.len() + shadow.len());
        let (walk, moving) = blocked.split_at(walked.min(blocked.len()));
        for &id in walk {
            planner.job(id, None, wake);
        }
        // Jobs that move come after the walk's: where they stand in the next walk's order (before a gang or after
        // it) is not known here, so they see the nodes kept for gangs as they are (and what shapes found no room
        // without them is no guide).
        planner.forks.iter_mut().for_each(Fork::unhide);
        planner.no_room.clear();
        planner.walk_order = false;
        for &id in moving {
            planner.job(id, None, wake);
        }
        for &(id, access) in shadow {
            planner.job(id, Some(access), wake);
        }
        planner.up_to_min(wake);
        planner.out
    }

    /// Returns a planner that has planned nothing yet, within `limits`.
    pub(crate) fn planner(&self, limits: Limits) -> Planner<'_> {
        let share = self.cfg.policy.spot_share.is_some();
        let (spot_gpus, od_gpus) = if share { self.interruptible_cloud_gpus() } else { (0.0, 0.0) };
        let pools = self.cfg.pools.len();
        Planner {
            e: self,
            forks: (0..pools).map(|p| Fork::new(&self.c.free[p], &self.c.nodes, &self.c.pools[p].requested)).collect(),
            planned: vec![0; pools],
            quota_left: crate::quota::quota_left(self),
            limits,
            spot_gpus,
            od_gpus,
            no_room: Failed::default(),
            taken: vec![0; pools],
            walk_order: true,
            walked: 0,
            reserving_past_quiet: 0,
            reserved: false,
            held_to_spot: false,
            bought_short: false,
            keep: None,
            kept: Vec::new(),
            hid: false,
            fallback_after: self.cfg.tiers.iter().map(|t| secs(t.spot_fallback_after_s.min(1e12))).collect(),
            slots: Vec::new(),
            cands: Vec::new(),
            out: ScalePlan::default(),
        }
    }

    /// Says why an interruptible job gets on-demand capacity: what stopped each spot pool its tier may use from
    /// growing in this pass, or, where none said, that no spot node held it within its tier's fallback wait.
    fn fallback_why(&self, id: JobId, not_grown: &BTreeMap<usize, NotGrown>) -> String {
        let tier = &self.cfg.tiers[self.c.jobs[id.0 as usize].tier];
        let whys: Vec<String> = (0..self.cfg.pools.len())
            .filter(|&p| self.cfg.pools[p].market == Market::Spot && tier.markets.contains(&Market::Spot))
            .filter_map(|p| {
                not_grown.get(&p).map(|w| format!("pool {}: {}", self.cfg.pools[p].name, w.describe(self.now)))
            })
            .collect();
        if whys.is_empty() {
            let wait = crate::time::fmt_duration(tier.spot_fallback_after_s);
            return format!(
                "interruptible job gets on-demand capacity: no spot node held it within its tier's spot fallback wait of {wait}"
            );
        }
        format!("interruptible job gets on-demand capacity: {}", whys.join("; "))
    }

    /// Carries out a plan: pending reasons (with why the pool did not grow), fallback records, launches, then a
    /// `scale_out_blocked` decision where a pool's reason for not growing changed.
    fn apply_scale_out(&mut self, plan: ScalePlan) -> (BTreeSet<NodeId>, BTreeMap<usize, (u32, u32)>) {
        for &id in &plan.fallbacks {
            self.c.counters.fallbacks += 1;
            // Built only when decisions are recorded: `record` cannot take a closure that borrows the engine.
            let why = if self.record { self.fallback_why(id, &plan.not_grown) } else { String::new() };
            self.record(DecisionKind::Fallback, || crate::event::job_subject(id), "spot_unavailable_or_share", || why);
        }
        for (p, types) in plan.launches {
            self.launch(p, types, plan.demand.get(&p).copied());
        }
        for &(id, reason, why) in &plan.reasons {
            self.c.jobs[id.0 as usize].not_grown = why.filter(|_| reason == PendingReason::NoCapacity);
            self.set_pending(id, reason);
        }
        // After the launches, so "at its max" reads true of the pool as this pass leaves it.
        for p in 0..self.cfg.pools.len() {
            let why = plan.not_grown.get(&p).copied();
            if why.map(NotGrown::code) != self.not_grown[p].map(NotGrown::code)
                && let Some(why) = why
            {
                let (name, detail) = (self.cfg.pools[p].name.clone(), why.describe(self.now));
                self.record(
                    DecisionKind::ScaleOutBlocked,
                    || format!("pool:{name}"),
                    why.code(),
                    || format!("demand waits: pool {name}: {detail}"),
                );
            }
            self.not_grown[p] = why;
        }
        (plan.claimed, plan.starved)
    }

    fn launch(&mut self, pool: usize, types: BTreeMap<usize, u32>, demand: Option<(u32, i64, u32)>) {
        let now = self.now;
        let market = self.cfg.pools[pool].market;
        let mut what = Vec::new();
        let mut added = Vec::new();
        for (it, count) in types {
            let itx = &self.cfg.instance_types[it];
            let price = self.cfg.offer_price(pool, it).unwrap_or(0.0);
            let (gpus, model) = (itx.gpus, itx.gpu_model.clone());
            what.push(format!("{count} x {}", itx.name));
            for _ in 0..count {
                let node = self.c.add_node(pool, market, Some(it), model.clone(), gpus, price, now);
                self.c.counters.nodes_launched += 1;
                self.actions.push_back(Action::Launch { node, pool, instance_type: it });
                added.push(node);
            }
        }
        let ids = || crate::engine::node_list(added.iter().copied());
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
                    "launch {} (node(s) {}): {gpus} GPUs of {} demand waiting up to {}",
                    what.join(", "),
                    ids(),
                    tiers.join("/"),
                    crate::time::fmt_ms(waited)
                ),
            ),
            None => {
                ("below_min", format!("launch {} (node(s) {}): pool below its (scheduled) min", what.join(", "), ids()))
            }
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
}

impl Planner<'_> {
    /// Plans for one job: counts it on nodes it fits, or buys for it in the first pool that can, and notes its
    /// pending reason (`shadow`: a running job that wants capacity in these markets to move to; it has none).
    pub(crate) fn job(&mut self, id: JobId, shadow: Option<Access>, wake: &mut WakeAt) {
        self.reserved = false;
        if self.walk_order && shadow.is_none() {
            self.note_reserved(id);
        }
        self.plan_job(id, shadow, wake);
        if shadow.is_none() {
            self.hold_back(id);
        }
    }

    /// Plans for one job (see [`Planner::job`]).
    fn plan_job(&mut self, id: JobId, shadow: Option<Access>, wake: &mut WakeAt) {
        let is_shadow = shadow.is_some();
        (self.hid, self.keep, self.bought_short) = (false, None, false);
        let e = self.e;
        let now = e.now;
        let job = &e.c.jobs[id.0 as usize];
        // Its reason stays `checkpointing` until the checkpoint is written; a running job has none.
        let job_checkpointing = is_shadow || job.not_before.is_some_and(|t| t > now);
        // A job with a deadline leaves spot when its slack says so (the scheduler pins it), not after a wait; on
        // its reserve it takes on-demand at once where spot cannot be had.
        let fallback_at = job.queued_since
            + match (job.deadline_governs(), job.on_reserve) {
                (true, false) => secs(1e12),
                (true, true) => 0,
                (false, _) => self.fallback_after[job.tier],
            };
        let access = shadow.unwrap_or_else(|| Access::of(job, now));
        // A capped team's job buys nothing, so what it found is no guide for another team's job of its shape.
        let key = u8::from(is_shadow) | u8::from(now < fallback_at) << 1 | u8::from(e.team_capped(job.team)) << 2;
        // A job whose data may move tries pools in an order of its own: what its shape found is no guide.
        // So does a job leaving its pool for a cheaper one (it may buy only before its pool in its order).
        let own_order = crate::data_move::may_move(job) || access.before.is_some();
        // A single worker claims nothing, and one that found no room finds none while GPUs are only taken. A gang
        // the walk reserved for searches afresh: whether it keeps nodes booting for it from the jobs behind it
        // depends on where the walk holds for this job (see `keep.rs`), not on its shape, and there are only a
        // few such gangs in a pass.
        let own_search = own_order || e.exhaustive || (self.reserved && job.gang.workers > 1);
        let w = bought_workers(&e.c, job);
        let remembered = self.no_room.get(job, access, key).filter(|&(.., mask, taken, bought)| {
            !own_search && bought == w && (job.gang.workers == 1 || taken == self.taken_in(mask))
        });
        if let Some((held_to_spot, why, ..)) = remembered {
            if held_to_spot {
                wake.at(fallback_at);
            }
            if !job_checkpointing {
                self.out.reasons.push((id, PendingReason::NoCapacity, why));
            }
            return;
        }
        let mut cands = std::mem::take(&mut self.cands);
        let held_to_spot = self.candidates(id, access, fallback_at, wake, &mut cands);
        self.held_to_spot = held_to_spot;
        let mut reason = PendingReason::NoCapacity;
        let mut first_why: Option<(usize, NotGrown)> = None;
        // A job that left its node for a cheaper spot pool counts on the nodes ready or booting that hold it in
        // any pool it may use before it buys in an earlier one: it left for them, and starts on them once its
        // checkpoint is written.
        let counted = hopping(job) && cands.iter().any(|&p| self.counts_on(id, p));
        for &p in cands.iter().filter(|_| !counted) {
            match self.in_pool(id, p, wake) {
                InPool::Fits => {
                    reason = PendingReason::WaitingForNodes;
                    break;
                }
                InPool::Buys => {
                    // Nodes were added: a shape that found no room may find some on them.
                    self.no_room.clear();
                    reason = PendingReason::WaitingForNodes;
                    // A gang that bought all its pool may and still does not fit waits as one that found no
                    // room: it keeps what it partly placed on where the next pass holds for it.
                    if self.bought_short {
                        self.keep_for_gang();
                    }
                    break;
                }
                InPool::No(why) => {
                    if let Some(why) = why {
                        // A team's cap is no reason of the pool's: other teams' work may still grow it.
                        if why != NotGrown::BudgetCap {
                            self.out.not_grown.entry(p).or_insert(why);
                        }
                        first_why.get_or_insert((p, why));
                    }
                }
            }
        }
        if counted {
            reason = PendingReason::WaitingForNodes;
        }
        if reason == PendingReason::NoCapacity {
            self.keep_for_gang();
        }
        if reason == PendingReason::NoCapacity && !own_order && !self.hid {
            let mask = cands.iter().fold(0u64, |m, &p| m | 1u64.checked_shl(p as u32).unwrap_or(u64::MAX));
            let kept = (held_to_spot, first_why, mask, self.taken_in(mask), w);
            self.no_room.insert(&e.c.jobs[id.0 as usize], access, key, kept);
        }
        self.cands = cands;
        if !job_checkpointing {
            self.out.reasons.push((id, reason, first_why));
        }
    }

    /// Returns the most free GPUs on one node the jobs planned so far left in pool `p` (ready, booting or
    /// planned).
    pub(crate) fn most_free(&mut self, p: usize) -> u32 {
        self.forks[p].most_free()
    }

    /// Returns whether a job planned so far starves pool `p` (see [`ScalePlan::starved`]).
    pub(crate) fn starves(&self, p: usize) -> bool {
        self.out.starved.contains_key(&p)
    }

    /// Returns how many jobs took virtual free GPUs so far in the pools of `mask` (bit p: pool p; pools past 63
    /// all count under the last bit).
    fn taken_in(&self, mask: u64) -> u64 {
        let bit = |p: usize| 1u64.checked_shl(p as u32).unwrap_or(1 << 63);
        self.taken.iter().enumerate().filter(|&(p, _)| mask & bit(p) != 0).map(|(_, &t)| t).sum()
    }

    /// Lists in `cands` the cloud pools a job may buy in, in the order it tries them; returns whether it is held
    /// to spot until its fallback time: before it, an interruptible job buys only spot while spot can launch a type that
    /// holds it; at the spot share target it tries on-demand first.
    fn candidates(
        &self,
        id: JobId,
        access: Access,
        fallback_at: Time,
        wake: &mut WakeAt,
        cands: &mut Vec<usize>,
    ) -> bool {
        let e = self.e;
        let (now, job) = (e.now, &e.c.jobs[id.0 as usize]);
        cands.clear();
        let moved = crate::data_move::order_for(&e.c, &e.cfg, &e.pool_order[job.tier], job, now);
        if let Some((_, Some(back))) = moved {
            wake.at(back);
        }
        let order = moved.as_ref().map_or(e.pool_order[job.tier].as_slice(), |(o, _)| o.as_slice());
        cands.extend(job_pools(&e.cfg, order, access).filter(|&p| e.cfg.pools[p].market != Market::Fixed));
        let is_spot = |p: &usize| e.cfg.pools[*p].market == Market::Spot;
        let has_spot = job.interruptible && e.cfg.tiers[job.tier].markets.contains(&Market::Spot);
        if !has_spot || cands.iter().all(is_spot) {
            return false;
        }
        // Whether spot can launch a type that holds it changes with time alone when a cooldown or a back-off
        // ends: the pass that sees it comes then (the job may be held to spot from that instant).
        let spot_open = cands.iter().filter(|&&p| is_spot(&p)).fold(false, |open, &p| {
            if self.limits.headroom[p] == 0 {
                if let Some(end) = e.cooldown_end(p) {
                    wake.at(end);
                }
                return open;
            }
            let fits = e.pick_instance_type(p, Want::Job(job), job.gang.workers, u32::MAX, &self.quota_left, wake);
            open || fits.is_some()
        });
        let (spot, od) = (self.spot_gpus, self.od_gpus);
        if e.cfg.policy.spot_share.is_some_and(|target| spot >= target * (spot + od)) {
            // The spot share of interruptible capacity is at its target: this one goes on-demand first.
            cands.sort_by_key(|p| is_spot(p));
        } else if spot_open && now < fallback_at {
            cands.retain(is_spot);
            wake.at(fallback_at);
            return true;
        }
        false
    }

    /// Returns whether job `id`'s whole gang fits the nodes it may count on in pool `p` (ready, booting,
    /// planned); if so it takes them, and claims the ready ones where a gang or a job moving to cheaper spot
    /// would (see [`Planner::in_pool`]).
    fn counts_on(&mut self, id: JobId, p: usize) -> bool {
        let job = &self.e.c.jobs[id.0 as usize];
        let (g, w, model) = (job.spec.gpus_per_worker, bought_workers(&self.e.c, job), job.spec.gpu_model.as_deref());
        if fits(&mut self.forks[p], g, w, model, &mut self.slots) > 0 {
            return false;
        }
        self.taken[p] += 1;
        if (w > 1 || hopping(job)) && !self.out.starved.contains_key(&p) {
            self.out.claimed.extend(ready(&self.slots));
        }
        true
    }

    /// Tries one pool for a job: the nodes it counts on there (ready, booting, planned) hold it, or it buys
    /// nodes there, or neither (with why the pool did not grow, when that is the reason). A gang claims the ready
    /// nodes it counts on (so scale-in does not remove them under it) only where the pool can still grow for the
    /// rest, and not in a pool an earlier job is starving in (there scale-in must be free to swap nodes). Only a
    /// gang assembles across ready nodes; a single worker that fits a ready node was held back for another
    /// reason (strict queue order, a reservation) and must not pin it, unless it left its node for this one. Claims and starving are judged on what the
    /// pool holds after this job's own launch, as the next pass would judge them.
    fn in_pool(&mut self, id: JobId, p: usize, wake: &mut WakeAt) -> InPool {
        let e = self.e;
        let (now, job) = (e.now, &e.c.jobs[id.0 as usize]);
        // An elastic job is bought for as its rigid twin would be, its most workers (as far as its team's quota
        // allows); it is held once its fewest fit (`spare` workers may be missing).
        let (g, w, model) = (job.spec.gpus_per_worker, bought_workers(&e.c, job), job.spec.gpu_model.as_deref());
        let spare = w.saturating_sub(job.gang.workers);
        let room = self.limits.maxes[p].saturating_sub(e.c.pools[p].alive + self.planned[p]);
        let free_pool = !self.out.starved.contains_key(&p);
        let claims = |left: u32, room: u32| (w > 1 || hopping(job)) && free_pool && (left == 0 || room > 0);
        let best = e.best_workers_per_node(p, g, model);
        let starving = |left: u32, room: u32| best == 0 || room < left.div_ceil(best);
        let left = fits(&mut self.forks[p], g, w, model, &mut self.slots);
        // An elastic job whose fewest fit is held here when the pool cannot buy for the rest (judged only then).
        let cannot_buy = || room == 0 || self.limits.headroom[p] == 0 || e.team_capped(job.team);
        let cooldown = secs(e.cfg.pools[p].scale_out_cooldown_s);
        // Below its max, a pool without headroom is in its scale-out cooldown, or at the step limit of a launch in
        // this very pass (whose cooldown starts now): it may grow again when that ends.
        let stepped = self.planned[p] > 0;
        let grows_at = || {
            let last = if stepped { Some(now) } else { e.c.pools[p].last_scale_out };
            last.map_or(now, |t| t + cooldown).max(now)
        };
        if left == 0 || (left <= spare && cannot_buy()) {
            if left > 0 && room > 0 && self.limits.headroom[p] == 0 && !e.team_capped(job.team) {
                // Held on its fewest only until the pool may grow: it buys for the rest then.
                wake.at(grows_at());
            }
            self.taken[p] += 1;
            if claims(0, room) {
                self.out.claimed.extend(ready(&self.slots));
            }
            return InPool::Fits;
        }
        if e.team_capped(job.team) {
            // Its team spent a capped budget: it may use capacity there is, and buys none.
            return InPool::No(Some(NotGrown::BudgetCap));
        }
        // Prefer a type whose nodes fit in the room left; else make progress with the best type.
        let (pick, why) = if room == 0 {
            let nodes = e.c.pools[p].alive + self.planned[p];
            (None, Some(NotGrown::AtMax { max_nodes: self.limits.maxes[p], nodes }))
        } else if self.limits.headroom[p] == 0 {
            // The job may buy here once the cooldown or step limit ends.
            let until = grows_at();
            wake.at(until);
            (None, Some(if stepped { NotGrown::StepLimit { until } } else { NotGrown::Cooldown { until } }))
        } else {
            let quota = &self.quota_left;
            let pick = e.pick_instance_type(p, Want::Job(job), left, room, quota, wake);
            let pick = pick.or_else(|| e.pick_instance_type(p, Want::Job(job), left, u32::MAX, quota, wake));
            (pick, pick.is_none().then(|| e.why_no_type(p, g, model, left, quota)))
        };
        let Some((it, nodes)) = pick else {
            if left <= spare {
                self.taken[p] += 1;
                return InPool::Fits;
            }
            if claims(left, room) {
                self.out.claimed.extend(ready(&self.slots));
            }
            if starving(left, room) {
                self.note_keep(id, p, w);
                // A pool whose max cannot hold the rest of this job beside the nodes it has is starving: scale-in
                // may swap its idle nodes that are too small.
                self.out.starved.entry(p).or_insert((g, best));
            }
            return InPool::No(why);
        };
        let n = nodes.min(self.limits.headroom[p]).min(room);
        if n < nodes.min(room) {
            // The step limit cut this launch short: the rest may come when the cooldown this launch starts ends.
            wake.at(now + cooldown);
            self.out.not_grown.entry(p).or_insert(NotGrown::StepLimit { until: now + cooldown });
        }
        self.buy(id, p, it, n);
        let left = fits(&mut self.forks[p], g, w, model, &mut self.slots);
        self.taken[p] += u64::from(left <= spare);
        if claims(left, room - n) {
            self.out.claimed.extend(ready(&self.slots));
        }
        if left > spare && starving(left, room - n) {
            self.out.starved.entry(p).or_insert((g, best));
            self.bought_short = true;
            self.note_keep(id, p, w);
        }
        InPool::Buys
    }

    /// Plans `n` nodes of type `it` in pool `p` for job `id`, and counts them as the job's to use.
    fn buy(&mut self, id: JobId, p: usize, it: usize, n: u32) {
        let e = self.e;
        let job = &e.c.jobs[id.0 as usize];
        let (g, w) = (job.spec.gpus_per_worker, bought_workers(&e.c, job));
        self.limits.headroom[p] -= n;
        self.planned[p] += n;
        crate::quota::take_quota(&e.cfg, it, e.cfg.pools[p].market, n, &mut self.quota_left);
        *self.out.launches.entry(p).or_default().entry(it).or_default() += n;
        let d = self.out.demand.entry(p).or_default();
        *d = (d.0.saturating_add(g.saturating_mul(w)), d.1.max(e.now - job.queued_since), d.2 | (1 << job.tier));
        let itx = &e.cfg.instance_types[it];
        let added = f64::from(n) * f64::from(itx.gpus);
        if e.cfg.pools[p].market == Market::Spot {
            self.spot_gpus += added;
        } else if job.interruptible {
            self.od_gpus += added;
            // A fallback only where spot was an option: the tier allows it and a spot pool exists.
            if e.cfg.tiers[job.tier].markets.contains(&Market::Spot)
                && e.cfg.pools.iter().any(|p| p.market == Market::Spot)
            {
                self.out.fallbacks.push(id);
            }
        }
        for _ in 0..n {
            self.forks[p].plan(itx.gpus, &itx.gpu_model);
        }
    }

    /// Plans the launches that bring each cloud pool to its (scheduled) min.
    fn up_to_min(&mut self, wake: &mut WakeAt) {
        let e = self.e;
        for p in 0..e.cfg.pools.len() {
            if !e.cfg.pools[p].launched() {
                continue;
            }
            let min = e.effective_min(p, wake);
            let have = e.c.pools[p].alive + self.out.launches.get(&p).map_or(0, |m| m.values().sum());
            if have < min
                && let Some((it, _)) = e.pick_instance_type(p, Want::Min, 1, u32::MAX, &self.quota_left, wake)
            {
                let market = e.cfg.pools[p].market;
                let n = (min - have).min(crate::quota::quota_nodes(&e.cfg, it, market, &self.quota_left));
                if n > 0 {
                    crate::quota::take_quota(&e.cfg, it, market, n, &mut self.quota_left);
                    *self.out.launches.entry(p).or_default().entry(it).or_default() += n;
                }
            }
        }
    }
}

/// Counts a job's `w` workers of `g` GPUs (of `model`) on a pool's fork where the scheduler would place them,
/// keeping them there when all fit; returns the workers that do not fit, and leaves in `slots` the slots the
/// placed ones use (even when only part of a gang fits).
fn fits(fork: &mut Fork<'_>, g: u32, w: u32, model: Option<&str>, slots: &mut Vec<(Slot, u32)>) -> u32 {
    place(fork, g, w, model, true, slots);
    w - slots.len() as u32
}

/// Returns whether `job` left its node for one elsewhere (a cheaper spot pool, or spot again from on-demand) and
/// has not started since: it starts on the node it left for once its checkpoint is written, so it claims that
/// node from scale-in.
fn hopping(job: &crate::model::Job) -> bool {
    job.state == JobState::Queued && job.data.as_deref().is_some_and(|d| d.hopping)
}

/// Returns the ready nodes among the slots a placement took.
fn ready(slots: &[(Slot, u32)]) -> impl Iterator<Item = NodeId> + '_ {
    slots.iter().filter_map(|&(s, _)| s.ready())
}

/// Returns the workers capacity is bought for: a queued elastic job's most that its team's GPU quota allows
/// ([`crate::elastic::most_workers`]), any other job's all (a running job that moves keeps its width).
fn bought_workers(c: &Cluster, job: &Job) -> u32 {
    if job.state == JobState::Queued { crate::elastic::most_workers(c, job) } else { job.gang.max_workers }
}
