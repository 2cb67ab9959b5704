//! The sans-I/O engine: it holds loop state and speaks events and actions. The shell hands it events with the
//! time they happened ([`Engine::handle_event`]), reads actions ([`Engine::poll_action`]) and wakes it at
//! [`Engine::poll_timeout`]. A decision pass (schedule, preempt, scale) runs lazily when actions are polled
//! after something changed, so events of one instant are decided together.

use crate::cluster::Cluster;
use crate::config::Config;
use crate::event::{Action, Decision, DecisionKind, Event, StopReason, job_subject};
use crate::model::{Gang, Job, JobData, JobId, JobSpec, JobState, NodeId, NodeState, PendingReason};
use crate::state::{Engine, WakeAt};
use crate::time::Time;

/// Why an event was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EventError {
    #[error("unknown node {0}")]
    UnknownNode(u32),
    #[error("unknown job {0}")]
    UnknownJob(u32),
    #[error("unknown pool {0}")]
    UnknownPool(usize),
    #[error(
        "pool {pool}: min_nodes {min} > max_nodes {max}, max_nodes above 100,000, or a fixed pool (its nodes are \
         listed in the config)"
    )]
    BadBounds { pool: String, min: u32, max: u32 },
    #[error("spot price of {instance_type}: {usd_per_hour:e} is not a price in (0, 1000000] USD per hour")]
    BadPrice { instance_type: String, usd_per_hour: f64 },
    /// A request for a scheduler's node that cannot be taken (the text names what is wrong).
    #[error("node {name}: {why}")]
    BadNodeRequest { name: String, why: String },
}

pub use crate::spec_check::{
    CHECKPOINT_INTERVAL_MS, DEADLINE_MS, EXPECTED_DURATION_MS, MAX_LABEL_BYTES, MAX_NAME_BYTES, SubmitError,
    check_new_spec, check_spec,
};

impl Engine {
    /// For tests: makes every decision pass search placement, victims and scale-out afresh for each job rather
    /// than remember the job shapes that found none earlier in the pass, and look at every job it reaches even
    /// once no capacity is left for them. The decisions are the same either way (`tests/proptest_engine.rs`
    /// checks it); only the time (and the pending reasons of jobs a pass did not reach) differs.
    #[doc(hidden)]
    pub fn set_exhaustive_search(&mut self, on: bool) {
        self.exhaustive = on;
    }

    /// Turns the decision records (`Action::Record`) on or off.
    pub fn set_recording(&mut self, on: bool) {
        self.record = on;
    }

    /// Returns the latest instant the engine was told (time never runs backwards inside it).
    pub fn now(&self) -> Time {
        self.now
    }

