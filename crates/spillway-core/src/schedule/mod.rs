//! The scheduling pass: walks the queue in order (tier, team fair share, age), places gangs all-or-nothing with
//! best-fit bin-packing (the fullest node that still fits, so whole nodes stay free for large gangs; see
//! `place`), holds nodes back for blocked multi-GPU jobs so smaller jobs backfill only around them, and preempts
//! strictly lower tiers when a job would otherwise miss its queue-wait SLO (see `preempt`).
//!
//! The walk ([`Pass`]) binds the GPUs it gives, so the jobs after it see them taken, and collects what else it
//! decided in a [`SchedulePlan`] (starts, victims, pins, pending reasons, blocked jobs); the engine then asks for
//! the wake-ups the next pass needs and applies the plan (requeues, starts, records).

use crate::access::{Access, Need, job_pools};
use crate::budget_place::{Drains, FitCache};
use crate::cluster::Cluster;
use crate::config::{Config, Market, model_fits};
use crate::event::{DecisionKind, StopReason, job_subject};
use crate::model::{JobId, NodeId, NodeState, PendingReason};
use crate::place::{ReadyGpus, Slot, place};
use crate::preempt::{find_victims, preemption_offset};
use crate::queue::Queue;
use crate::shape::Failed;
use crate::state::{Engine, WakeAt};
use crate::time::{Time, fmt_ms, secs};

mod apply;
mod noted;
mod probe;
mod reach;

use probe::Probe;

use reach::buyers_beyond;

/// A gang's shape for [`Pass::shadow_hold`]: tier, access, GPUs per worker, workers, GPU model.
type HoldKey = (usize, Access, u32, u32, Option<String>);
/// Nodes held softly for a gang, each with when it could start there, and the next instant the hold may move.
type Hold = (Vec<(NodeId, Time)>, Option<Time>);

/// Most jobs one pass preempts for.
const MAX_PREEMPTING_JOBS: usize = 16;
/// Blocked jobs a pass collects that no pool they may use can grow for now (enough to find preemption
/// candidates); once it has that many, the pass ends.
const BLOCKED_CAP_NO_SCALE: usize = 256;
/// Blocked jobs a pass collects for the autoscaler (jobs some pool they may use can grow for).
const BLOCKED_CAP: usize = 2048;

/// What one scheduling pass decided, for the engine to apply after the walk.
#[derive(Default)]
struct SchedulePlan {
    /// Jobs placed, with their GPUs per node (bound already).
    started: Vec<(JobId, Vec<(NodeId, u32)>)>,
    /// (victim, the job it was stopped for): released already, requeued when the plan is applied.
    preempted: Vec<(JobId, JobId)>,
    /// Blocked jobs in queue order, for the autoscaler.
    blocked: Vec<JobId>,
    reasons: Vec<(JobId, PendingReason)>,
    /// Deadline jobs this pass moved to on-demand.
    pinned: Vec<JobId>,
    /// Deadline jobs whose slack came down to their reserve this pass (on-demand while spot cannot be had).
    on_reserve: Vec<JobId>,
    /// Jobs told they wait for owned capacity that stopped waiting this pass: none could take them before their
    /// budgets end (`burst_early`).
    burst_early: Vec<JobId>,
    /// Jobs it left waiting inside their budget for owned capacity, with when that ends.
    budgets: Vec<(Time, JobId)>,
}

/// Where a walk stopped before the end of the queue.
#[derive(Default, Clone, Copy)]
struct Cut {
    /// At the scan limit or a blocked-job cap.
    limit_hit: bool,
    /// At the scan limit.
    scan: bool,
    /// At the cap for jobs no pool can grow for, or past jobs no pool can grow for now (see `Pass::settles`).
    stuck: bool,
    /// Where nothing further on could start, preempt or buy (see `Pass::settles`).
    settled: bool,
}

/// What the engine reads of a finished walk besides its plan.
struct PassEnd {
    cut: Cut,
    scanned: usize,
    due_without_victims: Option<u32>,
    first_hold: Option<usize>,
    last_start: Option<usize>,
    /// Where in the scan the first blocked job came.
    first_block: Option<usize>,
    /// A job inside its budget may have room on a cloud node a later job of the pass started on, or no longer
    /// owned capacity in time for it (see `Pass::waiting_early`).
    budget_room: bool,
}

