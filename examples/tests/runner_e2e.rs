//! `memtrack run` end to end (through `memtrack_cli::runner::run`, what the binary calls):
//! benchmark regions marked over the FIFO are counted exactly and none of the noise; a
//! multi-process shell command gets one result per process with the right parents;
//! garbage in the control FIFO is answered and measuring goes on.

use std::path::PathBuf;

use memtrack::{CommandSpec, RunResults, TrackedProcess};
use memtrack_cli::runner::RunOptions;

fn run(spec: CommandSpec) -> (memtrack_cli::runner::RunOutcome, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let options = RunOptions {
        output: Some(dir.path().to_path_buf()),
        run_as: None,
        ..Default::default()
    };
    (memtrack_cli::runner::run(spec, &options).unwrap(), dir)
}

/// (uri, alloc_calls, bytes_allocated, free_calls, bytes_freed, live_blocks,
/// peak_live_bytes, unmatched + failed + lost)
type Row<'a> = (&'a str, u64, u64, u64, u64, u64, u64, u64);

fn check_regions(outcome: &memtrack_cli::runner::RunOutcome) {
    assert_eq!(outcome.exit.code, Some(0));
    let got: Vec<Row> = outcome
        .results
        .benchmarks()
        .map(|(_, b)| {
            let s = &b.stats;
            (
                b.uri.as_str(),
                s.alloc_calls,
                s.bytes_allocated,
                s.free_calls,
                s.bytes_freed,
                s.live_blocks,
                s.peak_live_bytes,
                s.unmatched_frees + s.failed_allocs + s.lost_events,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("marked_regions::ten", 10, 1000, 10, 1000, 0, 1000, 0),
            ("marked_regions::hundred", 100, 6400, 100, 6400, 0, 6400, 0),
            (
                "marked_regions::thousand",
                1000,
                32000,
                0,
                0,
                1000,
                32000,
                0
            ),
        ],
        "{:#?}",
        outcome.results
    );
    // The process result is the sum of its regions: none of the noise.
    assert_eq!(outcome.results.processes.len(), 1);
    let process = &outcome.results.processes[0].stats;
    assert_eq!(
        (
            process.alloc_calls,
            process.bytes_allocated,
            process.free_calls
        ),
        (1110, 39400, 110),
        "{process:#?}"
    );
    assert_eq!(process.peak_live_bytes, 32000);
    // Markers and spans came through.
    assert_eq!(outcome.markers.benchmarks.len(), 3);
    assert_eq!(outcome.markers.markers.len(), 6);
    assert_eq!(outcome.markers.measurements.len(), 3);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn regions_are_exact_and_noise_is_not_counted() {
    let (outcome, dir) = run(CommandSpec::new(env!("CARGO_BIN_EXE_marked_regions")));
    check_regions(&outcome);
    // Everything is in the directory too, and reads back the same.
    let read = RunResults::read_dir(dir.path()).unwrap();
    assert_eq!(read, outcome.results);
    let markers =
        fifo_protocol::MarkerResult::read_from(&dir.path().join("MarkerResult.msgpack")).unwrap();
    assert_eq!(markers, outcome.markers);
    let json = memtrack_report::report::render_json(&read);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["schema_version"], memtrack::SCHEMA_VERSION);
    let process = &value["processes"][0];
    assert_eq!(process["benchmarks"][2]["uri"], "marked_regions::thousand");
    assert_eq!(process["benchmarks"][2]["stats"]["alloc_calls"], 1000);
    assert_eq!(process["stats"]["alloc_calls"], 1110);
}

/// A benchmark region the process ends inside (a panic, a signal, an exit) is listed,
/// last, marked unfinished, with what it counted: its bytes are in the process's
/// totals, so they are in a benchmark too. The report says it, and a limit on it fails
/// (its counters are partial, and would pass a limit the whole iteration may exceed).
#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn a_region_the_process_ends_inside_is_listed_as_unfinished() {
    let (outcome, dir) =
        run(CommandSpec::new(env!("CARGO_BIN_EXE_marked_regions")).args(["--exit-inside"]));
    assert_eq!(outcome.exit.code, Some(0));
    let read = RunResults::read_dir(dir.path()).unwrap();
    assert_eq!(read, outcome.results);
    let process = &read.processes[0];
    let benchmarks: Vec<_> = process
        .benchmarks
        .iter()
        .map(|b| {
            let s = &b.stats;
            (
                b.uri.as_str(),
                b.unfinished,
                (s.alloc_calls, s.bytes_allocated, s.free_calls, s.live_bytes),
            )
        })
        .collect();
    assert_eq!(
        benchmarks,
        [
            ("marked_regions::ten", false, (10, 1000, 10, 0)),
            ("marked_regions::hundred", false, (100, 6400, 100, 0)),
            ("marked_regions::thousand", false, (1000, 32000, 0, 32000)),
            // 5 blocks of 1000 bytes and the Vec of 5 pointers holding them.
            ("marked_regions::unfinished", true, (6, 5040, 0, 5040)),
        ]
    );
    // The process's totals are the sum of its regions, the unfinished one included.
    assert_eq!(
        (process.stats.alloc_calls, process.stats.bytes_allocated),
        (1116, 44440)
    );
    let text = memtrack_report::report::render_text(&read.processes);
    assert!(
        text.contains("benchmark marked_regions::unfinished (process ")
            && text.contains(") UNFINISHED: the process ended inside it"),
        "{text}"
    );
    let limits: Vec<memtrack_report::limits::Limit> = ["marked_regions::*:alloc_calls<=100000"]
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    let checked = memtrack_report::limits::check(&limits, &[(dir.path(), &read.processes)]);
    assert_eq!(checked.checks, 4);
    assert_eq!(checked.exceeded.len(), 1, "{:?}", checked.exceeded);
    assert!(
        checked.exceeded[0].contains("did not finish (the process ended inside it)"),
        "{:?}",
        checked.exceeded
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn garbage_in_the_control_fifo_is_answered_and_measuring_goes_on() {
    let (outcome, _dir) =
        run(CommandSpec::new(env!("CARGO_BIN_EXE_marked_regions")).args(["--garbage"]));
    check_regions(&outcome);
}

fn compile_fixture(name: &str, dir: &std::path::Path) -> PathBuf {
    let src = memtrack_test_support::fixtures_dir().join(format!("{name}.c"));
    memtrack_test_support::compile_c(&src, dir, &[])
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn shell_command_gets_one_result_per_process_with_parents() {
    let bins = tempfile::tempdir().unwrap();
    let fixture = compile_fixture("malloc_free", bins.path());
    let script = format!("/bin/true; {} & wait", fixture.display());
    let (outcome, dir) = run(CommandSpec::new("sh").args(["-c", &script]));
    assert_eq!(outcome.exit.code, Some(0));
    let results = RunResults::read_dir(dir.path()).unwrap().processes;
    assert_eq!(results.len(), 3, "{results:#?}");
    let shell = results
        .iter()
        .find(|r| r.command.first().is_some_and(|c| c == "sh"))
        .unwrap();
    assert_eq!(shell.ppid, std::process::id());
    let children: Vec<&TrackedProcess> = results.iter().filter(|r| r.pid != shell.pid).collect();
    assert!(
        children.iter().all(|c| c.ppid == shell.pid),
        "{children:#?}"
    );
    let true_child = children
        .iter()
        .find(|c| c.command == ["/bin/true"])
        .expect("a result for /bin/true");
    assert_eq!(
        true_child.earlier_images.len(),
        1,
        "the shell's child before exec"
    );
    let fixture_child = children
        .iter()
        .find(|c| c.command == [fixture.display().to_string()])
        .expect("a result for the fixture");
    // The exec'd fixture's own numbers, exactly (the shell child's work before the exec
    // is kept apart in earlier_images).
    let s = &fixture_child.stats;
    assert_eq!(
        (
            s.alloc_calls,
            s.free_calls,
            s.bytes_allocated,
            s.bytes_freed,
            s.failed_allocs
        ),
        (11, 11, 271_036, 271_036, 1),
        "{s:#?}"
    );
    assert_eq!((s.live_blocks, s.unmatched_frees, s.lost_events), (0, 0, 0));
}
