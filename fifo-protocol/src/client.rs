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

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::clock::now_ns;
use crate::error::{Error, Result};
use crate::frame::{self, MAX_FRAME_LEN};
use crate::message::{Command, IntegrationMode, Marker, PROTOCOL_VERSION, Reply};
use crate::runner::{ACK_FIFO_NAME, CONTROL_FIFO_NAME, FIFO_DIR_ENV};
use crate::sys;

/// Default time one exchange (lock, write, reply) may take before giving up (5 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The integration's connection to a runner.
///
/// A client inherited through `fork()` notices it and reopens the FIFOs in the child on
/// its next exchange, so forked benchmark workers can keep using it.
#[derive(Debug)]
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
}

impl FifoClient {
    /// Connects to the runner named by [`FIFO_DIR_ENV`].
    ///
    /// Returns `None` when the variable is unset or empty, i.e. when the process is not
    /// running under a runner and the integration should do nothing.
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

        let lock = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&dir)
            .map_err(|e| Error::io("open FIFO directory", &dir, e))?;
        // Open the read end first: the open of the write end below is what detects a
        // missing runner, and a FIFO without any reader makes it fail with ENXIO.
        let ack = open_fifo(&ack_path, false, "open ack FIFO")?;
        let control = match open_fifo(&control_path, true, "open control FIFO") {
            Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::ENXIO) => {
                return Err(Error::NoRunner {
                    path: control_path,
                    reason: "nothing has the control FIFO open for reading",
                });
            }
            other => other?,
        };
        for (file, path) in [(&control, &control_path), (&ack, &ack_path)] {
            let meta = file
                .metadata()
                .map_err(|e| Error::io("inspect", path.as_path(), e))?;
            if !meta.file_type().is_fifo() {
                return Err(Error::NoRunner {
                    path: path.clone(),
                    reason: "the path exists but is not a FIFO",
                });
            }
        }
        Ok(FifoClient {
            dir,
            control_path,
            ack_path,
            lock,
            control,
            ack,
            timeout: DEFAULT_TIMEOUT,
            opened_by: std::process::id(),
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
    /// codec errors of [`frame`](crate::frame) for a malformed reply.
    pub fn send(&mut self, cmd: &Command) -> Result<Reply> {
        let frame = frame::encode_frame(cmd)?;
        self.exchange(&frame)
    }

    /// Writes `bytes` to the control FIFO verbatim (after the usual [`Command::Sync`]
    /// frame) and returns the first reply after the sync, exactly like
    /// [`send`](Self::send) does with an encoded command. Meant for testing runners
    /// against malformed input.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<Reply> {
        self.exchange(bytes)
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

    /// Asks the runner to start measuring.
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`] (e.g. already started).
    pub fn start_benchmark(&mut self) -> Result<()> {
        self.expect_ack(&Command::StartBenchmark)
    }

    /// Asks the runner to stop measuring.
    ///
    /// # Errors
    /// As [`send`](Self::send), plus [`Error::Rejected`] (e.g. not started).
    pub fn stop_benchmark(&mut self) -> Result<()> {
        self.expect_ack(&Command::StopBenchmark)
    }

    /// Records `marker` as emitted by this process.
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

    /// Lock, clear stale replies, write `Sync` and `bytes` at once, skip replies up to the
    /// matching `Synced`, read one reply, unlock.
    fn exchange(&mut self, bytes: &[u8]) -> Result<Reply> {
        if self.opened_by != std::process::id() {
            // Forked: the descriptors, and with them the flock, are shared with the parent,
            // which would defeat the lock. Open our own.
            let timeout = self.timeout;
            *self = FifoClient::connect(self.dir.clone())?.with_timeout(timeout);
        }
        let deadline = Instant::now() + self.timeout;
        let nonce = next_nonce();
        let mut out = frame::encode_frame(&Command::Sync { nonce })?;
        out.extend_from_slice(bytes);

        self.lock(deadline)?;
        let result = self
            .discard_stale_replies()
            .and_then(|()| self.write_all(&out, deadline))
            .and_then(|()| {
                // Replies before our `Synced` answer frames written before ours (by a
                // client that gave up waiting, or a stray writer): not ours.
                loop {
                    if let Reply::Synced { nonce: n } = self.read_reply(deadline)?
                        && n == nonce
                    {
                        break;
                    }
                }
                self.read_reply(deadline)
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

    fn write_all(&mut self, bytes: &[u8], deadline: Instant) -> Result<()> {
        let mut written = 0;
        while written < bytes.len() {
            match sys::write_no_sigpipe(self.control.as_fd(), &bytes[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let path = self.control_path.clone();
                        return Err(self.timeout_error("write a command", &path));
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

    fn read_reply(&mut self, deadline: Instant) -> Result<Reply> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((body, _)) = frame::split_frame(&buf)? {
                return frame::decode_body(body);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let path = self.ack_path.clone();
                return Err(self.timeout_error("receive the reply", &path));
            }
            let mut fds = [sys::PollFd::new(self.ack.as_fd(), libc::POLLIN)];
            sys::poll(&mut fds, Some(left))
                .map_err(|e| Error::io("wait for a reply on", &self.ack_path, e))?;
            if fds[0].revents == 0 {
                continue;
            }
            // Read no further than the end of the header or body being collected, so that
            // a reply is never confused with what follows it.
            let want = match buf.first_chunk::<{ frame::HEADER_LEN }>() {
                None => frame::HEADER_LEN - buf.len(),
                Some(h) => {
                    frame::HEADER_LEN + u32::from_le_bytes(*h).min(MAX_FRAME_LEN) as usize
                        - buf.len()
                }
            };
            let want = want.min(chunk.len());
            match (&self.ack).read(&mut chunk[..want]) {
                Ok(0) => return Err(self.runner_gone()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(Error::io("read a reply from", &self.ack_path, e)),
            }
        }
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
            reply: other,
        },
    }
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
