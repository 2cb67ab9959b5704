//! Nodes Slurm asks for by name, as a Slurm admin states what they expect: a p0 job's node is never spot and a
//! p2 job's is always spot; each node is the cheapest offering its tier may use, and a failed launch tries the
//! next one before the node goes back to Slurm with the reason; a capped pool says so instead of leaving Slurm
//! waiting; the node is billed to the team and tier of the job that asked; Spillway never puts its own jobs on
//! it and never scales it in; the cloud taking it hands it back to Slurm.

use spillway_core::{Action, Event, LaunchError, Market, NodeId, ReturnWhy};

mod common;
use common::*;

const SLURM: &str = r#"
[[teams]]
name = "research"

[[instance_types]]
name = "h8"
gpus = 8
gpu_model = "H100"
on_demand_usd_per_hour = 98.0
spot_usd_per_hour = 39.0

[[instance_types]]
name = "h8-premium"
gpus = 8
gpu_model = "H100"
on_demand_usd_per_hour = 120.0
spot_usd_per_hour = 55.0

[[instance_types]]
name = "a4"
gpus = 4
gpu_model = "A100"
on_demand_usd_per_hour = 16.0
spot_usd_per_hour = 6.0

[[pools]]
name = "slurm-spot"
market = "spot"
instance_types = ["h8-premium", "h8", "a4"]
max_nodes = 2
scheduler = "slurm"
idle_timeout_s = 60

[[pools]]
name = "slurm-od"
market = "on_demand"
instance_types = ["h8-premium", "h8"]
max_nodes = 2
scheduler = "slurm"
idle_timeout_s = 60

[[pools]]
name = "own-spot"
market = "spot"
instance_types = ["h8"]
max_nodes = 2
"#;

fn request(name: &str, tier: &str) -> Event {
    Event::NodeRequested {
        name: name.into(),
        pools: vec!["slurm-spot".into(), "slurm-od".into()],
        gpus: 8,
        gpu_model: Some("H100".into()),
        tier: tier.into(),
        team: "research".into(),
        why: format!("Slurm job for {name}"),
    }
}

/// Returns the (pool name, market, type name) of each launch in `actions`.
fn bought(h: &Harness, actions: &[Action]) -> Vec<(String, Market, String)> {
    let cfg = h.e.config();
    launches(actions)
        .iter()
        .map(|&(_, p, it)| (cfg.pools[p].name.clone(), cfg.pools[p].market, cfg.instance_types[it].name.clone()))
        .collect()
}

fn returned(actions: &[Action]) -> Vec<(String, ReturnWhy)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ReturnNode { name, why } => Some((name.clone(), why.clone())),
            _ => None,
        })
        .collect()
}

fn spot_h8() -> (String, Market, String) {
    ("slurm-spot".into(), Market::Spot, "h8".into())
}

#[test]
fn p0_is_never_on_spot_p2_always_and_each_node_is_the_cheapest_its_tier_may_use() {
    let mut h = Harness::new(SLURM);
    for (name, tier, want) in [
        ("c1", "p0", ("slurm-od".to_string(), Market::OnDemand, "h8".to_string())),
        ("c2", "p1", spot_h8()),
        ("c3", "p2", spot_h8()),
    ] {
        h.event(request(name, tier));
        let a = h.drain();
        assert_eq!(bought(&h, &a), [want], "{name} ({tier}): {a:?}");
    }
    // The A100 type is cheaper but does not hold the node's 8 H100s.
    assert!(bought(&h, &[]).is_empty());
}

#[test]
fn a_failed_launch_tries_the_next_offering_then_goes_back_to_slurm_with_the_reason() {
    let mut h = Harness::new(SLURM);
    h.event(request("c1", "p1"));
    let mut order = Vec::new();
    let mut a = h.drain();
    for _ in 0..4 {
        let l = launches(&a);
        assert_eq!(l.len(), 1, "{a:?}");
        order.extend(bought(&h, &a));
        h.event(Event::LaunchFailed { node: l[0].0, error: LaunchError::InsufficientCapacity });
        a = h.drain();
    }
    let names: Vec<(Market, &str)> = order.iter().map(|(_, m, t)| (*m, t.as_str())).collect();
    assert_eq!(
        names,
        [
            (Market::Spot, "h8"),
            (Market::Spot, "h8-premium"),
            (Market::OnDemand, "h8"),
            (Market::OnDemand, "h8-premium")
        ],
        "cheapest first, spot before its on-demand fallback"
    );
    let r = returned(&a);
    assert_eq!(r.len(), 1, "{a:?}");
    assert!(matches!(&r[0].1, ReturnWhy::CannotLaunch(why) if why.contains("4 launches failed")), "{r:?}");
    assert!(h.e.held_node("c1").is_none());

    // A p2 node has only spot: with both spot types backed off, it goes back at once, saying why.
    h.event(request("c2", "p2"));
    let a = h.drain();
    let r = returned(&a);
    assert!(launches(&a).is_empty(), "{a:?}");
    assert!(
        matches!(&r[0].1, ReturnWhy::CannotLaunch(why) if why.contains("pool slurm-spot: every type with 8 GPUs failed to launch lately")
            && why.contains("pool slurm-od: tier p2 may not use on_demand")),
        "{r:?}"
    );
}