/// One walk over the queue in progress: the limits it works within, what it learnt (shapes without room, when
/// preemption is due), its counters, and the plan so far.
struct Pass<'a> {
    cfg: &'a Config,
    pool_order: &'a [Vec<usize>],
    now: Time,
    /// Remember shapes that found no room (off only for the exactness tests).
    remember: bool,

    /// Per pool: whether it could launch a node now. A blocked job that may use one goes to the autoscaler under
    /// the large cap, one that may use none under the small cap (it can only wait or preempt).
    grows: Vec<bool>,
    /// Per pool: whether it is a cloud pool below its max (it may grow, once out of any cooldown).
    cloud_room: Vec<bool>,
    /// Per tier and access: when after entering the queue a job may preempt (see `preemption_offset`).
    due_offsets: Vec<Option<Option<Time>>>,
    /// Per tier and access: whether such a job may use a pool that can launch a node now.
    buys: Vec<Option<bool>>,
    /// Per tier: its waiting budget where that does not grow with a job's size (worked out once per pass).
    fixed_wait: Vec<Option<Time>>,
    /// Shapes that found no placement, or no victims, in this pass (see `shape`).
    no_room: Failed,
    /// Shapes that found no room where that depends on a job's end (inside its budget, or beside held nodes), by
    /// whether the job is inside its budget, with the earliest expected end that found none.
    no_room_by_end: Failed<Time>,
    /// When owned capacity could hold each job shape (`burst_early`), until this pass binds or frees GPUs.
    fits: FitCache,
    /// [`Pass::shadow_hold`]'s answers by gang shape, until this pass binds or frees GPUs.
    holds: Vec<(HoldKey, Hold)>,
    /// The nodes of the pools soft holds are in, in drain order.
    drains: Drains,
    /// Per tier: whether no job known to wait inside its budget could start or preempt (see `noted_closed`),
    /// until this pass starts a job.
    closed_noted: Vec<Option<bool>>,
    /// `settles` for the tier it was last asked for, until this pass starts a job or holds nodes back.
    settles_memo: Option<(usize, (bool, bool))>,
    /// Nodes held for waiting gangs inside their budget, with when the gang could start there: a job may use
    /// one only if it is expected to end by then (backfill, as EASY does).
    shadows: Vec<(NodeId, Time)>,
    /// A job inside its budget found no room; and then a job started on a cloud node, which may make room for
    /// it (the next pass, at this instant, looks again).
    refused_in_budget: bool,
    budget_room: bool,
    /// A job of a `burst_early` tier was left waiting inside its budget; a job that starts later in the pass on
    /// owned capacity (or a cloud pool its minimum keeps) takes GPUs it counted on, so the next pass, at this
    /// instant, asks again whether owned capacity could take it in time.
    waiting_early: bool,
    /// A job started on a cloud node whose data moves in first: the pass sees it end a transfer too early (its
    /// work starts once the pass is applied), so a job inside its budget it refuses may fit beside it at this
    /// instant after all.
    late_end: bool,
    no_victims: Failed,
    /// Blocked jobs that may buy, and blocked jobs that may not.
    buying: usize,
    stuck: usize,
    reservations: usize,
    preempting: usize,
    scanned: usize,
    /// Without backfill, the first blocked job stops every job behind it.
    strict_block: bool,
    /// Past the cap for jobs that cannot buy, the walk goes on only while a job that can may be further on (a
    /// kind of job queued here or below that a pool able to grow could hold), and looks only at those.
    buyers_only: bool,
    /// The walk is past the point where no job could start or preempt any more (see `settles`): it passes by
    /// jobs known to wait inside their budgets (see [`Queue::wait_in_budget`]), and ends where only they are left.
    quiet: bool,
    /// Besides, the scale-out planner could count no job further on on a node (see `settles`). The walk then looks
    /// only at jobs that may buy and timed ones (see [`Queue::push`]), and counts those it passes as blocked.
    settled: bool,
    /// Per tier: the fewest GPUs per worker of a job queued there (`None`: none is queued).
    least_gpus: Vec<Option<u32>>,
    /// Nodes held back for blocked jobs (pool, free GPUs, node, the job), returned to the free index after the
    /// walk.
    reserved: Vec<(usize, u32, NodeId, JobId)>,
    /// The jobs nodes were held back for (or would have been, where none was free), in walk order.
    reserving: Vec<JobId>,
    /// How many of `reserved`, of `reserving`, of the blocked jobs and of the reservations there were when the
    /// walk turned quiet (see [`Pass::planner_holds`]).
    held_before_quiet: Option<(usize, usize, crate::state::Reserving)>,
    /// A buffer for placement searches.
    slots: Vec<(Slot, u32)>,
    /// Per pool: queued jobs not yet started that may use it (an elastic job starts wider only where no other
    /// would).
    wanting: Vec<usize>,
    /// The highest priority (lowest value) of a job whose preemption was due but that found no victims: a job
    /// of a lower, preemptible tier started later in this pass is a victim the next pass would find.
    due_without_victims: Option<u32>,
    /// Where in the scan a blocked job first held capacity back from the jobs behind it (a reservation, strict
    /// order), and where the last job started.
    first_hold: Option<usize>,
    last_start: Option<usize>,
    first_block: Option<usize>,
    /// When to ask the scale-out planner whether the walk may settle, and what it said (see `probe`).
    probe: Probe,
    plan: SchedulePlan,
}

