//! What the deadline tests share: the one job every window replays, and the spot trace files they replay it on.

use spillway_core::time::{Millis, Time, secs};
use spillway_sim::input::SimJob;
use std::path::{Path, PathBuf};

/// Returns the single deadline job of a window: `duration` ms of work on one 8-GPU node, interruptible (spot
/// first), due `deadline_h` hours after `start` (the config's start), submitted at once.
pub fn deadline_job(start: Time, deadline_h: f64, duration: Millis) -> SimJob {
    let spec = spillway_core::JobSpec {
        name: "train".into(),
        tier: "p1".into(),
        team: "default".into(),
        gpus_per_worker: 8,
        workers: 1,
        min_workers: None,
        gpu_model: None,
        interruptible: Some(true),
        checkpoint_interval_ms: None,
        deadline: Some(start + secs(deadline_h * 3600.0)),
        expected_duration_ms: Some(duration),
        checkpoint_gb: None,
        data_region: None,
    };
    SimJob { submit_ms: 0, duration_ms: duration, spec, serial_fraction: 0.0 }
}

/// Returns the `.json` files of `dir`, sorted by name (none when it cannot be read).
#[allow(dead_code)] // Not every test crate that shares this module reads trace files.
pub fn json_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    files.sort();
    files
}
