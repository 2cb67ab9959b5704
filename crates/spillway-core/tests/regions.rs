//! Regions, zone prices and moving data, as a user states them: spot is billed at the price of the moment (a
//! price change re-prices the nodes already running, in the pool it names only); a job whose data is in one
//! region moves to a cheaper one only when the saving over its remaining work pays the egress and the transfer,
//! and the transfer is time it makes no progress.

use spillway_core::{DecisionKind, Event, JobId, Market};

mod common;
use common::*;

const REGIONS: &str = r#"
[tiers.p1]
burst_after_s = 0

[[instance_types]]
name = "a8"
gpus = 8
gpu_model = "H100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 12.0

[[pools]]
name = "od-east"
market = "on_demand"
instance_types = ["a8"]
max_nodes = 4
region = "us-east-1"

[[pools]]
name = "spot-east"
market = "spot"
instance_types = ["a8"]
max_nodes = 4
region = "us-east-1"
zone = "us-east-1a"
spot_usd_per_hour = { a8 = 10.0 }

[[pools]]
name = "spot-west"
market = "spot"
instance_types = ["a8"]
max_nodes = 4
region = "us-west-2"
zone = "us-west-2b"
spot_usd_per_hour = { a8 = 9.0 }
"#;

const EAST: usize = 1;
const WEST: usize = 2;

/// Submits an 8-GPU p1 job of `hours` with `gb` of data in us-east-1; returns it and the pool it was bought in.
fn submit_moving(h: &mut Harness, hours: f64, gb: f64) -> (JobId, usize) {
    let mut s = spec("p1", 8, 1);
    s.expected_duration_ms = Some((hours * 3_600_000.0) as i64);
    s.checkpoint_gb = Some(gb);
    s.data_region = Some("us-east-1".into());
    let id = h.submit(s);
    let l = launches(&h.drain());
    assert_eq!(l.len(), 1, "one node for the job: {l:?}");
    (id, l[0].1)
}

#[test]
fn a_spot_price_change_reprices_running_nodes_from_that_instant_in_the_pool_it_names() {
    let mut h = Harness::new(REGIONS);
    let job = h.submit(spec("p1", 8, 1));
    let l = launches(&h.drain());
    assert_eq!((l.len(), l[0].1), (1, WEST), "the cheaper zone's price buys: {l:?}");
    h.at(60.0).event(Event::NodeReady { node: l[0].0 });
    assert!(started(&h.drain(), job).is_some());
    // At 1 h in, the west zone's price halves; a change in the east zone touches nothing running.
    h.at(3_660.0);
    h.event(Event::SpotPrice { instance_type: "a8".into(), usd_per_hour: 4.5, pool: Some("spot-west".into()) });
    h.event(Event::SpotPrice { instance_type: "a8".into(), usd_per_hour: 20.0, pool: Some("spot-east".into()) });
    assert_eq!(h.node(l[0].0).price_usd_per_hour, 4.5);
    h.at(7_260.0);
    let books = h.e.cluster().books_at(h.now);
    let want = 9.0 * 3_660.0 / 3_600.0 + 4.5;
    assert!((books.by_pool[WEST] - want).abs() < 1e-9, "node: {} != {want}", books.by_pool[WEST]);
    assert_eq!(books.by_pool[EAST], 0.0);
    h.event(Event::JobExited { job, attempt: 1, success: true, exit: None });
    let l = &h.e.cluster().ledger;
    assert!((l.job_usd - (9.0 + 4.5)).abs() < 1e-9, "the job paid each price for its time: {}", l.job_usd);
    // A price for a pool that does not exist, or is not spot, is refused and changes nothing.
    for pool in ["nowhere", "od-east"] {
        let ev = Event::SpotPrice { instance_type: "a8".into(), usd_per_hour: 1.0, pool: Some(pool.into()) };
        assert!(h.e.handle_event(h.now, ev).is_err(), "{pool}");
    }
    // A price for the type alone leaves pools with their own price as they are.
    h.event(Event::SpotPrice { instance_type: "a8".into(), usd_per_hour: 1.0, pool: None });
    assert_eq!(h.e.config().offer_price(WEST, 0), Some(4.5));
}