impl Pass<'_> {
    /// Returns the holds the scale-out planner keeps for their jobs (see [`Engine::holds`]), as (job, pool, node)
    /// sorted by job: those made before the walk turned quiet. A node held after it has room for no worker of a
    /// job further on, and which jobs past that point hold nodes depends on how far the walk looks (it passes most
    /// by once settled), so the planner's answers would too.
    /// Besides, which blocked jobs the walk held nodes for (or would have, where none was free) before then.
    fn planner_holds(&self) -> (Vec<(JobId, usize, NodeId)>, crate::state::Reserving) {
        let (nodes, jobs, mut reserving) = self.held_before_quiet.clone().unwrap_or_else(|| self.reserving_now());
        let mut holds: Vec<_> = self.reserved[..nodes].iter().map(|&(p, _, n, id)| (id, p, n)).collect();
        holds.sort_unstable();
        reserving.jobs = self.reserving[..jobs].to_vec();
        reserving.jobs.sort_unstable();
        (holds, reserving)
    }

    /// Returns how many nodes and jobs the walk reserved for so far, with the blocked jobs and reservations.
    fn reserving_now(&self) -> (usize, usize, crate::state::Reserving) {
        let at = crate::state::Reserving {
            jobs: Vec::new(),
            blocked: self.plan.blocked.len(),
            reservations: self.reservations,
        };
        (self.reserved.len(), self.reserving.len(), at)
    }
}

/// Where a walk stands in the queue, kept while it pauses for a probe.
struct Walker<'q> {
    cursor: crate::queue::Cursor<'q>,
    started: bool,
    /// Per tier: the jobs not yet walked past that are not known to wait inside their budgets.
    left: Vec<usize>,
    /// Per tier: the jobs not yet walked past that are not noted at all (not even as `burst_early` ones).
    unnoted: Vec<usize>,
}

impl<'q> Walker<'q> {
    /// Starts at the head of `queue`, with each team's share and weight as the walk starts.
    fn new(queue: &'q Queue, tiers: usize, shares: Vec<f64>, weights: Vec<f64>) -> Walker<'q> {
        let tiers = 0..tiers;
        Walker {
            cursor: queue.cursor(shares, weights),
            started: false,
            left: tiers.clone().map(|t| queue.to_visit(t)).collect(),
            unnoted: tiers.map(|t| queue.unnoted(t)).collect(),
        }
    }
}

/// Finds nodes for every worker of `job` inside one pool (the first in its order where the whole gang fits, see
/// [`place`]), or `None`. Leaves `c` as it was.
/// `slots` is a buffer the caller keeps for the search.
pub(crate) fn find_placement(
    c: &mut Cluster,
    cfg: &Config,
    order: &[usize],
    job: &Need,
    slots: &mut Vec<(Slot, u32)>,
) -> Option<Vec<(NodeId, u32)>> {
    let Cluster { free, nodes, .. } = c;
    for pool in job_pools(cfg, order, job.access) {
        let mut ready = ReadyGpus { free: &mut free[pool], nodes, admit: None };
        place(&mut ready, job.g, job.w, job.model.as_deref(), false, slots);
        if slots.len() == job.w as usize {
            return Some(slots.iter().filter_map(|(s, _)| s.ready()).map(|n| (n, job.g)).collect());
        }
    }
    None
}

/// Holds back up to `workers` nodes with the most free GPUs for blocked job `id`, so later, smaller jobs do not
/// take them: removes them from the free index and appends them to `held` as (pool, free GPUs, node, job);
/// returns how many it held.
fn reserve(
    c: &mut Cluster,
    cfg: &Config,
    order: &[usize],
    (job, id): (&Need, JobId),
    held: &mut Vec<(usize, u32, NodeId, JobId)>,
) -> usize {
    let (g, w) = (job.g, job.w);
    let want = job.model.as_deref();
    let from = held.len();
    for pool in job_pools(cfg, order, job.access) {
        let capable = |&&(_, n): &&(u32, NodeId)| holds_worker(&c.nodes[n.0 as usize], g, want);
        let picks = c.free[pool].iter().rev().filter(capable).take(w as usize);
        held.extend(picks.map(|&(f, n)| (pool, f, n, id)));
        if held.len() > from {
            for &(_, f, n, _) in &held[from..] {
                c.free[pool].remove(&(f, n));
            }
            break;
        }
    }
    held.len() - from
}

/// Returns whether `node` could hold a worker of `g` GPUs of `model` once free: the nodes a hold takes (see
/// [`reserve`]).
pub(crate) fn holds_worker(node: &crate::model::Node, g: u32, model: Option<&str>) -> bool {
    node.gpus >= g && model_fits(model, &node.gpu_model)
}

impl<'a> Pass<'a> {
    /// Starts a pass; `grows[p]`: whether pool `p` can launch a node now.
    fn new(
        cfg: &'a Config,
        pool_order: &'a [Vec<usize>],
        now: Time,
        remember: bool,
        grows: Vec<bool>,
        wanting: Vec<usize>,
    ) -> Pass<'a> {
        Pass {
            cfg,
            pool_order,
            now,
            remember,
            cloud_room: Vec::new(),
            grows,
            due_offsets: vec![None; cfg.tiers.len() * 4],
            buys: vec![None; cfg.tiers.len() * 4],
            fixed_wait: cfg.tiers.iter().map(crate::wait_budget::fixed_wait).collect(),
            no_room: Failed::default(),
            no_room_by_end: Failed::default(),
            fits: FitCache::default(),
            holds: Vec::new(),
            drains: Drains::default(),
            closed_noted: Vec::new(),
            settles_memo: None,
            shadows: Vec::new(),
            refused_in_budget: false,
            budget_room: false,
            waiting_early: false,
            late_end: false,
            no_victims: Failed::default(),
            buying: 0,
            stuck: 0,
            reservations: 0,
            preempting: 0,
            scanned: 0,
            strict_block: false,
            buyers_only: false,
            quiet: false,
            settled: false,
            least_gpus: Vec::new(),
            reserved: Vec::new(),
            reserving: Vec::new(),
            held_before_quiet: None,
            slots: Vec::new(),
            wanting,
            due_without_victims: None,
            first_hold: None,
            last_start: None,
            first_block: None,
            probe: Probe::new(false),
            plan: SchedulePlan::default(),
        }
    }

