//! The native trace format (CSV, version 1; see `shared/design/trace-format.md`).
//!
//! A header row names the columns, in any order; unknown columns are ignored, lines starting with `#` are
//! comments, an empty cell means the column is absent for that row, and whitespace around a cell is ignored.
//! Required: `job_id` (unique), `submit_s` (>= 0), `duration_s` (> 0), `gpus` (whole, >= 1). Optional:
//! `workers` (whole, >= 1, default 1; `max_workers` is another name for it), `tier`, `team`, `gpu_type`,
//! `interruptible` (`true`/`false`), `checkpoint_interval_s` (> 0), `deadline_s` (> `submit_s`), and for elastic
//! jobs `min_workers` (whole, 1..=`workers`) and `serial_fraction` (0 <= f < 1: the job's scaling curve, Amdahl's
//! law; 0, linear, when absent), `checkpoint_gb` (>= 0: what a move between regions carries) and `data_region`
//! (where its data is before it first runs). `duration_s` is the run time on all `workers`. Tier names are not checked here:
//! the configuration decides which tiers exist.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use super::{Trace, TraceError, TraceJob, read_csv, read_file};

/// The columns this format requires.
const REQUIRED: [&str; 4] = ["job_id", "submit_s", "duration_s", "gpus"];

/// Every column, in the order [`write`] puts them.
const COLUMNS: [&str; 15] = [
    "job_id",
    "submit_s",
    "duration_s",
    "gpus",
    "workers",
    "tier",
    "team",
    "gpu_type",
    "interruptible",
    "checkpoint_interval_s",
    "deadline_s",
    "min_workers",
    "serial_fraction",
    "checkpoint_gb",
    "data_region",
];

/// Reads a native trace file. Returns its jobs in file order, or the first error, which names the file,
/// the line and the column.
pub fn load(path: &Path) -> Result<Trace, TraceError> {
    let text = read_file(path)?;
    parse_str(&path.display().to_string(), &text)
}

/// Parses native trace text; `name` stands for the file in the trace's `source` and in errors. Returns the
/// jobs in text order (with their 1-based lines) and an empty `skipped`: this format skips nothing.
pub fn parse_str(name: &str, text: &str) -> Result<Trace, TraceError> {
    let mut jobs = Vec::new();
    let mut seen = HashMap::new();
    read_csv(name, text, &REQUIRED, |row| {
        let job_id = row.required("job_id")?;
        row.unique(&mut seen, "job_id", job_id)?;
        let submit_s = row.time("submit_s")?;
        let duration_s = row.present("duration_s", row.positive("duration_s")?)?;
        let gpus = row.present("gpus", row.count("gpus", 1)?)?;
        let workers = match (row.count("workers", 1)?, row.count("max_workers", 1)?) {
            (Some(a), Some(b)) if a != b => {
                return Err(row.bad("max_workers", &format!("differs from workers `{a}` (they name the same thing)")));
            }
            (a, b) => a.or(b).unwrap_or(1),
        };
        let min_workers = row.count("min_workers", 1)?;
        if min_workers.is_some_and(|m| m > workers) {
            return Err(row.bad("min_workers", &format!("is more than workers `{workers}`")));
        }
        let serial_fraction = row.float("serial_fraction")?;
        if serial_fraction.is_some_and(|f| !(0.0..1.0).contains(&f)) {
            return Err(row.bad("serial_fraction", "is not a fraction from 0 up to (not including) 1"));
        }
        let interruptible = match row.cell("interruptible") {
            None => None,
            Some(s) if s.eq_ignore_ascii_case("true") => Some(true),
            Some(s) if s.eq_ignore_ascii_case("false") => Some(false),
            Some(_) => return Err(row.bad("interruptible", "is not `true` or `false`")),
        };
        let checkpoint_interval_s = row.positive("checkpoint_interval_s")?;
        let deadline_s = row.float("deadline_s")?;
        let checkpoint_gb = row.float("checkpoint_gb")?;
        let data_region = row.cell("data_region").map(str::to_string);
        if let Some(Err(m)) = data_region.as_deref().map(spillway_core::config::check_region) {
            return Err(row.error("data_region", m));
        }
        if checkpoint_gb.is_some_and(|g| !(0.0..=1.0e6).contains(&g)) {
            return Err(row.bad("checkpoint_gb", "is not a size from 0 to 1000000 GB"));
        }
        if deadline_s.is_some_and(|d| d <= submit_s) {
            return Err(row.bad("deadline_s", &format!("is not after submit_s `{submit_s}`")));
        }
        jobs.push(TraceJob {
            name: job_id.to_string(),
            submit_s,
            duration_s,
            gpus,
            workers,
            tier: row.cell("tier").map(str::to_string),
            team: row.cell("team").map(str::to_string),
            gpu_type: row.cell("gpu_type").map(str::to_string),
            interruptible,
            checkpoint_interval_s,
            deadline_s,
            min_workers,
            serial_fraction,
            line: row.line,
            checkpoint_gb,
            data_region,
        });
        Ok(())
    })?;
    Ok(Trace { source: name.to_string(), jobs, skipped: Vec::new(), columns: &[] })
}

