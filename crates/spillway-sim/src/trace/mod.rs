//! Job traces: the native CSV format and foreign formats, each read by its own small module into the same
//! [`TraceJob`] records. Loaders check syntax and ranges; checks against a cluster configuration (unknown
//! tier, job larger than any node) happen when a trace is turned into engine job specs (`crate::input`).

use std::collections::HashMap;
use std::path::Path;

/// One job of a trace, as read from a file, before it is checked against a configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// The job's name (unique within the trace).
    pub name: String,
    /// Submission time, seconds from the start of the trace.
    pub submit_s: f64,
    /// Run time without interruption, seconds (> 0).
    pub duration_s: f64,
    /// GPUs per worker (>= 1).
    pub gpus: u32,
    /// Workers in the gang (>= 1): an elastic job's most, the width `duration_s` is measured at.
    pub workers: u32,
    /// An elastic job's fewest workers (1..=`workers`); `None`: rigid.
    pub min_workers: Option<u32>,
    /// How an elastic job's speed grows with its width: the serial fraction of Amdahl's law (0: linear,
    /// the default), so a job on `w` of its `workers` runs at speedup(w) / speedup(workers) of full speed.
    pub serial_fraction: Option<f64>,
    /// Tier name as written in the trace (`p0`, `p1`, `p2`, ...); `None` means the format's default.
    pub tier: Option<String>,
    /// Owning team; `None` means `default`.
    pub team: Option<String>,
    /// Required GPU model; `None` means any.
    pub gpu_type: Option<String>,
    /// Whether the job may run on spot and be preempted; `None` means the tier's default.
    pub interruptible: Option<bool>,
    /// Checkpoint interval in seconds; `None` means the tier's default.
    pub checkpoint_interval_s: Option<f64>,
    /// Deadline, seconds from the start of the trace.
    pub deadline_s: Option<f64>,
    /// Size of its checkpoint and data in GB (what a move between regions carries); `None`: nothing moves.
    pub checkpoint_gb: Option<f64>,
    /// The region its data is in before its first start.
    pub data_region: Option<String>,
    /// 1-based line in the source file, so later checks can name where a job came from.
    pub line: usize,
}

/// A loaded trace: its jobs in file order and what the loader skipped, by reason.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Where the jobs came from (a file path or a generator description).
    pub source: String,
    pub jobs: Vec<TraceJob>,
    /// Rows skipped on purpose, by reason (for example `no GPUs requested`), with counts.
    pub skipped: Vec<(String, usize)>,
    /// How its format names the native columns a later check may name (native name, its own); the others keep
    /// the native name.
    pub columns: &'static [(&'static str, &'static str)],
}

impl Trace {
    /// Returns the name this trace's format gives native column `column`.
    pub fn column(&self, column: &'static str) -> &'static str {
        self.columns.iter().find(|(native, _)| *native == column).map_or(column, |&(_, own)| own)
    }
}

/// Errors of the trace loaders; every row error names the file, the line and the column.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("reading trace {file}: {message}")]
    Io { file: String, message: String },
    /// A required column is missing from the header.
    #[error("{file}: header lacks required column `{column}`")]
    MissingColumn { file: String, column: String },
    /// A row breaks the format's rules.
    #[error("{file}:{line}: column `{column}`: {message}")]
    Row { file: String, line: usize, column: String, message: String },
}

/// The trace formats `spillway simulate --format` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    Native,
    Alibaba2023,
    Tiresias,
    /// A Helios per-minute demand series replayed as jobs (see [`helios`]).
    Helios,
}

impl std::str::FromStr for TraceFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "native" => Ok(Self::Native),
            "alibaba2023" => Ok(Self::Alibaba2023),
            "tiresias" => Ok(Self::Tiresias),
            "helios" => Ok(Self::Helios),
            other => Err(format!("unknown trace format `{other}` (expected native, alibaba2023, tiresias or helios)")),
        }
    }
}

