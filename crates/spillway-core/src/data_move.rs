//! Moving a job's data between regions. A job that declares `checkpoint_gb` carries its data (its latest
//! checkpoint) from the region it last ran in, or its `data_region`, to the region of the pool it starts in: the
//! move is booked as egress to its team and tier, and the attempt makes no progress for the transfer time. Where
//! a job may run, cloud pools are tried by their price per GPU-hour plus the move into them spread over the job's
//! remaining work, so a job hops to a cheaper region only when the saving over its remaining work pays the move.

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
        j.transfer_ms = 0;
        let Some(gb) = j.spec.checkpoint_gb.filter(|&g| g > 0.0) else { return };
        let Some(to) = self.cfg.pools[pool].region.clone() else { return };
        let (usd, ms) = self.cfg.move_cost(j.data_at.as_deref(), pool, gb);
        let from = j.data_at.replace(to.clone());
        if usd <= 0.0 && ms <= 0 {
            return;
        }
        j.transfer_ms = ms;
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

/// Returns `order` as job `job` should try it at `now` when starting in some of its pools moves its data: fixed
/// pools first (as in every order), then cloud pools by price per GPU-hour plus the move into them (egress, and
/// the node paid while the data moves) spread over its remaining work (an hour when it declared no duration).
/// `None` when no pool of the order moves its data: the tier's order holds.
pub(crate) fn order_for(cfg: &Config, order: &[usize], job: &Job, now: Time) -> Option<Vec<usize>> {
    let price = MovePrice::of(cfg, job, now)?;
    if order.iter().all(|&p| price.moves(p) == (0.0, 0)) {
        return None;
    }
    let mut keyed: Vec<(bool, f64, usize)> =
        order.iter().map(|&p| (cfg.pools[p].market != Market::Fixed, price.per_gpu_hour(p), p)).collect();
    // Stable: equal prices keep the tier's order.
    keyed.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    Some(keyed.into_iter().map(|(_, _, p)| p).collect())
}

/// Returns whether moving running job `job` from pool `here` to some spot pool of `order` pays at `now`: that
/// pool's price with the move spread over the remaining work is below `here`'s. Always true for a job that
/// moves no data (the move then costs a restart only, which the caller weighs).
pub(crate) fn spot_move_pays(cfg: &Config, order: &[usize], job: &Job, here: usize, now: Time) -> bool {
    let Some(price) = MovePrice::of(cfg, job, now) else { return true };
    let stay = crate::access::gpu_price(cfg, here);
    order.iter().any(|&p| cfg.pools[p].market == Market::Spot && price.per_gpu_hour(p) < stay)
}

/// What a move costs one job: its data's size and region, its GPUs and the hours its remaining work takes.
struct MovePrice<'a> {
    cfg: &'a Config,
    gb: f64,
    from: &'a str,
    gpus: f64,
    hours: f64,
}

impl<'a> MovePrice<'a> {
    /// `None` for a job that declares no data size or has no data region yet.
    fn of(cfg: &'a Config, job: &'a Job, now: Time) -> Option<MovePrice<'a>> {
        let gb = job.spec.checkpoint_gb.filter(|&g| g > 0.0)?;
        let from = job.data_at.as_deref()?;
        let hours = job.remaining_work_ms(now).filter(|&r| r > 0).unwrap_or(HOUR_MS) as f64 / HOUR_MS as f64;
        Some(MovePrice { cfg, gb, from, gpus: f64::from(job.total_gpus().max(1)), hours })
    }

    /// (USD, ms) of moving the data into pool `p`.
    fn moves(&self, p: usize) -> (f64, i64) {
        self.cfg.move_cost(Some(self.from), p, self.gb)
    }

    /// Pool `p`'s price per GPU-hour with the move into it (egress, and the node paid while the data moves)
    /// spread over the remaining work.
    fn per_gpu_hour(&self, p: usize) -> f64 {
        let (usd, ms) = self.moves(p);
        let transfer_h = ms as f64 / HOUR_MS as f64;
        crate::access::gpu_price(self.cfg, p) * (1.0 + transfer_h / self.hours) + usd / (self.gpus * self.hours)
    }
}
