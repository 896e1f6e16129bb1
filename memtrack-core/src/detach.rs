//! Detaches links on a background thread, many at once.
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

use std::{
    os::fd::{AsRawFd, OwnedFd, RawFd},
    sync::{
        LazyLock,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use crossbeam_channel::{Sender, unbounded};

/// Something whose drop detaches something from the kernel (a link).
pub(crate) trait Link: Send {
    /// The descriptors that hold it open.
    #[allow(dead_code)] // for handing links to another process
    fn fds(&self) -> Vec<RawFd>;
}

impl Link for OwnedFd {
    fn fds(&self) -> Vec<RawFd> {
        vec![self.as_raw_fd()]
    }
}

/// A link, owned: dropping it detaches it.
pub(crate) type Detachable = Box<dyn Link>;

/// A batch of links to close, and who to tell when they are.
struct Batch {
    links: Vec<Detachable>,
    done: Option<Sender<()>>,
}

/// How long the exit handler waits for links still being closed.
const EXIT_WAIT: Duration = Duration::from_secs(60);

/// The process that started the closing thread (a forked child has no such thread).
static CLOSER_PID: AtomicU32 = AtomicU32::new(0);

static CLOSER: LazyLock<Option<Sender<Batch>>> = LazyLock::new(|| {
    let (tx, rx) = unbounded::<Batch>();
    CLOSER_PID.store(std::process::id(), Ordering::SeqCst);
    // SAFETY: registering a plain `extern "C" fn()` with the C library.
    unsafe { libc::atexit(wait_at_exit) };
    std::thread::Builder::new()
        .name("memtrack-detach".into())
        .spawn(move || {
            for first in rx.iter() {
                // Everything handed over meanwhile (other processes' exits, say) is
                // closed together, so the kernel's waits overlap.
                let batches: Vec<Batch> = std::iter::once(first).chain(rx.try_iter()).collect();
                let mut links = Vec::new();
                let mut waiting = Vec::new();
                for batch in batches {
                    links.extend(batch.links);
                    waiting.extend(batch.done);
                }
                close_all(links);
                for done in waiting {
                    let _ = done.send(());
                }
            }
        })
        .ok()?;
    Some(tx)
});

/// Runs when the process exits normally (return from `main`, `std::process::exit`):
/// waits until every batch handed over so far is closed.
extern "C" fn wait_at_exit() {
    // A child forked after the thread started inherits this handler but not the
    // thread: nothing to wait for there.
    if CLOSER_PID.load(Ordering::SeqCst) != std::process::id() {
        return;
    }
    close_and_wait(Vec::new(), Some(EXIT_WAIT));
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
    let batch = Batch { links, done: None };
    match CLOSER.as_ref() {
        Some(tx) => {
            if let Err(e) = tx.send(batch) {
                drop(e.into_inner());
            }
        }
        None => drop(batch),
    }
}

/// Closes `links` and waits until every batch handed over before them is closed too.
pub(crate) fn close_now(links: Vec<Detachable>) {
    close_and_wait(links, None);
}

/// Closes `links` on the calling thread, one after another, once every batch handed
/// over before them is closed: starts no thread. For [`Tracker::close`](crate::Tracker::close):
/// a harness that counts its whole process right after a tracker closed must find the
/// same thread history as without memtrack. Threads that exit leave their stacks in
/// glibc's stack cache, and a thread the counted code starts then reuses one and frees
/// what it held (measured: with [`close_all`]'s helper threads, a later count of a
/// routine that starts a thread saw one or two more unmatched `free`s than the runner's
/// count of the same routine; without them, the same number). The few links of one
/// tracker close about as fast one after another (8 closes of a tracker of this process,
/// two uprobe_multi links and one raw tracepoint, here: 60-99 ms, median 70, one after
/// another; 30-76 ms, median 68, in parallel).
pub(crate) fn close_here(links: Vec<Detachable>) {
    if CLOSER_PID.load(Ordering::SeqCst) == std::process::id() {
        close_and_wait(Vec::new(), None);
    }
    drop(links);
}

/// Hands `links` to the closing thread and waits (at most `limit`, if given) until they
/// and every batch handed over before them are closed; without the thread, closes them
/// here.
fn close_and_wait(links: Vec<Detachable>, limit: Option<Duration>) {
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let batch = Batch {
        links,
        done: Some(done_tx),
    };
    match CLOSER.as_ref() {
        Some(tx) => match tx.send(batch) {
            Ok(()) => {
                let _ = match limit {
                    Some(limit) => done_rx.recv_timeout(limit).ok(),
                    None => done_rx.recv().ok(),
                };
            }
            Err(e) => drop(e.into_inner()),
        },
        None => drop(batch),
    }
}
