//! Which workers this agent has ever started, so a daemon that re-sends an old assignment (after acking its exit,
//! or after a newer attempt of the job began) cannot make it run twice.

use spillway_api::WorkerRef;
use std::collections::{BTreeMap, BTreeSet};

/// Per job: the newest attempt started here and the ranks of it started here. Attempts only grow, so anything
/// older than the newest attempt is known to be stale without remembering it: the memory is one entry per job
/// plus the ranks of its latest attempt (one, as the daemon places one worker per node per job).
#[derive(Debug, Default)]
pub struct History {
    jobs: BTreeMap<u32, (u32, BTreeSet<u32>)>,
}

impl History {
    /// Whether `w` must not be started: it was started before, or a later attempt of its job was.
    pub fn ran(&self, w: &WorkerRef) -> bool {
        match self.jobs.get(&w.job) {
            None => false,
            Some((attempt, ranks)) => w.attempt < *attempt || (w.attempt == *attempt && ranks.contains(&w.rank)),
        }
    }

    /// Remembers that `w` was started (or tried to start: a failed spawn is reported as an exit and must not be
    /// retried by a stale assignment either). A newer attempt replaces the ranks of the older one.
    pub fn record(&mut self, w: &WorkerRef) {
        let entry = self.jobs.entry(w.job).or_insert_with(|| (w.attempt, BTreeSet::new()));
        if w.attempt > entry.0 {
            *entry = (w.attempt, BTreeSet::new());
        }
        if w.attempt == entry.0 {
            entry.1.insert(w.rank);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(job: u32, attempt: u32, rank: u32) -> WorkerRef {
        WorkerRef { job, attempt, rank }
    }

    #[test]
    fn started_and_older_attempts_are_refused() {
        let mut h = History::default();
        assert!(!h.ran(&w(1, 2, 0)));
        h.record(&w(1, 2, 0));
        assert!(h.ran(&w(1, 2, 0)), "same worker");
        assert!(h.ran(&w(1, 1, 0)) && h.ran(&w(1, 1, 5)), "an older attempt of the job");
        assert!(!h.ran(&w(1, 2, 1)), "another rank of the same attempt");
        assert!(!h.ran(&w(1, 3, 0)) && !h.ran(&w(2, 1, 0)), "a newer attempt, another job");
        h.record(&w(1, 3, 0));
        assert!(h.ran(&w(1, 2, 1)), "superseded by attempt 3");
        assert!(h.ran(&w(1, 3, 0)) && !h.ran(&w(1, 3, 1)));
    }
}
