//! The daemon's data directory: owner-only (0700, every file 0600), held by one daemon at a time (an OS file lock
//! on `daemon.lock`, which names the holder's pid), with a marker (`store.json`) that remembers how long the log
//! was, so a store that lost entries (a deleted WAL, a replaced or empty database) is refused instead of silently
//! starting over. Also the token files (`client.json`, `tokens.json`): the only place plain tokens live (the store
//! keeps their SHA-256), written atomically and never through a symlink.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why the data directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("data directory {dir}: {message}")]
    Io { dir: String, message: String },
    #[error("--run-as: {0}")]
    RunAs(String),
    #[error(
        "data directory {dir} is in use by another spillway daemon (pid {pid}); stop it first, or use another --data-dir"
    )]
    Locked { dir: String, pid: String },
    #[error(
        "data directory {dir}: {what}; refusing to start on a store that lost data. Restore {db} from a backup, or \
         start with --reinit to set the old store aside and begin anew"
    )]
    LostStore { dir: String, db: String, what: String },
}

/// Creates `path` (and parents) owner-only, or makes an existing directory owner-only.
pub fn private_dir(path: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// Creates `path` as an empty owner-only file unless it exists, and makes it owner-only. Refuses a symlink.
pub fn private_file(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(std::io::Error::other(format!("{} is a symlink; refusing to use it", path.display())));
    }
    OpenOptions::new().create(true).append(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// Writes `bytes` to `path` atomically and owner-only: a fresh temporary file (never an existing one, never through
/// a symlink) renamed over `path` (a symlink at `path` is replaced, not followed).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f =
        OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Returns the last `max` bytes of `dir/name` (lossy UTF-8), or `None`. A job may own its log and its log
/// directory, so neither may be a symlink and the file must be a regular file: the daemon (maybe root) never reads
/// through a link a job planted (to `tokens.json`, say).
pub fn read_log_tail(dir: &Path, name: &str, max: u64) -> Option<String> {
    let (mut f, len) = open_log(dir, name)?;
    f.seek(std::io::SeekFrom::Start(len.saturating_sub(max))).ok()?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// Returns up to `max` bytes of log `name` in `dir` from byte `from` (empty at or past its end), refusing links
/// and anything but a plain file like [`read_log_tail`]; `None` when there is no such file.
pub fn read_log_from(dir: &Path, name: &str, from: u64, max: u64) -> Option<Vec<u8>> {
    let (mut f, _) = open_log(dir, name)?;
    f.seek(std::io::SeekFrom::Start(from)).ok()?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).ok()?;
    Some(buf)
}

/// Opens log `name` in `dir` for reading, with its length: not through a link (the directory or the file), and
/// only a plain file (a FIFO a job left there would block the reader).
fn open_log(dir: &Path, name: &str) -> Option<(std::fs::File, u64)> {
    if std::fs::symlink_metadata(dir).ok()?.file_type().is_symlink() {
        return None;
    }
    let f =
        OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(dir.join(name)).ok()?;
    let meta = f.metadata().ok()?;
    meta.is_file().then_some((f, meta.len()))
}

/// Checks that jobs can run as `user`: the daemon runs as root and the user exists.
pub fn check_run_as(user: &str) -> Result<(), DataDirError> {
    let bad = DataDirError::RunAs;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(bad(format!("running jobs as `{user}` needs the daemon to run as root")));
    }
    let name = std::ffi::CString::new(user).map_err(|_| bad(format!("`{user}` is not a user name")))?;
    // SAFETY: name is a valid C string; getpwnam returns NULL or a pointer into static storage we only test.
    if unsafe { libc::getpwnam(name.as_ptr()) }.is_null() {
        return Err(bad(format!("no such user `{user}`")));
    }
    Ok(())
}

/// Returns the SHA-256 of a token, hex: what the store keeps instead of the token.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two strings in time that depends only on their lengths (token checks must not leak a prefix).
pub fn ct_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Returns a fresh random token (128 bits from the OS, hex), or an error when the OS has no randomness to give.
pub fn new_token() -> std::io::Result<String> {
    let mut buf = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// What `store.json` remembers of the store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub cluster_id: String,
    /// The highest log sequence number the store was known to hold.
    pub log_seq: i64,
}

/// The plain tokens, as `tokens.json` holds them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenFile {
    #[serde(default)]
    pub server: String,
    #[serde(default)]
    pub admin: String,
    #[serde(default)]
    pub teams: BTreeMap<String, String>,
}

