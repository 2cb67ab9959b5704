//! Preemption: which running jobs of strictly lower, preemptible tiers a blocked job may stop, and when it may
//! start to (its tier's queue-wait SLO minus the time new capacity would take).

use crate::access::{Access, Need, job_pools};
use crate::cluster::Cluster;
use crate::config::{Config, Market, model_fits};
use crate::model::{JobId, JobState, NodeId};
use crate::time::{Time, secs};

/// Picks nodes for every worker of `job` by stopping jobs of strictly lower, preemptible tiers, choosing the
/// nodes whose victims lose the least work: work lost by rigid jobs first, then by elastic jobs running above
/// their fewest workers (which restart narrower at once), so a node where only such elastic jobs stop comes
/// before one where a rigid job loses work. Returns (node per worker, victims), or `None`.
pub(crate) fn find_victims(
    c: &Cluster,
    cfg: &Config,
    order: &[usize],
    job: &Need,
    now: Time,
) -> Option<(Vec<NodeId>, Vec<JobId>)> {
    let (g, w) = (job.g, job.w as usize);
    let want = job.model.as_deref();
    let prio = cfg.tiers[job.tier].priority;
    // One buffer for every node's candidates (a pass may look at hundreds of nodes for each of 16 jobs).
    let mut cands: Vec<Victim> = Vec::new();
    let tiers = &cfg.tiers;
    let lower = |(t, &gpus): (usize, &u32)| gpus > 0 && tiers[t].priority > prio && tiers[t].preemptible;
    for pool in job_pools(cfg, order, job.access) {
        // Without a job to stop here a pool gives nothing, whatever room its nodes have.
        if !c.pools[pool].victim_gpus.iter().enumerate().any(lower) {
            continue;
        }
        // (lost GPU-ms, victims, node) per candidate node; its victims are found again for the nodes chosen. A
        // node with room already comes before one whose victims lose nothing (at an estimated checkpoint): which
        // of them is chosen, and so whether anything is stopped, must not hang on the instant of the pass.
        let mut options: Vec<(Lost, usize, NodeId)> = Vec::new();
        let nodes = c.pools[pool].ready.iter().map(|n| &c.nodes[n.0 as usize]).filter(|n| n.gpus >= g);
        for node in nodes.filter(|n| model_fits(want, &n.gpu_model)).take(cfg.policy.preemption_node_limit) {
            if let Some((cost, victims)) = node_victims(c, cfg, prio, node, g, now, &mut cands)
                && (victims > 0 || node.free() >= g)
            {
                options.push((cost, victims, node.id));
            }
        }
        if options.len() >= w {
            options.sort();
            let chosen = &options[..w];
            let mut victims: Vec<JobId> = Vec::new();
            for &(.., n) in chosen {
                node_victims(c, cfg, prio, &c.nodes[n.0 as usize], g, now, &mut cands);
                victims.extend(cands.iter().map(|&(_, v, _)| v));
            }
            victims.sort();
            victims.dedup();
            if victims.is_empty() {
                continue;
            }
            return Some((chosen.iter().map(|&(.., n)| n).collect(), victims));
        }
    }
    None
}

/// GPU-ms of work lost: (by rigid jobs and elastic jobs at their fewest workers, by elastic jobs above it).
type Lost = (i128, i128);
/// A candidate victim on a node: (whether it is rigid or at its fewest workers, work it loses), the job, its
/// GPUs there.
type Victim = ((bool, i128), JobId, u32);

/// Finds the jobs to stop on `node` so it has `g` free GPUs: running jobs of tiers below priority `prio` that
/// are preemptible and interruptible; elastic jobs running above their fewest workers first (they restart
/// narrower at once, see `elastic`), then those that lose the least work. Returns (work lost in GPU-ms, how
/// many), leaving the victims in `cands`; `None` when stopping every candidate does not free enough. A node
/// with `g` GPUs free already needs none.
fn node_victims(
    c: &Cluster,
    cfg: &Config,
    prio: u32,
    node: &crate::model::Node,
    g: u32,
    now: Time,
    cands: &mut Vec<Victim>,
) -> Option<(Lost, usize)> {
    cands.clear();
    if node.free() >= g {
        return Some(((0, 0), 0));
    }
    cands.extend(
        node.jobs
            .iter()
            .map(|&v| &c.jobs[v.0 as usize])
            .filter(|v| {
                let t = &cfg.tiers[v.tier];
                // Jobs bound earlier in this pass are not running yet and are never victims.
                v.state == JobState::Running && t.priority > prio && t.preemptible && v.interruptible
            })
            .map(|v| {
                let held: u32 = v.placement.iter().filter(|(n, _)| *n == node.id).map(|(_, x)| x).sum();
                let gpus = v.held_gpus();
                let rigid = v.placement.len() <= v.gang.workers as usize;
                ((rigid, v.unsaved_work_ms(now) as i128 * gpus as i128), v.id, held)
            }),
    );
    cands.sort();
    let (mut free, mut cost, mut taken) = (node.free(), (0i128, 0i128), 0usize);
    for &((rigid, lost), _, held) in cands.iter() {
        if free >= g {
            break;
        }
        free += held;
        if rigid {
            cost.0 += lost;
        } else {
            cost.1 += lost;
        }
        taken += 1;
    }
    cands.truncate(taken);
    (free >= g).then_some((cost, taken))
}

/// Returns how long after entering the queue a job of `tier` with `access` may start preempting (its SLO minus
/// the time new capacity would take), or `None` when its tier has nothing to preempt. The same for every job of
/// the tier and access in one pass (pool sizes do not change within it).
pub(crate) fn preemption_offset(
    cfg: &Config,
    c: &Cluster,
    order: &[usize],
    tier: usize,
    access: Access,
) -> Option<Time> {
    let prio = cfg.tiers[tier].priority;
    if !cfg.tiers.iter().any(|t| t.priority > prio && t.preemptible) {
        return None;
    }
    let slo = secs(cfg.tiers[tier].queue_wait_slo_s);
    // The soonest a new node could hold it: the boot latency of an allowed cloud pool with room to grow.
    let boot = job_pools(cfg, order, access)
        .filter(|&p| cfg.pools[p].market != Market::Fixed && c.pools[p].alive < cfg.pools[p].max_nodes)
        .map(|p| secs(cfg.pools[p].boot_latency_s))
        .min();
    // With no pool able to grow, capacity can only come from jobs ending: wait for that until the SLO itself.
    Some(match boot {
        Some(b) => slo - b,
        None => slo,
    })
}
