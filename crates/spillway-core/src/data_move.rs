//! Moving a job's data between regions. A job that declares `checkpoint_gb` carries its data (its latest
//! checkpoint) from the region it last ran in, or its `data_region`, to the region of the pool it starts in: the
//! move is booked as egress to its team and tier, and the attempt makes no progress for the transfer time (a
//! transfer cut short never arrived, and pays only for what it sent; the source keeps a current copy until the
//! job checkpoints again). Where a
//! job may run, cloud pools are tried by their price per GPU-hour plus the move into them spread over the job's
//! remaining work plus, for spot, the moves its interruptions are expected to force, so a job hops to a cheaper
//! region only when the saving over its remaining work pays the move; a job stopped where its data is first waits
//! there as long as the move is worth.

use crate::cluster::Cluster;
use crate::config::{Config, Market};
use crate::event::DecisionKind;
use crate::model::{Job, JobId};
use crate::state::Engine;
use crate::time::{HOUR_MS, Time, fmt_ms};

impl Engine {
    /// Moves job `id`'s data into `pool`'s region as an attempt starts there: books the egress, sets the
    /// attempt's transfer time and records the move. Nothing moves for a job without a size or a pool without a
    /// region; the first start of a job without a data region only notes where its data now is.
    pub(crate) fn move_data(&mut self, id: JobId, pool: usize) {
        let j = &mut self.c.jobs[id.0 as usize];
        if let Some(d) = j.data.as_deref_mut() {
            d.transfer_ms = 0;
            d.transfer_usd = 0.0;
            d.hopping = false;
        }
        let Some(gb) = j.spec.checkpoint_gb.filter(|&g| g > 0.0) else { return };
        let Some(to) = self.cfg.pools[pool].region.clone() else { return };
        let d = j.data_mut();
        if d.at.as_deref() == Some(to.as_str()) {
            return;
        }
        if d.copy.as_deref() == Some(to.as_str()) {
            // The copy there is still current: starting there moves nothing, and the other copy stays current.
            std::mem::swap(&mut d.at, &mut d.copy);
            return;
        }
        let (usd, ms) = self.cfg.move_cost(d.at.as_deref(), pool, gb);
        let from = d.at.replace(to.clone());
        // The source keeps its copy: until the job writes a checkpoint here, a start there is free again.
        d.copy = from.clone();
        if usd <= 0.0 && ms <= 0 {
            return;
        }
        d.transfer_ms = ms;
        d.transfer_usd = usd;
        d.egress_usd += usd;
        let (team, tier) = (j.team, j.tier);
        self.c.ledger.book_egress(team, tier, usd);
        self.c.counters.data_moves += 1;
        let from = from.unwrap_or_default();
        self.record(
            DecisionKind::JobStarted,
            || format!("job:{}", id.0),
            "data_moved",
            || format!("{gb} GB moved from {from} to {to}: ${usd:.2} of egress, {} of transfer", fmt_ms(ms)),
        );
    }
}

/// Updates where job `job`'s data is as an attempt ends at `now`: a transfer cut short never arrived (the data is
/// where it came from), and a checkpoint written during the attempt (`saved`) leaves only its region current.
/// Returns the egress booked for the bytes a transfer cut short never sent (a cloud bills what was sent, taken
/// as the share of the transfer time that passed), for the caller to take back.
pub(crate) fn attempt_ended(job: &mut Job, now: Time, saved: bool) -> f64 {
    let arrived = job.work_start().is_none_or(|w| w <= now);
    let start = job.attempt_start;
    let Some(d) = job.data.as_deref_mut() else { return 0.0 };
    let mut unsent = 0.0;
    if !arrived {
        if let Some(source) = d.copy.take() {
            d.at = Some(source);
        }
        if let Some(start) = start.filter(|_| d.transfer_ms > 0) {
            let sent = ((now - start) as f64 / d.transfer_ms as f64).clamp(0.0, 1.0);
            unsent = d.transfer_usd * (1.0 - sent);
        }
    } else if saved {
        d.copy = None;
    }
    d.transfer_usd = 0.0;
    d.egress_usd -= unsent;
    unsent
}

/// Returns whether job `job` may move data between regions: it has a size and a region, so [`order_for`] may
/// give it an order of its own.
pub(crate) fn may_move(job: &Job) -> bool {
    data_of(job).is_some()
}

/// Returns the size (GB) and region of job `job`'s data, when it declares a size and its data has a region.
fn data_of(job: &Job) -> Option<(f64, &str)> {
    Some((job.spec.checkpoint_gb.filter(|&g| g > 0.0)?, job.data_at()?))
}

