//! The integration's end: sends commands from inside the benchmarked process.
//!
//! This code runs inside someone else's benchmark, so its first duty is to never hang or
//! kill it: every open, write and read is non-blocking and bounded by a timeout, a runner
//! that is gone yields an [`Error`] at once, and `SIGPIPE` is never raised.
//!
//! Several processes (e.g. forked benchmark workers) may share one runner: each exchange
//! holds an exclusive `flock` on the FIFO directory, and writes a [`Command::Sync`] frame
//! in front of its command (in the same `write`) so that it can skip replies that were
//! meant for an exchange that timed out. A reply thus always reaches the exchange whose
//! command it answers.
//!
//! It also runs *inside the measurement*: memtrack counts every heap allocation and free of
//! the benchmarked process between the runner's handling of `StartBenchmark` and of
//! `StopBenchmark`. So an exchange of a small command neither allocates nor frees: frames
//! are encoded into, and replies read into, buffers the client allocated when it connected
//! (see [`FifoClient::start_benchmark`]).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::clock::now_ns;
use crate::error::{Error, Result};
use crate::frame::{self, HEADER_LEN};
use crate::layout::{ACK_FIFO_NAME, CONTROL_FIFO_NAME, FIFO_DIR_ENV};
use crate::message::{
    Command, IntegrationMode, Marker, PROTOCOL_VERSION, RegionCounters, Reply, ReplyRef,
};
use crate::sys;

/// Default time one exchange (lock, write, reply) may take before giving up (5 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes reserved at connect time for the outgoing frames of one exchange. `Sync` plus
/// `StartBenchmark`, `StopBenchmark` or `AddMarker` take under 100; only a longer command
/// (a long benchmark URI, say) makes the buffer grow, once, outside any benchmark region.
const TX_RESERVE: usize = 512;

/// Bytes of the receive buffer allocated at connect time. Every reply but a long
/// [`Reply::Err`] fits; only such an error makes it grow.
const RX_RESERVE: usize = 256;

/// The integration's connection to a runner.
///
/// A client inherited through `fork()` notices it and reopens the FIFOs in the child on
/// its next exchange, so forked benchmark workers can keep using it.
///
/// Exchanges of the small commands ([`start_benchmark`](Self::start_benchmark),
/// [`stop_benchmark`](Self::stop_benchmark), [`add_marker`](Self::add_marker),
/// [`ping`](Self::ping), ...) allocate and free no heap memory; see
/// [`start_benchmark`](Self::start_benchmark).
pub struct FifoClient {
    dir: PathBuf,
    control_path: PathBuf,
    ack_path: PathBuf,
    /// The directory itself, opened only to `flock` it around each exchange.
    lock: File,
    /// Write end, non-blocking.
    control: File,
    /// Read end, non-blocking; sees end-of-file (`POLLHUP`) once the runner is gone.
    ack: File,
    timeout: Duration,
    /// Process that opened the descriptors; a forked child reopens them (see `exchange`).
    opened_by: u32,
    /// The outgoing frames of the current exchange (`Sync`, then the command). Reserved
    /// with [`TX_RESERVE`] bytes at connect time and never shrunk or replaced.
    tx: Vec<u8>,
    /// The reply frame being read: [`RX_RESERVE`] bytes from connect time, grown (never
    /// shrunk or replaced) only for a longer reply.
    rx: Vec<u8>,
}

impl fmt::Debug for FifoClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FifoClient")
            .field("dir", &self.dir)
            .field("timeout", &self.timeout)
            .field("opened_by", &self.opened_by)
            .finish_non_exhaustive()
    }
}

impl FifoClient {
    /// Connects to the runner named by [`FIFO_DIR_ENV`].
    ///
    /// Returns `None` when the variable is unset or empty, i.e. when the process is not
    /// running under a runner and the integration should do nothing.
    ///
    /// When the runner runs the command as another user than itself (root running it as
    /// `SUDO_UID`), it must have handed the directory to that user with
    /// [`FifoRunner::set_owner`](crate::FifoRunner::set_owner); otherwise this returns
    /// [`Error::Io`] (permission denied) naming the directory.
    pub fn from_env() -> Option<Result<FifoClient>> {
        let dir = std::env::var_os(FIFO_DIR_ENV).filter(|v| !v.is_empty())?;
        Some(FifoClient::connect(dir))
    }

