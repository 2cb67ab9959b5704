//! Signals: names from stop orders, process-group delivery, and the agent's own SIGTERM/SIGINT flag.

use std::sync::atomic::{AtomicBool, Ordering};

/// The signal number a stop order names: `SIGTERM`, `TERM`, `sigterm` or `15` all mean SIGTERM. Returns `None` for
/// a name it does not know (the caller falls back to SIGTERM).
pub fn parse_signal(name: &str) -> Option<libc::c_int> {
    let name = name.trim();
    if name.is_empty() {
        return Some(libc::SIGTERM);
    }
    if let Ok(n) = name.parse::<libc::c_int>() {
        return (n > 0 && n < 65).then_some(n);
    }
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let sig = match bare {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "ABRT" => libc::SIGABRT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "PIPE" => libc::SIGPIPE,
        "ALRM" => libc::SIGALRM,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "TSTP" => libc::SIGTSTP,
        "WINCH" => libc::SIGWINCH,
        _ => return None,
    };
    Some(sig)
}

/// Sends `sig` to the process group `pgid`. Returns whether some process received it (false once the group is
/// empty). A pgid <= 1 is refused: `kill(-1, ..)` would signal every process we may signal.
pub fn signal_group(pgid: i32, sig: libc::c_int) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_sig: libc::c_int) {
    // Only an atomic store: the one thing that is async-signal-safe and all the loop needs.
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// Makes SIGTERM and SIGINT to the agent set the flag [`stop_requested`] reads instead of killing the agent, so the
/// agent can stop its workers first.
pub fn install_stop_handlers() {
    let handler = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only performs an atomic store.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
}

/// Whether the agent got SIGTERM or SIGINT since the handlers were installed.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(parse_signal("SIGTERM"), Some(libc::SIGTERM));
        assert_eq!(parse_signal("int"), Some(libc::SIGINT));
        assert_eq!(parse_signal("SIGUSR1"), Some(libc::SIGUSR1));
        assert_eq!(parse_signal("9"), Some(libc::SIGKILL));
        assert_eq!(parse_signal(""), Some(libc::SIGTERM));
        assert_eq!(parse_signal("SIGBOGUS"), None);
        assert_eq!(parse_signal("0"), None);
    }
}
