//! FIFO directories left behind by runners that died without cleaning up (killed with
//! SIGKILL, say), and their removal by the next runner.
//!
//! A runner names its directory `memtrack-fifo-{pid}-XXXXXX` (its pid, then random) and
//! holds an exclusive `flock` on its control FIFO while it lives (the directory's own lock
//! is the clients' turn-taking); the kernel drops it when the process dies, however it
//! dies. A directory in the same parent is stale, and removed, only if all of these hold:
//!
//! - its name has that form and no process with that pid exists (`kill(pid, 0)`: ESRCH);
//! - it is a directory itself, not a symbolic link (opened `O_NOFOLLOW`);
//! - the effective user owns it, or is root (a root runner hands its directory to the user
//!   it runs the command as);
//! - it holds nothing but the two FIFOs, as FIFOs;
//! - nobody holds the control FIFO's lock (a live runner in another pid namespace does).
//!
//! Then the FIFOs are unlinked and the empty directory removed, all relative to
//! descriptors: nothing is followed, nothing else is ever removed, and a directory that
//! changes meanwhile is at worst left in place.

use std::{
    ffi::OsStr,
    os::{
        fd::{AsFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
};

use rustix::{
    fs::{AtFlags, CWD, FileType, FlockOperation, Mode, OFlags},
    io::Errno,
};

use crate::layout::{ACK_FIFO_NAME, CONTROL_FIFO_NAME};

/// What every FIFO directory's name starts with.
pub(crate) const PREFIX: &str = "memtrack-fifo-";

/// At most this many candidates are examined per call, so that a directory stuffed with
/// look-alike names cannot make a runner's start slow.
const MAX_CANDIDATES: usize = 256;

/// The name prefix of this process's FIFO directories: `memtrack-fifo-{pid}-`.
pub(crate) fn own_prefix() -> String {
    format!("{PREFIX}{}-", std::process::id())
}

/// Takes the lock a live runner holds on its control FIFO `fifo`; `false` if another
/// open file holds it.
pub(crate) fn lock(fifo: impl AsFd) -> rustix::io::Result<bool> {
    match rustix::fs::flock(fifo, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Removes the stale FIFO directories in `base` (see the module documentation) and
/// returns how many. Errors only mean that a directory is left in place.
pub(crate) fn remove_stale(base: &Path) -> usize {
    let Ok(base_fd) = open_dir(CWD, base, true) else {
        return 0;
    };
    let Ok(mut entries) = rustix::fs::Dir::read_from(&base_fd) else {
        return 0;
    };
    let mut candidates = Vec::new();
    while let Some(Ok(entry)) = entries.read() {
        let Ok(name) = std::str::from_utf8(entry.file_name().to_bytes()) else {
            continue;
        };
        if let Some(pid) = creator_pid(name)
            && !process_exists(pid)
        {
            candidates.push(name.to_owned());
            if candidates.len() == MAX_CANDIDATES {
                break;
            }
        }
    }
    candidates
        .iter()
        .filter(|name| remove_if_stale(&base_fd, name).is_ok_and(|removed| removed))
        .count()
}

/// The pid in a name `memtrack-fifo-{pid}-XXXXXX`.
fn creator_pid(name: &str) -> Option<i32> {
    let (pid, _random) = name.strip_prefix(PREFIX)?.split_once('-')?;
    pid.parse::<i32>().ok().filter(|&p| p > 0)
}

fn process_exists(pid: i32) -> bool {
    match rustix::process::Pid::from_raw(pid) {
        // EPERM: it exists, it is just not ours.
        Some(pid) => !matches!(rustix::process::test_kill_process(pid), Err(Errno::SRCH)),
        None => true,
    }
}

fn remove_if_stale(base: &OwnedFd, name: &str) -> rustix::io::Result<bool> {
    let dir = open_dir(base, name, false)?;
    let stat = rustix::fs::fstat(&dir)?;
    let euid = rustix::process::geteuid();
    if !(euid.is_root() || stat.st_uid == euid.as_raw()) {
        return Ok(false);
    }
    let mut fifos = Vec::new();
    let mut entries = rustix::fs::Dir::read_from(&dir)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let entry_name = OsStr::from_bytes(entry.file_name().to_bytes());
        if entry_name == "." || entry_name == ".." {
            continue;
        }
        let ours = entry_name == CONTROL_FIFO_NAME || entry_name == ACK_FIFO_NAME;
        let kind = rustix::fs::statat(&dir, entry_name, AtFlags::SYMLINK_NOFOLLOW)?;
        if !ours || FileType::from_raw_mode(kind.st_mode) != FileType::Fifo {
            return Ok(false); // not what a runner leaves: not ours to remove
        }
        fifos.push(entry_name.to_owned());
    }
    if fifos.iter().any(|f| f == CONTROL_FIFO_NAME) {
        // Opening a FIFO read-only and non-blocking never waits, and a runner's FIFOs have
        // a reader and a writer already (the runner itself), so nobody notices.
        let control = rustix::fs::openat(
            &dir,
            CONTROL_FIFO_NAME,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let kind = rustix::fs::fstat(&control)?;
        if FileType::from_raw_mode(kind.st_mode) != FileType::Fifo || !lock(&control)? {
            return Ok(false);
        }
    }
    for fifo in &fifos {
        rustix::fs::unlinkat(&dir, fifo.as_os_str(), AtFlags::empty())?;
    }
    // Fails (harmlessly) if anything appeared in it meanwhile.
    rustix::fs::unlinkat(base, name, AtFlags::REMOVEDIR)?;
    Ok(true)
}

/// Opens `path` relative to `dirfd` as a directory, following a symbolic link as its last
/// component only if `follow`.
pub(crate) fn open_dir(
    dirfd: impl AsFd,
    path: impl AsRef<Path>,
    follow: bool,
) -> rustix::io::Result<OwnedFd> {
    let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NONBLOCK;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    rustix::fs::openat(dirfd, path.as_ref(), flags, Mode::empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_with_a_positive_pid_are_candidates() {
        assert_eq!(creator_pid("memtrack-fifo-123-abcdef"), Some(123));
        assert_eq!(creator_pid("memtrack-fifo-abcdef"), None); // before pids were named
        assert_eq!(creator_pid("memtrack-fifo-0-abcdef"), None);
        assert_eq!(creator_pid("memtrack-fifo--5-abcdef"), None);
        assert_eq!(creator_pid("other-123-abcdef"), None);
    }
}
