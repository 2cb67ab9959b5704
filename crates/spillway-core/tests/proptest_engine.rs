//! Property tests of the engine's safety and liveness rules on random small clusters and workloads.
//!
//! Each case builds a config (one fixed pool, optional on-demand and spot pools of one or two instance types)
//! as TOML, parses it, and replays a random workload through the engine with a tiny next-event loop: launched
//! nodes become ready after a random boot delay (or fail to launch), started attempts exit after the job's
//! duration unless stopped first. After every step the engine's invariants must hold, and on the way:
//! only strictly lower tiers are preempted, a p0 job never runs on spot, no pool ever exceeds its max. After the
//! last submission a liveness phase runs until every job has succeeded.

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
/// How often, and how many times in a row, the loop wakes a quiet engine before it calls a case stuck.
const QUIET_WAKE_MS: Time = 600_000;
const QUIET_WAKES: u32 = 3;
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
        // Idle timeouts shorter than the time a gang's nodes take to come up starve the gang (see
        // `nodes_ready_for_a_waiting_gang_are_not_scaled_in` in tests/engine.rs): keep them long here.
        1800u32..=3600,
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

/// Returns whether a gang of `w` workers of `g` GPUs of tier `tier` can always be placed on some pool it may use,
/// once the pool has drained: the fixed pool has the slots, or a cloud pool without scale-in protection holds it
/// on whichever of its instance types the engine picks, with nodes beyond the pool's min.
///
/// The cloud rule is deliberately strict: a gang that fits only one of a pool's types, or only by using the
/// nodes kept for the pool's min, can starve (see the ignored bug tests in `tests/engine.rs`:
/// `a_gang_gets_an_instance_type_that_holds_it_within_max_nodes` and
/// `a_pools_minimum_does_not_starve_jobs_that_need_a_larger_type`).
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
        if pool.scale_in_protection {
            continue;
        }
        let room = pool.max_nodes - pool.min_nodes;
        let types: Vec<u32> = pool
            .instance_types
            .iter()
            .filter_map(|n| cfg.instance_type_index(n))
            .map(|i| cfg.instance_types[i].gpus)
            .filter(|&gpus| gpus >= g)
            .collect();
        if !types.is_empty() && types.iter().all(|&gpus| w.div_ceil(gpus / g) <= room) {
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

/// Replays one case; returns an error naming the first broken rule.
fn drive(case: &Case) -> Result<(), String> {
    let toml = config_toml(&case.params);
    let cfg = Config::parse("prop.toml", &toml).map_err(|e| format!("generated config refused: {e}\n{toml}"))?;
    let jobs = workload(&cfg, case);
    let mut e = Engine::new(cfg.clone(), 0);
    let mut heap: BTreeMap<(Time, u64), Ev> = BTreeMap::new();
    let mut seq = 0u64;
    let mut launches = 0usize;
    // The attempt whose exit is pending, per job; a stop removes it.
    let mut pending_exit: BTreeMap<JobId, u32> = BTreeMap::new();
    let mut durations: Vec<Time> = Vec::new();
    let mut next = 0usize;
    let mut now: Time = 0;
    let last_submit = jobs.last().map_or(0, |j| j.0);
    let mut steps = 0usize;
    let mut quiet_wakes = 0u32;
    let trace = std::env::var_os("SPILLWAY_PT_TRACE").is_some();
    loop {
        // Carry out every action the engine asks for now.
        while let Some(a) = e.poll_action() {
            if trace {
                eprintln!("{now:>10} action {a:?}");
            }
            match a {
                Action::Launch { node, pool, .. } => {
                    let p = &cfg.pools[pool];
                    let alive = e.cluster().nodes.iter().filter(|n| n.pool == pool && n.alive()).count() as u32;
                    if alive > p.max_nodes {
                        return Err(format!("t={now}: pool {} has {alive} live nodes, max {}", p.name, p.max_nodes));
                    }
                    let roll = (launches as u64).wrapping_mul(2654435761) % 100;
                    let boot = case.boot_s[launches % case.boot_s.len()] as Time * 1000;
                    launches += 1;
                    seq += 1;
                    let ev = if (roll as u32) < case.fail_pct { Ev::Fail(node, roll % 2 == 0) } else { Ev::Ready(node) };
                    heap.insert((now + boot, seq), ev);
                }
                Action::StartJob { job, attempt, placement } => {
                    let j = e.job(job).ok_or("start of an unknown job")?;
                    if j.attempt != attempt || j.state != JobState::Running {
                        return Err(format!("t={now}: start of job {} attempt {attempt} but it is {:?}/{}", job.0, j.state, j.attempt));
                    }
                    if placement.len() != j.spec.workers as usize {
                        return Err(format!("t={now}: job {} started {} of {} workers", job.0, placement.len(), j.spec.workers));
                    }
                    let prio = cfg.tiers[j.tier].priority;
                    for &(n, _) in &placement {
                        let node = &e.cluster().nodes[n.0 as usize];
                        if prio == 0 && node.market == Market::Spot {
                            return Err(format!("t={now}: p0 job {} placed on spot node {}", job.0, n.0));
                        }
                    }
                    pending_exit.insert(job, attempt);
                    seq += 1;
                    heap.insert((now + durations[job.0 as usize], seq), Ev::Exit(job, attempt));
                }
                Action::StopJob { job, attempt, reason, .. } => {
                    if let StopReason::Preempted { by } = reason {
                        let v = e.job(job).ok_or("unknown victim")?;
                        let b = e.job(by).ok_or("unknown preemptor")?;
                        let (vp, bp) = (cfg.tiers[v.tier].priority, cfg.tiers[b.tier].priority);
                        if vp <= bp {
                            return Err(format!("t={now}: job {} (priority {vp}) preempted by job {} (priority {bp})", job.0, by.0));
                        }
                        if !case.params.preemption {
                            return Err(format!("t={now}: preemption with the policy off"));
                        }
                    }
                    if pending_exit.get(&job) == Some(&attempt) {
                        pending_exit.remove(&job);
                    }
                }
                Action::Terminate { node } => {
                    let n = &e.cluster().nodes[node.0 as usize];
                    if !n.jobs.is_empty() || n.used > 0 {
                        return Err(format!("t={now}: terminated node {} runs jobs", node.0));
                    }
                }
                Action::Record(_) => {}
            }
            e.check_invariants().map_err(|m| format!("t={now}: after an action: {m}"))?;
        }
        e.check_invariants().map_err(|m| format!("t={now}: {m}"))?;
        for (p, pool) in cfg.pools.iter().enumerate().filter(|(_, p)| p.market != Market::Fixed) {
            let alive = e.cluster().nodes.iter().filter(|n| n.pool == p && n.alive()).count() as u32;
            if alive > pool.max_nodes {
                return Err(format!("t={now}: pool {} has {alive} live nodes, max {}", pool.name, pool.max_nodes));
            }
        }
        let all_done = next == jobs.len() && e.cluster().jobs.iter().all(|j| j.state == JobState::Succeeded);
        if all_done {
            return Ok(());
        }
        steps += 1;
        let t_job = jobs.get(next).map(|j| j.0);
        let t_heap = heap.keys().next().map(|k| k.0);
        let t_wake = e.poll_timeout();
        let Some(t) = [t_job, t_heap, t_wake.map(|w| w.max(now))].into_iter().flatten().min() else {
            // The world is quiet but jobs remain. A daemon's periodic reconcile would wake the engine; do that a few
            // times before calling the case stuck (a job blocked on a pool that scale-in just emptied sleeps until
            // the next event: see `removing_an_idle_node_from_a_full_pool_lets_a_blocked_job_buy_at_once`).
            if quiet_wakes >= QUIET_WAKES {
                return Err(stuck(&e, now, "nothing left to happen, even after waking the engine"));
            }
            quiet_wakes += 1;
            now += QUIET_WAKE_MS;
            if trace {
                eprintln!("{now:>10} reconcile");
            }
            e.handle_timeout(now);
            continue;
        };
        quiet_wakes = 0;
        if t > last_submit + LIVENESS_MS || steps > MAX_STEPS {
            return Err(stuck(&e, now, "the liveness phase ran out of time"));
        }
        now = t;
        while jobs.get(next).is_some_and(|j| j.0 == now) {
            let (_, d, spec) = &jobs[next];
            if trace {
                eprintln!("{now:>10} submit {} {} {}x{} for {d} ms", spec.name, spec.tier, spec.gpus_per_worker, spec.workers);
            }
            let id = e.submit(now, spec.clone()).map_err(|err| format!("t={now}: submit refused: {err}"))?;
            assert_eq!(id.0 as usize, durations.len());
            durations.push(*d);
            next += 1;
            e.check_invariants().map_err(|m| format!("t={now}: after submit: {m}"))?;
        }
        while let Some((&(at, s), &ev)) = heap.iter().next() {
            if at != now {
                break;
            }
            heap.remove(&(at, s));
            if trace {
                eprintln!("{now:>10} event {ev:?}");
            }
            let res = match ev {
                Ev::Ready(node) => e.handle_event(now, Event::NodeReady { node }),
                Ev::Fail(node, capacity) => {
                    let error = if capacity { LaunchError::InsufficientCapacity } else { LaunchError::Transient("x".into()) };
                    e.handle_event(now, Event::LaunchFailed { node, error })
                }
                Ev::Exit(job, attempt) => {
                    if pending_exit.get(&job) != Some(&attempt) {
                        continue;
                    }
                    pending_exit.remove(&job);
                    e.handle_event(now, Event::JobExited { job, attempt, success: true })
                }
            };
            res.map_err(|err| format!("t={now}: event refused: {err}"))?;
            e.check_invariants().map_err(|m| format!("t={now}: after {ev:?}: {m}"))?;
        }
        if t_wake.is_some_and(|w| w <= now) {
            if trace {
                eprintln!("{now:>10} timeout");
            }
            e.handle_timeout(now);
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
        .map(|j| format!("job {} {} {}x{} {:?} {:?}", j.id.0, j.spec.tier, j.spec.gpus_per_worker, j.spec.workers, j.state, j.pending))
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