#[test]
fn a_job_moves_its_data_to_a_cheaper_region_only_when_its_remaining_work_pays_the_move() {
    // 2,000 GB from us-east-1 to us-west-2: $40 of egress (AWS $0.02/GB) and 1,600 s at 10 Gbit/s. West saves
    // $1 per hour: a 1-hour job stays, a 100-hour job moves.
    let mut h = Harness::new(REGIONS);
    let (short, pool) = submit_moving(&mut h, 1.0, 2_000.0);
    assert_eq!(pool, EAST, "a 1-hour job saves $1 and would pay $40 to move");
    let (long, pool) = submit_moving(&mut h, 100.0, 2_000.0);
    assert_eq!(pool, WEST, "a 100-hour job saves $100 for $40 and 1,600 s");
    let nodes: Vec<_> = h.e.cluster().nodes.iter().map(|n| n.id).collect();
    h.at(60.0);
    for n in nodes {
        h.event(Event::NodeReady { node: n });
    }
    let a = h.drain();
    assert!(started(&a, short).is_some() && started(&a, long).is_some(), "{a:?}");
    let l = &h.e.cluster().ledger;
    assert!((l.egress_usd - 40.0).abs() < 1e-9, "only the long job moved: ${}", l.egress_usd);
    assert_eq!(h.records_of(DecisionKind::JobStarted, "data_moved").len(), 1);
    assert_eq!((h.job(short).transfer_ms(), h.job(long).transfer_ms()), (0, 1_600_000));
    assert_eq!(h.job(long).data_at(), Some("us-west-2"));
    // The transfer makes no progress: the long job's work starts once its data is in.
    h.at(60.0 + 1_600.0);
    assert_eq!(h.job(long).remaining_work_ms(h.now), Some(100 * 3_600_000));
    h.at(60.0 + 1_600.0 + 3_600.0);
    assert_eq!(h.job(long).remaining_work_ms(h.now), Some(99 * 3_600_000));
    // Egress is the team's and the tier's cost, in no market.
    let l = &h.e.cluster().ledger;
    assert!((l.total_usd() - l.node_usd - 40.0).abs() < 1e-9);
    assert!(l.by_tier.iter().sum::<f64>() >= 40.0);
}

#[test]
fn regions_and_zone_prices_are_checked_with_the_key_at_fault() {
    let bad = |from: &str, to: &str| {
        let text = REGIONS.replace(from, to);
        spillway_core::Config::parse("r.toml", &text).unwrap_err().to_string()
    };
    let e = bad("region = \"us-west-2\"", "region = \" \"");
    assert!(e.contains("pools[2].region") && e.contains("not a region name"), "{e}");
    let e = bad("region = \"us-west-2\"", "region = \"US-WEST-2\"");
    assert!(e.contains("pools[2].region"), "{e}");
    for zone in ["US-WEST-2B", " us-west-2b", "", "us-west-2\u{e4}"] {
        let e = bad("zone = \"us-west-2b\"", &format!("zone = \"{zone}\""));
        assert!(e.contains(".zone") && e.contains("a-z, 0-9"), "zone {zone:?}: {e}");
    }
    let no_region = spillway_core::Config::parse("r.toml", &REGIONS.replace("region = \"us-west-2\"", "")).unwrap();
    let w = no_region.warnings();
    assert!(w.iter().any(|w| w.contains("pools[2] (spot-west): no region")), "{w:?}");
    let e = bad("zone = \"us-west-2b\"", "zone = \"eu-west-1a\"");
    assert!(e.contains("pools[2].zone") && e.contains("not in region `us-west-2`"), "{e}");
    let e = bad("name = \"od-east\"", "name = \"od-east\"\nspot_usd_per_hour = { a8 = 1.0 }");
    assert!(e.contains("pools[0].spot_usd_per_hour"), "{e}");
    let e = bad("spot_usd_per_hour = { a8 = 9.0 }", "spot_usd_per_hour = { b8 = 9.0 }");
    assert!(e.contains("spot_usd_per_hour") && e.contains("`b8`"), "{e}");
    let e = bad("spot_usd_per_hour = { a8 = 9.0 }", "spot_usd_per_hour = { a8 = -1.0 }");
    assert!(e.contains("spot_usd_per_hour") && e.contains("price in"), "{e}");
    let e = bad(
        "region = \"us-east-1\"\n\n[[pools]]\nname = \"spot-east\"",
        "spot_usd_per_hour = { a8 = 1.0 }\n\n[[pools]]\nname = \"spot-east\"",
    );
    assert!(e.contains("pools[0].spot_usd_per_hour") && e.contains("spot pools"), "{e}");
    let net = |t: &str| spillway_core::Config::parse("r.toml", &format!("{REGIONS}\n[network]\n{t}\n"));
    for bad in ["0", "1e-9", "1e300"] {
        let e = net(&format!("transfer_gbps = {bad}")).unwrap_err().to_string();
        assert!(e.contains("network.transfer_gbps"), "{e}");
    }
    let pair = |from: &str, to: &str| format!("[[network.egress]]\nfrom = \"{from}\"\nto = \"{to}\"\nusd_per_gb = 1\n");
    let e = net(&pair("us-east-1", "us-east-1")).unwrap_err().to_string();
    assert!(e.contains("network.egress[0].to"), "{e}");
    let e = net(&(pair("a-1", "b-1") + &pair("a-1", "b-1"))).unwrap_err().to_string();
    assert!(e.contains("network.egress[1].to") && e.contains("twice"), "{e}");
    let e = net("[[network.egress]]\nfrom = \"a\"\nto = \"b\"\nusd_per_gb = -1").unwrap_err().to_string();
    assert!(e.contains("usd_per_gb"), "{e}");
    let cfg = net("[[network.egress]]\nfrom = \"us-east-1\"\nto = \"us-west-2\"\nusd_per_gb = 0.5").unwrap();
    assert_eq!(cfg.move_cost(Some("us-east-1"), WEST, 10.0).0, 5.0);
    assert_eq!(cfg.move_cost(Some("us-east-1"), EAST, 10.0), (0.0, 0));
    assert_eq!(cfg.pools[WEST].market, Market::Spot);
}

