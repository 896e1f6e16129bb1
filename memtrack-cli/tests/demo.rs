//! The demo of the README's first command (`scripts/demo.sh`): examples/demo/workload.c
//! under `memtrack run` counts exactly what the workload's header says, for the parent
//! and for the child it forks, in the JSON report and in the human report.

use std::process::Command;

use memtrack_test_support::{compile_c, repo_dir};
use serde_json::Value;

/// The counters of one process of the JSON report that the workload's header states,
/// by name, and the functions' calls and bytes.
fn check(process: &Value, who: &str, counters: &[(&str, u64)], functions: &[(&str, u64, u64)]) {
    let stats = &process["stats"];
    for &(name, want) in counters {
        assert_eq!(stats[name].as_u64(), Some(want), "{who}: {name}");
    }
    let listed = stats["functions"]
        .as_object()
        .unwrap_or_else(|| panic!("{who}: no functions in {stats}"));
    assert_eq!(listed.len(), functions.len(), "{who}: functions {listed:?}");
    for &(function, calls, bytes) in functions {
        let f = &stats["functions"][function];
        assert_eq!(f["calls"].as_u64(), Some(calls), "{who}: {function} calls");
        assert_eq!(f["bytes"].as_u64(), Some(bytes), "{who}: {function} bytes");
        assert_eq!(
            f["failures"].as_u64(),
            Some(0),
            "{who}: {function} failures"
        );
    }
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn the_demo_workload_counts_what_its_header_says() {
    let dir = tempfile::tempdir().unwrap();
    let workload = compile_c(
        &repo_dir().join("examples/demo/workload.c"),
        dir.path(),
        &[],
    );
    let json = dir.path().join("run.json");
    let out = Command::new(env!("CARGO_BIN_EXE_memtrack"))
        .arg("run")
        .arg("-o")
        .arg(dir.path().join("results"))
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg(&workload)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "memtrack run failed: {report}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "child: 10 x 64 KiB allocated, 5 freed\n\
         parent: 100 x 1000 B allocated, one grown to 4000 B, 90 freed, 10 left live\n"
    );

    let run: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let processes = run["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 2, "{run}");
    let parent = processes
        .iter()
        .find(|p| processes.iter().any(|q| q["ppid"] == p["pid"]))
        .expect("the process that forked the other");
    let child = processes
        .iter()
        .find(|p| p["ppid"] == parent["pid"])
        .expect("the child the parent forked");
    let exact = |counters: &[(&'static str, u64)]| {
        let mut all = vec![
            ("failed_allocs", 0),
            ("unmatched_frees", 0),
            ("lost_events", 0),
        ];
        all.extend_from_slice(counters);
        all
    };
    // 100 x malloc(1000), 50 freed, one realloc'd from 1,000 to 4,000 bytes (a release
    // and a new block), then 40 more freed: 10 live; the peak before the first frees.
    check(
        parent,
        "parent",
        &exact(&[
            ("alloc_calls", 101),
            ("bytes_allocated", 104_000),
            ("free_calls", 91),
            ("bytes_freed", 94_000),
            ("live_blocks", 10),
            ("live_bytes", 10_000),
            ("peak_live_bytes", 100_000),
        ]),
        &[
            ("malloc", 100, 100_000),
            ("realloc", 1, 4_000),
            ("free", 90, 93_000),
        ],
    );
    assert_eq!(parent["stats"]["functions"]["realloc"]["grows"], 1);
    // 10 x calloc(64, 1024), 5 freed; the blocks the parent had are not the child's.
    check(
        child,
        "child",
        &exact(&[
            ("alloc_calls", 10),
            ("bytes_allocated", 655_360),
            ("free_calls", 5),
            ("bytes_freed", 327_680),
            ("live_blocks", 5),
            ("live_bytes", 327_680),
            ("peak_live_bytes", 655_360),
        ]),
        &[("calloc", 10, 655_360), ("free", 5, 327_680)],
    );

    // The human report says the same, as the README shows it.
    for line in [
        "  allocations     101 blocks, 101.6 KiB (104,000 B)",
        "  frees           91 blocks, 91.8 KiB (94,000 B)",
        "  live at end     10 blocks, 9.8 KiB (10,000 B)",
        "  peak live       97.7 KiB (100,000 B)",
        "  calls           free 90, malloc 100, realloc 1",
        "  allocations     10 blocks, 640 KiB (655,360 B)",
        "  frees           5 blocks, 320 KiB (327,680 B)",
        "  live at end     5 blocks, 320 KiB (327,680 B)",
        "  peak live       640 KiB (655,360 B)",
        "  calls           calloc 10, free 5",
    ] {
        assert!(
            report.lines().any(|l| l == line),
            "no line {line:?} in the report:\n{report}"
        );
    }
}
