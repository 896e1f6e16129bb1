//! Shared by the end-to-end tests: the privilege gate, fixture building, expectations.
#![allow(dead_code)]

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

/// True when this process can load eBPF programs (root, or CAP_BPF + CAP_PERFMON).
pub fn privileged() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    caps & (1 << 21) != 0 || (caps & (1 << 38) != 0 && caps & (1 << 39) != 0)
}

/// Gate for tests that need eBPF. Unprivileged, the test says so on the terminal (fd 2,
/// not captured by the test harness) and returns false, or fails when
/// MEMTRACK_REQUIRE_PRIVILEGED=1 (CI sets it: there, skipping would hide a failure).
pub fn require_privileges(test: &str) -> bool {
    if privileged() {
        return true;
    }
    let message = format!(
        "SKIPPED {test}: needs root or CAP_BPF+CAP_PERFMON (run the suite as root: \
         sudo scripts/test.sh)"
    );
    if std::env::var_os("MEMTRACK_REQUIRE_PRIVILEGED").is_some_and(|v| v == "1") {
        panic!("{message}");
    }
    let _ = writeln!(std::io::stderr(), "{message}");
    false
}

/// tests/fixtures in the repository.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("tests/fixtures")
}

/// Compiles every C fixture once per test binary (into a temporary directory) and
/// returns the path of the named one.
pub fn fixture(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let out = std::env::temp_dir().join(format!("memtrack-fixtures-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        for entry in std::fs::read_dir(fixtures_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "c") {
                let bin = out.join(path.file_stem().unwrap());
                let status = Command::new("gcc")
                    .args(["-O0", "-fno-builtin", "-pthread", "-o"])
                    .arg(&bin)
                    .arg(&path)
                    .status()
                    .expect("gcc runs");
                assert!(status.success(), "compiling {} failed", path.display());
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
