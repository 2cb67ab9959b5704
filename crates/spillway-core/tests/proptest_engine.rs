//! Property tests of the engine's safety and liveness rules on random small clusters and workloads.
//!
//! Each case builds a config (one fixed pool, optional on-demand and spot pools of one or two instance types)
//! as TOML, parses it, and replays a random workload through the engine with a tiny next-event loop: launched
//! nodes become ready after a random boot delay (or fail to launch), started attempts exit when the job's work is
//! done unless stopped first (a stop keeps the work up to the last checkpoint, or all of it when the attempt was
//! stopped to checkpoint, as in the simulator). After every step the engine's invariants must hold, and on the way:
//! only strictly lower tiers are preempted, a p0 job never runs on spot, no pool ever exceeds its max. After the
//! last submission a liveness phase runs until every job has succeeded, with no wake-ups but those the engine
//! asks for.
//!
//! Every job's gang fits some pool it may use ([`feasible`]).
//!
//! `PROPTEST_CASES` sets the number of cases (default 64); `SPILLWAY_PT_TRACE=1` (with `--nocapture`) prints
//! every submission, event, wake-up and action.

use proptest::prelude::*;
use spillway_core::time::Time;
use spillway_core::{Action, Config, Engine, Event, JobId, JobSpec, JobState, LaunchError, Market, NodeId, StopReason};
use std::collections::{BTreeMap, BTreeSet};

/// Instance types every case may pick from: (name, GPUs).
const CATALOGUE: [(&str, u32); 3] = [("t1", 1), ("t4", 4), ("t8", 8)];
const TIERS: [&str; 3] = ["p0", "p1", "p2"];
const TEAMS: [&str; 3] = ["a", "b", "c"];
/// Quota of team `c` when a case gives it one.
const QUOTA_C: u32 = 16;
/// Simulated time after the last submission by which every job must have succeeded (60 jobs of at most 2 h each
/// take at most 5 days one after another).
const LIVENESS_MS: Time = 20 * 86_400_000;
/// Steps after which a case counts as stuck.
const MAX_STEPS: usize = 100_000;

#[derive(Debug, Clone)]
struct CloudParams {
    /// Indexes into [`CATALOGUE`], one or two.
    types: Vec<usize>,
    min_nodes: u32,
    max_nodes: u32,
    boot_latency_s: u32,
    idle_timeout_s: u32,
    scale_out_cooldown_s: u32,
    scale_in_cooldown_s: u32,
    max_step_fraction: f64,
    min_step_nodes: u32,
    scale_in_protection: bool,
}

#[derive(Debug, Clone)]
struct Params {
    fixed_count: u32,
    fixed_gpus: u32,
    on_demand: Option<CloudParams>,
    spot: Option<CloudParams>,
    /// Per catalogue entry: on-demand and spot price per GPU-hour.
    prices: Vec<(f64, f64)>,
    preemption: bool,
    backfill: bool,
    quota_c: bool,
}

#[derive(Debug, Clone)]
struct Draft {
    tier: usize,
    team: usize,
    gpus: u32,
    workers: u32,
    submit_s: u32,
    duration_s: u32,
}

#[derive(Debug, Clone)]
struct Case {
    params: Params,
    jobs: Vec<Draft>,
    /// Boot delays handed out to launches in turn.
    boot_s: Vec<u32>,
    /// Percent of launches that fail.
    fail_pct: u32,
}

fn cloud_params() -> impl Strategy<Value = CloudParams> {
    (
        prop::sample::subsequence(vec![0usize, 1, 2], 1..=2),
        0u32..=2,
        0u32..=5,
        30u32..=300,
        0u32..=1200,
        0u32..=120,
        0u32..=120,
        prop::sample::select(vec![0.25, 0.5, 1.0]),
        1u32..=3,
        prop::bool::weighted(0.1),
    )
        .prop_map(|(types, min, extra, boot, idle, out_cd, in_cd, frac, step, protect)| CloudParams {
            types,
            min_nodes: min,
            max_nodes: min.max(1) + extra,
            boot_latency_s: boot,
            idle_timeout_s: idle,
            scale_out_cooldown_s: out_cd,
            scale_in_cooldown_s: in_cd,
            max_step_fraction: frac,
            min_step_nodes: step,
            scale_in_protection: protect,
        })
}