/// Reads a trace file in the given format.
pub fn load(path: &Path, format: TraceFormat) -> Result<Trace, TraceError> {
    match format {
        TraceFormat::Native => native::load(path),
        TraceFormat::Alibaba2023 => alibaba::load(path),
        TraceFormat::Tiresias => tiresias::load(path),
        TraceFormat::Helios => helios::load(path),
    }
}

pub mod alibaba;
pub mod backlog;
pub mod helios;
pub mod native;
pub mod tiresias;
pub mod workload;

// ---- Private helpers shared by the CSV loaders ----

/// Reads a whole trace file; the error names the file.
fn read_file(path: &Path) -> Result<String, TraceError> {
    read_text(path).map_err(|message| TraceError::Io { file: path.display().to_string(), message })
}

/// Reads a whole text file; an error says why, naming the line of the first byte that is not UTF-8.
pub fn read_text(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
        format!("line {line}: byte {at} is not UTF-8 text")
    })
}

/// One data row of a CSV trace, with what an error needs to name: the file, the physical line and the column.
struct CsvRow<'a> {
    file: &'a str,
    line: usize,
    columns: &'a HashMap<String, usize>,
    record: &'a csv::StringRecord,
}

impl CsvRow<'_> {
    /// The cell of `column`, trimmed; `None` when the header lacks the column or the cell is empty
    /// (the formats treat an empty cell as absent).
    fn cell(&self, column: &str) -> Option<&str> {
        let i = *self.columns.get(column)?;
        self.record.get(i).filter(|s| !s.is_empty())
    }

    /// A row error for `column`.
    fn error(&self, column: &str, message: impl Into<String>) -> TraceError {
        TraceError::Row {
            file: self.file.to_string(),
            line: self.line,
            column: column.to_string(),
            message: message.into(),
        }
    }

    /// A row error quoting the cell's text, so the message names the bad value.
    fn bad(&self, column: &str, rule: &str) -> TraceError {
        self.error(column, format!("`{}` {rule}", self.cell(column).unwrap_or("")))
    }

    /// The cell of a required column; an empty cell is an error.
    fn required(&self, column: &str) -> Result<&str, TraceError> {
        self.present(column, self.cell(column))
    }

    /// The value of a required column, read by one of the optional readers below; `None` (an empty cell) is
    /// the error [`Self::required`] gives.
    fn present<T>(&self, column: &str, value: Option<T>) -> Result<T, TraceError> {
        value.ok_or_else(|| self.error(column, "empty value in a required column"))
    }

    /// The cell as a finite number, or `None` when empty.
    fn float(&self, column: &str) -> Result<Option<f64>, TraceError> {
        match self.cell(column) {
            None => Ok(None),
            Some(s) => match s.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(Some(v)),
                _ => Err(self.bad(column, "is not a finite number")),
            },
        }
    }

    /// A required time: a finite number >= 0.
    fn time(&self, column: &str) -> Result<f64, TraceError> {
        match self.present(column, self.float(column)?)? {
            v if v > crate::input::MAX_TRACE_S => Err(self.bad(column, "is more than 100 years after the start")),
            v if v >= 0.0 => Ok(v),
            _ => Err(self.bad(column, "is negative; times are seconds >= 0")),
        }
    }

    /// An optional number that must be > 0 when present.
    fn positive(&self, column: &str) -> Result<Option<f64>, TraceError> {
        match self.float(column)? {
            Some(v) if v <= 0.0 => Err(self.bad(column, "must be > 0")),
            v => Ok(v),
        }
    }

    /// An optional whole number >= `min`.
    fn count(&self, column: &str, min: u32) -> Result<Option<u32>, TraceError> {
        match self.cell(column) {
            None => Ok(None),
            Some(s) => match s.parse::<u32>() {
                Ok(v) if v >= min => Ok(Some(v)),
                _ => Err(self.bad(column, &format!("is not a whole number >= {min}"))),
            },
        }
    }

    /// Records `name` (the cell of `column`) in `seen`; a second occurrence is an error naming the first line.
    fn unique(&self, seen: &mut HashMap<String, usize>, column: &str, name: &str) -> Result<(), TraceError> {
        if let Some(first) = seen.insert(name.to_string(), self.line) {
            return Err(self.bad(column, &format!("is a duplicate (first on line {first})")));
        }
        Ok(())
    }
}

