//! One in-process tracker driven through its life (`Tracker::new`, `start`, the
//! measured work, `stop`, `collect`, `reset`, then `close()` or a drop), each tracker
//! operation timed alone. Benchmark 4 (lifecycle.rs) reports these timings; benchmark 5
//! (isolation.rs) drives a tracker this way around its unrelated loops.

use std::time::{Duration, Instant};

use memtrack::Tracker;

use crate::BenchResult;

/// How a driven tracker ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// `Tracker::close()`: waits until the kernel has removed the probes.
    Close,
    /// A plain drop: returns at once, detaching continues in the background.
    Drop,
}

/// One in-process tracker's latencies.
#[derive(Clone, Copy, Debug)]
pub struct TrackerTimings {
    /// `Tracker::new()`.
    pub new: Duration,
    /// `start()`.
    pub start: Duration,
    /// `stop()`.
    pub stop: Duration,
    /// `collect()`.
    pub collect: Duration,
    /// `reset()`.
    pub reset: Duration,
    /// How the tracker ended.
    pub end: End,
    /// How long ending it took.
    pub end_time: Duration,
    /// Probe sites the tracker had attached (entry and return probes).
    pub sites: usize,
}

/// Times `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

/// Makes an in-process tracker, starts it, runs `while_counting` (not timed), stops,
/// collects, resets and ends it as `end` says, timing each tracker operation alone.
pub fn drive<T>(
    end: End,
    while_counting: impl FnOnce(&Tracker) -> BenchResult<T>,
) -> BenchResult<(T, TrackerTimings)> {
    let (tracker, new) = timed(Tracker::new);
    let mut tracker = tracker?;
    let sites = tracker
        .probes()?
        .iter()
        .map(|p| 1 + usize::from(p.return_probe))
        .sum();
    let (r, start) = timed(|| tracker.start());
    r?;
    let value = while_counting(&tracker)?;
    let (r, stop) = timed(|| tracker.stop());
    r?;
    let (r, collect) = timed(|| tracker.collect());
    r?;
    let (r, reset) = timed(|| tracker.reset());
    r?;
    let ((), end_time) = match end {
        End::Close => timed(|| tracker.close()),
        End::Drop => timed(|| drop(tracker)),
    };
    let timings = TrackerTimings {
        new,
        start,
        stop,
        collect,
        reset,
        end,
        end_time,
        sites,
    };
    Ok((value, timings))
}
