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

#[test]
fn a_worker_never_starts_twice_even_after_its_exit_is_acked() {
    let dir = scratch("twice");
    let mut r = Runner::new(1, 0, &dir);
    let mut a = sh(8, 0, &dir, "echo ran");
    a.worker.attempt = 2;
    assert!(matches!(r.start(&a), StartOutcome::Started { .. }));
    wait_exit(&mut r, 8, Duration::from_secs(5)).expect("exit");
    r.ack(&[a.worker]);
    // The daemon re-sends the old assignment: refused, also for an older attempt of the job.
    assert_eq!(r.start(&a), StartOutcome::AlreadyRan);
    let mut older = a.clone();
    older.worker.attempt = 1;
    assert_eq!(r.start(&older), StartOutcome::AlreadyRan);
    // Another rank of that attempt and a newer attempt are new workers.
    let mut rank1 = a.clone();
    rank1.worker.rank = 1;
    assert!(matches!(r.start(&rank1), StartOutcome::Started { .. }));
    let mut newer = a.clone();
    newer.worker.attempt = 3;
    assert!(matches!(r.start(&newer), StartOutcome::Started { .. }));
    let mut seen = 0;
    wait_for(Duration::from_secs(5), || {
        seen += r.poll().exits.len();
        (seen == 2).then_some(())
    })
    .expect("both exit");
    let log = std::fs::read_to_string(dir.join("logs/8.log")).unwrap();
    assert_eq!(log, "ran\nran\nran\n", "attempt 2 rank 0 once, rank 1, attempt 3");
    // A start that failed is not retried either.
    let mut broken = sh(9, 0, &dir, "");
    broken.argv = vec!["/nonexistent/spillway-no-such-program".into()];
    assert!(matches!(r.start(&broken), StartOutcome::Failed(_)));
    r.ack(&[broken.worker]);
    assert_eq!(r.start(&broken), StartOutcome::AlreadyRan);
    assert!(r.exited().iter().all(|e| e.worker != broken.worker), "no second exit reported");
}

/// The permission bits of `p` (not following a final symlink).
fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn logs_and_checkpoint_dirs_are_private() {
    // The usual umask: without explicit modes, directories would be 0755 and files 0644.
    // SAFETY: umask has no memory-safety preconditions.
    unsafe { libc::umask(0o022) };
    let dir = scratch("modes");
    let mut r = Runner::new(1, 0, &dir);
    let mut a = sh(12, 0, &dir, "echo hi; echo x > \"$SPILLWAY_CHECKPOINT_DIR/ckpt\"");
    a.log_path = "logs/job-12/rank-0.log".into();
    a.checkpoint_dir = "checkpoints/job-12".into();
    r.start(&a);
    assert_eq!(wait_exit(&mut r, 12, Duration::from_secs(5)).expect("exit").code, Some(0));
    for d in ["logs", "logs/job-12", "checkpoints", "checkpoints/job-12"] {
        assert_eq!(mode(&dir.join(d)), 0o700, "{d}");
    }
    assert_eq!(mode(&dir.join("logs/job-12/rank-0.log")), 0o600);
    assert_eq!(std::fs::read_to_string(dir.join("logs/job-12/rank-0.log")).unwrap(), "hi\n");
    // A log path that is a symlink is refused, not followed.
    let target = dir.join("elsewhere");
    std::fs::write(&target, "").unwrap();
    std::os::unix::fs::symlink(&target, dir.join("logs/link.log")).unwrap();
    let mut b = sh(13, 0, &dir, "echo through the link");
    b.log_path = "logs/link.log".into();
    assert!(matches!(r.start(&b), StartOutcome::Failed(_)));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "", "wrote through a symlinked log");
}

/// Whether this test process is root (the run-as tests need it).
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn run_as_another_user() {
    if !root() {
        println!("skipped run_as_another_user: needs root to switch users");
        return;
    }
    let nobody = match spillway_agent::user::resolve("nobody") {
        Ok(u) => u,
        Err(e) => {
            println!("skipped run_as_another_user: no user nobody ({e:#})");
            return;
        }
    };
    let dir = scratch("run-as");
    let secret = dir.join("secret");
    std::fs::write(&secret, "root only\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut r = Runner::new(1, 0, &dir).with_run_as(nobody.clone());
    let mut a = sh(
        14,
        0,
        &dir,
        "id -u; id -G; cat \"$0\" 2>/dev/null && echo READ || echo DENIED; echo 1 > \"$SPILLWAY_CHECKPOINT_DIR/c\" && echo WROTE",
    );
    a.argv.push(secret.display().to_string());
    a.checkpoint_dir = dir.join("checkpoints/job-14").display().to_string();
    assert!(matches!(r.start(&a), StartOutcome::Started { .. }));
    assert_eq!(wait_exit(&mut r, 14, Duration::from_secs(5)).expect("exit").code, Some(0));
    let log_path = dir.join("logs/14.log");
    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.first().copied(), Some(nobody.uid.to_string().as_str()), "{log}");
    let groups: Vec<u32> = lines[1].split_whitespace().filter_map(|g| g.parse().ok()).collect();
    assert!(!groups.contains(&0) && groups.contains(&nobody.gid), "root's groups kept: {log}");
    assert!(log.contains("DENIED") && !log.contains("root only"), "read a root-only file: {log}");
    assert!(log.contains("WROTE"), "cannot write its own checkpoint dir: {log}");
    use std::os::unix::fs::MetadataExt;
    let ckpt = dir.join("checkpoints/job-14");
    for (p, want) in [(&ckpt, 0o700), (&log_path, 0o600)] {
        let m = std::fs::metadata(p).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (nobody.uid, nobody.gid, want), "{}", p.display());
    }
    // Its parent, made by the agent, lets the user through but not look around.
    assert_eq!(mode(&dir.join("checkpoints")), 0o711);
    assert_eq!(std::fs::metadata(ckpt.join("c")).unwrap().uid(), nobody.uid);
}