/// Reads `text` as CSV with a header row and `#` comment lines, checks that the header has every `required`
/// column, and calls `each` on every data row in file order, stopping at the first error. Cells are trimmed.
fn read_csv(
    file: &str,
    text: &str,
    required: &[&str],
    mut each: impl FnMut(&CsvRow<'_>) -> Result<(), TraceError>,
) -> Result<(), TraceError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // The header is read as an ordinary record so that its line is tracked like every other one.
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut record = csv::StringRecord::new();
    let csv_error = |e: csv::Error, line: usize| TraceError::Row {
        file: file.to_string(),
        line: e.position().map_or(line, |p| p.line() as usize),
        column: "-".to_string(),
        message: e.to_string(),
    };
    let mut columns = HashMap::new();
    let mut names = Vec::new();
    let mut lines = LineTracker { text: text.as_bytes(), byte: 0, line: 1 };
    if reader.read_record(&mut record).map_err(|e| csv_error(e, 1))? {
        let line = lines.line_of(&record);
        for (i, name) in record.iter().enumerate() {
            if columns.insert(name.to_string(), i).is_some() {
                return Err(TraceError::Row {
                    file: file.to_string(),
                    line,
                    column: name.to_string(),
                    message: "the header names this column twice".to_string(),
                });
            }
            names.push(name.to_string());
        }
    }
    if let Some(missing) = required.iter().find(|c| !columns.contains_key(**c)) {
        return Err(TraceError::MissingColumn { file: file.to_string(), column: missing.to_string() });
    }
    while reader.read_record(&mut record).map_err(|e| csv_error(e, 0))? {
        let line = lines.line_of(&record);
        // A line of only spaces reads as one empty field: treat it like the empty line it looks like.
        if record.len() == 1 && record[0].is_empty() {
            continue;
        }
        let row = CsvRow { file, line, columns: &columns, record: &record };
        // A row with too few or too many fields has usually lost or gained a comma, which shifts every
        // later cell: report it rather than read shifted values.
        if record.len() != names.len() {
            let column = names.get(record.len()).or(names.last()).map_or("-", String::as_str);
            let message = format!("row has {} fields but the header has {}", record.len(), names.len());
            return Err(row.error(column, message));
        }
        each(&row)?;
    }
    Ok(())
}

/// Finds the physical line each record starts on. The csv reader reports the position where it began
/// reading a record, which lies before any comment or empty lines it skipped on the way, so this steps
/// over those. Records come in file order, so counting resumes where the previous record left off.
struct LineTracker<'t> {
    text: &'t [u8],
    byte: usize,
    line: usize,
}

impl LineTracker<'_> {
    /// The 1-based line on which `record` starts.
    fn line_of(&mut self, record: &csv::StringRecord) -> usize {
        let from = record.position().map_or(self.byte, |p| p.byte() as usize).clamp(self.byte, self.text.len());
        self.line += self.text[self.byte..from].iter().filter(|&&b| b == b'\n').count();
        self.byte = from;
        loop {
            match self.text.get(self.byte) {
                Some(b'\n') => self.line += 1,
                Some(b'\r') => {}
                Some(b'#') => match self.text[self.byte..].iter().position(|&b| b == b'\n') {
                    Some(end) => {
                        self.byte += end;
                        self.line += 1;
                    }
                    None => {
                        self.byte = self.text.len();
                        return self.line;
                    }
                },
                _ => return self.line,
            }
            self.byte += 1;
        }
    }
}
