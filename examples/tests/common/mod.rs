//! Shared by the example suites: reading output, the numbers compared, running an
//! example under the runner with its output captured.
#![allow(dead_code)]

use std::os::fd::AsRawFd;

use memtrack::CommandSpec;
use memtrack_cli::runner::{RunOptions, RunOutcome};

/// What an integration says on stderr when it counts in-process.
pub const IN_PROCESS_LINE: &str = "memtrack: not under `memtrack run`: counting one iteration \
     of each benchmark in-process with eBPF (whole process); probes are attached for that \
     iteration only, so timings are not affected";

/// What an integration says on stderr when it runs under `memtrack run`.
pub const RUNNER_LINE: &str = "memtrack: under `memtrack run`: memory only, timings skipped \
     (the runner's probes would slow every timed iteration); the runner counts one iteration \
     of each benchmark and reports it";

/// What an integration says on stderr when it can neither reach a runner nor count
/// in-process (no privileges).
pub const DISABLED_LINE: &str = "memtrack: not under `memtrack run` and no \
     CAP_BPF/CAP_PERFMON: allocation counts disabled, timing only";

/// The stdout and stderr of an example run without privileges, after checking that it
/// succeeded and that memtrack's only words were [`DISABLED_LINE`].
pub fn ran_with_counts_disabled(output: &std::process::Output) -> (String, String) {
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(memtrack_lines(&stderr), vec![DISABLED_LINE], "{stderr}");
    (stdout, stderr)
}

/// Lossy UTF-8 of a program's output.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines of `stderr` that memtrack wrote.
pub fn memtrack_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("memtrack"))
        .collect()
}

/// (alloc_calls, bytes_allocated, free_calls, bytes_freed, live_blocks, live_bytes,
/// peak_live_bytes, failed + unmatched + lost)
pub type Numbers = (u64, u64, u64, u64, u64, u64, u64, u64);

/// The [`Numbers`] of some counters.
pub fn numbers(s: &memtrack::Stats) -> Numbers {
    (
        s.alloc_calls,
        s.bytes_allocated,
        s.free_calls,
        s.bytes_freed,
        s.live_blocks,
        s.live_bytes,
        s.peak_live_bytes,
        s.failed_allocs + s.unmatched_frees + s.lost_events,
    )
}

/// Every counter of `s` but the time of its peak (a timestamp): what two runs of the
/// same benchmark must agree on exactly, per function, size bucket and syscall included.
pub fn timeless(s: &memtrack::Stats) -> memtrack::Stats {
    let mut s = s.clone();
    s.peak_time_ns = 0;
    s
}

/// (uri, [`timeless`] stats) of each benchmark, sorted by uri.
pub type ByUri = Vec<(String, memtrack::Stats)>;

/// The [`ByUri`] of `benchmarks`.
pub fn by_uri<'a>(benchmarks: impl IntoIterator<Item = &'a memtrack::BenchmarkStats>) -> ByUri {
    let mut all: Vec<_> = benchmarks
        .into_iter()
        .map(|b| (b.uri.clone(), timeless(&b.stats)))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// Whether `text` shows a time measurement: a number followed by a time unit.
pub fn shows_timings(text: &str) -> bool {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| w[0].parse::<f64>().is_ok() && ["ns", "µs", "us", "ms", "s"].contains(&w[1]))
}

/// What a run under the runner produced.
pub struct Captured {
    /// The runner's outcome.
    pub outcome: RunOutcome,
    /// The command's stdout.
    pub stdout: String,
    /// The command's stderr.
    pub stderr: String,
    /// Holds the result files (`results/`) and anything the caller put there.
    pub dir: tempfile::TempDir,
}

/// Runs `spec` under `memtrack_cli::runner::run` (what `memtrack run` does) with its stdout
/// and stderr captured, result files in `dir/results`. `prepare` may adjust the spec
/// with the directory (e.g. to point the harness's output there).
pub fn run_under_runner(
    prepare: impl FnOnce(CommandSpec, &std::path::Path) -> CommandSpec,
    spec: CommandSpec,
) -> Captured {
    let dir = tempfile::tempdir().unwrap();
    let stdout = std::fs::File::create(dir.path().join("stdout")).unwrap();
    let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
    let spec = prepare(spec, dir.path())
        .fd(1, stdout.as_raw_fd())
        .fd(2, stderr.as_raw_fd());
    let options = RunOptions {
        output: Some(dir.path().join("results")),
        ..Default::default()
    };
    let outcome = memtrack_cli::runner::run(spec, &options).unwrap();
    Captured {
        outcome,
        stdout: std::fs::read_to_string(dir.path().join("stdout")).unwrap(),
        stderr: std::fs::read_to_string(dir.path().join("stderr")).unwrap(),
        dir,
    }
}

/// Checks the timeline a benchmark kept of the iteration it counted: there, valid, its
/// highest bucket the benchmark's peak, its end the bytes live at the region's end, and
/// the region's start and end among its events, in that order.
pub fn check_benchmark_timeline(bench: &memtrack::BenchmarkStats) {
    use memtrack::timeline::EventKind;
    let uri = &bench.uri;
    let t = bench
        .timeline
        .as_ref()
        .unwrap_or_else(|| panic!("{uri}: no timeline"));
    t.validate(bench.stats.peak_live_bytes)
        .unwrap_or_else(|e| panic!("{uri}: {e}"));
    assert_eq!(t.max_bytes(), bench.stats.peak_live_bytes, "{uri}: {t:#?}");
    assert_eq!(t.end_bytes(), bench.stats.live_bytes, "{uri}: {t:#?}");
    assert_eq!(t.lost_buckets, 0, "{uri}");
    let at = |start: bool| {
        t.events.iter().position(|e| match &e.what {
            EventKind::RegionStart { uri: u } => start && u == uri,
            EventKind::RegionEnd { uri: u, .. } => !start && u == uri,
            _ => false,
        })
    };
    let (start, end) = (at(true), at(false));
    assert!(
        start.is_some() && end.is_some() && start < end,
        "{uri}: region events {:#?}",
        t.events
    );
}
