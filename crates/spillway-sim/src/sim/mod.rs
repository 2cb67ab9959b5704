//! The simulator's event loop: a virtual clock, a heap of scheduled events, a simulated cloud (boot latency drawn
//! from a seeded log-normal, capacity per offering, launch failures), and the engine deciding. Every delay is an
//! event on the heap; nothing sleeps. Invariants are checked after every step.

mod signals;

use signals::series_columns;

use crate::elastic_cmp::ElasticTally;
use crate::input::SimJob;
use crate::report::TimeSeries;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, LogNormal};
use spillway_core::time::{Millis, Time};
use spillway_core::{
    Action, Config, Decision, Engine, Event, JobId, JobState, LaunchError, Market, NodeId, StopReason,
};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// How often nodes of target-tracking pools report GPU utilization.
const METRIC_PERIOD_MS: Millis = 60_000;

/// Returns the GPU utilization a job keeps while it runs, in [0.5, 0.95): drawn from the seed and the job's id by
/// hashing, so it does not disturb the simulator's random stream (boot latencies stay the same).
pub fn job_utilization(seed: u64, job: JobId) -> f64 {
    0.5 + 0.45 * crate::input::unit_hash(seed, u64::from(job.0))
}

/// How much checking to do after each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Cheap checks every step (pool bounds, overcommit of the nodes a start touches, tiers of every
    /// preemption) and the engine's full check every 65,536 steps and at the end (the default).
    Step,
    /// The engine's full invariant check after every step (tests and property tests).
    Full,
}

/// Options of one simulated run.
#[derive(Debug, Clone)]
pub struct SimOptions {
    pub seed: u64,
    /// Keep the engine's decision records (for `events.jsonl`).
    pub record: bool,
    pub check: Check,
    /// Target number of time-series samples over the run.
    pub samples: usize,
    /// Spot capacity traces by offering; offerings a policy's config lacks are ignored in that run.
    pub spot_traces: Vec<crate::spot::OfferingTrace>,
    /// Spot price traces by offering (each pool's own price from then on); likewise ignored where absent.
    pub spot_prices: Vec<crate::price::OfferingPrice>,
    /// Told (jobs ended, jobs in all) every few thousand steps, for a progress bar.
    pub progress: Progress,
    /// Extra engine wake-ups, ms from the start of the trace, for tests: at each the engine gets a
    /// `handle_timeout` it did not ask for (after that instant's own events and wake-up). An engine whose every
    /// time-dependent decision has its own wake-up decides exactly the same with them. They are not counted as
    /// steps and do not move the end of the run.
    pub extra_wakes_ms: Vec<Millis>,
    /// Keep every action other than decision records, with the instant it was polled (`SimOutcome::actions`).
    pub keep_actions: bool,
    /// Where decision records go when `record` is on: `SimOutcome::decisions` by default, or a callback.
    pub decisions_to: DecisionSink,
    /// What each restart of an elastic job after its first start costs before it makes progress again (the
    /// group re-forms and reloads its checkpoint).
    pub elastic_restart_ms: Millis,
    /// For tests: the engine searches afresh for every queued job at every pass, remembering nothing within a pass
    /// (see `Engine::set_exhaustive_search`); it must decide exactly as it does by default.
    pub exhaustive: bool,
}

/// A callback that takes each decision record as the engine makes it, so a long run (`events.jsonl` of a
/// million jobs) never holds them all. The default keeps them in `SimOutcome::decisions` instead.
#[derive(Clone, Default)]
pub struct DecisionSink(pub Option<std::sync::Arc<std::sync::Mutex<DecisionFn>>>);

/// What a [`DecisionSink`] calls with each decision record.
pub type DecisionFn = dyn FnMut(Decision) + Send;

impl std::fmt::Debug for DecisionSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "DecisionSink(callback)" } else { "DecisionSink(kept)" })
    }
}

