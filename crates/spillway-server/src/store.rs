//! The durable store: one SQLite file (WAL) holding the engine's input log, token hashes and a few settings.
//!
//! The engine is deterministic (time is a value, no clock, no RNG), so its whole state is a function of its config,
//! its start time and the sequence of inputs it was given. The daemon therefore writes each input (a submission, an
//! event, a wake-up) to the log in its own transaction *before* handing it to the engine, and on startup rebuilds the
//! engine by replaying the log. What an action did outside (a launched instance, a started process) is reconciled
//! against the provider and the agents after the replay. Everything that decides what an agent may run (which
//! token a node's agent holds) is a log entry too, so a replay rebuilds it exactly.
//!
//! The file is created owner-only (0600); SQLite gives the `-wal` and `-shm` files the database's permissions.

use crate::datadir::private_file;
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use spillway_core::{Event, JobSpec};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// What a job runs; kept beside its spec in the log (the engine does not need it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobCommand {
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub workdir: Option<String>,
}

impl JobCommand {
    /// Returns the bytes the command holds in memory (argv, env, workdir).
    pub fn bytes(&self) -> usize {
        self.argv.iter().map(String::len).sum::<usize>()
            + self.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            + self.workdir.as_ref().map_or(0, String::len)
    }
}

/// One input, as logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    Submit {
        spec: JobSpec,
        command: JobCommand,
    },
    Event(Event),
    /// `Engine::handle_timeout`.
    Wake,
    /// A launch of `node` was issued a fresh agent token (its SHA-256, hex); earlier tokens of the node are void.
    /// The daemon only; the engine never sees it.
    NodeToken {
        node: u32,
        hash: String,
    },
    /// Node `node`'s agent, still on its launch token, was given a session token (its hash): both are valid until
    /// `NodeTokenRetired`. The launch token may be readable on the node (a cloud's user-data); the session token
    /// never leaves the agent's memory. The daemon only.
    NodeSession {
        node: u32,
        hash: String,
    },
    /// Node `node`'s agent uses its session token: its launch token is void from now on. The daemon only.
    NodeTokenRetired {
        node: u32,
    },
}

/// Store errors name the operation and the database file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {file}: {op}: {source}")]
    Sql { file: String, op: &'static str, source: rusqlite::Error },
    #[error("store {file}: log entry {seq} is not readable: {message}")]
    Corrupt { file: String, seq: i64, message: String },
    #[error("store {file}: {message}")]
    Io { file: String, message: String },
}

/// The open store.
pub struct Store {
    conn: Connection,
    file: String,
    /// The sequence number of the last log entry (0 when empty).
    last_seq: i64,
    /// Fault injection: appends left before every append fails as if the process had died there.
    crash_after: Option<u64>,
}

/// How often and how long a failed append is retried before the daemon gives up (a busy or briefly failing disk).
const APPEND_RETRIES: [u64; 3] = [10, 100, 500];

