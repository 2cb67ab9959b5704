//! Processes a worker started that left its process group (`setsid`, `setpgid`, a daemonizing double fork): a
//! signal to the group misses them, and they would go on holding the GPUs the daemon gives the next job. Every
//! worker carries a tag in its environment ([`TAG_VAR`]) that whatever it starts inherits; the agent signals the
//! processes whose environment at their start holds the worker's tag.
//!
//! Best effort. A process escapes that starts another with the tag removed, or that renames itself over its
//! environment (`setproctitle`, as some servers do when they daemonize); so does one whose environment the agent
//! may not read (a non-dumpable process, unless the agent is root). cgroups would catch them all, and need
//! privileges or a delegated hierarchy the agent cannot count on.
//!
//! Only processes that could be the worker's are read: its user's, started no earlier than it. So another user's
//! processes, however many and however large their environments, cost a scan a look at their `stat` (and their
//! `status`, for those started since the worker); no environment is read past [`ENV_READ_CAP`], nor twice in one
//! sweep. Processes are known by pid and start time ([`spillway_providers::procfs`]), as pids are reused.

use spillway_api::WorkerRef;
use spillway_providers::procfs::{Stat, pids, signalable, stat};
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that tags a worker's processes.
pub const TAG_VAR: &str = "SPILLWAY_WORKER_TAG";

/// The most of a process's environment a scan reads: a job's own `env` is at most 64 KiB, beside `PATH` and the
/// contract's variables; a process that grew it past this before it started another may hide the tag.
const ENV_READ_CAP: u64 = 512 << 10;

/// Passes a SIGKILL sweep makes at most: a process that forks and exits in a loop may have a new pid by the time
/// a pass reaches it, so passes stop what they find and repeat until one finds nothing new.
const KILL_PASSES: usize = 16;

/// Tags handed out by this process so far.
static TAGS: AtomicU64 = AtomicU64::new(0);

/// Returns a new tag for worker `w` on node `node`: unique among the workers alive on this machine, where several
/// agents (the local provider's nodes, or several daemons' agents) may run workers of the same job. The agent's
/// pid and a random number drawn once per process tell agents apart (a pid alone is reused), the count of tags
/// handed out tells its workers apart.
pub fn worker_tag(node: u32, w: &WorkerRef) -> String {
    static NONCE: OnceLock<u64> = OnceLock::new();
    // A fresh RandomState is seeded from the OS's randomness: no RNG crate needed for one number.
    let nonce = *NONCE.get_or_init(|| std::collections::hash_map::RandomState::new().build_hasher().finish());
    let n = TAGS.fetch_add(1, Ordering::Relaxed);
    format!("{}-{nonce:016x}-{n}-{node}-{}-{}-{}", std::process::id(), w.job, w.attempt, w.rank)
}

/// Which processes may be a worker's: its tag, its user, its process group (which the caller signals as a whole,
/// so no member gets a signal twice) and when its leader started.
pub struct Scope<'a> {
    pub tag: &'a str,
    pub uid: u32,
    pub pgid: i32,
    /// The leader's start, in clock ticks after boot (`/proc/PID/stat` field 22); 0 where unknown.
    pub since: u64,
}

/// Returns when process `pid` started, in clock ticks after boot, or `None` if it is gone.
pub fn start_ticks(pid: i32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// Sends `sig` to every process outside the scope's group whose environment at its start holds its tag; returns
/// how many processes and groups it signalled. Where a process group holds only the worker's processes (a worker's
/// process that called `setsid`, what it forked since, their zombies), the group gets the signal, which no fork
/// can dodge. A SIGKILL stops the other tagged processes it finds and repeats the scan until a pass finds no new
/// one (see [`KILL_PASSES`]), then kills them. Skips the agent itself, its group and pid 1.
///
/// `known` are the worker's groups found so far (a stop's SIGTERM finds a group, its SIGKILL comes later): each
/// is signalled again where a pass still finds only the worker's processes in it. A process that forks and exits
/// in a loop once told to stop is seldom seen alive by a scan, but its group and its zombies stay.
///
/// Pids and group ids are reused once free, so nothing is signalled on a scan's word alone: a process through a
/// pidfd opened when it was found (or, on kernels without them, after its start is read again), a group after a
/// look at its members right before the signal.
pub fn signal_escaped(scope: &Scope, sig: libc::c_int, known: &mut BTreeSet<i32>) -> usize {
    let mut sweep = Sweep { groups: std::mem::take(known), ..Sweep::default() };
    let passes = if sig == libc::SIGKILL { KILL_PASSES } else { 1 };
    let mut stopped = Vec::new();
    let mut signalled = 0;
    for _ in 0..passes {
        let (found, groups) = sweep.pass(scope);
        signalled += groups.iter().filter(|&&g| group_is_workers(scope, g) && send(-g, sig)).count();
        if sig != libc::SIGKILL {
            *known = sweep.groups;
            return signalled + found.iter().filter(|p| p.send(sig)).count();
        }
        if found.is_empty() && groups.is_empty() {
            break;
        }
        // A stopped process cannot fork again before the kill.
        stopped.extend(found.into_iter().filter(|p| p.send(libc::SIGSTOP)));
    }
    *known = sweep.groups;
    signalled + stopped.iter().filter(|p| p.send(libc::SIGKILL)).count()
}

/// Sends `sig` to `pid` (a group where negative); returns whether it was delivered.
fn send(pid: i32, sig: libc::c_int) -> bool {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// A tagged process a pass found, held by a pidfd where the kernel has them (Linux 5.3), so that a later signal
/// cannot reach a process that got its pid after it ended.
struct Found {
    pid: i32,
    start: u64,
    fd: Option<OwnedFd>,
}

impl Found {
    /// Holds process `pid`, if it is still the one that started at `start`.
    fn open(pid: i32, start: u64) -> Option<Found> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor, or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        // SAFETY: a descriptor pidfd_open just returned is open and ours alone.
        let fd = i32::try_from(raw).ok().filter(|&fd| fd >= 0).map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
        // Once opened, the descriptor names the process the pid named then: the one found if it started then.
        (stat(pid)?.start_time == start).then_some(Found { pid, start, fd })
    }

    /// Sends `sig` to the process; returns whether it was delivered.
    fn send(&self, sig: libc::c_int) -> bool {
        match &self.fd {
            // SAFETY: the descriptor is open; a null siginfo is allowed.
            Some(fd) => unsafe {
                libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), sig, std::ptr::null::<libc::siginfo_t>(), 0)
                    == 0
            },
            None => stat(self.pid).is_some_and(|s| s.start_time == self.start) && send(self.pid, sig),
        }
    }
}