/// Writes `trace` in the native format: `#` comment lines with its source and skip counts, a header with
/// every column, then one row per job in trace order (absent values as empty cells). Numbers are written
/// in Rust's shortest round-trip form, so [`parse_str`] reads back the same values.
pub fn write(trace: &Trace, mut w: impl Write) -> std::io::Result<()> {
    // Comments are single lines: a line break in the source text would end the comment early.
    let one_line = |s: &str| s.replace(['\r', '\n'], " ");
    writeln!(w, "# source: {}", one_line(&trace.source))?;
    for (reason, count) in &trace.skipped {
        writeln!(w, "# skipped {count}: {}", one_line(reason))?;
    }
    // With the comment byte set, the writer quotes a field that starts with `#`, so a job named `#1`
    // is not read back as a comment line.
    let mut out = csv::WriterBuilder::new().comment(Some(b'#')).from_writer(w);
    out.write_record(COLUMNS).map_err(into_io)?;
    let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    for job in &trace.jobs {
        out.write_record([
            job.name.clone(),
            job.submit_s.to_string(),
            job.duration_s.to_string(),
            job.gpus.to_string(),
            job.workers.to_string(),
            job.tier.clone().unwrap_or_default(),
            job.team.clone().unwrap_or_default(),
            job.gpu_type.clone().unwrap_or_default(),
            job.interruptible.map(|b| b.to_string()).unwrap_or_default(),
            opt(job.checkpoint_interval_s),
            opt(job.deadline_s),
            job.min_workers.map(|m| m.to_string()).unwrap_or_default(),
            opt(job.serial_fraction),
            opt(job.checkpoint_gb),
            job.data_region.clone().unwrap_or_default(),
        ])
        .map_err(into_io)?;
    }
    out.flush()
}

