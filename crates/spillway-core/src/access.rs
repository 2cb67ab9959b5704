//! Which pools a job may use, in which order, and which markets it may use now: what placement, preemption and
//! scale-out all ask first; and when a deadline job must leave spot for on-demand.

use crate::config::{Config, DeadlinePolicy, Market};
use crate::model::Job;
use crate::time::{Millis, Time, secs};

/// Returns the pools `job` may run on, in placement order.
pub(crate) fn job_pools<'a>(cfg: &'a Config, order: &'a [usize], access: Access) -> impl Iterator<Item = usize> + 'a {
    order.iter().copied().take_while(move |&p| Some(p) != access.before).filter(move |&p| match cfg.pools[p].market {
        Market::Spot => access.spot,
        Market::OnDemand => access.on_demand,
        Market::Fixed => true,
    })
}

/// Which cloud markets a job may use now (within its tier's markets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access {
    pub spot: bool,
    pub on_demand: bool,
    /// Only the pools the job's order puts before this one: a job leaving that pool for a cheaper one (see
    /// `spot_hop`). `None` for every job the scheduler places.
    pub before: Option<usize>,
}

impl Access {
    /// Returns a job's access at `now`: spot only when interruptible; an interruptible job with a deadline and a
    /// duration waits for spot (or fixed) until its slack is down to its reserve (then it may use on-demand while
    /// spot cannot be had, see [`deadline_reserve`]) or pins it to on-demand (both deadline policies spend the
    /// slack on spot first; `safe` keeps more of it, see [`deadline_pin_at`]); a job just moved back to spot does
    /// not bounce onto on-demand again for a while.
    pub(crate) fn of(job: &Job, now: Time) -> Access {
        let back_on_spot = job.interruptible && job.spot_only_until.is_some_and(|t| t > now);
        let waits_for_spot = job.interruptible && job.deadline_governs() && !job.on_reserve;
        Access { spot: job.interruptible, on_demand: !waits_for_spot && !back_on_spot, before: None }
    }

    /// Returns whether a running job is ahead of uniform progress by at least `slack_ms` (always true for a job
    /// without a deadline and a duration).
    pub(crate) fn ahead_of_uniform(job: &Job, now: Time, slack_ms: Time) -> bool {
        let (Some(deadline), Some(total)) = (job.spec.deadline, job.spec.expected_duration_ms) else { return true };
        let span = (deadline - job.submitted).max(1);
        let done = job.saved_work_ms + job.attempt_progress_ms(now);
        let line = (total as i128 * (now - job.submitted).max(0) as i128 / span as i128) as Time;
        done >= line + slack_ms
    }
}

/// What a job asks of a node, copied out of the job so the cluster can be edited while it is in hand.
pub(crate) struct Need {
    pub g: u32,
    pub w: u32,
    pub model: Option<String>,
    pub access: Access,
    pub tier: usize,
}

impl Need {
    pub(crate) fn of(job: &Job, now: Time) -> Need {
        Need {
            g: job.spec.gpus_per_worker,
            w: job.gang.workers,
            model: job.spec.gpu_model.clone(),
            access: Access::of(job, now),
            tier: job.tier,
        }
    }
}

impl Access {
    /// Returns spot-only access (buying spot capacity ahead of moving a running job there).
    pub(crate) fn spot_only() -> Access {
        Access { spot: true, on_demand: false, before: None }
    }
}

/// Returns the pools `tier` may use in placement order: fixed first, then cheapest price per GPU-hour. Pools
/// another scheduler drives are never among them.
pub(crate) fn pool_order(cfg: &Config, tier: usize) -> Vec<usize> {
    let markets = &cfg.tiers[tier].markets;
    let mut pools: Vec<(bool, f64, usize)> = cfg
        .pools
        .iter()
        .enumerate()
        .filter(|(_, p)| markets.contains(&p.market) && !p.external())
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
    cfg.pool_types(pool)
        .filter_map(|i| cfg.offer_price(pool, i).map(|price| price / cfg.instance_types[i].gpus as f64))
        .fold(f64::INFINITY, f64::min)
}

/// Returns when a deadline job must leave spot for on-demand: its deadline minus its remaining work minus the
/// slack it must keep ([`deadline_keep`]). `None` when the job has no deadline or duration, or its tier has no
/// on-demand pool.
pub(crate) fn deadline_pin_at(cfg: &Config, order: &[usize], job: &Job, now: Time) -> Option<Time> {
    let deadline = job.spec.deadline?;
    let remaining = job.remaining_work_ms(now)?;
    Some(deadline - remaining - deadline_keep(cfg, order, job, remaining, job.data_at())?)
}

