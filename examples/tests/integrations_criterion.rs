//! memtrack-criterion end to end, through the `criterion_alloc` example binary: a
//! function allocating exactly 3 blocks of 64 bytes is reported as 192 bytes and 3
//! allocations per iteration in-process (criterion's estimates, memtrack's line and
//! result files) and under the runner (its benchmark regions); a repeated run (criterion
//! then compares exact, zero-variance samples with the saved baseline) still completes;
//! without privileges and without the runner it says so in one line and runs for timing.

use memtrack_test_support::{
    can_run_unprivileged, copy_for_nobody, require_privileges, unprivileged,
};
use std::{
    os::unix::fs::PermissionsExt,
    path::Path,
    process::{Command, Output},
};

use memtrack::{CommandSpec, RunResults, TrackedProcess};

mod common;
use common::{
    Captured, IN_PROCESS_LINE, Numbers, RUNNER_LINE, memtrack_lines, numbers,
    ran_with_counts_disabled, run_under_runner, text,
};

const BIN: &str = env!("CARGO_BIN_EXE_criterion_alloc");

/// Runs the example outside any runner, with criterion's and memtrack's output in `dir`.
fn run_in_process(dir: &Path) -> Output {
    let output = Command::new(BIN)
        .env("CRITERION_HOME", dir.join("criterion"))
        .env("MEMTRACK_OUTPUT_DIR", dir.join("memtrack"))
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

/// criterion's estimate `name` (mean, median, std_dev, slope) for benchmark `id`.
fn estimate(criterion_home: &Path, id: &str, name: &str) -> f64 {
    let path = criterion_home.join(id).join("new/estimates.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    json[name]["point_estimate"]
        .as_f64()
        .unwrap_or_else(|| panic!("{name} in {}: {json}", path.display()))
}

const THREE_BLOCKS: Numbers = (3, 192, 3, 192, 0, 0, 192, 0);
const VEC_GROW_100: Numbers = (6, 2016, 5, 992, 1, 1024, 1024, 0);

#[test]
fn in_process_criterion_reports_192_bytes_and_3_allocs_per_iteration() {
    if !require_privileges("in_process_criterion_reports_192_bytes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let output = run_in_process(dir.path());
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));

    assert_eq!(memtrack_lines(&stderr), vec![IN_PROCESS_LINE], "{stderr}");
    // memtrack's own line, exact, and criterion's report in bytes / allocs per iteration.
    for expected in [
        "memtrack three_blocks: 3 allocs, 192 B allocated, peak 192 B live, 0 B live at end \
         (one iteration)",
        "memtrack vec_grow_100: 6 allocs, 2,016 B allocated, peak 1,024 B live, 1,024 B live \
         at end (one iteration)",
        "[192.00 B 192.00 B 192.00 B]",
        "[1.9688 KiB 1.9688 KiB 1.9688 KiB]",
        "[3.0000 allocs 3.0000 allocs 3.0000 allocs]",
        "[6.0000 allocs 6.0000 allocs 6.0000 allocs]",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} missing in:\n{stdout}"
        );
    }
    assert!(!stdout.contains("ERROR"), "{stdout}");

    // criterion's saved estimates: exactly 192 bytes / 3 allocs per iteration, no spread.
    let home = dir.path().join("criterion");
    assert_eq!(estimate(&home, "three_blocks", "mean"), 192.0);
    assert_eq!(estimate(&home, "three_blocks", "median"), 192.0);
    assert_eq!(estimate(&home, "three_blocks", "std_dev"), 0.0);
    assert!((estimate(&home, "three_blocks", "slope") - 192.0).abs() < 1e-9);
    assert_eq!(estimate(&home, "vec_grow_100", "mean"), 2016.0);
    assert_eq!(estimate(&home, "three_blocks_calls", "mean"), 3.0);
    assert_eq!(estimate(&home, "three_blocks_calls", "std_dev"), 0.0);
    assert_eq!(estimate(&home, "vec_grow_100_calls", "mean"), 6.0);

    // One result file per benchmark, readable like `memtrack report DIR` reads it.
    let results = dir.path().join("memtrack/criterion");
    for (id, expected) in [
        ("three_blocks", THREE_BLOCKS),
        ("vec_grow_100", VEC_GROW_100),
    ] {
        let read = RunResults::read_dir(&results.join(id)).unwrap().processes;
        assert_eq!(read.len(), 1, "{read:#?}");
        check_is_the_example(&read[0]);
        assert_eq!(read[0].benchmarks.len(), 1);
        assert_eq!(read[0].benchmarks[0].uri, id);
        assert_eq!(numbers(&read[0].benchmarks[0].stats), expected, "{id}");
        assert_eq!(
            numbers(&read[0].stats),
            expected,
            "{id}: the process sums its benchmarks"
        );
        let report = memtrack_cli::report::render_text(&read);
        assert!(
            report.contains(&format!("benchmark {id} (process")),
            "{report}"
        );
    }

    // A second run compares exact, identical samples with the first run's baseline:
    // criterion's t-test has zero variance; the run still completes and reports.
    let again = run_in_process(dir.path());
    let stdout = text(&again.stdout);
    assert!(
        stdout.contains("[192.00 B 192.00 B 192.00 B]"),
        "second run:\n{stdout}"
    );
    assert!(
        stdout.contains("No change in performance detected."),
        "second run:\n{stdout}"
    );
    // The second run's result replaced the first's.
    let read = RunResults::read_dir(&results.join("three_blocks"))
        .unwrap()
        .processes;
    assert_eq!(read.len(), 1, "{read:#?}");
    assert_eq!(numbers(&read[0].benchmarks[0].stats), THREE_BLOCKS);
}

