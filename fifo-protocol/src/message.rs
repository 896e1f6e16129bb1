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
///
/// | version | adds |
/// |---|---|
/// | 1 | everything not listed below |
/// | 2 | [`Command::StopWithCounters`] (answered with [`Reply::Counters`]) and [`Command::NameRegion`] |
///
/// Version 2 only adds commands, so a version-1 integration works unchanged with a
/// version-2 runner. A version-2 integration learns that a runner is older from the
/// [`Reply::Err`] to its [`Command::SetVersion`]`(2)`, which names the versions that runner
/// supports; it must announce its version before it sends a version-2 command (a runner
/// of version 1 answers those with an error saying it cannot decode them).
pub const PROTOCOL_VERSION: u64 = 2;

/// The oldest protocol version a runner built from this crate accepts.
pub const MIN_SUPPORTED_VERSION: u64 = 1;

/// Longest benchmark uri a runner accepts, in bytes of UTF-8 (4,096), in
/// [`Command::CurrentBenchmark`] and [`Command::NameRegion`].
pub const MAX_URI_LEN: usize = 4096;

/// Why a runner refuses `uri` as a benchmark uri, or `None` if it accepts it: it must be
/// 1 to [`MAX_URI_LEN`] bytes long and hold no control character (no newline, tab, NUL,
/// ...: a uri is one line in every report). The runner checks this before anything else
/// handles the command, so a refused uri changes nothing.
pub fn uri_problem(uri: &str) -> Option<String> {
    if uri.is_empty() {
        return Some("the benchmark uri is empty".to_owned());
    }
    if uri.len() > MAX_URI_LEN {
        return Some(format!(
            "the benchmark uri is {} bytes long, more than the limit of {MAX_URI_LEN} bytes",
            uri.len()
        ));
    }
    let (at, c) = uri.char_indices().find(|(_, c)| c.is_control())?;
    Some(format!(
        "the benchmark uri {uri:?} holds a control character ({c:?} at byte {at}); a uri \
         is one line of text"
    ))
}

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
    // Variants added later go last: other encoders may name variants by index.
    /// Protocol version 2: [`StopBenchmark`](Command::StopBenchmark), answered with the
    /// counters of the region it closed ([`Reply::Counters`]) instead of [`Reply::Ack`].
    /// Refused like `StopBenchmark` when no measurement is running.
    StopWithCounters,
    /// Protocol version 2: renames the closed region `region` (the id in its
    /// [`RegionCounters::region`]) of process `pid` to `uri`, for harnesses that learn a
    /// benchmark's name only after running it (Google Benchmark's memory manager).
    /// Answered with [`Reply::Ack`], or [`Reply::Err`] when there is no such region of
    /// that process or `uri` is refused ([`uri_problem`]).
    NameRegion {
        /// Process id of the process that ran the region.
        pid: u32,
        /// The region's id, from [`RegionCounters::region`].
        region: u64,
        /// The benchmark's uri from now on.
        uri: String,
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
            Command::StopWithCounters => "StopWithCounters",
            Command::NameRegion { .. } => "NameRegion",
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
    /// Protocol version 2: answer to [`Command::StopWithCounters`], the counters of the
    /// region it closed.
    Counters(RegionCounters),
}

/// What memtrack counted in one benchmark region, as the runner keeps it (and writes it
/// into the process's result file): the calls made by the whole process between the
/// runner's handling of `StartBenchmark` and of `StopWithCounters`. Sizes are requested
/// sizes in bytes, the rest plain counts; the counting convention is valgrind DHAT's
/// (see memtrack's `Stats`).
///
/// Holds no heap memory, so a client decodes it without allocating. New counters may be
/// added (it is `#[non_exhaustive]`): make one with `RegionCounters::default()`. Missing
/// fields decode as 0 and unknown ones are ignored, so runners and clients of different
/// builds still understand each other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct RegionCounters {
    /// The region's id for [`Command::NameRegion`]: unique among the regions of one run
    /// (the runner's count of regions closed before it).
    pub region: u64,
    /// Blocks handed out (successful allocating calls; a growing or shrinking `realloc`
    /// is one block handed out and one released).
    pub alloc_calls: u64,
    /// Blocks released (`free` of a block memtrack saw allocated, `realloc`'s release).
    pub free_calls: u64,
    /// Bytes of the blocks handed out.
    pub bytes_allocated: u64,
    /// Bytes of the blocks released (only blocks allocated inside the region).
    pub bytes_freed: u64,
    /// Blocks handed out inside the region and still live at its end.
    pub live_blocks: u64,
    /// Bytes of those blocks: the region's net heap growth (`bytes_allocated -
    /// bytes_freed`).
    pub live_bytes: u64,
    /// Highest `live_bytes` at any instant inside the region, in bytes (blocks allocated
    /// before the region do not count).
    pub peak_live_bytes: u64,
    /// Allocation calls that failed (returned NULL); they hand out nothing.
    pub failed_allocs: u64,
    /// Releases of blocks not allocated inside the region (allocated before it, or freed
    /// twice); never subtracted from the numbers above.
    pub unmatched_frees: u64,
    /// Events that could not be accounted exactly; 0 means every number above is exact.
    pub lost_events: u64,
}

/// A [`Reply`] decoded in place, its text borrowed from the frame it was read from: what
/// [`FifoClient::send_with`](crate::FifoClient::send_with) hands its callback, so that a
/// client can read any reply, a refusal's message included, without allocating.
///
/// It decodes exactly the bytes a [`Reply`] encodes to (same variant and field names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ReplyRef<'a> {
    /// [`Reply::Ack`].
    Ack,
    /// [`Reply::Err`].
    Err {
        /// Human-readable reason.
        #[serde(borrow)]
        message: &'a str,
    },
    /// [`Reply::IntegrationMode`].
    IntegrationMode(IntegrationMode),
    /// [`Reply::Synced`].
    Synced {
        /// The nonce of the [`Command::Sync`] being answered.
        nonce: u64,
    },
    /// [`Reply::Counters`].
    Counters(RegionCounters),
}

impl ReplyRef<'_> {
    /// The owned [`Reply`] (allocates for [`ReplyRef::Err`]'s message).
    pub fn to_reply(&self) -> Reply {
        match *self {
            ReplyRef::Ack => Reply::Ack,
            ReplyRef::Err { message } => Reply::Err {
                message: message.to_owned(),
            },
            ReplyRef::IntegrationMode(mode) => Reply::IntegrationMode(mode),
            ReplyRef::Synced { nonce } => Reply::Synced { nonce },
            ReplyRef::Counters(counters) => Reply::Counters(counters),
        }
    }
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