#[test]
fn a_job_stopped_where_its_data_is_waits_there_as_long_as_a_move_is_worth_then_moves() {
    let mut h = Harness::new(REGIONS);
    // Equal zone prices: the first start stays with the data in us-east-1.
    h.event(Event::SpotPrice { instance_type: "a8".into(), usd_per_hour: 10.0, pool: Some("spot-west".into()) });
    let mut s = spec("p1", 8, 1);
    s.expected_duration_ms = Some(10 * 3_600_000);
    s.checkpoint_gb = Some(200.0);
    s.data_region = Some("us-east-1".into());
    let job = h.submit(s);
    let l = launches(&h.drain());
    assert_eq!(l.iter().map(|x| x.1).collect::<Vec<_>>(), vec![EAST], "{l:?}");
    h.at(60.0).event(Event::NodeReady { node: l[0].0 });
    assert!(started(&h.drain(), job).is_some());
    // West becomes half the price; then the east node is reclaimed and east has no capacity.
    h.at(3_600.0);
    h.event(Event::SpotPrice { instance_type: "a8".into(), usd_per_hour: 5.0, pool: Some("spot-west".into()) });
    h.notice(l[0].0, 120.0);
    let mut a = h.drain();
    a.extend(h.run_until(3_720.0));
    h.event(Event::NodeLost { node: l[0].0 });
    a.extend(h.drain());
    for (node, pool, _) in launches(&a) {
        assert_eq!(pool, EAST, "it first tries where its data is: {a:?}");
        h.event(Event::LaunchFailed { node, error: spillway_core::LaunchError::InsufficientCapacity });
    }
    let queued_since = h.job(job).queued_since;
    // The move costs $4 of egress and 160 s of a $5/h node; an hour of waiting is worth the on-demand premium
    // over spot for 8 GPUs, (3.0 - 0.625) x 8 = $19/h: it waits about 800 s for east before it moves west.
    let wait_s = (200.0 * 0.02 + 5.0 * 160.0 / 3_600.0) / 19.0 * 3_600.0;
    let back = (queued_since - h.t0) as f64 / 1000.0 + wait_s;
    let before = h.run_until(back - 1.0);
    assert!(launches(&before).iter().all(|l| l.1 != WEST), "it moved before the wait was worth it: {before:?}");
    let after = h.run_until(back + 1.0);
    assert!(launches(&after).iter().any(|l| l.1 == WEST), "it never moved west: {after:?}");
    let woke = h.records.iter().rfind(|d| d.kind == DecisionKind::ScaleOut).map(|d| d.at);
    assert!(
        woke.is_some_and(|t| ((t - h.t0) as f64 / 1000.0 - back).abs() < 1.0),
        "not woken at the wait's end: {woke:?}"
    );
}