    /// Walks the queue in scheduling order from where `w` stands to its end or a cap, and returns where it
    /// stopped; or pauses (returns `None`) where the scale-out planner should be asked whether the walk may settle
    /// (see [`Pass::wants_probe`]), to be called again with the same `w` once [`Pass::probed`] was told.
    fn walk(&mut self, w: &mut Walker<'_>, queue: &Queue, c: &mut Cluster, wake: &mut WakeAt) -> Option<Cut> {
        if !w.started {
            w.started = true;
            let tiers = self.pool_order.len();
            self.least_gpus = (0..tiers).map(|t| queue.kinds(t).map(|(g, _)| g).min()).collect();
        }
        loop {
            if self.wants_probe(w.left.iter().skip(self.probe.tier).sum()) {
                return None;
            }
            let Some(id) = w.cursor.next() else { break };
            self.scanned += 1;
            let (tier, noted) = (w.cursor.tier(), queue.noted(id));
            // A `burst_early` job is looked at even where it is noted (see `Noted::early`).
            let in_budget = noted.is_some_and(|n| !n.early);
            if !in_budget {
                w.left[tier] = w.left[tier].saturating_sub(1);
            }
            if noted.is_none() {
                w.unnoted[tier] = w.unnoted[tier].saturating_sub(1);
            }
            if !self.buyers_only && self.stuck >= BLOCKED_CAP_NO_SCALE {
                self.buyers_only = buyers_beyond(queue, (self.cfg, self.pool_order), &self.grows, tier, false);
            }
            let stuck = self.stuck >= BLOCKED_CAP_NO_SCALE && !self.buyers_only;
            let scan = self.scanned > self.cfg.policy.scan_limit;
            if scan || self.buying >= BLOCKED_CAP || stuck {
                return Some(Cut { limit_hit: true, scan, stuck: stuck || self.settled, settled: self.settled });
            }
            if self.held_before_quiet.is_none() && self.settles_now(c, tier).0 {
                // Where the walk turns quiet, in a walk that remembers and in one that searches afresh alike.
                self.held_before_quiet = Some(self.reserving_now());
            }
            if self.remember && !self.settled {
                let (quiet, settled) = self.settles_now(c, tier);
                self.quiet |= quiet;
                self.probe.tier = tier;
                if settled || self.probe_settles(tier) {
                    self.settled = true;
                    let beyond = buyers_beyond(queue, (self.cfg, self.pool_order), &self.grows, tier, true);
                    if !queue.timed_from(tier) && !beyond {
                        // Nothing further on can start, preempt or buy, and no job there has a timer of its own.
                        return Some(Cut { limit_hit: false, scan: false, stuck: true, settled: true });
                    }
                }
            }
            let only_noted = noted.is_some() && !self.quiet && w.unnoted[tier..].iter().all(|&n| n == 0);
            if only_noted && let Some(settled) = self.noted_end((c, queue), (tier, &w.cursor)) {
                // Only jobs known to wait inside their budgets are left, and none of them could do more.
                return Some(Cut { stuck: settled, settled, ..Cut::default() });
            }
            if self.quiet && in_budget {
                // A visit would leave it waiting as it is (see `Queue::wait_in_budget`).
                self.quota_holds(c, id, w.cursor.team());
                if w.left[tier..].iter().all(|&n| n == 0) {
                    // Only such jobs are left.
                    return Some(Cut { stuck: self.settled, settled: self.settled, ..Cut::default() });
                }
                continue;
            }
            if self.settled && !queue.is_timed(id) {
                let job = &c.jobs[id.0 as usize];
                if !self.may_buy(job.tier, Access::of(job, self.now)) {
                    self.pass_by(c, id);
                    continue;
                }
            }
            if let Some(n) = noted
                && self.wait_noted(c, (n, queue.kind_model(n.kind)), w.cursor.team(), wake)
            {
                continue;
            }
            self.visit(c, (id, noted.map(|n| n.until)), wake);
        }
        // Jobs passed by once settled would have asked the scale-out planner to wake them when a cooldown of a
        // pool they may use ends (a pool may grow for them then): `stuck` asks for that wake-up instead.
        Some(Cut { stuck: self.settled, settled: self.settled, ..Cut::default() })
    }

