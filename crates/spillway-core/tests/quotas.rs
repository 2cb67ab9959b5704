//! Account quotas and live spot prices, as a user states them: the engine never plans a launch beyond a vCPU
//! quota (the jobs it leaves waiting say why, and other pools still serve them); nodes that end give their quota
//! back; a spot price from the cloud changes which offering is bought and what new nodes cost.

use spillway_core::{DecisionKind, Event, Market, NodeId};

mod common;
use common::*;

const CLOUD: &str = r#"
[tiers.p1]
burst_after_s = 0

[[instance_types]]
name = "a8"
gpus = 8
gpu_model = "V100"
vcpus = 32
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 5.0

[[instance_types]]
name = "b8"
gpus = 8
gpu_model = "V100"
vcpus = 32
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 7.0

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["a8"]
max_nodes = 8

[[pools]]
name = "spot"
market = "spot"
instance_types = ["a8", "b8"]
max_nodes = 8
"#;

const SPOT_POOL: usize = 1;

fn with_quota(max_vcpus: u32) -> String {
    format!(
        "{CLOUD}\n[[quotas]]\nname = \"v-spot\"\nmarket = \"spot\"\ninstance_types = [\"a8\", \"b8\"]\nmax_vcpus = {max_vcpus}\n"
    )
}

#[test]
fn no_launch_is_planned_beyond_a_vcpu_quota_and_the_waiting_jobs_say_why() {
    let mut h = Harness::new(&with_quota(64));
    // p1 may fall back to on-demand; p2 may use spot only.
    let p1: Vec<_> = (0..3).map(|_| h.submit(spec("p1", 8, 1))).collect();
    let a = h.drain();
    let spot: Vec<_> = launches(&a).into_iter().filter(|&(_, p, _)| p == SPOT_POOL).collect();
    assert_eq!(spot.len(), 2, "64 vCPUs hold two 32-vCPU spot nodes: {a:?}");
    assert_eq!(launches(&a).len(), 3, "the third p1 job gets on-demand at once: {a:?}");
    let p2 = h.submit(spec("p2", 8, 1));
    let a = h.run_until(120.0);
    assert!(launches(&a).iter().all(|&(_, p, _)| p != SPOT_POOL), "no spot launch beyond the quota: {a:?}");
    let blocked = h.records_of(DecisionKind::ScaleOutBlocked, "quota");
    assert!(!blocked.is_empty(), "the spot pool says the quota stops it: {:?}", h.records);
    assert!(blocked[0].detail.contains("quota"), "{:?}", blocked[0]);
    let _ = (p1, p2);
}

#[test]
fn nodes_that_end_give_their_quota_back() {
    let mut h = Harness::new(&with_quota(32));
    let first = h.submit(spec("p1", 8, 1));
    let a = h.drain();
    let spot: Vec<_> = launches(&a).into_iter().filter(|&(_, p, _)| p == SPOT_POOL).collect();
    assert_eq!(spot.len(), 1, "{a:?}");
    h.at(300.0);
    h.event(Event::NodeReady { node: spot[0].0 });
    h.drain();
    // A second spot job finds the quota spent: no second spot node while the first runs.
    h.at(400.0);
    h.submit(spec("p1", 8, 1));
    let a = h.drain();
    assert!(launches(&a).iter().all(|&(_, p, _)| p != SPOT_POOL), "{a:?}");
    // The first node is lost: its vCPUs count no more, so the pool may buy again.
    h.at(500.0);
    h.event(Event::NodeLost { node: spot[0].0 });
    let a = h.drain();
    assert!(launches(&a).iter().any(|&(_, p, _)| p == SPOT_POOL), "the quota is free again: {a:?}");
    let _ = first;
}

#[test]
fn a_quota_naming_a_type_without_vcpus_or_an_unknown_type_is_refused_with_its_key() {
    let cfg = CLOUD.replace("vcpus = 32\n", "");
    let text =
        format!("{cfg}\n[[quotas]]\nname = \"q\"\nmarket = \"spot\"\ninstance_types = [\"a8\"]\nmax_vcpus = 64\n");
    let e = spillway_core::Config::parse("q.toml", &text).unwrap_err().to_string();
    assert!(e.contains("quotas[0].instance_types") && e.contains("vcpus"), "{e}");
    let text =
        format!("{CLOUD}\n[[quotas]]\nname = \"q\"\nmarket = \"spot\"\ninstance_types = [\"zz\"]\nmax_vcpus = 64\n");
    let e = spillway_core::Config::parse("q.toml", &text).unwrap_err().to_string();
    assert!(e.contains("no instance type `zz`"), "{e}");
    let text =
        format!("{CLOUD}\n[[quotas]]\nname = \"q\"\nmarket = \"fixed\"\ninstance_types = [\"a8\"]\nmax_vcpus = 64\n");
    assert!(spillway_core::Config::parse("q.toml", &text).unwrap_err().to_string().contains("quotas[0].market"));
}

#[test]
fn a_spot_price_from_the_cloud_changes_the_offering_bought_and_what_new_nodes_cost() {
    let mut h = Harness::new(CLOUD);
    h.event(Event::SpotPrice { instance_type: "a8".into(), usd_per_hour: 9.0, pool: None });
    h.drain();
    assert_eq!(h.records_of(DecisionKind::Admin, "spot_price").len(), 1);
    h.submit(spec("p1", 8, 1));
    let a = h.drain();
    let l = launches(&a);
    assert_eq!(l.len(), 1, "{a:?}");
    assert_eq!((l[0].1, l[0].2), (SPOT_POOL, 1), "b8 at $7 is now the cheaper spot offering: {l:?}");
    let n = h.node(l[0].0);
    assert_eq!((n.market, n.price_usd_per_hour), (Market::Spot, 7.0));
    // The same price again records nothing; a bad one is refused; an unknown type changes nothing.
    h.event(Event::SpotPrice { instance_type: "a8".into(), usd_per_hour: 9.0, pool: None });
    h.drain();
    assert_eq!(h.records_of(DecisionKind::Admin, "spot_price").len(), 1);
    assert!(
        h.e.handle_event(h.now, Event::SpotPrice { instance_type: "a8".into(), usd_per_hour: f64::NAN, pool: None })
            .is_err()
    );
    h.event(Event::SpotPrice { instance_type: "nope".into(), usd_per_hour: 1.0, pool: None });
    let _ = NodeId(0);
}
