//! Benchmark 4: how long the tracker's own operations take.
//!
//! In-process: `Tracker::new` (load the eBPF object, attach to this process), `start`,
//! `stop`, `collect`, `reset`, then either `close()` (detach and wait until the kernel
//! has removed every uprobe: dominated by the kernel's RCU grace periods; measured, not
//! hidden) or a plain drop (returns at once; a background thread does the same work).
//! Trackers end with `close()` so the next `Tracker::new` is not slowed by a
//! predecessor's detaching; a few dropped ones at the end give the drop latency. For
//! spawned commands, the latencies every tracked run of the other benchmarks recorded.

use std::time::Duration;

use crate::{
    BenchResult,
    in_process::{End, TrackerTimings, drive},
    samples::Samples,
    session::Session,
    workload::SpawnPhases,
};

/// One operation's latency over several repetitions, in nanoseconds.
#[derive(Clone, Debug)]
pub struct LatencyRow {
    /// The operation, e.g. "Tracker::new()".
    pub name: String,
    /// Its latencies, ns.
    pub samples_ns: Samples,
}

/// Makes in-process trackers until the session holds `settings.lifecycle_iterations`
/// closed ones (other benchmarks' trackers count too), then a few dropped ones, and
/// returns one row per operation.
pub fn in_process(session: &mut Session) -> BenchResult<Vec<LatencyRow>> {
    let iterations = session.settings.lifecycle_iterations;
    let drops = iterations.div_ceil(5);
    let closed = |s: &Session| {
        s.tracker_timings
            .iter()
            .filter(|t| t.end == End::Close)
            .count()
    };
    while closed(session) < iterations {
        eprintln!(
            "  in-process tracker {}/{iterations}, closed",
            closed(session) + 1
        );
        let ((), timings) = drive(End::Close, |_| Ok(()))?;
        session.tracker_timings.push(timings);
    }
    for i in 0..drops {
        eprintln!("  in-process tracker {}/{drops}, dropped", i + 1);
        let ((), timings) = drive(End::Drop, |_| Ok(()))?;
        session.tracker_timings.push(timings);
    }
    let timings = &session.tracker_timings;
    // A tracker made while a dropped predecessor is still detaching waits for the
    // kernel too: only those made after a close (or first) count for Tracker::new.
    let undisturbed: Vec<&TrackerTimings> = timings
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || timings[i - 1].end == End::Close)
        .map(|(_, t)| t)
        .collect();
    let sites = timings.first().map_or(0, |t| t.sites);
    let row = |name: String, samples: Vec<Duration>| LatencyRow {
        name,
        samples_ns: samples.iter().map(|d| d.as_nanos() as f64).collect(),
    };
    let ended = |end: End| -> Vec<Duration> {
        timings
            .iter()
            .filter(|t| t.end == end)
            .map(|t| t.end_time)
            .collect()
    };
    Ok(vec![
        row(
            "Tracker::new() (load + attach)".into(),
            undisturbed.iter().map(|t| t.new).collect(),
        ),
        row("start()".into(), timings.iter().map(|t| t.start).collect()),
        row("stop()".into(), timings.iter().map(|t| t.stop).collect()),
        row(
            "collect()".into(),
            timings.iter().map(|t| t.collect).collect(),
        ),
        row("reset()".into(), timings.iter().map(|t| t.reset).collect()),
        row(
            format!("close() ({sites} probe sites; waits for the kernel)"),
            ended(End::Close),
        ),
        row(
            "drop (returns at once; the kernel work goes on in the background)".into(),
            ended(End::Drop),
        ),
    ])
}

/// The latencies of every spawned tracker of the session (baseline and measured runs,
/// both placements).
pub fn spawned(session: &Session) -> Vec<LatencyRow> {
    let phases = &session.spawn_phases;
    let row = |name: &str, closed: Option<bool>, f: fn(&SpawnPhases) -> Duration| LatencyRow {
        name: name.to_string(),
        samples_ns: phases
            .iter()
            .filter(|p| closed.is_none_or(|c| p.closed == c))
            .map(|p| f(p).as_nanos() as f64)
            .collect(),
    };
    vec![
        row("spawn() returns (load, fork, ptrace)", None, |p| {
            p.spawn_call
        }),
        row("spawn() called -> command's main() runs", None, |p| {
            p.to_main
        }),
        row("command's result line -> wait() returns", None, |p| {
            p.exit_to_wait
        }),
        row(
            "close() of a spawn tracker (waits for the kernel)",
            Some(true),
            |p| p.end,
        ),
        row(
            "drop of a spawn tracker (returns at once)",
            Some(false),
            |p| p.end,
        ),
    ]
}