    /// Decides for one queued job: pass it by (only jobs that may buy are looked at now, or its team is at its
    /// quota), hold capacity while it checkpoints, place it, preempt for it, or leave it waiting.
    fn visit(&mut self, c: &mut Cluster, (id, known_end): (JobId, Option<Time>), wake: &mut WakeAt) {
        let (cfg, now) = (self.cfg, self.now);
        let job = &c.jobs[id.0 as usize];
        let timed_early = self.buyers_only || c.teams[job.team].over_quota(job.total_gpus());
        if timed_early {
            // Passed by or held by its team's quota, a deadline job still goes on its reserve or is pinned when
            // its slack says so (which may also make it a job that may buy).
            self.timers(c, id, wake);
        }
        let job = &c.jobs[id.0 as usize];
        if self.buyers_only && !self.may_buy(job.tier, Access::of(job, now)) {
            return;
        }
        if c.teams[job.team].over_quota(job.total_gpus()) {
            self.plan.reasons.push((id, PendingReason::TeamQuota));
            return;
        }
        if let Some(at) = job.not_before.filter(|&t| t > now) {
            // Its last attempt is still checkpointing: not placeable yet, but replacement capacity is bought now
            // (it goes to the autoscaler as blocked), and nodes are held back for it so a job behind it does not
            // take the replacement.
            wake.at(at);
            // Its access may open to on-demand while it checkpoints: the capacity bought for it changes then.
            if let Some(t) = on_demand_opens_at(cfg, job, now) {
                wake.at(t);
            }
            self.plan.reasons.push((id, PendingReason::Checkpointing));
            self.block(id, job.tier, Access::of(job, now));
            if self.reservations < cfg.policy.max_reservations {
                self.hold(c, id);
            }
            return;
        }
        if !timed_early {
            self.timers(c, id, wake);
        }
        let job = &c.jobs[id.0 as usize];
        let access = Access::of(job, now);
        let order = &self.pool_order[job.tier];
        // A job known to wait inside its budget (see `Queue::wait_in_budget`) waits until its end was noted.
        let burst_at = match known_end {
            Some(end) if crate::budget_place::owned_too_late(c, cfg, order, job, (end, now), &mut self.fits) => now,
            Some(end) => end,
            None => reach::burst_at(c, cfg, (order, self.fixed_wait[job.tier]), job, now, &mut self.fits),
        };
        // Inside its waiting budget a job starts only where it adds no cloud spending, and any job only on a node
        // held for a waiting gang if it ends before the gang could start there (see `budget_place`): then where
        // it may start depends on when it is expected to end.
        let in_wait = now < burst_at;
        let end = (in_wait || !self.shadows.is_empty())
            .then(|| now.saturating_add(crate::budget_place::expected_run(c, job)));
        // A job whose data may move tries pools in an order of its own: what its shape found is no guide.
        let own_order = crate::data_move::may_move(job);
        let known_full = self.remember
            && !own_order
            && match end {
                None => self.no_room.contains(job, access),
                // A job expected to end later fits on fewer nodes: where an earlier end found no room, it finds
                // none either.
                Some(end) => self.no_room_by_end.get(job, access, u8::from(in_wait)).is_some_and(|f| end >= f),
            };
        if !self.strict_block && !known_full {
            let mut need = Need::of(job, now);
            let most = crate::elastic::most_workers(c, job);
            if let Some(mut placement) = self.find(c, id, &need, end, in_wait) {
                self.widen(c, id, &mut placement);
                if self.waits_for_width(c, id, placement.len(), (access, burst_at), wake) {
                    // Narrow here is not worth it: all its workers elsewhere (on nodes bought for it), or wait.
                    need.w = most;
                    match self.find(c, id, &need, end, in_wait) {
                        Some(full) => self.start(c, id, full),
                        None => self.wait(c, id, access, (burst_at, known_end.is_some()), wake),
                    }
                    return;
                }
                self.start(c, id, placement);
                return;
            }
            let job = &c.jobs[id.0 as usize];
            // Refused inside its budget: a job started on a cloud node later in this pass may make room for it
            // (whatever order it tries pools in).
            self.refused_in_budget |= in_wait;
            self.budget_room |= in_wait && self.late_end;
            match end {
                _ if own_order => {}
                None => self.no_room.insert(job, access, 0, ()),
                Some(end) => {
                    let key = u8::from(in_wait);
                    let failed = self.no_room_by_end.get(job, access, key).map_or(end, |f: Time| f.min(end));
                    self.no_room_by_end.insert(job, access, key, failed);
                }
            }
        }
        if !self.preempt(c, id, access, wake) {
            self.wait(c, id, access, (burst_at, known_end.is_some()), wake);
        }
    }

