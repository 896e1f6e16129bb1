//! What CI relies on (issue 13): the JSON report in a file or alone on stdout while the
//! command prints to its own stdout; one exit code per outcome; an empty tree of results
//! is an error, and results below the directory given are found with their place; a used
//! `-o` is refused or replaced, never mixed; `memtrack diff` of two runs of a program
//! whose one benchmark allocates 10% more names it and exits 203; limits likewise.

use std::{
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use memtrack::{BenchmarkStats, MemtrackResult, Stats, TrackedProcess};
use memtrack_cli::exit_code::{LIMIT_EXCEEDED, LOST_EVENTS, MEMTRACK_FAILED};
use memtrack_test_support::fixture;

fn memtrack(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_memtrack"));
    command.args(args);
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `out`'s exit code, asserted, showing its output otherwise.
fn assert_code(out: &Output, code: u8) {
    assert_eq!(
        out.status.code(),
        Some(i32::from(code)),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// A command that writes one line to stdout and one to stderr.
const TALKER: [&str; 3] = [
    "sh",
    "-c",
    "echo the-commands-own-stdout; echo its-stderr >&2",
];

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn json_file_parses_while_the_command_prints_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let (results, json) = (dir.path().join("results"), dir.path().join("run.json"));
    let out = memtrack(&["run", "-o"])
        .arg(&results)
        .arg("--json")
        .arg(&json)
        .arg("--")
        .args(TALKER)
        .output()
        .unwrap();
    assert_code(&out, 0);
    // stdout is exactly the command's; memtrack's report is on stderr with its stderr.
    assert_eq!(text(&out.stdout), "the-commands-own-stdout\n");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("its-stderr\n"), "{stderr}");
    assert!(stderr.contains("\n  allocations     "), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["schema_version"], memtrack::SCHEMA_VERSION);
    assert_eq!(report["memtrack_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(report["processes"][0]["command"][0], "sh");
    assert_eq!(report["processes"][0]["exit_code"], 0);
    // The same records as the result files.
    let read: memtrack::RunResults = serde_json::from_value(report).unwrap();
    assert_eq!(
        read.processes,
        memtrack::RunResults::read_dir(&results).unwrap().processes
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn json_on_stdout_moves_the_commands_stdout_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let out = memtrack(&["run", "--json", "-", "-o"])
        .arg(dir.path())
        .arg("--")
        .args(TALKER)
        .output()
        .unwrap();
    assert_code(&out, 0);
    // stdout is one JSON document, nothing else.
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["processes"].as_array().map(Vec::len), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("the-commands-own-stdout\n"), "{stderr}");
    assert!(stderr.contains("its-stderr\n"), "{stderr}");
}

/// A used `-o`: refused before the command runs (its results untouched), or with
/// `--replace` emptied of memtrack's files alone (a link among them removed, not
/// followed), so the directory holds one run.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_used_results_directory_is_refused_or_replaced_never_mixed() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let run = |extra: &[&str], command: &[&str]| {
        memtrack(&["run", "-o"])
            .arg(&results)
            .args(extra)
            .arg("--")
            .args(command)
            .output()
            .unwrap()
    };
    assert_code(&run(&[], &["true"]), 0);
    let first = memtrack::RunResults::read_dir(&results).unwrap();
    assert_eq!(first.processes.len(), 1);

    let mark = dir.path().join("MARK");
    let out = run(&[], &["touch", mark.to_str().unwrap()]);
    assert_code(&out, MEMTRACK_FAILED);
    assert_eq!(
        text(&out.stderr),
        format!(
            "memtrack: results directory {} already holds the results of an earlier run (2 \
             files, {}.MemtrackResult.msgpack first): give a new directory, or --replace to \
             remove them first\n",
            results.display(),
            first.processes[0].pid
        )
    );
    assert!(!mark.exists(), "the command ran");
    assert_eq!(memtrack::RunResults::read_dir(&results).unwrap(), first);

    // --replace: memtrack's files go, nothing else; a planted link goes, its target stays.
    let canary = dir.path().join("canary");
    std::fs::write(&canary, b"canary").unwrap();
    symlink(&canary, results.join("1.MemtrackResult.msgpack")).unwrap();
    std::fs::write(results.join("notes.txt"), b"mine").unwrap();
    let out = run(&["--replace"], &["touch", mark.to_str().unwrap()]);
    assert_code(&out, 0);
    assert!(mark.exists());
    let second = memtrack::RunResults::read_dir(&results).unwrap();
    assert_eq!(second.processes.len(), 1);
    assert_eq!(second.processes[0].command[0], "touch");
    assert_eq!(std::fs::read(&canary).unwrap(), b"canary");
    assert_eq!(std::fs::read(results.join("notes.txt")).unwrap(), b"mine");
    let mut names: Vec<String> = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            format!("{}.MemtrackResult.msgpack", second.processes[0].pid),
            "MarkerResult.msgpack".to_owned(),
            "notes.txt".to_owned()
        ]
    );
    // --replace needs -o.
    assert_code(
        &memtrack(&["run", "--replace", "--", "true"])
            .output()
            .unwrap(),
        MEMTRACK_FAILED,
    );
}

