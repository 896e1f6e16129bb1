//! The process's one connection to the runner, shared by every thread.
//!
//! Whether the process runs under `memtrack run` is decided once, on the first call, from
//! `MEMTRACK_FIFO_DIR` (read with `getenv`, which allocates nothing) and kept in an atomic:
//! outside `memtrack run` every later call is one atomic load. Under it, calls take turns
//! on one lock around the [`FifoClient`], taken with a timeout, so no call waits forever
//! (not even in a child forked while another thread held it).
//!
//! The library also remembers which thread of which process opened the region: a region
//! is the process's (memtrack counts every thread), so a second start is refused at once,
//! and only the thread that started it may stop it, which keeps one thread's stop from
//! cutting another thread's region short. A forked child sees its parent's region as not
//! its own.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use fifo_protocol::{Command, Error, FifoClient, RegionCounters, ReplyRef};

use crate::status::{Status, fail};

/// How long a call waits for another thread's call to finish before giving up (5 s), and
/// how long one exchange with the runner may take.
pub const TIMEOUT: Duration = fifo_protocol::DEFAULT_TIMEOUT;

const UNKNOWN: u8 = 0;
const INACTIVE: u8 = 1;
const ACTIVE: u8 = 2;

/// Whether this process runs under `memtrack run`: [`UNKNOWN`] until the first call.
static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The connection, once made, and who opened the region.
static SESSION: Mutex<Session> = Mutex::new(Session {
    client: None,
    open_by: None,
});

pub struct Session {
    /// Connected and version announced; `None` until then (a failed attempt is retried
    /// by the next call).
    client: Option<FifoClient>,
    /// (pid, tid) of the thread that opened the region now open.
    open_by: Option<(u32, i32)>,
}

fn thread_id() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Whether the process runs under `memtrack run`; decided on the first call.
pub fn active() -> bool {
    match MODE.load(Ordering::Acquire) {
        ACTIVE => true,
        INACTIVE => false,
        _ => {
            // SAFETY: getenv with a NUL-terminated name; the result is only tested.
            let value = unsafe { libc::getenv(c"MEMTRACK_FIFO_DIR".as_ptr()) };
            // SAFETY: getenv returned a NUL-terminated string or NULL.
            let set = !value.is_null() && unsafe { *value } != 0;
            MODE.store(if set { ACTIVE } else { INACTIVE }, Ordering::Release);
            set
        }
    }
}

/// Runs `f` on the connected session, connecting first if needed; the status of the
/// lock, the connection or `f`.
pub fn with_session(f: impl FnOnce(&mut Session) -> Status) -> Status {
    if !active() {
        return fail(
            Status::Inactive,
            format_args!("not under `memtrack run` (MEMTRACK_FIFO_DIR is not set): nothing done"),
        );
    }
    let mut session = match lock() {
        Some(session) => session,
        None => {
            return fail(
                Status::Busy,
                format_args!(
                    "another thread held the memtrack library for {} s (or this process \
                     was forked while it did)",
                    TIMEOUT.as_secs()
                ),
            );
        }
    };
    if session.client.is_none() {
        match connect() {
            Ok(client) => session.client = Some(client),
            Err(status) => return status,
        }
    }
    f(&mut session)
}