    /// Connects to the runner serving the FIFO directory `dir`, with [`DEFAULT_TIMEOUT`].
    ///
    /// Never blocks: the FIFOs are opened non-blocking.
    ///
    /// # Errors
    /// [`Error::Io`] if the directory or a FIFO is missing or inaccessible,
    /// [`Error::NoRunner`] if nothing holds the control FIFO open (the runner is gone) or
    /// if a path is not a FIFO.
    pub fn connect(dir: impl Into<PathBuf>) -> Result<FifoClient> {
        let dir = dir.into();
        let control_path = dir.join(CONTROL_FIFO_NAME);
        let ack_path = dir.join(ACK_FIFO_NAME);

        let (lock, control, ack) = open_fifos(&dir, &control_path, &ack_path)?;
        Ok(FifoClient {
            dir,
            control_path,
            ack_path,
            lock,
            control,
            ack,
            timeout: DEFAULT_TIMEOUT,
            opened_by: std::process::id(),
            tx: Vec::with_capacity(TX_RESERVE),
            rx: vec![0; RX_RESERVE],
        })
    }

    /// The FIFO directory this client talks through.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The time one exchange may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sets the time one exchange (waiting for the lock, writing, waiting for the reply)
    /// may take.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Same as [`set_timeout`](Self::set_timeout), by value.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends `cmd` and waits for its reply. A [`Reply::Err`] is returned as `Ok`; the
    /// convenience methods turn it into [`Error::Rejected`].
    ///
    /// The command frame goes out in one `write`, preceded by a [`Command::Sync`] frame
    /// (see there for why), under an exclusive `flock` on the FIFO directory so that
    /// processes sharing the runner take turns.
    ///
    /// # Errors
    /// [`Error::Timeout`] if the runner does not answer within the timeout,
    /// [`Error::NoRunner`] if it is gone, [`Error::Io`] on other I/O failures, and the
    /// codec errors of [`frame`] for a malformed reply.
    ///
    /// Allocates nothing as long as the encoded command fits the client's send buffer
    /// (512 bytes, grown once if a longer command comes along) and the reply is not a long
    /// [`Reply::Err`] or otherwise owns heap memory.
    pub fn send(&mut self, cmd: &Command) -> Result<Reply> {
        self.send_with(cmd, |reply| reply.to_reply())
    }

    /// Sends `cmd` like [`send`](Self::send) and hands its reply, decoded in place, to
    /// `read` (called while the exchange's lock is held), returning what `read` returns.
    ///
    /// Nothing is allocated for any reply, a [`Reply::Err`] included, as long as the
    /// command fits the send buffer and the reply the receive buffer (256 bytes, grown
    /// once for a longer one): for clients that must read a refusal without allocating,
    /// such as a C library called from several threads while one of them measures.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn send_with<R>(
        &mut self,
        cmd: &Command,
        read: impl FnOnce(ReplyRef<'_>) -> R,
    ) -> Result<R> {
        self.exchange(|tx| frame::encode_frame_into(tx, cmd), read)
    }

