//! What the cloud says about an instance, as the daemon's state machine acts on it: an interruption warning is
//! the engine's notice with the cloud's deadline, once; a rebalance recommendation puts the node at risk, once; a
//! notice the agent saw first (instance metadata) counts the same; a notice that comes before the launch's answer
//! is not lost; an instance that went away is fenced at once.

use spillway_api::{Heartbeat, NodeNotice};
use spillway_core::{Config, Engine, JobSpec, NodeState, Time};
use spillway_providers::{Notice, NoticeKind, SpotQuote};
use spillway_server::state::{Effect, State, StateOptions};
use spillway_server::store::{Entry, JobCommand, Store};

const T0: Time = 1_800_000_000_000;
const CONFIG: &str = r#"
[tiers.p1]
burst_after_s = 0

[[instance_types]]
name = "g1"
gpus = 1
gpu_model = "T4"
on_demand_usd_per_hour = 1.0
spot_usd_per_hour = 0.3

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["g1"]
max_nodes = 2

[[pools]]
name = "spot"
market = "spot"
instance_types = ["g1"]
max_nodes = 2
"#;

/// A state with one p1 job that asked for a spot node; returns it and that node.
fn launching(name: &str) -> (State, u32) {
    launching_for(name, "p1")
}

/// A fresh daemon state on config `text`, in a data dir of its own.
fn state_on(name: &str, text: &str) -> State {
    let dir = std::env::temp_dir().join(format!("spillway-notices-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let opts = StateOptions {
        jobs_dir: dir.join("jobs"),
        cluster_id: "c".into(),
        heartbeat_timeout_ms: 3_000,
        boot_grace_ms: 5_000,
        reconcile_every_ms: 60_000,
        max_backlog: (10, 1 << 20),
    };
    let engine = Engine::new(Config::parse("n.toml", text).unwrap(), T0);
    State::new(engine, Store::open(&dir.join("spillway.db")).unwrap(), opts, T0)
}

/// A state with one job of `tier` that asked for a node; returns it and that node.
fn launching_for(name: &str, tier: &str) -> (State, u32) {
    let mut st = state_on(name, CONFIG);
    let spec = JobSpec {
        name: "j".into(),
        tier: tier.into(),
        team: "default".into(),
        gpus_per_worker: 1,
        workers: 1,
        min_workers: None,
        gpu_model: None,
        interruptible: None,
        checkpoint_interval_ms: Some(60_000),
        deadline: None,
        expected_duration_ms: None,
        checkpoint_gb: None,
        data_region: None,
    };
    let command = JobCommand { argv: vec!["sleep".into(), "100".into()], ..Default::default() };
    st.apply(T0, Entry::Submit { spec, command }).unwrap();
    st.apply(T0, Entry::Wake).unwrap();
    let node = st
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Launch { node, .. } => Some(*node),
            _ => None,
        })
        .expect("a spot node is launched for the job");
    st.effects.clear();
    (st, node)
}

fn beat(st: &mut State, now: Time, node: u32, seq: u64, notices: Vec<NodeNotice>) {
    let hb = Heartbeat { node, seq, notices, ..Default::default() };
    st.heartbeat(now, &hb).unwrap().expect("the node is alive");
}

fn interruption(instance: &str, deadline_ms: Option<i64>) -> Notice {
    Notice { instance_id: instance.into(), kind: NoticeKind::Interruption { deadline_ms } }
}

#[test]
fn an_interruption_warning_is_the_engines_notice_with_the_clouds_deadline_once() {
    let (mut st, node) = launching("once");
    st.launch_result(T0 + 10, node, Ok("i-1".into())).unwrap();
    beat(&mut st, T0 + 20, node, 1, vec![]);
    assert_eq!(st.node_state(node), Some(NodeState::Ready));
    st.notice(T0 + 1_000, &interruption("i-1", Some(T0 + 121_000))).unwrap();
    assert_eq!(st.reclaim_at.get(&node), Some(&(T0 + 121_000)), "the cloud's deadline, not the pool's");
    assert_eq!(st.node_state(node), Some(NodeState::Draining));
    let seq = st.store.last_seq();
    // The same warning again (SQS delivers at least once), or from the agent's metadata poll: nothing new.
    st.notice(T0 + 2_000, &interruption("i-1", Some(T0 + 121_000))).unwrap();
    beat(&mut st, T0 + 2_500, node, 2, vec![NodeNotice::Interruption { deadline_ms: Some(T0 + 121_000) }]);
    assert_eq!(st.store.last_seq(), seq, "a repeated notice logs nothing");
    // Notices about instances of no node of ours (the queue may be shared) change nothing either.
    st.notice(T0 + 3_000, &interruption("i-someone-else", None)).unwrap();
    assert_eq!(st.store.last_seq(), seq);
}

