//! Elastic jobs (`min_workers`..`workers`): how wide one starts, when it grows, and what it may take.
//!
//! A change of width restarts the job from its checkpoint on the new set of workers, as torchrun re-forms its group
//! when a member comes or goes, so each change is a new attempt (`StopReason::Resized`, then a start). The rules:
//!
//! - **Start**: a job starts at full width when it fits, and otherwise on as many workers as fit (at least its
//!   fewest) only when that ends sooner than waiting for all of them ([`waits_for_width`]: its expected run at
//!   linear speedup, against the rest of its waiting budget plus a cloud node's boot, or the time the owned nodes
//!   expected to drain first would hold them all); when neither can give them, it starts narrow at once. A job
//!   that already ran (shrunk by a reclaim, a lost node or a preemption) restarts narrow at once.
//! - **What is bought**: scale-out buys for an elastic job's most workers, as for its rigid twin; it counts as
//!   served once its fewest fit.
//! - **What extra workers take**: free GPUs in the job's own pool (one pool per job, as for any gang), at the
//!   start or by growing, only while no other queued job may use that pool: extra workers borrow capacity
//!   nobody waits for.
//! - **Growth** ([`Engine::grow_elastic`]): no sooner than `elastic_resize_interval_s` after the attempt started,
//!   and only at a checkpoint (the one it reported, or the estimate on its interval), so it loses no work. A job
//!   without a checkpoint interval never grows once started (it would redo everything).
//! - **Shrink**: only when it must. A node it uses is reclaimed, lost, or wanted by a preempting job: the job
//!   stops and goes back to the queue in its place, and restarts on as few as its fewest workers wherever they
//!   fit first (usually at once, on the nodes it still had). Preemption stops an elastic job running above its
//!   fewest before any other job (`preempt`).

use crate::cluster::Cluster;
use crate::config::model_fits;
use crate::event::{Action, DecisionKind, StopReason, job_subject};
use crate::model::{Job, JobId, JobState, NodeId};
use crate::queue::Queue;
use crate::state::{Engine, WakeAt};
use crate::time::{Time, fmt_ms, secs};

/// Work a growth may lose at most: growth waits for a checkpoint, and reported checkpoints come a little late.
const GROW_TOLERANCE_MS: Time = 1_000;

/// Returns the GPUs `job`'s team may still start under its GPU quota (`None`: it has none).
fn quota_room(c: &Cluster, job: &Job) -> Option<u32> {
    let team = c.teams.get(job.team)?;
    team.quota_gpus.map(|q| q.saturating_sub(team.used_gpus))
}

/// Returns the most workers queued elastic `job` may start on: its most, as far as its team's GPU quota allows
/// (never fewer than its fewest: whether those fit the quota is the pass's check).
pub(crate) fn most_workers(c: &Cluster, job: &Job) -> u32 {
    let g = job.gang.gpus_per_worker.max(1);
    let allowed = quota_room(c, job).map_or(job.gang.max_workers, |room| job.gang.max_workers.min(room / g));
    allowed.max(job.gang.workers)
}

/// Returns workers to add to an elastic `job` in `pool`, on its free GPUs, best fit first, up to its most
/// workers and its team's GPU quota. `placed`: workers it has there (bound or not yet: `unbound` says, so their
/// GPUs are counted taken); `skip`: nodes it may not use.
pub(crate) fn extra_workers(
    c: &Cluster,
    job: &Job,
    pool: usize,
    placed: &[(NodeId, u32)],
    unbound: bool,
    skip: &[(NodeId, Time)],
) -> Vec<(NodeId, u32)> {
    let g = job.gang.gpus_per_worker.max(1);
    let mut want = (job.gang.max_workers as usize).saturating_sub(placed.len());
    // Never past its team's GPU quota: the team's GPUs in use, and the placement's own while it is not bound yet.
    if let Some(room) = quota_room(c, job) {
        let unbound_gpus: u32 = if unbound { placed.iter().map(|&(_, x)| x).sum() } else { 0 };
        want = want.min((room.saturating_sub(unbound_gpus) / g) as usize);
    }
    let model = job.spec.gpu_model.as_deref();
    let mut out = Vec::new();
    let Some(free) = c.free.get(pool) else { return out };
    for &(f, n) in free.range((g, NodeId(0))..) {
        if out.len() >= want {
            break;
        }
        let node = &c.nodes[n.0 as usize];
        if !model_fits(model, &node.gpu_model) || skip.iter().any(|&(s, _)| s == n) {
            continue;
        }
        let pending: u32 = if unbound { placed.iter().filter(|&&(at, _)| at == n).map(|&(_, x)| x).sum() } else { 0 };
        let mut left = f.saturating_sub(pending);
        while left >= g && out.len() < want {
            out.push((n, g));
            left -= g;
        }
    }
    out
}

