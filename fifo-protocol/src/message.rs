//! The messages exchanged over the FIFOs.
//!
//! Kept apart from framing and transport so that the vocabulary of the protocol, and the
//! version number that guards it, can be read (and reviewed for compatibility) on its own.
//! Every type here is serialized with rmp-serde's named representation, so fields travel
//! by name and enum variants by their Rust names: renaming one is a protocol change.

use serde::{Deserialize, Serialize};

/// The protocol version this crate speaks; integrations send it in
/// [`Command::SetVersion`].
///
/// Bump it whenever a message changes shape or meaning; a runner keeps answering older
/// versions it still understands (see [`MIN_SUPPORTED_VERSION`]).
pub const PROTOCOL_VERSION: u64 = 1;

/// The oldest protocol version a runner built from this crate accepts.
pub const MIN_SUPPORTED_VERSION: u64 = 1;

/// A command, sent by the integration (inside the benchmarked process) to the runner.
///
/// Every command is answered by exactly one [`Reply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Announces the protocol version the integration speaks. Answered with
    /// [`Reply::Ack`], or [`Reply::Err`] naming the supported range.
    SetVersion(u64),
    /// Names the integration (e.g. `"codspeed-criterion-compat"`) and its version string.
    SetIntegration {
        /// Integration name.
        name: String,
        /// Integration version, free-form (usually a semver string).
        version: String,
    },
    /// Says which benchmark process `pid` is running from now on.
    CurrentBenchmark {
        /// Process id of the benchmarked process.
        pid: u32,
        /// Benchmark identifier, e.g. `"benches/alloc.rs::vec_push"`.
        uri: String,
    },
    /// Asks the runner to start measuring.
    StartBenchmark,
    /// Asks the runner to stop measuring.
    StopBenchmark,
    /// Records a timing marker emitted by process `pid`.
    AddMarker {
        /// Process id of the process that emitted the marker.
        pid: u32,
        /// The marker and its timestamp.
        marker: Marker,
    },
    /// Liveness check; answered with [`Reply::Ack`].
    Ping,
    /// Asks which [`IntegrationMode`] the runner measures in; answered with
    /// [`Reply::IntegrationMode`].
    GetIntegrationMode,
    /// Transport-level resynchronization, answered with [`Reply::Synced`] carrying the same
    /// `nonce`; the runner handles it itself, before any [`Handler`](crate::Handler), and
    /// records nothing.
    ///
    /// Replies carry no request id, so a reply that arrives after its client gave up
    /// waiting would be taken for the answer to the next command. [`FifoClient`] therefore
    /// writes `Sync` in front of every command and discards every reply up to the matching
    /// `Synced`. Integrations that never time out may omit it.
    ///
    /// [`FifoClient`]: crate::FifoClient
    Sync {
        /// Arbitrary value, unique per exchange, echoed in [`Reply::Synced`].
        nonce: u64,
    },
}

impl Command {
    /// The variant's name, for messages and logs (e.g. `"AddMarker"`).
    pub fn name(&self) -> &'static str {
        match self {
            Command::SetVersion(_) => "SetVersion",
            Command::SetIntegration { .. } => "SetIntegration",
            Command::CurrentBenchmark { .. } => "CurrentBenchmark",
            Command::StartBenchmark => "StartBenchmark",
            Command::StopBenchmark => "StopBenchmark",
            Command::AddMarker { .. } => "AddMarker",
            Command::Ping => "Ping",
            Command::GetIntegrationMode => "GetIntegrationMode",
            Command::Sync { .. } => "Sync",
        }
    }
}

/// The runner's answer to one [`Command`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The command was carried out.
    Ack,
    /// The command was refused or could not be read; `message` says why.
    Err {
        /// Human-readable reason.
        message: String,
    },
    /// Answer to [`Command::GetIntegrationMode`].
    IntegrationMode(IntegrationMode),
    /// Answer to [`Command::Sync`], echoing its nonce.
    Synced {
        /// The nonce of the [`Command::Sync`] being answered.
        nonce: u64,
    },
}

/// What the runner measures, so an integration can adapt (e.g. run fewer iterations).
///
/// New modes may be added in later protocol versions; an integration built against an
/// older crate decodes them as [`IntegrationMode::Unknown`] instead of failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum IntegrationMode {
    /// Heap-memory profiling: memtrack's runner.
    Memory,
    /// A mode this version of the crate does not know. Never sent by a runner; only
    /// produced when decoding a newer runner's reply.
    #[serde(other)]
    Unknown,
}

/// A timing marker emitted by an integration, each with a `CLOCK_MONOTONIC` timestamp in
/// nanoseconds (see [`now_ns`](crate::now_ns)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Marker {
    /// One sample (a batch of iterations) starts.
    SampleStart {
        /// `CLOCK_MONOTONIC` time in ns.
        timestamp_ns: u64,
    },
    /// One sample ends.
    SampleEnd {
        /// `CLOCK_MONOTONIC` time in ns.
        timestamp_ns: u64,
    },
    /// The current benchmark (all its samples) starts.
    BenchmarkStart {
        /// `CLOCK_MONOTONIC` time in ns.
        timestamp_ns: u64,
    },
    /// The current benchmark ends.
    BenchmarkEnd {
        /// `CLOCK_MONOTONIC` time in ns.
        timestamp_ns: u64,
    },
}

impl Marker {
    /// The marker's `CLOCK_MONOTONIC` timestamp in ns.
    pub fn timestamp_ns(&self) -> u64 {
        match *self {
            Marker::SampleStart { timestamp_ns }
            | Marker::SampleEnd { timestamp_ns }
            | Marker::BenchmarkStart { timestamp_ns }
            | Marker::BenchmarkEnd { timestamp_ns } => timestamp_ns,
        }
    }
}
