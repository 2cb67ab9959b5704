//! Team budgets as a finance lead states them: "tell me at 50%, 80% and 100% of the team's daily budget, when it
//! happens, not whenever something else happens to wake the scheduler"; "once a capped team has spent its budget,
//! buy nothing more for it, and only for it"; "a new day starts afresh".

mod common;

use common::{Harness, launches, spec_of};
use spillway_core::{Action, DecisionKind, NotGrown, PendingReason};

/// One on-demand pool of 8-GPU nodes at 36 USD/h: an 8-GPU job costs its team 0.01 USD a second.
fn config(budget: &str) -> String {
    format!(
        r#"
[[teams]]
name = "a"
[[teams]]
name = "b"

[[instance_types]]
name = "vm8"
gpus = 8
gpu_model = "A100"
on_demand_usd_per_hour = 36.0
spot_usd_per_hour = 12.0

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["vm8"]
max_nodes = 4
scale_out_cooldown_s = 0

[[pools]]
name = "spot"
market = "spot"
instance_types = ["vm8"]
max_nodes = 4

{budget}
"#
    )
}

const ALERTS: &str = r#"
[[budgets]]
team = "a"
period = "day"
usd = 3.6
"#;

/// Runs team a's 8-GPU job from t = 10 s (its node boots in 10 s) to `until`, the engine woken when it asks and,
/// with `extra`, every 7 s besides; returns the times (s) and shares of the budget alerts.
fn alerts(extra: bool, until: f64) -> Vec<(f64, f64)> {
    let mut h = Harness::new(&config(ALERTS));
    h.submit(spec_of("p0", "a", 8, 1));
    let mut out = Vec::new();
    let mut t = 0.0;
    while t < until {
        t = if extra { (t + 7.0f64).min(until) } else { until };
        for a in h.run_world(t, 10.0) {
            if let Action::BudgetAlert(b) = a {
                out.push((b.share, b.spent_usd));
            }
        }
        if extra {
            h.timeout();
            h.drain();
        }
    }
    let times: Vec<f64> =
        h.records_of(DecisionKind::Budget, "budget_alert").iter().map(|d| d.at as f64 / 1000.0).collect();
    assert_eq!(times.len(), out.len(), "one record per alert");
    times.into_iter().zip(out).map(|(t, (share, _))| (t, share)).collect()
}

#[test]
fn alerts_come_at_each_share_when_it_is_crossed_and_in_order() {
    let got = alerts(false, 600.0);
    // 0.01 USD/s from t = 10 s: 1.8 USD at 190 s, 2.88 at 298 s, 3.6 at 370 s (to the millisecond or two).
    let want = [(190.0, 0.5), (298.0, 0.8), (370.0, 1.0)];
    assert_eq!(got.len(), 3, "{got:?}");
    for ((t, share), (wt, ws)) in got.iter().zip(want) {
        assert_eq!(*share, ws);
        assert!((t - wt).abs() <= 0.003, "the {ws} alert came at {t} s, not {wt} s");
    }
    // The same instants when the engine is also woken every 7 s for nothing.
    assert_eq!(alerts(true, 600.0), got, "an unrelated wake-up moved an alert");
}

#[test]
fn a_spent_hard_cap_stops_buying_for_that_team_only_until_the_day_ends() {
    let mut h = Harness::new(&config(
        r#"
[[budgets]]
team = "a"
period = "day"
usd = 1.8
hard_cap = true
"#,
    ));
    h.submit(spec_of("p0", "a", 8, 1));
    h.run_world(189.0, 10.0);
    assert!(h.records_of(DecisionKind::Budget, "budget_cap").is_empty(), "capped before the budget was spent");
    h.run_world(200.0, 10.0);
    let cap = h.records_of(DecisionKind::Budget, "budget_cap");
    assert_eq!(cap.len(), 1);
    assert!((cap[0].at as f64 / 1000.0 - 190.0).abs() <= 0.003, "capped at {} ms", cap[0].at);
    // Over its cap, team a's next job buys nothing; team b's buys its node.
    let a2 = h.submit(spec_of("p0", "a", 8, 1));
    let b1 = h.submit(spec_of("p0", "b", 8, 1));
    h.timeout();
    let acts = h.drain();
    assert_eq!(launches(&acts).len(), 1, "one node, for team b: {acts:?}");
    h.boot(&acts, 10.0);
    h.run_world(300.0, 10.0);
    assert!(h.job(b1).first_start.is_some(), "team b's job runs");
    let j = h.job(a2);
    assert_eq!((j.pending, j.not_grown.map(|w| w.1)), (PendingReason::NoCapacity, Some(NotGrown::BudgetCap)));
    // The first job of team a keeps running: the cap stops buying, not work.
    assert_eq!(h.e.cluster().nodes.iter().filter(|n| n.alive()).count(), 2);
    // At midnight UTC the day's budget starts afresh: team a's job gets its node.
    h.run_world(86_399.0, 10.0);
    assert!(h.job(a2).first_start.is_none());
    h.run_world(86_420.0, 10.0);
    let started = h.job(a2).first_start.expect("team a's job runs the next day") as f64 / 1000.0;
    assert!((86_400.0..=86_411.0).contains(&started), "started at {started} s");
    let status = h.e.budget_status(h.now);
    assert_eq!(status.len(), 1);
    assert!(!status[0].capping && status[0].spent_usd < 1.8, "{status:?}");
}

#[test]
fn a_hard_cap_is_announced_once_even_without_a_share_of_100_percent() {
    let mut h = Harness::new(&config(
        "[[budgets]]\nteam = \"a\"\nperiod = \"day\"\nusd = 1.8\nhard_cap = true\nalert_at = [0.5]",
    ));
    h.submit(spec_of("p0", "a", 8, 1));
    h.run_world(400.0, 10.0);
    let reasons: Vec<&str> = h.records.iter().filter(|d| d.kind == DecisionKind::Budget).map(|d| d.reason).collect();
    assert_eq!(reasons, ["budget_alert", "budget_cap"]);
}
