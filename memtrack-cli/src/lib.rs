//! # memtrack-cli: the `memtrack` command
//!
//! `memtrack run -- CMD` tracks the exact heap of a command and every process it starts
//! (with the [`memtrack`] library), serves the FIFO protocol so benchmark integrations
//! inside the command can mark regions, and writes one result file per process;
//! `memtrack report DIR` prints saved results again. This library is what the binary
//! calls, public so that tests and tools can run the same code:
//!
//! - [`runner`]: run a command under the tracker with the FIFO server, write the results
//!   ([`output`]: a results directory holding an earlier run's);
//! - [`report`]: the human and JSON reports;
//! - [`limits`]: `--limit`, per-benchmark bounds on [`counter`]s;
//! - [`diff`]: `memtrack diff`, two runs compared;
//! - [`exit_code`]: every exit code of the binary.
//! - [`stack_profile`], [`symbolize`], [`stacks_report`], [`export`]: the allocation
//!   call stacks after the run (`memtrack report --stacks`, [`stacks_command`]):
//!   symbolization, the terminal view, and the DHAT, pprof and flamegraph exports.
//!
//! Benchmark harnesses embed the `memtrack` library (crate `memtrack-core`), not this
//! crate: it pulls in clap, serde_json and the FIFO server, and installs signal handlers.

#![warn(missing_docs)]

pub mod counter;
pub mod diff;
mod error;
pub mod exit_code;
pub mod export;
pub mod limits;
pub mod output;
pub mod report;
pub mod runner;
pub mod stack_profile;
pub mod stacks_command;
pub mod stacks_report;
pub mod symbolize;
pub mod units;

pub use error::{Error, Result};