#[test]
fn a_notice_that_comes_before_the_launchs_answer_is_acted_on_when_the_answer_comes() {
    let (mut st, node) = launching("early");
    // The agent is up and the warning arrives while CreateFleet's answer is still on its way.
    beat(&mut st, T0 + 20, node, 1, vec![]);
    st.notice(T0 + 30, &interruption("i-7", Some(T0 + 120_030))).unwrap();
    assert!(st.reclaim_at.is_empty(), "not known to be ours yet");
    st.launch_result(T0 + 40, node, Ok("i-7".into())).unwrap();
    assert_eq!(st.reclaim_at.get(&node), Some(&(T0 + 120_030)));
}

#[test]
fn a_rebalance_recommendation_from_the_queue_or_the_agent_puts_the_node_at_risk_once() {
    let (mut st, node) = launching("rebalance");
    st.launch_result(T0 + 10, node, Ok("i-2".into())).unwrap();
    beat(&mut st, T0 + 20, node, 1, vec![]);
    beat(&mut st, T0 + 1_000, node, 2, vec![NodeNotice::Rebalance]);
    let n = &st.engine.cluster().nodes[node as usize];
    assert!(n.at_risk && n.state == NodeState::Draining, "{n:?}");
    let seq = st.store.last_seq();
    beat(&mut st, T0 + 1_500, node, 3, vec![NodeNotice::Rebalance]);
    st.notice(T0 + 1_600, &Notice { instance_id: "i-2".into(), kind: NoticeKind::Rebalance }).unwrap();
    assert_eq!(st.store.last_seq(), seq, "a repeated recommendation logs nothing");
    // The job keeps running and a replacement is bought for it.
    assert!(st.effects.iter().any(|e| matches!(e, Effect::Launch { node: n, .. } if *n != node)), "{:?}", st.effects);
}

#[test]
fn an_instance_that_went_away_is_fenced_at_once() {
    let (mut st, node) = launching("gone");
    st.launch_result(T0 + 10, node, Ok("i-3".into())).unwrap();
    beat(&mut st, T0 + 20, node, 1, vec![]);
    st.notice(T0 + 100, &Notice { instance_id: "i-3".into(), kind: NoticeKind::Gone { state: "terminated".into() } })
        .unwrap();
    assert!(st.effects.iter().any(|e| matches!(e, Effect::Fence { node: n } if *n == node)), "{:?}", st.effects);
}

#[test]
fn polled_spot_prices_reach_the_engine_once_per_change() {
    let (mut st, _) = launching("prices");
    let seq = st.store.last_seq();
    st.spot_prices(T0 + 10, &[quote("g1", None, 0.25), quote("unknown-type", None, 9.0)]).unwrap();
    let cfg = st.engine.config();
    assert_eq!(cfg.offer_price(cfg.pools.iter().position(|p| p.name == "spot").unwrap(), 0), Some(0.25));
    assert_eq!(st.store.last_seq(), seq + 1, "one logged change (so a restart replays the same price)");
    st.spot_prices(T0 + 20, &[quote("g1", None, 0.25)]).unwrap();
    assert_eq!(st.store.last_seq(), seq + 1, "an unchanged price logs nothing");
}

fn quote(instance_type: &str, zone: Option<&str>, usd_per_hour: f64) -> SpotQuote {
    SpotQuote { instance_type: instance_type.into(), zone: zone.map(Into::into), usd_per_hour }
}

