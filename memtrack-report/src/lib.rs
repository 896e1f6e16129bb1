//! # memtrack-report: what memtrack's results say, for people and for tools
//!
//! Everything made from saved results, with no eBPF and no privileges (it reads the
//! record, crate `memtrack-record`):
//!
//! - [`report`]: the human report (tables, units) and the JSON report of one run or of a
//!   tree of result directories;
//! - [`counter`]: the counters by name (`alloc_calls`, `peak_live_bytes`, ...), and
//!   [`units`]: how numbers read in text;
//! - [`limits`]: `URI_GLOB:COUNTER<=VALUE` limits, checked against benchmarks or
//!   processes;
//! - [`pairing`]: which process or benchmark of one run is which of another (by uri,
//!   by command line across checkouts and harness flags, by place in the process tree),
//!   with [`command`]: command lines made comparable;
//! - [`diff`]: two runs compared, per process, per benchmark, per counter;
//! - [`stack_profile`], [`symbolize`], [`stacks_report`]: the allocation call stacks of
//!   a process symbolized (blazesym), the terminal view of the top stacks;
//! - [`helpers`]: the processes a benchmark harness starts for itself (criterion's
//!   gnuplot check, `cargo metadata`), labelled as such;
//! - [`history`]: a run's figures in Bencher's metric format and github-action-benchmark's
//!   custom JSON, for the engines that chart them commit by commit;
//! - [`export`]: the stacks as valgrind DHAT JSON, a pprof profile, flamegraph SVGs;
//! - [`html`]: the self-contained HTML pages of a run (`memtrack report --html`) and of
//!   a comparison (`memtrack diff --html`): timeline charts, counters, top stacks,
//!   flamegraphs; [`sparkline`]: a timeline in one line of text.
//!
//! The `memtrack` command (crate `memtrack-cli`) is its front; a CI tool that reads
//! memtrack's results can use it directly:
//!
//! ```
//! use memtrack_record::{AllocatorStatus, Stats, TrackedProcess};
//!
//! let mut process = TrackedProcess::new(7, 1, vec!["./bench".into()]);
//! process.allocator = AllocatorStatus::Probed;
//! process.exit_code = Some(0);
//! process.ended_ns = Some(1_000_000);
//! let mut stats = Stats::default();
//! (stats.alloc_calls, stats.bytes_allocated, stats.peak_live_bytes) = (2, 2048, 1024);
//! process.stats = stats;
//! let text = memtrack_report::report::render_text(&[process]);
//! assert!(text.contains("2 blocks, 2 KiB (2,048 B)"), "{text}");
//! ```

#![warn(missing_docs)]

pub mod command;
pub mod counter;
pub mod diff;
mod error;
pub mod export;
pub mod helpers;
pub mod history;
pub mod html;
pub mod limits;
pub mod pairing;
pub mod report;
pub mod sparkline;
pub mod stack_profile;
pub mod stacks_report;
pub mod symbolize;
pub mod units;

pub use error::{Error, LimitsFileError, NotWritten, Result};
