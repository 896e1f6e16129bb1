//! memtrack-divan end to end, adopted with one changed line (`divan = { package =
//! "memtrack-divan" }`), through the sample crate's `divan_suite` (three benchmarks, one
//! allocating on a thread it starts) and `divan_shapes` (every form of divan benchmark):
//!
//! - in-process: divan times every benchmark as usual (its counters shown), then
//!   memtrack's exact table, saved as a result file that `RunResults::read_dir` (what
//!   `memtrack report` uses) reads back;
//! - under the runner: memory only, no timing printed, each benchmark one exact region;
//! - one answer: both modes count every benchmark identically (every counter but the
//!   peak's timestamp), the spawned thread's allocations included;
//! - without privileges and without the runner: one line says so, divan runs as usual.

use memtrack_test_support::{can_run_unprivileged, copy_for_nobody, unprivileged};
use std::{
    path::Path,
    process::{Command, Output},
};

use memtrack::{CommandSpec, RunResults};

mod common;
use common::{
    ByUri, Captured, IN_PROCESS_LINE, Numbers, RUNNER_LINE, by_uri, check_benchmark_timeline,
    memtrack_lines, numbers, ran_with_counts_disabled, run_under_runner, shows_timings, text,
};

const SUITE: &str = env!("CARGO_BIN_EXE_divan_suite");
const SHAPES: &str = env!("CARGO_BIN_EXE_divan_shapes");
/// Benchmark, few samples: the counts do not depend on them.
const ARGS: [&str; 3] = ["--bench", "--sample-count", "3"];

/// The suite's benchmarks in divan's (alphabetical) order, with their exact numbers:
/// (alloc_calls, bytes_allocated, free_calls, bytes_freed, live_blocks, live_bytes,
/// peak_live_bytes, failed + unmatched + lost).
const SUITE_EXPECTED: [(&str, Numbers); 3] = [
    // The 4,096-byte buffer, and what starting and ending a thread allocates (its
    // `Thread` handle, packet, closure box, ...): the same in both modes. The unmatched
    // frees are glibc's thread teardown releasing what it allocated inside itself.
    ("divan_suite::thread_4k", (9, 4504, 9, 4504, 0, 0, 4264, 8)),
    (
        "divan_suite::three_blocks_64",
        (3, 192, 3, 192, 0, 0, 192, 0),
    ),
    ("divan_suite::vec_grow", (6, 2016, 5, 992, 1, 1024, 1024, 0)),
];

fn run_in_process(bin: &str, out: &Path) -> Output {
    let output = Command::new(bin)
        .args(ARGS)
        .env("MEMTRACK_OUTPUT_DIR", out)
        .env_remove("MEMTRACK_FIFO_DIR")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    output
}

/// The benchmarks of the one result file in `dir`, after checking it is `bin`'s.
fn saved_benchmarks(dir: &Path, bin: &str) -> Vec<memtrack::BenchmarkStats> {
    let results = RunResults::read_dir(dir).unwrap().processes;
    assert_eq!(results.len(), 1, "{results:#?}");
    let name = Path::new(bin).file_name().unwrap().to_str().unwrap();
    assert!(
        results[0]
            .command
            .first()
            .is_some_and(|c| c.ends_with(name)),
        "{:?}",
        results[0].command
    );
    results[0].benchmarks.clone()
}

