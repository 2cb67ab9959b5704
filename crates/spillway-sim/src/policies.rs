//! The references every report sets beside the `spillway` run. Each is the same engine on a rewritten config,
//! so the comparison runs the same decision code: `static-peak` (the fixed pool grown to the peak demand, no
//! cloud), `fixed-only` (the fixed pool alone) and `on-demand-reactive` (a plain cluster-autoscaler-like
//! policy). The instant-overflow bound is computed directly from the jobs.

use crate::input::SimJob;
use crate::report::{BoundReport, MarketCost};
use spillway_core::config::{FixedNodes, PredictiveMode};
use spillway_core::time::to_hours;
use spillway_core::{Config, Market};

/// The policies a report compares, in report order.
pub const POLICIES: [&str; 5] = ["spillway", "spillway-no-spot", "static-peak", "fixed-only", "on-demand-reactive"];

/// Returns the policies a report on `cfg` compares: [`POLICIES`] but those [`skipped_for`] names, plus
/// `spillway-reactive` (the same config with predictive scaling off) right after `spillway-no-spot` when a pool
/// acts on a forecast.
pub fn policies_for(cfg: &Config) -> Vec<&'static str> {
    let skipped = skipped_for(cfg);
    let mut v: Vec<&'static str> = POLICIES.into_iter().filter(|p| !skipped.iter().any(|(s, _)| s == p)).collect();
    let predictive = cfg.pools.iter().any(|p| p.predictive.as_ref().is_some_and(|x| x.mode == PredictiveMode::Act));
    if predictive {
        v.insert(2, "spillway-reactive");
    }
    v
}

/// Returns the references of [`POLICIES`] that make no sense on `cfg`, each with why: on a cloud-only config
/// (no fixed pool) there is no owned capacity to keep (`fixed-only`) or to grow to the peak (`static-peak`: no
/// owned node's size or price to grow it with).
pub fn skipped_for(cfg: &Config) -> Vec<(&'static str, &'static str)> {
    if cfg.pools.iter().any(|p| p.market == Market::Fixed) {
        return Vec::new();
    }
    let why = "the config has no fixed pool (no owned capacity to keep or grow)";
    vec![("static-peak", why), ("fixed-only", why)]
}

/// Returns why `static-peak` cannot run on `jobs`, if its owned pool would need more nodes than a pool may have
/// (a hostile trace's peak would otherwise build them all).
pub fn static_peak_too_large(cfg: &Config, jobs: &[SimJob]) -> Option<String> {
    let largest = cfg.pools.iter().find(|p| p.market == Market::Fixed)?.nodes.iter().map(|n| n.gpus).max()?;
    let peak = peak_gpus(jobs);
    let nodes = peak.div_ceil(u64::from(largest.max(1)));
    (nodes > spillway_core::config::MAX_POOL_NODES)
        .then(|| format!("the trace's peak demand of {peak} GPUs needs {nodes} owned nodes, more than a pool may have"))
}

/// Returns the config that runs `policy` on the same input and fixed pool, or `None` for an unknown name.
pub fn config_for(policy: &str, cfg: &Config, jobs: &[SimJob]) -> Option<Config> {
    match policy {
        "spillway" => Some(cfg.clone()),
        "spillway-no-spot" => Some(no_spot(cfg)),
        "spillway-reactive" => {
            let mut c = cfg.clone();
            c.pools.iter_mut().for_each(|p| p.predictive = None);
            Some(c)
        }
        "fixed-only" => Some(fixed_only(cfg, 0)),
        "static-peak" => Some(fixed_only(cfg, peak_gpus(jobs))),
        "on-demand-reactive" => Some(on_demand_reactive(cfg)),
        _ => None,
    }
}

/// Returns the config with its cloud pools removed and the first fixed pool grown to at least `peak` GPUs.
fn fixed_only(cfg: &Config, peak: u64) -> Config {
    let mut c = cfg.clone();
    c.pools.retain(|p| p.market == Market::Fixed);
    c.schedules.clear();
    for t in &mut c.tiers {
        t.markets = vec![Market::Fixed];
    }
    let have: u64 = c.pools.iter().flat_map(|p| &p.nodes).map(|n| n.count as u64 * n.gpus as u64).sum();
    if let Some(pool) = c.pools.first_mut()
        && peak > have
    {
        let largest = pool.nodes.iter().max_by_key(|n| n.gpus).cloned();
        let size = largest.as_ref().map_or(8, |n| n.gpus).max(1);
        let model = largest.map_or_else(|| spillway_core::config::ANY_MODEL.to_string(), |n| n.gpu_model);
        let extra = (peak - have).div_ceil(size as u64) as u32;
        pool.nodes.push(FixedNodes { count: extra, gpus: size, gpu_model: model });
    }
    c
}