    /// Asks to be woken when a job's access changes with time alone (back on spot), lets a deadline job use
    /// on-demand while spot cannot be had once its slack is down to its reserve, and pins it to on-demand once its
    /// slack is spent.
    fn timers(&mut self, c: &mut Cluster, id: JobId, wake: &mut WakeAt) {
        let (cfg, now) = (self.cfg, self.now);
        let job = &c.jobs[id.0 as usize];
        if let Some(at) = on_demand_opens_at(cfg, job, now) {
            wake.at(at);
        }
        if !job.interruptible || job.spec.deadline.is_none() {
            return;
        }
        let order = &self.pool_order[job.tier];
        let pin = crate::access::deadline_pin_at(cfg, order, job, now);
        if !job.on_reserve && job.deadline_governs() {
            let reserve = crate::access::deadline_reserve(cfg, order, job, now);
            match pin.zip(reserve).map(|(pin, reserve)| pin.saturating_sub(reserve)) {
                // Slack only shrinks, so a job on its reserve stays there.
                Some(at) if at <= now => {
                    c.jobs[id.0 as usize].on_reserve = true;
                    // Told only where it is not pinned at once (a deadline already too close).
                    if pin.is_some_and(|p| p > now) {
                        self.plan.on_reserve.push(id);
                    }
                }
                Some(at) => wake.at(at),
                None => {}
            }
        }
        match pin {
            Some(at) if at <= now => {
                let j = &mut c.jobs[id.0 as usize];
                j.interruptible = false;
                j.pinned_on_demand = true;
                c.counters.fallbacks += 1;
                self.plan.pinned.push(id);
            }
            Some(at) => wake.at(at),
            None => {}
        }
    }

    /// Adds workers to an elastic job's placement where no other queued job may use its pool (see `elastic`).
    fn widen(&self, c: &Cluster, id: JobId, placement: &mut Vec<(NodeId, u32)>) {
        let job = &c.jobs[id.0 as usize];
        let pool = placement.first().map(|&(n, _)| c.nodes[n.0 as usize].pool);
        if let Some(p) = pool.filter(|&p| job.is_elastic() && self.wanting[p] <= 1) {
            let extra = crate::elastic::extra_workers(c, job, p, placement, true, &self.shadows);
            placement.extend(extra);
        }
    }

    /// Returns a placement for job `id`'s `need` in its tier's pool order (or its own, when starting in some pool
    /// moves its data: [`crate::data_move::order_for`]), under the waiting-budget rule when the job's expected
    /// `end` matters (see `budget_place`).
    fn find(
        &mut self,
        c: &mut Cluster,
        id: JobId,
        need: &Need,
        end: Option<Time>,
        in_wait: bool,
    ) -> Option<Vec<(NodeId, u32)>> {
        let tier_order: &'a [usize] = &self.pool_order[need.tier];
        let moved = crate::data_move::order_for(c, self.cfg, tier_order, &c.jobs[id.0 as usize], self.now);
        // When its order changes with time alone the scale-out planner wakes the engine (it runs on this job too
        // once it is blocked; before, a pool dropping out of its order cannot start it, and only a job that ran
        // before waits for a pool to come back in, and such a job is blocked).
        let order = moved.as_ref().map_or(tier_order, |(o, _)| o.as_slice());
        match end {
            None => find_placement(c, self.cfg, order, need, &mut self.slots),
            Some(end) => {
                let rule = crate::budget_place::Admit { end, now: self.now, in_wait, shadows: &self.shadows };
                crate::budget_place::find(c, self.cfg, order, need, rule, &mut self.slots)
            }
        }
    }

    /// Returns whether an elastic job that could make its first start on `w` workers waits for more instead
    /// ([`crate::elastic::waits_for_width`]): all of them come from the first cloud pool it may grow, or from the
    /// owned nodes expected to drain first (as a waiting gang's hold counts them).
    fn waits_for_width(&mut self, c: &Cluster, id: JobId, w: usize, at: (Access, Time), wake: &mut WakeAt) -> bool {
        let (access, burst_at) = at;
        let job = &c.jobs[id.0 as usize];
        if !job.is_elastic() || job.attempt > 0 || w >= crate::elastic::most_workers(c, job) as usize {
            return false;
        }
        let order = &self.pool_order[job.tier];
        let boot = job_pools(self.cfg, order, access)
            .filter(|&p| self.cloud_room[p])
            .map(|p| secs(self.cfg.pools[p].boot_latency_s))
            .min();
        let cloud_at = boot.map(|b| burst_at.max(self.now).saturating_add(b));
        let mut all = Need::of(job, self.now);
        all.w = crate::elastic::most_workers(c, job);
        let (held, next) = crate::budget_place::shadow_hold(c, self.cfg, (order, &mut self.drains), &all, self.now);
        if let Some(t) = next {
            wake.at(t);
        }
        let drained_at = held.first().map(|h| h.1);
        let full_at = cloud_at.into_iter().chain(drained_at).min();
        crate::elastic::waits_for_width(c, job, w, self.now, full_at)
    }

