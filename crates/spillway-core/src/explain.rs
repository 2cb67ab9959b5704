//! Answers "why is my job pending?", "why did it run there?" and "why does this pool have its size, and what would
//! change it?" from the engine's state, in words and as typed reasons. Nothing is changed; a pool's
//! counterfactuals re-run the scale-out estimate under other limits ([`Engine::what_if`]).

use crate::access::{Access, job_pools};
use crate::config::Market;
use crate::growth::{NotGrown, PoolChange};
use crate::model::{JobId, JobState, NodeState, PendingReason};
use crate::state::Engine;
use crate::time::{Time, secs};
use serde::Serialize;

/// One link in a chain of reasons: a stable code, the pool it is about, until when it holds (ms since the
/// epoch), and a sentence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reason {
    pub code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<Time>,
    pub text: String,
}

impl Reason {
    fn new(code: &'static str, text: String) -> Reason {
        Reason { code, pool: None, until: None, text }
    }
    fn on(mut self, pool: &str) -> Reason {
        self.pool = Some(pool.to_string());
        self
    }
    fn until(mut self, t: Option<Time>) -> Reason {
        self.until = t;
        self
    }
}

impl Engine {
    /// Returns why job `id` waits, ran where it ran, or ended as it did: its reasons, most decisive first.
    /// `None` for an unknown job.
    pub fn explain_job(&self, id: JobId) -> Option<Vec<Reason>> {
        self.explain_job_at(id, self.now)
    }

    /// [`Engine::explain_job`] as of `now` (a daemon's clock, ahead of the last decision on a quiet cluster): the
    /// waits it quotes run to `now`.
    pub fn explain_job_at(&self, id: JobId, now: Time) -> Option<Vec<Reason>> {
        let now = now.max(self.now);
        let j = self.c.jobs.get(id.0 as usize)?;
        let tier = &self.cfg.tiers[j.tier];
        let mut out = Vec::new();
        match j.state {
            JobState::Queued => out.extend(self.why_waiting(id, now)),
            JobState::Running => {
                let pool = j.placement.first().map(|(n, _)| self.c.nodes[n.0 as usize].pool);
                let name = pool.map_or("?", |p| self.cfg.pools[p].name.as_str());
                let order: Vec<&str> =
                    self.pool_order[j.tier].iter().map(|&p| self.cfg.pools[p].name.as_str()).collect();
                let nodes: Vec<String> = j.placement.iter().map(|(n, g)| format!("{}x{g}", n.0)).collect();
                let text = format!(
                    "attempt {} runs on node(s) {} of pool {name}: the first pool in tier {}'s order ({}) with room for \
                     the gang when it started",
                    j.attempt,
                    nodes.join(", "),
                    tier.name,
                    order.join(", ")
                );
                out.push(Reason::new("running", text).on(name).until(None));
                if j.is_elastic() {
                    let (code, text, until) = self.why_width(j);
                    out.push(Reason::new(code, text).on(name).until(until));
                }
            }
            _ => {
                let how = j.exit.map_or_else(|| "no exit status".to_string(), |e| e.to_string());
                let state = match j.state {
                    JobState::Succeeded => "succeeded",
                    JobState::Failed => "failed",
                    _ => "cancelled",
                };
                out.push(Reason::new("ended", format!("the job {state} ({how}) after {} attempt(s)", j.attempt)));
            }
        }
        Some(out)
    }

