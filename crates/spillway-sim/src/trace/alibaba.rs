//! Alibaba GPU cluster trace v2023 (`openb_pod_list_*.csv`, from `clusterdata/cluster-trace-gpu-v2023`,
//! paper "Beware of Fragmentation", USENIX ATC'23).
//!
//! Columns: `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,
//! scheduled_time` (times in seconds). Each pod becomes one job; the treatment:
//!
//! - `submit_s` = `creation_time`; the observed queueing delay is dropped, the simulator makes its own.
//! - `duration_s` = `deletion_time - scheduled_time`. Failed pods keep the time they ran before failing.
//!   A run time under 1 s (zero in this integer-second trace) becomes 1 s, since a job needs a positive
//!   run time. A deletion time before the scheduled time is an error.
//! - Pods still running at the end of the trace (`pod_phase` Running and `deletion_time` equal to the
//!   file's largest deletion time, 12902960 in the public file) are kept with their truncated run time,
//!   which is a lower bound on the true one.
//! - Pods with `num_gpu` 0 are skipped, counted under `no GPUs requested`.
//! - Pods that never started (`pod_phase` Pending or an empty `scheduled_time`) are skipped, counted under
//!   `never scheduled (Pending)`; a pod with no GPUs that also never started counts as `no GPUs requested`.
//! - GPU-sharing pods (`gpu_milli` < 1000) ask for a fraction of one GPU; they get a whole GPU
//!   (`gpus` = `num_gpu`, which is 1 for them), so their demand is rounded up.
//! - `gpu_spec` names GPU models of Alibaba's own cluster (`G2`, `T4`, `V100M16|V100M32`, ...). A replay runs
//!   the pods on another cluster's instance types, which have other names, so it is not carried into `gpu_type`
//!   (every job may use any GPU). To keep such constraints, convert the trace (`spillway trace convert`) and set
//!   `gpu_type` (one model or alternatives separated by `|`) to the models of your config.
//! - `qos` gives the tier: `LS` and `Guaranteed` -> `p0`, `Burstable` -> `p1`, `BE` -> `p2`; any other value
//!   is an error.
//! - `workers` is 1; `team`, `interruptible`, `checkpoint_interval_s` and `deadline_s` are absent.
//!
//! Every row is checked (numbers parse, `qos` and `pod_phase` are known, names are unique) before it is
//! skipped or kept, so a corrupt file is reported rather than silently thinned.

use std::collections::HashMap;
use std::path::Path;

use super::{Trace, TraceError, TraceJob, read_csv, read_file};

