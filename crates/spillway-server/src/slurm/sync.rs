//! What the daemon state does with Slurm: a resume becomes a node request with the tier and team of the job
//! that asked, a suspend a release, and each sync with Slurm's view of its nodes stands in for agent heartbeats
//! (a node is alive while its slurmd answers Slurm) and heals what a restart or a lost call left behind: a node
//! Slurm powered down is released, a node Slurm is powering up with nothing behind it (or with a machine that was
//! up before, whose suspend was missed) is requested, and a node Slurm has up with nothing behind it (a hand-back
//! that failed) goes back to Slurm again. No I/O: the
//! daemon runs the commands and hands their results in.

use super::{SlurmJob, SlurmNode, SlurmOptions};
use crate::state::{ApplyError, Effect, State};
use crate::store::Entry;
use spillway_core::{Event, NodeId, NodeState, Time};
use std::collections::BTreeMap;

/// After a node went back to Slurm, how long a sync leaves it alone while Slurm powers it down (so a node that
/// cannot be launched is not asked for again at once by the sync itself).
pub const RETURN_QUIET_MS: Time = 60_000;

/// What became of one name of a request: the engine's node for it, or why nothing changed.
pub type Outcome = (String, Result<u32, String>);

impl State {
    /// Takes Slurm's resume of `names` (each one of `opts`' nodes): each becomes a node request of the tier and
    /// team of the job Slurm allocated it to (`jobs`, from `squeue`), or of its node set when none is found. A
    /// name the engine refuses (already up) changes nothing; only a store failure is an error.
    pub fn slurm_resume(
        &mut self,
        now: Time,
        opts: &SlurmOptions,
        names: &[String],
        jobs: &[SlurmJob],
    ) -> Result<Vec<Outcome>, ApplyError> {
        let mut out = Vec::new();
        for name in names {
            let event = self.request_for(opts, name, jobs);
            let r = self.try_event(now, event)?.and_then(|()| match self.engine.held_node(name) {
                Some(n) => Ok(n.0),
                // Handed straight back: no offering could be launched (the reason went to Slurm too).
                None => Err(self.slurm_returned.get(name).map_or_else(String::new, |(_, why)| why.clone())),
            });
            out.push((name.clone(), r));
        }
        Ok(out)
    }

    /// Takes Slurm's suspend of `names`: each live node is released (terminated); a name with none changes
    /// nothing.
    pub fn slurm_suspend(&mut self, now: Time, names: &[String]) -> Result<Vec<Outcome>, ApplyError> {
        let mut out = Vec::new();
        for name in names {
            let node = self.engine.held_node(name).map(|n| n.0);
            let r = self.try_event(now, Event::NodeReleased { name: name.clone() })?;
            out.push((name.clone(), r.and(node.ok_or_else(|| "no live node".to_string()))));
        }
        Ok(out)
    }

