//! What-if answers: what a pool would launch for the jobs the last decision pass left waiting under another max or
//! without its cooldown, from one scale-out estimate over the engine's state ([`Engine::plan_scale_out`]); nothing
//! is changed and nothing is copied.

use crate::access::{Access, job_pools};
use crate::config::Market;
use crate::growth::{PoolChange, WhatIf};
use crate::model::{JobId, JobState};
use crate::state::{Engine, WakeAt};

/// Most queued jobs a what-if counts where the last pass stopped before the ones that cannot start or buy (as
/// many as a pass collects as blocked at most).
const WHAT_IF_JOBS: usize = 2048 + 256;

impl Engine {
    /// Answers what pool `pool` would launch now for the jobs the last decision pass left waiting (and the running
    /// jobs that wanted spot capacity to move to) under `change`: one scale-out estimate over the engine's state,
    /// nothing changed. `None` for an unknown or fixed pool. Jobs placed or ended since that pass are left out.
    /// Where that pass stopped because nothing further on could start or buy, the jobs it did not reach count
    /// too (those of the first [`WHAT_IF_JOBS`] queued, in scheduling order, that neither their team's quota nor
    /// their waiting budget holds).
    pub fn what_if(&self, pool: &str, change: PoolChange) -> Option<WhatIf> {
        let p = self.cfg.pools.iter().position(|x| x.name == pool && x.market != Market::Fixed)?;
        let mut limits = self.limits();
        if let Some(max) = change.max_nodes {
            limits.maxes[p] = max;
        }
        limits.headroom[p] = self.headroom_within(p, limits.maxes[p], change.ignore_cooldown);
        let state = |s: JobState| move |id: &&JobId| self.c.jobs.get(id.0 as usize).is_some_and(|j| j.state == s);
        let (blocked, walked): (Vec<JobId>, usize) = if self.last_settled {
            // Those a pass would have found blocked: not held by their team's quota or their waiting budget.
            let blocked = |id: &JobId| self.blocked_if_unreached(*id);
            let found: Vec<JobId> = self.queued_in_order(WHAT_IF_JOBS).into_iter().filter(blocked).collect();
            let n = found.len();
            (found, n)
        } else {
            let queued = state(JobState::Queued);
            let walk = self.last_blocked.iter().take(self.last_walked).filter(&queued).count();
            (self.last_blocked.iter().filter(queued).copied().collect(), walk)
        };
        let shadow: Vec<(JobId, Access)> =
            self.last_shadow.iter().filter(|(id, _)| state(JobState::Running)(&id)).copied().collect();
        let plan = self.plan_scale_out((&blocked, walked), &shadow, limits, &mut WakeAt::default());
        let launches = plan.launches.get(&p).map_or(Vec::new(), |types| {
            types.iter().map(|(&it, &n)| (self.cfg.instance_types[it].name.clone(), n)).collect()
        });
        let uses = |id: &&JobId, access: Access| {
            let j = &self.c.jobs[id.0 as usize];
            job_pools(&self.cfg, &self.pool_order[j.tier], access).any(|q| q == p)
                && self.cfg.pool_holds(p, j.spec.gpus_per_worker, j.spec.gpu_model.as_deref())
        };
        let may_use = blocked.iter().filter(|id| uses(id, Access::of(&self.c.jobs[id.0 as usize], self.now))).count()
            + shadow.iter().filter(|(id, access)| uses(&id, *access)).count();
        Some(WhatIf {
            pool: pool.to_string(),
            launches,
            not_grown: plan.not_grown.get(&p).copied(),
            jobs: blocked.len() + shadow.len(),
            may_use,
        })
    }
}
