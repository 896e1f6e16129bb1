//! Google Benchmark under `memtrack run` with memtrack/benchmark.h: the example
//! (examples/google_benchmark.cpp, benchmarks with known allocations) compiled against
//! Debian's libbenchmark-dev and the installed C ABI. Google Benchmark's own JSON output
//! must carry exactly the known figures, and memtrack's results one region per
//! benchmark, named after it, with the same counters.

mod common;

use std::process::Command;

use common::{Prefix, counter, memtrack_run, regions, report_json};

/// One benchmark's memory fields in Google Benchmark's JSON output.
#[derive(Debug, PartialEq)]
struct Figures {
    iterations: u64,
    num_allocs: u64,
    max_bytes_used: u64,
    total_allocated_bytes: u64,
    net_heap_growth: u64,
}

#[test]
#[ignore = "needs CAP_BPF and CAP_PERFMON (root): scripts/test.sh runs it"]
fn google_benchmark_json_holds_memtracks_exact_figures() {
    let prefix = Prefix::install();
    let work = tempfile::tempdir().unwrap();
    let bench = work.path().join("gbench");
    prefix.compile(
        "c++",
        &common::repo().join("integrations/memtrack-c/examples/google_benchmark.cpp"),
        &bench,
        &["-std=c++17"],
        &["memtrack-static", "benchmark"],
    );
    let results = work.path().join("results");
    let json = work.path().join("gbench.json");
    let out = memtrack_run(
        &results,
        Command::new(&bench).args([
            "--benchmark_min_time=0.01",
            &format!("--benchmark_out={}", json.display()),
            "--benchmark_out_format=json",
        ]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "memtrack: under `memtrack run`: each benchmark's memory run is a memtrack region"
        ),
        "{stderr}"
    );

    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let figures: Vec<(String, Figures)> = doc["benchmarks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let int = |k: &str| b[k].as_u64().unwrap_or_else(|| panic!("{k} in {b}"));
            let iterations = int("iterations").min(16);
            let allocs_per_iter = b["allocs_per_iter"].as_f64().unwrap();
            let num_allocs = (allocs_per_iter * iterations as f64).round() as u64;
            assert_eq!(
                allocs_per_iter,
                num_allocs as f64 / iterations as f64,
                "allocs_per_iter of {b}"
            );
            (
                b["name"].as_str().unwrap().to_owned(),
                Figures {
                    iterations,
                    num_allocs,
                    max_bytes_used: int("max_bytes_used"),
                    total_allocated_bytes: int("total_allocated_bytes"),
                    net_heap_growth: int("net_heap_growth"),
                },
            )
        })
        .collect();
    let names: Vec<&str> = figures.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "BM_empty",
            "BM_malloc_free_1000",
            "BM_leak_100/iterations:4",
            "BM_vector_reserve/64/iterations:3"
        ]
    );

    // Google Benchmark's own allocation in its memory run: BM_empty allocates nothing of
    // its own, so all of it is Google Benchmark's: one block (its thread manager),
    // freed by the end of the run.
    let empty = &figures[0].1;
    let overhead = empty.total_allocated_bytes;
    assert_eq!(
        (
            empty.num_allocs,
            empty.max_bytes_used,
            empty.net_heap_growth
        ),
        (1, overhead, 0),
        "{empty:?}"
    );
    assert!(overhead > 0);
    // The others: the known allocations of their iterations on top. Without a fixed
    // iteration count the memory run does 16 iterations.
    let expected = [
        Figures {
            iterations: 16,
            num_allocs: 1 + 16,
            max_bytes_used: overhead + 1000,
            total_allocated_bytes: overhead + 16 * 1000,
            net_heap_growth: 0,
        },
        Figures {
            iterations: 4,
            num_allocs: 1 + 4,
            max_bytes_used: overhead + 4 * 100,
            total_allocated_bytes: overhead + 4 * 100,
            net_heap_growth: 4 * 100,
        },
        // The State's copy of the arguments (one int64_t, 8 bytes) lives through the run.
        Figures {
            iterations: 3,
            num_allocs: 1 + 1 + 3,
            max_bytes_used: overhead + 8 + 64 * 4,
            total_allocated_bytes: overhead + 8 + 3 * 64 * 4,
            net_heap_growth: 0,
        },
    ];
    for ((name, got), want) in figures[1..].iter().zip(&expected) {
        assert_eq!(got, want, "{name}");
    }

    // memtrack's results: one region per benchmark, renamed after it, with the counters
    // Google Benchmark printed.
    let report = report_json(&results);
    let regions = regions(&report);
    let uris: Vec<&str> = regions.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(uris, names);
    for ((uri, stats), (_, f)) in regions.iter().zip(&figures) {
        assert_eq!(
            (
                counter(stats, "alloc_calls"),
                counter(stats, "peak_live_bytes"),
                counter(stats, "bytes_allocated"),
                counter(stats, "live_bytes"),
                counter(stats, "lost_events"),
                counter(stats, "unmatched_frees"),
            ),
            (
                f.num_allocs,
                f.max_bytes_used,
                f.total_allocated_bytes,
                f.net_heap_growth,
                0,
                0
            ),
            "{uri}: {stats}"
        );
    }
    // With --stacks, the regions' stacks are renamed with them.
    let stacked = work.path().join("stacked");
    let out = std::process::Command::new(common::memtrack())
        .args(["run", "--stacks", "-o"])
        .arg(&stacked)
        .arg("--")
        .arg(&bench)
        .args([
            "--benchmark_min_time=0.01",
            "--benchmark_filter=BM_leak|BM_vector",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = std::process::Command::new(common::memtrack())
        .args(["report", "--stacks"])
        .arg(&stacked)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(
            "benchmark regions (--benchmark URI shows one): BM_leak_100/iterations:4, \
             BM_vector_reserve/64/iterations:3"
        ),
        "{shown}"
    );
    assert!(!shown.contains("google-benchmark run"), "{shown}");

    // And the process's totals are the sum of the regions: nothing else was counted.
    let process = &report["processes"][0]["stats"];
    let total: u64 = figures.iter().map(|(_, f)| f.num_allocs).sum();
    assert_eq!(counter(process, "alloc_calls"), total);
}

/// Outside `memtrack run` the example runs as plain Google Benchmark: no memory fields
/// in its JSON, and nothing said about memtrack.
#[test]
fn outside_memtrack_google_benchmark_runs_unchanged() {
    let prefix = Prefix::install();
    let work = tempfile::tempdir().unwrap();
    let bench = work.path().join("gbench");
    prefix.compile(
        "c++",
        &common::repo().join("integrations/memtrack-c/examples/google_benchmark.cpp"),
        &bench,
        &["-std=c++17"],
        &["memtrack", "benchmark"],
    );
    let out = Command::new(&bench)
        .args([
            "--benchmark_min_time=0.001",
            "--benchmark_format=json",
            "--benchmark_filter=BM_empty",
        ])
        .env_remove("MEMTRACK_FIFO_DIR")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .matches("memtrack")
            .count(),
        0
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bench = &doc["benchmarks"][0];
    assert_eq!(bench["name"], "BM_empty");
    for field in ["allocs_per_iter", "max_bytes_used", "total_allocated_bytes"] {
        assert!(bench.get(field).is_none(), "{field} in {bench}");
    }
}
