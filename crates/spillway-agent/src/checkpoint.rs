//! Checkpoint detection: the newest modification time in a worker's checkpoint directory.

use std::path::Path;
use std::time::SystemTime;

/// The newest modification time among the entries directly in `dir` (not recursive: a checkpoint written into a
/// new subdirectory still changes the subdirectory's own time). `None` when the directory is missing, unreadable
/// or empty.
pub fn newest_mtime(dir: &Path) -> Option<SystemTime> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries.filter_map(|e| e.ok()).filter_map(|e| e.metadata().ok()).filter_map(|m| m.modified().ok()).max()
}
