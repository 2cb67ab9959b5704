//! A lower bound on cost that honors pool caps and tier markets: the least any policy could pay that finishes all
//! the input's work by a given time `H` (the report uses the `spillway` run's end).
//!
//! Work is fluid: each demand class (tier, interruptible) releases GPU-hours as if every job started at its
//! submission, and may be served then or later, in any pool its tier's markets allow (spot only for interruptible
//! jobs), at most a pool's cap at a time (owned GPUs; `max_nodes` x the pool's largest node), and all of it by `H`.
//! Owned capacity costs the same whatever it runs, so the bound pays it over `[0, H]` and each cloud GPU-hour at
//! the pool's cheapest price per GPU. Time is cut into equal buckets in which work released in a bucket may be
//! served anywhere in it. Every real schedule that finishes by `H` is such a flow (it serves no job before its
//! submission, a gang on whole nodes, within the caps, paying idle and boot time besides), so none costs less.
//! The flow is a linear program, solved with `microlp`.

use crate::input::SimJob;
use crate::report::MarketCost;
use serde::Serialize;
use spillway_core::time::Millis;
use spillway_core::{Config, Market};

/// Time buckets of the linear program: finer is tighter, coarser is faster (a few seconds at this size for a
/// five-month trace).
pub const BUCKETS: usize = 240;

/// The bound and what it assumed.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CappedBoundReport {
    pub cost_usd: f64,
    pub cost_by_market: MarketCost,
    /// The time by which all work is done (ms from the start of the trace): the `spillway` run's end.
    pub horizon_ms: Millis,
    pub buckets: usize,
}

/// A pool as the bound sees it: its market, its cap in GPUs and its price per cloud GPU-hour (0 for owned).
struct PoolCap {
    market: Market,
    gpus: f64,
    usd_per_gpu_hour: f64,
}

/// Returns each pool's cap and price (`None` for a pool the bound leaves out: external, or no priced type).
fn pool_caps(cfg: &Config) -> Vec<Option<PoolCap>> {
    cfg.pools
        .iter()
        .map(|p| {
            if p.external() {
                return None;
            }
            if p.market == Market::Fixed {
                let gpus: f64 = p.nodes.iter().map(|n| f64::from(n.count) * f64::from(n.gpus)).sum();
                return Some(PoolCap { market: Market::Fixed, gpus, usd_per_gpu_hour: 0.0 });
            }
            let types = p.instance_types.iter().filter_map(|n| cfg.instance_types.iter().find(|t| &t.name == n));
            let (mut largest, mut cheapest) = (0u32, f64::INFINITY);
            for t in types {
                let price = if p.market == Market::Spot { t.spot_usd_per_hour } else { Some(t.on_demand_usd_per_hour) };
                if let Some(usd) = price.filter(|_| t.gpus > 0) {
                    largest = largest.max(t.gpus);
                    cheapest = cheapest.min(usd / f64::from(t.gpus));
                }
            }
            let gpus = f64::from(p.max_nodes) * f64::from(largest);
            cheapest.is_finite().then_some(PoolCap { market: p.market, gpus, usd_per_gpu_hour: cheapest })
        })
        .collect()
}

/// Returns GPU-hours released per demand class (tier x 2 + interruptible) and bucket, if every job ran from its
/// submission; `bucket_ms` is a bucket's length.
fn releases(cfg: &Config, jobs: &[SimJob], buckets: usize, bucket_ms: f64) -> Vec<Vec<f64>> {
    let mut r = vec![vec![0.0; buckets]; cfg.tiers.len() * 2];
    for j in jobs {
        let t = cfg.tier_index(&j.spec.tier).unwrap_or(0);
        let class = t * 2 + usize::from(j.spec.interruptible.unwrap_or(cfg.tiers[t].interruptible));
        let gpus = f64::from(j.spec.gpus_per_worker) * f64::from(j.spec.workers);
        let (start, end) = (j.submit_ms.max(0) as f64, j.submit_ms.saturating_add(j.duration_ms).max(0) as f64);
        let first = ((start / bucket_ms) as usize).min(buckets - 1);
        let last = ((end / bucket_ms) as usize).min(buckets - 1);
        for (b, slot) in r[class].iter_mut().enumerate().take(last + 1).skip(first) {
            let (lo, hi) = (b as f64 * bucket_ms, (b + 1) as f64 * bucket_ms);
            // The last bucket takes whatever runs past it.
            let hi = if b == buckets - 1 { f64::INFINITY } else { hi };
            let overlap = (end.min(hi) - start.max(lo)).max(0.0);
            *slot += gpus * overlap / 3.6e6;
        }
    }
    r
}