/// The columns the treatment reads; `cpu_milli`, `memory_mib` and `gpu_spec` may be absent.
const REQUIRED: [&str; 7] = ["name", "num_gpu", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"];

/// Skip reason for pods with `num_gpu` 0.
pub const NO_GPUS: &str = "no GPUs requested";
/// Skip reason for pods that never started.
pub const NEVER_SCHEDULED: &str = "never scheduled (Pending)";

/// Reads an Alibaba v2023 pod list. Returns the GPU pods that ran, in file order, with the skipped pods
/// counted by reason (only reasons that occurred), or the first error naming the file, line and column.
pub fn load(path: &Path) -> Result<Trace, TraceError> {
    let text = read_file(path)?;
    parse_str(&path.display().to_string(), &text)
}

/// Parses Alibaba v2023 pod list text; `name` stands for the file in `source` and in errors. Returns what
/// [`load`] returns.
pub fn parse_str(name: &str, text: &str) -> Result<Trace, TraceError> {
    let mut jobs = Vec::new();
    let mut seen = HashMap::new();
    let (mut no_gpus, mut never_scheduled) = (0, 0);
    read_csv(name, text, &REQUIRED, |row| {
        let pod = row.required("name")?;
        row.unique(&mut seen, "name", pod)?;
        let num_gpu = row.present("num_gpu", row.count("num_gpu", 0)?)?;
        row.count("gpu_milli", 0)?;
        row.float("cpu_milli")?;
        row.float("memory_mib")?;
        let tier = match row.required("qos")? {
            "LS" | "Guaranteed" => "p0",
            "Burstable" => "p1",
            "BE" => "p2",
            _ => return Err(row.bad("qos", "is not a known qos (LS, Guaranteed, Burstable or BE)")),
        };
        let phase = row.required("pod_phase")?;
        if !matches!(phase, "Pending" | "Running" | "Succeeded" | "Failed" | "Unknown") {
            return Err(row.bad("pod_phase", "is not a pod phase (Pending, Running, Succeeded, Failed, Unknown)"));
        }
        let submit_s = row.time("creation_time")?;
        let deleted = row.float("deletion_time")?;
        let scheduled = row.float("scheduled_time")?;
        if num_gpu == 0 {
            no_gpus += 1;
            return Ok(());
        }
        let Some(scheduled) = scheduled.filter(|_| phase != "Pending") else {
            never_scheduled += 1;
            return Ok(());
        };
        let Some(deleted) = deleted else {
            return Err(row.error("deletion_time", "empty value; a pod that started needs its deletion time"));
        };
        if scheduled < submit_s {
            return Err(row.bad("scheduled_time", &format!("is before creation_time `{submit_s}`")));
        }
        if deleted < scheduled {
            return Err(row.bad("deletion_time", &format!("is before scheduled_time `{scheduled}`")));
        }
        jobs.push(TraceJob {
            name: pod.to_string(),
            submit_s,
            duration_s: (deleted - scheduled).max(1.0),
            gpus: num_gpu,
            workers: 1,
            tier: Some(tier.to_string()),
            team: None,
            gpu_type: None,
            interruptible: None,
            checkpoint_interval_s: None,
            deadline_s: None,
            min_workers: None,
            serial_fraction: None,
            line: row.line,
            checkpoint_gb: None,
            data_region: None,
        });
        Ok(())
    })?;
    let skipped = [(NO_GPUS, no_gpus), (NEVER_SCHEDULED, never_scheduled)]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(reason, n)| (reason.to_string(), n))
        .collect();
    // A pod's run is its deletion less its scheduling: a run out of bounds names the later of the two.
    let columns =
        &[("job_id", "name"), ("submit_s", "creation_time"), ("duration_s", "deletion_time"), ("gpus", "num_gpu")];
    Ok(Trace { source: name.to_string(), jobs, skipped, columns })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";

    fn sample() -> String {
        [
            HEADER,
            "p0,12000,16384,1,1000,,LS,Running,0,12537496,0",
            "p1,6000,12288,1,460,,BE,Running,100,12902960,130",
            "p2,88000,327680,8,1000,V100M16|V100M32,Guaranteed,Succeeded,200,5200,300",
            "p3,4000,8192,0,0,,Burstable,Running,300,900,300",
            "p4,11908,47104,1,1000,,BE,Pending,400,500,",
            "p5,1000,1024,2,1000,,Burstable,Failed,500,700,700",
            "p6,1000,1024,1,1000,,BE,Pending,600,900,650",
            "p7,1000,1024,4,1000,G3,BE,Failed,700,1000,710",
        ]
        .join("\n")
    }

    #[test]
    fn the_documented_treatment_applies_to_a_sample() {
        let t = parse_str("pods.csv", &sample()).unwrap();
        let names: Vec<_> = t.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["p0", "p1", "p2", "p5", "p7"]);
        assert_eq!(t.skipped, vec![(NO_GPUS.to_string(), 1), (NEVER_SCHEDULED.to_string(), 2)]);
        let j = &t.jobs[1];
        // Submit is the creation time; run time runs from scheduling to deletion (truncated, still running).
        assert_eq!((j.submit_s, j.duration_s, j.gpus, j.workers, j.line), (100.0, 12902830.0, 1, 1, 3));
        assert_eq!((j.tier.as_deref(), j.team.clone(), j.gpu_type.clone()), (Some("p2"), None, None));
        let j = &t.jobs[2];
        assert_eq!((j.duration_s, j.gpus, j.tier.as_deref()), (4900.0, 8, Some("p0")));
        assert_eq!(j.gpu_type, None, "gpu_spec names the source cluster's models, not the replay's");
        // Zero run time becomes one second; Burstable is p1.
        assert_eq!((t.jobs[3].duration_s, t.jobs[3].tier.as_deref()), (1.0, Some("p1")));
        assert_eq!((t.jobs[4].duration_s, t.jobs[4].gpu_type.as_deref()), (290.0, None));
        assert!(t.jobs.iter().all(|j| j.interruptible.is_none() && j.deadline_s.is_none()));
    }

    #[test]
    fn malformed_rows_name_line_column_and_value() {
        // (rule, row, column, a piece of the message)
        let cases = [
            ("an_unknown_qos", "x,1,1,1,1000,,Gold,Running,0,10,0", "qos", "`Gold` is not a known qos"),
            ("an_unknown_phase", "x,1,1,1,1000,,BE,Done,0,10,0", "pod_phase", "`Done`"),
            ("a_bad_gpu_count", "x,1,1,one,1000,,BE,Running,0,10,0", "num_gpu", "`one`"),
            ("a_bad_gpu_milli", "x,1,1,1,0.5,,BE,Running,0,10,0", "gpu_milli", "`0.5`"),
            ("a_bad_creation_time", "x,1,1,1,1000,,BE,Running,t0,10,0", "creation_time", "`t0`"),
            ("a_negative_creation_time", "x,1,1,1,1000,,BE,Running,-3,10,0", "creation_time", "`-3` is negative"),
            ("a_bad_scheduled_time", "x,1,1,0,0,,BE,Running,0,10,soon", "scheduled_time", "`soon`"),
            ("a_deletion_before_scheduling", "x,1,1,1,1000,,BE,Running,0,10,20", "deletion_time", "`10` is before"),
            ("a_scheduling_before_creation", "x,1,1,1,1000,,BE,Running,30,90,20", "scheduled_time", "`20` is before"),
            ("a_creation_past_a_century", "x,1,1,1,1000,,BE,Running,1e17,2e17,1e17", "creation_time", "100 years"),
            ("an_empty_deletion_time", "x,1,1,1,1000,,BE,Running,0,,20", "deletion_time", "empty value"),
            ("an_empty_qos", "x,1,1,1,1000,,,Running,0,10,0", "qos", "empty value"),
        ];
        for (rule, row, column, piece) in cases {
            let err = parse_str("a.csv", &format!("{HEADER}\n{row}\n")).expect_err(rule).to_string();
            assert!(err.starts_with("a.csv:2: "), "{rule}: {err}");
            assert!(err.contains(&format!("column `{column}`")), "{rule}: {err}");
            assert!(err.contains(piece), "{rule}: {err}");
        }
    }

    #[test]
    fn a_missing_column_is_named() {
        let err = parse_str("a.csv", "name,num_gpu,qos,pod_phase,creation_time,deletion_time\n").unwrap_err();
        assert_eq!(err.to_string(), "a.csv: header lacks required column `scheduled_time`");
    }

    #[test]
    fn the_public_trace_loads_when_present() {
        let Some(path) = crate::shared("traces/jobs/openb_pod_list_default.csv") else { return };
        let t = load(&path).unwrap();
        assert!(t.jobs.len() >= 6000, "{} jobs", t.jobs.len());
        // 8,152 pods: 1,088 without GPUs; every other pod is kept or counted as never scheduled.
        let skipped: usize = t.skipped.iter().map(|(_, n)| n).sum();
        assert_eq!(t.jobs.len() + skipped, 8152);
        assert_eq!(t.skipped[0], (NO_GPUS.to_string(), 1088));
        assert!(t.jobs.iter().all(|j| j.duration_s >= 1.0 && (1..=8).contains(&j.gpus)));
    }
}