/// A progress callback: (jobs ended, jobs in all). The default does nothing.
#[derive(Clone, Default)]
pub struct Progress(pub Option<std::sync::Arc<dyn Fn(usize, usize) + Send + Sync>>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Progress(callback)" } else { "Progress(none)" })
    }
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            seed: 1,
            record: false,
            check: Check::Step,
            samples: 1500,
            spot_traces: Vec::new(),
            spot_prices: Vec::new(),
            progress: Progress::default(),
            extra_wakes_ms: Vec::new(),
            keep_actions: false,
            decisions_to: DecisionSink::default(),
            elastic_restart_ms: 60_000,
            exhaustive: false,
        }
    }
}

/// A scheduled simulator event. Ordered so ties at one instant resolve the same way every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum SimEvent {
    LaunchFailed(NodeId, bool),
    NodeReady(NodeId),
    JobExit(JobId, u32),
    /// Spot trace `k` changes its capacity now.
    Capacity(usize),
    /// Price trace `k` (into `opts.spot_prices`) changes its offering's price now.
    Price(usize),
    /// The cloud announces it will reclaim this spot node.
    Notice(NodeId),
    /// The cloud takes a node it announced.
    Reclaim(NodeId),
    /// Nodes of target-tracking pools report their GPU utilization.
    Metrics,
    Sample,
}

/// What the simulator knows that the engine does not: each job's true remaining work (in ms on all its workers)
/// and how its current attempt runs.
#[derive(Debug, Clone, Copy)]
struct Truth {
    remaining_ms: Millis,
    attempt_start: Time,
    checkpoint_ms: Option<Millis>,
    /// GPUs it needs to start (an elastic job's fewest workers), and GPUs its current attempt holds.
    need_gpus: i64,
    gpus: i64,
    /// The current attempt's share of full speed (see `SimJob::speed`), and the time it spends restarting first.
    speed: f64,
    restart_ms: Millis,
    /// The part of `restart_ms` spent moving its data in: its checkpoints count from its end.
    transfer_ms: Millis,
    serial_fraction: f64,
    fewest: u32,
    most_workers: u32,
    /// Workers of its current (or last) attempt.
    width: u32,
    elastic: bool,
    started: bool,
}

impl Truth {
    /// Counts a start (`sign` 1) or an end (-1) of this job's attempt at `now` in `tally`, when it is elastic.
    fn count(&self, tally: &mut Option<ElasticTally>, now: Time, sign: i64) {
        if let Some(tally) = tally.as_mut().filter(|_| self.elastic) {
            let per_worker = self.need_gpus / i64::from(self.fewest.max(1));
            let most = i64::from(self.most_workers);
            let gpus = [self.gpus, self.need_gpus, per_worker * most];
            tally.count(now, sign, gpus, [i64::from(self.width), most]);
        }
    }
}

impl Truth {
    /// Returns the wall time of the current attempt that the work saved at its stop covers: all of it with a
    /// checkpoint written on the signal, else up to the last checkpoint on the interval (none without one).
    fn saved_wall(&self, elapsed: Millis, reason: StopReason) -> Millis {
        match (reason, self.checkpoint_ms) {
            (StopReason::Interrupted { checkpoint: true } | StopReason::Migrated, _) => elapsed,
            // Checkpoints come every interval once its data is in.
            (_, Some(iv)) if iv > 0 && elapsed > self.transfer_ms => {
                self.transfer_ms + ((elapsed - self.transfer_ms) / iv) * iv
            }
            _ => 0,
        }
    }
}

/// The result of a run: the engine at its end (for the report), samples, decisions and counts.
pub struct SimOutcome {
    pub engine: Engine,
    pub series: TimeSeries,
    pub decisions: Vec<Decision>,
    /// Simulated time of the last job's end (or of the run's end), ms from the start of the trace.
    pub makespan_ms: Millis,
    pub events: u64,
    pub submitted: usize,
    /// GPU-ms of work the simulator saw redone (time since the last checkpoint of stopped attempts).
    pub lost_gpu_ms: i128,
    /// With `SimOptions::keep_actions`: every action but the decision records, with the instant it was polled.
    pub actions: Vec<(Time, Action)>,
    /// When any job is elastic: what the run counted of them.
    pub elastic: Option<ElasticTally>,
}

