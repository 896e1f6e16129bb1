//! # memtrack: exact heap memory tracking for Linux, counted in the kernel
//!
//! ```no_run
//! use memtrack::Tracker;
//!
//! let mut tracker = Tracker::new()?; // this process, all threads (needs root or CAP_BPF+CAP_PERFMON)
//! tracker.start()?;
//! let boxed = Box::new([0u8; 1000]);
//! drop(boxed);
//! tracker.stop()?;
//! let stats = tracker.collect()?;
//! assert_eq!((stats.alloc_calls, stats.bytes_allocated, stats.free_calls), (1, 1000, 1));
//! # Ok::<(), memtrack::Error>(())
//! ```
//!
//! Every call of the `malloc` family (`malloc`, `calloc`, `realloc`, `reallocarray`,
//! `free`, `aligned_alloc`, `posix_memalign`, `memalign`, `valloc`, `pvalloc`) made by the
//! tracked process traps into an eBPF uprobe, which updates per-process counters in kernel
//! maps: blocks, bytes, live and peak bytes, failures, frees of unknown pointers, a
//! per-function breakdown and a size histogram (see [`Stats`] for exactly what each number
//! counts). `mmap`/`munmap`/`brk` are counted apart through a raw syscall tracepoint.
//!
//! Probes are scoped to the tracked processes: other programs on the machine run at
//! native speed. A [`Tracker`] counts the calling process; to track a command and all
//! its children, [`Tracker::builder`]`().spawn(...)` returns a [`ProcessTracker`], in
//! which each process gets its own counters ([`ProcessTracker::collect_processes`]) and
//! can be saved as a [`MemtrackResult`] file.
//!
//! One record per concept, the same in the API, the result files and the JSON report of
//! `memtrack run`: [`TrackedProcess`] (a process, with its [`BenchmarkStats`] and
//! [`ImageStats`]), [`Stats`] (counters); [`MemtrackResult`] (one file) and
//! [`RunResults`] (a run) are versioned envelopes around them ([`SCHEMA_VERSION`]).
//! They are the crate `memtrack-record`'s ([`record`]), re-exported here: a tool that
//! only reads results depends on that crate alone (no eBPF, no privileges).
//!
//! [`stacks`] is the data model of allocation call stacks, which the kernel records per
//! stack with [`TrackerBuilder::stacks`] (read by [`Tracker::stacks`] and
//! [`ProcessTracker::stacks`], written by [`Tracker::write_stacks`]);
//! `memtrack report --stacks` (memtrack-cli) symbolizes and shows them.

#![warn(missing_docs)]

mod builder;
mod engine;
mod error;
mod follow;
mod privileges;
mod process_tracker;
mod shared;
pub mod testing;
mod tracker;

/// The record: counters, processes, stacks, result files (crate `memtrack-record`).
pub use memtrack_record as record;
pub use memtrack_record::{
    AllocatorStatus, BenchmarkStats, DIR_MODE, FILE_MODE, FunctionStats, ImageStats,
    MAX_RESULT_FILE_BYTES, MAX_STACKS_FILE_BYTES, MAX_TREE_DEPTH, MemtrackResult, OutputDir,
    ProbeInfo, RESULT_FILE_SUFFIX, ResultDir, ResultScan, ResultTree, RunResults, SCHEMA_VERSION,
    SizeBucket, Stats, SyscallStats, TrackedProcess, is_result_file_name, stacks, timeline,
};

pub use builder::TrackerBuilder;
pub use engine::detach::hand_off_links_at_exit;
pub use engine::live::growth::{GROW_AT_LIVE_BLOCKS, LIVE_BLOCKS_AT_LOAD, LaterLiveBlocks};
pub use engine::live::sizing::{LiveMapBytes, MAX_LIVE_BLOCKS, live_map_bytes};
pub use engine::{ProbePlacement, UprobeLinks};
pub use error::{
    Capabilities, Error, FollowerEnd, KernelLacks, LoadError, ProgramError, Result, SpawnFailure,
};
pub use follow::registry::monotonic_ns;
pub use follow::spawn::CommandSpec;
pub use memtrack_common::{DEFAULT_MAX_LIVE_BLOCKS, DEFAULT_PREALLOCATED_LIVE_BLOCKS};
pub use privileges::{can_track, sudo_invoker};
pub use process_tracker::{ProcessTracker, TrackerControl};
pub use shared::ExitStatus;
pub use tracker::{Scope, Tracker};