fn params() -> impl Strategy<Value = Params> {
    (
        1u32..=4,
        prop::sample::select(vec![1u32, 2, 4, 8]),
        prop::option::weighted(0.7, cloud_params()),
        prop::option::weighted(0.7, cloud_params()),
        prop::collection::vec((200u32..=400, 30u32..=150), 3),
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.85),
        any::<bool>(),
    )
        .prop_map(|(fixed_count, fixed_gpus, on_demand, spot, prices, preemption, backfill, quota_c)| Params {
            fixed_count,
            fixed_gpus,
            on_demand,
            spot,
            prices: prices.into_iter().map(|(od, sp)| (od as f64 / 100.0, sp as f64 / 100.0)).collect(),
            preemption,
            backfill,
            quota_c,
        })
}

fn draft() -> impl Strategy<Value = Draft> {
    (0usize..3, 0usize..3, prop::sample::select(vec![1u32, 2, 4, 8]), 1u32..=3, 0u32..=7200, 60u32..=7200).prop_map(
        |(tier, team, gpus, workers, submit_s, duration_s)| Draft { tier, team, gpus, workers, submit_s, duration_s },
    )
}

fn case() -> impl Strategy<Value = Case> {
    (params(), prop::collection::vec(draft(), 5..=60), prop::collection::vec(10u32..=600, 1..=32), 0u32..=20)
        .prop_map(|(params, jobs, boot_s, fail_pct)| Case { params, jobs, boot_s, fail_pct })
}

/// Writes the case's config as TOML: pool 0 fixed, then on-demand and spot pools when present.
fn config_toml(p: &Params) -> String {
    let mut s = String::from("[cluster]\nname = \"prop\"\n");
    for (i, (name, gpus)) in CATALOGUE.iter().enumerate() {
        let (od, sp) = p.prices[i];
        s += &format!(
            "\n[[instance_types]]\nname = \"{name}\"\ngpus = {gpus}\ngpu_model = \"G\"\non_demand_usd_per_hour = {:?}\nspot_usd_per_hour = {:?}\n",
            od * *gpus as f64,
            sp * *gpus as f64
        );
    }
    if p.quota_c {
        s += &format!("\n[[teams]]\nname = \"c\"\nquota_gpus = {QUOTA_C}\n");
    }
    s += &format!(
        "\n[[pools]]\nname = \"fixed\"\nmarket = \"fixed\"\ngpu_usd_per_hour = 1.0\nnodes = [{{ count = {}, gpus = {} }}]\n",
        p.fixed_count, p.fixed_gpus
    );
    for (name, market, c) in [("od", "on_demand", &p.on_demand), ("spot", "spot", &p.spot)] {
        let Some(c) = c else { continue };
        let types: Vec<String> = c.types.iter().map(|&i| format!("\"{}\"", CATALOGUE[i].0)).collect();
        s += &format!(
            "\n[[pools]]\nname = \"{name}\"\nmarket = \"{market}\"\ninstance_types = [{}]\nmin_nodes = {}\nmax_nodes = {}\n\
             boot_latency_s = {}\nidle_timeout_s = {}\nscale_out_cooldown_s = {}\nscale_in_cooldown_s = {}\n\
             max_step_fraction = {:?}\nmin_step_nodes = {}\nscale_in_protection = {}\n",
            types.join(", "),
            c.min_nodes,
            c.max_nodes,
            c.boot_latency_s,
            c.idle_timeout_s,
            c.scale_out_cooldown_s,
            c.scale_in_cooldown_s,
            c.max_step_fraction,
            c.min_step_nodes,
            c.scale_in_protection
        );
    }
    s += &format!("\n[policy]\npreemption = {}\nbackfill = {}\n", p.preemption, p.backfill);
    s
}

/// Returns whether a gang of `w` workers of `g` GPUs of tier `tier` fits some pool it may use when that pool is
/// empty: the fixed pool, or a cloud pool with an instance type that holds the gang within the pool's max. A pool
/// with scale-in protection and a choice of types does not count: it may fill up for good with nodes of a type
/// too small for the gang, which is what protection asks for.
fn feasible(cfg: &Config, tier: usize, g: u32, w: u32) -> bool {
    let t = &cfg.tiers[tier];
    for pool in cfg.pools.iter().filter(|p| t.markets.contains(&p.market)) {
        if pool.market == Market::Spot && !t.interruptible {
            continue;
        }
        if pool.market == Market::Fixed {
            let slots: u32 = pool.nodes.iter().map(|n| n.count * (n.gpus / g)).sum();
            if slots >= w {
                return true;
            }
            continue;
        }
        if pool.scale_in_protection && pool.instance_types.len() > 1 {
            continue;
        }
        let types = pool.instance_types.iter().filter_map(|n| cfg.instance_type_index(n));
        if types.map(|i| cfg.instance_types[i].gpus).any(|gpus| gpus >= g && w.div_ceil(gpus / g) <= pool.max_nodes) {
            return true;
        }
    }
    false
}

