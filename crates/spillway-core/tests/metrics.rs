//! Metric-driven scaling in the engine: step-scaling bands held for their period, and target tracking, fed by
//! `MetricSample` events.

mod common;
use common::*;
use spillway_core::{Event, NodeId};

/// An on-demand pool of 8-GPU nodes kept at one node, with the given extra keys.
fn pool(extra: &str) -> String {
    format!(
        "[[instance_types]]\nname = \"g8\"\ngpus = 8\ngpu_model = \"V100\"\non_demand_usd_per_hour = 24.0\n\
[[pools]]\nname = \"onprem\"\nmarket = \"fixed\"\ngpu_usd_per_hour = 1.0\nnodes = [{{ count = 1, gpus = 1 }}]\n\
[[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"g8\"]\nmin_nodes = 1\nmax_nodes = 4\n\
utilization_warmup_s = 0\nscale_out_cooldown_s = 0\n{extra}\n"
    )
}

const BAND: &str = "step_scaling = [{ above = 0.8, hold_s = 300, adjust_nodes = 1 }]";

/// Starts the harness and brings the pool's min node up; returns it.
fn warm(h: &mut Harness) -> NodeId {
    let a = h.run_world(300.0, 240.0);
    let l = launches(&a);
    assert_eq!(l.len(), 1, "{a:?}");
    l[0].0
}

fn sample(h: &mut Harness, t: f64, node: NodeId, u: f64) -> usize {
    h.at(t);
    h.event(Event::MetricSample { node, gpu_utilization: u });
    launches(&h.drain()).len()
}

#[test]
fn a_band_held_for_its_period_adds_a_node() {
    let mut h = Harness::new(&pool(BAND));
    let node = warm(&mut h);
    assert_eq!(sample(&mut h, 400.0, node, 0.9), 0);
    assert_eq!(sample(&mut h, 600.0, node, 0.9), 0, "held 200 s of 300");
    assert_eq!(sample(&mut h, 700.0, node, 0.9), 1, "held 300 s: +1 node");
    assert_eq!(h.alive(1), 2);
}

#[test]
fn a_spike_shorter_than_the_period_does_nothing() {
    let mut h = Harness::new(&pool(BAND));
    let node = warm(&mut h);
    assert_eq!(sample(&mut h, 400.0, node, 0.95), 0);
    assert_eq!(sample(&mut h, 600.0, node, 0.5), 0, "the band broke");
    assert_eq!(sample(&mut h, 800.0, node, 0.95), 0);
    assert_eq!(sample(&mut h, 1000.0, node, 0.95), 0, "held 200 s since it came back");
    assert_eq!(h.alive(1), 1);
}

#[test]
fn target_tracking_sizes_the_pool_to_its_target() {
    let mut h = Harness::new(&pool("target_gpu_utilization = 0.5"));
    let node = warm(&mut h);
    // One node at 0.9 wants ceil(1 x 0.9 / 0.5) = 2 nodes.
    assert_eq!(sample(&mut h, 400.0, node, 0.9), 1);
    assert_eq!(h.alive(1), 2);
    // Bad samples are dropped, not acted on.
    assert_eq!(sample(&mut h, 500.0, node, f64::NAN), 0);
}

#[test]
fn a_band_must_set_exactly_one_bound() {
    let text = pool("step_scaling = [{ above = 0.8, below = 0.3, adjust_nodes = 1 }]");
    let err = spillway_core::Config::parse("m.toml", &text).unwrap_err().to_string();
    assert!(err.contains("pools[1].step_scaling") && err.contains("exactly one"), "{err}");
}

/// Target tracking on a PromQL query (`utilization_query`): idle nodes go after 60 s once the signal says so.
const QUERY: &str = "target_gpu_utilization = 0.5\nidle_timeout_s = 60\nscale_in_cooldown_s = 0\n\
utilization_query = 'avg by (spillway_node) (DCGM_FI_DEV_GPU_UTIL) / 100'\n[prometheus]\nurl = \"http://p:9090\"";

fn answer(h: &mut Harness, t: f64, samples: Vec<(NodeId, f64)>, error: Option<&str>) -> Vec<spillway_core::Action> {
    h.at(t);
    h.event(Event::PoolMetric { pool: 1, samples, error: error.map(str::to_string) });
    h.drain()
}

#[test]
fn a_pool_on_a_query_never_scales_in_while_its_signal_is_missing() {
    let mut h = Harness::new(&pool(QUERY));
    let a = warm(&mut h);
    // Busy (0.9 against 0.5): a second node is bought, and booted.
    let got = answer(&mut h, 400.0, vec![(a, 0.9)], None);
    assert_eq!(launches(&got).len(), 1, "{got:?}");
    let b = launches(&got)[0].0;
    h.at(430.0);
    h.event(Event::NodeReady { node: b });
    // Both at 0.3 want ceil(2 x 0.3 / 0.5) = 2: the size holds.
    let got = answer(&mut h, 440.0, vec![(a, 0.3), (b, 0.3)], None);
    assert!(launches(&got).is_empty() && terminates(&got).is_empty(), "{got:?}");
    assert_eq!(h.alive(1), 2);

    // The query fails: no scale-in however long the nodes sit idle, and the log says why.
    answer(&mut h, 510.0, vec![], Some("asking http://p:9090/api/v1/query: timed out"));
    let lost = |h: &Harness| -> Vec<String> {
        h.records_of(spillway_core::DecisionKind::NodeKept, "metric_lost").iter().map(|d| d.detail.clone()).collect()
    };
    assert!(lost(&h).last().is_some_and(|d| d.contains("timed out")), "{:?}", lost(&h));
    let recorded = lost(&h).len();
    h.run_until(2000.0);
    assert_eq!(h.alive(1), 2, "scaled in on a failed query");
    assert_eq!(lost(&h).len(), recorded, "recorded when it changes, not at every pass");

    // The query answers for one warm node only (the other's series went stale): still missing, still no scale-in,
    // and the record says why now.
    answer(&mut h, 2010.0, vec![(a, 0.05)], None);
    h.run_until(3000.0);
    assert_eq!(h.alive(1), 2, "scaled in with a warm node missing from the answer");
    let why = format!("no sample for warm node(s) {}", b.0);
    assert!(lost(&h).last().is_some_and(|d| d.contains(&why)), "{:?}", lost(&h));

    // Both answer, idle: the signal is back and the pool goes down to its min.
    let restored = h.records_of(spillway_core::DecisionKind::NodeKept, "metric_restored").len();
    answer(&mut h, 3010.0, vec![(a, 0.05), (b, 0.05)], None);
    assert_eq!(h.records_of(spillway_core::DecisionKind::NodeKept, "metric_restored").len(), restored + 1);
    h.run_until(4000.0);
    assert_eq!(h.alive(1), 1, "the signal says idle: the pool scales in");
}

