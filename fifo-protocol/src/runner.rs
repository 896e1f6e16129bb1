//! The runner's end: owns the private FIFO directory and answers commands.
//!
//! The runner (`memtrack run -- CMD`) is privileged and long-lived; the integration is
//! whatever code runs inside CMD. This module creates a fresh 0700 directory holding the
//! two FIFOs, tells the child where it is through [`FIFO_DIR_ENV`], and serves commands one
//! frame at a time. Nothing the child writes can stop it: malformed frames are answered
//! with [`Reply::Err`], after which the runner gets back in step at the next
//! [`Command::Sync`] frame (see [`FifoRunner`]'s "Malformed input"), and since the runner
//! itself holds both FIFOs open read-write it never sees end-of-file, so integrations may
//! come and go (and reopen) freely.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::ops::RangeInclusive;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clock::now_ns;
use crate::error::{Error, Result};
use crate::frame::{self, HEADER_LEN, MAX_FRAME_LEN, SyncSearch};
use crate::layout::{ACK_FIFO_NAME, CONTROL_FIFO_NAME, FIFO_DIR_ENV};
use crate::markers::{IntegrationInfo, MarkerEntry, MarkerResult};
use crate::message::{
    Command, IntegrationMode, MIN_SUPPORTED_VERSION, PROTOCOL_VERSION, RegionCounters, Reply,
    uri_problem,
};
use crate::sys;

/// How long, by default, a partially received frame may sit without new bytes before the
/// runner drops it and answers [`Reply::Err`] (1 s). Bytes the runner keeps because they
/// may begin a [`Command::Sync`] frame are dropped after the same time (see
/// [`FifoRunner`]'s "Malformed input").
pub const DEFAULT_PARTIAL_FRAME_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the runner keeps trying to write one reply into a full ack FIFO (1 s).
const REPLY_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Bytes read from the control FIFO per `read(2)` (64 KiB, one pipe buffer).
const READ_CHUNK: usize = 64 * 1024;

/// Lets the embedding measurement mode answer a command before the shared handling does.
///
/// [`Command::Sync`] is answered by the runner itself and never reaches a handler.
///
/// Return `Some(reply)` to answer the command yourself (the shared handling, including its
/// bookkeeping in [`MarkerResult`], is then skipped for that command), or `None` to let the
/// shared handling answer it. A handler that only needs a side effect (say, enabling
/// allocation tracking on [`Command::StartBenchmark`]) performs it and returns `None`.
///
/// Closures `FnMut(&Command) -> Option<Reply>` implement this trait.
pub trait Handler {
    /// Handles `cmd` or defers to the shared handling by returning `None`.
    fn handle(&mut self, cmd: &Command) -> Option<Reply>;

    /// The counters of the region that the last [`Command::StopWithCounters`] closed,
    /// taken by the shared handling right after [`handle`](Self::handle) deferred that
    /// command to it and it closed the measurement window: it answers
    /// [`Reply::Counters`] with them. `None` (the default, for modes that count nothing)
    /// makes it answer [`Reply::Err`] saying so; the window is closed all the same.
    fn region_counters(&mut self) -> Option<RegionCounters> {
        None
    }
}

impl<F: FnMut(&Command) -> Option<Reply>> Handler for F {
    fn handle(&mut self, cmd: &Command) -> Option<Reply> {
        self(cmd)
    }
}

/// A [`Handler`] that leaves every command to the shared handling.
#[derive(Debug, Clone, Copy, Default)]
pub struct SharedHandling;

impl Handler for SharedHandling {
    fn handle(&mut self, _cmd: &Command) -> Option<Reply> {
        None
    }
}

/// Stops a serving [`FifoRunner`] from another thread (e.g. once the command exited).
///
/// Cloneable and `Send`; stopping is idempotent.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    requested: Arc<AtomicBool>,
    wake: Arc<io::PipeWriter>,
}