/// Returns whether elastic `job`, able to make its first start now on `w` of its most workers (as far as its
/// team's quota allows: [`most_workers`]), should rather wait for all of them, which it could have at `full_at`: at
/// linear speedup its expected run `D` takes `D (most / w - 1)` longer narrow. `full_at` is `None` when nothing says
/// all its workers will ever come (no cloud pool it may use can grow, no owned nodes that could hold it): then it
/// starts narrow. (A job that already ran restarts narrow at once: shrinking is what keeps it going.)
pub(crate) fn waits_for_width(c: &Cluster, job: &Job, w: usize, now: Time, full_at: Option<Time>) -> bool {
    let (Some(full_at), Ok(w)) = (full_at, i64::try_from(w)) else { return false };
    if w == 0 {
        return false;
    }
    let run = crate::budget_place::expected_run(c, job);
    let slower = run.saturating_mul(i64::from(most_workers(c, job)) - w) / w;
    slower >= full_at - now
}

/// Returns, per pool (of `pools`), how many queued jobs may use it (their tier's pools include it).
pub(crate) fn queued_per_pool(queue: &Queue, pool_order: &[Vec<usize>], pools: usize) -> Vec<usize> {
    let mut wanted = vec![0usize; pools];
    for (t, order) in pool_order.iter().enumerate() {
        let n = queue.tier_len(t);
        if n > 0 {
            order.iter().for_each(|&p| wanted[p] += n);
        }
    }
    wanted
}

/// What stands between a running elastic job and more workers ([`Engine::growth`]).
pub(crate) enum Growth {
    /// It runs on its most workers.
    AtMost,
    /// This many queued jobs may use its pool: they come first.
    Wanted(usize),
    /// Its pool has no free GPUs it fits on.
    NoRoom,
    /// Its team's GPU quota leaves no room for another worker.
    AtQuota,
    /// It has no checkpoint interval: a restart on more workers would redo all its work.
    NoCheckpoint,
    /// It grows onto `extra` in `pool` at `at` (now, or its first checkpoint after the resize interval).
    At { at: Time, pool: usize, extra: Vec<(NodeId, u32)> },
}

impl Engine {
    /// Grows running elastic jobs below their most workers into free capacity of their pool that no queued job
    /// may use, once their resize interval has passed and they are at a checkpoint; asks to be woken when one
    /// that could grow gets there.
    pub(crate) fn grow_elastic(&mut self, wake: &mut WakeAt) {
        let jobs = &self.c.jobs;
        self.elastic.retain(|id| jobs.get(id.0 as usize).is_some_and(|j| j.state == JobState::Running));
        if self.elastic.is_empty() {
            return;
        }
        let wanted = queued_per_pool(&self.queue, &self.pool_order, self.cfg.pools.len());
        let ids: Vec<JobId> = self.elastic.iter().copied().collect();
        for id in ids {
            match self.growth(&self.c.jobs[id.0 as usize], &wanted) {
                Growth::At { at, pool, extra } if at <= self.now => self.resize(id, extra, pool),
                Growth::At { at, .. } => wake.at(at),
                _ => {}
            }
        }
    }

    /// Returns whether, where and when running elastic job `j` grows, or what stops it; `wanted` is
    /// [`queued_per_pool`].
    pub(crate) fn growth(&self, j: &Job, wanted: &[usize]) -> Growth {
        let Some(pool) = j.placement.first().map(|&(n, _)| self.c.nodes[n.0 as usize].pool) else {
            return Growth::AtMost;
        };
        if j.placement.len() >= j.gang.max_workers as usize {
            return Growth::AtMost;
        }
        if wanted.get(pool).is_some_and(|&n| n > 0) {
            return Growth::Wanted(wanted[pool]);
        }
        if quota_room(&self.c, j).is_some_and(|room| room < j.gang.gpus_per_worker.max(1)) {
            return Growth::AtQuota;
        }
        let extra = extra_workers(&self.c, j, pool, &j.placement, false, &[]);
        if extra.is_empty() {
            return Growth::NoRoom;
        }
        match self.grow_at(j) {
            Some(at) => Growth::At { at, pool, extra },
            None => Growth::NoCheckpoint,
        }
    }