/// Returns whether deadline job `job` may start in (or move to) spot pool `q` at `now` and still reach its
/// deadline the way it keeps it (see [`deadline_allows_until`]).
pub(crate) fn deadline_allows(cfg: &Config, order: &[usize], job: &Job, q: usize, now: Time) -> bool {
    deadline_allows_until(cfg, order, job, q, now).is_none_or(|last| now <= last)
}

/// Returns the last instant at which deadline job `job` may start in (or move to) spot pool `q`, as its work
/// stands at `now`: while its slack, less a checkpoint and the transfer of its data to `q`'s region (the work
/// waits for it), covers what it keeps once its data is there ([`deadline_keep`], which then counts the move back
/// to the nearest on-demand pool). `None` (always) for a job its deadline does not govern, for a pool in its
/// data's region, and where its tier has no on-demand pool (nothing to keep slack for). A queued job's slack
/// shrinks with time alone, so the pool drops out of its choices just after this instant.
pub(crate) fn deadline_allows_until(cfg: &Config, order: &[usize], job: &Job, q: usize, now: Time) -> Option<Time> {
    let gb = job.spec.checkpoint_gb.unwrap_or(0.0);
    let transfer = cfg.move_cost(job.data_at(), q, gb).1;
    if !job.deadline_governs() || transfer == 0 {
        return None;
    }
    let (deadline, remaining) = (job.spec.deadline?, job.remaining_work_ms(now)?);
    let there = cfg.pools[q].region.as_deref().or(job.data_at());
    let keep = deadline_keep(cfg, order, job, remaining, there)?;
    let ck = secs(cfg.tiers[job.tier].checkpoint_time_s);
    Some(deadline.saturating_sub(remaining).saturating_sub(ck).saturating_sub(transfer).saturating_sub(keep))
}

/// Returns how long before its pin ([`deadline_pin_at`]) a deadline job stops waiting for spot under the `safe`
/// policy: its trips' worth (see below) of slack. From then it runs on on-demand while spot cannot be had and
/// moves back to spot when spot can take it, as long as its slack covers the move. `None` under `greedy` (it
/// waits for spot until it is pinned), with no trips, and where the pin is `None`.
///
/// Without a reserve ([`crate::config::Policy::deadline_reserve_trips`]) a deadline job that spent its slack
/// waiting for spot stays on on-demand for good, even where spot comes back hours later; with one it runs on
/// on-demand only while spot cannot be had. A trip (on-demand and back) costs at most what [`deadline_keep`]
/// keeps, less the move of its data: where a move would not pay, or its slack could not take it, the job does not
/// go back to spot (see `rebalance`). Replaying the shared spot traces with jobs of 10-40 h and 5-20 h of slack,
/// more trips lowered the mean cost over the offline optimum up to about four, at the price of windows where spot
/// came back while a job that waited longer (`greedy`) would still have been waiting for it.
pub(crate) fn deadline_reserve(cfg: &Config, order: &[usize], job: &Job, now: Time) -> Option<Millis> {
    let trips = i64::from(cfg.policy.deadline_reserve_trips);
    if cfg.policy.deadline_policy != DeadlinePolicy::Safe || trips == 0 {
        return None;
    }
    let trip = deadline_keep(cfg, order, job, job.remaining_work_ms(now)?, None)?;
    Some(trip.saturating_mul(trips))
}

/// Returns the slack a deadline job with `remaining` work keeps when it leaves spot for on-demand: an on-demand
/// boot (with the move of its data there) plus, with the safe policy, a checkpoint, the work one interruption can
/// lose and a margin; the boot counts the move of its data there from region `data` (none: no move).
/// `None` when its tier has no on-demand pool.
fn deadline_keep(cfg: &Config, order: &[usize], job: &Job, remaining: Time, data: Option<&str>) -> Option<Time> {
    // Boot plus moving its data there, at the quickest on-demand pool.
    let gb = job.spec.checkpoint_gb.unwrap_or(0.0);
    let od_boot = order
        .iter()
        .filter(|&&p| cfg.pools[p].market == Market::OnDemand)
        .map(|&p| secs(cfg.pools[p].boot_latency_s).saturating_add(cfg.move_cost(data, p, gb).1))
        .min()?;
    let tier = &cfg.tiers[job.tier];
    let keep = match cfg.policy.deadline_policy {
        DeadlinePolicy::Greedy => od_boot,
        DeadlinePolicy::Safe => {
            let ck = secs(tier.checkpoint_time_s);
            let notice = order
                .iter()
                .filter(|&&p| cfg.pools[p].market == Market::Spot)
                .map(|&p| secs(cfg.pools[p].interruption_notice_s))
                .min()
                .unwrap_or(0);
            // With time to checkpoint inside the notice an interruption loses nothing; otherwise up to an interval.
            let loss = if ck <= notice { 0 } else { job.checkpoint_interval_ms.unwrap_or(remaining) };
            od_boot + ck + loss + secs(cfg.policy.deadline_margin_s)
        }
    };
    Some(keep)
}
