//! Rebalance recommendations: a node the cloud says is at elevated risk of interruption takes no new work, and
//! its jobs move (checkpoint, stop, restart) once ready capacity elsewhere holds them; until then they ask the
//! autoscaler for that capacity (shadow demand in the markets they may use now). Make before break: a job does
//! not leave a running node for the queue while nothing can take it, and the interruption notice, if it comes
//! first, still applies. The node goes once it is empty.

use crate::access::{Access, Need};
use crate::engine::EventError;
use crate::event::{Action, DecisionKind, StopReason, job_subject};
use crate::model::{JobId, JobState, NodeId, NodeState};
use crate::schedule::find_placement;
use crate::state::{Engine, WakeAt};
use crate::time::Time;

/// How long the jobs of a node at risk wait for a replacement before the node returns to service.
const AT_RISK_FOR_MS: Time = 1_800_000;

impl Engine {
    /// Marks a ready node at risk: it drains (no new work, no scale-in or preemption candidate) and its jobs move
    /// as replacements become ready (see [`Engine::move_at_risk`]). Ignored for a node that is not ready.
    pub(crate) fn rebalance_recommendation(&mut self, node: NodeId) -> Result<(), EventError> {
        let n = self.c.nodes.get(node.0 as usize).ok_or(EventError::UnknownNode(node.0))?;
        // Slurm's nodes run Slurm's jobs, which Spillway cannot move: they keep working until a notice comes.
        if n.state != NodeState::Ready || n.held.is_some() {
            return Ok(());
        }
        let (pool, jobs) = (n.pool, n.jobs.len());
        self.c.drain(node);
        self.c.nodes[node.0 as usize].at_risk = true;
        self.at_risk.insert(node, (self.now, self.now));
        let name = self.cfg.pools[pool].name.clone();
        self.record(
            DecisionKind::Interruption,
            || format!("node:{}", node.0),
            "rebalance_recommendation",
            || format!("pool {name}: at risk of interruption; no new work, its {jobs} job(s) move once a replacement is ready"),
        );
        Ok(())
    }

    /// Returns the jobs on nodes at risk that move now (requeued: ready capacity elsewhere holds them) and those
    /// that want capacity bought to move to, with the markets they may use. Ends nodes at risk that are empty.
    pub(crate) fn move_at_risk(&mut self, wake: &mut WakeAt) -> (Vec<JobId>, Vec<(JobId, Access)>) {
        let (mut moves, mut shadow) = (Vec::new(), Vec::new());
        if self.at_risk.is_empty() {
            return (moves, shadow);
        }
        let now = self.now;
        let nodes: Vec<(NodeId, (Time, Time))> = self.at_risk.iter().map(|(&n, &t)| (n, t)).collect();
        let mut slots = Vec::new();
        for (node, (since, busy_until)) in nodes {
            let n = &self.c.nodes[node.0 as usize];
            if !n.alive() || !n.at_risk {
                self.at_risk.remove(&node);
                continue;
            }
            if !n.jobs.is_empty() && now >= since + AT_RISK_FOR_MS {
                self.back_in_service(node);
                continue;
            }
            if !n.jobs.is_empty() {
                wake.at(since + AT_RISK_FOR_MS);
            }
            if n.jobs.is_empty() {
                // Not while a job that left writes its checkpoint there (its process runs until then).
                if busy_until <= now {
                    self.end_at_risk(node);
                } else {
                    wake.at(busy_until);
                }
                continue;
            }
            for id in n.jobs.clone() {
                let j = &self.c.jobs[id.0 as usize];
                if j.state != JobState::Running || moves.contains(&id) || shadow.iter().any(|&(s, _)| s == id) {
                    continue;
                }
                let need = Need::of(j, now);
                let access = need.access;
                let order = &self.pool_order[need.tier];
                if find_placement(&mut self.c, &self.cfg, order, &need, &mut slots).is_some() {
                    moves.push(id);
                } else {
                    shadow.push((id, access));
                }
            }
        }
        for &id in &moves {
            self.record(
                DecisionKind::Fallback,
                || job_subject(id),
                "rebalance_move",
                || "its node is at risk of interruption and a replacement is ready: checkpoint and move".into(),
            );
            let left: Vec<NodeId> = self.c.jobs[id.0 as usize].placement.iter().map(|&(n, _)| n).collect();
            self.requeue(id, StopReason::Migrated);
            let until = self.c.jobs[id.0 as usize].not_before.unwrap_or(now);
            wake.at(until);
            for n in left {
                if let Some((_, t)) = self.at_risk.get_mut(&n) {
                    *t = (*t).max(until);
                }
            }
        }
        if !moves.is_empty() {
            // Their nodes may be empty now, and their GPUs elsewhere are what the next pass places them on.
            wake.at(now);
        }
        (moves, shadow)
    }

    /// Returns a node at risk whose jobs found no replacement in [`AT_RISK_FOR_MS`] to service (a pool at its max
    /// or quota, or a tier with no other pool, can leave them nowhere to go): drained for good, it would hold its
    /// GPUs idle while it lives. The interruption, if it comes, is handled as any.
    fn back_in_service(&mut self, node: NodeId) {
        self.at_risk.remove(&node);
        self.c.nodes[node.0 as usize].at_risk = false;
        self.c.undrain(node, self.now);
        let pool = self.c.nodes[node.0 as usize].pool;
        let name = self.cfg.pools[pool].name.clone();
        self.record(
            DecisionKind::Interruption,
            || format!("node:{}", node.0),
            "rebalance_expired",
            || {
                format!(
                    "pool {name}: no replacement for its jobs within {}; the node takes work again",
                    crate::time::fmt_ms(AT_RISK_FOR_MS)
                )
            },
        );
    }

    /// Terminates an empty node at risk (scale-in: nothing else may use it).
    fn end_at_risk(&mut self, node: NodeId) {
        self.at_risk.remove(&node);
        let pool = self.c.nodes[node.0 as usize].pool;
        self.c.node_end(node, NodeState::Terminated, self.now);
        self.actions.push_back(Action::Terminate { node });
        self.c.counters.scale_actions += 1;
        let name = self.cfg.pools[pool].name.clone();
        self.record(
            DecisionKind::ScaleIn,
            || format!("pool:{name}"),
            "rebalance_emptied",
            || format!("remove node {}: at risk of interruption and its jobs have moved", node.0),
        );
    }
}
