//! Processes a worker started that left its process group (`setsid`, `setpgid`, a daemonizing double fork): a
//! signal to the group misses them, and they would go on holding the GPUs the daemon gives the next job. Every
//! worker carries a tag in its environment ([`TAG_VAR`]) that whatever it starts inherits; the agent signals the
//! processes whose environment at their start holds the worker's tag.
//!
//! A process that starts another with an emptied environment drops the tag, and the agent cannot read the
//! environment of another user's processes unless it is root: such processes still escape (cgroups would catch
//! them, and need privileges or a delegated hierarchy the agent cannot count on).

use spillway_api::WorkerRef;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that tags a worker's processes.
pub const TAG_VAR: &str = "SPILLWAY_WORKER_TAG";

/// Tags handed out by this process so far.
static TAGS: AtomicU64 = AtomicU64::new(0);

/// Returns a new tag for worker `w` on node `node`: unique among the workers alive on this machine, where several
/// agents (the local provider's nodes) may run workers of the same job (the agent's pid tells them apart) and one
/// process may hold several runners (the count of tags handed out does).
pub fn worker_tag(node: u32, w: &WorkerRef) -> String {
    let n = TAGS.fetch_add(1, Ordering::Relaxed);
    format!("{}-{n}-{node}-{}-{}-{}", std::process::id(), w.job, w.attempt, w.rank)
}

/// Sends `sig` to every process outside process group `pgid` (which the caller signals as a whole, so no member
/// gets the signal twice) whose environment at its start holds `TAG_VAR=tag`; returns how many it signalled.
/// Skips the agent itself, and processes whose environment it may not read (or that are gone or zombies, whose
/// environment reads empty).
pub fn signal_escaped(tag: &str, pgid: i32, sig: libc::c_int) -> usize {
    let entry = format!("{TAG_VAR}={tag}");
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let mut signalled = 0;
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if pid <= 1 || pid as u32 == me {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        // Whole entries only: a tag must not match the start of a longer one.
        if !env.split(|&b| b == 0).any(|v| v == entry.as_bytes()) {
            continue;
        }
        // SAFETY: getpgid and kill have no memory-safety preconditions.
        if unsafe { libc::getpgid(pid) } == pgid {
            continue;
        }
        if unsafe { libc::kill(pid, sig) } == 0 {
            signalled += 1;
        }
    }
    signalled
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_differs() {
        let w = WorkerRef { job: 1, attempt: 2, rank: 3 };
        let tags = [
            worker_tag(0, &w),
            worker_tag(0, &w),
            worker_tag(1, &w),
            worker_tag(0, &WorkerRef { job: 12, ..w }),
            worker_tag(0, &WorkerRef { attempt: 22, ..w }),
            worker_tag(0, &WorkerRef { rank: 33, ..w }),
        ];
        let unique: std::collections::BTreeSet<_> = tags.iter().collect();
        assert_eq!(unique.len(), tags.len(), "{tags:?}");
    }

    #[test]
    fn a_tag_no_process_carries_signals_nothing() {
        assert_eq!(signal_escaped("no-such-worker-tag", -1, 0), 0);
    }
}
