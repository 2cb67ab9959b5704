//! Slurm cloud bursting: Spillway as the brain behind Slurm's power saving. Slurm keeps its queue and runs its
//! jobs; when it wants a `State=CLOUD` node it calls `ResumeProgram` (`spillway slurm resume HOSTLIST`), and the
//! daemon buys the node by the tier of the job that asked ([`spillway_core::Event::NodeRequested`]); when it
//! suspends one, the daemon gives it back. What the cloud does to a node (a spot interruption, a lost instance)
//! goes back to Slurm: the node's jobs are requeued and the node is powered down, so Slurm reschedules them at
//! once. A periodic sync with `scontrol` heals whatever a restart or a lost call left behind.
//!
//! - [`options`]: the `[slurm]` config table (node sets and their pools, partitions to tiers).
//! - [`hostlist`]: Slurm's hostlist syntax.
//! - [`client`]: the `scontrol` and `squeue` calls and the parsing of what they print.
//! - [`sync`]: what the daemon state does with a resume, a suspend and Slurm's view (no I/O).
//! - [`api`]: `POST /v1/slurm/resume` and `/v1/slurm/suspend`, what `spillway slurm` calls.
//! - [`shell`]: the daemon's side: the commands run outside the state lock, and the log lines.

pub mod api;
pub mod client;
pub mod hostlist;
pub mod options;
pub mod shell;
pub mod sync;

pub use client::{SlurmClient, SlurmJob, SlurmNode};
pub use options::SlurmOptions;
pub use shell::{Slurm, SlurmError};
