//! The local provider's instance records: one JSON file per instance in `<data_dir>/instances`, so instances
//! (and the agents behind them) outlive the daemon and a restarted daemon finds them again.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::{Instance, ProviderError};

/// An instance plus the identity of its agent process: (pid, start time) rather than pid alone, since pids get
/// reused.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Record {
    #[serde(flatten)]
    pub instance: Instance,
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat` at launch.
    pub start_time: u64,
}

/// The directory of records. Callers serialize mutations with the provider's lock.
pub(crate) struct Store {
    dir: PathBuf,
}

fn io_error(what: &str, path: &Path, err: io::Error) -> ProviderError {
    ProviderError::Transient(format!("{what} {}: {err}", path.display()))
}

/// The file name of an instance id: bytes outside `[A-Za-z0-9._-]` become `%XX`, so any cluster name (or any
/// id handed to `terminate`) maps to one plain file inside the directory, never a path elsewhere.
fn file_name(id: &str) -> String {
    let mut name = String::with_capacity(id.len() + 5);
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            name.push(char::from(b));
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    name.push_str(".json");
    name
}

impl Store {
    pub fn new(dir: PathBuf) -> Self {
        Store { dir }
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(file_name(id))
    }

    /// The record of `id`, `None` if there is none.
    pub fn read(&self, id: &str) -> Result<Option<Record>, ProviderError> {
        let path = self.path(id);
        match fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| ProviderError::Transient(format!("parse instance record {}: {e}", path.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error("read instance record", &path, e)),
        }
    }

    /// Writes `record` atomically (temp file, fsync, rename), so a crash leaves the old record or the new one,
    /// never half of one. The file is created with mode 0600: records are the daemon's alone.
    pub fn write(&self, record: &Record) -> Result<(), ProviderError> {
        let path = self.path(&record.instance.id);
        // A leading dot keeps temp files out of `all()`.
        let tmp = self.dir.join(format!(".{}.tmp", file_name(&record.instance.id)));
        let json = serde_json::to_vec_pretty(record)
            .map_err(|e| ProviderError::Transient(format!("encode instance record {}: {e}", path.display())))?;
        // A temp file left by a crash may predate private modes: start afresh so the mode below applies.
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_error("delete stale", &tmp, e)),
            _ => {}
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io_error("create", &tmp, e))?;
        file.write_all(&json).map_err(|e| io_error("write", &tmp, e))?;
        file.sync_all().map_err(|e| io_error("sync", &tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| io_error("rename into place", &path, e))
    }

    /// Deletes the record of `id`; deleting a missing record is fine (someone else got there first).
    pub fn remove(&self, id: &str) -> Result<(), ProviderError> {
        let path = self.path(id);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_error("delete instance record", &path, e)),
            _ => Ok(()),
        }
    }

    /// Every readable record. Unparsable files are skipped rather than failing every `list` forever; they are
    /// left in place for a human to inspect (writes are atomic, so they are not ours).
    pub fn all(&self) -> Result<Vec<Record>, ProviderError> {
        let entries = fs::read_dir(&self.dir).map_err(|e| io_error("read instance directory", &self.dir, e))?;
        let mut records = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("read instance directory", &self.dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            let Ok(text) = fs::read_to_string(entry.path()) else { continue };
            if let Ok(record) = serde_json::from_str::<Record>(&text) {
                records.push(record);
            }
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_stay_inside_the_directory() {
        assert_eq!(file_name("local-prod-3"), "local-prod-3.json");
        assert_eq!(file_name("local-../x/y-1"), "local-..%2Fx%2Fy-1.json");
        assert_eq!(file_name("a b"), "a%20b.json");
    }
}
