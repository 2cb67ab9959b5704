//! The Spillway node agent: registers with the daemon by heartbeating, runs the workers the daemon assigns as
//! process groups under the job contract, stops them on order, and reports exits, checkpoints and GPU
//! utilization. The agent pulls; the daemon never connects to it.
//!
//! Modules: [`agent`] (the heartbeat loop and when to give up), [`client`] (the HTTP call), [`runner`] (the
//! processes), [`spawn`] (the job contract), [`gpus`] (virtual GPU bookkeeping), [`checkpoint`], [`signals`],
//! [`nvml`].

// The agent is an imperative shell around processes and the network: heartbeat periods, stop graces and
// checkpoint times need the real clock. The workspace's clock ban is for the functional core.
#![allow(clippy::disallowed_methods)]

pub mod agent;
pub mod checkpoint;
pub mod client;
pub mod gpus;
pub mod nvml;
pub mod runner;
pub mod signals;
pub mod spawn;

pub use runner::{PollReport, Runner, SPAWN_FAILED_CODE, StartOutcome};

use std::path::PathBuf;

/// How to run the agent (the `spillway agent` subcommand's flags).
#[derive(Debug, Clone)]
pub struct AgentArgs {
    /// The daemon's base URL, e.g. `http://127.0.0.1:7878`.
    pub server: String,
    pub node: u32,
    /// The node token, sent as `Authorization: Bearer <token>`.
    pub token: String,
    /// Virtual GPUs of this node: indices `0..gpus`.
    pub gpus: u32,
    /// Agent scratch space; relative checkpoint and log paths of assignments are taken under it.
    pub data_dir: PathBuf,
    /// Sleep this long before the first heartbeat (injected boot latency).
    pub boot_delay_s: f64,
    /// Heartbeat period in milliseconds (default 500).
    pub heartbeat_ms: u64,
}

/// Runs the agent until the daemon answers 410 Gone (Ok), the agent gets SIGTERM or SIGINT (Ok, after stopping its
/// workers), or it gives up: the daemon unreachable for 600 s or refusing the token for 60 s (Err). Its workers are
/// dead whichever way it returns.
pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    agent::run_loop(&args, agent::Limits::default())
}