/// What a scan makes of a process.
#[derive(Clone, Copy, PartialEq)]
enum Class {
    /// A live process of the worker (its tag, its user, started since its leader).
    Tagged,
    /// A zombie of the worker's user started since its leader (it keeps its group id from being reused).
    Remains,
    /// Anything else.
    Other,
}

/// What the passes of one sweep learnt: what each process (by pid and start, as pids are reused) is, so a later
/// pass reads only processes new to it; the worker's groups, and which of them this sweep signalled.
#[derive(Default)]
struct Sweep {
    seen: BTreeMap<(i32, u64), Class>,
    groups: BTreeSet<i32>,
    signalled: BTreeSet<i32>,
}

impl Sweep {
    /// Returns the tagged processes new to this sweep outside the scope's group and outside the worker's groups,
    /// and the worker's groups it has not signalled yet: those in which this pass saw the worker's processes and
    /// nothing else (never the scope's, the agent's, or one <= 1).
    fn pass(&mut self, scope: &Scope) -> (Vec<Found>, Vec<i32>) {
        let entry = format!("{TAG_VAR}={}", scope.tag);
        // SAFETY: getpgid has no memory-safety preconditions.
        let own_group = unsafe { libc::getpgid(0) };
        // Per process group: (a member is the worker's, a member is not).
        let mut members: BTreeMap<i32, (bool, bool)> = BTreeMap::new();
        let mut new = Vec::new();
        for pid in pids() {
            let Some(st) = stat(pid) else { continue };
            let (pgid, start) = (st.pgid, st.start_time);
            let class = match self.seen.get(&(pid, start)) {
                Some(&class) => class,
                None => {
                    let class = classify(scope, pid, &st, &entry);
                    self.seen.insert((pid, start), class);
                    if class == Class::Tagged {
                        new.push((pid, pgid, start));
                    }
                    class
                }
            };
            let m = members.entry(pgid).or_default();
            m.0 |= class != Class::Other;
            m.1 |= class == Class::Other;
        }
        let whole = |g: &i32| members.get(g) == Some(&(true, false)) && *g > 1 && *g != own_group && *g != scope.pgid;
        self.groups.extend(new.iter().map(|&(_, g, _)| g).filter(whole));
        self.groups.retain(whole);
        let groups: Vec<i32> = self.groups.iter().copied().filter(|&g| self.signalled.insert(g)).collect();
        let alone = new.into_iter().filter(|&(_, g, _)| !self.groups.contains(&g));
        (alone.filter_map(|(pid, _, start)| Found::open(pid, start)).collect(), groups)
    }
}

/// Returns what process `pid`, of stat `st`, is to the scope's worker (`entry`: the tag's environment entry).
fn classify(scope: &Scope, pid: i32, st: &Stat, entry: &str) -> Class {
    let outside = !signalable(pid) || st.pgid == scope.pgid || st.start_time < scope.since;
    if outside || real_uid(pid) != Some(scope.uid) {
        return Class::Other;
    }
    if st.ended() {
        // Its environment reads empty: only its user and start say whose it is.
        return Class::Remains;
    }
    if holds(pid, entry.as_bytes()) { Class::Tagged } else { Class::Other }
}

