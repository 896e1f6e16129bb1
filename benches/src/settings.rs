//! How big and how repeated each benchmark is: the full run (figures for BENCHMARKS.md,
//! about 5 minutes) and `--quick` (a smoke run for CI, seconds).
//!
//! A tracked run costs about 0.15 s besides its loop (making and closing the tracker on
//! the reference VM), and single-stepped FunctionEntry loops are slow, so `--quick` cuts
//! the number of runs as well as iterations.

/// Sizes and repetition counts.
#[derive(Clone, Debug)]
pub struct Settings {
    /// True for `--quick`.
    pub quick: bool,
    /// malloc+free pairs per run of benchmark 1.
    pub pairs: u64,
    /// Operations per run of the batched malloc-then-free split (0: not run).
    pub split_ops: u64,
    /// Operations per run of benchmark 2 (calloc, realloc, posix_memalign, new/delete).
    pub function_ops: u64,
    /// Threads of benchmark 3.
    pub threads: u64,
    /// malloc+free pairs per thread in benchmark 3.
    pub thread_ops: u64,
    /// Untracked runs per workload.
    pub native_runs: usize,
    /// Tracked runs per workload with `ProbePlacement::Cheapest`.
    pub tracked_runs: usize,
    /// Tracked runs per workload with `ProbePlacement::FunctionEntry` (the slow one).
    pub function_entry_runs: usize,
    /// Rounds of benchmark 1's malloc+free pair against the counting-off floor: each
    /// round makes one Cheapest run counting and one with counting off, the order
    /// alternating round by round. These are also that row's Cheapest runs (when more
    /// than `tracked_runs`).
    pub floor_rounds: usize,
    /// In-process trackers made and dropped for the latency benchmark.
    pub lifecycle_iterations: usize,
    /// Operations per run of each deep loop of benchmark 6 (stacks).
    pub stack_ops: u64,
    /// Runs of benchmark 6's threaded workload in each setup (stacks off, on).
    pub stack_thread_runs: usize,
    /// Runs of the unrelated loop, natively and beside a counting tracker.
    pub isolation_runs: usize,
    /// Page faults per run of the unrelated fault loop of benchmark 5.
    pub isolation_faults: u64,
    /// Operations per run of benchmark 8's malloc loops (timeline).
    pub timeline_ops: u64,
    /// Page faults per run of benchmark 8's fault loop.
    pub timeline_faults: u64,
    /// Rounds of benchmark 8 (each runs every setup once).
    pub timeline_runs: usize,
    /// Rounds of benchmark 9 (each runs every setup once).
    pub short_rounds: usize,
    /// Processes benchmark 9's loop starts.
    pub short_processes: usize,
    /// End spawned trackers with `ProcessTracker::close()` (waits ~70 ms for the kernel to
    /// remove the probes, so no detaching overlaps the next run) rather than a drop.
    pub close_spawned: bool,
}

impl Settings {
    /// The full run: 1,000,000 operations per run, medians of several runs.
    pub fn full() -> Settings {
        Settings {
            quick: false,
            pairs: 1_000_000,
            split_ops: 200_000,
            function_ops: 1_000_000,
            threads: 8,
            thread_ops: 1_000_000,
            native_runs: 7,
            tracked_runs: 3,
            function_entry_runs: 3,
            floor_rounds: 7,
            lifecycle_iterations: 20,
            stack_ops: 200_000,
            stack_thread_runs: 1,
            isolation_runs: 7,
            isolation_faults: 200_000,
            timeline_ops: 1_000_000,
            timeline_faults: 200_000,
            timeline_runs: 5,
            short_rounds: 30,
            short_processes: 100,
            close_spawned: true,
        }
    }

    /// The CI smoke run: small loops, one tracked run per placement and workload.
    pub fn quick() -> Settings {
        Settings {
            quick: true,
            pairs: 20_000,
            // Every tracked run costs ~2.5 s of uprobe detaching here: keep to the rows
            // that exercise distinct paths.
            split_ops: 0,
            function_ops: 20_000,
            threads: 8,
            thread_ops: 20_000,
            native_runs: 5,
            tracked_runs: 1,
            function_entry_runs: 1,
            floor_rounds: 1,
            lifecycle_iterations: 1,
            stack_ops: 5_000,
            stack_thread_runs: 1,
            isolation_runs: 3,
            isolation_faults: 20_000,
            timeline_ops: 20_000,
            timeline_faults: 20_000,
            timeline_runs: 1,
            short_rounds: 2,
            short_processes: 10,
            close_spawned: true,
        }
    }
}