#[test]
fn a_transfer_cut_short_leaves_the_data_where_it_was_and_an_unchanged_copy_moves_back_free() {
    for (lost_at, data_at, copy) in [
        // Node lost during the 1,600 s transfer: the data never arrived.
        (600.0, "us-east-1", None),
        // Lost after the transfer but before its first checkpoint (1,800 s of work): both copies are current.
        (2_000.0, "us-west-2", Some("us-east-1")),
        // Lost after a checkpoint written in the west: only the west copy is current.
        (4_000.0, "us-west-2", None),
    ] {
        let mut h = Harness::new(REGIONS);
        let (job, pool) = submit_moving(&mut h, 100.0, 2_000.0);
        assert_eq!(pool, WEST);
        let node = h.e.cluster().nodes.iter().find(|n| n.pool == WEST).map(|n| n.id).expect("a west node");
        h.at(60.0).event(Event::NodeReady { node });
        assert!(started(&h.drain(), job).is_some());
        h.at(lost_at).event(Event::NodeLost { node });
        h.drain();
        let j = h.job(job);
        assert_eq!((j.data_at(), j.data_copy()), (Some(data_at), copy), "lost at {lost_at} s");
        // The transfer was paid once (a transfer cut short only for what it sent), and lost no work.
        let sent = ((lost_at - 60.0) / 1_600.0_f64).min(1.0);
        let egress = h.e.cluster().ledger.egress_usd;
        assert!((egress - 40.0 * sent).abs() < 1e-9, "lost at {lost_at} s: ${egress} of egress");
        assert!((h.job(job).egress_usd() - egress).abs() < 1e-9, "the job's own egress is what was booked");
        let lost_h = h.e.cluster().counters.lost_gpu_ms as f64 / 3_600_000.0 / 8.0;
        let want = if lost_at < 1_660.0 { 0.0 } else { (lost_at - 1_660.0) % 1_800.0 / 3_600.0 };
        assert!((lost_h - want).abs() < 1e-6, "lost at {lost_at} s: {lost_h} h of work, want {want}");
    }
}

#[test]
fn a_job_with_data_inside_its_budget_shares_a_cloud_node_another_job_started_on_at_that_instant() {
    // Job `a` (p1, waiting up to 600 s for owned capacity) may not be the reason a cloud node runs; once job `b`
    // (p2, bursts at once) starts on the node bought for it, `a` fits beside it at no extra spend and starts at
    // that instant, not at the next unrelated event. `a` carries data, so it tries pools in an order of its own
    // (the case a property sweep in CI found: such a job did not ask for the pass that would place it).
    let config = r#"
[tiers.p1]
burst_after_s = 600

[tiers.p2]
burst_after_s = 0

[[instance_types]]
name = "a8"
gpus = 8
gpu_model = "H100"
on_demand_usd_per_hour = 24.0
spot_usd_per_hour = 12.0

[[pools]]
name = "od-west"
market = "on_demand"
instance_types = ["a8"]
max_nodes = 1
region = "us-west-2"

[[pools]]
name = "spot-west"
market = "spot"
instance_types = ["a8"]
max_nodes = 1
region = "us-west-2"
"#;
    let mut h = Harness::new(config);
    // `a` ends before `b` (30 min against 2 h), so running beside it keeps the node no longer.
    let mut with_data = spec("p1", 4, 1);
    (with_data.checkpoint_gb, with_data.data_region) = (Some(10.0), Some("us-west-2".into()));
    with_data.expected_duration_ms = Some(1_800_000);
    let a = h.submit(with_data);
    let mut long = spec("p2", 4, 1);
    long.expected_duration_ms = Some(7_200_000);
    let b = h.submit(long);
    let l = launches(&h.drain());
    assert_eq!(l.len(), 1, "one node, for b: {l:?}");
    h.at(60.0).event(Event::NodeReady { node: l[0].0 });
    let acts = h.drain();
    assert!(started(&acts, b).is_some() && started(&acts, a).is_none(), "{acts:?}");
    // The pass that started `b` asks for another at this instant; without it `a` waits for whatever comes next.
    assert_eq!(h.wake(), Some(60.0), "a pass at 60 s is asked for");
    h.timeout();
    let acts = h.drain();
    assert!(started(&acts, a).is_some(), "a starts at 60 s beside b: {acts:?}");
}

/// A data region without a size is refused when submitted (it would never be weighed), but a job a daemon logged
/// with one before that rule is still accepted when the daemon replays its log: nothing accepted is lost.
#[test]
fn a_region_without_a_size_is_refused_when_new_but_kept_when_replayed() {
    let mut h = Harness::new(REGIONS);
    let mut s = spec("p1", 8, 1);
    s.data_region = Some("us-east-1".into());
    let err = spillway_core::check_new_spec(h.e.config(), &s).expect_err("a region without a size is refused");
    assert_eq!(err.field(), "data_region", "{err}");
    assert!(err.to_string().contains("checkpoint_gb"), "{err}");
    // The replay path (Engine::submit) keeps it, as it was accepted then.
    let now = h.e.now();
    let id = h.e.submit(now, s.clone()).expect("replayed as accepted");
    assert_eq!(h.job(id).data_at(), Some("us-east-1"));
    s.checkpoint_gb = Some(0.0);
    assert!(spillway_core::check_new_spec(h.e.config(), &s).is_ok(), "0 GB says nothing moves");
}
