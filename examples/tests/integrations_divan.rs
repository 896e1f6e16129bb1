//! memtrack-divan end to end, through the `divan_suite` example binary (three benchmarks
//! with known allocations): in-process it prints the exact table after divan's output
//! and saves one result file that `RunResults::read_dir` (what `memtrack report`
//! uses) reads back with the exact numbers; under the runner each benchmark is one exact
//! region; without privileges and without the runner it says so in one line and divan
//! still runs.

use memtrack_test_support::{
    can_run_unprivileged, copy_for_nobody, require_privileges, unprivileged,
};
use std::{
    path::Path,
    process::{Command, Output},
};

use memtrack::{CommandSpec, RunResults};

mod common;
use common::{
    Captured, IN_PROCESS_LINE, Numbers, RUNNER_LINE, memtrack_lines, numbers,
    ran_with_counts_disabled, run_under_runner, text,
};

const BIN: &str = env!("CARGO_BIN_EXE_divan_suite");
/// Benchmark, few samples: the counts do not depend on them.
const ARGS: [&str; 3] = ["--bench", "--sample-count", "3"];

/// The suite's benchmarks in divan's (alphabetical) order, with their exact numbers.
const EXPECTED: [(&str, Numbers); 3] = [
    ("divan_suite::boxed_kib", (1, 1024, 0, 0, 1, 1024, 1024, 0)),
    ("divan_suite::three_blocks", (3, 192, 3, 192, 0, 0, 192, 0)),
    (
        "divan_suite::vec_grow_100",
        (6, 2016, 5, 992, 1, 1024, 1024, 0),
    ),
];

fn run_in_process(out: &Path) -> Output {
    let output = Command::new(BIN)
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

#[test]
fn in_process_divan_prints_the_exact_table_and_saves_results() {
    if !require_privileges("in_process_divan_prints_the_exact_table") {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let output = run_in_process(out.path());
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(memtrack_lines(&stderr), vec![IN_PROCESS_LINE], "{stderr}");

    // divan's own table first, with timings ...
    let ours = stdout
        .find("memtrack: one iteration")
        .unwrap_or_else(|| panic!("no memtrack table in:\n{stdout}"));
    let divan = &stdout[..ours];
    for name in ["boxed_kib", "three_blocks", "vec_grow_100"] {
        assert!(divan.contains(name), "{divan}");
    }
    assert!(divan.contains("median"), "divan benchmarked:\n{divan}");
    // ... then memtrack's, exactly.
    let dir = out.path().join("divan/divan_suite");
    let expected = format!(
        "memtrack: one iteration per benchmark, after one warm-up iteration (exact)\n\
         benchmark                  allocs  allocated  peak live  live at end\n\
         divan_suite::boxed_kib          1    1,024 B    1,024 B      1,024 B\n\
         divan_suite::three_blocks       3      192 B      192 B          0 B\n\
         divan_suite::vec_grow_100       6    2,016 B    1,024 B      1,024 B\n\
         memtrack: saved in {0} (read it with `memtrack report {0}`)\n",
        dir.display()
    );
    assert_eq!(&stdout[ours..], expected);

    // One result file for the process, with every benchmark, read as `memtrack report`
    // reads it.
    let results = RunResults::read_dir(&dir).unwrap().processes;
    assert_eq!(results.len(), 1, "{results:#?}");
    let result = &results[0];
    assert!(
        result
            .command
            .first()
            .is_some_and(|c| c.ends_with("divan_suite")),
        "{:?}",
        result.command
    );
    let got: Vec<(&str, Numbers)> = result
        .benchmarks
        .iter()
        .map(|b| (b.uri.as_str(), numbers(&b.stats)))
        .collect();
    assert_eq!(got, EXPECTED);
    // The process's stats are the sum of its benchmarks (peak: the highest).
    assert_eq!(
        numbers(&result.stats),
        (10, 3232, 8, 1184, 2, 2048, 1024, 0)
    );
    let report = memtrack_cli::report::render_text(&results);
    for (uri, _) in EXPECTED {
        assert!(
            report.contains(&format!("benchmark {uri} (process")),
            "{report}"
        );
    }

    // Run again: the directory holds the latest run only.
    run_in_process(out.path());
    let again = RunResults::read_dir(&dir).unwrap().processes;
    assert_eq!(again.len(), 1, "{again:#?}");
    assert_ne!(again[0].pid, result.pid);
    let got: Vec<(&str, Numbers)> = again[0]
        .benchmarks
        .iter()
        .map(|b| (b.uri.as_str(), numbers(&b.stats)))
        .collect();
    assert_eq!(got, EXPECTED);
}

#[test]
fn under_the_runner_each_divan_benchmark_is_one_exact_region() {
    if !require_privileges("under_the_runner_each_divan_benchmark_is_one_exact_region") {
        return;
    }
    let Captured {
        outcome,
        stdout,
        stderr,
        dir,
    } = run_under_runner(|spec, _| spec, CommandSpec::new(BIN).args(ARGS));
    assert_eq!(outcome.exit.code, Some(0));
    assert_eq!(memtrack_lines(&stderr), vec![RUNNER_LINE], "{stderr}");
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
    assert_eq!(got, EXPECTED, "{:#?}", outcome.results);
    let read = RunResults::read_dir(&dir.path().join("results")).unwrap();
    assert_eq!(read, outcome.results);
}

#[test]
fn without_privileges_divan_says_so_once_and_still_runs() {
    if !can_run_unprivileged("without_privileges (divan)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = copy_for_nobody(Path::new(BIN), dir.path());
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
    assert!(stdout.contains("median"), "{stdout}");
    for name in ["boxed_kib", "three_blocks", "vec_grow_100"] {
        assert!(stdout.contains(&format!("─ {name} ")), "{name}:\n{stdout}");
    }
    assert!(!stdout.contains("memtrack"), "{stdout}");
    assert!(!dir.path().join("memtrack").exists());
}