/// Returns the bound for finishing `jobs` on `cfg` by `horizon_ms` (raised to the end of the last job run from
/// its submission when earlier), or why it could not be computed: no work or pools, work the caps cannot serve by
/// then, or a solver failure.
pub fn capped_bound(cfg: &Config, jobs: &[SimJob], horizon_ms: Millis) -> Result<CappedBoundReport, String> {
    let last_end = jobs.iter().map(|j| j.submit_ms.saturating_add(j.duration_ms)).max().unwrap_or(0);
    let horizon_ms = horizon_ms.max(last_end).max(1);
    let bucket_ms = horizon_ms as f64 / BUCKETS as f64;
    let hours = bucket_ms / 3.6e6;
    let pools = pool_caps(cfg);
    let released = releases(cfg, jobs, BUCKETS, bucket_ms);
    let mut lp = microlp::Problem::new(microlp::OptimizationDirection::Minimize);
    // Per pool and bucket: the (variable, class) pairs served there, for the cap constraints.
    let mut served: Vec<Vec<Vec<microlp::Variable>>> = vec![vec![Vec::new(); BUCKETS]; pools.len()];
    let mut by_market: Vec<(microlp::Variable, Market, f64)> = Vec::new();
    for (class, work) in released.iter().enumerate() {
        if work.iter().all(|&w| w <= 0.0) {
            continue;
        }
        let tier = &cfg.tiers[class / 2];
        let usable: Vec<usize> = (0..pools.len())
            .filter(|&p| pools[p].as_ref().is_some_and(|c| tier.markets.contains(&c.market)))
            .filter(|&p| cfg.pools[p].market != Market::Spot || class % 2 == 1)
            .collect();
        if usable.is_empty() {
            return Err(format!("tier {} has work and no pool its markets allow", tier.name));
        }
        let mut carried: Option<microlp::Variable> = None;
        for (b, &w) in work.iter().enumerate() {
            let mut row: Vec<(microlp::Variable, f64)> = Vec::with_capacity(usable.len() + 2);
            for &p in &usable {
                let Some(cap) = &pools[p] else { continue };
                let x = lp.add_var(cap.usd_per_gpu_hour, (0.0, f64::INFINITY));
                served[p][b].push(x);
                by_market.push((x, cap.market, cap.usd_per_gpu_hour));
                row.push((x, 1.0));
            }
            // Work left over after this bucket waits for a later one; none is left after the last.
            let next = (b + 1 < BUCKETS).then(|| lp.add_var(0.0, (0.0, f64::INFINITY)));
            if let Some(y) = next {
                row.push((y, 1.0));
            }
            if let Some(y) = carried {
                row.push((y, -1.0));
            }
            lp.add_constraint(&row, microlp::ComparisonOp::Eq, w);
            carried = next;
        }
    }
    for (p, cap) in pools.iter().enumerate() {
        let Some(cap) = cap else { continue };
        for vars in &served[p] {
            if !vars.is_empty() {
                let row: Vec<(microlp::Variable, f64)> = vars.iter().map(|&v| (v, 1.0)).collect();
                lp.add_constraint(&row, microlp::ComparisonOp::Le, cap.gpus * hours);
            }
        }
    }
    let solution = solve(lp)?;
    let mut cost = MarketCost::default();
    let fixed_usd_per_hour: f64 = cfg
        .pools
        .iter()
        .filter(|p| p.market == Market::Fixed)
        .map(|p| p.nodes.iter().map(|n| f64::from(n.count) * f64::from(n.gpus)).sum::<f64>() * p.gpu_usd_per_hour)
        .sum();
    cost.fixed = fixed_usd_per_hour * horizon_ms as f64 / 3.6e6;
    for (x, market, usd) in by_market {
        let spent = solution[x].max(0.0) * usd;
        match market {
            Market::Spot => cost.spot += spent,
            Market::OnDemand => cost.on_demand += spent,
            Market::Fixed => {}
        }
    }
    let cost_usd = cost.fixed + cost.on_demand + cost.spot;
    Ok(CappedBoundReport { cost_usd, cost_by_market: cost, horizon_ms, buckets: BUCKETS })
}

/// Solves the program; a panic inside the solver (it is an early-stage library) becomes an error, not a crash.
fn solve(lp: microlp::Problem) -> Result<microlp::Solution, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lp.solve())) {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(microlp::Error::Infeasible)) => Err("the caps cannot serve all the work by then".into()),
        Ok(Err(e)) => Err(format!("the solver failed: {e}")),
        Err(_) => Err("the solver failed (it panicked)".into()),
    }
}