    /// Returns why running elastic job `j` has its width, as (code, sentence, until when).
    pub(crate) fn why_width(&self, j: &Job) -> (&'static str, String, Option<Time>) {
        let wanted = queued_per_pool(&self.queue, &self.pool_order, self.cfg.pools.len());
        let (w, least, most) = (j.placement.len(), j.gang.workers, j.gang.max_workers);
        let pool =
            j.placement.first().map_or("?", |&(n, _)| self.cfg.pools[self.c.nodes[n.0 as usize].pool].name.as_str());
        let head = format!("runs on {w} of its {least} to {most} workers");
        match self.growth(j, &wanted) {
            Growth::AtMost => ("elastic_at_most", format!("{head}: its most"), None),
            Growth::Wanted(n) => {
                let text = format!("{head}: {n} queued job(s) may use pool {pool}, and they come first");
                ("elastic_not_wider", text, None)
            }
            Growth::NoRoom => {
                let text = format!("{head}: pool {pool} has no free GPUs it fits on");
                ("elastic_not_wider", text, None)
            }
            Growth::AtQuota => {
                let text = format!("{head}: its team's GPU quota leaves no room for another worker");
                ("elastic_not_wider", text, None)
            }
            Growth::NoCheckpoint => {
                let text = format!("{head}: it has no checkpoint interval, so a wider restart would redo its work");
                ("elastic_not_wider", text, None)
            }
            Growth::At { at, extra, .. } => {
                let text = format!(
                    "{head}: grows to {} at its first checkpoint after the resize interval ({}) on free GPUs of pool \
                     {pool}",
                    w + extra.len(),
                    fmt_ms(secs(self.cfg.policy.elastic_resize_interval_s))
                );
                ("elastic_grows", text, Some(at))
            }
        }
    }

    /// Returns when a running elastic job may grow: its resize interval after the attempt started, at a
    /// checkpoint; `None` without a checkpoint interval.
    fn grow_at(&self, j: &Job) -> Option<Time> {
        let (start, iv) = (j.work_start()?, j.checkpoint_interval_ms.filter(|&iv| iv > 0)?);
        let earliest = start.saturating_add(secs(self.cfg.policy.elastic_resize_interval_s));
        // The checkpoints expected: on the job's interval from its last reported one, else from its start.
        let base = j.last_checkpoint.unwrap_or(start);
        let now = self.now;
        if now >= earliest && j.unsaved_work_ms(now) <= GROW_TOLERANCE_MS {
            return Some(now);
        }
        let from = earliest.max(now);
        let gap = (from - base).max(0);
        let steps = (gap / iv + i64::from(gap % iv != 0)).max(1);
        let at = base.saturating_add(steps.saturating_mul(iv));
        // A job that reports its checkpoints is at one only when it says so: an estimate due now is not one.
        Some(if at <= now { at.saturating_add(iv) } else { at })
    }

    /// Restarts running job `id` from its checkpoint on its workers plus `extra` (in `pool`): the attempt stops
    /// (`Resized`) and the next starts at once on the wider placement.
    fn resize(&mut self, id: JobId, extra: Vec<(NodeId, u32)>, pool: usize) {
        let now = self.now;
        let j = &self.c.jobs[id.0 as usize];
        let (attempt, from, lost) = (j.attempt, j.placement.len() as u32, j.unsaved_work_ms(now));
        let progress = j.attempt_progress_ms(now);
        let gpus = j.held_gpus();
        let mut placement = j.placement.clone();
        placement.extend(extra);
        let to = placement.len() as u32;
        self.c.counters.lost_gpu_ms += lost as i128 * gpus as i128;
        self.c.release(id, now);
        let j = &mut self.c.jobs[id.0 as usize];
        j.saved_work_ms += (progress - lost).max(0);
        let unsent = crate::data_move::attempt_ended(j, now, progress - lost > 0);
        let (team, tier) = (j.team, j.tier);
        self.c.ledger.book_egress(team, tier, -unsent);
        for &(n, g) in &placement {
            self.c.bind(id, n, g);
        }
        let reason = StopReason::Resized { from, to };
        self.actions.push_back(Action::StopJob { job: id, attempt, reason, grace_ms: 0 });
        let pool_name = self.cfg.pools[pool].name.clone();
        self.record(
            DecisionKind::JobResized,
            || job_subject(id),
            "grown",
            || {
                format!(
                    "from {from} to {to} workers on free GPUs of pool {pool_name} that no queued job may use; \
                     attempt {attempt} restarts from its checkpoint ({} of work lost)",
                    fmt_ms(lost)
                )
            },
        );
        self.start_job(id, placement);
    }
}
