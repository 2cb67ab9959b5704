//! Turns a loaded trace into engine job specs checked against a configuration; errors name the file, the line
//! and the column.

use crate::trace::{Trace, TraceError, TraceJob};
use spillway_core::time::{Millis, secs};
use spillway_core::{Config, JobSpec, SubmitError, check_new_spec};

/// One job to replay: when it arrives, how long it runs, and what it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct SimJob {
    /// Milliseconds from the start of the trace.
    pub submit_ms: Millis,
    /// Run time on all of `spec.workers` (an elastic job's most).
    pub duration_ms: Millis,
    pub spec: JobSpec,
    /// An elastic job's scaling curve: the serial fraction of Amdahl's law (0: linear). See [`SimJob::speed`].
    pub serial_fraction: f64,
}

impl SimJob {
    /// Returns the share of full speed a job runs at on `width` of its workers: speedup(width) / speedup(most),
    /// with Amdahl's speedup 1 / (f + (1 - f) / w) for serial fraction f. 1 on all its workers.
    pub fn speed(&self, width: u32) -> f64 {
        speed(self.serial_fraction, width, self.spec.workers)
    }
}

/// Returns speedup(`width`) / speedup(`most`) under Amdahl's law with serial fraction `f` (see [`SimJob::speed`]).
pub fn speed(f: f64, width: u32, most: u32) -> f64 {
    let up = |w: u32| 1.0 / (f + (1.0 - f) / f64::from(w.max(1)));
    if width >= most { 1.0 } else { up(width) / up(most) }
}

/// The latest submission or deadline a trace may name, in seconds from its start: 100 years (a trace in Unix
/// seconds fits). Later ones are refused: the run would last until then (one row at 1e13 s made a 259 MB event
/// log), and far later ones overflow the engine's clock.
pub const MAX_TRACE_S: f64 = 100.0 * 365.0 * 86_400.0;

/// Returns the trace's jobs as engine specs sorted by submission (stable, so file order breaks ties), or the
/// first job the config cannot run.
pub fn to_sim_jobs(trace: &Trace, cfg: &Config) -> Result<Vec<SimJob>, TraceError> {
    let mut out = Vec::with_capacity(trace.jobs.len());
    for j in &trace.jobs {
        let late = |column: &'static str, s: f64| TraceError::Row {
            file: trace.source.clone(),
            line: j.line,
            column: trace.column(column).into(),
            message: format!("{s:e} s is more than 100 years after the trace's start"),
        };
        if j.submit_s.is_nan() || j.submit_s > MAX_TRACE_S {
            return Err(late("submit_s", j.submit_s));
        }
        if let Some(d) = j.deadline_s.filter(|&d| d.is_nan() || d > MAX_TRACE_S) {
            return Err(late("deadline_s", d));
        }
        let spec = spec_of(j, cfg.start_ms);
        if let Err(e) = check_new_spec(cfg, &spec) {
            let column = trace.column(trace_column(&e));
            return Err(TraceError::Row {
                file: trace.source.clone(),
                line: j.line,
                column: column.into(),
                message: e.to_string(),
            });
        }
        let (submit_ms, duration_ms) = (secs(j.submit_s), secs(j.duration_s).max(1));
        out.push(SimJob { submit_ms, duration_ms, spec, serial_fraction: j.serial_fraction.unwrap_or(0.0) });
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
        name: j.name.as_str().into(),
        tier: j.tier.as_deref().unwrap_or("p1").into(),
        team: j.team.as_deref().unwrap_or("default").into(),
        gpus_per_worker: j.gpus,
        workers: j.workers,
        min_workers: j.min_workers,
        gpu_model: j.gpu_type.clone(),
        interruptible: j.interruptible,
        checkpoint_interval_ms: j.checkpoint_interval_s.map(secs),
        deadline: j.deadline_s.map(|d| t0 + secs(d)),
        expected_duration_ms: Some(secs(j.duration_s).max(1)),
        checkpoint_gb: j.checkpoint_gb,
        data_region: j.data_region.clone(),
    }
}

