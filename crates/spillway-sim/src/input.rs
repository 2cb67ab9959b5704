//! Turns a loaded trace into engine job specs checked against a configuration; errors name the file, the line
//! and the column.

use crate::trace::{Trace, TraceError, TraceJob};
use spillway_core::time::{Millis, secs};
use spillway_core::{Config, JobSpec, SubmitError, check_spec};

/// One job to replay: when it arrives, how long it runs, and what it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct SimJob {
    /// Milliseconds from the start of the trace.
    pub submit_ms: Millis,
    pub duration_ms: Millis,
    pub spec: JobSpec,
}

/// Returns the trace's jobs as engine specs sorted by submission (stable, so file order breaks ties), or the
/// first job the config cannot run.
pub fn to_sim_jobs(trace: &Trace, cfg: &Config) -> Result<Vec<SimJob>, TraceError> {
    let mut out = Vec::with_capacity(trace.jobs.len());
    for j in &trace.jobs {
        let spec = spec_of(j, cfg.start_ms);
        if let Err(e) = check_spec(cfg, &spec) {
            let column = trace_column(&e);
            return Err(TraceError::Row {
                file: trace.source.clone(),
                line: j.line,
                column: column.into(),
                message: e.to_string(),
            });
        }
        out.push(SimJob { submit_ms: secs(j.submit_s), duration_ms: secs(j.duration_s).max(1), spec });
    }
    out.sort_by_key(|j| j.submit_ms);
    Ok(out)
}

/// Returns the trace column a refusal is about (the engine names spec fields; a trace names its columns).
fn trace_column(e: &SubmitError) -> &'static str {
    match e.field() {
        "name" => "job_id",
        "gpu_model" => "gpu_type",
        "checkpoint_interval_ms" => "checkpoint_interval_s",
        "expected_duration_ms" => "duration_s",
        "deadline" => "deadline_s",
        f => f,
    }
}

/// Returns the engine spec of a trace job; `t0` is the instant second 0 of the trace maps to.
fn spec_of(j: &TraceJob, t0: i64) -> JobSpec {
    JobSpec {
        name: j.name.clone(),
        tier: j.tier.clone().unwrap_or_else(|| "p1".into()),
        team: j.team.clone().unwrap_or_else(|| "default".into()),
        gpus_per_worker: j.gpus,
        workers: j.workers,
        gpu_model: j.gpu_type.clone(),
        interruptible: j.interruptible,
        checkpoint_interval_ms: j.checkpoint_interval_s.map(secs),
        deadline: j.deadline_s.map(|d| t0 + secs(d)),
        expected_duration_ms: Some(secs(j.duration_s).max(1)),
    }
}