impl Store {
    /// Opens (or creates) the store at `path`, owner-only, in WAL mode with `synchronous = NORMAL` (a commit
    /// survives a crash of the process; a power loss may lose the last commits, never corrupt the file).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let file = path.display().to_string();
        private_file(path).map_err(|e| StoreError::Io { file: file.clone(), message: e.to_string() })?;
        let sql = |op: &'static str| {
            let file = file.clone();
            move |source| StoreError::Sql { file: file.clone(), op, source }
        };
        let conn = Connection::open(path).map_err(sql("open"))?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql("journal_mode=WAL"))?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql("synchronous"))?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(sql("busy_timeout"))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, entry TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS cost_snapshots (at_ms INTEGER PRIMARY KEY, cost TEXT NOT NULL);
             DROP TABLE IF EXISTS node_tokens;",
        )
        .map_err(sql("create tables"))?;
        // Snapshots carry their hourly rate since this version; older rows have none (their windows stay coarse).
        let has_rate: bool = conn
            .query_row("SELECT COUNT(*) FROM pragma_table_info('cost_snapshots') WHERE name = 'rate'", [], |r| {
                r.get::<_, i64>(0).map(|n| n > 0)
            })
            .map_err(sql("read cost snapshot columns"))?;
        if !has_rate {
            conn.execute_batch("ALTER TABLE cost_snapshots ADD COLUMN rate TEXT").map_err(sql("add cost rate"))?;
        }
        // Files SQLite made before this version (or an older 0644 database) become owner-only too.
        for suffix in ["-wal", "-shm"] {
            let side = format!("{file}{suffix}");
            if Path::new(&side).exists() {
                private_file(Path::new(&side))
                    .map_err(|e| StoreError::Io { file: side.clone(), message: e.to_string() })?;
            }
        }
        let last_seq = conn
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM log", [], |r| r.get(0))
            .map_err(sql("read log length"))?;
        Ok(Store { conn, file, last_seq, crash_after: None })
    }

    /// Returns the database file's path, for messages.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Returns the sequence number of the last log entry (0 when the log is empty).
    pub fn last_seq(&self) -> i64 {
        self.last_seq
    }

    /// Fault injection (the fault simulation): after `appends` more appends, every append fails, as a process
    /// killed at that point of the log would stop writing. `None` turns it off.
    pub fn inject_crash_after(&mut self, appends: Option<u64>) {
        self.crash_after = appends;
    }

    fn err(&self, op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sql { file: self.file.clone(), op, source }
    }

    /// Appends one input at `at_ms`; committed when this returns. A failing write is retried a few times (a busy
    /// or briefly failing disk) before the error is returned.
    pub fn append(&mut self, at_ms: i64, entry: &Entry) -> Result<(), StoreError> {
        let text = serde_json::to_string(entry).map_err(|e| StoreError::Corrupt {
            file: self.file.clone(),
            seq: -1,
            message: e.to_string(),
        })?;
        match &mut self.crash_after {
            Some(0) => return Err(StoreError::Io { file: self.file.clone(), message: "injected crash".into() }),
            Some(n) => *n -= 1,
            None => {}
        }
        let mut tries = APPEND_RETRIES.iter();
        loop {
            let done = self
                .conn
                .prepare_cached("INSERT INTO log (at_ms, entry) VALUES (?1, ?2)")
                .and_then(|mut s| s.execute(params![at_ms, text]));
            match done {
                Ok(_) => {
                    self.last_seq = self.conn.last_insert_rowid();
                    return Ok(());
                }
                Err(e) => match tries.next() {
                    Some(&ms) => {
                        eprintln!("spillway: store {}: append failed ({e}); retrying in {ms} ms", self.file);
                        std::thread::sleep(Duration::from_millis(ms));
                    }
                    None => return Err(StoreError::Sql { file: self.file.clone(), op: "append to log", source: e }),
                },
            }
        }
    }

    /// Returns the whole log in order, as (sequence number, time, entry).
    pub fn load_log(&self) -> Result<Vec<(i64, i64, Entry)>, StoreError> {
        let mut stmt =
            self.conn.prepare("SELECT seq, at_ms, entry FROM log ORDER BY seq").map_err(self.err("read log"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)))
            .map_err(self.err("read log"))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at, text) = row.map_err(self.err("read log"))?;
            let entry = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                file: self.file.clone(),
                seq,
                message: e.to_string(),
            })?;
            out.push((seq, at, entry));
        }
        Ok(out)
    }

    /// Returns a setting.
    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| r.get(0))
            .optional()
            .map_err(self.err("read setting"))
    }

    /// Sets a setting.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.conn
            .execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)", params![key, value])
            .map_err(self.err("write setting"))?;
        Ok(())
    }

    /// Deletes a setting (absent is fine).
    pub fn delete_meta(&self, key: &str) -> Result<(), StoreError> {
        self.conn.execute("DELETE FROM meta WHERE key = ?1", params![key]).map_err(self.err("delete setting"))?;
        Ok(())
    }

    /// Records the cumulative cost at `at_ms` and its hourly rate from then on (both JSON).
    pub fn put_cost_snapshot(&self, at_ms: i64, cost_json: &str, rate_json: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO cost_snapshots (at_ms, cost, rate) VALUES (?1, ?2, ?3)",
                params![at_ms, cost_json, rate_json],
            )
            .map_err(self.err("save cost snapshot"))?;
        Ok(())
    }

    /// Returns the last cost snapshot at or before `at_ms`: its time, cost and hourly rate (JSON; no rate in
    /// snapshots older than this version).
    pub fn cost_snapshot_before(&self, at_ms: i64) -> Result<Option<CostSnapshot>, StoreError> {
        self.conn
            .query_row(
                "SELECT at_ms, cost, rate FROM cost_snapshots WHERE at_ms <= ?1 ORDER BY at_ms DESC LIMIT 1",
                params![at_ms],
                |r| Ok(CostSnapshot { at_ms: r.get(0)?, cost: r.get(1)?, rate: r.get(2)? }),
            )
            .optional()
            .map_err(self.err("read cost snapshot"))
    }
}

/// A stored cost snapshot (JSON of `CostView`s).
#[derive(Debug, Clone, PartialEq)]
pub struct CostSnapshot {
    pub at_ms: i64,
    pub cost: String,
    pub rate: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::model::JobId;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn log_round_trips_in_order_across_reopen_and_the_file_is_owner_only() {
        let dir = std::env::temp_dir().join(format!("spillway-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.db");
        let spec = JobSpec {
            name: "a".into(),
            tier: "p1".into(),
            team: "default".into(),
            gpus_per_worker: 2,
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
        let command = || JobCommand { argv: vec!["true".into()], ..Default::default() };
        // Labels past 24 bytes live out of line (`Label`): they must round-trip as the short ones do.
        let long = JobSpec {
            name: "a-name-well-past-twenty-four-bytes-é-🚀".repeat(6).into(),
            team: "team-ü-".repeat(5).into(),
            ..spec.clone()
        };
        let entries = vec![
            (5, Entry::Submit { spec, command: command() }),
            (6, Entry::Submit { spec: long, command: command() }),
            (7, Entry::Event(Event::CancelJob { job: JobId(0) })),
            (9, Entry::Wake),
            (9, Entry::NodeToken { node: 2, hash: "ab".into() }),
        ];
        {
            let mut s = Store::open(&path).unwrap();
            for (t, e) in &entries {
                s.append(*t, e).unwrap();
            }
            assert_eq!(s.last_seq(), 5);
            s.set_meta("k", "v").unwrap();
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.last_seq(), 5);
        let log: Vec<(i64, Entry)> = s.load_log().unwrap().into_iter().map(|(_, t, e)| (t, e)).collect();
        assert_eq!(log, entries);
        assert_eq!(s.meta("k").unwrap().as_deref(), Some("v"));
        assert_eq!(s.meta("missing").unwrap(), None);
        for f in ["s.db", "s.db-wal", "s.db-shm"] {
            let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{f} is {mode:o}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
