//! Return to spot: an interruptible job that fell back to on-demand (spot was out, full or backed off) moves
//! back to spot once spot can take it again. Make before break: at a checkpoint the job asks for a spot node
//! (shadow demand for the autoscaler) while it keeps running on on-demand, and moves (checkpoint, stop, restart)
//! only when a spot node that fits is ready. A deadline job moves only while ahead of uniform progress. Without
//! this, a long job that fell back once would pay the on-demand price for the rest of its run.

use crate::config::Market;
use crate::engine::{Engine, WakeAt};
use crate::event::{DecisionKind, StopReason, job_subject};
use crate::model::{JobId, JobState};
use crate::schedule::{Access, model_fits};
use crate::time::{Millis, secs};

/// Most jobs moved or asking for spot in one pass.
const MAX_MOVES_PER_PASS: usize = 8;
/// A job asks for spot only this soon after a checkpoint (at most once per checkpoint interval).
const AFTER_CHECKPOINT_MS: Millis = 300_000;
/// A job moves only if it has at least this much work left (when it declared its duration).
const MIN_REMAINING_MS: Millis = 3_600_000;

impl Engine {
    /// Returns (jobs moved now, jobs that want spot capacity bought for them).
    pub(crate) fn return_to_spot(&mut self, wake: &mut WakeAt) -> (Vec<JobId>, Vec<JobId>) {
        let now = self.now;
        let (mut moves, mut shadow): (Vec<JobId>, Vec<JobId>) = (Vec::new(), Vec::new());
        for (p, pool) in self.cfg.pools.iter().enumerate() {
            if pool.market != Market::OnDemand {
                continue;
            }
            for n in &self.c.pools[p].ready {
                for &id in &self.c.nodes[n.0 as usize].jobs {
                    let j = &self.c.jobs[id.0 as usize];
                    if j.state != JobState::Running
                        || !j.interruptible
                        || j.pinned_on_demand
                        || moves.contains(&id)
                        || shadow.contains(&id)
                    {
                        continue;
                    }
                    let (Some(start), Some(iv)) = (j.attempt_start, j.checkpoint_interval_ms) else { continue };
                    if j.remaining_work_ms(now).is_some_and(|r| r < MIN_REMAINING_MS) {
                        continue;
                    }
                    let move_cost = secs(2.0 * (pool.boot_latency_s + self.cfg.tiers[j.tier].checkpoint_time_s));
                    if !Access::ahead_of_uniform(j, now, move_cost) {
                        wake.at(now + iv - j.unsaved_work_ms(now).min(iv - 1));
                        continue;
                    }
                    let since = j.unsaved_work_ms(now);
                    if now - start < iv {
                        // Runs here since less than a checkpoint interval (maybe since this very pass).
                        wake.at(start + iv);
                        continue;
                    }
                    if self.spot_node_ready_for(id) {
                        moves.push(id);
                        continue;
                    }
                    if since <= AFTER_CHECKPOINT_MS && self.spot_can_take(id) {
                        shadow.push(id);
                    }
                    // Look again at its next checkpoint.
                    wake.at(now + (iv - since).max(1));
                }
            }
        }
        moves.truncate(MAX_MOVES_PER_PASS);
        shadow.truncate(MAX_MOVES_PER_PASS);
        for &id in &moves {
            self.c.counters.fallbacks += 1;
            self.record(
                DecisionKind::Fallback,
                || job_subject(id),
                "return_to_spot",
                || "a spot node that fits is ready: checkpoint on on-demand and move back to spot".into(),
            );
            self.requeue(id, StopReason::Migrated);
            let j = &mut self.c.jobs[id.0 as usize];
            j.spot_only_until = Some(now + secs(self.cfg.tiers[j.tier].spot_fallback_after_s.clamp(600.0, 86_400.0)));
            if let Some(t) = j.not_before {
                wake.at(t);
            }
        }
        (moves, shadow)
    }

    /// Returns whether a ready spot node the job may use has room for every worker of it.
    fn spot_node_ready_for(&self, id: JobId) -> bool {
        let j = &self.c.jobs[id.0 as usize];
        let (g, w, model) = (j.spec.gpus_per_worker, j.spec.workers, j.spec.gpu_model.as_deref());
        self.pool_order[j.tier].iter().filter(|&&p| self.cfg.pools[p].market == Market::Spot).any(|&p| {
            let slots: u32 = self.c.free[p]
                .range((g, crate::model::NodeId(0))..)
                .filter(|(_, n)| model_fits(model, &self.c.nodes[n.0 as usize].gpu_model))
                .map(|(f, _)| f / g)
                .sum();
            slots >= w
        })
    }

    /// Returns whether a spot pool the job may use could launch a node for it now.
    fn spot_can_take(&self, id: JobId) -> bool {
        let j = &self.c.jobs[id.0 as usize];
        self.pool_order[j.tier]
            .iter()
            .filter(|&&p| self.cfg.pools[p].market == Market::Spot)
            .any(|&p| self.pool_headroom(p) > 0 && self.can_launch_for(p, j))
    }
}
