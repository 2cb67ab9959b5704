//! A pass that remembers decides exactly as one that searches afresh for every queued job, on queues of
//! thousands: the overload workload against `examples/budgets-queue.toml` (thousands of jobs inside their
//! waiting budgets at once), with and without `burst_early` (also with short budgets, which owned capacity often
//! cannot meet), and with durations hidden (budgets sized by each team's run times, or of fixed length). The
//! default engine remembers shapes that found no room, jobs known to wait inside their budgets (passed by, left
//! waiting unread, or the walk ended before them) and where a walk may stop; with `SimOptions::exhaustive` it
//! visits every job at every pass. The actions (launches, terminations, starts and stops) and the instants they
//! come at must be the same. Decision records are left out: a walk that settles tells the jobs it did not reach
//! why they wait before the scale-out planner speaks, and an exhaustive walk never settles.
//! `crates/spillway-core/tests/proptest_engine.rs` checks the same property on random small clusters.

use spillway_core::Action;
use spillway_core::Config;
use spillway_core::time::Time;
use spillway_sim::input::{SimJob, to_sim_jobs};
use spillway_sim::sim::{SimOptions, simulate};
use spillway_sim::trace::backlog::Overload;
use std::path::Path;

/// An action with the instant it was asked for.
type Acted = (Time, Action);

fn example(name: &str) -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    Config::parse(&path.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"))
}

/// Replays `jobs` on `cfg` remembering and exhaustively; returns the first difference in their actions, if any.
fn difference(label: &str, cfg: &Config, jobs: &[SimJob]) -> Option<String> {
    let opts = SimOptions { keep_actions: true, ..SimOptions::default() };
    let run = |exhaustive| {
        simulate(cfg, jobs, &SimOptions { exhaustive, ..opts.clone() }).unwrap_or_else(|e| panic!("{label}: {e}"))
    };
    let (fast, full) = (run(false), run(true));
    println!(
        "{label}: {} actions in {} steps remembering, {} in {} steps searching afresh",
        fast.actions.len(),
        fast.events,
        full.actions.len(),
        full.events
    );
    let (a, b): (&[Acted], &[Acted]) = (&fast.actions, &full.actions);
    let i = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let t0 = cfg.start_ms;
    let show = |v: &[Acted]| -> String {
        let near = &v[i.saturating_sub(2).min(v.len())..(i + 3).min(v.len())];
        near.iter().map(|(t, a)| format!("\n    t={:.3} s {a:?}", (t - t0) as f64 / 1000.0)).collect()
    };
    Some(format!("{label}: action {i} differs\n  remembering:{}\n  searching afresh:{}", show(a), show(b)))
}

/// The overload trace of `n` jobs sized against the budgets config's 3,200 owned GPUs.
fn overload(cfg: &Config, n: usize, seed: u64) -> Vec<SimJob> {
    let trace = Overload { jobs: n, gpus: 3_200, seed }.generate();
    to_sim_jobs(&trace, cfg).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn remembering_changes_no_action_where_thousands_wait_inside_their_budgets() {
    let budgets = example("budgets-queue.toml");
    let mut early = budgets.clone();
    for t in early.tiers.iter_mut().skip(1) {
        t.burst_early = true;
    }
    // Short budgets: owned capacity a `burst_early` job counted on is often taken before its budget ends.
    let mut early_short = early.clone();
    for t in early_short.tiers.iter_mut().skip(1) {
        (t.burst_after_s, t.burst_wait_per_gpu_hour_s) = (900.0, 60.0);
    }
    let jobs = overload(&budgets, 10_000, 1);
    // Durations hidden, with budgets of fixed length (a budget sized by the team's run times is never noted).
    let mut fixed = budgets.clone();
    for t in fixed.tiers.iter_mut().skip(1) {
        t.burst_wait_per_gpu_hour_s = 0.0;
    }
    let mut hidden = jobs.clone();
    for j in hidden.iter_mut().filter(|j| j.spec.deadline.is_none()) {
        j.spec.expected_duration_ms = None;
    }
    let failures: Vec<String> = [
        difference("budgets", &budgets, &jobs),
        difference("budgets, durations hidden", &budgets, &hidden),
        difference("fixed budgets, durations hidden", &fixed, &hidden),
        difference("budgets, burst_early", &early, &jobs),
        difference("short budgets, burst_early", &early_short, &jobs),
        difference("short budgets, burst_early, seed 3", &early_short, &overload(&budgets, 10_000, 3)),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(failures.is_empty(), "remembering changed decisions:\n{}", failures.join("\n"));
}

/// The capped-spot pattern (a capped spot pool, thousands of `p2` jobs waiting for it while on-demand has room),
/// where a walk pauses for the scale-out planner to tell it whether it may settle (`schedule/probe.rs`): nodes
/// booting and nodes held for gangs there are what keeps a walk from settling on its own.
#[test]
fn remembering_changes_no_action_where_the_planner_tells_a_walk_it_may_settle() {
    use spillway_sim::trace::backlog::CappedSpot;
    let cfg = example("capped-spot.toml");
    let mut failures = Vec::new();
    for seed in [1, 8] {
        let trace = CappedSpot { jobs: 3_000, days: 28.0 * 3_000.0 / 15_000.0, seed }.generate();
        let jobs = to_sim_jobs(&trace, &cfg).unwrap_or_else(|e| panic!("{e}"));
        for policy in ["spillway", "on-demand-reactive"] {
            let policy_cfg = spillway_sim::policies::config_for(policy, &cfg, &jobs).expect("a known policy");
            failures.extend(difference(&format!("capped-spot seed {seed}, {policy}"), &policy_cfg, &jobs));
        }
    }
    assert!(failures.is_empty(), "remembering changed decisions:\n{}", failures.join("\n"));
}