/// Makes a seeded `share` of the jobs with 2 or more GPUs elastic, as data-parallel jobs of 1-GPU workers: a job
/// of G GPUs gets G workers of 1 GPU, and (unless `rigid`) may run on as few as half of them, rounded up. With
/// `rigid` the same jobs get the same shape but stay rigid, so the two runs differ only in elasticity. Which jobs
/// are picked depends on `seed` and their place in `jobs` only. Returns how many jobs were reshaped.
pub fn make_elastic(jobs: &mut [SimJob], share: f64, rigid: bool, seed: u64) -> usize {
    let mut n = 0;
    for (i, j) in jobs.iter_mut().enumerate() {
        let total = j.spec.gpus_per_worker.saturating_mul(j.spec.workers);
        if total < 2 || unit_hash(seed, i as u64) >= share {
            continue;
        }
        j.spec.gpus_per_worker = 1;
        j.spec.workers = total;
        j.spec.min_workers = (!rigid).then_some(total.div_ceil(2));
        n += 1;
    }
    n
}

/// Returns a number in [0, 1) drawn from `seed` and `i` by hashing (splitmix64's finalizer), so a draw per job
/// touches no random stream.
pub(crate) fn unit_hash(seed: u64, i: u64) -> f64 {
    let mut x = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Returns a 1 s job of one worker of `gpus` GPUs, submitted at 0 (for tests in this crate).
    pub(crate) fn job(gpus: u32) -> SimJob {
        let spec = JobSpec {
            name: "j".into(),
            tier: "p1".into(),
            team: "t".into(),
            gpus_per_worker: gpus,
            workers: 1,
            min_workers: None,
            gpu_model: None,
            interruptible: None,
            checkpoint_interval_ms: None,
            deadline: None,
            expected_duration_ms: None,
            checkpoint_gb: None,
            data_region: None,
        };
        SimJob { submit_ms: 0, duration_ms: 1, spec, serial_fraction: 0.0 }
    }

    #[test]
    fn elastic_and_rigid_runs_reshape_the_same_jobs_the_same_way() {
        let mut a: Vec<SimJob> = (0..200).map(|i| job(1 + i % 8)).collect();
        let mut b = a.clone();
        let n = make_elastic(&mut a, 0.5, false, 7);
        assert_eq!(n, make_elastic(&mut b, 0.5, true, 7));
        assert!(n > 60 && n < 120, "{n}");
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.spec.gpus_per_worker, x.spec.workers), (y.spec.gpus_per_worker, y.spec.workers));
            assert_eq!(x.spec.is_elastic(), x.spec.workers > 1 && x.spec.gpus_per_worker == 1 && y.spec.workers > 1);
            assert!(!y.spec.is_elastic());
        }
    }

    #[test]
    fn a_submission_or_deadline_past_a_century_is_refused_naming_its_row() {
        let cfg = Config::parse("c.toml", include_str!("../../../examples/hybrid.toml")).unwrap();
        let h = "job_id,submit_s,duration_s,gpus,tier,deadline_s";
        for (row, column) in [("a,1e16,60,1,p1,", "submit_s"), ("a,0,60,1,p1,1e300", "deadline_s")] {
            // The loader refuses a late submission itself; a late deadline reaches the conversion.
            let text = format!("{h}\nb,0,60,1,p1,\n{row}\n");
            let e = crate::trace::native::parse_str("t.csv", &text).and_then(|t| to_sim_jobs(&t, &cfg));
            let e = e.unwrap_err().to_string();
            assert!(e.starts_with("t.csv:3: column `") && e.contains(column) && e.contains("100 years"), "{e}");
        }
        let t = crate::trace::native::parse_str("t.csv", &format!("{h}\na,3e9,60,1,p1,3.1e9\n")).unwrap();
        assert_eq!(to_sim_jobs(&t, &cfg).unwrap()[0].submit_ms, 3_000_000_000_000);
    }

    #[test]
    fn a_foreign_traces_refusal_names_its_own_column() {
        let cfg = Config::parse("c.toml", include_str!("../../../examples/hybrid.toml")).unwrap();
        let head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";
        // A run of 12.7 years (deletion less scheduling) is past what a job may declare.
        let t =
            crate::trace::alibaba::parse_str("a.csv", &format!("{head}\nx,1,1,1,1000,,BE,Running,0,400000000,10\n"));
        let e = to_sim_jobs(&t.unwrap(), &cfg).unwrap_err().to_string();
        assert!(e.starts_with("a.csv:2: column `deletion_time`: "), "{e}");
    }

    #[test]
    fn speed_follows_amdahls_law_and_is_whole_on_all_workers() {
        assert_eq!(speed(0.0, 2, 4), 0.5);
        assert_eq!(speed(0.3, 4, 4), 1.0);
        // f = 0.5: speedup(1) = 1, speedup(2) = 4/3.
        assert!((speed(0.5, 1, 2) - 0.75).abs() < 1e-12);
    }
}