    /// Returns the reasons a queued job waits: its pending reason, then what holds it back in each pool it may use.
    fn why_waiting(&self, id: JobId, now: Time) -> Vec<Reason> {
        let j = &self.c.jobs[id.0 as usize];
        let tier = &self.cfg.tiers[j.tier];
        let (g, w) = (j.spec.gpus_per_worker, j.gang.workers);
        let waited = crate::time::fmt_ms(now - j.queued_since);
        let team = &self.c.teams[j.team];
        let mut out = Vec::new();
        match j.pending {
            PendingReason::TeamQuota => {
                let quota = team.quota_gpus.map_or("no".into(), |q| q.to_string());
                let text = format!(
                    "team {} holds {} GPUs of its quota of {quota}; the job needs {} (waiting {waited})",
                    team.name,
                    team.used_gpus,
                    g * w
                );
                out.push(Reason::new("team_quota", text));
                return out;
            }
            PendingReason::WaitingForFixedCapacity => {
                let b = crate::budget_place::wait_budget_of(&self.c, &self.cfg, j);
                let text = format!(
                    "tier {} waits up to {} for owned capacity before buying cloud capacity{} (waiting {waited})",
                    tier.name,
                    crate::time::fmt_ms(b.wait_ms),
                    budget_words(tier, &b)
                );
                let burst_at = j.queued_since.saturating_add(b.wait_ms);
                out.push(Reason::new("tier_slo", text).until(Some(burst_at)));
            }
            p => out.push(Reason::new(p.code(), format!("{} (waiting {waited})", pending_words(p)))),
        }
        if self.team_capped(j.team) {
            let text =
                format!("team {} has spent a budget with a hard cap: no cloud capacity is bought for it", team.name);
            out.push(Reason::new("budget_cap", text));
        }
        let access = Access::of(j, now);
        let capped = self.team_capped(j.team);
        for p in job_pools(&self.cfg, &self.pool_order[j.tier], access) {
            // A capped team's work buys nothing: what else would stop a cloud pool growing is beside the point.
            if capped && self.cfg.pools[p].market != Market::Fixed {
                let name = self.cfg.pools[p].name.as_str();
                let text = format!("pool {name}: buys nothing for team {} (budget cap)", team.name);
                out.push(Reason::new("budget_cap", text).on(name));
                continue;
            }
            out.extend(self.pool_for_job(id, p));
        }
        out
    }

    /// Returns why pool `p` does not hold queued job `id` now.
    fn pool_for_job(&self, id: JobId, p: usize) -> Vec<Reason> {
        let (j, pool) = (&self.c.jobs[id.0 as usize], &self.cfg.pools[p]);
        let (g, w, model) = (j.spec.gpus_per_worker, j.gang.workers, j.spec.gpu_model.as_deref());
        let name = pool.name.as_str();
        if !self.cfg.pool_holds(p, g, model) && pool.market != Market::Fixed {
            let text = format!("pool {name}: no instance type holds a worker of {g} GPUs");
            return vec![Reason::new("no_fitting_type", text).on(name)];
        }
        let ready = self.c.nodes.iter().filter(|n| n.pool == p && n.state == NodeState::Ready);
        let free: Vec<u32> = ready.map(|n| n.free()).collect();
        let room: u32 = free.iter().map(|f| f / g.max(1)).sum();
        if pool.market == Market::Fixed {
            // As many workers as its team's quota lets it start.
            let most = crate::elastic::most_workers(&self.c, j);
            let (code, fits) = match (room >= most, room >= w) {
                (true, _) => ("room_now", "the gang fits now"),
                // An elastic job whose fewest fit waits only where starting narrow would end later.
                (false, true) => (
                    "room_for_fewest",
                    "its fewest workers fit now; it waits for all of them where starting on fewer would end later",
                ),
                (false, false) => ("gang_does_not_fit", "too little"),
            };
            let gang = if most > w { format!("{w} to {most}") } else { w.to_string() };
            let text = format!(
                "pool {name}: room for {room} of the gang's {gang} workers of {g} GPUs ({} free GPUs on {} nodes): \
                 {fits}",
                free.iter().sum::<u32>(),
                free.len()
            );
            return vec![Reason::new(code, text).on(name)];
        }
        let mut out = Vec::new();
        let booting = self.c.pools[p].requested.len();
        if j.pending == PendingReason::WaitingForNodes && booting > 0 {
            out.push(Reason::new("nodes_booting", format!("pool {name}: {booting} node(s) booting")).on(name));
        }
        match self.what_if(name, PoolChange::default()).and_then(|wi| wi.not_grown) {
            Some(why) => {
                // Re-run after the launch, the pass sees only the cooldown that launch started; when the step
                // limit cut that launch short (the last pass said so), the step limit is why the rest waits.
                let why = match (why, self.not_grown[p]) {
                    (NotGrown::Cooldown { until }, Some(NotGrown::StepLimit { until: cut })) if cut == until => {
                        NotGrown::StepLimit { until }
                    }
                    (why, _) => why,
                };
                let until = match why {
                    NotGrown::Cooldown { until } | NotGrown::StepLimit { until } | NotGrown::BackedOff { until } => {
                        Some(until)
                    }
                    _ => None,
                };
                out.push(
                    Reason::new(why.code(), format!("pool {name}: {}", why.describe(self.now))).on(name).until(until),
                );
            }
            None if out.is_empty() => {
                out.push(
                    Reason::new("may_grow", format!("pool {name}: nothing stops it growing at the next pass")).on(name),
                );
            }
            None => {}
        }
        out
    }

