//! What a blocked gang keeps from the jobs planned after it: the booting and planned nodes it partly fits on,
//! where the next scheduling pass will hold them for it once they are ready.
//!
//! The walk holds ready nodes back for a blocked gang (with backfill, up to the reservation cap, in the first
//! pool of its order with a free node that holds a worker), and the planner hides those from the jobs behind it
//! ([`Planner::hold_back`]). The nodes booting for a gang that cannot start are held the same way once ready. A
//! job behind it counted on them while they boot would be told it waits for nodes, and then, once they are
//! ready, that it waits for capacity, at every launch for the gang. So the planner keeps them for the gang
//! where the walk will hold them: only for a gang the walk reserved for, only in the pool it will hold in,
//! only where that pool's max cannot hold the rest of the gang (else the gang buys there once the pool may),
//! and only where the gang finds no room anywhere (a gang that counts on or buys nodes elsewhere starts there).

use super::Planner;
use crate::access::{Access, job_pools};
use crate::config::Market;
use crate::model::{JobId, NodeId};
use crate::state::Engine;

impl Planner<'_> {
    /// Takes the nodes the scheduling pass held back for job `id` out of the forks, with what the job left free
    /// there: the next pass holds them for it again, so no job after it could start there (it would be told it
    /// waits for nodes it will not get, and buy none).
    pub(super) fn hold_back(&mut self, id: JobId) {
        for &(_, p, n) in holds_of(self.e, id) {
            if self.forks.get_mut(p).is_some_and(|fork| fork.hide(n)) {
                // As if a job took them: a gang remembered to have found no room claims other nodes now.
                self.taken[p] += 1;
            }
        }
    }

    /// Notes whether job `id`, one of the walk's blocked jobs, is one the walk held nodes back for (see
    /// [`crate::state::Reserving`]); call once per such job, in walk order.
    pub(super) fn note_reserved(&mut self, id: JobId) {
        let (e, i) = (self.e, self.walked);
        let r = &e.reserving;
        self.walked += 1;
        self.reserved = if i < r.blocked {
            r.jobs.binary_search(&id).is_ok()
        } else {
            let job = &e.c.jobs[id.0 as usize];
            let (gang, checkpointing) = (&job.gang, job.not_before.is_some_and(|t| t > e.now));
            // A job still checkpointing holds nodes for its next attempt with or without backfill.
            let holds = checkpointing || (e.cfg.policy.backfill && (gang.workers > 1 || gang.gpus_per_worker > 1));
            self.reserving_past_quiet += usize::from(holds);
            holds && r.reservations + self.reserving_past_quiet <= e.cfg.policy.max_reservations
        };
    }

    /// Notes that job `id`, a gang of `w` workers that found no room in pool `p` whose max cannot hold the rest
    /// of it, keeps there what it partly placed on (the slots of its last placement), should it find no room
    /// anywhere.
    pub(super) fn note_keep(&mut self, id: JobId, p: usize, w: u32) {
        // Without backfill the walk holds nothing for a gang beyond its checkpoint; one held to spot tries other
        // pools once spot cannot grow or its fallback time comes, so where it waits may change at once.
        let held = self.e.cfg.policy.backfill && self.reserved && !self.held_to_spot;
        if w < 2 || !self.walk_order || !held || self.keep.is_some() || self.hold_pool(id) != Some(p) {
            return;
        }
        self.keep = Some(p);
        self.kept.clone_from(&self.slots);
    }

    /// Takes the booting and planned slots noted by [`Planner::note_keep`] out of their pool's fork.
    pub(super) fn keep_for_gang(&mut self) {
        let Some(p) = self.keep.take() else { return };
        let fork = &mut self.forks[p];
        let hid = self.kept.iter().fold(0, |n, &(slot, free)| n + u64::from(fork.hide_unready(slot, free)));
        if hid > 0 {
            // As if a job took them: a gang remembered to have found no room claims other nodes now.
            self.taken[p] += hid;
            self.hid = true;
        }
    }

    /// Returns the pool where the walk holds nodes for job `id` once the nodes booting now are ready: where it
    /// holds ready nodes for it now (hidden already, see [`Planner::hold_back`]; the next pass holds elsewhere
    /// only once a node booting in an earlier pool is ready, and frees these then), else the first of its order
    /// with a free node that holds a worker, or (in a cloud pool) a node booting or planned that would.
    fn hold_pool(&self, id: JobId) -> Option<usize> {
        let e = self.e;
        if let Some(&(_, p, _)) = holds_of(self.e, id).first() {
            return Some(p);
        }
        let job = &e.c.jobs[id.0 as usize];
        let (g, model) = (job.spec.gpus_per_worker, job.spec.gpu_model.as_deref());
        let holds = |n: &NodeId| crate::schedule::holds_worker(&e.c.nodes[n.0 as usize], g, model);
        let free = |p: usize| e.c.free[p].iter().any(|(_, n)| holds(n));
        let booting = |p: usize| e.c.pools[p].requested.iter().any(holds);
        let planned = |p: usize| {
            let mut types = self.out.launches.get(&p).into_iter().flat_map(|m| m.keys());
            types.any(|&it| e.cfg.instance_types[it].holds(g, model))
        };
        let cloud = |p: usize| e.cfg.pools[p].market != Market::Fixed;
        let order = &e.pool_order[job.tier];
        job_pools(&e.cfg, order, Access::of(job, e.now)).find(|&p| free(p) || (cloud(p) && (booting(p) || planned(p))))
    }
}

/// Returns the nodes the last scheduling pass held back for job `id` (`Engine::holds`), as (job, pool,
/// node).
fn holds_of(e: &Engine, id: JobId) -> &[(JobId, usize, NodeId)] {
    let from = e.holds.partition_point(|h| h.0 < id);
    let to = from + e.holds[from..].partition_point(|h| h.0 == id);
    &e.holds[from..to]
}