impl ShutdownHandle {
    /// Asks the runner to stop; `serve` returns after the frame it is handling, if any.
    pub fn shutdown(&self) {
        if !self.requested.swap(true, Ordering::SeqCst) {
            // One byte wakes the runner's poll(); it is written at most once, so the pipe
            // can never fill. Failure is harmless: nothing is left to wake.
            let _ = (&*self.wake).write(&[1]);
        }
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

/// The runner's end of the protocol: the private FIFO directory and the serving loop.
///
/// Dropping it removes the directory and its FIFOs.
///
/// # Running the command as another user
///
/// memtrack's runner runs as root (it loads eBPF programs) but, when started through
/// `sudo`, runs the command as the invoking user (`SUDO_UID`/`SUDO_GID`). The FIFO
/// directory is created by root with mode 0700, so that user could not open it; hand it
/// over before starting the command:
///
/// ```no_run
/// # fn main() -> Result<(), fifo_protocol::Error> {
/// use std::os::unix::process::CommandExt;
/// use fifo_protocol::{FifoRunner, IntegrationMode};
///
/// let (uid, gid) = (1000, 1000); // from SUDO_UID / SUDO_GID
/// let runner = FifoRunner::new(IntegrationMode::Memory)?;
/// runner.set_owner(uid, gid)?;
/// let (name, value) = runner.env_var();
/// let mut command = std::process::Command::new("cargo");
/// command.args(["bench"]).env(name, value).uid(uid).gid(gid);
/// # Ok(())
/// # }
/// ```
///
/// [`set_owner`](Self::set_owner) makes the directory and both FIFOs that user's (modes
/// stay 0700 / 0600, so other users remain locked out and root keeps access), and refuses
/// with [`Error::UnreachableForUser`] if a directory above the FIFO directory would keep
/// the user from reaching it. [`new`](Self::new) never picks such a place for a runner
/// running as root: it skips root's own `$XDG_RUNTIME_DIR` (`/run/user/0`, mode 0700) and
/// uses the world-traversable temporary directory instead. Inside the command,
/// [`FifoClient::from_env`](crate::FifoClient::from_env) then connects as usual.
///
/// # Malformed input
///
/// Well-behaved writers take turns, but anything that can open the control FIFO can write
/// garbage into it at any time, e.g. right in front of a client's exchange. The runner
/// reads the stream *in step*, one frame after the other, and uses [`Command::Sync`]
/// frames, which start every [`FifoClient`](crate::FifoClient) exchange, to get back in
/// step after garbage. A `Sync` frame, as searched for ([`frame::find_sync`]), is a header
/// announcing 1 to [`frame::MAX_SYNC_BODY_LEN`] bytes followed by a body that decodes as
/// exactly one `Sync` command.
///
/// The runner rejects the frame in front of it, answering exactly one [`Reply::Err`] (and
/// logging one line), in these cases:
///
/// 1. **The header announces more than [`MAX_FRAME_LEN`] bytes** ([`Error::FrameTooLarge`]).
///    Nothing is allocated for it. The frame's end is unknown, so the runner
///    *resynchronises*: it skips bytes, without replying to them, up to the first complete
///    `Sync` frame in what it has read, and reads in step from there. Bytes at the end of
///    the buffer that may still turn out to start a `Sync` frame are kept until more bytes
///    decide (or the partial-frame timeout passes). Once nothing buffered can start one,
///    it is all dropped and the next bytes to arrive are read in step again.
/// 2. **A complete `Sync` frame starts inside the frame**, after its first byte
///    ([`Error::CutShortBySync`]), whether the frame is complete or not and whether its
///    body decodes or not: its header was garbage (or a frame cut short) whose claimed
///    length swallowed the start of a client's exchange. The runner skips only the bytes
///    before the `Sync` frame, without waiting for the claimed length to arrive.
/// 3. **A complete frame's body is not exactly one [`Command`]** (invalid MessagePack, not
///    a command, trailing bytes, empty): its header says where it ends, and the runner
///    skips it as a whole, so a writer's next frame is still read. If the frame's last
///    bytes might begin a `Sync` frame (case 2), the runner first waits for the bytes that
///    decide, at most for the partial-frame timeout.
/// 4. **No byte arrives for the partial-frame timeout** ([`DEFAULT_PARTIAL_FRAME_TIMEOUT`],
///    [`set_partial_frame_timeout`](Self::set_partial_frame_timeout)) while a frame or
///    header is incomplete ([`Error::IncompleteFrame`]): it is dropped. (Bytes kept while
///    resynchronising are dropped then too, without a reply.)
///
/// Any other frame is a well-formed command: it is executed and answered exactly once,
/// at once. (Bytes at its end that might begin a `Sync` frame do not hold it back: a
/// client writes each exchange, up to `PIPE_BUF` bytes, with one atomic `write`, so its
/// `Sync` frame is never seen in part.) Case 2 never hits a frame from a well-behaved
/// writer: a `Sync` frame cannot start inside a command's string fields (its header,
/// `n 00 00 00` with `n` ≤ 64, followed by a map marker, `≥ 0x80`, is not UTF-8), nor
/// inside its numbers, save for contrived `u64` values whose bytes spell one out (for a
/// client's random `Sync` nonce, the odds are below 2^-40).
///
/// So a burst of garbage gets one `Err` per frame rejected, never none:
///
/// - exactly one when it starts with an implausible header (such as `ff ff ff ff`, or
///   text), reaches the runner in one read (as a `write` of up to `PIPE_BUF` bytes does),
///   and nothing in it reads as a `Sync` frame, even completed by the bytes that follow;
/// - one per frame when it parses as frames with plausible headers (each skipped whole);
/// - one more per read when it arrives over several reads and the runner had already
///   dropped what came before.
///
/// Clients skip these replies ([`Command::Sync`]), and a client's command written right
/// behind the garbage, even in the same pipe buffer, is answered normally. What cannot be
/// told from garbage is lost with it: a command *not* preceded by a `Sync` frame gets no
/// reply if it arrives while the runner resynchronises or inside a garbage frame's claimed
/// length (write a `Sync` frame first, as `FifoClient` does).
pub struct FifoRunner {
    dir: tempfile::TempDir,
    control_path: PathBuf,
    ack_path: PathBuf,
    /// Opened read-write and non-blocking: the runner is always a writer too, so it never
    /// sees end-of-file when an integration closes its end.
    control: File,
    /// Opened read-write and non-blocking: writing a reply never blocks on open.
    ack: File,
    wake_rx: io::PipeReader,
    shutdown: ShutdownHandle,
    mode: IntegrationMode,
    partial_frame_timeout: Duration,
    logger: Box<dyn FnMut(&str) + Send>,
    result: MarkerResult,
    /// Bytes read from the control FIFO and not yet consumed; starts at a frame boundary
    /// unless `resyncing`.
    buf: Vec<u8>,
    /// After an invalid frame header: looking for the next Sync frame in `buf`.
    resyncing: bool,
    /// Offsets `1..scanned_to` of `buf` are known not to start a Sync frame (reset
    /// whenever bytes are consumed), so a frame arriving in pieces is searched once.
    scanned_to: usize,
}

impl fmt::Debug for FifoRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FifoRunner")
            .field("dir", &self.dir.path())
            .field("mode", &self.mode)
            .field("partial_frame_timeout", &self.partial_frame_timeout)
            .field("result", &self.result)
            .finish_non_exhaustive()
    }
}

