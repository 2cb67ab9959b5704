//! The `spillway` binary end to end: `config check` on good and bad files, and `simulate` writing its reports.

// A test of the shell: it reads the real clock.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running spillway {args:?}: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fresh, empty directory under the system temp dir, unique to this process and `name`.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name).display().to_string()
}

#[test]
fn config_check_accepts_the_examples() {
    for name in ["hybrid.toml", "alibaba-16gpu.toml", "slurm.toml"] {
        let out = spillway(&["config", "check", &example(name)]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains("ok"), "{name}: {}", text(&out.stdout));
    }
}

#[test]
fn config_check_rejects_a_bad_file_naming_the_line() {
    let dir = temp_dir("config");
    let bad = dir.join("bad.toml");
    let body = "[[pools]]\nname = \"onprem\"\nmarket = \"fixed\"\nnodes = [{ count = 1, gpus = 8 }]\n\n\
                [[instance_types]]\nname = \"g8\"\ngpus = 8\ngpu_model = \"V100\"\non_demand_usd_per_hour = 20.0\n\n\
                [[pools]]\nname = \"od\"\nmarket = \"on_demand\"\ninstance_types = [\"g8\"]\nmin_nodes = 6\nmax_nodes = 4\n";
    std::fs::write(&bad, body).unwrap();
    let out = spillway(&["config", "check", &bad.display().to_string()]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "a bad config passed: {}", text(&out.stdout));
    assert!(err.contains(&format!("{}:16: pools[1].min_nodes", bad.display())), "{err}");

    let syntax = dir.join("syntax.toml");
    std::fs::write(&syntax, "[cluster]\nname = \"x\"\n\n[[pools]\nname = \"p\"\n").unwrap();
    let out = spillway(&["config", "check", &syntax.display().to_string()]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("{}:4:", syntax.display())), "{err}");

    let out = spillway(&["config", "check", &dir.join("absent.toml").display().to_string()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("absent.toml"), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn simulate_writes_the_four_report_files() {
    let dir = temp_dir("simulate");
    let out_dir = dir.join("out");
    let out = spillway(&["simulate", "--jobs", "200", "--days", "1", "--out", &out_dir.display().to_string()]);
    assert!(out.status.success(), "simulate failed: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("spillway"), "the summary names the runs: {}", text(&out.stdout));
    for file in ["report.json", "timeseries.csv", "events.jsonl", "report.html"] {
        let len = std::fs::metadata(out_dir.join(file)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{file} missing or empty");
    }
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(html.contains("<svg"), "report.html has no chart");
    let json = std::fs::read_to_string(out_dir.join("report.json")).unwrap();
    assert!(json.contains("\"jobs_lost\": 0"), "report.json lacks jobs_lost 0");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A config whose on-demand pool (max 1 node) offers a 4-GPU type, cheaper for a 4x2 gang, and an 8-GPU type
/// that holds the gang on one node; the fixed pool is too small for it.
const STARVING_CONFIG: &str = r#"
[[instance_types]]
name = "t4"
gpus = 4
gpu_model = "V100"
on_demand_usd_per_hour = 10.0

[[instance_types]]
name = "t8"
gpus = 8
gpu_model = "V100"
on_demand_usd_per_hour = 24.0

[[pools]]
name = "onprem"
market = "fixed"
nodes = [{ count = 1, gpus = 1 }]

[[pools]]
name = "od"
market = "on_demand"
instance_types = ["t4", "t8"]
max_nodes = 1
"#;

#[test]
fn simulate_ends_when_a_job_can_never_start() {
    let dir = temp_dir("starving");
    std::fs::write(dir.join("c.toml"), STARVING_CONFIG).unwrap();
    std::fs::write(dir.join("t.csv"), "job_id,submit_s,duration_s,gpus,workers,tier\ngang,0,600,4,2,p0\n").unwrap();
    let path = |f: &str| dir.join(f).display().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["simulate", "--config", &path("c.toml"), "--trace", &path("t.csv"), "--out", &path("out")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // One job normally takes milliseconds; give it 1.5 s, then stop it before it eats the machine's memory.
    let mut ended = None;
    for _ in 0..75 {
        if let Some(status) = child.try_wait().unwrap() {
            ended = Some(status);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if ended.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    let status = ended.expect("spillway simulate was still running after 1.5 s on a one-job trace");
    // Ending with a report or with an error naming the job is fine; dying of a signal (out of memory) is not.
    assert!(status.code().is_some(), "spillway simulate died: {status}");
}

#[test]
fn bad_filter_values_exit_2_and_list_the_allowed_ones() {
    for (args, allowed) in [
        (&["jobs", "ls", "--state", "bogus"][..], "queued, running, succeeded, failed, cancelled"),
        (&["events", "--kind", "bogus"][..], "scale_out_blocked"),
        (&["completions", "tcsh"][..], "bash"),
    ] {
        let out = spillway(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains(allowed), "{args:?}: {}", text(&out.stderr));
    }
}

#[test]
fn completions_cover_every_command() {
    for shell in ["bash", "zsh", "fish"] {
        let out = spillway(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for cmd in ["submit", "nodes", "slurm", "simulate", "completions"] {
            assert!(script.contains(cmd), "{shell} completion lacks {cmd}");
        }
    }
}