/// The command's code by default; with a limit exceeded 203, unless the command failed;
/// a limit that matches nothing 201; lost events 202 only with --fail-on-lost.
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn each_outcome_has_its_exit_code() {
    let run = |args: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        memtrack(&["run", "-o"])
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    // sh allocates at start: no process of it keeps to zero allocation calls.
    let limit = ["--limit", "process:sh *:alloc_calls<=0"];
    assert_code(&run(&["--", "sh", "-c", "exit 7"]), 7);
    let out = run(&[&limit[..], &["--", "sh", "-c", "true"]].concat());
    assert_code(&out, LIMIT_EXCEEDED);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("memtrack: limit exceeded: process ")
            && stderr.contains(" (sh -c true): alloc_calls is "),
        "{stderr}"
    );
    assert_code(
        &run(&[&limit[..], &["--", "sh", "-c", "exit 5"]].concat()),
        5,
    );
    let out = run(&["--limit", "nothing:alloc_calls<=0", "--", "true"]);
    assert_code(&out, MEMTRACK_FAILED);
    assert!(
        text(&out.stderr).ends_with(
            "memtrack: limit \"nothing:alloc_calls<=0\" is on benchmarks, and the results \
             have no benchmark region (a limit on whole processes is written \
             'process:CMD_GLOB:...')\n"
        ),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["--limit", "*:alloc_calls<=1KiB", "--", "true"]);
    assert_code(&out, MEMTRACK_FAILED);
    assert!(
        text(&out.stderr).contains("alloc_calls is a count, and \"1KiB\" is not a whole number"),
        "{}",
        text(&out.stderr)
    );

    // Two live blocks for a program that leaks more: events are lost.
    let leak = fixture("leak").display().to_string();
    let lossy = ["--max-live-blocks", "2", "--", &leak];
    let out = run(&lossy);
    assert_code(&out, 0);
    assert!(text(&out.stderr).contains("events lost: some numbers are not exact"));
    assert_code(
        &run(&[&["--fail-on-lost"][..], &lossy].concat()),
        LOST_EVENTS,
    );
    // Exact runs are not failed by --fail-on-lost.
    assert_code(&run(&["--fail-on-lost", "--", &leak]), 0);
}

/// A saved result with lost events: `report` exits 0, or 202 with `--fail-on-lost`.
#[test]
fn report_fails_on_lost_events_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let mut process = TrackedProcess::new(5, 1, vec!["prog".into()]);
    process.stats.lost_events = 3;
    MemtrackResult::new(process)
        .write_to_dir(dir.path())
        .unwrap();
    let report = |extra: &[&str]| {
        memtrack(&["report"])
            .arg(dir.path())
            .args(extra)
            .output()
            .unwrap()
    };
    assert_code(&report(&[]), 0);
    let out = report(&["--fail-on-lost"]);
    assert_code(&out, LOST_EVENTS);
    assert_eq!(
        text(&out.stderr),
        "memtrack: 3 events lost: some numbers are not exact\n"
    );
}

/// A process with benchmark `uri` allocating `calls` blocks, as an integration saves it.
fn saved(dir: &Path, pid: u32, uri: &str, calls: u64) {
    let mut stats = Stats::default();
    stats.alloc_calls = calls;
    let mut process = TrackedProcess::new(pid, 1, vec![format!("bench-{pid}")]);
    process.benchmarks = vec![BenchmarkStats::new(uri, stats.clone())];
    process.stats = stats;
    MemtrackResult::new(process).write_to_dir(dir).unwrap();
}

