//! Running workers as another Unix user (`--run-as`): resolving the user once at agent start, and dropping to it
//! in the child between fork and exec.

use anyhow::{Context, Result, bail};
use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// The identity workers run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    /// The user's primary group.
    pub gid: u32,
    /// Its supplementary groups as `initgroups` would set them (the primary group included).
    pub groups: Vec<u32>,
}

/// Refuses `--run-as` unless the agent's effective uid `euid` is root: only root can switch a worker's identity,
/// and an agent that quietly ran jobs as itself instead would defeat the point of asking.
pub fn require_root(euid: u32, user: &str) -> Result<()> {
    if euid != 0 {
        bail!("--run-as {user} needs the agent to run as root, but it runs as uid {euid}");
    }
    Ok(())
}

/// The user `name` for `--run-as`: checks the agent is root, then resolves the user. Errors name what failed.
pub fn for_agent(name: &str) -> Result<RunAs> {
    // SAFETY: geteuid has no preconditions.
    require_root(unsafe { libc::geteuid() }, name)?;
    resolve(name)
}

/// Looks `name` up in the user database (getpwnam_r) and collects its groups (getgrouplist). An unknown user is
/// an error.
pub fn resolve(name: &str) -> Result<RunAs> {
    let cname = CString::new(name).with_context(|| format!("user name {name:?} contains a NUL byte"))?;
    let (uid, gid) = passwd_ids(&cname)
        .with_context(|| format!("looking up user {name:?}"))?
        .with_context(|| format!("no such user {name:?}"))?;
    let groups = group_list(&cname, gid).with_context(|| format!("listing the groups of user {name:?}"))?;
    Ok(RunAs { name: name.to_string(), uid, gid, groups })
}

/// (uid, primary gid) of `name`, `None` when there is no such user. Grows the buffer on ERANGE.
fn passwd_ids(name: &CStr) -> io::Result<Option<(u32, u32)>> {
    let mut len = 1024usize;
    loop {
        // SAFETY: passwd is plain old data; all-zero is a valid (empty) value that getpwnam_r overwrites.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut buf = vec![0 as libc::c_char; len];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call and buf.len() is its true length.
        let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some((pwd.pw_uid, pwd.pw_gid))),
            libc::ERANGE if len < (1 << 20) => len *= 4,
            // Some libcs report "not found" as one of these instead of 0 with a null result.
            libc::ENOENT | libc::ESRCH => return Ok(None),
            _ => return Err(io::Error::from_raw_os_error(rc)),
        }
    }
}

/// The groups `name` belongs to, `gid` included. Grows the list until it fits.
fn group_list(name: &CStr, gid: u32) -> Result<Vec<u32>> {
    let mut size: libc::c_int = 32;
    loop {
        let mut groups = vec![0 as libc::gid_t; size as usize];
        let mut count = size;
        // SAFETY: groups holds `count` entries; getgrouplist writes at most that many and updates count.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count.max(0) as usize);
            return Ok(groups);
        }
        // -1: too small. glibc reports the size needed in count; grow by at least double either way.
        size = count.max(size.saturating_mul(2));
        if size > 65_536 {
            bail!("more than 65536 groups");
        }
    }
}

/// Makes `cmd`'s child become `user` before exec: supplementary groups, then the primary group, then the uid (in
/// that order: once the uid is dropped, groups can no longer change), then enters `dir` if given. The directory
/// is entered as the user, not as root, so root's right to enter any directory does not leak to the job (a
/// process keeps a directory it is in, even one it could not enter itself). std's `CommandExt::uid` would set the
/// uid before `pre_exec` runs and clear the supplementary groups, so all of it happens here instead.
pub fn drop_privileges(cmd: &mut Command, user: &RunAs, dir: Option<&Path>) -> Result<()> {
    let groups: Vec<libc::gid_t> = user.groups.clone();
    let (uid, gid) = (user.uid, user.gid);
    let dir = dir.map(|d| CString::new(d.as_os_str().as_bytes())).transpose().context("a NUL byte in the workdir")?;
    let fail = || Err(io::Error::last_os_error());
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system calls on memory
    // prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0 {
                return fail();
            }
            if libc::setgid(gid) != 0 {
                return fail();
            }
            if libc::setuid(uid) != 0 {
                return fail();
            }
            if let Some(d) = &dir
                && libc::chdir(d.as_ptr()) != 0
            {
                return fail();
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_as_needs_root() {
        let err = require_root(1000, "nobody").unwrap_err().to_string();
        assert!(err.contains("--run-as nobody") && err.contains("root") && err.contains("1000"), "{err}");
        assert!(require_root(0, "nobody").is_ok());
    }

    #[test]
    fn resolves_root_and_refuses_unknown_users() {
        let root = resolve("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0), "{root:?}");
        let err = format!("{:#}", resolve("spillway-no-such-user").unwrap_err());
        assert!(err.contains("no such user"), "{err}");
        assert!(resolve("a\0b").is_err());
    }
}
