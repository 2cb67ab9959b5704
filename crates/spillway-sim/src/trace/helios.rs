//! Demand series replayed as jobs: a Helios per-minute file (`running_gpu_num + pending_gpu_num`, the GPUs the
//! virtual cluster's users asked for at each minute) becomes a job trace whose demand, if every job started at
//! once, is exactly that curve.
//!
//! Treatment (the series knows GPUs, not jobs): GPUs are stacked last-in-first-out. When demand rises by `k`,
//! `k` GPUs are pushed with that minute as their submit time; when it falls by `m`, the `m` newest GPUs end. The
//! GPUs that were submitted in the same minute and ended in the same minute form one job, split into jobs of at
//! most 8 GPUs (one node of the usual size). GPUs still asked for at the end of the series end with it. Every job is
//! `p1` of team `default` unless the config maps it otherwise; the series carries no tier.

use super::{Trace, TraceError, TraceJob};
use crate::demand::{self, DemandError, Series};
use std::path::Path;

/// The largest job the replay makes; larger steps are split.
pub const MAX_JOB_GPUS: u32 = 8;
/// The most GPUs one minute may ask for (a value far past any cluster is refused, not replayed as jobs).
pub const MAX_DEMAND_GPUS: f64 = 1_000_000.0;
/// The most jobs a series may replay as (a replay holds every job in memory; `simulate --jobs` has the same cap).
pub const MAX_REPLAY_JOBS: u64 = 2_000_000;

/// Reads a Helios demand file and returns its demand as jobs (see the module doc).
pub fn load(path: &Path) -> Result<Trace, TraceError> {
    let running = demand::load(path, "running_gpu_num").map_err(to_trace_error)?;
    let pending = demand::load(path, "pending_gpu_num").map_err(to_trace_error)?;
    from_series(&running, &pending)
}

/// Returns the jobs whose demand is `running + pending` at each step; an error names a negative or fractional value.
pub fn from_series(running: &Series, pending: &Series) -> Result<Trace, TraceError> {
    let step_s = running.step_s();
    let mut demand = Vec::with_capacity(running.values.len());
    for (i, (&r, &p)) in running.values.iter().zip(&pending.values).enumerate() {
        for (column, v) in [("running_gpu_num", r), ("pending_gpu_num", p)] {
            if v < 0.0 || v.fract() != 0.0 || v > MAX_DEMAND_GPUS {
                return Err(TraceError::Row {
                    file: running.source.clone(),
                    line: i + 2,
                    column: column.into(),
                    message: format!("{v} is not a whole GPU count from 0 to {MAX_DEMAND_GPUS}"),
                });
            }
        }
        demand.push((r + p) as u64);
    }
    // The stack holds (submit step, GPUs) runs; pops take from the top.
    let mut stack: Vec<(usize, u64)> = Vec::new();
    let mut ended: Vec<(usize, usize, u64)> = Vec::new();
    let mut level = 0u64;
    for (i, &d) in demand.iter().chain(std::iter::once(&0)).enumerate() {
        if d > level {
            stack.push((i, d - level));
        }
        let mut drop = level.saturating_sub(d);
        while drop > 0 {
            let Some(top) = stack.last_mut() else { break };
            let take = top.1.min(drop);
            ended.push((top.0, i, take));
            top.1 -= take;
            drop -= take;
            if top.1 == 0 {
                stack.pop();
            }
        }
        level = d;
    }
    // Submit order, then end order, so names are stable.
    ended.sort_unstable();
    let total: u64 = ended.iter().map(|e| e.2.div_ceil(u64::from(MAX_JOB_GPUS))).sum();
    if total > MAX_REPLAY_JOBS {
        return Err(TraceError::Row {
            file: running.source.clone(),
            line: 1,
            column: "running_gpu_num".into(),
            message: format!("the series replays as {total} jobs, more than {MAX_REPLAY_JOBS}"),
        });
    }
    let mut jobs = Vec::new();
    for (start, end, gpus) in ended {
        let mut left = gpus;
        while left > 0 {
            let g = left.min(MAX_JOB_GPUS as u64) as u32;
            left -= g as u64;
            jobs.push(TraceJob {
                name: format!("d{:06}", jobs.len() + 1),
                submit_s: start as f64 * step_s,
                duration_s: (end - start) as f64 * step_s,
                gpus: g,
                workers: 1,
                tier: Some("p1".into()),
                team: None,
                gpu_type: None,
                interruptible: None,
                checkpoint_interval_s: None,
                deadline_s: None,
                min_workers: None,
                serial_fraction: None,
                line: start + 2,
                checkpoint_gb: None,
                data_region: None,
            });
        }
    }
    // A job is a run of GPUs between two rows: its times are the `time` column's, its size the demand's.
    let columns = &[("submit_s", "time"), ("duration_s", "time"), ("gpus", "running_gpu_num")];
    Ok(Trace { source: running.source.clone(), jobs, skipped: Vec::new(), columns })
}