/// `memtrack report target/memtrack`: the integrations' results, each under its
/// directory; a tree without any is an error.
#[test]
fn report_finds_results_below_the_directory_given() {
    let target = tempfile::tempdir().unwrap();
    let root = target.path().join("memtrack");
    std::fs::create_dir_all(root.join("criterion/empty")).unwrap();
    let out = memtrack(&["report"]).arg(&root).output().unwrap();
    assert_code(&out, MEMTRACK_FAILED);
    assert_eq!(out.stdout, b"");
    assert_eq!(
        text(&out.stderr),
        format!(
            "memtrack: {} holds no result files (*.MemtrackResult.msgpack) nor do the 2 \
             directories below it: nothing to report\n",
            root.display()
        )
    );

    saved(&root.join("criterion/three_blocks"), 11, "three_blocks", 3);
    saved(&root.join("divan/divan_suite"), 12, "divan_suite::vec", 1);
    let out = memtrack(&["report", "--json"]).arg(&root).output().unwrap();
    assert_code(&out, 0);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let found: Vec<(&str, &str)> = json["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["result_dir"].as_str().unwrap(),
                p["benchmarks"][0]["uri"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("criterion/three_blocks", "three_blocks"),
            ("divan/divan_suite", "divan_suite::vec")
        ]
    );
    let out = memtrack(&["report"]).arg(&root).output().unwrap();
    assert_code(&out, 0);
    let report = text(&out.stdout);
    let headers: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("results in "))
        .collect();
    assert_eq!(
        headers,
        [
            "results in criterion/three_blocks:",
            "results in divan/divan_suite:"
        ]
    );
    // Limits apply to every directory, and say where.
    let out = memtrack(&["report", "--limit", "*:alloc_calls<=2"])
        .arg(&root)
        .output()
        .unwrap();
    assert_code(&out, LIMIT_EXCEEDED);
    assert!(
        text(&out.stderr).contains(
            "memtrack: limit exceeded: benchmark three_blocks in criterion/three_blocks \
             (process 11): alloc_calls is 3, more than 2"
        ),
        "{}",
        text(&out.stderr)
    );
}

/// tests/programs/scaled_regions, built once for this test binary.
fn scaled_regions() -> PathBuf {
    memtrack_test_support::program("scaled_regions")
}

/// `memtrack run -o DIR -- scaled_regions` with SCALED_PERCENT=`percent`.
fn scaled_run(dir: &Path, percent: u32) {
    let out = memtrack(&["run", "-o"])
        .arg(dir)
        .arg("--")
        .arg(scaled_regions())
        .env("SCALED_PERCENT", percent.to_string())
        .output()
        .unwrap();
    assert_code(&out, 0);
}

