//! The cost ledger: every node-second priced by its market and instance type, attributed to the jobs on the
//! node by GPU share; what no job used is idle. Totals by market, pool, team and tier.

use crate::config::Market;
use crate::time::{Millis, to_hours};

/// Accumulated cost and GPU time. Node cost is booked when a node's billing closes (termination, failure or the
/// end of a run); job cost when a job's attempt releases its GPUs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ledger {
    /// USD by market, indexed by [`Market::index`].
    pub by_market: [f64; 3],
    /// Node-milliseconds paid for, by market.
    pub node_ms_by_market: [i128; 3],
    pub by_pool: Vec<f64>,
    pub by_team: Vec<f64>,
    pub by_tier: Vec<f64>,
    /// Node cost of all closed billing periods.
    pub node_usd: f64,
    /// Cost attributed to jobs.
    pub job_usd: f64,
    /// GPU-milliseconds paid for.
    pub gpu_ms: i128,
    /// GPU-milliseconds bound to jobs.
    pub busy_gpu_ms: i128,
    /// Moving jobs' data between regions (also in their team's and tier's cost, not in any market's).
    pub egress_usd: f64,
}

impl Ledger {
    /// Returns an empty ledger for the given numbers of pools and tiers.
    pub fn new(pools: usize, tiers: usize) -> Ledger {
        Ledger { by_pool: vec![0.0; pools], by_tier: vec![0.0; tiers], ..Ledger::default() }
    }

    /// Books a node's billed period of `ms` at `usd_per_hour` with `gpus` GPUs.
    pub fn book_node(&mut self, pool: usize, market: Market, usd_per_hour: f64, gpus: u32, ms: Millis) {
        let usd = usd_per_hour * to_hours(ms.max(0));
        self.by_market[market.index()] += usd;
        self.node_ms_by_market[market.index()] += ms.max(0) as i128;
        self.by_pool[pool] += usd;
        self.node_usd += usd;
        self.gpu_ms += gpus as i128 * ms.max(0) as i128;
    }

    /// Books `gpus` GPUs of a node priced `node_usd_per_hour` with `node_gpus` GPUs, held by a job for `ms`.
    pub fn book_job(
        &mut self,
        team: usize,
        tier: usize,
        gpus: u32,
        node_gpus: u32,
        node_usd_per_hour: f64,
        ms: Millis,
    ) {
        let usd = node_usd_per_hour * gpus as f64 / node_gpus.max(1) as f64 * to_hours(ms.max(0));
        if self.by_team.len() <= team {
            self.by_team.resize(team + 1, 0.0);
        }
        self.by_team[team] += usd;
        self.by_tier[tier] += usd;
        self.job_usd += usd;
        self.busy_gpu_ms += gpus as i128 * ms.max(0) as i128;
    }

    /// Books `usd` of egress for moving a job of `team` and `tier` between regions.
    pub fn book_egress(&mut self, team: usize, tier: usize, usd: f64) {
        if self.by_team.len() <= team {
            self.by_team.resize(team + 1, 0.0);
        }
        self.by_team[team] += usd;
        self.by_tier[tier] += usd;
        self.egress_usd += usd;
    }

    /// Returns everything paid: nodes and egress.
    pub fn total_usd(&self) -> f64 {
        self.node_usd + self.egress_usd
    }

    /// Returns the cost no job used.
    pub fn idle_usd(&self) -> f64 {
        (self.node_usd - self.job_usd).max(0.0)
    }

    /// Returns GPU-hours paid for but bound to no job.
    pub fn idle_gpu_hours(&self) -> f64 {
        (self.gpu_ms - self.busy_gpu_ms).max(0) as f64 / 3_600_000.0
    }

    /// Returns GPU-hours bound to jobs.
    pub fn busy_gpu_hours(&self) -> f64 {
        self.busy_gpu_ms as f64 / 3_600_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_half_used_node_splits_its_cost_between_the_job_and_idle() {
        let mut l = Ledger::new(1, 3);
        l.book_node(0, Market::OnDemand, 8.0, 8, 3_600_000);
        l.book_job(0, 1, 4, 8, 8.0, 3_600_000);
        assert_eq!(l.by_market[Market::OnDemand.index()], 8.0);
        assert_eq!(l.by_team[0], 4.0);
        assert_eq!(l.idle_usd(), 4.0);
        assert_eq!(l.idle_gpu_hours(), 4.0);
    }
}
