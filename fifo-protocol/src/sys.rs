//! Thin safe wrappers over the few POSIX calls std does not offer.
//!
//! Both endpoints need `poll(2)` with a timeout, `mkfifo(3)`, `flock(2)` and a write that
//! cannot kill the process with `SIGPIPE`; keeping every `unsafe` block in this one module
//! makes them easy to audit.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// Creates a FIFO at `path` with `mode` (further restricted by the umask).
pub(crate) fn mkfifo(path: &Path, mode: libc::mode_t) -> io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `c_path` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::mkfifo(c_path.as_ptr(), mode) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One descriptor to wait on and the `poll(2)` events of interest.
pub(crate) struct PollFd<'a> {
    pub fd: BorrowedFd<'a>,
    pub events: libc::c_short,
    /// Events reported by the last [`poll`].
    pub revents: libc::c_short,
}

impl<'a> PollFd<'a> {
    pub(crate) fn new(fd: BorrowedFd<'a>, events: libc::c_short) -> Self {
        PollFd {
            fd,
            events,
            revents: 0,
        }
    }
}

/// Waits until one of `fds` is ready or `timeout` passes (`None`: forever). Returns the
/// number of ready descriptors; an interrupted wait (`EINTR`) returns 0 like a timeout,
/// so callers re-check their deadline and loop.
///
/// Takes an array so that the `pollfd` structs live on the stack: the client polls inside
/// benchmark regions, where it must not allocate.
pub(crate) fn poll<const N: usize>(
    fds: &mut [PollFd<'_>; N],
    timeout: Option<Duration>,
) -> io::Result<usize> {
    let mut raw: [libc::pollfd; N] = std::array::from_fn(|i| libc::pollfd {
        fd: fds[i].fd.as_raw_fd(),
        events: fds[i].events,
        revents: 0,
    });
    let timeout_ms: libc::c_int = match timeout {
        None => -1,
        // Round up so that a sub-millisecond remainder does not spin with timeout 0.
        Some(d) => d
            .as_nanos()
            .div_ceil(1_000_000)
            .try_into()
            .unwrap_or(libc::c_int::MAX),
    };
    // SAFETY: `raw` is a valid array of `N` pollfd structs whose descriptors are
    // kept open by the borrows in `fds`.
    let rc = unsafe { libc::poll(raw.as_mut_ptr(), N as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(err);
    }
    for (p, r) in fds.iter_mut().zip(&raw) {
        p.revents = r.revents;
    }
    Ok(rc as usize)
}

/// Sets or clears `O_NONBLOCK` on `fd`.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>, nonblocking: bool) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a descriptor kept open by the borrow.
    unsafe {
        let flags = libc::fcntl(raw, libc::F_GETFL);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if nonblocking {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        if libc::fcntl(raw, libc::F_SETFL, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Tries to take an exclusive `flock(2)` on `fd` without waiting; `Ok(false)` if another
/// open file description holds it.
pub(crate) fn try_lock_exclusive(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: flock on a descriptor kept open by the borrow.
    if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        Some(libc::EINTR) => Ok(false),
        _ => Err(err),
    }
}

/// Releases a lock taken by [`try_lock_exclusive`].
pub(crate) fn unlock(fd: BorrowedFd<'_>) {
    // SAFETY: flock on a descriptor kept open by the borrow. Failure only means there
    // was no lock; closing the descriptor releases it anyway.
    unsafe {
        libc::flock(fd.as_raw_fd(), libc::LOCK_UN);
    }
}

/// `write(2)` that reports a reader-less pipe as `EPIPE` without raising `SIGPIPE`.
///
/// An integration runs inside someone else's process, whose `SIGPIPE` disposition may
/// well be the default (terminate): a runner that died must not take the benchmark with
/// it. `SIGPIPE` is blocked in this thread around the write, and a `SIGPIPE` the write
/// caused is consumed before the mask is restored.
pub(crate) fn write_no_sigpipe(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the sigset_t values are initialised by sigemptyset/pthread_sigmask/sigpending
    // before use; `buf` is valid for `buf.len()` bytes; the descriptor is kept open by the
    // borrow.
    unsafe {
        let mut pipe_set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe_set);
        libc::sigaddset(&mut pipe_set, libc::SIGPIPE);
        let mut old_mask: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe_set, &mut old_mask);

        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pending);
        libc::sigpending(&mut pending);
        let already_pending = libc::sigismember(&pending, libc::SIGPIPE) == 1;

        let rc = libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len());
        let result = if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        };

        if !already_pending && matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EPIPE)) {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&pipe_set, std::ptr::null_mut(), &zero);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
        result
    }
}
