//! pytest-memtrack (integrations/python/pytest-memtrack) on a real suite under
//! `memtrack run -- python -m pytest`: its tests allocate from Python and from C
//! extensions (json, sqlite3), and three break a limit on purpose. Every figure the
//! plugin reports (its `--memtrack-json` file, its failure messages) must equal the
//! region memtrack's result files hold for that test (`memtrack report --json`), and the
//! tests whose allocations are known must show exactly those.
//!
//! It lives with the C ABI's tests because it shares their helpers (the `memtrack`
//! binary, its JSON report); the plugin itself speaks the protocol in Python. The venv
//! (target/pytest-venv: msgpack and pytest from PyPI, the plugin from this checkout) is
//! made by scripts/pytest-venv.sh, idempotently.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use common::{counter, memtrack_run_exit, pytest_venv, regions, report_json};

const COUNTERS: [&str; 10] = [
    "alloc_calls",
    "free_calls",
    "bytes_allocated",
    "bytes_freed",
    "live_blocks",
    "live_bytes",
    "peak_live_bytes",
    "failed_allocs",
    "unmatched_frees",
    "lost_events",
];

fn suite() -> PathBuf {
    common::repo().join("integrations/python/pytest-memtrack/tests/example_suite")
}

fn pytest(python: &std::path::Path, extra: &[&str]) -> Command {
    let mut command = Command::new(python);
    command
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-rA", "--rootdir"])
        .arg(suite())
        .args(extra)
        .arg(suite())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTEST_ADDOPTS");
    command
}

/// `PASSED id` / `FAILED id` lines of pytest's short summary (-rA): id -> passed.
fn outcomes(stdout: &str) -> BTreeMap<String, bool> {
    stdout
        .lines()
        .filter_map(|l| {
            let (word, rest) = l.split_once(' ')?;
            let id = rest.split(" - ").next()?.rsplit("::").next()?.to_owned();
            match word {
                "PASSED" => Some((id, true)),
                "FAILED" => Some((id, false)),
                _ => None,
            }
        })
        .collect()
}

#[test]
#[ignore = "needs CAP_BPF and CAP_PERFMON (root): scripts/test.sh runs it"]
fn each_test_is_a_region_and_its_figures_are_memtracks() {
    let python = pytest_venv();
    let work = tempfile::tempdir().unwrap();
    let results = work.path().join("results");
    let figures_file = work.path().join("figures.json");
    // Some tests fail on purpose: pytest exits 1, and memtrack with it.
    let out = memtrack_run_exit(
        &results,
        &mut pytest(
            &python,
            &[&format!("--memtrack-json={}", figures_file.display())],
        ),
        1,
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("memtrack: each test's call is a memtrack region"),
        "{stdout}"
    );
    let expected_outcomes: BTreeMap<String, bool> = [
        ("test_nothing", true),
        ("test_within_limit_memory", true),
        ("test_breaks_limit_memory", false),
        ("test_json_round_trip", true),
        ("test_sqlite3_in_memory", true),
        ("test_breaks_limit_allocations", false),
        ("test_breaks_limit_leaks", false),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(outcomes(&stdout), expected_outcomes, "{stdout}");

    // memtrack's regions, one per test, in the order pytest ran them.
    let report = report_json(&results);
    let regions = regions(&report);
    let uris: Vec<&str> = regions.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(
        uris,
        [
            "test_memory.py::test_nothing",
            "test_memory.py::test_within_limit_memory",
            "test_memory.py::test_breaks_limit_memory",
            "test_memory.py::test_json_round_trip",
            "test_memory.py::test_sqlite3_in_memory",
            "test_memory.py::test_breaks_limit_allocations",
            "test_memory.py::test_breaks_limit_leaks",
        ]
    );

    // The plugin's figures are memtrack's, counter by counter.
    let figures: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&figures_file).unwrap()).unwrap();
    for (index, (uri, stats)) in regions.iter().enumerate() {
        let mine = &figures[uri];
        assert_eq!(mine["region"].as_u64(), Some(index as u64), "{uri}");
        for name in COUNTERS {
            assert_eq!(
                mine[name].as_u64(),
                Some(counter(stats, name)),
                "{uri}: {name}: plugin {mine} vs memtrack {stats}"
            );
        }
    }

    // The known allocations, exactly: (alloc_calls, bytes_allocated, free_calls,
    // bytes_freed, live_bytes, peak_live_bytes). CPython's bytearray(n) is one malloc of
    // n + 1 bytes; the plugin itself allocates nothing inside a region.
    let stats = |test: &str| {
        let (_, s) = regions
            .iter()
            .find(|(u, _)| u.ends_with(&format!("::{test}")))
            .unwrap();
        (
            counter(s, "alloc_calls"),
            counter(s, "bytes_allocated"),
            counter(s, "free_calls"),
            counter(s, "bytes_freed"),
            counter(s, "live_bytes"),
            counter(s, "peak_live_bytes"),
        )
    };
    let mib = 1024 * 1024;
    assert_eq!(stats("test_nothing"), (0, 0, 0, 0, 0, 0));
    let ten = 10 * mib + 1;
    assert_eq!(stats("test_within_limit_memory"), (1, ten, 1, ten, 0, ten));
    let four = 4 * mib + 1;
    assert_eq!(
        stats("test_breaks_limit_memory"),
        (1, four, 1, four, 0, four)
    );
    assert_eq!(
        stats("test_breaks_limit_allocations"),
        (10, 10_010, 10, 10_010, 0, 10_010)
    );
    assert_eq!(
        stats("test_breaks_limit_leaks"),
        (1, 100_001, 0, 0, 100_001, 100_001)
    );
    // The C extensions' allocations are counted (json builds a string of about 120 kB;
    // libsqlite3 allocates with malloc), and are all released.
    for test in ["test_json_round_trip", "test_sqlite3_in_memory"] {
        let (allocs, bytes, frees, freed, live, peak) = stats(test);
        assert!(allocs > 0 && bytes >= 100_000 && peak > 0, "{test}");
        assert_eq!((frees, freed, live), (allocs, bytes, 0), "{test}");
    }

    // Each failure names the figure (memtrack's, exactly) and the limit.
    for message in [
        "limit_memory('1 MB'): the test's peak memory was 4.0 MiB (4,194,305 B), more than \
         the limit of 1.0 MiB (1,048,576 B)",
        "limit_allocations(5): the test made 10 allocations, more than the limit of 5",
        "limit_leaks('1 KB'): the test leaked 97.7 KiB (100,001 B) (allocated during it and \
         still live at its end), more than the limit of 1.0 KiB (1,024 B)",
    ] {
        assert!(stdout.contains(message), "{message}\n{stdout}");
    }
    assert!(stdout.contains("3 failed, 4 passed"), "{stdout}");
}

/// Outside `memtrack run`: one line says the plugin is inactive, and the markers do
/// nothing, so the tests that break their limits under memtrack pass.
#[test]
fn outside_memtrack_the_plugin_says_once_it_is_inactive() {
    let python = pytest_venv();
    let out = pytest(&python, &[])
        .env_remove("MEMTRACK_FIFO_DIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let line = "memtrack: pytest-memtrack is inactive: not under `memtrack run` (its \
                limit_memory, limit_allocations and limit_leaks markers do nothing)";
    assert_eq!(stdout.matches(line).count(), 1, "{stdout}");
    assert!(stdout.contains("7 passed"), "{stdout}");
}