    /// Returns why pool `name` has its size and what would change it: its bounds and nodes, the reason it last did
    /// not grow, idle nodes and when they go, and what it would launch with a higher max or out of cooldown.
    /// `None` for an unknown pool.
    pub fn explain_pool(&self, name: &str) -> Option<Vec<Reason>> {
        self.explain_pool_at(name, self.now)
    }

    /// [`Engine::explain_pool`] as of `now` (see [`Engine::explain_job_at`]).
    pub fn explain_pool_at(&self, name: &str, now: Time) -> Option<Vec<Reason>> {
        let now = now.max(self.now);
        let p = self.cfg.pools.iter().position(|x| x.name == name)?;
        let pool = &self.cfg.pools[p];
        let alive: Vec<&crate::model::Node> = self.c.nodes.iter().filter(|n| n.pool == p && n.alive()).collect();
        let ready = alive.iter().filter(|n| n.state == NodeState::Ready).count();
        let mut out = Vec::new();
        if pool.market == Market::Fixed {
            out.push(
                Reason::new("fixed", format!("pool {name} is owned: {} nodes, always there", alive.len())).on(name),
            );
            return Some(out);
        }
        let max = self.effective_max(p);
        let text = format!(
            "pool {name} has {} nodes ({ready} ready, {} booting); min {}, max {max}{}",
            alive.len(),
            self.c.pools[p].requested.len(),
            pool.min_nodes,
            if max != pool.max_nodes {
                format!(" (a schedule window; {} otherwise)", pool.max_nodes)
            } else {
                String::new()
            }
        );
        out.push(Reason::new("size", text).on(name));
        if let Some(why) = self.not_grown[p] {
            out.push(
                Reason::new(why.code(), format!("its last pass did not grow it: {}", why.describe(self.now))).on(name),
            );
        }
        if let Some(why) = &self.signal_lost[p] {
            let text = format!("its utilization signal is missing, so it holds its nodes (no scale-in): {why}");
            out.push(Reason::new("metric_lost", text).on(name));
        }
        let idle_ms = secs(pool.idle_timeout_s);
        let floor = self.c.pools[p].policy_min;
        for n in alive.iter().filter(|n| n.state == NodeState::Ready && n.jobs.is_empty()) {
            let since = n.idle_since.unwrap_or(now);
            let text = if n.protected || pool.scale_in_protection {
                format!("node {} is idle and protected from scale-in", n.id.0)
            } else if alive.len() as u32 <= pool.min_nodes {
                format!("node {} is idle, kept for the pool's min of {}", n.id.0, pool.min_nodes)
            } else if alive.len() as u32 <= floor {
                format!("node {} is idle, kept: the pool's scaling policies want {floor} node(s)", n.id.0)
            } else {
                format!(
                    "node {} is idle for {}; it goes after the idle timeout of {}",
                    n.id.0,
                    crate::time::fmt_ms(now - since),
                    crate::time::fmt_duration(pool.idle_timeout_s)
                )
            };
            out.push(Reason::new("idle_node", text).on(name).until(Some(since + idle_ms)));
        }
        out.extend(self.pool_counterfactuals(name, max));
        Some(out)
    }