/// Turns drafts into runnable jobs for `cfg`: GPUs per worker within the largest node the tier may use, workers
/// reduced until the gang fits some pool, team `c` jobs over its quota moved to team `a`. Sorted by submission.
fn workload(cfg: &Config, case: &Case) -> Vec<(Time, Time, JobSpec)> {
    let mut out = Vec::new();
    for d in &case.jobs {
        let tier = cfg.tier_index(TIERS[d.tier]).expect("default tier");
        let largest = cfg.largest_node_gpus(tier, None);
        let mut g = d.gpus;
        while g > largest {
            g /= 2;
        }
        // One GPU on one worker always fits the fixed pool, which every tier may use.
        let w = loop {
            assert!(g >= 1, "a 1-GPU worker fits the fixed pool");
            let mut w = d.workers;
            while w > 1 && !feasible(cfg, tier, g, w) {
                w -= 1;
            }
            if feasible(cfg, tier, g, w) {
                break w;
            }
            g /= 2;
        };
        let mut team = TEAMS[d.team];
        if case.params.quota_c && team == "c" && g * w > QUOTA_C {
            team = "a";
        }
        let spec = JobSpec {
            name: format!("j{}", out.len()),
            tier: TIERS[d.tier].into(),
            team: team.into(),
            gpus_per_worker: g,
            workers: w,
            gpu_model: None,
            interruptible: None,
            checkpoint_interval_ms: None,
            deadline: None,
            expected_duration_ms: None,
        };
        out.push((d.submit_s as Time * 1000, d.duration_s as Time * 1000, spec));
    }
    out.sort_by_key(|j| j.0);
    out
}

/// What the test's little world schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Ready(NodeId),
    Fail(NodeId, bool),
    Exit(JobId, u32),
}

/// The test's little world around one engine: a clock, pending events, and what it knows about attempts.
struct World<'a> {
    case: &'a Case,
    cfg: Config,
    e: Engine,
    now: Time,
    /// Pending events by (time, sequence).
    heap: BTreeMap<(Time, u64), Ev>,
    seq: u64,
    launches: usize,
    /// The attempt whose exit is pending, per job; a stop removes it.
    pending_exit: BTreeMap<JobId, u32>,
    /// Work left of each submitted job, by id, and when its current attempt started.
    remaining: Vec<Time>,
    attempt_start: Vec<Time>,
    trace: bool,
}

