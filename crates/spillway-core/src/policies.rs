//! Metric-driven and predictive scaling policies of a pool: target tracking and step scaling on GPU utilization
//! (from `MetricSample` events) and a forecast of the pool's GPU demand, acted on one boot latency (plus a buffer)
//! ahead. Their proposals combine into one wanted size (any policy may scale out, all must agree to scale in),
//! which acts as the pool's min; the decision record names the winning policy.

use crate::autoscale::Proposal;
use crate::autoscale::forecast::{fit_for_horizon, steps_per_day};
use crate::config::{Pool, PredictiveMode};
use crate::engine::EventError;
use crate::event::DecisionKind;
use crate::model::NodeId;
use crate::state::{Engine, WakeAt};
use crate::time::secs;
use std::collections::BTreeMap;

impl Engine {
    /// Updates each metric-driven pool's wanted nodes from its nodes' GPU utilization: target tracking (AWS's
    /// rule: ceil(nodes x metric / target), no scale-in while nodes warm up) and step scaling (bands held for a
    /// period), combined so that any policy may scale out and all must agree to scale in. The result acts as the
    /// pool's min: scale-out buys up to it, idle nodes are kept while it holds them. Records the winning policy.
    pub(crate) fn track_targets(&mut self, wake: &mut WakeAt) {
        use crate::autoscale::step_scaling::StepOutcome;
        use crate::autoscale::target_tracking::{ScaleTimes, TargetTracking, warm_average};
        for p in 0..self.cfg.pools.len() {
            let pool = &self.cfg.pools[p];
            if pool.target_gpu_utilization.is_none() && self.steps[p].is_none() && pool.predictive.is_none() {
                continue;
            }
            let samples = self.pool_samples(p, wake);
            let mut proposals = Vec::new();
            // Without a signal the utilization policies have nothing to say; the pool holds (below).
            let lost_why = self.signal_missing(p);
            self.note_signal(p, &lost_why);
            let (lost, pool) = (lost_why.is_some(), &self.cfg.pools[p]);
            let st = &self.c.pools[p];
            if let Some(target) = pool.target_gpu_utilization.filter(|_| !lost) {
                let policy = TargetTracking {
                    metric: "gpu_utilization".into(),
                    target,
                    warmup_s: pool.utilization_warmup_s,
                    scale_in_cooldown_s: pool.scale_in_cooldown_s,
                    scale_out_cooldown_s: pool.scale_out_cooldown_s,
                };
                // The load is what ready nodes carry: size from them, not from nodes still booting (which would
                // count the same load twice while they come up).
                proposals.extend(policy.propose(samples.len() as u32, &samples, self.now));
            }
            let (alive, last) = (st.alive, ScaleTimes { last_out: st.last_scale_out, last_in: st.last_scale_in });
            let mean = warm_average(&samples, self.now, pool.utilization_warmup_s).mean;
            // Step scaling looks at each batch of samples once, and what it proposed stands until the next.
            if std::mem::take(&mut self.fresh_samples[p]) {
                self.step_proposals[p] = match (self.steps[p].as_mut(), mean) {
                    (Some((policy, state)), Some(mean)) if !lost => {
                        let outcome = state.observe(policy, self.now, mean, last);
                        (outcome != StepOutcome::Quiet).then(|| policy.propose(alive, outcome))
                    }
                    _ => None,
                };
            }
            proposals.extend(self.step_proposals[p].clone());
            let (max, name) = (pool.max_nodes, pool.name.clone());
            proposals.extend(self.predict(p, wake));
            let decision = crate::autoscale::combine(&proposals, alive);
            let mut want = if proposals.is_empty() { 0 } else { decision.desired_nodes.min(max) };
            let (mut code, mut detail) = (decision.code.as_str(), decision.detail);
            if let Some(why) = &lost_why
                && want < alive.min(max)
            {
                want = alive.min(max);
                code = "metric_lost";
                detail = format!("holding {want} node(s) until the utilization signal is back: {why}");
            }
            if want != self.c.pools[p].policy_min {
                self.c.pools[p].policy_min = want;
                self.record(DecisionKind::NodeKept, || format!("pool:{name}"), code, || detail);
            }
        }
    }

