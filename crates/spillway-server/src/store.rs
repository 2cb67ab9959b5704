//! The durable store: one SQLite file (WAL) holding the engine's input log, the node tokens and a few settings.
//!
//! The engine is deterministic (time is a value, no clock, no RNG), so its whole state is a function of its config,
//! its start time and the sequence of inputs it was given. The daemon therefore writes each input (a submission, an
//! event, a wake-up) to the log in its own transaction *before* handing it to the engine, and on startup rebuilds the
//! engine by replaying the log. What an action did outside (a launched instance, a started process) is reconciled
//! against the provider and the agents after the replay.

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use spillway_core::{Event, JobSpec};
use std::collections::BTreeMap;
use std::path::Path;

/// What a job runs; kept beside its spec in the log (the engine does not need it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobCommand {
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub workdir: Option<String>,
}

/// One engine input, as logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    Submit { spec: JobSpec, command: JobCommand },
    Event(Event),
    /// `Engine::handle_timeout`.
    Wake,
}

/// Store errors name the operation and the database file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {file}: {op}: {source}")]
    Sql { file: String, op: &'static str, source: rusqlite::Error },
    #[error("store {file}: log entry {seq} is not readable: {message}")]
    Corrupt { file: String, seq: i64, message: String },
}

/// The open store.
pub struct Store {
    conn: Connection,
    file: String,
}

impl Store {
    /// Opens (or creates) the store at `path`, in WAL mode with `synchronous = NORMAL` (a commit survives a crash of
    /// the process; a power loss may lose the last commits, never corrupt the file).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let file = path.display().to_string();
        let sql = |op: &'static str| {
            let file = file.clone();
            move |source| StoreError::Sql { file: file.clone(), op, source }
        };
        let conn = Connection::open(path).map_err(sql("open"))?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql("journal_mode=WAL"))?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql("synchronous"))?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(sql("busy_timeout"))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, entry TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS node_tokens (node INTEGER PRIMARY KEY, token TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS cost_snapshots (at_ms INTEGER PRIMARY KEY, cost TEXT NOT NULL);",
        )
        .map_err(sql("create tables"))?;
        Ok(Store { conn, file })
    }

    fn err(&self, op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sql { file: self.file.clone(), op, source }
    }

    /// Appends one input at `at_ms` (committed when this returns).
    pub fn append(&self, at_ms: i64, entry: &Entry) -> Result<(), StoreError> {
        let text = serde_json::to_string(entry).map_err(|e| StoreError::Corrupt { file: self.file.clone(), seq: -1, message: e.to_string() })?;
        self.conn
            .prepare_cached("INSERT INTO log (at_ms, entry) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![at_ms, text]))
            .map_err(self.err("append to log"))?;
        Ok(())
    }

    /// Returns the whole log in order, as (time, entry).
    pub fn load_log(&self) -> Result<Vec<(i64, Entry)>, StoreError> {
        let mut stmt = self.conn.prepare("SELECT seq, at_ms, entry FROM log ORDER BY seq").map_err(self.err("read log"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)))
            .map_err(self.err("read log"))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at, text) = row.map_err(self.err("read log"))?;
            let entry = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt { file: self.file.clone(), seq, message: e.to_string() })?;
            out.push((at, entry));
        }
        Ok(out)
    }

    /// Records a node's agent token.
    pub fn put_token(&self, node: u32, token: &str) -> Result<(), StoreError> {
        self.conn
            .execute("INSERT OR REPLACE INTO node_tokens (node, token) VALUES (?1, ?2)", params![node, token])
            .map_err(self.err("save node token"))?;
        Ok(())
    }

    /// Returns every node token.
    pub fn tokens(&self) -> Result<BTreeMap<u32, String>, StoreError> {
        let mut stmt = self.conn.prepare("SELECT node, token FROM node_tokens").map_err(self.err("read node tokens"))?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?))).map_err(self.err("read node tokens"))?;
        rows.collect::<Result<_, _>>().map_err(self.err("read node tokens"))
    }

    /// Returns a setting.
    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| r.get(0))
            .optional()
            .map_err(self.err("read setting"))
    }

    /// Records the cumulative cost (JSON) at `at_ms`.
    pub fn put_cost_snapshot(&self, at_ms: i64, cost_json: &str) -> Result<(), StoreError> {
        self.conn
            .execute("INSERT OR REPLACE INTO cost_snapshots (at_ms, cost) VALUES (?1, ?2)", params![at_ms, cost_json])
            .map_err(self.err("save cost snapshot"))?;
        Ok(())
    }

    /// Returns the last cost snapshot at or before `at_ms` (time and JSON), if any.
    pub fn cost_snapshot_before(&self, at_ms: i64) -> Result<Option<(i64, String)>, StoreError> {
        self.conn
            .query_row("SELECT at_ms, cost FROM cost_snapshots WHERE at_ms <= ?1 ORDER BY at_ms DESC LIMIT 1", params![at_ms], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
            .map_err(self.err("read cost snapshot"))
    }

    /// Sets a setting.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.conn
            .execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)", params![key, value])
            .map_err(self.err("write setting"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::model::JobId;

    #[test]
    fn log_round_trips_in_order_across_reopen() {
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
            gpu_model: None,
            interruptible: None,
            checkpoint_interval_ms: None,
            deadline: None,
            expected_duration_ms: None,
        };
        let entries = vec![
            (5, Entry::Submit { spec, command: JobCommand { argv: vec!["true".into()], ..Default::default() } }),
            (7, Entry::Event(Event::CancelJob { job: JobId(0) })),
            (9, Entry::Wake),
        ];
        {
            let s = Store::open(&path).unwrap();
            for (t, e) in &entries {
                s.append(*t, e).unwrap();
            }
            s.put_token(3, "tok").unwrap();
            s.set_meta("k", "v").unwrap();
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.load_log().unwrap(), entries);
        assert_eq!(s.tokens().unwrap().get(&3).map(String::as_str), Some("tok"));
        assert_eq!(s.meta("k").unwrap().as_deref(), Some("v"));
        assert_eq!(s.meta("missing").unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
