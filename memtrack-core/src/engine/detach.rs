//! Detaches links on a background thread, many at once; in the `memtrack` command, also
//! keeps the process's exit from waiting for the kernel.
//!
//! Closing a uprobe link waits for RCU grace periods in the kernel: 20-50 ms for a
//! uprobe_multi link (whatever its number of sites), measured here on Linux 6.18. Those
//! waits overlap when the links are closed from several threads at once (8 links: 36 ms
//! in all), so a batch is split across short-lived threads. (Perf-event uprobe links, used
//! on kernels without uprobe_multi, take about 110 ms each and the kernel serialises them
//! under a global mutex: there, closing in parallel does not help.)
//!
//! Counting stops the moment a process leaves the TRACKED map, so nothing needs to wait
//! for the links: dropping a [`Tracker`](crate::Tracker) or a
//! [`ProcessTracker`](crate::ProcessTracker) hands them to this thread and returns at
//! once, and the follower thread never stalls the processes it follows on another
//! process's exit. [`Tracker::close`](crate::Tracker::close) and
//! [`ProcessTracker::close`](crate::ProcessTracker::close) wait.
//!
//! The process must not exit while links are being closed: the exit kills this thread in
//! the middle of the kernel's unregistering, which then fails and leaks the uprobes
//! ("failed to unregister, leaking uprobe" in the kernel log; seen here when a test
//! dropped its tracker just before the test binary exited). An `atexit` handler
//! therefore waits for the batches still in flight (at most [`EXIT_WAIT`]).
//!
//! That wait is most of what a short command costs `memtrack run` at its end (20-60 ms
//! here), so the `memtrack` command turns on [`hand_off_links_at_exit`]: links then
//! linger on this thread for [`LINGER`] before it closes them, and at exit the handler
//! waits only for those being closed; the others go to a helper process forked then,
//! which keeps nothing open but their descriptors and exits, the kernel unregistering
//! the uprobes in the helper's exit (where no signal interrupts it). Results are on disk
//! before `main` returns, and nothing the user sees waits for or depends on the helper.
//! A library caller never gets this: a benchmark harness must not fork, and its links
//! must not linger on its own process (each lingering probe traps its allocations).

