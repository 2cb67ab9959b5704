//! Demand series: one numeric column of a CSV against its `time` column, checked to be evenly stepped. Reads the
//! per-minute Helios files (`../shared/traces/demand/*.csv`, SenseTime Helios, SC'21, CC BY 4.0; columns such as
//! `running_gpu_num`, `pending_gpu_num`, `total_gpu_num`), the input of forecasting and metric-driven scaling.
//! Times are `YYYY-MM-DD HH:MM:SS` (or with a `T`), read as UTC: the files name no zone.

use spillway_core::time::{Time, civil_from_days, days_from_civil};
use std::path::Path;

const MS_PER_DAY: i64 = 86_400_000;

/// One column of a demand file, sampled every `step_ms` from `start`.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The file the values came from.
    pub source: String,
    pub column: String,
    /// Time of the first value.
    pub start: Time,
    pub step_ms: i64,
    pub values: Vec<f64>,
}

impl Series {
    /// Returns the step between values in seconds.
    pub fn step_s(&self) -> f64 {
        self.step_ms as f64 / 1000.0
    }

    /// Returns the time of value `i`.
    pub fn time_at(&self, i: usize) -> Time {
        self.start + self.step_ms * i as i64
    }
}

/// Errors of [`load`]; each names the file, and a row error the line and the column.
#[derive(Debug, thiserror::Error)]
pub enum DemandError {
    /// The file could not be read.
    #[error("reading demand series {file}: {message}")]
    Io { file: String, message: String },
    /// The header lacks the requested column (or `time`).
    #[error("{file}: no column `{column}` (the header has: {available})")]
    UnknownColumn { file: String, column: String, available: String },
    /// A cell is not a number or not a time, or the row is malformed.
    #[error("{file}:{line}: column `{column}`: {message}")]
    Row { file: String, line: usize, column: String, message: String },
    /// Two consecutive rows are not one step apart (a gap, a repeat, or time going backwards).
    #[error("{file}:{line}: column `time`: {time} follows {previous} after {step_s} s; {}", step_rule(*.expected_s))]
    Gap { file: String, line: usize, previous: String, time: String, step_s: f64, expected_s: f64 },
    /// Fewer than two rows: no step to check against.
    #[error("{file}: {rows} data row(s); a series needs at least 2 to have a step")]
    TooShort { file: String, rows: usize },
}

/// Returns what a gap broke: the series' step, or (where the first step was not forward, `expected_s` NaN) that
/// time goes forward.
pub(crate) fn step_rule(expected_s: f64) -> String {
    if expected_s.is_nan() {
        "time must go forward in equal steps".into()
    } else {
        format!("the series' step is {expected_s} s")
    }
}

/// The largest magnitude a series value may have: the columns count GPUs, jobs or a utilization, and far larger
/// values only overflow what is computed from them (a squared error of 1.7e308 is infinite).
pub const MAX_VALUE: f64 = 1e9;

/// Reads `column` of the demand file at `path`. Returns the series, or the first error (file, line, column).
pub fn load(path: &Path, column: &str) -> Result<Series, DemandError> {
    let file = path.display().to_string();
    let text = crate::trace::read_text(path).map_err(|message| DemandError::Io { file: file.clone(), message })?;
    parse_str(&file, &text, column)
}

