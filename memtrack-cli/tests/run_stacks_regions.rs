//! `memtrack run --stacks` of a command that marks benchmark regions
//! (tests/programs/scaled_regions.c: three regions with exactly known allocations, one
//! call site each): the stacks file lists every region with its own per-stack counters,
//! each equal to that region's counters in the result file, and the process scope is
//! their sum, equal to the process's counters (the sum of its regions), its at-peak
//! counters those of the region with the highest peak (the latest of equal ones). `memtrack report --stacks
//! --benchmark URI` and the DHAT export show one region.

use std::process::Command;

use memtrack::{
    MemtrackResult,
    stacks::{ProcessStacks, ScopeStacks, stacks_file_name},
};
use memtrack_test_support::{compile_c, dhat_function_names, repo_dir, stack_flows, stats_flows};
use serde_json::Value;

fn memtrack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memtrack"))
}

/// The one stack of a scope that has exactly one, with its counters.
fn only_stack(stacks: &ProcessStacks, scope: &ScopeStacks) -> (u32, [u64; 8]) {
    assert_eq!(scope.entries.len(), 1, "{scope:#?}");
    assert!(scope.lost.is_zero(), "{scope:#?}");
    let entry = &scope.entries[0];
    assert!((entry.stack as usize) < stacks.stacks.len());
    (entry.stack, stack_flows(&entry.counts))
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn stacks_per_benchmark_region_equal_each_region_and_add_up_to_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_c(
        &repo_dir().join("tests/programs/scaled_regions.c"),
        dir.path(),
        &["-g"],
    );
    let results = dir.path().join("results");
    let out = memtrack()
        .args(["run", "--stacks", "-o"])
        .arg(&results)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "memtrack run failed: {stderr}");
    let read = MemtrackResult::read_dir(&results).unwrap();
    assert_eq!(read.len(), 1);
    let result = &read[0].process;
    let pid = result.pid;
    assert!(
        stderr.contains(&format!("memtrack: stacks of process {pid}: 3 stacks")),
        "{stderr}"
    );
    let stacks = ProcessStacks::read_from(&results.join(stacks_file_name(pid))).unwrap();
    stacks.validate().unwrap();
    assert_eq!(stacks.stacks.len(), 3);

    // Each region: one call site, its counters exactly the program's and the result's.
    let uris: Vec<&str> = stacks.regions.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, ["scaled::fixed", "scaled::grown", "scaled::kept"]);
    let expected: [[u64; 8]; 3] = [
        [100, 10_000, 100, 10_000, 0, 0, 100, 10_000],
        [100, 10_000, 100, 10_000, 0, 0, 100, 10_000],
        [10, 640, 0, 0, 10, 640, 10, 640],
    ];
    let mut ids = Vec::new();
    for ((region, bench), want) in stacks.regions.iter().zip(&result.benchmarks).zip(expected) {
        assert_eq!(region.uri, bench.uri);
        let (id, got) = only_stack(&stacks, &region.counters);
        assert_eq!(got, want, "{}", region.uri);
        assert_eq!(
            stack_flows(&region.counters.total()),
            stats_flows(&bench.stats, want[6]),
            "{}",
            region.uri
        );
        let c = &region.counters;
        assert!(c.start_ns < c.end_ns, "{c:#?}");
        assert!(c.peak_ns.is_some_and(|t| c.start_ns <= t && t <= c.end_ns));
        ids.push(id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each region allocates from its own call site");
    let regions: Vec<&ScopeStacks> = stacks.regions.iter().map(|r| &r.counters).collect();
    assert!(regions[0].end_ns <= regions[1].start_ns && regions[1].end_ns <= regions[2].start_ns);

    // The process: the sum of its regions, at peak the latest of the two equal peaks
    // (as within one scope, and as valgrind DHAT's t-gmax).
    let process = &stacks.process;
    assert_eq!(process.entries.len(), 3);
    let total = process.total();
    assert_eq!(
        stack_flows(&total),
        [210, 20_640, 200, 20_000, 10, 640, 100, 10_000]
    );
    assert_eq!(stack_flows(&total), stats_flows(&result.stats, 100));
    assert_eq!(process.peak_ns, regions[1].peak_ns);
    assert_eq!(Some(result.stats.peak_time_ns), regions[1].peak_ns);
    for entry in &process.entries {
        let region = stacks
            .regions
            .iter()
            .position(|r| r.counters.entries[0].stack == entry.stack)
            .unwrap();
        let mut want = expected[region];
        if region != 1 {
            want[6] = 0;
            want[7] = 0;
        }
        assert_eq!(
            stack_flows(&entry.counts),
            want,
            "the stack of region {region}"
        );
        assert_eq!(
            entry.counts.max_live_bytes,
            [10_000, 10_000, 640][region],
            "max live of the stack of region {region}"
        );
    }
    assert_eq!(process.start_ns, result.started_ns);
    assert_eq!(Some(process.end_ns), result.ended_ns);

    // One region through the report and the DHAT export: its call site, its numbers.
    let dhat = dir.path().join("grown.dhat.json");
    let out = memtrack()
        .args(["report", "--stacks", "--benchmark", "scaled::grown"])
        .arg(&results)
        .arg("--dhat")
        .arg(&dhat)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        report.contains("allocated 9.8 KiB (10,000 B) in 100 blocks"),
        "{report}"
    );
    assert!(
        report.contains("the stacks add up exactly to the counters"),
        "{report}"
    );
    let file: Value = serde_json::from_slice(&std::fs::read(&dhat).unwrap()).unwrap();
    let pps = file["pps"].as_array().unwrap();
    assert_eq!(pps.len(), 1, "{file}");
    let names = dhat_function_names(&file, &pps[0]);
    assert_eq!(names[..3], ["allocate", "region", "main"], "{names:?}");
    let n = |k: &str| pps[0][k].as_u64().unwrap();
    assert_eq!(
        [n("tb"), n("tbk"), n("gb"), n("gbk"), n("eb"), n("ebk")],
        [10_000, 100, 10_000, 100, 0, 0]
    );
}
