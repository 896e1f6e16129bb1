//! The crate's single error type.
//!
//! Both endpoints, the frame codec and the marker file share one enum so that a caller
//! (the runner's CLI or a benchmark adapter) can report any failure with one `match` and
//! every message names what failed and with which argument (path, length, version).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::message::Reply;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A frame header announced a body longer than [`MAX_FRAME_LEN`](crate::MAX_FRAME_LEN)
    /// bytes. Raised from the 4 header bytes alone; the body is never allocated.
    #[error("frame body of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// Body length in bytes claimed by the header (or of the message being encoded).
        len: u64,
        /// The limit in bytes ([`MAX_FRAME_LEN`](crate::MAX_FRAME_LEN)).
        max: u32,
    },

    /// The input ended before a whole frame (4-byte header plus body) was available.
    #[error("incomplete frame: need {needed} bytes, only {available} available")]
    IncompleteFrame {
        /// Bytes the frame needs in total (header included), or 4 if even the header is cut.
        needed: usize,
        /// Bytes that were available.
        available: usize,
    },

    /// Bytes were left over after a complete frame or after the message inside a body.
    #[error("{extra} unexpected trailing bytes after a {used}-byte {what}")]
    TrailingBytes {
        /// `"frame"` or `"message"`.
        what: &'static str,
        /// Bytes that formed the frame or message.
        used: usize,
        /// Bytes left over.
        extra: usize,
    },

    /// A complete [`Command::Sync`](crate::Command::Sync) frame starts inside a frame: the
    /// frame's header was garbage whose claimed length swallowed the start of a client's
    /// exchange. The runner skips only up to the `Sync` frame.
    #[error("the {len}-byte frame is cut short by a Sync frame at byte {sync_at}")]
    CutShortBySync {
        /// Bytes the frame claimed, header included.
        len: usize,
        /// Offset, from the frame's first byte, at which the Sync frame starts.
        sync_at: usize,
    },

    /// A frame body is not valid MessagePack for the expected type.
    #[error("cannot decode {len}-byte frame body as a {what}: {source}")]
    Decode {
        /// Name of the expected type (`"Command"`, `"Reply"`).
        what: &'static str,
        /// Body length in bytes.
        len: usize,
        /// What rmp-serde reported.
        #[source]
        source: rmp_serde::decode::Error,
    },

    /// A value could not be encoded as MessagePack.
    #[error("cannot encode {what} as MessagePack: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// What rmp-serde reported.
        #[source]
        source: rmp_serde::encode::Error,
    },

    /// An I/O operation on a named file, FIFO or directory failed.
    #[error("cannot {op} {path}: {source}", path = path.display())]
    Io {
        /// What was being done, e.g. `"open control FIFO"`.
        op: &'static str,
        /// The file, FIFO or directory involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// An I/O operation on an anonymous stream (a `Read`/`Write` given by the caller,
    /// or the runner's internal wake-up pipe) failed.
    #[error("cannot {op}: {source}")]
    StreamIo {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The FIFO directory exists but no runner holds its FIFOs open: the runner exited
    /// or never started serving.
    #[error("no runner is serving {path}: {reason}", path = path.display())]
    NoRunner {
        /// The FIFO that was found without a runner.
        path: PathBuf,
        /// Why this was concluded.
        reason: &'static str,
    },

    /// [`FifoRunner::set_owner`](crate::FifoRunner::set_owner) was asked to hand the FIFO
    /// directory to a user who could not reach it: a directory above it denies that user
    /// search permission (e.g. root's `/run/user/0`).
    #[error(
        "user {uid} could not reach {dir}: {blocked_at} denies it search permission; create \
         the FIFO directory somewhere that user can traverse (FifoRunner::new_in)",
        dir = dir.display(),
        blocked_at = blocked_at.display()
    )]
    UnreachableForUser {
        /// The user the directory was to be handed to.
        uid: u32,
        /// The FIFO directory.
        dir: PathBuf,
        /// The first directory above it that `uid` may not search.
        blocked_at: PathBuf,
    },

    /// The runner did not take or answer a command in time.
    #[error("timed out after {timeout:?} waiting to {waiting_for} ({path})", path = path.display())]
    Timeout {
        /// What was being waited for.
        waiting_for: &'static str,
        /// The FIFO or directory involved.
        path: PathBuf,
        /// The configured timeout.
        timeout: Duration,
    },

    /// A `SetVersion` named a protocol version the runner does not speak.
    #[error(
        "protocol version {requested} is not supported; this runner supports versions {min}..={max}"
    )]
    UnsupportedVersion {
        /// The version the integration asked for.
        requested: u64,
        /// Oldest supported version.
        min: u64,
        /// Newest supported version.
        max: u64,
    },

    /// The runner answered a command with [`Reply::Err`].
    #[error("runner rejected {command}: {message}")]
    Rejected {
        /// The command's name, e.g. `"StartBenchmark"`.
        command: &'static str,
        /// The runner's message.
        message: String,
    },

    /// The runner answered with a reply that does not fit the command.
    #[error("unexpected reply to {command}: {reply:?}")]
    UnexpectedReply {
        /// The command's name.
        command: &'static str,
        /// What came back (boxed: a reply may carry a region's counters, and the error
        /// stays small).
        reply: Box<Reply>,
    },

    /// A marker file is truncated or is not valid MessagePack for its schema.
    #[error("{path} is truncated or corrupt: {source}", path = path.display())]
    CorruptMarkerFile {
        /// The file.
        path: PathBuf,
        /// What rmp-serde reported.
        #[source]
        source: rmp_serde::decode::Error,
    },

    /// A marker file was written by a newer memtrack than this one.
    #[error(
        "{path} has schema_version {found}, but this build reads schema versions up to {supported}",
        path = path.display()
    )]
    UnsupportedSchema {
        /// The file.
        path: PathBuf,
        /// The file's `schema_version`.
        found: u32,
        /// Newest schema version this build reads.
        supported: u32,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