    /// Binds a placement and notes the start.
    fn start(&mut self, c: &mut Cluster, id: JobId, placement: Vec<(NodeId, u32)>) {
        for &p in &self.pool_order[c.jobs[id.0 as usize].tier] {
            self.wanting[p] = self.wanting[p].saturating_sub(1);
        }
        for &(n, g) in &placement {
            c.bind(id, n, g);
            self.drains.bound(c, n, self.now);
        }
        self.fits.bound(c, id, &placement, self.now);
        self.holds.clear();
        self.closed_noted.clear();
        self.settles_memo = None;
        if placement.iter().any(|&(n, _)| c.nodes[n.0 as usize].market != Market::Fixed) {
            // A job on a cloud node keeps it longer: a job inside its budget that found no room may fit there now.
            self.no_room_by_end.clear();
            self.budget_room |= self.refused_in_budget;
        }
        let job = &c.jobs[id.0 as usize];
        let gb = job.spec.checkpoint_gb.unwrap_or(0.0);
        let moves_in = |n: &crate::model::Node| self.cfg.move_cost(job.data_at(), n.pool, gb).1 > 0;
        let cloud_moves_in = |&(n, _): &(NodeId, u32)| {
            let node = &c.nodes[n.0 as usize];
            node.market != Market::Fixed && moves_in(node)
        };
        self.late_end |= crate::data_move::may_move(job) && placement.iter().any(cloud_moves_in);
        let kept = |n: NodeId| crate::budget_place::kept(self.cfg, c, c.nodes[n.0 as usize].pool);
        self.budget_room |= self.waiting_early && placement.iter().any(|&(n, _)| kept(n));
        self.plan.started.push((id, placement));
        self.last_start = Some(self.scanned);
    }

    /// Preempts lower-tier jobs for a job once its preemption is due and victims exist, and places it on the
    /// GPUs they free; returns whether it did. Asks to be woken when the job becomes due.
    fn preempt(&mut self, c: &mut Cluster, id: JobId, access: Access, wake: &mut WakeAt) -> bool {
        let (cfg, now) = (self.cfg, self.now);
        let job = &c.jobs[id.0 as usize];
        let tier = job.tier;
        let Some(at) = self.preemption_due_at(c, (tier, access), job.queued_since) else { return false };
        if at > now {
            wake.at(at);
            return false;
        }
        let victims = if self.remember && self.no_victims.contains(job, access) {
            None
        } else {
            find_victims(c, cfg, &self.pool_order[tier], &Need::of(job, now), now)
        };
        let Some((nodes, victims)) = victims else {
            self.due_without_victims(tier);
            self.no_victims.insert(&c.jobs[id.0 as usize], access, 0, ());
            return false;
        };
        self.preempting += 1;
        for &v in &victims {
            // Free the victim's GPUs now so this job binds them in the same pass; the victim is requeued when
            // the plan is applied.
            c.release(v, now);
            self.fits.freed(v);
            self.drains.freed();
            self.holds.clear();
            self.plan.preempted.push((v, id));
        }
        // GPUs came free: a shape that found no room (or no victims) may find some now.
        self.no_room.clear();
        self.no_room_by_end.clear();
        self.no_victims.clear();
        let g = c.jobs[id.0 as usize].spec.gpus_per_worker;
        self.start(c, id, nodes.into_iter().map(|n| (n, g)).collect());
        true
    }

    /// Returns when a job of `tier` with `access` that entered the queue at `queued_since` may start preempting
    /// (see `preemption_offset`, worked out once per tier and access), or `None` where it may not in this pass
    /// (preemption is off, the pass preempted for its most jobs, or its tier has nothing to preempt).
    fn preemption_due_at(&mut self, c: &Cluster, (tier, access): (usize, Access), queued_since: Time) -> Option<Time> {
        let cfg = self.cfg;
        if !cfg.policy.preemption || self.preempting >= MAX_PREEMPTING_JOBS {
            return None;
        }
        let order = &self.pool_order[tier];
        let slot = &mut self.due_offsets[slot(tier, access)];
        let offset = (*slot.get_or_insert_with(|| preemption_offset(cfg, c, order, tier, access)))?;
        Some(queued_since + offset)
    }

