//! Just enough of `/proc` and `kill(2)` to manage processes safely (the local provider's agents here, a worker's
//! escaped processes in the agent): identity is (pid, start time), never a bare pid, because pids are reused and a
//! stale record must never make us signal a stranger.

use std::fs;
use std::thread;
use std::time::Duration;

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: char,
    /// Field 5: the process group id.
    pub pgid: i32,
    /// Field 6: the session id.
    pub session: i32,
    /// Field 22: start time in clock ticks since boot; with the pid it identifies a process.
    pub start_time: u64,
}

/// Parses one `/proc/<pid>/stat` line; `None` if it is malformed. The command name (field 2) is in parentheses
/// and may itself contain spaces and parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_stat(line: &str) -> Option<Stat> {
    let close = line.rfind(')')?;
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3, so field n is rest[n - 3].
    Some(Stat {
        state: rest.first()?.chars().next()?,
        pgid: rest.get(2)?.parse().ok()?,
        session: rest.get(3)?.parse().ok()?,
        start_time: rest.get(19)?.parse().ok()?,
    })
}

impl Stat {
    /// Whether the process has ended (a zombie waiting to be reaped, or dead).
    pub fn ended(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// The stat of `pid`, or `None` if no such process exists (or it vanished while we read it).
pub fn stat(pid: i32) -> Option<Stat> {
    if pid <= 0 {
        return None;
    }
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether `pid` is a pid we may ever signal: never 0/1/negative (those mean "my group", init or "everyone" to
/// `kill`) and never ourselves.
pub fn signalable(pid: i32) -> bool {
    pid > 1 && pid != std::process::id() as i32
}

/// Whether the process that started as (`pid`, `start_time`) still runs: the pid exists, its start time matches
/// (so the pid was not reused), and it is not a zombie waiting to be reaped.
pub(crate) fn is_live(pid: i32, start_time: u64) -> bool {
    signalable(pid) && stat(pid).is_some_and(|s| s.start_time == start_time && !s.ended())
}

/// The pids in `/proc` now (none where it cannot be read).
pub fn pids() -> impl Iterator<Item = i32> {
    let entries = fs::read_dir("/proc").into_iter().flatten();
    entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
}

/// Sends `sig` to the process group `pgid` (an agent is a session leader, so its pgid is its pid), only if its
/// leader is still (`pgid`, `start_time`). Returns whether the signal was sent.
pub(crate) fn signal_group_of(pgid: i32, start_time: u64, sig: i32) -> bool {
    if !is_live(pgid, start_time) {
        return false;
    }
    // SAFETY: kill(2) has no memory-safety preconditions; pgid > 1 was checked by is_live.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// The non-zombie processes of the session led (or once led) by the process that started as (`sid`,
/// `start_time`), leader included. Empty if the pid now belongs to a different process: Linux keeps a pid number
/// allocated while any process still uses it as a session id, so a reused pid means our session is already empty
/// and any members now belong to a stranger's session.
pub(crate) fn session_members(sid: i32, start_time: u64) -> Vec<i32> {
    if !signalable(sid) {
        return Vec::new();
    }
    if stat(sid).is_some_and(|s| s.start_time != start_time) {
        return Vec::new();
    }
    pids()
        .filter(|&pid| signalable(pid))
        .filter(|&pid| {
            // Members were forked by the leader, so they cannot predate it; this also skips anything odd.
            stat(pid).is_some_and(|s| s.session == sid && s.start_time >= start_time && !s.ended())
        })
        .collect()
}

/// SIGKILLs every process of the session of (`sid`, `start_time`) and waits up to `wait` for them to go.
/// Returns the pids still running afterwards (empty on success).
pub(crate) fn kill_session(sid: i32, start_time: u64, wait: Duration) -> Vec<i32> {
    poll(wait, || {
        let members = session_members(sid, start_time);
        for &pid in &members {
            // SAFETY: kill(2) has no memory-safety preconditions; pid > 1 and not ours (session_members).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        members.is_empty().then_some(()).ok_or(members)
    })
    .err()
    .unwrap_or_default()
}

/// Calls `check` every 20 ms until it returns `Ok` or about `wait` has passed; returns its last result. Counts
/// polls instead of reading a clock (the workspace keeps clock reads out of library code).
pub(crate) fn poll<T, E>(wait: Duration, mut check: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    const STEP: Duration = Duration::from_millis(20);
    let steps = wait.as_millis().div_ceil(STEP.as_millis());
    let mut result = check();
    for _ in 0..steps {
        if result.is_ok() {
            break;
        }
        thread::sleep(STEP);
        result = check();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3";
        let s = parse_stat(line).unwrap();
        assert_eq!(s, Stat { state: 'S', pgid: 4242, session: 4242, start_time: 987654 });
        assert_eq!(parse_stat("12 (x) S 1 2"), None);
    }

    #[test]
    fn own_process_is_live_but_not_signalable() {
        let me = std::process::id() as i32;
        let s = stat(me).unwrap();
        assert!(!is_live(me, s.start_time), "we must never treat ourselves as an agent");
        assert!(!signalable(1) && !signalable(0) && !signalable(-5));
    }
}
