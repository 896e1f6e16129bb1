//! The integrations time with nothing attached: every benchmark routine of the
//! `probe_watch_*` examples looks for memtrack's breakpoints in the allocator on each
//! call (memtrack_examples::probe_watch), and prints how many of its calls ran with one.
//!
//! - in-process, divan and criterion: exactly one call per benchmark is probed (the
//!   counted iteration), of every call the harness made (divan: 3 samples of 10 = 30
//!   timed, plus memtrack's warm-up and counted iteration; criterion decides its own
//!   count). A tracker left attached while the harness times would show them all probed;
//!   this is what "timings untouched" rests on, and why no test compares timings
//!   (BENCHMARKS.md has them, measured by examples/one-line/compare.py). Another
//!   tracer's breakpoints in the allocator show every call probed too: the integrations
//!   name them, and the tests then fail with that cause, not memtrack's;
//! - under the runner, whose probes stay on the whole process: every call probed (3:
//!   memtrack's warm-up and counted iteration, divan's one test-mode call), which also
//!   shows that the watch sees probes, and divan timed nothing.

use std::process::Command;

use memtrack::CommandSpec;

mod common;
use common::{Captured, run_under_runner, shows_timings, text};

const DIVAN: &str = env!("CARGO_BIN_EXE_probe_watch_divan");
const CRITERION: &str = env!("CARGO_BIN_EXE_probe_watch_criterion");
/// 3 samples of 10 iterations: 30 timed calls per benchmark, exactly.
const DIVAN_ARGS: [&str; 5] = ["--bench", "--sample-count", "3", "--sample-size", "10"];
const CRITERION_ARGS: [&str; 7] = [
    "--bench",
    "--warm-up-time",
    "0.1",
    "--measurement-time",
    "0.2",
    "--sample-size",
    "10",
];

/// (name, probed calls, calls) from the `NAME: probed P of C calls` lines of `stdout`.
fn watched(stdout: &str) -> Vec<(String, u64, u64)> {
    stdout
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(": probed ")?;
            let (probed, rest) = rest.split_once(" of ")?;
            let calls = rest.strip_suffix(" calls")?;
            Some((
                name.to_string(),
                probed.parse().unwrap_or_else(|e| panic!("{line:?}: {e}")),
                calls.parse().unwrap_or_else(|e| panic!("{line:?}: {e}")),
            ))
        })
        .collect()
}

/// Another tracer's breakpoints in the allocator (another memory profiler probing
/// every process, a debugger) make every call probed, as a probe memtrack left would:
/// the integrations say so on stderr (`timings not honest`, foreign_breakpoints.rs
/// checks it), and then this test cannot tell, and says why instead of blaming memtrack.
fn not_memtracks(stderr: &str) -> Option<&str> {
    stderr.lines().find(|l| {
        l.starts_with("memtrack ") && l.contains(": timings not honest: the allocator holds")
    })
}

/// Fails with the cause when `probed` is not what a harness timing with memtrack's
/// probes removed gives: another tracer's breakpoints (named by the integration), or
/// a probe of memtrack's left attached.
fn check_probed(name: &str, probed: u64, calls: u64, expected: u64, stdout: &str, stderr: &str) {
    if probed == expected {
        return;
    }
    match not_memtracks(stderr) {
        Some(warning) => panic!(
            "{name}: {probed} of {calls} calls probed, but not by memtrack: another tracer \
             holds breakpoints in the allocator (this test cannot check memtrack while it \
             runs; stop it and rerun):\n{warning}"
        ),
        None => panic!(
            "{name}: {probed} of {calls} calls probed (expected {expected}: memtrack's \
             probes left attached while the harness timed?):\n{stdout}\n{stderr}"
        ),
    }
}

/// Runs `bin` with `args` outside any runner, its output in a temporary directory; its
/// stdout and stderr, after checking that it succeeded.
fn run_in_process(bin: &str, args: &[&str]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(bin)
        .args(args)
        .env("CRITERION_HOME", dir.path().join("criterion"))
        .env("MEMTRACK_OUTPUT_DIR", dir.path().join("memtrack"))
        .env_remove("MEMTRACK_FIFO_DIR")
        .output()
        .unwrap_or_else(|e| panic!("run {bin}: {e}"));
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "{bin}: {}\n{stdout}\n{stderr}",
        output.status
    );
    (stdout, stderr)
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn divan_times_every_iteration_with_no_probe_attached() {
    let (stdout, stderr) = run_in_process(DIVAN, &DIVAN_ARGS);
    assert!(shows_timings(&stdout), "{stdout}");
    let got = watched(&stdout);
    for (name, probed, calls) in &got {
        check_probed(name, *probed, *calls, 1, &stdout, &stderr);
    }
    let expected =
        [("three_blocks", 1, 32), ("thread_4k", 1, 32)].map(|(n, p, c)| (n.to_string(), p, c));
    assert_eq!(got, expected, "{stdout}");
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn criterion_times_every_iteration_with_no_probe_attached() {
    let (stdout, stderr) = run_in_process(CRITERION, &CRITERION_ARGS);
    let got = watched(&stdout);
    let names: Vec<&str> = got.iter().map(|(name, _, _)| name.as_str()).collect();
    assert_eq!(names, ["three_blocks", "thread_4k"], "{stdout}");
    for (name, probed, calls) in &got {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")) && l.contains("time:"))
            .unwrap_or_else(|| panic!("criterion did not time {name}:\n{stdout}"));
        assert!(shows_timings(line), "{line}");
        // criterion picks its iteration counts from the time they take; at least ten
        // samples of one iteration each, beside memtrack's warm-up and counted ones.
        check_probed(name, *probed, *calls, 1, &stdout, &stderr);
        assert!(*calls >= 12, "{name}: {calls} calls:\n{stdout}");
    }
}

#[test]
#[ignore = "needs root (eBPF): cargo test -- --include-ignored as root, as scripts/test.sh does"]
fn under_the_runner_every_call_is_probed_and_none_timed() {
    let Captured {
        outcome, stdout, ..
    } = run_under_runner(|spec, _| spec, CommandSpec::new(DIVAN).args(DIVAN_ARGS));
    assert_eq!(outcome.exit.code, Some(0), "{stdout}");
    assert!(!shows_timings(&stdout), "{stdout}");
    let expected =
        [("three_blocks", 3, 3), ("thread_4k", 3, 3)].map(|(n, p, c)| (n.to_string(), p, c));
    assert_eq!(watched(&stdout), expected, "{stdout}");
}
