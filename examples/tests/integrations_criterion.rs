//! memtrack-criterion end to end, adopted with one changed line (`criterion = { package =
//! "memtrack-criterion" }`), through the sample crate's `criterion_suite` (three
//! benchmarks, one allocating on a thread it starts) and `criterion_alloc` (criterion
//! measuring bytes and allocation calls):
//!
//! - in-process: criterion times every benchmark as usual, with memtrack's exact line
//!   per benchmark and its result file;
//! - under the runner: memory only: criterion prints no timing, and its saved baselines
//!   are neither compared with nor overwritten; each benchmark is one exact region;
//!   criterion's filter and test mode still work;
//! - one answer: both modes count every benchmark identically;
//! - byte measurements: exact in-process, never nanoseconds elsewhere.

use memtrack_test_support::{can_run_unprivileged, copy_for_nobody, unprivileged};
use std::{
    collections::BTreeMap,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use memtrack::{CommandSpec, RunResults, TrackedProcess};

mod common;
use common::{
    Captured, IN_PROCESS_LINE, Numbers, RUNNER_LINE, by_uri, check_benchmark_timeline,
    memtrack_lines, numbers, ran_with_counts_disabled, run_under_runner, shows_timings, text,
};

const SUITE: &str = env!("CARGO_BIN_EXE_criterion_suite");
const ALLOC: &str = env!("CARGO_BIN_EXE_criterion_alloc");
/// Benchmark (as `cargo bench` does), briefly: the counts do not depend on it.
const SUITE_ARGS: [&str; 7] = [
    "--bench",
    "--warm-up-time",
    "0.1",
    "--measurement-time",
    "0.2",
    "--sample-size",
    "10",
];

/// The suite's benchmarks by criterion id, with their exact numbers: (alloc_calls,
/// bytes_allocated, free_calls, bytes_freed, live_blocks, live_bytes, peak_live_bytes,
/// failed + unmatched + lost). The same workloads as divan_suite's, the same numbers.
const SUITE_EXPECTED: [(&str, Numbers); 3] = [
    ("thread_4k", (9, 4504, 9, 4504, 0, 0, 4264, 8)),
    ("three_blocks", (3, 192, 3, 192, 0, 0, 192, 0)),
    ("vec/grow_100", (6, 2016, 5, 992, 1, 1024, 1024, 0)),
];

/// Runs `bin` with `args` outside any runner, criterion's and memtrack's output in
/// `dir`.
fn run_in_process(bin: &str, args: &[&str], dir: &Path) -> Output {
    let output = Command::new(bin)
        .args(args)
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

/// Runs `bin` with `args` under the runner, criterion's output in `criterion_home`.
fn run_runner(bin: &str, args: &[&str], criterion_home: &Path) -> Captured {
    let home = criterion_home.to_path_buf();
    let captured = run_under_runner(
        move |spec, _| spec.env("CRITERION_HOME", home),
        CommandSpec::new(bin).args(args.iter().copied()),
    );
    assert_eq!(captured.outcome.exit.code, Some(0), "{}", captured.stderr);
    captured
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

/// Every file under `dir` with its contents.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// The one benchmark in the result file saved in-process for `id` under `dir`.
fn saved(dir: &Path, id: &str, bin: &str) -> memtrack::BenchmarkStats {
    let read = RunResults::read_dir(&dir.join("memtrack/criterion").join(id))
        .unwrap()
        .processes;
    assert_eq!(read.len(), 1, "{read:#?}");
    check_is(&read[0], bin);
    assert_eq!(read[0].benchmarks.len(), 1);
    assert_eq!(read[0].benchmarks[0].uri, id);
    read[0].benchmarks[0].clone()
}

/// Checks that `result` is about `bin`'s process.
fn check_is(result: &TrackedProcess, bin: &str) {
    let name = Path::new(bin).file_name().unwrap().to_str().unwrap();
    assert_ne!(result.pid, std::process::id());
    assert!(
        result.command.first().is_some_and(|c| c.ends_with(name)),
        "{:?}",
        result.command
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn in_process_criterion_times_as_usual_and_counts_each_benchmark() {
    let dir = tempfile::tempdir().unwrap();
    let output = run_in_process(SUITE, &SUITE_ARGS, dir.path());
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(memtrack_lines(&stderr), vec![IN_PROCESS_LINE], "{stderr}");
    for expected in [
        "memtrack three_blocks: 3 allocs, 192 B allocated, peak 192 B live, 0 B live at end \
         (one iteration)",
        "memtrack vec/grow_100: 6 allocs, 2,016 B allocated, peak 1,024 B live, 1,024 B live \
         at end (one iteration)",
        "memtrack thread_4k: 9 allocs, 4,504 B allocated, peak 4,264 B live, 0 B live at end \
         (one iteration)",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in:\n{stdout}");
    }
    // criterion's report, timed, its throughput kept; its estimates saved in ns.
    for id in ["three_blocks", "vec/grow_100", "thread_4k"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no report for {id}:\n{stdout}"));
        assert!(line.contains("time:") && shows_timings(line), "{line}");
        assert!(estimate(&dir.path().join("criterion"), id, "mean") > 0.0);
    }
    assert!(stdout.contains("thrpt:"), "{stdout}");
    for (id, expected) in SUITE_EXPECTED {
        let bench = saved(dir.path(), id, SUITE);
        assert_eq!(numbers(&bench.stats), expected, "{id}");
        check_benchmark_timeline(&bench);
    }
    check_html_page(&dir.path().join("memtrack"));
}

/// The HTML page of the results below `dir` (as `memtrack report --html FILE
/// target/memtrack` makes it) has a section for each benchmark, with its chart.
fn check_html_page(dir: &Path) {
    use memtrack_report::html;
    let tree = memtrack::MemtrackResult::scan_tree(dir).unwrap();
    assert!(tree.refused.is_empty(), "{:?}", tree.refused);
    let found: Vec<(PathBuf, Vec<TrackedProcess>)> = tree
        .dirs
        .into_iter()
        .map(|d| {
            (
                d.relative,
                d.results.into_iter().map(|r| r.process).collect(),
            )
        })
        .collect();
    let dirs: Vec<(&Path, &[TrackedProcess])> = found
        .iter()
        .map(|(d, p)| (d.as_path(), p.as_slice()))
        .collect();
    let page = html::render_report(dir, &dirs, &html::StacksByPlace::new()).unwrap();
    let scopes = html::scopes(&dirs);
    let benchmarks: Vec<&html::Scope> = scopes
        .iter()
        .filter(|s| s.kind == html::ScopeKind::Benchmark)
        .collect();
    assert_eq!(benchmarks.len(), SUITE_EXPECTED.len());
    for (i, scope) in scopes.iter().enumerate() {
        let section = format!("<section class=\"scope\" id=\"scope-s{i}\" hidden>\n<h2>");
        let at = page
            .find(&section)
            .unwrap_or_else(|| panic!("no section {i}"));
        let heading = html::escape::text(&scope.title);
        assert!(
            page[at + section.len()..].starts_with(&heading),
            "{heading}"
        );
        // Every benchmark kept its timeline: each has its chart.
        if scope.kind == html::ScopeKind::Benchmark {
            assert!(page.contains(&format!("<div class=\"chart\" id=\"chart-s{i}\"></div>")));
            assert!(page.contains(&format!("\"s{i}\":{{\"data\":[")));
        }
    }
}

/// A benchmark the latest run did not measure (here: left out by a filter, as a removed
/// or renamed one is) keeps its earlier result, renamed `*.stale`, apart from the
/// current run's: a report of the tree reads the current run's alone.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn stale_criterion_results_are_kept_apart_from_the_current_runs() {
    let dir = tempfile::tempdir().unwrap();
    run_in_process(SUITE, &SUITE_ARGS, dir.path());
    let first = saved(dir.path(), "three_blocks", SUITE);
    let earlier_pid = RunResults::read_dir(&dir.path().join("memtrack/criterion/thread_4k"))
        .unwrap()
        .processes[0]
        .pid;
    let filtered: Vec<&str> = SUITE_ARGS.iter().copied().chain(["three_blocks"]).collect();
    let output = run_in_process(SUITE, &filtered, dir.path());
    let stderr = text(&output.stderr);
    let base = dir.path().join("memtrack/criterion");
    let kept_apart: Vec<String> = ["thread_4k", "vec/grow_100"]
        .iter()
        .map(|id| {
            format!(
                "memtrack: kept apart, as {}: the result of a benchmark this run of \
                 criterion_suite did not measure (removed, renamed or filtered out); \
                 `memtrack report` leaves it out",
                base.join(id)
                    .join(format!("{earlier_pid}.MemtrackResult.msgpack.stale"))
                    .display()
            )
        })
        .collect();
    assert_eq!(
        memtrack_lines(&stderr),
        [IN_PROCESS_LINE, &kept_apart[0], &kept_apart[1]],
        "{stderr}"
    );
    let tree = memtrack::MemtrackResult::scan_tree(&dir.path().join("memtrack")).unwrap();
    let current: Vec<(PathBuf, Vec<String>)> = tree
        .dirs
        .iter()
        .flat_map(|d| {
            d.results.iter().map(|r| {
                let uris = r.process.benchmarks.iter().map(|b| b.uri.clone()).collect();
                (d.relative.clone(), uris)
            })
        })
        .collect();
    assert_eq!(
        current,
        [(
            PathBuf::from("criterion/three_blocks"),
            vec!["three_blocks".to_owned()]
        )]
    );
    let second = saved(dir.path(), "three_blocks", SUITE);
    assert_eq!(numbers(&second.stats), numbers(&first.stats));
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn under_the_runner_criterion_is_memory_only_and_leaves_baselines_alone() {
    let dir = tempfile::tempdir().unwrap();
    // A timing baseline from an earlier run (in-process).
    run_in_process(SUITE, &SUITE_ARGS, dir.path());
    let home = dir.path().join("criterion");
    let before = snapshot(&home);
    assert!(
        before
            .keys()
            .any(|p| p.ends_with("three_blocks/new/estimates.json")),
        "{:?}",
        before.keys()
    );

    let Captured {
        outcome,
        stdout,
        stderr,
        dir: results,
    } = run_runner(SUITE, &SUITE_ARGS, &home);
    assert_eq!(memtrack_lines(&stderr), vec![RUNNER_LINE], "{stderr}");
    // criterion did not run: nothing timed, nothing compared, not a byte of its
    // baselines changed.
    assert!(
        !shows_timings(&stdout) && !stdout.contains("time:"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("change:") && !stdout.contains("regressed"),
        "{stdout}"
    );
    assert_eq!(snapshot(&home), before);
    // Each benchmark one exact region, the process nothing but their sum.
    let got: Vec<(&str, Numbers)> = outcome
        .results
        .benchmarks()
        .map(|(_, b)| (b.uri.as_str(), numbers(&b.stats)))
        .collect();
    // In the order criterion runs them.
    let want = [SUITE_EXPECTED[1], SUITE_EXPECTED[2], SUITE_EXPECTED[0]];
    assert_eq!(got, want, "{:#?}", outcome.results);
    outcome
        .results
        .benchmarks()
        .for_each(|(_, b)| check_benchmark_timeline(b));
    let process = outcome
        .results
        .processes
        .iter()
        .find(|r| r.benchmarks.len() == 3)
        .expect("the suite's result");
    check_is(process, SUITE);
    assert_eq!(
        numbers(&process.stats),
        (18, 6712, 17, 5688, 1, 1024, 4264, 8)
    );
    assert_eq!(outcome.markers.markers.len(), 6, "{:#?}", outcome.markers);
    let read = RunResults::read_dir(&results.path().join("results")).unwrap();
    assert_eq!(read, outcome.results);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn in_process_and_runner_count_every_criterion_benchmark_identically() {
    let dir = tempfile::tempdir().unwrap();
    run_in_process(SUITE, &SUITE_ARGS, dir.path());
    let in_process: Vec<_> = SUITE_EXPECTED
        .iter()
        .map(|(id, _)| saved(dir.path(), id, SUITE))
        .collect();
    let runner = run_runner(SUITE, &SUITE_ARGS, &dir.path().join("criterion"));
    let runner: Vec<_> = runner
        .outcome
        .results
        .benchmarks()
        .map(|(_, b)| b.clone())
        .collect();
    assert_eq!(by_uri(&in_process), by_uri(&runner));
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn under_the_runner_criterions_filter_and_test_mode_still_apply() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("criterion");
    // criterion's filter (a regex over the full id) selects what is counted.
    let filtered = run_runner(SUITE, &["--bench", "^vec"], &home);
    let got: Vec<&str> = filtered
        .outcome
        .results
        .benchmarks()
        .map(|(_, b)| b.uri.as_str())
        .collect();
    assert_eq!(got, vec!["vec/grow_100"]);
    // `--test` (no timing anyway) goes to criterion, which runs each benchmark once;
    // memtrack counts them, and criterion saves nothing.
    let tested = run_runner(SUITE, &["--bench", "--test"], &home);
    assert_eq!(
        tested.stdout.matches("Success").count(),
        3,
        "{}",
        tested.stdout
    );
    let got: Vec<(&str, Numbers)> = tested
        .outcome
        .results
        .benchmarks()
        .map(|(_, b)| (b.uri.as_str(), numbers(&b.stats)))
        .collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.contains(&SUITE_EXPECTED[0]) && got.contains(&SUITE_EXPECTED[2]));
    assert!(!home.exists() || snapshot(&home).is_empty());
}

const THREE_BLOCKS: Numbers = (3, 192, 3, 192, 0, 0, 192, 0);
const VEC_GROW_100: Numbers = (6, 2016, 5, 992, 1, 1024, 1024, 0);

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn in_process_byte_measurements_are_exact_and_compare_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let output = run_in_process(ALLOC, &[], dir.path());
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(memtrack_lines(&stderr), vec![IN_PROCESS_LINE], "{stderr}");
    for expected in [
        "memtrack three_blocks: 3 allocs, 192 B allocated, peak 192 B live, 0 B live at end \
         (one iteration)",
        "memtrack vec_grow_100_calls: 6 allocs, 2,016 B allocated, peak 1,024 B live, 1,024 B \
         live at end (one iteration)",
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
    assert_eq!(estimate(&home, "vec_grow_100", "mean"), 2016.0);
    assert_eq!(estimate(&home, "three_blocks_calls", "mean"), 3.0);
    assert_eq!(estimate(&home, "three_blocks_calls", "std_dev"), 0.0);
    assert_eq!(estimate(&home, "vec_grow_100_calls", "mean"), 6.0);

    for (id, expected) in [
        ("three_blocks", THREE_BLOCKS),
        ("vec_grow_100", VEC_GROW_100),
        ("three_blocks_calls", THREE_BLOCKS),
        ("vec_grow_100_calls", VEC_GROW_100),
    ] {
        assert_eq!(
            numbers(&saved(dir.path(), id, ALLOC).stats),
            expected,
            "{id}"
        );
    }

    // A second run compares exact, identical samples with the first run's baseline:
    // criterion's t-test has zero variance; the run still completes and reports.
    let again = run_in_process(ALLOC, &[], dir.path());
    let stdout = text(&again.stdout);
    assert!(
        stdout.contains("[192.00 B 192.00 B 192.00 B]"),
        "second run:\n{stdout}"
    );
    assert!(
        stdout.contains("No change in performance detected."),
        "second run:\n{stdout}"
    );
    assert_eq!(
        numbers(&saved(dir.path(), "three_blocks", ALLOC).stats),
        THREE_BLOCKS
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn under_the_runner_byte_benchmarks_are_regions_and_no_baseline_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    run_in_process(ALLOC, &[], dir.path());
    let home = dir.path().join("criterion");
    let before = snapshot(&home);
    let Captured {
        outcome,
        stdout,
        stderr,
        ..
    } = run_runner(ALLOC, &[], &home);
    assert_eq!(memtrack_lines(&stderr), vec![RUNNER_LINE], "{stderr}");
    // No comparison of nanoseconds with the saved bytes, nothing overwritten.
    assert!(
        !stdout.contains("time:") && !stdout.contains("change:"),
        "{stdout}"
    );
    assert_eq!(snapshot(&home), before);
    let got: Vec<(&str, Numbers)> = outcome
        .results
        .benchmarks()
        .map(|(_, b)| (b.uri.as_str(), numbers(&b.stats)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("three_blocks", THREE_BLOCKS),
            ("vec_grow_100", VEC_GROW_100),
            ("three_blocks_calls", THREE_BLOCKS),
            ("vec_grow_100_calls", VEC_GROW_100),
        ]
    );
}

/// A directory user `nobody` may write, inside `dir`.
fn writable(dir: &Path) -> PathBuf {
    let writable = dir.join("out");
    std::fs::create_dir(&writable).unwrap();
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).unwrap();
    writable
}

#[test]
fn without_privileges_criterion_times_and_byte_measurements_save_nothing() {
    if !can_run_unprivileged("without_privileges (criterion)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = writable(dir.path());
    // Each binary with its own criterion directory (both have a `three_blocks`).
    let run = |bin: &str, args: &[&str]| {
        let bin = copy_for_nobody(Path::new(bin), dir.path());
        let name = bin.file_name().unwrap().to_owned();
        unprivileged(&bin)
            .args(args)
            .env("CRITERION_HOME", out.join(name).join("criterion"))
            .env("MEMTRACK_OUTPUT_DIR", out.join("memtrack"))
            .env_remove("MEMTRACK_FIFO_DIR")
            .current_dir(&out)
            .output()
            .unwrap()
    };
    // The suite: timed by criterion, nothing counted or saved by memtrack.
    let (stdout, _) = ran_with_counts_disabled(&run(SUITE, &SUITE_ARGS));
    for (id, _) in SUITE_EXPECTED {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no report for {id}:\n{stdout}"));
        assert!(line.contains("time:") && shows_timings(line), "{line}");
    }
    assert!(!stdout.contains("memtrack "), "{stdout}");
    assert!(!out.join("memtrack").exists());

    // The byte measurements cannot count here: each benchmark says so and why, none is
    // handed to criterion (no "took zero time", no estimate of the wrong unit), and the
    // run exits 1.
    let output = run(ALLOC, &[]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    let why = |id: &str, measurement: &str| {
        format!(
            "memtrack-criterion {id}: not measured: {measurement} counts heap allocations \
             with memtrack's eBPF probes, and this process cannot attach them (no \
             CAP_BPF/CAP_PERFMON, and not under `memtrack run`); run it as root (sudo cargo \
             bench), or under `memtrack run`"
        )
    };
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(": not measured: "))
        .collect();
    assert_eq!(
        said,
        [
            why("three_blocks", "AllocatedBytes"),
            why("vec_grow_100", "AllocatedBytes"),
            why("three_blocks_calls", "AllocationCalls"),
            why("vec_grow_100_calls", "AllocationCalls"),
        ],
        "{stderr}"
    );
    assert!(
        stderr.ends_with(
            "memtrack: 4 benchmarks not measured (they count heap allocations, and this \
             process cannot; above): exit code 1\n"
        ),
        "{stderr}"
    );
    assert!(!stdout.contains("took zero time"), "{stdout}");
    assert!(!stdout.contains("time:"), "{stdout}");
    for id in [
        "three_blocks",
        "vec_grow_100",
        "three_blocks_calls",
        "vec_grow_100_calls",
    ] {
        let estimates = out.join("criterion_alloc/criterion").join(id);
        assert!(
            !estimates.join("new/estimates.json").exists(),
            "{}",
            estimates.display()
        );
    }
}

/// Results that cannot be saved are said, and `criterion_main!` then exits 1: a CI job
/// reading the results must not pass on missing ones, or on stale ones an earlier run
/// left there.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn unsaved_results_are_said_and_fail_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("a-file");
    std::fs::write(&not_a_dir, "").unwrap();
    let output = Command::new(SUITE)
        .args(SUITE_ARGS)
        .env("CRITERION_HOME", dir.path().join("criterion"))
        .env("MEMTRACK_OUTPUT_DIR", &not_a_dir)
        .env_remove("MEMTRACK_FIFO_DIR")
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.matches(": result not saved: ").count(),
        3,
        "{stderr}"
    );
    assert!(
        stderr.ends_with(
            "memtrack: 3 benchmark results not saved (the errors are above): exit code 1\n"
        ),
        "{stderr}"
    );
}