/// Parses demand CSV text; `file` stands for the file in errors. Returns what [`load`] returns.
pub fn parse_str(file: &str, text: &str, column: &str) -> Result<Series, DemandError> {
    let mut reader = csv::ReaderBuilder::new().has_headers(true).from_reader(text.as_bytes());
    let header = reader
        .headers()
        .map_err(|e| DemandError::Row { file: file.into(), line: 1, column: String::new(), message: e.to_string() })?
        .clone();
    let index = |name: &str| {
        header.iter().position(|h| h.trim() == name).ok_or_else(|| DemandError::UnknownColumn {
            file: file.into(),
            column: name.into(),
            available: header.iter().collect::<Vec<_>>().join(", "),
        })
    };
    let (time_col, value_col) = (index("time")?, index(column)?);
    let mut series = Series { source: file.into(), column: column.into(), start: 0, step_ms: 0, values: Vec::new() };
    let mut prev: Option<Time> = None;
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line() as usize);
            DemandError::Row { file: file.into(), line, column: column.into(), message: e.to_string() }
        })?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        let row_error =
            |col: &str, message: String| DemandError::Row { file: file.into(), line, column: col.into(), message };
        let cell = |i: usize| record.get(i).unwrap_or("").trim();
        let t = parse_time(cell(time_col)).ok_or_else(|| {
            row_error("time", format!("`{}` is not a time (expected YYYY-MM-DD HH:MM:SS)", cell(time_col)))
        })?;
        let value = match cell(value_col) {
            "" => return Err(row_error(column, "empty value".into())),
            s => s
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| row_error(column, format!("`{s}` is not a finite number")))?,
        };
        if value.abs() > MAX_VALUE {
            return Err(row_error(column, format!("{value:e} is beyond ±1e9, more than any cluster counts")));
        }
        match prev {
            None => series.start = t,
            Some(p) => {
                if series.values.len() == 1 && t > p {
                    series.step_ms = t - p;
                }
                if t - p != series.step_ms {
                    let s = |ms: i64| ms as f64 / 1000.0;
                    let expected_s = if series.step_ms > 0 { s(series.step_ms) } else { f64::NAN };
                    let (previous, time) = (format_time(p), format_time(t));
                    return Err(DemandError::Gap {
                        file: file.into(),
                        line,
                        previous,
                        time,
                        step_s: s(t - p),
                        expected_s,
                    });
                }
            }
        }
        prev = Some(t);
        series.values.push(value);
    }
    if series.values.len() < 2 {
        return Err(DemandError::TooShort { file: file.into(), rows: series.values.len() });
    }
    Ok(series)
}

/// Returns the time `YYYY-MM-DD HH:MM:SS` (or `YYYY-MM-DDTHH:MM:SS`) names, read as UTC; `None` if it is not one.
pub fn parse_time(s: &str) -> Option<Time> {
    let b = s.as_bytes();
    let shape = b.len() == 19
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b' ' || b[10] == b'T')
        && b[13] == b':'
        && b[16] == b':';
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = s.get(from..to)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    if !shape {
        return None;
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, sec) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    // A day past the month's end (Feb 30) lands in the next month; the round trip catches it.
    (civil_from_days(days) == (y, mo, d)).then_some(days * MS_PER_DAY + ((h * 60 + mi) * 60 + sec) * 1000)
}

