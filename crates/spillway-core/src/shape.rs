//! Job shapes, and the shapes a decision pass already found no room for.
//!
//! Within one pass capacity only shrinks (jobs bind GPUs, blocked jobs hold nodes back, scale-out consumes the
//! nodes it counts on) until something frees GPUs (a preemption releases its victims) or adds nodes (scale-out
//! plans a launch). So once a job of some shape found no placement, every later job of the same shape finds none
//! either until then: the pass asks [`Failed`] instead of searching again, which makes its cost per blocked job a
//! comparison instead of a walk over the nodes. Results are exactly those of searching every time.

use crate::access::Access;
use crate::model::Job;

/// Most shapes one memo keeps: a queue of thousands of distinct shapes (a hostile one) degrades to searching
/// for each job, never to a long scan of the memo.
const MAX_SHAPES: usize = 32;

/// What a search for room reads of a job: its gang (GPUs per worker and GPU model as the queue's kind number,
/// workers), the markets it may use now and its tier (which pools, in which order, and which jobs are lower),
/// packed into one number. `extra` is a caller's own part of the key (scale-out: whether the job is spot demand
/// ahead of a move, and whether it is still before its spot fallback).
pub(crate) type Shape = u128;

/// Returns a job's shape: kind and workers 32 bits each, the tier 48 (an index into the config's tiers),
/// access 2 and `extra` 8.
fn key(job: &Job, access: Access, extra: u8) -> Shape {
    key_of((job.gang.kind, job.gang.workers, job.tier), access, extra)
}

/// Returns the shape of a job of gang kind, workers and tier `gang` (see `key`).
pub(crate) fn key_of((kind, workers, tier): (u32, u32, usize), access: Access, extra: u8) -> Shape {
    let tier = (tier as u128) & ((1 << 48) - 1);
    let bits = u128::from(access.spot) | u128::from(access.on_demand) << 1 | u128::from(extra) << 2;
    u128::from(kind) | u128::from(workers) << 32 | tier << 64 | bits << 112
}

/// The shapes that found no room since the capacity they could use last grew, each with a value the caller
/// keeps for it (what it decided for the shape, to repeat for the jobs that follow).
#[derive(Debug, Default)]
pub(crate) struct Failed<V = ()> {
    shapes: Vec<(Shape, V)>,
}

impl<V: Copy> Failed<V> {
    /// Returns what was kept for `job`'s shape, when a job of that shape found no room.
    pub(crate) fn get(&self, job: &Job, access: Access, extra: u8) -> Option<V> {
        let key = key(job, access, extra);
        self.shapes.iter().find(|&&(s, _)| s == key).map(|&(_, v)| v)
    }

    /// Returns what was kept for shape `shape` (see [`key_of`]), when a job of that shape found no room.
    pub(crate) fn get_shape(&self, shape: Shape) -> Option<V> {
        self.shapes.iter().find(|&&(s, _)| s == shape).map(|&(_, v)| v)
    }

    /// Notes that `job` found no room, with `value` (replacing what was kept for its shape; ignored once the
    /// memo is full).
    pub(crate) fn insert(&mut self, job: &Job, access: Access, extra: u8, value: V) {
        let key = key(job, access, extra);
        if let Some(kept) = self.shapes.iter_mut().find(|&&mut (s, _)| s == key) {
            kept.1 = value;
        } else if self.shapes.len() < MAX_SHAPES {
            self.shapes.push((key, value));
        }
    }

    /// Forgets every shape: capacity grew.
    pub(crate) fn clear(&mut self) {
        self.shapes.clear();
    }
}

impl Failed<()> {
    /// Returns whether a job of `job`'s shape found no room.
    pub(crate) fn contains(&self, job: &Job, access: Access) -> bool {
        self.get(job, access, 0).is_some()
    }
}