#[test]
fn nodes_bought_before_the_first_answer_are_held_until_the_signal_comes() {
    let mut h = Harness::new(&pool(QUERY));
    warm(&mut h);
    // Two 8-GPU jobs of 100 s: one on the min node, one on a node bought for it. No answer has come yet.
    for _ in 0..2 {
        let id = h.submit(spec("p0", 8, 1));
        h.runs_for(id, 100.0);
    }
    h.run_world(2000.0, 30.0);
    assert_eq!(h.alive(1), 2, "idle nodes went before the query ever answered");
    assert!(!h.records_of(spillway_core::DecisionKind::NodeKept, "metric_lost").is_empty());
    // The first answer says idle: now the pool goes down to its min.
    let ready: Vec<NodeId> = (1..=2).map(NodeId).filter(|&n| h.node(n).ready_at.is_some()).collect();
    assert_eq!(ready.len(), 2);
    answer(&mut h, 2010.0, ready.iter().map(|&n| (n, 0.0)).collect(), None);
    h.run_until(3000.0);
    assert_eq!(h.alive(1), 1);
}

#[test]
fn a_query_needs_a_prometheus_table_and_a_policy_that_reads_it() {
    let no_table = pool("target_gpu_utilization = 0.5\nutilization_query = 'up'");
    let err = spillway_core::Config::parse("m.toml", &no_table).unwrap_err().to_string();
    assert!(err.contains("pools[1].utilization_query") && err.contains("[prometheus]"), "{err}");
    let no_policy = pool("utilization_query = 'up'\n[prometheus]\nurl = \"http://p:9090\"");
    let err = spillway_core::Config::parse("m.toml", &no_policy).unwrap_err().to_string();
    assert!(err.contains("target_gpu_utilization"), "{err}");
    let https = pool("target_gpu_utilization = 0.5\nutilization_query = 'up'\n[prometheus]\nurl = \"https://p\"");
    let err = spillway_core::Config::parse("m.toml", &https).unwrap_err().to_string();
    assert!(err.contains("prometheus.url") && err.contains("https"), "{err}");
    let slow = pool(
        "target_gpu_utilization = 0.5\nutilization_query = 'up'\n[prometheus]\nurl = \"http://p\"\ntimeout_s = 60",
    );
    let err = spillway_core::Config::parse("m.toml", &slow).unwrap_err().to_string();
    assert!(err.contains("prometheus.timeout_s"), "{err}");
}

/// Step scaling on a PromQL query: a band held for its period adds a node, a band below removes one only on the
/// query's word, and a failed query neither adds nor removes (the held time does not carry across it).
#[test]
fn step_scaling_on_a_query_acts_on_held_bands_and_holds_while_the_query_fails() {
    let bands = "step_scaling = [{ above = 0.8, hold_s = 300, adjust_nodes = 1 }, \
                 { below = 0.2, hold_s = 300, adjust_nodes = -1 }]\nscale_in_cooldown_s = 0\nidle_timeout_s = 60\n\
                 utilization_query = 'avg by (spillway_node) (DCGM_FI_DEV_GPU_UTIL) / 100'\n\
                 [prometheus]\nurl = \"http://p:9090\"";
    let mut h = Harness::new(&pool(bands));
    let a = warm(&mut h);
    assert!(launches(&answer(&mut h, 400.0, vec![(a, 0.9)], None)).is_empty());
    assert!(launches(&answer(&mut h, 600.0, vec![(a, 0.9)], None)).is_empty(), "held 200 s of 300");
    let got = answer(&mut h, 700.0, vec![(a, 0.9)], None);
    assert_eq!(launches(&got).len(), 1, "held 300 s above 0.8: +1 node: {got:?}");
    let b = launches(&got)[0].0;
    h.at(730.0);
    h.event(Event::NodeReady { node: b });
    // The query fails as the new node comes up, for far longer than the idle timeout and the band's period:
    // nothing is removed.
    answer(&mut h, 735.0, vec![], Some("asking http://p:9090/api/v1/query: connection refused"));
    h.run_until(2000.0);
    assert_eq!(h.alive(1), 2, "scaled in on a failed query");
    // The query answers idle again: the pool goes down to its min.
    answer(&mut h, 2010.0, vec![(a, 0.05), (b, 0.05)], None);
    h.run_until(3000.0);
    answer(&mut h, 3010.0, vec![(a, 0.05), (b, 0.05)], None);
    h.run_until(4000.0);
    assert_eq!(h.alive(1), 1, "held below 0.2 on the query's word: back to min");
}
