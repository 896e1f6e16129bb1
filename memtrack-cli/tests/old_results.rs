//! `memtrack report` of the result directories written by earlier versions of memtrack
//! (tests/data/results-v1, -v2; tests/data/README.md says which commit and command wrote
//! each), and their `MarkerResult.msgpack` files, read with today's code. No
//! privileges needed.

use std::{path::PathBuf, process::Command};

use fifo_protocol::{MARKER_RESULT_FILE_NAME, Marker, MarkerResult};
use memtrack_test_support::repo_dir;

/// tests/data/results-v{version}/{run}.
fn data(version: u32, run: &str) -> PathBuf {
    repo_dir()
        .join("tests/data")
        .join(format!("results-v{version}"))
        .join(run)
}

/// Every run directory of every version: (version, run, processes in it).
const RUNS: [(u32, &str, usize); 8] = [
    (1, "exec", 2),
    (1, "fork", 2),
    (1, "leak", 1),
    (1, "marked_regions", 1),
    (2, "exec", 2),
    (2, "fork", 2),
    (2, "leak_no_syscalls", 1),
    (2, "marked_regions", 1),
];

/// `memtrack report OPTIONS DIR`: asserts that it exited 0 and returns its stdout.
fn report(options: &[&str], dir: PathBuf) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_memtrack"))
        .arg("report")
        .args(options)
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{}: {stderr}", dir.display());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn report_of_version_1_files_is_exact() {
    // fork.c's exact numbers (tests/fixtures/expected.json), and the parent's syscalls
    // as the file recorded them.
    assert_eq!(
        report(&[], data(1, "fork")),
        "\
process 21423 (parent 21417): /tmp/memtrack-fixtures/fork [exit 0]
  allocations     5 blocks, 9.4 KiB (9,600 B)
  frees           2 blocks, 4.1 KiB (4,200 B)
  live at end     3 blocks, 5.3 KiB (5,400 B)
  peak live       9.4 KiB (9,600 B)
  mmap/munmap/brk 8 mmap (3.7 MiB), 1 munmap (38.5 KiB), 3 brk (+132 KiB / -0 B)
  calls           free 2, malloc 5
process 21426 (parent 21423): /tmp/memtrack-fixtures/fork [exit 0]
  allocations     3 blocks, 3.0 KiB (3,100 B)
  frees           1 block, 1000 B
  live at end     2 blocks, 2.1 KiB (2,100 B)
  peak live       3.0 KiB (3,100 B)
  unmatched frees 1 (pointers memtrack did not see allocated)
  calls           calloc 1, free 2, malloc 2
"
    );
}

#[test]
fn report_of_version_2_files_says_not_counted_and_lists_benchmarks() {
    let leak = report(&[], data(2, "leak_no_syscalls"));
    assert!(
        leak.contains(
            "\n  peak live       6.1 KiB (6,200 B)\n  mmap/munmap/brk not counted\n  calls           \
             calloc 1, free 2, malloc 5, realloc 1\n"
        ),
        "{leak}"
    );
    let regions = report(&[], data(2, "marked_regions"));
    let benchmarks: Vec<&str> = regions
        .lines()
        .filter(|l| l.starts_with("benchmark "))
        .collect();
    assert_eq!(
        benchmarks,
        [
            "benchmark marked_regions::ten (process 11146)",
            "benchmark marked_regions::hundred (process 11146)",
            "benchmark marked_regions::thousand (process 11146)"
        ],
        "{regions}"
    );
    assert!(
        regions.ends_with(
            "benchmark marked_regions::thousand (process 11146)\n  allocations     1,000 blocks, \
             31.2 KiB (32,000 B)\n  frees           0 blocks, 0 B\n  live at end     1,000 \
             blocks, 31.2 KiB (32,000 B)\n  peak live       31.2 KiB (32,000 B)\n  calls           \
             malloc 1,000\n"
        ),
        "{regions}"
    );
}

#[test]
fn json_report_of_old_files_is_in_todays_schema() {
    for (version, run, processes) in RUNS {
        let text = report(&["--json"], data(version, run));
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["schema_version"], memtrack::SCHEMA_VERSION, "{run}");
        assert_eq!(json["memtrack_version"], env!("CARGO_PKG_VERSION"));
        let list = json["processes"].as_array().unwrap();
        assert_eq!(list.len(), processes, "v{version} {run}");
        // Version 1 always counted the syscalls; version 2 without them is null.
        let syscalls = &list[0]["stats"]["syscalls"];
        assert_eq!(
            syscalls.is_null(),
            run == "leak_no_syscalls",
            "v{version} {run}: {syscalls}"
        );
        // It reads back as today's records.
        let read: memtrack::RunResults = serde_json::from_str(&text).unwrap();
        let files = memtrack::RunResults::read_dir(&data(version, run)).unwrap();
        assert_eq!(read, files, "v{version} {run}");
    }
    let text = report(&["--json"], data(1, "marked_regions"));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let benchmarks = &json["processes"][0]["benchmarks"];
    assert_eq!(benchmarks[2]["uri"], "marked_regions::thousand");
    assert_eq!(benchmarks[2]["stats"]["alloc_calls"], 1000);
    assert_eq!(benchmarks[2]["stats"]["live_bytes"], 32000);
}

#[test]
fn old_marker_files_read() {
    for (version, run, _) in RUNS {
        let markers = MarkerResult::read_from(&data(version, run).join(MARKER_RESULT_FILE_NAME))
            .unwrap_or_else(|e| panic!("v{version} {run}: {e}"));
        assert_eq!(markers.schema_version, 1, "{run}");
        if run != "marked_regions" {
            // No integration spoke to the runner: nothing recorded.
            assert_eq!(markers, MarkerResult::new(), "v{version} {run}");
            continue;
        }
        let pid = memtrack::RunResults::read_dir(&data(version, run))
            .unwrap()
            .processes[0]
            .pid;
        // Recorded by protocol version 1, the version of their day.
        assert_eq!(markers.protocol_version, Some(1), "v{version} {run}");
        let integration = markers.integration.as_ref().unwrap();
        assert_eq!(
            (integration.name.as_str(), integration.version.as_str()),
            ("marked_regions", "0.1.0")
        );
        let spans: Vec<(u32, &str)> = markers
            .benchmarks
            .iter()
            .map(|b| (b.pid, b.uri.as_str()))
            .collect();
        assert_eq!(
            spans,
            [
                (pid, "marked_regions::ten"),
                (pid, "marked_regions::hundred"),
                (pid, "marked_regions::thousand")
            ],
            "v{version}"
        );
        // Start and end markers around each region, each inside its benchmark's span.
        assert_eq!(markers.markers.len(), 6, "v{version}");
        for (i, entry) in markers.markers.iter().enumerate() {
            assert_eq!(entry.pid, pid);
            let at = match (i % 2, entry.marker) {
                (0, Marker::BenchmarkStart { timestamp_ns }) => timestamp_ns,
                (1, Marker::BenchmarkEnd { timestamp_ns }) => timestamp_ns,
                other => panic!("v{version} marker {i}: {other:?}"),
            };
            assert_eq!(
                markers.benchmark_at(pid, at),
                Some(spans[i / 2].1),
                "v{version} marker {i}"
            );
        }
        assert_eq!(markers.measurements.len(), 3, "v{version}");
        for window in &markers.measurements {
            assert!(
                window.stop_ns.is_some_and(|stop| stop > window.start_ns),
                "v{version}: {window:?}"
            );
        }
    }
}