/// Returns the same policy with spot disabled: spot pools buy the same instance types on demand, and tiers
/// that could use spot use on-demand instead.
fn no_spot(cfg: &Config) -> Config {
    let mut c = cfg.clone();
    for p in c.pools.iter_mut().filter(|p| p.market == Market::Spot) {
        p.market = Market::OnDemand;
        p.interruption_rate_per_hour = 0.0;
    }
    for t in &mut c.tiers {
        if t.markets.contains(&Market::Spot) {
            t.markets.retain(|m| *m != Market::Spot);
            if !t.markets.contains(&Market::OnDemand) {
                t.markets.push(Market::OnDemand);
            }
        }
    }
    c.policy.spot_share = None;
    c
}

/// Returns a plain reactive config: on-demand only for every tier, scale out on any pending job at once,
/// no step limit, no preemption, scale in after 10 idle minutes.
fn on_demand_reactive(cfg: &Config) -> Config {
    let mut c = cfg.clone();
    if !c.pools.iter().any(|p| p.market == Market::OnDemand) {
        // No on-demand pool: the spot pools' instance types bought on demand instead.
        for p in c.pools.iter_mut().filter(|p| p.market == Market::Spot) {
            p.market = Market::OnDemand;
        }
    }
    c.pools.retain(|p| p.market != Market::Spot);
    c.schedules.clear();
    c.policy.preemption = false;
    // Queue-driven only: none of the metric, forecast or scheduled policies a plain autoscaler lacks.
    for p in &mut c.pools {
        p.predictive = None;
        p.target_gpu_utilization = None;
        p.step_scaling.clear();
    }
    for t in &mut c.tiers {
        t.markets = vec![Market::Fixed, Market::OnDemand];
        t.interruptible = false;
        t.burst_after_s = 0.0;
        t.spot_fallback_after_s = 0.0;
    }
    for p in c.pools.iter_mut().filter(|p| p.market == Market::OnDemand) {
        p.idle_timeout_s = 600.0;
        p.scale_out_cooldown_s = 10.0;
        p.scale_in_cooldown_s = 0.0;
        p.max_step_fraction = 1e6;
        p.min_nodes = 0;
    }
    c
}

/// Returns the peak concurrent GPU demand if every job starts at submission.
pub fn peak_gpus(jobs: &[SimJob]) -> u64 {
    let mut edges: Vec<(i64, i64)> = Vec::with_capacity(jobs.len() * 2);
    for j in jobs {
        let g = (j.spec.gpus_per_worker * j.spec.workers) as i64;
        edges.push((j.submit_ms, g));
        edges.push((j.submit_ms + j.duration_ms, -g));
    }
    // Ends sort before starts at the same instant: a job that ends frees its GPUs for one that starts.
    edges.sort();
    let (mut cur, mut peak) = (0i64, 0i64);
    for (_, d) in edges {
        cur += d;
        peak = peak.max(cur);
    }
    peak as u64
}

/// Returns the instant-overflow bound: fixed GPUs paid over the trace's span; at each instant the fixed pool
/// serves demand in tier order and each tier's overflow pays the cheapest price per GPU-hour its markets offer
/// in this config (spot only for interruptible jobs), with no boot latency, idle GPU or fragmentation.
pub fn bound(cfg: &Config, jobs: &[SimJob]) -> BoundReport {
    // Demand classes: (tier priority index, interruptible).
    let classes = cfg.tiers.len() * 2;
    let class_of = |j: &SimJob| -> usize {
        let t = cfg.tier_index(&j.spec.tier).unwrap_or(0);
        t * 2 + usize::from(j.spec.interruptible.unwrap_or(cfg.tiers[t].interruptible))
    };
    let price: Vec<Option<(f64, Market)>> = (0..classes).map(|c| cheapest(cfg, c / 2, c % 2 == 1)).collect();
    let mut edges: Vec<(i64, i64, usize)> = Vec::with_capacity(jobs.len() * 2);
    for j in jobs {
        let g = (j.spec.gpus_per_worker * j.spec.workers) as i64;
        edges.push((j.submit_ms, g, class_of(j)));
        edges.push((j.submit_ms + j.duration_ms, -g, class_of(j)));
    }
    edges.sort();
    let fixed_gpus: i64 = cfg.pools.iter().flat_map(|p| &p.nodes).map(|n| n.count as i64 * n.gpus as i64).sum();
    let fixed_usd_per_hour: f64 = cfg
        .pools
        .iter()
        .map(|p| p.nodes.iter().map(|n| n.count as f64 * n.gpus as f64).sum::<f64>() * p.gpu_usd_per_hour)
        .sum();
    let span = edges.last().map_or(0, |e| e.0);
    let mut cost = MarketCost { fixed: fixed_usd_per_hour * to_hours(span), ..MarketCost::default() };
    let mut demand = vec![0i64; classes];
    let (mut cur, mut peak, mut last) = (0i64, 0i64, 0i64);
    for (t, d, class) in edges {
        if t > last {
            let hours = to_hours(t - last);
            let mut left = fixed_gpus;
            for (c, &g) in demand.iter().enumerate() {
                let served = g.min(left);
                left -= served;
                if let Some((usd, market)) = price[c] {
                    let over = (g - served) as f64 * usd * hours;
                    match market {
                        Market::Spot => cost.spot += over,
                        _ => cost.on_demand += over,
                    }
                }
            }
            last = t;
        }
        demand[class] += d;
        cur += d;
        peak = peak.max(cur);
    }
    BoundReport { cost_usd: cost.fixed + cost.on_demand + cost.spot, cost_by_market: cost, peak_gpus: peak as u64 }
}