    /// Returns what pool `name` would launch now for the waiting work if its max were higher, or once its cooldown
    /// ended: the same scale-out estimate under those limits.
    fn pool_counterfactuals(&self, name: &str, max: u32) -> Vec<Reason> {
        let mut out = Vec::new();
        let Some(now) = self.what_if(name, PoolChange::default()) else { return out };
        let count = |w: &crate::WhatIf| w.launches.iter().map(|(_, n)| n).sum::<u32>();
        if now.may_use == 0 {
            out.push(
                Reason::new("no_demand", format!("no waiting job may use pool {name}: no max would make it grow"))
                    .on(name),
            );
            return out;
        }
        if count(&now) > 0 {
            out.push(
                Reason::new("would_grow", format!("it would launch {} node(s) now for the waiting work", count(&now)))
                    .on(name),
            );
        }
        if let Some(NotGrown::AtMax { .. }) = now.not_grown {
            // The smallest max that would hold the rest: try the max with the whole waiting demand bought.
            let open = self.what_if(name, PoolChange { max_nodes: Some(u32::MAX / 2), ignore_cooldown: true });
            if let Some(more) = open.filter(|w| count(w) > count(&now)) {
                let extra = count(&more) - count(&now);
                let text = format!("it would add {extra} node(s) if max were {}", max + extra);
                out.push(Reason::new("at_max_counterfactual", text).on(name));
            }
        }
        if let Some(NotGrown::Cooldown { until } | NotGrown::StepLimit { until }) = now.not_grown {
            let after = self.what_if(name, PoolChange { max_nodes: None, ignore_cooldown: true });
            if let Some(after) = after.filter(|w| count(w) > 0) {
                let text = format!("it would add {} node(s) once its cooldown ends", count(&after));
                out.push(Reason::new("cooldown_counterfactual", text).on(name).until(Some(until)));
            }
        }
        out
    }
}

/// Says a pending reason in words.
fn pending_words(p: PendingReason) -> &'static str {
    match p {
        PendingReason::NotScheduledYet => "not looked at by a scheduling pass yet",
        PendingReason::QueueScanLimit => "beyond the per-pass queue scan limit (policy.scan_limit)",
        PendingReason::TeamQuota => "its team is at its GPU quota",
        PendingReason::WaitingForFixedCapacity => "waiting for owned capacity",
        PendingReason::WaitingForNodes => "nodes that will hold it are booting",
        PendingReason::NoCapacity => "no pool it may use has room, and none may grow now",
        PendingReason::HeldForLargerJob => {
            "the GPUs it could use are held for a waiting job of the same or higher tier"
        }
        PendingReason::Checkpointing => "its last attempt is writing a checkpoint; replacement capacity is coming",
    }
}

/// Says how a waiting budget that grows with size was worked out (empty for a fixed wait).
fn budget_words(tier: &crate::config::Tier, b: &crate::wait_budget::Budget) -> String {
    use crate::wait_budget::DurationSource;
    let from = match b.source {
        DurationSource::Unused => return String::new(),
        DurationSource::Declared => "its declared duration".to_string(),
        DurationSource::TeamHistory(n) => format!("its team's mean run time over {n} succeeded job(s) of the tier"),
        DurationSource::Assumed => "an assumed 1h run (no declared duration, no team history)".to_string(),
    };
    let uncapped = tier.burst_after_s + tier.burst_wait_per_gpu_hour_s * b.gpu_hours;
    let cap = if uncapped > tier.burst_wait_max_s {
        format!(", capped at {} (burst_wait_max_s)", crate::time::fmt_duration(tier.burst_wait_max_s))
    } else {
        String::new()
    };
    format!(
        ": {} + {} per GPU-hour x {:.1} GPU-hours from {from}{cap}",
        crate::time::fmt_duration(tier.burst_after_s),
        crate::time::fmt_duration(tier.burst_wait_per_gpu_hour_s),
        b.gpu_hours
    )
}
