//! Scheduled policies that set a pool's desired and max nodes for a cron window, and their bad inputs.

mod common;
use common::*;
use spillway_core::Event;

const G8: &str = "[[instance_types]]\nname = \"g8\"\ngpus = 8\ngpu_model = \"V100\"\non_demand_usd_per_hour = 24.0\n\
[[pools]]\nname = \"onprem\"\nmarket = \"fixed\"\ngpu_usd_per_hour = 1.0\nnodes = [{ count = 1, gpus = 1 }]\n\
[[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"g8\"]\nmax_nodes = 4\nidle_timeout_s = 600\n";

/// A window from 01:00 to 02:00 UTC (3,600 s to 7,200 s after the epoch) with the given keys.
fn window(keys: &str) -> String {
    format!("{G8}[[schedules]]\npool = \"od\"\ncron = \"0 1 * * *\"\nduration_s = 3600\n{keys}\n")
}

#[test]
fn a_windows_desired_nodes_are_bought_when_it_opens_and_go_when_it_closes() {
    let mut h = Harness::new(&window("desired_nodes = 3"));
    assert!(launches(&h.run_until(3_599.0)).is_empty());
    let open = h.run_until(3_600.0);
    let bought = launches(&open);
    assert_eq!(bought.len(), 3, "{open:?}");
    h.at(3_840.0);
    for &(n, _, _) in &bought {
        h.event(Event::NodeReady { node: n });
    }
    assert!(terminates(&h.run_until(7_199.0)).is_empty(), "kept while the window is open");
    assert_eq!(terminates(&h.run_until(7_200.0)).len(), 3, "idle past their timeout once it closes");
}

#[test]
fn a_windows_max_removes_idle_nodes_at_once_and_caps_scale_out() {
    let mut h = Harness::new(&window("max_nodes = 1"));
    // Three 8-GPU jobs before the window: three nodes.
    let jobs: Vec<_> = (0..3).map(|_| h.submit(spec("p0", 8, 1))).collect();
    let a = h.run_world(600.0, 240.0);
    assert_eq!(launches(&a).len(), 3);
    for &j in &jobs {
        h.at(1_000.0);
        let attempt = h.job(j).attempt;
        h.event(Event::JobExited { job: j, attempt, success: true, exit: None });
    }
    h.drain();
    // New jobs take the idle nodes at 1,100 s (inside their idle timeout) and run past the window's opening.
    h.at(1_100.0);
    let more: Vec<_> = (0..3).map(|_| h.submit(spec("p0", 8, 1))).collect();
    let a = h.run_world(3_700.0, 240.0);
    assert!(more.iter().all(|&j| started(&a, j).is_some()), "the idle nodes take the new jobs");
    for &j in &more {
        let attempt = h.job(j).attempt;
        h.event(Event::JobExited { job: j, attempt, success: true, exit: None });
    }
    let a = h.drain();
    assert_eq!(terminates(&a).len(), 2, "inside the window only one node stays: {a:?}");
    assert_eq!(h.alive(1), 1);
    // Demand for two nodes inside the window gets one node, never more.
    let queued: Vec<_> = (0..3).map(|_| h.submit(spec("p0", 8, 1))).collect();
    let a = h.run_world(7_100.0, 240.0);
    assert!(launches(&a).is_empty(), "no launch above the window's max: {a:?}");
    assert_eq!(queued.iter().filter(|&&j| started(&a, j).is_some()).count(), 1);
    // After the window the pool may grow again.
    let a = h.run_world(7_500.0, 240.0);
    assert!(!launches(&a).is_empty(), "{a:?}");
}

#[test]
fn schedule_errors_name_the_key_and_line() {
    let cases = [
        (window(""), "schedules[0]", "sets min_nodes, max_nodes or desired_nodes"),
        (window("desired_nodes = 9"), "schedules[0].desired_nodes", "desired_nodes 9 > pool `od` max_nodes 4"),
        (window("max_nodes = 1\ndesired_nodes = 2"), "schedules[0].max_nodes", "below the schedule's min or desired 2"),
    ];
    for (text, key, piece) in cases {
        let err = spillway_core::Config::parse("s.toml", &text).expect_err(key).to_string();
        assert!(err.starts_with("s.toml:") && err.contains(key) && err.contains(piece), "{err}");
    }
}