    /// Returns the samples of pool `p`'s ready nodes (NaN: none), and asks to wake when a node warms up: its
    /// sample counts from then on, no scale-in happens while one warms up, and a query pool wants its sample.
    fn pool_samples(&self, p: usize, wake: &mut WakeAt) -> Vec<crate::autoscale::target_tracking::NodeSample> {
        let pool = &self.cfg.pools[p];
        let samples: Vec<_> = (self.c.pools[p].ready.iter().map(|n| &self.c.nodes[n.0 as usize]))
            .map(|n| crate::autoscale::target_tracking::NodeSample {
                launched_at: n.ready_at.unwrap_or(n.requested_at),
                value: n.gpu_utilization.unwrap_or(f64::NAN),
            })
            .collect();
        let warmup = secs(pool.utilization_warmup_s);
        if pool.target_gpu_utilization.is_some() || pool.utilization_query.is_some() {
            for s in samples.iter().filter(|s| s.launched_at + warmup > self.now) {
                wake.at(s.launched_at + warmup);
            }
        }
        samples
    }

    /// Takes what a pool's utilization query answered ([`crate::Event::PoolMetric`]): each ready node's sample
    /// is set from it or cleared; an error is kept as why the signal is missing until an answer comes.
    pub(crate) fn pool_metric(
        &mut self,
        pool: usize,
        samples: Vec<(NodeId, f64)>,
        error: Option<String>,
    ) -> Result<(), EventError> {
        self.cfg.pools.get(pool).ok_or(EventError::UnknownPool(pool))?;
        let given: BTreeMap<NodeId, f64> = samples.into_iter().filter(|(_, v)| v.is_finite()).collect();
        for &id in &self.c.pools[pool].ready {
            let n = &mut self.c.nodes[id.0 as usize];
            n.gpu_utilization = given.get(&id).filter(|_| error.is_none()).map(|v| v.clamp(0.0, 1.0));
        }
        self.fresh_samples[pool] = true;
        self.signal_error[pool] = error;
        Ok(())
    }

    /// Returns why pool `p`'s utilization signal (its `utilization_query`) was missing at the last decision pass,
    /// or `None` while it is there (and for a pool without a query or an unknown pool).
    pub fn utilization_signal(&self, p: usize) -> Option<&str> {
        self.signal_lost.get(p)?.as_deref()
    }

    /// Returns why pool `p`'s utilization signal is missing now, if it reads a query: the query's last answer
    /// was an error, or a ready node past its warm-up has no sample (its exporter stopped, so Prometheus marked
    /// its series stale, or no answer has come since it warmed up).
    pub(crate) fn signal_missing(&self, p: usize) -> Option<String> {
        let pool = &self.cfg.pools[p];
        pool.utilization_query.as_ref()?;
        if let Some(e) = &self.signal_error[p] {
            return Some(e.clone());
        }
        let warmup = secs(pool.utilization_warmup_s);
        let missing: Vec<String> = (self.c.pools[p].ready.iter().map(|id| &self.c.nodes[id.0 as usize]))
            .filter(|n| n.gpu_utilization.is_none() && n.ready_at.unwrap_or(n.requested_at) + warmup <= self.now)
            .map(|n| n.id.0.to_string())
            .collect();
        (!missing.is_empty()).then(|| format!("the query has no sample for warm node(s) {}", missing.join(", ")))
    }

    /// Records when pool `p`'s signal goes missing, changes why, or is back.
    fn note_signal(&mut self, p: usize, why: &Option<String>) {
        if &self.signal_lost[p] == why {
            return;
        }
        let (code, detail) = match why {
            Some(w) => ("metric_lost", format!("utilization signal missing, no scale-in until it is back: {w}")),
            None => ("metric_restored", "utilization signal is back".to_string()),
        };
        let name = self.cfg.pools[p].name.clone();
        self.record(DecisionKind::NodeKept, || format!("pool:{name}"), code, || detail);
        self.signal_lost[p] = why.clone();
    }