    /// Writes `bytes` to the control FIFO verbatim (after the usual [`Command::Sync`]
    /// frame) and returns the first reply after the sync, exactly like
    /// [`send`](Self::send) does with an encoded command. Meant for testing runners
    /// against malformed input.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<Reply> {
        self.exchange(
            |tx| {
                tx.extend_from_slice(bytes);
                Ok(())
            },
            |reply| reply.to_reply(),
        )
    }

    /// Announces [`PROTOCOL_VERSION`].
    ///
    /// # Errors
    /// [`Error::Rejected`] if the runner does not speak it, or any error of
    /// [`send`](Self::send).
    pub fn set_version(&mut self) -> Result<()> {
        self.expect_ack(&Command::SetVersion(PROTOCOL_VERSION))
    }

    /// Announces the integration's name and version.
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`].
    pub fn set_integration(&mut self, name: &str, version: &str) -> Result<()> {
        self.expect_ack(&Command::SetIntegration {
            name: name.to_owned(),
            version: version.to_owned(),
        })
    }

    /// Says that this process now runs benchmark `uri`.
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`].
    pub fn current_benchmark(&mut self, uri: &str) -> Result<()> {
        self.expect_ack(&Command::CurrentBenchmark {
            pid: std::process::id(),
            uri: uri.to_owned(),
        })
    }

    /// Asks the runner to start measuring, and returns once it has.
    ///
    /// # Allocation-free
    ///
    /// On success this call performs no heap allocation and no free (zero calls to
    /// `malloc`, `free`, `realloc` or their kin on the calling thread), from entry to
    /// return. That matters because the runner enables allocation counting for this
    /// process when it *handles* the command, before it replies: everything the client
    /// does afterwards (reading and decoding the `Ack`, releasing the lock, returning)
    /// runs inside the measured region and would otherwise be counted as the benchmark's
    /// own allocations. The frames are encoded into a send buffer, and the replies read
    /// into a receive buffer, that the client allocated in [`connect`](Self::connect) and
    /// never frees or replaces while connected; no block allocated earlier is freed either.
    ///
    /// Error paths (timeouts, a vanished runner, a refusal) may allocate to describe the
    /// error; the measurement is wrong then anyway. A client inherited through `fork()`
    /// reopens its FIFOs on its first exchange in the child, without allocating unless the
    /// FIFO paths exceed a few hundred bytes.
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`] (e.g. already started).
    pub fn start_benchmark(&mut self) -> Result<()> {
        self.expect_ack(&Command::StartBenchmark)
    }

    /// Asks the runner to stop measuring, and returns once it has.
    ///
    /// # Allocation-free
    ///
    /// On success this call performs no heap allocation and no free on the calling thread,
    /// from entry to return. Until the runner has handled the command (it disables
    /// allocation counting before replying), the process is still being measured: the
    /// encoding of the `StopBenchmark` frame, the lock, the write and the wait for the
    /// reply all run inside the region and would otherwise be counted. As for
    /// [`start_benchmark`](Self::start_benchmark), the client works only in the buffers
    /// it allocated in [`connect`](Self::connect); error paths may allocate.
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`] (e.g. not started).
    pub fn stop_benchmark(&mut self) -> Result<()> {
        self.expect_ack(&Command::StopBenchmark)
    }

    /// Protocol version 2: asks the runner to stop measuring, and returns the counters of
    /// the region it closed once it has ([`Command::StopWithCounters`]).
    ///
    /// Allocation-free on success, like [`stop_benchmark`](Self::stop_benchmark): the
    /// counters travel in a reply that holds no heap memory. Announce version 2 first
    /// ([`set_version`](Self::set_version)): a runner of version 1 refuses that, with a
    /// message naming the versions it speaks.
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`] (e.g. not started, or a runner
    /// that keeps no counters) and [`Error::UnexpectedReply`].
    pub fn stop_with_counters(&mut self) -> Result<RegionCounters> {
        let cmd = Command::StopWithCounters;
        match self.send_with(&cmd, |reply| match reply {
            ReplyRef::Counters(counters) => Ok(counters),
            other => Err(other.to_reply()),
        })? {
            Ok(counters) => Ok(counters),
            Err(other) => Err(reply_error(&cmd, other)),
        }
    }

    /// Protocol version 2: renames region `region` ([`RegionCounters::region`]) of this
    /// process to `uri` ([`Command::NameRegion`]).
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`] (no such region of this process,
    /// or a refused uri).
    pub fn name_region(&mut self, region: u64, uri: &str) -> Result<()> {
        self.expect_ack(&Command::NameRegion {
            pid: std::process::id(),
            region,
            uri: uri.to_owned(),
        })
    }

    /// Records `marker` as emitted by this process.
    ///
    /// Allocation-free like [`start_benchmark`](Self::start_benchmark), since sample
    /// markers are sent inside benchmark regions.
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`].
    pub fn add_marker(&mut self, marker: Marker) -> Result<()> {
        self.expect_ack(&Command::AddMarker {
            pid: std::process::id(),
            marker,
        })
    }

    /// Checks that the runner answers.
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`].
    pub fn ping(&mut self) -> Result<()> {
        self.expect_ack(&Command::Ping)
    }

    /// Asks the runner what it measures.
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`] and [`Error::UnexpectedReply`].
    pub fn integration_mode(&mut self) -> Result<IntegrationMode> {
        let cmd = Command::GetIntegrationMode;
        match self.send(&cmd)? {
            Reply::IntegrationMode(mode) => Ok(mode),
            other => Err(reply_error(&cmd, other)),
        }
    }

    fn expect_ack(&mut self, cmd: &Command) -> Result<()> {
        match self.send(cmd)? {
            Reply::Ack => Ok(()),
            other => Err(reply_error(cmd, other)),
        }
    }

    /// Lock, clear stale replies, write `Sync` and the command at once, skip replies up to
    /// the matching `Synced`, read one reply, unlock.
    ///
    /// `encode_command` appends the command's bytes to the send buffer, after the `Sync`
    /// frame. Nothing here allocates while the frames fit the buffers (see
    /// [`start_benchmark`](Self::start_benchmark)).
    fn exchange<R>(
        &mut self,
        encode_command: impl FnOnce(&mut Vec<u8>) -> Result<()>,
        read: impl FnOnce(ReplyRef<'_>) -> R,
    ) -> Result<R> {
        if self.opened_by != std::process::id() {
            // Forked: the descriptors, and with them the flock, are shared with the parent,
            // which would defeat the lock. Open our own, keeping the buffers.
            let (lock, control, ack) = open_fifos(&self.dir, &self.control_path, &self.ack_path)?;
            self.lock = lock;
            self.control = control;
            self.ack = ack;
            self.opened_by = std::process::id();
        }
        let deadline = Instant::now() + self.timeout;
        let nonce = next_nonce();
        self.tx.clear();
        frame::encode_frame_into(&mut self.tx, &Command::Sync { nonce })?;
        encode_command(&mut self.tx)?;

        self.lock(deadline)?;
        let result = self
            .discard_stale_replies()
            .and_then(|()| self.write_tx(deadline))
            .and_then(|()| {
                // Replies before our `Synced` answer frames written before ours (by a
                // client that gave up waiting, or a stray writer): not ours.
                loop {
                    let body = self.read_reply(deadline)?;
                    if let ReplyRef::Synced { nonce: n } = frame::decode_reply_ref(&self.rx[body])?
                        && n == nonce
                    {
                        break;
                    }
                }
                let body = self.read_reply(deadline)?;
                Ok(read(frame::decode_reply_ref(&self.rx[body])?))
            });
        sys::unlock(self.lock.as_fd());
        result
    }

    fn timeout_error(&self, waiting_for: &'static str, path: &Path) -> Error {
        Error::Timeout {
            waiting_for,
            path: path.to_owned(),
            timeout: self.timeout,
        }
    }

    fn lock(&self, deadline: Instant) -> Result<()> {
        let mut pause = Duration::from_micros(100);
        loop {
            let locked = sys::try_lock_exclusive(self.lock.as_fd())
                .map_err(|e| Error::io("lock", &self.dir, e))?;
            if locked {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timeout_error(
                    "lock the FIFO directory (another process is talking to the runner)",
                    &self.dir,
                ));
            }
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    /// Drops bytes left in the ack FIFO by an earlier exchange that timed out.
    fn discard_stale_replies(&mut self) -> Result<()> {
        let mut sink = [0u8; 4096];
        loop {
            match (&self.ack).read(&mut sink) {
                Ok(0) => return Err(self.runner_gone()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read", &self.ack_path, e)),
            }
        }
    }

    fn runner_gone(&self) -> Error {
        Error::NoRunner {
            path: self.ack_path.clone(),
            reason: "the runner closed the ack FIFO",
        }
    }

    /// Writes the send buffer to the control FIFO.
    fn write_tx(&self, deadline: Instant) -> Result<()> {
        let mut written = 0;
        while written < self.tx.len() {
            match sys::write_no_sigpipe(self.control.as_fd(), &self.tx[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(self.timeout_error("write a command", &self.control_path));
                    }
                    let mut fds = [sys::PollFd::new(self.control.as_fd(), libc::POLLOUT)];
                    sys::poll(&mut fds, Some(left))
                        .map_err(|e| Error::io("wait to write to", &self.control_path, e))?;
                }
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                    return Err(Error::NoRunner {
                        path: self.control_path.clone(),
                        reason: "the runner closed the control FIFO",
                    });
                }
                Err(e) => return Err(Error::io("write a command to", &self.control_path, e)),
            }
        }
        Ok(())
    }

    /// Reads one reply frame into the receive buffer; returns where its body is in it.
    ///
    /// Reads no further than the end of the frame, so that a reply is never confused with
    /// what follows it.
    fn read_reply(&mut self, deadline: Instant) -> Result<Range<usize>> {
        self.fill_rx(0..HEADER_LEN, deadline)?;
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&self.rx[..HEADER_LEN]);
        let end = HEADER_LEN + frame::body_len(header)?;
        if self.rx.len() < end {
            // Only a reply longer than any the success paths expect (a long `Err`) grows
            // the buffer; it keeps the new size.
            self.rx.resize(end, 0);
        }
        self.fill_rx(HEADER_LEN..end, deadline)?;
        Ok(HEADER_LEN..end)
    }

    /// Fills `self.rx[range]` from the ack FIFO, waiting for bytes until `deadline`.
    fn fill_rx(&mut self, range: Range<usize>, deadline: Instant) -> Result<()> {
        let Range { start: mut at, end } = range;
        while at < end {
            match (&self.ack).read(&mut self.rx[at..end]) {
                Ok(0) => return Err(self.runner_gone()),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(self.timeout_error("receive the reply", &self.ack_path));
                    }
                    let mut fds = [sys::PollFd::new(self.ack.as_fd(), libc::POLLIN)];
                    sys::poll(&mut fds, Some(left))
                        .map_err(|e| Error::io("wait for a reply on", &self.ack_path, e))?;
                }
                Err(e) => return Err(Error::io("read a reply from", &self.ack_path, e)),
            }
        }
        Ok(())
    }
}

/// A value for [`Command::Sync`] that no other exchange, in this or another process,
/// will plausibly use: a counter, the pid and the clock, mixed (splitmix64 finalizer).
fn next_nonce() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut z = now_ns() ^ (u64::from(std::process::id()) << 32) ^ count.rotate_left(47);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn reply_error(cmd: &Command, reply: Reply) -> Error {
    match reply {
        Reply::Err { message } => Error::Rejected {
            command: cmd.name(),
            message,
        },
        other => Error::UnexpectedReply {
            command: cmd.name(),
            reply: Box::new(other),
        },
    }
}

/// Opens the FIFO directory (for its lock), the ack FIFO and the control FIFO, in that
/// order, and checks that both FIFOs are FIFOs. Returns `(lock, control, ack)`.
///
/// Allocates nothing on success while the paths are shorter than std's on-stack path
/// buffer (384 bytes): a forked client reopens them inside benchmark regions.
fn open_fifos(dir: &Path, control_path: &Path, ack_path: &Path) -> Result<(File, File, File)> {
    let lock = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| Error::io("open FIFO directory", dir, e))?;
    // Open the read end first: the open of the write end below is what detects a
    // missing runner, and a FIFO without any reader makes it fail with ENXIO.
    let ack = open_fifo(ack_path, false, "open ack FIFO")?;
    let control = match open_fifo(control_path, true, "open control FIFO") {
        Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::ENXIO) => {
            return Err(Error::NoRunner {
                path: control_path.to_owned(),
                reason: "nothing has the control FIFO open for reading",
            });
        }
        other => other?,
    };
    for (file, path) in [(&control, control_path), (&ack, ack_path)] {
        let meta = file.metadata().map_err(|e| Error::io("inspect", path, e))?;
        if !meta.file_type().is_fifo() {
            return Err(Error::NoRunner {
                path: path.to_owned(),
                reason: "the path exists but is not a FIFO",
            });
        }
    }
    Ok((lock, control, ack))
}

/// Opens a FIFO without blocking, for writing (`write`) or reading.
fn open_fifo(path: &Path, write: bool, op: &'static str) -> Result<File> {
    OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io(op, path, e))
}
