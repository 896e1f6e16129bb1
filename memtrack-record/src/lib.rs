//! # memtrack-record: what memtrack measured, and the files it keeps it in
//!
//! The record of a tracked process, independent of how it was measured: the counters
//! ([`Stats`]), the process with its earlier images and benchmark regions
//! ([`TrackedProcess`]), the allocation call stacks ([`stacks`]), and the files they are
//! saved in: one versioned result file per process ([`MemtrackResult`],
//! [`SCHEMA_VERSION`]), a stacks file beside it, written into a results directory held
//! open as a handle ([`OutputDir`]), and read back from a directory or a tree of them
//! with bounded, link-refusing reads ([`MemtrackResult::scan_dir`],
//! [`MemtrackResult::scan_tree`]). [`timeline`] is the memory of a process (or a benchmark
//! region) over time: heap envelope, resident memory, mapped bytes, events.
//!
//! The tracker (crate `memtrack-core`, library `memtrack`, which re-exports every name
//! here) fills the record; the reports, diffs and exports read it. This crate needs no
//! privileges and loads nothing into the kernel:
//!
//! ```
//! use memtrack_record::{MemtrackResult, Stats, TrackedProcess};
//!
//! let mut process = TrackedProcess::new(4242, 1, vec!["./bench".into()]);
//! let mut stats = Stats::default();
//! (stats.alloc_calls, stats.bytes_allocated) = (3, 300);
//! process.stats = stats;
//! let dir = tempfile::tempdir()?;
//! let path = MemtrackResult::new(process).write_to_dir(dir.path())?;
//! let read = MemtrackResult::read_from(&path)?;
//! assert_eq!(read.process.stats.bytes_allocated, 300);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

mod bounded_read;
mod error;
mod output_dir;
mod process;
mod result_tree;
mod results;
pub mod stacks;
mod stacks_merge;
mod stats;
mod text;
pub mod timeline;

pub use bounded_read::{MAX_RESULT_FILE_BYTES, MAX_STACKS_FILE_BYTES};
pub use error::{DirRefused, Error, FileRefused, OutputStep, Result, TreeRefused};
pub use output_dir::{DIR_MODE, FILE_MODE, OutputDir};
pub use process::{AllocatorStatus, BenchmarkStats, ImageStats, ProbeInfo, TrackedProcess};
pub use result_tree::{MAX_TREE_DEPTH, ResultDir, ResultTree};
pub use results::{
    MemtrackResult, RESULT_FILE_SUFFIX, ResultScan, RunResults, SCHEMA_VERSION, is_result_file_name,
};
pub use stats::{FunctionStats, SizeBucket, Stats, SyscallStats};
pub use text::escape_control;