/// Returns whether process group `g` holds the scope's worker's processes and nothing else, by a look at each
/// member's `stat` and `status` (its user, when it started) right before the group is signalled.
fn group_is_workers(scope: &Scope, g: i32) -> bool {
    let mut any = false;
    for pid in pids() {
        let Some(st) = stat(pid).filter(|st| st.pgid == g) else { continue };
        if st.start_time < scope.since || real_uid(pid) != Some(scope.uid) {
            return false;
        }
        any = true;
    }
    any
}

/// Returns process `pid`'s real uid (a non-dumpable process does not show it as the owner of its `/proc` entry).
fn real_uid(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:")?.split_whitespace().next()?.parse().ok())
}

/// Returns whether process `pid`'s environment (its first [`ENV_READ_CAP`] bytes) holds `entry` as a whole entry
/// (a tag must not match the start of a longer one).
fn holds(pid: i32, entry: &[u8]) -> bool {
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/environ")) else { return false };
    let mut env = Vec::new();
    if f.take(ENV_READ_CAP).read_to_end(&mut env).is_err() {
        return false;
    }
    env.split(|&b| b == 0).any(|v| v == entry)
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
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let scope = Scope { tag: "no-such-worker-tag", uid, pgid: -1, since: 0 };
        assert_eq!(signal_escaped(&scope, 0, &mut BTreeSet::new()), 0);
        assert_eq!(signal_escaped(&scope, libc::SIGKILL, &mut BTreeSet::new()), 0);
    }

    #[test]
    fn only_the_workers_user_and_processes_started_since_it_are_signalled() {
        let tag = worker_tag(9, &WorkerRef { job: 1, attempt: 1, rank: 0 });
        let mut sleep = std::process::Command::new("sleep");
        let mut child =
            std::os::unix::process::CommandExt::process_group(sleep.arg("30").env(TAG_VAR, &tag), 0).spawn().unwrap();
        let pid = child.id() as i32;
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let started = start_ticks(pid).unwrap();
        // Until it has exec'd, the child shows the test's environment, without the tag.
        let entry = format!("{TAG_VAR}={tag}");
        for _ in 0..200 {
            if holds(pid, entry.as_bytes()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let scope = |uid: u32, since: u64| Scope { tag: &tag, uid, pgid: -1, since };
        let sweep = |s: &Scope, sig| signal_escaped(s, sig, &mut BTreeSet::new());
        // Signal 0 checks delivery only.
        assert_eq!(sweep(&scope(uid, started), 0), 1, "the worker's own process");
        assert_eq!(sweep(&scope(uid, started + 1), 0), 0, "started before the worker");
        assert_eq!(sweep(&scope(uid.wrapping_add(1), started), 0), 0, "another user's");
        let other = format!("{tag}0");
        assert_eq!(sweep(&Scope { tag: &other, ..scope(uid, started) }, 0), 0, "a longer tag");
        assert_eq!(sweep(&Scope { pgid: pid, ..scope(uid, started) }, 0), 0, "in the group signalled anyway");
        assert_eq!(sweep(&scope(uid, started), libc::SIGKILL), 1);
        let status = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
    }

    #[test]
    fn a_group_is_killed_whole_only_where_all_its_members_are_the_workers() {
        let tag = worker_tag(9, &WorkerRef { job: 2, attempt: 1, rank: 0 });
        // One group: a tagged `sleep`, and an untagged one beside it (started with an emptied environment).
        let mut sh = std::process::Command::new("sh");
        sh.args(["-c", "env -i sleep 30 & echo $! > \"$0\"; exec sleep 30"]);
        let pid_file = std::env::temp_dir().join(format!("spillway-escaped-{}", std::process::id()));
        sh.arg(&pid_file).env(TAG_VAR, &tag);
        let mut child = std::os::unix::process::CommandExt::process_group(&mut sh, 0).spawn().unwrap();
        let pid = child.id() as i32;
        let entry = format!("{TAG_VAR}={tag}");
        let mut other = None;
        for _ in 0..300 {
            other = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse::<i32>().ok());
            if other.is_some() && holds(pid, entry.as_bytes()) && stat(pid).is_some_and(|s| !s.ended()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let other = other.expect("the untagged sleep started");
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let scope = Scope { tag: &tag, uid, pgid: -1, since: start_ticks(pid).unwrap() };
        assert!(!group_is_workers(&Scope { since: u64::MAX, ..scope }, pid), "members started before the worker");
        let mut known = BTreeSet::new();
        assert_eq!(signal_escaped(&scope, libc::SIGKILL, &mut known), 1);
        assert!(known.is_empty(), "a group with a member that is not the worker's: {known:?}");
        let status = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        assert!(stat(other).is_some_and(|s| !s.ended()), "the untagged process was killed with the group");
        send(other, libc::SIGKILL);
        std::fs::remove_file(&pid_file).ok();
    }

    #[test]
    fn the_agent_knows_when_it_started() {
        let me = std::process::id() as i32;
        assert!(start_ticks(me).is_some());
        assert_eq!(start_ticks(-5), None);
    }
}
