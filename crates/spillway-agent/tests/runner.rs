//! The process runner without a daemon: the job contract, stops, exits, checkpoints, GPU bookkeeping.

#![allow(clippy::disallowed_methods)] // tests time graces and deadlines with the real clock

mod common;

use common::*;
use spillway_agent::{Runner, StartOutcome};
use spillway_api::{StopOrder, WorkerExit};
use std::collections::BTreeMap;
use std::time::Duration;

/// Polls the runner until `job`'s exit shows up, collecting it.
fn wait_exit(r: &mut Runner, job: u32, timeout: Duration) -> Option<WorkerExit> {
    wait_for(timeout, || r.poll().exits.into_iter().find(|e| e.worker.job == job))
}

#[test]
fn contract_environment() {
    let dir = scratch("env");
    let mut r = Runner::new(4, 4, &dir);
    let mut a = sh(7, 2, &dir, "env > \"$0\"");
    let out = dir.join("env.txt");
    a.argv.push(out.to_string_lossy().into_owned());
    a.worker.attempt = 3;
    a.world_size = 2;
    a.env = BTreeMap::from([("FOO".to_string(), "bar baz".to_string()), ("RANK".to_string(), "99".to_string())]);
    a.workdir = Some(dir.to_string_lossy().into_owned());
    assert!(matches!(r.start(&a), StartOutcome::Started { ref gpus, .. } if gpus == &vec![0, 1]));
    let exit = wait_exit(&mut r, 7, Duration::from_secs(5)).expect("exit");
    assert_eq!(exit.code, Some(0));
    assert!(exit.success);
    let env = std::fs::read_to_string(&out).unwrap();
    let ckpt = dir.join("ckpt-7");
    for want in [
        "FOO=bar baz".to_string(),
        "SPILLWAY_JOB_ID=7".into(),
        "SPILLWAY_ATTEMPT=3".into(),
        "SPILLWAY_NODE=4".into(),
        format!("SPILLWAY_CHECKPOINT_DIR={}", ckpt.display()),
        "CUDA_VISIBLE_DEVICES=0,1".into(),
        "RANK=0".into(),
        "LOCAL_RANK=0".into(),
        "WORLD_SIZE=2".into(),
        "MASTER_ADDR=127.0.0.1".into(),
        "MASTER_PORT=29500".into(),
        format!("PWD={}", dir.display()),
    ] {
        assert!(env.lines().any(|l| l == want), "missing {want:?} in\n{env}");
    }
    assert!(ckpt.is_dir(), "checkpoint dir created");
    assert!(r.running().is_empty());
}

#[test]
fn output_appended_to_log_and_relative_paths_under_data_dir() {
    let dir = scratch("log");
    let mut r = Runner::new(1, 0, &dir);
    let mut a = sh(1, 0, &dir, "echo out; echo err >&2; exit 3");
    a.log_path = "logs/job1.log".into();
    a.checkpoint_dir = "ckpt/job1".into();
    r.start(&a);
    let exit = wait_exit(&mut r, 1, Duration::from_secs(5)).expect("exit");
    assert_eq!((exit.code, exit.success), (Some(3), false));
    // A second attempt appends.
    r.ack(&[a.worker]);
    a.worker.attempt = 2;
    r.start(&a);
    wait_exit(&mut r, 1, Duration::from_secs(5)).expect("second exit");
    let log = std::fs::read_to_string(dir.join("logs/job1.log")).unwrap();
    assert_eq!(log.matches("out\n").count(), 2, "{log}");
    assert_eq!(log.matches("err\n").count(), 2, "{log}");
    assert!(dir.join("ckpt/job1").is_dir());
}

