//! Call stacks through the benchmark integrations, per benchmark, in both modes, with
//! the sample crate's `divan_suite` (three benchmarks, one allocating on a thread it
//! starts):
//!
//! - in-process, `MEMTRACK_STACKS` makes each counted iteration record its stacks, saved
//!   beside the result file: one region per benchmark, each adding up exactly to that
//!   benchmark's counters, the process scope to their sum;
//! - under `memtrack run --stacks`, the runner records the same regions;
//! - both modes give every benchmark the same per-stack counters (the frames differ only
//!   where the integration called the routine from).

use std::{path::Path, process::Command};

use memtrack::{
    BenchmarkStats, CommandSpec, RunResults, Stats,
    stacks::{MAX_DEPTH, ProcessStacks, stacks_file_name},
};
use memtrack_cli::runner::RunOptions;
use memtrack_test_support::{stack_flows, stats_flows};

mod common;
use common::text;

const SUITE: &str = env!("CARGO_BIN_EXE_divan_suite");

/// Counters as `stack_flows` gives them.
type Flows = [u64; 8];

/// Checks that `stacks` has one region per benchmark, in order, each adding up to the
/// benchmark's counters and the process scope to their sum; returns each region's
/// per-stack counters, sorted.
fn check_regions(stacks: &ProcessStacks, benchmarks: &[BenchmarkStats]) -> Vec<Vec<Flows>> {
    stacks.validate().unwrap();
    let uris: Vec<&str> = stacks.regions.iter().map(|r| r.uri.as_str()).collect();
    let want: Vec<&str> = benchmarks.iter().map(|b| b.uri.as_str()).collect();
    assert_eq!(uris, want);
    let mut sum = Stats::default();
    let mut per_region = Vec::new();
    for (region, bench) in stacks.regions.iter().zip(benchmarks) {
        // Frees of pointers never seen allocated (glibc's thread teardown in
        // thread_4k) are neither blocks released nor charged to a stack.
        let total = region.counters.total();
        assert_eq!(
            stack_flows(&total),
            stats_flows(&bench.stats, total.at_peak_blocks),
            "region {}: {:#?}",
            region.uri,
            region.counters
        );
        assert!(region.counters.lost.is_zero());
        let mut each: Vec<Flows> = region
            .counters
            .entries
            .iter()
            .map(|e| stack_flows(&e.counts))
            .collect();
        each.sort();
        per_region.push(each);
        sum.merge(&bench.stats);
    }
    let total = stacks.process.total();
    assert_eq!(stack_flows(&total), stats_flows(&sum, total.at_peak_blocks));
    per_region
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn stacks_per_benchmark_in_process_and_under_the_runner_are_exact_and_agree() {
    // In-process, with MEMTRACK_STACKS.
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(SUITE)
        .args(["--bench", "--sample-count", "3"])
        .env("MEMTRACK_OUTPUT_DIR", out.path())
        .env("MEMTRACK_STACKS", "max")
        .env_remove("MEMTRACK_FIFO_DIR")
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "memtrack: MEMTRACK_STACKS: the call stacks of each counted iteration (up to \
             {MAX_DEPTH} frames) are saved beside its result"
        )),
        "{stderr}"
    );
    let dir = out.path().join("divan/divan_suite");
    let results = RunResults::read_dir(&dir).unwrap().processes;
    assert_eq!(results.len(), 1);
    let stacks = ProcessStacks::read_from(&dir.join(stacks_file_name(results[0].pid))).unwrap();
    assert_eq!(stacks.depth_limit, MAX_DEPTH);
    let in_process = check_regions(&stacks, &results[0].benchmarks);

    // Under the runner, with --stacks.
    let run = tempfile::tempdir().unwrap();
    let options = RunOptions {
        output: Some(run.path().join("results")),
        stacks: Some(MAX_DEPTH),
        ..Default::default()
    };
    let log = std::fs::File::create(run.path().join("log")).unwrap();
    let spec = CommandSpec::new(SUITE)
        .args(["--bench", "--sample-count", "3"])
        .env("MEMTRACK_STACKS", "max")
        .fd(1, std::os::fd::AsRawFd::as_raw_fd(&log))
        .fd(2, std::os::fd::AsRawFd::as_raw_fd(&log));
    let outcome = memtrack_cli::runner::run(spec, &options).unwrap();
    let said = std::fs::read_to_string(run.path().join("log")).unwrap();
    assert_eq!(outcome.exit.code, Some(0), "{said}");
    // The variable is for in-process counting, and that is said.
    assert!(
        said.contains("memtrack: MEMTRACK_STACKS applies to in-process counting"),
        "{said}"
    );
    let process = outcome
        .results
        .processes
        .iter()
        .find(|p| !p.benchmarks.is_empty())
        .expect("the suite's process has its benchmarks");
    let (_, runner_stacks) = outcome
        .stacks
        .iter()
        .find(|(pid, _)| *pid == process.pid)
        .expect("its stacks");
    let on_disk = ProcessStacks::read_from(
        &Path::new(&run.path().join("results")).join(stacks_file_name(process.pid)),
    )
    .unwrap();
    assert_eq!(&on_disk, runner_stacks);
    let runner = check_regions(runner_stacks, &process.benchmarks);

    // One answer: every benchmark's per-stack counters are the same in both modes.
    assert_eq!(in_process, runner);
    assert!(in_process.iter().all(|r| !r.is_empty()));
}
