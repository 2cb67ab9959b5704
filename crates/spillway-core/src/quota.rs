//! Account limits on cloud capacity: a cloud's per-family vCPU quotas (EC2's "Running On-Demand P instances" or
//! "All P Spot Instance Requests"), from the config's `[[quotas]]`. The scale-out planner never plans a launch
//! beyond them: a peak that needs more quota than the account has waits with the reason `quota` (and falls back
//! to types or pools that still have some) instead of failing launch after launch. Teams ask for quota before
//! the peak.

use crate::config::{Config, Market};
use crate::state::Engine;

/// Returns each quota's vCPUs left, counting every alive node of its market and types (requested, ready or
/// draining: all of them hold their vCPUs of the account).
pub(crate) fn quota_left(e: &Engine) -> Vec<u32> {
    let cfg = &e.cfg;
    let mut used = vec![0_u64; cfg.quotas.len()];
    if cfg.quotas.is_empty() {
        return Vec::new();
    }
    for n in e.c.nodes.iter().filter(|n| n.alive()) {
        let Some(it) = n.instance_type else { continue };
        for (q, u) in used.iter_mut().enumerate() {
            if covers(cfg, q, it, n.market) {
                *u += u64::from(cfg.instance_types[it].vcpus.unwrap_or(0));
            }
        }
    }
    cfg.quotas.iter().zip(used).map(|(q, u)| u64::from(q.max_vcpus).saturating_sub(u) as u32).collect()
}

/// Returns whether quota `q` counts nodes of type `it` in `market`.
fn covers(cfg: &Config, q: usize, it: usize, market: Market) -> bool {
    let quota = &cfg.quotas[q];
    quota.market == market && quota.instance_types.iter().any(|name| *name == cfg.instance_types[it].name)
}

/// Returns how many more nodes of type `it` in `market` the quotas allow (`u32::MAX` when none counts them).
pub(crate) fn quota_nodes(cfg: &Config, it: usize, market: Market, left: &[u32]) -> u32 {
    let vcpus = cfg.instance_types[it].vcpus.unwrap_or(0).max(1);
    (0..cfg.quotas.len()).filter(|&q| covers(cfg, q, it, market)).map(|q| left[q] / vcpus).min().unwrap_or(u32::MAX)
}

/// Takes `n` nodes of type `it` in `market` off the quotas' remainder (planned launches).
pub(crate) fn take_quota(cfg: &Config, it: usize, market: Market, n: u32, left: &mut [u32]) {
    let vcpus = cfg.instance_types[it].vcpus.unwrap_or(0);
    for (q, l) in left.iter_mut().enumerate() {
        if covers(cfg, q, it, market) {
            *l = l.saturating_sub(vcpus.saturating_mul(n));
        }
    }
}
