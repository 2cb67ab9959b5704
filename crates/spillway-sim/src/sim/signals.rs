//! What the simulated cloud tells the engine besides launches and job ends: spot capacity from traces (notices for
//! nodes beyond it), Poisson interruptions, utilization samples of the pools that act on them, and the time series
//! the report draws.

use super::{Sim, SimError, SimEvent, job_utilization};
use crate::input::SimJob;
use rand::Rng;
use spillway_core::{Config, Event, Market, NodeId};

impl Sim<'_> {
    /// Applies spot trace `k`'s capacity now: nodes beyond it (newest first) get notices; schedules the next change.
    pub(super) fn capacity_change(&mut self, k: usize) -> Result<(), SimError> {
        let (pool, it, t) = self.traces[k];
        let (cap, next) = self.opts.spot_traces[t].trace.at(self.now - self.t0);
        self.trace_cap.insert((pool, it), cap);
        self.push(self.t0 + next, SimEvent::Capacity(k));
        let Some(cap) = cap else { return Ok(()) };
        let live: Vec<NodeId> = self
            .alive
            .get(&(pool, it))
            .map_or(Vec::new(), |s| s.iter().copied().filter(|n| !self.noticed.contains(n)).collect());
        let excess = live.len().saturating_sub(cap as usize);
        for &node in live.iter().rev().take(excess) {
            self.notice(node)?;
        }
        Ok(())
    }

    /// Sends a utilization sample for every ready node of a pool that acts on utilization (target tracking or step
    /// bands, [`spillway_core::config::Pool::uses_utilization`]): the GPU-weighted utilization of
    /// its jobs, idle GPUs counting 0.
    pub(super) fn report_metrics(&mut self) -> Result<(), SimError> {
        let mut samples = Vec::new();
        let c = self.engine.cluster();
        for (p, _) in self.cfg.pools.iter().enumerate().filter(|(_, p)| p.uses_utilization()) {
            for &n in &c.pools[p].ready {
                let node = &c.nodes[n.0 as usize];
                let busy: f64 = node
                    .jobs
                    .iter()
                    .map(|&j| {
                        let held: u32 =
                            c.jobs[j.0 as usize].placement.iter().filter(|(m, _)| *m == n).map(|(_, g)| g).sum();
                        held as f64 * job_utilization(self.opts.seed, j)
                    })
                    .sum();
                samples.push((n, busy / node.gpus.max(1) as f64));
            }
        }
        for (node, gpu_utilization) in samples {
            self.engine
                .handle_event(self.now, Event::MetricSample { node, gpu_utilization })
                .map_err(|e| self.broken(e.to_string()))?;
        }
        Ok(())
    }

    /// Draws a Poisson interruption for a spot node that just became ready.
    pub(super) fn schedule_poisson(&mut self, node: NodeId) {
        let pool = self.engine.cluster().nodes[node.0 as usize].pool;
        let rate = self.cfg.pools[pool].interruption_rate_per_hour;
        if self.cfg.pools[pool].market != Market::Spot || rate <= 0.0 {
            return;
        }
        let u: f64 = self.rng.random::<f64>().max(1e-12);
        let hours = -u.ln() / rate;
        self.push(self.now + (hours * 3.6e6) as i64, SimEvent::Notice(node));
    }

    /// Sends an interruption notice for a live, not yet noticed node and schedules its reclaim.
    pub(super) fn notice(&mut self, node: NodeId) -> Result<(), SimError> {
        let n = &self.engine.cluster().nodes[node.0 as usize];
        if !n.alive() || self.noticed.contains(&node) {
            return Ok(());
        }
        let deadline = self.now + spillway_core::time::secs(self.cfg.pools[n.pool].interruption_notice_s);
        self.noticed.insert(node);
        self.push(deadline, SimEvent::Reclaim(node));
        self.engine
            .handle_event(self.now, Event::InterruptionNotice { node, deadline })
            .map_err(|e| self.broken(e.to_string()))
    }

    /// Appends a row to the time series at the current time: demand, each pool's capacity, busy GPUs and nodes,
    /// cost so far by market (open node-hours included), spot nodes alive and requested.
    pub(super) fn sample(&mut self) {
        let c = self.engine.cluster();
        let pools = self.cfg.pools.len();
        let (mut cap, mut busy, mut nodes) = (vec![0u64; pools], vec![0u64; pools], vec![0u64; pools]);
        let mut open = [0.0f64; 3];
        // Only live nodes: walking every node ever launched would make long runs quadratic.
        let live = c.pools.iter().flat_map(|p| p.ready.iter().chain(p.requested.iter()));
        for n in live.map(|id| &c.nodes[id.0 as usize]) {
            nodes[n.pool] += 1;
            if n.state == spillway_core::NodeState::Ready {
                cap[n.pool] += n.gpus as u64;
                busy[n.pool] += n.used as u64;
            }
            if n.ended_at.is_none() {
                open[n.market.index()] += n.price_usd_per_hour * (self.now - n.billed_from) as f64 / 3_600_000.0;
            }
        }
        let mut row = vec![(self.now - self.t0) as f64 / 1000.0, self.queued_gpus as f64, self.running_gpus as f64];
        for p in 0..pools {
            row.extend([cap[p] as f64, busy[p] as f64, nodes[p] as f64]);
        }
        for (booked, open) in c.ledger.by_market.iter().zip(&open) {
            row.push(booked + open);
        }
        // Spot nodes alive (ready) vs requested (asked for and not ready yet).
        let spot = self.cfg.pools.iter().enumerate().filter(|(_, p)| p.market == Market::Spot);
        let (alive, requested) =
            spot.fold((0, 0), |(a, r), (i, _)| (a + c.pools[i].ready.len(), r + c.pools[i].requested.len()));
        row.extend([alive as f64, requested as f64]);
        if let Some(e) = &self.elastic {
            row.extend(e.gpus.map(|g| g as f64));
        }
        self.series.rows.push(row);
    }
}

/// Returns the time series' column names for `cfg`'s pools (and the elastic columns when any job is elastic).
pub(super) fn series_columns(cfg: &Config, jobs: &[SimJob]) -> Vec<String> {
    let mut cols = vec!["time_s".to_string(), "demand:queued_gpus".into(), "demand:running_gpus".into()];
    for p in &cfg.pools {
        cols.extend([
            format!("pool:{}:capacity_gpus", p.name),
            format!("pool:{}:busy_gpus", p.name),
            format!("pool:{}:nodes", p.name),
        ]);
    }
    cols.extend(["cost:fixed".into(), "cost:on_demand".into(), "cost:spot".into()]);
    cols.extend(["spot:ready_nodes".into(), "spot:requested_nodes".into()]);
    if jobs.iter().any(|j| j.spec.is_elastic()) {
        cols.extend(["elastic:gpus".into(), "elastic:fewest_gpus".into(), "elastic:most_gpus".into()]);
    }
    cols
}