/// Checks that `result` is about the example's process.
fn check_is_the_example(result: &TrackedProcess) {
    assert_ne!(result.pid, std::process::id());
    assert!(
        result
            .command
            .first()
            .is_some_and(|c| c.ends_with("criterion_alloc")),
        "{:?}",
        result.command
    );
}

#[test]
fn under_the_runner_each_benchmark_is_one_exact_region() {
    if !require_privileges("under_the_runner_each_benchmark_is_one_exact_region") {
        return;
    }
    let Captured {
        outcome,
        stderr,
        dir,
        ..
    } = run_under_runner(
        |spec, dir| spec.env("CRITERION_HOME", dir.join("criterion")),
        CommandSpec::new(BIN),
    );
    assert_eq!(outcome.exit.code, Some(0));
    assert_eq!(memtrack_lines(&stderr), vec![RUNNER_LINE], "{stderr}");

    let got: Vec<(&str, _)> = outcome
        .results
        .benchmarks()
        .map(|(_, b)| (b.uri.as_str(), numbers(&b.stats)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("three_blocks", THREE_BLOCKS),
            ("vec_grow_100", VEC_GROW_100)
        ],
        "{:#?}",
        outcome.results
    );
    // Only the regions count: the process is their sum, none of criterion's work.
    let process = outcome
        .results
        .processes
        .iter()
        .find(|r| r.benchmarks.len() == 2)
        .expect("the example's result");
    assert_eq!(
        (process.stats.alloc_calls, process.stats.bytes_allocated),
        (9, 2208)
    );
    // Start and end markers around each region.
    assert_eq!(outcome.markers.markers.len(), 4, "{:#?}", outcome.markers);
    // Saved where asked, readable again.
    let read = RunResults::read_dir(&dir.path().join("results")).unwrap();
    assert_eq!(read, outcome.results);
}

#[test]
fn without_privileges_it_says_so_once_and_times_the_benchmarks() {
    if !can_run_unprivileged("without_privileges (criterion)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = copy_for_nobody(Path::new(BIN), dir.path());
    let writable = dir.path().join("out");
    std::fs::create_dir(&writable).unwrap();
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut command = unprivileged(&bin);
    let output = command
        .env("CRITERION_HOME", writable.join("criterion"))
        .env("MEMTRACK_OUTPUT_DIR", writable.join("memtrack"))
        .env_remove("MEMTRACK_FIFO_DIR")
        .current_dir(&writable)
        .output()
        .unwrap();
    let (stdout, _) = ran_with_counts_disabled(&output);
    // Every benchmark ran and was timed; nothing was counted or saved.
    for id in [
        "three_blocks",
        "vec_grow_100",
        "three_blocks_calls",
        "vec_grow_100_calls",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no report for {id}:\n{stdout}"));
        let timed = [" ns", " µs", " ms"].iter().any(|unit| line.contains(unit));
        assert!(line.contains("time:") && timed, "{line}");
    }
    assert!(!stdout.contains("memtrack "), "{stdout}");
    assert!(!writable.join("memtrack").exists());
}
