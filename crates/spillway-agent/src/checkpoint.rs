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

/// Whether a file name marks a checkpoint still being written, by the usual conventions for write-then-rename:
/// hidden (`.ckpt.json`), or ending in `.tmp`, `.partial` or `~`.
pub fn in_progress(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".tmp") || name.ends_with(".partial") || name.ends_with('~')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names() {
        assert!(in_progress("ckpt.json.tmp") && in_progress(".ckpt") && in_progress("x.partial"));
        assert!(!in_progress("ckpt.json") && !in_progress("step-100"));
    }
}
