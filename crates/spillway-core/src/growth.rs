//! Why a cloud pool did not grow for the demand that asked it to, and what-if questions about a pool's limits.

use crate::time::Time;
use serde::Serialize;

/// Why a cloud pool bought less than the waiting demand asked of it in a decision pass. Carried into the
/// `scale_out_blocked` decisions, the pending detail of the jobs it left waiting, and what-if answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum NotGrown {
    /// The pool has its (scheduled) max of nodes or more (`nodes`, counting those launched in this pass; more
    /// when the max was lowered under it).
    AtMax { max_nodes: u32, nodes: u32 },
    /// The pool launched recently; it may launch again at `until`.
    Cooldown { until: Time },
    /// The step limit cut this pass's launch short; the rest may come when the cooldown ends at `until`.
    StepLimit { until: Time },
    /// Every instance type that would hold the job failed to launch lately; the first returns at `until`.
    BackedOff { until: Time },
    /// Every instance type that would hold the job has its share of the pool (`max_offering_share`).
    OfferingShare,
    /// No instance type of the pool holds a worker of the job (GPUs or model).
    NoFittingType,
    /// The account's quota (`[[quotas]]`, vCPUs) leaves no room for a type that would hold the job.
    Quota,
    /// The job's team has spent a budget with a hard cap (`[[budgets]]`): nothing is bought for its work.
    BudgetCap,
}

impl NotGrown {
    /// Returns the stable code of the reason (for decisions, the API and metrics).
    pub fn code(self) -> &'static str {
        match self {
            NotGrown::AtMax { .. } => "at_max",
            NotGrown::Cooldown { .. } => "cooldown",
            NotGrown::StepLimit { .. } => "step_limit",
            NotGrown::BackedOff { .. } => "backed_off",
            NotGrown::OfferingShare => "offering_share",
            NotGrown::NoFittingType => "no_fitting_type",
            NotGrown::Quota => "quota",
            NotGrown::BudgetCap => "budget_cap",
        }
    }

    /// Returns the reason for people; `now` turns times into "in N s".
    pub fn describe(self, now: Time) -> String {
        let s = |t: Time| crate::time::fmt_ms((t - now).max(0));
        match self {
            NotGrown::AtMax { max_nodes, nodes } if nodes > max_nodes => {
                format!("above its max: {nodes} nodes of {max_nodes}")
            }
            NotGrown::AtMax { max_nodes, .. } => format!("at its max of {max_nodes} nodes"),
            NotGrown::Cooldown { until } => format!("in its scale-out cooldown for {} more", s(until)),
            NotGrown::StepLimit { until } => format!("step limit reached; more after the cooldown, in {}", s(until)),
            NotGrown::BackedOff { until } => format!("its fitting instance types are backed off for {}", s(until)),
            NotGrown::OfferingShare => "its fitting instance types are at their share of the pool".into(),
            NotGrown::NoFittingType => "no instance type of the pool holds a worker".into(),
            NotGrown::Quota => "its fitting instance types are at the account's vCPU quota".into(),
            NotGrown::BudgetCap => "buys nothing for this team: it has spent a budget with a hard cap".into(),
        }
    }
}

/// A change to one pool's limits to ask a what-if about ([`crate::Engine::what_if`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolChange {
    /// The max nodes to assume (`None`: the pool's own, as schedule windows set it now).
    pub max_nodes: Option<u32>,
    /// Assume the pool is out of its scale-out cooldown (what it would buy once the cooldown ends).
    pub ignore_cooldown: bool,
}

/// What a pool would buy now for the jobs the last decision pass left waiting, under a [`PoolChange`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WhatIf {
    pub pool: String,
    /// Nodes it would launch, per instance type name, in the config's order of types.
    pub launches: Vec<(String, u32)>,
    /// Why it would still buy less than the demand asks, if it would.
    pub not_grown: Option<NotGrown>,
    /// Jobs the estimate looked at (waiting jobs and running jobs that want spot capacity to move to).
    pub jobs: usize,
    /// Of those, the jobs that may use this pool now (its tier, market and GPU model allow it): with none, no
    /// max makes it launch anything.
    pub may_use: usize,
}