impl World<'_> {
    fn push(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        self.heap.insert((at, self.seq), ev);
    }

    fn check(&self, step: &str) -> Result<(), String> {
        self.e.check_invariants().map_err(|m| format!("t={}: after {step}: {m}", self.now))?;
        for (p, pool) in self.cfg.pools.iter().enumerate().filter(|(_, p)| p.market != Market::Fixed) {
            let alive = self.e.cluster().nodes.iter().filter(|n| n.pool == p && n.alive()).count() as u32;
            if alive > pool.max_nodes {
                return Err(format!(
                    "t={}: pool {} has {alive} live nodes, max {}",
                    self.now, pool.name, pool.max_nodes
                ));
            }
        }
        Ok(())
    }

    /// Carries out every action the engine asks for now, checking the rules on each.
    fn carry_out(&mut self) -> Result<(), String> {
        while let Some(a) = self.e.poll_action() {
            if self.trace {
                eprintln!("{:>10} action {a:?}", self.now);
            }
            let step = format!("{a:?}");
            match a {
                Action::Launch { node, .. } => self.launched(node),
                Action::StartJob { job, attempt, placement } => self.started(job, attempt, &placement)?,
                Action::StopJob { job, attempt, reason, .. } => self.stopped(job, attempt, reason)?,
                Action::Terminate { node } => {
                    let n = &self.e.cluster().nodes[node.0 as usize];
                    if !n.jobs.is_empty() || n.used > 0 {
                        return Err(format!("t={}: terminated node {} runs jobs", self.now, node.0));
                    }
                }
                Action::Record(_) => {}
            }
            self.check(&step)?;
        }
        self.check("the actions")
    }

    /// Schedules a launched node's boot, or its launch failure (a fixed share of launches, by a hash of their
    /// order, half of them for lack of capacity).
    fn launched(&mut self, node: NodeId) {
        let roll = (self.launches as u64).wrapping_mul(2_654_435_761) % 100;
        let boot = self.case.boot_s[self.launches % self.case.boot_s.len()] as Time * 1000;
        self.launches += 1;
        let ev =
            if (roll as u32) < self.case.fail_pct { Ev::Fail(node, roll.is_multiple_of(2)) } else { Ev::Ready(node) };
        self.push(self.now + boot, ev);
    }

    /// Checks a start (whole gang, current attempt, p0 off spot) and schedules the attempt's exit.
    fn started(&mut self, job: JobId, attempt: u32, placement: &[(NodeId, u32)]) -> Result<(), String> {
        let now = self.now;
        let j = self.e.job(job).ok_or("start of an unknown job")?;
        if j.attempt != attempt || j.state != JobState::Running {
            return Err(format!(
                "t={now}: start of job {} attempt {attempt} but it is {:?}/{}",
                job.0, j.state, j.attempt
            ));
        }
        if placement.len() != j.spec.workers as usize {
            return Err(format!("t={now}: job {} started {} of {} workers", job.0, placement.len(), j.spec.workers));
        }
        let on_spot = placement.iter().find(|(n, _)| self.e.cluster().nodes[n.0 as usize].market == Market::Spot);
        if let (0, Some(&(n, _))) = (self.cfg.tiers[j.tier].priority, on_spot) {
            return Err(format!("t={now}: p0 job {} placed on spot node {}", job.0, n.0));
        }
        self.pending_exit.insert(job, attempt);
        self.attempt_start[job.0 as usize] = now;
        self.push(now + self.remaining[job.0 as usize], Ev::Exit(job, attempt));
        Ok(())
    }

    /// Checks a stop (preemption only of strictly lower tiers, and only with the policy on), cancels the
    /// attempt's pending exit and keeps the work it saved: everything when it was stopped to checkpoint, else up
    /// to its last periodic checkpoint.
    fn stopped(&mut self, job: JobId, attempt: u32, reason: StopReason) -> Result<(), String> {
        if let StopReason::Preempted { by } = reason {
            let v = self.e.job(job).ok_or("unknown victim")?;
            let b = self.e.job(by).ok_or("unknown preemptor")?;
            let (vp, bp) = (self.cfg.tiers[v.tier].priority, self.cfg.tiers[b.tier].priority);
            if vp <= bp {
                return Err(format!(
                    "t={}: job {} (priority {vp}) preempted by job {} (priority {bp})",
                    self.now, job.0, by.0
                ));
            }
            if !self.case.params.preemption {
                return Err(format!("t={}: job {} preempted with the policy off", self.now, job.0));
            }
        }
        if self.pending_exit.get(&job) == Some(&attempt) {
            self.pending_exit.remove(&job);
        }
        let elapsed = self.now - self.attempt_start[job.0 as usize];
        let saved = match (reason, self.e.job(job).and_then(|j| j.checkpoint_interval_ms)) {
            (StopReason::Interrupted { checkpoint: true } | StopReason::Migrated, _) => elapsed,
            (_, Some(iv)) if iv > 0 => elapsed / iv * iv,
            _ => 0,
        };
        let left = &mut self.remaining[job.0 as usize];
        *left = (*left - saved).max(1);
        Ok(())
    }

    /// Hands the engine every event due now; exits of attempts that were stopped are dropped.
    fn deliver_due(&mut self) -> Result<(), String> {
        while let Some((&(at, s), &ev)) = self.heap.iter().next() {
            if at != self.now {
                break;
            }
            self.heap.remove(&(at, s));
            let event = match ev {
                Ev::Ready(node) => Event::NodeReady { node },
                Ev::Fail(node, true) => Event::LaunchFailed { node, error: LaunchError::InsufficientCapacity },
                Ev::Fail(node, false) => Event::LaunchFailed { node, error: LaunchError::Transient("flaky".into()) },
                Ev::Exit(job, attempt) => {
                    if self.pending_exit.get(&job) != Some(&attempt) {
                        continue;
                    }
                    self.pending_exit.remove(&job);
                    Event::JobExited { job, attempt, success: true }
                }
            };
            if self.trace {
                eprintln!("{:>10} event {event:?}", self.now);
            }
            self.e.handle_event(self.now, event).map_err(|err| format!("t={}: event refused: {err}", self.now))?;
            self.check(&format!("{ev:?}"))?;
        }
        Ok(())
    }
}