impl FifoRunner {
    /// Creates the FIFO directory for a runner measuring in `mode`: under
    /// `$XDG_RUNTIME_DIR` when that names an existing directory owned by the effective
    /// user and that user is not root, else under the system temporary directory.
    ///
    /// A runner running as root skips `$XDG_RUNTIME_DIR`: root's own (`/run/user/0`) is
    /// closed to everyone else, so the directory could not be handed to the user the
    /// command runs as ([`set_owner`](Self::set_owner)), and one owned by another user
    /// (kept by `sudo -E`) would let that user move paths under root's feet.
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory or FIFO that could not be created or opened.
    pub fn new(mode: IntegrationMode) -> Result<Self> {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .filter(|p| euid != 0 && fs::metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == euid));
        match runtime_dir {
            Some(base) => {
                Self::new_in(mode, &base).or_else(|_| Self::new_in(mode, &std::env::temp_dir()))
            }
            None => Self::new_in(mode, &std::env::temp_dir()),
        }
    }

    /// Creates the FIFO directory, `memtrack-fifo-{pid}-XXXXXX` (this process's pid, then
    /// random), inside `base`, after removing the directories there that runners which
    /// died left behind.
    ///
    /// The directory is created with mode 0700 (no window with wider permissions), the
    /// FIFOs with mode 0600; both are set explicitly afterwards so the umask cannot leave
    /// them unusable. The runner holds an exclusive `flock` on its control FIFO while it
    /// lives. A directory in `base` is removed as stale only if its name has that form
    /// with the pid of no living process, it is a real directory (not a symbolic link)
    /// of the effective user (any user's, for root, which hands its directories over),
    /// it holds nothing but the two FIFOs, and nobody holds the control FIFO's lock;
    /// nothing is followed and nothing else is removed.
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory or FIFO that could not be created or opened.
    pub fn new_in(mode: IntegrationMode, base: &Path) -> Result<Self> {
        crate::stale::remove_stale(base);
        let dir = tempfile::Builder::new()
            .prefix(&crate::stale::own_prefix())
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(base)
            .map_err(|e| Error::io("create a private directory in", base, e))?;
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io("set mode 0700 on", dir.path(), e))?;

        let control_path = dir.path().join(CONTROL_FIFO_NAME);
        let ack_path = dir.path().join(ACK_FIFO_NAME);
        for path in [&control_path, &ack_path] {
            sys::mkfifo(path, 0o600).map_err(|e| Error::io("create FIFO", path, e))?;
            fs::set_permissions(path, fs::Permissions::from_mode(0o600))
                .map_err(|e| Error::io("set mode 0600 on", path, e))?;
        }
        let open_rw = |path: &Path, op| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(path)
                .map_err(|e| Error::io(op, path, e))
        };
        let control = open_rw(&control_path, "open control FIFO")?;
        // Held while this runner lives: tells the next runner this directory is not stale.
        // The FIFO is new and ours, so nobody else can hold its lock yet.
        crate::stale::lock(&control).map_err(|e| Error::io("lock", &control_path, e.into()))?;
        let ack = open_rw(&ack_path, "open ack FIFO")?;

        let (wake_rx, wake_tx) = io::pipe().map_err(|source| Error::StreamIo {
            op: "create the shutdown wake-up pipe",
            source,
        })?;
        sys::set_nonblocking(wake_tx.as_fd(), true).map_err(|source| Error::StreamIo {
            op: "make the shutdown wake-up pipe non-blocking",
            source,
        })?;

        Ok(FifoRunner {
            dir,
            control_path,
            ack_path,
            control,
            ack,
            wake_rx,
            shutdown: ShutdownHandle {
                requested: Arc::new(AtomicBool::new(false)),
                wake: Arc::new(wake_tx),
            },
            mode,
            partial_frame_timeout: DEFAULT_PARTIAL_FRAME_TIMEOUT,
            logger: Box::new(|msg| eprintln!("memtrack: fifo runner: {msg}")),
            result: MarkerResult::new(),
            buf: Vec::new(),
            resyncing: false,
            scanned_to: 0,
        })
    }

    /// The `(name, value)` pair to set in the command's environment, e.g.
    /// `command.env(name, value)`: [`FIFO_DIR_ENV`] and the directory's path.
    pub fn env_var(&self) -> (&'static str, OsString) {
        (FIFO_DIR_ENV, self.dir.path().as_os_str().to_owned())
    }

    /// The private FIFO directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Path of the FIFO integrations write commands to.
    pub fn control_path(&self) -> &Path {
        &self.control_path
    }

    /// Path of the FIFO the runner writes replies to.
    pub fn ack_path(&self) -> &Path {
        &self.ack_path
    }

    /// The mode reported to [`Command::GetIntegrationMode`].
    pub fn mode(&self) -> IntegrationMode {
        self.mode
    }

    /// Protocol versions accepted in [`Command::SetVersion`]:
    /// [`MIN_SUPPORTED_VERSION`]`..=`[`PROTOCOL_VERSION`].
    pub fn supported_versions(&self) -> RangeInclusive<u64> {
        MIN_SUPPORTED_VERSION..=PROTOCOL_VERSION
    }

    /// Sets how long a partially received frame may go without new bytes before it is
    /// dropped and answered with [`Reply::Err`] (default
    /// [`DEFAULT_PARTIAL_FRAME_TIMEOUT`]); bytes kept because they may begin a
    /// [`Command::Sync`] frame are given the same time.
    pub fn set_partial_frame_timeout(&mut self, timeout: Duration) {
        self.partial_frame_timeout = timeout;
    }

    /// Replaces where the runner reports malformed frames and undeliverable replies
    /// (default: one line on stderr each).
    pub fn set_logger(&mut self, logger: impl FnMut(&str) + Send + 'static) {
        self.logger = Box::new(logger);
    }

    /// Hands the directory and both FIFOs to user `uid` / group `gid`, for a runner that
    /// runs the command as another (unprivileged) user, e.g. root running it as
    /// `SUDO_UID`/`SUDO_GID` (see [Running the command as another user](Self#running-the-command-as-another-user)).
    /// Call it before starting the command. The modes stay 0700 / 0600, so only that user
    /// (and root) can reach the FIFOs. Ownership is changed through descriptors (the
    /// runner's own for the FIFOs, one opened with `O_NOFOLLOW` for the directory), never
    /// by following a path that could have been swapped for a symbolic link.
    ///
    /// # Errors
    /// [`Error::UnreachableForUser`] if a directory above the FIFO directory denies `uid`
    /// search permission, judged from its mode bits, owner and group (a refusal only
    /// when no supplementary group or ACL could grant it); nothing is changed then.
    /// [`Error::Io`] naming the path whose owner could not be changed.
    pub fn set_owner(&self, uid: u32, gid: u32) -> Result<()> {
        let dir = self.dir.path();
        if let Some(blocked_at) = search_denied_above(dir, uid, gid) {
            return Err(Error::UnreachableForUser {
                uid,
                dir: dir.to_owned(),
                blocked_at,
            });
        }
        let dir_fd = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir)
            .map_err(|e| Error::io("open", dir, e))?;
        for (file, path) in [
            (&dir_fd, dir),
            (&self.control, self.control_path.as_path()),
            (&self.ack, self.ack_path.as_path()),
        ] {
            std::os::unix::fs::fchown(file, Some(uid), Some(gid))
                .map_err(|e| Error::io("change the owner of", path, e))?;
        }
        Ok(())
    }

    /// A handle that makes [`serve`](Self::serve) return, usable from any thread.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// What the shared handling recorded so far.
    pub fn marker_result(&self) -> &MarkerResult {
        &self.result
    }

    /// Consumes the runner (removing its directory) and returns what it recorded.
    pub fn into_marker_result(self) -> MarkerResult {
        self.result
    }

    /// Serves commands until [`ShutdownHandle::shutdown`] is called, giving `handler` the
    /// first say on every command.
    ///
    /// Malformed input never ends the loop: it is answered with [`Reply::Err`], reported
    /// to the logger, and the runner gets back in step with the stream, as described in
    /// [Malformed input](Self#malformed-input).
    ///
    /// Once shutdown is requested, what is already in the control FIFO (one pipe buffer,
    /// 64 KiB, at most: the rest of a writer's bytes waited in its `write`) is still read
    /// and handled, frames left incomplete are rejected, and then it returns: whatever the
    /// command wrote before it exited is accounted for.
    ///
    /// # Errors
    /// Only when waiting on or reading the control FIFO itself fails ([`Error::Io`]).
    pub fn serve<H: Handler + ?Sized>(&mut self, handler: &mut H) -> Result<()> {
        // When the last byte arrived, while bytes are buffered that could not be acted on.
        let mut partial_since: Option<Instant> = None;
        loop {
            if self.shutdown.is_requested() {
                self.read_available()?;
                self.process_buffered(handler, true);
                return Ok(());
            }
            let wait = partial_since
                .map(|since| self.partial_frame_timeout.saturating_sub(since.elapsed()));
            let mut fds = [
                sys::PollFd::new(self.control.as_fd(), libc::POLLIN),
                sys::PollFd::new(self.wake_rx.as_fd(), libc::POLLIN),
            ];
            sys::poll(&mut fds, wait)
                .map_err(|e| Error::io("wait for commands on", &self.control_path, e))?;
            let control_ready = fds[0].revents != 0;
            if fds[1].revents != 0 {
                // Woken by shutdown(); the loop head sees the flag.
                continue;
            }

            if control_ready && self.read_available()? {
                partial_since = Some(Instant::now());
            }
            // Quiet for the whole timeout: what is left will not be completed.
            let stale = partial_since.is_some_and(|t| t.elapsed() >= self.partial_frame_timeout);
            self.process_buffered(handler, stale);
            if self.buf.is_empty() {
                partial_since = None;
            }
        }
    }

    /// Moves the runner to a background thread serving with `handler`.
    ///
    /// # Errors
    /// [`Error::StreamIo`] if the thread cannot be spawned.
    pub fn spawn<H: Handler + Send + 'static>(self, handler: H) -> Result<RunnerThread<H>> {
        let shutdown = self.shutdown_handle();
        let env = self.env_var();
        let dir = self.dir().to_owned();
        let join = std::thread::Builder::new()
            .name("memtrack-fifo".to_owned())
            .spawn(move || {
                let mut runner = self;
                let mut handler = handler;
                let outcome = runner.serve(&mut handler);
                (runner, handler, outcome)
            })
            .map_err(|source| Error::StreamIo {
                op: "spawn the runner thread",
                source,
            })?;
        Ok(RunnerThread {
            join,
            shutdown,
            env,
            dir,
        })
    }

    /// Reads everything currently available from the control FIFO into the buffer.
    /// Returns whether any byte arrived.
    fn read_available(&mut self) -> Result<bool> {
        let mut got_any = false;
        // Never hold more than one maximal frame, plus room to judge a Sync frame starting
        // at its last byte, plus one chunk: complete frames are consumed as soon as they
        // are buffered (or judged), oversized ones rejected from their header, and while
        // resynchronising only what may start a Sync frame is kept.
        let limit = HEADER_LEN + MAX_FRAME_LEN as usize + HEADER_LEN + frame::MAX_SYNC_BODY_LEN;
        while self.buf.len() < limit {
            let start = self.buf.len();
            self.buf.resize(start + READ_CHUNK, 0);
            let res = (&self.control).read(&mut self.buf[start..]);
            let n = *res.as_ref().unwrap_or(&0);
            self.buf.truncate(start + n);
            match res {
                Ok(0) => break, // unreachable while we hold a write end, but harmless
                Ok(_) => got_any = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read commands from", &self.control_path, e)),
            }
        }
        Ok(got_any)
    }

    /// Drops the first `n` buffered bytes.
    fn consume(&mut self, n: usize) {
        self.buf.drain(..n);
        self.scanned_to = 0;
    }

    /// Answers every complete frame in the buffer, rejects malformed ones and gets back in
    /// step after them (see "Malformed input" on [`FifoRunner`]).
    ///
    /// `stale`: no byte arrived for the partial-frame timeout, so whatever is still
    /// incomplete or undecided will not be completed; it is rejected or dropped, and the
    /// buffer is left empty.
    fn process_buffered<H: Handler + ?Sized>(&mut self, handler: &mut H, stale: bool) {
        loop {
            if self.resyncing {
                match frame::find_sync(&self.buf, 0..self.buf.len()) {
                    SyncSearch::Found(at) => {
                        self.consume(at);
                        self.resyncing = false;
                    }
                    SyncSearch::Undecided(at) if !stale => {
                        // A Sync frame may be arriving: keep it, drop what precedes it.
                        self.consume(at);
                        return;
                    }
                    SyncSearch::Undecided(_) | SyncSearch::Absent => {
                        // Nothing here can be a Sync frame: the bytes arriving next are
                        // read in step again.
                        self.buf.clear();
                        self.scanned_to = 0;
                        self.resyncing = false;
                        return;
                    }
                }
            }

            let Some(header) = self.buf.first_chunk::<HEADER_LEN>() else {
                if stale && !self.buf.is_empty() {
                    self.reject_incomplete(HEADER_LEN);
                }
                return;
            };
            let end = match frame::body_len(*header) {
                Ok(len) => HEADER_LEN + len,
                Err(err) => {
                    // The frame's end is unknown: skip to the next Sync frame.
                    self.reject(
                        &err,
                        "invalid frame header; skipping input up to the next Sync frame",
                    );
                    self.resyncing = true;
                    continue;
                }
            };

            // A complete Sync frame starting inside this frame (complete or not, valid or
            // not) means its header was garbage whose claimed length swallowed the start
            // of a client's exchange: resume at the Sync frame.
            let available = self.buf.len().min(end);
            let undecided = match frame::find_sync(&self.buf, self.scanned_to.max(1)..available) {
                SyncSearch::Found(at) => {
                    let err = Error::CutShortBySync {
                        len: end,
                        sync_at: at,
                    };
                    self.reject(&err, "skipped garbage up to a Sync frame");
                    self.consume(at);
                    continue;
                }
                SyncSearch::Undecided(at) => {
                    self.scanned_to = at;
                    true
                }
                SyncSearch::Absent => {
                    self.scanned_to = available;
                    false
                }
            };

            let Some(body) = self.buf.get(HEADER_LEN..end) else {
                if stale {
                    self.reject_incomplete(end);
                }
                return;
            };
            match frame::decode_body::<Command>(body) {
                // A candidate still undecided does not hold a well-formed command back: a
                // client's Sync frame arrives whole, in the same write as what follows it.
                Ok(cmd) => {
                    self.consume(end);
                    self.answer(handler, cmd);
                }
                // Malformed: wait for the bytes that tell whether a Sync frame starts
                // inside it (it costs no well-formed command anything) ...
                Err(_) if undecided && !stale => return,
                // ... else skip it whole: its length says where it ends.
                Err(err) => {
                    self.reject(&err, "skipped a malformed frame");
                    self.consume(end);
                }
            }
        }
    }

    /// Answers one well-formed command.
    ///
    /// A command naming a uri that [`uri_problem`] refuses is answered with
    /// [`Reply::Err`] before the handler sees it, so it changes nothing.
    fn answer<H: Handler + ?Sized>(&mut self, handler: &mut H, cmd: Command) {
        let refused_uri = match &cmd {
            Command::CurrentBenchmark { uri, .. } | Command::NameRegion { uri, .. } => {
                uri_problem(uri)
            }
            _ => None,
        };
        let reply = match cmd {
            // Transport-level: never the handler's business.
            Command::Sync { nonce } => Reply::Synced { nonce },
            _ if refused_uri.is_some() => Reply::Err {
                message: refused_uri.unwrap_or_default(),
            },
            _ => match handler.handle(&cmd) {
                Some(reply) => reply,
                None => self.handle_shared(handler, &cmd),
            },
        };
        self.send_reply(&reply);
    }

    /// Rejects the incomplete frame that fills the buffer, of `needed` bytes in all, after
    /// the partial-frame timeout, and drops it.
    fn reject_incomplete(&mut self, needed: usize) {
        let err = Error::IncompleteFrame {
            needed,
            available: self.buf.len(),
        };
        self.reject(
            &err,
            "dropped an incomplete frame after the partial-frame timeout",
        );
        self.buf.clear();
        self.scanned_to = 0;
    }

    /// The handling common to every mode.
    fn handle_shared<H: Handler + ?Sized>(&mut self, handler: &mut H, cmd: &Command) -> Reply {
        let ack_or_err = |r: std::result::Result<(), String>| match r {
            Ok(()) => Reply::Ack,
            Err(message) => Reply::Err { message },
        };
        match cmd {
            Command::SetVersion(version) => {
                let supported = self.supported_versions();
                if supported.contains(version) {
                    self.result.protocol_version = Some(*version);
                    Reply::Ack
                } else {
                    let err = Error::UnsupportedVersion {
                        requested: *version,
                        min: *supported.start(),
                        max: *supported.end(),
                    };
                    Reply::Err {
                        message: err.to_string(),
                    }
                }
            }
            Command::SetIntegration { name, version } => {
                self.result.integration = Some(IntegrationInfo {
                    name: name.clone(),
                    version: version.clone(),
                });
                Reply::Ack
            }
            Command::CurrentBenchmark { pid, uri } => {
                self.result.benchmarks.push(crate::markers::BenchmarkSpan {
                    pid: *pid,
                    uri: uri.clone(),
                    since_ns: now_ns(),
                });
                Reply::Ack
            }
            Command::StartBenchmark => ack_or_err(self.result.start_measurement(now_ns())),
            Command::StopBenchmark => ack_or_err(self.result.stop_measurement(now_ns())),
            Command::StopWithCounters => match self.result.stop_measurement(now_ns()) {
                Ok(()) => match handler.region_counters() {
                    Some(counters) => Reply::Counters(counters),
                    None => Reply::Err {
                        message: "the measurement stopped, but this runner keeps no counters"
                            .to_owned(),
                    },
                },
                Err(message) => Reply::Err { message },
            },
            Command::NameRegion { .. } => Reply::Err {
                message: "this runner keeps no regions to name".to_owned(),
            },
            Command::AddMarker { pid, marker } => {
                self.result.markers.push(MarkerEntry {
                    pid: *pid,
                    marker: *marker,
                });
                Reply::Ack
            }
            Command::Ping => Reply::Ack,
            Command::GetIntegrationMode => Reply::IntegrationMode(self.mode),
            Command::Sync { nonce } => Reply::Synced { nonce: *nonce },
        }
    }

    /// Logs `err` and answers it with [`Reply::Err`].
    fn reject(&mut self, err: &Error, what: &str) {
        (self.logger)(&format!("{what}: {err}"));
        self.send_reply(&Reply::Err {
            message: err.to_string(),
        });
    }

    /// Writes one reply frame into the ack FIFO; failures are logged, never fatal.
    fn send_reply(&mut self, reply: &Reply) {
        let frame = match frame::encode_frame(reply) {
            Ok(frame) => frame,
            Err(err) => {
                (self.logger)(&format!("cannot encode reply {reply:?}: {err}"));
                let fallback = Reply::Err {
                    message: format!("the runner could not encode its reply: {err}"),
                };
                match frame::encode_frame(&fallback) {
                    Ok(frame) => frame,
                    Err(_) => return,
                }
            }
        };
        if let Err(err) = self.write_reply(&frame) {
            (self.logger)(&format!("dropped reply {reply:?}: {err}"));
        }
    }

    fn write_reply(&mut self, frame: &[u8]) -> Result<()> {
        let deadline = Instant::now() + REPLY_WRITE_TIMEOUT;
        let mut written = 0;
        let mut drained = false;
        while written < frame.len() {
            match (&self.ack).write(&frame[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !drained && written == 0 {
                        // The pipe is full of replies nobody read (integrations that gave
                        // up waiting); clients serialize on a lock and each waits for its
                        // own reply, so everything queued is stale.
                        drained = true;
                        let mut sink = [0u8; 4096];
                        while matches!((&self.ack).read(&mut sink), Ok(n) if n > 0) {}
                        continue;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::Timeout {
                            waiting_for: "write a reply",
                            path: self.ack_path.clone(),
                            timeout: REPLY_WRITE_TIMEOUT,
                        });
                    }
                    let mut fds = [sys::PollFd::new(self.ack.as_fd(), libc::POLLOUT)];
                    sys::poll(&mut fds, Some(left))
                        .map_err(|e| Error::io("wait to write a reply to", &self.ack_path, e))?;
                }
                Err(e) => return Err(Error::io("write a reply to", &self.ack_path, e)),
            }
        }
        Ok(())
    }
}

