//! A job's whole story, attempt by attempt: when each started and where (its nodes and GPUs), when and why it
//! ended (preempted, interrupted, its node lost, cancelled, or the job's own exit with its code or signal), and what
//! its GPUs cost. Built from the engine's actions and the exits it accepted, so a replay rebuilds it exactly.

use spillway_api::AttemptView;
use spillway_core::{Exit, JobId, NodeId, StopReason, Time};
use std::collections::BTreeMap;

/// One attempt of a job as the log tells it.
#[derive(Debug, Clone, PartialEq)]
struct Attempt {
    started_at: Time,
    /// Node and GPUs per worker.
    placement: Vec<(NodeId, u32)>,
    ended_at: Option<Time>,
    /// Why it ended: a stop reason's words, or the job's own end (`succeeded`, `failed`).
    end: Option<String>,
    exit: Option<Exit>,
}

/// Every attempt of every job, by (job, attempt number).
#[derive(Debug, Clone, Default)]
pub struct Attempts {
    by_job: BTreeMap<(u32, u32), Attempt>,
}

impl Attempts {
    /// Notes that `attempt` of `job` started at `now` on `placement`.
    pub fn started(&mut self, now: Time, job: JobId, attempt: u32, placement: &[(NodeId, u32)]) {
        let a = Attempt { started_at: now, placement: placement.to_vec(), ended_at: None, end: None, exit: None };
        self.by_job.insert((job.0, attempt), a);
    }

    /// Notes that the engine stopped `attempt` of `job` at `now` for `reason` (it goes back to the queue unless
    /// it was cancelled).
    pub fn stopped(&mut self, now: Time, job: JobId, attempt: u32, reason: &StopReason) {
        if let Some(a) = self.by_job.get_mut(&(job.0, attempt)).filter(|a| a.ended_at.is_none()) {
            a.ended_at = Some(now);
            a.end = Some(reason.to_string());
        }
    }

    /// Notes that `attempt` of `job` ended the job at `now` by itself, successfully or not, with `exit`.
    pub fn exited(&mut self, now: Time, job: JobId, attempt: u32, success: bool, exit: Option<Exit>) {
        if let Some(a) = self.by_job.get_mut(&(job.0, attempt)).filter(|a| a.ended_at.is_none()) {
            a.ended_at = Some(now);
            a.end = Some(if success { "succeeded" } else { "failed" }.into());
            a.exit = exit;
        }
    }

    /// Returns the node that `rank` of `attempt` of `job` was placed on, if that attempt started.
    pub fn node_of(&self, job: u32, attempt: u32, rank: u32) -> Option<NodeId> {
        self.by_job.get(&(job, attempt)).and_then(|a| a.placement.get(rank as usize)).map(|&(n, _)| n)
    }

    /// Returns `job`'s attempts in order, at `now` (a running attempt's cost runs to now), pricing each node
    /// with `node_price` (USD per hour of the whole node, and its GPUs).
    pub fn views(&self, job: JobId, now: Time, node_price: impl Fn(NodeId) -> (f64, u32)) -> Vec<AttemptView> {
        self.by_job
            .range((job.0, 0)..=(job.0, u32::MAX))
            .map(|(&(_, n), a)| {
                let end = a.ended_at.unwrap_or(now);
                let hours = (end - a.started_at).max(0) as f64 / 3_600_000.0;
                let cost: f64 = a
                    .placement
                    .iter()
                    .map(|&(node, gpus)| {
                        let (usd, node_gpus) = node_price(node);
                        usd * hours * gpus as f64 / node_gpus.max(1) as f64
                    })
                    .sum();
                let mut nodes: Vec<u32> = a.placement.iter().map(|(n, _)| n.0).collect();
                nodes.dedup();
                let (exit_code, exit_signal) = Exit::parts(a.exit);
                AttemptView {
                    attempt: n,
                    nodes,
                    started_at: a.started_at as f64 / 1000.0,
                    ended_at: a.ended_at.map(|t| t as f64 / 1000.0),
                    end: a.end.clone(),
                    exit_code,
                    exit_signal,
                    cost_usd: cost,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_tell_where_each_ran_how_it_ended_and_what_it_cost() {
        let mut a = Attempts::default();
        let (job, node) = (JobId(4), NodeId(2));
        a.started(0, job, 1, &[(node, 4), (node, 4)]);
        a.stopped(1_800_000, job, 1, &StopReason::NodeLost);
        a.started(2_000_000, job, 2, &[(NodeId(3), 8)]);
        // A late exit of the stopped attempt changes nothing.
        a.exited(2_100_000, job, 1, true, Some(Exit::Code(0)));
        a.exited(5_600_000, job, 2, false, Some(Exit::Code(3)));
        let v = a.views(job, 9_000_000, |_| (16.0, 8));
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].attempt, v[0].nodes.clone(), v[0].end.as_deref()), (1, vec![2], Some("its node was lost")));
        assert!((v[0].cost_usd - 8.0).abs() < 1e-9, "half an hour of a whole 16 $/h node: {}", v[0].cost_usd);
        assert_eq!((v[1].end.as_deref(), v[1].exit_code, v[1].ended_at), (Some("failed"), Some(3), Some(5600.0)));
        assert!((v[1].cost_usd - 16.0).abs() < 1e-9);
        assert!(a.views(JobId(5), 0, |_| (1.0, 1)).is_empty());
    }
}