    /// Notes that a job of `tier` was due to preempt but found no victims (see `due_without_victims`).
    fn due_without_victims(&mut self, tier: usize) {
        let prio = self.cfg.tiers[tier].priority;
        self.due_without_victims = Some(self.due_without_victims.map_or(prio, |p| p.min(prio)));
    }

    /// Leaves a job that found no room waiting: for fixed capacity while its burst wait lasts (until `burst_at`;
    /// `known`: the job is known to wait so, and was told), else blocked (for the autoscaler). Without backfill
    /// it stops the jobs behind it; with backfill a multi-GPU job holds nodes.
    fn wait(&mut self, c: &mut Cluster, id: JobId, access: Access, (burst_at, known): (Time, bool), wake: &mut WakeAt) {
        let (cfg, now) = (self.cfg, self.now);
        let job = &c.jobs[id.0 as usize];
        let (g, w, tier) = (job.gang.gpus_per_worker, job.gang.workers, job.tier);
        if burst_at == now {
            self.note_burst_early(c, id);
        }
        if now < burst_at {
            self.waiting_early |= cfg.tiers[tier].burst_early;
            wake.at(burst_at);
            if !known {
                self.plan.reasons.push((id, PendingReason::WaitingForFixedCapacity));
                self.plan.budgets.push((burst_at, id));
            }
        } else {
            self.block(id, tier, access);
        }
        if !cfg.policy.backfill {
            self.strict_block = true;
            self.first_hold.get_or_insert(self.scanned);
        } else if (w > 1 || g > 1) && self.reservations < cfg.policy.max_reservations {
            if now >= burst_at {
                self.hold(c, id);
            } else {
                // Inside its budget it holds nodes softly: jobs that end before it could start there still may.
                let need = Need::of(&c.jobs[id.0 as usize], now);
                let (mut held, next) = self.shadow_hold(c, &need);
                if let Some(t) = next {
                    // A running job reaches its expected end then: the hold may move (see `shadow_hold`).
                    wake.at(t);
                }
                // Nodes that drain only after its budget ends would be held for nothing: it bursts before then.
                if held.first().is_some_and(|&(_, start)| start > burst_at) {
                    held.clear();
                }
                if !held.is_empty() {
                    self.reservations += 1;
                    self.first_hold.get_or_insert(self.scanned);
                }
                self.shadows.extend(held);
            }
        }
    }

    /// Returns [`crate::budget_place::shadow_hold`] for `need`, worked out once per shape until the pass binds or
    /// frees GPUs (identical gangs waiting inside their budgets are told the same nodes).
    fn shadow_hold(&mut self, c: &Cluster, need: &Need) -> (Vec<(NodeId, Time)>, Option<Time>) {
        let key = (need.tier, need.access, need.g, need.w, need.model.clone());
        if let Some((_, hold)) = self.holds.iter().find(|(k, _)| *k == key) {
            return hold.clone();
        }
        let order = &self.pool_order[need.tier];
        let hold = crate::budget_place::shadow_hold(c, self.cfg, (order, &mut self.drains), need, self.now);
        self.holds.push((key, hold.clone()));
        hold
    }

    /// Notes a blocked job, under the cap for jobs that may buy or the one for jobs that may not.
    fn block(&mut self, id: JobId, tier: usize, access: Access) {
        self.plan.blocked.push(id);
        self.first_block.get_or_insert(self.scanned);
        if self.may_buy(tier, access) {
            self.buying += 1;
        } else {
            self.stuck += 1;
        }
    }

    /// Holds nodes back for a blocked job (one of the pass's reservations).
    fn hold(&mut self, c: &mut Cluster, id: JobId) {
        self.reservations += 1;
        let need = Need::of(&c.jobs[id.0 as usize], self.now);
        let held = reserve(c, self.cfg, &self.pool_order[need.tier], (&need, id), &mut self.reserved);
        self.reserving.push(id);
        self.settles_memo = None;
        if held > 0 {
            self.first_hold.get_or_insert(self.scanned);
        }
    }

    /// Returns whether a job of `tier` with `access` may use a pool that can launch a node now.
    fn may_buy(&mut self, tier: usize, access: Access) -> bool {
        let (cfg, order, grows) = (self.cfg, &self.pool_order[tier], &self.grows);
        *self.buys[slot(tier, access)].get_or_insert_with(|| job_pools(cfg, order, access).any(|p| grows[p]))
    }
}

/// Returns when on-demand opens again to a job just moved back to spot (its access changes with time alone), if
/// that is later than `now` and its tier may use on-demand.
fn on_demand_opens_at(cfg: &Config, job: &crate::model::Job, now: Time) -> Option<Time> {
    let od_tier = cfg.tiers[job.tier].markets.contains(&Market::OnDemand);
    job.spot_only_until.filter(|&t| t > now && job.interruptible && od_tier)
}

/// Returns the index of (tier, access) in a pass's per-tier-and-access tables.
fn slot(tier: usize, access: Access) -> usize {
    tier * 4 + usize::from(access.spot) * 2 + usize::from(access.on_demand)
}