#[test]
fn a_pool_in_a_zone_pays_that_zones_price_a_pool_without_one_the_lowest_and_an_unquoted_zone_its_own() {
    let zoned = format!(
        "{CONFIG}\n[[pools]]\nname = \"spot-a\"\nmarket = \"spot\"\ninstance_types = [\"g1\"]\nmax_nodes = 2\n\
         zone = \"us-east-1a\"\n\n[[pools]]\nname = \"spot-b\"\nmarket = \"spot\"\ninstance_types = [\"g1\"]\n\
         max_nodes = 2\nzone = \"us-east-1b\"\nspot_usd_per_hour = {{ g1 = 0.5 }}\n\n[[pools]]\nname = \"spot-d\"\n\
         market = \"spot\"\ninstance_types = [\"g1\"]\nmax_nodes = 2\nzone = \"us-east-1d\"\n"
    );
    let mut st = state_on("zones", &zoned);
    let quotes = [
        quote("g1", Some("us-east-1a"), 0.20),
        quote("g1", Some("us-east-1b"), 0.40),
        quote("g1", Some("us-east-1c"), 0.10),
        quote("g1", Some("us-east-1a"), f64::NAN),
    ];
    let seq = st.store.last_seq();
    st.spot_prices(T0 + 10, &quotes).unwrap();
    let cfg = st.engine.config();
    let price = |pool: &str| cfg.offer_price(cfg.pools.iter().position(|p| p.name == pool).unwrap(), 0);
    assert_eq!(price("spot"), Some(0.10), "a pool without a zone pays the lowest");
    assert_eq!(price("spot-a"), Some(0.20));
    assert_eq!(price("spot-b"), Some(0.40), "the zone's price replaces the config's own");
    assert_eq!(price("spot-d"), Some(0.3), "a zone without a quote keeps its price, not another zone's");
    assert_eq!(st.store.last_seq(), seq + 3, "three logged changes");
    st.spot_prices(T0 + 20, &quotes).unwrap();
    assert_eq!(st.store.last_seq(), seq + 3, "unchanged prices log nothing");
}

#[test]
fn an_on_demand_instance_that_went_away_is_fenced_too_but_spot_notices_about_it_are_ignored() {
    let (mut st, node) = launching_for("od-gone", "p0");
    assert_eq!(st.engine.cluster().nodes[node as usize].market, spillway_core::Market::OnDemand);
    st.launch_result(T0 + 10, node, Ok("i-4".into())).unwrap();
    beat(&mut st, T0 + 20, node, 1, vec![]);
    st.notice(T0 + 50, &interruption("i-4", None)).unwrap();
    assert!(st.reclaim_at.is_empty(), "no spot interruption for an on-demand node");
    st.notice(T0 + 100, &Notice { instance_id: "i-4".into(), kind: NoticeKind::Gone { state: "terminated".into() } })
        .unwrap();
    assert!(st.effects.iter().any(|e| matches!(e, Effect::Fence { node: n } if *n == node)), "{:?}", st.effects);
}

#[test]
fn a_second_instance_tagged_for_a_node_is_an_orphan_not_the_node() {
    let (mut st, node) = launching("dup");
    st.launch_result(T0 + 10, node, Ok("i-5".into())).unwrap();
    beat(&mut st, T0 + 20, node, 1, vec![]);
    let inst = |id: &str| spillway_providers::Instance {
        id: id.into(),
        cluster: "c".into(),
        node,
        pool: "spot".into(),
        instance_type: "g1".into(),
        gpus: 1,
        spot: true,
    };
    // Listed in either order, the recorded instance stays the node's and the copy is terminated.
    for listed in [vec![inst("i-0-copy"), inst("i-5")], vec![inst("i-5"), inst("i-9-copy")]] {
        st.effects.clear();
        st.reconcile(T0 + 1_000, &listed, T0 + 1_000, false).unwrap();
        assert_eq!(st.instances.get(&node).map(String::as_str), Some("i-5"));
        let copy = listed.iter().find(|i| i.id != "i-5").unwrap().id.clone();
        assert!(
            st.effects.iter().any(|e| matches!(e, Effect::TerminateInstance { id } if *id == copy)),
            "{:?}",
            st.effects
        );
        assert!(!st.effects.iter().any(|e| matches!(e, Effect::TerminateInstance { id } if id == "i-5")));
    }
}