/// (uri, numbers) of `benchmarks`, in their order.
fn uri_numbers(benchmarks: &[memtrack::BenchmarkStats]) -> Vec<(&str, Numbers)> {
    benchmarks
        .iter()
        .map(|b| (b.uri.as_str(), numbers(&b.stats)))
        .collect()
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn in_process_divan_times_as_usual_then_prints_the_exact_table() {
    let out = tempfile::tempdir().unwrap();
    let output = run_in_process(SUITE, out.path());
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(memtrack_lines(&stderr), vec![IN_PROCESS_LINE], "{stderr}");

    // divan's own table first, with timings and the items counter of `vec_grow` ...
    let ours = stdout
        .find("memtrack: one iteration")
        .unwrap_or_else(|| panic!("no memtrack table in:\n{stdout}"));
    let divan = &stdout[..ours];
    for name in ["thread_4k", "three_blocks_64", "vec_grow"] {
        assert!(divan.contains(name), "{divan}");
    }
    assert!(divan.contains("median") && shows_timings(divan), "{divan}");
    assert!(divan.contains("item/s"), "divan's counter kept:\n{divan}");
    // ... then memtrack's, exactly, its title saying what was counted.
    let dir = out.path().join("divan/divan_suite");
    let expected = format!(
        "memtrack: one iteration per benchmark, after one warm-up iteration, whole process \
         (exact)\n\
         benchmark                     allocs  allocated  peak live  live at end\n\
         divan_suite::thread_4k             9    4,504 B    4,264 B          0 B\n\
         divan_suite::three_blocks_64       3      192 B      192 B          0 B\n\
         divan_suite::vec_grow              6    2,016 B    1,024 B      1,024 B\n\
         memtrack: saved in {0} (read it with `memtrack report {0}`)\n",
        dir.display()
    );
    assert_eq!(&stdout[ours..], expected);

    // One result file, read as `memtrack report` reads it; its stats are the sum.
    let saved = saved_benchmarks(&dir, SUITE);
    assert_eq!(uri_numbers(&saved), SUITE_EXPECTED);
    saved.iter().for_each(check_benchmark_timeline);
    let results = RunResults::read_dir(&dir).unwrap().processes;
    assert_eq!(
        numbers(&results[0].stats),
        (18, 6712, 17, 5688, 1, 1024, 4264, 8)
    );
    let report = memtrack_report::report::render_text(&results);
    for (uri, _) in SUITE_EXPECTED {
        assert!(
            report.contains(&format!("benchmark {uri} (process")),
            "{report}"
        );
    }

    // Run again: the directory holds the latest run only.
    run_in_process(SUITE, out.path());
    let again = RunResults::read_dir(&dir).unwrap().processes;
    assert_eq!(again.len(), 1, "{again:#?}");
    assert_ne!(again[0].pid, results[0].pid);
    assert_eq!(uri_numbers(&again[0].benchmarks), SUITE_EXPECTED);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn under_the_runner_divan_is_memory_only_and_each_benchmark_one_exact_region() {
    let Captured {
        outcome,
        stdout,
        stderr,
        dir,
    } = run_under_runner(|spec, _| spec, CommandSpec::new(SUITE).args(ARGS));
    assert_eq!(outcome.exit.code, Some(0));
    assert_eq!(memtrack_lines(&stderr), vec![RUNNER_LINE], "{stderr}");
    // divan ran each benchmark once (its test mode) and printed no timing.
    for name in ["thread_4k", "three_blocks_64", "vec_grow"] {
        assert!(stdout.contains(name), "{stdout}");
    }
    assert!(
        !stdout.contains("median") && !shows_timings(&stdout),
        "{stdout}"
    );
    assert!(
        !stderr.contains("No benchmark function registered"),
        "{stderr}"
    );
    assert!(
        stdout.ends_with(
            "memtrack: `memtrack run` counted one iteration of each benchmark: see its report\n"
        ),
        "{stdout}"
    );
    let got: Vec<(&str, Numbers)> = outcome
        .results
        .benchmarks()
        .map(|(_, b)| (b.uri.as_str(), numbers(&b.stats)))
        .collect();
    assert_eq!(got, SUITE_EXPECTED, "{:#?}", outcome.results);
    outcome
        .results
        .benchmarks()
        .for_each(|(_, b)| check_benchmark_timeline(b));
    let read = RunResults::read_dir(&dir.path().join("results")).unwrap();
    assert_eq!(read, outcome.results);
}

/// Both modes' counts of `bin`'s benchmarks, by uri, every counter but the peak's time.
fn both_modes(bin: &str) -> (ByUri, ByUri) {
    let out = tempfile::tempdir().unwrap();
    run_in_process(bin, out.path());
    let name = Path::new(bin).file_name().unwrap().to_str().unwrap();
    let in_process = saved_benchmarks(&out.path().join("divan").join(name), bin);
    let runner = run_under_runner(|spec, _| spec, CommandSpec::new(bin).args(ARGS));
    assert_eq!(runner.outcome.exit.code, Some(0), "{}", runner.stderr);
    let runner: Vec<_> = runner
        .outcome
        .results
        .benchmarks()
        .map(|(_, b)| b.clone())
        .collect();
    (by_uri(&in_process), by_uri(&runner))
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn in_process_and_runner_count_every_benchmark_identically() {
    let (in_process, runner) = both_modes(SUITE);
    assert_eq!(in_process, runner);
    let got: Vec<(&str, Numbers)> = in_process
        .iter()
        .map(|(uri, s)| (uri.as_str(), numbers(s)))
        .collect();
    assert_eq!(got, SUITE_EXPECTED);
    // The thread's mmap (its signal stack) and munmap count in both, too.
    let thread = &in_process[0].1;
    let syscalls = thread.syscalls.as_ref().expect("syscalls counted");
    assert_eq!((syscalls.mmap_calls, syscalls.munmap_calls), (1, 1));
}

/// Every form in `divan_shapes`, as (uri, allocs, bytes, live bytes at the end).
const SHAPES_EXPECTED: [(&str, u64, u64, u64); 13] = [
    ("divan_shapes::array::16", 1, 16, 16),
    ("divan_shapes::array::32", 1, 32, 32),
    ("divan_shapes::boxed::u16", 1, 2, 2),
    ("divan_shapes::boxed::u64", 1, 8, 8),
    ("divan_shapes::clone_strings::4", 5, 108, 108),
    ("divan_shapes::clone_strings::8", 9, 216, 216),
    ("divan_shapes::fill::10", 1, 10, 10),
    ("divan_shapes::fill::1000", 1, 1000, 1000),
    ("divan_shapes::group::inner", 1, 5, 5),
    ("divan_shapes::local_values", 1, 24, 24),
    ("divan_shapes::owned::ab", 1, 2, 2),
    ("divan_shapes::owned::abcd", 1, 4, 4),
    // Run for two thread counts, counted once.
    ("divan_shapes::threaded", 1, 100, 0),
];

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn every_form_of_divan_benchmark_is_counted_under_its_divan_name() {
    let (in_process, runner) = both_modes(SHAPES);
    assert_eq!(in_process, runner);
    let got: Vec<(&str, u64, u64, u64)> = in_process
        .iter()
        .map(|(uri, s)| (uri.as_str(), s.alloc_calls, s.bytes_allocated, s.live_bytes))
        .collect();
    assert_eq!(got, SHAPES_EXPECTED);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn divan_options_and_counters_work_as_in_divan() {
    let out = tempfile::tempdir().unwrap();
    let stdout = text(&run_in_process(SHAPES, out.path()).stdout);
    // `threads = [1, 2]`, the ignored benchmark, input and constant counters, args,
    // types and consts all show in divan's tree as divan shows them.
    for expected in [
        "t=1",
        "t=2",
        "(ignored)",
        "item/s",
        "B/s",
        "abcd",
        "u16",
        "─ 32 ",
        "─ inner ",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in:\n{stdout}");
    }
}

#[test]
fn without_privileges_divan_says_so_once_and_still_runs() {
    if !can_run_unprivileged("without_privileges (divan)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = copy_for_nobody(Path::new(SUITE), dir.path());
    let mut command = unprivileged(&bin);
    let output = command
        .args(ARGS)
        .env("MEMTRACK_OUTPUT_DIR", dir.path().join("memtrack"))
        .env_remove("MEMTRACK_FIFO_DIR")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let (stdout, _) = ran_with_counts_disabled(&output);
    // divan ran and timed every benchmark; memtrack printed and saved nothing.
    assert!(
        stdout.contains("median") && shows_timings(&stdout),
        "{stdout}"
    );
    for name in ["thread_4k", "three_blocks_64", "vec_grow"] {
        assert!(stdout.contains(&format!("─ {name} ")), "{name}:\n{stdout}");
    }
    assert!(!stdout.contains("memtrack"), "{stdout}");
    assert!(!dir.path().join("memtrack").exists());
}

/// A result that cannot be saved is said, never claimed saved, and the run exits 1: a
/// CI job reading the results must not pass on missing ones, or on stale ones an
/// earlier run left there.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn an_unsaved_result_is_said_and_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("a-file");
    std::fs::write(&not_a_dir, "").unwrap();
    let output = Command::new(SUITE)
        .args(ARGS)
        .env("MEMTRACK_OUTPUT_DIR", &not_a_dir)
        .env_remove("MEMTRACK_FIFO_DIR")
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains(": result not saved: "), "{stderr}");
    assert!(stdout.contains("memtrack: NOT saved in "), "{stdout}");
    assert!(!stdout.contains("memtrack: saved in"), "{stdout}");
}
