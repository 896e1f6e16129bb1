//! Wire protocol between memtrack's runner and the benchmark integrations running under it.
//!
//! `memtrack run -- CMD` (the runner, privileged) starts CMD with [`FIFO_DIR_ENV`] naming a
//! fresh private directory that holds two FIFOs. Code inside CMD (a criterion or divan
//! adapter, or a plain program; the integration) writes [`Command`]s into one FIFO and
//! reads one [`Reply`] per command from the other. Each message is a frame: a `u32`
//! little-endian body length in bytes followed by a MessagePack body
//! ([`frame`] module), at most [`MAX_FRAME_LEN`] bytes long.
//!
//! # Example
//!
//! Both sides, in one process for the sake of the example; in real use the integration
//! half runs inside the child process and connects with [`FifoClient::from_env`].
//!
//! ```
//! use fifo_protocol::{
//!     FifoClient, FifoRunner, IntegrationMode, Marker, SharedHandling, now_ns,
//! };
//!
//! fn integration(mut client: FifoClient) -> Result<(), fifo_protocol::Error> {
//!     client.set_version()?;
//!     client.set_integration("my-harness", "0.1.0")?;
//!     assert_eq!(client.integration_mode()?, IntegrationMode::Memory);
//!     client.current_benchmark("benches/vec.rs::push")?;
//!     client.add_marker(Marker::BenchmarkStart { timestamp_ns: now_ns() })?;
//!     client.start_benchmark()?;
//!     let v: Vec<u64> = (0..1000).collect(); // the code being measured
//!     client.stop_benchmark()?;
//!     client.add_marker(Marker::BenchmarkEnd { timestamp_ns: now_ns() })?;
//!     drop(v);
//!     Ok(())
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Runner side: create the FIFO directory and serve on a background thread.
//! let runner = FifoRunner::new(IntegrationMode::Memory)?;
//! let (name, value) = runner.env_var();
//! let serving = runner.spawn(SharedHandling)?;
//!
//! // Normally: std::process::Command::new("cargo").args(["bench"]).env(name, &value)
//! //     .status()?; and inside the child, FifoClient::from_env().
//! assert_eq!(name, "MEMTRACK_FIFO_DIR");
//! integration(FifoClient::connect(&value)?)?;
//!
//! // Once the command exited: stop serving and save what was recorded.
//! let (result, _handler) = serving.stop()?;
//! assert_eq!(result.benchmarks[0].uri, "benches/vec.rs::push");
//! assert_eq!(result.markers.len(), 2);
//! let out = tempfile::tempdir()?;
//! let path = result.write_to_dir(out.path())?;
//! assert_eq!(fifo_protocol::MarkerResult::read_from(&path)?, result);
//! # Ok(())
//! # }
//! ```
//!
//! Inside the command, an integration stays silent when no runner is present:
//!
//! ```
//! use fifo_protocol::FifoClient;
//!
//! match FifoClient::from_env() {
//!     None => { /* not under `memtrack run`: nothing to do */ }
//!     Some(Ok(mut client)) => client.ping().expect("runner answers"),
//!     Some(Err(e)) => eprintln!("memtrack runner unreachable: {e}"),
//! }
//! ```
//!
//! # Guarantees
//!
//! - Only the runner's user (and root) can reach the FIFOs: the directory is created with
//!   a random name and mode 0700 under `$XDG_RUNTIME_DIR` or the temporary directory, the
//!   FIFOs with mode 0600. Nothing lives at a fixed path. A directory left behind by a
//!   runner that died (SIGKILL) is removed by the next runner that starts in the same
//!   place, and only such a directory ([`FifoRunner::new_in`]).
//! - Every well-formed command gets exactly one reply, and [`FifoClient`] never mistakes a
//!   late reply (to an exchange that timed out) for the current one ([`Command::Sync`]);
//!   processes sharing a runner take turns.
//! - Garbage written into the control FIFO (by anything that can open it, at any time)
//!   costs a [`FifoClient`] none of its commands. The runner answers each frame it rejects
//!   with exactly one [`Reply::Err`], so a burst of garbage gets at least one, and keeps
//!   serving; a frame header announcing more than [`MAX_FRAME_LEN`] bytes is rejected
//!   before anything is allocated. It then gets back in step at the next [`Command::Sync`]
//!   frame, which starts every `FifoClient` exchange, so a client's command written right
//!   behind garbage (even into the same pipe buffer) is answered normally instead of
//!   timing out. Only a command sent without a `Sync` frame in front of it can be
//!   swallowed by garbage before it. The exact rules, and how many `Err` replies garbage
//!   gets, are in [`FifoRunner`]'s "Malformed input".
//! - The client never hangs or kills its host: opens are non-blocking, each exchange is
//!   bounded by a timeout ([`DEFAULT_TIMEOUT`]), a vanished runner is an error, and no
//!   `SIGPIPE` is raised.
//! - The client does not disturb the measurement: [`FifoClient::start_benchmark`],
//!   [`FifoClient::stop_benchmark`] and [`FifoClient::add_marker`] neither allocate nor
//!   free heap memory on success, since memtrack counts the process's allocations between
//!   the runner's handling of the two commands.
//! - A root runner can hand the FIFOs to the user it runs the command as
//!   ([`FifoRunner::set_owner`]); other users stay locked out.
//! - Versions: integrations announce [`PROTOCOL_VERSION`]; a runner accepts
//!   [`MIN_SUPPORTED_VERSION`]`..=`[`PROTOCOL_VERSION`] and answers anything else with an
//!   error naming that range.

#![warn(missing_docs)]

mod client;
mod clock;
mod error;
pub mod frame;
mod layout;
mod log_summary;
mod markers;
mod message;
mod runner;
mod stale;
mod sys;

pub use client::{DEFAULT_TIMEOUT, FifoClient};
pub use clock::now_ns;
pub use error::{Error, Result};
pub use frame::{HEADER_LEN, MAX_FRAME_LEN, decode_frame, encode_frame};
pub use layout::{ACK_FIFO_NAME, CONTROL_FIFO_NAME, FIFO_DIR_ENV};
pub use log_summary::LogSummary;
pub use markers::{
    BenchmarkSpan, IntegrationInfo, MARKER_RESULT_FILE_NAME, MARKER_RESULT_SCHEMA_VERSION,
    MarkerEntry, MarkerResult, MeasurementWindow,
};
pub use message::{
    Command, IntegrationMode, MAX_URI_LEN, MIN_SUPPORTED_VERSION, Marker, PROTOCOL_VERSION,
    RegionCounters, Reply, ReplyRef, uri_problem,
};
pub use runner::{
    DEFAULT_PARTIAL_FRAME_TIMEOUT, FifoRunner, Handler, RunnerThread, SharedHandling,
    ShutdownHandle,
};