/// Returns `t` as `YYYY-MM-DD HH:MM:SS` (UTC), the form the demand files use.
pub fn format_time(t: Time) -> String {
    let (days, ms) = (t.div_euclid(MS_PER_DAY), t.rem_euclid(MS_PER_DAY));
    let (y, mo, d) = civil_from_days(days);
    let s = ms / 1000;
    format!("{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "time,running_gpu_num,pending_gpu_num,total_gpu_num";

    fn csv(rows: &[&str]) -> String {
        format!("{HEADER}\n{}\n", rows.join("\n"))
    }

    #[test]
    fn a_column_loads_with_its_start_and_step() {
        let text =
            csv(&["2020-05-01 00:00:00,162,0,208", "2020-05-01 00:01:00,163,8,208", "2020-05-01 00:02:00,170.5,0,208"]);
        let s = parse_str("d.csv", &text, "running_gpu_num").unwrap();
        assert_eq!((s.start, s.step_ms, s.values.as_slice()), (1_588_291_200_000, 60_000, &[162.0, 163.0, 170.5][..]));
        assert_eq!(format_time(s.time_at(2)), "2020-05-01 00:02:00");
        assert_eq!(parse_str("d.csv", &text, "pending_gpu_num").unwrap().values, vec![0.0, 8.0, 0.0]);
    }

    #[test]
    fn a_value_past_any_cluster_is_refused() {
        let text = csv(&["2020-05-01 00:00:00,1,0,8", "2020-05-01 00:01:00,1.7e308,0,8"]);
        let e = parse_str("d.csv", &text, "running_gpu_num").unwrap_err().to_string();
        assert!(e.starts_with("d.csv:3: column `running_gpu_num`: ") && e.contains("beyond"), "{e}");
    }

    #[test]
    fn errors_name_the_file_line_column_and_both_times_of_a_gap() {
        let ok = "2020-05-01 00:00:00,1,0,8";
        let cases = [
            (
                "a gap names both times",
                vec![ok, "2020-05-01 00:01:00,1,0,8", "2020-05-01 00:03:00,1,0,8"],
                "running_gpu_num",
                "d.csv:4: column `time`: 2020-05-01 00:03:00 follows 2020-05-01 00:01:00 after 120 s; the series' step is 60 s",
            ),
            (
                "a repeated time is a gap",
                vec![ok, "2020-05-01 00:01:00,1,0,8", "2020-05-01 00:01:00,1,0,8"],
                "running_gpu_num",
                "d.csv:4: column `time`: 2020-05-01 00:01:00 follows 2020-05-01 00:01:00 after 0 s",
            ),
            (
                "time going backwards at the start",
                vec![ok, "2020-04-30 23:59:00,1,0,8"],
                "running_gpu_num",
                "d.csv:3: column `time`: 2020-04-30 23:59:00 follows 2020-05-01 00:00:00 after -60 s; time must go forward",
            ),
            (
                "a non-numeric value",
                vec![ok, "2020-05-01 00:01:00,lots,0,8"],
                "running_gpu_num",
                "d.csv:3: column `running_gpu_num`: `lots` is not a finite number",
            ),
            (
                "an infinite value",
                vec![ok, "2020-05-01 00:01:00,inf,0,8"],
                "running_gpu_num",
                "d.csv:3: column `running_gpu_num`: `inf`",
            ),
            (
                "an empty value",
                vec![ok, "2020-05-01 00:01:00,,0,8"],
                "running_gpu_num",
                "d.csv:3: column `running_gpu_num`: empty value",
            ),
            (
                "a bad time",
                vec!["2020-02-30 00:00:00,1,0,8", ok],
                "running_gpu_num",
                "d.csv:2: column `time`: `2020-02-30 00:00:00` is not a time",
            ),
            (
                "an unknown column lists the header",
                vec![ok, ok],
                "idle",
                "d.csv: no column `idle` (the header has: time, running_gpu_num, pending_gpu_num, total_gpu_num)",
            ),
            ("one row has no step", vec![ok], "running_gpu_num", "d.csv: 1 data row(s); a series needs at least 2"),
            ("a short row", vec![ok, "2020-05-01 00:01:00,1"], "running_gpu_num", "d.csv:3: column `running_gpu_num`:"),
        ];
        for (rule, rows, column, want) in cases {
            let err = parse_str("d.csv", &csv(&rows), column).expect_err(rule).to_string();
            assert!(err.starts_with(want), "{rule}: {err}");
        }
    }

    #[test]
    fn times_read_and_write_as_utc() {
        let cases = [
            ("the epoch", "1970-01-01 00:00:00", Some(0)),
            ("the first Helios minute", "2020-05-01 00:00:00", Some(1_588_291_200_000)),
            ("a leap day with a T", "2020-02-29T23:59:59", Some(1_583_020_799_000)),
            ("no leap day in 2021", "2021-02-29 00:00:00", None),
            ("a bad hour", "2020-05-01 24:00:00", None),
            ("a signed field", "2020-+5-01 00:00:00", None),
            ("a date alone", "2020-05-01", None),
        ];
        for (rule, text, want) in cases {
            assert_eq!(parse_time(text), want, "{rule}");
            if let Some(t) = want {
                assert_eq!(format_time(t), text.replace('T', " "), "{rule}");
            }
        }
    }

    #[test]
    fn the_helios_files_load_when_present() {
        let Some(path) = crate::shared("traces/demand/earth_vc6YE.csv") else { return };
        let s = load(&path, "running_gpu_num").unwrap();
        // May 2020, one row a minute.
        assert_eq!(
            (s.values.len(), s.step_ms, format_time(s.start)),
            (44_640, 60_000, "2020-05-01 00:00:00".to_string())
        );
        assert_eq!(s.values[0], 162.0);
        let total = load(&path, "total_gpu_num").unwrap();
        assert!(s.values.iter().zip(&total.values).all(|(r, t)| (0.0..=*t).contains(r) || *t == 0.0));
    }
}
