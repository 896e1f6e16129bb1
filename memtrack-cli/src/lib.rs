//! # memtrack-cli: the `memtrack` command
//!
//! `memtrack run -- CMD` tracks the exact heap of a command and every process it starts
//! (with the [`memtrack`] library), serves the FIFO protocol so benchmark integrations
//! inside the command can mark regions, and writes one result file per process;
//! `memtrack report DIR` prints saved results again, `memtrack diff` compares two runs.
//! The reports, limits, diffs and stacks exports are crate `memtrack-report`'s (which
//! reads results with no eBPF); this library is the runner, for a tool that runs
//! commands under memtrack itself:
//!
//! - [`runner`]: run a command under the tracker with the FIFO server, write the
//!   results;
//! - [`unsaved`]: a file of a run that could not be written, and why;
//! - [`exit_code`]: every exit code of the binary;
//! - [`Error`]: everything the binary reports when it fails, with its exit code.
//!
//! Benchmark harnesses embed the `memtrack` library (crate `memtrack-core`), not this
//! crate: it pulls in the FIFO server and installs signal handlers.

#![warn(missing_docs)]

mod error;
pub mod exit_code;
mod output;
pub mod runner;
pub mod unsaved;

pub use error::{Error, JsonProblem, NoResults, NoStacks, Result};
