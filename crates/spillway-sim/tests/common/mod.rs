//! What the deadline tests share: the one job every window replays.

use spillway_core::time::{Millis, Time, secs};
use spillway_sim::input::SimJob;

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