#[test]
fn run_as_enters_the_workdir_as_the_user() {
    if !root() {
        println!("skipped run_as_enters_the_workdir_as_the_user: needs root to switch users");
        return;
    }
    let Ok(nobody) = spillway_agent::user::resolve("nobody") else {
        println!("skipped run_as_enters_the_workdir_as_the_user: no user nobody");
        return;
    };
    let dir = scratch("run-as-workdir");
    let private = dir.join("root-only");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let mut r = Runner::new(1, 0, &dir).with_run_as(nobody);
    // Root could enter it and leave the job inside; the user cannot.
    let mut a = sh(15, 0, &dir, "ls");
    a.workdir = Some(private.display().to_string());
    assert!(matches!(r.start(&a), StartOutcome::Failed(_)));
    let mut b = sh(16, 0, &dir, "pwd");
    b.workdir = Some(dir.display().to_string());
    assert!(matches!(r.start(&b), StartOutcome::Started { .. }));
    assert_eq!(wait_exit(&mut r, 16, Duration::from_secs(5)).expect("exit").code, Some(0));
    let log = std::fs::read_to_string(dir.join("logs/16.log")).unwrap();
    assert_eq!(log.trim(), dir.display().to_string());
}

/// Whether process `pid` runs (exists and has not ended).
fn running(pid: i32) -> bool {
    spillway_providers::procfs::stat(pid).is_some_and(|s| !s.ended())
}

/// Starts, in its own session, a process that writes its pid to `pid_file` and runs until signalled, noting a
/// SIGTERM in `note`; returns the script line that does so, and waits until the pid is written.
fn escape(pid_file: &std::path::Path, note: &std::path::Path) -> String {
    let (p, n) = (pid_file.display(), note.display());
    format!(
        "setsid sh -c 'trap \"echo term > {n}; exit 0\" TERM; echo $$ > {p}.tmp; mv {p}.tmp {p}; \
         while true; do sleep 0.05; done' & while [ ! -s {p} ]; do sleep 0.02; done"
    )
}

/// Asserts that process `pid` ends within 5 s (`what`: why it should); SIGKILLs it first where it does not, so a
/// failing test leaves nothing running.
fn assert_ends(pid: i32, what: &str) {
    if wait_for(Duration::from_secs(5), || (!running(pid)).then_some(())).is_none() {
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("process {pid}, which left the worker's group, still ran {what}");
    }
}

/// Reads the pid `escape` wrote.
fn escaped_pid(pid_file: &std::path::Path) -> i32 {
    wait_for(Duration::from_secs(5), || std::fs::read_to_string(pid_file).ok()?.trim().parse().ok())
        .expect("the escaped process wrote its pid")
}

#[test]
fn a_process_that_left_its_workers_group_ends_with_the_worker() {
    let dir = scratch("escape");
    let mut r = Runner::new(1, 0, &dir);
    // The worker leaves a process in a session of its own behind and exits: a signal to its group misses it.
    let (pid_file, note) = (dir.join("left.pid"), dir.join("left.term"));
    r.start(&sh(1, 0, &dir, &format!("{}; exit 0", escape(&pid_file, &note))));
    let exit = wait_exit(&mut r, 1, Duration::from_secs(10)).expect("the worker exits");
    assert_eq!(exit.code, Some(0));
    let pid = escaped_pid(&pid_file);
    assert_ends(pid, "after the worker ended");

    // A stop order reaches it too, as the signal the order names (it may checkpoint), before the grace runs out
    // (the worker takes a second to exit: once it has, what it left behind is killed at once).
    let (pid_file, note) = (dir.join("stopped.pid"), dir.join("stopped.term"));
    let a = sh(
        2,
        0,
        &dir,
        &format!("{}; trap 'sleep 1; exit 0' TERM; while true; do sleep 0.05; done", escape(&pid_file, &note)),
    );
    r.start(&a);
    let pid = escaped_pid(&pid_file);
    std::thread::sleep(Duration::from_millis(200)); // let the worker install its trap
    assert!(r.stop(&StopOrder { worker: a.worker, grace_ms: 5000, signal: "SIGTERM".into() }));
    wait_exit(&mut r, 2, Duration::from_secs(4)).expect("the worker exits before its grace");
    assert_ends(pid, "after its worker was stopped");
    let noted = std::fs::read_to_string(&note).unwrap_or_default();
    assert!(noted.contains("term"), "the process that left the group never got the stop's SIGTERM");
}