#[test]
fn stop_sends_signal_then_worker_exits() {
    let dir = scratch("term");
    let mut r = Runner::new(1, 1, &dir);
    let a = sh(2, 1, &dir, "trap 'echo got term; exit 0' TERM; while true; do sleep 0.1; done");
    assert!(matches!(r.start(&a), StartOutcome::Started { .. }));
    std::thread::sleep(Duration::from_millis(200)); // let sh install its trap
    assert!(r.stop(&StopOrder { worker: a.worker, grace_ms: 5000, signal: "SIGTERM".into() }));
    assert!(!r.stop(&StopOrder { worker: a.worker, grace_ms: 5000, signal: "SIGTERM".into() }), "repeat ignored");
    let exit = wait_exit(&mut r, 2, Duration::from_secs(4)).expect("exits well before the grace");
    assert_eq!((exit.code, exit.success), (Some(0), true));
    let log = std::fs::read_to_string(dir.join("logs/2.log")).unwrap();
    assert!(log.contains("got term"), "{log}");
}

#[test]
fn worker_ignoring_term_is_killed_after_grace() {
    let dir = scratch("kill");
    let mut r = Runner::new(1, 1, &dir);
    let a = sh(3, 1, &dir, "trap '' TERM; echo trapped; while true; do sleep 0.1; done");
    r.start(&a);
    let pid = r.pgid_of(&a.worker).unwrap();
    // Stop only once the trap is in place: a SIGTERM that lands before it ends the shell at once.
    for _ in 0..250 {
        if std::fs::read_to_string(&a.log_path).unwrap_or_default().contains("trapped") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = std::time::Instant::now();
    assert!(r.stop(&StopOrder { worker: a.worker, grace_ms: 300, signal: "TERM".into() }));
    let exit = wait_exit(&mut r, 3, Duration::from_secs(5)).expect("killed");
    assert!(t0.elapsed() >= Duration::from_millis(300), "not before the grace: {:?}", t0.elapsed());
    assert_eq!((exit.code, exit.success), (None, false), "killed by a signal");
    assert!(!alive(pid), "process gone");
    assert_eq!(live_group_members(pid), Vec::<i32>::new(), "whole group gone");
    assert_eq!(r.exited().len(), 1);
}

#[test]
fn missing_program_is_exit_127() {
    let dir = scratch("missing");
    let mut r = Runner::new(1, 2, &dir);
    let mut a = sh(4, 2, &dir, "");
    a.argv = vec!["/nonexistent/spillway-no-such-program".into()];
    assert!(matches!(r.start(&a), StartOutcome::Failed(_)));
    assert_eq!(r.exited().len(), 1);
    assert_eq!(r.exited()[0].code, Some(127));
    assert!(!r.exited()[0].success);
    // Its GPUs were given back; an unacked exit is not restarted.
    assert!(matches!(r.start(&a), StartOutcome::AlreadyExited));
    let log = std::fs::read_to_string(dir.join("logs/4.log")).unwrap();
    assert!(log.contains("spillway-no-such-program"), "{log}");
    r.ack(&[a.worker]);
    assert!(r.exited().is_empty());
    let b = sh(5, 2, &dir, "sleep 5");
    assert!(matches!(r.start(&b), StartOutcome::Started { .. }), "GPUs of the failed start are free");
}

#[test]
fn exits_reported_until_acked() {
    let dir = scratch("ack");
    let mut r = Runner::new(1, 0, &dir);
    r.start(&sh(1, 0, &dir, "exit 0"));
    r.start(&sh(2, 0, &dir, "exit 5"));
    let mut seen = Vec::new();
    wait_for(Duration::from_secs(5), || {
        seen.extend(r.poll().exits);
        (seen.len() == 2).then_some(())
    })
    .expect("both exit");
    assert!(r.poll().exits.is_empty(), "each exit seen by poll once");
    assert_eq!(r.exited().len(), 2);
    r.ack(&[worker(1)]);
    assert_eq!(r.exited().len(), 1);
    assert_eq!((r.exited()[0].worker.job, r.exited()[0].code), (2, Some(5)));
}

#[test]
fn checkpoints_reported_once_per_new_file() {
    let dir = scratch("ckpt");
    let mut r = Runner::new(1, 0, &dir);
    let a = sh(
        6,
        0,
        &dir,
        // Written as checkpoints should be: to a temporary name, then renamed (the temporary never counts).
        "cd \"$SPILLWAY_CHECKPOINT_DIR\"; sleep 0.3; echo 1 > a.tmp; sleep 0.1; mv a.tmp a; sleep 0.4; echo 2 > .b; mv .b b; sleep 10",
    );
    // A file left by an earlier attempt is no new checkpoint.
    std::fs::create_dir_all(dir.join("ckpt-6")).unwrap();
    std::fs::write(dir.join("ckpt-6/old"), "old").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    r.start(&a);
    let mut rank1 = sh(6, 0, &dir, "sleep 0.3; echo 1 > \"$SPILLWAY_CHECKPOINT_DIR/c\"; sleep 10");
    rank1.worker.rank = 1;
    // Its own directory: in a shared one rank 0's watcher would see the file too, and the count would race.
    rank1.checkpoint_dir = dir.join("ckpt-6-rank1").display().to_string();
    r.start(&rank1);
    let mut reports = Vec::new();
    let end = std::time::Instant::now() + Duration::from_millis(1400);
    while std::time::Instant::now() < end {
        reports.extend(r.poll().checkpoints);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(reports, vec![a.worker, a.worker], "two files, two reports, rank 0 only");
}

#[test]
fn gpus_not_shared_between_concurrent_workers() {
    let dir = scratch("gpus");
    let mut r = Runner::new(1, 4, &dir);
    let a = sh(1, 2, &dir, "sleep 10");
    let b = sh(2, 1, &dir, "sleep 10");
    let c = sh(3, 2, &dir, "sleep 10");
    let ga = match r.start(&a) {
        StartOutcome::Started { gpus, .. } => gpus,
        o => panic!("{o:?}"),
    };
    let gb = match r.start(&b) {
        StartOutcome::Started { gpus, .. } => gpus,
        o => panic!("{o:?}"),
    };
    assert!(ga.iter().all(|g| !gb.contains(g)), "{ga:?} vs {gb:?}");
    assert_eq!(r.start(&c), StartOutcome::NoGpus { needed: 2, free: 1 });
    assert_eq!(r.start(&a), StartOutcome::AlreadyRunning);
    // When a exits its GPUs go to c.
    assert!(r.stop(&StopOrder { worker: a.worker, grace_ms: 1000, signal: "SIGKILL".into() }));
    wait_exit(&mut r, 1, Duration::from_secs(5)).expect("a killed");
    let gc = match r.start(&c) {
        StartOutcome::Started { gpus, .. } => gpus,
        o => panic!("{o:?}"),
    };
    assert!(gc.iter().all(|g| !gb.contains(g)), "{gc:?} vs {gb:?}");
    assert_eq!(gc, ga);
    assert_eq!(r.gpus_of(&c.worker), Some(gc.as_slice()));
}

#[test]
fn shutdown_and_drop_leave_no_processes() {
    let dir = scratch("shutdown");
    let mut r = Runner::new(1, 0, &dir);
    r.start(&sh(1, 0, &dir, "trap 'exit 0' TERM; while true; do sleep 0.1; done"));
    r.start(&sh(2, 0, &dir, "trap '' TERM; while true; do sleep 0.1; done"));
    let pids: Vec<i32> = r.running().iter().filter_map(|w| r.pgid_of(w)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = std::time::Instant::now();
    r.shutdown(Duration::from_millis(500));
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(r.running().is_empty());
    assert!(pids.iter().all(|p| !alive(*p)), "all gone");
    let codes: Vec<_> = r.exited().iter().map(|e| (e.worker.job, e.code)).collect();
    assert!(codes.contains(&(1, Some(0))) && codes.contains(&(2, None)), "{codes:?}");

    let mut r = Runner::new(1, 0, &dir);
    r.start(&sh(3, 0, &dir, "sleep 30"));
    let pid = r.pgid_of(&worker(3)).unwrap();
    drop(r);
    assert!(!alive(pid), "drop kills workers");
}
