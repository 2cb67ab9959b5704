//! Nodes another scheduler asks for by name (Slurm's `ResumeProgram`): the engine picks the offering by the
//! tier of the job that asked (the cheapest offering of its markets that holds the node's GPUs, skipping backed-off
//! offerings and those beyond pool max or account quotas), retries the next offering when a launch fails, books
//! the node's whole cost to that job's team and tier, and hands the node back to the scheduler when the cloud
//! takes it. The scheduler places and runs its own jobs there; the engine never does.

use crate::config::Market;
use crate::engine::{EventError, MAX_LABEL_BYTES, MAX_NAME_BYTES};
use crate::event::{Action, DecisionKind, Event, ReturnWhy};
use crate::model::{Hold, NodeId, NodeState};
use crate::scale::Want;
use crate::state::{Engine, WakeAt};

/// Launches tried for one request before the node goes back to the scheduler as one that cannot be launched.
const MAX_TRIES: u32 = 4;

impl Engine {
    /// Takes a scheduler's request for a node ([`Event::NodeRequested`]; any other event is ignored): checks it,
    /// then launches the best offering or hands the node back at once.
    pub(crate) fn node_requested(&mut self, e: Event) -> Result<(), EventError> {
        let Event::NodeRequested { name, pools: pool_names, gpus, gpu_model, tier, team, why } = e else {
            return Ok(());
        };
        let bad = |why: String| EventError::BadNodeRequest { name: name.clone(), why };
        if name.is_empty() || name.len() > MAX_NAME_BYTES {
            return Err(bad(format!("a name of {} bytes (1 to {MAX_NAME_BYTES})", name.len())));
        }
        let tier = self.cfg.tier_index(&tier).ok_or_else(|| bad(format!("unknown tier `{tier}`")))?;
        let mut pools = Vec::new();
        for p in &pool_names {
            match self.cfg.pools.iter().position(|x| x.name == *p && x.external()) {
                Some(i) => pools.push(i),
                None => return Err(bad(format!("no pool `{p}` with a scheduler set"))),
            }
        }
        if pools.is_empty() || gpus == 0 {
            return Err(bad("no pools, or 0 GPUs".into()));
        }
        if let Some(n) = self.held_node(&name) {
            return Err(bad(format!("already up as node {}", n.0)));
        }
        if team.is_empty() || team.len() > MAX_LABEL_BYTES {
            return Err(bad(format!("a team name of {} bytes", team.len())));
        }
        let team = self.c.team(&team, None, 1.0);
        let hold = Hold { name, team, tier, pools, gpus, model: gpu_model, why, tries: 0 };
        self.launch_held(hold);
        Ok(())
    }

    /// Returns the live node the scheduler knows as `name`.
    pub fn held_node(&self, name: &str) -> Option<NodeId> {
        self.c.nodes.iter().rev().find(|n| n.alive() && n.held.as_ref().is_some_and(|h| h.name == name)).map(|n| n.id)
    }

    /// Launches the cheapest offering `hold`'s tier may use in its pools, or hands the node back with the reason
    /// none can be launched.
    fn launch_held(&mut self, mut hold: Hold) {
        let Some((pool, it, price)) = self.best_held_offering(&hold) else {
            let why = self.why_not_held(&hold);
            self.record(
                DecisionKind::ScaleOutBlocked,
                || format!("slurm:{}", hold.name),
                "no_offering",
                || format!("{}: {why}", hold.why),
            );
            self.actions.push_back(Action::ReturnNode { name: hold.name, why: ReturnWhy::CannotLaunch(why) });
            return;
        };
        hold.tries += 1;
        let market = self.cfg.pools[pool].market;
        let itx = &self.cfg.instance_types[it];
        let (model, gpus, it_name) = (itx.gpu_model.clone(), itx.gpus, itx.name.clone());
        let id = self.c.add_node(pool, market, Some(it), model, gpus, price, self.now);
        let (pool_name, tier) = (self.cfg.pools[pool].name.clone(), self.cfg.tiers[hold.tier].name.clone());
        self.record(
            DecisionKind::ScaleOut,
            || format!("node:{}", id.0),
            "scheduler_request",
            || {
                format!(
                    "{} asked for {}: {it_name} in pool {pool_name} ({}) at ${price:.2}/h, the cheapest offering tier \
                 {tier} may use (try {})",
                    hold.why,
                    hold.name,
                    market.as_str(),
                    hold.tries
                )
            },
        );
        self.c.nodes[id.0 as usize].held = Some(Box::new(hold));
        self.c.counters.scale_actions += 1;
        self.actions.push_back(Action::Launch { node: id, pool, instance_type: it });
    }