/// Maps a demand-file error to the trace error that names the same file, line and column.
fn to_trace_error(e: DemandError) -> TraceError {
    match e {
        DemandError::Io { file, message } => TraceError::Io { file, message },
        DemandError::UnknownColumn { file, column, .. } => TraceError::MissingColumn { file, column },
        DemandError::Row { file, line, column, message } => TraceError::Row { file, line, column, message },
        DemandError::Gap { file, line, previous, time, step_s, expected_s } => TraceError::Row {
            file,
            line,
            column: "time".into(),
            message: format!("{time} follows {previous} after {step_s} s; {}", demand::step_rule(expected_s)),
        },
        DemandError::TooShort { file, rows } => TraceError::Row {
            file,
            line: rows + 1,
            column: "time".into(),
            message: "a series needs at least 2 rows".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(values: &[f64]) -> Series {
        Series { source: "t.csv".into(), column: "x".into(), start: 0, step_ms: 60_000, values: values.to_vec() }
    }

    /// Demand at each step if every job ran from its submission for its duration.
    fn replayed(trace: &Trace, steps: usize) -> Vec<u64> {
        (0..steps)
            .map(|i| {
                let t = i as f64 * 60.0;
                trace
                    .jobs
                    .iter()
                    .filter(|j| j.submit_s <= t && t < j.submit_s + j.duration_s)
                    .map(|j| j.gpus as u64)
                    .sum()
            })
            .collect()
    }

    #[test]
    fn jobs_reproduce_the_demand_curve() {
        let running = [0.0, 3.0, 12.0, 12.0, 5.0, 9.0, 0.0, 2.0];
        let pending = [0.0, 0.0, 4.0, 0.0, 0.0, 1.0, 0.0, 0.0];
        let trace = from_series(&series(&running), &series(&pending)).unwrap();
        let want: Vec<u64> = running.iter().zip(&pending).map(|(r, p)| (r + p) as u64).collect();
        assert_eq!(replayed(&trace, want.len()), want);
        assert!(trace.jobs.iter().all(|j| (1..=MAX_JOB_GPUS).contains(&j.gpus) && j.duration_s > 0.0));
        // The 13 GPUs that arrive at minute 2 leave in three groups (LIFO): 4 at minute 3, 7 at 4, 2 at 6.
        let at2: Vec<(u32, f64)> =
            trace.jobs.iter().filter(|j| j.submit_s == 120.0).map(|j| (j.gpus, j.duration_s)).collect();
        assert_eq!(at2, vec![(4, 60.0), (7, 120.0), (2, 240.0)]);
    }

    #[test]
    fn negative_and_fractional_counts_are_named() {
        let e = from_series(&series(&[1.0, -2.0]), &series(&[0.0, 0.0])).unwrap_err().to_string();
        assert!(e.contains("t.csv:3") && e.contains("running_gpu_num"), "{e}");
        let e = from_series(&series(&[1.0, 2.0]), &series(&[0.5, 0.0])).unwrap_err().to_string();
        assert!(e.contains("t.csv:2") && e.contains("pending_gpu_num"), "{e}");
    }

    #[test]
    fn demand_past_any_cluster_is_refused_before_it_becomes_jobs() {
        // One minute of 4,294,967,296 GPUs would have made half a billion jobs.
        let e = from_series(&series(&[1.0, 4294967296.0, 0.0]), &series(&[0.0; 3])).unwrap_err().to_string();
        assert!(e.contains("t.csv:3") && e.contains("from 0 to 1000000"), "{e}");
        // Within the per-minute cap, a series that swings often enough is refused as a whole.
        let swings: Vec<f64> = (0..200).map(|i| if i % 2 == 0 { 0.0 } else { 1_000_000.0 }).collect();
        let e = from_series(&series(&swings), &series(&[0.0; 200])).unwrap_err().to_string();
        assert!(e.contains("12500000 jobs, more than 2000000"), "{e}");
    }
}