    /// Returns the config.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// Returns the cluster state (jobs, nodes, teams, ledger, counters).
    pub fn cluster(&self) -> &Cluster {
        &self.c
    }
    /// Makes room for `more` jobs to be submitted without growing the job table on the way (a replay knows its
    /// job count; doubling would leave up to half the table unused at its peak).
    pub fn reserve_jobs(&mut self, more: usize) {
        self.c.jobs.reserve_exact(more);
    }
    /// Makes room for `more` nodes to be launched without growing the node table on the way (a clone of an
    /// engine has none to spare: its first launch would copy the whole table).
    pub fn reserve_nodes(&mut self, more: usize) {
        self.c.nodes.reserve(more);
    }
    /// Returns the job with `id`.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.c.jobs.get(id.0 as usize)
    }
    /// Returns the number of queued jobs.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Accepts a job at `now` and returns its id, or says which field is wrong (see [`check_spec`]; the engine's
    /// current config counts, with pool bounds as `SetPoolBounds` left them).
    pub fn submit(&mut self, now: Time, spec: JobSpec) -> Result<JobId, SubmitError> {
        self.advance(now);
        let tier = check_spec(&self.cfg, &spec)?;
        let need = crate::spec_check::gang_gpus(&spec)?;
        let team = self.c.team(&spec.team, None, 1.0);
        if let Some(quota) = self.c.teams[team].quota_gpus.filter(|&q| need > q) {
            return Err(SubmitError::OverQuota { need, team: spec.team.to_string(), quota });
        }
        let id = self.add_job(now, spec, tier, team, JobState::Queued);
        self.queue.register(id, need, self.c.jobs[id.0 as usize].gang.kind);
        let timed = self.timed(id, false);
        self.queue.push(tier, team, now, id, timed);
        self.entered.push(id);
        self.dirty = true;
        Ok(id)
    }

    /// Records a submission the engine refuses now though a shell's input log once accepted it (a replay after
    /// the rules changed): the job is created `Failed`, ended at `now`, never queued or started, so the ids of
    /// later jobs stay the ones the log gave them. A `JobFinished` decision with reason `refused_on_replay`
    /// carries `reason` (the refusal, for people). Returns the job's id. The spec is kept as given: its tier,
    /// when the config has none of that name, resolves to the lowest-priority tier, so the job's tier index
    /// stays valid.
    pub fn submit_refused(&mut self, now: Time, spec: JobSpec, reason: String) -> JobId {
        self.advance(now);
        let lowest = self.cfg.tiers.len().saturating_sub(1);
        let tier = self.cfg.tier_index(&spec.tier).unwrap_or(lowest);
        let team = self.c.team(&spec.team, None, 1.0);
        let id = self.add_job(now, spec, tier, team, JobState::Failed);
        self.c.jobs[id.0 as usize].ended = Some(now);
        // Nothing the scheduler sees changed, so no decision pass is due.
        self.record(DecisionKind::JobFinished, || job_subject(id), "refused_on_replay", || reason);
        id
    }

    /// Adds a job submitted at `now` in `state` (its tier and team resolved) and returns its id. It does not
    /// queue it.
    fn add_job(&mut self, now: Time, spec: JobSpec, tier: usize, team: usize, state: JobState) -> JobId {
        let t = &self.cfg.tiers[tier];
        let interruptible = spec.interruptible.unwrap_or(t.interruptible);
        let checkpoint_interval_ms = spec.checkpoint_interval_ms.or(t.checkpoint_interval_s.map(crate::time::secs));
        let id = JobId(self.c.jobs.len() as u32);
        // A deadline decides a job's use of spot only where some spot pool of its tier could ever hold it: one
        // that can never run on spot takes on-demand at once rather than wait for spot until its slack runs out.
        let spot_fits = self.pool_order[tier].iter().any(|&p| {
            self.cfg.pools[p].market == crate::Market::Spot
                && self.cfg.pool_holds(p, spec.gpus_per_worker, spec.gpu_model.as_deref())
        });
        let gang = Gang {
            gpus_per_worker: spec.gpus_per_worker,
            workers: spec.fewest_workers(),
            max_workers: spec.workers,
            kind: self.queue.kind(spec.gpus_per_worker, spec.gpu_model.as_deref()),
            deadline_governs: spec.deadline.is_some() && spec.expected_duration_ms.is_some() && spot_fits,
        };
        let data = spec.data_region.clone().map(|at| Box::new(JobData { at: Some(at), ..JobData::default() }));
        self.c.jobs.push(Job {
            id,
            gang,
            spec,
            tier,
            team,
            interruptible,
            checkpoint_interval_ms,
            state,
            attempt: 0,
            submitted: now,
            queued_since: now,
            first_start: None,
            attempt_start: None,
            ended: None,
            placement: Vec::new(),
            last_checkpoint: None,
            reports_checkpoints: false,
            pending: PendingReason::NotScheduledYet,
            preemptions: 0,
            interruptions: 0,
            saved_work_ms: 0,
            exit: None,
            not_before: None,
            pinned_on_demand: false,
            on_reserve: false,
            spot_only_until: None,
            not_grown: None,
            data,
        });
        id
    }

    /// Applies an event that happened at `now`. Stale events (an exit of an attempt that was already stopped)
    /// are ignored; events about unknown nodes or jobs are refused.
    pub fn handle_event(&mut self, now: Time, event: Event) -> Result<(), EventError> {
        self.advance(now);
        match event {
            Event::NodeReady { node } => {
                let n = self.node(node)?;
                // Only a launch that really came up (not a node already ended) ends the offering's failure streak.
                if let (Some(it), NodeState::Requested) = (n.instance_type, n.state) {
                    self.c.backoff.remove(&(n.pool, it));
                }
                self.c.node_ready(node, now);
            }
            Event::InterruptionNotice { node, deadline } => self.interruption_notice(node, deadline)?,
            Event::RebalanceRecommendation { node } => self.rebalance_recommendation(node)?,
            Event::SpotPrice { instance_type, usd_per_hour, pool } => {
                self.spot_price(&instance_type, pool.as_deref(), usd_per_hour)?
            }
            Event::LaunchFailed { node, error } => self.launch_failed(node, error)?,
            Event::NodeLost { node } => self.node_lost(node)?,
            Event::NodeStopped { node } => {
                for job in self.node(node)?.jobs.clone() {
                    self.requeue(job, StopReason::Shutdown);
                }
                if self.c.nodes[node.0 as usize].market != crate::Market::Fixed {
                    self.node_lost(node)?;
                }
                // No pass now: the daemon is stopping. It asks for one at once, which the restarted daemon's first
                // tick makes (so the requeued jobs do not wait for an unrelated input).
                self.next_wake = Some(self.now);
                return Ok(());
            }
            Event::JobExited { job, attempt, success, exit } => {
                if !self.is_current_attempt(job, attempt)? {
                    return Ok(());
                }
                self.c.release(job, now);
                let j = &mut self.c.jobs[job.0 as usize];
                j.state = if success { JobState::Succeeded } else { JobState::Failed };
                j.ended = Some(now);
                j.exit = exit;
                let ran = j.attempt_progress_ms(now);
                if success {
                    // Work done over all attempts: saved work of earlier ones plus this whole attempt.
                    let (team, tier, work) = (j.team, j.tier, j.saved_work_ms.saturating_add(ran.max(0)));
                    self.c.runs.record(team, tier, work);
                }
                let how = exit.map_or(String::new(), |x| format!(" with {x}"));
                let reason = if success { "succeeded" } else { "failed" };
                self.record(
                    DecisionKind::JobFinished,
                    || job_subject(job),
                    reason,
                    || format!("attempt {attempt} exited{how} after {}", crate::time::fmt_ms(ran)),
                );
            }
            Event::AttemptLost { job, attempt } => {
                if !self.is_current_attempt(job, attempt)? {
                    return Ok(());
                }
                // The node is fine, only the process is gone: requeue the job as a lost node would, and leave
                // the node to the pool.
                self.requeue(job, StopReason::NodeLost);
            }
            Event::CheckpointDone { job, attempt } => {
                let j = self.c.jobs.get_mut(job.0 as usize).ok_or(EventError::UnknownJob(job.0))?;
                if j.state == JobState::Running && j.attempt == attempt {
                    j.last_checkpoint = Some(now);
                    j.reports_checkpoints = true;
                }
            }
            Event::MetricSample { node, gpu_utilization } => {
                self.node(node)?;
                // Bad samples (NaN, out of range) are dropped rather than steering the pool.
                if gpu_utilization.is_finite() {
                    self.c.nodes[node.0 as usize].gpu_utilization = Some(gpu_utilization.clamp(0.0, 1.0));
                    self.fresh_samples[self.c.nodes[node.0 as usize].pool] = true;
                }
            }
            Event::PoolMetric { pool, samples, error } => self.pool_metric(pool, samples, error)?,
            Event::SetNodeProtection { node, protected } => {
                if self.node(node)?.protected == protected {
                    // Nothing changes: nothing to record.
                    return Ok(());
                }
                self.c.nodes[node.0 as usize].protected = protected;
                let what = if protected { "protected from scale-in" } else { "no longer protected from scale-in" };
                self.record(
                    DecisionKind::Admin,
                    || format!("node:{}", node.0),
                    "set_node_protection",
                    || format!("node {} {what}", node.0),
                );
            }
            Event::CancelJob { job } => self.cancel(job)?,
            Event::SetPoolBounds { pool, min_nodes, max_nodes } => {
                let p = self.cfg.pools.get_mut(pool).ok_or(EventError::UnknownPool(pool))?;
                let (min, max) = (min_nodes.unwrap_or(p.min_nodes), max_nodes.unwrap_or(p.max_nodes));
                if p.market == crate::Market::Fixed || min > max || u64::from(max) > crate::config::MAX_POOL_NODES {
                    return Err(EventError::BadBounds { pool: p.name.clone(), min, max });
                }
                let (before, name) = ((p.min_nodes, p.max_nodes), p.name.clone());
                if before == (min, max) {
                    return Ok(());
                }
                (p.min_nodes, p.max_nodes) = (min, max);
                self.record(
                    DecisionKind::Admin,
                    || format!("pool:{name}"),
                    "set_pool_bounds",
                    || format!("min {} -> {min}, max {} -> {max}", before.0, before.1),
                );
            }
            e @ Event::NodeRequested { .. } => self.node_requested(e)?,
            Event::NodeReleased { name } => self.node_released(&name)?,
            Event::SetPoolProtection { pool, protected } => {
                let p = self.cfg.pools.get_mut(pool).ok_or(EventError::UnknownPool(pool))?;
                if p.scale_in_protection == protected {
                    return Ok(());
                }
                p.scale_in_protection = protected;
                let name = p.name.clone();
                let what = if protected { "protected from scale-in" } else { "no longer protected from scale-in" };
                self.record(
                    DecisionKind::Admin,
                    || format!("pool:{name}"),
                    "set_pool_protection",
                    || format!("pool {name} {what}"),
                );
            }
        }
        self.dirty = true;
        Ok(())
    }

    /// Wakes the engine at `now` (at or after [`Engine::poll_timeout`]).
    pub fn handle_timeout(&mut self, now: Time) {
        self.advance(now);
        self.dirty = true;
    }

    /// Returns the next action, deciding first if anything changed since the last decision.
    pub fn poll_action(&mut self) -> Option<Action> {
        if self.dirty {
            self.dirty = false;
            self.decide();
        }
        self.actions.pop_front()
    }

    /// Returns when the engine next needs to wake: the first instant at which a decision may change with time
    /// alone (idle timeout, cooldown or backoff end, burst delay, spot fallback, queue-wait SLO, deadline pin,
    /// checkpoint written, cron window, forecast bucket, node warm-up, a job's return to spot), or the current
    /// instant when the last pass left decisions that only a further pass takes (victims of a preemption back in
    /// the queue, nodes launched or removed). Every time-dependent decision has its own wake-up, so waking the
    /// engine at other instants changes no action (`tests/proptest_engine.rs`).
    pub fn poll_timeout(&self) -> Option<Time> {
        self.next_wake
    }

    /// Closes the books at `now`: bills every live node and running attempt up to `now`. Call once, at the end.
    pub fn finish(&mut self, now: Time) {
        self.advance(now);
        let running: Vec<JobId> = self.c.jobs.iter().filter(|j| j.state == JobState::Running).map(|j| j.id).collect();
        for id in running {
            let j = &mut self.c.jobs[id.0 as usize];
            // Keep the job's placement visible after the books close: book it, then restore.
            let keep = j.placement.clone();
            self.c.release(id, now);
            self.c.jobs[id.0 as usize].placement = keep;
        }
        for i in 0..self.c.nodes.len() {
            let n = &self.c.nodes[i];
            if n.alive() {
                let (id, billed) = (n.id, now - n.billed_from);
                self.c.book_billed(id, billed);
                self.c.nodes[id.0 as usize].ended_at = Some(now);
            }
        }
    }

    fn advance(&mut self, now: Time) {
        // Time never runs backwards inside the engine, whatever the shell hands in.
        self.now = self.now.max(now);
        if !self.cfg.budgets.is_empty() {
            // Before the event changes the books: a period that began since the last event opens on them.
            self.roll_budgets(self.now);
        }
    }

    /// Returns whether `attempt` is the running attempt of `job` (a stale report about an attempt already
    /// stopped is not), or refuses an unknown job.
    fn is_current_attempt(&self, job: JobId, attempt: u32) -> Result<bool, EventError> {
        let j = self.c.jobs.get(job.0 as usize).ok_or(EventError::UnknownJob(job.0))?;
        Ok(j.state == JobState::Running && j.attempt == attempt)
    }

    fn node(&self, id: NodeId) -> Result<&crate::model::Node, EventError> {
        self.c.nodes.get(id.0 as usize).ok_or(EventError::UnknownNode(id.0))
    }

    fn decide(&mut self) {
        let now = self.now;
        self.schedules.iter_mut().for_each(|w| w.refresh(now));
        let mut wake = WakeAt::default();
        self.track_budgets();
        self.track_targets(&mut wake);
        let mut blocked = self.schedule(&mut wake);
        let walked = blocked.len();
        self.grow_elastic(&mut wake);
        // Jobs moved back to spot need spot capacity now, like any blocked job; jobs that want to move get spot
        // capacity bought first (shadow demand) and move once it is ready.
        let (moved, shadow, watching) = self.return_to_spot(&mut wake);
        blocked.extend(moved);
        let mut shadow: Vec<_> = shadow.into_iter().map(|id| (id, crate::access::Access::spot_only())).collect();
        // Jobs on nodes at risk of interruption move once a replacement is ready, which is bought for them first.
        let (leaving, at_risk_demand) = self.move_at_risk(&mut wake);
        blocked.extend(leaving);
        shadow.extend(at_risk_demand);
        // Jobs on a spot pool move to a cheaper one that pays the restart, make before break likewise.
        let (hops, hop_demand, hopping) = self.hop_to_cheaper_spot(&mut wake);
        blocked.extend(hops);
        shadow.extend(hop_demand);
        let watching = watching || hopping;
        let scale_actions = self.c.counters.scale_actions;
        let (claimed, starved) = self.scale_out((&blocked, walked), &shadow, &mut wake);
        if self.blocked_reordered && !(claimed.is_empty() && starved.is_empty()) {
            // Which blocked job claims ready nodes or starves a pool (and so which idle nodes scale-in keeps or
            // swaps) follows their order, and this pass's starts reorder the ones before the last start: the
            // pass that sees them in their new order comes at this instant.
            wake.at(now);
        }
        self.scale_in(&claimed, &starved, &mut wake);
        self.budgets_ended(&mut wake);
        (self.last_blocked, self.last_walked, self.last_shadow) = (blocked, walked, shadow);
        let tracking = self.cfg.pools.iter().any(|p| p.target_gpu_utilization.is_some());
        if self.c.counters.scale_actions != scale_actions && (!self.queue.is_empty() || watching || tracking) {
            // Nodes launched or removed: what scheduling, return-to-spot, scale-out and target tracking read
            // earlier in this pass (pool sizes, the room to grow, cooldowns, offering shares, the nodes reporting)
            // changed under them, so the pass that sees it comes at this instant rather than with whatever wakes
            // the engine next.
            wake.at(self.now);
        }
        self.observe_demand();
        self.budget_wakes(&mut wake);
        self.next_wake = wake.0;
    }

    /// Queues a decision record when recording is on; `detail` is only built then.
    pub(crate) fn record(
        &mut self,
        kind: DecisionKind,
        subject: impl FnOnce() -> String,
        reason: &'static str,
        detail: impl FnOnce() -> String,
    ) {
        if self.record {
            let d = Decision { at: self.now, kind, subject: subject(), reason, detail: detail() };
            self.actions.push_back(Action::Record(d));
        }
    }

    /// Marks a job whose GPUs the pass already bound as running, takes it off the queue and asks the shell to
    /// start it.
    pub(crate) fn start_job(&mut self, id: JobId, placement: Vec<(NodeId, u32)>) {
        let now = self.now;
        let j = &mut self.c.jobs[id.0 as usize];
        if j.is_elastic() {
            self.elastic.insert(id);
        }
        j.state = JobState::Running;
        j.attempt += 1;
        j.attempt_start = Some(now);
        j.first_start.get_or_insert(now);
        j.last_checkpoint = None;
        j.placement = placement.clone();
        let (attempt, waited, tier, key, team) = (j.attempt, now - j.queued_since, j.tier, j.submitted, j.team);
        self.queue.remove(tier, team, key, id);
        let pool = placement.first().map_or(0, |(n, _)| self.c.nodes[n.0 as usize].pool);
        self.move_data(id, pool);
        let pool_name = self.cfg.pools[pool].name.clone();
        self.record(
            DecisionKind::JobStarted,
            || job_subject(id),
            "placed",
            || {
                format!(
                    "attempt {attempt} on node(s) {} of pool {pool_name} after {} queued",
                    node_list(placement.iter().map(|&(n, _)| n)),
                    crate::time::fmt_ms(waited)
                )
            },
        );
        self.actions.push_back(Action::StartJob { job: id, attempt, placement });
    }

    /// Returns whether job `id` goes into the queue as timed (see [`crate::queue::Queue::push`]): it has a
    /// deadline, its data may move, or it is (`to_spot`: is being) moved back to spot, so its access opens to
    /// on-demand again with time alone.
    fn timed(&self, id: JobId, to_spot: bool) -> bool {
        let j = &self.c.jobs[id.0 as usize];
        to_spot || j.spec.deadline.is_some() || crate::data_move::may_move(j) || j.spot_only_until.is_some()
    }

    /// Stops a running job's attempt, counts the work it loses, and puts it back in the queue. An attempt
    /// stopped to checkpoint (interruption notice, migration) saves all its work but may not restart before
    /// its checkpoint is written.
    pub(crate) fn requeue(&mut self, id: JobId, reason: StopReason) {
        let now = self.now;
        let j = &self.c.jobs[id.0 as usize];
        if j.state != JobState::Running {
            return;
        }
        let progress = j.attempt_progress_ms(now);
        let ck_ms = crate::time::secs(self.cfg.tiers[j.tier].checkpoint_time_s);
        let (lost_ms, grace_ms) = match reason {
            StopReason::Interrupted { checkpoint: true } | StopReason::Migrated => (0, ck_ms),
            _ => (j.unsaved_work_ms(now), 0),
        };
        let gpus = j.held_gpus();
        self.c.counters.lost_gpu_ms += lost_ms as i128 * gpus as i128;
        self.c.counters.requeues += 1;
        let attempt = j.attempt;
        self.c.release(id, now);
        let j = &mut self.c.jobs[id.0 as usize];
        // Work since the last checkpoint is lost; time spent moving data in was no work.
        j.saved_work_ms += (progress - lost_ms).max(0);
        let unsent = crate::data_move::attempt_ended(j, now, progress - lost_ms > 0);
        j.state = JobState::Queued;
        j.queued_since = now;
        j.attempt_start = None;
        j.not_before = (grace_ms > 0).then_some(now + grace_ms);
        j.pending = PendingReason::NotScheduledYet;
        let (tier, team, key) = (j.tier, j.team, j.submitted);
        if let StopReason::Preempted { .. } = reason {
            j.preemptions += 1;
        }
        self.c.ledger.book_egress(team, tier, -unsent);
        let timed = self.timed(id, reason == StopReason::Migrated);
        self.queue.push(tier, team, key, id, timed);
        self.entered.push(id);
        self.actions.push_back(Action::StopJob { job: id, attempt, reason, grace_ms });
        self.record(
            DecisionKind::JobRequeued,
            || job_subject(id),
            "requeued",
            || {
                format!(
                    "attempt {attempt} stopped ({reason}); {} of work since its last checkpoint lost",
                    crate::time::fmt_ms(lost_ms)
                )
            },
        );
    }

    /// Acts on a spot interruption notice: the node drains (no new work), its jobs checkpoint if the notice
    /// leaves them time and go back to the queue at once, so the next pass buys replacement capacity now,
    /// not when the node is gone. A notice for a node still booting ends it.
    fn interruption_notice(&mut self, node: NodeId, deadline: Time) -> Result<(), EventError> {
        let n = self.node(node)?;
        // Draining already: noticed before (a node at risk drains too, and still gets its notice).
        if !n.alive() || (n.state == NodeState::Draining && !n.at_risk) {
            return Ok(());
        }
        let (pool, it, state) = (n.pool, n.instance_type, n.state);
        self.c.counters.interruptions += 1;
        if let Some(it) = it {
            self.note_interruption(pool, it);
        }
        let notice_ms = (deadline - self.now).max(0);
        self.c.nodes[node.0 as usize].at_risk = false;
        self.c.nodes[node.0 as usize].interrupted = true;
        let name = self.cfg.pools[pool].name.clone();
        self.record(
            DecisionKind::Interruption,
            || format!("node:{}", node.0),
            "interruption_notice",
            || format!("pool {name}: reclaim in {}; draining", crate::time::fmt_ms(notice_ms)),
        );
        self.return_held(node, crate::ReturnWhy::Interrupted { deadline });
        if state == NodeState::Requested {
            self.c.node_end(node, NodeState::Lost, self.now);
            return Ok(());
        }
        self.c.drain(node);
        let jobs = self.c.nodes[node.0 as usize].jobs.clone();
        for job in jobs {
            let j = &mut self.c.jobs[job.0 as usize];
            j.interruptions += 1;
            let t = &self.cfg.tiers[j.tier];
            let checkpoint = j.checkpoint_interval_ms.is_some() && crate::time::secs(t.checkpoint_time_s) <= notice_ms;
            // A job with a deadline and a duration leaves spot by its slack (the scheduler), not by a count.
            let deadline_governs = j.deadline_governs();
            let too_many = t.max_spot_interruptions.is_some_and(|m| j.interruptions >= m);
            if too_many && !deadline_governs && t.markets.contains(&crate::Market::OnDemand) {
                j.pinned_on_demand = true;
                let n = j.interruptions;
                self.c.make_uninterruptible(job);
                self.c.counters.fallbacks += 1;
                self.record(
                    DecisionKind::Fallback,
                    || job_subject(job),
                    "too_many_interruptions",
                    || format!("interrupted {n} times: moves to on-demand"),
                );
            }
            self.c.counters.notices_acted_on += 1;
            self.requeue(job, StopReason::Interrupted { checkpoint });
        }
        Ok(())
    }

    /// Counts an interruption against an offering; too many within an hour back it off like a capacity failure.
    fn note_interruption(&mut self, pool: usize, it: usize) {
        let now = self.now;
        let h = self.c.offering_history.entry((pool, it)).or_default();
        h.0 += 1;
        let recent = self.c.interrupted.entry((pool, it)).or_default();
        recent.retain(|&t| now - t < 3_600_000);
        recent.push(now);
        if recent.len() as u32 >= self.cfg.policy.interruption_backoff_after {
            let delay = self.back_off(pool, it);
            self.c.counters.fallbacks += 1;
            let (p, i) = (self.cfg.pools[pool].name.clone(), self.cfg.instance_types[it].name.clone());
            self.record(
                DecisionKind::Fallback,
                || format!("pool:{p}"),
                "interruption_rate",
                || {
                    format!(
                        "{i} interrupted repeatedly within the hour; offering backed off {}",
                        crate::time::fmt_ms(delay)
                    )
                },
            );
        }
    }

    /// Backs off one offering: 30 s doubling per consecutive failure, at most 3 minutes (as long as Karpenter
    /// keeps an offering that had no capacity out of its choices: spot capacity comes back within minutes, and
    /// a longer wait costs a deadline job its slack). Returns the delay.
    fn back_off(&mut self, pool: usize, it: usize) -> i64 {
        let streak = self.c.backoff.get(&(pool, it)).map_or(0, |&(_, s)| s) + 1;
        let delay = (30_000i64 << (streak - 1).min(5)).min(180_000);
        self.c.backoff.insert((pool, it), (self.now + delay, streak));
        delay
    }

    fn cancel(&mut self, id: JobId) -> Result<(), EventError> {
        let j = self.c.jobs.get(id.0 as usize).ok_or(EventError::UnknownJob(id.0))?;
        let (state, attempt, tier, team, key) = (j.state, j.attempt, j.tier, j.team, j.submitted);
        match state {
            JobState::Queued => {
                self.queue.remove(tier, team, key, id);
            }
            JobState::Running => {
                self.c.release(id, self.now);
                self.actions.push_back(Action::StopJob {
                    job: id,
                    attempt,
                    reason: StopReason::Cancelled,
                    grace_ms: 0,
                });
            }
            _ => return Ok(()),
        }
        let j = &mut self.c.jobs[id.0 as usize];
        j.state = JobState::Cancelled;
        j.ended = Some(self.now);
        let was = match state {
            JobState::Running => format!("attempt {attempt} stopped"),
            _ if attempt > 0 => format!("queued after {attempt} attempts"),
            _ => "never started".into(),
        };
        self.record(DecisionKind::JobFinished, || job_subject(id), "cancelled", || format!("cancelled: {was}"));
        Ok(())
    }

    fn launch_failed(&mut self, node: NodeId, error: crate::event::LaunchError) -> Result<(), EventError> {
        let n = self.node(node)?;
        if n.state != NodeState::Requested {
            return Ok(());
        }
        let (pool, it) = (n.pool, n.instance_type.unwrap_or(0));
        self.c.node_end(node, NodeState::Failed, self.now);
        self.c.counters.launch_failures += 1;
        // Back off this offering only; the next launch tries the pool's other types or other pools.
        let delay = self.back_off(pool, it);
        let (pool_name, it_name) = (self.cfg.pools[pool].name.clone(), self.cfg.instance_types[it].name.clone());
        self.record(
            DecisionKind::LaunchFailed,
            || format!("node:{}", node.0),
            "launch_failed",
            || {
                format!(
                    "launch of {it_name} in pool {pool_name} failed ({error}); offering backed off {}",
                    crate::time::fmt_ms(delay)
                )
            },
        );
        self.relaunch_held(node);
        Ok(())
    }

    fn node_lost(&mut self, node: NodeId) -> Result<(), EventError> {
        let n = self.node(node)?;
        if !n.alive() {
            return Ok(());
        }
        let (jobs, pool, up) = (n.jobs.clone(), n.pool, (self.now - n.requested_at).max(0));
        let name = self.cfg.pools[pool].name.clone();
        // Before its jobs' requeues, which say their node was lost: this says which and when it went.
        self.record(
            DecisionKind::NodeLost,
            || format!("node:{}", node.0),
            "node_lost",
            || {
                let ran = match jobs.len() {
                    0 => "no job".to_string(),
                    n => format!("{n} job(s) ({}), requeued", id_list(jobs.iter().map(|j| j.0))),
                };
                format!("pool {name}: lost after {} up, running {ran}", crate::time::fmt_ms(up))
            },
        );
        for job in jobs {
            self.requeue(job, StopReason::NodeLost);
        }
        self.c.node_end(node, NodeState::Lost, self.now);
        self.return_held(node, crate::ReturnWhy::Lost);
        Ok(())
    }
}

/// Returns node ids for a record, each once, in order: `3, 7, 9`.
pub(crate) fn node_list(nodes: impl Iterator<Item = NodeId>) -> String {
    id_list(nodes.map(|n| n.0))
}

/// Returns ids (of nodes or jobs) for a record, each once, in order: `3, 7, 9`.
fn id_list(ids: impl Iterator<Item = u32>) -> String {
    let ids: std::collections::BTreeSet<u32> = ids.collect();
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}