/// Returns the cheapest cloud price per GPU-hour (and its market) a tier may use.
fn cheapest(cfg: &Config, tier: usize, interruptible: bool) -> Option<(f64, Market)> {
    let t = &cfg.tiers[tier];
    let mut best: Option<(f64, Market)> = None;
    for (pool, p) in cfg.pools.iter().enumerate().filter(|(_, p)| p.market != Market::Fixed) {
        if !t.markets.contains(&p.market) || (p.market == Market::Spot && !interruptible) {
            continue;
        }
        for i in p.instance_types.iter().filter_map(|n| cfg.instance_type_index(n)) {
            if let Some(price) = cfg.offer_price(pool, i) {
                let per_gpu = price / cfg.instance_types[i].gpus as f64;
                if best.is_none_or(|(b, _)| per_gpu < b) {
                    best = Some((per_gpu, p.market));
                }
            }
        }
    }
    best
}

/// Returns the mean GPU demand of `jobs` if every job started at submission: their GPU-time over the span from
/// the first submission to the last end.
pub fn mean_gpus(jobs: &[SimJob]) -> f64 {
    let start = jobs.iter().map(|j| j.submit_ms).min().unwrap_or(0);
    let end = jobs.iter().map(|j| j.submit_ms.saturating_add(j.duration_ms)).max().unwrap_or(start);
    let gpu_ms: f64 =
        jobs.iter().map(|j| f64::from(j.spec.gpus_per_worker) * f64::from(j.spec.workers) * j.duration_ms as f64).sum();
    if end > start { gpu_ms / (end - start) as f64 } else { 0.0 }
}

/// Returns `cfg` owning about `gpus` GPUs: its first fixed pool gets the nearest whole number of nodes of its
/// largest node size (at least one when `gpus` is above 0), and its other node groups and the other fixed pools'
/// nodes go; or an error when it has no fixed pool.
pub fn with_fixed_gpus(cfg: &Config, gpus: u64) -> Result<Config, String> {
    let mut c = cfg.clone();
    let mut fixed = c.pools.iter_mut().filter(|p| p.market == Market::Fixed);
    let Some(pool) = fixed.next() else {
        return Err("the config has no fixed pool to resize".into());
    };
    for other in fixed {
        other.nodes.clear();
    }
    let Some(largest) = pool.nodes.iter().max_by_key(|n| n.gpus).cloned() else {
        return Err(format!("fixed pool `{}` lists no nodes to take a node size from", pool.name));
    };
    let size = u64::from(largest.gpus.max(1));
    let nearest = (gpus + size / 2) / size;
    let nodes = if gpus > 0 { nearest.max(1) } else { 0 };
    let count = u32::try_from(nodes).map_err(|_| format!("{gpus} GPUs is too many nodes"))?;
    pool.nodes = vec![FixedNodes { count, ..largest }];
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Returns a job of `workers` workers of `gpus` GPUs.
    fn job(gpus: u32, workers: u32) -> SimJob {
        let mut j = crate::input::tests::job(gpus);
        j.spec.workers = workers;
        j
    }

    #[test]
    fn static_peak_is_skipped_where_its_pool_would_outgrow_any_pool() {
        let cfg = Config::parse("c.toml", include_str!("../../../examples/hybrid.toml")).unwrap();
        assert_eq!(static_peak_too_large(&cfg, &[job(8, 2)]), None);
        // Two gangs of 8 million GPUs at once: 2,000,000 owned 8-GPU nodes.
        let why = static_peak_too_large(&cfg, &[job(8, 1_000_000), job(8, 1_000_000)]).unwrap();
        assert!(why.contains("16000000 GPUs needs 2000000 owned nodes"), "{why}");
    }
}