/// Unwraps the I/O error inside a csv error, or wraps any other csv error as an I/O error.
fn into_io(e: csv::Error) -> std::io::Error {
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => std::io::Error::other(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "job_id,submit_s,duration_s,gpus,workers,tier,team,interruptible,checkpoint_interval_s,deadline_s";

    /// Parses a trace whose header is [`HEADER`] (line 1) and whose only row is `row` (line 2), and returns
    /// the error's Display, checking that it names the file, line 2 and `column`.
    fn error_for(row: &str, column: &str) -> String {
        let text = format!("{HEADER}\n{row}\n");
        let err = parse_str("t.csv", &text).expect_err("row should be rejected").to_string();
        assert!(err.starts_with("t.csv:2: "), "{err}");
        assert!(err.contains(&format!("column `{column}`")), "{err}");
        err
    }

    #[test]
    fn the_design_example_loads() {
        let text = "job_id,submit_s,duration_s,gpus,workers,tier,team\n\
                    pretrain-7b,0,172800,8,4,p0,foundation\n\
                    sweep-017,3600,5400,1,1,p2,research\n\
                    ft-llama-42,4000,7200,8,1,p1,applied\n";
        let t = parse_str("ex.csv", text).unwrap();
        assert_eq!(t.jobs.len(), 3);
        let j = &t.jobs[0];
        assert_eq!(
            (j.name.as_str(), j.submit_s, j.duration_s, j.gpus, j.workers),
            ("pretrain-7b", 0.0, 172800.0, 8, 4)
        );
        assert_eq!(j.tier.as_deref(), Some("p0"));
        assert_eq!(j.team.as_deref(), Some("foundation"));
        assert_eq!((j.gpu_type.clone(), j.interruptible, j.deadline_s), (None, None, None));
        assert_eq!(t.jobs[2].line, 4);
    }

    #[test]
    fn columns_in_any_order_unknown_ignored_comments_and_empty_cells() {
        let text = "# a comment before the header\n\
                    gpus,note,job_id,duration_s,submit_s,workers,tier\n\
                    # a comment between rows\n\
                    2,hello,a,60,5,,\n\
                    \n\
                    1, x , b ,30.5,0,3,p2\n";
        let t = parse_str("o.csv", text).unwrap();
        assert_eq!(t.jobs.len(), 2);
        assert_eq!((t.jobs[0].gpus, t.jobs[0].workers, t.jobs[0].tier.clone(), t.jobs[0].line), (2, 1, None, 4));
        assert_eq!((t.jobs[1].name.as_str(), t.jobs[1].workers, t.jobs[1].line), ("b", 3, 6));
        assert_eq!(t.jobs[1].duration_s, 30.5);
    }

    #[test]
    fn lines_are_physical_across_comments_blank_lines_crlf_and_quoted_breaks() {
        let text = "#c1\r\n\r\njob_id,submit_s,duration_s,gpus,team\r\n#c2\r\n#c3\r\na,0,1,1,\"two\nlines\"\r\n   \r\n\r\nb,0,1,1,x\r\n#c4\r\nc,-1,1,1,x\r\n";
        let err = parse_str("l.csv", text).unwrap_err().to_string();
        assert!(err.starts_with("l.csv:12: column `submit_s`"), "{err}");
        let t = parse_str("l.csv", &text.replace("c,-1", "c,1")).unwrap();
        let lines: Vec<_> = t.jobs.iter().map(|j| j.line).collect();
        assert_eq!(lines, [6, 10, 12]);
        assert_eq!(t.jobs[0].team.as_deref(), Some("two\nlines"));
    }

    #[test]
    fn a_missing_required_column_names_the_file_and_column() {
        let err = parse_str("m.csv", "job_id,submit_s,gpus\na,0,1\n").unwrap_err().to_string();
        assert_eq!(err, "m.csv: header lacks required column `duration_s`");
        let err = parse_str("e.csv", "").unwrap_err().to_string();
        assert_eq!(err, "e.csv: header lacks required column `job_id`");
    }

    #[test]
    fn malformed_rows_name_line_column_and_value() {
        // (rule, row, column, a piece of the message)
        let cases = [
            ("a_bad_number", "a,zero,60,1,,,,,,", "submit_s", "`zero`"),
            ("a_negative_submit_time", "a,-5,60,1,,,,,,", "submit_s", "`-5` is negative"),
            ("an_infinite_submit_time", "a,inf,60,1,,,,,,", "submit_s", "`inf`"),
            ("a_zero_duration", "a,0,0,1,,,,,,", "duration_s", "`0` must be > 0"),
            ("an_empty_required_cell", "a,0,,1,,,,,,", "duration_s", "empty value"),
            ("zero_gpus", "a,0,60,0,,,,,,", "gpus", "`0` is not a whole number >= 1"),
            ("fractional_gpus", "a,0,60,1.5,,,,,,", "gpus", "`1.5`"),
            ("zero_workers", "a,0,60,1,0,,,,,", "workers", "`0`"),
            ("a_bad_bool", "a,0,60,1,,,,yes,,", "interruptible", "`yes` is not `true` or `false`"),
            ("a_zero_checkpoint_interval", "a,0,60,1,,,,,0,", "checkpoint_interval_s", "`0`"),
            ("a_deadline_before_submit", "a,100,60,1,,,,,,50", "deadline_s", "`50` is not after submit_s `100`"),
            ("a_deadline_equal_to_submit", "a,100,60,1,,,,,,100", "deadline_s", "`100`"),
            ("a_row_missing_fields", "a,0,60,1", "workers", "4 fields but the header has 10"),
            ("an_empty_job_id", ",0,60,1,,,,,,", "job_id", "empty value"),
        ];
        for (rule, row, column, piece) in cases {
            let err = error_for(row, column);
            assert!(err.contains(piece), "{rule}: {err}");
        }
    }

    #[test]
    fn a_negative_submit_time_names_line_and_column() {
        let err = parse_str("n.csv", "# c\njob_id,submit_s,duration_s,gpus\na,0,1,1\nb,-1.5,1,1\n").unwrap_err();
        assert_eq!(err.to_string(), "n.csv:4: column `submit_s`: `-1.5` is negative; times are seconds >= 0");
    }

    #[test]
    fn a_duplicate_job_id_names_both_lines() {
        let err = parse_str("d.csv", "job_id,submit_s,duration_s,gpus\na,0,1,1\nb,0,1,1\na,3,1,1\n").unwrap_err();
        assert_eq!(err.to_string(), "d.csv:4: column `job_id`: `a` is a duplicate (first on line 2)");
    }

    #[test]
    fn a_header_naming_a_column_twice_is_an_error() {
        let err = parse_str("h.csv", "job_id,submit_s,duration_s,gpus,gpus\n").unwrap_err();
        assert_eq!(err.to_string(), "h.csv:1: column `gpus`: the header names this column twice");
    }

    #[test]
    fn write_then_parse_gives_the_same_jobs() {
        let job = |name: &str, submit_s: f64| TraceJob {
            name: name.to_string(),
            submit_s,
            duration_s: 0.1 + submit_s * 3.0,
            gpus: 8,
            workers: 4,
            tier: Some("p0".into()),
            team: Some("found, ation \"x\"".into()),
            gpu_type: Some("H100".into()),
            interruptible: Some(false),
            checkpoint_interval_s: Some(1800.25),
            deadline_s: Some(submit_s + 1e9 / 7.0),
            min_workers: Some(2),
            serial_fraction: Some(0.125),
            line: 0,
            checkpoint_gb: None,
            data_region: None,
        };
        let mut bare = job("#bare", 1.0 / 3.0);
        (bare.tier, bare.team, bare.gpu_type, bare.interruptible) = (None, None, None, None);
        (bare.checkpoint_interval_s, bare.deadline_s, bare.workers) = (None, None, 1);
        (bare.min_workers, bare.serial_fraction) = (None, None);
        let trace = Trace {
            source: "a\nb".into(),
            jobs: vec![job("x", 0.0), bare, job("y", 123456.789)],
            skipped: vec![("no GPUs requested".into(), 3)],
            columns: &[],
        };
        let mut out = Vec::new();
        write(&trace, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("# source: a b\n# skipped 3: no GPUs requested\njob_id,submit_s,"), "{text}");
        let back = parse_str("rt.csv", &text).unwrap();
        let strip = |js: &[TraceJob]| js.iter().map(|j| TraceJob { line: 0, ..j.clone() }).collect::<Vec<_>>();
        assert_eq!(strip(&back.jobs), strip(&trace.jobs));
    }

    #[test]
    fn elastic_columns_are_read_and_checked() {
        let head = "job_id,submit_s,duration_s,gpus,max_workers,min_workers,serial_fraction\n";
        let t = parse_str("e.csv", &format!("{head}a,0,60,8,4,1,0.1\nb,0,60,8,2,,\n")).unwrap();
        assert_eq!((t.jobs[0].workers, t.jobs[0].min_workers, t.jobs[0].serial_fraction), (4, Some(1), Some(0.1)));
        assert_eq!((t.jobs[1].workers, t.jobs[1].min_workers, t.jobs[1].serial_fraction), (2, None, None));
        let cases = [
            ("a,0,60,8,2,3,", "e.csv:2: column `min_workers`: `3` is more than workers `2`"),
            ("a,0,60,8,2,0,", "e.csv:2: column `min_workers`: `0` is not a whole number >= 1"),
            ("a,0,60,8,2,1,1", "e.csv:2: column `serial_fraction`: `1` is not a fraction from 0 up to"),
            ("a,0,60,8,2,1,-0.5", "e.csv:2: column `serial_fraction`: `-0.5` is not a fraction"),
        ];
        for (row, want) in cases {
            let err = parse_str("e.csv", &format!("{head}{row}\n")).unwrap_err().to_string();
            assert!(err.starts_with(want), "{row}: {err}");
        }
        let both = "job_id,submit_s,duration_s,gpus,workers,max_workers\na,0,60,8,2,3\n";
        let err = parse_str("w.csv", both).unwrap_err().to_string();
        assert!(err.contains("column `max_workers`: `3` differs from workers `2`"), "{err}");
    }
}
