//! Workers get a clean environment: nothing of the agent's own. Its own test binary, because it changes the
//! process environment (which other tests' threads would be reading).

#![allow(clippy::disallowed_methods)] // the shared helpers wait with the real clock

mod common;

use common::*;
use spillway_agent::Runner;
use std::collections::BTreeMap;
use std::time::Duration;

#[test]
fn workers_get_a_clean_environment() {
    let canary = format!("SPILLWAY_TEST_CANARY_{}", std::process::id());
    // SAFETY: the only test of this binary (so no other thread reads the environment meanwhile).
    unsafe {
        std::env::set_var(&canary, "leaked");
        std::env::set_var("SPILLWAY_AGENT_TOKEN", "node-secret");
    }
    let dir = scratch("clean-env");
    let mut r = Runner::new(2, 1, &dir);
    let mut a = sh(11, 1, &dir, "env");
    a.env = BTreeMap::from([("JOB_VAR".to_string(), "mine".to_string())]);
    r.start(&a);
    let exit = wait_for(Duration::from_secs(5), || r.poll().exits.pop()).expect("exit");
    assert_eq!(exit.code, Some(0));
    let env = std::fs::read_to_string(dir.join("logs/11.log")).unwrap();
    assert!(!env.contains(&canary) && !env.contains("leaked"), "the agent's environment reached the job:\n{env}");
    assert!(!env.contains("node-secret"), "the node token reached the job:\n{env}");
    for want in ["JOB_VAR=mine", "SPILLWAY_JOB_ID=11", "CUDA_VISIBLE_DEVICES=0"] {
        assert!(env.lines().any(|l| l == want), "missing {want:?} in\n{env}");
    }
    let tag = format!("SPILLWAY_WORKER_TAG={}-", std::process::id());
    assert!(env.lines().any(|l| l.starts_with(&tag) && l.ends_with("-2-11-1-0")), "no worker tag in\n{env}");
    let path = std::env::var("PATH").unwrap_or_else(|_| spillway_agent::spawn::DEFAULT_PATH.into());
    assert!(env.lines().any(|l| l == format!("PATH={path}")), "the agent's PATH, to find programs:\n{env}");
    // Nothing else, bar the PWD the shell sets itself.
    let allowed = [
        "PATH",
        "PWD",
        "JOB_VAR",
        "SPILLWAY_JOB_ID",
        "SPILLWAY_ATTEMPT",
        "SPILLWAY_NODE",
        "SPILLWAY_CHECKPOINT_DIR",
        "CUDA_VISIBLE_DEVICES",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SPILLWAY_MIN_WORKERS",
        "SPILLWAY_MAX_WORKERS",
        "SPILLWAY_RDZV_ID",
        "SPILLWAY_RDZV_ENDPOINT",
        "SPILLWAY_WORKER_TAG",
    ];
    for line in env.lines() {
        let name = line.split('=').next().unwrap_or_default();
        assert!(allowed.contains(&name), "unexpected variable {line:?} in\n{env}");
    }
}
