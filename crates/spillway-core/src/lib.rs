//! Spillway's functional core: the domain and config types, the scheduler, the autoscaler, the cost ledger and
//! the sans-I/O [`Engine`]. It reads no clock and no global RNG and does no I/O: time comes in as a value, and
//! decisions come out as [`Action`]s for a shell (the simulator or the daemon) to carry out.

mod access;
mod at_risk;
pub mod autoscale;
mod budget;
mod budget_place;
pub mod cluster;
pub mod config;
mod data_move;
mod elastic;
pub mod engine;
pub mod event;
pub mod explain;
mod external;
pub mod growth;
mod invariants;
pub mod ledger;
pub mod model;
mod place;
mod policies;
mod preempt;
mod prices;
pub mod queue;
mod quota;
mod rebalance;
mod scale;
mod scale_out;
mod schedule;
mod shape;
mod spec_check;
mod spot_hop;
mod state;
pub mod time;
pub mod wait_budget;
mod what_if;
mod window;

pub use budget::BudgetStatus;
pub use config::{Config, ConfigError, GangRoom, Market};
pub use engine::{EventError, SubmitError, check_new_spec, check_spec};
pub use event::{Action, BudgetAlert, Decision, DecisionKind, Event, LaunchError, ReturnWhy, StopReason};
pub use growth::{NotGrown, PoolChange, WhatIf};
pub use model::{Exit, Hold, Job, JobData, JobId, JobSpec, JobState, Label, Node, NodeId, NodeState, PendingReason};
pub use state::Engine;
pub use time::Time;
