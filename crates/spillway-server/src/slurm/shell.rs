//! The daemon's Slurm calls: it runs `scontrol` and `squeue` outside the state lock and hands what they say to
//! [`super::sync`]; every outcome is logged on the daemon's stderr with the node's name, so Slurm's admin can
//! follow each resume and suspend in one place.

use super::hostlist;
use super::sync::Outcome;
use super::{SlurmClient, SlurmOptions};
use crate::daemon::Shared;
use spillway_core::Config;
use std::sync::Arc;

/// Slurm as the daemon sees it: the `[slurm]` table and the client for its commands.
pub struct Slurm {
    pub opts: SlurmOptions,
    pub client: SlurmClient,
}

impl Slurm {
    /// Returns the Slurm integration the config asks for, or `None` without a `[slurm]` table.
    pub fn from_config(file: &str, text: &str, cfg: &Config) -> Result<Option<Slurm>, String> {
        let Some(opts) = SlurmOptions::from_config(file, text, cfg)? else { return Ok(None) };
        let client = SlurmClient::new(opts.bin_dir.clone(), opts.conf.clone());
        Ok(Some(Slurm { opts, client }))
    }
}

/// Why a resume or suspend was refused as a whole (nothing changed).
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("this daemon has no [slurm] table")]
    NotConfigured,
    #[error("{0}")]
    Bad(String),
    #[error("{0}")]
    Stopped(String),
}

impl Shared {
    /// Expands `hosts` and checks that Slurm node set lists every name; refuses the whole list otherwise.
    fn slurm_names(&self, hosts: &str) -> Result<(&Slurm, Vec<String>), SlurmError> {
        let slurm = self.slurm.as_ref().ok_or(SlurmError::NotConfigured)?;
        let names = hostlist::expand(hosts).map_err(|e| SlurmError::Bad(e.to_string()))?;
        let known = slurm.opts.node_names();
        let unknown: Vec<&str> = names.iter().filter(|n| !known.contains_key(*n)).map(String::as_str).collect();
        if !unknown.is_empty() {
            let shown = unknown.iter().take(10).copied().collect::<Vec<_>>().join(", ");
            return Err(SlurmError::Bad(format!(
                "hostlist `{}`: {} not in any [[slurm.nodes]] set: {shown}; nothing was done",
                hostlist::shown(hosts),
                if unknown.len() == 1 { "one name is".to_string() } else { format!("{} names are", unknown.len()) }
            )));
        }
        Ok((slurm, names))
    }

    /// `ResumeProgram`: requests a node for each name of `hosts`, by the tier of the job Slurm allocated it to.
    pub fn slurm_resume(self: &Arc<Self>, hosts: &str) -> Result<Vec<Outcome>, SlurmError> {
        let (slurm, names) = self.slurm_names(hosts).inspect_err(|e| eprintln!("spillway: slurm resume: {e}"))?;
        // Without squeue the nodes still come up, of their node sets' tiers.
        let jobs = slurm.client.jobs().unwrap_or_else(|e| {
            eprintln!("spillway: slurm resume {}: reading the queue: {e}", hostlist::shown(hosts));
            Vec::new()
        });
        let mut st = self.state();
        let out = st.slurm_resume(self.now(), &slurm.opts, &names, &jobs);
        self.check_fatal(&st);
        drop(st);
        self.flush();
        let out = out.map_err(|e| SlurmError::Stopped(e.to_string()))?;
        log_outcomes("resume", &out);
        Ok(out)
    }

    /// `SuspendProgram`: releases the node of each name of `hosts`.
    pub fn slurm_suspend(self: &Arc<Self>, hosts: &str) -> Result<Vec<Outcome>, SlurmError> {
        let (_, names) = self.slurm_names(hosts).inspect_err(|e| eprintln!("spillway: slurm suspend: {e}"))?;
        let mut st = self.state();
        let out = st.slurm_suspend(self.now(), &names);
        self.check_fatal(&st);
        drop(st);
        self.flush();
        let out = out.map_err(|e| SlurmError::Stopped(e.to_string()))?;
        log_outcomes("suspend", &out);
        Ok(out)
    }

    /// One sync with Slurm's view of its nodes (see [`crate::state::State::slurm_sync`]).
    pub fn slurm_sync(self: &Arc<Self>) {
        let Some(slurm) = &self.slurm else { return };
        let view = slurm.client.nodes().and_then(|n| slurm.client.jobs().map(|j| (n, j)));
        let mut st = self.state();
        match view {
            Ok((nodes, jobs)) => {
                if let Err(e) = st.slurm_sync(self.now(), &slurm.opts, &nodes, &jobs) {
                    eprintln!("spillway: slurm sync: {e}");
                }
            }
            // Nothing is judged on a sync that could not ask Slurm: its nodes keep running.
            Err(e) => eprintln!("spillway: slurm sync: {e}"),
        }
        self.check_fatal(&st);
        drop(st);
        self.flush();
    }

    /// Hands node `name` back to Slurm (requeue its jobs, power it down) with `reason`.
    pub(crate) fn slurm_hand_back(&self, name: &str, reason: &str) {
        let Some(slurm) = &self.slurm else {
            eprintln!("spillway: node {name} should go back to Slurm ({reason}), but there is no [slurm] table");
            return;
        };
        match slurm.client.hand_back(name, reason) {
            Ok(()) => eprintln!("spillway: slurm: handed {name} back to Slurm: {reason}"),
            Err(e) => eprintln!("spillway: slurm: handing {name} back ({reason}): {e}"),
        }
    }
}

/// Logs what became of each name of a request.
fn log_outcomes(verb: &str, out: &[Outcome]) {
    for (name, r) in out {
        match r {
            Ok(node) => eprintln!("spillway: slurm {verb} {name}: node {node}"),
            Err(e) => eprintln!("spillway: slurm {verb} {name}: nothing done: {e}"),
        }
    }
}