#[test]
fn a_capped_pool_hands_the_node_back_instead_of_leaving_slurm_waiting() {
    let mut h = Harness::new(SLURM);
    for name in ["c1", "c2"] {
        h.event(request(name, "p2"));
        assert_eq!(launches(&h.drain()).len(), 1);
    }
    h.event(request("c3", "p2"));
    let a = h.drain();
    assert!(launches(&a).is_empty());
    assert!(matches!(&returned(&a)[0].1, ReturnWhy::CannotLaunch(w) if w.contains("at its max of 2 nodes")), "{a:?}");
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let mut h = Harness::new(SLURM);
    h.event(request("c1", "p1"));
    h.drain();
    let nodes = h.e.cluster().nodes.len();
    let mut bad = vec![request("c1", "p1"), request("c2", "p9"), Event::NodeReleased { name: "c9".into() }];
    let mut own = request("c2", "p1");
    if let Event::NodeRequested { pools, .. } = &mut own {
        *pools = vec!["own-spot".into()];
    }
    bad.push(own);
    for ev in bad {
        let what = format!("{ev:?}");
        let e = h.e.handle_event(h.now, ev).expect_err(&what);
        assert!(e.to_string().starts_with("node c"), "{what}: {e}");
        assert!(h.drain().is_empty(), "{what}");
    }
    assert_eq!(h.e.cluster().nodes.len(), nodes);
}

#[test]
fn a_slurm_node_runs_no_spillway_job_never_scales_in_and_bills_its_team_and_tier() {
    let mut h = Harness::new(SLURM);
    h.event(request("c1", "p2"));
    let node = launches(&h.drain())[0].0;
    h.at(10.0);
    h.event(Event::NodeReady { node });
    h.drain();
    // Eight free GPUs on a ready node: a Spillway job of 8 GPUs buys its own node instead.
    let job = h.submit(spec("p1", 8, 1));
    let a = h.run_until(120.0);
    assert!(started(&a, job).is_none(), "{a:?}");
    assert_eq!(bought(&h, &a), [("own-spot".to_string(), Market::Spot, "h8".to_string())], "{a:?}");
    // Idle far past the pool's idle timeout: still there, until Slurm releases it.
    let a = h.run_until(3600.0);
    assert!(!terminates(&a).contains(&node), "{a:?}");
    h.event(Event::NodeReleased { name: "c1".into() });
    assert_eq!(terminates(&h.drain()), [node]);
    let l = &h.e.cluster().ledger;
    let usd = 39.0 * 3600.0 / 3600.0;
    let team = h.e.cluster().teams.iter().position(|t| t.name == "research").unwrap();
    assert!((l.by_team[team] - usd).abs() < 1e-6, "{:?}", l.by_team);
    assert!((l.by_tier[2] - usd).abs() < 1e-6, "{:?}", l.by_tier);
    assert_eq!(l.node_ms_by_market[Market::Spot.index()], 3_600_000);
}

#[test]
fn the_cloud_taking_a_slurm_node_hands_it_back_to_slurm() {
    let mut h = Harness::new(SLURM);
    h.event(request("c1", "p1"));
    h.event(request("c2", "p1"));
    let l = launches(&h.drain());
    let (a, b): (NodeId, NodeId) = (l[0].0, l[1].0);
    h.at(5.0);
    h.event(Event::NodeReady { node: a });
    h.event(Event::NodeReady { node: b });
    h.drain();
    // A rebalance recommendation moves nothing of Slurm's (and never ends the node behind Slurm's back).
    h.event(Event::RebalanceRecommendation { node: a });
    let acts = h.run_until(600.0);
    assert!(terminates(&acts).is_empty() && returned(&acts).is_empty(), "{acts:?}");
    h.notice(a, 120.0);
    let r = returned(&h.drain());
    assert_eq!(r.len(), 1);
    assert!(matches!(r[0], (ref n, ReturnWhy::Interrupted { .. }) if n == "c1"), "{r:?}");
    h.event(Event::NodeLost { node: b });
    assert_eq!(returned(&h.drain()), [("c2".to_string(), ReturnWhy::Lost)]);
    // A lost name may be asked for again.
    h.event(request("c2", "p1"));
    assert_eq!(launches(&h.drain()).len(), 1);
}
