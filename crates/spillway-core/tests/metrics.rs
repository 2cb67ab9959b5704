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
