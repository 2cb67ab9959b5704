//! A `--run-as` job without a workdir starts in the agent's directory only if the user may enter it. Its own
//! test binary, because it changes the process's current directory.

#![allow(clippy::disallowed_methods)] // the shared helpers wait with the real clock

mod common;

use common::*;
use spillway_agent::{Runner, StartOutcome};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

#[test]
fn run_as_job_does_not_inherit_a_directory_the_user_cannot_enter() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: needs root to switch users");
        return;
    }
    let Ok(nobody) = spillway_agent::user::resolve("nobody") else {
        println!("skipped: no user nobody");
        return;
    };
    let dir = scratch("run-as-cwd");
    let private = dir.join("root-only");
    std::fs::create_dir(&private).unwrap();
    std::fs::write(private.join("notes"), "world-readable, behind a root-only directory\n").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut r = Runner::new(1, 0, &dir).with_run_as(nobody);
    // The agent sits in a directory nobody may not enter; a job inheriting it could read `notes` by relative name.
    std::env::set_current_dir(&private).unwrap();
    let a = sh(1, 0, &dir, "cat notes");
    let outcome = r.start(&a);
    std::env::set_current_dir(&dir).unwrap();
    assert!(matches!(outcome, StartOutcome::Failed(_)), "{outcome:?}");
    // Where the user may enter, the job starts there.
    let b = sh(2, 0, &dir, "pwd");
    assert!(matches!(r.start(&b), StartOutcome::Started { .. }));
    let exit = wait_for(Duration::from_secs(5), || r.poll().exits.pop()).expect("exit");
    assert_eq!(exit.code, Some(0));
    let log = std::fs::read_to_string(dir.join("logs/2.log")).unwrap();
    assert_eq!(log.trim(), dir.display().to_string());
}