/// Takes the lock within [`TIMEOUT`], without allocating.
fn lock() -> Option<MutexGuard<'static, Session>> {
    let deadline = Instant::now() + TIMEOUT;
    let mut pause = Duration::from_micros(50);
    loop {
        match SESSION.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// Connects to the runner and announces protocol version 2.
fn connect() -> Result<FifoClient, Status> {
    let Some(connected) = FifoClient::from_env() else {
        return Err(fail(
            Status::Inactive,
            format_args!("not under `memtrack run` (MEMTRACK_FIFO_DIR is not set): nothing done"),
        ));
    };
    let mut client = connected.map_err(|e| {
        fail(
            Status::Runner,
            format_args!("cannot reach memtrack's runner: {e}"),
        )
    })?;
    match client.set_version() {
        Ok(()) => Ok(client),
        Err(Error::Rejected { message, .. }) => Err(fail(
            Status::Version,
            format_args!(
                "memtrack's runner does not speak protocol version {} (this library's): \
                 {message}; use a memtrack and a libmemtrack of the same release",
                fifo_protocol::PROTOCOL_VERSION
            ),
        )),
        Err(e) => Err(status_of(&e, "SetVersion")),
    }
}

/// The status and message for a failed exchange.
fn status_of(err: &Error, command: &str) -> Status {
    match err {
        Error::FrameTooLarge { .. } => fail(
            Status::Invalid,
            format_args!("{command}: too long to send: {err}"),
        ),
        Error::Rejected { command, message } => fail(
            Status::Rejected,
            format_args!("memtrack's runner refused {command}: {message}"),
        ),
        _ => fail(
            Status::Runner,
            format_args!("{command}: no answer from memtrack's runner: {err}"),
        ),
    }
}

/// Sends `cmd`, expecting `Ack`; a refusal is read in place (no allocation).
fn expect_ack(client: &mut FifoClient, cmd: &Command) -> Status {
    let name = cmd.name();
    let outcome = client.send_with(cmd, |reply| match reply {
        ReplyRef::Ack => Status::Ok,
        ReplyRef::Err { message } => fail(
            Status::Rejected,
            format_args!("memtrack's runner refused {name}: {message}"),
        ),
        other => fail(
            Status::Runner,
            format_args!("{name}: unexpected reply from memtrack's runner: {other:?}"),
        ),
    });
    outcome.unwrap_or_else(|e| status_of(&e, name))
}

impl Session {
    fn client(&mut self) -> &mut FifoClient {
        self.client
            .as_mut()
            .expect("with_session connects before it calls")
    }

    /// `SetIntegration`.
    pub fn set_integration(&mut self, name: &str, version: &str) -> Status {
        let cmd = Command::SetIntegration {
            name: name.to_owned(),
            version: version.to_owned(),
        };
        expect_ack(self.client(), &cmd)
    }

    /// `CurrentBenchmark` for this process.
    pub fn current_benchmark(&mut self, uri: &str) -> Status {
        let cmd = Command::CurrentBenchmark {
            pid: std::process::id(),
            uri: uri.to_owned(),
        };
        expect_ack(self.client(), &cmd)
    }

    /// `StartBenchmark`, unless a region of this process is open already.
    pub fn start(&mut self) -> Status {
        let me = (std::process::id(), thread_id());
        if let Some((pid, tid)) = self.open_by.filter(|(pid, _)| *pid == me.0) {
            let _ = pid;
            return if tid == me.1 {
                fail(
                    Status::State,
                    format_args!("memtrack_region_start: this thread's region is already open"),
                )
            } else {
                fail(
                    Status::State,
                    format_args!(
                        "memtrack_region_start: a region is already open, started by thread \
                         {tid} (memtrack counts the whole process: one region at a time)"
                    ),
                )
            };
        }
        let status = expect_ack(self.client(), &Command::StartBenchmark);
        if status == Status::Ok {
            self.open_by = Some(me);
        }
        status
    }

    /// `StopWithCounters`, if this thread of this process opened the region; fills `out`.
    pub fn stop(&mut self, out: &mut RegionCounters) -> Status {
        let me = (std::process::id(), thread_id());
        match self.open_by {
            Some(owner) if owner == me => {}
            Some((pid, tid)) if pid == me.0 => {
                return fail(
                    Status::State,
                    format_args!(
                        "memtrack_region_stop: the open region was started by thread {tid}; \
                         only that thread can stop it"
                    ),
                );
            }
            Some((pid, _)) => {
                return fail(
                    Status::State,
                    format_args!(
                        "memtrack_region_stop: no region is open in this process (the open \
                         one is process {pid}'s, which this process was forked from)"
                    ),
                );
            }
            None => {
                return fail(
                    Status::State,
                    format_args!(
                        "memtrack_region_stop: no region is open (memtrack_region_start first)"
                    ),
                );
            }
        }
        let outcome = self
            .client()
            .send_with(&Command::StopWithCounters, |reply| match reply {
                ReplyRef::Counters(counters) => {
                    *out = counters;
                    Status::Ok
                }
                ReplyRef::Err { message } => fail(
                    Status::Rejected,
                    format_args!("memtrack's runner refused StopWithCounters: {message}"),
                ),
                other => fail(
                    Status::Runner,
                    format_args!("StopWithCounters: unexpected reply: {other:?}"),
                ),
            });
        // Whatever the runner said, this thread's region is over for the library: a
        // refusal means the runner had none open.
        self.open_by = None;
        outcome.unwrap_or_else(|e| status_of(&e, "StopWithCounters"))
    }

    /// `NameRegion` for this process.
    pub fn name_region(&mut self, region: u64, uri: &str) -> Status {
        let cmd = Command::NameRegion {
            pid: std::process::id(),
            region,
            uri: uri.to_owned(),
        };
        expect_ack(self.client(), &cmd)
    }
}

/// `text` as UTF-8, or the [`Status::Invalid`] status naming `what`.
///
/// # Safety
/// `text` is NULL or a NUL-terminated string valid for the call.
pub unsafe fn utf8<'a>(text: *const std::ffi::c_char, what: &str) -> Result<&'a str, Status> {
    if text.is_null() {
        return Err(fail(Status::Invalid, format_args!("{what} is NULL")));
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { CStr::from_ptr(text) };
    bytes
        .to_str()
        .map_err(|e| fail(Status::Invalid, format_args!("{what} is not UTF-8: {e}")))
}