/// Errors a run can end with: a broken invariant (an engine bug) or a refused event.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invariant broken at t={at_s} s: {message}")]
    Invariant { at_s: f64, message: String },
    #[error("job {name} refused at submission: {message}")]
    Refused { name: String, message: String },
}

/// Replays `jobs` through a fresh engine on `cfg` and returns the outcome.
pub fn simulate(cfg: &Config, jobs: &[SimJob], opts: &SimOptions) -> Result<SimOutcome, SimError> {
    Sim::new(cfg, jobs, opts).run()
}

struct Sim<'a> {
    cfg: &'a Config,
    jobs: &'a [SimJob],
    opts: &'a SimOptions,
    engine: Engine,
    t0: Time,
    now: Time,
    heap: BinaryHeap<Reverse<(Time, u64, SimEvent)>>,
    seq: u64,
    rng: ChaCha8Rng,
    truth: Vec<Truth>,
    /// Live nodes (requested or ready) per offering (pool, instance type).
    alive: BTreeMap<(usize, usize), BTreeSet<NodeId>>,
    /// Nodes that got a notice and wait for their reclaim.
    noticed: BTreeSet<NodeId>,
    /// Capacity per offering from spot traces (`None`: no limit).
    trace_cap: BTreeMap<(usize, usize), Option<u32>>,
    /// The spot traces that apply to this config: (pool, instance type, index into `opts.spot_traces`).
    traces: Vec<(usize, usize, usize)>,
    decisions: Vec<Decision>,
    series: TimeSeries,
    sample_ms: Millis,
    events: u64,
    finished: usize,
    last_end: Time,
    /// When a job last started (or the run began): a run whose queued jobs can never start stops
    /// [`NO_PROGRESS_MS`] after it.
    last_start: Time,
    lost_gpu_ms: i128,
    queued_gpus: i64,
    running_gpus: i64,
    /// `Some` when any job is elastic (the series then has the `elastic:*` columns).
    elastic: Option<ElasticTally>,
    actions: Vec<(Time, Action)>,
}

