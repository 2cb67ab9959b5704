//! Safety rules the engine's state must satisfy after every step; the simulator and the property tests call
//! [`Engine::check_invariants`] and fail loudly on the first broken rule.

use crate::model::{JobState, NodeState};
use crate::state::Engine;

impl Engine {
    /// Returns the first broken invariant, if any: GPUs bound within each node's size and matching its jobs;
    /// a running gang holds exactly its workers, a queued job holds nothing; every job is in the queue iff queued;
    /// pool node counts within max; team usage, and each pool's usage per tier, equal what the jobs hold.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut node_used = vec![0u32; self.c.nodes.len()];
        let mut team_used = vec![0u32; self.c.teams.len()];
        let mut tier_used = vec![vec![0u32; self.cfg.tiers.len()]; self.cfg.pools.len()];
        // The same, of interruptible jobs.
        let mut victim_used = tier_used.clone();
        let mut queued = 0usize;
        for j in &self.c.jobs {
            match j.state {
                JobState::Running => {
                    let (w, least, most) = (j.placement.len(), j.gang.workers as usize, j.gang.max_workers as usize);
                    if w < least || w > most {
                        return Err(format!("job {} runs {w} workers, outside {least}..={most}", j.id.0));
                    }
                    for &(n, g) in &j.placement {
                        let node = &self.c.nodes[n.0 as usize];
                        if node.state != NodeState::Ready && node.state != NodeState::Draining {
                            return Err(format!("job {} runs on node {} in state {:?}", j.id.0, n.0, node.state));
                        }
                        if g != j.spec.gpus_per_worker {
                            return Err(format!(
                                "job {} worker holds {g} GPUs, not {}",
                                j.id.0, j.spec.gpus_per_worker
                            ));
                        }
                        node_used[n.0 as usize] += g;
                        team_used[j.team] += g;
                        tier_used[node.pool][j.tier] += g;
                        victim_used[node.pool][j.tier] += if j.interruptible { g } else { 0 };
                    }
                }
                _ if !j.placement.is_empty() && j.state != JobState::Running => {
                    return Err(format!("job {} is {:?} but holds GPUs", j.id.0, j.state));
                }
                JobState::Queued => queued += 1,
                _ => {}
            }
        }
        if queued != self.queue.len() {
            return Err(format!("{queued} jobs are queued but the queue holds {}", self.queue.len()));
        }
        for n in &self.c.nodes {
            if n.used > n.gpus {
                return Err(format!("node {} has {} GPUs bound but holds {}", n.id.0, n.used, n.gpus));
            }
            if n.used != node_used[n.id.0 as usize] {
                return Err(format!(
                    "node {} counts {} GPUs bound, its jobs hold {}",
                    n.id.0, n.used, node_used[n.id.0 as usize]
                ));
            }
            if !n.alive() && n.used > 0 {
                return Err(format!("node {} is {:?} with GPUs bound", n.id.0, n.state));
            }
        }
        for (p, pool) in self.cfg.pools.iter().enumerate() {
            let alive = self.c.nodes.iter().filter(|n| n.pool == p && n.alive()).count() as u32;
            if alive != self.c.pools[p].alive {
                return Err(format!("pool {} counts {} live nodes, has {alive}", pool.name, self.c.pools[p].alive));
            }
            let st = &self.c.pools[p];
            for (what, counts, used) in
                [("", &st.tier_gpus, &tier_used[p]), (" interruptible", &st.victim_gpus, &victim_used[p])]
            {
                let counted = |t: usize| counts.get(t).copied().unwrap_or(0);
                if let Some(t) = (0..self.cfg.tiers.len()).find(|&t| counted(t) != used[t]) {
                    return Err(format!(
                        "pool {} counts {}{what} GPUs of tier {}, its jobs hold {}",
                        pool.name,
                        counted(t),
                        self.cfg.tiers[t].name,
                        used[t]
                    ));
                }
            }
            if pool.market != crate::Market::Fixed && alive > pool.max_nodes {
                return Err(format!("pool {} has {alive} nodes, max {}", pool.name, pool.max_nodes));
            }
        }
        for (t, team) in self.c.teams.iter().enumerate() {
            if team.used_gpus != team_used[t] {
                return Err(format!(
                    "team {} counts {} GPUs, its jobs hold {}",
                    team.name, team.used_gpus, team_used[t]
                ));
            }
            if let Some(q) = team.quota_gpus.filter(|&q| team.used_gpus > q) {
                return Err(format!("team {} holds {} GPUs over its quota {q}", team.name, team.used_gpus));
            }
        }
        Ok(())
    }
}
