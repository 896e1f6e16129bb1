//! libmemtrack's bad input under the real runner (`memtrack run`), where counts are
//! exact or wrong: several threads calling at once (tests/c/threads.c) and a client in a
//! forked child (tests/c/fork.c). Each call gets its defined answer, nothing hangs, and
//! every region holds exactly its own allocations, in the library's view (the counters
//! its stop returns, checked by the programs) and in memtrack's result files.

mod common;

use std::collections::HashMap;
use std::process::Command;

use common::{Prefix, counter, memtrack_run, report_json};

fn build(prefix: &Prefix, name: &str, work: &std::path::Path) -> std::path::PathBuf {
    let exe = work.join(name);
    prefix.compile(
        "cc",
        &common::repo().join(format!("integrations/memtrack-c/tests/c/{name}.c")),
        &exe,
        &["-std=c11", "-D_GNU_SOURCE", "-fno-builtin"],
        &["memtrack"],
    );
    exe
}

/// (uri, alloc_calls, bytes_allocated, free_calls, bytes_freed, live_bytes,
/// unmatched_frees, lost_events) of each region of process `p`.
fn rows(p: &serde_json::Value) -> Vec<(String, [u64; 7])> {
    p["benchmarks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let s = &b["stats"];
            (
                b["uri"].as_str().unwrap().to_owned(),
                [
                    "alloc_calls",
                    "bytes_allocated",
                    "free_calls",
                    "bytes_freed",
                    "live_bytes",
                    "unmatched_frees",
                    "lost_events",
                ]
                .map(|c| counter(s, c)),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs CAP_BPF and CAP_PERFMON (root): scripts/test.sh runs it"]
fn threads_calling_at_once_are_all_answered_and_counted_exactly() {
    let prefix = Prefix::install();
    let work = tempfile::tempdir().unwrap();
    let exe = build(&prefix, "threads", work.path());
    let results = work.path().join("results");
    let out = memtrack_run(&results, &mut Command::new(&exe));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("ok\n"), "{stdout}");
    // Which thread made which region, as the program saw it.
    let owner: HashMap<u64, u64> = stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            (w.next()? == "region").then_some(())?;
            let region = w.next()?.parse().ok()?;
            w.next()?;
            Some((region, w.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(owner.len(), 4 * 25, "{stdout}");
    // The threads did call at once: starts were refused while another thread measured.
    let refused: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("refused "))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(refused > 0, "{stdout}");
    let report = report_json(&results);
    let process = &report["processes"][0];
    let regions = rows(process);
    assert_eq!(regions.len(), 100);
    let (mut blocks, mut bytes) = (0, 0);
    for (index, (uri, got)) in regions.iter().enumerate() {
        assert_eq!(uri, "threads/region");
        let i = owner[&(index as u64)];
        let (n, size) = (i + 1, 100 * (i + 1));
        assert_eq!(
            *got,
            [n, n * size, n, n * size, 0, 0, 0],
            "region {index} (thread {i})"
        );
        blocks += n;
        bytes += n * size;
    }
    // Nothing else was counted: the process's totals are the regions'.
    let stats = &process["stats"];
    assert_eq!(
        (
            counter(stats, "alloc_calls"),
            counter(stats, "bytes_allocated")
        ),
        (blocks, bytes)
    );
    assert_eq!(blocks, 25 * (1 + 2 + 3 + 4));
}

#[test]
#[ignore = "needs CAP_BPF and CAP_PERFMON (root): scripts/test.sh runs it"]
fn a_forked_child_gets_defined_answers_and_the_counts_stay_exact() {
    let prefix = Prefix::install();
    let work = tempfile::tempdir().unwrap();
    let exe = build(&prefix, "fork", work.path());
    let results = work.path().join("results");
    let out = memtrack_run(&results, &mut Command::new(&exe));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("child ok\n") && stdout.ends_with("parent ok\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "child stop: memtrack_region_stop: no region is open in this process (the open \
             one is process "
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "child start: memtrack's runner refused StartBenchmark: StartBenchmark while a \
             measurement started at "
        ),
        "{stdout}"
    );
    let report = report_json(&results);
    let processes = report["processes"].as_array().unwrap();
    let with_regions: Vec<Vec<(String, [u64; 7])>> = processes
        .iter()
        .map(rows)
        .filter(|r| !r.is_empty())
        .collect();
    assert_eq!(
        with_regions,
        [
            vec![
                ("fork/parent".to_owned(), [3, 1500, 3, 1500, 0, 0, 0]),
                ("fork/parent-after".to_owned(), [2, 444, 2, 444, 0, 0, 0]),
            ],
            vec![("fork/child".to_owned(), [7, 490, 7, 490, 0, 0, 0])],
        ]
    );
}