/// The cells of the row of `what` and `counter` in a diff's text table.
fn row<'a>(table: &'a str, what: &str, counter: &str) -> Vec<&'a str> {
    let mut current = "";
    for line in table.lines().skip(2) {
        let cells: Vec<&str> = line
            .split("   ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        if line.starts_with("  ") || cells.is_empty() {
            // A continuation row: no name in the first column.
        } else {
            current = cells[0];
        }
        if current == what && cells.contains(&counter) {
            return cells;
        }
    }
    panic!("no row {what} {counter} in\n{table}");
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn diff_names_the_benchmark_that_allocates_ten_percent_more() {
    let dir = tempfile::tempdir().unwrap();
    let (base, new) = (dir.path().join("base"), dir.path().join("new"));
    scaled_run(&base, 100);
    scaled_run(&new, 110);
    let summary = dir.path().join("summary.md");
    std::fs::write(&summary, "earlier step\n").unwrap();
    let diff = |extra: &[&str]| {
        memtrack(&["diff"])
            .arg(&base)
            .arg(&new)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = diff(&[
        "--max-increase",
        "5%",
        "--markdown",
        summary.to_str().unwrap(),
    ]);
    assert_code(&out, LIMIT_EXCEEDED);
    let table = text(&out.stdout);
    assert!(
        table.starts_with(
            "memtrack diff: 12 counters compared (alloc_calls, bytes_allocated, \
             peak_live_bytes) in 1 process and 3 benchmarks: 4 above +5%\n"
        ),
        "{table}"
    );
    let grown = "benchmark scaled::grown";
    assert_eq!(
        row(&table, grown, "alloc_calls"),
        [
            grown,
            "alloc_calls",
            "100",
            "110",
            "+10 (+10.0%)",
            "ABOVE +5%"
        ]
    );
    for counter in ["alloc_calls", "bytes_allocated", "peak_live_bytes"] {
        let fixed = row(&table, "benchmark scaled::fixed", counter);
        assert!(!fixed.contains(&"ABOVE +5%"), "{fixed:?}");
        assert!(fixed.last().unwrap().ends_with("(0.0%)"), "{fixed:?}");
    }
    // The process: +10 of 210 calls is 4.8%, its peak (the grown region's) +10%.
    let process = format!("process {}", scaled_regions().display());
    assert_eq!(
        row(&table, &process, "alloc_calls"),
        [process.as_str(), "alloc_calls", "210", "220", "+10 (+4.8%)"]
    );
    assert_eq!(
        row(&table, &process, "peak_live_bytes").last(),
        Some(&"ABOVE +5%")
    );
    let markdown = std::fs::read_to_string(&summary).unwrap();
    assert!(
        markdown.starts_with(&format!(
            "earlier step\n### memtrack diff: `{}` → `{}`\n",
            base.display(),
            new.display()
        )),
        "{markdown}"
    );
    assert!(
        markdown.contains("| `benchmark scaled::grown` ") && markdown.contains("**above +5%**"),
        "{markdown}"
    );

    // Exactly +10% is not above 10%; the chosen counters only; a run against itself.
    assert_code(&diff(&["--max-increase", "10%"]), 0);
    let out = diff(&["--max-increase", "5%", "--counter", "alloc_calls"]);
    assert_code(&out, LIMIT_EXCEEDED);
    assert!(
        text(&out.stdout).starts_with(
            "memtrack diff: 4 counters compared (alloc_calls) in 1 process and 3 benchmarks: \
             1 above +5%\n"
        ),
        "{}",
        text(&out.stdout)
    );
    let same = memtrack(&["diff", "--max-increase", "0%"])
        .arg(&base)
        .arg(&base)
        .output()
        .unwrap();
    assert_code(&same, 0);
    assert!(text(&same.stdout).contains(": none above +0%\n"));
    // Nothing in common, or nothing at all: memtrack cannot compare.
    let empty = tempfile::tempdir().unwrap();
    let out = memtrack(&["diff"])
        .arg(&base)
        .arg(empty.path())
        .output()
        .unwrap();
    assert_code(&out, MEMTRACK_FAILED);

    // The same finding as limits: on the new run, by `report` and by `run`.
    let limit = ["--limit", "scaled::*:alloc_calls<=100"];
    let out = memtrack(&["report"])
        .arg(&new)
        .args(limit)
        .output()
        .unwrap();
    assert_code(&out, LIMIT_EXCEEDED);
    let exceeded: Vec<String> = text(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("memtrack: limit exceeded: "))
        .map(|l| l.split(" (process ").next().unwrap().to_owned())
        .collect();
    assert_eq!(
        exceeded,
        ["memtrack: limit exceeded: benchmark scaled::grown"]
    );
    let out = memtrack(&["report"])
        .arg(&base)
        .args(limit)
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert!(
        text(&out.stderr).ends_with("memtrack: 1 limit held (3 checks)\n"),
        "{}",
        text(&out.stderr)
    );
    let limits_file = dir.path().join("limits");
    std::fs::write(
        &limits_file,
        "# the grown benchmark's budget\nscaled::grown:peak_live_bytes<=10000B\n",
    )
    .unwrap();
    let rerun = dir.path().join("rerun");
    let out = memtrack(&["run", "--limits", limits_file.to_str().unwrap(), "-o"])
        .arg(&rerun)
        .arg("--")
        .arg(scaled_regions())
        .env("SCALED_PERCENT", "110")
        .output()
        .unwrap();
    assert_code(&out, LIMIT_EXCEEDED);
    assert!(
        text(&out.stderr).contains("benchmark scaled::grown (process ")
            && text(&out.stderr).contains(
                "): peak_live_bytes is 10.7 KiB (11,000 B), more than 9.8 KiB (10,000 B) (limit \
             \"scaled::grown:peak_live_bytes<=10000B\")"
            ),
        "{}",
        text(&out.stderr)
    );
}
