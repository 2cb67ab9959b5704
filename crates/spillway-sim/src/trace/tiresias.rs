//! Tiresias / Muri style job CSV (`job_id,num_gpu,submit_time,iterations,model_name,duration,interval`,
//! as in the Tiresias NSDI'19 repository's example traces).
//!
//! The treatment: `job_id` is the job's name (unique); `submit_s` = `submit_time` (>= 0); `duration_s` =
//! `duration` (> 0, the job's run time in seconds on its GPUs). `num_gpu` (whole, >= 1) is the job's total
//! GPU count: up to 8 it is one worker with that many GPUs; above 8 and a multiple of 8 it is a gang of
//! `num_gpu / 8` workers with 8 GPUs each (one 8-GPU machine per worker, as those clusters were built);
//! any other count above 8 stays a single worker, and the configuration check reports it if no node is
//! that large. `iterations`, `model_name` and `interval` are not used. Tier, team and the other optional
//! fields are absent, so the configuration's defaults apply. Nothing is skipped.

use std::collections::HashMap;
use std::path::Path;

use super::{Trace, TraceError, TraceJob, read_csv, read_file};

/// The columns the treatment reads.
const REQUIRED: [&str; 4] = ["job_id", "num_gpu", "submit_time", "duration"];

/// GPUs in one machine of the clusters these traces describe: larger jobs span machines.
const GPUS_PER_MACHINE: u32 = 8;

/// Reads a Tiresias-style trace file. Returns its jobs in file order, or the first error, which names the
/// file, the line and the column.
pub fn load(path: &Path) -> Result<Trace, TraceError> {
    let text = read_file(path)?;
    parse_str(&path.display().to_string(), &text)
}

/// Parses Tiresias-style trace text; `name` stands for the file in `source` and in errors. Returns what
/// [`load`] returns.
pub fn parse_str(name: &str, text: &str) -> Result<Trace, TraceError> {
    let mut jobs = Vec::new();
    let mut seen = HashMap::new();
    read_csv(name, text, &REQUIRED, |row| {
        let job_id = row.required("job_id")?;
        row.unique(&mut seen, "job_id", job_id)?;
        let num_gpu = row.present("num_gpu", row.count("num_gpu", 1)?)?;
        let submit_s = row.time("submit_time")?;
        let duration_s = row.present("duration", row.positive("duration")?)?;
        let (gpus, workers) = if num_gpu > GPUS_PER_MACHINE && num_gpu % GPUS_PER_MACHINE == 0 {
            (GPUS_PER_MACHINE, num_gpu / GPUS_PER_MACHINE)
        } else {
            (num_gpu, 1)
        };
        jobs.push(TraceJob {
            name: job_id.to_string(),
            submit_s,
            duration_s,
            gpus,
            workers,
            tier: None,
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
    Ok(Trace {
        source: name.to_string(),
        jobs,
        skipped: Vec::new(),
        columns: &[("submit_s", "submit_time"), ("duration_s", "duration"), ("gpus", "num_gpu")],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval";

    #[test]
    fn rows_become_jobs_and_large_jobs_become_gangs_of_eight() {
        let text = format!(
            "{HEADER}\n0,1,0,606,vgg19,164,30\n1,8,30,133,vgg11,147,23\n2,32,53,1,x,127.5,26\n3,12,60,1,x,10,1\n"
        );
        let t = parse_str("t.csv", &text).unwrap();
        let shape: Vec<_> =
            t.jobs.iter().map(|j| (j.name.as_str(), j.submit_s, j.duration_s, j.gpus, j.workers)).collect();
        assert_eq!(
            shape,
            [("0", 0.0, 164.0, 1, 1), ("1", 30.0, 147.0, 8, 1), ("2", 53.0, 127.5, 8, 4), ("3", 60.0, 10.0, 12, 1)]
        );
        assert_eq!(t.jobs[3].line, 5);
        assert!(t.jobs.iter().all(|j| j.tier.is_none() && j.team.is_none()));
        assert!(t.skipped.is_empty());
    }

    #[test]
    fn malformed_rows_name_line_column_and_value() {
        // (rule, row, column, a piece of the message)
        let cases = [
            ("a_bad_number", "0,two,0,1,m,10,1", "num_gpu", "`two`"),
            ("zero_gpus", "0,0,0,1,m,10,1", "num_gpu", "`0` is not a whole number >= 1"),
            ("a_negative_submit_time", "0,1,-1,1,m,10,1", "submit_time", "`-1` is negative"),
            ("a_zero_duration", "0,1,0,1,m,0,1", "duration", "`0` must be > 0"),
            ("a_bad_duration", "0,1,0,1,m,1h,1", "duration", "`1h`"),
            ("an_empty_job_id", ",1,0,1,m,10,1", "job_id", "empty value"),
        ];
        for (rule, row, column, piece) in cases {
            let err = parse_str("t.csv", &format!("{HEADER}\n{row}\n")).expect_err(rule).to_string();
            assert!(err.starts_with("t.csv:2: "), "{rule}: {err}");
            assert!(err.contains(&format!("column `{column}`")), "{rule}: {err}");
            assert!(err.contains(piece), "{rule}: {err}");
        }
    }

    #[test]
    fn a_duplicate_job_id_names_line_and_column() {
        let err = parse_str("t.csv", &format!("{HEADER}\n7,1,0,1,m,10,1\n7,1,5,1,m,10,1\n")).unwrap_err();
        assert_eq!(err.to_string(), "t.csv:3: column `job_id`: `7` is a duplicate (first on line 2)");
    }

    #[test]
    fn a_missing_column_is_named() {
        let err = parse_str("t.csv", "job_id,num_gpu,submit_time\n").unwrap_err();
        assert_eq!(err.to_string(), "t.csv: header lacks required column `duration`");
    }

    #[test]
    fn the_smoke_trace_loads_when_present() {
        let Some(path) = crate::shared("traces/jobs/tiresias_60_job_smoke.csv") else { return };
        let t = load(&path).unwrap();
        assert_eq!(t.jobs.len(), 60);
        assert_eq!((t.jobs[0].gpus, t.jobs[0].duration_s), (1, 164.0));
        assert!(t.jobs.iter().all(|j| [1, 2, 4, 8].contains(&j.gpus) && j.workers == 1));
    }
}