    /// Records the pool's GPU demand (busy GPUs on ready nodes plus GPUs of nodes being bought) into its bucket
    /// history, refits the forecaster daily once a day of history exists, and returns a proposal of the nodes the
    /// forecast over the next boot latency plus buffer needs, as a floor for the pool (never a scale-in: a
    /// forecast alone does not remove capacity, idle timeouts do). In forecast-only mode it records what it would
    /// do instead when that is more than the pool has.
    fn predict(&mut self, p: usize, wake: &mut WakeAt) -> Option<Proposal> {
        let cfg = self.cfg.pools[p].predictive.clone()?;
        let (now, bucket) = (self.now, secs(cfg.bucket_s));
        let busy = self.pool_demand(p);
        let day = steps_per_day(cfg.bucket_s).ok()?;
        let lead_s = self.cfg.pools[p].boot_latency_s + cfg.buffer_s;
        // The forecast starts at the bucket now open; look past it by the lead time.
        let steps = (lead_s / cfg.bucket_s).ceil() as usize + 1;
        let h = &mut self.history[p];
        let start = *h.bucket_start.get_or_insert(now);
        h.bucket_max = h.bucket_max.max(busy as f64);
        if now >= start + bucket {
            // Close the bucket (and any skipped ones, which held the same demand).
            let closed = ((now - start) / bucket) as usize;
            for _ in 0..closed {
                h.values.push(h.bucket_max);
                if let Some(m) = h.model.as_mut() {
                    m.observe(h.bucket_max);
                }
            }
            h.bucket_start = Some(start + closed as i64 * bucket);
            h.bucket_max = busy as f64;
            if h.values.len() >= day && (h.model.is_none() || h.values.len() >= h.fitted_at + day) {
                // Chosen for the horizon it is read at: a method that wins one bucket ahead may lose at the lead.
                h.model = fit_for_horizon(&h.values, cfg.bucket_s, steps).ok();
                h.fitted_at = h.values.len();
            }
        }
        wake.at(h.bucket_start.unwrap_or(now) + bucket);
        let model = h.model.as_ref()?;
        let pool = &self.cfg.pools[p];
        let peak = model.forecast(steps).into_iter().fold(0.0f64, f64::max);
        let node_gpus = node_gpus(self, pool).max(1);
        let want = ((peak / node_gpus as f64).ceil() as u32).min(pool.max_nodes);
        let alive = self.c.pools[p].alive;
        let detail = format!("forecast peak {peak:.1} GPUs within {lead_s:.0} s ({} x {node_gpus}-GPU nodes)", want);
        if cfg.mode == PredictiveMode::ForecastOnly {
            if want <= alive {
                return None;
            }
            let name = pool.name.clone();
            self.record(
                DecisionKind::NodeKept,
                || format!("pool:{name}"),
                "forecast_only",
                || format!("would scale to {want}: {detail}"),
            );
            return None;
        }
        // The forecast size holds while the forecast does, also once the pool has it: were it dropped then, the
        // nodes it bought would be left to their idle timeout and bought again at whatever pass came next.
        Some(Proposal { policy: "predictive".into(), desired_nodes: want, detail })
    }
}

impl Engine {
    /// Returns a pool's GPU demand for its forecast: busy GPUs on ready nodes plus GPUs of nodes being bought.
    fn pool_demand(&self, p: usize) -> u32 {
        let st = &self.c.pools[p];
        st.ready.iter().map(|n| self.c.nodes[n.0 as usize].used).sum::<u32>()
            + st.requested.iter().map(|n| self.c.nodes[n.0 as usize].gpus).sum::<u32>()
    }

    /// Records each predictive pool's demand as a decision pass left it into the bucket open now. The pass
    /// starts and buys after the forecaster looked, and what it leaves lasts until the next pass: without this
    /// the bucket would see it only if some pass came before the demand changed again, so an unrelated wake-up
    /// would change the history and the forecast.
    pub(crate) fn observe_demand(&mut self) {
        for p in 0..self.cfg.pools.len() {
            if self.cfg.pools[p].predictive.is_none() || self.history[p].bucket_start.is_none() {
                continue;
            }
            let busy = self.pool_demand(p) as f64;
            let h = &mut self.history[p];
            h.bucket_max = h.bucket_max.max(busy);
        }
    }
}

/// Returns the GPUs of a node of the pool's first (preferred) instance type.
fn node_gpus(e: &Engine, pool: &Pool) -> u32 {
    pool.instance_types.first().and_then(|n| e.cfg.instance_type_index(n)).map_or(1, |i| e.cfg.instance_types[i].gpus)
}
