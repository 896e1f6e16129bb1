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
//!
//! [`stacks`] is the data model of allocation call stacks, which the kernel records per
//! stack with [`TrackerBuilder::stacks`] (read by [`Tracker::stacks`] and
//! [`ProcessTracker::stacks`], written by [`Tracker::write_stacks`]);
//! `memtrack report --stacks` (memtrack-cli) symbolizes and shows them.

#![warn(missing_docs)]

mod bounded_read;
mod bpf_object;
mod detach;
mod ebpf_map;
mod error;
mod follow;
mod hold;
mod kernel_stacks;
mod ld_hook;
mod live_growth;
mod live_sizing;
mod live_slots;
mod loader;
mod memory_cgroup;
mod output_dir;
mod perf_uprobe;
mod privileges;
mod process;
mod process_slots;
mod process_tracker;
mod result_tree;
mod results;
mod shared;
mod spawn;
pub mod stacks;
mod stacks_merge;
mod stats;
pub mod testing;
mod tracker;
mod unwind_chain;
mod uprobe_multi;
mod uprobe_programs;

pub use bounded_read::MAX_RESULT_FILE_BYTES;
pub use detach::hand_off_links_at_exit;
pub use error::{Error, Result};
pub use live_growth::{GROW_AT_LIVE_BLOCKS, LIVE_BLOCKS_AT_LOAD, LaterLiveBlocks};
pub use live_sizing::{LiveMapBytes, MAX_LIVE_BLOCKS, live_map_bytes};
pub use output_dir::{DIR_MODE, FILE_MODE, OutputDir};
pub use privileges::{can_track, sudo_invoker};
pub use process::{AllocatorStatus, BenchmarkStats, ImageStats, TrackedProcess, monotonic_ns};
pub use process_tracker::{ProcessTracker, TrackerControl};
pub use result_tree::{MAX_TREE_DEPTH, ResultDir, ResultTree};
pub use results::{
    MemtrackResult, RESULT_FILE_SUFFIX, ResultScan, RunResults, SCHEMA_VERSION, is_result_file_name,
};
pub use shared::ExitStatus;
pub use spawn::CommandSpec;
pub use stats::{FunctionStats, SizeBucket, Stats, SyscallStats};
pub use tracker::{Scope, Tracker, TrackerBuilder};
pub use uprobe_programs::{ProbeInfo, ProbePlacement, UprobeLinks};
