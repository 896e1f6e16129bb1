//! The C fixtures of tests/fixtures: built once per test binary, their expected numbers,
//! and an exact comparison of every counter.

use std::{path::PathBuf, sync::OnceLock};

use crate::{compile_c, fixtures_dir};

/// Compiles every C fixture once per test binary (into a [`scratch_dir`](crate::scratch_dir),
/// removed when the test binary exits) and returns the path of the named one.
pub fn fixture(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let out = crate::scratch_dir("memtrack-fixtures-");
        for entry in std::fs::read_dir(fixtures_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "c") {
                compile_c(&path, &out, &[]);
            }
        }
        out
    });
    let path = dir.join(name);
    assert!(path.exists(), "no fixture named {name}");
    path
}

/// The parsed tests/fixtures/expected.json.
pub fn expected() -> &'static serde_json::Value {
    static EXPECTED: OnceLock<serde_json::Value> = OnceLock::new();
    EXPECTED.get_or_init(|| {
        let text = std::fs::read_to_string(fixtures_dir().join("expected.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    })
}

/// Spawns the single-process fixture `name` with `builder`, waits for it, and checks its
/// exit status and every counter against tests/fixtures/expected.json (panics on a
/// difference). The caller checks privileges first.
pub fn check_single_fixture(builder: memtrack::TrackerBuilder, name: &str) {
    let tracker = builder
        .spawn(memtrack::CommandSpec::new(fixture(name)))
        .unwrap();
    let status = tracker.wait().unwrap();
    let spec = &expected()["fixtures"][name];
    assert_eq!(
        status.code,
        spec["exit_code"].as_i64().map(|c| c as i32),
        "{name} exit status"
    );
    let processes = tracker.collect_processes().unwrap();
    assert_eq!(processes.len(), 1, "{name}: {processes:#?}");
    let differences = diff(&processes[0].stats, &spec["processes"]["main"]);
    assert!(
        differences.is_empty(),
        "{name}: {differences:#?}\n{:#?}",
        processes[0].stats
    );
}

/// Compares every counter of `stats` with an expectation (`totals` and `functions`)
/// and returns the differences (empty: exact match).
pub fn diff(stats: &memtrack::Stats, expected: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let totals = &expected["totals"];
    let actual = [
        ("alloc_calls", stats.alloc_calls),
        ("free_calls", stats.free_calls),
        ("bytes_allocated", stats.bytes_allocated),
        ("bytes_freed", stats.bytes_freed),
        ("live_blocks", stats.live_blocks),
        ("live_bytes", stats.live_bytes),
        ("peak_live_bytes", stats.peak_live_bytes),
        ("failed_allocs", stats.failed_allocs),
        ("unmatched_frees", stats.unmatched_frees),
        ("lost_events", stats.lost_events),
    ];
    for (name, value) in actual {
        let want = totals.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
        if value != want {
            out.push(format!("{name}: got {value}, expected {want}"));
        }
    }
    let empty = serde_json::Map::new();
    let functions = expected["functions"].as_object().unwrap_or(&empty);
    let mut names: Vec<&String> = functions.keys().collect();
    names.extend(
        stats
            .functions
            .keys()
            .filter(|k| !functions.contains_key(*k)),
    );
    for name in names {
        let got = stats.functions.get(name).cloned().unwrap_or_default();
        let want = functions
            .get(name)
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        for (field, value) in [
            ("calls", got.calls),
            ("failures", got.failures),
            ("bytes", got.bytes),
            ("grows", got.grows),
            ("shrinks", got.shrinks),
        ] {
            let expect = want.get(field).and_then(|v| v.as_u64()).unwrap_or(0);
            if value != expect {
                out.push(format!("{name}.{field}: got {value}, expected {expect}"));
            }
        }
    }
    out
}