/// Returns `order` as job `job` should try it at `now` when starting in some of its pools moves its data: fixed
/// pools first (as in every order), then cloud pools by their price per GPU-hour with moving there
/// ([`MovePrice::per_gpu_hour`]). A spot pool that costs more so than the tier's cheapest on-demand pool is left
/// out: the job runs on-demand (or, while its deadline holds it to spot, waits for a spot pool that pays). A job
/// stopped in a region with spot pools leaves spot pools of other regions out until it has waited there as long
/// as moving is worth ([`MovePrice::move_wait_ms`]). The second value is the next instant the order changes with
/// time alone (wake then): the first such pool comes back in, or a spot pool the job's deadline lets it move its
/// data to now drops out as its slack shrinks ([`crate::access::deadline_allows_until`]).
/// `None` when no pool of the order moves its data: the tier's order holds.
pub(crate) fn order_for(
    c: &Cluster,
    cfg: &Config,
    order: &[usize],
    job: &Job,
    now: Time,
) -> Option<(Vec<usize>, Option<Time>)> {
    let price = MovePrice::of(c, cfg, order, job, now)?;
    if order.iter().all(|&p| price.moves(p) == (0.0, 0)) {
        return None;
    }
    let mut keyed: Vec<(bool, f64, usize)> =
        order.iter().map(|&p| (cfg.pools[p].market != Market::Fixed, price.per_gpu_hour(p), p)).collect();
    let od =
        keyed.iter().filter(|k| cfg.pools[k.2].market == Market::OnDemand).map(|k| k.1).fold(f64::INFINITY, f64::min);
    // A job stopped where its data is (an interruption, a preemption) may wait for spot there again before it
    // moves; a first start chooses on price alone.
    let may_wait = job.state == crate::model::JobState::Queued
        && job.attempt > 0
        && !job.data.as_deref().is_some_and(|d| d.hopping)
        && order.iter().any(|&q| cfg.pools[q].market == Market::Spot && price.moves(q) == (0.0, 0));
    let mut changes_at: Option<Time> = None;
    keyed.retain(|k| {
        if cfg.pools[k.2].market != Market::Spot {
            return true;
        }
        let last = crate::access::deadline_allows_until(cfg, order, job, k.2, now);
        if last.is_some_and(|last| now > last) {
            // Moving its data there would leave it too little slack for its deadline.
            return false;
        }
        let wait_end = job.queued_since.saturating_add(price.move_wait_ms(k.2));
        if may_wait && now < wait_end {
            changes_at = Some(changes_at.map_or(wait_end, |b| b.min(wait_end)));
            return false;
        }
        let kept = k.1 < od;
        let waits = job.state == crate::model::JobState::Queued;
        if let Some(out) = last.map(|last| last.saturating_add(1)).filter(|_| kept && waits) {
            // Its slack shrinks while it waits (not while it runs): the pool drops out then.
            changes_at = Some(changes_at.map_or(out, |b| b.min(out)));
        }
        kept
    });
    // Stable: equal prices keep the tier's order.
    keyed.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    Some((keyed.into_iter().map(|(_, _, p)| p).collect(), changes_at))
}

/// Returns whether moving running job `job` from pool `here` to some spot pool of `order` pays at `now`: that
/// pool's price with moving there ([`MovePrice::per_gpu_hour`]) is below `here`'s. Always true for a job that
/// moves no data (the move then costs a restart only, which the caller weighs).
pub(crate) fn spot_move_pays(c: &Cluster, cfg: &Config, order: &[usize], job: &Job, here: usize, now: Time) -> bool {
    let Some(price) = MovePrice::of(c, cfg, order, job, now) else { return true };
    let stay = crate::access::gpu_price(cfg, here);
    order.iter().any(|&p| cfg.pools[p].market == Market::Spot && price.per_gpu_hour(p) < stay)
}

/// Returns running job `job`'s price per GPU-hour of cloud pool `pool` at `now` were it to stop and start there:
/// the pool's price, plus moving its data there spread over its remaining work ([`MovePrice::moved_in`]) when its data
/// may move. The copy its last move left is no help: the checkpoint it writes as it stops is newer. The moves
/// interruptions may force are left out: a job that moves by choice moves for a lower price, not on a guess
/// about interruptions drawn from a few of them (a large checkpoint mostly waits an outage out anyway).
pub(crate) fn price_for(c: &Cluster, cfg: &Config, order: &[usize], job: &Job, pool: usize, now: Time) -> f64 {
    let Some(mut price) = MovePrice::of(c, cfg, order, job, now) else { return crate::access::gpu_price(cfg, pool) };
    price.copy = None;
    price.moved_in(pool)
}

/// What a move costs one job: its data's size and region, its GPUs and workers, the hours its remaining work
/// takes, and the pools it may use (where an interruption would send it next).
struct MovePrice<'a> {
    c: &'a Cluster,
    cfg: &'a Config,
    order: &'a [usize],
    gb: f64,
    from: &'a str,
    /// A region with a current copy (a start there is free).
    copy: Option<&'a str>,
    gpus: f64,
    workers: f64,
    hours: f64,
}