    /// Returns the cheapest (pool, instance type, price) that `hold`'s tier may use now.
    fn best_held_offering(&self, hold: &Hold) -> Option<(usize, usize, f64)> {
        if self.team_capped(hold.team) {
            return None;
        }
        let markets = &self.cfg.tiers[hold.tier].markets;
        let quota = crate::quota::quota_left(self);
        let want = Want::Node { gpus: hold.gpus, model: hold.model.as_deref() };
        let mut best: Option<(usize, usize, f64)> = None;
        for &p in &hold.pools {
            let market = self.cfg.pools[p].market;
            let room = self.effective_max(p).saturating_sub(self.c.pools[p].alive);
            if !markets.contains(&market) || market == Market::Fixed || room == 0 {
                continue;
            }
            let Some((it, _)) = self.pick_instance_type(p, want, 1, room, &quota, &mut WakeAt::default()) else {
                continue;
            };
            let Some(price) = self.cfg.offer_price(p, it) else { continue };
            if best.is_none_or(|(_, _, b)| price < b) {
                best = Some((p, it, price));
            }
        }
        best
    }

    /// Says why no offering can be launched for `hold`, pool by pool.
    fn why_not_held(&self, hold: &Hold) -> String {
        let tier = &self.cfg.tiers[hold.tier];
        if hold.tries >= MAX_TRIES {
            return format!("{} launches failed", hold.tries);
        }
        if self.team_capped(hold.team) {
            let team = &self.c.teams[hold.team].name;
            return format!("team {team} has spent a budget with a hard cap; nothing is bought for it");
        }
        let quota = crate::quota::quota_left(self);
        let mut parts = Vec::new();
        for &p in &hold.pools {
            let pool = &self.cfg.pools[p];
            let why = if !tier.markets.contains(&pool.market) {
                format!("tier {} may not use {}", tier.name, pool.market.as_str())
            } else if self.c.pools[p].alive >= self.effective_max(p) {
                format!("at its max of {} nodes", self.effective_max(p))
            } else {
                say(self.why_no_type(p, hold.gpus, hold.model.as_deref(), 1, &quota), self.now, hold.gpus)
            };
            parts.push(format!("pool {}: {why}", pool.name));
        }
        parts.join("; ")
    }

    /// Retries a failed launch of a scheduler's node with the next offering (the failed one is backed off).
    pub(crate) fn relaunch_held(&mut self, node: NodeId) {
        if let Some(hold) = self.c.nodes[node.0 as usize].held.clone() {
            let mut hold = *hold;
            if hold.tries >= MAX_TRIES {
                let why = self.why_not_held(&hold);
                hold.tries = MAX_TRIES;
                self.actions.push_back(Action::ReturnNode { name: hold.name, why: ReturnWhy::CannotLaunch(why) });
                return;
            }
            self.launch_held(hold);
        }
    }

    /// Hands a scheduler's node back when the cloud takes it or it is lost.
    pub(crate) fn return_held(&mut self, node: NodeId, why: ReturnWhy) {
        if let Some(h) = &self.c.nodes[node.0 as usize].held {
            self.actions.push_back(Action::ReturnNode { name: h.name.clone(), why });
        }
    }

    /// Terminates the node the scheduler released as `name`.
    pub(crate) fn node_released(&mut self, name: &str) -> Result<(), EventError> {
        let Some(id) = self.held_node(name) else {
            return Err(EventError::BadNodeRequest { name: name.into(), why: "no live node has this name".into() });
        };
        let n = &self.c.nodes[id.0 as usize];
        let up = (self.now - n.requested_at).max(0);
        self.c.node_end(id, NodeState::Terminated, self.now);
        self.actions.push_back(Action::Terminate { node: id });
        self.record(
            DecisionKind::ScaleIn,
            || format!("node:{}", id.0),
            "scheduler_release",
            || format!("the scheduler released {name} after {}", crate::time::fmt_ms(up)),
        );
        Ok(())
    }
}

/// Says a pool's reason for not growing in words, for the scheduler's node reason.
fn say(why: crate::NotGrown, now: crate::Time, gpus: u32) -> String {
    use crate::NotGrown::*;
    match why {
        BackedOff { until } | Cooldown { until } | StepLimit { until } => {
            format!(
                "every type with {gpus} GPUs failed to launch lately (retry in {})",
                crate::time::fmt_ms((until - now).max(0))
            )
        }
        NoFittingType => format!("no instance type has {gpus} GPUs of the model asked for"),
        Quota => "the account quota is used up".into(),
        OfferingShare => "every fitting type has its share of the pool".into(),
        AtMax { max_nodes, .. } => format!("at its max of {max_nodes} nodes"),
        BudgetCap => "the team has spent a budget with a hard cap".into(),
    }
}
