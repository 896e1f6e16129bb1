//! The follower's registry of the processes it tracks: each one's record (identity,
//! lifetime, probes) and the counters captured when it exited, and what it reads of a
//! process from `/proc`.

use std::{collections::BTreeMap, path::Path};

use memtrack_common::PidStats;

use crate::{
    Stats, TrackedProcess,
    record::timeline::{EventKind, Timeline, TimelineEvent},
};

/// The follower's record of a process: what will be reported, and the counters
/// captured when it exited (its map entries are then released).
#[derive(Clone, Debug)]
pub(crate) struct ProcessRecord {
    /// Identity, lifetime, probes (its `stats` stay empty here).
    pub process: TrackedProcess,
    /// Counters captured when it exited.
    pub final_stats: Option<PidStats>,
    /// Its timeline captured when it exited (None: still running, or timelines off).
    pub final_timeline: Option<Timeline>,
    /// What happened to its current image that its timeline shows (children started;
    /// the exec that began it), in time order.
    pub events: Vec<TimelineEvent>,
}

impl ProcessRecord {
    /// The record of `pid` (child of `ppid`), tracked since `started_ns`
    /// (`CLOCK_MONOTONIC`; the origin of its slot's timeline, so the kernel's bucket
    /// times and the record's agree), or since now.
    pub(crate) fn new(pid: u32, ppid: u32, started_ns: Option<u64>) -> Self {
        let mut process = TrackedProcess::new(pid, ppid, read_cmdline(pid));
        process.started_ns = started_ns.unwrap_or_else(monotonic_ns);
        process.started_unix_ms = unix_ms();
        ProcessRecord {
            process,
            final_stats: None,
            final_timeline: None,
            events: Vec::new(),
        }
    }

    /// The process with these counters and, if it has one, this timeline (with the
    /// process's events added).
    pub(crate) fn report(&self, stats: Stats, timeline: Option<Timeline>) -> TrackedProcess {
        let mut process = self.process.clone();
        process.stats = stats;
        process.timeline = timeline.map(|mut t| {
            for event in &self.events {
                t.add_event(event.clone());
            }
            t
        });
        process
    }

    /// `what` happened now, to the current image.
    pub(crate) fn note(&mut self, what: EventKind) {
        self.events.push(TimelineEvent {
            t_ns: monotonic_ns().saturating_sub(self.process.started_ns),
            what,
        });
    }
}

/// Processes by pid.
pub(crate) type Registry = BTreeMap<u32, ProcessRecord>;

/// `/proc/PID/cmdline` as strings (empty if unreadable).
pub(crate) fn read_cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            bytes
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// (Tgid, PPid) of a task from `/proc/TID/status`.
pub(crate) fn tgid_and_ppid(tid: u32) -> Option<(u32, u32)> {
    let status =
        std::fs::read_to_string(Path::new("/proc").join(tid.to_string()).join("status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    Some((field("Tgid:")?, field("PPid:")?))
}

/// Now, in `CLOCK_MONOTONIC` ns (the clock of `bpf_ktime_get_ns` and of markers).
pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available on Linux");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