/// A [`FifoRunner`] serving on a background thread; see [`FifoRunner::spawn`].
#[derive(Debug)]
pub struct RunnerThread<H> {
    join: JoinHandle<(FifoRunner, H, Result<()>)>,
    shutdown: ShutdownHandle,
    env: (&'static str, OsString),
    dir: PathBuf,
}

impl<H> RunnerThread<H> {
    /// Same as [`FifoRunner::env_var`].
    pub fn env_var(&self) -> (&'static str, OsString) {
        self.env.clone()
    }

    /// The private FIFO directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A handle that stops the thread without consuming this value.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Stops serving, waits for the thread, removes the FIFO directory and returns what was
    /// recorded together with the handler.
    ///
    /// # Errors
    /// The error that ended [`FifoRunner::serve`], if it failed. A panic in the handler is
    /// resumed on the calling thread.
    pub fn stop(self) -> Result<(MarkerResult, H)> {
        self.shutdown.shutdown();
        let (runner, handler, outcome) = match self.join.join() {
            Ok(parts) => parts,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        outcome?;
        Ok((runner.into_marker_result(), handler))
    }
}

/// The first directory above `dir` (its parent, grandparent, ...) that user `uid`, whose
/// primary group is `gid`, certainly may not search, so could not reach `dir` through;
/// `None` if every one may or might let it through.
///
/// Judged from mode bits, owner and group only, and conservative: a user that is not the
/// owner might belong to the group through a supplementary group, and ACL entries are
/// bounded by the group bits (the ACL mask), so access is denied for certain only when
/// the bits that could apply all lack `x`. Root (`uid` 0) may search everything. Both the
/// path as given and its canonical form are checked, since a symbolic link on the way is
/// traversed through the directories of both.
fn search_denied_above(dir: &Path, uid: u32, gid: u32) -> Option<PathBuf> {
    if uid == 0 {
        return None;
    }
    let canonical = fs::canonicalize(dir).ok();
    let paths = std::iter::once(dir).chain(canonical.as_deref());
    for path in paths {
        for ancestor in path.ancestors().skip(1) {
            if ancestor.as_os_str().is_empty() {
                continue; // the working directory of a relative path: not ours to judge
            }
            let Ok(meta) = fs::metadata(ancestor) else {
                continue;
            };
            let mode = meta.mode();
            let denied = if meta.uid() == uid {
                mode & 0o100 == 0
            } else if meta.gid() == gid {
                mode & 0o010 == 0
            } else {
                mode & 0o011 == 0
            };
            if denied {
                return Some(ancestor.to_owned());
            }
        }
    }
    None
}
