//! Return to spot: an interruptible job that fell back to on-demand (spot was out, full or backed off) moves
//! back to spot once spot can take it again, right after one of its checkpoints so the move loses almost no
//! work. Without this, a long job that fell back once would pay the on-demand price for the rest of its run.

use crate::config::Market;
use crate::engine::{Engine, WakeAt};
use crate::event::{DecisionKind, StopReason, job_subject};
use crate::model::{JobId, JobState};
use crate::time::Millis;

/// Most jobs moved back to spot in one pass.
const MAX_MOVES_PER_PASS: usize = 8;
/// A job moves only this soon after a checkpoint (so it loses at most this much work).
const AFTER_CHECKPOINT_MS: Millis = 300_000;
/// A job moves only if it has at least this much work left (when it declared its duration).
const MIN_REMAINING_MS: Millis = 3_600_000;

impl Engine {
    /// Moves interruptible jobs running on on-demand back to spot where a spot pool they may use can launch.
    /// Returns the moved jobs (queued, restarting once their checkpoint is written; a wake-up is set for that).
    pub(crate) fn return_to_spot(&mut self, wake: &mut WakeAt) -> Vec<JobId> {
        let now = self.now;
        let mut moves: Vec<JobId> = Vec::new();
        for (p, pool) in self.cfg.pools.iter().enumerate() {
            if pool.market != Market::OnDemand {
                continue;
            }
            for n in &self.c.pools[p].ready {
                for &id in &self.c.nodes[n.0 as usize].jobs {
                    let j = &self.c.jobs[id.0 as usize];
                    if j.state != JobState::Running || !j.interruptible || j.pinned_on_demand || moves.contains(&id) {
                        continue;
                    }
                    let (Some(start), Some(iv)) = (j.attempt_start, j.checkpoint_interval_ms) else { continue };
                    if j.remaining_work_ms(now).is_some_and(|r| r < MIN_REMAINING_MS) {
                        continue;
                    }
                    let since = j.unsaved_work_ms(now);
                    if now - start < iv {
                        // Not one checkpoint yet: look again right after the first.
                        wake.at(start + iv);
                        continue;
                    }
                    if since > AFTER_CHECKPOINT_MS {
                        // Look again right after its next checkpoint.
                        wake.at(now + (iv - since).max(1));
                        continue;
                    }
                    if self.spot_can_take(id) {
                        moves.push(id);
                    }
                }
            }
        }
        moves.truncate(MAX_MOVES_PER_PASS);
        for &id in &moves {
            self.c.counters.fallbacks += 1;
            self.record(DecisionKind::Fallback, || job_subject(id), "return_to_spot", || {
                "spot can take it again: checkpoint on on-demand and move back to spot".into()
            });
            self.requeue(id, StopReason::Migrated);
            let j = &mut self.c.jobs[id.0 as usize];
            j.spot_only_until = Some(now + crate::time::secs(self.cfg.tiers[j.tier].spot_fallback_after_s.clamp(600.0, 86_400.0)));
            if let Some(t) = j.not_before {
                wake.at(t);
            }
        }
        moves
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