impl<'a> MovePrice<'a> {
    /// `None` for a job that declares no data size or has no data region yet.
    fn of(c: &'a Cluster, cfg: &'a Config, order: &'a [usize], job: &'a Job, now: Time) -> Option<MovePrice<'a>> {
        let (gb, from) = data_of(job)?;
        let hours = job.remaining_work_ms(now).filter(|&r| r > 0).unwrap_or(HOUR_MS) as f64 / HOUR_MS as f64;
        let (gpus, workers) = (f64::from(job.total_gpus().max(1)), f64::from(job.gang.workers.max(1)));
        let copy = job.data_copy();
        Some(MovePrice { c, cfg, order, gb, from, copy, gpus, workers, hours })
    }

    /// (USD, ms) of moving the data into pool `p`: nothing where a current copy is.
    fn moves(&self, p: usize) -> (f64, i64) {
        if self.copy.is_some() && self.cfg.pools[p].region.as_deref() == self.copy {
            return (0.0, 0);
        }
        self.cfg.move_cost(Some(self.from), p, self.gb)
    }

    /// Returns pool `p`'s price per GPU-hour for this job: its price, plus the move into it (egress, and the
    /// nodes paid while the data moves) spread over the remaining work, plus for spot the moves its interruptions
    /// are expected to force out of it ([`Self::interruption_usd_per_hour`]).
    fn per_gpu_hour(&self, p: usize) -> f64 {
        self.moved_in(p) + self.interruption_usd_per_hour(p) / self.gpus
    }

    /// Returns pool `p`'s price per GPU-hour for this job with the move into it (egress, and the nodes paid
    /// while the data moves) spread over the remaining work.
    fn moved_in(&self, p: usize) -> f64 {
        let (usd, ms) = self.moves(p);
        let transfer_h = ms as f64 / HOUR_MS as f64;
        crate::access::gpu_price(self.cfg, p) * (1.0 + transfer_h / self.hours) + usd / (self.gpus * self.hours)
    }

    /// Returns how long a queued job waits for spot where its data is before it moves to spot pool `p` in
    /// another region (0 when nothing moves): the ski-rental rule, waiting while the wait is worth less than the
    /// move. A move costs its egress and the nodes paid during the transfer; an hour of waiting is worth what an
    /// hour of its slack may cost later, the on-demand premium over spot for its GPUs (the spot price itself for
    /// a tier without on-demand).
    fn move_wait_ms(&self, p: usize) -> i64 {
        let (usd, ms) = self.moves(p);
        if usd <= 0.0 && ms <= 0 {
            return 0;
        }
        let cost = usd + crate::access::gpu_price(self.cfg, p) * self.gpus * ms as f64 / HOUR_MS as f64;
        let cheapest = |m: Market| {
            let prices = self.order.iter().filter(|&&q| self.cfg.pools[q].market == m);
            prices.map(|&q| crate::access::gpu_price(self.cfg, q)).fold(f64::INFINITY, f64::min)
        };
        let (od, spot) = (cheapest(Market::OnDemand), cheapest(Market::Spot));
        let per_gpu_h = if od.is_finite() { od - spot } else { spot };
        if !(per_gpu_h > 0.0 && per_gpu_h.is_finite()) {
            return 0;
        }
        // At most a week: a free-to-wait job is still not held for ever by a tiny price.
        (cost / (per_gpu_h * self.gpus) * HOUR_MS as f64).min(7.0 * 24.0 * HOUR_MS as f64) as i64
    }

    /// Returns, for a spot pool, the expected cost per hour of the moves its interruptions force: the pool's
    /// interruption rate per node-hour (observed over the run, with a prior of one per 50 node-hours) times the
    /// job's workers times the cheapest move from its region to another region's pool of the order (egress and
    /// nodes paid during the transfer). 0 for other markets, or when every pool is in its region.
    fn interruption_usd_per_hour(&self, p: usize) -> f64 {
        let Some(here) = self.cfg.pools[p].region.as_deref().filter(|_| self.cfg.pools[p].market == Market::Spot)
        else {
            return 0.0;
        };
        let out = self
            .order
            .iter()
            .filter(|&&q| self.cfg.pools[q].market != Market::Fixed)
            .filter(|&&q| self.cfg.pools[q].region.as_deref().is_some_and(|r| r != here))
            .map(|&q| {
                let (usd, ms) = self.cfg.move_cost(Some(here), q, self.gb);
                usd + crate::access::gpu_price(self.cfg, q) * self.gpus * ms as f64 / HOUR_MS as f64
            })
            .fold(f64::INFINITY, f64::min);
        if !out.is_finite() {
            return 0.0;
        }
        let (k, ms) = self
            .c
            .offering_history
            .range((p, 0)..(p + 1, 0))
            .fold((0u64, 0i64), |(k, ms), (_, &(a, b))| (k + a, ms.saturating_add(b)));
        let rate = (k as f64 + 0.2) / (ms as f64 / HOUR_MS as f64 + 10.0);
        rate * self.workers * out
    }
}