impl<'a> Sim<'a> {
    fn new(cfg: &'a Config, jobs: &'a [SimJob], opts: &'a SimOptions) -> Sim<'a> {
        let t0 = cfg.start_ms;
        let mut engine = Engine::new(cfg.clone(), t0);
        engine.set_recording(opts.record);
        engine.set_exhaustive_search(opts.exhaustive);
        engine.reserve_jobs(jobs.len());
        let span = jobs.iter().map(|j| j.submit_ms + j.duration_ms).max().unwrap_or(0);
        let sample_ms = (span / opts.samples.max(1) as i64).max(60_000);
        let mut s = Sim {
            cfg,
            jobs,
            opts,
            engine,
            t0,
            now: t0,
            heap: BinaryHeap::new(),
            seq: 0,
            rng: ChaCha8Rng::seed_from_u64(opts.seed),
            truth: Vec::with_capacity(jobs.len()),
            alive: BTreeMap::new(),
            noticed: BTreeSet::new(),
            trace_cap: BTreeMap::new(),
            traces: opts
                .spot_traces
                .iter()
                .enumerate()
                .filter_map(|(k, t)| {
                    let p = cfg.pools.iter().position(|p| p.name == t.pool && p.market == Market::Spot)?;
                    Some((p, cfg.instance_type_index(&t.instance_type)?, k))
                })
                .collect(),
            decisions: Vec::new(),
            series: TimeSeries { columns: series_columns(cfg, jobs), rows: Vec::new() },
            sample_ms,
            events: 0,
            finished: 0,
            last_end: t0,
            last_start: t0,
            lost_gpu_ms: 0,
            queued_gpus: 0,
            running_gpus: 0,
            elastic: jobs.iter().any(|j| j.spec.is_elastic()).then(|| ElasticTally::new(t0)),
            actions: Vec::new(),
        };
        s.push(t0, SimEvent::Sample);
        for k in 0..s.traces.len() {
            s.push(t0, SimEvent::Capacity(k));
        }
        for (k, t) in opts.spot_prices.iter().enumerate() {
            let offered = cfg.pools.iter().any(|p| p.name == t.pool && p.market == Market::Spot)
                && cfg.instance_type_index(&t.instance_type).is_some();
            if offered {
                s.push(t0, SimEvent::Price(k));
            }
        }
        if cfg.pools.iter().any(|p| p.uses_utilization()) {
            s.push(t0 + METRIC_PERIOD_MS, SimEvent::Metrics);
        }
        s
    }

    fn push(&mut self, at: Time, ev: SimEvent) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, ev)));
    }

    fn run(mut self) -> Result<SimOutcome, SimError> {
        /// How long a run goes on with every job submitted, none running and none starting (35 days: longer than
        /// a monthly schedule's gap).
        const NO_PROGRESS_MS: Millis = 35 * 86_400_000;
        let mut next_job = 0usize;
        // Stop once every job ended and the cloud has had time to scale back in (bounded, so cron windows that
        // keep waking the engine cannot run forever).
        let tail_ms: Millis = self
            .cfg
            .pools
            .iter()
            .map(|p| spillway_core::time::secs(p.idle_timeout_s + p.scale_in_cooldown_s))
            .max()
            .unwrap_or(0)
            + 60_000;
        // Extra wake-ups (tests), in order; the instant of the last real step, which alone decides the end.
        let mut extra: Vec<Time> = self.opts.extra_wakes_ms.iter().map(|&ms| self.t0 + ms).collect();
        extra.sort_unstable();
        let (mut next_extra, mut real_now) = (0usize, self.now);
        loop {
            self.drain_actions()?;
            let all_done = next_job == self.jobs.len() && self.finished == self.jobs.len();
            if all_done && (real_now > self.last_end + tail_ms || self.cloud_at_rest()) {
                break;
            }
            if next_job == self.jobs.len()
                && self.running_gpus == 0
                && real_now
                    > self.last_start.max(self.t0 + self.jobs.last().map_or(0, |j| j.submit_ms)) + NO_PROGRESS_MS
            {
                // Every job is submitted, none runs, and none has started for weeks: the cloud keeps failing to
                // deliver (capacity 0) or nothing the queued jobs may use can grow. They are reported unfinished.
                break;
            }
            if next_job == self.jobs.len() && self.stalled() {
                // Nothing can happen any more: no job runs, no engine wake-up, only samples and trace ticks
                // left. The jobs still queued are reported unfinished instead of looping forever.
                break;
            }
            let t_job = self.jobs.get(next_job).map(|j| self.t0 + j.submit_ms);
            let t_heap = self.heap.peek().map(|Reverse((t, _, _))| *t);
            let t_wake = self.engine.poll_timeout().map(|t| t.max(self.now));
            let Some(t) = [t_job, t_heap, t_wake].into_iter().flatten().min() else { break };
            if let Some(&x) = extra.get(next_extra).filter(|&&x| x < t) {
                // An extra wake-up alone before the next real instant; then look again (it may have moved).
                next_extra += 1;
                self.extra_wake(x)?;
                continue;
            }
            self.now = t;
            real_now = t;
            while self.jobs.get(next_job).is_some_and(|j| self.t0 + j.submit_ms == t) {
                self.submit(next_job)?;
                next_job += 1;
            }
            while let Some(&Reverse((at, _, ev))) = self.heap.peek() {
                if at != t {
                    break;
                }
                self.heap.pop();
                self.apply(ev)?;
            }
            if t_wake == Some(t) {
                self.engine.handle_timeout(t);
            }
            self.events += 1;
            if self.events.is_multiple_of(4096)
                && let Some(p) = &self.opts.progress.0
            {
                p(self.finished, self.jobs.len());
            }
            self.drain_actions()?;
            self.check_step()?;
            while extra.get(next_extra).is_some_and(|&x| x <= t) {
                // Extra wake-ups at this very instant come after its own events and wake-up.
                next_extra += 1;
                self.extra_wake(t)?;
            }
        }
        self.now = real_now;
        self.engine.check_invariants().map_err(|m| self.broken(m))?;
        self.engine.finish(self.now);
        if let Some(e) = &mut self.elastic {
            e.advance(self.now);
        }
        self.sample();
        let makespan_ms = self.last_end - self.t0;
        Ok(SimOutcome {
            engine: self.engine,
            series: self.series,
            decisions: self.decisions,
            makespan_ms,
            events: self.events,
            submitted: self.jobs.len(),
            lost_gpu_ms: self.lost_gpu_ms,
            actions: self.actions,
            elastic: self.elastic,
        })
    }

    /// Wakes the engine at `at` though it did not ask to be (see `SimOptions::extra_wakes_ms`) and carries out
    /// whatever it decides.
    fn extra_wake(&mut self, at: Time) -> Result<(), SimError> {
        self.now = self.now.max(at);
        self.engine.handle_timeout(self.now);
        self.drain_actions()?;
        self.check_step()
    }

    /// Checks the invariants after a step: pool bounds every step (cheap), the engine's full check every step in
    /// `Check::Full` and every 65,536 steps otherwise, so long runs stay linear.
    fn check_step(&self) -> Result<(), SimError> {
        let c = self.engine.cluster();
        for (p, pool) in self.cfg.pools.iter().enumerate() {
            if pool.market != Market::Fixed && c.pools[p].alive > pool.max_nodes {
                return Err(
                    self.broken(format!("pool {} has {} nodes, max {}", pool.name, c.pools[p].alive, pool.max_nodes))
                );
            }
        }
        if self.opts.check == Check::Full || self.events.is_multiple_of(65_536) {
            self.engine.check_invariants().map_err(|m| self.broken(m))?;
        }
        Ok(())
    }

    fn broken(&self, message: String) -> SimError {
        SimError::Invariant { at_s: (self.now - self.t0) as f64 / 1000.0, message }
    }

    /// Returns whether the run can no longer make progress: no job running, no engine wake-up, and nothing on
    /// the heap but samples and spot-trace ticks.
    fn stalled(&self) -> bool {
        self.running_gpus == 0
            && self.engine.poll_timeout().is_none()
            && self.heap.iter().all(|Reverse((_, _, e))| {
                matches!(e, SimEvent::Sample | SimEvent::Capacity(_) | SimEvent::Price(_) | SimEvent::Metrics)
            })
            && self.engine.cluster().pools.iter().all(|p| p.requested.is_empty())
    }

    /// Returns whether no cloud node is alive beyond its pool's configured min.
    fn cloud_at_rest(&self) -> bool {
        let c = self.engine.cluster();
        self.cfg
            .pools
            .iter()
            .enumerate()
            .all(|(p, pool)| pool.market == Market::Fixed || c.pools[p].alive <= pool.min_nodes)
    }

    fn submit(&mut self, i: usize) -> Result<(), SimError> {
        let j = &self.jobs[i];
        let (id, queued) = match self.engine.submit(self.now, j.spec.clone()) {
            Ok(id) => (id, true),
            // The input was checked against the main config; a reference policy's config (fixed-only, say) may
            // have no pool that could ever hold the job. It fails at once, as the engine would refuse it, rather
            // than ending the comparison; its id is still taken, so later ids match the input's order.
            Err(e) => {
                self.finished += 1;
                (self.engine.submit_refused(self.now, j.spec.clone(), e.to_string()), false)
            }
        };
        let ck = self.engine.job(id).and_then(|x| x.checkpoint_interval_ms);
        debug_assert_eq!(id.0 as usize, self.truth.len());
        let need_gpus = i64::from(j.spec.gpus_per_worker) * i64::from(j.spec.fewest_workers());
        self.truth.push(Truth {
            remaining_ms: j.duration_ms,
            attempt_start: 0,
            checkpoint_ms: ck,
            need_gpus,
            gpus: 0,
            speed: 1.0,
            restart_ms: 0,
            transfer_ms: 0,
            serial_fraction: j.serial_fraction,
            fewest: j.spec.fewest_workers(),
            most_workers: j.spec.workers,
            width: 0,
            elastic: j.spec.is_elastic(),
            started: false,
        });
        if queued {
            self.queued_gpus += need_gpus;
        }
        Ok(())
    }

    fn apply(&mut self, ev: SimEvent) -> Result<(), SimError> {
        let now = self.now;
        let res = match ev {
            SimEvent::NodeReady(node) => {
                self.schedule_poisson(node);
                self.engine.handle_event(now, Event::NodeReady { node })
            }
            SimEvent::Capacity(k) => return self.capacity_change(k),
            SimEvent::Price(k) => {
                let t = &self.opts.spot_prices[k];
                let (price, next) = t.trace.at(self.now - self.t0);
                self.push(self.t0 + next, SimEvent::Price(k));
                let ev = Event::SpotPrice {
                    instance_type: t.instance_type.clone(),
                    usd_per_hour: price,
                    pool: Some(t.pool.clone()),
                };
                self.engine.handle_event(now, ev)
            }
            SimEvent::Notice(node) => return self.notice(node),
            SimEvent::Metrics => {
                self.push(now + METRIC_PERIOD_MS, SimEvent::Metrics);
                return self.report_metrics();
            }
            SimEvent::Reclaim(node) => {
                self.noticed.remove(&node);
                let alive = self.engine.cluster().nodes[node.0 as usize].alive();
                self.forget_node(node);
                if alive { self.engine.handle_event(now, Event::NodeLost { node }) } else { Ok(()) }
            }
            SimEvent::LaunchFailed(node, capacity) => {
                self.forget_node(node);
                let error = if capacity {
                    LaunchError::InsufficientCapacity
                } else {
                    LaunchError::Transient("simulated launch failure".into())
                };
                self.engine.handle_event(now, Event::LaunchFailed { node, error })
            }
            SimEvent::JobExit(job, attempt) => {
                let running =
                    self.engine.job(job).is_some_and(|j| j.state == JobState::Running && j.attempt == attempt);
                if running {
                    self.finished += 1;
                    self.last_end = now;
                    self.running_gpus -= self.truth[job.0 as usize].gpus;
                    self.truth[job.0 as usize].count(&mut self.elastic, now, -1);
                }
                self.engine.handle_event(now, Event::JobExited { job, attempt, success: true, exit: None })
            }
            SimEvent::Sample => {
                self.sample();
                self.push(now + self.sample_ms, SimEvent::Sample);
                Ok(())
            }
        };
        res.map_err(|e| self.broken(format!("engine refused a simulator event: {e}")))
    }

    fn drain_actions(&mut self) -> Result<(), SimError> {
        while let Some(a) = self.engine.poll_action() {
            self.act(a)?;
        }
        Ok(())
    }

    fn act(&mut self, a: Action) -> Result<(), SimError> {
        let now = self.now;
        if self.opts.keep_actions && !matches!(a, Action::Record(_)) {
            self.actions.push((now, a.clone()));
        }
        match a {
            Action::Launch { node, pool, instance_type } => {
                let p = &self.cfg.pools[pool];
                let cap = p.capacity.get(&self.cfg.instance_types[instance_type].name).copied();
                let traced = self.trace_cap.get(&(pool, instance_type)).copied().flatten();
                let cap = match (cap, traced) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let live = self.alive.entry((pool, instance_type)).or_default();
                if cap.is_some_and(|c| live.len() as u32 >= c) {
                    self.push(now + 10_000, SimEvent::LaunchFailed(node, true));
                } else if p.launch_failure_rate > 0.0 && self.rng.random::<f64>() < p.launch_failure_rate {
                    live.insert(node);
                    self.push(now + 30_000, SimEvent::LaunchFailed(node, false));
                } else {
                    live.insert(node);
                    let median = p.boot_latency_s.max(0.0);
                    let boot_s = match LogNormal::new(median.max(1e-3).ln(), p.boot_jitter) {
                        Ok(d) if p.boot_jitter > 0.0 => d.sample(&mut self.rng),
                        _ => median,
                    };
                    self.push(now + (boot_s * 1000.0).round() as i64, SimEvent::NodeReady(node));
                }
            }
            Action::Terminate { node } => self.forget_node(node),
            // Traces drive no other scheduler, so nothing asks for its nodes and nothing hands them back.
            Action::ReturnNode { .. } => {}
            Action::StartJob { job, attempt, placement } => {
                self.last_start = self.now;
                let nodes = self.engine.cluster();
                for &(n, _) in &placement {
                    let node = &nodes.nodes[n.0 as usize];
                    if node.used > node.gpus {
                        return Err(self.broken(format!("node {} overcommitted starting job {}", n.0, job.0)));
                    }
                }
                let t = &mut self.truth[job.0 as usize];
                t.attempt_start = now;
                // An elastic job runs at the speed its width gives, after re-forming its group on every start
                // but the first.
                t.speed = crate::input::speed(t.serial_fraction, placement.len() as u32, t.most_workers);
                t.restart_ms = if t.elastic && t.started { self.opts.elastic_restart_ms.max(0) } else { 0 };
                // Moving its data in from another region makes no progress either.
                t.transfer_ms = self.engine.job(job).map_or(0, |j| j.transfer_ms());
                t.restart_ms = t.restart_ms.saturating_add(t.transfer_ms);
                t.started = true;
                t.gpus = placement.iter().map(|&(_, g)| i64::from(g)).sum();
                let run = (t.remaining_ms as f64 / t.speed).ceil() as Millis;
                let end = now.saturating_add(t.restart_ms).saturating_add(run.max(1));
                self.queued_gpus -= t.need_gpus;
                self.running_gpus += t.gpus;
                let width = placement.len() as u32;
                if let Some(tally) = self.elastic.as_mut().filter(|_| t.elastic && t.width > width) {
                    tally.shrinks += 1;
                }
                t.width = width;
                t.count(&mut self.elastic, now, 1);
                self.push(end, SimEvent::JobExit(job, attempt));
            }
            Action::StopJob { job, reason, .. } => {
                if let StopReason::Preempted { by } = reason {
                    let (v, b) = (self.engine.job(job), self.engine.job(by));
                    let (vp, bp) =
                        (v.map(|j| self.cfg.tiers[j.tier].priority), b.map(|j| self.cfg.tiers[j.tier].priority));
                    if vp <= bp {
                        return Err(self
                            .broken(format!("job {} preempted by job {} of a tier not strictly higher", job.0, by.0)));
                    }
                }
                let t = &mut self.truth[job.0 as usize];
                let elapsed = now - t.attempt_start;
                // Work up to the last checkpoint survives (a checkpoint written on the signal keeps everything);
                // the rest is redone. The time spent restarting first made no progress.
                let saved = t.saved_wall(elapsed, reason);
                let progress = ((saved - t.restart_ms).max(0) as f64 * t.speed).floor() as Millis;
                t.remaining_ms = (t.remaining_ms - progress).max(1);
                // A transfer cut short was no work lost.
                self.lost_gpu_ms += (elapsed - saved.max(t.transfer_ms)).max(0) as i128 * t.gpus as i128;
                self.running_gpus -= t.gpus;
                t.count(&mut self.elastic, now, -1);
                if let Some(tally) = self.elastic.as_mut().filter(|_| matches!(reason, StopReason::Resized { .. })) {
                    tally.growths += 1;
                }
                if reason != StopReason::Cancelled {
                    self.queued_gpus += t.need_gpus;
                }
            }
            // The decision record beside it says the same; a simulation posts no webhook.
            Action::BudgetAlert(_) => {}
            Action::Record(d) => match &self.opts.decisions_to.0 {
                // A callback that panicked once still gets the rest (the records are all that is in it).
                Some(sink) => (sink.lock().unwrap_or_else(|e| e.into_inner()))(d),
                None => self.decisions.push(d),
            },
        }
        Ok(())
    }

    fn forget_node(&mut self, node: NodeId) {
        let n = &self.engine.cluster().nodes[node.0 as usize];
        if let (Some(it), pool) = (n.instance_type, n.pool)
            && let Some(c) = self.alive.get_mut(&(pool, it))
        {
            c.remove(&node);
        }
    }
}