/// Replays one case; returns an error naming the first broken rule.
fn drive(case: &Case) -> Result<(), String> {
    let toml = config_toml(&case.params);
    let cfg = Config::parse("prop.toml", &toml).map_err(|e| format!("generated config refused: {e}\n{toml}"))?;
    let jobs = workload(&cfg, case);
    let e = Engine::new(cfg.clone(), 0);
    let trace = std::env::var_os("SPILLWAY_PT_TRACE").is_some();
    let mut w = World {
        case,
        cfg,
        e,
        now: 0,
        heap: BTreeMap::new(),
        seq: 0,
        launches: 0,
        pending_exit: BTreeMap::new(),
        remaining: Vec::new(),
        attempt_start: Vec::new(),
        trace,
    };
    let last_submit = jobs.last().map_or(0, |j| j.0);
    let (mut next, mut steps) = (0usize, 0usize);
    loop {
        w.carry_out()?;
        if next == jobs.len() && w.e.cluster().jobs.iter().all(|j| j.state == JobState::Succeeded) {
            return Ok(());
        }
        steps += 1;
        let t_job = jobs.get(next).map(|j| j.0);
        let t_heap = w.heap.keys().next().map(|k| k.0);
        let t_wake = w.e.poll_timeout();
        let Some(t) = [t_job, t_heap, t_wake.map(|x| x.max(w.now))].into_iter().flatten().min() else {
            // Jobs remain, yet nothing is pending and the engine asks for no wake-up: it would wait forever.
            return Err(stuck(&w.e, w.now, "nothing left to happen"));
        };
        if t > last_submit + LIVENESS_MS || steps > MAX_STEPS {
            return Err(stuck(&w.e, w.now, "the liveness phase ran out of time"));
        }
        w.now = t;
        while jobs.get(next).is_some_and(|j| j.0 == t) {
            let (_, d, spec) = &jobs[next];
            if w.trace {
                eprintln!(
                    "{t:>10} submit {} {} {}x{} for {d} ms",
                    spec.name, spec.tier, spec.gpus_per_worker, spec.workers
                );
            }
            let id = w.e.submit(t, spec.clone()).map_err(|err| format!("t={t}: submit refused: {err}"))?;
            assert_eq!(id.0 as usize, w.remaining.len(), "job ids count submissions");
            w.remaining.push(*d);
            w.attempt_start.push(t);
            next += 1;
            w.check("a submission")?;
        }
        w.deliver_due()?;
        if t_wake.is_some_and(|x| x <= t) {
            if w.trace {
                eprintln!("{t:>10} timeout");
            }
            w.e.handle_timeout(t);
        }
    }
}

/// Describes a case that did not finish: the jobs left and why they wait.
fn stuck(e: &Engine, now: Time, why: &str) -> String {
    let left: Vec<String> = e
        .cluster()
        .jobs
        .iter()
        .filter(|j| j.state != JobState::Succeeded)
        .take(8)
        .map(|j| {
            let shape = format!("{}x{}", j.spec.gpus_per_worker, j.spec.workers);
            format!("job {} {} {shape} {:?} {:?}", j.id.0, j.spec.tier, j.state, j.pending)
        })
        .collect();
    let nodes: BTreeSet<String> = e
        .cluster()
        .nodes
        .iter()
        .filter(|n| n.alive())
        .map(|n| format!("node {} pool {} {:?} {}/{}", n.id.0, n.pool, n.state, n.used, n.gpus))
        .collect();
    format!("t={now}: {why}; not succeeded: {left:?}; live nodes: {nodes:?}")
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        max_shrink_time: 120_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_engine_keeps_its_rules_and_finishes_every_job(case in case()) {
        if let Err(m) = drive(&case) {
            return Err(TestCaseError::fail(format!("{m}\nconfig:\n{}", config_toml(&case.params))));
        }
    }
}