use std::{
    os::fd::{AsRawFd, OwnedFd, RawFd},
    sync::{
        LazyLock,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use crossbeam_channel::{RecvTimeoutError, Sender, unbounded};

/// Something whose drop detaches something from the kernel (a link).
pub(crate) trait Link: Send {
    /// The descriptors that hold it open (the exit helper keeps exactly these).
    fn fds(&self) -> Vec<RawFd>;
}

impl Link for OwnedFd {
    fn fds(&self) -> Vec<RawFd> {
        vec![self.as_raw_fd()]
    }
}

/// A link, owned: dropping it detaches it.
pub(crate) type Detachable = Box<dyn Link>;

/// What the closing thread is asked to do.
enum Request {
    /// Close these (after [`LINGER`] when links are handed off at exit).
    Close(Vec<Detachable>),
    /// Close these and everything pending, then say so.
    CloseNow(Vec<Detachable>, Sender<()>),
    /// The process exits: hand what is pending to the exit helper (or, without
    /// [`hand_off_links_at_exit`], close it), then say so.
    Exit(Sender<()>),
}

/// How long links wait before the closing thread closes them, when they are handed off
/// at exit: long enough to cover what `memtrack run` does between a short command's
/// exit and its own (collecting and writing the results: a few ms); short enough that a
/// command starting thousands of processes holds only the links of those that ended in
/// the last moment.
const LINGER: Duration = Duration::from_millis(200);

/// How long the exit handler waits for links still being closed.
const EXIT_WAIT: Duration = Duration::from_secs(60);

/// Whether links are handed to a helper at exit ([`hand_off_links_at_exit`]).
static HAND_OFF: AtomicBool = AtomicBool::new(false);

/// The process that started the closing thread (a forked child has no such thread).
static CLOSER_PID: AtomicU32 = AtomicU32::new(0);

/// Makes this process's exit not wait for the kernel to detach probes: links handed over
/// for closing linger for 200 ms first, and at exit those not being closed yet are
/// handed to a helper process that holds only them and exits at once (the kernel
/// detaches them there, a grace period later). For a program that ends soon after tracking
/// does, as the `memtrack` command. Not for a process that must not fork or must not keep
/// probes attached after a tracker is dropped (a benchmark harness with an in-process
/// [`Tracker`](crate::Tracker)): the library never does this unless asked. Call it
/// before the first tracker is made.
pub fn hand_off_links_at_exit() {
    HAND_OFF.store(true, Ordering::SeqCst);
}

static CLOSER: LazyLock<Option<Sender<Request>>> = LazyLock::new(|| {
    let (tx, rx) = unbounded::<Request>();
    CLOSER_PID.store(std::process::id(), Ordering::SeqCst);
    // SAFETY: registering a plain `extern "C" fn()` with the C library.
    unsafe { libc::atexit(wait_at_exit) };
    std::thread::Builder::new()
        .name("memtrack-detach".into())
        .spawn(move || {
            let mut pending: Vec<Detachable> = Vec::new();
            // When `pending` is closed: its first link's arrival plus the linger. Without
            // a linger that is now, and links handed over meanwhile (other processes'
            // exits) are still taken in first, so the kernel's waits overlap.
            let mut due: Option<Instant> = None;
            loop {
                let request = match due {
                    Some(due) => rx.recv_deadline(due),
                    None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                };
                match request {
                    Ok(Request::Close(links)) => {
                        if pending.is_empty() {
                            let linger = if HAND_OFF.load(Ordering::SeqCst) {
                                LINGER
                            } else {
                                Duration::ZERO
                            };
                            due = Some(Instant::now() + linger);
                        }
                        pending.extend(links);
                    }
                    Ok(Request::CloseNow(links, done)) => {
                        pending.extend(links);
                        close_all(std::mem::take(&mut pending));
                        due = None;
                        let _ = done.send(());
                    }
                    Ok(Request::Exit(done)) => {
                        let links = std::mem::take(&mut pending);
                        if HAND_OFF.load(Ordering::SeqCst) {
                            hand_off(links);
                        } else {
                            close_all(links);
                        }
                        due = None;
                        let _ = done.send(());
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        close_all(std::mem::take(&mut pending));
                        due = None;
                    }
                    Err(RecvTimeoutError::Disconnected) => {
                        close_all(pending);
                        return;
                    }
                }
            }
        })
        .ok()?;
    Some(tx)
});

/// Runs when the process exits normally (return from `main`, `std::process::exit`):
/// waits until the links being closed are closed, and closes or hands off the rest.
extern "C" fn wait_at_exit() {
    // A child forked after the thread started inherits this handler but not the
    // thread: nothing to wait for there.
    if CLOSER_PID.load(Ordering::SeqCst) != std::process::id() {
        return;
    }
    let Some(tx) = CLOSER.as_ref() else {
        return;
    };
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    if tx.send(Request::Exit(done_tx)).is_ok() {
        let _ = done_rx.recv_timeout(EXIT_WAIT);
    }
}

/// Forks the exit helper for `links` (see the module docs); closes them here if it
/// cannot be started.
fn hand_off(links: Vec<Detachable>) {
    if links.is_empty() {
        return;
    }
    let mut keep: Vec<RawFd> = links.iter().flat_map(|l| l.fds()).collect();
    keep.sort_unstable();
    keep.dedup();
    // The ranges between the kept descriptors, closed in the helper (the command's
    // output pipes, the maps, the programs), worked out before the fork: in the child of
    // a multi-threaded process only async-signal-safe calls are allowed.
    let mut gaps: Vec<(u32, u32)> = Vec::with_capacity(keep.len() + 1);
    let mut next: u32 = 0;
    for &fd in &keep {
        let fd = fd as u32;
        if fd > next {
            gaps.push((next, fd - 1));
        }
        next = fd + 1;
    }
    gaps.push((next, u32::MAX));
    // SAFETY: the child only makes async-signal-safe calls (sigprocmask, close_range,
    // setsid, _exit) on memory prepared before the fork.
    match unsafe { libc::fork() } {
        0 => unsafe {
            // Nothing of memtrack's (its signal forwarding) runs in the helper.
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
            for &(first, last) in &gaps {
                libc::syscall(libc::SYS_close_range, first, last, 0u32);
            }
            // A session of its own: the terminal's signals to the command's process
            // group do not reach it.
            libc::setsid();
            libc::_exit(0)
        },
        // No helper: close them here.
        pid if pid < 0 => close_all(links),
        // The helper holds the links now: closing ours only drops references.
        _ => drop(links),
    }
}

/// At most this many threads close links at once.
const MAX_CLOSERS: usize = 32;

/// Drops every link, spread over up to [`MAX_CLOSERS`] threads, and returns when all
/// are closed.
fn close_all(mut links: Vec<Detachable>) {
    if links.len() <= 1 {
        drop(links);
        return;
    }
    let per_thread = links.len().div_ceil(MAX_CLOSERS);
    std::thread::scope(|scope| {
        while !links.is_empty() {
            let share = links.split_off(links.len().saturating_sub(per_thread));
            // A thread that cannot be started drops its share (closing it here).
            let _ = std::thread::Builder::new()
                .name("memtrack-detach".into())
                .spawn_scoped(scope, move || drop(share));
        }
    });
}

/// Closes `links` in the background.
pub(crate) fn close_later(links: Vec<Detachable>) {
    if links.is_empty() {
        return;
    }
    match CLOSER.as_ref() {
        Some(tx) => {
            if let Err(e) = tx.send(Request::Close(links)) {
                drop(e.into_inner());
            }
        }
        None => drop(links),
    }
}

/// Closes `links` and every link handed over before them, and waits until they are.
pub(crate) fn close_now(links: Vec<Detachable>) {
    close_and_wait(links);
}

/// Closes `links` on the calling thread, one after another, once every link handed
/// over before them is closed: starts no thread. For [`Tracker::close`](crate::Tracker::close):
/// a harness that counts its whole process right after a tracker closed must find the
/// same thread history as without memtrack. Threads that exit leave their stacks in
/// glibc's stack cache, and a thread the counted code starts then reuses one and frees
/// what it held (measured: with [`close_all`]'s helper threads, a later count of a
/// routine that starts a thread saw one or two more unmatched `free`s than the runner's
/// count of the same routine; without them, the same number). The few links of one
/// tracker close about as fast one after another as in parallel (BENCHMARKS.md).
pub(crate) fn close_here(links: Vec<Detachable>) {
    if CLOSER_PID.load(Ordering::SeqCst) == std::process::id() {
        close_and_wait(Vec::new());
    }
    drop(links);
}

/// Hands `links` to the closing thread with everything pending there, and waits until
/// all are closed; without the thread, closes them here.
fn close_and_wait(links: Vec<Detachable>) {
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    match CLOSER.as_ref() {
        Some(tx) => match tx.send(Request::CloseNow(links, done_tx)) {
            Ok(()) => {
                let _ = done_rx.recv();
            }
            Err(e) => drop(e.into_inner()),
        },
        None => drop(links),
    }
}