/// An open data directory; the daemon lock is held while this lives.
pub struct DataDir {
    pub path: PathBuf,
    _lock: File,
}

impl DataDir {
    /// Makes `path` owner-only and takes its daemon lock; fails at once, naming the holder's pid, when another
    /// daemon holds it.
    pub fn lock(path: &Path) -> Result<DataDir, DataDirError> {
        let dir = path.display().to_string();
        let io = |e: std::io::Error| DataDirError::Io { dir: dir.clone(), message: e.to_string() };
        private_dir(path).map_err(io)?;
        let lock_path = path.join("daemon.lock");
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = lock.read_to_string(&mut pid);
                let pid = if pid.trim().is_empty() { "unknown".to_string() } else { pid.trim().to_string() };
                return Err(DataDirError::Locked { dir, pid });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        lock.set_len(0).and_then(|_| lock.rewind()).and_then(|_| write!(lock, "{}", std::process::id())).map_err(io)?;
        Ok(DataDir { path: path.to_path_buf(), _lock: lock })
    }

    /// Returns the store's path.
    pub fn db_path(&self) -> PathBuf {
        self.path.join("spillway.db")
    }

    /// Returns the marker: `None` where the directory has none, an error naming why where `store.json` is there
    /// but cannot be read (it is written whole, by a rename, so a crash leaves the old one, never a torn one).
    pub fn marker(&self) -> Result<Option<Marker>, String> {
        let path = self.path.join("store.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{} cannot be read: {e}", path.display())),
        };
        serde_json::from_str(&text).map(Some).map_err(|e| format!("{} is not a store marker: {e}", path.display()))
    }

    /// Records how long the log is now.
    pub fn write_marker(&self, m: &Marker) -> std::io::Result<()> {
        write_private(&self.path.join("store.json"), serde_json::to_string(m).unwrap_or_default().as_bytes())
    }

    /// Returns whether the directory shows that a daemon used it before (a marker, token files, provider records).
    pub fn used_before(&self) -> bool {
        let instances = self.path.join("provider").join("instances");
        ["store.json", "tokens.json", "client.json"].iter().any(|f| self.path.join(f).exists())
            || std::fs::read_dir(instances).is_ok_and(|mut d| d.next().is_some())
    }

    /// Refuses, before the store is opened (opening writes its schema), a database file that is missing or empty in
    /// a directory used before.
    pub fn check_db_file(&self) -> Result<(), DataDirError> {
        let empty = std::fs::metadata(self.db_path()).map_or(true, |m| m.len() == 0);
        if empty && self.used_before() {
            return Err(DataDirError::LostStore {
                dir: self.path.display().to_string(),
                db: self.db_path().display().to_string(),
                what: "the store is missing or empty, but the directory was used before".into(),
            });
        }
        Ok(())
    }

    /// Checks a store against what the directory remembers: a store without a cluster id in a used directory, one
    /// of another cluster, or one with fewer log entries than it had, is a lost store; so is one whose length
    /// cannot be checked (`store.json` unreadable, or gone from a directory used before), since a store that lost
    /// its WAL would then start silently without the submissions it had acknowledged.
    pub fn check_store(&self, cluster_id: Option<&str>, last_seq: i64) -> Result<(), DataDirError> {
        let lost = |what: String| DataDirError::LostStore {
            dir: self.path.display().to_string(),
            db: self.db_path().display().to_string(),
            what,
        };
        let marker = self.marker().map_err(|e| lost(format!("{e}, so the log's length cannot be checked")))?;
        match (cluster_id, marker) {
            (Some(_), None) if self.used_before() => Err(lost(
                "store.json, which records how long the log was, is missing from a directory used before, so the \
                 log's length cannot be checked"
                    .into(),
            )),
            (None, _) if self.used_before() => {
                Err(lost("the store is empty or new, but the directory was used before".into()))
            }
            (Some(id), Some(m)) if m.cluster_id != id => {
                Err(lost(format!("the store belongs to cluster {id}, the directory to {}", m.cluster_id)))
            }
            (Some(_), Some(m)) if last_seq < m.log_seq => Err(lost(format!(
                "the store's log ends at entry {last_seq}, but it held {} entries before (a deleted WAL?)",
                m.log_seq
            ))),
            _ => Ok(()),
        }
    }

    /// Sets the old store aside (renamed with a `.replaced-<pid>` suffix) and forgets the marker, for `--reinit`.
    pub fn set_aside_store(&self) -> std::io::Result<()> {
        let db = self.db_path();
        for suffix in ["", "-wal", "-shm"] {
            let f = PathBuf::from(format!("{}{suffix}", db.display()));
            if f.exists() {
                std::fs::rename(&f, format!("{}.replaced-{}", f.display(), std::process::id()))?;
            }
        }
        match std::fs::remove_file(self.path.join("store.json")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Reads `tokens.json`; a missing, unreadable or symlinked file reads as empty.
    pub fn read_tokens(&self) -> TokenFile {
        let path = self.path.join("tokens.json");
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            return TokenFile::default();
        }
        std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default()
    }

    /// Writes `tokens.json` (every token) and `client.json` (server and admin token, read by the CLI).
    pub fn write_tokens(&self, t: &TokenFile) -> std::io::Result<()> {
        let tokens = serde_json::to_vec_pretty(t).map_err(std::io::Error::other)?;
        write_private(&self.path.join("tokens.json"), &tokens)?;
        let client = serde_json::to_vec_pretty(&serde_json::json!({"server": t.server, "token": t.admin}))
            .map_err(std::io::Error::other)?;
        write_private(&self.path.join("client.json"), &client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("spillway-datadir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_second_lock_fails_naming_the_holder() {
        let d = temp("lock");
        let held = DataDir::lock(&d).unwrap();
        let err = DataDir::lock(&d).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        drop(held);
        assert!(DataDir::lock(&d).is_ok(), "the lock is released with the daemon");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn writes_replace_a_symlink_instead_of_following_it() {
        let d = temp("symlink");
        let dd = DataDir::lock(&d).unwrap();
        let victim = d.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("client.json")).unwrap();
        dd.write_tokens(&TokenFile { admin: "secret".into(), ..Default::default() }).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let meta = std::fs::symlink_metadata(d.join("client.json")).unwrap();
        assert!(!meta.file_type().is_symlink());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_store_that_lost_entries_is_refused() {
        let d = temp("marker");
        let dd = DataDir::lock(&d).unwrap();
        assert!(dd.check_store(None, 0).is_ok(), "a new directory takes a new store");
        dd.write_marker(&Marker { cluster_id: "c".into(), log_seq: 10 }).unwrap();
        assert!(dd.check_store(Some("c"), 10).is_ok());
        assert!(dd.check_store(Some("c"), 9).is_err(), "fewer entries than before");
        assert!(dd.check_store(None, 0).is_err(), "an empty store in a used directory");
        assert!(dd.check_store(Some("other"), 10).is_err());
        // A marker that cannot be read, or one gone from a used directory, proves nothing about the log's length.
        std::fs::write(d.join("store.json"), "garbage").unwrap();
        let err = dd.check_store(Some("c"), 10).unwrap_err().to_string();
        assert!(err.contains("store.json is not a store marker") && err.contains("--reinit"), "{err}");
        std::fs::remove_file(d.join("store.json")).unwrap();
        write_private(&d.join("tokens.json"), b"{}").unwrap();
        let err = dd.check_store(Some("c"), 10).unwrap_err().to_string();
        assert!(err.contains("store.json") && err.contains("missing"), "{err}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn ct_eq_compares_whole_strings() {
        assert!(ct_eq("abc", "abc"));
        assert!(!ct_eq("abc", "abd"));
        assert!(!ct_eq("abc", "ab"));
        assert_eq!(token_hash("x").len(), 64);
    }
}