    /// Applies Slurm's view of its nodes (`nodes`, from `scontrol`) and jobs: answering nodes count as seen (and
    /// a launched one becomes ready), nodes Slurm powered down are released, and nodes Slurm is powering up with
    /// no node behind them are requested.
    pub fn slurm_sync(
        &mut self,
        now: Time,
        opts: &SlurmOptions,
        nodes: &BTreeMap<String, SlurmNode>,
        jobs: &[SlurmJob],
    ) -> Result<(), ApplyError> {
        for name in opts.node_names().keys() {
            let Some(sn) = nodes.get(name) else { continue };
            match self.engine.held_node(name) {
                Some(id) if sn.powered_off() => {
                    eprintln!("spillway: slurm: {name} is powered down in Slurm; releasing node {}", id.0);
                    self.try_event(now, Event::NodeReleased { name: name.clone() })?.ok();
                }
                // Up before, and Slurm powers it up again: Slurm suspended it (a suspend this daemon missed) and
                // wants a fresh boot, which the old machine cannot give it (slurmctld ignores a node that booted
                // before it asked). The old one goes, a new one comes.
                Some(id) if sn.powering_up() && self.node_state(id.0) != Some(NodeState::Requested) => {
                    eprintln!("spillway: slurm: {name} is powering up again; replacing node {}", id.0);
                    if self.try_event(now, Event::NodeReleased { name: name.clone() })?.is_ok() {
                        let event = self.request_for(opts, name, jobs);
                        self.try_event(now, event)?.ok();
                    }
                }
                Some(id) if sn.responding() => {
                    self.seen.insert(id.0, now);
                    self.slurm_down_since.remove(&id.0);
                    let requested = self.node_state(id.0) == Some(NodeState::Requested);
                    if requested && self.instances.contains_key(&id.0) {
                        self.observe(now, Entry::Event(Event::NodeReady { node: NodeId(id.0) }))?;
                    }
                }
                // Up, and Slurm says its slurmd does not answer: lost once that has lasted (the machine is fenced
                // first; then the node goes back to Slurm). A sync that could not ask Slurm says nothing.
                Some(id) if self.node_state(id.0) != Some(NodeState::Requested) => {
                    let since = *self.slurm_down_since.entry(id.0).or_insert(now);
                    if now - since >= self.slurm_liveness_ms {
                        let silent_s = (now - since) / 1000;
                        eprintln!(
                            "spillway: slurm: {name} has not answered Slurm for {silent_s} s; fencing node {}",
                            id.0
                        );
                        self.slurm_down_since.remove(&id.0);
                        self.fence(now, id.0);
                    }
                }
                Some(_) => {}
                None if sn.powering_up()
                    && self.slurm_returned.get(name).is_none_or(|&(t, _)| now - t >= RETURN_QUIET_MS) =>
                {
                    eprintln!("spillway: slurm: {name} is powering up with no node behind it; requesting one");
                    let event = self.request_for(opts, name, jobs);
                    self.try_event(now, event)?.ok();
                }
                // Slurm has it up, with no machine behind it here: a hand-back that failed (Slurm was down), or a
                // node this daemon never had. It goes back to Slurm, so Slurm requeues what it thinks runs there.
                None if sn.claims_up()
                    && self.slurm_returned.get(name).is_none_or(|&(t, _)| now - t >= RETURN_QUIET_MS) =>
                {
                    eprintln!("spillway: slurm: {name} is up in Slurm with no machine behind it; handing it back");
                    let why = "no machine behind the node".to_string();
                    self.slurm_returned.insert(name.clone(), (now, why.clone()));
                    self.effects.push(Effect::SlurmHandBack { name: name.clone(), reason: why });
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Applies `event` about Slurm node `name`; returns the engine's refusal (logged) as the inner error.
    fn try_event(&mut self, now: Time, event: Event) -> Result<Result<(), String>, ApplyError> {
        match self.apply(now, Entry::Event(event)) {
            Ok(_) => Ok(Ok(())),
            Err(ApplyError::Engine(e)) => {
                eprintln!("spillway: slurm: {e}");
                Ok(Err(e))
            }
            Err(e) => Err(e),
        }
    }

    /// Builds the request for Slurm node `name`: the tier and team of the job Slurm allocated it to (a
    /// configuring job first, then a running one), else its node set's tier and the default team.
    fn request_for(&self, opts: &SlurmOptions, name: &str, jobs: &[SlurmJob]) -> Event {
        let cfg = self.engine.config();
        let set = opts.node_names().get(name).map_or(0, |i| i.set);
        let set = &opts.nodes[set];
        let rank = |j: &&SlurmJob| match j.state.as_str() {
            "CONFIGURING" => 0,
            "RUNNING" => 1,
            _ => 2,
        };
        let job = jobs.iter().filter(|j| j.nodes.iter().any(|n| n == name)).min_by_key(rank);
        let mapped = job.and_then(|j| opts.partitions.iter().find(|p| p.name == j.partition));
        let top = cfg.tiers.first().map(|t| t.name.clone()).unwrap_or_default();
        let tier = mapped.map(|p| p.tier.clone()).or_else(|| set.tier.clone()).unwrap_or(top);
        let account = job.map(|j| j.account.as_str()).filter(|a| cfg.teams.iter().any(|t| t.name == *a));
        let team = mapped.and_then(|p| p.team.clone()).or(account.map(String::from)).unwrap_or(opts.team.clone());
        let why = match job {
            Some(j) => format!("Slurm job {} (partition {}, tier {tier})", j.id, j.partition),
            None => format!("Slurm (no job holds the node; tier {tier})"),
        };
        Event::NodeRequested {
            name: name.to_string(),
            pools: set.pools.clone(),
            gpus: set.gpus,
            gpu_model: set.gpu_model.clone(),
            tier,
            team,
            why,
        }
    }
}
