//! Every allocator a real program uses (tests/allocators, numbers checked with gdb traces
//! and DHAT there): the same C++ program linked against glibc, jemalloc, mimalloc and
//! tcmalloc; Rust programs with statically linked jemalloc and mimalloc; a dlopen'ed
//! jemalloc; exec of a static binary (directly and through `sh -c exec`); a program with
//! no known allocator. Every total is compared exactly, and for the glibc C++ programs
//! every function too.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use memtrack::{AllocatorStatus, CommandSpec, Tracker};
use memtrack_test_support::diff;

/// Builds every allocator fixture once per test binary (tests/allocators/build.sh).
fn out_dir() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        // Inside the workspace's target directory, so the Rust fixtures (jemalloc and
        // mimalloc build from source) are built once, not on every run.
        let out = memtrack_test_support::repo_dir().join("target/allocator-fixtures");
        let script = memtrack_test_support::repo_dir().join("tests/allocators/build.sh");
        let status = Command::new("bash")
            .arg(&script)
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "{} failed", script.display());
        out
    })
}

fn expected(name: &str) -> serde_json::Value {
    let path = memtrack_test_support::repo_dir().join("tests/allocators/expected.json");
    let all: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    all["fixtures"][name].clone()
}

/// Which expected numbers a fixture's run is compared with.
#[derive(Clone, Copy, PartialEq)]
enum Compare {
    /// The totals only: function names differ where allocators put several names at
    /// one address (tests/allocators/README.md), so per-function counts are checked
    /// there (gdb traces).
    Totals,
    /// The totals and every function's calls, failures, bytes, grows and shrinks:
    /// glibc has one name per address, and libstdc++'s operators are not probed (their
    /// calls are `malloc`/`aligned_alloc`/`free`, as expected.json lists them).
    TotalsAndFunctions,
}

/// The expected numbers of a fixture's main process that `compare` covers.
fn wanted(spec: &serde_json::Value, compare: Compare) -> serde_json::Value {
    let main = &spec["processes"]["main"];
    match compare {
        Compare::Totals => serde_json::json!({ "totals": main["totals"] }),
        Compare::TotalsAndFunctions => {
            assert!(
                main["functions"].as_object().is_some_and(|f| !f.is_empty()),
                "{spec:#?}"
            );
            serde_json::json!({ "totals": main["totals"], "functions": main["functions"] })
        }
    }
}

/// Runs `argv` (from the fixture directory) and compares the root process's final image
/// with `name`'s expected totals, `extra_bytes` added to the path-dependent fields.
fn check(name: &str, argv: &[&str], extra_bytes: u64) {
    check_with(name, argv, extra_bytes, Compare::Totals);
}

/// [`check`], comparing what `compare` says.
fn check_with(name: &str, argv: &[&str], extra_bytes: u64, compare: Compare) {
    let dir = out_dir();
    let mut spec = CommandSpec::new(argv[0]).args(&argv[1..]);
    spec.cwd = Some(dir.to_path_buf());
    // cargo test sets LD_LIBRARY_PATH; a static glibc allocates for it at startup, and
    // the expected numbers are for the plain environment.
    spec.env.push(("LD_LIBRARY_PATH".into(), None));
    if argv[0].starts_with("./") {
        spec.program = dir.join(&argv[0][2..]).into_os_string();
    }
    let tracker = Tracker::builder().spawn(spec).unwrap();
    let status = tracker.wait().unwrap();
    let expected = expected(name);
    assert_eq!(status.code, Some(0), "{name} exit status");
    let processes = tracker.collect_processes().unwrap();
    let root = processes.iter().find(|p| p.pid == tracker.pid()).unwrap();
    assert_eq!(root.allocator, AllocatorStatus::Probed, "{name}");
    let mut want = wanted(&expected, compare);
    for field in ["bytes_allocated", "live_bytes", "peak_live_bytes"] {
        let v = want["totals"][field].as_u64().unwrap();
        want["totals"][field] = (v + extra_bytes).into();
    }
    let d = diff(&root.stats, &want);
    // diff() also reports every function memtrack saw that `want` lacks: with the totals
    // only, keep the totals' lines (function lines are "name.field: ...").
    let d: Vec<&String> = d
        .iter()
        .filter(|l| compare == Compare::TotalsAndFunctions || !l.contains('.'))
        .collect();
    assert!(d.is_empty(), "{name}: {d:#?}\n{:#?}", root.stats);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn cxx_same_program_under_glibc() {
    check_with(
        "cxx_mix_glibc",
        &["./cxx_mix_glibc"],
        0,
        Compare::TotalsAndFunctions,
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn cxx_same_program_under_jemalloc() {
    check("cxx_mix_jemalloc", &["./cxx_mix_jemalloc"], 0);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn cxx_same_program_under_mimalloc() {
    check("cxx_mix_mimalloc", &["./cxx_mix_mimalloc"], 0);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn cxx_same_program_under_tcmalloc() {
    check("cxx_mix_tcmalloc", &["./cxx_mix_tcmalloc"], 0);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn cxx_failing_new_under_glibc_throws_through() {
    check_with(
        "cxx_new_fail_glibc",
        &["./cxx_new_fail_glibc"],
        0,
        Compare::TotalsAndFunctions,
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn cxx_failing_new_under_mimalloc() {
    check("cxx_new_fail_mimalloc", &["./cxx_new_fail_mimalloc"], 0);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn rust_system_allocator() {
    check("system_fixture", &["./system_fixture"], 0);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn rust_static_tikv_jemallocator() {
    check("jemalloc_fixture", &["./jemalloc_fixture"], 0);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn rust_static_mimalloc() {
    check("mimalloc_fixture", &["./mimalloc_fixture"], 0);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn dlopen_jemalloc_is_counted() {
    check("dlopen_jemalloc", &["./dlopen_jemalloc"], 0);
}

/// glibc's static startup allocates its directory name: len(dirname) + 2 bytes.
fn static_term() -> u64 {
    let exe = std::fs::canonicalize(out_dir().join("static_allocs")).unwrap();
    exe.parent().unwrap().as_os_str().len() as u64 + 2
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn static_binary_with_symbols() {
    check("static_allocs", &["./static_allocs"], static_term());
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exec_of_a_static_binary_counts_from_its_first_allocation() {
    check("exec_static", &["./exec_static"], static_term());
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn exec_of_a_dynamic_binary_counts_from_its_first_allocation() {
    check("exec_dynamic", &["./exec_dynamic"], 0);
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn sh_exec_counts_the_program_from_its_first_allocation() {
    check(
        "sh_exec_static",
        &["/bin/sh", "-c", "exec ./static_allocs"],
        static_term(),
    );
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn unknown_allocator_is_reported_not_counted_as_zero() {
    let tracker = Tracker::builder()
        .spawn(CommandSpec::new(out_dir().join("bump")))
        .unwrap();
    assert_eq!(tracker.wait().unwrap().code, Some(0));
    let processes = tracker.collect_processes().unwrap();
    match &processes[0].allocator {
        AllocatorStatus::NotRecognised { reason } => {
            assert!(reason.contains("no known allocator"), "{reason}")
        }
        other => panic!("expected NotRecognised, got {other:?}"),
    }
}
